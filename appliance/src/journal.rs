//! The node-event journal: what happened to which node, published by every service.
//!
//! The events ([`EventKind`]): DHCP acks, a node's fetches and install news (announced from
//! `install_state`'s transitions, [`Journal::announce`]), refusals, backend health, drains, plan
//! loads, machine actions, phase changes and more. A bounded history (`HISTORY`, kept on disk
//! by [`kept`]) plus a broadcast channel. Signals between services
//! ([`EventKind::is_signal`]: the install state recorded, for a pair's replication) only go to
//! the live subscribers.
//!
//! Refusals are limited per source address (`EventKind::refused_source`: refused and failed
//! fetches, unavailable ignition, unknown DHCP clients): a token bucket per address, what was
//! left out counted in the next line, so a flood can't push real events out or make subscribers
//! lag; the events that move an install are never limited
//! (`a_flood_of_refusals_from_one_address_does_not_fill_the_journal`).
//!
//! Architecture invariant: the journal records and fans out; it never acts on an event. Readers
//! (status, the control module) subscribe or read the recent history. Publishing never blocks:
//! a slow subscriber loses old events (and is told how many), the publisher never waits.

use std::collections::VecDeque;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::broadcast;

use crate::install_state::{News, NodeState, Stepped, Transition};
use crate::vocabulary::MacAddr;

pub mod kept;

/// Events kept for readers that arrive late (`status`).
const HISTORY: usize = 4096;
/// Events buffered per live subscriber before it starts losing the oldest.
const FANOUT: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The DHCP server acknowledged a lease.
    DhcpAck { mac: MacAddr, ip: IpAddr },
    /// A node fetched its iPXE script.
    ScriptFetched { from: SocketAddr },
    /// A node fetched its ignition config (the live installer does).
    IgnitionFetched { from: SocketAddr },
    /// A node fetched its role's ignition config (the one its own config merges).
    RoleIgnitionFetched {
        from: SocketAddr,
        file: &'static str,
    },
    /// The node's installed system fetched its role config for the first time since its
    /// install: the node is installed and boots from disk from now on.
    Installed {
        from: SocketAddr,
        file: &'static str,
    },
    /// The installer fetched the ignition again although the previous install never brought up
    /// a system that fetched its role config (the install or its disk boot failed).
    InstallRetried,
    /// The installer fetched the ignition of a node that was installed (it booted its
    /// installer again: its ISO, a changed boot order): installing again, not installed until
    /// its new system reports.
    Reinstalling,
    /// Ignition (`what`) asked for from an address it does not belong to; answered 403.
    FetchRefused {
        from: SocketAddr,
        what: String,
        why: &'static str,
    },
    /// A DHCP request from a MAC no cluster reserves, on a segment without a pool: not
    /// answered; `closest` is the reserved MAC it may be a typo of, with its host name.
    UnknownClient {
        from: SocketAddr,
        mac: MacAddr,
        closest: Option<(MacAddr, String)>,
    },
    /// A file the node's boot asked for can't be served (an artifact or iPXE binary missing):
    /// answered `status`; `fix` says what puts it in place.
    FetchFailed {
        from: SocketAddr,
        file: String,
        status: u16,
        fix: String,
    },
    /// An ignition file the node needs can't be served: missing from `ignition_dir`, or a
    /// bootstrap.ign whose certificates expired (`why` says which).
    IgnitionUnavailable {
        from: SocketAddr,
        file: &'static str,
        why: String,
    },
    /// A node fetched a CoreOS artifact (the live kernel, initramfs or rootfs) from its start:
    /// a range past the first byte (a resumed or parallel download) is not a new fetch.
    ArtifactFetched { from: SocketAddr, file: String },
    /// A node's live ISO was read (once a minute per reader: BMCs read it in many ranges).
    /// `boots`: by the machine that boots the node from it (the node, its BMC or hypervisor);
    /// only such a read moves the node's install phase.
    IsoFetched { from: SocketAddr, boots: bool },
    /// A load-balancer backend changed health.
    BackendHealth {
        frontend: String,
        backend: SocketAddr,
        up: bool,
    },
    /// An operator asked for the node to be installed again at its next network boot.
    ReinstallRequested,
    /// The node's install state moved and is on disk (`install_state::step`): what a pair's
    /// active host replicates.
    InstallRecorded { state: NodeState },
    /// A drained backend's last connection ended.
    BackendDrained {
        frontend: String,
        backend: SocketAddr,
    },
    /// A drained backend still had connections at the drain timeout; they were closed.
    DrainTimedOut {
        frontend: String,
        backend: SocketAddr,
        closed: usize,
    },
    /// A new plan is being served.
    PlanLoaded { serial: u32 },
    /// The node reached a new install phase (`took`: since its previous one, when known).
    NodePhase {
        phase: &'static str,
        took: Option<std::time::Duration>,
    },
    /// The cluster reached a new install phase.
    ClusterPhase {
        phase: &'static str,
        took: Option<std::time::Duration>,
    },
    /// A certificate signing request was approved (`kind`: client or serving).
    CsrApproved { csr: String, kind: &'static str },
    /// A certificate signing request was left for someone else to decide, and why.
    CsrRefused { csr: String, why: String },
    /// The DHCP server recorded a dynamic lease (or its end, `expires` 0), in a pair: what the
    /// active host replicates.
    LeaseRecorded {
        mac: MacAddr,
        ip: std::net::Ipv4Addr,
        expires: u64,
    },
    /// A lease received from the pair's active host, for this host's DHCP server to record.
    LeaseReplicated {
        mac: MacAddr,
        ip: std::net::Ipv4Addr,
        expires: u64,
    },
    /// An operator (or the orchestration) drained the node from the load balancer, or put it
    /// back.
    DrainRequested { draining: bool },
    /// keepalived made this host the active one of its pair, or the standby.
    HaRole { active: bool },
    /// The install orchestration stopped short: why, and what it was doing.
    OrchestrationFailed { why: String },
    /// The install orchestration made a decision the operator should know of (a wait it
    /// skipped, and why).
    OrchestrationNote { what: String },
    /// The control module acted on the node's machine: what it did, or why it could not.
    Machine {
        action: &'static str,
        result: Result<String, String>,
    },
    /// `okd-appliance ignition create` (or `cluster up`) made the cluster's ignition set, or
    /// failed to and left the one in place.
    IgnitionMade { result: Result<String, String> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub at: SystemTime,
    /// The node the event concerns, when it is known.
    pub node: Option<String>,
    pub kind: EventKind,
}

/// The event each piece of a node's install news is announced as.
impl From<News> for EventKind {
    fn from(news: News) -> EventKind {
        match news {
            News::ScriptFetched { from } => EventKind::ScriptFetched { from },
            News::IgnitionFetched { from } => EventKind::IgnitionFetched { from },
            News::InstallRetried => EventKind::InstallRetried,
            News::Reinstalling => EventKind::Reinstalling,
            News::RoleConfigFetched { from, file } => EventKind::RoleIgnitionFetched { from, file },
            News::Installed { from, file } => EventKind::Installed { from, file },
            News::ReinstallRequested => EventKind::ReinstallRequested,
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(node) = &self.node {
            write!(f, "{node}: ")?;
        }
        match &self.kind {
            EventKind::DhcpAck { mac, ip } => write!(f, "dhcp ack {ip} to {mac}"),
            EventKind::ScriptFetched { from } => write!(f, "ipxe script fetched by {from}"),
            EventKind::ReinstallRequested => write!(f, "reinstall requested"),
            EventKind::InstallRecorded { state } => write!(f, "install state recorded: {state}"),
            EventKind::IgnitionFetched { from } => write!(f, "ignition fetched by {from}"),
            EventKind::RoleIgnitionFetched { from, file } => write!(f, "{file} fetched by {from}"),
            EventKind::Installed { from, file } => {
                write!(
                    f,
                    "installed: its installed system fetched {file} from {from}"
                )
            }
            EventKind::InstallRetried => write!(
                f,
                "installing again: no installed system fetched its role config after the last install"
            ),
            EventKind::Reinstalling => write!(
                f,
                "installing again: the installer fetched the ignition of an installed node"
            ),
            EventKind::FetchRefused { from, what, why } => {
                write!(f, "{what} refused to {from} (403): {why}")
            }
            EventKind::FetchFailed {
                from,
                file,
                status,
                fix,
            } => write!(f, "{file} can't be served to {from} ({status}): {fix}"),
            EventKind::UnknownClient { from, mac, closest } => {
                write!(
                    f,
                    "dhcp request from {mac} (via {from}) not answered: no cluster reserves it and the segment has no pool"
                )?;
                match closest {
                    Some((near, name)) => write!(f, "; {name}'s MAC {near} is close: a typo?"),
                    None => Ok(()),
                }
            }
            EventKind::IsoFetched { from, boots } => {
                write!(f, "live ISO read by {from}")?;
                if !boots {
                    f.write_str(
                        " (not the machine that boots it: the install phase is unchanged)",
                    )?;
                }
                Ok(())
            }
            EventKind::ArtifactFetched { from, file } => write!(f, "{file} fetched by {from}"),
            EventKind::NodePhase { phase, took } | EventKind::ClusterPhase { phase, took } => {
                if matches!(self.kind, EventKind::ClusterPhase { .. }) {
                    f.write_str("cluster ")?;
                }
                write!(f, "phase {phase}")?;
                match took {
                    Some(t) => write!(
                        f,
                        " (after {})",
                        humantime::format_duration(std::time::Duration::from_secs(t.as_secs()))
                    ),
                    None => Ok(()),
                }
            }
            EventKind::CsrApproved { csr, kind } => {
                write!(f, "{kind} certificate request {csr} approved")
            }
            EventKind::CsrRefused { csr, why } => {
                write!(f, "certificate request {csr} not approved: {why}")
            }
            EventKind::LeaseRecorded { mac, ip, expires } => {
                write!(f, "lease {ip} to {mac} recorded (expires {expires})")
            }
            EventKind::LeaseReplicated { mac, ip, expires } => {
                write!(
                    f,
                    "lease {ip} to {mac} replicated from the other host (expires {expires})"
                )
            }
            EventKind::DrainRequested { draining: true } => f.write_str("drain requested"),
            EventKind::DrainRequested { draining: false } => f.write_str("undrain requested"),
            EventKind::HaRole { active: true } => {
                f.write_str("this host is now the active one of the pair")
            }
            EventKind::HaRole { active: false } => {
                f.write_str("this host is now the standby of the pair")
            }
            EventKind::OrchestrationFailed { why } => {
                write!(f, "install orchestration stopped: {why}")
            }
            EventKind::OrchestrationNote { what } => write!(f, "install orchestration: {what}"),
            EventKind::IgnitionUnavailable { from, file, why } => {
                write!(f, "{file} not served to {from}: {why}")
            }
            EventKind::BackendHealth {
                frontend,
                backend,
                up,
            } => {
                write!(
                    f,
                    "{frontend} backend {backend} is {}",
                    if *up { "up" } else { "down" }
                )
            }
            EventKind::BackendDrained { frontend, backend } => {
                write!(
                    f,
                    "{frontend} backend {backend} drained: no connections left"
                )
            }
            EventKind::DrainTimedOut {
                frontend,
                backend,
                closed,
            } => write!(
                f,
                "{frontend} backend {backend} drain timeout: closed {closed} connection{}",
                if *closed == 1 { "" } else { "s" }
            ),
            EventKind::PlanLoaded { serial } => write!(f, "plan {serial} loaded"),
            EventKind::Machine { action, result } => match result {
                Ok(done) => write!(f, "{action}: {done}"),
                Err(why) => write!(f, "{action} failed: {why}"),
            },
            EventKind::IgnitionMade { result } => match result {
                Ok(done) => write!(f, "ignition set made: {done}"),
                Err(why) => write!(f, "ignition set not made: {why}"),
            },
        }
    }
}

/// A cheap handle; clones publish into the same journal.
///
/// A host of several clusters keeps one journal per cluster (node names repeat across
/// clusters, and each cluster's orchestration reads only its own nodes' events); a service
/// that answers for several clusters (DHCP on a shared segment) publishes through a routing
/// journal, [`Journal::publish_in`].
#[derive(Debug, Clone)]
pub struct Journal {
    inner: Arc<Inner>,
    /// The clusters' journals, by cluster id, for [`Journal::publish_in`]; a reload that adds
    /// or removes a cluster replaces them.
    routes: Arc<arc_swap::ArcSwap<Vec<(String, Journal)>>>,
}

#[derive(Debug)]
struct Inner {
    /// The cluster this journal is, on a host of several: its log lines name it.
    cluster: Option<String>,
    history: Mutex<VecDeque<Event>>,
    /// What was published before this start, read back from its file ([`kept`]).
    earlier: Mutex<Vec<kept::Past>>,
    live: broadcast::Sender<Event>,
    refusals: Mutex<Refusals>,
}

/// Refusals a source address may put in the journal at once, and how many more per second: a
/// flood of refused requests must not push real events out of the history, nor make
/// subscribers (the phase tracker, replication, the status page) lag.
const REFUSAL_BURST: f64 = 10.0;
const REFUSALS_PER_SECOND: f64 = 2.0;
/// Addresses tracked at once; past it, those whose bucket is full again are forgotten (at most
/// once a second), and a new address shares one bucket with every other untracked one: a
/// DHCP source address costs a spoofer nothing, so neither the table nor the events may grow
/// with the addresses it makes up.
const REFUSAL_SOURCES: usize = 4096;

/// A token bucket of journaled refusals per source address.
#[derive(Debug, Default)]
struct Refusals {
    buckets: std::collections::HashMap<IpAddr, Bucket>,
    /// The bucket of the addresses past [`REFUSAL_SOURCES`].
    untracked: Option<Bucket>,
    /// When the full buckets were last forgotten.
    swept: Option<std::time::Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: std::time::Instant,
    /// Refusals left out since the last one journaled.
    dropped: u64,
}

impl Refusals {
    /// Whether a refusal from `ip` goes in the journal now; with it, how many were left out
    /// before it.
    fn admit(&mut self, ip: IpAddr, now: std::time::Instant) -> Result<u64, ()> {
        let full = Bucket {
            tokens: REFUSAL_BURST,
            at: now,
            dropped: 0,
        };
        let known = self.buckets.contains_key(&ip);
        if !known
            && self.buckets.len() >= REFUSAL_SOURCES
            && self
                .swept
                .is_none_or(|at| now.duration_since(at) >= std::time::Duration::from_secs(1))
        {
            self.swept = Some(now);
            self.buckets.retain(|_, b| {
                b.tokens + now.duration_since(b.at).as_secs_f64() * REFUSALS_PER_SECOND
                    < REFUSAL_BURST
            });
        }
        let b = if known || self.buckets.len() < REFUSAL_SOURCES {
            self.buckets.entry(ip).or_insert(full)
        } else {
            self.untracked.get_or_insert(full)
        };
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * REFUSALS_PER_SECOND)
            .min(REFUSAL_BURST);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(std::mem::take(&mut b.dropped))
        } else {
            b.dropped += 1;
            Err(())
        }
    }
}

impl EventKind {
    /// A signal between services, not news for people: fanned out to the live subscribers
    /// (a pair's replication), never kept in the history, `status`'s events or the kept file.
    /// The install state recorded repeats, as state, what the news before it said.
    pub fn is_signal(&self) -> bool {
        matches!(self, EventKind::InstallRecorded { .. })
    }

    /// The address of a refused request this event reports, if it is one.
    fn refused_source(&self) -> Option<IpAddr> {
        match self {
            EventKind::FetchRefused { from, .. }
            | EventKind::FetchFailed { from, .. }
            | EventKind::UnknownClient { from, .. }
            | EventKind::IgnitionUnavailable { from, .. } => Some(from.ip()),
            _ => None,
        }
    }
}

impl Default for Journal {
    fn default() -> Self {
        Self::new()
    }
}

impl Journal {
    pub fn new() -> Self {
        Self::named(None, Vec::new())
    }

    /// Cluster `id`'s journal on a host of several.
    pub fn of_cluster(id: &str) -> Self {
        Self::named(Some(id.to_owned()), Vec::new())
    }

    /// The journal of a service that answers for several clusters: [`Journal::publish_in`]
    /// hands each event to its cluster's journal in `routes`.
    pub fn routing(routes: Vec<(String, Journal)>) -> Self {
        Self::named(None, routes)
    }

    fn named(cluster: Option<String>, routes: Vec<(String, Journal)>) -> Self {
        let (live, _) = broadcast::channel(FANOUT);
        Self {
            inner: Arc::new(Inner {
                cluster,
                history: Mutex::new(VecDeque::with_capacity(HISTORY)),
                earlier: Mutex::default(),
                live,
                refusals: Mutex::default(),
            }),
            routes: Arc::new(arc_swap::ArcSwap::from_pointee(routes)),
        }
    }

    /// Routes [`Journal::publish_in`] to `routes` from now on.
    pub fn reroute(&self, routes: Vec<(String, Journal)>) {
        self.routes.store(Arc::new(routes));
    }

    /// [`Journal::publish`] in cluster `cluster`'s journal when this one routes to it, else in
    /// this one.
    pub fn publish_in(&self, cluster: &str, node: Option<String>, kind: EventKind) {
        match self.routes.load().iter().find(|(id, _)| id == cluster) {
            Some((_, journal)) => journal.publish(node, kind),
            None => self.publish(node, kind),
        }
    }

    /// Publishes a step that was recorded (nothing, if it was not): its news, and the state
    /// after when the step wrote it or had news (an install event: a standby that missed an
    /// earlier one is mended by the next). A step with neither, a script read by another
    /// address, ships nothing, so a stranger's requests make no traffic to the standby.
    pub fn announce_step(&self, node: &str, stepped: &Stepped) {
        if let Ok(written) = stepped.recorded {
            let ships = written || !stepped.transition.news.is_empty();
            self.announce(node, &stepped.transition, ships);
        }
    }

    /// Publishes a node's install transition: its news, in order, and, when `recorded` (on
    /// disk, whether this step wrote it or found it there), the state after
    /// (`InstallRecorded`), which a pair ships to its standby.
    pub fn announce(&self, node: &str, transition: &Transition, recorded: bool) {
        for news in &transition.news {
            self.publish(Some(node.to_owned()), EventKind::from(*news));
        }
        if recorded {
            self.publish(
                Some(node.to_owned()),
                EventKind::InstallRecorded {
                    state: transition.after,
                },
            );
        }
    }

    /// Records and fans out an event. Refusals (requests answered 403 or 404/410 for ignition)
    /// are limited per source address; what is left out is counted in the next one journaled.
    pub fn publish(&self, node: Option<String>, kind: EventKind) {
        if let Some(ip) = kind.refused_source() {
            let admitted = self
                .inner
                .refusals
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .admit(ip, std::time::Instant::now());
            match admitted {
                Ok(0) => {}
                Ok(dropped) => tracing::warn!(
                    target: "journal",
                    "{dropped} more refusals to {ip} were left out of the journal (more than {REFUSALS_PER_SECOND}/s)"
                ),
                Err(()) => {
                    tracing::debug!(target: "journal", "refusal to {ip} left out: {kind:?}");
                    return;
                }
            }
        }
        let event = Event {
            at: SystemTime::now(),
            node,
            kind,
        };
        if event.kind.is_signal() {
            tracing::debug!(target: "journal", "{event}");
            let _ = self.inner.live.send(event);
            return;
        }
        match &self.inner.cluster {
            Some(cluster) => tracing::info!(target: "journal", "cluster {cluster}: {event}"),
            None => tracing::info!(target: "journal", "{event}"),
        }
        {
            let mut history = self.inner.history.lock().unwrap_or_else(|e| e.into_inner());
            if history.len() == HISTORY {
                history.pop_front();
            }
            history.push_back(event.clone());
        }
        // No subscriber is not an error: the history still has it.
        let _ = self.inner.live.send(event);
    }

    /// Events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.live.subscribe()
    }

    /// Sets what was published before this start (read from [`kept`]'s file).
    pub fn set_earlier(&self, earlier: Vec<kept::Past>) {
        *self.inner.earlier.lock().unwrap_or_else(|e| e.into_inner()) = earlier;
    }

    /// What was published before this start, oldest first.
    pub fn earlier(&self) -> Vec<kept::Past> {
        self.inner
            .earlier
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The most recent events, oldest first.
    pub fn recent(&self) -> Vec<Event> {
        let history = self.inner.history.lock().unwrap_or_else(|e| e.into_inner());
        history.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_install_state_reaches_subscribers_and_stays_out_of_the_history() {
        let journal = Journal::new();
        let mut live = journal.subscribe();
        let from: SocketAddr = "10.0.0.2:4000".parse().unwrap();
        let transition = crate::install_state::observe(
            NodeState::NotInstalled,
            crate::install_state::Observation::Ignition { from },
            SystemTime::UNIX_EPOCH,
        );
        journal.announce("m0", &transition, true);
        let said: Vec<String> = journal.recent().iter().map(ToString::to_string).collect();
        assert_eq!(said, ["m0: ignition fetched by 10.0.0.2:4000"]);
        assert_eq!(
            live.try_recv().unwrap().kind,
            EventKind::IgnitionFetched { from }
        );
        assert_eq!(
            live.try_recv().unwrap().kind,
            EventKind::InstallRecorded {
                state: transition.after
            }
        );
        // Not recorded: no state to ship.
        journal.announce("m0", &transition, false);
        assert!(matches!(
            live.try_recv().unwrap().kind,
            EventKind::IgnitionFetched { .. }
        ));
        assert!(live.try_recv().is_err());
    }

    #[test]
    fn a_step_ships_its_state_at_an_install_event_and_not_for_a_stranger_s_read() {
        use crate::install_state::{Observation, Stepped};
        let journal = Journal::new();
        let mut live = journal.subscribe();
        let from: SocketAddr = "10.0.0.9:4000".parse().unwrap();
        let script = |by_node| Observation::Script {
            from,
            by_node,
            get: true,
            single_node: false,
        };
        let unchanged = |observation| Stepped {
            before: NodeState::NotInstalled,
            transition: crate::install_state::observe(
                NodeState::NotInstalled,
                observation,
                SystemTime::UNIX_EPOCH,
            ),
            recorded: Ok(false),
        };
        // Another address read the script: no news, nothing written, nothing shipped.
        journal.announce_step("m0", &unchanged(script(false)));
        assert!(live.try_recv().is_err());
        // The node's own fetch is an install event: its state goes out though unchanged.
        journal.announce_step("m0", &unchanged(script(true)));
        assert!(matches!(
            live.try_recv().unwrap().kind,
            EventKind::ScriptFetched { .. }
        ));
        assert_eq!(
            live.try_recv().unwrap().kind,
            EventKind::InstallRecorded {
                state: NodeState::NotInstalled
            }
        );
        // A step that was not recorded announces nothing.
        let mut failed = unchanged(script(true));
        failed.recorded = Err(std::io::Error::other("read-only"));
        journal.announce_step("m0", &failed);
        assert!(live.try_recv().is_err());
    }

    #[test]
    fn a_flood_of_refusals_from_one_address_does_not_fill_the_journal() {
        let journal = Journal::new();
        let refused = |ip: &str| EventKind::FetchRefused {
            from: format!("{ip}:4000").parse().unwrap(),
            what: "ignition".into(),
            why: "not the node's address",
        };
        for _ in 0..1000 {
            journal.publish(Some("mst0".into()), refused("10.0.0.66"));
        }
        journal.publish(Some("mst0".into()), refused("10.0.0.67"));
        // Events that move an install are never limited.
        for _ in 0..50 {
            journal.publish(
                Some("mst0".into()),
                EventKind::ScriptFetched {
                    from: "10.0.0.66:4000".parse().unwrap(),
                },
            );
        }
        let recent = journal.recent();
        let from = |ip: &str| {
            recent
                .iter()
                .filter(|e| matches!(&e.kind, EventKind::FetchRefused { from, .. } if from.ip().to_string() == ip))
                .count()
        };
        assert_eq!(from("10.0.0.66"), REFUSAL_BURST as usize);
        assert_eq!(from("10.0.0.67"), 1);
        assert_eq!(
            recent
                .iter()
                .filter(|e| matches!(e.kind, EventKind::ScriptFetched { .. }))
                .count(),
            50
        );
    }

    #[test]
    fn refusals_come_back_at_their_rate_and_count_what_was_left_out() {
        let mut r = Refusals::default();
        let ip: IpAddr = "10.0.0.66".parse().unwrap();
        let t0 = std::time::Instant::now();
        for _ in 0..10 {
            assert_eq!(r.admit(ip, t0), Ok(0));
        }
        assert_eq!(r.admit(ip, t0), Err(()));
        assert_eq!(r.admit(ip, t0), Err(()));
        // Half a second later: one more (2 a second), with the two left out counted.
        let later = t0 + std::time::Duration::from_millis(500);
        assert_eq!(r.admit(ip, later), Ok(2));
        assert_eq!(r.admit(ip, later), Err(()));
    }

    #[test]
    fn made_up_addresses_share_one_bucket_past_the_table() {
        // A spoofer sending from a new address each time (a DHCP source is free): the table
        // stays bounded, and past it all its addresses together get one address's rate.
        let mut r = Refusals::default();
        let t0 = std::time::Instant::now();
        let admitted = (0..3 * REFUSAL_SOURCES as u32)
            .filter(|i| {
                r.admit(IpAddr::from((0x0a00_0000 + i).to_be_bytes()), t0)
                    .is_ok()
            })
            .count();
        assert!(r.buckets.len() <= REFUSAL_SOURCES, "{}", r.buckets.len());
        assert_eq!(admitted, REFUSAL_SOURCES + REFUSAL_BURST as usize);
        // A tracked address keeps its own bucket.
        assert_eq!(r.admit(IpAddr::from([10, 0, 0, 1]), t0), Ok(0));
    }

    #[tokio::test]
    async fn subscribers_see_events_and_history_is_bounded() {
        let journal = Journal::new();
        let mut rx = journal.subscribe();
        journal.publish(Some("master-0".into()), EventKind::PlanLoaded { serial: 1 });
        let got = rx.recv().await.unwrap();
        assert_eq!(got.node.as_deref(), Some("master-0"));
        for serial in 0..(HISTORY as u32 + 10) {
            journal.publish(None, EventKind::PlanLoaded { serial });
        }
        let recent = journal.recent();
        assert_eq!(recent.len(), HISTORY);
        assert_eq!(
            recent.last().unwrap().kind,
            EventKind::PlanLoaded {
                serial: HISTORY as u32 + 9
            }
        );
    }

    #[test]
    fn publishing_without_subscribers_is_fine() {
        let journal = Journal::new();
        journal.publish(None, EventKind::PlanLoaded { serial: 7 });
        assert_eq!(journal.recent().len(), 1);
    }
}
