//! The generated documents: per-node iPXE scripts and per-node ignition configs.
//!
//! Architecture invariant: pure text from the plan; no secrets here (role ignition files, which
//! hold them, are served from disk and never rendered or logged).

use serde_json::json;

use crate::plan::BootParams;
use crate::vocabulary::MacAddr;

/// Installs CoreOS from the live PXE artifacts. `initrd=main` names the initramfs for UEFI
/// kernels (EFI stub loading); BIOS kernels ignore it.
pub fn install_script(boot: &BootParams) -> String {
    format!(
        "#!ipxe\n\
         # okd-appliance: install {node} ({role}, {mac}) to {dev}\n\
         echo okd-appliance: installing {node} to {dev}\n\
         kernel {kernel} initrd=main {args}\n\
         initrd --name main {initramfs}\n\
         boot\n",
        node = boot.node,
        role = boot.role,
        mac = boot.mac,
        dev = boot.install_dev,
        kernel = boot.kernel_url,
        args = boot.kernel_args.join(" "),
        initramfs = boot.initramfs_url,
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

    #[test]
    fn scripts_start_with_the_ipxe_magic() {
        let mac = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
        assert!(local_boot_script("master-0", mac).starts_with("#!ipxe\n"));
        assert!(unknown_script("02-00-00-00-00-01").starts_with("#!ipxe\n"));
    }
}
