//! The backends of every frontend, their live state and counters, read by the data path
//! without locks: each connection loads the current [`Pools`] through an `ArcSwap` and picks a
//! backend; the health checker and drain flip atomics.
//!
//! Architecture invariant: a reload builds a new `Pools` that reuses the state of every backend
//! it keeps (same frontend and address), so health, drain and counters survive it, and open
//! connections keep the `Arc` of the backend they use.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::plan::{FrontendKind, HealthCheck, LbPlan};
use crate::vocabulary::Balance;

/// How soon a suspected backend ([`Backend::suspect`]) is probed again while its checks fail
/// and it is still up: with the default `fall` of 2, a dead backend leaves the pool about this
/// long after the first refused connection.
pub const FAST_RECHECK: Duration = Duration::from_millis(100);

#[derive(Debug)]
///
/// The fields are private: the pools are made by [`Pools::from_plan`] only, and walked through
/// [`Pools::served`] (what carries traffic) or [`Pools::backends`] (every backend, for the
/// status views).
pub struct Pools {
    frontends: Vec<Pool>,
    balance: Balance,
    /// How long a drained backend's connections may go on (see `lb::drain`).
    drain_timeout: Duration,
    /// Wakes the health checker when a connection to a backend failed ([`Backend::suspect`]);
    /// the same across reloads.
    failures: Arc<Notify>,
}

#[derive(Debug)]
pub struct Pool {
    pub kind: FrontendKind,
    /// Whether the frontend has a listener (its own, or the host's router): a pool without one
    /// carries no traffic, is not probed, and is neither drained nor reported as down.
    pub served: bool,
    pub check: HealthCheck,
    pub backends: Vec<Arc<Backend>>,
    cursor: AtomicUsize,
}

/// One backend of one frontend.
#[derive(Debug)]
pub struct Backend {
    pub name: String,
    pub addr: SocketAddr,
    up: AtomicBool,
    draining: AtomicBool,
    /// Bumped by every drain and undrain, so a drain's watcher sees when it is no longer the
    /// current one (an undrain, or an undrain and a new drain, happened since).
    drain_generation: AtomicU64,
    /// When the pending drain timeout closes what is left, in milliseconds since [`origin`];
    /// 0 when none is pending. Only for `lb status`: the watcher keeps its own deadline.
    drain_deadline: AtomicU64,
    /// Bumped when the drain timeout closes the backend's connections; each connection watches
    /// it (a `watch` channel: subscribing and bumping never lock, and one bump reaches every
    /// connection at once).
    cut: watch::Sender<u64>,
    /// Connections being made or open. Counted from before the connect, so that a drain that
    /// sees 0 here can never be followed by a connection that missed the drain (see `claim`).
    pub active: AtomicUsize,
    pub connections: AtomicU64,
    pub bytes_to_backend: AtomicU64,
    pub bytes_to_client: AtomicU64,
    /// A connection to it was refused or not answered since its last settled check.
    suspected: AtomicBool,
    /// The last health check's result ([`CHECK_NONE`], [`CHECK_PASSED`], [`CHECK_FAILED`]), how
    /// long it took in microseconds and when it ended (seconds since the epoch). Written by the
    /// checker only, read by the status; never on the data path.
    last_check: AtomicU8,
    last_check_micros: AtomicU64,
    last_check_at: AtomicU64,
    /// When [`Backend::state`] last changed (up or down, drained, undrained), in seconds since
    /// the epoch; 0 before the first change.
    changed_at: AtomicU64,
}

const CHECK_NONE: u8 = 0;
const CHECK_PASSED: u8 = 1;
const CHECK_FAILED: u8 = 2;

/// A backend's last health check, for the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastCheck {
    pub passed: bool,
    pub took: Duration,
    /// Seconds since the epoch.
    pub at: u64,
}

fn epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A connection counted in [`Backend::active`] for as long as this lives.
#[derive(Debug)]
pub struct Claim(Arc<Backend>);

impl Claim {
    pub fn backend(&self) -> &Arc<Backend> {
        &self.0
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The zero of the drain deadlines kept for `lb status`.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn millis_since_origin(at: Instant) -> u64 {
    // +1: 0 means "no deadline".
    u64::try_from(at.saturating_duration_since(origin()).as_millis()).unwrap_or(u64::MAX) + 1
}

impl Backend {
    fn new(name: &str, addr: SocketAddr) -> Backend {
        Backend {
            name: name.to_owned(),
            addr,
            up: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            drain_generation: AtomicU64::new(0),
            drain_deadline: AtomicU64::new(0),
            cut: watch::Sender::new(0),
            active: AtomicUsize::new(0),
            connections: AtomicU64::new(0),
            bytes_to_backend: AtomicU64::new(0),
            bytes_to_client: AtomicU64::new(0),
            suspected: AtomicBool::new(false),
            last_check: AtomicU8::new(CHECK_NONE),
            last_check_micros: AtomicU64::new(0),
            last_check_at: AtomicU64::new(0),
            changed_at: AtomicU64::new(0),
        }
    }

    /// A health check ended: `passed`, after `took`.
    pub fn record_check(&self, passed: bool, took: Duration) {
        self.last_check_micros.store(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.last_check_at.store(epoch_secs(), Ordering::Relaxed);
        self.last_check.store(
            if passed { CHECK_PASSED } else { CHECK_FAILED },
            Ordering::Release,
        );
    }

    /// The last health check, once there was one.
    pub fn last_check(&self) -> Option<LastCheck> {
        let passed = match self.last_check.load(Ordering::Acquire) {
            CHECK_PASSED => true,
            CHECK_FAILED => false,
            _ => return None,
        };
        Some(LastCheck {
            passed,
            took: Duration::from_micros(self.last_check_micros.load(Ordering::Relaxed)),
            at: self.last_check_at.load(Ordering::Relaxed),
        })
    }

    /// When its state last changed (seconds since the epoch), once it did.
    pub fn state_since(&self) -> Option<u64> {
        match self.changed_at.load(Ordering::Relaxed) {
            0 => None,
            at => Some(at),
        }
    }

    fn changed(&self) {
        self.changed_at
            .store(epoch_secs().max(1), Ordering::Relaxed);
    }

    /// A connection to this backend was refused or not answered. The checker then probes it at
    /// once and again every [`FAST_RECHECK`] until its verdict settles, instead of waiting for
    /// the interval (HAProxy's `observe layer4` with `on-error fastinter`). True when the
    /// backend was not suspected already: the caller wakes the checker.
    pub fn suspect(&self) -> bool {
        !self.suspected.swap(true, Ordering::AcqRel)
    }

    pub fn is_suspected(&self) -> bool {
        self.suspected.load(Ordering::Acquire)
    }

    /// The checker's verdict settled: a probe passed, or the backend is down.
    pub fn clear_suspicion(&self) {
        self.suspected.store(false, Ordering::Release);
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    pub fn set_up(&self, up: bool) {
        if self.up.swap(up, Ordering::AcqRel) != up {
            self.changed();
        }
    }

    /// `off` (its frontend has no listener: not probed, neither up nor down), `draining`, `up`
    /// or `down`: what `lb status`, `status` and the page show.
    pub fn state(&self, served: bool) -> &'static str {
        match (served, self.is_up(), self.is_draining()) {
            (false, _, _) => "off",
            (true, _, true) => "draining",
            (true, true, false) => "up",
            (true, false, false) => "down",
        }
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Whether new connections may go here.
    pub fn eligible(&self) -> bool {
        self.is_up() && !self.is_draining()
    }

    /// Connections being made or open right now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Reserves the backend for a new connection: counts it as active and subscribes it to the
    /// drain timeout, then checks the backend is still eligible (the balancer's pick may be a
    /// moment old). `None` means a drain (or a failed check) got there first. Counting before
    /// checking (both sequentially consistent) is what lets a drain trust an active count of 0.
    pub fn claim(self: &Arc<Self>) -> Option<(Claim, watch::Receiver<u64>)> {
        self.active.fetch_add(1, Ordering::SeqCst);
        let claim = Claim(Arc::clone(self));
        let cut = self.cut.subscribe();
        self.eligible().then_some((claim, cut))
    }

    /// Takes the backend out of rotation; new connections go elsewhere, open ones go on until
    /// `deadline`. Returns the drain's generation, or `None` when it was already draining (the
    /// first drain's deadline stands).
    pub fn start_drain(&self, deadline: Instant) -> Option<u64> {
        if self.draining.swap(true, Ordering::SeqCst) {
            return None;
        }
        let generation = self.drain_generation.fetch_add(1, Ordering::SeqCst) + 1;
        self.drain_deadline
            .store(millis_since_origin(deadline), Ordering::Relaxed);
        self.changed();
        Some(generation)
    }

    /// Puts the backend back into rotation and cancels its pending drain timeout. Returns
    /// whether it was draining.
    pub fn undrain(&self) -> bool {
        if !self.draining.swap(false, Ordering::SeqCst) {
            return false;
        }
        self.drain_generation.fetch_add(1, Ordering::SeqCst);
        self.drain_deadline.store(0, Ordering::Relaxed);
        self.changed();
        true
    }

    /// Whether the drain of `generation` is still in force (no undrain since).
    pub fn drain_is_current(&self, generation: u64) -> bool {
        self.is_draining() && self.drain_generation.load(Ordering::SeqCst) == generation
    }

    /// The drain ended without closing anything: no timeout pending any more.
    pub fn drain_done(&self) {
        self.drain_deadline.store(0, Ordering::Relaxed);
    }

    /// Closes every connection open on the backend (each one's keeper aborts its relay).
    pub fn cut_connections(&self) {
        self.drain_deadline.store(0, Ordering::Relaxed);
        self.cut.send_modify(|cuts| *cuts += 1);
    }

    /// Time left before the drain timeout closes what is open, when one is pending.
    pub fn drain_closes_in(&self) -> Option<Duration> {
        match self.drain_deadline.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(
                ms.saturating_sub(millis_since_origin(Instant::now())),
            )),
        }
    }
}

impl Pools {
    /// The pools of `plan`, reusing the state of `previous`'s backends where they stay.
    pub fn from_plan(plan: &LbPlan, previous: Option<&Pools>) -> Pools {
        let frontends = plan
            .frontends
            .iter()
            .map(|f| {
                let old = previous.and_then(|p| p.frontends.iter().find(|o| o.kind == f.kind));
                let backends = f
                    .backends
                    .iter()
                    .map(|b| {
                        old.and_then(|o| {
                            o.backends
                                .iter()
                                .find(|ob| ob.addr == b.addr && ob.name == b.name)
                        })
                        .cloned()
                        .unwrap_or_else(|| Arc::new(Backend::new(&b.name, b.addr)))
                    })
                    .collect();
                Pool {
                    kind: f.kind,
                    // A routed cluster's frontends listen at the host's router.
                    served: !f.listen.is_empty() || plan.sharing == crate::plan::Sharing::Routed,
                    check: f.check.clone(),
                    backends,
                    cursor: AtomicUsize::new(0),
                }
            })
            .collect();
        Pools {
            frontends,
            balance: plan.balance,
            drain_timeout: plan.drain_timeout,
            failures: previous.map_or_else(|| Arc::new(Notify::new()), |p| Arc::clone(&p.failures)),
        }
    }

    /// How a pool picks its backend.
    pub fn balance(&self) -> Balance {
        self.balance
    }

    /// How long a drained backend's connections may go on.
    pub fn drain_timeout(&self) -> Duration {
        self.drain_timeout
    }

    /// Wakes the health checker when a connection to a backend failed; the same across
    /// reloads.
    pub fn failures(&self) -> &Arc<Notify> {
        &self.failures
    }

    /// Every pool, served or not, in the plan's order.
    pub fn pools(&self) -> &[Pool] {
        &self.frontends
    }

    /// Every backend of every pool, with its pool (whether it is served is the pool's
    /// `served`): what the status views list.
    pub fn backends(&self) -> impl Iterator<Item = (&Pool, &Arc<Backend>)> {
        self.frontends
            .iter()
            .flat_map(|p| p.backends.iter().map(move |b| (p, b)))
    }

    pub fn pool(&self, kind: FrontendKind) -> Option<&Pool> {
        self.frontends.iter().find(|p| p.kind == kind)
    }

    /// Every backend of a pool that has a listener, with its pool: what drains, the pair's
    /// replication and the orchestration look at (a pool without a listener carries no
    /// connection).
    pub fn served(&self) -> impl Iterator<Item = (&Pool, &Arc<Backend>)> {
        self.backends().filter(|(p, _)| p.served)
    }

    /// The served backends named `node`.
    pub fn served_backends_of<'a>(
        &'a self,
        node: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Backend>> {
        self.served()
            .map(|(_, b)| b)
            .filter(move |b| b.name == node)
    }
}

impl Pool {
    /// Eligible backends in the order to try them: the balancer's pick first, then the rest
    /// (for retrying a refused connect on the next one). Nothing is allocated or cloned: the
    /// pick costs a walk over the pool's few backends per connection. Eligibility is read as
    /// the walk goes, so a backend that changes state meanwhile may be offered again or left
    /// out; `Backend::claim` checks it once more before any connect.
    pub fn candidates(&self, balance: Balance) -> impl Iterator<Item = &Arc<Backend>> + '_ {
        let eligible = || self.backends.iter().filter(|b| b.eligible());
        let n = eligible().count();
        let first = match (n, balance) {
            (0, _) => 0,
            (_, Balance::RoundRobin) => self.cursor.fetch_add(1, Ordering::Relaxed) % n,
            (_, Balance::LeastConnections) => {
                let start = self.cursor.fetch_add(1, Ordering::Relaxed);
                // Ties rotate, so equal backends share the load.
                (0..n)
                    .map(|i| (start + i) % n)
                    .min_by_key(|&i| {
                        eligible()
                            .nth(i)
                            .map_or(usize::MAX, |b| b.active.load(Ordering::Relaxed))
                    })
                    .unwrap_or(0)
            }
        };
        eligible().cycle().skip(first).take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Backend as PlanBackend, Frontend, Probe};
    use crate::vocabulary::Role;

    #[test]
    fn a_backend_keeps_its_last_check_and_when_its_state_changed() {
        let b = Backend::new("mst0", "10.0.0.11:6443".parse().unwrap());
        assert_eq!(b.last_check(), None);
        assert_eq!(b.state_since(), None);
        b.set_up(false);
        assert_eq!(b.state_since(), None, "down was already its state");
        b.record_check(true, Duration::from_micros(1500));
        let c = b.last_check().unwrap();
        assert!(c.passed);
        assert_eq!(c.took, Duration::from_micros(1500));
        assert!(c.at > 1_700_000_000, "{c:?}");
        b.record_check(false, Duration::from_millis(200));
        assert_eq!(
            b.last_check().map(|c| (c.passed, c.took)),
            Some((false, Duration::from_millis(200)))
        );
        b.set_up(true);
        let up_at = b.state_since().unwrap();
        assert!(up_at > 1_700_000_000);
        b.changed_at.store(1, Ordering::Relaxed);
        b.set_up(true);
        assert_eq!(b.state_since(), Some(1), "no change, no new time");
        assert!(b.start_drain(Instant::now()).is_some());
        assert!(b.state_since().unwrap() >= up_at, "a drain is a change");
        b.changed_at.store(1, Ordering::Relaxed);
        assert!(b.undrain());
        assert!(b.state_since().unwrap() >= up_at, "so is an undrain");
    }
    use std::time::Duration;

    fn plan(names: &[(&str, &str)]) -> LbPlan {
        let check = HealthCheck {
            probe: Probe::Tcp,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 2,
        };
        LbPlan {
            balance: Balance::RoundRobin,
            check_ca: None,
            drain_timeout: Duration::from_secs(300),
            sharing: crate::plan::Sharing::Own,
            frontends: vec![Frontend {
                kind: FrontendKind::Api,
                listen: vec![],
                backends: names
                    .iter()
                    .map(|(n, a)| PlanBackend {
                        name: (*n).into(),
                        role: Role::Master,
                        addr: a.parse().unwrap(),
                    })
                    .collect(),
                check,
            }],
        }
    }

    #[test]
    fn only_up_and_undrained_backends_get_connections_in_turn() {
        let pools = Pools::from_plan(
            &plan(&[
                ("m0", "10.0.0.2:6443"),
                ("m1", "10.0.0.3:6443"),
                ("m2", "10.0.0.4:6443"),
            ]),
            None,
        );
        let pool = pools.pool(FrontendKind::Api).unwrap();
        assert!(
            pool.candidates(Balance::RoundRobin).next().is_none(),
            "nothing is up before its checks pass"
        );
        for b in &pool.backends {
            b.set_up(true);
        }
        pool.backends[1].set_up(false);
        let firsts: Vec<String> = (0..4)
            .map(|_| {
                pool.candidates(Balance::RoundRobin)
                    .next()
                    .unwrap()
                    .name
                    .clone()
            })
            .collect();
        assert_eq!(firsts, ["m0", "m2", "m0", "m2"]);
        assert!(pool.backends[2].start_drain(Instant::now()).is_some());
        let c: Vec<_> = pool.candidates(Balance::RoundRobin).collect();
        assert_eq!(
            c.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
            ["m0"]
        );
    }

    #[test]
    fn least_connections_prefers_the_idle_backend() {
        let pools = Pools::from_plan(
            &plan(&[("m0", "10.0.0.2:6443"), ("m1", "10.0.0.3:6443")]),
            None,
        );
        let pool = pools.pool(FrontendKind::Api).unwrap();
        for b in &pool.backends {
            b.set_up(true);
        }
        pool.backends[0].active.store(5, Ordering::Relaxed);
        for _ in 0..3 {
            assert_eq!(
                pool.candidates(Balance::LeastConnections)
                    .next()
                    .unwrap()
                    .name,
                "m1"
            );
        }
    }

    #[test]
    fn reload_keeps_the_state_of_remaining_backends() {
        let first = Pools::from_plan(
            &plan(&[("bootstrap", "10.0.0.7:6443"), ("m0", "10.0.0.2:6443")]),
            None,
        );
        first.pool(FrontendKind::Api).unwrap().backends[1].set_up(true);
        let second = Pools::from_plan(
            &plan(&[("m0", "10.0.0.2:6443"), ("m1", "10.0.0.3:6443")]),
            Some(&first),
        );
        let pool = second.pool(FrontendKind::Api).unwrap();
        assert!(pool.backends[0].is_up(), "m0 kept its health");
        assert!(Arc::ptr_eq(
            &pool.backends[0],
            &first.pool(FrontendKind::Api).unwrap().backends[1]
        ));
        assert!(!pool.backends[1].is_up(), "m1 is new and starts down");
    }

    #[tokio::test]
    async fn a_drain_turns_claims_away_and_its_cut_reaches_open_connections() {
        let pools = Pools::from_plan(&plan(&[("m0", "10.0.0.2:6443")]), None);
        let backend = Arc::clone(&pools.pool(FrontendKind::Api).unwrap().backends[0]);
        backend.set_up(true);
        let (open, cut) = backend.claim().expect("eligible");
        assert_eq!(backend.active(), 1);

        let deadline = Instant::now() + Duration::from_secs(60);
        let generation = backend.start_drain(deadline).expect("a new drain");
        assert_eq!(
            backend.start_drain(Instant::now()),
            None,
            "a second drain keeps the first one's deadline"
        );
        assert!(backend.drain_is_current(generation));
        let left = backend.drain_closes_in().expect("a timeout is pending");
        assert!(
            left > Duration::from_secs(59) && left <= Duration::from_secs(60),
            "{left:?}"
        );
        assert!(
            backend.claim().is_none(),
            "no new connection while draining"
        );
        assert_eq!(backend.active(), 1, "a refused claim is not counted");

        assert!(!cut.has_changed().unwrap());
        backend.cut_connections();
        assert!(
            cut.has_changed().unwrap(),
            "the open connection is told to close"
        );
        assert_eq!(backend.drain_closes_in(), None);
        drop(open);
        assert_eq!(backend.active(), 0);

        assert!(backend.undrain());
        assert!(!backend.undrain(), "undrained already");
        assert!(!backend.drain_is_current(generation));
        let (_again, later) = backend.claim().expect("back in rotation");
        assert!(
            !later.has_changed().unwrap(),
            "a connection made after a cut is not closed by it"
        );
    }
}
