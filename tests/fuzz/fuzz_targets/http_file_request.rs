//! An artifact request's path and conditional/range headers: resolution never leaves the served
//! directory and the range decision always fits the file.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| okd_appliance::fuzzing::http_file_request(data));
