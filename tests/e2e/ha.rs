//! A pair of appliances behind one virtual address, with Debian's keepalived: two host
//! namespaces on one bridge, each running okd-appliance from the same config and keepalived
//! from `okd-appliance render --format keepalived`; a client namespace and a node namespace.
//!
//! The preferred host takes the virtual address and becomes active (DHCP and ignition there);
//! the standby answers DNS at its own address and refuses ignition; `kill -9` of the active
//! appliance fails keepalived's check, the address moves to the other host within 3 s, and DNS
//! and ignition answer there. DNS queries sent every 100 ms across the switch are counted:
//! none may fail once the address has moved.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use harness::{Netns, Process, Topology, appliance_bin, require_root, require_tools, wait_until};

use crate::dns_support::{start_appliance, write_config};

const VIP: &str = "10.99.0.10";
const HOSTS: [&str; 2] = ["10.99.0.3", "10.99.0.4"];

fn config(dir: &Path) -> PathBuf {
    let secret = dir.join("ha-secret");
    std::fs::write(&secret, "pair-secret-0123\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    write_config(
        dir,
        &format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ interface: eth0, subnet: 10.99.0.0/24, appliance_ip: {VIP} }}
nodes:
  - {{ name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
ha: {{ hosts: [{}, {}], router_id: 77, secret_file: ha-secret }}
listen:
  dns: ["{VIP}:53"]
  dhcp: []
  tftp: []
  http: ["{VIP}:8080"]
  api: []
  machine_config: []
  ingress_https: []
  ingress_http: []
"#,
            HOSTS[0], HOSTS[1]
        ),
    )
}

fn run(args: &[&str], config_or_state: &[&str]) -> (bool, String) {
    let out = Command::new(appliance_bin().unwrap())
        .args(args)
        .args(config_or_state)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn has_vip(ns: &Netns) -> bool {
    ns.exec(["ip", "-4", "-o", "addr", "show", "dev", "eth0"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&format!(" {VIP}/")))
}

fn dig(ns: &Netns, server: &str) -> Option<String> {
    dig_in(ns.name(), server)
}

/// `dig` in the namespace named `ns` (from any thread).
fn dig_in(ns: &str, server: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args([
            "dig",
            &format!("@{server}"),
            "+short",
            "+time=1",
            "+tries=1",
            "api-int.okd.lab.example.com",
            "A",
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && text == VIP).then_some(text)
}

fn ignition_status(node: &Netns) -> String {
    let out = node
        .exec([
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "3",
            &format!("http://{VIP}:8080/ignition/mst0.ign"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn state(dir: &Path) -> String {
    let state = dir.join("state");
    run(&["ha", "status", "--state-dir"], &[state.to_str().unwrap()]).1
}

fn keepalived(ns: &Netns, dir: &Path, host: &str) -> Process {
    let config = dir.join("okd.yml");
    let out = dir.join("keepalived");
    let (ok, text) = run(
        &[
            "render",
            "--format",
            "keepalived",
            "-o",
            out.to_str().unwrap(),
        ],
        &[config.to_str().unwrap()],
    );
    assert!(ok, "{text}");
    let conf = out.join(format!("keepalived-{host}.conf"));
    let conf_text = std::fs::read_to_string(&conf).unwrap();
    assert!(
        conf_text.contains(&format!("unicast_src_ip {host}")),
        "{conf_text}"
    );
    let pid = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    ns.spawn(
        &format!("keepalived {host}"),
        [
            "keepalived",
            "--dont-fork",
            "--log-console",
            "--no-syslog",
            "--vrrp",
            "--use-file",
            conf.to_str().unwrap(),
            "--pid",
            &pid("keepalived.pid"),
            "--vrrp_pid",
            &pid("vrrp.pid"),
        ],
    )
    .unwrap()
}

#[test]
fn a_pair_moves_the_virtual_address_when_the_active_appliance_dies() {
    if !require_root() || !require_tools(&["keepalived", "dig", "curl", "ip"]) {
        return;
    }
    let topo = Topology::new("ha").unwrap();
    let hosts = [
        topo.add_node("hsta", &format!("{}/24", HOSTS[0]), None)
            .unwrap(),
        topo.add_node("hstb", &format!("{}/24", HOSTS[1]), None)
            .unwrap(),
    ];
    let client = topo.add_node("cli", "10.99.0.99/24", None).unwrap();
    let node = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    // One config for the pair, a copy per host (each keeps its own state directory).
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let configs = [config(dirs[0].path()), config(dirs[1].path())];
    assert_eq!(
        std::fs::read_to_string(&configs[0])
            .unwrap()
            .replace(dirs[0].path().to_str().unwrap(), ""),
        std::fs::read_to_string(&configs[1])
            .unwrap()
            .replace(dirs[1].path().to_str().unwrap(), "")
    );
    let mut first = start_appliance(&hosts[0], &configs[0]);
    let second = start_appliance(&hosts[1], &configs[1]);
    assert!(
        first
            .stderr()
            .contains("this is host 10.99.0.3 of the pair (preferred")
    );
    let _keepalived = [
        keepalived(&hosts[0], dirs[0].path(), HOSTS[0]),
        keepalived(&hosts[1], dirs[1].path(), HOSTS[1]),
    ];

    assert!(
        wait_until(Duration::from_secs(15), || has_vip(&hosts[0])
            && state(dirs[0].path()).contains("ok: active")),
        "the preferred host never became active: {}\n{}\n{}",
        state(dirs[0].path()),
        first.log_tails(),
        _keepalived[0].log_tails()
    );
    assert!(!has_vip(&hosts[1]));
    assert!(
        state(dirs[1].path()).contains("ok: standby"),
        "{}",
        state(dirs[1].path())
    );
    // Both answer DNS: the virtual address (the active host) and the standby's own address.
    assert!(dig(&client, VIP).is_some());
    assert!(dig(&client, HOSTS[1]).is_some(), "the standby answers DNS");
    assert_eq!(ignition_status(&node), "200");
    let (ok, health) = run(
        &["ha", "check", "--state-dir"],
        &[dirs[0].path().join("state").to_str().unwrap()],
    );
    assert!(
        ok && health.contains("1 listeners accept connections"),
        "{health}"
    );

    // DNS queries across the switch, every 100 ms, from the client.
    let stop = Arc::new(AtomicBool::new(false));
    let moved_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let (failed_before, failed_after) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let prober = {
        let (stop, moved_at) = (Arc::clone(&stop), Arc::clone(&moved_at));
        let (before, after) = (Arc::clone(&failed_before), Arc::clone(&failed_after));
        let client_ns = client.name().to_owned();
        std::thread::spawn(move || {
            let mut sent = 0;
            // Bounded: at most 300 queries (30 s).
            while !stop.load(Ordering::Relaxed) && sent < 300 {
                sent += 1;
                let asked = Instant::now();
                if dig_in(&client_ns, VIP).is_none() {
                    let moved = *moved_at.lock().unwrap();
                    // A query sent before the move may be lost with the dead host.
                    if moved.is_some_and(|m| asked > m) {
                        after.fetch_add(1, Ordering::Relaxed);
                    } else {
                        before.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            sent
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let killed = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(first.pid()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        first
            .wait_timeout(Duration::from_secs(5))
            .unwrap()
            .is_some()
    );
    assert!(
        wait_until(Duration::from_secs(10), || has_vip(&hosts[1])),
        "the address never moved\n{}",
        _keepalived[1].log_tails()
    );
    let took = killed.elapsed();
    *moved_at.lock().unwrap() = Some(Instant::now());
    assert!(!has_vip(&hosts[0]), "both hosts hold the address");
    assert!(
        took <= Duration::from_secs(3),
        "the address moved after {took:?}"
    );
    assert!(
        wait_until(Duration::from_secs(3), || state(dirs[1].path())
            .contains("ok: active")),
        "{}",
        state(dirs[1].path())
    );
    assert_eq!(
        ignition_status(&node),
        "200",
        "ignition from the new active host"
    );
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let sent = prober.join().unwrap();
    eprintln!(
        "ha failover: the address moved {took:?} after kill -9; DNS queries every 100 ms: {sent} sent, {} failed before the move, {} after",
        failed_before.load(Ordering::Relaxed),
        failed_after.load(Ordering::Relaxed)
    );
    assert_eq!(failed_after.load(Ordering::Relaxed), 0);
    assert!(
        second
            .stderr()
            .contains("this host is now the active one of the pair")
    );
}
