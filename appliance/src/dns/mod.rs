//! DNS: authoritative for the cluster zone and the reverse zones of its subnets, and a careful
//! forwarder for everything else.
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

#[cfg(test)]
mod tests;
