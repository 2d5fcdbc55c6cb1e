//! The services VM image's cluster NICs from a host file, brought up by systemd-networkd itself:
//! in a namespace with two NICs, the image's own `prepare boot` (images/rootfs/usr/lib/
//! okd-appliance/prepare) writes the networkd files of a host file whose clusters put two
//! subnets on one NIC and a third on the other, removes the file an earlier config left, and the
//! real systemd-networkd (its own parser, no udev, as in a container) configures every address;
//! systemd-networkd-wait-online says both NICs are configured. The IPv6 address is usable at
//! once (not tentative).
//!
//! Isolation: a network namespace of the test's, a private mount namespace in it with an
//! overlay over /etc (what `prepare` writes under /etc lands in the test's directory) and a
//! tmpfs over /run, so the host's own networkd and files are never touched.

use std::path::Path;

use harness::{Netns, appliance_bin, repo_root, require_path, require_root, require_tools};

const NETWORKD: &str = "/lib/systemd/systemd-networkd";
const WAIT_ONLINE: &str = "/lib/systemd/systemd-networkd-wait-online";

/// A cluster file on `interface` with the appliance at `ip` of `subnet` (and `v6`).
fn cluster(name: &str, interface: &str, subnet: &str, ip: &str, v6: &str, node: &str) -> String {
    format!(
        r#"version: 1
cluster: {{ name: {name}, base_domain: lab.example.com }}
network:
  interface: {interface}
  subnet: {subnet}
  appliance_ip: {ip}
{v6}nodes:
  - {{ name: master-0, role: master, mac: "52:54:00:00:{node}:02", ip: {node_ip} }}
install: {{ ignition_dir: ./{name}-install, artifacts_dir: ./artifacts }}
"#,
        node_ip = ip
            .rsplit_once('.')
            .map(|(net, _)| format!("{net}.2"))
            .unwrap()
    )
}

const SCRIPT: &str = r#"set -eu
mount --make-rprivate /
mkdir -p "$T/upper" "$T/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$T/upper,workdir=$T/work" /etc
mount -t tmpfs tmpfs /run
# networkd waits for udev to announce each link unless /sys is read-only, as in a container.
mount -o remount,ro,bind /sys
mkdir -p /etc/okd-appliance /run/systemd/network /run/systemd/netif
cp "$T"/conf/* /etc/okd-appliance/
chown systemd-network:systemd-network /run/systemd/netif
# The file an earlier config (a cluster file, before per-interface names) left behind.
printf '[Match]\nName=nic9\n\n[Address]\nAddress=10.9.9.9/24\n' \
	>/run/systemd/network/10-okd-appliance-cluster.network
PATH="$BIN:$PATH" "$PREPARE" boot >"$T/prepare.out" 2>&1
ls /run/systemd/network >"$T/files"
ip link set lo up
timeout 30 "$NETWORKD" >"$T/networkd.log" 2>&1 &
pid=$!
status=0
"$WAIT_ONLINE" --interface=nic0:no-carrier --interface=nic1:no-carrier --timeout=15 || status=$?
ip -o addr show >"$T/addrs"
kill "$pid"
wait "$pid" || true
exit "$status"
"#;

#[test]
fn a_host_files_clusters_come_up_on_their_nics_under_systemd_networkd() {
    if !require_root()
        || !require_tools(&["unshare", "mount", "ip", "timeout"])
        || !require_path(NETWORKD)
        || !require_path(WAIT_ONLINE)
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    let conf = t.join("conf");
    std::fs::create_dir(&conf).unwrap();
    let write = |name: &str, text: String| std::fs::write(conf.join(name), text).unwrap();
    write(
        "okd.yml",
        "version: 1\nclusters:\n  - { file: a.yml, id: okd }\n  - test.yml\n  - lab.yml\n".into(),
    );
    write(
        "a.yml",
        cluster(
            "okd",
            "nic0",
            "10.97.0.0/24",
            "10.97.0.1",
            "  ipv6: { subnet: \"fd97::/64\", appliance_ip: \"fd97::1\" }\n",
            "01",
        ),
    );
    write(
        "test.yml",
        cluster("test", "nic0", "10.97.20.0/24", "10.97.20.1", "", "02"),
    );
    write(
        "lab.yml",
        cluster("lab", "nic1", "10.97.30.0/24", "10.97.30.1", "", "03"),
    );

    let ns = Netns::new("nwd").expect("namespace");
    for nic in ["nic0", "nic1"] {
        ns.ip([
            "link",
            "add",
            nic,
            "type",
            "veth",
            "peer",
            "name",
            &format!("{nic}p"),
        ])
        .expect("veth");
    }
    let bin = appliance_bin().unwrap();
    let out = ns
        .exec(["unshare", "-m", "sh", "-c", SCRIPT])
        .env("T", t)
        .env("BIN", bin.parent().unwrap())
        .env(
            "PREPARE",
            repo_root().join("images/rootfs/usr/lib/okd-appliance/prepare"),
        )
        .env("NETWORKD", NETWORKD)
        .env("WAIT_ONLINE", WAIT_ONLINE)
        .output()
        .unwrap();
    let read = |f: &str| std::fs::read_to_string(t.join(f)).unwrap_or_default();
    let logs = format!(
        "{out:?}\nprepare: {}\nnetworkd: {}\naddresses: {}",
        read("prepare.out"),
        read("networkd.log"),
        read("addrs")
    );
    assert!(out.status.success(), "{logs}");

    // One file per NIC, the stale one gone.
    let files: Vec<String> = read("files").lines().map(str::to_owned).collect();
    assert_eq!(
        files,
        [
            "10-okd-appliance-nic0.network",
            "10-okd-appliance-nic1.network"
        ],
        "{logs}"
    );
    // Every cluster's address on its NIC, as networkd set it.
    let addrs = read("addrs");
    for (nic, cidr) in [
        ("nic0", "10.97.0.1/24"),
        ("nic0", "10.97.20.1/24"),
        ("nic0", "fd97::1/64"),
        ("nic1", "10.97.30.1/24"),
    ] {
        let line = addrs
            .lines()
            .find(|l| l.contains(&format!(" {nic} ")) && l.contains(&format!(" {cidr} ")))
            .unwrap_or_else(|| panic!("{cidr} on {nic}: {logs}"));
        assert!(!line.contains("tentative"), "{line}");
    }
    assert!(!addrs.contains("10.9.9.9"), "{logs}");
    // networkd's parser took every line of the files.
    let networkd = read("networkd.log");
    for complaint in [
        "Unknown key",
        "Unknown section",
        "Failed to parse",
        "ignoring",
    ] {
        assert!(!networkd.contains(complaint), "{complaint}: {logs}");
    }
    assert!(Path::new(t).join("upper/okd-appliance/okd.yml").exists());
}
