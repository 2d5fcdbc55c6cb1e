//! The generated documents: per-node iPXE scripts and per-node ignition configs, derived once
//! with the plan so that what `render` shows is what the boot server sends.
//!
//! Architecture invariant: pure text from the boot parameters; no secrets here (role ignition
//! files, which hold them, are served from disk and never rendered or logged).

use serde_json::json;

use super::BootParams;
use crate::vocabulary::{MacAddr, RoleConfig};

/// What the boot server sends a node, all of it derived here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Documents {
    /// The iPXE script that installs CoreOS.
    pub install_script: String,
    /// The iPXE script between the installer's ignition fetch and the installed system's first
    /// report: boot the disk, install again when it does not boot.
    pub first_boot_script: String,
    /// The iPXE script once the node is installed: boot the disk.
    pub local_boot_script: String,
    /// The node's own ignition config (its role's merged in, its host name set).
    pub ignition: String,
}

/// The documents of the node `boot` describes, whose role config is at `role_url`.
pub fn derive(boot: &BootParams, role_url: &str) -> Documents {
    Documents {
        install_script: install_script(boot),
        first_boot_script: first_boot_script(boot),
        local_boot_script: local_boot_script(&boot.node, boot.mac),
        ignition: node_ignition(&boot.node, role_url),
    }
}

/// Installs CoreOS from the live PXE artifacts. `initrd=main` names the initramfs for UEFI
/// kernels (EFI stub loading); BIOS kernels ignore it.
fn install_script(boot: &BootParams) -> String {
    format!(
        "#!ipxe\n\
         # okd-appliance: install {node} ({role}, {mac}) to {dev}\n\
         {install}",
        node = boot.node,
        role = if boot.role_config == RoleConfig::SingleNode {
            "single node, bootstrap in place"
        } else {
            boot.role.as_str()
        },
        mac = boot.mac,
        dev = boot.install_dev,
        install = install_lines(boot),
    )
}

fn install_lines(boot: &BootParams) -> String {
    let what = if boot.role_config == RoleConfig::SingleNode {
        "booting the live system of"
    } else {
        "installing"
    };
    format!(
        "echo okd-appliance: {what} {node} to {dev}\n\
         kernel {kernel} initrd=main {args}\n\
         initrd --name main {initramfs}\n\
         boot\n",
        node = boot.node,
        dev = boot.install_dev,
        kernel = boot.kernel_url,
        args = boot.kernel_args.join(" "),
        initramfs = boot.initramfs_url,
    )
}

/// After the installer fetched the ignition and before the installed system fetched its role
/// config: the disk was probably just written, so boot it; if it does not boot (the install
/// failed), install again. On BIOS, iPXE's `sanboot` returns when the disk is not bootable and
/// the script goes on to the install. On UEFI, iPXE hands the machine back to the firmware's
/// boot order with a failure ([`UEFI_NEXT_BOOT_OPTION`]); every network entry the firmware
/// tries in the same power-on gets this script again, and only a network boot after that
/// power-on brings the install script (`install_state::observe`).
fn first_boot_script(boot: &BootParams) -> String {
    format!(
        "#!ipxe\n\
         # okd-appliance: {node} ({mac}) fetched its ignition; its installed system has not fetched its role config yet\n\
         echo okd-appliance: {node} fetched its ignition; booting its disk (installing again if it does not boot)\n\
         {UEFI_NEXT_BOOT_OPTION}\n\
         sanboot --no-describe --drive 0x80 ||\n\
         echo okd-appliance: the disk of {node} did not boot\n\
         {install}",
        node = boot.node,
        mac = boot.mac,
        install = install_lines(boot),
    )
}

/// On UEFI, how a script that means "boot your disk" ends: `exit 1`. iPXE returns a script's
/// exit status from the EFI image (ipxe/ipxe, src/core/exec.c `exit_exec`, up to `_efi_start`
/// in src/interface/efi/efiprefix.c: `efirc = EFIRC ( rc )`, an EFI error for any status from
/// 1 to 128), and EDK2's boot manager stops walking BootOrder and opens its menu when a boot
/// option returns EFI_SUCCESS, and tries the next option on an error (tianocore/edk2,
/// MdeModulePkg/Universal/BdsDxe/BdsEntry.c `BootBootOptions`; UEFI 2.10 section 3.1.1). So
/// `exit 0` left an installed node in OVMF's setup menu instead of on its disk. On BIOS the
/// status is ignored (iPXE's ROM and undionly.kpxe return to the BIOS, which boots the next
/// device: SeaBIOS src/boot.c `do_boot`, INT 18h), so the BIOS path goes to `sanboot` instead.
pub const UEFI_NEXT_BOOT_OPTION: &str = "iseq ${platform} efi && exit 1 ||";

/// Boots the installed disk: back to the firmware's boot order on UEFI, the first disk on BIOS.
fn local_boot_script(node: &str, mac: MacAddr) -> String {
    format!(
        "#!ipxe\n\
         # okd-appliance: {node} ({mac}) is installed; booting from its disk\n\
         echo okd-appliance: {node} is installed, booting from disk (okd-appliance node reinstall {node} to reinstall)\n\
         {UEFI_NEXT_BOOT_OPTION}\n\
         sanboot --no-describe --drive 0x80\n"
    )
}

/// For a MAC no node has: say so (iPXE fills in the MAC of the interface it booted from), then
/// leave the machine to its own boot order.
pub fn unknown_script() -> String {
    format!(
        "#!ipxe\n\
         # okd-appliance: no node in the cluster config has this MAC address\n\
         echo okd-appliance: no node in the cluster config has MAC ${{netX/mac:hexhyp}}; booting locally\n\
         sleep 5\n\
         {UEFI_NEXT_BOOT_OPTION}\n\
         sanboot --no-describe --drive 0x80\n"
    )
}

/// A node's own ignition (spec 3.2.0): the role's config merged in, plus its host name, so
/// every node boots with its name even where DHCP host names are not applied.
fn node_ignition(node: &str, role_url: &str) -> String {
    let config = json!({
        "ignition": {
            "version": "3.2.0",
            "config": { "merge": [ { "source": role_url } ] }
        },
        "storage": {
            "files": [ {
                "path": "/etc/hostname",
                "mode": 420,
                "overwrite": true,
                "contents": { "source": format!("data:,{node}%0A") }
            } ]
        }
    });
    config.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignition_merges_the_role_and_names_the_node() {
        let text = node_ignition("master-0", "http://10.0.0.1:8080/ignition/roles/master.ign");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["ignition"]["version"], "3.2.0");
        assert_eq!(
            v["ignition"]["config"]["merge"][0]["source"],
            "http://10.0.0.1:8080/ignition/roles/master.ign"
        );
        assert_eq!(v["storage"]["files"][0]["path"], "/etc/hostname");
        assert_eq!(
            v["storage"]["files"][0]["contents"]["source"],
            "data:,master-0%0A"
        );
    }

    fn boot() -> BootParams {
        BootParams {
            node: "master-0".into(),
            role: crate::vocabulary::Role::Master,
            role_config: crate::vocabulary::RoleConfig::Master,
            mac: MacAddr([0x52, 0x54, 0, 0, 0, 2]),
            ipv4: "10.0.0.2".parse().unwrap(),
            ipv6: None,
            kernel_url: "http://10.0.0.1:8080/artifacts/kernel".into(),
            initramfs_url: "http://10.0.0.1:8080/artifacts/initramfs.img".into(),
            rootfs_url: "http://10.0.0.1:8080/artifacts/rootfs.img".into(),
            ignition_url: "http://10.0.0.1:8080/ignition/master-0.ign".into(),
            install_dev: "/dev/sda".into(),
            kernel_args: vec!["coreos.inst.install_dev=/dev/sda".into()],
            iso_url: "http://10.0.0.1:8080/iso/master-0.iso".into(),
            iso_kernel_args: vec!["coreos.inst.install_dev=/dev/sda".into()],
            documents: Documents::default(),
        }
    }

    #[test]
    fn the_first_boot_tries_the_disk_then_installs() {
        let script = first_boot_script(&boot());
        let lines: Vec<&str> = script.lines().collect();
        let at = |prefix: &str| {
            lines
                .iter()
                .position(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix:?} in\n{script}"))
        };
        assert_eq!(lines[0], "#!ipxe");
        // UEFI leaves to the firmware; BIOS boots the disk and falls through when it can't.
        assert!(at(UEFI_NEXT_BOOT_OPTION) < at("sanboot"));
        assert!(lines[at("sanboot")].ends_with("||"), "{script}");
        assert!(at("sanboot") < at("kernel "));
        assert!(at("kernel ") < at("initrd ") && at("initrd ") < at("boot"));
        assert!(script.ends_with(&install_lines(&boot())));
        assert!(install_script(&boot()).ends_with(&install_lines(&boot())));
    }

    #[test]
    fn scripts_start_with_the_ipxe_magic() {
        let mac = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
        assert!(local_boot_script("master-0", mac).starts_with("#!ipxe\n"));
        assert!(unknown_script().starts_with("#!ipxe\n"));
    }
}
