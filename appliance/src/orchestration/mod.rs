//! The install orchestration: `okd-appliance cluster up` takes the cluster from its config to
//! installed, doing what people do by hand after starting the VMs.
//!
//! Inside `serve`, one task follows the journal into each node's install phase
//! ([`phases`]). When asked (`cluster up`, through the admin socket) a second task drives the
//! install, one poll at a time. Every rule is in [`decide::next`], a pure function of the
//! phases, the run's memory and what the poll observed; this module fetches what it asks for
//! and applies what it decides:
//!
//! 1. bootstrap and masters: created and powered on through the control provider (nothing to
//!    do with `provider: none`: someone powers them);
//! 2. bootstrap complete (the `kube-system/bootstrap` ConfigMap, then the etcd operator's
//!    `EtcdBootstrapMemberRemoved` where it exists): the bootstrap node is drained from the
//!    load balancer, and once its connections are gone (or the drain timeout closed them)
//!    destroyed, powered off or kept (`orchestration.bootstrap_after_complete`);
//! 3. the workers (`cluster scale` sets how many) are created and powered on;
//! 4. installed: every master and wanted worker Ready, ClusterVersion Available and neither
//!    Failing nor Progressing, then no ClusterOperator progressing for `orchestration.settle`.
//!
//! Every poll also approves the kubelet certificate requests of known nodes that this appliance
//! installed ([`csr`]) and records which nodes joined and are Ready.
//!
//! Architecture invariants:
//! - Resumable: every step is idempotent and the cluster phase is persisted; an appliance
//!   that restarts with an unfinished `up` resumes it, and `up` again continues where it was.
//! - It never blocks a service: it runs on its own tasks, changes the load balancer only
//!   through `lb::drain`, like the admin socket, and reads it through `Pools::served_backends_of`.
//! - An unreachable API is waited for (it is, for the first minutes of every install); a
//!   machine that can't be created or powered stops the run with the provider's reason.

pub mod cluster;
pub mod csr;
pub mod decide;
mod error;
pub mod phases;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::control::{self, Action, AnyProvider, Provider as _};
use crate::journal::{EventKind, Journal};
use crate::lb::SharedPools;
use crate::plan::machines::MachineSpec;
use crate::plan::{self, Plan};
use crate::service::{Context, Running};
use crate::vocabulary::AfterBootstrap;
use crate::vocabulary::Role;
use cluster::{Cluster, ClusterError};
use decide::{Decision, Memory, Observed, Query, State, Trouble, Waiting};
pub use error::RunError;
use phases::{ClusterPhase, NodePhase, Phases, Progress, Step};

/// The orchestration as the admin socket sees it.
#[derive(Clone)]
pub struct Orchestrator {
    phases: Phases,
    plan: plan::Handle,
    journal: Journal,
    pools: SharedPools,
    shutdown: CancellationToken,
    /// Only the active host of a pair drives the install.
    active: crate::ha::Activity,
    run: Arc<Mutex<RunState>>,
}

#[derive(Debug, Default)]
struct RunState {
    /// The running `up`, cancelled by `down`.
    cancel: Option<CancellationToken>,
    /// What it waits for now (the API, bootstrap, nodes), in the phase it was decided in.
    waiting: Option<(ClusterPhase, Waiting)>,
    /// Why the last run stopped short.
    failed: Option<String>,
}

/// Reads the phase record and starts the phase tracker; resumes an unfinished `up`.
pub fn start(ctx: &Context, pools: SharedPools) -> anyhow::Result<(Orchestrator, Running)> {
    let plan = ctx.plan.load();
    let names: Vec<String> = plan
        .orchestration
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .collect();
    let scope = plan.host_cluster.as_ref().map(|c| format!("cluster {c}"));
    let phases = Phases::load(&plan.state_dir, &names, ctx.journal.clone())?
        .reporting(ctx.faults.clone(), scope);
    let orchestrator = Orchestrator {
        phases,
        plan: Arc::clone(&ctx.plan),
        journal: ctx.journal.clone(),
        pools,
        shutdown: ctx.shutdown.clone(),
        active: ctx.active.clone(),
        run: Arc::default(),
    };
    let tracker = orchestrator.clone();
    let running: Running = Box::pin(async move {
        let mut events = tracker.journal.subscribe();
        if tracker.phases.snapshot().up_requested {
            tracing::info!("resuming the unfinished `cluster up`");
            if let Err(why) = tracker.up().await {
                tracing::warn!("can't resume `cluster up`: {why}");
                tracker.journal.publish(
                    None,
                    EventKind::OrchestrationFailed {
                        why: why.to_string(),
                    },
                );
            }
        }
        loop {
            tokio::select! {
                () = tracker.shutdown.cancelled() => return Ok(()),
                event = events.recv() => match event {
                    Ok(e) => tracker.phases.observe(&e).await,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        // What the missed events would have moved is in the install markers.
                        tracing::warn!(
                            "install phases missed {n} journal events; reconciling them with the install markers"
                        );
                        let plan = tracker.plan.load_full();
                        let nodes: Vec<String> =
                            plan.boot.iter().map(|b| b.node.clone()).collect();
                        tracker
                            .phases
                            .reconcile_markers(plan.state_dir.clone(), nodes)
                            .await;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    });
    Ok((orchestrator, running))
}

/// `cluster status`, for the CLI and scripts (the admin socket's JSON, read back by the CLI).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunStatus {
    pub cluster: Option<ClusterPhase>,
    pub cluster_steps: Vec<Step<ClusterPhase>>,
    /// An `up` is running.
    pub running: bool,
    pub up_requested: bool,
    pub waiting_for: Option<String>,
    pub failed: Option<String>,
    pub workers_wanted: Option<usize>,
    pub nodes: Vec<NodeView>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeView {
    pub name: String,
    pub role: Role,
    pub phase: NodePhase,
    pub steps: Vec<Step<NodePhase>>,
}

impl std::fmt::Debug for Orchestrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orchestrator")
            .field("run", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl Orchestrator {
    pub fn status(&self) -> RunStatus {
        let progress = self.phases.snapshot();
        let plan = self.plan.load();
        let run = self.lock();
        RunStatus {
            cluster: progress.cluster_phase(),
            cluster_steps: progress.cluster.clone(),
            running: run.cancel.is_some(),
            up_requested: progress.up_requested,
            waiting_for: decide::reason_in(run.waiting.as_ref(), progress.cluster_phase()),
            failed: run.failed.clone(),
            workers_wanted: progress.workers_wanted,
            nodes: plan
                .orchestration
                .nodes
                .iter()
                .map(|n| NodeView {
                    name: n.name.clone(),
                    role: n.role,
                    phase: progress.node_phase(&n.name),
                    steps: progress.nodes.get(&n.name).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }

    /// What the run waits for, if it was decided in `phase` (the cluster's phase as the
    /// caller read it with [`Orchestrator::progress`]).
    pub fn waiting_in(&self, phase: Option<ClusterPhase>) -> Option<String> {
        decide::reason_in(self.lock().waiting.as_ref(), phase)
    }

    /// The phase record, for a pair's replication.
    pub fn progress(&self) -> Progress {
        self.phases.snapshot()
    }

    /// Takes the phase record of the pair's active host (on the standby).
    pub async fn replace_progress(&self, progress: Progress) {
        self.phases.update(|p| *p = progress).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RunState> {
        self.run.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts (or resumes) the install; a running one is left alone.
    pub async fn up(&self) -> Result<String, RunError> {
        // Nothing is created or powered before the API's credentials are known to be there:
        // without them the run could start machines and then never see the cluster.
        let kubeconfig = self.plan.load().orchestration.kubeconfig.clone();
        let readable = tokio::task::spawn_blocking({
            let path = kubeconfig.clone();
            move || crate::secrets::read_kubeconfig(&path).map(drop)
        })
        .await
        .map_err(|e| RunError::Task(e.to_string()))?;
        if let Err(e) = readable {
            return Err(RunError::Kubeconfig(e.to_string()));
        }
        let cancel = {
            let mut run = self.lock();
            if run.cancel.is_some() {
                return Ok(format!("already running: {}", self.describe_phase()));
            }
            let cancel = self.shutdown.child_token();
            run.cancel = Some(cancel.clone());
            run.failed = None;
            cancel
        };
        self.phases.update(|p| p.up_requested = true).await;
        if self.phases.snapshot().cluster_phase().is_none() {
            self.phases
                .advance_cluster(ClusterPhase::Bootstrapping)
                .await;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let outcome = this.drive(&cancel).await;
            {
                let mut run = this.lock();
                run.cancel = None;
                run.waiting = None;
                if let Err(why) = &outcome {
                    run.failed = Some(why.to_string());
                }
            }
            match outcome {
                Ok(Finish::Installed) => this.phases.update(|p| p.up_requested = false).await,
                Ok(Finish::Cancelled) => {}
                Err(why) => this.journal.publish(
                    None,
                    EventKind::OrchestrationFailed {
                        why: why.to_string(),
                    },
                ),
            }
        });
        Ok(format!("started: {}", self.describe_phase()))
    }

    fn describe_phase(&self) -> String {
        match self.phases.snapshot().cluster_phase() {
            Some(p) => format!("cluster phase {}", p.name()),
            None => "cluster phase none".into(),
        }
    }

    /// Brings `workers` of the configured workers (in config order) into the cluster.
    pub async fn scale(&self, workers: usize) -> Result<String, RunError> {
        let configured = self.workers(&self.plan.load()).len();
        if workers > configured {
            return Err(RunError::TooFewWorkers {
                configured,
                wanted: workers,
            });
        }
        let before = self.phases.snapshot().workers_wanted.unwrap_or(configured);
        self.phases
            .update(|p| p.workers_wanted = Some(workers))
            .await;
        let started = self.up().await?;
        let shrink = if workers < before {
            // Taking a node out of a cluster is a drain and a delete of its Node first: a
            // person's decision, not a side effect of a number.
            "; workers beyond that are left running (drain them, then `okd-appliance nodes destroy NAME`)"
        } else {
            ""
        };
        Ok(format!(
            "{workers} of {configured} workers wanted{shrink}; {started}"
        ))
    }

    /// Stops a running `up`, destroys every machine through the provider and forgets the
    /// install's phases.
    pub async fn down(&self) -> Result<String, RunError> {
        if let Some(cancel) = self.lock().cancel.take() {
            cancel.cancel();
        }
        let plan = self.plan.load_full();
        let provider =
            AnyProvider::from_plan(&plan.control).map_err(|e| RunError::Provider(e.to_string()))?;
        let Some(provider) = provider else {
            return Err(RunError::NoProvider);
        };
        let reports = control::run(
            &Arc::new(provider),
            &plan.control.machines,
            Action::Destroy,
            &plan.control.timeouts,
            &self.journal,
        )
        .await;
        let failed: Vec<(String, String)> = reports
            .iter()
            .filter_map(|r| {
                r.result
                    .as_ref()
                    .err()
                    .map(|e| (r.node.clone(), e.to_string()))
            })
            .collect();
        self.phases.update(|p| *p = Progress::default()).await;
        if failed.is_empty() {
            Ok(format!("{} machines destroyed", reports.len()))
        } else {
            Err(RunError::NotDestroyed(failed))
        }
    }

    fn workers(&self, plan: &Plan) -> Vec<String> {
        plan.orchestration
            .nodes
            .iter()
            .filter(|n| n.role == Role::Worker)
            .map(|n| n.name.clone())
            .collect()
    }

    /// Records what the run waits for, with the phase it was decided in.
    fn waiting(&self, phase: ClusterPhase, what: Waiting) {
        self.lock().waiting = Some((phase, what));
    }

    fn phase(&self) -> ClusterPhase {
        self.phases
            .snapshot()
            .cluster_phase()
            .unwrap_or(ClusterPhase::Bootstrapping)
    }

    /// The install, poll after poll, until installed, cancelled, or a machine action fails.
    async fn drive(&self, cancel: &CancellationToken) -> Result<Finish, RunError> {
        let mut run = Drive::default();
        loop {
            let plan = self.plan.load_full();
            if let Some(done) = self.poll(&plan, &mut run).await? {
                return Ok(done);
            }
            tokio::select! {
                () = cancel.cancelled() => return Ok(Finish::Cancelled),
                () = tokio::time::sleep(plan.orchestration.poll) => {}
            }
        }
    }

    /// One poll: asks [`decide::next`] and applies its decisions until one ends the poll.
    async fn poll(&self, plan: &Plan, run: &mut Drive) -> Result<Option<Finish>, RunError> {
        let bootstrap = plan.orchestration.bootstrap().map(|b| b.name.as_str());
        let masters: Vec<String> = plan
            .orchestration
            .nodes
            .iter()
            .filter(|n| n.role == Role::Master)
            .map(|n| n.name.clone())
            .collect();
        let mut seen = Observed::default();
        // Each decision but the last fills one observation or starts one set of machines, so a
        // poll takes a handful of them; the bound only guards against a rule that loops.
        for _ in 0..MAX_DECISIONS_PER_POLL {
            let progress = self.phases.snapshot();
            let workers: Vec<String> = {
                let all = self.workers(plan);
                let wanted = progress.workers_wanted.unwrap_or(all.len()).min(all.len());
                all.into_iter().take(wanted).collect()
            };
            let state = State {
                active: self.active.is_active(),
                progress: &progress,
                bootstrap,
                single_node: plan.orchestration.single_node,
                masters: &masters,
                workers: &workers,
                drain_timeout: self.pools.load().drain_timeout(),
                settle: plan.orchestration.settle,
                now: Instant::now(),
                wall: phases::unix_seconds(std::time::SystemTime::now()),
                bootstrap_timeout: plan.orchestration.bootstrap_timeout,
                install_timeout: plan.orchestration.install_timeout,
            };
            let phase = state.phase();
            match decide::next(&mut run.memory, &state, &seen) {
                Decision::Observe(query) => {
                    self.answered(phase, self.fetch(plan, run, query, &mut seen))
                        .await;
                }
                Decision::Start { nodes, drain } => {
                    self.power_on(plan, &nodes).await?;
                    if let Some(b) = drain {
                        crate::lb::drain::drain(&self.pools.load(), &b, &self.journal);
                    }
                }
                Decision::Wait(what) => {
                    self.waiting(phase, what);
                    return Ok(None);
                }
                Decision::Advance(step) => {
                    if let Some(b) = &step.retire {
                        self.retire_bootstrap(plan, b).await?;
                    }
                    if let Some(what) = step.note {
                        self.journal
                            .publish(None, EventKind::OrchestrationNote { what });
                    }
                    self.phases.advance_cluster(step.to).await;
                    if let Some(b) = &step.drain {
                        crate::lb::drain::drain(&self.pools.load(), b, &self.journal);
                    }
                    if let Some(what) = step.waiting {
                        self.waiting(step.to, what);
                    }
                    return Ok((step.to == ClusterPhase::Installed).then_some(Finish::Installed));
                }
                Decision::Installed => return Ok(Some(Finish::Installed)),
                // The run ends; `cluster status` and the journal say why (the spawner).
                Decision::Fail(why) => return Err(RunError::Decided(why)),
            }
        }
        tracing::error!(
            "the install decided {MAX_DECISIONS_PER_POLL} times in one poll; trying again at the next"
        );
        Ok(None)
    }

    /// Awaits one observation. One the API has not answered within [`SLOW_ANSWER`] is said
    /// while it is awaited (`cluster status`: "no answer for ..."), and what was said before
    /// comes back once it answers: a stalled API is otherwise seen only at the request's
    /// timeout, the last reason shown meanwhile as if nothing were wrong.
    async fn answered(&self, phase: ClusterPhase, fetch: impl Future<Output = ()>) {
        let asked = Instant::now();
        let mut fetch = std::pin::pin!(fetch);
        if tokio::time::timeout(SLOW_ANSWER, &mut fetch).await.is_ok() {
            return;
        }
        let before = self
            .lock()
            .waiting
            .replace((phase, Waiting::Unanswered(asked)));
        fetch.await;
        let mut run = self.lock();
        if run.waiting == Some((phase, Waiting::Unanswered(asked))) {
            run.waiting = before;
        }
    }

    /// Fetches one observation [`decide::next`] asked for.
    async fn fetch(&self, plan: &Plan, run: &mut Drive, query: Query, seen: &mut Observed) {
        if query == Query::Cluster {
            seen.cluster = Some(self.look(plan, run).await);
            return;
        }
        if query == Query::OpenToBootstrap {
            let pools = self.pools.load();
            let open = plan.orchestration.bootstrap().map_or(0, |b| {
                pools
                    .served_backends_of(&b.name)
                    .map(|be| be.active())
                    .sum()
            });
            seen.open_to_bootstrap = Some(open);
            return;
        }
        let Some(cluster) = run.cluster.as_ref() else {
            // Asked for only once the cluster was looked at; if not, look first.
            seen.cluster = None;
            return;
        };
        match query {
            Query::BootstrapComplete => {
                seen.bootstrap_complete = Some(
                    cluster
                        .bootstrap_complete()
                        .await
                        .map_err(|e| e.to_string()),
                );
            }
            Query::Etcd => {
                seen.etcd = Some(
                    cluster
                        .etcd_bootstrap_member_removed()
                        .await
                        .map_err(|e| e.to_string()),
                );
            }
            Query::Version => seen.version = Some(cluster.cluster_version().await.ok().flatten()),
            Query::Operators => {
                seen.operators = Some(cluster.operators().await.map_err(|e| e.to_string()));
            }
            Query::Cluster | Query::OpenToBootstrap => unreachable!("answered above"),
        }
    }

    /// Connects to the API (again, when the kubeconfig or its settings changed), then
    /// approves certificate requests and records the nodes it shows.
    async fn look(&self, plan: &Plan, run: &mut Drive) -> Result<(), Trouble> {
        if let Some(c) = &run.cluster {
            if !c.made_from(&plan.orchestration) {
                // A reload named another kubeconfig or API address: the next requests go there.
                tracing::info!(
                    "the reloaded orchestration settings name another cluster API client"
                );
                run.cluster = None;
            } else if c.kubeconfig_changed().await {
                tracing::info!(
                    "{} changed: reading it again",
                    plan.orchestration.kubeconfig.display()
                );
                run.cluster = None;
            }
        }
        if run.cluster.is_none() {
            run.cluster = Some(
                Cluster::connect(&plan.orchestration)
                    .await
                    .map_err(|e| Trouble::Api(e.to_string()))?,
            );
        }
        let cluster = run.cluster.as_ref().expect("connected above");
        match self.observe(plan, cluster, &mut run.csrs).await {
            Ok(()) => Ok(()),
            Err(e @ ClusterError::Api { .. }) => Err(Trouble::Api(e.to_string())),
            Err(e) => {
                // A kubeconfig that changed under us: read it again next time.
                run.cluster = None;
                Err(Trouble::Client(e.to_string()))
            }
        }
    }

    /// Approves the known kubelets' certificate requests and records joined and Ready nodes.
    async fn observe(
        &self,
        plan: &Plan,
        cluster: &Cluster,
        memory: &mut CsrMemory,
    ) -> Result<(), ClusterError> {
        let nodes = cluster.nodes().await?;
        let known: HashSet<&str> = plan
            .orchestration
            .nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        for n in nodes.iter().filter(|n| known.contains(n.name.as_str())) {
            self.phases.reach(&n.name, NodePhase::Joined).await;
            if n.ready {
                self.phases.reach(&n.name, NodePhase::Ready).await;
            }
        }
        let registered: HashSet<String> = nodes.into_iter().map(|n| n.name).collect();
        let domain = plan
            .orchestration
            .api_server_name
            .strip_prefix("api-int.")
            .unwrap_or_default()
            .to_owned();
        let progress = self.phases.snapshot();
        let installs = csr::install_attempts(&progress);
        let approved_clients: HashMap<String, u64> =
            progress.approved_clients.into_iter().collect();
        let requests = cluster.certificate_requests().await?;
        let listed: Vec<csr::Listed<'_>> = requests
            .iter()
            .filter_map(|r| {
                let conditions = r.status.as_ref().and_then(|s| s.conditions.as_deref());
                let state = match conditions {
                    None | Some([]) => csr::State::Pending,
                    Some(c) if c.iter().any(|c| c.type_ == "Approved") => csr::State::Approved,
                    Some(_) => csr::State::Decided,
                };
                let spec = &r.spec;
                Some(csr::Listed {
                    name: r.metadata.name.as_deref()?,
                    state,
                    request: csr::Request {
                        signer: &spec.signer_name,
                        username: spec.username.as_deref().unwrap_or_default(),
                        groups: spec.groups.as_deref().unwrap_or_default(),
                        usages: spec.usages.as_deref().unwrap_or_default(),
                        pem: &spec.request.0,
                        created: r
                            .metadata
                            .creation_timestamp
                            .as_ref()
                            .and_then(|t| u64::try_from(t.0.as_second()).ok()),
                    },
                })
            })
            .collect();
        let facts = csr::Facts {
            nodes: &plan.orchestration.nodes,
            domain: &domain,
            registered: &registered,
            installs: &installs,
            approved_clients: &approved_clients,
            now: phases::unix_seconds(std::time::SystemTime::now()),
        };
        let verdicts = csr::judge(&listed, &facts);
        // Forget what no longer waits (approved, decided by someone else, or gone).
        memory
            .refused
            .retain(|name, _| verdicts.iter().any(|(n, _)| n == name));
        let by_name: HashMap<&str, &k8s_openapi::api::certificates::v1::CertificateSigningRequest> =
            requests
                .iter()
                .filter_map(|r| Some((r.metadata.name.as_deref()?, r)))
                .collect();
        for (name, verdict) in verdicts {
            match verdict {
                Ok(approval) => {
                    let message = format!(
                        "okd-appliance: {} certificate of configured node {}",
                        approval.kind.name(),
                        approval.node
                    );
                    cluster.approve(by_name[name], &message).await?;
                    if approval.kind == csr::Kind::Client
                        && let Some(&attempt) = installs.get(&approval.node)
                    {
                        let node = approval.node.clone();
                        self.phases
                            .update(|p| {
                                p.approved_clients.insert(node, attempt);
                            })
                            .await;
                    }
                    self.journal.publish(
                        Some(approval.node),
                        EventKind::CsrApproved {
                            csr: name.to_owned(),
                            kind: approval.kind.name(),
                        },
                    );
                }
                // Judged again at every poll (a serving request waits for its Node); told once
                // per reason.
                Err(why) => {
                    if memory.refused.get(name) != Some(&why) {
                        memory.refused.insert(name.to_owned(), why.clone());
                        self.journal.publish(
                            None,
                            EventKind::CsrRefused {
                                csr: name.to_owned(),
                                why,
                            },
                        );
                    }
                }
            }
        }
        Ok(())
    }

    async fn power_on(&self, plan: &Plan, nodes: &[String]) -> Result<(), RunError> {
        let machines: Vec<MachineSpec> = nodes
            .iter()
            .filter_map(|n| plan.control.machine(n).cloned())
            .collect();
        if machines.is_empty() {
            return Ok(());
        }
        let Some(provider) =
            AnyProvider::from_plan(&plan.control).map_err(|e| RunError::Provider(e.to_string()))?
        else {
            // `provider: none`: the machines are someone else's to power.
            return Ok(());
        };
        let provider = Arc::new(provider);
        self.waiting(self.phase(), Waiting::Machines(nodes.to_vec()));
        for action in [Action::Ensure, Action::PowerOn] {
            let reports = control::run(
                &provider,
                &machines,
                action,
                &plan.control.timeouts,
                &self.journal,
            )
            .await;
            if let Some(failed) = reports.iter().find(|r| r.result.is_err()) {
                let e = failed.result.as_ref().expect_err("found failed");
                return Err(RunError::Machine {
                    action: action.name(),
                    node: failed.node.clone(),
                    through: Some(provider.describe()),
                    error: e.to_string(),
                });
            }
        }
        Ok(())
    }

    async fn retire_bootstrap(&self, plan: &Plan, bootstrap: &str) -> Result<(), RunError> {
        let action = match plan.orchestration.after_bootstrap {
            AfterBootstrap::Keep => return Ok(()),
            AfterBootstrap::PowerOff => Action::PowerOff,
            AfterBootstrap::Destroy => Action::Destroy,
        };
        let Some(machine) = plan.control.machine(bootstrap).cloned() else {
            return Ok(());
        };
        let Some(provider) =
            AnyProvider::from_plan(&plan.control).map_err(|e| RunError::Provider(e.to_string()))?
        else {
            tracing::info!(
                "bootstrap complete: {bootstrap} is out of the load balancer; with provider none, power it off yourself"
            );
            return Ok(());
        };
        self.waiting(
            self.phase(),
            Waiting::Retire {
                node: bootstrap.to_owned(),
                action: action.name(),
            },
        );
        let reports = control::run(
            &Arc::new(provider),
            &[machine],
            action,
            &plan.control.timeouts,
            &self.journal,
        )
        .await;
        match reports.into_iter().next().map(|r| r.result) {
            Some(Err(e)) => Err(RunError::Machine {
                action: action.name(),
                node: bootstrap.to_owned(),
                through: None,
                error: e.to_string(),
            }),
            _ => Ok(()),
        }
    }
}

enum Finish {
    Installed,
    Cancelled,
}

/// What one run of `up` keeps between polls: the decisions' memory, the API client and the
/// certificate approval's memory.
#[derive(Debug, Default)]
struct Drive {
    memory: Memory,
    cluster: Option<Cluster>,
    csrs: CsrMemory,
}

/// At most this many decisions in one poll ([`Orchestrator::poll`]).
const MAX_DECISIONS_PER_POLL: usize = 32;

/// An API request unanswered this long is said in `cluster status` while it waits: a
/// kube-apiserver answers the orchestration's reads in milliseconds.
const SLOW_ANSWER: std::time::Duration = std::time::Duration::from_secs(2);

/// What the certificate approval remembers between polls.
#[derive(Debug, Default)]
struct CsrMemory {
    /// Pending requests not approved, with the reason last journaled.
    refused: HashMap<String, String>,
}
