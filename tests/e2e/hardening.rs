//! What a stranger on the cluster network must not be able to do to an install, and what a
//! power cut must not undo, with curl in node namespaces and strace on the real binary:
//!
//! - `/artifacts/` serves artifact files only: no dot-file, ignition file or `auth/` file,
//!   whatever the directory holds;
//! - a node's iPXE script is served to anyone, but only the node's own address uses up its one
//!   "boot your disk" offer (a stranger's requests once sent the node into a reinstall loop);
//! - an install marker counts only once it is on disk: the file synced, renamed, and the
//!   directory synced (strace shows the calls and their order).

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{Netns, Process, Topology, appliance_bin, require_root, require_tools, wait_until};

use crate::dns_support::{START_TIMEOUT, write_config};

const BASE: &str = "http://10.99.0.1:8080";

fn config(dir: &Path) -> PathBuf {
    write_config(
        dir,
        &format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
  - {{ name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }}
  # A worker too: a master alone would be a single-node cluster, whose live system installs itself.
  - {{ name: wrk0, role: worker, mac: "52:54:00:00:00:21", ip: 10.99.0.21 }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts, base_url: "{BASE}" }}
state_dir: {}
listen:
  dns: []
  dhcp: []
  tftp: []
  http: ["10.99.0.1:8080"]
  api: []
  machine_config: []
  ingress_https: []
  ingress_http: []
"#,
            dir.join("state").display()
        ),
    )
}

/// `curl` from `ns`: the status code and the body.
fn get(ns: &Netns, url: &str) -> (String, String) {
    let out = ns
        .exec(["curl", "-s", "--max-time", "5", "-w", "\n%{http_code}", url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_owned(), body.to_owned())
}

/// The appliance in the services namespace, under strace when `trace` names a log file.
fn start(ns: &Netns, config: &Path, trace: Option<&Path>) -> Process {
    let bin = appliance_bin().unwrap();
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    if let Some(log) = trace {
        // -y: each descriptor with its path; -f: every thread (the blocking pool writes).
        for a in ["strace", "-f", "-qq", "-y", "-o"] {
            args.push(a.into());
        }
        args.push(log.into());
        args.push("-e".into());
        args.push("trace=fsync,fdatasync,rename,renameat,renameat2".into());
    }
    args.push(bin.into());
    args.push("serve".into());
    args.push(config.into());
    let mut cmd = ns.exec(args);
    cmd.env("RUST_LOG", "info").env("NO_COLOR", "1");
    cmd.current_dir(config.parent().unwrap());
    let mut p = Process::spawn("okd-appliance", cmd).unwrap();
    assert!(
        wait_until(START_TIMEOUT * 3, || !p.is_running()
            || p.stderr().lines().any(|l| l.ends_with(" ready"))),
        "not ready\n{}",
        p.log_tails()
    );
    p
}

#[test]
fn artifacts_serve_no_dot_file_ignition_or_auth_file() {
    if !require_root() || !require_tools(&["curl"]) {
        return;
    }
    let topo = Topology::new("hda").unwrap();
    let other = topo.add_node("oth", "10.99.0.50/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let artifacts = dir.path().join("artifacts");
    std::fs::create_dir_all(artifacts.join("auth")).unwrap();
    std::fs::create_dir_all(artifacts.join(".git")).unwrap();
    for f in [
        "kernel",
        ".openshift_install_state.json",
        "master.ign",
        "auth/kubeconfig",
        ".git/config",
    ] {
        std::fs::write(artifacts.join(f), format!("content of {f}\n")).unwrap();
    }
    let _app = start(topo.services(), &config, None);
    assert_eq!(
        get(&other, &format!("{BASE}/artifacts/kernel")),
        ("200".into(), "content of kernel\n".into())
    );
    // An unknown node is a usage error (2) for every command that names one, as for `nodes`.
    let state = dir.path().join("state");
    for args in [
        ["lb", "drain", "nosuch"],
        ["lb", "undrain", "nosuch"],
        ["node", "reinstall", "nosuch"],
    ] {
        let out = std::process::Command::new(appliance_bin().unwrap())
            .args(args)
            .arg("--state-dir")
            .arg(&state)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
    for refused in [
        ".openshift_install_state.json",
        "%2Eopenshift_install_state.json",
        "master.ign",
        "auth/kubeconfig",
        "auth%2Fkubeconfig",
        ".git/config",
    ] {
        let (code, body) = get(&other, &format!("{BASE}/artifacts/{refused}"));
        assert_eq!(code, "404", "{refused}: {body}");
        assert!(!body.contains("content of"), "{refused}: {body}");
    }
}

#[test]
fn only_the_node_itself_uses_up_its_disk_boot_offer() {
    if !require_root() || !require_tools(&["curl"]) {
        return;
    }
    let topo = Topology::new("hdr").unwrap();
    let node = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let stranger = topo.add_node("oth", "10.99.0.50/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let app = start(topo.services(), &config, None);
    let script = format!("{BASE}/boot/52-54-00-00-00-11.ipxe");
    assert_eq!(get(&node, &format!("{BASE}/ignition/mst0.ign")).0, "200");
    // The installer fetched its ignition: the next script offers the disk, once. A stranger
    // reads that script as often as it likes without using the offer up.
    for _ in 0..3 {
        let (code, body) = get(&stranger, &script);
        assert_eq!(code, "200");
        assert!(body.contains("sanboot"), "{body}");
    }
    assert!(!dir.path().join("state/disk-boot-offered/mst0").exists());
    let (_, body) = get(&node, &script);
    assert!(
        body.contains("sanboot"),
        "the node lost its disk boot to a stranger: {body}"
    );
    assert!(dir.path().join("state/disk-boot-offered/mst0").exists());
    assert!(
        app.stderr()
            .contains("iPXE script of mst0 read by 10.99.0.50:"),
        "{}",
        app.log_tails()
    );
    // Only the node's own requests move its phase in the journal.
    assert!(!app.stderr().contains("script fetched by 10.99.0.50"));
}

#[test]
fn install_markers_are_on_disk_before_they_count() {
    if !require_root() || !require_tools(&["curl", "strace"]) {
        return;
    }
    let topo = Topology::new("hdm").unwrap();
    let node = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let trace = dir.path().join("strace.log");
    let app = start(topo.services(), &config, Some(&trace));
    assert_eq!(get(&node, &format!("{BASE}/ignition/mst0.ign")).0, "200");
    let state = dir.path().join("state").canonicalize().unwrap();
    let marker = state.join("ignition-fetched/mst0");
    assert!(wait_until(Duration::from_secs(5), || marker.exists()));
    let marker_dir = state.join("ignition-fetched");
    let tmp = marker_dir.join(".mst0.tmp");
    // The calls for this marker, in order: the temporary file synced, renamed over the marker,
    // then the directory synced.
    let expect = [
        format!("<{}>", tmp.display()),
        format!("\"{}\"", marker.display()),
        // Other threads' calls may split a line: "fsync(14</dir> <unfinished ...>".
        format!("<{}>", marker_dir.display()),
    ];
    let mut found = Vec::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            let log = std::fs::read_to_string(&trace).unwrap_or_default();
            found.clear();
            let mut at = 0;
            let lines: Vec<&str> = log.lines().collect();
            for want in &expect {
                match lines[at..].iter().position(|l| l.contains(want.as_str())) {
                    Some(i) => {
                        found.push(lines[at + i].to_owned());
                        at += i + 1;
                    }
                    None => return false,
                }
            }
            true
        }),
        "the marker was not written durably; found {found:#?} of {expect:#?}\n{}\n{}",
        std::fs::read_to_string(&trace)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("ignition-fetched"))
            .collect::<Vec<_>>()
            .join("\n"),
        app.log_tails()
    );
    assert!(found[0].contains("fsync("), "{found:?}");
    assert!(found[1].contains("rename"), "{found:?}");
    assert!(
        found[1].contains(&format!("\"{}\"", tmp.display())),
        "{found:?}"
    );
    assert!(found[2].contains("fsync("), "{found:?}");
}

/// `cluster up` without the admin kubeconfig: refused before any machine is touched, naming the
/// file (it once answered "started" and powered the machines on).
#[test]
fn cluster_up_without_a_kubeconfig_touches_nothing() {
    if !require_root() {
        return;
    }
    let topo = Topology::new("hdk").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let app = start(topo.services(), &config, None);
    let out = std::process::Command::new(appliance_bin().unwrap())
        .args(["cluster", "up", "--state-dir"])
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("the admin kubeconfig can't be used")
            && said.contains("install_dir/auth/kubeconfig")
            && said.contains("no machine was touched"),
        "{said}"
    );
    let status = std::process::Command::new(appliance_bin().unwrap())
        .args(["cluster", "status", "--json", "--state-dir"])
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["running"], false, "{status}");
    assert_eq!(status["up_requested"], false, "{status}");
    assert!(!app.stderr().contains("power"), "{}", app.log_tails());
}
