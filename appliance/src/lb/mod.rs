//! The L4 load balancer: TCP frontends for the API (6443), the machine config server (22623)
//! and ingress (443, 80), pools derived from node roles, active health checks, drain (with a
//! timeout for the connections a drained backend still has).
//!
//! Architecture invariant: `health` (the rise/fall state machine) and `pool` selection are
//! pure; the data path (`proxy`) reads the pools through an `ArcSwap` without locks and never
//! waits for the checker (`check`), which is the only writer of health; `lb drain`/`undrain`
//! and the drain watchers are the only writers of drain state. The copy loop never locks: only
//! a connection's start and end touch the mutexes inside tokio's stop and cut signals.
//!
//! `router` and `route` are a host's shared frontend: the router reads each connection's first
//! bytes until `route`'s pure parsers find the server it names, picks that cluster's pools from
//! a table swapped whole at reload, and hands the connection to `proxy::pass` with those bytes
//! to send first; `proxy::accept` is the accept loop both share (one connection cap per
//! listener).
//!
//! Why tokio rather than pingora: the data path is a plain TCP relay, and pingora's
//! load-balancing crates would bring a large dependency tree (and its own runtime) for what
//! `pool` and `health` do. The measured reason is splice: pingora's streams have no splice path
//! (cloudflare/pingora#160, open), so its L4 proxy example copies every byte through user
//! space; splicing measured about 1.5 times the throughput of that copy when it came in
//! (`bench/lb.sh`, 2026-11-22).

pub mod check;
pub mod drain;
pub mod health;
pub mod pipes;
pub mod pool;
pub mod probe_tls;
pub mod proxy;
pub mod route;
pub mod router;

use std::sync::Arc;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::plan::{FrontendKind, Plan};
use crate::service::{self, Context, Running};
use crate::sockets::{BoundSocket, Service};

/// The pools, shared by the frontends, the health checker and the admin socket (drain, status).
pub type SharedPools = Arc<ArcSwap<pool::Pools>>;

/// The pools of `plan`, every backend down until its checks bring it up.
pub fn shared_pools(plan: &Plan) -> SharedPools {
    Arc::new(ArcSwap::from_pointee(pool::Pools::from_plan(
        &plan.lb, None,
    )))
}

/// The frontend a listener serves.
pub(super) fn frontend_of(service: Service) -> Option<FrontendKind> {
    match service {
        Service::KubeApi => Some(FrontendKind::Api),
        Service::MachineConfig => Some(FrontendKind::MachineConfig),
        Service::IngressHttps => Some(FrontendKind::IngressHttps),
        Service::IngressHttp => Some(FrontendKind::IngressHttp),
        Service::Dns | Service::Dhcp | Service::Tftp | Service::Http => None,
    }
}

/// Balances every frontend listener in `sockets` over `pools`, and runs the health checker
/// (the TLS settings of its probes are read here, at start). The listeners and the checker stop
/// with `ctx.shutdown`, the connections with `connections` (the same token, or a later one for
/// a cluster a reload removes: its open connections get its drain timeout).
pub fn start(
    sockets: Vec<BoundSocket>,
    ctx: &Context,
    pools: &SharedPools,
    connections: &CancellationToken,
) -> anyhow::Result<Running> {
    let tls = check::initial_tls(&ctx.plan.load())?;
    let mut tasks: Vec<Running> = vec![Box::pin(check::run(
        Arc::clone(&ctx.plan),
        Arc::clone(pools),
        tls,
        ctx.journal.clone(),
        Some(Arc::clone(&ctx.metrics)),
        ctx.shutdown.clone(),
    ))];
    for bound in sockets {
        let (addr, bound_addr) = (bound.local_addr, bound.spec.addr);
        let service = bound.spec.service;
        let kind = frontend_of(service)
            .with_context(|| format!("{} is not a load-balancer frontend", service.name()))?;
        let listener = bound
            .into_tcp()
            .with_context(|| format!("adopting the {} listener on {addr}", service.name()))?;
        tasks.push(Box::pin(proxy::serve(
            listener,
            kind,
            Arc::clone(pools),
            (
                ctx.budget.gate(crate::budget::Kind::Lb, bound_addr),
                ctx.budget.clone(),
            ),
            (ctx.shutdown.clone(), connections.clone()),
        )));
    }
    Ok(service::all(tasks))
}
