//! A failed service is started again alone, with backoff, while the others keep serving
//! (Erlang/OTP's one-for-one supervisor, systemd's `Restart=on-failure` for one unit).
//!
//! [`supervise`] runs one task; when it ends before its instance's token is cancelled (an
//! error, a panic, or an end nobody asked for), the failure is logged and recorded in the
//! status's faults, and a task that can be started again ([`Task::restart`]: the listeners,
//! on their sockets, which stay bound) is, after [`FIRST_DELAY`], doubling up to
//! [`MAX_DELAY`] while it keeps failing within [`STABLE`] of its start. What can't be started
//! again (the orchestration, replication channels, the fronts) is down alone: the supervisor
//! goes on while anything else runs. Established connections a service relays are its own
//! tasks: they are not cut when another service restarts.
//!
//! Architecture invariant: knows no service; only the shape of a [`Task`].

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use tokio_util::sync::CancellationToken;

use super::instance::Task;
use crate::operator::status::{FaultState, Faults};

/// The wait before the first restart of a failed service.
pub const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest wait between restarts of a service that keeps failing.
pub const MAX_DELAY: Duration = Duration::from_secs(60);
/// A service that ran this long before failing starts over from [`FIRST_DELAY`].
pub const STABLE: Duration = Duration::from_secs(60);

/// Runs `task`, starting it again after each failure while it can be; returns its name, its
/// instance's token and how it ended for good.
pub(super) async fn supervise(
    task: Task,
    faults: Faults,
) -> (&'static str, CancellationToken, anyhow::Result<()>) {
    let Task {
        name,
        token,
        mut running,
        mut restart,
        scope,
    } = task;
    let scope = scope.as_deref();
    let mut delay = FIRST_DELAY;
    loop {
        let started = Instant::now();
        let outcome = AssertUnwindSafe(running)
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                Err(anyhow::anyhow!(
                    "panicked: {}",
                    crate::isolate::message(&*panic)
                ))
            });
        if token.is_cancelled() {
            return (name, token, outcome);
        }
        let why = match &outcome {
            Ok(()) => "stopped unexpectedly".to_owned(),
            Err(e) => format!("{e:#}"),
        };
        let whose = scope.map(|s| format!(" of {s}")).unwrap_or_default();
        let Some(again) = restart.as_mut() else {
            tracing::error!(
                "{name}{whose} failed: {why}; it can't be started again, the other services go on"
            );
            faults.record(name, scope, FaultState::Down, Some(&why));
            return (name, token, outcome);
        };
        if started.elapsed() >= STABLE {
            delay = FIRST_DELAY;
        }
        tracing::error!(
            "{name}{whose} failed: {why}; starting it again in {delay:?} (the other services go on)"
        );
        faults.record(name, scope, FaultState::Restarting, Some(&why));
        tokio::select! {
            () = token.cancelled() => return (name, token, Ok(())),
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(MAX_DELAY);
        running = match again() {
            Ok(running) => {
                tracing::info!("{name}{whose} started again");
                faults.record(name, scope, FaultState::Serving, None);
                running
            }
            // Counted as one more failure: the next try waits longer.
            Err(e) => Box::pin(async move { Err(e.context("starting it again")) }),
        };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::service::Running;

    /// A task whose first two runs fail (an error, then a panic) and whose third serves until
    /// cancelled.
    fn flaky(starts: &Arc<AtomicU32>, token: &CancellationToken) -> Task {
        let run = |n: u32, token: CancellationToken| -> Running {
            Box::pin(async move {
                match n {
                    0 => anyhow::bail!("socket gone"),
                    1 => panic!("a bug"),
                    _ => {
                        token.cancelled().await;
                        Ok(())
                    }
                }
            })
        };
        let counter = Arc::clone(starts);
        let t = token.clone();
        let mut task = Task::once("dns", token.clone(), run(0, token.clone()));
        task.restart = Some(Box::new(move || {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(run(n, t.clone()))
        }));
        task.scope = Some("cluster okd".to_owned());
        task
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_service_is_started_again_with_backoff_and_reported() {
        let starts = Arc::new(AtomicU32::new(0));
        let token = CancellationToken::new();
        let faults = Faults::default();
        let running = tokio::spawn(supervise(flaky(&starts, &token), faults.clone()));
        // The error, 1 s, the panic, 2 s, then it serves.
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        assert_eq!(starts.load(Ordering::SeqCst), 2);
        let list = faults.list();
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0].service, "dns");
        assert_eq!(list[0].scope.as_deref(), Some("cluster okd"));
        assert_eq!(list[0].state, FaultState::Serving);
        assert_eq!(list[0].restarts, 2);
        assert!(list[0].error.contains("a bug"), "{list:?}");
        token.cancel();
        let (name, _, outcome) = running.await.unwrap();
        assert_eq!(name, "dns");
        assert!(outcome.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn what_cant_be_started_again_is_down_alone() {
        let token = CancellationToken::new();
        let faults = Faults::default();
        let task = Task::once(
            "orchestration",
            token.clone(),
            Box::pin(async { anyhow::bail!("the phase record is gone") }),
        );
        let (_, _, outcome) = supervise(task, faults.clone()).await;
        assert!(outcome.is_err());
        assert_eq!(faults.list()[0].state, FaultState::Down);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expected_end_is_no_fault() {
        let token = CancellationToken::new();
        let faults = Faults::default();
        token.cancel();
        let task = Task::once("http", token.clone(), Box::pin(async { Ok(()) }));
        let (_, _, outcome) = supervise(task, faults.clone()).await;
        assert!(outcome.is_ok());
        assert!(faults.list().is_empty());
    }
}
