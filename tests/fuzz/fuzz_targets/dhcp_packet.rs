//! Any bytes as a DHCP packet: never a panic, never a reserved address to a stranger.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::dhcp_packet(data));
