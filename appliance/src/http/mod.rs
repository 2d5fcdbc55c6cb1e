//! The HTTP boot server: iPXE scripts, ignition configs and CoreOS artifacts.
//!
//! Architecture invariant: `files` (range and conditional rules, path resolution) is pure, and
//! the documents it sends (scripts, ignition) come ready-made from the plan
//! (`plan::documents`); the only state it keeps is each node's install phase
//! (`crate::install_state`: ignition fetched by the installer; role config fetched by the
//! installed system) and `iso`'s cache of the parsed base ISO, rebuilt whenever the file or plan
//! changes. `response` holds the body type and plain answers; `preflight` lists what the boots
//! will fetch and can't get. `server` is the socket layer (hyper): it routes, decides who may fetch what by the
//! peer's address, and streams files (`sendfile`: file bodies go to the socket through sendfile(2)).
//! `iso` serves the per-node live ISOs: the base ISO through sendfile with the kernel-argument
//! areas replaced from memory. `fastpath` answers plain requests for small cached artifacts
//! (`opencache`) before hyper, with one `writev` each, and hands hyper everything else.

pub mod fastpath;
pub mod files;
mod install_steps;
pub mod iso;
pub mod opencache;
pub mod preflight;
pub mod response;
pub mod sendfile;
pub mod server;

use std::time::Duration;

use anyhow::Context as _;

use crate::service::{self, Context, Running};
use crate::sockets::BoundSocket;

/// The request head must arrive within this (slowloris), in the fast path and in hyper alike.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// ... and fit in this.
const MAX_HEAD: usize = 16 * 1024;

/// Serves the boot files on every listener in `sockets`.
pub fn start(sockets: Vec<BoundSocket>, ctx: &Context) -> anyhow::Result<Running> {
    let state_dir = ctx.plan.load().state_dir.clone();
    crate::install_state::prepare(&state_dir).with_context(|| {
        format!(
            "creating the install markers' directory in {}",
            state_dir.display()
        )
    })?;
    let mut tasks: Vec<Running> = Vec::new();
    for bound in sockets {
        let addr = bound.local_addr;
        let gate = ctx.budget.gate(crate::budget::Kind::Http, bound.spec.addr);
        let listener = bound
            .into_tcp()
            .with_context(|| format!("adopting the http listener on {addr}"))?;
        tasks.push(Box::pin(server::serve(
            listener,
            ctx.plan.clone(),
            ctx.journal.clone(),
            ctx.active.clone(),
            (
                std::sync::Arc::clone(&ctx.metrics),
                gate,
                ctx.faults.clone(),
            ),
            ctx.shutdown.clone(),
        )));
    }
    Ok(service::all(tasks))
}
