//! A pair of appliances serving a host file (issue 26): two clusters on one segment, each with
//! its own `appliance_ip`, one VRRP instance (Debian's keepalived, from `render --format
//! keepalived` of the host file) moving both addresses.
//!
//! The preferred host takes both addresses and is active; the standby receives each cluster's
//! install markers and drains and the segment's leases on their own replication channels (one
//! listener, `cluster/okd`, `cluster/test`, `segment/eth0`); `kill -9` of the active appliance
//! moves both addresses to the other host, which then serves both clusters' ignition, offers
//! each installed node its disk, keeps the drain, and renews the pool lease it received.

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{Netns, Topology, require_root, require_tools, wait_until, write_install_dir};

use crate::dhcp_support::expect_acks_logged;
use crate::dns_support::start_appliance;
use crate::ha::{keepalived_of, lease, run};

const HOSTS: [&str; 2] = ["10.97.0.3", "10.97.0.4"];
/// Each cluster: its name, `appliance_ip`, node, node address and MAC.
const CLUSTERS: [(&str, &str, &str, &str, &str); 2] = [
    (
        "okd",
        "10.97.0.10",
        "mst0",
        "10.97.0.11",
        "52:54:00:00:01:11",
    ),
    (
        "test",
        "10.97.0.20",
        "tst0",
        "10.97.0.21",
        "52:54:00:00:02:21",
    ),
];

/// The host file and its two cluster files in `dir` (okd has the segment's pool).
fn write_host(dir: &Path) -> PathBuf {
    let secret = dir.join("ha-secret");
    std::fs::write(&secret, "pair-secret-0123456789abcdef-0123456789\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (name, vip, node, ip, mac) in CLUSTERS {
        write_install_dir(&dir.join(format!("{name}-install"))).unwrap();
        // A second master, which never boots: the cluster is not a single node.
        let other = node.replace('0', "1");
        let other_mac = format!("{}2", &mac[..mac.len() - 1]);
        let other_ip = format!("{}2", &ip[..ip.len() - 1]);
        let pool = if name == "okd" {
            "  dhcp_pool: { start: 10.97.0.100, end: 10.97.0.120 }\n"
        } else {
            ""
        };
        std::fs::write(
            dir.join(format!("{name}.yml")),
            format!(
                r#"version: 1
cluster: {{ name: {name}, base_domain: lab.example.com }}
network:
  interface: eth0
  subnet: 10.97.0.0/24
  appliance_ip: {vip}
{pool}nodes:
  - {{ name: {node}, role: master, mac: "{mac}", ip: {ip} }}
  - {{ name: {other}, role: master, mac: "{other_mac}", ip: {other_ip} }}
install: {{ ignition_dir: ./{name}-install, artifacts_dir: ./artifacts }}
lb: {{ health: {{ interval: 200ms, timeout: 200ms, rise: 1, fall: 1, control_plane_check: tcp }} }}
listen:
  dns: ["{vip}:53"]
  tftp: []
  http: ["{vip}:8080"]
  api: ["{vip}:6443"]
  machine_config: []
  ingress_https: []
  ingress_http: []
"#
            ),
        )
        .unwrap();
    }
    let host = dir.join("host.yml");
    std::fs::write(
        &host,
        format!(
            "version: 1\nclusters: [okd.yml, test.yml]\nstate_dir: ./state\n\
             ha: {{ hosts: [{}, {}], router_id: 79, secret_file: ha-secret }}\n",
            HOSTS[0], HOSTS[1]
        ),
    )
    .unwrap();
    host
}

/// Whether `ns` holds both clusters' addresses.
fn has_both(ns: &Netns) -> bool {
    ns.exec(["ip", "-4", "-o", "addr", "show", "dev", "eth0"])
        .output()
        .is_ok_and(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            CLUSTERS
                .iter()
                .all(|(_, vip, ..)| text.contains(&format!(" {vip}/")))
        })
}

fn holds_any(ns: &Netns) -> bool {
    ns.exec(["ip", "-4", "-o", "addr", "show", "dev", "eth0"])
        .output()
        .is_ok_and(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            CLUSTERS
                .iter()
                .any(|(_, vip, ..)| text.contains(&format!(" {vip}/")))
        })
}

fn state_arg(dir: &Path) -> String {
    dir.join("state").to_str().unwrap().to_owned()
}

fn ha_status(dir: &Path) -> String {
    run(&["ha", "status", "--state-dir"], &[&state_arg(dir)]).1
}

/// `curl` from `ns`: the body (or the status code with `code`).
fn curl(ns: &Netns, url: &str, code: bool) -> String {
    let mut args = vec!["curl", "-s", "--max-time", "3"];
    if code {
        args.extend(["-o", "/dev/null", "-w", "%{http_code}"]);
    }
    args.push(url);
    let out = ns.exec(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn lb_status(dir: &Path, cluster: &str) -> String {
    run(
        &["lb", "status", "--cluster", cluster, "--state-dir"],
        &[&state_arg(dir)],
    )
    .1
}

#[test]
fn a_pair_serving_a_host_file_moves_every_clusters_address_and_replicates_each() {
    if !require_root() || !require_tools(&["keepalived", "curl", "ip", "busybox"]) {
        return;
    }
    let topo = Topology::new("hac").unwrap();
    let hosts = [
        topo.add_node("hsta", &format!("{}/24", HOSTS[0]), None)
            .unwrap(),
        topo.add_node("hstb", &format!("{}/24", HOSTS[1]), None)
            .unwrap(),
    ];
    let nodes: Vec<_> = CLUSTERS
        .iter()
        .map(|(_, _, node, ip, _)| topo.add_node(node, &format!("{ip}/24"), None).unwrap())
        .collect();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let configs = [write_host(dirs[0].path()), write_host(dirs[1].path())];
    let (ok, rendered) = run(
        &["render", "--format", "keepalived"],
        &[configs[0].to_str().unwrap()],
    );
    assert!(ok, "{rendered}");
    for line in [
        "        10.97.0.10/24 dev eth0\n",
        "        10.97.0.20/24 dev eth0\n",
    ] {
        assert!(rendered.contains(line), "no {line:?} in\n{rendered}");
    }
    let mut first = start_appliance(&hosts[0], &configs[0]);
    let second = start_appliance(&hosts[1], &configs[1]);
    assert!(
        first
            .stderr()
            .contains("this is host 10.97.0.3 of the pair (preferred"),
        "{}",
        first.log_tails()
    );
    let _keepalived = [
        keepalived_of(&hosts[0], &configs[0], dirs[0].path(), HOSTS[0]),
        keepalived_of(&hosts[1], &configs[1], dirs[1].path(), HOSTS[1]),
    ];
    assert!(
        wait_until(Duration::from_secs(15), || has_both(&hosts[0])
            && ha_status(dirs[0].path()).contains("ok: active")),
        "the preferred host never became active with both addresses: {}\n{}\n{}",
        ha_status(dirs[0].path()),
        first.log_tails(),
        _keepalived[0].log_tails()
    );
    assert!(
        wait_until(Duration::from_secs(5), || !holds_any(&hosts[1])
            && ha_status(dirs[1].path()).contains("ok: standby")),
        "{}",
        ha_status(dirs[1].path())
    );
    // keepalived's check on the active host: DNS at its own address, every cluster's boot
    // server and API frontend accepting.
    let (ok, health) = run(
        &["ha", "check", "--state-dir"],
        &[&state_arg(dirs[0].path())],
    );
    assert!(
        ok && health.contains("4 listeners accept connections"),
        "{health}"
    );

    // Each node fetches its ignition from its own cluster's address on the active host; its
    // marker reaches the standby in that cluster's state.
    for ((name, vip, node, ..), ns) in CLUSTERS.iter().zip(&nodes) {
        let url = format!("http://{vip}:8080/ignition/{node}.ign");
        assert_eq!(curl(ns, &url, true), "200", "{url}");
        let marker = dirs[1]
            .path()
            .join(format!("state/clusters/{name}/ignition-fetched/{node}"));
        assert!(
            wait_until(Duration::from_secs(5), || marker.exists()),
            "{node}'s install marker never reached the standby: {}\n{}",
            ha_status(dirs[1].path()),
            second.log_tails()
        );
    }
    // A pool lease of the segment, from the active host, reaches the standby.
    let roamer = topo.add_bare_node("dyn").unwrap();
    let (hook, udhcpc, bound) = lease(&roamer, dirs[0].path(), "52:54:00:00:01:77", "udhcpc");
    let pool_ip = bound.env["ip"].clone();
    assert_eq!(bound.env["serverid"], CLUSTERS[0].1);
    assert!(
        wait_until(Duration::from_secs(5), || second.stderr().contains(
            &format!("lease {pool_ip} to 52:54:00:00:01:77 replicated")
        )),
        "the lease never reached the standby\n{}",
        second.log_tails()
    );
    // A drain of the second cluster's node on the active host reaches the standby.
    let (ok, out) = run(
        &["lb", "drain", "tst0", "--cluster", "test", "--state-dir"],
        &[&state_arg(dirs[0].path())],
    );
    assert!(ok, "{out}");
    assert!(
        wait_until(Duration::from_secs(5), || lb_status(dirs[1].path(), "test")
            .contains("api tst0 10.97.0.21:6443 draining")),
        "the drain never reached the standby: {}",
        lb_status(dirs[1].path(), "test")
    );
    let standby = ha_status(dirs[1].path());
    assert!(
        standby.contains("replication: receiving from the peer, connected")
            && !standby.contains("not connected for"),
        "{standby}"
    );

    // The active appliance dies: both addresses move, and the other host serves both clusters
    // with what it received.
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
        wait_until(Duration::from_secs(10), || has_both(&hosts[1])),
        "the addresses never moved\n{}",
        _keepalived[1].log_tails()
    );
    assert!(!holds_any(&hosts[0]), "both hosts hold an address");
    assert!(
        wait_until(Duration::from_secs(3), || ha_status(dirs[1].path())
            .contains("ok: active")),
        "{}",
        ha_status(dirs[1].path())
    );
    for ((_, vip, node, _, mac), ns) in CLUSTERS.iter().zip(&nodes) {
        let script = curl(
            ns,
            &format!("http://{vip}:8080/boot/{}.ipxe", mac.replace(':', "-")),
            false,
        );
        assert!(
            script.contains("fetched its ignition; booting its disk"),
            "{node} would be installed again: {script}"
        );
        let url = format!("http://{vip}:8080/ignition/{node}.ign");
        assert_eq!(
            curl(ns, &url, true),
            "200",
            "{url} from the new active host"
        );
    }
    assert!(
        lb_status(dirs[1].path(), "test").contains("api tst0 10.97.0.21:6443 draining"),
        "{}",
        lb_status(dirs[1].path(), "test")
    );
    // The pool client renews the same address at the new active host.
    let seen = hook.calls().len();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(udhcpc.pid()).unwrap()),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .unwrap();
    let renewed = hook
        .wait(seen, &["renew", "bound"], Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no renewal: {:?}\n{}", hook.reasons(), second.log_tails()));
    assert_eq!(renewed.env["ip"], pool_ip, "{:?}", renewed.env);
    expect_acks_logged(&second, pool_ip.parse().unwrap(), "52:54:00:00:01:77", 1);
}
