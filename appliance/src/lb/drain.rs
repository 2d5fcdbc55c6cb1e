//! Draining a node: its backends leave rotation at once (new connections go elsewhere), the
//! connections they have go on, and a watcher per backend reports when the last one has ended,
//! or closes those still open when the drain timeout passes, so that a drain always ends.
//! Undrain cancels the timeout.
//!
//! The watcher polls the backend's active count (every `POLL`, 100 ms) rather than being told by
//! the data path: a drain is rare and short-lived, and polling keeps every bit of drain bookkeeping
//! out of the per-connection code, which only watches the backend's cut signal.
//!
//! `lb drain NODE` gives open connections at most `lb.drain_timeout` (default 5 minutes). The
//! watcher journals that no connection is left, or at the timeout bumps the backend's cut
//! signal (a `tokio::sync::watch` every connection subscribed to before connecting) and
//! journals how many connections that closed. Undrain starts a new drain generation, which the
//! watcher sees. A new connection is counted active before the backend's eligibility is
//! checked again (`Backend::claim`), so a drain that sees no active connection misses none
//! still connecting. `lb status` shows per backend its active connections and the seconds left
//! before the timeout.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::pool::{Backend, Pools};
use crate::journal::{EventKind, Journal};
use crate::plan::FrontendKind;

/// How often a watcher looks at its backend: the delay of the "drained" event and of noticing an
/// undrain.
const POLL: Duration = Duration::from_millis(100);

/// Drains the backends named `node` in every served pool, each with its own watcher; returns
/// how many backends are named so. Backends already draining keep their first deadline. Needs a
/// tokio runtime (the watchers are tasks).
pub fn drain(pools: &Pools, node: &str, journal: &Journal) -> usize {
    let named = drain_quietly(pools, node, journal);
    if named > 0 {
        journal.publish(
            Some(node.to_owned()),
            EventKind::DrainRequested { draining: true },
        );
    }
    named
}

/// [`drain`] without announcing it (a drain replicated from the pair's active host).
pub fn drain_quietly(pools: &Pools, node: &str, journal: &Journal) -> usize {
    let mut named = 0;
    for (pool, backend) in pools.served().filter(|(_, b)| b.name == node) {
        named += 1;
        let deadline = Instant::now() + pools.drain_timeout();
        if let Some(generation) = backend.start_drain(deadline) {
            tokio::spawn(watch(
                pool.kind,
                Arc::clone(backend),
                generation,
                deadline,
                journal.clone(),
            ));
        }
    }
    named
}

/// Puts the backends named `node` back into rotation in every served pool, cancelling their
/// drain timeouts; returns how many backends are named so.
pub fn undrain(pools: &Pools, node: &str, journal: &Journal) -> usize {
    let named = undrain_quietly(pools, node);
    if named > 0 {
        journal.publish(
            Some(node.to_owned()),
            EventKind::DrainRequested { draining: false },
        );
    }
    named
}

/// [`undrain`] without announcing it.
pub fn undrain_quietly(pools: &Pools, node: &str) -> usize {
    let mut named = 0;
    for backend in pools.served_backends_of(node) {
        named += 1;
        backend.undrain();
    }
    named
}

/// A drain (`draining`) or undrain replicated from the pair's active host, unannounced; returns
/// how many backends are named `node` (none: no node of the served pools).
pub fn replicated(pools: &Pools, node: &str, draining: bool, journal: &Journal) -> usize {
    if draining {
        drain_quietly(pools, node, journal)
    } else {
        undrain_quietly(pools, node)
    }
}

/// What a watcher does after one look at its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Connections are open and time is left.
    Wait,
    /// Undrained (or drained anew, by a drain with its own watcher): nothing to report.
    Cancelled,
    /// No connection left: the drain is complete.
    Drained,
    /// The timeout passed with connections open: close them.
    Expired,
}

/// The decision, apart from the clock and the atomics it reads.
fn step(current: bool, active: usize, expired: bool) -> Step {
    match (current, active, expired) {
        (false, _, _) => Step::Cancelled,
        (true, 0, _) => Step::Drained,
        (true, _, false) => Step::Wait,
        (true, _, true) => Step::Expired,
    }
}

/// Watches one drained backend until its drain ends, one way or the other, and journals how.
async fn watch(
    frontend: FrontendKind,
    backend: Arc<Backend>,
    generation: u64,
    deadline: Instant,
    journal: Journal,
) {
    loop {
        let now = Instant::now();
        let current = backend.drain_is_current(generation);
        match step(current, backend.active(), now >= deadline) {
            Step::Wait => tokio::time::sleep_until(deadline.min(now + POLL)).await,
            Step::Cancelled => return,
            Step::Drained => {
                backend.drain_done();
                journal.publish(
                    Some(backend.name.clone()),
                    EventKind::BackendDrained {
                        frontend: frontend.name().to_owned(),
                        backend: backend.addr,
                    },
                );
                return;
            }
            Step::Expired => {
                // The line first, then the cut: the cut closes the connections from other
                // runtime threads at once, so whoever sees one closed (its client, an operator
                // tailing the journal) must already find the line that says why.
                journal.publish(
                    Some(backend.name.clone()),
                    EventKind::DrainTimedOut {
                        frontend: frontend.name().to_owned(),
                        backend: backend.addr,
                        closed: backend.active(),
                    },
                );
                backend.cut_connections();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Backend as PlanBackend, Frontend, HealthCheck, LbPlan, Probe};
    use crate::vocabulary::{Balance, Role};

    const TIMEOUT: Duration = Duration::from_secs(300);

    /// Two frontends sharing the node `m0`, as the API and machine-config pools do.
    fn pools() -> Pools {
        let check = HealthCheck {
            probe: Probe::Tcp,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            rise: 1,
            fall: 1,
        };
        let backends = vec![PlanBackend {
            name: "m0".into(),
            role: Role::Master,
            addr: "10.0.0.2:6443".parse().unwrap(),
        }];
        // Both served: drains skip pools without a listener.
        let frontend = |kind| Frontend {
            kind,
            listen: vec!["10.0.0.1:6443".parse().unwrap()],
            backends: backends.clone(),
            check: check.clone(),
        };
        let pools = Pools::from_plan(
            &LbPlan {
                balance: Balance::RoundRobin,
                drain_timeout: TIMEOUT,
                sharing: crate::plan::Sharing::Own,
                check_ca: None,
                frontends: vec![
                    frontend(FrontendKind::Api),
                    frontend(FrontendKind::MachineConfig),
                ],
            },
            None,
        );
        for (_, b) in pools.backends() {
            b.set_up(true);
        }
        pools
    }

    fn backend(pools: &Pools, kind: FrontendKind) -> Arc<Backend> {
        Arc::clone(&pools.pool(kind).unwrap().backends[0])
    }

    /// What the drain watchers reported (the requests themselves are checked apart).
    fn events(journal: &Journal) -> Vec<String> {
        journal
            .recent()
            .iter()
            .filter(|e| !matches!(e.kind, EventKind::DrainRequested { .. }))
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn steps() {
        assert_eq!(step(false, 3, true), Step::Cancelled);
        assert_eq!(step(true, 0, false), Step::Drained);
        assert_eq!(step(true, 0, true), Step::Drained);
        assert_eq!(step(true, 2, false), Step::Wait);
        assert_eq!(step(true, 2, true), Step::Expired);
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_with_no_connections_is_complete_at_once() {
        let (pools, journal) = (pools(), Journal::new());
        assert_eq!(drain(&pools, "m0", &journal), 2);
        tokio::time::sleep(POLL).await;
        assert_eq!(
            events(&journal),
            [
                "m0: api backend 10.0.0.2:6443 drained: no connections left",
                "m0: machine-config backend 10.0.0.2:6443 drained: no connections left",
            ]
        );
        assert!(backend(&pools, FrontendKind::Api).is_draining());
        assert_eq!(drain(&pools, "nobody", &journal), 0);
        // The request itself is announced once (a pair replicates it), not for an unknown name.
        let requests: Vec<String> = journal
            .recent()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::DrainRequested { .. }))
            .map(ToString::to_string)
            .collect();
        assert_eq!(requests, ["m0: drain requested"]);
    }

    #[tokio::test(start_paused = true)]
    async fn open_connections_finish_or_are_closed_at_the_timeout() {
        let (pools, journal) = (pools(), Journal::new());
        let api = backend(&pools, FrontendKind::Api);
        let mc = backend(&pools, FrontendKind::MachineConfig);
        let (api_open, mut api_cut) = api.claim().unwrap();
        let (api_open2, _) = api.claim().unwrap();
        let (mc_open, mc_cut) = mc.claim().unwrap();
        drain(&pools, "m0", &journal);

        tokio::time::sleep(TIMEOUT / 2).await;
        assert!(events(&journal).is_empty(), "{:?}", events(&journal));
        drop(mc_open);
        tokio::time::sleep(POLL * 2).await;
        assert_eq!(
            events(&journal),
            ["m0: machine-config backend 10.0.0.2:6443 drained: no connections left"]
        );

        tokio::time::timeout(TIMEOUT / 2 + POLL, api_cut.changed())
            .await
            .expect("closed at the timeout")
            .unwrap();
        assert_eq!(
            events(&journal)[1],
            "m0: api backend 10.0.0.2:6443 drain timeout: closed 2 connections"
        );
        assert!(
            !mc_cut.has_changed().unwrap(),
            "only the expired drain cuts"
        );
        drop((api_open, api_open2));
    }

    #[tokio::test(start_paused = true)]
    async fn undrain_cancels_the_timeout() {
        let (pools, journal) = (pools(), Journal::new());
        let api = backend(&pools, FrontendKind::Api);
        let (_open, cut) = api.claim().unwrap();
        drain(&pools, "m0", &journal);
        tokio::time::sleep(TIMEOUT / 2).await;
        assert_eq!(undrain(&pools, "m0", &journal), 2);
        assert!(api.eligible());
        tokio::time::sleep(TIMEOUT).await;
        assert!(!cut.has_changed().unwrap(), "the connection was not closed");
        let api_events: Vec<String> = events(&journal)
            .into_iter()
            .filter(|e| e.contains(" api "))
            .collect();
        assert!(api_events.is_empty(), "{api_events:?}");

        // A new drain after the undrain has its own full timeout.
        drain(&pools, "m0", &journal);
        tokio::time::sleep(TIMEOUT - POLL).await;
        assert!(!cut.has_changed().unwrap());
        tokio::time::sleep(POLL * 2).await;
        assert!(cut.has_changed().unwrap());
    }
}
