//! The shipped systemd unit is valid: `systemd-analyze verify` accepts it with the real binary.

use harness::{appliance_bin, repo_root, require_tool};

use crate::support::run_ok;

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    if !require_tool("systemd-analyze") {
        return;
    }
    let unit = std::fs::read_to_string(repo_root().join("systemd/okd-appliance.service")).unwrap();
    assert!(unit.contains("Type=notify"));
    let bin = appliance_bin().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("okd-appliance.service");
    std::fs::write(
        &path,
        unit.replace("/usr/bin/okd-appliance", bin.to_str().unwrap()),
    )
    .unwrap();
    run_ok("systemd-analyze", &["verify", path.to_str().unwrap()]);
}
