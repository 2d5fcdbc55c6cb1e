//! Replays the fuzzers' saved corpora (tests/fuzz/corpus) and any crash they kept
//! (tests/fuzz/artifacts): every input that once mattered stays a regression test.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz");
    let mut count = 0;
    for dir in [
        root.join("corpus").join(target),
        root.join("artifacts").join(target),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let result = std::panic::catch_unwind(|| run(&data));
            assert!(result.is_ok(), "{} panics", path.display());
            count += 1;
        }
    }
    assert!(count > 20, "the {target} corpus has only {count} inputs");
}

#[test]
fn dns_request_corpus() {
    replay("dns_request", okd_appliance::fuzzing::dns_request);
}

#[test]
fn config_text_corpus() {
    replay("config_text", okd_appliance::fuzzing::config_text);
}

#[test]
fn dhcp_packet_corpus() {
    replay("dhcp_packet", okd_appliance::fuzzing::dhcp_packet);
}

#[test]
fn http_file_request_corpus() {
    replay(
        "http_file_request",
        okd_appliance::fuzzing::http_file_request,
    );
}

#[test]
fn live_iso_corpus() {
    replay("live_iso", okd_appliance::fuzzing::live_iso);
}
