//! The active health checker: one task that, every interval, starts a probe of each backend of
//! each served pool (one whose frontend has a listener, or any pool of a cluster routed through
//! the host's shared frontend: `Pools::served`) whose previous probe has finished; each
//! probe is bounded by the timeout and runs concurrently, and its result goes to the backend's
//! [`Health`] as soon as it arrives, so an unreachable node waiting out its timeout never delays
//! the verdict on the others. It also swaps in new pools when the plan changes, keeping the
//! state of the backends that stay. A backend the data path could not connect to
//! ([`Backend::suspect`]) is probed at once, and again every [`FAST_RECHECK`] while it fails and
//! is still up, so a dead node leaves the pool within a fraction of a second of the first
//! failed connection rather than after `fall` intervals: with the default `fall` of 2, about
//! 100 ms after the first refused connection, whatever the interval, as HAProxy's
//! `observe layer4` with `on-error fastinter` does (`tests/e2e/lb.rs`
//! `a_refused_connection_takes_a_dead_backend_out_before_the_next_check`, with checks every
//! 10 s). The verdict is still only ever the checker's.
//!
//! Probes: HTTPS GET expecting 200 (`/readyz` on 6443, `/healthz` on 22623; TLS per [`super::probe_tls`]),
//! HTTP GET expecting 200 (`/healthz/ready` on the routers' port 1936), or a TCP connect. A fresh
//! connection per probe, as HAProxy does: a check must see what a new client would. The GET is
//! hyper's HTTP/1 client connection over that TCP or TLS stream; only the status is read.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::Empty;
use hyper::header::{CONNECTION, HOST, HeaderValue, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use super::health::{Health, Transition};
use super::pool::{Backend, FAST_RECHECK, Pool, Pools};
use crate::journal::{Event, EventKind, Journal};
use crate::plan::{self, FrontendKind, Probe};

type Key = (FrontendKind, SocketAddr, String);

/// The TLS client of the HTTPS probes, as the plan asks. A CA that can't be read at start is
/// fatal (the operator asked for verification); after a reload the previous connector stays.
pub fn initial_tls(plan: &plan::Plan) -> anyhow::Result<TlsConnector> {
    super::probe_tls::connector(plan.lb.check_ca.as_deref()).context("lb.health.ca_file")
}

/// Probes the backends of every served pool until `token` is cancelled, starting with `tls`
/// (from [`initial_tls`]).
pub async fn run(
    plan: plan::Handle,
    pools: Arc<ArcSwap<Pools>>,
    mut tls: TlsConnector,
    journal: Journal,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let mut health: HashMap<Key, Health> = HashMap::new();
    let mut seen_plan = plan.load_full();
    let mut plan_loaded = journal.subscribe();
    let mut period = interval_of(&pools.load());
    let mut ticker = ticker(period);
    let mut probes = Probes {
        set: JoinSet::new(),
        in_flight: HashSet::new(),
        task_of: HashMap::new(),
        latency: metrics.map(|m| m.lb_check_seconds.clone()),
    };
    loop {
        // The same across reloads; cloned so that waiting on it borrows nothing.
        let failures = Arc::clone(pools.load().failures());
        tokio::select! {
            () = token.cancelled() => return Ok(()),
            Some(joined) = probes.set.join_next_with_id(), if !probes.set.is_empty() => {
                let (id, ok) = match joined {
                    Ok((id, ok)) => (id, ok),
                    // A probe that panicked counts as a failed check.
                    Err(e) => (e.id(), false),
                };
                if let Some(key) = probes.task_of.remove(&id) {
                    probes.in_flight.remove(&key);
                    let snapshot = pools.load_full();
                    let kind = key.0;
                    if let Some(backend) = observe(&mut health, &snapshot, &journal, key, ok) {
                        // A suspected backend is checked again soon until its verdict settles.
                        if backend.is_suspected() {
                            if ok || !backend.is_up() {
                                backend.clear_suspicion();
                            } else if let Some(pool) = snapshot.pool(kind).filter(|p| p.served) {
                                probes.start(pool, &backend, &tls, FAST_RECHECK);
                            }
                        }
                    }
                }
            }
            () = failures.notified() => {
                let snapshot = pools.load_full();
                for (pool, backend) in snapshot.served().filter(|(_, b)| b.is_suspected()) {
                    probes.start(pool, backend, &tls, Duration::ZERO);
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
                for (pool, backend) in snapshot.served() {
                    probes.start(pool, backend, &tls, Duration::ZERO);
                }
            }
        }
    }
}

/// The probes running now. Each backend has at most one, so a probe that waits for its timeout
/// (an unreachable node) never delays the checks of the others, nor piles up behind itself.
struct Probes {
    set: JoinSet<bool>,
    in_flight: HashSet<Key>,
    /// Which backend each probe task is for, so even a probe that panicked frees its backend.
    task_of: HashMap<tokio::task::Id, Key>,
    latency: Option<prometheus_client::metrics::histogram::Histogram>,
}

impl Probes {
    /// Starts a probe of `backend` after `delay`, unless one is running already.
    fn start(&mut self, pool: &Pool, backend: &Arc<Backend>, tls: &TlsConnector, delay: Duration) {
        let key = (pool.kind, backend.addr, backend.name.clone());
        if !self.in_flight.insert(key.clone()) {
            return;
        }
        let (probe, timeout) = (pool.check.probe.clone(), pool.check.timeout);
        let (tls, backend, latency) = (tls.clone(), Arc::clone(backend), self.latency.clone());
        let task = self.set.spawn(async move {
            tokio::time::sleep(delay).await;
            let started = std::time::Instant::now();
            let ok = tokio::time::timeout(timeout, probe_once(&probe, backend.addr, &tls))
                .await
                .unwrap_or(false);
            let took = started.elapsed();
            backend.record_check(ok, took);
            if let Some(h) = latency {
                h.observe(took.as_secs_f64());
            }
            ok
        });
        self.task_of.insert(task.id(), key);
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
        match tokio::task::spawn_blocking(move || super::probe_tls::connector(ca.as_deref())).await
        {
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
        .pools()
        .first()
        .map_or(Duration::from_secs(1), |p| p.check.interval)
}

/// Ticks every `period`, the first at once; a late tick moves the schedule instead of bursting.
fn ticker(period: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval(period);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}

/// Feeds one probe result to the backend's state machine and flips the backend on a change:
/// the backend, when the pools still have it.
fn observe(
    health: &mut HashMap<Key, Health>,
    pools: &Pools,
    journal: &Journal,
    key: Key,
    ok: bool,
) -> Option<Arc<Backend>> {
    let pool = pools.pool(key.0)?;
    let backend = pool
        .backends
        .iter()
        .find(|b| b.addr == key.1 && b.name == key.2)?;
    let h = health
        .entry(key.clone())
        .or_insert_with(|| Health::new(pool.check.rise, pool.check.fall));
    let up = match h.observe(ok) {
        Transition::None => return Some(Arc::clone(backend)),
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
    Some(Arc::clone(backend))
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

/// `GET path` on an open connection, answered with status 200. The caller's timeout bounds it:
/// dropping this future drops the connection.
async fn get_ok<S>(io: S, host: &str, path: &str) -> bool
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let Ok(host) = HeaderValue::from_str(host) else {
        return false;
    };
    let request = Request::get(path)
        .header(HOST, host)
        .header(USER_AGENT, "okd-appliance-health")
        .header(CONNECTION, "close")
        .body(Empty::<Bytes>::new());
    let Ok(request) = request else {
        return false;
    };
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await
    else {
        return false;
    };
    // The connection future moves the bytes; it runs beside the exchange instead of in a task of
    // its own, so the probe's timeout ends both.
    let mut conn = Box::pin(conn);
    let mut exchange = std::pin::pin!(sender.send_request(request));
    let answered = tokio::select! {
        biased;
        response = exchange.as_mut() => Some(response),
        ended = conn.as_mut() => {
            if let Err(e) = ended {
                tracing::debug!("lb: check GET {path}: {e}");
            }
            None
        }
    };
    let response = match answered {
        Some(response) => response,
        // A connection that closed right after the response head (as `Connection: close`
        // asks) has handed the response over already; dropping it settles the exchange at once
        // if it had not.
        None => {
            drop(conn);
            exchange.await
        }
    };
    match response {
        Ok(r) => r.status() == StatusCode::OK,
        Err(e) => {
            tracing::debug!("lb: check GET {path}: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;

    /// Answers one connection on 127.0.0.1 with `reply` after reading the request head, and
    /// hands the head back.
    async fn answer_once(reply: &'static [u8]) -> (SocketAddr, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = tcp.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            let _ = tcp.write_all(reply).await;
            String::from_utf8_lossy(&head).into_owned()
        });
        (addr, task)
    }

    async fn http_probe(addr: SocketAddr) -> bool {
        http_probe_within(addr, Duration::from_secs(5)).await
    }

    async fn http_probe_within(addr: SocketAddr, timeout: Duration) -> bool {
        let probe = Probe::Http {
            port: addr.port(),
            path: "/healthz/ready",
        };
        let tls = super::super::probe_tls::connector(None).unwrap();
        let backend = SocketAddr::new(addr.ip(), 1);
        tokio::time::timeout(timeout, probe_once(&probe, backend, &tls))
            .await
            .unwrap_or(false)
    }

    #[tokio::test]
    async fn only_a_200_is_up_and_the_request_names_host_and_path() {
        let (addr, seen) = answer_once(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
        assert!(http_probe(addr).await);
        let head = seen.await.unwrap();
        assert!(
            head.starts_with("GET /healthz/ready HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.to_ascii_lowercase().contains("host: 127.0.0.1\r\n"),
            "{head}"
        );
        assert!(
            head.to_ascii_lowercase().contains("connection: close\r\n"),
            "{head}"
        );

        for reply in [
            &b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"[..],
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"SSH-2.0-OpenSSH_9.2\r\n",
            b"",
        ] {
            let (addr, _) = answer_once(reply).await;
            assert!(
                !http_probe(addr).await,
                "{}",
                String::from_utf8_lossy(reply)
            );
        }
        // HTTP/1.0 servers count too, as they did for HAProxy.
        let (addr, _) = answer_once(b"HTTP/1.0 200 OK\r\n\r\nok").await;
        assert!(http_probe(addr).await);
    }

    #[tokio::test]
    async fn a_backend_that_never_answers_is_down_when_the_timeout_ends() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Accepts and then says nothing.
        let _held = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(tcp);
        });
        let started = std::time::Instant::now();
        assert!(!http_probe_within(addr, Duration::from_millis(300)).await);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }
}
