//! DNS: authoritative for the cluster zone and the reverse zones of its subnets, and a careful
//! forwarder for everything else.
//!
//! Architecture invariant: protocol logic (`wire`, `authority`, `respond`) is pure and
//! allocation-free on the answer path; the server layers hold the sockets, and the plan arrives
//! through the supervisor's plan handle.

pub mod authority;
pub mod forward;
pub mod respond;
pub mod rrl;
pub mod server;
pub mod wire;

use std::sync::Arc;

use anyhow::Context as _;

use crate::service::{self, Context, Running};
use crate::sockets::{BoundSocket, Proto};

/// Answers on every UDP socket and TCP listener in `sockets`, all sharing one index of the plan
/// and one forwarder cache.
pub fn start(sockets: Vec<BoundSocket>, ctx: &Context) -> anyhow::Result<Running> {
    // One forwarder per DNS server, admitted by the share the division gave it.
    let forwards = ctx
        .budget
        .gate(crate::budget::Kind::Forwards, forwards_at(&ctx.plan.load()));
    let shared = server::Shared::new(ctx.plan.clone(), Arc::clone(&ctx.metrics), forwards);
    let mut tasks: Vec<Running> = Vec::new();
    for bound in sockets {
        let (addr, proto, spec_addr) = (bound.local_addr, bound.spec.proto, bound.spec.addr);
        let adopting = || format!("adopting the dns/{proto} socket on {addr}");
        let (shared, token) = (Arc::clone(&shared), ctx.shutdown.clone());
        tasks.push(match proto {
            Proto::Udp => Box::pin(server::serve_udp(
                bound.into_udp().with_context(adopting)?,
                shared,
                token,
            )),
            Proto::Tcp => Box::pin(server::serve_tcp(
                bound.into_tcp().with_context(adopting)?,
                shared,
                ctx.budget.gate(crate::budget::Kind::DnsTcp, spec_addr),
                token,
            )),
        });
    }
    Ok(service::all(tasks))
}

/// Where a DNS server's forwarder is named in the descriptor budget (`supervisor::descriptors`
/// divides under it, `start` takes its gate): the plan's first DNS address.
pub fn forwards_at(plan: &crate::plan::Plan) -> std::net::SocketAddr {
    let first = plan.listen.dns.first().copied();
    first.unwrap_or(std::net::SocketAddr::from(([0; 4], 0)))
}

#[cfg(test)]
mod tests;
