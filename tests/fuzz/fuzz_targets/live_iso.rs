//! A CoreOS-like live ISO with bytes changed or cut short: the ISO 9660 lookup and the embed
//! areas never panic, and a node image is always sound (see `fuzzing::live_iso`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::live_iso(data));
