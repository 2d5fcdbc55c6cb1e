//! The DHCP service end to end: the real `okd-appliance serve` in a services namespace
//! (`network.interface: br0`, 10.99.0.1), real DHCP clients in node namespaces on the bridge.
//!
//! - dhclient, udhcpc and dhcpcd each get a node's reservation with its host name, router, DNS,
//!   domain, MTU and NTP (read from the environment their hook script is given), renew it and
//!   release it; the appliance logs every ACK and journals the release.
//! - A reply too big for 576 bytes moves options into the `file` field under option 52, and
//!   dhclient reads them from there.
//! - Unknown clients get nothing without a pool and a pool address with one; a returning
//!   client gets its address again and its client identifier back (RFC 6842).
//! - A client behind `dhcrelay` (adding option 82) on another segment gets its reservation
//!   through the relay; a stale address is NAKed with the broadcast bit, so the relay
//!   broadcasts the NAK; a relay whose address is outside the cluster subnet is not served.
//! - A reservation added by a reload (SIGHUP) replaces a client's pool lease at its next
//!   renewal.
//! - Crash safety: every lease acknowledged before a `kill -9` under perfdhcp load is in the
//!   journal after the restart, no address was ever held by two clients, and the restarted
//!   server gives acknowledged clients their addresses again.
//! - Starvation: thousands of random MACs never get a reserved address, the server stays up and
//!   still serves a reserved node.
//!
//! Every client runs through `guarded` (dhcp_support.rs): the host's /etc/resolv.conf, host
//! name and /run are out of its reach.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dhcproto::v4::{DhcpOption, OptionCode};
use harness::{Netns, Process, Topology, Veth, require_root, require_tools, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::dhcp_support::{
    Cluster, DOMAIN, GATEWAY, Hook, HookCall, LEASE_SECS, MASTER0, MASTER1, MASTER2, MTU, NODES,
    Pace, Reserved, Rng, SERVER, Site, WORKER0, acks_logged, client_socket, discover, dora,
    expect_acks_logged, guarded, inside, mac_text, recv, request, run_bounded, send,
};

/// How long a client may take to get a lease from a server that answers at once.
const BIND_TIMEOUT: Duration = Duration::from_secs(10);

fn signal(p: &Process, sig: Signal) {
    let pid = i32::try_from(p.pid()).expect("pid");
    kill(Pid::from_raw(pid), sig).expect("signal");
}

/// The `dhclient` command line: our own config (the request list is part of what is tested),
/// hook, lease and pid files; `extra` before the interface.
fn dhclient(ns: &Netns, site: &Site, hook: &Hook, extra: &[&str]) -> std::process::Command {
    let conf = site.path().join("dhclient.conf");
    if !conf.exists() {
        std::fs::write(
            &conf,
            "request subnet-mask, broadcast-address, routers, domain-name, domain-name-servers,\n  \
             domain-search, host-name, interface-mtu, ntp-servers;\n",
        )
        .expect("dhclient.conf");
    }
    let p = |name: &str| site.path().join(name).display().to_string();
    let (conf, lf, pf, hook) = (
        p("dhclient.conf"),
        p("dhclient.leases"),
        p("dhclient.pid"),
        hook.path.display().to_string(),
    );
    let mut argv = vec![
        "dhclient",
        "-cf",
        conf.as_str(),
        "-sf",
        hook.as_str(),
        "-lf",
        lf.as_str(),
        "-pf",
        pf.as_str(),
    ];
    argv.extend_from_slice(extra);
    argv.push("eth0");
    guarded(ns, &site.path().join("resolv.conf"), &argv)
}

/// What dhclient and dhcpcd (same variable names) must have been told about `node`.
/// busybox udhcpc started in `node` with `argv`, and its first `bound` hook call.
fn udhcpc_bound(node: &Netns, site: &Site, hook: &Hook, argv: &[&str]) -> (Process, HookCall) {
    let client = Process::spawn(
        "udhcpc",
        guarded(node, &site.path().join("resolv.conf"), argv),
    )
    .expect("udhcpc");
    let bound = hook
        .wait(0, &["bound"], BIND_TIMEOUT)
        .unwrap_or_else(|| panic!("no bound: {:?}\n{}", hook.reasons(), client.log_tails()));
    (client, bound)
}

fn expect_isc_env(call: &HookCall, node: &Reserved) {
    call.expect(&[
        ("new_ip_address", node.ip.to_string()),
        ("new_subnet_mask", "255.255.255.0".into()),
        ("new_host_name", node.name.into()),
        ("new_routers", GATEWAY.to_string()),
        ("new_domain_name_servers", SERVER.to_string()),
        ("new_domain_name", DOMAIN.into()),
        ("new_interface_mtu", MTU.to_string()),
        ("new_ntp_servers", SERVER.to_string()),
        ("new_dhcp_server_identifier", SERVER.to_string()),
        ("new_dhcp_lease_time", LEASE_SECS.to_string()),
    ]);
}

#[track_caller]
fn expect_addr(ns: &Netns, ip: Ipv4Addr) {
    let out = ns
        .ip(["-4", "-o", "addr", "show", "dev", "eth0"])
        .expect("ip addr");
    assert!(
        out.contains(&format!("inet {ip}/")),
        "eth0 has no {ip}: {out}"
    );
}

/// Waits until the journal's last word on `ip` is a lease of `mac` ending at 0 (a release).
#[track_caller]
fn expect_released(site: &Site, ip: Ipv4Addr, mac: &str) {
    let released = wait_until(Duration::from_secs(3), || {
        site.journal()
            .lines
            .iter()
            .rev()
            .find(|l| l.ip == ip)
            .is_some_and(|l| l.mac == mac && l.expires == 0)
    });
    assert!(
        released,
        "the journal does not end {ip}'s lease: {:?}",
        site.journal()
    );
}

#[test]
fn dhclient_gets_its_reservation_renews_and_releases() {
    if !require_root() || !require_tools(&["dhclient", "unshare"]) {
        return;
    }
    let node_cfg = MASTER0;
    let site = Site::new(&Cluster::default());
    let topo = Topology::new("dhc1").expect("topology");
    let app = site.start_appliance(topo.services());
    let node = topo.add_bare_node("dhn1").expect("node");
    node.set_mac(node_cfg.mac).expect("mac");
    let hook = Hook::new(site.path(), "dhclient");

    let mut first = Process::spawn(
        "dhclient",
        dhclient(&node, &site, &hook, &["-1", "-d", "-v"]),
    )
    .expect("dhclient");
    let bound = hook
        .wait(0, &["BOUND"], BIND_TIMEOUT)
        .unwrap_or_else(|| panic!("no BOUND: {:?}\n{}", hook.reasons(), first.log_tails()));
    expect_isc_env(&bound, &node_cfg);
    bound.expect(&[("new_domain_search", format!("{DOMAIN}."))]);
    expect_addr(&node, node_cfg.ip);
    expect_acks_logged(&app, node_cfg.ip, node_cfg.mac, 1);

    // Renew: a second run with the lease file asks for the same address (INIT-REBOOT).
    first.stop().expect("stop dhclient");
    let seen = hook.calls().len();
    let mut second = Process::spawn(
        "dhclient",
        dhclient(&node, &site, &hook, &["-1", "-d", "-v"]),
    )
    .expect("dhclient");
    let reboot = hook
        .wait(seen, &["REBOOT", "BOUND"], BIND_TIMEOUT)
        .unwrap_or_else(|| panic!("no REBOOT: {:?}\n{}", hook.reasons(), second.log_tails()));
    assert_eq!(reboot.reason, "REBOOT", "the lease was not confirmed");
    expect_isc_env(&reboot, &node_cfg);
    expect_acks_logged(&app, node_cfg.ip, node_cfg.mac, 2);

    // Release: `dhclient -r` stops the running client and sends a RELEASE.
    let seen = hook.calls().len();
    run_bounded(
        "dhclient -r",
        dhclient(&node, &site, &hook, &["-r", "-v"]),
        Duration::from_secs(10),
    );
    assert!(
        hook.wait(seen, &["RELEASE"], Duration::from_secs(3))
            .is_some(),
        "no RELEASE: {:?}",
        hook.reasons()
    );
    assert!(
        second
            .wait_timeout(Duration::from_secs(5))
            .expect("wait")
            .is_some(),
        "dhclient -r left the client running"
    );
    expect_released(&site, node_cfg.ip, node_cfg.mac);
}

/// The options `dhclient.conf` (see [`dhclient`]) requests, in its order.
const DHCLIENT_REQUESTS: [OptionCode; 9] = [
    OptionCode::SubnetMask,
    OptionCode::BroadcastAddr,
    OptionCode::Router,
    OptionCode::DomainName,
    OptionCode::DomainNameServer,
    OptionCode::DomainSearch,
    OptionCode::Hostname,
    OptionCode::InterfaceMtu,
    OptionCode::NtpServers,
];

/// Thirty NTP servers and four long search domains are more than a 576-byte reply holds: the
/// NTP servers, asked for last, go into the `file` field under option 52, and dhclient reads
/// them from there.
#[test]
fn dhclient_reads_options_from_an_overloaded_file_field() {
    if !require_root() || !require_tools(&["dhclient", "unshare"]) {
        return;
    }
    let node_cfg = MASTER0;
    let ntp: Vec<Ipv4Addr> = (1..=30).map(|i| Ipv4Addr::new(10, 99, 1, i)).collect();
    let search: Vec<String> = ["alpha", "bravo", "charlie", "delta"]
        .iter()
        .map(|w| format!("{w}-search-domain-for-this-lab.example"))
        .collect();
    let cluster = Cluster {
        ntp: ntp.clone(),
        domain_search: search.clone(),
        ..Cluster::default()
    };
    let site = Site::new(&cluster);
    let topo = Topology::new("dho").expect("topology");
    let app = site.start_appliance(topo.services());
    let node = topo.add_bare_node("dhon").expect("node");
    node.set_mac(node_cfg.mac).expect("mac");

    // On the wire, with dhclient's request list and no maximum size (576 bytes): option 52
    // names `file`, and the NTP servers are not in the options field.
    let sock = client_socket(&node, "eth0");
    let mut probe = discover(&mac_bytes(node_cfg.mac), 0x0052_0001);
    probe
        .opts_mut()
        .insert(DhcpOption::ParameterRequestList(DHCLIENT_REQUESTS.to_vec()));
    let mut offer = None;
    for _ in 0..3 {
        send(&sock, &probe);
        offer = recv(&sock, Duration::from_secs(1)).filter(|m| m.xid() == probe.xid());
        if offer.is_some() {
            break;
        }
    }
    let offer = offer.unwrap_or_else(|| panic!("no OFFER\n{}", app.log_tails()));
    assert_eq!(
        offer.opts().get(OptionCode::OptionOverload),
        Some(&DhcpOption::OptionOverload(1)),
        "the reply does not overload file: {offer:?}"
    );
    assert!(offer.opts().get(OptionCode::NtpServers).is_none());
    drop(sock);

    let hook = Hook::new(site.path(), "dhclient");
    let mut client = Process::spawn(
        "dhclient",
        dhclient(&node, &site, &hook, &["-1", "-d", "-v"]),
    )
    .expect("dhclient");
    let bound = hook
        .wait(0, &["BOUND"], BIND_TIMEOUT)
        .unwrap_or_else(|| panic!("no BOUND: {:?}\n{}", hook.reasons(), client.log_tails()));
    let ntp_text: Vec<String> = ntp.iter().map(Ipv4Addr::to_string).collect();
    let search_text: Vec<String> = std::iter::once(DOMAIN.to_owned())
        .chain(search)
        .map(|d| format!("{d}."))
        .collect();
    bound.expect(&[
        ("new_ip_address", node_cfg.ip.to_string()),
        ("new_host_name", node_cfg.name.into()),
        ("new_routers", GATEWAY.to_string()),
        ("new_domain_search", search_text.join(" ")),
        ("new_ntp_servers", ntp_text.join(" ")),
        ("new_dhcp_lease_time", LEASE_SECS.to_string()),
    ]);
    expect_addr(&node, node_cfg.ip);
    client.stop().expect("stop dhclient");
}

#[test]
fn udhcpc_gets_its_reservation_renews_and_releases() {
    if !require_root() || !require_tools(&["busybox", "unshare"]) {
        return;
    }
    let node_cfg = MASTER1;
    let site = Site::new(&Cluster::default());
    let topo = Topology::new("dhc2").expect("topology");
    let app = site.start_appliance(topo.services());
    let node = topo.add_bare_node("dhn2").expect("node");
    node.set_mac(node_cfg.mac).expect("mac");
    let hook = Hook::new(site.path(), "udhcpc");
    let hook_path = hook.path.display().to_string();
    // udhcpc asks for the MTU, NTP servers and search list only when told to (-O).
    let argv = [
        "busybox", "udhcpc", "-i", "eth0", "-s", &hook_path, "-f", "-O", "mtu", "-O", "ntpsrv",
        "-O", "search", "-t", "5", "-T", "1",
    ];
    let (mut client, bound) = udhcpc_bound(&node, &site, &hook, &argv);
    let expected = [
        ("ip", node_cfg.ip.to_string()),
        ("subnet", "255.255.255.0".into()),
        ("hostname", node_cfg.name.into()),
        ("router", GATEWAY.to_string()),
        ("dns", SERVER.to_string()),
        ("domain", DOMAIN.into()),
        ("mtu", MTU.to_string()),
        ("ntpsrv", SERVER.to_string()),
        ("search", DOMAIN.into()),
        ("serverid", SERVER.to_string()),
        ("lease", LEASE_SECS.to_string()),
    ];
    bound.expect(&expected);
    expect_addr(&node, node_cfg.ip);
    expect_acks_logged(&app, node_cfg.ip, node_cfg.mac, 1);

    // SIGUSR1: renew now (a unicast REQUEST with ciaddr, answered unicast).
    let seen = hook.calls().len();
    signal(&client, Signal::SIGUSR1);
    let renew = hook
        .wait(seen, &["renew", "bound"], BIND_TIMEOUT)
        .unwrap_or_else(|| panic!("no renew: {:?}\n{}", hook.reasons(), client.log_tails()));
    assert_eq!(renew.reason, "renew", "{}", client.log_tails());
    renew.expect(&expected);
    expect_acks_logged(&app, node_cfg.ip, node_cfg.mac, 2);

    // SIGUSR2: release.
    let seen = hook.calls().len();
    signal(&client, Signal::SIGUSR2);
    assert!(
        hook.wait(seen, &["deconfig"], Duration::from_secs(3))
            .is_some(),
        "no deconfig after release: {:?}\n{}",
        hook.reasons(),
        client.log_tails()
    );
    expect_released(&site, node_cfg.ip, node_cfg.mac);
    client
        .assert_running()
        .expect("udhcpc waits after a release");
}

/// Issue 39's reproducer and its kin from a node on the segment: BOOTREQUESTs whose `hlen` is
/// longer than `chaddr` (17, 255), `hlen` 0, truncated and empty datagrams, broadcast. Each
/// once stopped DHCP and with it every service (`hlen` 17: dhcproto's `chaddr()` panicked
/// before `hlen` was checked). The appliance keeps running and a real client still gets its
/// reservation afterwards.
#[test]
fn malformed_packets_stop_nothing_and_the_next_client_is_served() {
    if !require_root() || !require_tools(&["busybox", "unshare"]) {
        return;
    }
    let node_cfg = MASTER1;
    let site = Site::new(&Cluster::default());
    let topo = Topology::new("dhm").expect("topology");
    let mut app = site.start_appliance(topo.services());
    let node = topo.add_bare_node("dhmn").expect("node");
    node.set_mac(node_cfg.mac).expect("mac");
    let sock = client_socket(&node, "eth0");
    let packet = |hlen: u8, xid: u32| {
        let mut p = vec![1, 1, hlen, 0];
        p.extend_from_slice(&xid.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0x80, 0]);
        p.resize(28, 0);
        p.extend_from_slice(&mac_bytes(node_cfg.mac));
        p.resize(236, 0);
        p.extend_from_slice(&[0x63, 0x82, 0x53, 0x63, 0x35, 0x01, 0x01, 0xff]);
        p
    };
    let to = std::net::SocketAddrV4::new(Ipv4Addr::BROADCAST, 67);
    let mut sent = 0u32;
    for round in 0..100u32 {
        let mut inputs = vec![packet(17, round), packet(255, round), packet(0, round)];
        let whole = packet(6, round);
        // Cut inside the fixed header, inside the magic cookie, inside an option; empty.
        inputs.extend([
            whole[..100].to_vec(),
            whole[..238].to_vec(),
            whole[..241].to_vec(),
        ]);
        inputs.push(Vec::new());
        for input in inputs {
            let _ = sock.send_to(&input, to);
            sent += 1;
        }
        // Bounded and paced: a burst, then a breath for the socket buffers.
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(sock);
    assert_eq!(sent, 700);
    std::thread::sleep(Duration::from_secs(1));
    app.assert_running()
        .unwrap_or_else(|e| panic!("the appliance stopped: {e:#}\n{}", app.log_tails()));

    let hook = Hook::new(site.path(), "udhcpc");
    let hook_path = hook.path.display().to_string();
    let argv = [
        "busybox", "udhcpc", "-i", "eth0", "-s", &hook_path, "-f", "-t", "5", "-T", "1",
    ];
    let (mut client, bound) = udhcpc_bound(&node, &site, &hook, &argv);
    bound.expect(&[("ip", node_cfg.ip.to_string())]);
    client.stop().expect("stop udhcpc");
    app.assert_running()
        .unwrap_or_else(|e| panic!("the appliance stopped: {e:#}\n{}", app.log_tails()));
    // No panic was needed to survive them: they are refused before anything reads them.
    assert!(!app.stderr().contains("panic"), "{}", app.log_tails());
}

/// `listen.dhcp` naming the appliance's own address: Linux gives broadcast DISCOVERs to no
/// socket bound to one address, so the appliance binds the wildcard on network.interface
/// instead (a client once waited for ever while `serve` said it listened).
#[test]
fn a_unicast_dhcp_listen_address_still_hears_broadcasts() {
    if !require_root() || !require_tools(&["busybox", "unshare"]) {
        return;
    }
    let node_cfg = MASTER1;
    let site = Site::new(&Cluster {
        dhcp_listen: Some(format!("{SERVER}:67")),
        ..Cluster::default()
    });
    let topo = Topology::new("dhcu").expect("topology");
    let app = site.start_appliance(topo.services());
    assert!(
        app.stderr()
            .contains("listening for dhcp/udp on 0.0.0.0:67"),
        "{}",
        app.log_tails()
    );
    let node = topo.add_bare_node("dhnu").expect("node");
    node.set_mac(node_cfg.mac).expect("mac");
    let hook = Hook::new(site.path(), "udhcpc");
    let hook_path = hook.path.display().to_string();
    let argv = [
        "busybox", "udhcpc", "-i", "eth0", "-s", &hook_path, "-f", "-q", "-t", "5", "-T", "1",
    ];
    let (_client, bound) = udhcpc_bound(&node, &site, &hook, &argv);
    assert_eq!(bound.env["ip"], node_cfg.ip.to_string());
    expect_acks_logged(&app, node_cfg.ip, node_cfg.mac, 1);
}

#[test]
fn dhcpcd_gets_its_reservation_renews_and_releases() {
    if !require_root() || !require_tools(&["dhcpcd", "unshare", "nsenter"]) {
        return;
    }
    let node_cfg = MASTER2;
    let site = Site::new(&Cluster::default());
    let topo = Topology::new("dhc3").expect("topology");
    let app = site.start_appliance(topo.services());
    let node = topo.add_bare_node("dhn3").expect("node");
    node.set_mac(node_cfg.mac).expect("mac");
    let hook = Hook::new(site.path(), "dhcpcd");
    let hook_path = hook.path.display().to_string();
    // Every dhcpcd invocation, the daemon's and the control commands', names an empty config
    // and our hook: a control command that finds no daemon starts one, which must never run
    // the distribution's hooks.
    let base = ["dhcpcd", "-4", "-f", "/dev/null", "-c", hook_path.as_str()];
    let mut argv = base.to_vec();
    argv.extend_from_slice(&[
        "-B",
        "-A",
        "--nodev",
        "-o",
        "domain_name_servers",
        "-o",
        "domain_name",
        "-o",
        "host_name",
        "-o",
        "interface_mtu",
        "-o",
        "ntp_servers",
        "-o",
        "domain_search",
        "eth0",
    ]);
    let mut daemon = Process::spawn(
        "dhcpcd",
        guarded(&node, &site.path().join("resolv.conf"), &argv),
    )
    .expect("dhcpcd");
    let bound = hook
        .wait(0, &["BOUND"], BIND_TIMEOUT)
        .unwrap_or_else(|| panic!("no BOUND: {:?}\n{}", hook.reasons(), daemon.log_tails()));
    expect_isc_env(&bound, &node_cfg);
    bound.expect(&[
        ("new_subnet_cidr", "24".into()),
        ("new_domain_search", DOMAIN.into()),
    ]);
    expect_addr(&node, node_cfg.ip);
    expect_acks_logged(&app, node_cfg.ip, node_cfg.mac, 1);

    // `dhcpcd -n`: the daemon rebinds (a broadcast REQUEST with ciaddr).
    let seen = hook.calls().len();
    let control = |what: &str| {
        let mut argv = base.to_vec();
        argv.extend_from_slice(&[what, "eth0"]);
        run_bounded(
            &format!("dhcpcd {what}"),
            inside(daemon.pid(), &argv),
            Duration::from_secs(10),
        );
    };
    control("-n");
    let renew = hook
        .wait(seen, &["RENEW", "REBIND", "BOUND"], BIND_TIMEOUT)
        .unwrap_or_else(|| panic!("no RENEW: {:?}\n{}", hook.reasons(), daemon.log_tails()));
    expect_isc_env(&renew, &node_cfg);
    expect_acks_logged(&app, node_cfg.ip, node_cfg.mac, 2);

    // `dhcpcd -k`: release, deconfigure and exit.
    control("-k");
    assert!(
        daemon
            .wait_timeout(Duration::from_secs(10))
            .expect("wait")
            .is_some(),
        "dhcpcd -k left the daemon running\n{}",
        daemon.log_tails()
    );
    expect_released(&site, node_cfg.ip, node_cfg.mac);
    let out = node
        .ip(["-4", "-o", "addr", "show", "dev", "eth0"])
        .expect("ip addr");
    assert!(!out.contains("inet "), "address left after release: {out}");
}

#[test]
fn unknown_clients_get_nothing_without_a_pool_and_a_pool_address_with_one() {
    if !require_root() || !require_tools(&["busybox", "dhclient", "unshare"]) {
        return;
    }
    let stranger = "02:00:5e:10:20:30";
    let mut cluster = Cluster::default();
    let site = Site::new(&cluster);
    let topo = Topology::new("dhu").expect("topology");
    let mut app = site.start_appliance(topo.services());
    let node = topo.add_bare_node("dhun").expect("node");
    node.set_mac(stranger).expect("mac");
    let hook = Hook::new(site.path(), "udhcpc");
    let hook_path = hook.path.display().to_string();

    // Three DISCOVERs two seconds apart, then udhcpc gives up (-n): about 6 s.
    let started = Instant::now();
    let argv = [
        "busybox", "udhcpc", "-i", "eth0", "-s", &hook_path, "-f", "-q", "-n", "-t", "3", "-T", "2",
    ];
    let mut client = Process::spawn(
        "udhcpc",
        guarded(&node, &site.path().join("resolv.conf"), &argv),
    )
    .expect("udhcpc");
    let status = client
        .wait_timeout(Duration::from_secs(15))
        .expect("wait")
        .unwrap_or_else(|| panic!("udhcpc did not give up\n{}", client.log_tails()));
    assert!(
        !status.success(),
        "udhcpc got a lease\n{}",
        client.log_tails()
    );
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "gave up too early"
    );
    let reasons = hook.reasons();
    assert!(reasons.iter().any(|r| r == "leasefail"), "{reasons:?}");
    assert!(!reasons.iter().any(|r| r == "bound"), "{reasons:?}");
    // Not answered, and said so (issue 46: a mistyped MAC used to go without a word): every
    // line naming the stranger is that one.
    let log = app.stderr();
    assert!(
        log.contains(&format!("dhcp: {stranger} (from ")) && log.contains("not answered"),
        "the stranger was not named\n{}",
        app.log_tails()
    );
    assert!(
        log.lines()
            .filter(|l| l.contains(stranger))
            .all(|l| l.contains("not answered")),
        "the appliance answered a stranger\n{}",
        app.log_tails()
    );
    assert!(site.journal().lines.is_empty(), "{:?}", site.journal());

    // With a pool, the same client gets an address from it (and no host name).
    let (start, end) = (Ipv4Addr::new(10, 99, 0, 100), Ipv4Addr::new(10, 99, 0, 109));
    cluster.pool = Some((start, end));
    app.stop().expect("stop appliance");
    site.write_config(&cluster);
    let app = site.start_appliance(topo.services());
    let hook = Hook::new(site.path(), "dhclient");
    let mut client = Process::spawn(
        "dhclient",
        dhclient(&node, &site, &hook, &["-1", "-d", "-v"]),
    )
    .expect("dhclient");
    let bound = hook
        .wait(0, &["BOUND"], BIND_TIMEOUT)
        .unwrap_or_else(|| panic!("no BOUND: {:?}\n{}", hook.reasons(), client.log_tails()));
    let ip: Ipv4Addr = bound.env["new_ip_address"].parse().expect("address");
    assert!((start..=end).contains(&ip), "{ip} is not from the pool");
    assert!(
        !bound.env.contains_key("new_host_name"),
        "a pool client got a host name: {:?}",
        bound.env.get("new_host_name")
    );
    bound.expect(&[
        ("new_routers", GATEWAY.to_string()),
        ("new_domain_name_servers", SERVER.to_string()),
        ("new_domain_name", DOMAIN.into()),
    ]);
    expect_acks_logged(&app, ip, stranger, 1);
    assert_eq!(site.journal().holder(ip).as_deref(), Some(stranger));
    client.stop().expect("stop dhclient");

    // The client comes back with a client identifier (option 61): it is offered its address
    // again, and the identifier comes back in the reply (RFC 6842).
    let sock = client_socket(&node, "eth0");
    let id: Vec<u8> = [1].into_iter().chain(mac_bytes(stranger)).collect();
    let mut hello = discover(&mac_bytes(stranger), 0x6842_0001);
    hello
        .opts_mut()
        .insert(DhcpOption::ClientIdentifier(id.clone()));
    let mut offer = None;
    for _ in 0..3 {
        send(&sock, &hello);
        offer = recv(&sock, Duration::from_secs(1)).filter(|m| m.xid() == hello.xid());
        if offer.is_some() {
            break;
        }
    }
    let offer = offer.unwrap_or_else(|| panic!("no OFFER\n{}", app.log_tails()));
    assert_eq!(offer.yiaddr(), ip, "a returning client moved");
    assert_eq!(
        offer.opts().get(OptionCode::ClientIdentifier),
        Some(&DhcpOption::ClientIdentifier(id)),
        "the client identifier was not echoed"
    );
}

#[test]
fn a_client_behind_dhcrelay_gets_its_reservation() {
    if !require_root() || !require_tools(&["dhcrelay", "dhclient", "busybox", "unshare"]) {
        return;
    }
    // The cluster subnet (a /16) spans the services segment (10.99.0.0/24, where the relay has
    // 10.99.0.250) and the client's segment behind the relay (10.99.5.0/24, relay at
    // 10.99.5.1 = giaddr). A third segment, 172.31.0.0/24, is outside the cluster subnet.
    let far = Reserved {
        ip: Ipv4Addr::new(10, 99, 5, 10),
        ..WORKER0
    };
    let cluster = Cluster {
        subnet: "10.99.0.0/16",
        pool: None,
        nodes: vec![MASTER0, far],
        ..Cluster::default()
    };
    let site = Site::new(&cluster);
    let topo = Topology::new("dhr").expect("topology");
    let app = site.start_appliance(topo.services());
    let relay = topo
        .add_node("dhrr", "10.99.0.250/24", None)
        .expect("relay node");
    let seg = Netns::new("dhrc").expect("client namespace");
    let foreign = Netns::new("dhrf").expect("foreign namespace");
    let _seg_link = Veth::create(&relay, "seg1", &seg, "eth0").expect("veth");
    let _foreign_link = Veth::create(&relay, "seg2", &foreign, "eth0").expect("veth");
    relay.add_addr("seg1", "10.99.5.1/24").expect("addr");
    relay.add_addr("seg2", "172.31.0.1/24").expect("addr");
    seg.ip(["link", "set", "dev", "eth0", "address", far.mac])
        .expect("mac");
    foreign
        .ip(["link", "set", "dev", "eth0", "address", MASTER0.mac])
        .expect("mac");
    // Replies go to the relay's giaddr on the client segment.
    topo.services()
        .ip(["route", "add", "10.99.5.0/24", "via", "10.99.0.250"])
        .expect("route");
    topo.services()
        .ip(["route", "add", "172.31.0.0/24", "via", "10.99.0.250"])
        .expect("route");
    let pid_file = site.path().join("dhcrelay.pid").display().to_string();
    // -a: the relay adds option 82 (its circuit id names the segment) and strips it from the
    // replies, which the appliance must echo; -D drops replies whose option 82 is not its own.
    let relay_argv = [
        "dhcrelay",
        "-4",
        "-d",
        "-a",
        "-D",
        "-pf",
        &pid_file,
        "-id",
        "seg1",
        "-id",
        "seg2",
        "-iu",
        "eth0",
        "10.99.0.1",
    ];
    let mut dhcrelay = Process::spawn(
        "dhcrelay",
        guarded(&relay, &site.path().join("relay-resolv.conf"), &relay_argv),
    )
    .expect("dhcrelay");
    let ready = wait_until(Duration::from_secs(5), || {
        dhcrelay.stderr().contains("Sending on   Socket/fallback") || !dhcrelay.is_running()
    });
    dhcrelay.assert_running().expect("dhcrelay runs");
    assert!(ready, "dhcrelay not ready\n{}", dhcrelay.log_tails());

    let hook = Hook::new(site.path(), "dhclient");
    let mut client = Process::spawn(
        "dhclient",
        dhclient(&seg, &site, &hook, &["-1", "-d", "-v"]),
    )
    .expect("dhclient");
    let bound = hook.wait(0, &["BOUND"], BIND_TIMEOUT).unwrap_or_else(|| {
        panic!(
            "no BOUND: {:?}\n{}\n{}\n{}",
            hook.reasons(),
            client.log_tails(),
            dhcrelay.log_tails(),
            app.log_tails()
        )
    });
    bound.expect(&[
        ("new_ip_address", far.ip.to_string()),
        ("new_subnet_mask", "255.255.0.0".into()),
        ("new_host_name", far.name.into()),
        ("new_routers", GATEWAY.to_string()),
        ("new_domain_name_servers", SERVER.to_string()),
        ("new_dhcp_server_identifier", SERVER.to_string()),
    ]);
    expect_acks_logged(&app, far.ip, far.mac, 1);
    assert!(
        dhcrelay
            .stderr()
            .contains(&format!("Forwarded BOOTREPLY for {}", far.mac)),
        "{}",
        dhcrelay.log_tails()
    );
    client.stop().expect("stop dhclient");

    // A stale lease from elsewhere: the INIT-REBOOT REQUEST for it is NAKed through the relay,
    // and the client starts over at once and gets its reservation.
    std::fs::write(
        site.path().join("dhclient.leases"),
        "lease {\n  interface \"eth0\";\n  fixed-address 10.99.5.77;\n  \
         option subnet-mask 255.255.0.0;\n  option dhcp-server-identifier 10.99.0.1;\n  \
         renew 4 2037/01/01 00:00:00;\n  rebind 4 2037/01/01 00:00:00;\n  \
         expire 4 2037/01/01 00:00:00;\n}\n",
    )
    .expect("lease file");
    seg.ip(["addr", "flush", "dev", "eth0"]).expect("flush");
    let seen = hook.calls().len();
    let started = Instant::now();
    let mut client = Process::spawn(
        "dhclient",
        dhclient(&seg, &site, &hook, &["-1", "-d", "-v"]),
    )
    .expect("dhclient");
    let bound = hook
        .wait(seen, &["BOUND"], BIND_TIMEOUT)
        .unwrap_or_else(|| {
            panic!(
                "no BOUND after the NAK: {:?}\n{}\n{}",
                hook.reasons(),
                client.log_tails(),
                dhcrelay.log_tails()
            )
        });
    bound.expect(&[("new_ip_address", far.ip.to_string())]);
    assert!(
        client.stderr().contains("DHCPNAK"),
        "no NAK\n{}",
        client.log_tails()
    );
    // A client that did not wait for a timeout to start over: the NAK answered its first
    // REQUEST for the stale address (no retransmission), well within dhclient's ~10 s
    // reboot timeout.
    let stale_requests = client
        .stderr()
        .matches("DHCPREQUEST for 10.99.5.77")
        .count();
    assert_eq!(stale_requests, 1, "{}", client.log_tails());
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    client.stop().expect("stop dhclient");

    // The NAK carries the broadcast bit (RFC 2131 section 4.3.2), so the relay broadcasts it:
    // a client whose address is wrong can't take a unicast. A client on a plain UDP socket
    // (no packet filter) sees it only then.
    seg.ip(["addr", "flush", "dev", "eth0"]).expect("flush");
    let sock = client_socket(&seg, "eth0");
    let mac: [u8; 6] = mac_bytes(far.mac);
    // Like dhclient's, without the broadcast bit: the server must set it on the NAK.
    let mut stale = request(&mac, 0x5eed_0001, Ipv4Addr::new(10, 99, 5, 77), None);
    stale.set_flags(dhcproto::v4::Flags::default());
    let mut nak = None;
    for _ in 0..3 {
        send(&sock, &stale);
        nak = recv(&sock, Duration::from_secs(1));
        if nak.is_some() {
            break;
        }
    }
    let nak = nak.unwrap_or_else(|| {
        panic!(
            "the NAK never reached a UDP client behind the relay\n{}",
            dhcrelay.log_tails()
        )
    });
    assert_eq!(nak.opts().msg_type(), Some(dhcproto::v4::MessageType::Nak));
    assert!(nak.flags().broadcast(), "NAK without the broadcast bit");
    assert!(
        !dhcrelay.stderr().contains("to 0.0.0.0"),
        "the relay unicast a reply to 0.0.0.0\n{}",
        dhcrelay.log_tails()
    );

    // A reserved MAC behind a relay on a foreign network is not served: the relay forwards,
    // the appliance stays silent.
    let hook = Hook::new(site.path(), "udhcpc");
    let hook_path = hook.path.display().to_string();
    let argv = [
        "busybox", "udhcpc", "-i", "eth0", "-s", &hook_path, "-f", "-q", "-n", "-t", "2", "-T", "1",
    ];
    let mut stranger = Process::spawn(
        "udhcpc",
        guarded(&foreign, &site.path().join("foreign-resolv.conf"), &argv),
    )
    .expect("udhcpc");
    let status = stranger
        .wait_timeout(Duration::from_secs(8))
        .expect("wait")
        .unwrap_or_else(|| panic!("udhcpc did not give up\n{}", stranger.log_tails()));
    assert!(
        !status.success(),
        "served through a foreign relay\n{}",
        stranger.log_tails()
    );
    assert!(
        dhcrelay.stderr().contains(&format!(
            "Forwarded BOOTREQUEST for {} to 10.99.0.1",
            MASTER0.mac
        )),
        "the relay never forwarded the foreign request\n{}",
        dhcrelay.log_tails()
    );
    assert_eq!(acks_logged(&app, MASTER0.ip, MASTER0.mac), 0);
}

fn mac_bytes(mac: &str) -> [u8; 6] {
    let v: Vec<u8> = mac
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("hex"))
        .collect();
    v.try_into().expect("six octets")
}

/// perfdhcp as a relay (giaddr = its own address) from `node`, `rate` exchanges a second over
/// `clients` random MACs for at most `secs` seconds.
fn perfdhcp(node: &Netns, site: &Site, rate: u32, clients: u32, secs: u32) -> Process {
    let (rate, clients, secs) = (rate.to_string(), clients.to_string(), secs.to_string());
    let argv = [
        "perfdhcp",
        "-4",
        "-l",
        "eth0",
        "-r",
        &rate,
        "-R",
        &clients,
        "-p",
        &secs,
        "-d",
        "2",
        "10.99.0.1",
    ];
    Process::spawn(
        "perfdhcp",
        guarded(node, &site.path().join("perfdhcp-resolv.conf"), &argv),
    )
    .expect("perfdhcp")
}

#[test]
fn acknowledged_leases_survive_kill_9_under_load() {
    if !require_root() || !require_tools(&["perfdhcp", "unshare"]) {
        return;
    }
    let (start, end) = (Ipv4Addr::new(10, 99, 16, 0), Ipv4Addr::new(10, 99, 63, 255));
    let cluster = Cluster {
        subnet: "10.99.0.0/16",
        pool: Some((start, end)),
        nodes: NODES.to_vec(),
        ..Cluster::default()
    };
    let site = Site::new(&cluster);
    let topo = Topology::new("dhk").expect("topology");
    let mut app = site.start_appliance(topo.services());
    let load_node = topo
        .add_node("dhkp", "10.99.0.200/24", None)
        .expect("perfdhcp node");
    let client_node = topo.add_bare_node("dhkc").expect("client node");
    let sock = Arc::new(client_socket(&client_node, "eth0"));

    let mut load = perfdhcp(&load_node, &site, 300, 100_000, 20);
    // The load is on before the clients start: perfdhcp has been served at least once. A
    // perfdhcp slow to start (a busy machine, a cold page cache) would otherwise still be
    // starting when the 200th client is acknowledged and the appliance is killed.
    let perfdhcp_served = wait_until(Duration::from_secs(15), || {
        !load.is_running() || app.stderr().contains(" to 00:0c:01:")
    });
    load.assert_running()
        .expect("perfdhcp is loading the server");
    assert!(
        perfdhcp_served,
        "perfdhcp was not served within 15 s\n{}\n{}",
        load.log_tails(),
        app.log_tails()
    );
    let macs = Rng::seeded().macs(0x4b, 3000);
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let pace = Pace {
        window: 32,
        retry: Duration::from_millis(400),
        tries: 3,
    };
    let clients = {
        let (sock, acked, stop) = (Arc::clone(&sock), Arc::clone(&acked), Arc::clone(&stop));
        std::thread::spawn(move || {
            dora(
                &sock,
                &macs,
                pace,
                &stop,
                Instant::now() + Duration::from_secs(25),
                &acked,
            )
        })
    };
    let count = || acked.lock().unwrap().len();
    let enough = wait_until(Duration::from_secs(15), || count() >= 200);
    assert!(enough, "only {} ACKs\n{}", count(), app.log_tails());
    load.assert_running()
        .expect("perfdhcp is loading the server");

    // kill -9 in the middle of the run: clients and perfdhcp are still sending.
    signal(&app, Signal::SIGKILL);
    app.wait_timeout(Duration::from_secs(5))
        .expect("wait")
        .expect("the appliance died");
    let at_kill = count();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let stats = clients.join().expect("client thread");
    load.stop().expect("stop perfdhcp");
    eprintln!("PERF {}", load.stdout());
    let acked: Vec<([u8; 6], Ipv4Addr)> = acked.lock().unwrap().clone();
    assert!(
        acked.len() <= at_kill + pace.window,
        "ACKs after the kill: {} then {}",
        at_kill,
        acked.len()
    );

    // The journal as the dead process left it: CRC-valid lines (a torn last line is
    // tolerated), and never one address granted to two clients at once.
    let before = site.journal();
    assert!(
        before.bad.len() <= 1,
        "damaged lines in the journal: {:?}",
        before.bad
    );
    before.replay(LEASE_SECS).expect("no double grant");
    assert!(
        before.lines.iter().any(|l| l.mac.starts_with("00:0c:01")),
        "perfdhcp got no lease: it was no load"
    );

    let perf_leases = before
        .lines
        .iter()
        .filter(|l| l.mac.starts_with("00:0c:01"))
        .count();
    eprintln!(
        "kill -9 after {} ACKs to {} clients ({} NAKs, {} gave up); journal: {} lines, \
         {perf_leases} perfdhcp grants",
        acked.len(),
        stats.started,
        stats.naks,
        stats.gave_up,
        before.lines.len()
    );

    let app = site.start_appliance(topo.services());
    let after = site.journal();
    assert!(after.bad.is_empty(), "{:?}", after.bad);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let mut by_ip: HashMap<Ipv4Addr, &str> = HashMap::new();
    let mut by_mac: HashMap<&str, Ipv4Addr> = HashMap::new();
    for l in &after.lines {
        assert!(l.expires > now, "compaction kept a dead lease: {l:?}");
        assert!(
            by_ip.insert(l.ip, &l.mac).is_none(),
            "{} is held twice after the restart",
            l.ip
        );
        assert!(
            by_mac.insert(&l.mac, l.ip).is_none(),
            "{} holds two addresses after the restart",
            l.mac
        );
    }
    assert!(
        app.stderr()
            .contains(&format!("{} leases live", after.lines.len())),
        "{}",
        app.log_tails()
    );
    let mut lost = Vec::new();
    for (mac, ip) in &acked {
        assert!((start..=end).contains(ip), "{ip} is not from the pool");
        if by_ip.get(ip).copied() != Some(mac_text(mac).as_str()) {
            lost.push(format!("{ip} {}", mac_text(mac)));
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged leases lost by kill -9: {lost:?}",
        lost.len(),
        acked.len()
    );

    // The restarted server gives acknowledged clients their addresses again, and new clients
    // other ones.
    let again: Vec<[u8; 6]> = acked.iter().take(20).map(|(m, _)| *m).collect();
    let fresh = Rng::seeded().macs(0x4c, 20);
    let mut macs = again.clone();
    macs.extend_from_slice(&fresh);
    let second = Mutex::new(Vec::new());
    // Each message tried for up to 4 s (a sync delayed by a busy disk delays its ACK), all
    // within the 10 s below.
    let pace = Pace {
        window: 8,
        retry: Duration::from_millis(400),
        tries: 10,
    };
    let no_stop = AtomicBool::new(false);
    dora(
        &sock,
        &macs,
        pace,
        &no_stop,
        Instant::now() + Duration::from_secs(10),
        &second,
    );
    let second = second.into_inner().unwrap();
    let old: HashMap<[u8; 6], Ipv4Addr> = acked.iter().copied().collect();
    let held: HashSet<Ipv4Addr> = by_ip.keys().copied().collect();
    assert_eq!(
        second.len(),
        macs.len(),
        "not every client was served again"
    );
    for (mac, ip) in &second {
        match old.get(mac) {
            Some(was) => assert_eq!(ip, was, "{} moved", mac_text(mac)),
            None => assert!(!held.contains(ip), "{ip} given twice"),
        }
    }
}

#[test]
fn starvation_never_reaches_a_reservation() {
    if !require_root() || !require_tools(&["perfdhcp", "busybox", "unshare"]) {
        return;
    }
    let (start, end) = (Ipv4Addr::new(10, 99, 0, 100), Ipv4Addr::new(10, 99, 0, 109));
    let cluster = Cluster {
        pool: Some((start, end)),
        ..Cluster::default()
    };
    let site = Site::new(&cluster);
    let topo = Topology::new("dhs").expect("topology");
    let mut app = site.start_appliance(topo.services());
    let load_node = topo
        .add_node("dhsp", "10.99.0.200/24", None)
        .expect("perfdhcp node");
    let client_node = topo.add_bare_node("dhsc").expect("client node");
    let sock = client_socket(&client_node, "eth0");

    let mut load = perfdhcp(&load_node, &site, 500, 5000, 5);
    // 3000 random MACs, 256 at a time, each one DISCOVER and at most one REQUEST.
    let mut rng = Rng::seeded();
    let macs = rng.macs(0x57, 3000);
    let acked = Mutex::new(Vec::new());
    let pace = Pace {
        window: 256,
        retry: Duration::from_millis(300),
        tries: 1,
    };
    let stats = dora(
        &sock,
        &macs,
        pace,
        &AtomicBool::new(false),
        Instant::now() + Duration::from_secs(12),
        &acked,
    );
    assert_eq!(
        stats.started,
        macs.len(),
        "the flood did not finish: {} of {} clients started",
        stats.started,
        macs.len()
    );
    let acked = acked.into_inner().unwrap();
    let reserved: HashMap<Ipv4Addr, &str> = NODES.iter().map(|n| (n.ip, n.mac)).collect();
    for (mac, ip) in stats.offers.iter().chain(acked.iter()) {
        assert!(
            (start..=end).contains(ip),
            "{} was offered {ip}, outside the pool",
            mac_text(mac)
        );
    }

    // Greedy clients ask for the reserved addresses outright (INIT-REBOOT): never an ACK.
    let greedy = rng.macs(0x58, 40);
    let mut xid = rng.next() as u32;
    for (i, mac) in greedy.iter().enumerate() {
        xid = xid.wrapping_add(1);
        send(&sock, &request(mac, xid, NODES[i % NODES.len()].ip, None));
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while let Some(reply) = recv(&sock, deadline.saturating_duration_since(Instant::now())) {
        let ack = reply.opts().msg_type() == Some(dhcproto::v4::MessageType::Ack);
        assert!(
            !(ack && reserved.contains_key(&reply.yiaddr())),
            "{} got {} by asking",
            mac_text(&reply.chaddr()[..6]),
            reply.yiaddr()
        );
    }

    let _ = load.wait_timeout(Duration::from_secs(8)).expect("wait");
    load.stop().expect("stop perfdhcp");
    app.assert_running()
        .expect("the appliance survived the flood");

    // The journal: the pool is full (starvation really happened) and no reserved address
    // ever went to anyone but its node.
    let journal = site.journal();
    assert!(journal.bad.is_empty(), "{:?}", journal.bad);
    for l in &journal.lines {
        match reserved.get(&l.ip) {
            Some(mac) => assert_eq!(*mac, l.mac, "reserved {} leased to {}", l.ip, l.mac),
            None => assert!((start..=end).contains(&l.ip), "{l:?} outside the pool"),
        }
    }
    let live = journal.replay(LEASE_SECS).expect("no double grant");
    let pool_used = live.keys().filter(|ip| (start..=end).contains(*ip)).count();
    assert_eq!(pool_used, 10, "the flood did not use up the pool: {live:?}");
    eprintln!(
        "flood: {} clients, {} offers, {} ACKs, {} NAKs, {} silent; journal {} lines",
        stats.started,
        stats.offers.len(),
        acked.len(),
        stats.naks,
        stats.gave_up,
        journal.lines.len()
    );

    // A reserved node still gets its address.
    let node = topo.add_bare_node("dhsn").expect("node");
    node.set_mac(MASTER0.mac).expect("mac");
    let hook = Hook::new(site.path(), "udhcpc");
    let hook_path = hook.path.display().to_string();
    let argv = [
        "busybox", "udhcpc", "-i", "eth0", "-s", &hook_path, "-f", "-q", "-n", "-t", "5", "-T", "1",
    ];
    let mut client = Process::spawn(
        "udhcpc",
        guarded(&node, &site.path().join("resolv.conf"), &argv),
    )
    .expect("udhcpc");
    let bound = hook
        .wait(0, &["bound"], BIND_TIMEOUT)
        .unwrap_or_else(|| panic!("no bound: {:?}\n{}", hook.reasons(), client.log_tails()));
    bound.expect(&[
        ("ip", MASTER0.ip.to_string()),
        ("hostname", MASTER0.name.into()),
    ]);
    expect_acks_logged(&app, MASTER0.ip, MASTER0.mac, 1);
    let _ = client.wait_timeout(Duration::from_secs(3));
    app.assert_running().expect("the appliance is still up");
}

#[test]
fn a_reservation_added_by_reload_takes_over_at_the_next_renewal() {
    if !require_root() || !require_tools(&["busybox", "unshare"]) {
        return;
    }
    let newcomer = Reserved {
        name: "worker-1",
        role: "worker",
        mac: "52:54:00:00:00:09",
        ip: Ipv4Addr::new(10, 99, 0, 9),
    };
    let (start, end) = (Ipv4Addr::new(10, 99, 0, 100), Ipv4Addr::new(10, 99, 0, 109));
    let mut cluster = Cluster {
        pool: Some((start, end)),
        ..Cluster::default()
    };
    let site = Site::new(&cluster);
    let topo = Topology::new("dhl").expect("topology");
    let app = site.start_appliance(topo.services());
    let node = topo.add_bare_node("dhln").expect("node");
    node.set_mac(newcomer.mac).expect("mac");
    let hook = Hook::new(site.path(), "udhcpc");
    let hook_path = hook.path.display().to_string();
    let argv = [
        "busybox", "udhcpc", "-i", "eth0", "-s", &hook_path, "-f", "-t", "5", "-T", "1",
    ];
    let mut client = Process::spawn(
        "udhcpc",
        guarded(&node, &site.path().join("resolv.conf"), &argv),
    )
    .expect("udhcpc");
    let bound = hook
        .wait(0, &["bound"], BIND_TIMEOUT)
        .unwrap_or_else(|| panic!("no bound: {:?}\n{}", hook.reasons(), client.log_tails()));
    let pool_ip: Ipv4Addr = bound.env["ip"].parse().expect("address");
    assert!((start..=end).contains(&pool_ip), "{pool_ip}");
    assert!(!bound.env.contains_key("hostname"));

    // The operator adds a reservation and reloads.
    cluster.nodes.push(newcomer);
    site.write_config(&cluster);
    let loaded = |p: &Process| p.stderr().matches(" loaded").count();
    let before = loaded(&app);
    signal(&app, Signal::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(5), || loaded(&app) > before),
        "no reload\n{}",
        app.log_tails()
    );

    // The renewal of the pool address is refused; the client starts over and gets its
    // reservation and name, and the pool address is free again.
    let seen = hook.calls().len();
    signal(&client, Signal::SIGUSR1);
    let rebound = hook
        .wait(seen, &["bound"], Duration::from_secs(15))
        .unwrap_or_else(|| panic!("not rebound: {:?}\n{}", hook.reasons(), client.log_tails()));
    rebound.expect(&[
        ("ip", newcomer.ip.to_string()),
        ("hostname", newcomer.name.into()),
    ]);
    expect_acks_logged(&app, newcomer.ip, newcomer.mac, 1);
    let journal = site.journal();
    assert_eq!(journal.holder(newcomer.ip).as_deref(), Some(newcomer.mac));
    assert_eq!(
        journal.holder(pool_ip),
        None,
        "the pool lease was not ended"
    );
    client.stop().expect("stop udhcpc");
}
