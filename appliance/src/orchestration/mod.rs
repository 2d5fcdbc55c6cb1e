//! The install orchestration: `okd-appliance cluster up` takes the cluster from its config to
//! installed, doing what people do by hand after starting the VMs.
//!
//! Inside `serve`, one task follows the journal into each node's install phase
//! ([`phases`]). When asked (`cluster up`, through the admin socket) a second task drives the
//! install, one poll at a time:
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
//! - It never blocks a service: it runs on its own tasks and talks to the load balancer only
//!   through `lb::drain`, like the admin socket.
//! - An unreachable API is waited for (it is, for the first minutes of every install); a
//!   machine that can't be created or powered stops the run with the provider's reason.

pub mod cluster;
pub mod csr;
pub mod phases;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::AfterBootstrap;
use crate::control::{self, Action, AnyProvider, Provider as _};
use crate::journal::{EventKind, Journal};
use crate::lb::SharedPools;
use crate::plan::machines::MachineSpec;
use crate::plan::{self, Plan};
use crate::service::{Context, Running};
use crate::vocabulary::Role;
use cluster::{Cluster, ClusterError, EtcdBootstrap};
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
    /// What it waits for now (the API, bootstrap, nodes).
    waiting_for: Option<String>,
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
    let phases = Phases::load(&plan.state_dir, &names, ctx.journal.clone())?;
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
                tracker
                    .journal
                    .publish(None, EventKind::OrchestrationFailed { why });
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

/// `cluster status`, for the CLI and scripts.
#[derive(Debug, Serialize)]
pub struct Status {
    pub cluster: Option<&'static str>,
    pub cluster_steps: Vec<StepView>,
    /// An `up` is running.
    pub running: bool,
    pub up_requested: bool,
    pub waiting_for: Option<String>,
    pub failed: Option<String>,
    pub workers_wanted: Option<usize>,
    pub nodes: Vec<NodeView>,
}

#[derive(Debug, Serialize)]
pub struct NodeView {
    pub name: String,
    pub role: &'static str,
    pub phase: &'static str,
    pub steps: Vec<StepView>,
}

#[derive(Debug, Serialize)]
pub struct StepView {
    pub phase: &'static str,
    /// Seconds since the epoch.
    pub at: u64,
}

impl std::fmt::Debug for Orchestrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orchestrator")
            .field("run", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl Orchestrator {
    pub fn status(&self) -> Status {
        let progress = self.phases.snapshot();
        let plan = self.plan.load();
        let run = self.lock();
        Status {
            cluster: progress.cluster_phase().map(ClusterPhase::name),
            cluster_steps: progress
                .cluster
                .iter()
                .map(|s| StepView {
                    phase: s.phase.name(),
                    at: s.at,
                })
                .collect(),
            running: run.cancel.is_some(),
            up_requested: progress.up_requested,
            waiting_for: run.waiting_for.clone(),
            failed: run.failed.clone(),
            workers_wanted: progress.workers_wanted,
            nodes: plan
                .orchestration
                .nodes
                .iter()
                .map(|n| NodeView {
                    name: n.name.clone(),
                    role: n.role.as_str(),
                    phase: progress.node_phase(&n.name).name(),
                    steps: progress
                        .nodes
                        .get(&n.name)
                        .map(|s| steps(s))
                        .unwrap_or_default(),
                })
                .collect(),
        }
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
    pub async fn up(&self) -> Result<String, String> {
        // Nothing is created or powered before the API's credentials are known to be there:
        // without them the run could start machines and then never see the cluster.
        let kubeconfig = self.plan.load().orchestration.kubeconfig.clone();
        let readable = tokio::task::spawn_blocking({
            let path = kubeconfig.clone();
            move || crate::secrets::read_kubeconfig(&path).map(drop)
        })
        .await
        .map_err(|e| e.to_string())?;
        if let Err(e) = readable {
            return Err(format!(
                "the admin kubeconfig can't be used ({e}): `openshift-install create ignition-configs` writes auth/kubeconfig in the install directory (or set orchestration.kubeconfig); no machine was touched"
            ));
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
                run.waiting_for = None;
                if let Err(why) = &outcome {
                    run.failed = Some(why.clone());
                }
            }
            match outcome {
                Ok(Finish::Installed) => this.phases.update(|p| p.up_requested = false).await,
                Ok(Finish::Cancelled) => {}
                Err(why) => this
                    .journal
                    .publish(None, EventKind::OrchestrationFailed { why }),
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
    pub async fn scale(&self, workers: usize) -> Result<String, String> {
        let configured = self.workers(&self.plan.load()).len();
        if workers > configured {
            return Err(format!(
                "the config has {configured} worker{}: add nodes with role worker to scale to {workers}",
                if configured == 1 { "" } else { "s" }
            ));
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
    pub async fn down(&self) -> Result<String, String> {
        if let Some(cancel) = self.lock().cancel.take() {
            cancel.cancel();
        }
        let plan = self.plan.load_full();
        let provider = AnyProvider::from_plan(&plan.control).map_err(|e| e.to_string())?;
        let Some(provider) = provider else {
            return Err(
                "control.provider is none: okd-appliance made no machines, so it destroys none"
                    .into(),
            );
        };
        let reports = control::run(
            &Arc::new(provider),
            &plan.control.machines,
            Action::Destroy,
            &plan.control.timeouts,
            &self.journal,
        )
        .await;
        let failed: Vec<String> = reports
            .iter()
            .filter_map(|r| r.result.as_ref().err().map(|e| format!("{}: {e}", r.node)))
            .collect();
        self.phases.update(|p| *p = Progress::default()).await;
        if failed.is_empty() {
            Ok(format!("{} machines destroyed", reports.len()))
        } else {
            Err(failed.join("; "))
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

    fn waiting(&self, what: impl Into<String>) {
        self.lock().waiting_for = Some(what.into());
    }

    /// The install, poll after poll, until installed, cancelled, or a machine action fails.
    async fn drive(&self, cancel: &CancellationToken) -> Result<Finish, String> {
        let mut run = Drive::default();
        loop {
            let plan = self.plan.load_full();
            let poll = plan.orchestration.poll;
            if !self.active.is_active() {
                self.waiting("this host to become the active one of its pair");
            } else if let Some(done) = self.step(&plan, &mut run).await? {
                return Ok(done);
            }
            tokio::select! {
                () = cancel.cancelled() => return Ok(Finish::Cancelled),
                () = tokio::time::sleep(poll) => {}
            }
        }
    }

    async fn step(&self, plan: &Plan, run: &mut Drive) -> Result<Option<Finish>, String> {
        let progress = self.phases.snapshot();
        let phase = progress
            .cluster_phase()
            .unwrap_or(ClusterPhase::Bootstrapping);
        let bootstrap = plan.orchestration.bootstrap().map(|b| b.name.clone());
        let masters: Vec<String> = plan
            .orchestration
            .nodes
            .iter()
            .filter(|n| n.role == Role::Master)
            .map(|n| n.name.clone())
            .collect();
        let workers: Vec<String> = {
            let all = self.workers(plan);
            let wanted = progress.workers_wanted.unwrap_or(all.len()).min(all.len());
            all.into_iter().take(wanted).collect()
        };

        if !run.machines_started {
            let mut first: Vec<String> = masters.clone();
            if phase < ClusterPhase::BootstrapComplete {
                first.extend(bootstrap.clone());
            }
            self.power_on(plan, &first).await?;
            if phase >= ClusterPhase::BootstrapComplete
                && let Some(b) = &bootstrap
            {
                // A drain lives in memory: after a restart, the bootstrap leaves the pools again.
                crate::lb::drain::drain(&self.pools.load(), b, &self.journal);
                run.drain_started = Some(Instant::now());
            }
            run.machines_started = true;
        }
        if phase >= ClusterPhase::BootstrapRemoved && run.workers_started != Some(workers.len()) {
            self.power_on(plan, &workers).await?;
            run.workers_started = Some(workers.len());
        }

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
            match Cluster::connect(&plan.orchestration).await {
                Ok(c) => run.cluster = Some(c),
                Err(e) => {
                    self.waiting(format!("the cluster API: {e}"));
                    return Ok(None);
                }
            }
        }
        let cluster = run.cluster.as_ref().expect("connected above");
        match self.observe(plan, cluster, &mut run.csrs).await {
            Ok(()) => {}
            Err(e @ ClusterError::Api { .. }) => {
                self.waiting(format!("the cluster API: {e}"));
                return Ok(None);
            }
            Err(e) => {
                // A kubeconfig that changed under us: read it again next time.
                run.cluster = None;
                self.waiting(e.to_string());
                return Ok(None);
            }
        }

        match phase {
            ClusterPhase::Bootstrapping => {
                self.waiting("bootstrap complete (kube-system/bootstrap)");
                let complete = cluster
                    .bootstrap_complete()
                    .await
                    .map_err(|e| e.to_string());
                if complete != Ok(true) {
                    return Ok(None);
                }
                // Destroying the bootstrap while etcd still counts its member can leave etcd
                // without quorum: wait as `openshift-install wait-for bootstrap-complete` does.
                match cluster.etcd_bootstrap_member_removed().await {
                    Ok(EtcdBootstrap::Removed) => {}
                    Ok(EtcdBootstrap::NotYet(seen)) => {
                        let version = cluster.cluster_version().await.ok().flatten();
                        let old = version
                            .as_ref()
                            .filter(|v| v.predates_etcd_bootstrap_condition());
                        let Some(old) = old else {
                            self.waiting(format!(
                                "etcd to remove its bootstrap member (etcds/cluster: {seen})"
                            ));
                            return Ok(None);
                        };
                        self.journal.publish(
                            None,
                            EventKind::OrchestrationNote {
                                what: format!(
                                    "not waiting for EtcdBootstrapMemberRemoved: the cluster is at {}, older than the condition (4.12)",
                                    old.version.as_deref().unwrap_or_default()
                                ),
                            },
                        );
                    }
                    Err(e) => {
                        self.waiting(format!("the cluster API: {e}"));
                        return Ok(None);
                    }
                }
                self.phases
                    .advance_cluster(ClusterPhase::BootstrapComplete)
                    .await;
                if let Some(b) = &bootstrap {
                    crate::lb::drain::drain(&self.pools.load(), b, &self.journal);
                    run.drain_started = Some(Instant::now());
                    self.waiting(format!("connections to {b} to end"));
                }
                Ok(None)
            }
            ClusterPhase::BootstrapComplete => {
                let Some(b) = &bootstrap else {
                    self.phases
                        .advance_cluster(ClusterPhase::BootstrapRemoved)
                        .await;
                    return Ok(None);
                };
                let pools = self.pools.load();
                let started = *run.drain_started.get_or_insert_with(Instant::now);
                let open: usize = pools
                    .frontends
                    .iter()
                    .filter(|p| p.served)
                    .flat_map(|p| p.backends.iter().filter(|be| &be.name == b))
                    .map(|be| be.active())
                    .sum();
                // The drain closes what is left at its timeout; a moment more for that.
                let limit = pools.drain_timeout + Duration::from_secs(2);
                if open > 0 && started.elapsed() < limit {
                    self.waiting(format!("{open} connections to {b} to end"));
                    return Ok(None);
                }
                self.retire_bootstrap(plan, b).await?;
                self.phases
                    .advance_cluster(ClusterPhase::BootstrapRemoved)
                    .await;
                self.waiting("the workers to start");
                Ok(None)
            }
            ClusterPhase::BootstrapRemoved => {
                self.phases
                    .advance_cluster(ClusterPhase::WorkersJoining)
                    .await;
                Ok(None)
            }
            // Installed too: `cluster scale` after the install brings workers in the same way.
            ClusterPhase::WorkersJoining | ClusterPhase::Installed => {
                let progress = self.phases.snapshot();
                let not_ready: Vec<&String> = masters
                    .iter()
                    .chain(&workers)
                    .filter(|n| progress.node_phase(n) < NodePhase::Ready)
                    .collect();
                if !not_ready.is_empty() {
                    self.waiting(format!(
                        "nodes to be Ready: {}",
                        not_ready
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    run.settled_since = None;
                    return Ok(None);
                }
                // `openshift-install wait-for install-complete`'s rule (openshift/installer,
                // cmd/openshift-install/command/waitfor.go: `waitForInitializedCluster`, then
                // `waitForStableOperators`), made stricter: see `settled`.
                let version = cluster.cluster_version().await.unwrap_or(None);
                let done = version
                    .as_ref()
                    .is_some_and(|v| cluster_version_done(&v.conditions));
                if !done {
                    self.waiting("ClusterVersion version: Available, not Failing, not Progressing");
                    run.settled_since = None;
                    return Ok(None);
                }
                let busy = match cluster.operators().await {
                    Ok(ops) => unsettled(&ops),
                    Err(e) => Some(e.to_string()),
                };
                if let Some(busy) = busy {
                    self.waiting(format!("cluster operators to settle: {busy}"));
                    run.settled_since = None;
                    return Ok(None);
                }
                let since = *run.settled_since.get_or_insert_with(Instant::now);
                if since.elapsed() < plan.orchestration.settle {
                    self.waiting(format!(
                        "cluster operators settled for {} of {}",
                        humantime::format_duration(Duration::from_secs(since.elapsed().as_secs())),
                        humantime::format_duration(plan.orchestration.settle)
                    ));
                    return Ok(None);
                }
                self.phases.advance_cluster(ClusterPhase::Installed).await;
                Ok(Some(Finish::Installed))
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
        let installs = csr::install_attempts(&self.phases.snapshot());
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
            approved_clients: &memory.approved_clients,
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
                        memory
                            .approved_clients
                            .insert(approval.node.clone(), attempt);
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

    async fn power_on(&self, plan: &Plan, nodes: &[String]) -> Result<(), String> {
        let machines: Vec<MachineSpec> = nodes
            .iter()
            .filter_map(|n| plan.control.machine(n).cloned())
            .collect();
        if machines.is_empty() {
            return Ok(());
        }
        let Some(provider) = AnyProvider::from_plan(&plan.control).map_err(|e| e.to_string())?
        else {
            // `provider: none`: the machines are someone else's to power.
            return Ok(());
        };
        let provider = Arc::new(provider);
        self.waiting(format!("{} to create and start", nodes.join(", ")));
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
                return Err(format!(
                    "{} of {} through {}: {e}",
                    action.name(),
                    failed.node,
                    provider.describe()
                ));
            }
        }
        Ok(())
    }

    async fn retire_bootstrap(&self, plan: &Plan, bootstrap: &str) -> Result<(), String> {
        let action = match plan.orchestration.after_bootstrap {
            AfterBootstrap::Keep => return Ok(()),
            AfterBootstrap::PowerOff => Action::PowerOff,
            AfterBootstrap::Destroy => Action::Destroy,
        };
        let Some(machine) = plan.control.machine(bootstrap).cloned() else {
            return Ok(());
        };
        let Some(provider) = AnyProvider::from_plan(&plan.control).map_err(|e| e.to_string())?
        else {
            tracing::info!(
                "bootstrap complete: {bootstrap} is out of the load balancer; with provider none, power it off yourself"
            );
            return Ok(());
        };
        self.waiting(format!("{bootstrap}: {}", action.name()));
        let reports = control::run(
            &Arc::new(provider),
            &[machine],
            action,
            &plan.control.timeouts,
            &self.journal,
        )
        .await;
        match reports.into_iter().next().map(|r| r.result) {
            Some(Err(e)) => Err(format!("{} of {bootstrap}: {e}", action.name())),
            _ => Ok(()),
        }
    }
}

/// ClusterVersion's own verdict: Available, neither Failing nor Progressing
/// (`waitForInitializedCluster`).
fn cluster_version_done(c: &cluster::Conditions) -> bool {
    let is = |name: &str, value: &str| c.get(name).map(String::as_str) == Some(value);
    is("Available", "True") && is("Failing", "False") && is("Progressing", "False")
}

/// What keeps the cluster operators from being settled, or `None` when every one is Available,
/// not Progressing and not Degraded. An empty list is not settled: the operators are not there
/// yet. Upstream's `waitForStableOperators` looks at Progressing only (False for 30 s); an
/// operator that is not Available, or Degraded, is a failed install to a person, so it is
/// waited for here too. The settle period (`orchestration.settle`) runs once this is `None`.
fn unsettled(ops: &[cluster::OperatorState]) -> Option<String> {
    if ops.is_empty() {
        return Some("no ClusterOperator exists yet".into());
    }
    let is = |o: &cluster::OperatorState, name: &str, value: &str| {
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

fn steps(s: &[Step<NodePhase>]) -> Vec<StepView> {
    s.iter()
        .map(|s| StepView {
            phase: s.phase.name(),
            at: s.at,
        })
        .collect()
}

enum Finish {
    Installed,
    Cancelled,
}

/// What one run of `up` remembers between polls (and forgets with the process, by design:
/// each of these is redone, idempotently, after a restart).
#[derive(Debug, Default)]
struct Drive {
    cluster: Option<Cluster>,
    machines_started: bool,
    workers_started: Option<usize>,
    drain_started: Option<Instant>,
    settled_since: Option<Instant>,
    csrs: CsrMemory,
}

/// What the certificate approval remembers between polls.
#[derive(Debug, Default)]
struct CsrMemory {
    /// Pending requests not approved, with the reason last journaled.
    refused: HashMap<String, String>,
    /// The client certificates approved: node -> its install attempt ([`csr::Facts`]).
    approved_clients: HashMap<String, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator(
        name: &str,
        available: &str,
        progressing: &str,
        degraded: &str,
    ) -> cluster::OperatorState {
        cluster::OperatorState {
            name: name.into(),
            conditions: [
                ("Available", available),
                ("Progressing", progressing),
                ("Degraded", degraded),
            ]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        }
    }

    #[test]
    fn operators_are_settled_only_when_every_one_is_available_and_quiet() {
        // None at all: not there yet.
        assert!(unsettled(&[]).is_some());
        let good = operator("dns", "True", "False", "False");
        assert_eq!(unsettled(std::slice::from_ref(&good)), None);
        // Not Available but not Progressing counted as settled once.
        let down = operator("ingress", "False", "False", "False");
        assert_eq!(
            unsettled(&[good.clone(), down]).as_deref(),
            Some("ingress (not Available)")
        );
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
        let c = |a: &str, f: &str, p: &str| -> cluster::Conditions {
            [("Available", a), ("Failing", f), ("Progressing", p)]
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        };
        assert!(cluster_version_done(&c("True", "False", "False")));
        assert!(!cluster_version_done(&c("True", "", "False")));
        assert!(!cluster_version_done(&c("True", "False", "True")));
        assert!(!cluster_version_done(&c("False", "False", "False")));
    }
}
