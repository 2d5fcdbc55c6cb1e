//! `okd-appliance serve` as a process: it starts, reloads on SIGHUP (keeping the old plan when
//! the new file is invalid), stops cleanly on SIGTERM. (A listener that can't bind is retried while the
//! rest serves: tests/e2e/partial_start.rs.)

mod common;

use std::path::Path;

use common::Serve;
use nix::sys::signal::Signal;

const NODES: &str = r#"
  - { name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.0.0.7 }
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }"#;

fn config(nodes: &str, dns_listen: &str) -> String {
    format!(
        r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network:
  subnet: 10.0.0.0/24
  appliance_ip: 10.0.0.1
nodes:{nodes}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
state_dir: ./state
listen:
  dns: ["{dns_listen}"]
  dhcp: []
  tftp: []
  http: ["127.0.0.1:0"]
  # The load balancer stays off: its health checks would probe the nodes' 10.0.0.x
  # addresses, and tests send nothing beyond loopback and their own namespaces.
  api: []
  machine_config: []
  ingress_https: []
  ingress_http: []
"#
    )
}

fn write_install_dir(dir: &Path) {
    std::fs::create_dir_all(dir.join("install_dir")).unwrap();
    for role in ["bootstrap", "master", "worker"] {
        std::fs::write(
            dir.join(format!("install_dir/{role}.ign")),
            r#"{"ignition":{"version":"3.2.0"}}"#,
        )
        .unwrap();
    }
}

#[test]
fn serve_reloads_keeps_the_old_plan_on_a_bad_edit_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    write_install_dir(dir.path());
    let path = dir.path().join("okd.yml");
    std::fs::write(&path, config(NODES, "127.0.0.1:0")).unwrap();

    let mut serve = Serve::start(&path);
    serve.expect_line("listening for dns/udp on 127.0.0.1:");
    serve.expect_line("listening for dns/tcp on 127.0.0.1:");
    serve.expect_line("plan ");
    serve.expect_line("ready");

    // A duplicate MAC: the reload fails, every problem is logged, the old plan stays.
    let bad = NODES.to_owned()
        + r#"
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:02", ip: 10.0.0.5 }"#;
    std::fs::write(&path, config(&bad, "127.0.0.1:0")).unwrap();
    serve.signal(Signal::SIGHUP);
    serve.expect_line("MAC address 52:54:00:00:00:02 is used twice");
    serve.expect_line("1 error, 0 warnings; still serving the previous plan");

    // A good edit is picked up.
    let good = NODES.to_owned()
        + r#"
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.0.0.5 }"#;
    std::fs::write(&path, config(&good, "127.0.0.1:0")).unwrap();
    serve.signal(Signal::SIGHUP);
    serve.expect_line("reloaded: now serving plan");

    // The same file again: nothing changes, not even the SOA serial.
    serve.signal(Signal::SIGHUP);
    serve.expect_line("config unchanged: still serving plan");

    // Listen addresses are bound once; moving them needs a restart, and the old plan stays.
    std::fs::write(&path, config(&good, "127.0.0.1:1")).unwrap();
    serve.signal(Signal::SIGHUP);
    serve.expect_line("reload refused: listen.dns (set, or derived from network.appliance_ip) changed, which takes a restart; still serving plan");

    serve.signal(Signal::SIGTERM);
    serve.expect_line("SIGTERM: stopping");
    serve.expect_line("stopped");
    assert!(serve.wait_exit().success());
}

/// `okd-appliance ARGS`: exit code and output.
fn cli(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_okd-appliance"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[test]
fn reload_tells_its_caller_what_happened_and_admin_commands_find_the_appliance_by_its_config() {
    let dir = tempfile::tempdir().unwrap();
    write_install_dir(dir.path());
    let path = dir.path().join("okd.yml");
    std::fs::write(&path, config(NODES, "127.0.0.1:0")).unwrap();
    let mut serve = Serve::start(&path);
    serve.expect_line("ready");
    let file = path.as_os_str();

    // state_dir: ./state is relative to the config, not to the caller's directory.
    let (code, out) = cli(&["lb".as_ref(), "status".as_ref(), file]);
    assert_eq!(code, Some(0), "{out}");
    // The load balancer has no listener: its backends are off, not down.
    assert!(out.contains("api bootstrap 10.0.0.7:6443 off "), "{out}");
    assert!(!out.contains(" down "), "{out}");
    // No such backend where it can be drained: a usage error, as an unknown node is for `nodes`.
    let (code, out) = cli(&["lb".as_ref(), "drain".as_ref(), "bootstrap".as_ref(), file]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("in a pool that has a listener"), "{out}");

    let (code, out) = cli(&["reload".as_ref(), file]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("config unchanged"), "{out}");

    let more = NODES.to_owned()
        + r#"
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.0.0.5 }"#;
    std::fs::write(&path, config(&more, "127.0.0.1:0")).unwrap();
    let (code, out) = cli(&["reload".as_ref(), file]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("reloaded: now serving plan"), "{out}");

    // A change that takes a restart: refused, exit 1, the key named.
    let moved =
        config(&more, "127.0.0.1:0").replace("state_dir: ./state", "state_dir: ./elsewhere");
    std::fs::write(&path, &moved).unwrap();
    let state = dir.path().join("state");
    let (code, out) = cli(&["reload".as_ref(), "--state-dir".as_ref(), state.as_os_str()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("reload refused: state_dir changed, which takes a restart"),
        "{out}"
    );

    // An invalid config: refused, exit 1, the problem named in the log.
    let bad = config(&more, "127.0.0.1:0").replace("10.0.0.5", "10.0.0.2");
    std::fs::write(&path, &bad).unwrap();
    let (code, out) = cli(&["reload".as_ref(), "--state-dir".as_ref(), state.as_os_str()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("reload failed: "), "{out}");
    assert!(
        out.contains("okd.yml: 1 error, 0 warnings; still serving the previous plan"),
        "{out}"
    );
    serve.expect_line("is used twice");

    serve.signal(Signal::SIGTERM);
    assert!(serve.wait_exit().success());
}

#[test]
fn serve_refuses_an_invalid_config_before_doing_anything() {
    let dir = tempfile::tempdir().unwrap();
    write_install_dir(dir.path());
    let path = dir.path().join("okd.yml");
    std::fs::write(
        &path,
        config(NODES, "127.0.0.1:0").replace("10.0.0.7", "10.0.9.7"),
    )
    .unwrap();
    let mut serve = Serve::start(&path);
    serve.expect_line("outside the subnet");
    assert_eq!(serve.wait_exit().code(), Some(1));
}

/// Ignition files made for another cluster: `serve` says so at start and on reload, as
/// warnings, and serves all the same (a services host restarted after a wrong copy must still
/// answer DNS).
#[test]
fn serve_warns_of_ignition_made_for_another_cluster_at_start_and_on_reload() {
    let dir = tempfile::tempdir().unwrap();
    write_install_dir(dir.path());
    // A pointer ignition as openshift-install writes it, for the cluster okd.other.example.com.
    std::fs::write(
        dir.path().join("install_dir/master.ign"),
        r#"{"ignition":{"config":{"merge":[{"source":"https://api-int.okd.other.example.com:22623/config/master"}]},"security":{"tls":{"certificateAuthorities":[{"source":"data:text/plain;charset=utf-8;base64,bm90IGEgY2VydGlmaWNhdGU="}]}},"version":"3.2.0"}}"#,
    )
    .unwrap();
    let path = dir.path().join("okd.yml");
    std::fs::write(&path, config(NODES, "127.0.0.1:0")).unwrap();
    let mut serve = Serve::start(&path);
    let said = serve.expect_line("master.ign was made for another cluster");
    assert!(said.contains("WARN"), "{said}");
    serve.expect_line("ready");
    serve.signal(Signal::SIGHUP);
    serve.expect_line("master.ign was made for another cluster");
    serve.expect_line("config unchanged: still serving plan");
    serve.signal(Signal::SIGTERM);
    serve.expect_line("stopped");
    assert!(serve.wait_exit().success());
}
