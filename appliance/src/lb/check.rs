//! The active health checker: one task that, every interval, starts a probe of each backend of
//! each served pool (one whose frontend has a listener) whose previous probe has finished; each
//! probe is bounded by the timeout and runs concurrently, and its result goes to the backend's
//! [`Health`] as soon as it arrives, so an unreachable node waiting out its timeout never delays
//! the verdict on the others. It also swaps in new pools when the plan changes, keeping the
//! state of the backends that stay.
//!
//! Probes: HTTPS GET expecting 200 (`/readyz` on 6443, `/healthz` on 22623; TLS per [`super::tls`]),
//! HTTP GET expecting 200 (`/healthz/ready` on the routers' port 1936), or a TCP connect. A fresh
//! connection per probe, as HAProxy does: a check must see what a new client would.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use super::health::{Health, Transition};
use super::pool::Pools;
use crate::journal::{Event, EventKind, Journal};
use crate::plan::{self, FrontendKind, Probe};

type Key = (FrontendKind, SocketAddr, String);

/// The TLS client of the HTTPS probes, as the plan asks. A CA that can't be read at start is
/// fatal (the operator asked for verification); after a reload the previous connector stays.
pub fn initial_tls(plan: &plan::Plan) -> anyhow::Result<TlsConnector> {
    super::tls::connector(plan.lb.check_ca.as_deref()).context("lb.health.ca_file")
}

/// Probes the backends of every served pool until `token` is cancelled, starting with `tls`
/// (from [`initial_tls`]).
pub async fn run(
    plan: plan::Handle,
    pools: Arc<ArcSwap<Pools>>,
    mut tls: TlsConnector,
    journal: Journal,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let mut health: HashMap<Key, Health> = HashMap::new();
    let mut seen_plan = plan.load_full();
    let mut plan_loaded = journal.subscribe();
    let mut period = interval_of(&pools.load());
    let mut ticker = ticker(period);
    // Each backend is probed every tick unless its previous probe is still running, so a probe
    // that waits for its timeout (an unreachable node) never delays the checks of the others.
    let mut probes: JoinSet<bool> = JoinSet::new();
    let mut in_flight: HashSet<Key> = HashSet::new();
    // Which backend each probe task is for, so even a probe that panicked frees its backend.
    let mut task_of: HashMap<tokio::task::Id, Key> = HashMap::new();
    loop {
        tokio::select! {
            () = token.cancelled() => return Ok(()),
            Some(joined) = probes.join_next_with_id(), if !probes.is_empty() => {
                let (id, ok) = match joined {
                    Ok((id, ok)) => (id, ok),
                    // A probe that panicked counts as a failed check.
                    Err(e) => (e.id(), false),
                };
                if let Some(key) = task_of.remove(&id) {
                    in_flight.remove(&key);
                    observe(&mut health, &pools.load(), &journal, key, ok);
                }
            }
            event = plan_loaded.recv() => {
                // A reload applies at once, not at the next tick: `okd-appliance reload`
                // returns to an operator who expects the new pools to be in use.
                if matches!(event, Ok(Event { kind: EventKind::PlanLoaded { .. }, .. })
                    | Err(broadcast::error::RecvError::Lagged(_)))
                {
                    adopt(&plan, &mut seen_plan, &pools, &mut tls, &mut health).await;
                    if interval_of(&pools.load()) != period {
                        period = interval_of(&pools.load());
                        ticker = self::ticker(period);
                    }
                }
            }
            _ = ticker.tick() => {
                adopt(&plan, &mut seen_plan, &pools, &mut tls, &mut health).await;
                if interval_of(&pools.load()) != period {
                    period = interval_of(&pools.load());
                    ticker = self::ticker(period);
                }
                let snapshot = pools.load_full();
                // A frontend with no listener carries no traffic: its nodes are not probed.
                for pool in snapshot.frontends.iter().filter(|p| p.served) {
                    for backend in &pool.backends {
                        let key = (pool.kind, backend.addr, backend.name.clone());
                        if !in_flight.insert(key.clone()) {
                            continue;
                        }
                        let (probe, timeout) = (pool.check.probe.clone(), pool.check.timeout);
                        let (tls, addr) = (tls.clone(), backend.addr);
                        let task = probes.spawn(async move {
                            tokio::time::timeout(timeout, probe_once(&probe, addr, &tls))
                                .await
                                .unwrap_or(false)
                        });
                        task_of.insert(task.id(), key);
                    }
                }
            }
        }
    }
}

/// Swaps in the pools of the current plan when it is not the one `seen` (keeping the state of
/// the backends that stay), with a new probe TLS client when the CA changed (read on the
/// blocking pool; a CA that can't be read keeps the previous client).
async fn adopt(
    plan: &plan::Handle,
    seen: &mut Arc<plan::Plan>,
    pools: &ArcSwap<Pools>,
    tls: &mut TlsConnector,
    health: &mut HashMap<Key, Health>,
) {
    let current = plan.load_full();
    if Arc::ptr_eq(&current, seen) {
        return;
    }
    if current.lb.check_ca != seen.lb.check_ca {
        let ca = current.lb.check_ca.clone();
        match tokio::task::spawn_blocking(move || super::tls::connector(ca.as_deref())).await {
            Ok(Ok(c)) => *tls = c,
            Ok(Err(e)) => tracing::error!("lb: keeping the previous TLS settings: {e:#}"),
            Err(e) => tracing::error!("lb: keeping the previous TLS settings: {e}"),
        }
    }
    let next = Pools::from_plan(&current.lb, Some(&pools.load()));
    pools.store(Arc::new(next));
    *seen = current;
    forget_removed(health, &pools.load());
}

fn interval_of(pools: &Pools) -> Duration {
    pools
        .frontends
        .first()
        .map_or(Duration::from_secs(1), |p| p.check.interval)
}

/// Ticks every `period`, the first at once; a late tick moves the schedule instead of bursting.
fn ticker(period: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval(period);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}

/// Feeds one probe result to the backend's state machine and flips the backend on a change.
fn observe(
    health: &mut HashMap<Key, Health>,
    pools: &Pools,
    journal: &Journal,
    key: Key,
    ok: bool,
) {
    let Some(pool) = pools.pool(key.0) else {
        return;
    };
    let Some(backend) = pool
        .backends
        .iter()
        .find(|b| b.addr == key.1 && b.name == key.2)
    else {
        return;
    };
    let h = health
        .entry(key.clone())
        .or_insert_with(|| Health::new(pool.check.rise, pool.check.fall));
    let up = match h.observe(ok) {
        Transition::None => return,
        t => t == Transition::WentUp,
    };
    backend.set_up(up);
    journal.publish(
        Some(key.2),
        EventKind::BackendHealth {
            frontend: key.0.name().to_owned(),
            backend: key.1,
            up,
        },
    );
}

/// Forgets the health of backends no pool has any more.
fn forget_removed(health: &mut HashMap<Key, Health>, live: &Pools) {
    health.retain(|(kind, addr, name), _| {
        live.pool(*kind).is_some_and(|p| {
            p.backends
                .iter()
                .any(|b| b.addr == *addr && &b.name == name)
        })
    });
}

async fn probe_once(probe: &Probe, backend: SocketAddr, tls: &TlsConnector) -> bool {
    match probe {
        Probe::Tcp => TcpStream::connect(backend).await.is_ok(),
        Probe::Https {
            port,
            path,
            server_name,
        } => https_ok(tls, SocketAddr::new(backend.ip(), *port), server_name, path).await,
        Probe::Http { port, path } => {
            let addr = SocketAddr::new(backend.ip(), *port);
            match TcpStream::connect(addr).await {
                Ok(s) => get_ok(s, &addr.ip().to_string(), path).await,
                Err(_) => false,
            }
        }
    }
}

/// `GET path` over TLS answered with 200.
async fn https_ok(tls: &TlsConnector, addr: SocketAddr, server_name: &str, path: &str) -> bool {
    let Ok(name) = ServerName::try_from(server_name.to_owned()) else {
        return false;
    };
    let Ok(tcp) = TcpStream::connect(addr).await else {
        return false;
    };
    match tls.connect(name, tcp).await {
        Ok(stream) => get_ok(stream, server_name, path).await,
        Err(e) => {
            tracing::debug!("lb: TLS check of {addr}: {e}");
            false
        }
    }
}

/// `GET path` on an open connection, answered with status 200.
async fn get_ok<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, host: &str, path: &str) -> bool {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: okd-appliance-health\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(request.as_bytes()).await.is_err() || s.flush().await.is_err() {
        return false;
    }
    let mut head = [0u8; 64];
    let mut n = 0;
    while n < 12 {
        match s.read(&mut head[n..]).await {
            Ok(0) | Err(_) => return false,
            Ok(k) => n += k,
        }
    }
    let line = &head[..n];
    (line.starts_with(b"HTTP/1.1 ") || line.starts_with(b"HTTP/1.0 ")) && &line[9..12] == b"200"
}
