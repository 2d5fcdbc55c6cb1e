//! DHCPv4: reservations for the nodes, an optional dynamic pool, PXE and iPXE boot, and leases
//! that are never lost. No DHCPv6: a dual-stack node gets its IPv6 address from kernel
//! arguments (`plan::boot::ipv6_kernel_args` says why).
//!
//! Architecture invariant: `reply` decides, `fit` sizes the reply, `leases` remembers, the
//! server layer does the I/O and syncs the leases before any ACK leaves.

mod fit;
pub mod leases;

/// Decodes a DHCP packet. dhcproto has debug assertions on some option lengths that a hostile
/// packet can trip (found by fuzzing); a panic in the decoder is a malformed packet, dropped
/// like any other, never the end of the listener.
///
/// A message whose `hlen` is longer than the 16-byte `chaddr` field (RFC 2131 section 2) is
/// malformed and refused here: dhcproto decodes it, but its `chaddr()` slices `chaddr[..hlen]`
/// and panics, and every reader of a decoded message may call it. One such broadcast stopped
/// the whole appliance (issue 39).
pub fn decode(packet: &[u8]) -> Option<dhcproto::v4::Message> {
    use dhcproto::Decodable;
    std::panic::catch_unwind(|| dhcproto::v4::Message::from_bytes(packet).ok())
        .ok()
        .flatten()
        .filter(|m| usize::from(m.hlen()) <= CHADDR_LEN)
}

/// The size of a DHCP message's `chaddr` field (RFC 2131 section 2).
pub const CHADDR_LEN: usize = 16;
pub mod reply;
pub mod server;

use anyhow::Context as _;

use crate::service::{self, Context, Running};
use crate::sockets::BoundSocket;

/// Opens the lease journal (before privileges are dropped) and serves DHCP on `sockets` (one,
/// bound to the cluster interface).
pub fn start(sockets: Vec<BoundSocket>, ctx: &Context) -> anyhow::Result<Running> {
    let [bound] = <[BoundSocket; 1]>::try_from(sockets)
        .map_err(|s| anyhow::anyhow!("dhcp serves one socket, got {}", s.len()))?;
    let addr = bound.local_addr;
    let socket = bound
        .into_udp()
        .with_context(|| format!("adopting the dhcp socket on {addr}"))?;
    server::prepare(&socket)?;
    let state_dir = ctx.plan.load().state_dir.clone();
    let (leases, recovery) = leases::Leases::open(&state_dir, server::unix_now())
        .with_context(|| format!("opening the lease journal in {}", state_dir.display()))?;
    if recovery.skipped > 0 {
        tracing::warn!(
            "lease journal: {} damaged records skipped, {} recovered, {} leases live",
            recovery.skipped,
            recovery.records,
            recovery.live
        );
    } else {
        tracing::info!("lease journal: {} leases live", recovery.live);
    }
    Ok(service::all(vec![Box::pin(server::serve(
        socket,
        leases,
        ctx.plan.clone(),
        ctx.journal.clone(),
        server::subscribe(&ctx.journal, &ctx.active),
        ctx.active.clone(),
        (std::sync::Arc::clone(&ctx.metrics), ctx.faults.clone()),
        ctx.shutdown.clone(),
    ))]))
}

#[cfg(test)]
mod tests;
