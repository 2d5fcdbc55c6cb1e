//! A small read-only TFTP server (RFC 1350) with option negotiation (RFC 2347): block size
//! (RFC 2348), transfer size and timeout (RFC 2349). It exists for one job: handing PXE firmware
//! the iPXE binary to chainload (undionly.kpxe, snponly.efi). Writes are refused.
//!
//! Architecture invariant: `packet` is pure (parse a request, build replies); `server` does the
//! I/O. Each transfer runs on its own ephemeral port, as RFC 1350 section 4 requires: one of the
//! three kinds of client socket not bound by `sockets.rs`, with the DNS forwarder's and
//! keepalived's probe (`appliance/tests/tidy.rs`, `CLIENT_SOCKETS`).
//! `admission` decides which requests get a transfer, so a flood of (spoofed) read requests
//! can't keep PXE firmware out; `files` reads each boot file once, on the blocking pool, and
//! shares it between transfers.

pub mod admission;
pub mod files;
pub mod packet;
pub mod server;

use anyhow::Context as _;

use crate::service::{self, Context, Running};
use crate::sockets::BoundSocket;

/// Serves TFTP read requests on every socket in `sockets`.
pub fn start(sockets: Vec<BoundSocket>, ctx: &Context) -> anyhow::Result<Running> {
    let mut tasks: Vec<Running> = Vec::new();
    for bound in sockets {
        let (addr, spec_addr) = (bound.local_addr, bound.spec.addr);
        let socket = bound
            .into_udp()
            .with_context(|| format!("adopting the tftp socket on {addr}"))?;
        tasks.push(Box::pin(server::serve(
            socket,
            ctx.plan.clone(),
            ctx.budget.gate(crate::budget::Kind::Transfers, spec_addr),
            ctx.shutdown.clone(),
        )));
    }
    Ok(service::all(tasks))
}
