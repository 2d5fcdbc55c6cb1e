//! What `serve` runs for a config file: one plan handle per service instance.
//!
//! A cluster file is one instance that runs every service, as it always did. A host file
//! (docs/design/several-clusters.md) is one DNS instance with every cluster's zones, one DHCP
//! instance per segment, one TFTP instance, and per cluster an instance of HTTP, the load
//! balancer and the orchestration ([`HostViews`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;

use super::{ServeError, first_serial, log_missing_boot_files, needs_restart, next_serial};
use crate::config::{self, InstallCheck, LoadError, RealFiles, RenderStyle, Target};
use crate::journal::{EventKind, Journal};
use crate::plan::views::HostViews;
use crate::plan::{self, Plan, host::HostPlan};

/// What one instance serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Role {
    /// A cluster file: every service, for its one cluster.
    Everything(String),
    Dns,
    Dhcp,
    Tftp,
    /// HTTP, the load balancer and the orchestration of the cluster with this id.
    Cluster(String),
}

impl Role {
    /// The cluster this instance is, with its orchestration, pools and operator.
    pub(super) fn cluster(&self) -> Option<&str> {
        match self {
            Role::Everything(id) | Role::Cluster(id) => Some(id),
            Role::Dns | Role::Dhcp | Role::Tftp => None,
        }
    }
}

#[derive(Debug)]
pub(super) struct Instance {
    pub role: Role,
    pub plan: plan::Handle,
    /// A cluster's own journal; for DNS, DHCP and TFTP, one that routes to the clusters'.
    pub journal: Journal,
}

/// Every instance, and the host's keys.
#[derive(Debug)]
pub(super) struct Layout {
    pub instances: Vec<Instance>,
    pub state_dir: PathBuf,
    pub run_as: Option<config::RunAs>,
    /// A host file's indexes and zones (for the next reload's serials); `None` for a cluster
    /// file.
    host: Option<HostPlan>,
}

impl Layout {
    /// The layout of what `path` loaded as.
    pub(super) fn new(target: Target) -> Result<Layout, ServeError> {
        log_warnings(&warnings(&target));
        match target {
            Target::Cluster(loaded) => {
                let plan = Plan::derive(&loaded.config, next_serial(None));
                let id = loaded.config.cluster.name.clone();
                Ok(Layout {
                    instances: vec![Instance {
                        role: Role::Everything(id),
                        plan: Arc::new(ArcSwap::from_pointee(plan)),
                        journal: Journal::new(),
                    }],
                    state_dir: loaded.config.state_dir,
                    run_as: loaded.config.run_as,
                    host: None,
                })
            }
            Target::Host(host) => {
                let views = HostViews::derive(&host, next_serial(None), None)
                    .map_err(|e| ServeError::Host(e.to_string()))?;
                let handle = |p: Plan| Arc::new(ArcSwap::from_pointee(p));
                let clusters: Vec<Instance> = views
                    .clusters
                    .into_iter()
                    .map(|(id, p)| Instance {
                        journal: Journal::of_cluster(&id),
                        role: Role::Cluster(id),
                        plan: handle(p),
                    })
                    .collect();
                let routes = clusters
                    .iter()
                    .filter_map(|i| Some((i.role.cluster()?.to_owned(), i.journal.clone())))
                    .collect();
                let host_journal = Journal::routing(routes);
                let shared = |role: Role, p: Plan| Instance {
                    role,
                    plan: handle(p),
                    journal: host_journal.clone(),
                };
                let mut instances = vec![shared(Role::Dns, views.dns)];
                instances.extend(views.dhcp.into_iter().map(|p| shared(Role::Dhcp, p)));
                instances.push(shared(Role::Tftp, views.tftp));
                instances.extend(clusters);
                Ok(Layout {
                    instances,
                    state_dir: host.state_dir,
                    run_as: host.run_as,
                    host: Some(views.host),
                })
            }
        }
    }

    /// Whether this is a host file's layout (its clusters named in metrics and logs).
    pub(super) fn host_mode(&self) -> bool {
        self.host.is_some()
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
        first_serial(&self.instances[0].plan.load())
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

    /// Re-reads the config; swaps in the new plans, or keeps the old ones and says why. `Ok`
    /// and `Err` carry the one line that tells the operator (and `okd-appliance reload`) the
    /// outcome.
    pub(super) async fn reload(&mut self, path: &Path) -> Result<String, String> {
        super::notify_reloading();
        tracing::info!("reloading {}", path.display());
        let current = self.serial();
        let outcome = match load(path).await {
            Ok(target) => self.apply(&target, current),
            Err(e) => {
                let rendered = e.render(RenderStyle::Plain);
                for line in rendered.lines().filter(|l| !l.is_empty()) {
                    tracing::error!("{line}");
                }
                Err(format!(
                    "reload failed: {}; still serving the previous plan",
                    e.summary()
                ))
            }
        };
        match &outcome {
            Ok(line) => tracing::info!("{line}"),
            Err(line) => tracing::error!("{line}"),
        }
        super::notify(&[sd_notify::NotifyState::Ready]);
        outcome
    }

    /// The plans `target` gives each instance, at `serial` (`previous`: the host plan whose
    /// zone serials carry over), with their roles in this layout's order; or why they can't
    /// replace this layout's.
    fn next(&self, target: &Target, serial: u32) -> Result<(Vec<Plan>, Option<HostPlan>), String> {
        let (roles, plans, run_as, host) = match target {
            Target::Cluster(loaded) => {
                let role = Role::Everything(loaded.config.cluster.name.clone());
                let plan = Plan::derive(&loaded.config, serial);
                (vec![role], vec![plan], loaded.config.run_as.clone(), None)
            }
            Target::Host(host) => {
                let views = HostViews::derive(host, serial, self.host.as_ref())
                    .map_err(|e| format!("reload refused: {e}; still serving the previous plan"))?;
                let mut roles = vec![Role::Dns];
                let mut plans = vec![views.dns];
                roles.extend(views.dhcp.iter().map(|_| Role::Dhcp));
                plans.extend(views.dhcp);
                roles.push(Role::Tftp);
                plans.push(views.tftp);
                for (id, p) in views.clusters {
                    roles.push(Role::Cluster(id));
                    plans.push(p);
                }
                (roles, plans, host.run_as.clone(), Some(views.host))
            }
        };
        let now: Vec<&Role> = self.instances.iter().map(|i| &i.role).collect();
        if roles.iter().collect::<Vec<_>>() != now {
            let names = |rs: &[&Role]| {
                rs.iter()
                    .filter_map(|r| r.cluster())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let next: Vec<&Role> = roles.iter().collect();
            return Err(format!(
                "reload refused: the clusters or segments changed (serving {}, the file lists {}), which takes a restart",
                names(&now),
                names(&next)
            ));
        }
        let mut restart = Vec::new();
        for (i, plan) in self.instances.iter().zip(&plans) {
            let keys = needs_restart(&i.plan.load(), plan, self.run_as.as_ref(), run_as.as_ref());
            for key in keys {
                let key = match i.role.cluster() {
                    Some(id) if self.host.is_some() => format!("{key} of cluster {id}"),
                    _ => key,
                };
                if !restart.contains(&key) {
                    restart.push(key);
                }
            }
        }
        if !restart.is_empty() {
            return Err(format!(
                "reload refused: {} changed, which takes a restart",
                restart.join(", ")
            ));
        }
        Ok((plans, host))
    }

    fn apply(&mut self, target: &Target, current: u32) -> Result<String, String> {
        let still = |e: String| format!("{e}; still serving plan {current}");
        log_warnings(&warnings(target));
        // At the current serial first: a reload that changes nothing keeps it.
        let (same, _) = self.next(target, current).map_err(still)?;
        let unchanged = self
            .instances
            .iter()
            .zip(&same)
            .all(|(i, p)| **i.plan.load() == *p);
        if unchanged {
            return Ok(format!("config unchanged: still serving plan {current}"));
        }
        // What a service would only find out after the swap (and then keep its old setting,
        // while the operator was told "reloaded"): refused here, by its key.
        for (i, p) in self.instances.iter().zip(&same) {
            if p.lb.check_ca != i.plan.load().lb.check_ca
                && let Err(e) = crate::lb::check::initial_tls(p)
            {
                return Err(still(format!("reload refused: {e:#}")));
            }
        }
        let (plans, host) = self
            .next(target, next_serial(Some(current)))
            .map_err(still)?;
        for (i, plan) in self.instances.iter().zip(plans) {
            if i.role.cluster().is_some() {
                log_missing_boot_files(&plan);
            }
            i.plan.store(Arc::new(plan));
        }
        self.host = host;
        let serial = self.serial();
        self.plan_loaded();
        Ok(format!("reloaded: now serving plan {serial}"))
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
