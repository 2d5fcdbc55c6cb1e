//! Any text as a config file: parsing and validation report errors, never panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::config_text(data));
