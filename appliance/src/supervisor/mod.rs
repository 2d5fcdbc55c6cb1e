//! `serve`: load, bind, drop privileges, start the services under one cancellation token,
//! report readiness, reload on SIGHUP, stop on SIGTERM.
//!
//! In order: signal handlers; the config (ignition problems are warnings: they never stop DNS,
//! DHCP or the load balancer); the `run_as` account and the state directory; the plan; the soft
//! limit on open descriptors raised to the hard one (the unit's `LimitNOFILE` sets both) and
//! divided among the listeners (`crate::budget`); every socket bound, each on its own (what
//! can't be bound is retried: `unbound.rs`); each service started (its fallible set-up runs
//! here, as root: the lease journal, the install markers' directory, the probe CA); the state
//! directory handed to `run_as` and privileges dropped (`privileges.rs`); the services spawned;
//! `READY=1`. SIGTERM and SIGINT cancel the token and give the services 10 s to finish.
//!
//! A reload (SIGHUP, or `okd-appliance reload`, which asks through the admin socket and exits 1
//! when the previous plan stays; the unit's `ExecReload` uses it) re-reads and re-validates the
//! config and swaps the plan in, or keeps the old plan and says why (`needs_restart`; what a
//! reload applies is the table in `layout.rs`).
//!
//! Architecture invariant: the supervisor knows the order of things and which service gets which
//! socket; it knows nothing of any protocol. Each service has one entry point of the same shape
//! (`start(sockets, &service::Context)`); services see the plan only through a
//! [`crate::plan::Handle`], so a reload is one atomic pointer swap and a query in flight keeps the
//! plan it started with. Nothing imports the supervisor but `main`.

mod adopt;
pub mod descriptors;
mod instance;
mod layout;
mod privileges;
mod restart;
mod unbound;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinSet;

use crate::config::{self, LoadError};
use crate::plan::Plan;
use crate::service::{self, Running};
use crate::sockets::{self, BindError, BoundSocket, ListenerSpec, Proto, Service};
use instance::Task;
use layout::Layout;
pub use privileges::PrivilegeError;

/// How long running services get to finish after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("invalid config")]
    Config(#[from] LoadError),
    #[error("{} listener(s) could not be bound", .0.len())]
    Bind(Vec<BindError>),
    #[error(transparent)]
    Privileges(#[from] PrivilegeError),
    #[error("{service} failed")]
    Service {
        service: &'static str,
        #[source]
        source: anyhow::Error,
    },
    #[error("can't install the signal handlers")]
    Signals(#[source] std::io::Error),
    #[error("high availability: {0}")]
    Ha(String),
    /// Two clusters of a host file claim one thing `check` should have refused.
    #[error("the host file's clusters conflict: {0}")]
    Host(String),
    /// A cluster file's state where a host file now starts, which it can't take over.
    #[error("state directory: {0}")]
    Adopt(String),
    #[error("can't create the state directory {}", path.display())]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Every socket the plan asks for, in a stable order.
pub fn listener_specs(plan: &Plan) -> Vec<ListenerSpec> {
    let l = &plan.listen;
    let freebind = plan.ha.is_some();
    let mut specs = Vec::new();
    let mut add = |service, proto, addrs: &[std::net::SocketAddr], device: Option<&String>| {
        for addr in addrs {
            specs.push(ListenerSpec {
                service,
                proto,
                addr: *addr,
                device: device.cloned(),
                freebind,
            });
        }
    };
    add(Service::Dns, Proto::Udp, &l.dns, None);
    add(Service::Dns, Proto::Tcp, &l.dns, None);
    // Linux delivers a broadcast DISCOVER to no socket bound to one address: on the cluster
    // NIC, DHCP listens on the wildcard address whatever address the config gives.
    let mut dhcp: Vec<std::net::SocketAddr> = l
        .dhcp
        .iter()
        .map(|a| match (a, &plan.interface) {
            (std::net::SocketAddr::V4(v4), Some(_)) => {
                std::net::SocketAddr::from(([0, 0, 0, 0], v4.port()))
            }
            _ => *a,
        })
        .collect();
    dhcp.dedup();
    add(Service::Dhcp, Proto::Udp, &dhcp, plan.interface.as_ref());
    add(Service::Tftp, Proto::Udp, &l.tftp, None);
    add(Service::Http, Proto::Tcp, &l.http, None);
    add(Service::KubeApi, Proto::Tcp, &l.api, None);
    add(Service::MachineConfig, Proto::Tcp, &l.machine_config, None);
    add(Service::IngressHttps, Proto::Tcp, &l.ingress_https, None);
    add(Service::IngressHttp, Proto::Tcp, &l.ingress_http, None);
    specs
}

/// A pair's replication: its listener on this host's own address, which every cluster and
/// segment opens its channel on; without it a failover loses state, so it must start.
fn replication(
    ha: &crate::plan::ha::HaPlan,
    host: std::net::Ipv4Addr,
    base: &service::Context,
) -> Result<(crate::replication::Hub, Task), ServeError> {
    let peer = if ha.hosts[0] == host {
        ha.hosts[1]
    } else {
        ha.hosts[0]
    };
    let failed = |source| ServeError::Service {
        service: "replication",
        source,
    };
    let addr = crate::replication::listen_addr(host);
    let listener = crate::sockets::bind_tcp(addr)
        .map_err(|e| failed(anyhow::anyhow!("binding {addr}: {e}")))?;
    let (hub, running) = crate::replication::listen(listener, peer, base).map_err(failed)?;
    let task = Task::once("replication", base.shutdown.clone(), running);
    Ok((hub, task))
}

/// Raises the soft limit on open descriptors to the hard one, as the unit's `LimitNOFILE` does
/// for both: a balanced connection holds up to six (two sockets, two splice pipes), so a login
/// shell's soft limit of 1024 would cap `serve` started by hand at about 170 connections before
/// they fall back to copying and then fail to connect. Where it can't (a seccomp filter such as
/// the unit's, which forbids setrlimit), the limit stays as it is.
fn raise_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::debug!("open descriptors: soft limit raised from {soft} to {hard}"),
            Err(e) => tracing::debug!("open descriptors: soft limit stays at {soft}: {e}"),
        },
        Ok(_) => {}
        Err(e) => tracing::debug!("open descriptors: getrlimit: {e}"),
    }
}

/// Runs the appliance until SIGTERM or SIGINT, or until a service fails.
pub async fn serve(config_path: &Path) -> Result<(), ServeError> {
    // Handlers before anything slow: a SIGHUP or SIGTERM during start-up is queued for the loop
    // below instead of killing the process with the default action.
    let mut sigterm = signal(SignalKind::terminate()).map_err(ServeError::Signals)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(ServeError::Signals)?;
    let mut sighup = signal(SignalKind::hangup()).map_err(ServeError::Signals)?;
    let mut layout = Layout::new(&layout::load(config_path).await?)?;
    for (_, i) in layout.clusters() {
        log_missing_boot_files(&i.plan.load(), config_path, &i.role);
    }
    raise_descriptor_limit();
    // A panic while one input is handled is logged rate-limited, not once per packet.
    crate::isolate::install_hook();

    // The account first: a wrong run_as is a mistake to report before anything is bound.
    let account = layout.run_as.as_ref().map(privileges::lookup).transpose()?;
    if layout.host_mode() {
        let ids: Vec<&str> = layout.clusters().map(|(id, _)| id).collect();
        let segments: Vec<Option<&str>> = layout
            .instances
            .iter()
            .filter_map(|i| match &i.role {
                instance::Role::Dhcp(interface) => Some(interface.as_deref()),
                _ => None,
            })
            .collect();
        let moved = adopt::single_cluster_state(&layout.state_dir, &ids, &segments)
            .map_err(ServeError::Adopt)?;
        for (from, to) in moved {
            tracing::info!(
                "a cluster file's state, taken over by the host file: {} is now {}",
                from.display(),
                to.display()
            );
        }
    }
    for dir in layout.state_dirs() {
        std::fs::create_dir_all(&dir)
            .map_err(|source| ServeError::StateDir { path: dir, source })?;
    }
    let state_dir = layout.state_dir.clone();

    // In a pair: which host this is, before anything is bound.
    let ha = layout.instances[0].plan.load().ha.clone();
    let ha_host = match &ha {
        Some(ha) => {
            let i = crate::ha::this_host(ha).map_err(ServeError::Ha)?;
            tracing::info!(
                "high availability: this is host {} of the pair ({}, VRRP priority {}); standby until keepalived says otherwise",
                ha.hosts[i],
                if i == 0 { "preferred" } else { "second" },
                ha.priority(i)
            );
            Some((i, ha.hosts[i]))
        }
        None => None,
    };
    let faults = crate::faults::Faults::default();
    let (owners, specs): (Vec<usize>, Vec<ListenerSpec>) = layout.specs().into_iter().unzip();
    // Each listener on its own: what could not be bound is retried while the rest serves; the
    // appliance stops only when nothing could be.
    let results = sockets::bind_each(&specs);
    if results.iter().all(Result::is_err) {
        return Err(ServeError::Bind(
            results.into_iter().filter_map(Result::err).collect(),
        ));
    }
    let results = owners
        .into_iter()
        .zip(specs)
        .zip(results)
        .map(|((owner, spec), result)| (owner, spec, result))
        .collect();
    let (bound, mut unbound) = unbound::split(&layout, results, &faults);
    let (owners, sockets): (Vec<usize>, Vec<BoundSocket>) = bound.into_iter().unzip();
    let api = layout.instances[0].plan.load().api.clone();
    let fixed = crate::operator::status::Fixed {
        started: SystemTime::now(),
        faults: faults.clone(),
        listeners: layout.listening(owners.iter().copied().zip(&sockets)),
        endpoints: Some(crate::operator::status::Endpoints {
            admin_socket: crate::operator::admin::socket_path(&state_dir)
                .display()
                .to_string(),
            api_socket: state_dir
                .join(crate::operator::api::SOCKET_NAME)
                .display()
                .to_string(),
            api_url: api.as_ref().map(|a| format!("https://{}/", a.listen)),
        }),
    };
    log_listening(&sockets);
    let mut groups: Vec<Vec<BoundSocket>> = layout.instances.iter().map(|_| Vec::new()).collect();
    for (socket, owner) in sockets.into_iter().zip(owners) {
        groups[owner].push(socket);
    }

    // The admin socket is a convenience (drain, status): without it the appliance still serves.
    let admin_socket = match crate::operator::admin::bind(&state_dir) {
        Ok(l) => {
            tracing::info!(
                "admin socket at {}",
                crate::operator::admin::socket_path(&state_dir).display()
            );
            Some(l)
        }
        Err(e) => {
            tracing::warn!(
                "no admin socket in {}: {e} (okd-appliance lb drain/status will not reach this process)",
                state_dir.display()
            );
            None
        }
    };

    let active = match ha_host {
        Some((i, _)) => crate::ha::Activity::standby(i),
        None => crate::ha::Activity::always(),
    };
    let ha_host = ha_host.map(|(_, addr)| addr);
    // One descriptor budget for every listener, divided before anything admits a client.
    let division = {
        let plans: Vec<_> = layout
            .instances
            .iter()
            .map(|i| (&i.role, i.plan.load_full()))
            .collect();
        let replication = ha_host.map(crate::replication::listen_addr);
        descriptors::divide(
            descriptors::limit(),
            plans.iter().map(|(r, p)| (*r, &**p)),
            replication,
        )
    };
    descriptors::log(&division);
    let token = layout.root.clone();
    let base = service::Context {
        plan: Arc::clone(&layout.instances[0].plan),
        journal: layout.instances[0].journal.clone(),
        shutdown: token.clone(),
        active,
        metrics: Arc::new(crate::metrics::Metrics::new()),
        budget: crate::budget::Budget::new(&division),
        faults: faults.clone(),
    };
    // Every service's fallible set-up happens here, with the privileges the files it opens may
    // need and before readiness is reported.
    let (reload_requests, mut reloads) = tokio::sync::mpsc::channel(4);
    let (hub, replication_task) = match (&ha, ha_host) {
        (Some(ha), Some(host)) => {
            let (hub, task) = replication(ha, host, &base)?;
            (Some(hub), Some(task))
        }
        _ => (None, None),
    };
    let wing = instance::Wing {
        reloads: reload_requests,
        ha_host,
        fixed,
        host_mode: layout.host_mode(),
        routes: std::sync::Arc::clone(&layout.routes),
        replication: hub,
    };
    let budget = base.budget.clone();
    let (mut started, clusters) = layout.start(groups, base, wing)?;
    started.extend(replication_task);
    let mut fronts = Vec::new();
    start_fronts(
        admin_socket,
        &state_dir,
        (api.as_ref(), &budget),
        clusters,
        &mut fronts,
    )?;

    if let Some(account) = account {
        privileges::hand_over(&state_dir, account)?;
        privileges::drop_to(account)?;
        tracing::info!("running as uid {} gid {}", account.uid, account.gid);
    }

    let mut services = JoinSet::new();
    let spawn = |services: &mut JoinSet<_>, task: Task| {
        services.spawn(restart::supervise(task, faults.clone()));
    };
    for task in started {
        spawn(&mut services, task);
    }
    for (name, running) in fronts {
        let token = token.clone();
        spawn(&mut services, Task::once(name, token, running));
    }
    layout.plan_loaded();
    notify(&[sd_notify::NotifyState::Ready]);
    tracing::info!("ready");

    let mut retry = tokio::time::interval(unbound::RETRY_EVERY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome = loop {
        tokio::select! {
            _ = sigterm.recv() => break Ok("SIGTERM"),
            _ = retry.tick(), if !unbound.is_empty() => {
                for task in layout.retry_unbound(&mut unbound, &faults) {
                    spawn(&mut services, task);
                }
            }
            _ = sigint.recv() => break Ok("SIGINT"),
            _ = sighup.recv() => {
                let (_, added) = layout.reload(config_path).await;
                for task in added {
                    spawn(&mut services, task);
                }
            }
            Some(request) = reloads.recv() => {
                let (outcome, added) = layout.reload(config_path).await;
                for task in added {
                    spawn(&mut services, task);
                }
                // The asker may have given up waiting; the log has the outcome anyway.
                let _ = request.reply.send(outcome);
            }
            Some(done) = services.join_next() => match done {
                // A removed cluster's services end with it.
                Ok((name, instance, outcome)) if instance.is_cancelled() && !token.is_cancelled() => {
                    if let Err(e) = outcome {
                        tracing::warn!("{name} of a removed cluster: {e:#}");
                    }
                }
                // A failure `supervise` could not start again is down alone (recorded in the
                // faults): the rest keeps serving, unless nothing is left to serve.
                done if !services.is_empty() && !token.is_cancelled() => {
                    if let Err(e) = done {
                        tracing::error!("a service task was lost: {e}");
                    }
                }
                done => break Err(service_failure(done.map(|(name, _, outcome)| (name, outcome)))),
            },
        }
    };
    notify(&[sd_notify::NotifyState::Stopping]);
    token.cancel();
    match &outcome {
        Ok(signal) => tracing::info!("{signal}: stopping"),
        Err(e) => tracing::error!("{e}: stopping"),
    }
    if tokio::time::timeout(STOP_GRACE, async {
        while services.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!("services still busy after {STOP_GRACE:?}; stopping anyway");
        services.abort_all();
    }
    tracing::info!("stopped");
    outcome.map(|_| ())
}

/// The admin socket and the HTTP API: the local socket always, TCP (TLS and a token) when
/// configured; a TCP API that can't start (no token, a bad certificate) is an error to fix, not
/// to skip.
fn start_fronts(
    admin_socket: Option<std::os::unix::net::UnixListener>,
    state_dir: &Path,
    (api, budget): (Option<&config::Api>, &crate::budget::Budget),
    parts: crate::operator::Clusters,
    running: &mut Vec<(&'static str, Running)>,
) -> Result<(), ServeError> {
    if let Some(listener) = admin_socket {
        // The admin socket is a convenience: without it the appliance still serves.
        match crate::operator::admin::start(listener, parts.clone()) {
            Ok(admin) => running.push(("admin", admin)),
            Err(e) => tracing::warn!("admin socket unusable: {e:#}"),
        }
    }
    let tcp = match api {
        Some(api) => {
            let listener =
                crate::sockets::bind_tcp(api.listen).map_err(|e| ServeError::Service {
                    service: "api",
                    source: anyhow::anyhow!("binding {}: {e}", api.listen),
                })?;
            Some((listener, budget.gate(crate::budget::Kind::Api, api.listen)))
        }
        None => None,
    };
    let socket = state_dir.join(crate::operator::api::SOCKET_NAME);
    match crate::operator::api::bind_local(state_dir) {
        Ok(local) => {
            let started = crate::operator::api::start(local, tcp, parts).map_err(|source| {
                ServeError::Service {
                    service: "api",
                    source,
                }
            })?;
            running.push(("api", started));
            match api {
                Some(api) => tracing::info!(
                    "API and status page at https://{}/ (TLS and the token in {}); locally at {}",
                    api.listen,
                    api.token_file.display(),
                    socket.display()
                ),
                None => tracing::info!(
                    "API at {} (local socket; api.listen puts it and the status page on TCP)",
                    socket.display()
                ),
            }
        }
        Err(e) if tcp.is_none() => {
            tracing::warn!("no API socket in {}: {e}", state_dir.display());
        }
        Err(e) => {
            return Err(ServeError::Service {
                service: "api",
                source: anyhow::anyhow!("the API socket in {}: {e}", state_dir.display()),
            });
        }
    }
    Ok(())
}

fn service_failure(
    done: Result<(&'static str, anyhow::Result<()>), tokio::task::JoinError>,
) -> ServeError {
    match done {
        Ok((service, Err(source))) => ServeError::Service { service, source },
        Ok((service, Ok(()))) => ServeError::Service {
            service,
            source: anyhow::anyhow!("stopped unexpectedly"),
        },
        Err(e) => ServeError::Service {
            service: "a service",
            source: anyhow::anyhow!("task failed: {e}"),
        },
    }
}

/// The config keys whose change a running appliance can't apply, because what they govern is
/// set up once at start: bound sockets (`listen`, and the DHCP socket's `network.interface`),
/// the privilege drop (`run_as`), the files opened in the state directory (`state_dir`: the
/// lease journal, the admin socket, the install markers), the HTTP API on TCP (`api`: its
/// listener, certificate, key and token are read once) and the pair (`ha`: which host this is,
/// the peer and the replication secret are found once). Everything else reloads: `control` and
/// `orchestration` are read from the current plan at each machine action and each poll, and
/// `ha.router_id` is keepalived's (`render --format keepalived`), never read by `serve`.
fn needs_restart(
    current: &Plan,
    next: &Plan,
    running_as: Option<&config::RunAs>,
    next_run_as: Option<&config::RunAs>,
) -> Vec<String> {
    let (a, b) = (&current.listen, &next.listen);
    let mut keys = Vec::new();
    for (key, was, is) in [
        ("listen.dns", &a.dns, &b.dns),
        ("listen.dhcp", &a.dhcp, &b.dhcp),
        ("listen.tftp", &a.tftp, &b.tftp),
        ("listen.http", &a.http, &b.http),
        ("listen.api", &a.api, &b.api),
        (
            "listen.machine_config",
            &a.machine_config,
            &b.machine_config,
        ),
        ("listen.ingress_https", &a.ingress_https, &b.ingress_https),
        ("listen.ingress_http", &a.ingress_http, &b.ingress_http),
    ] {
        if was != is {
            keys.push(format!("{key} (set, or derived from network.appliance_ip)"));
        }
    }
    if current.interface != next.interface {
        keys.push("network.interface".to_owned());
    }
    if current.state_dir != next.state_dir {
        keys.push("state_dir".to_owned());
    }
    if running_as != next_run_as {
        keys.push("run_as".to_owned());
    }
    match (&current.api, &next.api) {
        (Some(a), Some(b)) => {
            for (key, changed) in [
                ("api.listen", a.listen != b.listen),
                ("api.cert_file", a.cert_file != b.cert_file),
                ("api.key_file", a.key_file != b.key_file),
                ("api.token_file", a.token_file != b.token_file),
            ] {
                if changed {
                    keys.push(key.to_owned());
                }
            }
        }
        (None, None) => {}
        (None, Some(_)) => keys.push("api (added)".to_owned()),
        (Some(_), None) => keys.push("api (removed)".to_owned()),
    }
    match (&current.ha, &next.ha) {
        (Some(a), Some(b)) => {
            if a.hosts != b.hosts {
                keys.push("ha.hosts".to_owned());
            }
            if a.secret_file != b.secret_file {
                keys.push("ha.secret_file".to_owned());
            }
        }
        (None, None) => {}
        (None, Some(_)) => keys.push("ha (added)".to_owned()),
        (Some(_), None) => keys.push("ha (removed)".to_owned()),
    }
    keys
}

fn log_listening(sockets: &[BoundSocket]) {
    for s in sockets {
        tracing::info!(
            "listening for {}/{} on {}",
            s.spec.service.name(),
            s.spec.proto,
            s.local_addr
        );
    }
}

/// The boot files the plan's nodes will ask for and can't get (`http::preflight`), as warnings,
/// and what puts them in place for the config at `config_file` (`role`'s cluster of it).
fn log_missing_boot_files(plan: &Plan, config_file: &Path, role: &instance::Role) {
    let found = crate::http::preflight::missing(plan);
    for m in &found {
        tracing::warn!("boot: {m}");
    }
    let config = match role {
        instance::Role::Cluster(id) => format!("{} --cluster {id}", config_file.display()),
        _ => config_file.display().to_string(),
    };
    for hint in crate::http::preflight::hints(&config, plan, &found, false) {
        tracing::warn!("boot: {hint}");
    }
}

/// Seconds since the epoch, and always past the previous serial so secondaries see a change.
fn next_serial(previous: Option<u32>) -> u32 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
    match previous {
        Some(p) => now.max(p.wrapping_add(1)),
        None => now,
    }
}

fn notify(state: &[sd_notify::NotifyState<'_>]) {
    // Outside systemd NOTIFY_SOCKET is unset and this does nothing.
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!("sd_notify failed: {e}");
    }
}

/// Type=notify-reload wants RELOADING=1 with the monotonic time of the request.
fn notify_reloading() {
    match sd_notify::NotifyState::monotonic_usec_now() {
        Ok(now) => notify(&[sd_notify::NotifyState::Reloading, now]),
        Err(e) => tracing::warn!("can't read the monotonic clock for sd_notify: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{InstallCheck, RenderStyle};

    #[test]
    fn the_soft_descriptor_limit_is_raised_to_the_hard_one() {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        // As a login shell starts it: the soft limit below the hard one.
        setrlimit(Resource::RLIMIT_NOFILE, hard.min(1024), hard).unwrap();
        raise_descriptor_limit();
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
    }

    #[test]
    fn a_failure_prints_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let source = anyhow::Error::new(crate::dhcp::leases::LeaseError::Io {
            path: "/var/lib/okd-appliance/leases".into(),
            source: io,
        })
        .context("opening the lease journal");
        let e = ServeError::Service {
            service: "dhcp",
            source,
        };
        let text = format!("{:#}", anyhow::Error::new(e));
        assert_eq!(
            text,
            "dhcp failed: opening the lease journal: lease journal /var/lib/okd-appliance/leases: no such file"
        );
    }

    fn plan(yaml_extra: &str) -> Plan {
        let text = format!(
            "version: 1\ncluster: {{ name: okd, base_domain: lab.example.com }}\n\
             network: {{ subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1, interface: ens18 }}\n\
             nodes:\n  - {{ name: master-0, role: master, mac: \"52:54:00:00:00:02\", ip: 10.0.0.2 }}\n\
             install: {{ ignition_dir: ./i, artifacts_dir: ./a }}\n{yaml_extra}"
        );
        let loaded = config::parse(&text, "t.yml", Path::new("."), InstallCheck::Skip)
            .unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)));
        Plan::derive(&loaded.config, 1)
    }

    #[test]
    fn restart_only_keys_are_named_and_the_rest_reload() {
        let base = plan("");
        assert!(needs_restart(&base, &plan("dns: { ttl: 60 }"), None, None).is_empty());
        assert!(needs_restart(&base, &plan("lb: { balance: leastconn }"), None, None).is_empty());
        assert_eq!(
            needs_restart(&base, &plan("state_dir: /srv/okd"), None, None),
            ["state_dir"]
        );
        let dns_moved = plan("listen: { dns: [\"10.0.0.1:5353\"] }");
        assert_eq!(
            needs_restart(&base, &dns_moved, None, None),
            ["listen.dns (set, or derived from network.appliance_ip)"]
        );
        let user = config::RunAs {
            user: "okd".into(),
            group: None,
        };
        assert_eq!(needs_restart(&base, &base, None, Some(&user)), ["run_as"]);
    }

    const API: &str = "api: { listen: \"10.0.0.1:9443\", cert_file: api.pem, key_file: api.key, token_file: api-token }";
    const PAIR: &str = "ha: { hosts: [10.0.0.3, 10.0.0.4], router_id: 51, secret_file: ha-secret }";

    /// What a reload from the config with `before` to the one with `after` says takes a restart.
    fn refused(before: &str, after: &str) -> Vec<String> {
        needs_restart(&plan(before), &plan(after), None, None)
    }

    #[test]
    fn adding_or_removing_the_tcp_api_takes_a_restart() {
        assert_eq!(refused("", API), ["api (added)"]);
        assert_eq!(refused(API, ""), ["api (removed)"]);
    }

    #[test]
    fn the_api_listener_takes_a_restart() {
        let moved = API.replace("10.0.0.1:9443", "10.0.0.1:9444");
        assert_eq!(refused(API, &moved), ["api.listen"]);
    }

    #[test]
    fn the_api_certificate_takes_a_restart() {
        let other = API.replace("cert_file: api.pem", "cert_file: new.pem");
        assert_eq!(refused(API, &other), ["api.cert_file"]);
    }

    #[test]
    fn the_api_key_takes_a_restart() {
        let other = API.replace("key_file: api.key", "key_file: new.key");
        assert_eq!(refused(API, &other), ["api.key_file"]);
    }

    #[test]
    fn the_api_token_file_takes_a_restart() {
        let other = API.replace("token_file: api-token", "token_file: new-token");
        assert_eq!(refused(API, &other), ["api.token_file"]);
    }

    #[test]
    fn adding_or_removing_the_pair_takes_a_restart() {
        // The pair also listens for DNS on each host's address: that is named too.
        let added = refused("", PAIR);
        assert!(added.contains(&"ha (added)".to_owned()), "{added:?}");
        let removed = refused(PAIR, "");
        assert!(removed.contains(&"ha (removed)".to_owned()), "{removed:?}");
    }

    #[test]
    fn the_pair_hosts_take_a_restart() {
        let other = PAIR.replace("10.0.0.4]", "10.0.0.5]");
        let keys = refused(PAIR, &other);
        assert!(keys.contains(&"ha.hosts".to_owned()), "{keys:?}");
    }

    #[test]
    fn the_pair_secret_file_takes_a_restart() {
        let other = PAIR.replace("secret_file: ha-secret", "secret_file: new-secret");
        assert_eq!(refused(PAIR, &other), ["ha.secret_file"]);
    }

    #[test]
    fn control_orchestration_and_the_router_id_reload() {
        // Read from the current plan at each machine action and each poll, or never by serve.
        let router = PAIR.replace("router_id: 51", "router_id: 52");
        assert!(refused(PAIR, &router).is_empty());
        assert!(refused("", "orchestration: { poll: 30s, settle: 5m }").is_empty());
        assert!(
            refused(
                "",
                "orchestration: { kubeconfig: other/kubeconfig, api_url: \"https://10.0.0.1:7443\", bootstrap_after_complete: keep }"
            )
            .is_empty()
        );
        assert!(
            refused(
                "",
                "control: { provider: libvirt, libvirt: { uri: \"qemu:///system\", bridge: br-okd } }"
            )
            .is_empty()
        );
    }

    #[test]
    fn serials_always_grow() {
        let now = next_serial(None);
        assert!(next_serial(Some(now)) > now);
        assert_eq!(next_serial(Some(u32::MAX - 1)), u32::MAX);
    }
}
