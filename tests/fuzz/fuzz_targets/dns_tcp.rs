//! Any bytes as one client's side of a DNS/TCP connection to the served listener: nothing
//! panics, the server closes after the client's end, and every reply is framed.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::served::dns_tcp(data));
