//! Any bytes as a DNS request: the responder never panics and every reply is well formed.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::dns_request(data));
