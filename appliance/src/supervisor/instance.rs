//! One service instance: its plan handle, journal and cancellation token, starting its services
//! on the sockets bound for it, and what a cluster's instance gives the operator wing (its
//! orchestration, its [`Operator`], its metrics samples).
//!
//! Architecture invariant: an instance's tasks end when its token is cancelled, and its token
//! is a child of the appliance's: a reload retires one instance (a removed cluster) without
//! touching the others, and SIGTERM stops them all.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::ServeError;
use crate::journal::Journal;
use crate::operator::status::{Fixed, Sampler};
use crate::operator::{Operator, ReloadRequest};
use crate::plan;
use crate::replication::Carries;
use crate::service::{self, Running};
use crate::sockets::{BoundSocket, Service};

/// What one instance serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Role {
    /// A cluster file: every service, for its one cluster.
    Everything(String),
    Dns,
    /// DHCP on one segment: the cluster interface it is bound to (`None`: no interface set).
    Dhcp(Option<String>),
    Tftp,
    /// The router at a host's shared frontend: every routed cluster's frontends.
    Router,
    /// HTTP, the load balancer and the orchestration of the cluster with this id.
    Cluster(String),
}

impl Role {
    /// Whose tasks these are, as status names them (`None`: the appliance's own).
    pub(super) fn scope(&self) -> Option<String> {
        match self {
            Role::Everything(_) | Role::Dns | Role::Tftp => None,
            Role::Dhcp(interface) => {
                Some(format!("segment {}", interface.as_deref().unwrap_or("any")))
            }
            Role::Router => Some("shared frontend".to_owned()),
            Role::Cluster(id) => Some(format!("cluster {id}")),
        }
    }

    /// The cluster this instance is, with its orchestration, pools and operator.
    pub(super) fn cluster(&self) -> Option<&str> {
        match self {
            Role::Everything(id) | Role::Cluster(id) => Some(id),
            Role::Dns | Role::Dhcp(_) | Role::Tftp | Role::Router => None,
        }
    }
}

/// A running task and the instance it belongs to.
pub(super) struct Task {
    pub name: &'static str,
    /// The instance's token: once it is cancelled, the task's end is expected.
    pub token: CancellationToken,
    pub running: Running,
    /// How to start the service again after it failed (on its sockets, which stay bound);
    /// `None` for what can't be (the orchestration, replication channels, the fronts).
    pub restart: Option<Restart>,
    /// Whose task it is, as status names it (`cluster okd`, `segment ens19`); `None` for the
    /// appliance's own.
    pub scope: Option<String>,
}

/// Starts a failed service again (see `supervisor::restart`).
pub(super) type Restart = Box<dyn FnMut() -> anyhow::Result<Running> + Send>;

impl Task {
    /// A task that is not started again when it fails.
    pub(super) fn once(name: &'static str, token: CancellationToken, running: Running) -> Task {
        Task {
            name,
            token,
            running,
            restart: None,
            scope: None,
        }
    }
}

/// How a service is started on its sockets, once at start and again after a failure.
type Start = Arc<dyn Fn(Vec<BoundSocket>) -> anyhow::Result<Running> + Send + Sync>;

/// How to start a service again on duplicates of `sockets` (`None`, logged, when they can't be
/// duplicated: the service then runs without a second chance).
fn restartable(name: &'static str, sockets: &[BoundSocket], start: Start) -> Option<Restart> {
    let spare = match sockets.iter().map(BoundSocket::try_clone).collect() {
        Ok(spare) => spare,
        Err(e) => {
            tracing::warn!("{name}: can't keep its sockets for a restart: {e}");
            return None;
        }
    };
    let spare: Vec<BoundSocket> = spare;
    Some(Box::new(move || {
        let sockets = spare
            .iter()
            .map(BoundSocket::try_clone)
            .collect::<std::io::Result<Vec<_>>>()?;
        start(sockets)
    }))
}

#[derive(Debug)]
pub(super) struct Instance {
    pub role: Role,
    pub plan: plan::Handle,
    /// A cluster's own journal; for DNS, DHCP and TFTP, one that routes to the clusters'.
    pub journal: Journal,
    pub token: CancellationToken,
    /// A cluster's load-balanced connections end with this one: cancelled with the appliance,
    /// or a drain timeout after a reload removed the cluster.
    pub connections: CancellationToken,
    /// A cluster's, once started.
    pub operator: Option<Operator>,
    pub sampler: Option<Sampler>,
    /// A cluster's pools, once started (the router routes to them).
    pub pools: Option<crate::lb::SharedPools>,
}

/// What every instance's operator is made with.
#[derive(Debug, Clone)]
pub(super) struct Wing {
    pub reloads: tokio::sync::mpsc::Sender<ReloadRequest>,
    pub ha_host: Option<std::net::Ipv4Addr>,
    pub fixed: Fixed,
    /// Whether the clusters are named in metrics (a host file).
    pub host_mode: bool,
    /// The shared frontend's routes (the layout fills them in once the clusters start).
    pub routes: crate::lb::router::SharedRoutes,
    /// A pair's replication, which each cluster and each segment opens its channel on.
    pub replication: Option<crate::replication::Hub>,
}

impl Instance {
    pub(super) fn new(
        role: Role,
        plan: plan::Plan,
        journal: Journal,
        root: &CancellationToken,
    ) -> Instance {
        Instance {
            role,
            plan: Arc::new(arc_swap::ArcSwap::from_pointee(plan)),
            journal,
            token: root.child_token(),
            connections: root.child_token(),
            operator: None,
            sampler: None,
            pools: None,
        }
    }

    /// Stops this instance: its listeners close and its tasks end now; its load-balanced
    /// connections may go on for the cluster's drain timeout, as a drained backend's do.
    pub(super) fn retire(&self) {
        self.token.cancel();
        let connections = self.connections.clone();
        let grace = self.plan.load().lb.drain_timeout;
        tokio::spawn(async move {
            // Cancelled early when the appliance stops (the token is the appliance's child).
            tokio::select! {
                () = tokio::time::sleep(grace) => connections.cancel(),
                () = connections.cancelled() => {}
            }
        });
    }

    /// The context this instance's services run with.
    pub(super) fn context(&self, base: &service::Context) -> service::Context {
        service::Context {
            plan: Arc::clone(&self.plan),
            journal: self.journal.clone(),
            shutdown: self.token.clone(),
            ..base.clone()
        }
    }

    /// Starts this instance's services on `sockets` (and a cluster's orchestration); nothing
    /// serves until the caller spawns the tasks.
    pub(super) fn start(
        &mut self,
        sockets: Vec<BoundSocket>,
        base: &service::Context,
        wing: &Wing,
    ) -> Result<Vec<Task>, ServeError> {
        let ctx = self.context(base);
        let pools = self
            .role
            .cluster()
            .map(|_| crate::lb::shared_pools(&ctx.plan.load()));
        let mut tasks = self.start_listeners(sockets, &ctx, wing, pools.as_ref(), true)?;
        if let (Role::Dhcp(interface), Some(hub)) = (&self.role, &wing.replication) {
            let channel = format!("segment/{}", interface.as_deref().unwrap_or("any"));
            tasks.push(Task::once(
                "replication",
                self.token.clone(),
                hub.channel(Some(channel), Carries::Leases, &ctx, None, None),
            ));
        }
        let (Some(id), Some(pools)) = (self.role.cluster(), pools) else {
            return Ok(tasks);
        };
        self.pools = Some(Arc::clone(&pools));
        // The install orchestration never keeps the services from starting: without it (an
        // unreadable phase record) `cluster` requests say why.
        let orchestration = match crate::orchestration::start(&ctx, Arc::clone(&pools)) {
            Ok((orchestrator, tracker)) => {
                tasks.push(Task::once("orchestration", self.token.clone(), tracker));
                Ok(orchestrator)
            }
            Err(e) => {
                tracing::error!("install orchestration of cluster {id} unavailable: {e:#}");
                Err(format!("{e:#}"))
            }
        };
        self.sampler = Some(Sampler {
            cluster: wing.host_mode.then(|| id.to_owned()),
            pools: Arc::clone(&pools),
            orchestrator: orchestration.as_ref().ok().cloned(),
            plan: Arc::clone(&ctx.plan),
        });
        if let Some(hub) = &wing.replication {
            // A cluster file's one channel carries everything, unnamed on the wire.
            let (channel, carries) = match &self.role {
                Role::Cluster(id) => (Some(format!("cluster/{id}")), Carries::Cluster),
                _ => (None, Carries::Everything),
            };
            let orchestrator = orchestration.as_ref().ok().cloned();
            tasks.push(Task::once(
                "replication",
                self.token.clone(),
                hub.channel(
                    channel,
                    carries,
                    &ctx,
                    Some(Arc::clone(&pools)),
                    orchestrator,
                ),
            ));
        }
        // The history first: the drains redone below are kept in it too.
        let history = keep_history(&ctx, self.token.clone());
        tasks.push(Task::once("history", self.token.clone(), history));
        restore_drains(&ctx, &pools.load());
        self.operator = Some(Operator::new(
            &ctx,
            pools,
            wing.reloads.clone(),
            orchestration,
            wing.ha_host,
            wing.fixed.clone(),
        ));
        Ok(tasks)
    }

    /// Starts the listener services on `sockets` (at start, and later for a listener whose
    /// address was missing then: `first` false, so a routed cluster's health checks are not
    /// started twice).
    pub(super) fn start_listeners(
        &self,
        sockets: Vec<BoundSocket>,
        ctx: &service::Context,
        wing: &Wing,
        pools: Option<&crate::lb::SharedPools>,
        first: bool,
    ) -> Result<Vec<Task>, ServeError> {
        let mut sockets = sockets;
        let mut take = |of: &[Service]| -> Vec<BoundSocket> {
            sockets
                .extract_if(.., |b| of.contains(&b.spec.service))
                .collect()
        };
        let dns = take(&[Service::Dns]);
        let dhcp = take(&[Service::Dhcp]);
        let tftp = take(&[Service::Tftp]);
        let http = take(&[Service::Http]);
        let lb = take(&[
            Service::KubeApi,
            Service::MachineConfig,
            Service::IngressHttps,
            Service::IngressHttp,
        ]);
        let mut started: Vec<(&'static str, Vec<BoundSocket>, Start)> = Vec::new();
        let with = |start: fn(Vec<BoundSocket>, &service::Context) -> anyhow::Result<Running>| {
            let ctx = ctx.clone();
            Arc::new(move |sockets| start(sockets, &ctx)) as Start
        };
        if !dns.is_empty() {
            started.push(("dns", dns, with(crate::dns::start)));
        }
        if !dhcp.is_empty() {
            started.push(("dhcp", dhcp, with(crate::dhcp::start)));
        }
        if !tftp.is_empty() {
            started.push(("tftp", tftp, with(crate::tftp::start)));
        }
        if !http.is_empty() {
            started.push(("http", http, with(crate::http::start)));
        }
        // A routed cluster's frontends listen at the host's router: its instance only checks
        // its backends.
        let routed = ctx.plan.load().lb.sharing == plan::Sharing::Routed;
        match pools {
            Some(pools) if !lb.is_empty() || (routed && first) => {
                let (ctx, pools, connections) =
                    (ctx.clone(), Arc::clone(pools), self.connections.clone());
                let start: Start =
                    Arc::new(move |lb| crate::lb::start(lb, &ctx, &pools, &connections));
                started.push(("lb", lb, start));
            }
            None if !lb.is_empty() => {
                let (ctx, routes) = (ctx.clone(), Arc::clone(&wing.routes));
                let start: Start = Arc::new(move |lb| crate::lb::router::start(lb, &ctx, &routes));
                started.push(("lb", lb, start));
            }
            _ => {}
        }
        let mut tasks = Vec::new();
        for (name, sockets, start) in started {
            let restart = restartable(name, &sockets, Arc::clone(&start));
            tasks.push(Task {
                name,
                token: self.token.clone(),
                running: start(sockets).map_err(|source| ServeError::Service {
                    service: name,
                    source,
                })?,
                restart,
                scope: self.role.scope(),
            });
        }
        Ok(tasks)
    }
}

/// The cluster journal's history from before this start, read back, and a task that keeps
/// each new event in the same file (`journal::kept`).
fn keep_history(ctx: &service::Context, token: CancellationToken) -> Running {
    let path = crate::journal::kept::path(&ctx.plan.load().state_dir);
    let lines = match crate::journal::kept::read(&path) {
        Ok((earlier, lines)) => {
            ctx.journal.set_earlier(earlier);
            lines
        }
        Err(e) => {
            tracing::warn!("can't read the events kept in {}: {e}", path.display());
            0
        }
    };
    let live = ctx.journal.subscribe();
    Box::pin(async move {
        crate::journal::kept::follow(live, path, lines, token).await;
        Ok(())
    })
}

/// Drains again the nodes the operator drained before this start (`install_state::drained`):
/// a restart never silently puts back into rotation a node someone took out of it.
fn restore_drains(ctx: &service::Context, pools: &crate::lb::pool::Pools) {
    let plan = ctx.plan.load();
    match crate::install_state::drained(&plan.state_dir) {
        Ok(nodes) => {
            for node in nodes {
                if crate::lb::drain::drain(pools, &node, &ctx.journal) > 0 {
                    tracing::info!(
                        "{node} drained again, as it was before this start (`okd-appliance lb undrain {node}` puts it back)"
                    );
                }
            }
        }
        Err(e) => tracing::error!(
            "can't read the drains kept in {}: none is redone: {e}",
            plan.state_dir.display()
        ),
    }
}
