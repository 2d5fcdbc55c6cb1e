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
//! means not yet); installed is the
//! ClusterVersion Available and neither Failing nor Progressing (`waitForInitializedCluster`),
//! then stable operators (`waitForStableOperators`), made stricter in [`unsettled`].

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
}

impl State<'_> {
    fn phase(&self) -> ClusterPhase {
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
/// clock, the settle clock); everything else is in the answer.
pub fn next(memory: &mut Memory, state: &State<'_>, seen: &Observed) -> Decision {
    if !state.active {
        return Decision::Wait(Waiting::Active);
    }
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
        Some(Err(Trouble::Api(e))) => return Decision::Wait(Waiting::Api(e.clone())),
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
        Some(Ok(EtcdBootstrap::NotYet(what))) => {
            let Some(version) = &seen.version else {
                return Decision::Observe(Query::Version);
            };
            let Some(old) = version
                .as_ref()
                .filter(|v| v.predates_etcd_bootstrap_condition())
            else {
                return Decision::Wait(Waiting::EtcdMember(what));
            };
            Some(format!(
                "not waiting for EtcdBootstrapMemberRemoved: the cluster is at {}, older than the condition (4.12)",
                old.version.as_deref().unwrap_or_default()
            ))
        }
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
    let busy = match &seen.operators {
        None => return Decision::Observe(Query::Operators),
        Some(Ok(ops)) => unsettled(ops),
        Some(Err(e)) => Some(e.clone()),
    };
    if let Some(busy) = busy {
        memory.settled_since = None;
        return Decision::Wait(Waiting::Operators(busy));
    }
    let since = *memory.settled_since.get_or_insert(state.now);
    let settled = state.now.duration_since(since);
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
mod tests {
    use std::collections::HashMap;

    use super::*;

    const DRAIN: Duration = Duration::from_secs(30);
    const SETTLE: Duration = Duration::from_secs(60);

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    /// An install as the runner sees it: the record, the run's memory and the clock.
    struct Run {
        progress: Progress,
        memory: Memory,
        bootstrap: Option<&'static str>,
        masters: Vec<String>,
        workers: Vec<String>,
        active: bool,
        now: Instant,
        at: u64,
    }

    /// What the cluster answers in a poll.
    #[derive(Clone)]
    struct Answers {
        cluster: Result<(), Trouble>,
        bootstrap_complete: Result<bool, String>,
        etcd: Result<EtcdBootstrap, String>,
        version: Option<VersionState>,
        operators: Result<Vec<OperatorState>, String>,
        open_to_bootstrap: usize,
    }

    impl Default for Answers {
        fn default() -> Answers {
            Answers {
                cluster: Ok(()),
                bootstrap_complete: Ok(false),
                etcd: Ok(EtcdBootstrap::NotYet("condition absent")),
                version: Some(version("4.17.0", "True")),
                operators: Ok(Vec::new()),
                open_to_bootstrap: 0,
            }
        }
    }

    /// ClusterVersion at `v`: Available, not Failing, Progressing as given.
    fn version(v: &str, progressing: &str) -> VersionState {
        VersionState {
            conditions: conditions(&[
                ("Available", "True"),
                ("Failing", "False"),
                ("Progressing", progressing),
            ]),
            version: Some(v.into()),
        }
    }

    fn done_version() -> VersionState {
        version("4.17.0", "False")
    }

    fn conditions(c: &[(&str, &str)]) -> Conditions {
        c.iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<HashMap<_, _>>()
    }

    fn operator(name: &str, available: &str, progressing: &str, degraded: &str) -> OperatorState {
        OperatorState {
            name: name.into(),
            conditions: conditions(&[
                ("Available", available),
                ("Progressing", progressing),
                ("Degraded", degraded),
            ]),
        }
    }

    impl Run {
        fn new() -> Run {
            let mut progress = Progress::default();
            progress.advance_cluster(ClusterPhase::Bootstrapping, 0);
            Run {
                progress,
                memory: Memory::default(),
                bootstrap: Some("bootstrap"),
                masters: names(&["m0", "m1", "m2"]),
                workers: names(&["w0"]),
                active: true,
                now: Instant::now(),
                at: 1,
            }
        }

        fn phase(&self) -> ClusterPhase {
            self.progress.cluster_phase().expect("set")
        }

        fn ready(&mut self, nodes: &[&str]) {
            for n in nodes {
                self.progress.reach(n, NodePhase::Ready, self.at);
            }
        }

        fn decide(&mut self, seen: &Observed) -> Decision {
            let state = State {
                active: self.active,
                progress: &self.progress,
                bootstrap: self.bootstrap,
                single_node: self.bootstrap.is_none() && self.masters.len() == 1,
                masters: &self.masters,
                workers: &self.workers,
                drain_timeout: DRAIN,
                settle: SETTLE,
                now: self.now,
            };
            next(&mut self.memory, &state, seen)
        }

        /// One poll as the runner does it: every decision up to the one that ends the poll
        /// (observations answered from `answers`, phases advanced in the record).
        fn poll(&mut self, answers: &Answers) -> Vec<Decision> {
            let mut seen = Observed::default();
            let mut out = Vec::new();
            for _ in 0..MAX_DECISIONS {
                let d = self.decide(&seen);
                out.push(d.clone());
                match d {
                    Decision::Observe(q) => match q {
                        Query::Cluster => seen.cluster = Some(answers.cluster.clone()),
                        Query::BootstrapComplete => {
                            seen.bootstrap_complete = Some(answers.bootstrap_complete.clone());
                        }
                        Query::Etcd => seen.etcd = Some(answers.etcd.clone()),
                        Query::Version => seen.version = Some(answers.version.clone()),
                        Query::Operators => seen.operators = Some(answers.operators.clone()),
                        Query::OpenToBootstrap => {
                            seen.open_to_bootstrap = Some(answers.open_to_bootstrap);
                        }
                    },
                    Decision::Start { .. } => {}
                    Decision::Advance(a) => {
                        self.progress.advance_cluster(a.to, self.at);
                        return out;
                    }
                    Decision::Wait(_) | Decision::Installed => return out,
                }
            }
            panic!("no decision ended the poll: {out:?}");
        }

        /// The decision that ended the poll.
        fn end(&mut self, answers: &Answers) -> Decision {
            self.poll(answers).pop().expect("a decision")
        }

        fn later(&mut self, by: Duration) {
            self.now += by;
            self.at += by.as_secs();
        }
    }

    const MAX_DECISIONS: usize = 16;

    fn starts(decisions: &[Decision]) -> Vec<(Vec<String>, Option<String>)> {
        decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Start { nodes, drain } => Some((nodes.clone(), drain.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_run_starts_the_masters_and_the_bootstrap_once_then_waits_for_the_api() {
        let mut run = Run::new();
        let answers = Answers {
            cluster: Err(Trouble::Api("connection refused".into())),
            ..Answers::default()
        };
        let first = run.poll(&answers);
        assert_eq!(
            starts(&first),
            [(names(&["m0", "m1", "m2", "bootstrap"]), None)]
        );
        assert_eq!(
            first.last(),
            Some(&Decision::Wait(Waiting::Api("connection refused".into())))
        );
        // Started once per run: the next poll only looks.
        let second = run.poll(&answers);
        assert!(starts(&second).is_empty(), "{second:?}");
        // A client that can't be made is its own reason, shown as it is.
        let broken = Answers {
            cluster: Err(Trouble::Client("can't use the kubeconfig k: bad".into())),
            ..Answers::default()
        };
        let end = run.end(&broken);
        assert_eq!(end.to_string_reason(), "can't use the kubeconfig k: bad");
    }

    #[test]
    fn a_standby_decides_nothing_but_to_wait() {
        let mut run = Run::new();
        run.active = false;
        assert_eq!(
            run.poll(&Answers::default()),
            [Decision::Wait(Waiting::Active)]
        );
        assert!(!run.memory.machines_started);
    }

    #[test]
    fn bootstrap_complete_needs_the_configmap_and_then_etcd_to_drop_its_member() {
        let mut run = Run::new();
        let mut answers = Answers::default();
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::BootstrapComplete)
        );
        // The ConfigMap unreadable counts as not complete.
        answers.bootstrap_complete = Err("503".into());
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::BootstrapComplete)
        );
        // Complete, but the etcd condition is absent: etcd still counts the member.
        answers.bootstrap_complete = Ok(true);
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::EtcdMember("condition absent"))
        );
        // A read error of etcds/cluster is "not yet" too.
        answers.etcd = Err("the cluster API at u: 500".into());
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::Api("the cluster API at u: 500".into()))
        );
        // An unknown version does not skip the wait.
        answers.etcd = Ok(EtcdBootstrap::NotYet("condition absent"));
        answers.version = None;
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::EtcdMember("condition absent"))
        );
        assert_eq!(run.phase(), ClusterPhase::Bootstrapping);
        answers.etcd = Ok(EtcdBootstrap::Removed);
        run.later(Duration::from_secs(5));
        assert_eq!(
            run.end(&answers),
            Decision::Advance(Advance {
                to: ClusterPhase::BootstrapComplete,
                retire: None,
                note: None,
                drain: Some("bootstrap".into()),
                waiting: Some(Waiting::Drain("bootstrap".into())),
            })
        );
        assert_eq!(run.memory.drain_started, Some(run.now));
    }

    #[test]
    fn a_cluster_older_than_the_etcd_condition_skips_the_wait_and_says_so() {
        let mut run = Run::new();
        let answers = Answers {
            bootstrap_complete: Ok(true),
            version: Some(version("4.11.0-0.okd-2022-12-02", "True")),
            ..Answers::default()
        };
        let Decision::Advance(a) = run.end(&answers) else {
            panic!("advances");
        };
        assert_eq!(a.to, ClusterPhase::BootstrapComplete);
        assert_eq!(
            a.note.as_deref(),
            Some(
                "not waiting for EtcdBootstrapMemberRemoved: the cluster is at 4.11.0-0.okd-2022-12-02, older than the condition (4.12)"
            )
        );
    }

    #[test]
    fn the_bootstrap_is_retired_when_its_connections_end_or_the_drain_timeout_passed() {
        let mut run = Run::new();
        let mut answers = Answers {
            bootstrap_complete: Ok(true),
            etcd: Ok(EtcdBootstrap::Removed),
            open_to_bootstrap: 2,
            ..Answers::default()
        };
        run.end(&answers);
        assert_eq!(run.phase(), ClusterPhase::BootstrapComplete);
        let waiting = Decision::Wait(Waiting::Connections {
            open: 2,
            node: "bootstrap".into(),
        });
        assert_eq!(run.end(&answers), waiting);
        // The drain's timeout and its grace: still waited for just before.
        run.later(DRAIN + DRAIN_GRACE - Duration::from_secs(1));
        assert_eq!(run.end(&answers), waiting);
        run.later(Duration::from_secs(1));
        let retire = Decision::Advance(Advance {
            to: ClusterPhase::BootstrapRemoved,
            retire: Some("bootstrap".into()),
            note: None,
            drain: None,
            waiting: Some(Waiting::Workers),
        });
        assert_eq!(run.end(&answers), retire);

        // Connections gone before the timeout: retired at once.
        let mut run = Run::new();
        run.end(&answers);
        answers.open_to_bootstrap = 0;
        assert_eq!(run.end(&answers), retire);
    }

    #[test]
    fn the_workers_start_once_the_bootstrap_is_gone_then_the_nodes_must_be_ready() {
        let mut run = Run::new();
        run.progress
            .advance_cluster(ClusterPhase::BootstrapRemoved, 1);
        run.memory.machines_started = true;
        let answers = Answers::default();
        let poll = run.poll(&answers);
        assert_eq!(starts(&poll), [(names(&["w0"]), None)]);
        assert_eq!(
            poll.last(),
            Some(&Decision::Advance(Advance::to(
                ClusterPhase::WorkersJoining
            )))
        );
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::Ready(names(&["m0", "m1", "m2", "w0"])))
        );
        run.ready(&["m0", "m1", "m2"]);
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::Ready(names(&["w0"])))
        );
    }

    #[test]
    fn installed_needs_the_cluster_version_done_and_every_operator_settled_for_the_period() {
        let mut run = Run::new();
        run.progress
            .advance_cluster(ClusterPhase::WorkersJoining, 1);
        run.memory.machines_started = true;
        run.memory.workers_started = Some(1);
        run.ready(&["m0", "m1", "m2", "w0"]);
        let mut answers = Answers::default();
        assert_eq!(run.end(&answers), Decision::Wait(Waiting::Version));
        answers.version = None;
        assert_eq!(run.end(&answers), Decision::Wait(Waiting::Version));
        answers.version = Some(done_version());
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::Operators("no ClusterOperator exists yet".into()))
        );
        answers.operators = Ok(vec![
            operator("dns", "True", "False", "False"),
            operator("ingress", "False", "False", "False"),
        ]);
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::Operators("ingress (not Available)".into()))
        );
        answers.operators = Ok(vec![operator("dns", "True", "False", "False")]);
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::Settling {
                settled: Duration::ZERO,
                of: SETTLE
            })
        );
        run.later(SETTLE - Duration::from_secs(1));
        assert!(matches!(
            run.end(&answers),
            Decision::Wait(Waiting::Settling { .. })
        ));
        // An operator that moves again starts the period over.
        answers.operators = Ok(vec![operator("dns", "True", "True", "False")]);
        run.end(&answers);
        assert_eq!(run.memory.settled_since, None);
        answers.operators = Ok(vec![operator("dns", "True", "False", "False")]);
        run.end(&answers);
        run.later(SETTLE);
        assert_eq!(
            run.end(&answers),
            Decision::Advance(Advance::to(ClusterPhase::Installed))
        );
        // A node that stops being Ready (a reinstall) also restarts the period.
        run.memory.settled_since = Some(run.now);
        run.progress.nodes.remove("w0");
        run.end(&answers);
        assert_eq!(run.memory.settled_since, None);
    }

    #[test]
    fn scaling_an_installed_cluster_starts_the_new_workers_and_finishes_when_settled() {
        let mut run = Run::new();
        run.progress.advance_cluster(ClusterPhase::Installed, 1);
        run.ready(&["m0", "m1", "m2"]);
        run.workers = names(&["w0", "w1"]);
        let answers = Answers {
            version: Some(done_version()),
            operators: Ok(vec![operator("dns", "True", "False", "False")]),
            ..Answers::default()
        };
        let poll = run.poll(&answers);
        assert_eq!(
            starts(&poll),
            [
                (names(&["m0", "m1", "m2"]), Some("bootstrap".into())),
                (names(&["w0", "w1"]), None)
            ]
        );
        assert_eq!(
            poll.last(),
            Some(&Decision::Wait(Waiting::Ready(names(&["w0", "w1"]))))
        );
        run.ready(&["w0", "w1"]);
        run.end(&answers);
        run.later(SETTLE);
        assert_eq!(run.end(&answers), Decision::Installed);
    }

    #[test]
    fn a_resumed_run_drains_the_bootstrap_again_and_does_not_start_it() {
        let mut run = Run::new();
        run.progress
            .advance_cluster(ClusterPhase::BootstrapComplete, 1);
        let answers = Answers {
            open_to_bootstrap: 1,
            ..Answers::default()
        };
        let poll = run.poll(&answers);
        assert_eq!(
            starts(&poll),
            [(names(&["m0", "m1", "m2"]), Some("bootstrap".into()))]
        );
        assert_eq!(run.memory.drain_started, Some(run.now));
        assert!(matches!(
            poll.last(),
            Some(Decision::Wait(Waiting::Connections { open: 1, .. }))
        ));
    }

    #[test]
    fn without_a_bootstrap_node_there_is_nothing_to_drain_or_retire() {
        let mut run = Run::new();
        run.bootstrap = None;
        let answers = Answers {
            bootstrap_complete: Ok(true),
            etcd: Ok(EtcdBootstrap::Removed),
            ..Answers::default()
        };
        let poll = run.poll(&answers);
        assert_eq!(starts(&poll), [(names(&["m0", "m1", "m2"]), None)]);
        assert_eq!(
            poll.last(),
            Some(&Decision::Advance(Advance::to(
                ClusterPhase::BootstrapComplete
            )))
        );
        assert_eq!(
            run.end(&answers),
            Decision::Advance(Advance::to(ClusterPhase::BootstrapRemoved))
        );
    }

    #[test]
    fn a_single_node_has_no_bootstrap_phase_and_waits_for_install_complete() {
        let mut run = Run::new();
        run.bootstrap = None;
        run.masters = names(&["sno"]);
        run.workers = Vec::new();
        let answers = Answers {
            version: Some(done_version()),
            operators: Ok(vec![operator("dns", "True", "False", "False")]),
            ..Answers::default()
        };
        // Its machine starts; no bootstrap ConfigMap or etcd member is waited for.
        let poll = run.poll(&answers);
        assert_eq!(starts(&poll), [(names(&["sno"]), None)]);
        let Some(Decision::Advance(a)) = poll.last() else {
            panic!("advances: {poll:?}");
        };
        assert_eq!(a.to, ClusterPhase::WorkersJoining);
        assert!(
            a.note
                .as_deref()
                .unwrap()
                .contains("sno bootstraps in place")
        );
        assert!(
            !poll
                .iter()
                .any(|d| matches!(d, Decision::Observe(Query::BootstrapComplete | Query::Etcd)))
        );
        assert_eq!(
            run.end(&answers),
            Decision::Wait(Waiting::Ready(names(&["sno"])))
        );
        run.ready(&["sno"]);
        run.end(&answers);
        run.later(SETTLE);
        assert_eq!(
            run.end(&answers),
            Decision::Advance(Advance::to(ClusterPhase::Installed))
        );
    }

    #[test]
    fn every_phase_change_carries_the_new_phases_reason_and_status_never_mixes_them() {
        // The run that moved to bootstrap-complete waits, in that phase, for the drain; the
        // reason it gave in bootstrapping is not shown once the phase moved.
        let mut run = Run::new();
        let answers = Answers {
            bootstrap_complete: Ok(true),
            etcd: Ok(EtcdBootstrap::Removed),
            open_to_bootstrap: 3,
            ..Answers::default()
        };
        let before = (
            ClusterPhase::Bootstrapping,
            Waiting::EtcdMember("condition absent"),
        );
        let Decision::Advance(a) = run.end(&answers) else {
            panic!("advances");
        };
        // The phase is written before the new reason: in between, status shows no reason
        // rather than the old phase's.
        assert_eq!(reason_in(Some(&before), run.progress.cluster_phase()), None);
        let after = (a.to, a.waiting.expect("a reason with the phase"));
        assert_eq!(
            reason_in(Some(&after), run.progress.cluster_phase()).as_deref(),
            Some("connections to bootstrap to end")
        );
        assert_eq!(
            reason_in(Some(&before), Some(ClusterPhase::Bootstrapping)).as_deref(),
            Some("etcd to remove its bootstrap member (etcds/cluster: condition absent)")
        );
        assert_eq!(reason_in(None, Some(ClusterPhase::Bootstrapping)), None);
    }

    #[test]
    fn the_reasons_read_as_cluster_status_has_always_shown_them() {
        let cases = [
            (
                Waiting::Active,
                "this host to become the active one of its pair",
            ),
            (
                Waiting::Machines(names(&["m0", "bootstrap"])),
                "m0, bootstrap to create and start",
            ),
            (
                Waiting::BootstrapComplete,
                "bootstrap complete (kube-system/bootstrap)",
            ),
            (
                Waiting::Connections {
                    open: 2,
                    node: "bootstrap".into(),
                },
                "2 connections to bootstrap to end",
            ),
            (
                Waiting::Retire {
                    node: "bootstrap".into(),
                    action: "destroy",
                },
                "bootstrap: destroy",
            ),
            (
                Waiting::Settling {
                    settled: Duration::from_millis(61_500),
                    of: Duration::from_secs(120),
                },
                "cluster operators settled for 1m 1s of 2m",
            ),
        ];
        for (w, text) in cases {
            assert_eq!(w.to_string(), text);
        }
    }

    #[test]
    fn operators_are_settled_only_when_every_one_is_available_and_quiet() {
        assert!(unsettled(&[]).is_some());
        let good = operator("dns", "True", "False", "False");
        assert_eq!(unsettled(std::slice::from_ref(&good)), None);
        let degraded = operator("etcd", "True", "False", "True");
        assert_eq!(
            unsettled(&[good.clone(), degraded]).as_deref(),
            Some("etcd (Degraded)")
        );
        // A condition that is missing is not "False".
        let unknown = operator("console", "True", "", "");
        assert_eq!(
            unsettled(&[good, unknown]).as_deref(),
            Some("console (Progressing, Degraded)")
        );
    }

    #[test]
    fn the_cluster_version_must_say_available_and_neither_failing_nor_progressing() {
        let c = |a: &str, f: &str, p: &str| {
            conditions(&[("Available", a), ("Failing", f), ("Progressing", p)])
        };
        assert!(cluster_version_done(&c("True", "False", "False")));
        assert!(!cluster_version_done(&c("True", "", "False")));
        assert!(!cluster_version_done(&c("True", "False", "True")));
        assert!(!cluster_version_done(&c("False", "False", "False")));
    }

    impl Decision {
        fn to_string_reason(&self) -> String {
            match self {
                Decision::Wait(w) => w.to_string(),
                other => panic!("not a wait: {other:?}"),
            }
        }
    }
}
