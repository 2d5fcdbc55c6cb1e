//! What each node boots: the CoreOS live kernel, its initramfs and rootfs, and the kernel
//! arguments that install CoreOS to the node's disk with the node's own ignition; or, on the
//! ISO install path, its own copy of the live ISO with those arguments embedded.
//!
//! The single node of a single-node cluster boots the live system instead, with its own
//! ignition as the live system's config (`ignition.config.url`, `ignition.firstboot`,
//! `ignition.platform.id=metal`, as Fedora CoreOS documents live PXE boots): that config
//! (`bootstrap-in-place-for-live-iso.ign`, merged) bootstraps the cluster and then runs
//! coreos-installer to the disk named in install-config's `bootstrapInPlace` (openshift/installer,
//! data/data/bootstrap/bootstrap-in-place/files/usr/local/bin/install-to-disk.sh.template), so
//! no `coreos.inst.*` argument is given: one would start the image's own installer as well.
//!
//! The ISO's arguments are the PXE ones minus `coreos.live.rootfs_url`: the live ISO carries
//! its root file system (and says so with its own `coreos.liveiso=` argument), and a live
//! system told to fetch a rootfs as well would fetch one over the network it does not need.
//!
//! Architecture invariant: URLs and arguments only; iPXE syntax and file serving live in the
//! HTTP boot service.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use super::documents::{self, Documents};
use crate::config::{Config, MacAddr, Role, RoleConfig};

/// Where the boot server finds what it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootFiles {
    /// `http://host[:port]`, no trailing slash.
    pub base_url: String,
    /// The role ignition files from `openshift-install create ignition-configs`.
    pub ignition_dir: PathBuf,
    pub artifacts_dir: PathBuf,
    /// undionly.kpxe and ipxe.efi (TFTP, and HTTP for UEFI HTTP boot); see
    /// [`BootFiles::ipxe_binary`].
    pub ipxe_dir: PathBuf,
    /// The operator's CoreOS live ISO, the base of every `/iso/<node>.iso`.
    pub base_iso: PathBuf,
}

/// The iPXE binary that BIOS PXE firmware chainloads (over TFTP).
pub const BIOS_BOOT_FILE: &str = "undionly.kpxe";
/// The iPXE binary that UEFI firmware chainloads (over TFTP, or HTTP for UEFI HTTP boot).
pub const UEFI_BOOT_FILE: &str = "ipxe.efi";

impl BootFiles {
    /// Where the iPXE binary a client asked for by `name` lives (leading slashes ignored, as PXE
    /// firmware sends both forms), or `None` for any name the DHCP server never hands out.
    ///
    /// The set of names is closed, so the file itself may be a symlink anywhere: Debian's ipxe
    /// package installs `/usr/lib/ipxe/ipxe.efi` as a link to `/boot/ipxe.efi`, and a rule
    /// refusing links out of the directory made the default `ipxe_dir` unable to serve it.
    pub fn ipxe_binary(&self, name: &str) -> Option<PathBuf> {
        let name = name.trim_start_matches('/');
        [BIOS_BOOT_FILE, UEFI_BOOT_FILE]
            .contains(&name)
            .then(|| self.ipxe_dir.join(name))
    }
}

pub fn files(config: &Config) -> BootFiles {
    let i = &config.install;
    BootFiles {
        base_url: i.base_url.clone(),
        ignition_dir: i.ignition_dir.clone(),
        artifacts_dir: i.artifacts_dir.clone(),
        ipxe_dir: i.ipxe_dir.clone(),
        base_iso: i.artifacts_dir.join(&i.artifacts.iso),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootParams {
    pub node: String,
    pub role: Role,
    /// The config its own ignition merges.
    pub role_config: RoleConfig,
    pub mac: MacAddr,
    /// The addresses the node's ignition may be fetched from.
    pub ipv4: Ipv4Addr,
    pub ipv6: Option<Ipv6Addr>,
    pub kernel_url: String,
    pub initramfs_url: String,
    pub rootfs_url: String,
    /// The node's own ignition (the role's config merged with its host name).
    pub ignition_url: String,
    pub install_dev: String,
    /// Every argument for the live kernel, in order.
    pub kernel_args: Vec<String>,
    /// The node's own live ISO.
    pub iso_url: String,
    /// The arguments added to the live ISO's own: `kernel_args` without the rootfs URL.
    pub iso_kernel_args: Vec<String>,
    /// The scripts and ignition the boot server sends this node.
    pub documents: Documents,
}

/// The URL of a node's own ignition config.
pub fn ignition_url(base_url: &str, node: &str) -> String {
    format!("{base_url}/ignition/{node}.ign")
}

/// The URL of a role's ignition config, which a node's own config merges.
fn role_ignition_url(base_url: &str, config: RoleConfig) -> String {
    format!("{base_url}/ignition/roles/{}", config.file())
}

/// The URL of a node's own live ISO.
pub fn iso_url(base_url: &str, node: &str) -> String {
    format!("{base_url}/iso/{node}.iso")
}

/// The URL of a node's iPXE script, keyed by its MAC address.
pub(super) fn script_url(base_url: &str, mac: MacAddr) -> String {
    format!("{base_url}/boot/{}.ipxe", mac.hyphenated())
}

pub fn derive(config: &Config) -> Vec<BootParams> {
    let install = &config.install;
    let base = &install.base_url;
    let artifact = |name: &str| format!("{base}/artifacts/{name}");
    let single = config.single_node().map(|n| n.name.as_str());
    config
        .nodes
        .iter()
        .map(|node| {
            let rootfs_url = artifact(&install.artifacts.rootfs);
            let ignition_url = ignition_url(base, &node.name);
            let install_dev = node
                .install_dev
                .clone()
                .unwrap_or_else(|| install.install_dev.clone());
            let role_config = RoleConfig::of(node.role, single == Some(node.name.as_str()));
            let mut iso_kernel_args = if role_config == RoleConfig::SingleNode {
                vec![
                    "ignition.firstboot".to_owned(),
                    "ignition.platform.id=metal".to_owned(),
                    format!("ignition.config.url={ignition_url}"),
                ]
            } else {
                vec![
                    format!("coreos.inst.install_dev={install_dev}"),
                    format!("coreos.inst.ignition_url={ignition_url}"),
                ]
            };
            iso_kernel_args.extend(install.kernel_args.iter().cloned());
            iso_kernel_args.extend(node.kernel_args.iter().cloned());
            let kernel_args = std::iter::once(format!("coreos.live.rootfs_url={rootfs_url}"))
                .chain(iso_kernel_args.iter().cloned())
                .collect();
            let mut params = BootParams {
                node: node.name.clone(),
                role: node.role,
                role_config,
                mac: node.mac,
                ipv4: node.ipv4,
                ipv6: node.ipv6,
                kernel_url: artifact(&install.artifacts.kernel),
                initramfs_url: artifact(&install.artifacts.initramfs),
                rootfs_url,
                ignition_url,
                install_dev,
                kernel_args,
                iso_url: iso_url(base, &node.name),
                iso_kernel_args,
                documents: Documents::default(),
            };
            params.documents = documents::derive(&params, &role_ignition_url(base, role_config));
            params
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_boot_files_are_ipxe_binaries() {
        let files = BootFiles {
            base_url: "http://10.0.0.1:8080".into(),
            ignition_dir: "/i".into(),
            artifacts_dir: "/a".into(),
            ipxe_dir: "/usr/lib/ipxe".into(),
            base_iso: "/a/live.iso".into(),
        };
        assert_eq!(
            files.ipxe_binary("ipxe.efi"),
            Some(PathBuf::from("/usr/lib/ipxe/ipxe.efi"))
        );
        assert_eq!(
            files.ipxe_binary("/undionly.kpxe"),
            Some(PathBuf::from("/usr/lib/ipxe/undionly.kpxe"))
        );
        for other in [
            "ipxe.lkrn",
            "../ipxe.efi",
            "ipxe.efi/..",
            "",
            "/",
            "x/ipxe.efi",
        ] {
            assert_eq!(files.ipxe_binary(other), None, "{other}");
        }
    }
}
