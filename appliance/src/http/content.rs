//! The generated documents: per-node iPXE scripts and per-node ignition configs.
//!
//! Architecture invariant: pure text from the plan; no secrets here (role ignition files, which
//! hold them, are served from disk and never rendered or logged).

use serde_json::json;

use crate::config::MacAddr;
use crate::plan::BootParams;

/// Installs CoreOS from the live PXE artifacts. `initrd=main` names the initramfs for UEFI
/// kernels (EFI stub loading); BIOS kernels ignore it.
pub fn install_script(boot: &BootParams) -> String {
    format!(
        "#!ipxe\n\
         # okd-appliance: install {node} ({role}, {mac}) to {dev}\n\
         {install}",
        node = boot.node,
        role = boot.role,
        mac = boot.mac,
        dev = boot.install_dev,
        install = install_lines(boot),
    )
}

fn install_lines(boot: &BootParams) -> String {
    format!(
        "echo okd-appliance: installing {node} to {dev}\n\
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
/// the script goes on to the install. On UEFI, iPXE can only hand the machine back to the
/// firmware's boot order; if that brings it back to the network without an installed system
/// having reported, the appliance serves the install script (see the HTTP service).
pub fn first_boot_script(boot: &BootParams) -> String {
    format!(
        "#!ipxe\n\
         # okd-appliance: {node} ({mac}) fetched its ignition; its installed system has not fetched its role config yet\n\
         echo okd-appliance: {node} fetched its ignition; booting its disk (installing again if it does not boot)\n\
         iseq ${{platform}} efi && exit 0 ||\n\
         sanboot --no-describe --drive 0x80 ||\n\
         echo okd-appliance: the disk of {node} did not boot\n\
         {install}",
        node = boot.node,
        mac = boot.mac,
        install = install_lines(boot),
    )
}

/// Boots the installed disk: back to the firmware's boot order on UEFI, the first disk on BIOS.
pub fn local_boot_script(node: &str, mac: MacAddr) -> String {
    format!(
        "#!ipxe\n\
         # okd-appliance: {node} ({mac}) is installed; booting from its disk\n\
         echo okd-appliance: {node} is installed, booting from disk (okd-appliance node reinstall {node} to reinstall)\n\
         iseq ${{platform}} efi && exit 0 ||\n\
         sanboot --no-describe --drive 0x80\n"
    )
}

/// For a MAC no node has: say so, then leave the machine to its own boot order.
pub fn unknown_script(mac: &str) -> String {
    format!(
        "#!ipxe\n\
         # okd-appliance: no node has MAC {mac}\n\
         echo okd-appliance: no node in the cluster config has MAC {mac}; booting locally\n\
         sleep 5\n\
         iseq ${{platform}} efi && exit 0 ||\n\
         sanboot --no-describe --drive 0x80\n"
    )
}

/// A node's own ignition (spec 3.2.0): the role's config merged in, plus its host name, so
/// every node boots with its name even where DHCP host names are not applied.
pub fn node_ignition(node: &str, role_url: &str) -> String {
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
            role: crate::config::Role::Master,
            mac: MacAddr([0x52, 0x54, 0, 0, 0, 2]),
            ipv4: "10.0.0.2".parse().unwrap(),
            ipv6: None,
            kernel_url: "http://10.0.0.1:8080/artifacts/kernel".into(),
            initramfs_url: "http://10.0.0.1:8080/artifacts/initramfs.img".into(),
            rootfs_url: "http://10.0.0.1:8080/artifacts/rootfs.img".into(),
            ignition_url: "http://10.0.0.1:8080/ignition/master-0.ign".into(),
            install_dev: "/dev/sda".into(),
            kernel_args: vec!["coreos.inst.install_dev=/dev/sda".into()],
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
        assert!(at("iseq ${platform} efi && exit 0") < at("sanboot"));
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
        assert!(unknown_script("02-00-00-00-00-01").starts_with("#!ipxe\n"));
    }
}
