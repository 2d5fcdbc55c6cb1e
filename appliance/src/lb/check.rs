//! The active health checker: one loop that probes every backend of every pool each interval
//! (concurrently, each probe bounded by the timeout), feeds the results to each backend's
//! [`Health`] and flips the backend when it changes. It also swaps in new pools when the plan
//! changes, keeping the state of the backends that stay.
//!
//! Probes: HTTPS GET expecting 200 (`/readyz` on 6443, `/healthz` on 22623; TLS per [`super::tls`]),
//! HTTP GET expecting 200 (`/healthz/ready` on the routers' port 1936), or a TCP connect. A fresh
//! connection per probe, as HAProxy does: a check must see what a new client would.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;
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
    // A CA that can't be read at start is fatal (the operator asked for verification); after a
    // reload the previous connector stays.
    let mut tls =
        super::tls::connector(seen_plan.lb.check_ca.as_deref()).context("lb.health.ca_file")?;
    loop {
        let current = plan.load_full();
        if !Arc::ptr_eq(&current, &seen_plan) {
            if current.lb.check_ca != seen_plan.lb.check_ca {
                match super::tls::connector(current.lb.check_ca.as_deref()) {
                    Ok(c) => tls = c,
                    Err(e) => tracing::error!("lb: keeping the previous TLS settings: {e:#}"),
                }
            }
            let next = Pools::from_plan(&current.lb, Some(&pools.load()));
            pools.store(Arc::new(next));
            seen_plan = current;
        }
        let snapshot = pools.load_full();
        let interval = snapshot
            .frontends
            .first()
            .map_or(Duration::from_secs(1), |p| p.check.interval);
        let mut probes = JoinSet::new();
        for pool in &snapshot.frontends {
            for backend in &pool.backends {
                let (kind, addr, name) = (pool.kind, backend.addr, backend.name.clone());
                let (probe, timeout) = (pool.check.probe.clone(), pool.check.timeout);
                let tls = tls.clone();
                probes.spawn(async move {
                    let ok = tokio::time::timeout(timeout, probe_once(&probe, addr, &tls))
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
