//! The boot chain in real VMs (qemu TCG on a tap of the services bridge) against the real
//! appliance serving DHCP, TFTP and HTTP, with Debian's kernel and the test initramfs
//! (harness::initramfs) playing CoreOS: BIOS with the iPXE ROM, OVMF's own PXE chainloading
//! ipxe.efi over TFTP, OVMF with the iPXE ROM, OVMF's HTTP boot; an unknown MAC; a machine
//! with a node's MAC at another address; an install that fails after fetching its ignition.

use harness::initramfs::{DISK_BOOT_BANNER, InitramfsBuilder, InstallMarker, Kernel};
use harness::vm::{Firmware, VmSpec};

use crate::boot_support::{
    BOOT_TIMEOUT, BootLab, DISK, MST0_IP, MST0_MAC, assert_installed, prerequisites, vm_slot,
};

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
    lab.assert_log(&format!("mst0: dhcp ack {MST0_IP} to {MST0_MAC}"));
    lab.assert_log("mst0: ignition fetched by 10.99.0.11:");
    lab.assert_log("mst0: master.ign fetched by 10.99.0.11:");
}
