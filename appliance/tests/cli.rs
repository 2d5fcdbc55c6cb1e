//! The command line's contract: exit codes 0 (ok), 1 (invalid config), 2 (usage), `--version`,
//! and diagnostics on stderr with file, line and column.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_okd-appliance"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn fixture(rel: &str) -> String {
    format!("{}/../{rel}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn version_prints_the_crate_version() {
    let out = run(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("okd-appliance {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(run(&[]).status.code(), Some(2));
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        run(&["render", "x.yml", "--format", "nginx"]).status.code(),
        Some(2)
    );
}

#[test]
fn an_invalid_config_exits_1_with_every_problem_located() {
    let out = run(&["check", &fixture("config/bad/many-problems.yml")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("many-problems.yml:3:36"), "{stderr}");
    // Eight mistakes in the file; its ignition directory, which does not exist here, only
    // warns without --install.
    assert!(
        stderr.contains("many-problems.yml: 8 errors, 1 warning"),
        "{stderr}"
    );
}

#[test]
fn a_missing_file_exits_1() {
    let out = run(&["check", "/nonexistent/okd.yml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("can't read /nonexistent/okd.yml"));
}

#[test]
fn check_warns_of_missing_ignition_files_and_check_install_refuses_them() {
    // The shipped lab config points at ./install_dir, which the repository does not ship. A
    // services host restarted after the install directory was deleted must still start (the
    // unit runs `check` before `serve`): a warning, exit 0.
    let out = run(&["check", &fixture("config/lab.yml")]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ignition directory"), "{stderr}");
    assert!(stderr.contains("0 errors, 1 warning"), "{stderr}");

    // Before an install, the same finding is an error, with the fix.
    let out = run(&["check", "--install", &fixture("config/lab.yml")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ignition directory"), "{stderr}");
    assert!(
        stderr.contains("openshift-install create ignition-configs"),
        "{stderr}"
    );
}

#[test]
fn render_ignores_the_ignition_files() {
    let out = run(&["render", "--serial", "1", &fixture("config/lab.yml")]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).is_empty());
}

#[test]
fn render_networkd_writes_the_cluster_nic_or_says_why_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "render",
        "--format",
        "networkd",
        "-o",
        dir.path().to_str().unwrap(),
        &fixture("config/lab.yml"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let file = dir.path().join("10-okd-appliance-cluster.network");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        file.display().to_string()
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("Name=ens19\n"), "{text}");
    assert!(text.contains("Address=10.0.0.1/24\n"), "{text}");

    // demo.yml serves on loopback ports and names no cluster NIC.
    let out = run(&[
        "render",
        "--format",
        "networkd",
        &fixture("config/demo.yml"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("network.interface is not set"),
        "{out:?}"
    );
}
