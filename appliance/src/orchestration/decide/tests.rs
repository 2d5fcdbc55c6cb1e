//! The decisions of [`super::next`] for every phase transition, run as the runner would
//! (observations answered from a table, phases advanced in the record).

use std::collections::HashMap;

use super::*;

const DRAIN: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_secs(60);
const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(50 * 60);
const INSTALL_TIMEOUT: Duration = Duration::from_secs(70 * 60);

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
            version: Some(version("True")),
            operators: Ok(Vec::new()),
            open_to_bootstrap: 0,
        }
    }
}

/// ClusterVersion: Available, not Failing, Progressing as given.
fn version(progressing: &str) -> VersionState {
    VersionState {
        conditions: conditions(&[
            ("Available", "True"),
            ("Failing", "False"),
            ("Progressing", progressing),
        ]),
    }
}

fn done_version() -> VersionState {
    version("False")
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
        changed: HashMap::new(),
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

    /// Every node Ready and the workers started: waiting for installed.
    fn installing() -> Run {
        let mut run = Run::new();
        run.progress
            .advance_cluster(ClusterPhase::WorkersJoining, 1);
        run.memory.machines_started = true;
        run.memory.workers_started = Some(1);
        run.ready(&["m0", "m1", "m2", "w0"]);
        run
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
            wall: self.at,
            bootstrap_timeout: BOOTSTRAP_TIMEOUT,
            install_timeout: INSTALL_TIMEOUT,
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
                Decision::Wait(_) | Decision::Installed | Decision::Fail(_) => return out,
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
fn an_etcd_operator_without_the_condition_proves_the_member_gone_another_way() {
    // A 4.11 (or an early 4.12) etcd operator never writes EtcdBootstrapMemberRemoved; what
    // every release writes once the member is gone is EtcdRunningInCluster, reason
    // BootstrapAlreadyRemoved. Without either it waits, whatever the ClusterVersion says.
    let mut run = Run::new();
    let old = Answers {
        bootstrap_complete: Ok(true),
        etcd: Ok(EtcdBootstrap::NotYet(
            "EtcdBootstrapMemberRemoved is not set yet",
        )),
        version: Some(version("True")),
        ..Answers::default()
    };
    assert_eq!(
        run.end(&old),
        Decision::Wait(Waiting::EtcdMember(
            "EtcdBootstrapMemberRemoved is not set yet"
        ))
    );
    let gone = Answers {
        etcd: Ok(EtcdBootstrap::AlreadyRemoved),
        ..old
    };
    let Decision::Advance(a) = run.end(&gone) else {
        panic!("advances");
    };
    assert_eq!(a.to, ClusterPhase::BootstrapComplete);
    assert!(
        a.note
            .as_deref()
            .is_some_and(|n| n.contains("BootstrapAlreadyRemoved")),
        "{a:?}"
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
    let mut run = Run::installing();
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

/// Issue 40: settled is counted from each condition's `lastTransitionTime`, as upstream's
/// `waitForStableOperators` counts, and an API error restarts this run's own window. A flap
/// between two polls, or a change while the API was down, is not "installed" right after.
#[test]
fn settling_counts_from_the_conditions_last_change_and_an_api_error_restarts_it() {
    let mut run = Run::installing();
    let settled_op = |changed: u64| {
        let mut op = operator("kube-apiserver", "True", "False", "False");
        op.changed = ["Available", "Progressing", "Degraded"]
            .iter()
            .map(|c| ((*c).to_owned(), changed))
            .collect();
        op
    };
    let mut answers = Answers {
        version: Some(done_version()),
        operators: Ok(vec![settled_op(1)]),
        ..Answers::default()
    };
    run.end(&answers);
    run.later(SETTLE);
    assert_eq!(
        run.end(&answers),
        Decision::Advance(Advance::to(ClusterPhase::Installed))
    );

    // Settled at every poll, but Progressing went True and back 2 s before this one: the
    // period runs from that change.
    let mut run = Run::installing();
    answers.operators = Ok(vec![settled_op(1)]);
    run.end(&answers);
    run.later(SETTLE);
    answers.operators = Ok(vec![settled_op(run.at - 2)]);
    assert_eq!(
        run.end(&answers),
        Decision::Wait(Waiting::Settling {
            settled: Duration::from_secs(2),
            of: SETTLE
        })
    );
    run.later(SETTLE - Duration::from_secs(2));
    assert_eq!(
        run.end(&answers),
        Decision::Advance(Advance::to(ClusterPhase::Installed))
    );

    // The API down for a while: the run's own window starts over when it is back.
    let mut run = Run::installing();
    answers.operators = Ok(vec![settled_op(1)]);
    run.end(&answers);
    run.later(SETTLE - Duration::from_secs(1));
    let down = Answers {
        cluster: Err(Trouble::Api("connection refused".into())),
        ..answers.clone()
    };
    assert!(matches!(run.end(&down), Decision::Wait(Waiting::Api(_))));
    assert_eq!(run.memory.settled_since, None);
    run.later(Duration::from_secs(2));
    assert!(matches!(
        run.end(&answers),
        Decision::Wait(Waiting::Settling { .. })
    ));
}

/// Issue 40: a wait past openshift-install's limit ends the run as failed, saying what held it
/// (the operators and their conditions); a new run (`cluster up` again) waits anew.
#[test]
fn a_wait_past_its_limit_fails_the_run_with_what_held_it() {
    let mut run = Run::new();
    let mut answers = Answers::default();
    assert_eq!(
        run.end(&answers),
        Decision::Wait(Waiting::BootstrapComplete)
    );
    run.later(BOOTSTRAP_TIMEOUT - Duration::from_secs(1));
    assert_eq!(
        run.end(&answers),
        Decision::Wait(Waiting::BootstrapComplete)
    );
    run.later(Duration::from_secs(1));
    assert_eq!(
        run.end(&answers),
        Decision::Fail(
            "bootstrap did not complete within 50m (orchestration.bootstrap_timeout); still waiting for bootstrap complete (kube-system/bootstrap): `okd-appliance cluster up` again waits anew"
                .into()
        )
    );
    // `cluster up` again: a new run's memory, a new wait.
    run.memory = Memory {
        machines_started: true,
        ..Memory::default()
    };
    assert_eq!(
        run.end(&answers),
        Decision::Wait(Waiting::BootstrapComplete)
    );

    // Installing: a Degraded operator past the install limit is named with its condition.
    let mut run = Run::installing();
    answers.version = Some(done_version());
    answers.operators = Ok(vec![operator("ingress", "True", "False", "True")]);
    assert!(matches!(
        run.end(&answers),
        Decision::Wait(Waiting::Operators(_))
    ));
    run.later(INSTALL_TIMEOUT);
    let Decision::Fail(why) = run.end(&answers) else {
        panic!("not failed")
    };
    assert!(
        why.starts_with("the cluster did not install within 1h 10m (orchestration.install_timeout); still waiting for cluster operators to settle: ingress (Degraded)"),
        "{why}"
    );
}
