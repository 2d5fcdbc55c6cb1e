//! Day 2 on a services host: the appliance keeps working as the unprivileged `run_as`
//! account (the lease journal, install markers and admin socket in a state directory it was
//! handed before dropping root).

use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use dhcproto::v4::{DhcpOption, MessageType, OptionCode};
use harness::{Topology, require_root, require_tools, wait_until};

use crate::dhcp_support::{
    Cluster, MASTER0, SERVER, Site, client_socket, discover, recv, request, send,
};
use crate::support::appliance;

/// Debian's unprivileged account and group.
const NOBODY_UID: u32 = 65534;

fn mac_bytes(mac: &str) -> [u8; 6] {
    let mut out = [0u8; 6];
    for (byte, part) in out.iter_mut().zip(mac.split(':')) {
        *byte = u8::from_str_radix(part, 16).unwrap();
    }
    out
}

/// One DISCOVER/OFFER/REQUEST/ACK for `mac` from `sock`: the acknowledged address.
fn lease(sock: &std::net::UdpSocket, mac: &str) -> Option<Ipv4Addr> {
    let mac = mac_bytes(mac);
    for attempt in 0..3u32 {
        let xid = 0x0d02_0000 + attempt;
        send(sock, &discover(&mac, xid));
        let Some(offer) = recv(sock, Duration::from_secs(2)).filter(|m| m.xid() == xid) else {
            continue;
        };
        send(sock, &request(&mac, xid, offer.yiaddr(), Some(SERVER)));
        let Some(ack) = recv(sock, Duration::from_secs(2)).filter(|m| m.xid() == xid) else {
            continue;
        };
        if ack.opts().get(OptionCode::MessageType)
            == Some(&DhcpOption::MessageType(MessageType::Ack))
        {
            return Some(ack.yiaddr());
        }
    }
    None
}

#[test]
fn run_as_nobody_keeps_leases_install_markers_and_the_admin_socket() {
    if !require_root() || !require_tools(&["curl"]) {
        return;
    }
    let site = Site::new(&Cluster::default());
    // The account must be able to reach the state directory inside the test's directory.
    std::fs::set_permissions(site.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = std::fs::read_to_string(&site.config).unwrap();
    let text = text.replace(
        "listen: { dns: [], http: [],",
        &format!("listen: {{ dns: [], http: [\"{SERVER}:8080\"],"),
    ) + "run_as: { user: nobody, group: nogroup }\n";
    assert!(
        text.contains(":8080"),
        "the config's listen line changed: {text}"
    );
    std::fs::write(&site.config, text).unwrap();

    let topo = Topology::new("d2ra").expect("topology");
    let mut app = site.start_appliance(topo.services());
    assert!(
        wait_until(Duration::from_secs(10), || app.stderr().contains("ready")),
        "not ready\n{}",
        app.log_tails()
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", app.pid())).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line
            .split_whitespace()
            .skip(1)
            .all(|u| u == NOBODY_UID.to_string()),
        "not running as nobody: {uid_line}\n{}",
        app.log_tails()
    );

    // A lease after the drop: acknowledged only once it is in the journal on disk.
    let node = topo.add_bare_node("d2n").expect("node");
    node.set_mac(MASTER0.mac).expect("mac");
    let sock = client_socket(&node, "eth0");
    let ip = lease(&sock, MASTER0.mac)
        .unwrap_or_else(|| panic!("no lease for master-0\n{}", app.log_tails()));
    assert_eq!(ip, MASTER0.ip);
    drop(sock);
    assert_eq!(
        site.journal().holder(MASTER0.ip).as_deref(),
        Some(MASTER0.mac)
    );
    app.assert_running()
        .expect("still serving after writing the lease");

    // The node's ignition, then its role config (what the installed system fetches): the
    // install marker is written by the unprivileged process.
    node.add_addr("eth0", &format!("{}/24", MASTER0.ip))
        .expect("address");
    for path in ["/ignition/master-0.ign", "/ignition/roles/master.ign"] {
        let out = node
            .exec(["curl", "-sf", "--max-time", "10", "-o", "/dev/null"])
            .arg(format!("http://{SERVER}:8080{path}"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "GET {path}: {out:?}\n{}",
            app.log_tails()
        );
    }
    let marker = site.state_dir().join("installed/master-0");
    assert!(
        wait_until(Duration::from_secs(5), || marker.exists()),
        "no install marker\n{}",
        app.log_tails()
    );
    assert_eq!(std::fs::metadata(&marker).unwrap().uid(), NOBODY_UID);

    // The admin socket still answers, and the unprivileged process can remove the marker.
    let state = site.state_dir();
    let out = appliance([
        "node".as_ref(),
        "reinstall".as_ref(),
        "master-0".as_ref(),
        "--state-dir".as_ref(),
        state.as_os_str(),
    ]);
    assert!(out.status.success(), "{out:?}\n{}", app.log_tails());
    assert!(!marker.exists());
    app.assert_running().expect("still serving");
    assert!(
        !app.stderr().contains("Permission denied"),
        "{}",
        app.log_tails()
    );
}
