//! Where each node and the cluster are in the install, with the time each phase was reached.
//!
//! A node's phase follows the journal: the control module created and powered its machine,
//! DHCP acknowledged it, it fetched its script, the live kernel and initramfs, its ignition
//! (the installer), its role config (the installed system: installed), then the cluster's API
//! shows its Node object (joined) and reports it Ready. A phase only moves forward, except
//! where the install really starts over: a reinstall request, an install retried after a
//! failed one, a destroyed machine.
//!
//! The whole record is kept in `<state_dir>/install-phases.json` (written durably: a temporary
//! file synced and renamed, then the directory synced, so a crash leaves the old or the new
//! record, never half of one, and a power cut loses no record that was saved) and read back
//! at start, reconciled with the nodes' install state (`install_state`: installing is at least
//! `ignition`, installed at least `installed`), which the boot server records whether or not
//! this record was written, and again whenever its journal subscription lagged. It is written on
//! the blocking pool, one writer at a time, so the file ends with the newest record
//! (`concurrent_saves_leave_the_newest_record`); a write that fails is an `install phases` fault
//! of its cluster until one succeeds (`a_record_that_cant_be_written_is_a_fault_until_it_can`).
//!
//! Architecture invariant: [`Progress`] is plain data with pure transitions ([`Progress::apply`]
//! and [`Progress::advance_cluster`]); the file and the journal are handled by [`Phases`].

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::install_state::{self, NodeState};
use crate::journal::{Event, EventKind, Journal};

pub const FILE_NAME: &str = "install-phases.json";

/// A node's install phase, in the order an install goes through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodePhase {
    Defined,
    Created,
    PoweredOn,
    Dhcp,
    Script,
    KernelInitrd,
    Ignition,
    Installed,
    Joined,
    Ready,
}

impl NodePhase {
    pub const ALL: [NodePhase; 10] = [
        NodePhase::Defined,
        NodePhase::Created,
        NodePhase::PoweredOn,
        NodePhase::Dhcp,
        NodePhase::Script,
        NodePhase::KernelInitrd,
        NodePhase::Ignition,
        NodePhase::Installed,
        NodePhase::Joined,
        NodePhase::Ready,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NodePhase::Defined => "defined",
            NodePhase::Created => "created",
            NodePhase::PoweredOn => "powered-on",
            NodePhase::Dhcp => "dhcp",
            NodePhase::Script => "script",
            NodePhase::KernelInitrd => "kernel-initrd",
            NodePhase::Ignition => "ignition",
            NodePhase::Installed => "installed",
            NodePhase::Joined => "joined",
            NodePhase::Ready => "ready",
        }
    }
}

/// The cluster's install phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterPhase {
    Bootstrapping,
    BootstrapComplete,
    BootstrapRemoved,
    WorkersJoining,
    Installed,
}

impl ClusterPhase {
    pub fn name(self) -> &'static str {
        match self {
            ClusterPhase::Bootstrapping => "bootstrapping",
            ClusterPhase::BootstrapComplete => "bootstrap-complete",
            ClusterPhase::BootstrapRemoved => "bootstrap-removed",
            ClusterPhase::WorkersJoining => "workers-joining",
            ClusterPhase::Installed => "installed",
        }
    }
}

impl std::fmt::Display for NodePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for ClusterPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A phase and when it was reached (seconds since the epoch, as JSON carries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step<P> {
    pub phase: P,
    pub at: u64,
}

/// What a journal event does to a node's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transition {
    /// Forward to this phase, if it is past the current one.
    Reach(NodePhase),
    /// The install starts over from this phase (kept if reached, else reached now).
    Back(NodePhase),
    /// What happened from this phase on is undone; what came before still holds (a reinstall
    /// request changes no machine: a node the appliance never powered on is not "powered-on").
    Forget(NodePhase),
}

fn transition(kind: &EventKind) -> Option<Transition> {
    use Transition::{Back, Forget, Reach};
    Some(match kind {
        EventKind::Machine {
            action: "create",
            result: Ok(_),
        } => Reach(NodePhase::Created),
        EventKind::Machine {
            action: "start",
            result: Ok(_),
        } => Reach(NodePhase::PoweredOn),
        EventKind::Machine {
            action: "destroy",
            result: Ok(_),
        } => Back(NodePhase::Defined),
        EventKind::DhcpAck { .. } => Reach(NodePhase::Dhcp),
        EventKind::ScriptFetched { .. } => Reach(NodePhase::Script),
        EventKind::ArtifactFetched { .. } | EventKind::IsoFetched { boots: true, .. } => {
            Reach(NodePhase::KernelInitrd)
        }
        EventKind::IgnitionFetched { .. } => Reach(NodePhase::Ignition),
        EventKind::InstallRetried | EventKind::Reinstalling => Back(NodePhase::Ignition),
        EventKind::Installed { .. } | EventKind::RoleIgnitionFetched { .. } => {
            Reach(NodePhase::Installed)
        }
        EventKind::ReinstallRequested => Forget(NodePhase::Dhcp),
        _ => return None,
    })
}

/// The record: every node's phases and the cluster's, each with the time it was reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// `cluster up` was asked for and has not finished: an appliance that restarts resumes it.
    #[serde(default)]
    pub up_requested: bool,
    /// How many of the configured workers `up` brings (`cluster scale`); all when unset.
    #[serde(default)]
    pub workers_wanted: Option<usize>,
    #[serde(default)]
    pub cluster: Vec<Step<ClusterPhase>>,
    #[serde(default)]
    pub nodes: BTreeMap<String, Vec<Step<NodePhase>>>,
    /// The client certificates `up` approved: node -> the install attempt it was approved in
    /// (`csr::install_attempts`). Kept here, durably, because the API garbage-collects an
    /// approved request after an hour: an appliance restarted after that must still know a
    /// node already has its one client certificate of this attempt.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub approved_clients: BTreeMap<String, u64>,
}

/// A phase change to announce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub node: Option<String>,
    pub phase: &'static str,
    pub took: Option<Duration>,
}

impl Progress {
    pub fn node_phase(&self, node: &str) -> NodePhase {
        self.nodes
            .get(node)
            .and_then(|s| s.last())
            .map_or(NodePhase::Defined, |s| s.phase)
    }

    pub fn cluster_phase(&self) -> Option<ClusterPhase> {
        self.cluster.last().map(|s| s.phase)
    }

    /// Applies one journal event for `node`; returns the phase change, if any.
    pub fn apply(&mut self, node: &str, kind: &EventKind, at: u64) -> Option<Change> {
        match transition(kind)? {
            Transition::Reach(phase) => self.reach(node, phase, at),
            Transition::Forget(phase) => {
                let steps = self.nodes.entry(node.to_owned()).or_default();
                let before = steps.last().map_or(NodePhase::Defined, |s| s.phase);
                steps.retain(|s| s.phase < phase);
                let after = steps.last().map_or(NodePhase::Defined, |s| s.phase);
                (before != after).then(|| Change {
                    node: Some(node.to_owned()),
                    phase: after.name(),
                    took: None,
                })
            }
            Transition::Back(phase) => {
                let steps = self.nodes.entry(node.to_owned()).or_default();
                let before = steps.last().map(|s| s.phase);
                steps.retain(|s| s.phase < phase);
                if phase != NodePhase::Defined {
                    steps.push(Step { phase, at });
                }
                let after = steps.last().map_or(NodePhase::Defined, |s| s.phase);
                (before != Some(after) || phase != NodePhase::Defined).then(|| Change {
                    node: Some(node.to_owned()),
                    phase: after.name(),
                    took: None,
                })
            }
        }
    }

    /// Moves `node` forward to `phase` (nothing if it is there or past it already).
    pub fn reach(&mut self, node: &str, phase: NodePhase, at: u64) -> Option<Change> {
        let steps = self.nodes.entry(node.to_owned()).or_default();
        let current = steps.last().map_or(NodePhase::Defined, |s| s.phase);
        if phase <= current {
            return None;
        }
        let took = steps
            .last()
            .map(|s| Duration::from_secs(at.saturating_sub(s.at)));
        steps.push(Step { phase, at });
        Some(Change {
            node: Some(node.to_owned()),
            phase: phase.name(),
            took,
        })
    }

    /// Moves the cluster forward to `phase` (nothing if it is there or past it already).
    pub fn advance_cluster(&mut self, phase: ClusterPhase, at: u64) -> Option<Change> {
        if self.cluster_phase().is_some_and(|c| c >= phase) {
            return None;
        }
        let took = self
            .cluster
            .last()
            .map(|s| Duration::from_secs(at.saturating_sub(s.at)));
        self.cluster.push(Step { phase, at });
        Some(Change {
            node: None,
            phase: phase.name(),
            took,
        })
    }

    /// What the install markers say and this record missed (written while the record could
    /// not be, or by an older appliance).
    fn reconcile(&mut self, node: &str, state: NodeState, at: u64) {
        let phase = match state {
            NodeState::NotInstalled => return,
            NodeState::Installing { .. } => NodePhase::Ignition,
            NodeState::Installed { .. } => NodePhase::Installed,
        };
        self.reach(node, phase, at);
    }
}

pub fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The shared record, its file and the journal its changes go to.
#[derive(Debug, Clone)]
pub struct Phases {
    inner: Arc<Mutex<Progress>>,
    path: PathBuf,
    /// Held while the record is written: one writer of the temporary file at a time.
    writing: Arc<Mutex<()>>,
    journal: Journal,
    /// Where a failed write is reported (`status`), and the cluster it is of.
    faults: Option<(crate::faults::Faults, Option<String>)>,
}

/// The fault a record that can't be written is shown as.
pub const FAULT: &str = "install phases";

impl Phases {
    /// Reads the record of `state_dir` (an absent file is an empty record; an unreadable one is
    /// an error, never silently replaced) and reconciles it with the install markers of
    /// `nodes`.
    pub fn load(state_dir: &Path, nodes: &[String], journal: Journal) -> io::Result<Phases> {
        let path = state_dir.join(FILE_NAME);
        let mut progress = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is not an install-phase record: {e} (move it away to start over)",
                        path.display()
                    ),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Progress::default(),
            Err(e) => return Err(e),
        };
        let now = unix_seconds(SystemTime::now());
        for node in nodes {
            progress.reconcile(node, install_state::load(state_dir, node), now);
        }
        Ok(Phases {
            inner: Arc::new(Mutex::new(progress)),
            path,
            writing: Arc::default(),
            faults: None,
            journal,
        })
    }

    pub fn snapshot(&self) -> Progress {
        self.lock().clone()
    }

    /// Brings the record up to the install markers of `nodes` (after missed journal events:
    /// the markers are written whether or not anyone heard of them), and saves it if that
    /// changed anything.
    pub async fn reconcile_markers(&self, state_dir: PathBuf, nodes: Vec<String>) {
        let markers = tokio::task::spawn_blocking(move || {
            nodes
                .into_iter()
                .map(|n| {
                    let phase = install_state::load(&state_dir, &n);
                    (n, phase)
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let changed = {
            let mut progress = self.lock();
            let before = progress.clone();
            let now = unix_seconds(SystemTime::now());
            for (node, phase) in &markers {
                progress.reconcile(node, *phase, now);
            }
            *progress != before
        };
        if changed {
            self.save().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies a journal event; a change is saved and announced.
    pub async fn observe(&self, event: &Event) {
        let Some(node) = &event.node else { return };
        let change = self.lock().apply(node, &event.kind, unix_seconds(event.at));
        self.commit(change).await;
    }

    pub async fn reach(&self, node: &str, phase: NodePhase) {
        let change = self
            .lock()
            .reach(node, phase, unix_seconds(SystemTime::now()));
        self.commit(change).await;
    }

    pub async fn advance_cluster(&self, phase: ClusterPhase) {
        let change = self
            .lock()
            .advance_cluster(phase, unix_seconds(SystemTime::now()));
        self.commit(change).await;
    }

    /// Changes the record with `f` and saves it.
    pub async fn update(&self, f: impl FnOnce(&mut Progress)) {
        f(&mut self.lock());
        self.save().await;
    }

    async fn commit(&self, change: Option<Change>) {
        let Some(change) = change else { return };
        self.save().await;
        let kind = if change.node.is_some() {
            EventKind::NodePhase {
                phase: change.phase,
                took: change.took,
            }
        } else {
            EventKind::ClusterPhase {
                phase: change.phase,
                took: change.took,
            }
        };
        self.journal.publish(change.node, kind);
    }

    /// Writes the record atomically, on the blocking pool; returns once it is written. A
    /// failure is logged: the phases are a record of what happened, and the install markers
    /// keep what the services need.
    async fn save(&self) {
        let this = self.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || this.write()).await {
            tracing::error!("can't save {}: {e}", self.path.display());
        }
    }

    /// Writes the record as it is now. Writers take turns, so the file ends with the newest
    /// record whatever order concurrent saves run in.
    fn write(&self) {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let report = |error: Option<String>| {
            if let Some((faults, scope)) = &self.faults {
                match error {
                    Some(e) => faults.record(
                        FAULT,
                        scope.as_deref(),
                        crate::faults::FaultState::Unwritable,
                        Some(&e),
                    ),
                    None => faults.clear(FAULT, scope.as_deref()),
                }
            }
        };
        let bytes = match serde_json::to_vec_pretty(&*self.lock()) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("can't encode the install phases: {e}");
                return;
            }
        };
        match crate::durable::write(&self.path, &bytes) {
            Ok(()) => report(None),
            Err(e) => {
                tracing::error!("can't save {}: {e}", self.path.display());
                report(Some(format!("{}: {e}", self.path.display())));
            }
        }
    }

    /// Reports a write that fails as a fault of `scope` (a host file's cluster) in `faults`,
    /// cleared by the next write that succeeds.
    pub fn reporting(mut self, faults: crate::faults::Faults, scope: Option<String>) -> Phases {
        self.faults = Some((faults, scope));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::MacAddr;

    fn from() -> std::net::SocketAddr {
        "10.0.0.2:40000".parse().unwrap()
    }

    /// Applies each event at seconds 1, 2, 3, ... and returns the phase names announced.
    fn run(progress: &mut Progress, events: &[EventKind]) -> Vec<String> {
        let mut announced = Vec::new();
        for (i, kind) in events.iter().enumerate() {
            if let Some(c) = progress.apply("master-0", kind, 100 + i as u64) {
                announced.push(format!(
                    "{}{}",
                    c.phase,
                    c.took
                        .map(|t| format!("+{}", t.as_secs()))
                        .unwrap_or_default()
                ));
            }
        }
        announced
    }

    fn machine(action: &'static str, ok: bool) -> EventKind {
        EventKind::Machine {
            action,
            result: if ok {
                Ok("done".into())
            } else {
                Err("no".into())
            },
        }
    }

    #[test]
    fn an_install_goes_forward_one_phase_at_a_time() {
        let mut p = Progress::default();
        let announced = run(
            &mut p,
            &[
                machine("create", true),
                machine("start", false),
                machine("start", true),
                EventKind::DhcpAck {
                    mac: MacAddr([0x52, 0x54, 0, 0, 0, 2]),
                    ip: "10.0.0.2".parse().unwrap(),
                },
                EventKind::ScriptFetched { from: from() },
                EventKind::ArtifactFetched {
                    from: from(),
                    file: "kernel".into(),
                },
                EventKind::ArtifactFetched {
                    from: from(),
                    file: "initramfs.img".into(),
                },
                EventKind::IgnitionFetched { from: from() },
                // The installed system renews its lease and boots through its script again:
                // no step back.
                EventKind::DhcpAck {
                    mac: MacAddr([0x52, 0x54, 0, 0, 0, 2]),
                    ip: "10.0.0.2".parse().unwrap(),
                },
                EventKind::Installed {
                    from: from(),
                    file: "master.ign",
                },
                EventKind::PlanLoaded { serial: 3 },
            ],
        );
        assert_eq!(
            announced,
            [
                "created",
                "powered-on+2",
                "dhcp+1",
                "script+1",
                "kernel-initrd+1",
                "ignition+2",
                "installed+2"
            ]
        );
        assert_eq!(p.node_phase("master-0"), NodePhase::Installed);
        assert_eq!(p.node_phase("worker-9"), NodePhase::Defined);
        assert!(p.reach("master-0", NodePhase::Joined, 200).is_some());
        assert!(p.reach("master-0", NodePhase::Joined, 201).is_none());
        assert_eq!(p.nodes["master-0"].len(), 8);
    }

    #[test]
    fn starting_over_keeps_what_still_holds() {
        let mut p = Progress::default();
        run(
            &mut p,
            &[
                machine("create", true),
                machine("start", true),
                EventKind::ScriptFetched { from: from() },
                EventKind::IgnitionFetched { from: from() },
                // The install failed; the installer runs again.
                EventKind::InstallRetried,
            ],
        );
        let phases: Vec<_> = p.nodes["master-0"].iter().map(|s| s.phase).collect();
        assert_eq!(
            phases,
            [
                NodePhase::Created,
                NodePhase::PoweredOn,
                NodePhase::Script,
                NodePhase::Ignition
            ]
        );
        assert_eq!(p.nodes["master-0"][3].at, 104, "the retry's time");
        run(&mut p, &[EventKind::ReinstallRequested]);
        assert_eq!(p.node_phase("master-0"), NodePhase::PoweredOn);
        // A node no provider created or started (provider: none): a reinstall takes it back
        // to defined, not to a power state the appliance never saw.
        p.apply("worker-0", &EventKind::ScriptFetched { from: from() }, 300);
        p.apply(
            "worker-0",
            &EventKind::IgnitionFetched { from: from() },
            301,
        );
        p.apply("worker-0", &EventKind::ReinstallRequested, 302);
        assert_eq!(p.node_phase("worker-0"), NodePhase::Defined);
        assert!(p.nodes["worker-0"].is_empty());
        run(&mut p, &[machine("destroy", true)]);
        assert_eq!(p.node_phase("master-0"), NodePhase::Defined);
        assert!(p.nodes["master-0"].is_empty());
    }

    /// An installed node whose installer fetches its ignition again (it booted its ISO): back
    /// to `ignition`, with the fetch's time, which the CSR approval window counts from.
    #[test]
    fn an_installed_node_that_installs_again_is_back_at_ignition_from_then() {
        let mut p = Progress::default();
        p.apply("m0", &EventKind::IgnitionFetched { from: from() }, 100);
        p.apply(
            "m0",
            &EventKind::Installed {
                from: from(),
                file: "master.ign",
            },
            200,
        );
        assert_eq!(p.node_phase("m0"), NodePhase::Installed);
        // The fetch alone can't move an installed node back; the event that says what it
        // means does.
        assert!(
            p.apply("m0", &EventKind::IgnitionFetched { from: from() }, 300)
                .is_none()
        );
        let change = p
            .apply("m0", &EventKind::Reinstalling, 300)
            .expect("a change");
        assert_eq!(change.phase, "ignition");
        assert_eq!(p.node_phase("m0"), NodePhase::Ignition);
        assert_eq!(
            p.nodes["m0"].last().unwrap().at,
            300,
            "the reinstall's time"
        );
    }

    #[test]
    fn the_cluster_only_moves_forward() {
        let mut p = Progress::default();
        assert!(p.advance_cluster(ClusterPhase::Bootstrapping, 10).is_some());
        let c = p
            .advance_cluster(ClusterPhase::BootstrapComplete, 70)
            .unwrap();
        assert_eq!(
            (c.phase, c.took),
            ("bootstrap-complete", Some(Duration::from_secs(60)))
        );
        assert!(p.advance_cluster(ClusterPhase::Bootstrapping, 80).is_none());
        assert_eq!(p.cluster_phase(), Some(ClusterPhase::BootstrapComplete));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_saves_leave_the_newest_record() {
        let dir = tempfile::tempdir().unwrap();
        let phases = Phases::load(dir.path(), &[], Journal::new()).unwrap();
        let mut saves = tokio::task::JoinSet::new();
        for i in 0..64 {
            let phases = phases.clone();
            saves.spawn(async move { phases.update(|p| p.workers_wanted = Some(i)).await });
        }
        while let Some(done) = saves.join_next().await {
            done.unwrap();
        }
        let again = Phases::load(dir.path(), &[], Journal::new()).unwrap();
        assert_eq!(again.snapshot(), phases.snapshot());
        assert!(!dir.path().join(".install-phases.json.tmp").exists());
    }

    #[tokio::test]
    async fn a_record_that_cant_be_written_is_a_fault_until_it_can() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let faults = crate::faults::Faults::default();
        let scope = Some("cluster okd".to_owned());
        let phases = Phases::load(&state, &[], Journal::new())
            .unwrap()
            .reporting(faults.clone(), scope);
        // The state directory gone from under it (root writes through permissions, so a
        // file where the directory was stands for a full or read-only disk).
        std::fs::remove_dir(&state).unwrap();
        std::fs::write(&state, b"").unwrap();
        phases.update(|p| p.up_requested = true).await;
        let listed = faults.list();
        let [fault] = listed.as_slice() else {
            panic!("{listed:?}");
        };
        assert_eq!(
            (fault.service.as_str(), fault.scope.as_deref(), fault.state),
            (
                FAULT,
                Some("cluster okd"),
                crate::faults::FaultState::Unwritable
            )
        );
        assert!(fault.error.contains(FILE_NAME), "{}", fault.error);
        std::fs::remove_file(&state).unwrap();
        std::fs::create_dir(&state).unwrap();
        phases.update(|p| p.workers_wanted = Some(2)).await;
        assert!(faults.list().is_empty(), "{:?}", faults.list());
        let saved = Phases::load(&state, &[], Journal::new())
            .unwrap()
            .snapshot();
        assert!(
            saved.up_requested,
            "the change the failed write held is written with the next"
        );
    }

    #[tokio::test]
    async fn the_record_survives_a_restart_and_catches_up_with_the_markers() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::new();
        let nodes = vec!["master-0".to_owned(), "worker-0".to_owned()];
        let phases = Phases::load(dir.path(), &nodes, journal.clone()).unwrap();
        phases.advance_cluster(ClusterPhase::Bootstrapping).await;
        phases.update(|p| p.up_requested = true).await;
        // The client certificate approved for worker-0's attempt 7 (issue 40: kept past the
        // API's one-hour garbage collection of approved requests, and past a restart).
        phases
            .update(|p| {
                p.approved_clients.insert("worker-0".into(), 7);
            })
            .await;
        phases
            .observe(&Event {
                at: SystemTime::now(),
                node: Some("master-0".into()),
                kind: EventKind::ScriptFetched { from: from() },
            })
            .await;
        assert!(
            journal
                .recent()
                .iter()
                .any(|e| e.to_string() == "master-0: phase script")
        );
        // Written by the HTTP service while no record was kept.
        let role = install_state::Observation::RoleConfig {
            from: from(),
            file: "worker.ign",
            by_installed_system: true,
        };
        install_state::step(dir.path(), "worker-0", role, SystemTime::now())
            .recorded
            .unwrap();
        let again = Phases::load(dir.path(), &nodes, Journal::new()).unwrap();
        let p = again.snapshot();
        assert!(p.up_requested);
        assert_eq!(p.approved_clients.get("worker-0"), Some(&7));
        assert_eq!(p.cluster_phase(), Some(ClusterPhase::Bootstrapping));
        assert_eq!(p.node_phase("master-0"), NodePhase::Script);
        assert_eq!(p.node_phase("worker-0"), NodePhase::Installed);
        // Events missed while running (a lagging subscriber): the markers bring it up.
        let ignition = install_state::Observation::Ignition { from: from() };
        install_state::step(dir.path(), "master-0", ignition, SystemTime::now())
            .recorded
            .unwrap();
        again
            .reconcile_markers(dir.path().to_owned(), nodes.clone())
            .await;
        assert_eq!(again.snapshot().node_phase("master-0"), NodePhase::Ignition);
        let saved = Phases::load(dir.path(), &[], Journal::new()).unwrap();
        assert_eq!(saved.snapshot().node_phase("master-0"), NodePhase::Ignition);
        std::fs::write(dir.path().join(FILE_NAME), b"{ not json").unwrap();
        let e = Phases::load(dir.path(), &nodes, Journal::new()).unwrap_err();
        assert!(e.to_string().contains("not an install-phase record"), "{e}");
    }
}
