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
//! A dual-stack node (one with `ipv6`) also gets two `ip=` arguments, in this order:
//! `ip=[ADDR]::[GW]:PREFIX:NAME:MAC:none` (its IPv6 address, static) and `ip=MAC:dhcp` (IPv4
//! from the appliance's DHCP, as every node). See [`ipv6_kernel_args`] for why these and why
//! in this order. An operator's own `ip=` in `kernel_args` stands alone: no `ip=` is added for
//! that node, and `check` warns that its IPv6 address is the operator's to give. The two
//! arguments take 90 or 91 bytes for config/dual-stack.yml's nodes (about 200 at most, with the
//! longest addresses and a 63-character name) of the live ISO's kernel-argument area, 1138
//! usable bytes on Fedora CoreOS, which `check` and `serve` hold every node's ISO to
//! (`appliance/tests/liveiso.rs` fits those nodes in it).
//!
//! A single-node cluster is a config whose only node is a master (`Config::single_node`): what
//! `openshift-install create single-node-ignition-config` installs. One master beside workers,
//! or beside a bootstrap node, stays an ordinary cluster. The single node's ignition merges
//! `bootstrap-in-place-for-live-iso.ign` (`RoleConfig::SingleNode`, served only to that node,
//! with bootstrap.ign's 24-hour lifetime).
//!
//! Architecture invariant: URLs and arguments only; iPXE syntax and file serving live in the
//! HTTP boot service.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use super::documents::{self, Documents};
use crate::config::{Config, Ipv6Network, MacAddr, Node, Role, RoleConfig};

/// Where the boot server finds what it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootFiles {
    /// `http://host[:port]`, no trailing slash.
    pub base_url: String,
    /// The role ignition files from `openshift-install create ignition-configs`.
    pub ignition_dir: PathBuf,
    pub artifacts_dir: PathBuf,
    /// undionly.kpxe and snponly.efi (TFTP, and HTTP for UEFI HTTP boot); see
    /// [`BootFiles::ipxe_binary`].
    pub ipxe_dir: PathBuf,
    /// The operator's CoreOS live ISO, the base of every `/iso/<node>.iso`.
    pub base_iso: PathBuf,
}

/// The iPXE binary that BIOS PXE firmware chainloads (over TFTP).
pub const BIOS_BOOT_FILE: &str = "undionly.kpxe";
/// The iPXE binary that UEFI firmware chainloads (over TFTP, or HTTP for UEFI HTTP boot):
/// iPXE's SNP-only build, which drives the NIC through the firmware's own network driver (the
/// one the firmware just booted it through) and so hands the machine back to the firmware
/// cleanly when a script `exit`s. The full `ipxe.efi` takes the NIC over with its own driver;
/// Debian 12's (iPXE 2019-01-25), chainloaded by OVMF's own PXE, never returned from `exit`,
/// so an installed node hung instead of reaching its disk (`tests/e2e/boot.rs`, OVMF without
/// an iPXE ROM). iPXE's build targets page recommends snponly.efi for chainloading.
pub const UEFI_BOOT_FILE: &str = "snponly.efi";
/// The full EFI build, still served by name for DHCP servers of one's own that hand it out;
/// this appliance's DHCP never does.
pub const UEFI_FULL_BOOT_FILE: &str = "ipxe.efi";

impl BootFiles {
    /// Where the iPXE binary a client asked for by `name` lives (leading slashes ignored, as PXE
    /// firmware sends both forms), or `None` for any name the DHCP server never hands out.
    ///
    /// The set of names is closed, so the file itself may be a symlink anywhere: Debian's ipxe
    /// package installs `/usr/lib/ipxe/ipxe.efi` as a link to `/boot/ipxe.efi`, and a rule
    /// refusing links out of the directory made the default `ipxe_dir` unable to serve it.
    pub fn ipxe_binary(&self, name: &str) -> Option<PathBuf> {
        let name = name.trim_start_matches('/');
        [BIOS_BOOT_FILE, UEFI_BOOT_FILE, UEFI_FULL_BOOT_FILE]
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

use super::route::role_ignition_url;
pub use super::route::{ignition_url, iso_url};

/// The `ip=` arguments that bring `node` up with its configured IPv6 address (none for a node
/// without one): `ip=[ADDR]::[GW]:PREFIX:NAME:MAC:none`, then `ip=MAC:dhcp`.
///
/// Why kernel arguments and not DHCPv6: CoreOS configures its network in the initramfs with
/// NetworkManager, which runs DHCPv6 only when a router advertisement sets the Managed flag (the
/// appliance sends none, the gateway would have to), and whose default DUID is a DUID-UUID made
/// from the machine ID (NetworkManager's `ipv6.dhcp-duid`, `lease`), with no MAC in it and
/// different in the live system and on the installed one, so a reservation could not be
/// matched. Static arguments need neither, and CoreOS keeps them: coreos-installer's service
/// forwards every `ip=` of the live system to the installed system's first boot
/// (coreos/coreos-installer `scripts/coreos-installer-service`, `--firstboot-args`), whose
/// initramfs teardown copies the resulting NetworkManager profile to
/// `/etc/NetworkManager/system-connections` (coreos/fedora-coreos-config,
/// `35coreos-ignition/coreos-teardown-initramfs.sh`, `propagate_initramfs_networking`).
///
/// How nm-initrd-generator reads them (NetworkManager `src/nm-initrd-generator/
/// nmi-cmdline-reader.c`, `reader_parse_ip`; checked with Debian's NetworkManager 1.42.4 by
/// `tests/e2e/nm_kargs.rs`):
/// - The interface field is the node's MAC, hyphenated: a field that is no interface name is
///   read as a MAC address, and the profile then matches the NIC with that MAC
///   (`ethernet.mac-address`), whatever the kernel names it; the appliance knows the MAC, not
///   the name. Both arguments name the same MAC, so they make one profile.
/// - An empty interface field would work on a one-NIC machine (both arguments go to the one
///   default profile), but that profile comes up on whichever NIC NetworkManager picks. A named
///   interface with a bare `ip=dhcp` makes two profiles, and the named one has IPv4 disabled.
/// - The order matters: `none` disables each family that has no static address yet, and `dhcp`
///   turns IPv4 DHCP back on (leaving IPv6 alone once it has an address). So the static
///   argument comes first; the other way round, the node would have no IPv4 at all.
/// - The host name field is the node's name, as its ignition writes it to `/etc/hostname`.
pub fn ipv6_kernel_args(node: &Node, v6: &Ipv6Network) -> Vec<String> {
    let Some(address) = node.ipv6 else {
        return Vec::new();
    };
    let mac = node.mac.hyphenated();
    let gateway = v6.gateway.map(|g| format!("[{g}]")).unwrap_or_default();
    vec![
        format!(
            "ip=[{address}]::{gateway}:{prefix}:{name}:{mac}:none",
            prefix = v6.subnet.prefix_len(),
            name = node.name,
        ),
        format!("ip={mac}:dhcp"),
    ]
}

pub fn derive(config: &Config) -> Vec<BootParams> {
    let install = &config.install;
    let base = &install.base_url;
    let artifact = |name: &str| super::route::artifact_url(base, name);
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
            if let Some(v6) = &config.network.v6
                && !config.sets_own_ip(node)
            {
                iso_kernel_args.extend(ipv6_kernel_args(node, v6));
            }
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

    /// A config with one master; `ipv6` is the `network.ipv6` section (or nothing), `node` and
    /// `install` are extra keys of the node and of `install`.
    fn config(ipv6: &str, node: &str, install: &str) -> Config {
        let text = format!(
            "version: 1\n\
             cluster: {{ name: ds, base_domain: lab.example.com }}\n\
             network:\n  subnet: 172.16.10.0/24\n  appliance_ip: 172.16.10.2\n{ipv6}\
             nodes:\n  - {{ name: master-0, role: master, mac: \"52:54:00:10:00:0A\", ip: 172.16.10.10{node} }}\n\
             \x20 - {{ name: worker-0, role: worker, mac: \"52:54:00:10:00:14\", ip: 172.16.10.20 }}\n\
             install: {{ ignition_dir: ./i, artifacts_dir: ./a{install} }}\n"
        );
        let loaded = crate::config::parse(
            &text,
            "t.yml",
            std::path::Path::new("."),
            crate::config::InstallCheck::Skip,
        )
        .unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        loaded.config
    }

    const V6: &str =
        "  ipv6: { subnet: fd00:10::/64, gateway: fd00:10::1, appliance_ip: fd00:10::2 }\n";

    fn ip_args(args: &[String]) -> Vec<&str> {
        args.iter()
            .filter(|a| crate::config::is_ip_arg(a))
            .map(String::as_str)
            .collect()
    }

    #[test]
    fn a_dual_stack_node_gets_its_ipv6_address_static_then_ipv4_by_dhcp() {
        let boot = derive(&config(V6, ", ipv6: \"fd00:10::a\"", ""));
        let want = [
            "ip=[fd00:10::a]::[fd00:10::1]:64:master-0:52-54-00-10-00-0a:none",
            "ip=52-54-00-10-00-0a:dhcp",
        ];
        // In this order: `none` first disables IPv4 until `dhcp` turns it on again.
        assert_eq!(ip_args(&boot[0].iso_kernel_args), want);
        assert_eq!(ip_args(&boot[0].kernel_args), want);
        assert_eq!(
            boot[0].iso_kernel_args[..4],
            [
                "coreos.inst.install_dev=/dev/sda",
                "coreos.inst.ignition_url=http://172.16.10.2:8080/ignition/master-0.ign",
                want[0],
                want[1],
            ]
        );
        assert!(
            boot[0].documents.install_script.contains(&want.join(" ")),
            "{}",
            boot[0].documents.install_script
        );
    }

    #[test]
    fn a_single_node_boots_the_live_system_with_its_ignition_and_no_installer_arguments() {
        let text = "version: 1\n\
             cluster: { name: sno, base_domain: example.com }\n\
             network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }\n\
             nodes:\n  - { name: sno-0, role: master, mac: \"52:54:00:00:00:10\", ip: 10.0.0.10 }\n\
             install: { ignition_dir: ./i, artifacts_dir: ./a, kernel_args: [console=ttyS0] }\n";
        let loaded = crate::config::parse(
            text,
            "t.yml",
            std::path::Path::new("."),
            crate::config::InstallCheck::Skip,
        )
        .unwrap();
        let boot = derive(&loaded.config);
        assert_eq!(boot[0].role_config, RoleConfig::SingleNode);
        assert_eq!(
            boot[0].iso_kernel_args,
            [
                "ignition.firstboot",
                "ignition.platform.id=metal",
                "ignition.config.url=http://10.0.0.1:8080/ignition/sno-0.ign",
                "console=ttyS0",
            ]
        );
        assert!(
            boot[0]
                .documents
                .ignition
                .contains("/ignition/roles/bootstrap-in-place-for-live-iso.ign"),
            "{}",
            boot[0].documents.ignition
        );
        // The same master beside a worker is an ordinary cluster's.
        let two = derive(&config("", "", ""));
        assert_eq!(two[0].role_config, RoleConfig::Master);
    }

    #[test]
    fn without_an_ipv6_gateway_the_gateway_field_is_empty() {
        let v6 = "  ipv6: { subnet: fd00:10::/56, appliance_ip: fd00:10::2 }\n";
        let boot = derive(&config(v6, ", ipv6: \"fd00:10::a\"", ""));
        assert_eq!(
            ip_args(&boot[0].iso_kernel_args),
            [
                "ip=[fd00:10::a]:::56:master-0:52-54-00-10-00-0a:none",
                "ip=52-54-00-10-00-0a:dhcp",
            ]
        );
    }

    #[test]
    fn single_stack_nodes_and_nodes_without_ipv6_get_no_ip_argument() {
        let single = derive(&config("", "", ""));
        assert_eq!(
            single[0].iso_kernel_args,
            [
                "coreos.inst.install_dev=/dev/sda",
                "coreos.inst.ignition_url=http://172.16.10.2:8080/ignition/master-0.ign",
            ]
        );
        // network.ipv6 set, but this node has no IPv6 address.
        let v4_node = derive(&config(V6, "", ""));
        assert_eq!(v4_node[0].iso_kernel_args, single[0].iso_kernel_args);
    }

    #[test]
    fn the_operators_own_ip_arguments_stand_alone() {
        let own = "ip=ens3:dhcp";
        let on_node = derive(&config(
            V6,
            &format!(", ipv6: \"fd00:10::a\", kernel_args: [\"{own}\"]"),
            "",
        ));
        assert_eq!(ip_args(&on_node[0].kernel_args), [own]);
        let on_install = derive(&config(
            V6,
            ", ipv6: \"fd00:10::a\"",
            &format!(", kernel_args: [\"{own}\"]"),
        ));
        assert_eq!(ip_args(&on_install[0].kernel_args), [own]);
    }

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
            files.ipxe_binary("snponly.efi"),
            Some(PathBuf::from("/usr/lib/ipxe/snponly.efi"))
        );
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
