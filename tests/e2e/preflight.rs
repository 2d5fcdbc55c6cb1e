//! The preflight a new user runs before an install (issue 46): `check --install` reports every
//! problem the install would hit in one run, and every command its messages suggest runs as
//! written. Before, a missing kubeconfig hid the missing artifacts, and the artifacts hint
//! (`okd-appliance artifacts fetch FILE`, without `--stream`) exited 2 with a usage error.
//!
//! The check and the suggested commands run in a namespace of their own with only loopback:
//! `artifacts fetch` names a public stream URL, which fails there without a packet leaving.

use std::path::Path;

use harness::{Netns, require_root};

/// A cluster whose install is driven (so `cluster up` needs the kubeconfig), with no ignition
/// files, no kubeconfig, no CoreOS artifacts and no iPXE binaries.
const CONFIG: &str = r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { interface: eth0, subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }
listen: { dns: ["0.0.0.0:53"], http: ["0.0.0.0:8080"], tftp: ["0.0.0.0:69"], api: ["0.0.0.0:6443"], machine_config: ["0.0.0.0:22623"], ingress_https: ["0.0.0.0:443"], ingress_http: ["0.0.0.0:80"] }
nodes:
  - { name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:01", ip: 10.0.0.5 }
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:03", ip: 10.0.0.3 }
install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  ipxe_dir: ./ipxe
install_config: { pull_secret_file: ./pull-secret.json }
orchestration: { settle: 30s }
"#;

/// The `okd-appliance ...` commands in backquotes in `text`.
fn suggested(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| quoted.starts_with("okd-appliance "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn one_check_reports_everything_and_every_suggested_command_runs() {
    if !require_root() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-preflight-")
        .tempdir()
        .expect("tempdir");
    let base = dir.path();
    std::fs::create_dir_all(base.join("install_dir")).expect("install_dir");
    let secret = base.join("pull-secret.json");
    std::fs::write(&secret, r#"{"auths":{"quay.io":{"auth":"eDp5"}}}"#).expect("pull secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    std::fs::create_dir_all(base.join("artifacts")).expect("artifacts");
    std::fs::create_dir_all(base.join("ipxe")).expect("ipxe");
    let file = base.join("okd.yml");
    std::fs::write(&file, CONFIG).expect("config");
    let ns = Netns::new("pfl").expect("namespace");
    let bin = harness::appliance_bin().expect("okd-appliance binary");
    let run = |args: &[&str]| {
        let mut argv: Vec<&std::ffi::OsStr> = vec![bin.as_os_str()];
        argv.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
        ns.exec(argv)
            .current_dir(base)
            .env("NO_COLOR", "1")
            .output()
            .expect("run okd-appliance")
    };

    let checked = run(&["check", "--install", file.to_str().expect("utf-8 path")]);
    let said = String::from_utf8_lossy(&checked.stderr).into_owned();
    assert_eq!(checked.status.code(), Some(1), "{said}");
    // Everything at once: the kubeconfig and each file the boots fetch.
    for expected in [
        "bootstrap.ign",
        "kubeconfig",
        "kernel",
        "initramfs",
        "rootfs",
        "undionly.kpxe",
    ] {
        assert!(
            said.contains(expected),
            "no {expected:?} in one run:\n{said}"
        );
    }
    assert!(!said.contains(": ok: cluster"), "{said}");

    let commands = suggested(&said);
    for hint in ["okd-appliance artifacts fetch ", "okd-appliance render "] {
        assert!(
            commands.iter().any(|c| c.starts_with(hint)),
            "no {hint:?} hint:\n{said}"
        );
    }
    for command in &commands {
        let args: Vec<&str> = command.split_whitespace().skip(1).collect();
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(
            out.status.code(),
            Some(2),
            "`{command}` is a usage error:\n{err}"
        );
        assert!(!err.contains("Usage:"), "`{command}`:\n{err}");
    }
    // The artifacts hint got as far as the network, which this namespace doesn't have.
    let fetch = commands
        .iter()
        .find(|c| c.starts_with("okd-appliance artifacts fetch "))
        .expect("the fetch hint");
    assert!(fetch.contains("--stream "), "{fetch}");
    // The render hint wrote the install-config where the installer's hint then reads it.
    assert!(
        Path::new(&base.join("install_dir/install-config.yaml")).is_file(),
        "{commands:?}"
    );
}
