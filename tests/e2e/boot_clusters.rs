//! Network boot on a host of several clusters: one `okd-appliance serve HOST.yml` whose two
//! clusters share one segment (bridge `br0`, 10.99.0.0/24, okd's appliance at .1 and test's at
//! .21), real VMs (boot_support.rs) playing one node of each cluster: okd's boots BIOS with
//! the iPXE ROM, test's OVMF's own PXE, which chainloads snponly.efi over TFTP from the
//! next-server its DHCP offer named.
//!
//! The node names cross on purpose: okd's VM is `mst0` and okd also has a worker `tst0`; test's
//! VM is `tst0` and test also has a worker `mst0`. So a per-cluster thing kept by node name
//! alone (install markers, ignition, journal lines) would show up under the wrong cluster.
//!
//! Each VM must get its own cluster's DHCP answer (address, host name, server identifier, the
//! firmware's next-server and iPXE's script URL at its cluster's appliance address), its own
//! cluster's script
//! (whose URLs name that address), its own ignition with its own cluster's role config (the
//! two clusters' `master.ign` differ), and be recorded installed under
//! `<state_dir>/clusters/<its id>/` only. Then, from a namespace at each VM node's address,
//! the other cluster's appliance refuses that cluster's ignitions (403, journaled under the
//! other cluster) and hands out the unknown-node script for the MAC.
//!
//! The VMs boot one after the other in one VM slot; every wait is bounded (BOOT_TIMEOUT).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use harness::initramfs::{BootResult, InitramfsBuilder, InstallMarker, Kernel};
use harness::vm::{Firmware, NicRom, VmSpec};
use harness::{Topology, require_tool};

use crate::boot_support::{
    BOOT_TIMEOUT, BootLab, DISK, assert_installed, kernel_cmdline, prerequisites, vm_slot,
};
use crate::clusters::{BASE_DOMAIN, Cluster, get, reserved};
use crate::dhcp_support::Reserved;

fn ip(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, 0, n)
}

/// okd: appliance 10.99.0.1; its VM node `mst0`, and a worker named like test's VM node.
fn okd() -> Cluster {
    Cluster {
        name: "okd",
        interface: "br0",
        subnet: "10.99.0.0/24",
        appliance: ip(1),
        gateway: ip(254),
        pool: None,
        nodes: vec![
            reserved("mst0", "master", "52:54:00:00:00:11", ip(11)),
            reserved("tst0", "worker", "52:54:00:00:00:12", ip(12)),
        ],
    }
}

/// test: appliance 10.99.0.21 on the same segment; its VM node `tst0`, and a worker named
/// like okd's VM node.
fn test() -> Cluster {
    Cluster {
        name: "test",
        interface: "br0",
        subnet: "10.99.0.0/24",
        appliance: ip(21),
        gateway: ip(254),
        pool: None,
        nodes: vec![
            reserved("tst0", "master", "52:54:00:00:00:31", ip(31)),
            reserved("mst0", "worker", "52:54:00:00:00:32", ip(32)),
        ],
    }
}

/// Writes `DIR/NAME.yml` (today's schema, a boot lab's install section: the VMs' disk and
/// serial console) with its own ignition directory, whose `master.ign` is the cluster's own
/// ([`Cluster::master_ign`]); the artifacts directory is shared.
fn write_cluster(dir: &Path, c: &Cluster) {
    c.write_ignition(dir);
    let nodes = c.nodes_yaml();
    let text = format!(
        r#"version: 1
cluster: {{ name: {name}, base_domain: {BASE_DOMAIN} }}
network:
  interface: {interface}
  subnet: {subnet}
  gateway: {gateway}
  appliance_ip: {appliance}
nodes:
{nodes}install:
  ignition_dir: ./{name}-install
  artifacts_dir: ./artifacts
  install_dev: /dev/vda
  kernel_args: ["console=ttyS0"]
"#,
        name = c.name,
        interface = c.interface,
        subnet = c.subnet,
        gateway = c.gateway,
        appliance = c.appliance,
    );
    std::fs::write(dir.join(format!("{}.yml", c.name)), text).expect("cluster file");
}

/// Adds test's appliance address to the bridge, writes both cluster files and `DIR/host.yml`
/// (okd by path, test as `{ file, id }`, state in `DIR/state`), which `check` must accept.
fn write_host(topo: &Topology, dir: &Path, okd: &Cluster, test: &Cluster) -> PathBuf {
    topo.bridge()
        .add_addr(&format!("{}/24", test.appliance))
        .expect("test's appliance address");
    write_cluster(dir, okd);
    write_cluster(dir, test);
    crate::clusters::host_file(dir, &[okd.name, test.name])
}

/// `node`'s install phase as the markers under `<state_dir>/clusters/<id>/` say.
fn phase(lab: &BootLab, id: &str, node: &str) -> &'static str {
    let dir = lab.state_dir().join("clusters").join(id);
    // The appliance prepares each cluster's marker directories at start: an absent marker
    // means something only where they are.
    assert!(
        dir.join("installed").is_dir(),
        "no {}",
        dir.join("installed").display()
    );
    if dir.join("installed").join(node).exists() {
        "installed"
    } else if dir.join("ignition-fetched").join(node).exists() {
        "ignition fetched"
    } else {
        "not installed"
    }
}

/// The appliance's log lines that contain `text`.
fn log_lines(lab: &BootLab, text: &str) -> Vec<String> {
    lab.log()
        .lines()
        .filter(|l| l.contains(text))
        .map(str::to_owned)
        .collect()
}

/// Boots `node` of `own` in a VM (`spec`, with the node's MAC) until its first result, and
/// checks that everything it got came from `own` and nothing from `other`. Returns the result.
fn boot_node(
    lab: &BootLab,
    spec: &VmSpec,
    own: &Cluster,
    other: &Cluster,
    node: &Reserved,
) -> BootResult {
    assert_eq!(spec.mac, node.mac);
    let _tap = lab.tap(&spec.tap);
    let mut vm = lab.vm(spec);
    let result = vm.wait_for_result(1, BOOT_TIMEOUT).unwrap();
    println!("{}: installed after {:?}", node.name, vm.uptime());
    let ip = node.ip.to_string();
    let console = || vm.console_tail();

    // DHCP: its reserved address and host name, from its own cluster's server.
    assert_installed(&result, node.name, &ip, node.mac);
    assert_eq!(
        result.get("dhcp_server"),
        Some(own.appliance.to_string().as_str()),
        "the installer's DHCP server identifier: {result}"
    );
    let serial = vm.serial();
    if spec.rom == NicRom::Firmware {
        // The firmware's PXE: its next-server is its own cluster's appliance address, whose
        // TFTP server handed it snponly.efi.
        for line in [
            format!("Server IP address is {}", own.appliance),
            "NBP filename is snponly.efi".to_owned(),
        ] {
            assert!(serial.contains(&line), "no {line:?}\n{}", console());
        }
        let sent = log_lines(lab, &format!("tftp {ip}:"));
        assert!(
            sent.iter().any(|l| l.contains("sending snponly.efi")),
            "{sent:?}\n{}",
            lab.log()
        );
    }
    // iPXE's DHCP: the boot file is the node's script at its own cluster's appliance address.
    let script = format!("{}/boot/{}.ipxe", own.http(), node.mac.replace(':', "-"));
    assert!(
        serial.contains(&format!("Filename: {script}")),
        "iPXE's boot file {script}\n{}",
        console()
    );
    // The script's kernel arguments name its own cluster's appliance, never the other's.
    let cmdline = kernel_cmdline(&vm);
    let ignition = format!("{}/ignition/{}.ign", own.http(), node.name);
    for arg in [
        format!("coreos.inst.ignition_url={ignition}"),
        format!("coreos.live.rootfs_url={}/", own.http()),
        "coreos.inst.install_dev=/dev/vda".to_owned(),
    ] {
        assert!(cmdline.contains(&arg), "no {arg} in `{cmdline}`");
    }
    assert!(
        !cmdline.contains(&format!("//{}:", other.appliance)),
        "`{cmdline}` names {}'s appliance",
        other.name
    );
    // Its ignition merged its own cluster's role config (the clusters' master.ign differ in
    // length, so role_bytes tells them apart).
    assert_eq!(result.get("mode"), Some("installer"), "{result}");
    assert_eq!(result.get("role_file"), Some("master.ign"), "{result}");
    let own_bytes = own.master_ign().len().to_string();
    assert_eq!(
        result.get("role_bytes"),
        Some(own_bytes.as_str()),
        "{}'s master.ign: {result}",
        own.name
    );
    // The disk holds what this boot fetched.
    let marker = InstallMarker::read(vm.disk().unwrap())
        .unwrap()
        .expect("the install marker on the disk");
    for key in [
        "ignition_host",
        "ignition_sha256",
        "role_bytes",
        "dhcp_server",
        "ip",
    ] {
        assert_eq!(
            marker.get(key),
            result.get(key),
            "marker's {key}: {marker:?}"
        );
    }

    // The appliance journaled all of it under its own cluster, none under the other.
    let (id, name) = (own.name, node.name);
    lab.assert_log(&format!(
        "cluster {id}: {name}: dhcp ack {ip} to {}",
        node.mac
    ));
    lab.assert_log(&format!(
        "cluster {id}: {name}: ipxe script fetched by {ip}:"
    ));
    lab.assert_log(&format!("cluster {id}: {name}: ignition fetched by {ip}:"));
    lab.assert_log(&format!(
        "cluster {id}: {name}: master.ign fetched by {ip}:"
    ));
    lab.assert_log(&format!(
        "cluster {id}: {name}: installed: its installed system fetched master.ign from {ip}:"
    ));
    let strays = log_lines(lab, &format!("cluster {}: {name}: ", other.name));
    assert!(
        strays.is_empty(),
        "{}'s journal has {}'s VM:\n{}",
        other.name,
        own.name,
        strays.join("\n")
    );
    // Installed in its own cluster's state only (the other cluster has a node of that name).
    assert_eq!(phase(lab, id, name), "installed");
    assert_eq!(phase(lab, other.name, name), "not installed");
    let flat = lab.state_dir();
    for kind in ["installed", "ignition-fetched"] {
        assert!(
            !flat.join(kind).join(name).exists(),
            "a host's install markers belong under clusters/<id>/, not in {}",
            flat.join(kind).display()
        );
    }
    result
}

/// From a namespace at `node`'s address (its VM is gone), `other`'s appliance refuses every
/// ignition of `other` (the node named like this one and the VM node of `other`) and its
/// role config, each refusal journaled under `other`; the script for `node`'s MAC there is
/// the unknown-node one.
fn other_refuses(lab: &BootLab, node: &Reserved, other: &Cluster) {
    let label = format!("x{}", node.ip.octets()[3]);
    let ns = lab
        .topo
        .add_node(&label, &format!("{}/24", node.ip), None)
        .expect("a node namespace at the VM's address");
    let from = node.ip;
    for asked in other.nodes.iter().map(|n| n.name) {
        let url = format!("{}/ignition/{asked}.ign", other.http());
        let (code, body) = get(&ns, &url);
        assert_eq!(code, "403", "GET {url} from {from}: {body}");
        let line = format!(
            "cluster {}: {asked}: ignition refused to {from}:",
            other.name
        );
        lab.assert_log(&line);
        let refused = log_lines(lab, &line);
        assert!(
            refused
                .iter()
                .all(|l| l.contains("(403): not the node's address")),
            "{refused:?}"
        );
    }
    let role = format!("{}/ignition/roles/master.ign", other.http());
    let (code, body) = get(&ns, &role);
    assert_eq!(code, "403", "GET {role} from {from}: {body}");
    lab.assert_log(&format!(
        "cluster {}: master.ign refused to {from}:",
        other.name
    ));
    let url = format!("{}/boot/{}.ipxe", other.http(), node.mac.replace(':', "-"));
    let (code, script) = get(&ns, &url);
    assert_eq!(code, "200", "GET {url}: {script}");
    assert!(
        script.contains("no node in the cluster config has MAC"),
        "{} handed out a script for another cluster's node:\n{script}",
        other.name
    );
}

#[test]
fn a_vm_of_each_cluster_boots_its_own_script_and_installs_with_its_own_ignition() {
    let (okd, test) = (okd(), test());
    let (okd_vm, test_vm) = (okd.node("mst0"), test.node("tst0"));
    let specs = [
        VmSpec::new(Firmware::Bios, okd_vm.mac, "tap0").with_disk(DISK),
        VmSpec::new(Firmware::Uefi, test_vm.mac, "tap1")
            .with_rom(NicRom::Firmware)
            .with_disk(DISK),
    ];
    if !prerequisites(&[&specs[0], &specs[1]]) || !require_tool("curl") {
        return;
    }
    assert_ne!(
        okd.master_ign().len(),
        test.master_ign().len(),
        "the clusters' role configs must tell them apart by length"
    );
    let _slot = vm_slot();
    let image = InitramfsBuilder::new(&Kernel::find().unwrap());
    let mut lab = BootLab::start_host(
        "bcl",
        &image,
        &format!("{}/24", okd.appliance),
        |topo, dir| write_host(topo, dir, &okd, &test),
    );
    for listening in [
        "listening for http/tcp on 10.99.0.1:8080",
        "listening for http/tcp on 10.99.0.21:8080",
    ] {
        lab.assert_log(listening);
    }

    // okd's VM first: once it is installed, test's VM (test has an okd-named worker, okd a
    // test-named one) must still get an install of its own.
    let first = boot_node(&lab, &specs[0], &okd, &test, &okd_vm);
    let second = boot_node(&lab, &specs[1], &test, &okd, &test_vm);
    assert_ne!(
        first.get("ignition_sha256"),
        second.get("ignition_sha256"),
        "each node has its own ignition"
    );
    // Neither VM touched the other cluster's namesake worker.
    assert_eq!(phase(&lab, "okd", "tst0"), "not installed");
    assert_eq!(phase(&lab, "test", "mst0"), "not installed");

    // The other cluster's appliance refuses each VM node's address.
    other_refuses(&lab, &okd_vm, &test);
    other_refuses(&lab, &test_vm, &okd);
    // Refusals change no install state.
    for (id, name) in [("okd", "mst0"), ("test", "tst0")] {
        assert_eq!(phase(&lab, id, name), "installed", "{id}/{name}");
    }
    for (id, name) in [("okd", "tst0"), ("test", "mst0")] {
        assert_eq!(phase(&lab, id, name), "not installed", "{id}/{name}");
    }
    lab.app
        .assert_running()
        .expect("okd-appliance is still running");
}
