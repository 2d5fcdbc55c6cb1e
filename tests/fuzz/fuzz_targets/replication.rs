//! Any bytes as one client's side of a connection to a standby's replication listener: before
//! TLS, in place of the proof, or after a valid proof as the peer's lines. Nothing panics, the
//! standby closes after the client's end, and what it sent after a proof is JSON lines.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::served::replication(data));
