//! DNS: authoritative for the cluster zone and the reverse zones of its subnets, and a careful
//! forwarder for everything else.
//!
//! Answers follow Knot and NSD: minimal responses (`authority`); negative answers carry the
//! SOA with TTL min(SOA TTL, MINIMUM) (RFC 2308); ANY gets one synthesized HINFO (RFC 8482),
//! built once per zone; a CNAME chain is followed into any zone served here and stops at a
//! name already in the answer; meta QTYPEs (MAILA, MAILB, OPT) are looked up like data and
//! QCLASS `*` is answered from class IN; AXFR over UDP is NOTIMP, a transfer of a name that is
//! no zone apex NOTAUTH, NOTIFY NOTAUTH. Every known difference from them is in
//! docs/dns-conformance.md, checked by `tests/e2e/dns_differential.rs`.
//!
//! Who may recurse: the clients in `dns.recursion_allowed` (by default the cluster subnets and
//! loopback). They get forwarding, and RA, when there are upstreams; everyone else gets REFUSED
//! for names outside the cluster zones, and names inside them are never forwarded (`server`,
//! `respond`). Response rate limiting (`rrl`) applies to the other clients only: the cluster's
//! own nodes are trusted, and a reflection attack comes from spoofed outside addresses.
//!
//! Why not hickory-server (the crate the product's first design named): the zones are derived,
//! small and replaced whole on reload, so they are indexed once into wire-form answers, and a
//! query costs a lookup and a few copies. hickory-proto still reads every reply back in the
//! tests. Measured in one run of `bench/dns.sh` (docs/performance.md, 2026-11-26), hickory-dns
//! 0.26.3 with the same zone files and one worker spent 2.99 times okd-appliance's CPU per
//! query and answered 0.41 times as many queries per second. The appliance does not need its
//! DNSSEC, dynamic-update or storage back ends.
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
