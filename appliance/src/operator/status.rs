//! What `okd-appliance status` shows: the appliance (version, uptime, plan serial, services and
//! listeners, its place in a pair), each node (reservation, last DHCP exchange, script, kernel,
//! ignition and role config fetched, install phase) and each load-balancer backend (state and
//! since when, last health check, draining, connections and bytes); what each node and the
//! cluster wait for, and every phase's time (the status page's timeline). A node's history
//! comes from the journal, or from the persisted phase record after a restart. Its `problem` is
//! the last file its boot asked for that the boot server couldn't serve (a missing artifact or
//! iPXE binary, `FetchFailed`, with the fix; or an unusable ignition), until a later step shows
//! it got past it. A backend's last check and the time of its state are kept in atomics the
//! health checker and drain write (`Backend::record_check`, `Backend::state_since`); the data
//! path writes none of them.
//!
//! Architecture invariant: reads only (the plan, the journal's history, the pools' counters,
//! the phase record); [`collect`] builds the whole picture at one moment, and the admin socket
//! and the status page serve it as JSON.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::journal::{Event, EventKind};
use crate::lb::pool::Pools;
use crate::orchestration::phases::{ClusterPhase, NodePhase, Progress};
use crate::plan::Plan;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub appliance: Appliance,
    pub nodes: Vec<NodeStatus>,
    pub backends: Vec<BackendStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appliance {
    pub version: String,
    pub started: u64,
    pub uptime_secs: u64,
    pub plan_serial: u32,
    pub listeners: Vec<Listener>,
    /// In a pair: this host, whether it is active, the replication link.
    pub ha: Option<HaStatus>,
    /// The cluster's install phase, when an install was started.
    pub cluster_phase: Option<String>,
    /// Each cluster phase reached, with when (the timeline's milestones).
    #[serde(default)]
    pub cluster_steps: Vec<PhaseAt>,
    /// What the install waits for now, decided in the phase it is in.
    #[serde(default)]
    pub cluster_waiting: Option<String>,
    /// Where to reach this appliance: the admin socket, the API's socket and TCP address.
    #[serde(default)]
    pub endpoints: Option<Endpoints>,
    /// Services that failed since start (restarted, or down) and listeners that could not be
    /// bound: everything else kept serving. Left out when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<ServiceFault>,
}

pub use crate::faults::{FaultState, Faults, ServiceFault};

/// One fault as `status` and the page say it: `dns of cluster okd restarting (2 restarts):
/// ERROR, 5s ago`.
pub fn fault_line(f: &ServiceFault, now: u64) -> String {
    let whose = f
        .scope
        .as_deref()
        .map(|s| format!(" of {s}"))
        .unwrap_or_default();
    let restarts = match f.restarts {
        0 => String::new(),
        1 => " (1 restart)".to_owned(),
        n => format!(" ({n} restarts)"),
    };
    format!(
        "{}{whose} {}{restarts}: {}, {} ago",
        f.service,
        f.state.name(),
        f.error,
        humantime::format_duration(std::time::Duration::from_secs(now.saturating_sub(f.at)))
    )
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    pub admin_socket: String,
    pub api_socket: String,
    /// `https://ADDR/`, when `api.listen` is set.
    pub api_url: Option<String>,
}

/// A phase and when it was reached (seconds since the epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseAt {
    pub phase: String,
    pub at: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    pub service: String,
    pub proto: String,
    pub addr: SocketAddr,
    /// The host file's cluster whose listener this is (its boot server, load balancer); `None`:
    /// the host's, serving every cluster (DNS, DHCP, TFTP, the shared frontend, the API), or a
    /// cluster file's. A cluster's status shows the host's and its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HaStatus {
    pub host: String,
    pub active: bool,
    pub replication_connected: bool,
    /// A host file's replication channels (`cluster/<id>`, `segment/<interface>`) without a
    /// session in this host's direction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replication_waiting: Vec<String>,
    pub replication_updates: u64,
    pub last_update: Option<u64>,
}

/// Times are seconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub name: String,
    pub role: String,
    pub mac: String,
    pub ip: String,
    pub phase: String,
    pub dhcp: Option<u64>,
    pub script: Option<u64>,
    pub kernel: Option<u64>,
    pub ignition: Option<u64>,
    pub installed: Option<u64>,
    /// Every phase it reached in its current install, in order, with when.
    #[serde(default)]
    pub steps: Vec<PhaseAt>,
    /// What it waits for now ("its ignition fetch"), when anything.
    #[serde(default)]
    pub waiting_for: Option<String>,
    /// Why it may wait for ever: the last file its boot asked for that could not be served
    /// (missing, expired), with the fix, unless it moved on since.
    #[serde(default)]
    pub problem: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendStatus {
    pub frontend: String,
    pub node: String,
    pub addr: SocketAddr,
    /// `up`, `down`, `draining` or `off` (a frontend without a listener).
    pub state: String,
    /// When its state last changed (health, drain), as the backend or the journal has it.
    pub since: Option<u64>,
    /// Its last health check.
    #[serde(default)]
    pub check: Option<CheckStatus>,
    pub active: usize,
    pub connections: u64,
    pub bytes_to_backend: u64,
    pub bytes_to_client: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckStatus {
    pub passed: bool,
    pub latency_us: u64,
    pub at: u64,
}

/// What does not change while the appliance runs.
#[derive(Debug, Clone)]
pub struct Fixed {
    pub started: SystemTime,
    /// What failed and what is being done about it (the supervisor writes, status reads).
    pub faults: Faults,
    /// Every socket the appliance listens on now: a reload that adds or removes a cluster
    /// swaps the list.
    pub listeners: Arc<arc_swap::ArcSwap<Vec<Listener>>>,
    pub endpoints: Option<Endpoints>,
}

/// What a node in `phase` (from the phase record) waits for next, as the page and `status`
/// say it; `cluster`: the cluster's phase (a bootstrap node is done once bootstrap completed).
pub fn node_waiting(
    role: &str,
    phase: NodePhase,
    cluster: Option<ClusterPhase>,
) -> Option<&'static str> {
    // Once bootstrap completed, the bootstrap node is done with, whatever its phase.
    if role == "bootstrap" && cluster.is_some_and(|c| c >= ClusterPhase::BootstrapComplete) {
        return None;
    }
    Some(match phase {
        NodePhase::Defined if cluster.is_some() => "waiting for its machine to be created",
        NodePhase::Defined => "waiting for its first DHCP request",
        NodePhase::Created => "waiting to be powered on",
        NodePhase::PoweredOn => "waiting for its DHCP request",
        NodePhase::Dhcp => "waiting for its iPXE script fetch",
        NodePhase::Script => "waiting for its kernel and initramfs fetch",
        NodePhase::KernelInitrd => "waiting for its ignition fetch",
        NodePhase::Ignition => "installing: waiting for the installed system's first boot",
        NodePhase::Installed if role == "bootstrap" => "running the bootstrap control plane",
        NodePhase::Installed => "waiting for CSR approval and its Node object",
        NodePhase::Joined => "waiting to be Ready",
        NodePhase::Ready => return None,
    })
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The picture at `now`; `install`: the phase record and what the install waits for in its
/// phase, when this appliance tracks the install.
pub fn collect(
    fixed: &Fixed,
    plan: &Plan,
    events: &[Event],
    pools: &Pools,
    install: Option<(&Progress, Option<String>)>,
    ha: Option<HaStatus>,
    now: SystemTime,
) -> Status {
    // The phase record, and what the install waits for in its phase.
    let (progress, cluster_waiting) = match install {
        Some((p, waiting)) => (Some(p), waiting),
        None => (None, None),
    };
    // The last time each (node, what) happened.
    let mut last: HashMap<(&str, &'static str), u64> = HashMap::new();
    let mut health_since: HashMap<(String, SocketAddr), u64> = HashMap::new();
    // Each node's last step and last failed fetch (events are in order).
    let mut moved: HashMap<&str, u64> = HashMap::new();
    let mut failed: HashMap<&str, (u64, String)> = HashMap::new();
    for e in events {
        let at = secs(e.at);
        if let (EventKind::FetchFailed { .. } | EventKind::IgnitionUnavailable { .. }, Some(node)) =
            (&e.kind, e.node.as_deref())
        {
            // The event without its node's name, which the row already shows.
            let said = e.to_string();
            let why = said.strip_prefix(&format!("{node}: ")).unwrap_or(&said);
            failed.insert(node, (at, why.to_owned()));
        }
        let what = match &e.kind {
            EventKind::DhcpAck { .. } => Some("dhcp"),
            EventKind::ScriptFetched { .. } => Some("script"),
            EventKind::ArtifactFetched { .. } | EventKind::IsoFetched { boots: true, .. } => {
                Some("kernel")
            }
            EventKind::IgnitionFetched { .. } => Some("ignition"),
            EventKind::Installed { .. } => Some("installed"),
            EventKind::BackendHealth {
                frontend, backend, ..
            } => {
                health_since.insert((frontend.clone(), *backend), at);
                None
            }
            _ => None,
        };
        if let (Some(what), Some(node)) = (what, e.node.as_deref()) {
            last.insert((node, what), at);
            moved.insert(node, at);
        }
    }
    let nodes = plan
        .boot
        .iter()
        .map(|b| {
            // The journal's history is this process's; the phase record survives restarts and
            // has when each phase was first reached.
            let reached = |phase: NodePhase| {
                progress
                    .and_then(|p| p.nodes.get(&b.node))
                    .and_then(|steps| steps.iter().find(|s| s.phase == phase))
                    .map(|s| s.at)
            };
            let at = |what| {
                last.get(&(b.node.as_str(), what)).copied().or_else(|| {
                    reached(match what {
                        "dhcp" => NodePhase::Dhcp,
                        "script" => NodePhase::Script,
                        "kernel" => NodePhase::KernelInitrd,
                        "ignition" => NodePhase::Ignition,
                        _ => NodePhase::Installed,
                    })
                })
            };
            let phase = progress.map_or(NodePhase::Defined, |p| p.node_phase(&b.node));
            // The phase record's steps; without one, what the journal saw, in install order.
            let steps = match progress.and_then(|p| p.nodes.get(&b.node)) {
                Some(steps) => steps
                    .iter()
                    .filter(|s| s.phase != NodePhase::Defined)
                    .map(|s| PhaseAt {
                        phase: s.phase.name().to_owned(),
                        at: s.at,
                    })
                    .collect(),
                None => [
                    ("dhcp", NodePhase::Dhcp),
                    ("script", NodePhase::Script),
                    ("kernel", NodePhase::KernelInitrd),
                    ("ignition", NodePhase::Ignition),
                    ("installed", NodePhase::Installed),
                ]
                .into_iter()
                .filter_map(|(what, phase)| {
                    Some(PhaseAt {
                        phase: phase.name().to_owned(),
                        at: *last.get(&(b.node.as_str(), what))?,
                    })
                })
                .collect(),
            };
            let role = b.role.as_str();
            NodeStatus {
                name: b.node.clone(),
                role: role.to_owned(),
                mac: b.mac.to_string(),
                ip: b.ipv4.to_string(),
                phase: phase.name().to_owned(),
                // Without the phase record the phase is unknown, and so is what comes next.
                waiting_for: progress
                    .and_then(|p| node_waiting(role, phase, p.cluster_phase()))
                    .map(str::to_owned),
                // A failure is its problem until a later step shows it got past it.
                problem: failed
                    .get(b.node.as_str())
                    .filter(|(at, _)| moved.get(b.node.as_str()).is_none_or(|m| m <= at))
                    .map(|(_, why)| why.clone()),
                steps,
                dhcp: at("dhcp"),
                script: at("script"),
                kernel: at("kernel"),
                ignition: at("ignition"),
                installed: at("installed"),
            }
        })
        .collect();
    let mut backends = Vec::new();
    for (pool, b) in pools.backends() {
        let state = b.state(pool.served);
        backends.push(BackendStatus {
            frontend: pool.kind.name().to_owned(),
            node: b.name.clone(),
            addr: b.addr,
            state: state.to_owned(),
            since: b.state_since().or_else(|| {
                health_since
                    .get(&(pool.kind.name().to_owned(), b.addr))
                    .copied()
            }),
            check: b.last_check().map(|c| CheckStatus {
                passed: c.passed,
                latency_us: u64::try_from(c.took.as_micros()).unwrap_or(u64::MAX),
                at: c.at,
            }),
            active: b.active(),
            connections: b.connections.load(Ordering::Relaxed),
            bytes_to_backend: b.bytes_to_backend.load(Ordering::Relaxed),
            bytes_to_client: b.bytes_to_client.load(Ordering::Relaxed),
        });
    }
    Status {
        appliance: Appliance {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started: secs(fixed.started),
            uptime_secs: secs(now).saturating_sub(secs(fixed.started)),
            plan_serial: plan.serial,
            listeners: fixed
                .listeners
                .load()
                .iter()
                .filter(|l| {
                    l.cluster.is_none() || l.cluster.as_deref() == plan.host_cluster.as_deref()
                })
                .cloned()
                .collect(),
            ha,
            cluster_phase: progress
                .and_then(Progress::cluster_phase)
                .map(|p| p.name().to_owned()),
            cluster_steps: progress.map_or_else(Vec::new, |p| {
                p.cluster
                    .iter()
                    .map(|s| PhaseAt {
                        phase: s.phase.name().to_owned(),
                        at: s.at,
                    })
                    .collect()
            }),
            cluster_waiting,
            endpoints: fixed.endpoints.clone(),
            faults: fixed.faults.list(),
        },
        nodes,
        backends,
    }
}

/// What `/metrics` reads at scrape time: the load balancer's counters and each node's phase.
#[derive(Debug, Clone)]
pub struct Sampler {
    /// The cluster's id on a host of several; `None` alone.
    pub cluster: Option<String>,
    pub pools: crate::lb::SharedPools,
    pub orchestrator: Option<crate::orchestration::Orchestrator>,
    pub plan: crate::plan::Handle,
}

impl crate::metrics::Sources for Sampler {
    fn backends(&self) -> Vec<crate::metrics::BackendSample> {
        let pools = self.pools.load();
        pools
            .served()
            .map(|(p, b)| crate::metrics::BackendSample {
                cluster: self.cluster.clone(),
                frontend: p.kind.name(),
                node: b.name.clone(),
                addr: b.addr.to_string(),
                up: b.is_up(),
                draining: b.is_draining(),
                active: b.active() as u64,
                connections: b.connections.load(Ordering::Relaxed),
                bytes_to_backend: b.bytes_to_backend.load(Ordering::Relaxed),
                bytes_to_client: b.bytes_to_client.load(Ordering::Relaxed),
            })
            .collect()
    }

    fn phases(&self) -> Vec<crate::metrics::PhaseSample> {
        let progress = self.orchestrator.as_ref().map(|o| o.progress());
        self.plan
            .load()
            .boot
            .iter()
            .map(|b| {
                let phase = progress
                    .as_ref()
                    .map_or(crate::orchestration::phases::NodePhase::Defined, |p| {
                        p.node_phase(&b.node)
                    });
                crate::metrics::PhaseSample {
                    cluster: self.cluster.clone(),
                    node: b.node.clone(),
                    phase: phase.name(),
                }
            })
            .collect()
    }
}

/// Every cluster's samples, one after the other; a reload that adds or removes a cluster
/// replaces the list.
#[derive(Debug, Clone, Default)]
pub struct Samplers(Arc<arc_swap::ArcSwap<Vec<Sampler>>>);

impl Samplers {
    pub fn replace(&self, samplers: Vec<Sampler>) {
        self.0.store(Arc::new(samplers));
    }
}

impl crate::metrics::Sources for Samplers {
    fn backends(&self) -> Vec<crate::metrics::BackendSample> {
        self.0.load().iter().flat_map(|s| s.backends()).collect()
    }

    fn phases(&self) -> Vec<crate::metrics::PhaseSample> {
        self.0.load().iter().flat_map(|s| s.phases()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node whose kernel is missing says so until a later step shows it got past it.
    #[test]
    fn a_failed_fetch_is_the_nodes_problem_until_it_moves_on() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
        let text = std::fs::read_to_string(dir.join("baremetal.yml")).unwrap();
        let loaded = crate::config::parse(
            &text,
            "baremetal.yml",
            &dir,
            crate::config::InstallCheck::Skip,
        )
        .unwrap_or_else(|e| panic!("{}", e.render(crate::config::RenderStyle::Plain)));
        let plan = Plan::derive(&loaded.config, 1);
        let node = plan.boot[0].node.clone();
        let from = SocketAddr::new(std::net::IpAddr::V4(plan.boot[0].ipv4), 40000);
        let fixed = Fixed {
            started: SystemTime::UNIX_EPOCH,
            faults: Faults::default(),
            listeners: Arc::default(),
            endpoints: None,
        };
        let pools = crate::lb::shared_pools(&plan);
        let event = |secs, kind| Event {
            at: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs),
            node: Some(node.clone()),
            kind,
        };
        let mut events = vec![
            event(10, EventKind::ScriptFetched { from }),
            event(
                11,
                EventKind::FetchFailed {
                    from,
                    file: "kernel".to_owned(),
                    status: 404,
                    fix: "not in /srv/a: fetch it".to_owned(),
                },
            ),
        ];
        let problem = |events: &[Event]| {
            let s = collect(
                &fixed,
                &plan,
                events,
                &pools.load(),
                None,
                None,
                SystemTime::now(),
            );
            s.nodes
                .into_iter()
                .find(|n| n.name == node)
                .unwrap()
                .problem
        };
        assert_eq!(
            problem(&events).as_deref(),
            Some(&*format!(
                "kernel can't be served to {from} (404): not in /srv/a: fetch it"
            ))
        );
        events.push(event(
            12,
            EventKind::ArtifactFetched {
                from,
                file: "kernel".to_owned(),
            },
        ));
        assert_eq!(problem(&events), None);
    }

    #[test]
    fn each_node_phase_says_what_comes_next() {
        let next = |role, phase, cluster| node_waiting(role, phase, cluster);
        assert_eq!(
            next("master", NodePhase::KernelInitrd, None),
            Some("waiting for its ignition fetch")
        );
        assert_eq!(
            next(
                "worker",
                NodePhase::Installed,
                Some(ClusterPhase::WorkersJoining)
            ),
            Some("waiting for CSR approval and its Node object")
        );
        assert_eq!(
            next("master", NodePhase::Defined, None),
            Some("waiting for its first DHCP request")
        );
        assert_eq!(
            next(
                "master",
                NodePhase::Defined,
                Some(ClusterPhase::Bootstrapping)
            ),
            Some("waiting for its machine to be created")
        );
        assert_eq!(
            next(
                "bootstrap",
                NodePhase::Installed,
                Some(ClusterPhase::Bootstrapping)
            ),
            Some("running the bootstrap control plane")
        );
        assert_eq!(
            next(
                "bootstrap",
                NodePhase::Installed,
                Some(ClusterPhase::BootstrapComplete)
            ),
            None,
            "a bootstrap node is done once bootstrap completed"
        );
        assert_eq!(
            next(
                "bootstrap",
                NodePhase::Defined,
                Some(ClusterPhase::Installed)
            ),
            None,
            "whatever its phase (it may never have been started here)"
        );
        assert_eq!(
            next("master", NodePhase::Joined, None),
            Some("waiting to be Ready")
        );
        assert_eq!(next("master", NodePhase::Ready, None), None);
        // Every phase but the last waits for something.
        for phase in NodePhase::ALL {
            assert_eq!(
                next("master", phase, Some(ClusterPhase::Bootstrapping)).is_none(),
                phase == NodePhase::Ready,
                "{phase}"
            );
        }
    }
}
