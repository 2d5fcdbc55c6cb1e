//! Any bytes as one client's side of a connection to the served boot server (fast path and
//! hyper), from a node's address or a stranger's: nothing panics, the server closes after the
//! client's end, and what it sent is HTTP.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::served::http(data));
