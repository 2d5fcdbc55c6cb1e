//! Reload, key by key: every config key either changes what the running appliance does after
//! `okd-appliance reload` (the command `systemctl reload` runs), or the reload is refused with
//! exit 1 and a message naming the key. One appliance serves DNS, DHCP and the boot files in a
//! services namespace; a client namespace asks with dig, a DHCP client socket and curl; two
//! dnsmasq upstreams tell which one a forwarded query reached. The load balancer's keys are
//! reloaded against the `lb_peer.py` backends of `LbCluster`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dhcproto::v4::{DhcpOption, MessageType, OptionCode};
use harness::{Netns, Process, Topology, require_root, require_tools, wait_until};
use hickory_proto::rr::RecordType;

use crate::dhcp_support::{client_socket, discover, recv, request, send};
use crate::dns_support::{dig_in, start_appliance, wait_reply, write_config};
use crate::lb_support::LbCluster;
use crate::support::appliance;

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const CLIENT_MAC: &str = "52:54:00:00:00:31";
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 31);

/// Every key the DNS, DHCP and boot parts of the test change, with its first value.
#[derive(Debug, Clone)]
struct Keys {
    cluster: &'static str,
    ttl: u32,
    records: &'static str,
    worker1: bool,
    recursion_allowed: &'static str,
    upstream: &'static str,
    axfr_allowed: &'static str,
    legacy_etcd: bool,
    rate_limit: (u32, u32),
    lease_time: &'static str,
    mtu: u32,
    ntp: &'static str,
    gateway: &'static str,
    kernel_args: &'static str,
    install_dev: &'static str,
    state_dir: &'static str,
    dns_listen: &'static str,
    interface: &'static str,
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            cluster: "okd",
            ttl: 300,
            records: "[]",
            worker1: false,
            // The client (10.99.0.50) may not recurse at first.
            recursion_allowed: "[10.98.0.0/24]",
            upstream: "10.99.0.53:5353",
            axfr_allowed: "[]",
            legacy_etcd: false,
            // Generous: the client is outside recursion_allowed, so RRL applies to it.
            rate_limit: (1000, 2),
            lease_time: "1h",
            mtu: 1500,
            ntp: "[10.99.0.1]",
            gateway: "10.99.0.254",
            kernel_args: "[]",
            install_dev: "/dev/vda",
            state_dir: "./state",
            dns_listen: "10.99.0.1:53",
            interface: "br0",
        }
    }
}

impl Keys {
    fn yaml(&self) -> String {
        let worker1 = if self.worker1 {
            "  - { name: worker-1, role: worker, mac: \"52:54:00:00:00:22\", ip: 10.99.0.22 }\n"
        } else {
            ""
        };
        format!(
            r#"version: 1
cluster: {{ name: {cluster}, base_domain: lab.example.com }}
network:
  interface: {interface}
  subnet: 10.99.0.0/24
  gateway: {gateway}
  appliance_ip: 10.99.0.1
  upstream_dns: ["{upstream}"]
  ntp: {ntp}
  mtu: {mtu}
  lease_time: {lease_time}
nodes:
  - {{ name: master-0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }}
  - {{ name: worker-0, role: worker, mac: "{CLIENT_MAC}", ip: {CLIENT_IP} }}
{worker1}install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  install_dev: {install_dev}
  kernel_args: {kernel_args}
  base_url: http://10.99.0.1:8080
dns:
  ttl: {ttl}
  records: {records}
  recursion_allowed: {recursion_allowed}
  axfr_allowed: {axfr_allowed}
  legacy_etcd: {legacy_etcd}
  rate_limit: {{ responses_per_second: {rps}, slip: {slip} }}
state_dir: {state_dir}
listen:
  dns: ["{dns_listen}"]
  tftp: []
  http: ["10.99.0.1:8080"]
  api: []
  machine_config: []
  ingress_https: []
  ingress_http: []
"#,
            cluster = self.cluster,
            interface = self.interface,
            gateway = self.gateway,
            upstream = self.upstream,
            ntp = self.ntp,
            mtu = self.mtu,
            lease_time = self.lease_time,
            install_dev = self.install_dev,
            kernel_args = self.kernel_args,
            ttl = self.ttl,
            records = self.records,
            recursion_allowed = self.recursion_allowed,
            axfr_allowed = self.axfr_allowed,
            legacy_etcd = self.legacy_etcd,
            rps = self.rate_limit.0,
            slip = self.rate_limit.1,
            state_dir = self.state_dir,
            dns_listen = self.dns_listen,
        )
    }
}

/// `okd-appliance reload FILE`: exit code and what it printed.
fn reload(config: &Path) -> (Option<i32>, String) {
    let out = appliance(["reload".as_ref(), config.as_os_str()]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// Writes `keys`, reloads, and expects the new plan to be served.
#[track_caller]
fn apply(config: &Path, keys: &Keys, app: &Process) {
    std::fs::write(config, keys.yaml()).unwrap();
    let (code, out) = reload(config);
    assert_eq!(code, Some(0), "{out}\n{}", app.log_tails());
    assert!(out.contains("reloaded: now serving plan"), "{out}");
}

/// Writes `keys`, reloads, and expects the refusal to name `key`; then restores `back`.
#[track_caller]
fn refused(config: &Path, keys: &Keys, key: &str, back: &Keys) {
    std::fs::write(config, keys.yaml()).unwrap();
    let (code, out) = reload(config);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("reload refused: ") && out.contains(key) && out.contains("takes a restart"),
        "{out}"
    );
    std::fs::write(config, back.yaml()).unwrap();
}

fn a(ns: &Netns, name: &str) -> (String, Vec<String>, u32) {
    let run = dig_in(ns, "dig", IpAddr::V4(SERVER), &[name, "A"]);
    let r = run.last();
    let ttl = r.answer.first().map_or(0, |rr| rr.ttl);
    (r.status.clone(), r.rdata("A"), ttl)
}

/// A dnsmasq in `ns` answering every `*.example.test` A query with `answer`.
fn upstream(ns: &Netns, dir: &Path, ip: &str, answer: &str) -> Process {
    let pid = dir.join(format!("dnsmasq-{ip}.pid"));
    ns.spawn(
        "dnsmasq",
        [
            "dnsmasq",
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            &format!("--address=/example.test/{answer}"),
            &format!("--listen-address={ip}"),
            "--bind-interfaces",
            "--port=5353",
            "--user=root",
            "--group=root",
            &format!("--pid-file={}", pid.display()),
        ],
    )
    .expect("spawn dnsmasq")
}

/// The ACK's options for the client's reservation.
fn dhcp_ack(ns: &Netns) -> dhcproto::v4::Message {
    let mac: Vec<u8> = CLIENT_MAC
        .split(':')
        .map(|p| u8::from_str_radix(p, 16).unwrap())
        .collect();
    let mac: [u8; 6] = mac.try_into().unwrap();
    let sock = client_socket(ns, "eth0");
    for attempt in 0..3u32 {
        let xid = 0x0e10_0000 + attempt;
        let mut d = discover(&mac, xid);
        let wanted = vec![
            OptionCode::SubnetMask,
            OptionCode::Router,
            OptionCode::DomainNameServer,
            OptionCode::InterfaceMtu,
            OptionCode::NtpServers,
        ];
        d.opts_mut()
            .insert(DhcpOption::ParameterRequestList(wanted.clone()));
        send(&sock, &d);
        let Some(offer) = recv(&sock, Duration::from_secs(2)).filter(|m| m.xid() == xid) else {
            continue;
        };
        let mut r = request(&mac, xid, offer.yiaddr(), Some(SERVER));
        r.opts_mut()
            .insert(DhcpOption::ParameterRequestList(wanted));
        send(&sock, &r);
        if let Some(ack) = recv(&sock, Duration::from_secs(2)).filter(|m| {
            m.xid() == xid
                && m.opts().get(OptionCode::MessageType)
                    == Some(&DhcpOption::MessageType(MessageType::Ack))
        }) {
            return ack;
        }
    }
    panic!("no DHCP ACK for {CLIENT_MAC}");
}

fn script(ns: &Netns) -> String {
    let out = ns
        .exec(["curl", "-sf", "--max-time", "5"])
        .arg(format!(
            "http://{SERVER}:8080/boot/{}.ipxe",
            CLIENT_MAC.replace(':', "-")
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Answers to `count` copies of one query sent at once from `ns` (the rest were dropped or
/// slipped by RRL).
fn answered_of_burst(ns: &Netns, count: usize) -> usize {
    let server = SocketAddr::from((SERVER, 53));
    ns.run(move || {
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        // Generous: a reply late by a busy machine's stall must still count; the wait after
        // the last reply is paid once.
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let msg =
            crate::dns_support::query_message(7, "api.okd.lab.example.com.", RecordType::A, None)
                .to_vec()
                .unwrap();
        for _ in 0..count {
            sock.send_to(&msg, server).unwrap();
        }
        let mut buf = [0u8; 1500];
        let mut full = 0;
        while let Ok(n) = sock.recv(&mut buf) {
            // A slipped reply is truncated (TC) with no answer; a full one has an answer.
            let answers = u16::from_be_bytes([buf[6], buf[7]]);
            if n > 12 && answers > 0 {
                full += 1;
            }
        }
        full
    })
    .expect("enter namespace")
}

#[test]
fn reload_applies_every_dns_dhcp_and_boot_key_or_names_the_one_that_needs_a_restart() {
    if !require_root() || !require_tools(&["dig", "dnsmasq", "curl"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut keys = Keys::default();
    let config: PathBuf = write_config(dir.path(), &keys.yaml());
    let topo = Topology::new("rld").expect("topology");
    let client = topo.add_bare_node("rldc").expect("client");
    client.set_mac(CLIENT_MAC).expect("mac");
    client
        .add_addr("eth0", &format!("{CLIENT_IP}/24"))
        .expect("address");
    let up1 = topo.add_node("up1", "10.99.0.53/24", None).expect("up1");
    let up2 = topo.add_node("up2", "10.99.0.54/24", None).expect("up2");
    let _u1 = upstream(&up1, dir.path(), "10.99.0.53", "192.0.2.1");
    let _u2 = upstream(&up2, dir.path(), "10.99.0.54", "192.0.2.2");
    for ip in ["10.99.0.53", "10.99.0.54"] {
        let addr = SocketAddr::new(ip.parse().unwrap(), 5353);
        assert!(
            wait_reply(&client, addr, "ready.example.test.", RecordType::A, |_| {
                true
            }),
            "dnsmasq on {ip} not answering"
        );
    }
    let app = start_appliance(topo.services(), &config);

    // dns.ttl
    assert_eq!(a(&client, "api.okd.lab.example.com.").2, 300);
    keys.ttl = 60;
    apply(&config, &keys, &app);
    assert_eq!(a(&client, "api.okd.lab.example.com.").2, 60);

    // dns.records
    assert_eq!(a(&client, "registry.okd.lab.example.com.").0, "NXDOMAIN");
    keys.records = "[{ name: registry, type: A, value: 10.99.0.1 }]";
    apply(&config, &keys, &app);
    assert_eq!(a(&client, "registry.okd.lab.example.com.").1, ["10.99.0.1"]);

    // nodes
    assert_eq!(a(&client, "worker-1.okd.lab.example.com.").0, "NXDOMAIN");
    keys.worker1 = true;
    apply(&config, &keys, &app);
    assert_eq!(
        a(&client, "worker-1.okd.lab.example.com.").1,
        ["10.99.0.22"]
    );

    // dns.legacy_etcd
    let srv = |ns: &Netns| {
        dig_in(
            ns,
            "dig",
            IpAddr::V4(SERVER),
            &["_etcd-server-ssl._tcp.okd.lab.example.com.", "SRV"],
        )
        .last()
        .rdata("SRV")
        .len()
    };
    assert_eq!(srv(&client), 0);
    keys.legacy_etcd = true;
    apply(&config, &keys, &app);
    assert_eq!(srv(&client), 1);

    // dns.axfr_allowed
    let axfr = |ns: &Netns| {
        let out = ns
            .exec([
                "dig",
                &format!("@{SERVER}"),
                "+time=2",
                "+tries=1",
                "okd.lab.example.com.",
                "AXFR",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().filter(|l| l.contains("\tSOA\t")).count() >= 2
    };
    assert!(!axfr(&client), "AXFR allowed before the reload");
    keys.axfr_allowed = "[10.99.0.0/24]";
    apply(&config, &keys, &app);
    assert!(axfr(&client), "AXFR still refused after the reload");

    // dns.recursion_allowed
    assert_eq!(a(&client, "www.example.test.").0, "REFUSED");
    keys.recursion_allowed = "[10.99.0.0/24]";
    apply(&config, &keys, &app);
    assert_eq!(a(&client, "www.example.test.").1, ["192.0.2.1"]);

    // network.upstream_dns (a name the cache has not seen)
    keys.upstream = "10.99.0.54:5353";
    apply(&config, &keys, &app);
    assert_eq!(a(&client, "other.example.test.").1, ["192.0.2.2"]);

    // dns.rate_limit: the client is trusted now, so RRL needs it outside recursion_allowed.
    keys.recursion_allowed = "[10.98.0.0/24]";
    apply(&config, &keys, &app);
    let before = answered_of_burst(&client, 40);
    assert!(
        before >= 35,
        "{before} of 40 answered with a limit of 1000/s"
    );
    keys.rate_limit = (2, 0);
    apply(&config, &keys, &app);
    let after = answered_of_burst(&client, 40);
    assert!(after <= 10, "{after} of 40 answered with a limit of 2/s");

    // cluster (the zone moves)
    keys.cluster = "ocp";
    apply(&config, &keys, &app);
    assert_eq!(a(&client, "api.ocp.lab.example.com.").1, ["10.99.0.1"]);
    assert_eq!(a(&client, "api.okd.lab.example.com.").0, "REFUSED");

    // DHCP options: lease time, MTU, NTP, router, each on its own reload.
    let ack = dhcp_ack(&client);
    assert_eq!(ack.yiaddr(), CLIENT_IP);
    assert_eq!(
        ack.opts().get(OptionCode::AddressLeaseTime),
        Some(&DhcpOption::AddressLeaseTime(3600))
    );
    keys.lease_time = "2h";
    apply(&config, &keys, &app);
    assert_eq!(
        dhcp_ack(&client).opts().get(OptionCode::AddressLeaseTime),
        Some(&DhcpOption::AddressLeaseTime(7200))
    );
    keys.mtu = 1400;
    apply(&config, &keys, &app);
    assert_eq!(
        dhcp_ack(&client).opts().get(OptionCode::InterfaceMtu),
        Some(&DhcpOption::InterfaceMtu(1400))
    );
    keys.ntp = "[10.99.0.1, 10.99.0.2]";
    apply(&config, &keys, &app);
    assert_eq!(
        dhcp_ack(&client).opts().get(OptionCode::NtpServers),
        Some(&DhcpOption::NtpServers(vec![
            Ipv4Addr::new(10, 99, 0, 1),
            Ipv4Addr::new(10, 99, 0, 2)
        ]))
    );
    keys.gateway = "10.99.0.253";
    apply(&config, &keys, &app);
    assert_eq!(
        dhcp_ack(&client).opts().get(OptionCode::Router),
        Some(&DhcpOption::Router(vec![Ipv4Addr::new(10, 99, 0, 253)]))
    );

    // install.kernel_args and install.install_dev in the node's boot script.
    let s = script(&client);
    assert!(s.contains("coreos.inst.install_dev=/dev/vda"), "{s}");
    keys.kernel_args = "[console=ttyS0]";
    apply(&config, &keys, &app);
    assert!(script(&client).contains(" console=ttyS0"));
    keys.install_dev = "/dev/sda";
    apply(&config, &keys, &app);
    assert!(script(&client).contains("coreos.inst.install_dev=/dev/sda"));

    // The keys that take a restart: refused, named, and the previous plan stays.
    let good = keys.clone();
    refused(
        &config,
        &Keys {
            dns_listen: "10.99.0.1:5353",
            ..good.clone()
        },
        "listen.dns",
        &good,
    );
    // A new state_dir: `reload FILE` would look for the admin socket there, so ask the running
    // appliance by its state directory, as the unit's ExecReload does.
    std::fs::write(
        &config,
        Keys {
            state_dir: "./state2",
            ..good.clone()
        }
        .yaml(),
    )
    .unwrap();
    let (code, out) = reload(&config);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("state_dir"), "{out}");
    let state = dir.path().join("state");
    let out = appliance(["reload".as_ref(), "--state-dir".as_ref(), state.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("reload refused: state_dir changed, which takes a restart"),
        "{text}"
    );
    std::fs::write(&config, good.yaml()).unwrap();
    refused(
        &config,
        &Keys {
            interface: "lo",
            ..good.clone()
        },
        "network.interface",
        &good,
    );
    assert_eq!(a(&client, "api.ocp.lab.example.com.").1, ["10.99.0.1"]);
    let (code, out) = reload(&config);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("config unchanged"), "{out}");
}

#[test]
fn reload_applies_every_load_balancer_key() {
    if !require_root() || !require_tools(&["python3"]) {
        return;
    }
    let mut lab = LbCluster::new(2);
    let config = lab.write_config(&[0, 1], "");
    lab.start(&config, &[0, 1]);

    // lb.balance: with three connections held on mst0, round robin still sends new ones to
    // mst0 half the time; least connections sends the next three (held too) to mst1.
    let held: Vec<_> = (0..3).map(|_| lab.open_on("mst0")).collect();
    let spread = |lab: &LbCluster| -> (Vec<String>, Vec<crate::lb_support::Conn>) {
        let conns: Vec<_> = (0..3).map(|_| lab.open().expect("connection")).collect();
        (conns.iter().map(|c| c.backend.clone()).collect(), conns)
    };
    let (picks, open) = spread(&lab);
    assert!(
        picks.iter().any(|b| b == "mst0"),
        "round robin skipped mst0: {picks:?}"
    );
    drop(open);
    assert!(
        wait_until(Duration::from_secs(5), || crate::lb_support::api_active(
            &lab.lb(&["status"])
        ) == 3),
        "{}",
        lab.lb(&["status"])
    );
    lab.write_config(&[0, 1], "  balance: leastconn\n");
    let (code, out) = reload(&config);
    assert_eq!(code, Some(0), "{out}");
    // The checker swaps the pools as soon as the plan is loaded; the retries only absorb the
    // time connections take to close.
    let mut last = Vec::new();
    let least = wait_until(Duration::from_secs(5), || {
        let (picks, open) = spread(&lab);
        drop(open);
        last = picks;
        let settled = wait_until(Duration::from_secs(2), || {
            crate::lb_support::api_active(&lab.lb(&["status"])) == 3
        });
        settled && last.iter().all(|b| b == "mst1")
    });
    assert!(least, "least connections not applied: {last:?}");
    drop(held);

    // lb.drain_timeout, as the drain reports it.
    lab.write_config(&[0, 1], "  balance: leastconn\n  drain_timeout: 7m\n");
    let (code, out) = reload(&config);
    assert_eq!(code, Some(0), "{out}");
    let drained = lab.lb(&["drain", "mst1"]);
    assert!(drained.contains("after 7m will be closed"), "{drained}");
    lab.lb(&["undrain", "mst1"]);

    // lb.health: HTTPS checks against backends that speak no TLS take them down.
    let before = lab.status_of("mst0");
    assert!(before.contains(" up "), "{before}");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("control_plane_check: tcp", "control_plane_check: https");
    std::fs::write(&config, text).unwrap();
    let (code, out) = reload(&config);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        wait_until(Duration::from_secs(5), || lab
            .status_of("mst0")
            .contains(" down ")),
        "mst0 still up with HTTPS checks: {}",
        lab.status_of("mst0")
    );
    // A CA file the checks can't load: refused by its key, not "reloaded" while the checker
    // quietly keeps its old client.
    let bad_ca = config.with_file_name("not-a-ca.pem");
    std::fs::write(&bad_ca, "not a certificate\n").unwrap();
    let https = std::fs::read_to_string(&config).unwrap();
    let text = https.replace(
        "control_plane_check: https",
        &format!("control_plane_check: https, ca_file: {}", bad_ca.display()),
    );
    assert_ne!(text, https);
    std::fs::write(&config, text).unwrap();
    let (code, out) = reload(&config);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("reload refused: lb.health.ca_file"), "{out}");
    std::fs::write(&config, https).unwrap();
    lab.assert_peers_running();
}
