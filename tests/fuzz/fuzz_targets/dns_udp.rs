//! Any bytes as one datagram to the served DNS/UDP listener (`fuzzing::served`): nothing
//! panics, and a good query after it is answered.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::served::dns_udp(data));
