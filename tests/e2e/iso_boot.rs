//! The ISO install path in real VMs: qemu (TCG) boots `/iso/<node>.iso` straight from the
//! appliance's URL as a CD-ROM (qemu's curl block driver reads it with HTTP Range requests, as
//! a BMC's virtual media does), under SeaBIOS through ISOLINUX and under OVMF through GRUB EFI.
//! The base ISO is a CoreOS-structured test ISO (harness::liveiso) with Debian's kernel and the
//! test initramfs (harness::initramfs); the kernel must see the node's arguments, from the
//! ISO's embed areas, on its command line, take its address by DHCP and fetch its ignition.
//! Under BIOS the boot order is the one the README gives for Proxmox, disk then CD: the blank
//! disk is skipped, the ISO installs, and the next boot comes from the disk, not the ISO again.
//! A dual-stack node's ISO carries its `ip=` arguments: it comes up with its IPv6 address and
//! fetches its ignition over IPv6.

use std::path::PathBuf;

use harness::initramfs::{DISK_BOOT_BANNER, InitramfsBuilder, Kernel, Outcome};
use harness::liveiso::{self, LiveIsoBuilder};
use harness::vm::{BootFrom, Firmware, VmSpec};
use harness::{require_path, require_tools};

use crate::boot_support::{
    BOOT_TIMEOUT, BootLab, DISK, HTTP6, MST0_IP, MST0_MAC, assert_dual_stack, kernel_cmdline,
    mst0_ip_args, prerequisites, vm_slot,
};
use crate::support::appliance;

/// The base URL of the boot lab's appliance.
const BASE: &str = "http://10.99.0.1:8080";
/// qemu's block driver for http:// images (Debian: qemu-block-extra).
const QEMU_CURL: &str = "/usr/lib/x86_64-linux-gnu/qemu/block-curl.so";

fn iso_prerequisites(spec: &VmSpec) -> bool {
    prerequisites(&[spec])
        && require_tools(liveiso::TOOLS)
        && liveiso::FILES.iter().all(require_path)
        && require_path(QEMU_CURL)
        && require_tools(&["curl"])
}

/// Which lab config the ISO is made for.
#[derive(Clone, Copy, PartialEq)]
enum Stack {
    /// IPv4 only: no `ip=` arguments.
    Single,
    /// mst0 with an IPv6 address ([`BootLab::dual_stack_config`]); its test initramfs fetches
    /// the ignition from the appliance's IPv6 address.
    Dual,
}

/// Boots mst0's ISO from its URL with `firmware` in `order`; checks the install and what the
/// kernel saw, and with the disk first that the next boot is from the disk.
fn boot_node_iso(firmware: Firmware, order: BootFrom, stack: Stack, prefix: &str) {
    let url = format!("{BASE}/iso/mst0.iso");
    let mut spec = VmSpec::new(firmware, MST0_MAC, "tap0")
        .with_disk(DISK)
        .with_cdrom(&PathBuf::from(&url))
        .with_boot(order);
    // GRUB 2.06 under OVMF fails to load Debian's kernel with 256 MiB ("out of memory").
    spec.memory_mib = 512;
    if !iso_prerequisites(&spec) {
        return;
    }
    let _slot = vm_slot();
    let image = InitramfsBuilder::new(&Kernel::find().unwrap());
    let lab = match stack {
        Stack::Single => BootLab::start(prefix, &image),
        Stack::Dual => BootLab::start_with(prefix, &image.ignition_host(HTTP6), |_| {
            (BootLab::dual_stack_config(), Vec::new())
        }),
    };
    let artifacts = lab.dir().join("artifacts");
    // The base ISO boots the lab's kernel and test initramfs, as the PXE path does.
    LiveIsoBuilder::new(&artifacts.join("kernel"), &artifacts.join("initramfs.img"))
        .build(&lab.dir().join("iso-work"), &artifacts.join("live.iso"))
        .expect("test live ISO");
    let config = lab.dir().join("okd.yml");
    let out = appliance(["node", "kargs", "mst0", config.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap().trim_end().to_owned();
    assert!(
        line.contains(&format!(
            "coreos.inst.ignition_url={BASE}/ignition/mst0.ign"
        )),
        "{line}"
    );
    assert!(!line.contains("rootfs_url"), "{line}");
    assert_eq!(
        line.contains(&mst0_ip_args()),
        stack == Stack::Dual,
        "{line}"
    );

    // Served to any address (it holds no secret); the ignition it points at is not.
    let other = lab.topo.add_node("oth", "10.99.0.50/24", None).unwrap();
    let head = other
        .netns()
        .exec(["curl", "-s", "-I", "--max-time", "10", &url])
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let ign = other
        .netns()
        .exec([
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
            &format!("{BASE}/ignition/mst0.ign"),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&ign.stdout), "403");

    let _tap = lab.tap("tap0");
    let mut vm = lab.vm(&spec);
    let result = vm.wait_for_result(1, BOOT_TIMEOUT).unwrap();
    println!(
        "{firmware:?}: installed from the ISO after {:?}",
        vm.uptime()
    );
    assert_eq!(result.outcome, Outcome::Installed, "{result}");
    assert_eq!(result.get("ip"), Some(MST0_IP), "{result}");
    assert_eq!(result.get("ignition"), Some("200"), "{result}");
    assert_eq!(result.get("ignition_host"), Some("mst0"), "{result}");
    assert_eq!(result.get("rootfs"), Some("live-iso"), "{result}");
    assert_eq!(result.get("disk"), Some("/dev/vda"), "{result}");
    if stack == Stack::Dual {
        assert_dual_stack(&result);
    } else {
        assert_eq!(result.get("ip_args"), None, "{result}");
    }
    // The kernel got the ISO's own arguments followed by exactly the node's line.
    let cmdline = kernel_cmdline(&vm);
    let expected = format!(
        "console=ttyS0,115200n8 coreos.liveiso=okd-e2e ignition.firstboot \
         ignition.platform.id=metal {line}"
    );
    assert!(
        cmdline.ends_with(&expected),
        "the kernel saw `{cmdline}`, expected it to end with `{expected}`"
    );
    lab.assert_log("mst0: live ISO read by 10.99.0.1:");
    lab.assert_log(match stack {
        Stack::Single => "mst0: ignition fetched by 10.99.0.11:",
        Stack::Dual => "mst0: ignition fetched by [fd99::11]:",
    });
    if order == BootFrom::DiskThenCdrom {
        let banner = format!("{DISK_BOOT_BANNER} of mst0");
        vm.wait_for_serial(&banner, BOOT_TIMEOUT).unwrap();
        assert_eq!(vm.results().len(), 1, "no reinstall\n{}", vm.console_tail());
    }
}

#[test]
fn bios_boots_the_node_iso_over_http_installs_then_boots_from_disk() {
    boot_node_iso(
        Firmware::Bios,
        BootFrom::DiskThenCdrom,
        Stack::Single,
        "isob",
    );
}

/// The CD first: the test initramfs writes a BIOS boot sector, which OVMF does not boot, so
/// the disk-first order would reinstall here (a real CoreOS install writes an ESP).
#[test]
fn uefi_boots_the_node_iso_over_http_and_installs() {
    boot_node_iso(Firmware::Uefi, BootFrom::Cdrom, Stack::Single, "isou");
}

/// A dual-stack node's ISO (BIOS, CD only: the disk boot afterwards is the test above's).
#[test]
fn a_dual_stack_nodes_iso_gives_it_its_ipv6_address() {
    boot_node_iso(Firmware::Bios, BootFrom::Cdrom, Stack::Dual, "isod");
}
