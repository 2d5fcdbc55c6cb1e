//! The active health checker: one loop that probes every backend of every pool each interval
//! (concurrently, each probe bounded by the timeout), feeds the results to each backend's
//! [`Health`] and flips the backend when it changes. It also swaps in new pools when the plan
//! changes, keeping the state of the backends that stay.
//!
//! Probes: HTTP GET expecting 200 (`/healthz/ready` on the routers' port 1936), or a TCP connect.
//! OpenShift's HTTPS probes (`/readyz` on 6443, `/healthz` on 22623) need a TLS client that is not
//! in this build; until it is, they are done as TCP connects to the same port, and the
//! checker says so once at start.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::health::{Health, Transition};
use super::pool::Pools;
use crate::journal::{EventKind, Journal};
use crate::plan::{FrontendKind, Probe};
use crate::supervisor::PlanHandle;

type Key = (FrontendKind, SocketAddr, String);

pub async fn run(
    plan: PlanHandle,
    pools: Arc<ArcSwap<Pools>>,
    journal: Journal,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let mut health: HashMap<Key, Health> = HashMap::new();
    let mut seen_plan = plan.load_full();
    let mut warned_https = false;
    loop {
        let current = plan.load_full();
        if !Arc::ptr_eq(&current, &seen_plan) {
            let next = Pools::from_plan(&current.lb, Some(&pools.load()));
            pools.store(Arc::new(next));
            seen_plan = current;
        }
        let snapshot = pools.load_full();
        let interval = snapshot
            .frontends
            .first()
            .map_or(Duration::from_secs(1), |p| p.check.interval);
        if !warned_https
            && snapshot
                .frontends
                .iter()
                .any(|p| matches!(p.check.probe, Probe::Https { .. }))
        {
            tracing::warn!(
                "lb: HTTPS health checks are not built in yet; /readyz and /healthz are checked as TCP connects to their ports"
            );
            warned_https = true;
        }
        let mut probes = JoinSet::new();
        for pool in &snapshot.frontends {
            for backend in &pool.backends {
                let (kind, addr, name) = (pool.kind, backend.addr, backend.name.clone());
                let (probe, timeout) = (pool.check.probe.clone(), pool.check.timeout);
                probes.spawn(async move {
                    let ok = tokio::time::timeout(timeout, probe_once(&probe, addr))
                        .await
                        .unwrap_or(false);
                    ((kind, addr, name), ok)
                });
            }
        }
        let round = async {
            while let Some(Ok((key, ok))) = probes.join_next().await {
                let pool = snapshot.pool(key.0);
                let Some(backend) = pool.and_then(|p| {
                    p.backends
                        .iter()
                        .find(|b| b.addr == key.1 && b.name == key.2)
                }) else {
                    continue;
                };
                let check = &pool.expect("found above").check;
                let h = health
                    .entry(key.clone())
                    .or_insert_with(|| Health::new(check.rise, check.fall));
                match h.observe(ok) {
                    Transition::None => {}
                    t => {
                        let up = t == Transition::WentUp;
                        backend.set_up(up);
                        journal.publish(
                            Some(key.2.clone()),
                            EventKind::BackendHealth {
                                frontend: key.0.name().to_owned(),
                                backend: key.1,
                                up,
                            },
                        );
                    }
                }
            }
        };
        tokio::select! {
            () = token.cancelled() => return Ok(()),
            () = async { round.await; tokio::time::sleep(interval).await } => {}
        }
        // Forget backends no pool has any more.
        let live = pools.load();
        health.retain(|(kind, addr, name), _| {
            live.pool(*kind).is_some_and(|p| {
                p.backends
                    .iter()
                    .any(|b| b.addr == *addr && &b.name == name)
            })
        });
    }
}

async fn probe_once(probe: &Probe, backend: SocketAddr) -> bool {
    match probe {
        Probe::Tcp => TcpStream::connect(backend).await.is_ok(),
        Probe::Https { port, .. } => TcpStream::connect(SocketAddr::new(backend.ip(), *port))
            .await
            .is_ok(),
        Probe::Http { port, path } => http_ok(SocketAddr::new(backend.ip(), *port), path).await,
    }
}

/// `GET path` answered with status 200.
async fn http_ok(addr: SocketAddr, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return false;
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: okd-appliance-health\r\nConnection: close\r\n\r\n",
        addr.ip()
    );
    if s.write_all(request.as_bytes()).await.is_err() {
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
