//! DHCPv4: reservations for the nodes, an optional dynamic pool, PXE and iPXE boot, and leases
//! that are never lost.
//!
//! Architecture invariant: `reply` decides, `fit` sizes the reply, `leases` remembers, the
//! server layer does the I/O and syncs the leases before any ACK leaves.

mod fit;
pub mod leases;

/// Decodes a DHCP packet. dhcproto has debug assertions on some option lengths that a hostile
/// packet can trip (found by fuzzing); a panic in the decoder is a malformed packet, dropped
/// like any other, never the end of the listener.
pub fn decode(packet: &[u8]) -> Option<dhcproto::v4::Message> {
    use dhcproto::Decodable;
    std::panic::catch_unwind(|| dhcproto::v4::Message::from_bytes(packet).ok())
        .ok()
        .flatten()
}
pub mod reply;
pub mod server;

#[cfg(test)]
mod tests;
