//! The L4 load balancer: TCP frontends for the API (6443), the machine config server (22623)
//! and ingress (443, 80), pools derived from node roles, active health checks, drain (with a
//! timeout for the connections a drained backend still has).
//!
//! Architecture invariant: `health` (the rise/fall state machine) and `pool` selection are
//! pure; the data path (`proxy`) reads the pools through an `ArcSwap` without locks and never
//! waits for the checker (`check`), which is the only writer of health.

pub mod check;
pub mod drain;
pub mod health;
pub mod pool;
pub mod proxy;
pub mod tls;
