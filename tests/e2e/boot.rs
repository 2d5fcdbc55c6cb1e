//! The boot chain in real VMs (qemu TCG on a tap of the services bridge) against the real
//! appliance serving DHCP, TFTP and HTTP, with Debian's kernel and the test initramfs
//! (harness::initramfs) playing CoreOS: BIOS with the iPXE ROM, OVMF's own PXE chainloading
//! snponly.efi over TFTP, OVMF with the iPXE ROM, OVMF's HTTP boot; an unknown MAC; a machine
//! with a node's MAC at another address; an install that fails after fetching its ignition; a
//! dual-stack node, whose kernel arguments give it its IPv6 address; the single node of a
//! single-node cluster booting the live system that installs itself.

use std::time::Duration;

use harness::initramfs::{DISK_BOOT_BANNER, InitramfsBuilder, InstallMarker, Kernel, Outcome};
use harness::vm::{Firmware, NicRom, UefiNetBoot, VmSpec};

use crate::boot_support::{
    BOOT_TIMEOUT, BootLab, DISK, HTTP6, MST0_IP, MST0_IP6, MST0_MAC, STRANGER_MAC, WRK0_MAC,
    assert_dual_stack, assert_installed, kernel_cmdline, mst0_ip_args, prerequisites, vm_slot,
};
use crate::support::appliance;

#[test]
fn bios_ipxe_rom_installs_then_boots_from_disk() {
    let spec = VmSpec::new(Firmware::Bios, MST0_MAC, "tap0").with_disk(DISK);
    if !prerequisites(&[&spec]) {
        return;
    }
    let _slot = vm_slot();
    let lab = BootLab::start("bbio", &InitramfsBuilder::new(&Kernel::find().unwrap()));
    let _tap = lab.tap("tap0");
    let mut vm = lab.vm(&spec);

    let first = vm.wait_for_result(1, BOOT_TIMEOUT).unwrap();
    assert_installed(&first, "mst0", MST0_IP, MST0_MAC);
    let banner = format!("{DISK_BOOT_BANNER} of mst0");
    vm.wait_for_serial(&banner, BOOT_TIMEOUT).unwrap();
    let serial = vm.serial();
    println!("booted from disk after {:?}", vm.uptime());
    assert!(
        serial.contains("mst0 is installed, booting from disk"),
        "the second boot got the local-boot script\n{}",
        vm.console_tail()
    );
    assert_eq!(vm.results().len(), 1, "no reinstall\n{}", vm.console_tail());
    let marker = InstallMarker::read(vm.disk().unwrap())
        .unwrap()
        .expect("marker");
    assert_eq!(marker.get("ignition_sha256"), first.get("ignition_sha256"));
    // SeaBIOS copies iPXE's text to the serial port late, so it may interleave with what the
    // boot sector writes to the port directly: match the start of iPXE's line only.
    let san = serial
        .rfind("Booting from SAN device")
        .expect("iPXE booted the disk");
    assert!(san < serial.rfind(&banner).unwrap());
    lab.assert_log(&format!("mst0: dhcp ack {MST0_IP} to {MST0_MAC}"));
    lab.assert_log("mst0: ignition fetched by 10.99.0.11:");
    lab.assert_log("mst0: master.ign fetched by 10.99.0.11:");
    lab.assert_log("mst0: installed: its installed system fetched master.ign from 10.99.0.11:");
}

/// What a UEFI test waits for after the install.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    /// The next power-on gets the local-boot script (iPXE `exit 1`s to the firmware, which
    /// goes on through its other network entries) and then boots the disk.
    LocalBoot,
    /// Nothing (the first boot is the point; a second costs ~40 s under TCG).
    Stop,
}

/// How long a UEFI power-on may take to walk its network entries (PXEv4, PXEv6, HTTPv4,
/// HTTPv6: two IPv6 timeouts under TCG) to the disk.
const UEFI_WALK_TIMEOUT: Duration = Duration::from_secs(300);

/// Boots a UEFI VM with `spec` until the test initramfs installed mst0 (and, with
/// `Then::LocalBoot`, the next power-on got the local-boot script and booted the disk);
/// returns the lab (its log) and the VM's console.
fn uefi_install(prefix: &str, spec: &VmSpec, then: Then) -> Option<(BootLab, String)> {
    if !prerequisites(&[spec]) {
        return None;
    }
    let _slot = vm_slot();
    let lab = BootLab::start(prefix, &InitramfsBuilder::new(&Kernel::find().unwrap()));
    let _tap = lab.tap("tap0");
    let mut vm = lab.vm(spec);
    let first = vm.wait_for_result(1, BOOT_TIMEOUT).unwrap();
    assert_installed(&first, "mst0", MST0_IP, MST0_MAC);
    println!("installed after {:?}", vm.uptime());
    if then == Then::LocalBoot {
        vm.wait_for_serial("mst0 is installed, booting from disk", BOOT_TIMEOUT)
            .unwrap();
        println!("local-boot script after {:?}", vm.uptime());
        // `exit 0` here returned EFI_SUCCESS and OVMF opened its setup menu instead.
        let banner = format!("{DISK_BOOT_BANNER} of mst0");
        vm.wait_for_serial(&banner, UEFI_WALK_TIMEOUT)
            .unwrap_or_else(|e| {
                std::fs::write("/tmp/uefi-serial.log", vm.serial()).unwrap();
                panic!("{e:#}\n{}", vm.console_tail())
            });
        println!("booted its disk after {:?}", vm.uptime());
        assert!(!vm.serial().contains("UiApp"), "{}", vm.console_tail());
        assert_eq!(vm.results().len(), 1, "no reinstall\n{}", vm.console_tail());
    }
    let serial = vm.serial();
    lab.assert_log("mst0: ignition fetched by 10.99.0.11:");
    lab.assert_log("mst0: installed: its installed system fetched master.ign from 10.99.0.11:");
    Some((lab, serial))
}

#[test]
fn uefi_firmware_pxe_chainloads_ipxe_over_tftp() {
    let spec = VmSpec::new(Firmware::Uefi, MST0_MAC, "tap0")
        .with_rom(NicRom::Firmware)
        .with_disk(DISK);
    let Some((lab, serial)) = uefi_install("bupx", &spec, Then::LocalBoot) else {
        return;
    };
    assert!(serial.contains("Start PXE over IPv4"), "OVMF's own PXE");
    let log = lab.log();
    let before = assert_chainloaded(&log);
    let tftp = before
        .find("tftp 10.99.0.11:")
        .expect("snponly.efi over TFTP first");
    assert!(before[tftp..].contains("sending snponly.efi"), "{log}");
    assert!(tftp < before.rfind("mst0: dhcp ack").unwrap(), "{log}");
}

/// The firmware's DHCP, then iPXE's own (user class iPXE), before the first script fetch;
/// returns the log up to that fetch.
fn assert_chainloaded(log: &str) -> &str {
    let script = log
        .find("mst0: ipxe script fetched")
        .expect("script fetched");
    let before = &log[..script];
    assert_eq!(
        before.matches("mst0: dhcp ack").count(),
        2,
        "the firmware's DHCP, then iPXE's:\n{log}"
    );
    before
}

#[test]
fn uefi_ipxe_rom_installs_then_boots_from_disk() {
    let spec = VmSpec::new(Firmware::Uefi, MST0_MAC, "tap0").with_disk(DISK);
    let Some((lab, serial)) = uefi_install("buip", &spec, Then::LocalBoot) else {
        return;
    };
    // The install: the ROM is iPXE already, so nothing came over TFTP before it.
    let install = lab.log();
    let installed = install.find("mst0: installed").expect("installed");
    assert!(!install[..installed].contains("tftp 10.99"), "{install}");
    // After it, every network entry of the power-on was told to boot the disk.
    assert!(
        serial
            .matches("mst0 is installed, booting from disk")
            .count()
            >= 2,
        "the ROM's entry and OVMF's own PXE both went on to the next boot option\n{serial}"
    );
}

/// A node whose installer fetched its ignition and wrote its disk, but whose installed system
/// has not reported yet: every network entry of its next power-on is told to try the disk,
/// and the disk boots. (Before, the ROM's entry used up the one offer, OVMF's own PXE entry
/// got the install script, and the node was installed again at every power-on.)
#[test]
fn uefi_a_node_whose_installer_fetched_its_ignition_tries_its_disk_in_that_power_on() {
    let spec = VmSpec::new(Firmware::Uefi, MST0_MAC, "tap0").with_disk(DISK);
    if !prerequisites(&[&spec]) {
        return;
    }
    let _slot = vm_slot();
    let image = InitramfsBuilder::new(&Kernel::find().unwrap()).without_first_boot();
    let lab = BootLab::start("bupo", &image);
    let _tap = lab.tap("tap0");
    let mut vm = lab.vm(&spec);
    let first = vm.wait_for_result(1, BOOT_TIMEOUT).unwrap();
    assert_eq!(first.outcome, Outcome::Installed, "{first}");
    assert_eq!(first.get("role"), Some("skipped"), "{first}");
    assert_eq!(install_state(&lab, "mst0"), "ignition fetched");

    let banner = format!("{DISK_BOOT_BANNER} of mst0");
    vm.wait_for_serial(&banner, UEFI_WALK_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", vm.console_tail()));
    println!("booted its disk after {:?}", vm.uptime());
    let serial = vm.serial();
    let after = &serial[serial.find("okd-e2e-result:").unwrap()..];
    let offered = after
        .matches("mst0 fetched its ignition; booting its disk")
        .count();
    assert!(offered >= 2, "one answer for every network entry\n{after}");
    assert!(!after.contains("installing mst0"), "{}", vm.console_tail());
    assert_eq!(vm.results().len(), 1, "no reinstall\n{}", vm.console_tail());
    assert_eq!(lab.log().matches("mst0: ignition fetched").count(), 1);
    assert_eq!(install_state(&lab, "mst0"), "ignition fetched");
}

#[test]
fn uefi_http_boot_chainloads_ipxe_over_http() {
    let spec = VmSpec::new(Firmware::Uefi, MST0_MAC, "tap0")
        .with_rom(NicRom::Firmware)
        .with_uefi_net_boot(UefiNetBoot::Http)
        .with_disk(DISK);
    let Some((lab, serial)) = uefi_install("buht", &spec, Then::Stop) else {
        return;
    };
    assert!(
        serial.contains("Start HTTP Boot over IPv4"),
        "OVMF's HTTP boot"
    );
    assert!(
        serial.contains("URI: http://10.99.0.1:8080/snponly.efi"),
        "the offer for the HTTPClient class named snponly.efi's URL"
    );
    let log = lab.log();
    assert!(
        !log.contains("tftp 10.99"),
        "snponly.efi came over HTTP:\n{log}"
    );
    assert_chainloaded(&log);
}

#[test]
fn an_unknown_mac_gets_the_unknown_node_script_and_boots_locally() {
    let spec = VmSpec::new(Firmware::Bios, STRANGER_MAC, "tap0").with_disk(DISK);
    if !prerequisites(&[&spec]) {
        return;
    }
    let _slot = vm_slot();
    let lab = BootLab::start("bunk", &InitramfsBuilder::new(&Kernel::find().unwrap()));
    let _tap = lab.tap("tap0");
    let mut vm = lab.vm(&spec);
    vm.wait_for_serial(
        "no node in the cluster config has MAC 52-54-00-00-00-99",
        BOOT_TIMEOUT,
    )
    .unwrap();
    // iPXE hands over to the local disk (blank here, so the BIOS goes on to its own order).
    vm.wait_for_serial("Booting from SAN device", Duration::from_secs(30))
        .unwrap();
    assert!(vm.results().is_empty(), "{}", vm.console_tail());
    let log = lab.log();
    assert!(
        log.contains("iPXE script for unknown MAC 52-54-00-00-00-99"),
        "{log}"
    );
    assert!(!log.contains("ignition fetched"), "{log}");
}

#[test]
fn a_machine_with_a_nodes_mac_at_another_address_cannot_fetch_its_ignition() {
    let spec = VmSpec::new(Firmware::Bios, MST0_MAC, "tap0").with_disk(DISK);
    if !prerequisites(&[&spec]) {
        return;
    }
    let _slot = vm_slot();
    // DHCP gives iPXE mst0's address by MAC; the "installer" then sits at 10.99.0.50.
    let thief = InitramfsBuilder::new(&Kernel::find().unwrap())
        .static_address("10.99.0.50".parse().unwrap(), 24);
    let lab = BootLab::start("bthf", &thief);
    let _tap = lab.tap("tap0");
    let mut vm = lab.vm(&spec);
    let result = vm.wait_for_result(1, BOOT_TIMEOUT).unwrap();
    assert_eq!(result.outcome, Outcome::Failed, "{result}");
    assert_eq!(result.get("step"), Some("ignition"), "{result}");
    assert_eq!(result.get("ignition"), Some("403"), "{result}");
    assert_eq!(result.get("ip"), Some("10.99.0.50"), "{result}");
    assert!(
        vm.wait_exit(Duration::from_secs(30)).unwrap(),
        "powered off"
    );
    lab.assert_log("mst0: ignition refused to 10.99.0.50:");
    assert!(!lab.log().contains("mst0: ignition fetched"));
    assert_eq!(install_state(&lab, "mst0"), "not installed");
}

#[test]
fn a_failed_install_is_not_marked_installed_and_installs_again_instead_of_booting_a_blank_disk() {
    // wrk0's install_dev (/dev/sdz) does not exist in the VM: the "installer" fetches the
    // ignition, then fails as coreos-installer does, never reaching a first boot.
    let spec = VmSpec::new(Firmware::Bios, WRK0_MAC, "tap0").with_disk(DISK);
    if !prerequisites(&[&spec]) {
        return;
    }
    let _slot = vm_slot();
    let lab = BootLab::start("bfai", &InitramfsBuilder::new(&Kernel::find().unwrap()));
    let _tap = lab.tap("tap0");
    let mut vm = lab.vm(&spec);
    let first = vm.wait_for_result(1, BOOT_TIMEOUT).unwrap();
    assert_eq!(first.outcome, Outcome::InstallFailed, "{first}");
    assert_eq!(first.get("ignition"), Some("200"), "{first}");
    assert_eq!(first.get("install_dev"), Some("/dev/sdz"), "{first}");

    // Next boot: the script tries the disk, which does not boot, and installs again. (Marked
    // installed at the ignition fetch, the node got the local-boot script, iPXE failed on the
    // blank disk, and the BIOS went round its boot order back to that script, forever.)
    let second = vm.wait_for_result(2, BOOT_TIMEOUT).unwrap();
    assert_eq!(second.outcome, Outcome::InstallFailed, "{second}");
    let serial = vm.serial();
    let after_first = &serial[serial.find("okd-e2e-result:").unwrap()..];
    let tried = after_first
        .find("Booting from SAN device")
        .expect("the second boot tried the disk");
    let gave_up = after_first
        .find("the disk of wrk0 did not boot")
        .expect("and went on to install");
    assert!(tried < gave_up, "{}", vm.console_tail());
    assert!(!serial.contains(DISK_BOOT_BANNER));
    assert!(
        InstallMarker::read(vm.disk().unwrap()).unwrap().is_none(),
        "nothing was written to the disk"
    );
    lab.assert_log("wrk0: installing again: no installed system fetched its role config");
    assert!(!lab.log().contains("wrk0: installed"), "{}", lab.log());
    assert_eq!(install_state(&lab, "wrk0"), "ignition fetched");
}

/// What `openshift-install create single-node-ignition-config` writes for the live system, cut
/// to the part the test initramfs plays: install-to-disk.sh, which runs coreos-installer to the
/// `bootstrapInPlace.installationDisk` (openshift/installer,
/// data/data/bootstrap/bootstrap-in-place/files/usr/local/bin/install-to-disk.sh.template).
const LIVE_CONFIG: &str = r#"{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/usr/local/bin/install-to-disk.sh","mode":365,"contents":{"source":"data:,coreos-installer%20install%20-n%20-i%20/opt/openshift/master.ign%20/dev/vda%0A"}}]}}"#;

#[test]
fn a_single_node_boots_the_live_system_with_its_ignition_and_installs_itself() {
    let spec = VmSpec::new(Firmware::Bios, MST0_MAC, "tap0").with_disk(DISK);
    if !prerequisites(&[&spec]) {
        return;
    }
    let _slot = vm_slot();
    // One master, no bootstrap node: a single-node cluster.
    let config = format!(
        r#"version: 1
cluster: {{ name: sno, base_domain: lab.example.com }}
network:
  interface: br0
  subnet: 10.99.0.0/24
  appliance_ip: 10.99.0.1
nodes:
  - {{ name: mst0, role: master, mac: "{MST0_MAC}", ip: {MST0_IP} }}
install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  install_dev: /dev/vda
  kernel_args: ["console=ttyS0"]
listen: {{ dns: [] }}
"#
    );
    let lab = BootLab::start_with(
        "bsno",
        &InitramfsBuilder::new(&Kernel::find().unwrap()),
        |_| (config, Vec::new()),
    );
    std::fs::write(
        lab.dir()
            .join("install_dir/bootstrap-in-place-for-live-iso.ign"),
        LIVE_CONFIG,
    )
    .unwrap();
    let _tap = lab.tap("tap0");
    let mut vm = lab.vm(&spec);

    let first = vm.wait_for_result(1, BOOT_TIMEOUT).unwrap();
    assert_installed(&first, "mst0", MST0_IP, MST0_MAC);
    // The live system got its config from ignition.config.url (no coreos.inst.* argument),
    // merged the bootstrap-in-place config, and took the disk from it.
    assert_eq!(first.get("mode"), Some("live"), "{first}");
    assert_eq!(
        first.get("role_file"),
        Some("bootstrap-in-place-for-live-iso.ign"),
        "{first}"
    );
    let bytes = LIVE_CONFIG.len().to_string();
    assert_eq!(first.get("role_bytes"), Some(bytes.as_str()), "{first}");
    let serial = vm.serial();
    assert!(
        serial.contains("ignition.config.url=http://10.99.0.1:8080/ignition/mst0.ign"),
        "{}",
        vm.console_tail()
    );

    // Its next network boot tries the disk: the installed system never reports here.
    let banner = format!("{DISK_BOOT_BANNER} of mst0");
    vm.wait_for_serial(&banner, BOOT_TIMEOUT).unwrap();
    assert!(
        vm.serial()
            .contains("mst0 fetched its ignition; booting its disk"),
        "{}",
        vm.console_tail()
    );
    assert_eq!(vm.results().len(), 1, "no reinstall\n{}", vm.console_tail());
    lab.assert_log("mst0: ignition fetched by 10.99.0.11:");
    lab.assert_log("bootstrap-in-place-for-live-iso.ign fetched by the live system of mst0");
    // The live system's merge is not an installed system's first boot.
    assert!(!lab.log().contains("mst0: installed"), "{}", lab.log());
    assert_eq!(install_state(&lab, "mst0"), "ignition fetched");
}

/// The node's install phase as the marker files say.
fn install_state(lab: &BootLab, node: &str) -> &'static str {
    let state = lab.state_dir();
    if state.join("installed").join(node).exists() {
        "installed"
    } else if state.join("ignition-fetched").join(node).exists() {
        "ignition fetched"
    } else {
        "not installed"
    }
}

/// A dual-stack node (BIOS, iPXE ROM): its script's `ip=` arguments reach the kernel, and read
/// as NetworkManager's initramfs reads them they give the node its IPv6 address, static with
/// the gateway, and leave IPv4 to the appliance's DHCP. The node then fetches its ignition from
/// the appliance's IPv6 address, which answers it only because the address is mst0's, and
/// the role config over IPv4.
#[test]
fn a_dual_stack_node_gets_its_ipv6_address_from_its_kernel_arguments() {
    let spec = VmSpec::new(Firmware::Bios, MST0_MAC, "tap0").with_disk(DISK);
    if !prerequisites(&[&spec]) {
        return;
    }
    let _slot = vm_slot();
    let image = InitramfsBuilder::new(&Kernel::find().unwrap()).ignition_host(HTTP6);
    let lab = BootLab::start_with("bds", &image, |_| {
        (BootLab::dual_stack_config(), Vec::new())
    });
    let config = lab.dir().join("okd.yml");
    let out = appliance(["node", "kargs", "--pxe", "mst0", config.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    let ip_args = mst0_ip_args();
    assert!(line.contains(&ip_args), "{line}");

    let _tap = lab.tap("tap0");
    let mut vm = lab.vm(&spec);
    let result = vm.wait_for_result(1, BOOT_TIMEOUT).unwrap();
    println!("installed after {:?}", vm.uptime());
    // IPv4 from the appliance's DHCP, everything fetched, the disk written.
    assert_installed(&result, "mst0", MST0_IP, MST0_MAC);
    assert_dual_stack(&result);
    let cmdline = kernel_cmdline(&vm);
    assert!(cmdline.contains(&ip_args), "the kernel saw `{cmdline}`");
    lab.assert_log(&format!("mst0: dhcp ack {MST0_IP} to {MST0_MAC}"));
    lab.assert_log(&format!("mst0: ignition fetched by [{MST0_IP6}]:"));
    lab.assert_log(&format!("mst0: master.ign fetched by {MST0_IP}:"));
    lab.assert_log("mst0: installed: its installed system fetched master.ign from 10.99.0.11:");
}
