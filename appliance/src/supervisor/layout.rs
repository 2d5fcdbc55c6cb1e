//! What `serve` runs for a config file: one [`Instance`] per plan, and how a reload changes
//! them.
//!
//! A cluster file is one instance that runs every service, as it always did. A host file
//! (docs/design/several-clusters.md) is one DNS instance with every cluster's zones, one DHCP
//! instance per segment, one TFTP instance, and per cluster an instance of HTTP, the load
//! balancer and the orchestration ([`HostViews`]).
//!
//! A reload of a host file may add and remove clusters: a removed cluster's instance is
//! cancelled (its listeners close, its orchestration stops between steps), an added one's
//! sockets are bound and its services started, and every other instance only gets its new
//! plan, so its listeners, connections, leases and running `cluster up` go on. DNS and TFTP
//! addresses stay bound until a restart: a removed cluster's address keeps answering for the
//! others, and a cluster added back finds it bound. A removed cluster's load-balanced
//! connections end with its instance's `connections` token, cancelled its `lb.drain_timeout`
//! later (at once when the appliance stops); its state directory stays. An added cluster's
//! sockets are bound, all or none, before anything changes (the unit keeps
//! `CAP_NET_BIND_SERVICE`, so ports 53, 67, 80 and 443 bind after the privilege drop): a socket
//! that can't be bound refuses the reload and changes nothing.
//!
//! What a reload applies (the keys that take a restart are refused, each named: `needs_restart`
//! in `mod.rs`, and `Layout::restart_keys` here):
//!
//! | keys | on reload |
//! | --- | --- |
//! | `cluster`, `nodes`, `dns.*`, `network.upstream_dns` | new zones, reservations, pools, boot scripts and forwarding policy for the next query |
//! | `network`'s DHCP options (`gateway`, `ntp`, `mtu`, `lease_time`, `domain_search`, `dhcp_pool`), `network.subnet` | the next DHCP reply |
//! | `install.*` | the next HTTP and TFTP request |
//! | `lb.*` | at once: the checker swaps the pools when the plan is loaded (backends that stay keep their state and connections) |
//! | `listen.*` (also when derived from `network.appliance_ip`), `network.interface` | refused, named: sockets are bound once |
//! | `state_dir` | refused, named: the lease journal, admin socket and install markers are open there |
//! | `run_as` | refused, named: privileges are dropped once |
//! | `api` (added or removed; `listen`, `cert_file`, `key_file`, `token_file`) | refused, named: the listener, certificate, key and token are read once (new contents in the same files take a restart too) |
//! | `ha` (added or removed; `hosts`, `secret_file`) | refused, named: which host this is, its peer, the replication secret and the IP_FREEBIND listeners are set up once |
//! | `ha.router_id`, `install_config.*` | nothing to apply in `serve`: they are keepalived's and openshift-install's (`render`) |
//! | `control.*`, each node's `machine` | the next machine action (`cluster up`, `scale`, `down`, retiring the bootstrap), each with a provider made from the current plan |
//! | `orchestration.*` | the next poll of a running `up`; a changed `kubeconfig` or `api_url` gets a new API client there |
//! | a host file's `clusters` | at once: an added cluster's sockets are bound and its services started, a removed one's instance is cancelled, the others get their new plans |
//! | a host file's kind, `state_dir`, `run_as`, `shared_frontend.address`; a kept cluster's `listen.*` or `network.interface` | refused, named (with the cluster's id) |

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use super::instance::{Instance, Role, Task, Wing};
use super::{ServeError, listener_specs, log_missing_boot_files, needs_restart};
use super::{next_serial, notify, notify_reloading};
use crate::config::{self, InstallCheck, LoadError, RealFiles, RenderStyle, Target};
use crate::journal::{EventKind, Journal};
use crate::operator::Clusters;
use crate::operator::status::{Listener, Samplers};
use crate::plan::views::HostViews;
use crate::plan::{Plan, host::HostPlan};
use crate::service;
use crate::sockets::{self, BoundSocket, ListenerSpec};

/// The plans a config file gives each instance, in order.
pub(super) struct Derived {
    pub(super) plans: Vec<(Role, Plan)>,
    run_as: Option<config::RunAs>,
    /// A host file's indexes and zones.
    host: Option<HostPlan>,
}

/// Every instance, and the host's keys.
pub(super) struct Layout {
    pub instances: Vec<Instance>,
    pub state_dir: PathBuf,
    pub run_as: Option<config::RunAs>,
    /// A host file's indexes and zones (for the next reload's serials); `None` for a cluster
    /// file.
    host: Option<HostPlan>,
    /// The appliance's token; each instance's is a child.
    pub root: CancellationToken,
    /// The journal DNS, DHCP and TFTP publish in: it routes to the clusters' journals.
    host_journal: Journal,
    /// The DNS and TFTP addresses bound so far.
    bound: Vec<(crate::sockets::Service, SocketAddr)>,
    /// Once started: what a started instance is made with, and the operator wing's lists.
    pub(super) started: Option<Started>,
    /// Removed clusters' operators while their install run may still be stopping: such a
    /// cluster is not added back before it has.
    retired: Vec<(String, crate::operator::Operator)>,
    /// What the shared frontend's router routes to: the routed clusters' pools.
    pub routes: crate::lb::router::SharedRoutes,
    /// Every listening socket, with the instance it is for.
    pub(super) listeners: Vec<(Role, Listener)>,
    /// What `status` shows of them, swapped at each reload.
    shown: Arc<arc_swap::ArcSwap<Vec<Listener>>>,
}

pub(super) struct Started {
    pub(super) base: service::Context,
    pub(super) wing: Wing,
    clusters: Clusters,
    samplers: Samplers,
}

impl Layout {
    /// The layout of what the config file loaded as.
    pub(super) fn new(target: &Target) -> Result<Layout, ServeError> {
        log_warnings(&warnings(target));
        let derived = derive(target, next_serial(None), None).map_err(ServeError::Host)?;
        let state_dir = match target {
            Target::Cluster(loaded) => loaded.config.state_dir.clone(),
            Target::Host(host) => host.state_dir.clone(),
        };
        let root = CancellationToken::new();
        let host_journal = Journal::routing(Vec::new());
        let mut layout = Layout {
            instances: Vec::new(),
            state_dir,
            run_as: derived.run_as,
            host: derived.host,
            root,
            host_journal,
            bound: Vec::new(),
            started: None,
            retired: Vec::new(),
            routes: std::sync::Arc::default(),
            listeners: Vec::new(),
            shown: Arc::default(),
        };
        for (role, plan) in derived.plans {
            let instance = layout.instance(role, plan);
            layout.instances.push(instance);
        }
        layout.reroute();
        Ok(layout)
    }

    /// A new instance of `role`, with its own journal if it is a host's cluster or segment (a
    /// segment's routes to the clusters' journals too, and holds its own leases' events, which
    /// the pair's replication of that segment follows).
    fn instance(&self, role: Role, plan: Plan) -> Instance {
        let journal = match &role {
            Role::Everything(_) => Journal::new(),
            Role::Cluster(id) => Journal::of_cluster(id),
            Role::Dhcp(_) => Journal::routing(self.cluster_journals()),
            Role::Dns | Role::Tftp | Role::Router => self.host_journal.clone(),
        };
        Instance::new(role, plan, journal, &self.root)
    }

    /// Points the host journal and the segments' at the clusters' journals.
    fn reroute(&self) {
        self.host_journal.reroute(self.cluster_journals());
        for i in &self.instances {
            if let Role::Dhcp(_) = i.role {
                i.journal.reroute(self.cluster_journals());
            }
        }
    }

    fn cluster_journals(&self) -> Vec<(String, Journal)> {
        self.clusters()
            .map(|(id, i)| (id.to_owned(), i.journal.clone()))
            .collect()
    }

    /// Whether this is a host file's layout (its clusters named in metrics and logs).
    pub(super) fn host_mode(&self) -> bool {
        self.host.is_some()
    }

    /// Every listener the instances ask for, with the instance it is for.
    pub(super) fn specs(&mut self) -> Vec<(usize, ListenerSpec)> {
        let mut specs = Vec::new();
        for (n, i) in self.instances.iter().enumerate() {
            for spec in listener_specs(&i.plan.load()) {
                specs.push((n, spec));
            }
        }
        self.note_bound(specs.iter().map(|(_, s)| s));
        specs
    }

    /// Remembers the DNS and TFTP addresses among `specs`.
    fn note_bound<'a>(&mut self, specs: impl Iterator<Item = &'a ListenerSpec>) {
        use crate::sockets::Service;
        for s in specs.filter(|s| matches!(s.service, Service::Dns | Service::Tftp)) {
            if !self.bound.contains(&(s.service, s.addr)) {
                self.bound.push((s.service, s.addr));
            }
        }
    }

    /// Notes the sockets bound at start (each with the index of the instance it is for); the
    /// list `status` shows, which follows reloads.
    pub(super) fn listening<'a>(
        &mut self,
        owned: impl Iterator<Item = (usize, &'a BoundSocket)>,
    ) -> Arc<arc_swap::ArcSwap<Vec<Listener>>> {
        for (n, socket) in owned {
            let role = self.instances[n].role.clone();
            self.listeners.push((role.clone(), listener(socket, &role)));
        }
        self.show_listening();
        Arc::clone(&self.shown)
    }

    /// Shows the sockets still open: those of the instances that run, DNS's and TFTP's only
    /// while their address is bound.
    pub(super) fn show_listening(&mut self) {
        let (instances, bound) = (&self.instances, &self.bound);
        self.listeners.retain(|(role, l)| {
            let kept = instances.iter().any(|i| i.role == *role);
            let bound = !matches!(role, Role::Dns | Role::Tftp)
                || bound
                    .iter()
                    .any(|(service, addr)| service.name() == l.service && *addr == l.addr);
            kept && bound
        });
        let shown = self.listeners.iter().map(|(_, l)| l.clone()).collect();
        self.shown.store(Arc::new(shown));
    }

    /// Says in every cluster's journal which plan is served now.
    pub(super) fn plan_loaded(&self) {
        let serial = self.serial();
        for (_, i) in self.clusters() {
            i.journal.publish(None, EventKind::PlanLoaded { serial });
        }
    }

    /// The clusters' instances.
    pub(super) fn clusters(&self) -> impl Iterator<Item = (&str, &Instance)> {
        self.instances
            .iter()
            .filter_map(|i| i.role.cluster().map(|id| (id, i)))
    }

    /// The serial the DNS instance serves (the first zone's).
    pub(super) fn serial(&self) -> u32 {
        self.instances[0].plan.load().serial
    }

    /// Every directory the instances keep state in, the host's first.
    pub(super) fn state_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.state_dir.clone()];
        for i in &self.instances {
            let dir = &i.plan.load().state_dir;
            if !dirs.contains(dir) {
                dirs.push(dir.clone());
            }
        }
        dirs
    }

    /// Starts every instance on its sockets (`groups`, in instance order) and the operator
    /// wing's lists; returns the tasks to spawn and the clusters' operators.
    pub(super) fn start(
        &mut self,
        groups: Vec<Vec<BoundSocket>>,
        base: service::Context,
        wing: Wing,
    ) -> Result<(Vec<Task>, Clusters), ServeError> {
        let mut tasks = Vec::new();
        for (instance, sockets) in self.instances.iter_mut().zip(groups) {
            tasks.extend(instance.start(sockets, &base, &wing)?);
        }
        self.route();
        let samplers = Samplers::default();
        base.metrics.attach(Box::new(samplers.clone()));
        let clusters = Clusters::new(self.operators(), self.root.clone());
        samplers.replace(self.samplers());
        self.started = Some(Started {
            base,
            wing,
            clusters: clusters.clone(),
            samplers,
        });
        Ok((tasks, clusters))
    }

    /// Points the router (if any) at the routed clusters' pools as they are now.
    fn route(&self) {
        use crate::plan::Sharing;
        let router = self.instances.iter().find(|i| i.role == Role::Router);
        let Some(router) = router else { return };
        let default = match &router.plan.load().lb.sharing {
            Sharing::Router { default_cluster } => default_cluster.clone(),
            Sharing::Own | Sharing::Routed => None,
        };
        let routes = self
            .clusters()
            .filter_map(|(id, i)| {
                let plan = i.plan.load();
                let pools = i.pools.clone()?;
                (plan.lb.sharing == Sharing::Routed).then(|| {
                    let route = crate::lb::route::Route {
                        id: std::sync::Arc::from(id),
                        pools,
                        token: i.connections.clone(),
                    };
                    (plan.cluster_domain.clone(), route)
                })
            })
            .collect();
        let table = crate::lb::route::Routes::new(routes, default.as_deref());
        self.routes.store(std::sync::Arc::new(table));
    }

    fn operators(&self) -> Vec<(String, crate::operator::Operator)> {
        self.clusters()
            .filter_map(|(id, i)| Some((id.to_owned(), i.operator.clone()?)))
            .collect()
    }

    fn samplers(&self) -> Vec<crate::operator::status::Sampler> {
        self.clusters()
            .filter_map(|(_, i)| i.sampler.clone())
            .collect()
    }

    /// Re-reads the config; swaps in the new plans (adding and removing clusters), or keeps
    /// the old ones and says why. `Ok` and `Err` carry the one line that tells the operator
    /// (and `okd-appliance reload`) the outcome; the tasks are an added cluster's, to spawn.
    pub(super) async fn reload(&mut self, path: &Path) -> (Result<String, String>, Vec<Task>) {
        notify_reloading();
        tracing::info!("reloading {}", path.display());
        let current = self.serial();
        let (outcome, tasks) = match load(path).await {
            Ok(target) => match self.apply(&target, current, path) {
                Ok(applied) => applied,
                Err(line) => (
                    Err(format!("{line}; still serving plan {current}")),
                    Vec::new(),
                ),
            },
            Err(e) => {
                let rendered = e.render(RenderStyle::Plain);
                for line in rendered.lines().filter(|l| !l.is_empty()) {
                    tracing::error!("{line}");
                }
                let line = format!(
                    "reload failed: {}; still serving the previous plan",
                    e.summary()
                );
                (Err(line), Vec::new())
            }
        };
        match &outcome {
            Ok(line) => tracing::info!("{line}"),
            Err(line) => tracing::error!("{line}"),
        }
        notify(&[sd_notify::NotifyState::Ready]);
        (outcome, tasks)
    }

    /// Whether `derived` can replace this layout at a reload: the keys that take a restart.
    fn restart_keys(&self, derived: &Derived) -> Vec<String> {
        let single = |plans: &[&Role]| matches!(plans, [Role::Everything(_)]);
        let next_roles: Vec<&Role> = derived.plans.iter().map(|(r, _)| r).collect();
        let now_roles: Vec<&Role> = self.instances.iter().map(|i| &i.role).collect();
        if single(&now_roles) != single(&next_roles) {
            return vec!["the file's kind (a cluster file or a host file)".to_owned()];
        }
        let mut keys = Vec::new();
        for (role, plan) in &derived.plans {
            let Some(i) = self.kept(role) else { continue };
            let current = i.plan.load();
            let mut next = plan.clone();
            // DNS and TFTP bind what an added cluster brings and keep what a removed one had.
            if matches!(role, Role::Dns | Role::Tftp) {
                next.listen = current.listen.clone();
            }
            for key in needs_restart(
                &current,
                &next,
                self.run_as.as_ref(),
                derived.run_as.as_ref(),
            ) {
                let key = match role.cluster() {
                    // A host file's `api` is the host's, carried by every plan: said once.
                    _ if self.host_mode() && key.starts_with("api") => key,
                    Some(id) if self.host_mode() => format!("{key} of cluster {id}"),
                    // The router's listeners are the shared frontend's addresses.
                    _ if *role == Role::Router => "shared_frontend.address".to_owned(),
                    _ => key,
                };
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        keys
    }

    /// This layout's instance of `role` (any cluster file's, for a cluster file's).
    fn kept(&self, role: &Role) -> Option<&Instance> {
        self.instances.iter().find(|i| match (&i.role, role) {
            (Role::Everything(_), Role::Everything(_)) => true,
            (a, b) => a == b,
        })
    }

    /// Applies `target`: `Err` when it is refused (nothing changed); else the outcome line
    /// (`Err` when an added cluster could not start: the rest is applied) and the tasks to spawn.
    fn apply(
        &mut self,
        target: &Target,
        current: u32,
        path: &Path,
    ) -> Result<(Result<String, String>, Vec<Task>), String> {
        log_warnings(&warnings(target));
        // At the current serial first: a reload that changes nothing keeps it.
        let same = derive(target, current, self.host.as_ref())
            .map_err(|e| format!("reload refused: {e}"))?;
        let restart = self.restart_keys(&same);
        if !restart.is_empty() {
            return Err(format!(
                "reload refused: {} changed, which takes a restart",
                restart.join(", ")
            ));
        }
        let unchanged = same.plans.len() == self.instances.len()
            && same
                .plans
                .iter()
                .all(|(role, p)| self.kept(role).is_some_and(|i| **i.plan.load() == *p));
        if unchanged {
            return Ok((
                Ok(format!("config unchanged: still serving plan {current}")),
                Vec::new(),
            ));
        }
        // What a service would only find out after the swap (and then keep its old setting,
        // while the operator was told "reloaded"): refused here, by its key.
        for (role, p) in &same.plans {
            let changed = self
                .kept(role)
                .is_none_or(|i| p.lb.check_ca != i.plan.load().lb.check_ca);
            if changed && role.cluster().is_some() {
                crate::lb::check::initial_tls(p).map_err(|e| format!("reload refused: {e:#}"))?;
            }
        }
        let next = derive(target, next_serial(Some(current)), self.host.as_ref())
            .map_err(|e| format!("reload refused: {e}"))?;
        let moved = |plan: &Plan| plan.ha.as_ref().map(|h| h.addresses.clone());
        let before = moved(&self.instances[0].plan.load());
        let (tasks, failures) = self.replace(next, path)?;
        let after = moved(&self.instances[0].plan.load());
        if before != after {
            // keepalived moves what its file lists; the appliance does not rewrite it.
            tracing::warn!(
                "the pair's virtual addresses changed: render --format keepalived again and reload keepalived on both hosts"
            );
        }
        let serial = self.serial();
        self.plan_loaded();
        let line = format!("reloaded: now serving plan {serial}");
        if failures.is_empty() {
            Ok((Ok(line), tasks))
        } else {
            Ok((Err(format!("{line}, but {}", failures.join("; "))), tasks))
        }
    }

    /// Binds what `next` adds, then swaps the plans in: kept instances get theirs, removed
    /// ones are cancelled, added ones start. Nothing changes when a socket can't be bound.
    /// `path` is the config's, for the hints of the boot files that are missing.
    fn replace(&mut self, next: Derived, path: &Path) -> Result<(Vec<Task>, Vec<String>), String> {
        // What can fail comes first, and a reload that fails there changes nothing: an added
        // cluster's state directory, a cluster added back while its last run still stops,
        // then the sockets.
        for (role, plan) in &next.plans {
            let Some(id) = role.cluster().filter(|_| self.kept(role).is_none()) else {
                continue;
            };
            self.retired
                .retain(|(_, op)| op.orchestration().is_ok_and(|o| o.status().running));
            if self.retired.iter().any(|(gone, _)| gone == id) {
                return Err(format!(
                    "reload refused: cluster {id} was removed and its install run is still stopping: reload again in a moment"
                ));
            }
            let dir = &plan.state_dir;
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("reload refused: can't create {}: {e}", dir.display()))?;
        }
        let mut specs: Vec<(Option<usize>, ListenerSpec)> = Vec::new();
        for (n, (role, plan)) in next.plans.iter().enumerate() {
            match self.kept(role) {
                None => {
                    for s in listener_specs(plan) {
                        let known = self.bound.contains(&(s.service, s.addr));
                        if !known {
                            specs.push((Some(n), s));
                        }
                    }
                }
                Some(_) if matches!(role, Role::Dns | Role::Tftp) => {
                    for s in listener_specs(plan) {
                        if !self.bound.contains(&(s.service, s.addr)) {
                            specs.push((Some(n), s));
                        }
                    }
                }
                Some(_) => {}
            }
        }
        let only: Vec<ListenerSpec> = specs.iter().map(|(_, s)| s.clone()).collect();
        let bound = sockets::bind_all(&only).map_err(|errors| {
            let each: Vec<String> = errors.iter().map(ToString::to_string).collect();
            format!("reload refused: {}", each.join("; "))
        })?;
        super::log_listening(&bound);
        self.note_bound(only.iter());
        let mut groups: Vec<Vec<BoundSocket>> = next.plans.iter().map(|_| Vec::new()).collect();
        for ((owner, _), socket) in specs.into_iter().zip(bound) {
            if let Some(n) = owner {
                let role = &next.plans[n].0;
                self.listeners.push((role.clone(), listener(&socket, role)));
                groups[n].push(socket);
            }
        }
        let Some(started) = self.started.take() else {
            return Err("reload refused: the appliance has not started yet".to_owned());
        };
        // The listeners this reload starts get their share of the new set's division (running
        // ones keep theirs; the process's pool bounds the sum meanwhile).
        let replication = started.wing.ha_host.map(crate::replication::listen_addr);
        let plans = next.plans.iter().map(|(role, plan)| (role, plan));
        let division = super::descriptors::divide(super::descriptors::limit(), plans, replication);
        started.base.budget.extend(&division);
        let outcome = self.swap(next, groups, &started, path);
        self.reroute();
        self.route();
        self.show_listening();
        started.clusters.replace(self.operators());
        started.samplers.replace(self.samplers());
        self.started = Some(started);
        Ok(outcome)
    }

    /// Swaps `next` in; cannot fail as a whole. What could not start is in the failures: an
    /// added cluster (cancelled, its sockets closed with it), or DNS or TFTP on an address an
    /// added cluster brought (unbound again, tried at the next reload).
    fn swap(
        &mut self,
        next: Derived,
        groups: Vec<Vec<BoundSocket>>,
        started: &Started,
        path: &Path,
    ) -> (Vec<Task>, Vec<String>) {
        let mut old = std::mem::take(&mut self.instances);
        let (mut tasks, mut failures) = (Vec::new(), Vec::new());
        for ((role, plan), sockets) in next.plans.into_iter().zip(groups) {
            let at = old.iter().position(|i| match (&i.role, &role) {
                (Role::Everything(_), Role::Everything(_)) => true,
                (a, b) => a == b,
            });
            let Some(instance) = at.map(|n| old.remove(n)) else {
                if let Some(id) = role.cluster() {
                    tracing::info!("cluster {id} added");
                    log_missing_boot_files(&plan, path, &role);
                }
                let mut instance = self.instance(role, plan);
                match instance.start(sockets, &started.base, &started.wing) {
                    Ok(more) => {
                        tasks.extend(more);
                        self.instances.push(instance);
                    }
                    Err(e) => {
                        let what = instance.role.cluster().map_or_else(
                            || format!("{:?}", instance.role),
                            |id| format!("cluster {id}"),
                        );
                        failures.push(format!("{what} did not start: {:#}", anyhow::Error::new(e)));
                        instance.token.cancel();
                        instance.connections.cancel();
                    }
                }
                continue;
            };
            if role.cluster().is_some() {
                log_missing_boot_files(&plan, path, &role);
            }
            instance.plan.store(Arc::new(plan));
            if !sockets.is_empty() {
                // DNS or TFTP on an address an added cluster brought.
                let addrs: Vec<_> = sockets
                    .iter()
                    .map(|b| (b.spec.service, b.spec.addr))
                    .collect();
                let ctx = instance.context(&started.base);
                let more = match role {
                    Role::Dns => crate::dns::start(sockets, &ctx).map(|r| ("dns", r)),
                    _ => crate::tftp::start(sockets, &ctx).map(|r| ("tftp", r)),
                };
                match more {
                    Ok((name, running)) => {
                        tasks.push(Task::once(name, instance.token.clone(), running));
                    }
                    Err(e) => {
                        failures.push(format!("{e:#}"));
                        self.bound.retain(|b| !addrs.contains(b));
                    }
                }
            }
            self.instances.push(instance);
        }
        for gone in old {
            match gone.role.cluster() {
                Some(id) => {
                    let plan = gone.plan.load();
                    tracing::info!(
                        "cluster {id} removed: its listeners close, its orchestration stops, its open load-balanced connections get {:?} to end; its state stays in {}",
                        plan.lb.drain_timeout,
                        plan.state_dir.display()
                    );
                    if let Some(op) = &gone.operator {
                        self.retired.push((id.to_owned(), op.clone()));
                    }
                }
                None => tracing::info!("{:?} instance retired", gone.role),
            }
            gone.retire();
        }
        self.host = next.host;
        (tasks, failures)
    }
}

/// The plans `target` gives each instance at `serial` (`previous`: the host plan whose zone
/// serials carry over).
pub(super) fn derive(
    target: &Target,
    serial: u32,
    previous: Option<&HostPlan>,
) -> Result<Derived, String> {
    match target {
        Target::Cluster(loaded) => {
            let role = Role::Everything(loaded.config.cluster.name.clone());
            Ok(Derived {
                plans: vec![(role, Plan::derive(&loaded.config, serial))],
                run_as: loaded.config.run_as.clone(),
                host: None,
            })
        }
        Target::Host(host) => {
            let views = HostViews::derive(host, serial, previous).map_err(|e| e.to_string())?;
            let mut plans = vec![(Role::Dns, views.dns)];
            for p in views.dhcp {
                plans.push((Role::Dhcp(p.interface.clone()), p));
            }
            plans.push((Role::Tftp, views.tftp));
            if let Some(router) = views.router {
                plans.push((Role::Router, router));
            }
            for (id, p) in views.clusters {
                plans.push((Role::Cluster(id), p));
            }
            Ok(Derived {
                plans,
                run_as: host.run_as.clone(),
                host: Some(views.host),
            })
        }
    }
}

/// A bound socket of `role`'s instance as `status` shows it.
pub(super) fn listener(socket: &BoundSocket, role: &Role) -> Listener {
    Listener {
        service: socket.spec.service.name().to_owned(),
        proto: socket.spec.proto.to_string(),
        addr: socket.local_addr,
        cluster: match role {
            Role::Cluster(id) => Some(id.clone()),
            _ => None,
        },
    }
}

/// Loads a cluster file or a host file.
pub(super) async fn load(path: &Path) -> Result<Target, LoadError> {
    let path: PathBuf = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let files = RealFiles {
            now: SystemTime::now(),
        };
        // Ignition problems never stop DNS, DHCP or the load balancer: warnings here, and the
        // HTTP service refuses the fetches it can't honour.
        config::load_any(&path, InstallCheck::Warn(&files))
    })
    .await
    .expect("config loading does not panic")
}

/// The warnings of what loaded, as miette draws them; empty without any.
fn warnings(target: &Target) -> String {
    match target {
        Target::Cluster(l) if l.warnings.is_empty() => String::new(),
        Target::Cluster(l) => l.warnings.render(RenderStyle::Plain),
        Target::Host(h) if h.warnings.count(config::Severity::Warning) == 0 => String::new(),
        Target::Host(h) => h.warnings.render(RenderStyle::Plain),
    }
}

fn log_warnings(rendered: &str) {
    for line in rendered.lines().filter(|l| !l.is_empty()) {
        tracing::warn!("{line}");
    }
}
