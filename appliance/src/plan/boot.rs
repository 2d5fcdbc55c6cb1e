//! What each node boots: the CoreOS live kernel, its initramfs and rootfs, and the kernel
//! arguments that install CoreOS to the node's disk with the node's own ignition.
//!
//! Architecture invariant: URLs and arguments only; iPXE syntax and file serving live in the
//! HTTP boot service.

use crate::config::{Config, MacAddr, Role};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootParams {
    pub node: String,
    pub role: Role,
    pub mac: MacAddr,
    pub kernel_url: String,
    pub initramfs_url: String,
    pub rootfs_url: String,
    /// The node's own ignition (the role's config merged with its host name).
    pub ignition_url: String,
    pub install_dev: String,
    /// Every argument for the live kernel, in order.
    pub kernel_args: Vec<String>,
}

/// The URL of a node's iPXE script, keyed by its MAC address.
pub fn script_url(base_url: &str, mac: MacAddr) -> String {
    format!("{base_url}/boot/{}.ipxe", mac.hyphenated())
}

pub fn derive(config: &Config) -> Vec<BootParams> {
    let install = &config.install;
    let base = &install.base_url;
    let artifact = |name: &str| format!("{base}/artifacts/{name}");
    config
        .nodes
        .iter()
        .map(|node| {
            let rootfs_url = artifact(&install.artifacts.rootfs);
            let ignition_url = format!("{base}/ignition/{}.ign", node.name);
            let install_dev = node
                .install_dev
                .clone()
                .unwrap_or_else(|| install.install_dev.clone());
            let mut kernel_args = vec![
                format!("coreos.live.rootfs_url={rootfs_url}"),
                format!("coreos.inst.install_dev={install_dev}"),
                format!("coreos.inst.ignition_url={ignition_url}"),
            ];
            kernel_args.extend(install.kernel_args.iter().cloned());
            kernel_args.extend(node.kernel_args.iter().cloned());
            BootParams {
                node: node.name.clone(),
                role: node.role,
                mac: node.mac,
                kernel_url: artifact(&install.artifacts.kernel),
                initramfs_url: artifact(&install.artifacts.initramfs),
                rootfs_url,
                ignition_url,
                install_dev,
                kernel_args,
            }
        })
        .collect()
}
