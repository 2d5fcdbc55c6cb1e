//! A pair of appliances serving a host file (issue 26), with Debian's keepalived from `render
//! --format keepalived` of the host file: three clusters, two of them sharing segment `eth0`
//! (okd with its pool, test without one), the third (lab, with its own pool) on segment `eth1`,
//! each cluster with its own `appliance_ip`. One VRRP instance runs on `eth0`, where the hosts'
//! own addresses are, and moves all three addresses, lab's onto `eth1`.
//!
//! The preferred host takes every address and is active. The standby receives each cluster's
//! install marker and a drain, and each segment's pool lease, each on its own replication
//! channel (one listener; `cluster/okd`, `cluster/test`, `cluster/lab`, `segment/eth0`,
//! `segment/eth1`). lab's link down on the active host moves every address to the other
//! (keepalived's `track_interface`), and back when it is up again. `kill -9` of the active appliance moves every address to the other host,
//! which then offers each installed node its disk, hands out each node's ignition, keeps the
//! drain, and renews both pool clients' addresses.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{Bridge, Netns, Topology, Veth, require_root, require_tools, wait_until};

use crate::clusters::attach;
use crate::dhcp_support::expect_acks_logged;
use crate::dns_support::start_appliance;
use crate::ha::{keepalived_of, kill_appliance, lease, renew, run};

const HOSTS: [&str; 2] = ["10.97.0.3", "10.97.0.4"];

/// One cluster of the host file.
struct Cluster {
    name: &'static str,
    interface: &'static str,
    /// The /24's first three octets.
    net: &'static str,
    vip: &'static str,
    node: &'static str,
    node_ip: &'static str,
    mac: &'static str,
    /// A pool client's MAC, when the cluster has the segment's pool.
    pool_client: Option<&'static str>,
}

const CLUSTERS: [Cluster; 3] = [
    Cluster {
        name: "okd",
        interface: "eth0",
        net: "10.97.0",
        vip: "10.97.0.10",
        node: "mst0",
        node_ip: "10.97.0.11",
        mac: "52:54:00:00:01:11",
        pool_client: Some("52:54:00:00:01:77"),
    },
    Cluster {
        name: "test",
        interface: "eth0",
        net: "10.97.0",
        vip: "10.97.0.20",
        node: "tst0",
        node_ip: "10.97.0.21",
        mac: "52:54:00:00:02:21",
        pool_client: None,
    },
    Cluster {
        name: "lab",
        interface: "eth1",
        net: "10.96.0",
        vip: "10.96.0.10",
        node: "lbm0",
        node_ip: "10.96.0.11",
        mac: "52:54:00:00:03:11",
        pool_client: Some("52:54:00:00:03:77"),
    },
];

/// The host file and its cluster files in `dir`.
fn write_host(dir: &Path) -> PathBuf {
    let secret = dir.join("ha-secret");
    std::fs::write(&secret, "pair-secret-0123456789abcdef-0123456789\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    for c in &CLUSTERS {
        let Cluster {
            name,
            interface,
            net,
            vip,
            node,
            node_ip,
            mac,
            pool_client,
        } = c;
        harness::write_install_dir(&dir.join(format!("{name}-install"))).unwrap();
        // A second master, which never boots: the cluster is not a single node.
        let other = node.replace('0', "1");
        let other_mac = format!("{}2", &mac[..mac.len() - 1]);
        let other_ip = format!("{}2", &node_ip[..node_ip.len() - 1]);
        let pool = pool_client.map_or(String::new(), |_| {
            format!("  dhcp_pool: {{ start: {net}.100, end: {net}.120 }}\n")
        });
        std::fs::write(
            dir.join(format!("{name}.yml")),
            format!(
                r#"version: 1
cluster: {{ name: {name}, base_domain: lab.example.com }}
network:
  interface: {interface}
  subnet: {net}.0/24
  appliance_ip: {vip}
{pool}nodes:
  - {{ name: {node}, role: master, mac: "{mac}", ip: {node_ip} }}
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
            "version: 1\nclusters: [okd.yml, test.yml, lab.yml]\nstate_dir: ./state\n\
             ha: {{ hosts: [{}, {}], router_id: 79, secret_file: ha-secret }}\n",
            HOSTS[0], HOSTS[1]
        ),
    )
    .unwrap();
    host
}

/// How many of the clusters' addresses `ns` holds, each on its cluster's interface.
fn held(ns: &Netns) -> usize {
    let Ok(out) = ns.exec(["ip", "-4", "-o", "addr", "show"]).output() else {
        return 0;
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    CLUSTERS
        .iter()
        .filter(|c| {
            text.lines().any(|l| {
                l.split_whitespace().nth(1) == Some(c.interface)
                    && l.contains(&format!(" {}/24 ", c.vip))
            })
        })
        .count()
}

fn state_arg(dir: &Path) -> String {
    dir.join("state").to_str().unwrap().to_owned()
}

fn ha_status(dir: &Path) -> String {
    run(&["ha", "status", "--state-dir"], &[&state_arg(dir)]).1
}

/// `curl` from `ns`: the body, or the status code with `code`.
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
    // The second segment: each host's eth1 on its own bridge, no address of the host's own.
    let br1 = Bridge::create(topo.services(), "br1").unwrap();
    let _uplinks: Vec<Veth> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = format!("hac1p{i}");
            let veth = Veth::create(h, "eth1", topo.services(), &port).unwrap();
            br1.attach(&port).unwrap();
            veth
        })
        .collect();
    // A namespace on the segment of `interface` (kept: dropping it removes its link).
    let on = |interface: &str, name: &str, cidr: Option<&str>| -> Box<dyn Deref<Target = Netns>> {
        match (interface, cidr) {
            ("eth1", _) => Box::new(attach(&br1, name, cidr)),
            (_, Some(cidr)) => Box::new(topo.add_node(name, cidr, None).unwrap()),
            (_, None) => Box::new(topo.add_bare_node(name).unwrap()),
        }
    };
    let nodes: Vec<_> = CLUSTERS
        .iter()
        .map(|c| on(c.interface, c.node, Some(&format!("{}/24", c.node_ip))))
        .collect();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let configs = [write_host(dirs[0].path()), write_host(dirs[1].path())];
    let (ok, rendered) = run(
        &["render", "--format", "keepalived"],
        &[configs[0].to_str().unwrap()],
    );
    assert!(ok, "{rendered}");
    for c in &CLUSTERS {
        let line = format!("        {}/24 dev {}\n", c.vip, c.interface);
        assert!(rendered.contains(&line), "no {line:?} in\n{rendered}");
    }
    assert!(rendered.contains("    interface eth0\n"), "{rendered}");
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
        wait_until(Duration::from_secs(15), || held(&hosts[0])
            == CLUSTERS.len()
            && ha_status(dirs[0].path()).contains("ok: active")),
        "the preferred host never became active with every address: {}\n{}\n{}",
        ha_status(dirs[0].path()),
        first.log_tails(),
        _keepalived[0].log_tails()
    );
    assert!(
        wait_until(Duration::from_secs(5), || held(&hosts[1]) == 0
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
        ok && health.contains("6 listeners accept connections"),
        "{health}"
    );

    // Each node fetches its ignition from its own cluster's address on the active host; its
    // marker reaches the standby in that cluster's state.
    for (c, ns) in CLUSTERS.iter().zip(&nodes) {
        let url = format!("http://{}:8080/ignition/{}.ign", c.vip, c.node);
        assert_eq!(curl(ns, &url, true), "200", "{url}");
        let marker = dirs[1].path().join(format!(
            "state/clusters/{}/ignition-fetched/{}",
            c.name, c.node
        ));
        assert!(
            wait_until(Duration::from_secs(5), || marker.exists()),
            "{}'s install marker never reached the standby: {}\n{}",
            c.node,
            ha_status(dirs[1].path()),
            second.log_tails()
        );
    }
    // A pool client on each segment, leased by the active host; each lease reaches the standby.
    let mut clients = Vec::new();
    for (n, c) in CLUSTERS.iter().enumerate() {
        let Some(mac) = c.pool_client else { continue };
        let ns = on(c.interface, &format!("dyn{n}"), None);
        let (hook, udhcpc, bound) = lease(&ns, dirs[0].path(), mac, &format!("udhcpc{n}"));
        let ip = bound.env["ip"].clone();
        assert_eq!(bound.env["serverid"], c.vip, "{:?}", bound.env);
        assert!(ip.starts_with(&format!("{}.1", c.net)), "{ip}");
        assert!(
            wait_until(Duration::from_secs(5), || second
                .stderr()
                .contains(&format!("lease {ip} to {mac} replicated"))),
            "the lease of {mac} never reached the standby\n{}",
            second.log_tails()
        );
        clients.push((mac, ip, hook, udhcpc, ns));
    }
    // A drain of test's node on the active host reaches the standby.
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
    assert!(
        !lb_status(dirs[1].path(), "okd").contains("draining"),
        "a drain of test reached another cluster: {}",
        lb_status(dirs[1].path(), "okd")
    );
    let standby = ha_status(dirs[1].path());
    assert!(
        standby.contains("replication: receiving from the peer, connected")
            && !standby.contains("not connected for"),
        "{standby}"
    );

    // lab's link down on the active host (keepalived's track_interface, weight -60): every
    // address moves to the host that has every link, and back once the link is up again.
    hosts[0].ip(["link", "set", "eth1", "down"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || held(&hosts[1])
            == CLUSTERS.len()
            && ha_status(dirs[1].path()).contains("ok: active")),
        "the addresses never moved off the host whose eth1 is down: {}\n{}",
        ha_status(dirs[1].path()),
        _keepalived[1].log_tails()
    );
    hosts[0].ip(["link", "set", "eth1", "up"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || held(&hosts[0])
            == CLUSTERS.len()
            && held(&hosts[1]) == 0
            && ha_status(dirs[0].path()).contains("ok: active")
            && ha_status(dirs[1].path())
                .contains("replication: receiving from the peer, connected")),
        "the preferred host never took the addresses back: {}\n{}\n{}",
        ha_status(dirs[0].path()),
        ha_status(dirs[1].path()),
        _keepalived[0].log_tails()
    );

    // The active appliance dies: every address moves, and the other host serves every cluster
    // with what it received.
    let killed = std::time::Instant::now();
    kill_appliance(&mut first);
    assert!(
        wait_until(Duration::from_secs(10), || held(&hosts[1])
            == CLUSTERS.len()),
        "the addresses never moved\n{}",
        _keepalived[1].log_tails()
    );
    // As for one cluster's pair (ha.rs, which says why 5 s): one VRRP instance moves them all.
    let took = killed.elapsed();
    eprintln!("ha of a host file: every address moved {took:?} after kill -9");
    assert!(
        took <= Duration::from_secs(5),
        "the addresses moved after {took:?}"
    );
    assert_eq!(held(&hosts[0]), 0, "both hosts hold an address");
    assert!(
        wait_until(Duration::from_secs(3), || ha_status(dirs[1].path())
            .contains("ok: active")),
        "{}",
        ha_status(dirs[1].path())
    );
    for (c, ns) in CLUSTERS.iter().zip(&nodes) {
        let script = curl(
            ns,
            &format!(
                "http://{}:8080/boot/{}.ipxe",
                c.vip,
                c.mac.replace(':', "-")
            ),
            false,
        );
        assert!(
            script.contains("fetched its ignition; booting its disk"),
            "{} would be installed again: {script}",
            c.node
        );
        let url = format!("http://{}:8080/ignition/{}.ign", c.vip, c.node);
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
    // Each pool client renews the same address at the new active host.
    for (mac, ip, hook, udhcpc, _ns) in &clients {
        let renewed = renew(hook, udhcpc, &second);
        assert_eq!(&renewed.env["ip"], ip, "{:?}", renewed.env);
        expect_acks_logged(&second, ip.parse().unwrap(), mac, 1);
    }
    // The new active host counted each renewal under the cluster whose pool it is.
    for (c, ns) in CLUSTERS.iter().zip(&nodes) {
        let m = crate::support::scrape(ns, &format!("http://{}:8080/metrics", c.vip));
        let series = format!(
            "okd_appliance_dhcp_messages_total{{cluster=\"{}\",type=\"request\"}}",
            c.name
        );
        let counted = m.get(&series).copied().unwrap_or(0.0);
        if c.pool_client.is_some() {
            assert!(counted >= 1.0, "{series} = {counted}: {m:#?}");
        } else {
            assert_eq!(counted, 0.0, "{series}: {m:#?}");
        }
    }
}
