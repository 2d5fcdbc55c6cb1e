//! What every service is started with, and the shape of a started service.
//!
//! Each service module (`dns`, `dhcp`, `tftp`, `http`, `lb`) has one entry point,
//! `start(sockets, &Context) -> anyhow::Result<Running>`, in the spirit of mini-redis's
//! `server::run(listener, shutdown)`: its fallible set-up (files it opens, certificates it
//! reads) happens in `start`, while the supervisor still has its privileges and before it
//! reports readiness; the returned future serves until the shutdown token is cancelled. The
//! supervisor starts every service, then drops privileges, then spawns them.
//!
//! The [`Context`] is what a service shares with the rest of the appliance: the plan handle,
//! the journal, the shutdown token, the pair's activity flag, the metrics, the descriptor
//! budget and the faults record.
//!
//! Architecture invariant: services depend on this module, the plan, the journal and what the
//! context carries (`ha`, `metrics`, `budget`, `faults`); never on the supervisor and never on
//! each other. The tidy test (`appliance/tests/tidy.rs`) checks it.

use std::future::Future;
use std::pin::Pin;

use anyhow::Context as _;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::journal::Journal;
use crate::plan;

/// What a service shares with the rest of the appliance.
#[derive(Debug, Clone)]
pub struct Context {
    /// The current plan; replaced whole on reload.
    pub plan: plan::Handle,
    pub journal: Journal,
    /// Cancelled when the appliance stops.
    pub shutdown: CancellationToken,
    /// Whether this host is the active one of a pair (always, outside a pair): DHCP and
    /// ignition answer only then.
    pub active: crate::ha::Activity,
    /// Where the services count what they do (`/metrics`).
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// The process's descriptors: every TCP listener admits its connections through it.
    pub budget: crate::budget::Budget,
    /// Where a service reports what it can't do (a state file it can't write): `status` shows it.
    pub faults: crate::faults::Faults,
}

/// A started service: serves until the shutdown token is cancelled, or fails.
pub type Running = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// Runs every task of one service at once: ends when all have ended, or with the first failure
/// (the others are then stopped with the set).
pub fn all(tasks: Vec<Running>) -> Running {
    Box::pin(async move {
        let mut set = JoinSet::new();
        for task in tasks {
            set.spawn(task);
        }
        while let Some(done) = set.join_next().await {
            done.context("a task panicked")??;
        }
        Ok(())
    })
}
