//! `serve`: load, bind, drop privileges, start the services under one cancellation token,
//! report readiness, reload on SIGHUP, stop on SIGTERM.
//!
//! Architecture invariant: the supervisor knows the order of things and which service gets
//! which socket; it knows nothing of any protocol. Services see the plan only through a
//! [`PlanHandle`], so a reload is one atomic pointer swap and a query in flight keeps the plan it
//! started with.

mod privileges;
pub mod sockets;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{self, LoadError, RealFiles, RenderStyle};
use crate::journal::{EventKind, Journal};
use crate::plan::Plan;
pub use privileges::PrivilegeError;
use sockets::{BindError, BoundSocket, ListenerSpec, Proto, Service};

/// The plan every service reads; replaced whole on reload.
pub type PlanHandle = Arc<ArcSwap<Plan>>;

/// The load balancer's pools, shared by its frontends, its checker and the admin socket.
type LbPools = Arc<ArcSwap<crate::lb::pool::Pools>>;

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
    #[error("{service} failed: {source}")]
    Service {
        service: &'static str,
        #[source]
        source: anyhow::Error,
    },
    #[error("can't install the signal handlers: {0}")]
    Signals(#[source] std::io::Error),
}

/// Every socket the plan asks for, in a stable order.
pub fn listener_specs(plan: &Plan) -> Vec<ListenerSpec> {
    let l = &plan.listen;
    let mut specs = Vec::new();
    let mut add = |service, proto, addrs: &[std::net::SocketAddr], device: Option<&String>| {
        for addr in addrs {
            specs.push(ListenerSpec {
                service,
                proto,
                addr: *addr,
                device: device.cloned(),
            });
        }
    };
    add(Service::Dns, Proto::Udp, &l.dns, None);
    add(Service::Dns, Proto::Tcp, &l.dns, None);
    add(Service::Dhcp, Proto::Udp, &l.dhcp, plan.interface.as_ref());
    add(Service::Tftp, Proto::Udp, &l.tftp, None);
    add(Service::Http, Proto::Tcp, &l.http, None);
    add(Service::Api, Proto::Tcp, &l.api, None);
    add(Service::MachineConfig, Proto::Tcp, &l.machine_config, None);
    add(Service::IngressHttps, Proto::Tcp, &l.ingress_https, None);
    add(Service::IngressHttp, Proto::Tcp, &l.ingress_http, None);
    specs
}

/// Runs the appliance until SIGTERM or SIGINT, or until a service fails.
pub async fn serve(config_path: &Path) -> Result<(), ServeError> {
    // Handlers before anything slow: a SIGHUP or SIGTERM during start-up is queued for the loop
    // below instead of killing the process with the default action.
    let mut sigterm = signal(SignalKind::terminate()).map_err(ServeError::Signals)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(ServeError::Signals)?;
    let mut sighup = signal(SignalKind::hangup()).map_err(ServeError::Signals)?;
    let loaded = load(config_path).await?;
    log_warnings(&loaded.warnings);
    let plan = Plan::derive(&loaded.config, next_serial(None));

    let sockets = sockets::bind_all(&listener_specs(&plan)).map_err(ServeError::Bind)?;
    for s in &sockets {
        tracing::info!(
            "listening for {}/{} on {}",
            s.spec.service.name(),
            s.spec.proto,
            s.local_addr
        );
    }

    // The admin socket is a convenience (drain, status): without it the appliance still serves.
    let admin_socket = match crate::admin::bind(&loaded.config.state_dir) {
        Ok(l) => {
            tracing::info!(
                "admin socket at {}",
                crate::admin::socket_path(&loaded.config.state_dir).display()
            );
            Some(l)
        }
        Err(e) => {
            tracing::warn!(
                "no admin socket in {}: {e} (okd-appliance lb drain/status will not reach this process)",
                loaded.config.state_dir.display()
            );
            None
        }
    };

    if let Some(run_as) = &loaded.config.run_as {
        let (uid, gid) = privileges::drop_to(run_as)?;
        tracing::info!("running as uid {uid} gid {gid}");
    }

    let journal = Journal::new();
    let serial = first_serial(&plan);
    let handle: PlanHandle = Arc::new(ArcSwap::from_pointee(plan));
    let token = CancellationToken::new();
    let pools: LbPools = Arc::new(ArcSwap::from_pointee(crate::lb::pool::Pools::from_plan(
        &handle.load().lb,
        None,
    )));
    let mut services = start_services(sockets, &handle, &pools, &journal, &token)?;
    if let Some(listener) = admin_socket {
        match tokio::net::UnixListener::from_std(listener) {
            Ok(listener) => {
                let (plan, p, journal, token) = (
                    Arc::clone(&handle),
                    Arc::clone(&pools),
                    journal.clone(),
                    token.clone(),
                );
                services.spawn(async move {
                    (
                        "admin",
                        crate::admin::serve(listener, plan, p, journal, token).await,
                    )
                });
            }
            Err(e) => tracing::warn!("admin socket unusable: {e}"),
        }
    }
    journal.publish(None, EventKind::PlanLoaded { serial });
    notify(&[sd_notify::NotifyState::Ready]);
    tracing::info!("ready");

    let outcome = loop {
        tokio::select! {
            _ = sigterm.recv() => break Ok("SIGTERM"),
            _ = sigint.recv() => break Ok("SIGINT"),
            _ = sighup.recv() => reload(config_path, &handle, &journal).await,
            Some(done) = services.join_next() => break Err(service_failure(done)),
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

/// Hands each built-in service its sockets; each runs until the token is cancelled.
fn start_services(
    sockets: Vec<BoundSocket>,
    plan: &PlanHandle,
    pools: &LbPools,
    journal: &Journal,
    token: &CancellationToken,
) -> Result<JoinSet<(&'static str, anyhow::Result<()>)>, ServeError> {
    let mut services = JoinSet::new();
    let dns = crate::dns::server::Shared::new(Arc::clone(plan));
    let mut checker_started = false;
    for bound in sockets {
        let service = bound.spec.service;
        let adopt = |e: std::io::Error| ServeError::Service {
            service: service.name(),
            source: anyhow::Error::new(e)
                .context(format!("adopting the socket on {}", bound.local_addr)),
        };
        match (service, bound.spec.proto) {
            (Service::Dns, Proto::Udp) => {
                let socket = tokio::net::UdpSocket::from_std(bound.socket.into()).map_err(adopt)?;
                let (dns, token) = (Arc::clone(&dns), token.clone());
                services.spawn(async move {
                    (
                        "dns/udp",
                        crate::dns::server::serve_udp(socket, dns, token).await,
                    )
                });
            }
            (Service::Dns, Proto::Tcp) => {
                let listener =
                    tokio::net::TcpListener::from_std(bound.socket.into()).map_err(adopt)?;
                let (dns, token) = (Arc::clone(&dns), token.clone());
                services.spawn(async move {
                    (
                        "dns/tcp",
                        crate::dns::server::serve_tcp(listener, dns, token).await,
                    )
                });
            }
            (Service::Dhcp, Proto::Udp) => {
                let socket = tokio::net::UdpSocket::from_std(bound.socket.into()).map_err(adopt)?;
                let (plan, journal, token) = (Arc::clone(plan), journal.clone(), token.clone());
                services.spawn(async move {
                    (
                        "dhcp",
                        crate::dhcp::server::serve(socket, plan, journal, token).await,
                    )
                });
            }
            (Service::Tftp, Proto::Udp) => {
                let socket = tokio::net::UdpSocket::from_std(bound.socket.into()).map_err(adopt)?;
                let (plan, token) = (Arc::clone(plan), token.clone());
                services.spawn(async move {
                    (
                        "tftp",
                        crate::tftp::server::serve(socket, plan, token).await,
                    )
                });
            }
            (Service::Http, Proto::Tcp) => {
                let listener =
                    tokio::net::TcpListener::from_std(bound.socket.into()).map_err(adopt)?;
                let (plan, journal, token) = (Arc::clone(plan), journal.clone(), token.clone());
                services.spawn(async move {
                    (
                        "http",
                        crate::http::server::serve(listener, plan, journal, token).await,
                    )
                });
            }
            (
                Service::Api
                | Service::MachineConfig
                | Service::IngressHttps
                | Service::IngressHttp,
                Proto::Tcp,
            ) => {
                let kind = match service {
                    Service::Api => crate::plan::FrontendKind::Api,
                    Service::MachineConfig => crate::plan::FrontendKind::MachineConfig,
                    Service::IngressHttps => crate::plan::FrontendKind::IngressHttps,
                    _ => crate::plan::FrontendKind::IngressHttp,
                };
                let listener =
                    tokio::net::TcpListener::from_std(bound.socket.into()).map_err(adopt)?;
                let (p, token2) = (Arc::clone(pools), token.clone());
                services.spawn(async move {
                    (
                        "lb",
                        crate::lb::proxy::serve(listener, kind, p, token2).await,
                    )
                });
                if !checker_started {
                    checker_started = true;
                    let (plan, p, journal, token) = (
                        Arc::clone(plan),
                        Arc::clone(pools),
                        journal.clone(),
                        token.clone(),
                    );
                    services.spawn(async move {
                        (
                            "lb health checks",
                            crate::lb::check::run(plan, p, journal, token).await,
                        )
                    });
                }
            }
            (other, proto) => unreachable!("{}/{proto} has no listener spec", other.name()),
        }
    }
    Ok(services)
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

async fn load(path: &Path) -> Result<config::Loaded, LoadError> {
    let path: PathBuf = path.to_owned();
    tokio::task::spawn_blocking(move || {
        config::load(
            &path,
            &RealFiles {
                now: SystemTime::now(),
            },
        )
    })
    .await
    .expect("config loading does not panic")
}

/// Re-reads the config; swaps in the new plan, or keeps the old one and logs why.
async fn reload(path: &Path, handle: &PlanHandle, journal: &Journal) {
    notify_reloading();
    tracing::info!("SIGHUP: reloading {}", path.display());
    match load(path).await {
        Ok(loaded) => {
            log_warnings(&loaded.warnings);
            let current = handle.load();
            // Sockets are bound once: a reload that moves them would serve records and boot
            // URLs pointing at addresses nobody listens on.
            let same_serial = Plan::derive(&loaded.config, first_serial(&current));
            if same_serial.listen != current.listen || same_serial.interface != current.interface {
                tracing::error!(
                    "the listen addresses or the DHCP interface changed (directly or through the appliance address): restart to apply"
                );
                tracing::error!("reload refused: still serving the previous plan");
            } else if same_serial == **current {
                tracing::info!(
                    "config unchanged: still serving plan {}",
                    first_serial(&current)
                );
            } else {
                let plan = Plan::derive(&loaded.config, next_serial(Some(first_serial(&current))));
                let serial = first_serial(&plan);
                handle.store(Arc::new(plan));
                journal.publish(None, EventKind::PlanLoaded { serial });
                tracing::info!("reloaded: now serving plan {serial}");
            }
        }
        Err(e) => {
            for line in e
                .render(RenderStyle::Plain)
                .lines()
                .filter(|l| !l.is_empty())
            {
                tracing::error!("{line}");
            }
            tracing::error!("reload failed: still serving the previous plan");
        }
    }
    notify(&[sd_notify::NotifyState::Ready]);
}

fn log_warnings(warnings: &config::Problems) {
    if warnings.is_empty() {
        return;
    }
    for line in warnings
        .render(RenderStyle::Plain)
        .lines()
        .filter(|l| !l.is_empty())
    {
        tracing::warn!("{line}");
    }
}

fn first_serial(plan: &Plan) -> u32 {
    plan.zones.first().map_or(0, |z| z.soa().serial)
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

    #[test]
    fn serials_always_grow() {
        let now = next_serial(None);
        assert!(next_serial(Some(now)) > now);
        assert_eq!(next_serial(Some(u32::MAX - 1)), u32::MAX);
    }
}
