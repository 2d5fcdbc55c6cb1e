//! The operator wing: what people (and keepalived) ask a running appliance, as typed
//! operations on one [`Operator`] handle, and the fronts that carry them.
//!
//! - [`Operator`]: drain and undrain a node's backends, reinstall a node (each refused on the
//!   standby of a pair, naming the active host), reload, the whole status, the install
//!   orchestration, the pair's role. Each returns a typed result (whose `Display` is the reply
//!   line) or an [`OpError`]; the fronts only parse requests and print results.
//! - [`perform`]: the one dispatcher, a decoded [`wire::Request`] done with a typed outcome.
//! - [`admin`]: the local admin socket's line protocol (`okd-appliance lb drain NODE`, ...).
//! - [`api`]: the HTTP API and the status page ([`status_page`]); its operations are the same
//!   requests, and it answers [`OpError`] with [`OpError::http_status`] (404 an unknown node,
//!   backend or cluster; 409 the standby, no pair, a refusal, or no cluster named where several
//!   are served; 503 stopping or no orchestration; 500 a failure here); it never reads a
//!   reply's text.
//! - [`status`]: the whole status as data (and the metrics' samples); [`health`]: the probe
//!   keepalived runs on each host of a pair.
//!
//! Architecture invariants: the wing holds no state of its own (the pools, the journal, the
//! plan and the orchestrator are the services'); nothing below it imports it (only the
//! supervisor, which builds it, the fuzz targets, which build it as the supervisor does, and
//! the CLI, which talks to the admin socket); an operation's
//! outcome is parsed by no one (no text is read back to decide anything).

pub mod admin;
pub mod api;
pub mod health;
pub mod perform;
pub mod status;
pub mod status_page;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::install_state;
use crate::journal::{EventKind, Journal};
use crate::lb::SharedPools;
use crate::lb::pool::Pools;
use crate::orchestration::Orchestrator;
use crate::plan::{self, Plan};
use crate::service::Context;

/// Why an operation was not done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    #[error("no backend is named {0} in a pool that has a listener")]
    NoBackend(String),
    #[error("no node is named {0}")]
    NoNode(String),
    /// A state change asked of the standby of a pair (with where to ask instead).
    #[error("{0}")]
    Standby(String),
    #[error("this appliance is not one of a pair (no ha section)")]
    NotPaired,
    #[error("the install orchestration is unavailable: {0}")]
    NoOrchestration(String),
    /// Refused for a reason that is the asker's to fix (a reload that keeps the previous
    /// plan, an orchestration that can't start).
    #[error("{0}")]
    Refused(String),
    #[error("the appliance is stopping")]
    Stopping,
    /// Tried, and it failed here.
    #[error("{0}")]
    Failed(String),
    /// A request for one cluster, without naming which, to an appliance serving several.
    #[error("this appliance serves several clusters ({}): name one with --cluster ID", .0.join(", "))]
    WhichCluster(Vec<String>),
    #[error("no cluster has the id {id} (this appliance serves {})", ids.join(", "))]
    NoCluster { id: String, ids: Vec<String> },
}

impl OpError {
    /// The HTTP status the API answers it with.
    pub fn http_status(&self) -> u16 {
        match self {
            OpError::NoBackend(_) | OpError::NoNode(_) | OpError::NoCluster { .. } => 404,
            OpError::Standby(_)
            | OpError::NotPaired
            | OpError::Refused(_)
            | OpError::WhichCluster(_) => 409,
            OpError::NoOrchestration(_) | OpError::Stopping => 503,
            OpError::Failed(_) => 500,
        }
    }
}

/// A drain started: `pools` backends named `node`, closed after `timeout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained {
    pub node: String,
    pub pools: usize,
    pub timeout: Duration,
}

impl std::fmt::Display for Drained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} drained in {} pools; connections still open after {} will be closed",
            self.node,
            self.pools,
            humantime::format_duration(self.timeout)
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undrained {
    pub node: String,
    pub pools: usize,
}

impl std::fmt::Display for Undrained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} back in rotation in {} pools", self.node, self.pools)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reinstalled {
    pub node: String,
    /// It was marked installed (else it was going to install anyway).
    pub was_installed: bool,
}

impl std::fmt::Display for Reinstalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.was_installed {
            write!(
                f,
                "{} will install again at its next network boot",
                self.node
            )
        } else {
            write!(
                f,
                "{} was not marked installed; its next network boot installs it",
                self.node
            )
        }
    }
}

/// A machine action recorded in the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub node: String,
    pub action: &'static str,
}

impl std::fmt::Display for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} recorded", self.node, self.action)
    }
}

/// The control module's name for a machine action `okd-appliance nodes` reports (the actions
/// that change a machine; `status` changes nothing and is not recorded).
pub fn machine_action(name: &str) -> Option<&'static str> {
    use crate::control::Action;
    [
        Action::Ensure,
        Action::PowerOn,
        Action::PowerOff,
        Action::Reset,
        Action::Destroy,
    ]
    .into_iter()
    .map(Action::name)
    .find(|n| *n == name)
}

/// Publishes what was done to `node`'s machine (a node of `plan`) in `journal`.
pub fn record_machine(
    plan: &Plan,
    journal: &Journal,
    node: &str,
    action: &'static str,
    result: Result<String, String>,
) -> Result<Recorded, OpError> {
    if !plan.boot.iter().any(|b| b.node == node) {
        return Err(OpError::NoNode(node.to_owned()));
    }
    journal.publish(
        Some(node.to_owned()),
        crate::journal::EventKind::Machine { action, result },
    );
    Ok(Recorded {
        node: node.to_owned(),
        action,
    })
}

/// Drains the backends named `node` in every served pool.
pub fn drain(pools: &Pools, node: &str, journal: &Journal) -> Result<Drained, OpError> {
    match crate::lb::drain::drain(pools, node, journal) {
        0 => Err(OpError::NoBackend(node.to_owned())),
        n => {
            let drained = Drained {
                node: node.to_owned(),
                pools: n,
                timeout: pools.drain_timeout(),
            };
            tracing::info!(
                "admin: drain {node} ({n} backends, timeout {})",
                humantime::format_duration(drained.timeout)
            );
            Ok(drained)
        }
    }
}

/// Puts the backends named `node` back into rotation in every served pool.
pub fn undrain(pools: &Pools, node: &str, journal: &Journal) -> Result<Undrained, OpError> {
    match crate::lb::drain::undrain(pools, node, journal) {
        0 => Err(OpError::NoBackend(node.to_owned())),
        n => {
            tracing::info!("admin: undrain {node} ({n} backends)");
            Ok(Undrained {
                node: node.to_owned(),
                pools: n,
            })
        }
    }
}

/// Forgets that `node` installed, so its next iPXE script installs it again: the operator's
/// request is an install step (`install_state::step_blocking`).
pub async fn reinstall(node: &str, plan: &Plan, journal: &Journal) -> Result<Reinstalled, OpError> {
    if !plan.boot.iter().any(|b| b.node == node) {
        return Err(OpError::NoNode(node.to_owned()));
    }
    let announcer = journal.clone();
    let asked = install_state::Observation::ReinstallRequested;
    let stepped =
        install_state::step_blocking(plan.state_dir.clone(), node, asked, move |node, s| {
            announcer.announce_step(node, s);
        })
        .await;
    match stepped.recorded {
        Ok(_) => Ok(Reinstalled {
            node: node.to_owned(),
            was_installed: matches!(stepped.before, install_state::NodeState::Installed { .. }),
        }),
        Err(e) => Err(OpError::Failed(format!("can't reset {node}: {e}"))),
    }
}

/// `reload`, passed on to the supervisor, which re-reads the config and answers on `reply`:
/// `Ok` with what it did, `Err` with why the previous plan stays.
#[derive(Debug)]
pub struct ReloadRequest {
    pub reply: oneshot::Sender<Result<String, String>>,
}

/// What the admin socket and the HTTP API reach: handles on the services' own state.
#[derive(Clone)]
pub struct Operator {
    pub plan: plan::Handle,
    pub pools: SharedPools,
    reloads: mpsc::Sender<ReloadRequest>,
    pub journal: Journal,
    orchestration: Arc<Result<Orchestrator, String>>,
    active: crate::ha::Activity,
    /// This host's own address, in a pair.
    ha_host: Option<std::net::Ipv4Addr>,
    fixed: Arc<status::Fixed>,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").finish_non_exhaustive()
    }
}

impl Operator {
    pub fn new(
        ctx: &Context,
        pools: SharedPools,
        reloads: mpsc::Sender<ReloadRequest>,
        orchestration: Result<Orchestrator, String>,
        ha_host: Option<std::net::Ipv4Addr>,
        fixed: status::Fixed,
    ) -> Operator {
        Operator {
            plan: ctx.plan.clone(),
            pools,
            reloads,
            journal: ctx.journal.clone(),
            orchestration: Arc::new(orchestration),
            active: ctx.active.clone(),
            ha_host,
            fixed: Arc::new(fixed),
            metrics: Arc::clone(&ctx.metrics),
            shutdown: ctx.shutdown.clone(),
        }
    }

    /// A state change (a drain, a reinstall) is refused on the standby of a pair: it would act
    /// on this host only and be overwritten by the active host's next update.
    fn refuse_on_standby(&self) -> Result<(), OpError> {
        if !self.active.paired() || self.active.is_active() {
            return Ok(());
        }
        let plan = self.plan.load();
        let active = plan
            .ha
            .as_ref()
            .zip(self.active.host())
            .map(|(ha, me)| ha.hosts[1 - me.min(1)].to_string())
            .unwrap_or_else(|| "the other host".into());
        Err(OpError::Standby(format!(
            "this host is the standby of its pair: drains and reinstalls are made on the active host ({active}), which replicates them here"
        )))
    }

    /// Drains `node` and keeps it drained across a restart (`install_state::keep_drained`).
    pub async fn drain(&self, node: &str) -> Result<Drained, OpError> {
        self.refuse_on_standby()?;
        let drained = drain(&self.pools.load(), node, &self.journal)?;
        self.keep_drained(node, true).await;
        Ok(drained)
    }

    pub async fn undrain(&self, node: &str) -> Result<Undrained, OpError> {
        self.refuse_on_standby()?;
        let undrained = undrain(&self.pools.load(), node, &self.journal)?;
        self.keep_drained(node, false).await;
        Ok(undrained)
    }

    /// Records a drain (or undrain) for the next start; one that can't be written is a status
    /// fault (the drain itself holds, until a restart).
    async fn keep_drained(&self, node: &str, drained: bool) {
        let plan = self.plan.load();
        let scope = plan.host_cluster.as_ref().map(|id| format!("cluster {id}"));
        let (state_dir, name) = (plan.state_dir.clone(), node.to_owned());
        let kept = tokio::task::spawn_blocking(move || {
            crate::install_state::keep_drained(&state_dir, &name, drained)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        let what = "kept drains";
        match kept {
            Ok(()) => self.fixed.faults.clear(what, scope.as_deref()),
            Err(e) => {
                let why = format!(
                    "the {} of {node} can't be kept for the next start: {e}",
                    if drained { "drain" } else { "undrain" }
                );
                tracing::error!("{why}");
                self.fixed.faults.record(
                    what,
                    scope.as_deref(),
                    crate::faults::FaultState::Unwritable,
                    Some(&why),
                );
            }
        }
    }

    /// `op` on `node`, as the admin socket and the API ask it: its one-line outcome.
    pub async fn node(&self, op: wire::NodeOp, node: &str) -> Result<String, OpError> {
        match op {
            wire::NodeOp::Drain => self.drain(node).await.map(|d| d.to_string()),
            wire::NodeOp::Undrain => self.undrain(node).await.map(|u| u.to_string()),
            wire::NodeOp::Reinstall => self.reinstall(node).await.map(|r| r.to_string()),
        }
    }

    pub async fn reinstall(&self, node: &str) -> Result<Reinstalled, OpError> {
        self.refuse_on_standby()?;
        reinstall(node, &self.plan.load_full(), &self.journal).await
    }

    /// Records what `okd-appliance nodes` did to `node`'s machine in this appliance's journal,
    /// where it moves the node's install phase as the orchestration's own actions do. Not
    /// refused on a standby: it records what happened to a machine, it changes nothing here.
    pub fn machine(
        &self,
        node: &str,
        action: &'static str,
        result: Result<String, String>,
    ) -> Result<Recorded, OpError> {
        record_machine(&self.plan.load(), &self.journal, node, action, result)
    }

    /// Records in the journal what `okd-appliance ignition create` (or `cluster up`) did to
    /// the cluster's ignition set; the status page's events show it.
    pub fn ignition(&self, result: Result<String, String>) -> String {
        self.journal
            .publish(None, crate::journal::EventKind::IgnitionMade { result });
        "ignition set recorded".to_owned()
    }

    /// Asks the supervisor to reload and waits for its outcome: what it did.
    pub async fn reload(&self) -> Result<String, OpError> {
        let (reply, outcome) = oneshot::channel();
        if self.reloads.send(ReloadRequest { reply }).await.is_err() {
            return Err(OpError::Stopping);
        }
        match outcome.await {
            Ok(Ok(line)) => Ok(line),
            Ok(Err(line)) => Err(OpError::Refused(line)),
            Err(_) => Err(OpError::Stopping),
        }
    }

    /// The whole status, now.
    pub fn status(&self) -> status::Status {
        let ha = self.ha_host.map(|host| {
            let r = self.active.replication();
            status::HaStatus {
                host: host.to_string(),
                active: self.active.is_active(),
                replication_connected: r.connected,
                replication_waiting: r.waiting,
                replication_updates: r.updates,
                last_update: r.last_update.and_then(|t| {
                    t.duration_since(std::time::SystemTime::UNIX_EPOCH)
                        .ok()
                        .map(|d| d.as_secs())
                }),
            }
        });
        let progress = self.orchestration.as_ref().as_ref().ok().map(|o| {
            let p = o.progress();
            let waiting = o.waiting_in(p.cluster_phase());
            (p, waiting)
        });
        status::collect(
            &self.fixed,
            &self.plan.load(),
            &self.journal.recent(),
            &self.pools.load(),
            progress.as_ref().map(|(p, w)| (p, w.clone())),
            ha,
            std::time::SystemTime::now(),
        )
    }

    /// The install orchestration, when this appliance runs one.
    pub fn orchestration(&self) -> Result<&Orchestrator, OpError> {
        self.orchestration
            .as_ref()
            .as_ref()
            .map_err(|why| OpError::NoOrchestration(why.clone()))
    }

    /// This host's address in its pair.
    pub fn ha_host(&self) -> Result<std::net::Ipv4Addr, OpError> {
        self.ha_host.ok_or(OpError::NotPaired)
    }

    /// Whether this host is the active one of its pair (always, alone).
    pub fn activity(&self) -> &crate::ha::Activity {
        &self.active
    }

    /// keepalived's health probe of this host: what it checked, or why it fails.
    pub async fn ha_health(&self) -> Result<String, OpError> {
        let host = self.ha_host()?;
        let name = self.plan.load().orchestration.api_server_name.clone();
        let listeners = self.fixed.listeners.load_full();
        let active = self.active.is_active();
        // Blocking probes, bounded by their timeouts.
        let probes = move || {
            let local = crate::ha::local_addresses().unwrap_or_default();
            health::check(&listeners, &local, &name, host, active)
        };
        match tokio::task::spawn_blocking(probes).await {
            Ok(Ok(line)) => Ok(line),
            Ok(Err(why)) => Err(OpError::Failed(why)),
            Err(e) => Err(OpError::Failed(format!("the health check failed: {e}"))),
        }
    }
}

/// The operators of the clusters a running appliance serves, in the host file's order (one,
/// for a cluster file); a reload that adds or removes a cluster replaces the list. What the
/// fronts ask of one cluster goes to the one they name, or to the only one; what is the host's
/// (reload, the pair, metrics) to the first.
#[derive(Clone, Debug)]
pub struct Clusters {
    operators: Arc<arc_swap::ArcSwap<Vec<(String, Operator)>>>,
    /// The appliance's token (each operator's own is its cluster's, cancelled when a reload
    /// removes the cluster): the fronts stop with the appliance, not with a cluster.
    shutdown: CancellationToken,
}

impl Clusters {
    /// `operators` must not be empty: a running appliance serves at least one cluster.
    pub fn new(operators: Vec<(String, Operator)>, shutdown: CancellationToken) -> Clusters {
        assert!(!operators.is_empty(), "an appliance serves a cluster");
        Clusters {
            operators: Arc::new(arc_swap::ArcSwap::from_pointee(operators)),
            shutdown,
        }
    }

    /// Serves `operators` from now on (a reload added or removed a cluster). An empty list
    /// (every cluster of a reload failed to start) keeps the previous one: the fronts always
    /// have a cluster to answer for.
    pub fn replace(&self, operators: Vec<(String, Operator)>) {
        if operators.is_empty() {
            tracing::error!(
                "no cluster is served after the reload; the operator keeps the previous list"
            );
            return;
        }
        self.operators.store(Arc::new(operators));
    }

    /// Cancelled when the appliance stops.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// The clusters' ids and operators, in order.
    pub fn all(&self) -> Arc<Vec<(String, Operator)>> {
        self.operators.load_full()
    }

    pub fn ids(&self) -> Vec<String> {
        self.operators
            .load()
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Cluster `id`'s operator; without an id, the only cluster's.
    pub fn pick(&self, id: Option<&str>) -> Result<Operator, OpError> {
        let all = self.operators.load();
        match (id, all.as_slice()) {
            (None, [(_, only)]) => Ok(only.clone()),
            (None, _) => Err(OpError::WhichCluster(self.ids())),
            (Some(id), all) => all
                .iter()
                .find(|(i, _)| i == id)
                .map(|(_, op)| op.clone())
                .ok_or_else(|| OpError::NoCluster {
                    id: id.to_owned(),
                    ids: self.ids(),
                }),
        }
    }

    /// For what is the host's: reload, the pair, metrics, shutdown.
    pub fn host(&self) -> Operator {
        self.operators.load()[0].1.clone()
    }

    /// Makes this host the active (or standby) one of its pair, as keepalived says: the role
    /// is the host's (one activity for every cluster), so a change is journaled in every
    /// cluster's journal, each cluster's log and events saying it.
    pub fn set_active(&self, active: bool) -> Result<(), OpError> {
        let host = self.host();
        host.ha_host()?;
        if host.active.set(active) {
            tracing::info!(
                "high availability: this host is now {}",
                if active { "active" } else { "standby" }
            );
            for (_, op) in self.all().iter() {
                op.journal.publish(None, EventKind::HaRole { active });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two clusters of one host in a pair: one activity, a journal each.
    fn two_clusters() -> Clusters {
        let active = crate::ha::Activity::standby(0);
        let operator = || {
            let plan = crate::fuzzing::cluster_plan().clone();
            let ctx = Context {
                plan: Arc::new(arc_swap::ArcSwap::from_pointee(plan.clone())),
                journal: Journal::new(),
                shutdown: CancellationToken::new(),
                active: active.clone(),
                metrics: Arc::new(crate::metrics::Metrics::new()),
                budget: crate::budget::Budget::unbounded(),
                faults: crate::faults::Faults::default(),
            };
            let fixed = status::Fixed {
                started: std::time::SystemTime::now(),
                faults: ctx.faults.clone(),
                listeners: Arc::default(),
                endpoints: None,
            };
            let host = Some(std::net::Ipv4Addr::new(10, 0, 0, 3));
            let (reloads, _) = mpsc::channel(1);
            let pools = crate::lb::shared_pools(&plan);
            Operator::new(&ctx, pools, reloads, Err("none".into()), host, fixed)
        };
        let operators = vec![("a".to_owned(), operator()), ("b".to_owned(), operator())];
        Clusters::new(operators, CancellationToken::new())
    }

    #[test]
    fn a_role_change_is_in_every_clusters_journal() {
        let clusters = two_clusters();
        let roles = |id: &str| -> Vec<bool> {
            let op = clusters.pick(Some(id)).unwrap();
            op.journal
                .recent()
                .into_iter()
                .filter_map(|e| match e.kind {
                    EventKind::HaRole { active } => Some(active),
                    _ => None,
                })
                .collect()
        };
        clusters.set_active(true).unwrap();
        // Said again (keepalived repeats itself): no second entry.
        clusters.set_active(true).unwrap();
        clusters.set_active(false).unwrap();
        assert_eq!(roles("a"), [true, false]);
        assert_eq!(roles("b"), [true, false]);
    }

    #[test]
    fn each_error_has_its_status() {
        assert_eq!(OpError::NoNode("x".into()).http_status(), 404);
        assert_eq!(OpError::NoBackend("x".into()).http_status(), 404);
        assert_eq!(OpError::Standby("s".into()).http_status(), 409);
        assert_eq!(OpError::Stopping.http_status(), 503);
        assert_eq!(OpError::Failed("f".into()).http_status(), 500);
        assert_eq!(
            OpError::NoBackend("bst".into()).to_string(),
            "no backend is named bst in a pool that has a listener"
        );
    }
}
