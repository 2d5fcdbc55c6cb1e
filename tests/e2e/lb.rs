//! The load balancer with real backends in node namespaces (python3's http.server) and curl as
//! the client: balancing, a killed backend leaving the pool with no failed request after the
//! checks notice, its return after `rise` checks, the ingress HTTP check (`/healthz/ready` on
//! 1936) taking a backend out while its service port still accepts, and a large transfer.

use std::path::Path;
use std::time::{Duration, Instant};

use harness::{Netns, Process, Topology, require_root, require_tools, wait_until};

use crate::dns_support::{start_appliance, write_config};

/// A web server in `ns` on `ip:port` serving `dir`.
fn web(ns: &Netns, ip: &str, port: u16, dir: &Path) -> Process {
    let p = ns
        .spawn(
            "web",
            [
                "python3",
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                ip,
                "--directory",
                dir.to_str().unwrap(),
            ],
        )
        .unwrap();
    assert!(
        ns.wait_tcp(
            format!("{ip}:{port}").parse().unwrap(),
            Duration::from_secs(10)
        )
        .is_ok(),
        "web server on {ip}:{port}"
    );
    p
}

/// `curl URL` from `ns`: the body, or None when the request failed.
fn get(ns: &Netns, url: &str) -> Option<String> {
    let out: std::process::Output = ns
        .exec(["curl", "-sf", "--max-time", "3", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn site(root: &Path, name: &str, ready: bool) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("healthz")).unwrap();
    std::fs::write(dir.join("whoami"), name).unwrap();
    if ready {
        std::fs::write(dir.join("healthz/ready"), "ok").unwrap();
    }
    dir
}

#[test]
fn balances_fails_over_and_recovers() {
    if !require_root() || !require_tools(&["python3", "curl"]) {
        return;
    }
    let topo = Topology::new("lb").unwrap();
    let masters = [("mst0", "10.99.0.11"), ("mst1", "10.99.0.12")];
    let workers = [("wrk0", "10.99.0.21"), ("wrk1", "10.99.0.22")];
    let nodes: Vec<_> = masters
        .iter()
        .chain(&workers)
        .map(|(n, ip)| {
            (
                topo.add_node(n, &format!("{ip}/24"), None).unwrap(),
                *n,
                *ip,
            )
        })
        .collect();
    let client = topo.add_node("cli", "10.99.0.99/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut servers = Vec::new();
    for (ns, name, ip) in &nodes {
        let root = site(dir.path(), name, true);
        let port = if name.starts_with("mst") { 6443 } else { 80 };
        servers.push(Some(web(ns, ip, port, &root)));
        if name.starts_with("wrk") {
            // The routers' health endpoint, as OpenShift's ingress exposes it.
            servers.push(Some(web(ns, ip, 1936, &root)));
        }
    }
    let config = write_config(
        dir.path(),
        &format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
  - {{ name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }}
  - {{ name: mst1, role: master, mac: "52:54:00:00:00:12", ip: 10.99.0.12 }}
  - {{ name: wrk0, role: worker, mac: "52:54:00:00:00:21", ip: 10.99.0.21 }}
  - {{ name: wrk1, role: worker, mac: "52:54:00:00:00:22", ip: 10.99.0.22 }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
state_dir: {}
lb:
  # The API backends here are plain HTTP servers (lb_tls.rs covers the HTTPS checks).
  health: {{ interval: 300ms, timeout: 250ms, rise: 2, fall: 2, control_plane_check: tcp }}
listen:
  dns: []
  dhcp: []
  tftp: []
  http: []
  api: ["10.99.0.1:6443"]
  machine_config: []
  ingress_https: []
  ingress_http: ["10.99.0.1:80"]
"#,
            dir.path().join("state").display()
        ),
    );
    let appliance = start_appliance(topo.services(), &config);
    let api = "http://10.99.0.1:6443/whoami";
    let ingress = "http://10.99.0.1:80/whoami";
    // Backends start down and come up after `rise` checks.
    assert!(
        wait_until(Duration::from_secs(5), || get(&client, api).is_some()),
        "api never served\n{}",
        appliance.log_tails()
    );
    assert!(
        wait_until(Duration::from_secs(5), || get(&client, ingress).is_some()),
        "ingress never served"
    );
    std::thread::sleep(Duration::from_secs(1));

    let answers: Vec<String> = (0..6)
        .map(|_| get(&client, api).expect("api answers"))
        .collect();
    assert!(
        answers.iter().any(|a| a == "mst0") && answers.iter().any(|a| a == "mst1"),
        "round robin: {answers:?}"
    );

    // Kill mst1: within fall x interval (+ timeout) it leaves the pool; afterwards nothing fails.
    servers[1] = None;
    let killed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(3), || appliance
            .stderr()
            .contains("mst1: api backend 10.99.0.12:6443 is down")),
        "{}",
        appliance.log_tails()
    );
    let detected = killed.elapsed();
    assert!(
        detected < Duration::from_secs(2),
        "took {detected:?} to notice"
    );
    for _ in 0..10 {
        assert_eq!(
            get(&client, api).as_deref(),
            Some("mst0"),
            "a request failed or went to the dead backend"
        );
    }

    // Back up after `rise` good checks.
    let root = dir.path().join("mst1");
    servers[1] = Some(web(&nodes[1].0, "10.99.0.12", 6443, &root));
    // The second "up" (the first was at start-up).
    let ups = |p: &Process| {
        p.stderr()
            .matches("mst1: api backend 10.99.0.12:6443 is up")
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(3), || ups(&appliance) == 2),
        "{}",
        appliance.log_tails()
    );
    let back: Vec<String> = (0..6).filter_map(|_| get(&client, api)).collect();
    assert!(
        back.iter().any(|a| a == "mst1"),
        "mst1 back in rotation: {back:?}"
    );

    // A router whose /healthz/ready stops answering 200 leaves the pool though port 80 still accepts.
    std::fs::remove_file(dir.path().join("wrk1/healthz/ready")).unwrap();
    assert!(wait_until(Duration::from_secs(3), || appliance
        .stderr()
        .contains("wrk1: ingress-http backend 10.99.0.22:80 is down")));
    for _ in 0..6 {
        assert_eq!(get(&client, ingress).as_deref(), Some("wrk0"));
    }

    // A large transfer arrives intact.
    let big: Vec<u8> = (0..20_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(dir.path().join("mst0/big"), &big).unwrap();
    std::fs::write(dir.path().join("mst1/big"), &big).unwrap();
    let out = dir.path().join("big.out");
    let status = client
        .exec([
            "curl",
            "-sf",
            "--max-time",
            "30",
            "-o",
            out.to_str().unwrap(),
            "http://10.99.0.1:6443/big",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        std::fs::read(&out).unwrap() == big,
        "20 MB through the balancer differ"
    );
    // Drain through the admin socket: new connections avoid the node, and it comes back on undrain.
    let state = dir.path().join("state");
    let lb = |args: &[&str]| {
        let out = std::process::Command::new(harness::appliance_bin().unwrap())
            .arg("lb")
            .args(args)
            .arg("--state-dir")
            .arg(&state)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "lb {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(lb(&["drain", "mst0"]).starts_with("ok: mst0 drained"));
    for _ in 0..6 {
        assert_eq!(
            get(&client, api).as_deref(),
            Some("mst1"),
            "a drained backend got a new connection"
        );
    }
    assert!(lb(&["status"]).contains("api mst0 10.99.0.11:6443 draining"));
    lb(&["undrain", "mst0"]);
    let after: Vec<String> = (0..6).filter_map(|_| get(&client, api)).collect();
    assert!(
        after.iter().any(|a| a == "mst0"),
        "mst0 back after undrain: {after:?}"
    );
    drop(servers);
}
