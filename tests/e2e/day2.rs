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

/// A week and a half after the install, the bootstrap node still listed and its bootstrap.ign
/// long expired: the services host restarts and serves DNS, DHCP and the load balancer; only
/// the bootstrap ignition is refused (410), journaled, and the master's still served.
#[test]
fn a_restart_with_a_ten_day_old_bootstrap_ign_serves_everything_but_that_ignition() {
    if !require_root() || !require_tools(&["curl", "dig", "python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let install = dir.path().join("install_dir");
    harness::write_install_dir(&install).unwrap();
    let ten_days = Duration::from_secs(10 * 24 * 3600);
    std::fs::File::options()
        .write(true)
        .open(install.join("bootstrap.ign"))
        .unwrap()
        .set_modified(std::time::SystemTime::now() - ten_days)
        .unwrap();
    let config = dir.path().join("okd.yml");
    std::fs::write(
        &config,
        format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ interface: br0, subnet: 10.99.0.0/24, appliance_ip: {SERVER} }}
nodes:
  - {{ name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.99.0.7 }}
  - {{ name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.99.0.2 }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
lb: {{ health: {{ interval: 200ms, timeout: 150ms, rise: 1, fall: 2, control_plane_check: tcp }} }}
state_dir: {state}
listen:
  dns: ["{SERVER}:53"]
  tftp: []
  http: ["{SERVER}:8080"]
  api: ["{SERVER}:6443"]
  machine_config: []
  ingress_https: []
  ingress_http: []
"#,
            state = dir.path().join("state").display()
        ),
    )
    .unwrap();

    // The unit runs `check` before `serve`: it must pass, with the expiry as a warning.
    let out = appliance(["check".as_ref(), config.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let warned = String::from_utf8_lossy(&out.stderr);
    assert!(
        warned.contains("bootstrap.ign was written 240 h ago"),
        "{warned}"
    );

    let topo = Topology::new("d2x").expect("topology");
    let boot = topo
        .add_node("d2b", "10.99.0.7/24", None)
        .expect("bootstrap node");
    let master = topo.add_node("d2m", "10.99.0.2/24", None).expect("master");
    let web = crate::support::spawn_listening(
        &master,
        "kube-apiserver stand-in",
        [
            "python3",
            "-m",
            "http.server",
            "6443",
            "--bind",
            "10.99.0.2",
            "--directory",
            "/",
        ],
        "10.99.0.2:6443",
    );
    let app = crate::dns_support::start_appliance(topo.services(), &config);

    // DNS.
    let run = crate::dns_support::dig_in(
        &boot,
        "dig",
        SERVER.into(),
        &["api.okd.lab.example.com.", "A"],
    );
    assert_eq!(
        run.last().rdata("A"),
        [SERVER.to_string()],
        "{}",
        run.stdout
    );

    // The load balancer, once its check has seen the master.
    assert!(
        wait_until(Duration::from_secs(10), || app
            .stderr()
            .contains("api backend 10.99.0.2:6443 is up")),
        "{}",
        app.log_tails()
    );
    let out = boot
        .exec([
            "curl",
            "-s",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg(format!("http://{SERVER}:6443/"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200",
        "{out:?}\n{}",
        app.log_tails()
    );

    // DHCP, from a client of its own (the bootstrap node's MAC).
    let client = topo.add_bare_node("d2c").expect("dhcp client");
    client.set_mac("52:54:00:00:00:07").expect("mac");
    let sock = client_socket(&client, "eth0");
    assert_eq!(
        lease(&sock, "52:54:00:00:00:07"),
        Some(std::net::Ipv4Addr::new(10, 99, 0, 7)),
        "{}",
        app.log_tails()
    );
    drop(sock);

    // Ignition: the bootstrap's refused with the reason, the master's served.
    let get = |ns: &harness::Netns, path: &str| -> (String, String) {
        let out = ns
            .exec(["curl", "-s", "--max-time", "5", "-w", "\n%{http_code}"])
            .arg(format!("http://{SERVER}:8080{path}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap();
        (code.to_owned(), body.to_owned())
    };
    let (code, body) = get(&boot, "/ignition/bootstrap.ign");
    assert_eq!(code, "410", "{body}");
    assert!(
        body.contains("bootstrap.ign was written 240 h ago"),
        "{body}"
    );
    let (code, _) = get(&boot, "/ignition/roles/bootstrap.ign");
    assert_eq!(code, "410");
    let (code, body) = get(&master, "/ignition/master-0.ign");
    assert_eq!(code, "200", "{body}");
    assert!(
        app.stderr()
            .contains("bootstrap: bootstrap.ign not served to 10.99.0.7"),
        "{}",
        app.log_tails()
    );
    // Refused fetches do not move the install along.
    assert!(!dir.path().join("state/ignition-fetched/bootstrap").exists());

    // The install directory deleted (it holds the kubeadmin secrets): 404, the rest serves on.
    std::fs::remove_dir_all(&install).unwrap();
    let (code, body) = get(&master, "/ignition/master-0.ign");
    assert_eq!(code, "404", "{body}");
    assert!(
        body.contains("master.ign is not in the ignition directory"),
        "{body}"
    );
    let run = crate::dns_support::dig_in(
        &boot,
        "dig",
        SERVER.into(),
        &["master-0.okd.lab.example.com.", "A"],
    );
    assert_eq!(run.last().rdata("A"), ["10.99.0.2"], "{}", run.stdout);
    drop(web);
}
