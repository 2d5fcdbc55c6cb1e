//! DHCPv4: reservations for the nodes, an optional dynamic pool, PXE and iPXE boot, and leases
//! that are never lost.
//!
//! Architecture invariant: `reply` decides, `leases` remembers, the server layer does the I/O
//! and syncs the leases before any ACK leaves.

pub mod leases;
pub mod reply;
pub mod server;

#[cfg(test)]
mod tests;
