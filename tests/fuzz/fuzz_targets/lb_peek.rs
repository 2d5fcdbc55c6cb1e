//! Any bytes as the first bytes of a connection to the shared frontend: the ClientHello and
//! request-head peeks never panic, and a decision on a prefix holds for the whole.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::lb_peek(data));
