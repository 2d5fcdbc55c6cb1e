//! What the install does next, decided from what it knows: a pure function.
//!
//! [`next`] looks at the cluster phase, the nodes' phases, what this run remembers ([`Memory`])
//! and what it has observed of the cluster so far in this poll ([`Observed`]). It answers with
//! one [`Decision`]: fetch an observation it needs and ask again, start machines, advance the
//! cluster phase (with what goes with it: a note, retiring the bootstrap, draining it), wait
//! (saying for what) until the next poll, or finish. The async runner in the parent module
//! applies decisions and does nothing else, so every rule of the install is here and tested
//! without a cluster, a clock or a provider.
//!
//! The waiting text is part of the decision and belongs to the phase it was decided in
//! ([`Waiting`], [`Orchestrator::status`](super::Orchestrator::status) shows it only with that
//! phase), so `cluster status` never shows one phase with another phase's reason.
//!
//! Upstream rules this follows (openshift/installer, cmd/openshift-install/command/waitfor.go):
//! bootstrap complete is the `kube-system/bootstrap` ConfigMap's `status: complete`
//! (`waitForBootstrapConfigMap`), then etcd's `EtcdBootstrapMemberRemoved` condition True
//! (cmd/openshift-install/create.go, `waitForEtcdBootstrapMemberRemoval`: absent or unreadable
//! means not yet), or the etcd operator's own word that the member is gone from every release,
//! `EtcdRunningInCluster` with reason `BootstrapAlreadyRemoved` (see
//! [`Cluster::etcd_bootstrap_member_removed`](super::cluster::Cluster::etcd_bootstrap_member_removed));
//! installed is the
//! ClusterVersion Available and neither Failing nor Progressing (`waitForInitializedCluster`),
//! then stable operators (`waitForStableOperators`), made stricter in [`unsettled`]: every
//! ClusterOperator Available=True, Progressing=False and Degraded=False for
//! `orchestration.settle`, at least one listed (upstream checks only Progressing=False for
//! 30 s). The settle period counts from each of those conditions' `lastTransitionTime`, as
//! upstream counts, and from this run's own polls, which an API error starts over.
//!
//! A single-node cluster skips the bootstrap phases: no bootstrap ConfigMap or etcd member is
//! waited for (there is no bootstrap machine to retire, and openshift-install's single-node docs
//! wait only for install-complete). A run waits in the bootstrap phase for
//! `orchestration.bootstrap_timeout`, then for `install_timeout` (openshift-install's limits by
//! default), and past them stops as failed with what it waited for.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::cluster::{Conditions, EtcdBootstrap, OperatorState, VersionState};
use super::phases::{ClusterPhase, NodePhase, Progress};

/// What the install is, as far as deciding goes.
#[derive(Debug, Clone)]
pub struct State<'a> {
    /// This host drives the install (the active host of a pair, or a single appliance).
    pub active: bool,
    pub progress: &'a Progress,
    pub bootstrap: Option<&'a str>,
    /// One master and no bootstrap node: it bootstraps in place, so the run has no bootstrap
    /// phase and waits for install-complete, as `openshift-install` does for it.
    pub single_node: bool,
    pub masters: &'a [String],
    /// The workers wanted (`cluster scale`), in config order.
    pub workers: &'a [String],
    /// How long the drain gives open connections before it closes them.
    pub drain_timeout: Duration,
    /// How long the operators stay settled before the cluster counts as installed.
    pub settle: Duration,
    pub now: Instant,
    /// Now on the wall clock, seconds since the epoch: what the operators' condition times
    /// are compared with.
    pub wall: u64,
    /// How long a run waits in the bootstrap phase, and then for installed, before it reports
    /// the install failed (openshift-install's limits by default).
    pub bootstrap_timeout: Duration,
    pub install_timeout: Duration,
}

impl State<'_> {
    /// The cluster's phase, bootstrapping before any was recorded.
    pub fn phase(&self) -> ClusterPhase {
        self.progress
            .cluster_phase()
            .unwrap_or(ClusterPhase::Bootstrapping)
    }
}

/// What one run of `up` remembers between polls (and forgets with the process, by design:
/// each of these is redone, idempotently, after a restart).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    pub machines_started: bool,
    pub workers_started: Option<usize>,
    pub drain_started: Option<Instant>,
    pub settled_since: Option<Instant>,
    /// The phase this run has been waiting in, and since when (this run's: `up` again waits
    /// anew, so a failed wait is resumable).
    pub phase_since: Option<(ClusterPhase, Instant)>,
}

/// What this poll has seen of the cluster; each is fetched when a decision asks for it.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The API connected and its nodes and certificate requests looked at.
    pub cluster: Option<Result<(), Trouble>>,
    pub bootstrap_complete: Option<Result<bool, String>>,
    pub etcd: Option<Result<EtcdBootstrap, String>>,
    /// `None` inside when ClusterVersion `version` is absent or unreadable.
    pub version: Option<Option<VersionState>>,
    pub operators: Option<Result<Vec<OperatorState>, String>>,
    /// Open connections to the bootstrap node through the served frontends.
    pub open_to_bootstrap: Option<usize>,
}

/// Why the cluster could not be looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trouble {
    /// The API did not answer as it should: waited for.
    Api(String),
    /// The client could not be made (the kubeconfig): made again at the next poll.
    Client(String),
}

/// An observation [`next`] needs before it can decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    Cluster,
    BootstrapComplete,
    Etcd,
    Version,
    Operators,
    OpenToBootstrap,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Fetch this into [`Observed`] and ask again.
    Observe(Query),
    /// Create and power on these machines, then drain `drain` (a drain lives in memory: after
    /// a restart the bootstrap leaves the pools again); then ask again.
    Start {
        nodes: Vec<String>,
        drain: Option<String>,
    },
    /// Move the cluster to the next phase; the poll ends.
    Advance(Advance),
    /// Nothing more to do until the next poll.
    Wait(Waiting),
    /// The cluster is installed: the run ends.
    Installed,
    /// Waited past the phase's limit: the run ends as failed, saying what held it.
    Fail(String),
}

/// A phase change and what goes with it, in the order the runner does it: `retire` (the run
/// stops if it fails), the journal `note`, the phase itself, `drain`, then `waiting`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advance {
    pub to: ClusterPhase,
    pub retire: Option<String>,
    pub note: Option<String>,
    pub drain: Option<String>,
    /// What the new phase waits for first, if that is known now.
    pub waiting: Option<Waiting>,
}

impl Advance {
    fn to(to: ClusterPhase) -> Advance {
        Advance {
            to,
            retire: None,
            note: None,
            drain: None,
            waiting: None,
        }
    }
}

/// What the install waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// A standby of a pair does not drive the install.
    Active,
    Machines(Vec<String>),
    Api(String),
    /// A request to the API asked at this instant has had no answer yet (a stalled API is
    /// otherwise seen only at the request's timeout).
    Unanswered(Instant),
    Client(String),
    BootstrapComplete,
    /// etcd still counts its bootstrap member; what `etcds/cluster` showed.
    EtcdMember(&'static str),
    /// The bootstrap just left the load balancer.
    Drain(String),
    Connections {
        open: usize,
        node: String,
    },
    Retire {
        node: String,
        action: &'static str,
    },
    Workers,
    Ready(Vec<String>),
    Version,
    Operators(String),
    Settling {
        settled: Duration,
        of: Duration,
    },
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Waiting::Active => f.write_str("this host to become the active one of its pair"),
            Waiting::Machines(nodes) => write!(f, "{} to create and start", nodes.join(", ")),
            Waiting::Api(e) => write!(f, "the cluster API: {e}"),
            Waiting::Unanswered(asked) => write!(
                f,
                "the cluster API: no answer for {} (a request waits up to {})",
                humantime::format_duration(Duration::from_secs(asked.elapsed().as_secs())),
                humantime::format_duration(super::cluster::REQUEST_TIMEOUT)
            ),
            Waiting::Client(e) => f.write_str(e),
            Waiting::BootstrapComplete => f.write_str("bootstrap complete (kube-system/bootstrap)"),
            Waiting::EtcdMember(seen) => write!(
                f,
                "etcd to remove its bootstrap member (etcds/cluster: {seen})"
            ),
            Waiting::Drain(node) => write!(f, "connections to {node} to end"),
            Waiting::Connections { open, node } => write!(f, "{open} connections to {node} to end"),
            Waiting::Retire { node, action } => write!(f, "{node}: {action}"),
            Waiting::Workers => f.write_str("the workers to start"),
            Waiting::Ready(nodes) => write!(f, "nodes to be Ready: {}", nodes.join(", ")),
            Waiting::Version => {
                f.write_str("ClusterVersion version: Available, not Failing, not Progressing")
            }
            Waiting::Operators(busy) => write!(f, "cluster operators to settle: {busy}"),
            Waiting::Settling { settled, of } => write!(
                f,
                "cluster operators settled for {} of {}",
                humantime::format_duration(Duration::from_secs(settled.as_secs())),
                humantime::format_duration(*of)
            ),
        }
    }
}

/// What `cluster status` says the run waits for: the reason last decided, only if it was
/// decided in the phase the cluster is in, so one phase is never shown with another's reason.
pub fn reason_in(
    decided: Option<&(ClusterPhase, Waiting)>,
    current: Option<ClusterPhase>,
) -> Option<String> {
    decided
        .filter(|(phase, _)| Some(*phase) == current)
        .map(|(_, what)| what.to_string())
}

/// The drain closes what is left at its timeout; a moment more for that.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// The next thing to do. Updates `memory` for what the decision starts (machines, the drain
/// clock, the settle clock, the phase's clock); everything else is in the answer. A wait past
/// the phase's limit is [`Decision::Fail`], as openshift-install gives up and says why.
pub fn next(memory: &mut Memory, state: &State<'_>, seen: &Observed) -> Decision {
    if !state.active {
        return Decision::Wait(Waiting::Active);
    }
    let phase = state.phase();
    let since = match memory.phase_since {
        Some((p, at)) if p == phase => at,
        _ => {
            memory.phase_since = Some((phase, state.now));
            state.now
        }
    };
    match step(memory, state, seen) {
        Decision::Wait(what) => match over_limit(state, phase, state.now.duration_since(since)) {
            Some(limit) => Decision::Fail(format!(
                "{limit}; still waiting for {what}: `okd-appliance cluster up` again waits anew"
            )),
            None => Decision::Wait(what),
        },
        other => other,
    }
}

/// What a wait of `waited` in `phase` is past, if it is past its limit. A single node
/// bootstraps in place, so its one wait has both limits.
fn over_limit(state: &State<'_>, phase: ClusterPhase, waited: Duration) -> Option<String> {
    let human = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
    let (limit, what, key) = match phase {
        ClusterPhase::Bootstrapping => (
            state.bootstrap_timeout,
            "bootstrap did not complete",
            "orchestration.bootstrap_timeout",
        ),
        ClusterPhase::WorkersJoining if state.single_node => (
            state.bootstrap_timeout + state.install_timeout,
            "the single node did not install",
            "orchestration.bootstrap_timeout + install_timeout",
        ),
        ClusterPhase::WorkersJoining => (
            state.install_timeout,
            "the cluster did not install",
            "orchestration.install_timeout",
        ),
        _ => return None,
    };
    (waited >= limit).then(|| format!("{what} within {} ({key})", human(limit)))
}

fn step(memory: &mut Memory, state: &State<'_>, seen: &Observed) -> Decision {
    let phase = state.phase();
    if !memory.machines_started {
        memory.machines_started = true;
        let mut nodes: Vec<String> = state.masters.to_vec();
        let mut drain = None;
        if phase < ClusterPhase::BootstrapComplete {
            nodes.extend(state.bootstrap.map(str::to_owned));
        } else if let Some(b) = state.bootstrap {
            drain = Some(b.to_owned());
            memory.drain_started = Some(state.now);
        }
        return Decision::Start { nodes, drain };
    }
    if phase >= ClusterPhase::BootstrapRemoved
        && memory.workers_started != Some(state.workers.len())
    {
        memory.workers_started = Some(state.workers.len());
        return Decision::Start {
            nodes: state.workers.to_vec(),
            drain: None,
        };
    }
    if state.single_node && phase < ClusterPhase::WorkersJoining {
        return Decision::Advance(Advance {
            note: Some(format!(
                "single-node cluster: {} bootstraps in place, so there is no bootstrap phase; waiting for install-complete",
                state.masters.join(", ")
            )),
            ..Advance::to(ClusterPhase::WorkersJoining)
        });
    }
    match &seen.cluster {
        None => return Decision::Observe(Query::Cluster),
        Some(Err(Trouble::Api(e))) => {
            // What the operators did while the API could not be asked is unknown: the settle
            // period starts over once it answers (their condition times say the rest).
            memory.settled_since = None;
            return Decision::Wait(Waiting::Api(e.clone()));
        }
        Some(Err(Trouble::Client(e))) => return Decision::Wait(Waiting::Client(e.clone())),
        Some(Ok(())) => {}
    }
    match phase {
        ClusterPhase::Bootstrapping => bootstrapping(memory, state, seen),
        ClusterPhase::BootstrapComplete => {
            let Some(b) = state.bootstrap else {
                return Decision::Advance(Advance::to(ClusterPhase::BootstrapRemoved));
            };
            let Some(open) = seen.open_to_bootstrap else {
                return Decision::Observe(Query::OpenToBootstrap);
            };
            let started = *memory.drain_started.get_or_insert(state.now);
            if open > 0 && state.now.duration_since(started) < state.drain_timeout + DRAIN_GRACE {
                return Decision::Wait(Waiting::Connections {
                    open,
                    node: b.to_owned(),
                });
            }
            Decision::Advance(Advance {
                retire: Some(b.to_owned()),
                waiting: Some(Waiting::Workers),
                ..Advance::to(ClusterPhase::BootstrapRemoved)
            })
        }
        ClusterPhase::BootstrapRemoved => {
            Decision::Advance(Advance::to(ClusterPhase::WorkersJoining))
        }
        // Installed too: `cluster scale` after the install brings workers in the same way.
        ClusterPhase::WorkersJoining | ClusterPhase::Installed => installing(memory, state, seen),
    }
}

fn bootstrapping(memory: &mut Memory, state: &State<'_>, seen: &Observed) -> Decision {
    match &seen.bootstrap_complete {
        None => return Decision::Observe(Query::BootstrapComplete),
        Some(Ok(true)) => {}
        Some(_) => return Decision::Wait(Waiting::BootstrapComplete),
    }
    // Destroying the bootstrap while etcd still counts its member can leave etcd without
    // quorum: wait as `openshift-install wait-for bootstrap-complete` does.
    let note = match &seen.etcd {
        None => return Decision::Observe(Query::Etcd),
        Some(Err(e)) => return Decision::Wait(Waiting::Api(e.clone())),
        Some(Ok(EtcdBootstrap::Removed)) => None,
        Some(Ok(EtcdBootstrap::AlreadyRemoved)) => Some(
            "etcd's bootstrap member is gone (EtcdRunningInCluster: BootstrapAlreadyRemoved); this etcd operator does not write EtcdBootstrapMemberRemoved"
                .to_owned(),
        ),
        Some(Ok(EtcdBootstrap::NotYet(what))) => return Decision::Wait(Waiting::EtcdMember(what)),
    };
    let drain = state.bootstrap.map(str::to_owned);
    if drain.is_some() {
        memory.drain_started = Some(state.now);
    }
    Decision::Advance(Advance {
        note,
        waiting: drain.clone().map(Waiting::Drain),
        drain,
        ..Advance::to(ClusterPhase::BootstrapComplete)
    })
}

fn installing(memory: &mut Memory, state: &State<'_>, seen: &Observed) -> Decision {
    let not_ready: Vec<String> = state
        .masters
        .iter()
        .chain(state.workers)
        .filter(|n| state.progress.node_phase(n) < NodePhase::Ready)
        .cloned()
        .collect();
    if !not_ready.is_empty() {
        memory.settled_since = None;
        return Decision::Wait(Waiting::Ready(not_ready));
    }
    let Some(version) = &seen.version else {
        return Decision::Observe(Query::Version);
    };
    if !version
        .as_ref()
        .is_some_and(|v| cluster_version_done(&v.conditions))
    {
        memory.settled_since = None;
        return Decision::Wait(Waiting::Version);
    }
    let (busy, last_change) = match &seen.operators {
        None => return Decision::Observe(Query::Operators),
        Some(Ok(ops)) => (unsettled(ops), last_change(ops)),
        Some(Err(e)) => (Some(e.clone()), None),
    };
    if let Some(busy) = busy {
        memory.settled_since = None;
        return Decision::Wait(Waiting::Operators(busy));
    }
    // Settled for as long as both say: this run's own look (every poll since settled, with no
    // API error between) and the operators' condition times, as upstream's
    // `waitForStableOperators` counts from `lastTransitionTime` (a flap between two polls, or
    // one while the API was down, is seen there).
    let since = *memory.settled_since.get_or_insert(state.now);
    let seen_settled = state.now.duration_since(since);
    let settled = match last_change {
        Some(at) => seen_settled.min(Duration::from_secs(state.wall.saturating_sub(at))),
        None => seen_settled,
    };
    if settled < state.settle {
        return Decision::Wait(Waiting::Settling {
            settled,
            of: state.settle,
        });
    }
    if state.phase() == ClusterPhase::Installed {
        Decision::Installed
    } else {
        Decision::Advance(Advance::to(ClusterPhase::Installed))
    }
}

/// The newest `lastTransitionTime` of the conditions settling looks at (Available,
/// Progressing, Degraded) over every operator, when any says one.
pub fn last_change(ops: &[OperatorState]) -> Option<u64> {
    ops.iter()
        .flat_map(|o| {
            ["Available", "Progressing", "Degraded"]
                .iter()
                .filter_map(|c| o.changed.get(*c).copied())
        })
        .max()
}

/// ClusterVersion's own verdict: Available, neither Failing nor Progressing
/// (`waitForInitializedCluster`).
pub fn cluster_version_done(c: &Conditions) -> bool {
    let is = |name: &str, value: &str| c.get(name).map(String::as_str) == Some(value);
    is("Available", "True") && is("Failing", "False") && is("Progressing", "False")
}

/// What keeps the cluster operators from being settled, or `None` when every one is Available,
/// not Progressing and not Degraded. An empty list is not settled: the operators are not there
/// yet. Upstream's `waitForStableOperators` looks at Progressing only (False for 30 s); an
/// operator that is not Available, or Degraded, is a failed install to a person, so it is
/// waited for here too. The settle period (`orchestration.settle`) runs once this is `None`.
pub fn unsettled(ops: &[OperatorState]) -> Option<String> {
    if ops.is_empty() {
        return Some("no ClusterOperator exists yet".into());
    }
    let is = |o: &OperatorState, name: &str, value: &str| {
        o.conditions.get(name).map(String::as_str) == Some(value)
    };
    let busy: Vec<String> = ops
        .iter()
        .filter_map(|o| {
            let mut why = Vec::new();
            if !is(o, "Available", "True") {
                why.push("not Available");
            }
            if !is(o, "Progressing", "False") {
                why.push("Progressing");
            }
            if !is(o, "Degraded", "False") {
                why.push("Degraded");
            }
            (!why.is_empty()).then(|| format!("{} ({})", o.name, why.join(", ")))
        })
        .collect();
    (!busy.is_empty()).then(|| busy.join(", "))
}

#[cfg(test)]
mod tests;
