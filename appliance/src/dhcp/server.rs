//! The DHCP socket: requests are read in batches and decided; replies that promise no lease
//! (OFFER, NAK, INFORM) leave at once. ACKs wait for the lease changes behind them to be on
//! disk: the changes are synced in groups off the event loop (group commit), so while one
//! group is being synced the socket is still read and answered, and the ACKs of the group
//! leave as soon as its sync returns. A failed sync sends no ACK: a client without one retries,
//! a client with an ACK for a lost lease could see its address given twice.
//!
//! Requests are read up to 64 at a time. A group is a [`SyncJob`] holding the lines recorded
//! so far, written and synced on tokio's blocking pool while the loop goes on; when it returns,
//! its ACKs leave and what was decided meanwhile becomes the next group. One sync is in flight
//! at a time; a failed one puts its lines back ahead of newer ones. When the journal is due for
//! compaction, the group that finds it so is synced and compacted in one blocking
//! `Leases::sync`, under `block_in_place` (a `SyncJob` never compacts). Before the group
//! commit, the loop waited for each sync itself, so OFFERs stalled behind it and replies left
//! in bursts that overflowed perfdhcp's receive buffer; the same ladder's highest clean rate
//! went from 10000-12000 to 14000-16000 exchanges/s (docs/performance.md, `## DHCP: group
//! commit, measured`).

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use dhcproto::Encodable;
use dhcproto::v4::Message;
use tokio::net::UdpSocket;
use tokio::sync::broadcast;
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;

use super::leases::{Lease, Leases, SyncJob};
use super::reply::{Outgoing, State, handle};
use crate::faults::FaultState;
use crate::isolate::Wire;
use crate::journal::{EventKind, Journal};
use crate::plan;

/// Requests read from the socket before their replies are decided, at most.
const BATCH: usize = 64;

/// How often the lease gauges are brought up to date, at most (counting the pool's free
/// addresses walks the table).
const GAUGES_EVERY: Duration = Duration::from_secs(1);

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Prepares `socket` (bound to the cluster interface) for DHCP: broadcast, a large receive
/// buffer.
pub fn prepare(socket: &UdpSocket) -> anyhow::Result<()> {
    socket
        .set_broadcast(true)
        .context("enabling broadcast on the DHCP socket")?;
    // Room for bursts of requests; the kernel caps it at net.core.rmem_max.
    if let Err(e) = socket2::SockRef::from(socket).set_recv_buffer_size(4 << 20) {
        tracing::debug!("dhcp: can't enlarge the receive buffer: {e}");
    }
    Ok(())
}

/// A group of lease changes being synced, and what waits for it.
struct Group {
    sync: JoinHandle<(SyncJob, io::Result<()>)>,
    /// ACKs that leave once the sync returned.
    acks: Vec<Outgoing>,
    /// Leases the pair's replication learns once they are durable.
    changes: Vec<Lease>,
}

/// Groups whose sync failed, logged once per 10 s.
static UNSYNCED: crate::isolate::LogGate = crate::isolate::LogGate::new();
/// The log line of a request nobody answers (see [`Stranger`]): at most one per 10 s.
static STRANGERS: crate::isolate::LogGate = crate::isolate::LogGate::new();

/// A DISCOVER or REQUEST from a MAC no cluster reserves, on a segment without a pool: not
/// answered, which is right, but a node with a mistyped MAC would wait in its initramfs for
/// NetworkManager's timeout and nobody would say why. So it is logged and journaled, with the
/// reserved MAC closest to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stranger {
    pub mac: crate::vocabulary::MacAddr,
    /// The reserved MAC that differs from it in the fewest hex digits (at most
    /// [`TYPO_DIGITS`]), with its host name.
    pub closest: Option<(crate::vocabulary::MacAddr, String)>,
}

/// How many hex digits a MAC may differ in from a reserved one and still look like its typo.
pub const TYPO_DIGITS: u32 = 3;

impl Stranger {
    /// `mac` asked on a segment whose `dhcp` plan has no pool and no reservation for it.
    fn of(mac: crate::vocabulary::MacAddr, dhcp: &plan::DhcpPlan) -> Option<Stranger> {
        if dhcp.pool.is_some()
            || dhcp.silent.contains(&mac)
            || dhcp.reservations.iter().any(|r| r.mac == mac)
        {
            return None;
        }
        let digits = |other: &crate::vocabulary::MacAddr| -> u32 {
            mac.0
                .iter()
                .zip(other.0)
                .map(|(a, b)| u32::from(a >> 4 != b >> 4) + u32::from(a & 0xf != b & 0xf))
                .sum()
        };
        let closest = dhcp
            .reservations
            .iter()
            .map(|r| (digits(&r.mac), r))
            .filter(|(d, _)| *d <= TYPO_DIGITS)
            .min_by_key(|(d, _)| *d)
            .map(|(_, r)| (r.mac, r.host_name.clone()));
        Some(Stranger { mac, closest })
    }
}

/// What the serving loop keeps between events.
struct Server<'a> {
    socket: &'a UdpSocket,
    journal: &'a Journal,
    metrics: &'a crate::metrics::Metrics,
    /// Where a lease journal that can't be written is reported, as `lease journal PATH`.
    faults: (&'a crate::faults::Faults, String),
    state: State,
    /// ACKs decided since the group in flight started: they wait for the next group.
    acks: Vec<Outgoing>,
    /// Changes of a failed group, replicated with the next one.
    changes: Vec<Lease>,
    syncing: Option<Group>,
    /// The lease gauges are behind the table.
    gauges_stale: bool,
    /// What this socket's segment adds to the lease gauges (live dynamic leases, free pool
    /// addresses): on a host of several segments each adds its own, so the gauges are the
    /// host's sums.
    counted: (i64, i64),
}

/// The journal subscription a pair's DHCP server records replicated leases from: made when the
/// service is set up, so a lease replicated before its task first runs is not missed.
pub fn subscribe(
    journal: &Journal,
    active: &crate::ha::Activity,
) -> Option<broadcast::Receiver<crate::journal::Event>> {
    active.paired().then(|| journal.subscribe())
}

/// Serves DHCP on `socket` with the lease table `leases` until `token` is cancelled.
///
/// In a pair, leases travel through the journal: recorded here (the active host's replication
/// sends them) and replicated here (the standby's records them), from `replicated`, the
/// subscription [`subscribe`] made before the replication could publish one.
#[allow(clippy::too_many_arguments)] // reason: the service context, passed through as is
pub async fn serve(
    socket: UdpSocket,
    leases: Leases,
    plan: plan::Handle,
    journal: Journal,
    replicated: Option<broadcast::Receiver<crate::journal::Event>>,
    active: crate::ha::Activity,
    (metrics, faults): (
        std::sync::Arc<crate::metrics::Metrics>,
        crate::faults::Faults,
    ),
    token: CancellationToken,
) -> anyhow::Result<()> {
    let fault = format!(
        "lease journal {}",
        plan.load()
            .state_dir
            .join(super::leases::FILE_NAME)
            .display()
    );
    let mut state = State::new(leases);
    if let Some(host) = active.host() {
        state.in_pair(host);
    }
    let mut replicated = replicated;
    if replicated.is_some() {
        state.leases.track_changes();
    }
    let mut server = Server {
        socket: &socket,
        journal: &journal,
        metrics: &metrics,
        faults: (&faults, fault),
        state,
        acks: Vec::with_capacity(BATCH),
        changes: Vec::new(),
        syncing: None,
        gauges_stale: false,
        counted: (0, 0),
    };
    let mut packets: Vec<(Vec<u8>, SocketAddr)> = Vec::with_capacity(BATCH);
    let mut buf = vec![0u8; 65_535];
    let mut gauges = tokio::time::interval(GAUGES_EVERY);
    gauges.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = token.cancelled() => break,
            first = socket.recv_from(&mut buf) => {
                packets.clear();
                match first {
                    Ok((n, from)) => packets.push((buf.get(..n).unwrap_or_default().to_vec(), from)),
                    Err(e) => {
                        tracing::debug!("dhcp receive: {e}");
                        continue;
                    }
                }
                while packets.len() < BATCH {
                    match socket.try_recv_from(&mut buf) {
                        Ok((n, from)) => packets.push((buf.get(..n).unwrap_or_default().to_vec(), from)),
                        Err(_) => break,
                    }
                }
                // The standby of a pair stays silent: one DHCP server answers a node.
                if active.is_active() {
                    server.decide(&packets, &plan.load().dhcp).await;
                }
            }
            event = next_event(&mut replicated) => {
                if let EventKind::LeaseReplicated { mac, ip, expires } = event.kind {
                    server.state.leases.record_replicated(Lease { ip, mac, expires });
                }
            }
            done = synced(&mut server.syncing) => server.group_synced(done).await,
            _ = gauges.tick(), if server.gauges_stale => server.update_gauges(&plan.load().dhcp),
        }
        if server.syncing.is_none() {
            server.start_group().await;
        }
    }
    // Whatever was decided still gets its ACK once it is on disk: the group in flight, then
    // one more for what was decided meanwhile.
    server.settle().await;
    server.start_group().await;
    server.settle().await;
    // A segment a reload removed takes its share out of the host's gauges.
    server.count((0, 0));
    Ok(())
}

/// The path one received datagram takes in the server, before any I/O: decoded, counted,
/// decided; with no reply, the [`Stranger`] it came from, if it was one. The fuzz target
/// `dhcp_packet` drives this function, not only the parser.
pub fn receive(
    packet: &[u8],
    from: SocketAddr,
    dhcp: &plan::DhcpPlan,
    state: &mut State,
    metrics: &crate::metrics::Metrics,
    now: u64,
) -> Result<Outgoing, Option<Stranger>> {
    let Some(request) = super::decode(packet) else {
        tracing::debug!("dhcp: undecodable packet from {from}");
        return Err(None);
    };
    let mac = request
        .chaddr()
        .get(..6)
        .and_then(|b| b.try_into().ok())
        .map(crate::vocabulary::MacAddr);
    let kind = request.opts().msg_type();
    if let Some(kind) = kind {
        let cluster = mac.and_then(|m| dhcp.counted_as(m));
        metrics.dhcp_message(u8::from(kind), cluster);
    }
    handle(&request, dhcp, state, now).ok_or_else(|| {
        let asks = matches!(
            kind,
            Some(dhcproto::v4::MessageType::Discover | dhcproto::v4::MessageType::Request)
        );
        mac.filter(|_| asks && request.hlen() == 6)
            .and_then(|m| Stranger::of(m, dhcp))
    })
}

impl Server<'_> {
    /// Decides the replies to `packets`: those that promise no lease leave now, ACKs wait for
    /// the next group.
    async fn decide(&mut self, packets: &[(Vec<u8>, SocketAddr)], dhcp: &plan::DhcpPlan) {
        let now = unix_now();
        for (packet, from) in packets {
            // One packet's fault stays with it: counted, logged (rate-limited), dropped.
            let decided = crate::isolate::packet(Wire::Dhcp, || {
                receive(packet, *from, dhcp, &mut self.state, self.metrics, now)
            });
            match decided {
                // OFFERs, NAKs and INFORM answers promise no lease: they leave at once.
                Some(Ok(out)) if out.acked.is_none() => {
                    send(self.socket, &out.message, out.to).await;
                }
                Some(Ok(out)) => self.acks.push(out),
                Some(Err(Some(stranger))) => self.stranger(&stranger, *from, dhcp),
                Some(Err(None)) | None => {}
            }
        }
    }

    /// Says that `stranger` is not answered: a log line (at most one per 10 s) and an event of
    /// the segment's cluster (limited per source address, as refusals are).
    fn stranger(&self, stranger: &Stranger, from: SocketAddr, dhcp: &plan::DhcpPlan) {
        let closest = match &stranger.closest {
            Some((mac, name)) => format!("; {name}'s reserved MAC {mac} is close: a typo?"),
            None => String::new(),
        };
        if let Some(n) = STRANGERS.admit(std::time::Instant::now()) {
            tracing::warn!(
                "dhcp: {} (from {from}) is reserved by no cluster and this segment has no pool: not answered{closest} (+{n} unlogged)",
                stranger.mac
            );
        }
        self.journal.publish_in(
            &dhcp.cluster,
            None,
            EventKind::UnknownClient {
                from,
                mac: stranger.mac,
                closest: stranger.closest.clone(),
            },
        );
    }

    /// Starts syncing what was recorded since the last group, with the ACKs decided since.
    /// Only with no group in flight.
    async fn start_group(&mut self) {
        if self.acks.is_empty() && !self.state.leases.has_pending() {
            return;
        }
        let mut changes = std::mem::take(&mut self.changes);
        changes.extend(self.state.leases.take_changes());
        let acks = std::mem::take(&mut self.acks);
        if self.state.leases.compaction_due() {
            // Compaction rewrites the journal: rare (it grew fourfold), so this group is synced
            // and compacted here, holding the socket for the few milliseconds it takes.
            let compacted = tokio::task::block_in_place(|| self.state.leases.sync());
            self.group_done(acks, changes, compacted).await;
            return;
        }
        match self.state.leases.start_sync() {
            // ACKs without a lease change behind them (reservations) need no sync.
            Ok(None) => self.group_done(acks, changes, Ok(())).await,
            Ok(Some(job)) => {
                let sync = tokio::task::spawn_blocking(move || {
                    let result = job.run();
                    (job, result)
                });
                self.syncing = Some(Group {
                    sync,
                    acks,
                    changes,
                });
            }
            Err(e) => self.group_done(acks, changes, Err(e)).await,
        }
    }

    /// Waits for the group in flight, if any, and takes it back.
    async fn settle(&mut self) {
        if self.syncing.is_some() {
            let done = synced(&mut self.syncing).await;
            self.group_synced(done).await;
        }
    }

    /// Takes back the group whose sync returned `done`.
    async fn group_synced(&mut self, done: Result<(SyncJob, io::Result<()>), JoinError>) {
        let Some(group) = self.syncing.take() else {
            return;
        };
        let synced = match done {
            Ok((job, result)) => self.state.leases.finish_sync(job, result),
            Err(e) => self.state.leases.abandon_sync(io::Error::other(e)),
        };
        self.group_done(group.acks, group.changes, synced).await;
    }

    /// Sends the ACKs of a group whose sync returned `synced`, or drops them if it failed.
    async fn group_done(
        &mut self,
        acks: Vec<Outgoing>,
        changes: Vec<Lease>,
        synced: Result<(), super::leases::LeaseError>,
    ) {
        let (faults, fault) = (self.faults.0, self.faults.1.as_str());
        if let Err(e) = synced {
            let error = format!(
                "{:#}: {} ACKs not sent (their clients retry)",
                anyhow::Error::new(e),
                acks.len()
            );
            faults.record(fault, None, FaultState::Unwritable, Some(&error));
            if let Some(n) = UNSYNCED.admit(std::time::Instant::now()) {
                tracing::error!("lease changes not on disk: {error} (+{n} unlogged)");
            }
            // A failed write's lines are pending again, so the next group writes them, and
            // the pair learns these leases with it.
            self.changes = changes
                .into_iter()
                .chain(std::mem::take(&mut self.changes))
                .collect();
            return;
        }
        faults.clear(fault, None);
        self.gauges_stale = true;
        for lease in changes {
            self.journal.publish(
                None,
                EventKind::LeaseRecorded {
                    mac: lease.mac,
                    ip: lease.ip,
                    expires: lease.expires,
                },
            );
        }
        for out in acks {
            send(self.socket, &out.message, out.to).await;
            if let Some(acked) = out.acked {
                self.journal.publish_in(
                    &acked.cluster,
                    acked.node,
                    EventKind::DhcpAck {
                        mac: acked.mac,
                        ip: acked.ip.into(),
                    },
                );
            }
        }
    }

    /// Brings the pool's free-address gauge up to date.
    /// The pool gauges: dynamic leases (those of pool addresses, not the reservations' acks)
    /// and free pool addresses.
    fn update_gauges(&mut self, dhcp: &plan::DhcpPlan) {
        self.gauges_stale = false;
        let now = match dhcp.pool {
            None => (0, 0),
            Some(pool) => {
                let size = u64::from(u32::from(pool.end) - u32::from(pool.start)) + 1;
                let used = self
                    .state
                    .leases
                    .iter()
                    .filter(|l| pool.contains(l.ip))
                    .count() as u64;
                let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                (count(used), count(size.saturating_sub(used)))
            }
        };
        self.count(now);
    }

    /// Moves this segment's share of the lease gauges to `now`.
    fn count(&mut self, now: (i64, i64)) {
        let (leases, free) = self.counted;
        self.metrics.dhcp_leases.inc_by(now.0 - leases);
        self.metrics.dhcp_pool_free.inc_by(now.1 - free);
        self.counted = now;
    }
}

/// What the sync of the group in flight returned; never, without one.
async fn synced(group: &mut Option<Group>) -> Result<(SyncJob, io::Result<()>), JoinError> {
    match group {
        Some(g) => (&mut g.sync).await,
        None => std::future::pending().await,
    }
}

/// The next journal event, or never without a subscription (outside a pair).
async fn next_event(
    events: &mut Option<tokio::sync::broadcast::Receiver<crate::journal::Event>>,
) -> crate::journal::Event {
    loop {
        match events {
            None => std::future::pending::<()>().await,
            Some(rx) => match rx.recv().await {
                Ok(e) => return e,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        "dhcp: {n} journal events missed (replicated leases among them, maybe)"
                    );
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => *events = None,
            },
        }
    }
}

async fn send(socket: &UdpSocket, message: &Message, to: SocketAddrV4) {
    match message.to_vec() {
        Ok(bytes) => {
            if let Err(e) = socket.send_to(&bytes, to).await {
                tracing::debug!("dhcp reply to {to}: {e}");
            }
        }
        Err(e) => tracing::warn!("dhcp reply to {to} could not be encoded: {e}"),
    }
}
