//! The backends of every frontend, their live state and counters, read by the data path
//! without locks: each connection loads the current [`Pools`] through an `ArcSwap` and picks a
//! backend; the health checker and drain flip atomics.
//!
//! Architecture invariant: a reload builds a new `Pools` that reuses the state of every backend
//! it keeps (same frontend and address), so health, drain and counters survive it, and open
//! connections keep the `Arc` of the backend they use.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::config::Balance;
use crate::plan::{FrontendKind, HealthCheck, LbPlan};

#[derive(Debug)]
pub struct Pools {
    pub frontends: Vec<Pool>,
    pub balance: Balance,
}

#[derive(Debug)]
pub struct Pool {
    pub kind: FrontendKind,
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
    pub active: AtomicUsize,
    pub connections: AtomicU64,
    pub bytes_to_backend: AtomicU64,
    pub bytes_to_client: AtomicU64,
}

impl Backend {
    fn new(name: &str, addr: SocketAddr) -> Backend {
        Backend {
            name: name.to_owned(),
            addr,
            up: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            connections: AtomicU64::new(0),
            bytes_to_backend: AtomicU64::new(0),
            bytes_to_client: AtomicU64::new(0),
        }
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Takes the backend out of rotation (new connections go elsewhere; open ones finish), or
    /// puts it back.
    pub fn set_draining(&self, draining: bool) {
        self.draining.store(draining, Ordering::Release);
    }

    /// Whether new connections may go here.
    pub fn eligible(&self) -> bool {
        self.is_up() && !self.is_draining()
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
                    check: f.check.clone(),
                    backends,
                    cursor: AtomicUsize::new(0),
                }
            })
            .collect();
        Pools {
            frontends,
            balance: plan.balance,
        }
    }

    pub fn pool(&self, kind: FrontendKind) -> Option<&Pool> {
        self.frontends.iter().find(|p| p.kind == kind)
    }

    /// Drains (or undrains) the backends named `node` in every pool; returns how many.
    pub fn set_draining(&self, node: &str, draining: bool) -> usize {
        let mut n = 0;
        for b in self
            .frontends
            .iter()
            .flat_map(|p| &p.backends)
            .filter(|b| b.name == node)
        {
            b.set_draining(draining);
            n += 1;
        }
        n
    }
}

impl Pool {
    /// Eligible backends in the order to try them: the balancer's pick first, then the rest
    /// (for retrying a refused connect on the next one).
    pub fn candidates(&self, balance: Balance) -> Vec<Arc<Backend>> {
        let eligible: Vec<&Arc<Backend>> = self.backends.iter().filter(|b| b.eligible()).collect();
        if eligible.is_empty() {
            return Vec::new();
        }
        let first = match balance {
            Balance::RoundRobin => self.cursor.fetch_add(1, Ordering::Relaxed) % eligible.len(),
            Balance::LeastConnections => {
                let start = self.cursor.fetch_add(1, Ordering::Relaxed);
                // Ties rotate, so equal backends share the load.
                (0..eligible.len())
                    .map(|i| (start + i) % eligible.len())
                    .min_by_key(|&i| eligible[i].active.load(Ordering::Relaxed))
                    .unwrap_or(0)
            }
        };
        (0..eligible.len())
            .map(|i| Arc::clone(eligible[(first + i) % eligible.len()]))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;
    use crate::plan::{Backend as PlanBackend, Frontend, Probe};
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
            pool.candidates(Balance::RoundRobin).is_empty(),
            "nothing is up before its checks pass"
        );
        for b in &pool.backends {
            b.set_up(true);
        }
        pool.backends[1].set_up(false);
        let firsts: Vec<String> = (0..4)
            .map(|_| pool.candidates(Balance::RoundRobin)[0].name.clone())
            .collect();
        assert_eq!(firsts, ["m0", "m2", "m0", "m2"]);
        assert_eq!(pools.set_draining("m2", true), 1);
        let c = pool.candidates(Balance::RoundRobin);
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
            assert_eq!(pool.candidates(Balance::LeastConnections)[0].name, "m1");
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
}
