//! Any bytes as a datagram on the TFTP listener, through the server's own path: never a
//! panic, a well-formed ERROR, a file only inside the iPXE directory, one transfer per request.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::tftp_request(data));
