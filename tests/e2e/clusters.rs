//! Several clusters served by one `okd-appliance serve HOST.yml` (a host file listing cluster
//! files, docs/design/several-clusters.md): one process in a services namespace that carries
//! every cluster's `network.appliance_ip`, real clients in node namespaces.
//!
//! - Two clusters on their own segments (bridges `br0` and `br1`, 10.98.1.0/24 and
//!   10.98.2.0/24): DNS at either appliance address answers both clusters' names and PTRs; a
//!   DHCP client on each segment gets its own cluster's address, DNS server, server identifier
//!   and domain, and a MAC reserved on the other segment gets nothing; each cluster's HTTP
//!   server hands a node's ignition to that node only (another cluster's node gets 403); each
//!   cluster's API frontend balances to its own masters only.
//! - Two clusters on one segment (10.98.3.0/24, appliance addresses .1 and .21 on one
//!   bridge): each reserved MAC gets its own cluster's answer (server identifier, DNS, domain),
//!   an unknown MAC gets an address from the pool of the cluster that has one, and the shared
//!   reverse zone holds both clusters' PTRs at either listener.
//!
//! Every client runs through `guarded` (dhcp_support.rs); every wait is bounded.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{
    Bridge, Netns, Process, Topology, Veth, require_root, require_tools, wait_until,
    write_install_dir,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::dhcp_support::{Hook, HookCall, Journal, Reserved, guarded};
use crate::dns_support::{DigRun, dig_in, start_appliance};
use crate::lb_support::Conn;
use crate::support::appliance;

pub(crate) const BASE_DOMAIN: &str = "lab.example.com";
/// How long a client may take to get a lease from a server that answers at once.
pub(crate) const BIND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the balancer may take to see a backend up (rise 2 at 200 ms, plus start-up).
pub(crate) const UP_TIMEOUT: Duration = Duration::from_secs(10);

/// One cluster file of a host.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    pub(crate) name: &'static str,
    /// `network.interface`: the services namespace's bridge of the cluster's segment.
    pub(crate) interface: &'static str,
    pub(crate) subnet: &'static str,
    pub(crate) appliance: Ipv4Addr,
    pub(crate) gateway: Ipv4Addr,
    pub(crate) pool: Option<(Ipv4Addr, Ipv4Addr)>,
    pub(crate) nodes: Vec<Reserved>,
}

impl Cluster {
    pub(crate) fn domain(&self) -> String {
        format!("{}.{BASE_DOMAIN}", self.name)
    }

    /// `label.<cluster domain>.`
    pub(crate) fn fqdn(&self, label: &str) -> String {
        format!("{label}.{}.", self.domain())
    }

    pub(crate) fn node(&self, name: &str) -> Reserved {
        *self
            .nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no {name} in {}", self.name))
    }

    pub(crate) fn http(&self) -> String {
        format!("http://{}:8080", self.appliance)
    }

    /// This cluster's `master.ign`: tells the clusters apart by content.
    pub(crate) fn master_ign(&self) -> String {
        format!(
            r#"{{"ignition":{{"version":"3.2.0"}},"passwd":{{"users":[{{"name":"core-{}"}}]}}}}"#,
            self.name
        )
    }

    /// Writes `DIR/NAME.yml` and its ignition directory `DIR/NAME-install`. Every listener is
    /// the default (the cluster's appliance address, DHCP on its interface); the health checks
    /// are fast and plain TCP, since the backends are `lb_peer.py`.
    /// Writes the ignition directory `DIR/NAME-install`, whose `master.ign` is this cluster's
    /// own ([`Cluster::master_ign`]).
    pub(crate) fn write_ignition(&self, dir: &Path) {
        let install = dir.join(format!("{}-install", self.name));
        write_install_dir(&install).expect("install dir");
        std::fs::write(install.join("master.ign"), self.master_ign()).expect("master.ign");
    }

    /// The `nodes:` entries, one a line.
    pub(crate) fn nodes_yaml(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                format!(
                    "  - {{ name: {}, role: {}, mac: \"{}\", ip: {} }}\n",
                    n.name, n.role, n.mac, n.ip
                )
            })
            .collect()
    }

    pub(crate) fn write(&self, dir: &Path) {
        self.write_ignition(dir);
        let nodes = self.nodes_yaml();
        let pool = self.pool.map_or_else(String::new, |(s, e)| {
            format!("  dhcp_pool: {{ start: {s}, end: {e} }}\n")
        });
        let text = format!(
            r#"version: 1
cluster: {{ name: {name}, base_domain: {BASE_DOMAIN} }}
network:
  interface: {interface}
  subnet: {subnet}
  gateway: {gateway}
  appliance_ip: {appliance}
  lease_time: 1h
{pool}nodes:
{nodes}install: {{ ignition_dir: ./{name}-install, artifacts_dir: ./artifacts }}
lb:
  health: {{ interval: 200ms, timeout: 150ms, rise: 2, fall: 2, control_plane_check: tcp }}
"#,
            name = self.name,
            interface = self.interface,
            subnet = self.subnet,
            gateway = self.gateway,
            appliance = self.appliance,
        );
        std::fs::write(dir.join(format!("{}.yml", self.name)), text).expect("cluster file");
    }
}

pub(crate) fn reserved(
    name: &'static str,
    role: &'static str,
    mac: &'static str,
    ip: Ipv4Addr,
) -> Reserved {
    Reserved {
        name,
        role,
        mac,
        ip,
    }
}

/// Writes every cluster file and `DIR/host.yml` listing them (the first by path, the others
/// as `{ file, id }`), with the host's state under `DIR/state`. `okd-appliance check` must
/// accept it.
pub(crate) fn write_host(dir: &Path, clusters: &[&Cluster]) -> PathBuf {
    for c in clusters {
        c.write(dir);
    }
    let names: Vec<&str> = clusters.iter().map(|c| c.name).collect();
    host_file(dir, &names)
}

/// Writes `DIR/host.yml` listing `DIR/<name>.yml` for each name (the first by path, the
/// others as `{ file, id }`), with its state in `DIR/state`; `check` must accept it.
pub(crate) fn host_file(dir: &Path, names: &[&str]) -> PathBuf {
    let mut entries = String::new();
    for (i, name) in names.iter().enumerate() {
        if i == 0 {
            entries.push_str(&format!("  - {name}.yml\n"));
        } else {
            entries.push_str(&format!("  - {{ file: {name}.yml, id: {name} }}\n"));
        }
    }
    let host = dir.join("host.yml");
    std::fs::write(
        &host,
        format!(
            "version: 1\nstate_dir: {}\nclusters:\n{entries}",
            dir.join("state").display()
        ),
    )
    .expect("host file");
    let out = appliance(["check".as_ref(), host.as_os_str()]);
    assert!(
        out.status.success(),
        "okd-appliance check {} failed ({}):\n{}{}",
        host.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    host
}

/// A node namespace whose `eth0` is a port of `bridge` (the topology's own `br0` or another
/// bridge of the services namespace), with `cidr` on it when given.
#[derive(Debug)]
pub(crate) struct Attached {
    pub(crate) _veth: Veth,
    pub(crate) ns: Netns,
}

impl std::ops::Deref for Attached {
    type Target = Netns;

    fn deref(&self) -> &Netns {
        &self.ns
    }
}

pub(crate) fn attach(bridge: &Bridge, prefix: &str, cidr: Option<&str>) -> Attached {
    let ns = Netns::new(prefix).expect("node namespace");
    // The services-side port reuses the node namespace's unique name (<= 15 characters).
    let port = ns.name().to_owned();
    let veth = Veth::create(&ns, "eth0", bridge.netns(), &port).expect("veth");
    bridge.attach(&port).expect("bridge port");
    if let Some(cidr) = cidr {
        ns.add_addr("eth0", cidr).expect("node address");
    }
    Attached { _veth: veth, ns }
}

/// A route in `ns` to `subnet` through the services namespace's `via` (which holds every
/// appliance address, so nothing is forwarded: the other address is local there).
pub(crate) fn route(ns: &Netns, subnet: &str, via: Ipv4Addr) {
    ns.ip(["route", "add", subnet, "via", &via.to_string()])
        .expect("route");
}

/// A running busybox udhcpc: its hook and the process.
pub(crate) struct Client {
    pub(crate) hook: Hook,
    pub(crate) process: Process,
    pub(crate) label: String,
}

impl Client {
    /// busybox udhcpc in `ns` with MAC `mac`, `extra` options before the rest; runs on after
    /// its lease (to renew) until dropped.
    pub(crate) fn start(ns: &Netns, dir: &Path, label: &str, mac: &str, extra: &[&str]) -> Client {
        ns.ip(["link", "set", "dev", "eth0", "address", mac])
            .expect("mac");
        let hook = Hook::new(dir, label);
        let hook_path = hook.path.display().to_string();
        let mut argv = vec!["busybox", "udhcpc", "-i", "eth0", "-s", &hook_path, "-f"];
        argv.extend_from_slice(extra);
        argv.extend_from_slice(&["-t", "5", "-T", "1"]);
        let scratch = dir.join(format!("{label}-resolv.conf"));
        let process = Process::spawn("udhcpc", guarded(ns, &scratch, &argv)).expect("udhcpc");
        Client {
            hook,
            process,
            label: label.to_owned(),
        }
    }

    /// The first hook call with one of `reasons` after the first `skip` calls.
    pub(crate) fn wait(&self, skip: usize, reasons: &[&str]) -> HookCall {
        self.hook
            .wait(skip, reasons, BIND_TIMEOUT)
            .unwrap_or_else(|| {
                panic!(
                    "{}: no {reasons:?}: {:?}\n{}",
                    self.label,
                    self.hook.reasons(),
                    self.process.log_tails()
                )
            })
    }

    /// SIGUSR1: renew now (a unicast REQUEST to the server identifier), and the `renew` call.
    pub(crate) fn renew(&self) -> HookCall {
        let seen = self.hook.calls().len();
        let pid = Pid::from_raw(i32::try_from(self.process.pid()).expect("pid"));
        kill(pid, Signal::SIGUSR1).expect("SIGUSR1");
        let call = self.wait(seen, &["renew", "bound"]);
        assert_eq!(call.reason, "renew", "{}", self.process.log_tails());
        call
    }
}

/// busybox udhcpc in `ns` with MAC `mac` until its first `bound` (it quits then, `-q`).
pub(crate) fn lease(ns: &Netns, dir: &Path, label: &str, mac: &str) -> HookCall {
    Client::start(ns, dir, label, mac, &["-q"]).wait(0, &["bound"])
}

/// busybox udhcpc in `ns` with MAC `mac` gives up: three DISCOVERs a second apart go
/// unanswered (`-n`: exit with failure), and the hook never saw `bound`.
pub(crate) fn no_lease(ns: &Netns, dir: &Path, label: &str, mac: &str) {
    ns.ip(["link", "set", "dev", "eth0", "address", mac])
        .expect("mac");
    let hook = Hook::new(dir, label);
    let hook_path = hook.path.display().to_string();
    let argv = [
        "busybox", "udhcpc", "-i", "eth0", "-s", &hook_path, "-f", "-q", "-n", "-t", "3", "-T", "1",
    ];
    let scratch = dir.join(format!("{label}-resolv.conf"));
    let mut client = Process::spawn("udhcpc", guarded(ns, &scratch, &argv)).expect("udhcpc");
    let status = client
        .wait_timeout(Duration::from_secs(15))
        .expect("wait")
        .unwrap_or_else(|| panic!("{label}: udhcpc did not give up\n{}", client.log_tails()));
    let reasons = hook.reasons();
    assert!(
        !status.success() && !reasons.iter().any(|r| r == "bound"),
        "{label}: {mac} got a lease: {reasons:?}\n{}",
        client.log_tails()
    );
    assert!(
        reasons.iter().any(|r| r == "leasefail"),
        "{label}: {reasons:?}"
    );
}

/// What a udhcpc `bound` call must say for `node` of `cluster`.
#[track_caller]
pub(crate) fn expect_lease(bound: &HookCall, cluster: &Cluster, node: &Reserved) {
    bound.expect(&[
        ("ip", node.ip.to_string()),
        ("subnet", "255.255.255.0".into()),
        ("hostname", node.name.into()),
        ("router", cluster.gateway.to_string()),
        ("dns", cluster.appliance.to_string()),
        ("serverid", cluster.appliance.to_string()),
        ("domain", cluster.domain()),
    ]);
}

/// The lease journal of the segment on `interface`, as it is on disk now.
pub(crate) fn journal(dir: &Path, interface: &str) -> Journal {
    let path = dir.join("state/dhcp").join(interface).join("dhcp-leases");
    Journal::parse(&std::fs::read_to_string(path).unwrap_or_default())
}

/// Waits until the journal of `interface` holds a live lease of `ip` to `mac`.
#[track_caller]
pub(crate) fn expect_journaled(dir: &Path, interface: &str, ip: Ipv4Addr, mac: &str) {
    let ok = wait_until(Duration::from_secs(3), || {
        journal(dir, interface)
            .lines
            .iter()
            .any(|l| l.ip == ip && l.mac == mac && l.expires > 0)
    });
    assert!(
        ok,
        "no lease of {ip} to {mac} in the journal of {interface}: {:?}",
        journal(dir, interface)
    );
}

/// `dig @server ARGS` from `ns`: a positive authoritative answer, returned.
#[track_caller]
pub(crate) fn answer(ns: &Netns, server: Ipv4Addr, args: &[&str]) -> DigRun {
    let run = dig_in(ns, "dig", IpAddr::V4(server), args);
    let r = run.last();
    assert_eq!(
        r.status, "NOERROR",
        "dig @{server} {args:?}:\n{}",
        run.stdout
    );
    assert!(
        r.has_flag("aa"),
        "dig @{server} {args:?}: AA not set:\n{}",
        run.stdout
    );
    run
}

/// At `server`, `cluster`'s api, api-int, *.apps and node names resolve to its addresses, and
/// each node's address to its name.
#[track_caller]
pub(crate) fn expect_names(ns: &Netns, server: Ipv4Addr, cluster: &Cluster) {
    let a = |name: &str| answer(ns, server, &[name, "A"]).last().rdata("A");
    let frontend = vec![cluster.appliance.to_string()];
    assert_eq!(a(&cluster.fqdn("api")), frontend, "api at {server}");
    assert_eq!(a(&cluster.fqdn("api-int")), frontend, "api-int at {server}");
    assert_eq!(
        a(&cluster.fqdn("console-openshift-console.apps")),
        frontend,
        "*.apps at {server}"
    );
    for node in &cluster.nodes {
        assert_eq!(
            a(&cluster.fqdn(node.name)),
            vec![node.ip.to_string()],
            "{} at {server}",
            node.name
        );
        let ptr = answer(ns, server, &["-x", &node.ip.to_string()]);
        assert_eq!(
            ptr.last().rdata("PTR"),
            vec![cluster.fqdn(node.name)],
            "PTR of {} at {server}:\n{}",
            node.ip,
            ptr.stdout
        );
    }
}

/// `node`'s iPXE script on its cluster's HTTP server.
pub(crate) fn script_url(cluster: &Cluster, node: &Reserved) -> String {
    format!(
        "{}/boot/{}.ipxe",
        cluster.http(),
        node.mac.replace(':', "-")
    )
}

/// `curl` from `ns`: the status code and the body.
pub(crate) fn get(ns: &Netns, url: &str) -> (String, String) {
    let out = ns
        .exec([
            "curl",
            "-s",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code}",
            url,
        ])
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_owned(), body.to_owned())
}

/// `node` of `cluster`, at its own address in `ns`, gets its ignition from its cluster's HTTP
/// server, pointing at its cluster's role config, which is the cluster's own `master.ign`.
#[track_caller]
pub(crate) fn expect_own_ignition(ns: &Netns, cluster: &Cluster, node: &Reserved) {
    let url = format!("{}/ignition/{}.ign", cluster.http(), node.name);
    let (code, body) = get(ns, &url);
    assert_eq!(code, "200", "GET {url} from {}: {body}", node.ip);
    let ign: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}"));
    assert_eq!(
        ign["ignition"]["config"]["merge"][0]["source"],
        format!("{}/ignition/roles/{}.ign", cluster.http(), node.role),
        "{url}: {body}"
    );
    assert_eq!(
        ign["storage"]["files"][0]["contents"]["source"],
        format!("data:,{}%0A", node.name),
        "{url}: {body}"
    );
    let role = format!("{}/ignition/roles/{}.ign", cluster.http(), node.role);
    let (code, body) = get(ns, &role);
    assert_eq!(code, "200", "GET {role}: {body}");
    assert_eq!(body, cluster.master_ign(), "GET {role}");
}

/// An `lb_peer.py` backend named `name` on `ip:6443` in `ns`, accepting before this returns.
pub(crate) fn backend(ns: &Netns, name: &str, ip: Ipv4Addr) -> Process {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/lb_peer.py");
    let ip = ip.to_string();
    let peer = ns
        .spawn(
            name,
            ["python3", script.to_str().unwrap(), name, &ip, "6443"],
        )
        .expect("lb_peer.py");
    ns.wait_tcp(format!("{ip}:6443").parse().unwrap(), UP_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", peer.log_tails()));
    peer
}

/// Waits until the appliance logged that `node`'s API backend is up.
#[track_caller]
pub(crate) fn wait_up(app: &Process, node: &Reserved) {
    let line = format!("{}: api backend {}:6443 is up", node.name, node.ip);
    assert!(
        wait_until(UP_TIMEOUT, || app.stderr().contains(&line)),
        "no {line:?}\n{}",
        app.log_tails()
    );
}

/// From `ns`, connections to `frontend:6443` reach the backend `name` (the only one up there).
#[track_caller]
pub(crate) fn expect_balanced_to(ns: &Netns, frontend: Ipv4Addr, name: &str) {
    let addr = SocketAddr::from((frontend, 6443));
    for _ in 0..3 {
        let mut conn = Conn::open(ns, addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        assert_eq!(conn.backend, name, "{addr} reached the wrong backend");
        conn.ping().expect("ping through the balancer");
    }
}

/// okd and test on their own segments: the topology's `br0` (10.98.1.1) and a second bridge
/// `br1` (10.98.2.1) of the services namespace; each cluster's master-0 at its reserved
/// address (DNS client, ignition fetcher, an `lb_peer.py` API backend), reaching the other
/// cluster's appliance address through the services namespace, which holds both; and a bare
/// node on each segment for the DHCP clients.
pub(crate) struct TwoSegments {
    // Dropped in this order: the backends first, the topology last.
    _peers: Vec<Process>,
    pub(crate) seg1: Attached,
    pub(crate) seg2: Attached,
    pub(crate) okd_node: Attached,
    pub(crate) test_node: Attached,
    _br1: Bridge,
    pub(crate) topo: Topology,
}

impl TwoSegments {
    pub(crate) fn start(prefix: &str, okd: &Cluster, test: &Cluster) -> TwoSegments {
        let mut lab = TwoSegments::bare(prefix, okd, test);
        let (okd_m0, test_m0) = (okd.node("master-0"), test.node("master-0"));
        lab._peers = vec![
            backend(&lab.okd_node, "okd-master-0", okd_m0.ip),
            backend(&lab.test_node, "test-master-0", test_m0.ip),
        ];
        lab
    }

    /// The segments and nodes without backends: each master-0's namespace is the caller's to
    /// run its own in.
    pub(crate) fn bare(prefix: &str, okd: &Cluster, test: &Cluster) -> TwoSegments {
        let topo = Topology::with_addrs(prefix, "10.98.1.1/24", None).expect("topology");
        let br1 = Bridge::create(topo.services(), "br1").expect("br1");
        br1.add_addr("10.98.2.1/24").expect("br1 address");
        let (okd_m0, test_m0) = (okd.node("master-0"), test.node("master-0"));
        let okd_node = attach(topo.bridge(), "okm0", Some(&format!("{}/24", okd_m0.ip)));
        route(&okd_node, test.subnet, okd.appliance);
        let test_node = attach(&br1, "tsm0", Some(&format!("{}/24", test_m0.ip)));
        route(&test_node, okd.subnet, test.appliance);
        let seg1 = attach(topo.bridge(), "dh1", None);
        let seg2 = attach(&br1, "dh2", None);
        TwoSegments {
            _peers: Vec::new(),
            seg1,
            seg2,
            okd_node,
            test_node,
            _br1: br1,
            topo,
        }
    }
}

pub(crate) fn okd_on_its_own_segment() -> Cluster {
    let ip = |n| Ipv4Addr::new(10, 98, 1, n);
    Cluster {
        name: "okd",
        interface: "br0",
        subnet: "10.98.1.0/24",
        appliance: ip(1),
        gateway: ip(254),
        pool: Some((ip(100), ip(109))),
        nodes: vec![
            reserved("master-0", "master", "52:54:00:98:01:02", ip(2)),
            reserved("master-1", "master", "52:54:00:98:01:03", ip(3)),
            reserved("worker-0", "worker", "52:54:00:98:01:05", ip(5)),
        ],
    }
}

pub(crate) fn test_on_its_own_segment() -> Cluster {
    let ip = |n| Ipv4Addr::new(10, 98, 2, n);
    Cluster {
        name: "test",
        interface: "br1",
        subnet: "10.98.2.0/24",
        appliance: ip(1),
        gateway: ip(254),
        pool: Some((ip(100), ip(104))),
        nodes: vec![
            reserved("master-0", "master", "52:54:00:98:02:02", ip(2)),
            reserved("master-1", "master", "52:54:00:98:02:03", ip(3)),
            reserved("worker-0", "worker", "52:54:00:98:02:05", ip(5)),
        ],
    }
}

#[test]
pub(crate) fn two_clusters_on_their_own_subnets_are_served_by_one_appliance() {
    if !require_root() || !require_tools(&["dig", "busybox", "unshare", "curl", "python3"]) {
        return;
    }
    let (okd, test) = (okd_on_its_own_segment(), test_on_its_own_segment());
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-clusters-")
        .tempdir()
        .expect("tempdir");
    let host = write_host(dir.path(), &[&okd, &test]);

    let lab = TwoSegments::start("cl2", &okd, &test);
    let (okd_m0, test_m0) = (okd.node("master-0"), test.node("master-0"));
    let (okd_node, test_node, seg1, seg2) = (&lab.okd_node, &lab.test_node, &lab.seg1, &lab.seg2);
    let mut app = start_appliance(lab.topo.services(), &host);
    let log = app.stderr();
    for listening in [
        "listening for dns/udp on 10.98.1.1:53",
        "listening for dns/udp on 10.98.2.1:53",
        "listening for http/tcp on 10.98.1.1:8080",
        "listening for http/tcp on 10.98.2.1:8080",
    ] {
        assert!(log.contains(listening), "no {listening:?}\n{log}");
    }

    // DNS: either listener answers both clusters' names and both reverse zones.
    for (ns, server) in [(&okd_node, okd.appliance), (&test_node, test.appliance)] {
        expect_names(ns, server, &okd);
        expect_names(ns, server, &test);
    }

    // DHCP: each segment's clients get their own cluster's answer.
    let (okd_m1, test_m1) = (okd.node("master-1"), test.node("master-1"));
    // As iPXE asks (user class "iPXE", option 77): the boot file is the node's script on its
    // own cluster's HTTP server.
    let ipxe = ["-q", "-x", "0x4d:69505845"];
    for (ns, cluster, node, interface) in [
        (&seg1, &okd, &okd_m1, "br0"),
        (&seg2, &test, &test_m1, "br1"),
    ] {
        let label = format!("{}-{}", cluster.name, node.name);
        let bound = Client::start(ns, dir.path(), &label, node.mac, &ipxe).wait(0, &["bound"]);
        expect_lease(&bound, cluster, node);
        bound.expect(&[("boot_file", script_url(cluster, node))]);
        expect_journaled(dir.path(), interface, node.ip, node.mac);
    }
    // A MAC reserved in okd, on test's segment: nothing, not even from test's pool.
    let okd_w0 = okd.node("worker-0");
    seg2.ip(["addr", "flush", "dev", "eth0"]).expect("flush");
    no_lease(seg2, dir.path(), "okd-w0-on-test", okd_w0.mac);
    assert!(
        !app.stderr()
            .contains(&format!("to {}", okd_w0.mac.to_ascii_lowercase())),
        "the appliance answered okd's worker-0 on test's segment\n{}",
        app.log_tails()
    );

    // HTTP: a node's script and ignition come from its own cluster's server, the ignition to
    // that node only.
    for (ns, cluster, node, other) in [
        (&okd_node, &okd, &okd_m0, &test_m0),
        (&test_node, &test, &test_m0, &okd_m0),
    ] {
        let (code, script) = get(ns, &script_url(cluster, node));
        assert_eq!(code, "200", "{script}");
        let ignition = format!("{}/ignition/{}.ign", cluster.http(), node.name);
        assert!(
            script.contains(&format!("coreos.inst.ignition_url={ignition}")),
            "{script}"
        );
        let (code, script) = get(ns, &script_url(cluster, other));
        assert_eq!(code, "200", "{script}");
        assert!(
            script.contains("no node in the cluster config has MAC"),
            "{} served another cluster's node:\n{script}",
            cluster.name
        );
    }
    expect_own_ignition(okd_node, &okd, &okd_m0);
    expect_own_ignition(test_node, &test, &test_m0);
    let okd_url = format!("{}/ignition/master-0.ign", okd.http());
    let (code, body) = get(test_node, &okd_url);
    assert_eq!(code, "403", "test's master-0 got okd's ignition: {body}");
    let test_url = format!("{}/ignition/master-0.ign", test.http());
    let (code, body) = get(okd_node, &test_url);
    assert_eq!(code, "403", "okd's master-0 got test's ignition: {body}");

    // The load balancer: each cluster's API frontend reaches its own master, from either side.
    wait_up(&app, &okd_m0);
    wait_up(&app, &test_m0);
    for ns in [&okd_node, &test_node] {
        expect_balanced_to(ns, okd.appliance, "okd-master-0");
        expect_balanced_to(ns, test.appliance, "test-master-0");
    }
    // Each boot server's /metrics: its own cluster's series, never the other's.
    let (code, body) = get(okd_node, &format!("{}/metrics", okd.http()));
    assert_eq!(code, "200");
    assert!(body.contains("cluster=\"okd\""), "{body}");
    assert!(!body.contains("cluster=\"test\""), "{body}");
    // Its requests are counted under its own label.
    assert!(
        body.contains(
            "okd_appliance_http_requests_total{route=\"script\",status=\"200\",cluster=\"okd\"}"
        ),
        "{body}"
    );
    expect_operator_per_cluster(&dir.path().join("state"), &test_m0, &okd_m0);
    app.assert_running()
        .expect("okd-appliance is still running");
}

/// The operator surface names a cluster: the CLI with `--cluster`, the admin socket with
/// `@ID`, the API with `/api/v1/clusters/ID/`; without one, several clusters are a usage error
/// (exit 2, HTTP 409) that lists them. The metrics label each cluster's series.
pub(crate) fn expect_operator_per_cluster(state: &Path, test_m0: &Reserved, okd_m0: &Reserved) {
    let state_arg = state.display().to_string();
    let cli = |args: &[&str]| {
        let mut argv: Vec<&str> = args.to_vec();
        argv.extend(["--state-dir", state_arg.as_str()]);
        appliance(argv)
    };
    let out = cli(&["lb", "status"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("serves several clusters (okd, test): name one with --cluster ID"),
        "{stderr}"
    );
    let out = cli(&["lb", "status", "--cluster", "test"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains(&format!("{}:6443", test_m0.ip)), "{stdout}");
    assert!(!stdout.contains(&format!("{}:6443", okd_m0.ip)), "{stdout}");
    // `status` alone: every cluster's, one after the other.
    let out = cli(&["status"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("== cluster okd") && stdout.contains("== cluster test"),
        "{stdout}"
    );
    let out = cli(&["status", "--json"]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json");
    assert!(all["okd"].is_object() && all["test"].is_object(), "{all}");
    let out = cli(&["status", "--cluster", "okd", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains(&okd_m0.mac.to_ascii_lowercase()), "{json}");
    assert!(!json.contains(&test_m0.mac.to_ascii_lowercase()), "{json}");
    let out = cli(&["lb", "drain", "master-0", "--cluster", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no cluster has the id nope"));

    let socket = state.join("api.sock").display().to_string();
    let api = |path: &str| {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "5", "--unix-socket", &socket])
            .args(["-o", "/dev/stderr", "-w", "%{http_code}"])
            .arg(format!("http://appliance{path}"))
            .output()
            .expect("curl runs");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, body) = api("/api/v1/status");
    assert_eq!(code, "409", "{body}");
    assert!(body.contains("okd, test"), "{body}");
    let (code, body) = api("/api/v1/clusters/test/status");
    assert_eq!(code, "200", "{body}");
    assert!(body.contains(&test_m0.mac.to_ascii_lowercase()), "{body}");
    let (code, _) = api("/api/v1/clusters/nope/status");
    assert_eq!(code, "404");
    // The status page: a section per cluster, and each cluster's own live page.
    let (code, body) = api("/");
    assert_eq!(code, "200", "{body}");
    for cluster in ["okd", "test"] {
        let link = format!("<a href=\"/clusters/{cluster}/\">cluster {cluster}</a>");
        assert!(body.contains(&link), "no {link} in\n{body}");
    }
    let (code, body) = api("/clusters/test/");
    assert_eq!(code, "200", "{body}");
    assert!(
        body.contains("data-api=\"/api/v1/clusters/test\""),
        "{body}"
    );
    assert!(body.contains(&format!("<td>{}</td>", test_m0.ip)), "{body}");
    assert!(!body.contains(&format!("<td>{}</td>", okd_m0.ip)), "{body}");
    // Each segment adds its own pool to the host's DHCP gauges: 10 free on okd's, 5 on test's.
    let free = || {
        let (_, body) = api("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix("okd_appliance_dhcp_pool_free "))
            .map(str::to_owned)
    };
    assert!(
        wait_until(Duration::from_secs(5), || free().as_deref() == Some("15")),
        "dhcp_pool_free: {:?}",
        free()
    );
    let (code, body) = api("/metrics");
    assert_eq!(code, "200");
    for cluster in ["okd", "test"] {
        let label = format!("cluster=\"{cluster}\"");
        assert!(
            body.lines()
                .any(|l| l.starts_with("okd_appliance_lb_backend_up{") && l.contains(&label)),
            "no lb_backend_up series with {label} in\n{body}"
        );
    }
}

pub(crate) fn okd_on_the_shared_segment() -> Cluster {
    let ip = |n| Ipv4Addr::new(10, 98, 3, n);
    Cluster {
        name: "okd",
        interface: "br0",
        subnet: "10.98.3.0/24",
        appliance: ip(1),
        gateway: ip(254),
        pool: Some((ip(100), ip(150))),
        nodes: vec![
            reserved("master-0", "master", "52:54:00:98:03:02", ip(2)),
            reserved("master-1", "master", "52:54:00:98:03:03", ip(3)),
            reserved("worker-0", "worker", "52:54:00:98:03:05", ip(5)),
        ],
    }
}

pub(crate) fn ci_on_the_shared_segment() -> Cluster {
    let ip = |n| Ipv4Addr::new(10, 98, 3, n);
    Cluster {
        name: "ci",
        interface: "br0",
        subnet: "10.98.3.0/24",
        appliance: ip(21),
        gateway: ip(254),
        pool: None,
        nodes: vec![
            reserved("master-0", "master", "52:54:00:98:21:02", ip(22)),
            reserved("master-1", "master", "52:54:00:98:21:03", ip(23)),
            reserved("worker-0", "worker", "52:54:00:98:21:05", ip(25)),
        ],
    }
}

#[test]
pub(crate) fn two_clusters_sharing_one_subnet_each_get_their_own_answers() {
    if !require_root() || !require_tools(&["dig", "busybox", "unshare", "curl"]) {
        return;
    }
    let (okd, ci) = (okd_on_the_shared_segment(), ci_on_the_shared_segment());
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-clusters-")
        .tempdir()
        .expect("tempdir");
    let host = write_host(dir.path(), &[&okd, &ci]);

    // One bridge carrying both appliance addresses.
    let topo = Topology::with_addrs("cl1", "10.98.3.1/24", None).expect("topology");
    topo.bridge()
        .add_addr("10.98.3.21/24")
        .expect("ci's address");
    let asker = topo
        .add_node("dig", "10.98.3.99/24", None)
        .expect("dig node");
    let (okd_client, ci_client, stranger) = (
        topo.add_bare_node("dok").expect("node"),
        topo.add_bare_node("dci").expect("node"),
        topo.add_bare_node("dun").expect("node"),
    );
    let mut app = start_appliance(topo.services(), &host);

    // DHCP: one socket on br0; each reserved MAC is answered by its own cluster.
    let okd_m0 = okd.node("master-0");
    let bound = lease(&okd_client, dir.path(), "okd-m0", okd_m0.mac);
    expect_lease(&bound, &okd, &okd_m0);
    // ci's client stays running: its renewal goes unicast to ci's server identifier.
    let ci_m0 = ci.node("master-0");
    let ci_dhcp = Client::start(&ci_client, dir.path(), "ci-m0", ci_m0.mac, &[]);
    expect_lease(&ci_dhcp.wait(0, &["bound"]), &ci, &ci_m0);
    expect_lease(&ci_dhcp.renew(), &ci, &ci_m0);
    // A MAC no cluster knows: okd's pool, with okd's options (the pool is okd's).
    let unknown = "02:00:5e:98:03:99";
    let bound = lease(&stranger, dir.path(), "unknown", unknown);
    let ip: Ipv4Addr = bound.env["ip"].parse().expect("an address");
    let (start, end) = okd.pool.expect("okd has the pool");
    assert!(
        (start..=end).contains(&ip),
        "{unknown} got {ip}, outside okd's pool"
    );
    bound.expect(&[
        ("serverid", okd.appliance.to_string()),
        ("dns", okd.appliance.to_string()),
        ("domain", okd.domain()),
        ("router", okd.gateway.to_string()),
    ]);
    for (ip, mac) in [
        (okd_m0.ip, okd_m0.mac),
        (ci_m0.ip, ci_m0.mac),
        (ip, unknown),
    ] {
        expect_journaled(dir.path(), "br0", ip, mac);
    }

    // DNS: either listener answers both clusters; the one reverse zone 3.98.10.in-addr.arpa
    // holds both clusters' PTRs.
    for server in [okd.appliance, ci.appliance] {
        expect_names(&asker, server, &okd);
        expect_names(&asker, server, &ci);
        let soa = answer(&asker, server, &["3.98.10.in-addr.arpa.", "SOA"]);
        assert_eq!(soa.last().rdata("SOA").len(), 1, "{}", soa.stdout);
    }

    // HTTP: on one subnet too, each cluster's server gives its node's ignition to that node
    // only (the clients hold their leased addresses).
    expect_own_ignition(&okd_client, &okd, &okd_m0);
    expect_own_ignition(&ci_client, &ci, &ci_m0);
    for (ns, cluster) in [(&ci_client, &okd), (&okd_client, &ci)] {
        let url = format!("{}/ignition/master-0.ign", cluster.http());
        let (code, body) = get(ns, &url);
        assert_eq!(
            code, "403",
            "GET {url} from the other cluster's master-0: {body}"
        );
    }
    app.assert_running()
        .expect("okd-appliance is still running");
}
