//! What `okd-appliance status` shows: the appliance (version, uptime, plan serial, services and
//! listeners, its place in a pair), each node (reservation, last DHCP exchange, script, kernel,
//! ignition and role config fetched, install phase) and each load-balancer backend (state and
//! since when, draining, connections).
//!
//! Architecture invariant: reads only (the plan, the journal's history, the pools' counters,
//! the phase record); [`collect`] builds the whole picture at one moment, and the admin socket
//! and the status page serve it as JSON.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::journal::{Event, EventKind};
use crate::lb::pool::Pools;
use crate::orchestration::phases::Progress;
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    pub service: String,
    pub proto: String,
    pub addr: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HaStatus {
    pub host: String,
    pub active: bool,
    pub replication_connected: bool,
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendStatus {
    pub frontend: String,
    pub node: String,
    pub addr: SocketAddr,
    /// `up`, `down`, `draining` or `off` (a frontend without a listener).
    pub state: String,
    /// When its health last changed, as the journal has it.
    pub since: Option<u64>,
    pub active: usize,
    pub connections: u64,
    pub bytes_to_backend: u64,
    pub bytes_to_client: u64,
}

/// What does not change while the appliance runs.
#[derive(Debug, Clone)]
pub struct Fixed {
    pub started: SystemTime,
    pub listeners: Vec<Listener>,
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The picture at `now`.
pub fn collect(
    fixed: &Fixed,
    plan: &Plan,
    events: &[Event],
    pools: &Pools,
    progress: Option<&Progress>,
    ha: Option<HaStatus>,
    now: SystemTime,
) -> Status {
    // The last time each (node, what) happened.
    let mut last: HashMap<(&str, &'static str), u64> = HashMap::new();
    let mut health_since: HashMap<(String, SocketAddr), u64> = HashMap::new();
    for e in events {
        let at = secs(e.at);
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
        }
    }
    let nodes = plan
        .boot
        .iter()
        .map(|b| {
            use crate::orchestration::phases::NodePhase;
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
            NodeStatus {
                name: b.node.clone(),
                role: b.role.as_str().to_owned(),
                mac: b.mac.to_string(),
                ip: b.ipv4.to_string(),
                phase: progress
                    .map_or(crate::orchestration::phases::NodePhase::Defined, |p| {
                        p.node_phase(&b.node)
                    })
                    .name()
                    .to_owned(),
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
            since: health_since
                .get(&(pool.kind.name().to_owned(), b.addr))
                .copied(),
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
            plan_serial: plan.zones.first().map_or(0, |z| z.soa().serial),
            listeners: fixed.listeners.clone(),
            ha,
            cluster_phase: progress
                .and_then(Progress::cluster_phase)
                .map(|p| p.name().to_owned()),
        },
        nodes,
        backends,
    }
}

/// What `/metrics` reads at scrape time: the load balancer's counters and each node's phase.
#[derive(Debug)]
pub struct Sampler {
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

    fn phases(&self) -> Vec<(String, &'static str)> {
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
                (b.node.clone(), phase.name())
            })
            .collect()
    }
}
