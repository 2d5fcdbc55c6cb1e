//! `okd-appliance nodes ...` against the Proxmox API test double: progress lines per node,
//! idempotent reruns, exit codes that tell what failed, and `destroy` only with `--yes`.

mod pve;

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Command, Output};

use pve::PveDouble;

fn config(d: &PveDouble, secret: &str) -> PathBuf {
    let token = d.dir.path().join("token");
    std::fs::write(&token, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let path = d.dir.path().join("okd.yml");
    std::fs::write(
        &path,
        format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }}
nodes:
  - {{ name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2, machine: {{ vmid: 9002 }} }}
  - {{ name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.0.0.5, machine: {{ install: iso }} }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
# `check --install` runs on a host without 10.0.0.1: the listeners on the wildcard address.
listen: {{ dns: ["0.0.0.0:53"], http: ["0.0.0.0:8080"], api: ["0.0.0.0:6443"], machine_config: ["0.0.0.0:22623"], ingress_https: ["0.0.0.0:443"], ingress_http: ["0.0.0.0:80"] }}
control:
  provider: proxmox
  proxmox:
    url: {url}
    node: {node}
    token_id: "{token_id}"
    token_secret_file: token
    ca_file: ca.pem
    storage: local-lvm
    bridge: vmbr1
"#,
            url = d.url,
            node = pve::NODE,
            token_id = pve::TOKEN_ID,
        ),
    )
    .unwrap();
    path
}

fn nodes(args: &[&str], config: &PathBuf) -> Output {
    Command::new(env!("CARGO_BIN_EXE_okd-appliance"))
        .arg("nodes")
        .args(args)
        .arg(config)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn create_start_list_destroy_with_a_line_per_node() {
    let d = PveDouble::start();
    let cfg = config(&d, pve::SECRET);

    let out = nodes(&["create"], &cfg);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("master-0: create: created vm 9002 on pve1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("worker-0: create: created vm 100 on pve1"),
        "{stdout}"
    );
    // The ISO's name carries a digest of its kernel arguments.
    assert!(
        stdout.contains("downloaded local:iso/worker-0.okd.lab.example.com-")
            && stdout.contains(".iso\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("2 nodes: 2 changed, 0 unchanged, 0 failed\n"),
        "{stdout}"
    );

    let out = nodes(&["create"], &cfg);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout.contains("master-0: create: vm 9002 on pve1 exists (unchanged)"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("2 nodes: 0 changed, 2 unchanged, 0 failed\n"),
        "{stdout}"
    );

    let out = nodes(&["start", "master-0"], &cfg);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("master-0: start: started vm 9002 on pve1"),
        "{stdout}"
    );
    assert!(!stdout.contains("worker-0"), "{stdout}");

    let out = nodes(&["list"], &cfg);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("master-0 (master): vm master-0.okd.lab.example.com, vmid 9002"),
        "{stdout}"
    );
    assert!(stdout.contains("  vm 9002 on pve1, running"), "{stdout}");
    assert!(
        stdout.contains("  vm 100 on pve1, stopped, cd local:iso/worker-0.okd.lab.example.com-"),
        "{stdout}"
    );

    let out = nodes(&["destroy"], &cfg);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("--yes"));
    assert_eq!(d.with(|s| s.vms.len()), 2);

    let out = nodes(&["destroy", "--yes"], &cfg);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("master-0: destroy: destroyed vm 9002 on pve1 and its disks"),
        "{stdout}"
    );
    assert!(d.with(|s| s.vms.is_empty() && s.isos.is_empty()));

    let out = nodes(&["start", "nobody"], &cfg);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("no node named `nobody`"));
}

#[test]
fn a_conflicting_vm_exits_5_and_the_other_nodes_are_still_done() {
    let d = PveDouble::start();
    let cfg = config(&d, pve::SECRET);
    d.add_vm(
        9002,
        "master-0.okd.lab.example.com",
        "52:54:00:00:00:99",
        false,
    );
    let out = nodes(&["create"], &cfg);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(5), "{stdout}{stderr}");
    assert!(stderr.contains("master-0: create failed: master-0.okd.lab.example.com (vm 9002 on pve1) has net0 MAC 52:54:00:00:00:99"), "{stderr}");
    assert!(
        stdout.contains("worker-0: create: created vm 100"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("2 nodes: 1 changed, 0 unchanged, 1 failed\n"),
        "{stdout}"
    );
}

/// `check --install` asks the provider for every machine, as `nodes list` does: reached with
/// the machines not created yet, it passes and says so; with a token the provider refuses, it
/// fails, naming the provider and the nodes once. (A config without ISO installs, so the ISO
/// check is not in the way; the install directory as openshift-install writes it.)
#[test]
fn check_install_asks_the_provider_for_every_machine() {
    let d = PveDouble::start();
    let cfg = config(&d, pve::SECRET);
    let text_of = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text_of.replace(", machine: { install: iso }", "")).unwrap();
    let install = d.dir.path().join("install_dir");
    std::fs::create_dir_all(install.join("auth")).unwrap();
    for name in ["master.ign", "worker.ign"] {
        std::fs::write(install.join(name), "{}").unwrap();
    }
    let kubeconfig = install.join("auth/kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nclusters:\n- cluster:\n    server: https://api.okd.lab.example.com:6443\n  name: okd\n",
    )
    .unwrap();
    std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o600)).unwrap();
    let artifacts = d.dir.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    for name in ["kernel", "initramfs.img", "rootfs.img"] {
        std::fs::write(artifacts.join(name), "x").unwrap();
    }
    let check = || {
        Command::new(env!("CARGO_BIN_EXE_okd-appliance"))
            .args(["check", "--install"])
            .arg(&cfg)
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    let out = check();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let made = format!(
        ": reached; 0 machines there, 2 not created yet (`okd-appliance nodes create {0}` or `okd-appliance cluster up {0}` makes them)",
        cfg.display()
    );
    assert!(stdout.contains(&made), "{stdout}");
    // The version, then each machine looked up among the cluster's resources.
    assert_eq!(
        d.with(|s| s.requests.clone()),
        [
            "GET /api2/json/version",
            "GET /api2/json/cluster/resources",
            "GET /api2/json/cluster/resources"
        ]
    );

    std::fs::write(
        d.dir.path().join("token"),
        "11111111-2222-3333-4444-555555555555\n",
    )
    .unwrap();
    let out = check();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let refused = stderr
        .lines()
        .filter(|l| l.contains("refused the API token okd@pve!appliance"))
        .collect::<Vec<_>>();
    assert_eq!(refused.len(), 1, "once, for both nodes:\n{stderr}");
    assert!(refused[0].starts_with("error: proxmox"), "{stderr}");
    assert!(
        refused[0].ends_with("(asking for master-0, worker-0)"),
        "{stderr}"
    );
    assert!(!stdout.contains(": ok: cluster"), "{stdout}");
    assert!(
        !stderr.contains("artifacts fetch"),
        "no artifact hint: {stderr}"
    );
}

/// With an appliance running on the config's `state_dir`, each action is also sent to its
/// admin socket (`machine NODE ACTION ok|failed TEXT`), for its journal and the nodes' install
/// phases; without one, nothing is said. The appliance here is a stand-in that records the
/// requests and answers as the admin socket does.
#[test]
fn each_action_reaches_the_running_appliances_journal() {
    use std::io::{BufRead as _, Write as _};
    let d = PveDouble::start();
    let cfg = config(&d, pve::SECRET);
    let with_state = std::fs::read_to_string(&cfg).unwrap() + "state_dir: ./state\n";
    std::fs::write(&cfg, with_state).unwrap();

    // No appliance yet: the command says nothing of one.
    let out = nodes(&["create", "master-0"], &cfg);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        !stdout.contains("journal") && !stderr.contains("journal"),
        "{stdout}{stderr}"
    );

    let state = d.dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let socket = state.join("admin.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    // Two actions, two requests; the thread ends after them (bounded).
    let appliance = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for stream in listener.incoming().take(2) {
            let mut stream = stream.unwrap();
            let mut line = String::new();
            std::io::BufReader::new(&stream)
                .read_line(&mut line)
                .unwrap();
            let node = line.split_whitespace().nth(1).unwrap_or("").to_owned();
            writeln!(stream, "ok: {node}: recorded").unwrap();
            seen.push(line.trim_end().to_owned());
        }
        seen
    });
    // worker-0 was never created: its start fails (3), and that is recorded too.
    let out = nodes(&["start"], &cfg);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    let mut seen = appliance.join().unwrap();
    seen.sort();
    assert_eq!(
        seen,
        [
            "machine master-0 start ok started vm 9002 on pve1",
            "machine worker-0 start failed worker-0.okd.lab.example.com does not exist in the cluster: create it first (`okd-appliance nodes create worker-0`)",
        ]
    );
    assert!(
        stdout.contains(&format!(
            "recorded in the running appliance's journal ({})",
            socket.display()
        )),
        "{stdout}"
    );
}

#[test]
fn a_refused_token_exits_4() {
    let d = PveDouble::start();
    let cfg = config(&d, "11111111-2222-3333-4444-555555555555");
    let out = nodes(&["start"], &cfg);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(4), "{stdout}{stderr}");
    assert!(
        stderr.contains("refused the API token okd@pve!appliance (401 authentication failure)"),
        "{stderr}"
    );
    assert!(!stderr.contains("11111111") && !stdout.contains("11111111"));
}

#[test]
fn a_token_file_others_can_read_is_refused_at_its_line() {
    let d = PveDouble::start();
    let cfg = config(&d, pve::SECRET);
    std::fs::set_permissions(
        d.dir.path().join("token"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let out = nodes(&["create"], &cfg);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("okd.yml:16:24"), "{stderr}");
    assert!(stderr.contains("(mode 0644)"), "{stderr}");
    assert!(d.with(|s| s.requests.is_empty()));
}

#[test]
fn a_stop_on_a_terminal_says_what_it_waits_for_and_for_how_long() {
    // util-linux's `script` gives the command a terminal and writes what it drew.
    if !harness::require_tool("script") {
        return;
    }
    let d = PveDouble::start();
    let cfg = config(&d, pve::SECRET);
    let mut yaml = std::fs::read_to_string(&cfg).unwrap();
    yaml.push_str("  timeouts: { shutdown: 2m }\n");
    std::fs::write(&cfg, yaml).unwrap();
    for verb in ["create", "start"] {
        let out = nodes(&[verb, "master-0"], &cfg);
        assert_eq!(out.status.code(), Some(0), "{verb}: {:?}", text(&out));
    }
    // The guest takes 3 s to shut down: the line is drawn, and counts down, meanwhile.
    d.with(|s| {
        s.faults
            .slow
            .insert("/status/shutdown".into(), std::time::Duration::from_secs(3))
    });
    let command = format!(
        "'{}' nodes stop master-0 '{}'",
        env!("CARGO_BIN_EXE_okd-appliance"),
        cfg.display()
    );
    let on_terminal = |term: &str| {
        // Running again: the double's VM is running again.
        d.with(|s| s.vms.get_mut(&9002).unwrap().running = true);
        Command::new("script")
            .args(["--quiet", "--return", "--command", &command, "/dev/null"])
            // No colour is not no progress line.
            .env("NO_COLOR", "1")
            .env("TERM", term)
            .output()
            .unwrap()
    };
    let out = on_terminal("xterm");
    let drawn = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{drawn}");
    for said in [
        "stop: shutting down (0s; forced off after 2m, 2m left): master-0",
        "stop: shutting down (1s; forced off after 2m, 1m 59s left): master-0",
        "master-0: stop: shut down vm 9002 on pve1",
    ] {
        assert!(drawn.contains(said), "no {said:?} in {drawn:?}");
    }
    // A terminal that can't redraw a line, and no terminal: only the result lines.
    let out = on_terminal("dumb");
    let drawn = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{drawn}");
    assert!(!drawn.contains("shutting down"), "{drawn}");
    assert!(
        drawn.contains("master-0: stop: shut down vm 9002"),
        "{drawn}"
    );
    d.with(|s| s.vms.get_mut(&9002).unwrap().running = true);
    let out = nodes(&["stop", "master-0"], &cfg);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(!stderr.contains("shutting down"), "{stderr}");
    assert!(
        stdout.contains("master-0: stop: shut down vm 9002 on pve1"),
        "{stdout}"
    );
}

/// A Proxmox address that accepts connections and never answers: off a terminal, a line says
/// what is still waited for (and for how long at most) while it waits, and the cause is said
/// once for every node it concerns, not once per node.
#[test]
fn a_provider_that_never_answers_is_waited_for_aloud_and_reported_once() {
    let d = PveDouble::start();
    let cfg = config(&d, pve::SECRET);
    // The kernel completes the handshakes into the backlog; nothing ever reads or answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", silent.local_addr().unwrap());
    let mut yaml = std::fs::read_to_string(&cfg).unwrap().replace(&d.url, &url);
    yaml.push_str("  timeouts: { request: 6s }\n");
    std::fs::write(&cfg, yaml).unwrap();
    let started = std::time::Instant::now();
    let out = nodes(&["list"], &cfg);
    let (stdout, stderr) = text(&out);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{stderr}"
    );
    assert_ne!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stderr.contains("list: still waiting for ")
            && stderr.contains(" (5s; each request up to 6s): master-0, worker-0"),
        "{stderr}"
    );
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("status failed"))
        .collect();
    assert_eq!(failed.len(), 1, "{stderr}");
    assert!(
        failed[0].starts_with("master-0, worker-0: status failed: "),
        "{stderr}"
    );
    assert_eq!(
        stdout.matches("status unknown: see below").count(),
        2,
        "{stdout}"
    );

    // An action's result lines come as they happen: the second node's names the first's cause.
    let out = nodes(&["start"], &cfg);
    let (stdout, stderr) = text(&out);
    assert_ne!(out.status.code(), Some(0), "{stdout}{stderr}");
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("start failed"))
        .collect();
    assert_eq!(failed.len(), 2, "{stderr}");
    assert_eq!(
        failed
            .iter()
            .filter(|l| l.contains("no answer from"))
            .count(),
        1,
        "{stderr}"
    );
    assert!(
        failed
            .iter()
            .any(|l| l.ends_with("start failed: as for master-0")
                || l.ends_with("start failed: as for worker-0")),
        "{stderr}"
    );
}
