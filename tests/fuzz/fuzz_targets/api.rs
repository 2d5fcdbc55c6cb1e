//! Any bytes as one client's side of a connection to the served API, after its TLS handshake,
//! with the bearer token or without: nothing panics, the server closes after the client's end,
//! and what it sent is HTTP.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::served::api(data));
