//! What each node's machine is: the VM (or bare-metal host) a control provider creates, boots
//! and destroys, derived from the node and its `machine:` settings.
//!
//! Architecture invariant: provider-neutral facts only (name, MAC, sizes, boot devices in
//! order, the ISO URL). How Proxmox spells a NIC or a boot order is the provider's business in
//! `control/`, which reads these specs and derives nothing itself.
//!
//! The ISO path boots the disk first, then the CD: a blank disk is not bootable, so the firmware
//! falls through to the live ISO; after the install the disk boots, and the ISO (which installs
//! whenever it boots) is not run again, even while it stays inserted. PXE machines boot the
//! network first. Golden files pin every shipped config's specs
//! (`appliance/tests/golden/*.machines`).

use std::fmt;

use crate::config::{Config, InstallPath, MachineSettings};
use crate::vocabulary::{MacAddr, Role};
// The provider settings travel in the plan as the config validated them; the control module
// names them from here, never from the config.
pub use crate::config::{
    Bmc, BmcTrust, ControlTimeouts, DomainType, Firmware, Libvirt, LibvirtNet, Provider, Proxmox,
    SecretSource, TlsTrust,
};

/// Everything the control module needs: which provider, its limits, and one spec per node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlan {
    pub provider: Provider,
    /// Where a provider keeps what must outlive one run (Proxmox: the creates it started).
    pub state_dir: std::path::PathBuf,
    pub timeouts: ControlTimeouts,
    pub machines: Vec<MachineSpec>,
}

impl ControlPlan {
    pub fn machine(&self, node: &str) -> Option<&MachineSpec> {
        self.machines.iter().find(|m| m.node == node)
    }
}

/// The provider in one line, without secrets (there are none in the plan to leak).
impl fmt::Display for ControlPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.provider {
            Provider::None => f.write_str("provider none: machines are created by hand"),
            Provider::Redfish => f.write_str("provider redfish: each node's BMC"),
            Provider::Libvirt(lv) => write!(
                f,
                "provider libvirt: {} pool {}, {}, {} firmware, {} domains",
                lv.uri,
                lv.pool,
                match &lv.attach {
                    crate::config::LibvirtNet::Network(n) => format!("network {n}"),
                    crate::config::LibvirtNet::Bridge(b) => format!("bridge {b}"),
                },
                match lv.firmware {
                    crate::config::Firmware::Bios => "bios",
                    crate::config::Firmware::Uefi => "uefi",
                },
                match lv.domain_type {
                    crate::config::DomainType::Kvm => "kvm",
                    crate::config::DomainType::Qemu => "qemu",
                }
            ),
            Provider::Proxmox(px) => {
                write!(
                    f,
                    "provider proxmox: {} node {}, token {} (secret from {}), trust {}, storage {}, iso storage {}, bridge {}",
                    px.url,
                    px.node,
                    px.token_id,
                    px.token_secret,
                    px.trust,
                    px.storage,
                    px.iso_storage,
                    px.bridge
                )?;
                if let Some(vlan) = px.vlan {
                    write!(f, " vlan {vlan}")?;
                }
                if let Some(pool) = &px.pool {
                    write!(f, ", pool {pool}")?;
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSpec {
    pub node: String,
    pub role: Role,
    /// The machine's name at the provider: `<node>.<cluster domain>`, so two clusters on one
    /// Proxmox node never claim each other's VMs.
    pub vm_name: String,
    /// The NIC on the cluster network gets the node's reserved MAC, so DHCP knows it.
    pub mac: MacAddr,
    pub cores: u32,
    pub memory_mib: u64,
    pub disk_gib: u64,
    /// An explicit VM ID (Proxmox); the provider picks one when absent.
    pub vmid: Option<u32>,
    /// The node's BMC (Redfish): where to find the machine and how to log in.
    pub bmc: Option<Bmc>,
    pub install: InstallMedium,
    /// Boot devices, first tried first.
    pub boot_order: Vec<BootDevice>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallMedium {
    /// DHCP, iPXE and the node's script from the appliance.
    Network,
    /// The node's live ISO with its kernel arguments embedded.
    Iso {
        /// `<base_url>/iso/<node>.iso` on the appliance's HTTP server.
        url: String,
        /// The name the ISO gets in the provider's storage: `<vm_name>.iso`.
        file_name: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootDevice {
    Network,
    Disk,
    Cdrom,
}

impl BootDevice {
    pub fn as_str(self) -> &'static str {
        match self {
            BootDevice::Network => "network",
            BootDevice::Disk => "disk",
            BootDevice::Cdrom => "cdrom",
        }
    }
}

/// The URL of a node's live ISO on the appliance's HTTP server.
pub use super::route::iso_url;

/// The machines of `config`; `boot` gives each node's live-ISO kernel arguments, which name
/// its ISO in a provider's storage.
pub fn derive(config: &Config, boot: &[crate::plan::BootParams]) -> ControlPlan {
    let domain = config.cluster.domain();
    let machines = config
        .control
        .machines
        .iter()
        .filter_map(|settings| {
            // Validation made one machine per valid node; the lookup can't miss.
            let node = config.nodes.iter().find(|n| n.name == settings.node)?;
            let iso_args = boot
                .iter()
                .find(|b| b.node == settings.node)
                .map_or(&[][..], |b| b.iso_kernel_args.as_slice());
            Some(spec(
                settings,
                node.role,
                node.mac,
                &domain,
                &config.install.base_url,
                iso_args,
            ))
        })
        .collect();
    ControlPlan {
        provider: config.control.provider.clone(),
        state_dir: config.state_dir.clone(),
        timeouts: config.control.timeouts,
        machines,
    }
}

fn spec(
    settings: &MachineSettings,
    role: Role,
    mac: MacAddr,
    domain: &str,
    base_url: &str,
    iso_args: &[String],
) -> MachineSpec {
    let vm_name = format!("{}.{domain}", settings.node);
    let (install, boot_order) = match settings.install {
        // Network first: the appliance's script installs once, then boots the local disk
        // (and `node reinstall` works by the same path).
        InstallPath::Pxe => (
            InstallMedium::Network,
            vec![BootDevice::Network, BootDevice::Disk],
        ),
        // Disk first: a blank disk is not bootable, so the firmware falls through to the CD;
        // once CoreOS is installed the disk boots, and the live ISO (which installs whenever
        // it boots) is not run again even while it stays inserted.
        InstallPath::Iso => (
            InstallMedium::Iso {
                url: iso_url(base_url, &settings.node),
                file_name: iso_file_name(&vm_name, iso_args),
            },
            vec![BootDevice::Disk, BootDevice::Cdrom],
        ),
    };
    MachineSpec {
        node: settings.node.clone(),
        role,
        vm_name,
        mac,
        cores: settings.cores,
        memory_mib: settings.memory_mib,
        disk_gib: settings.disk_gib,
        vmid: settings.vmid,
        bmc: settings.bmc.clone(),
        install,
        boot_order,
    }
}

/// The name a node's ISO gets in a provider's storage: its VM's name and a digest of the
/// kernel arguments embedded in it, so an ISO made with other arguments is never taken for the
/// current one (`<vm_name>-<8 hex digits>.iso`; see [`is_iso_of`]).
pub fn iso_file_name(vm_name: &str, iso_args: &[String]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, iso_args.join(" ").as_bytes());
    format!(
        "{vm_name}-{}.iso",
        data_encoding::HEXLOWER.encode(&digest.as_ref()[..4])
    )
}

/// Whether `file_name` is an ISO of the VM `vm_name`, current or made with older arguments
/// (or before the names carried a digest: `<vm_name>.iso`).
pub fn is_iso_of(vm_name: &str, file_name: &str) -> bool {
    let Some(rest) = file_name
        .strip_prefix(vm_name)
        .and_then(|r| r.strip_suffix(".iso"))
    else {
        return false;
    };
    rest.is_empty()
        || rest
            .strip_prefix('-')
            .is_some_and(|h| h.len() == 8 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// One line per machine, as `nodes list` prints it and the golden files pin it.
impl fmt::Display for MachineSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): vm {}, ", self.node, self.role, self.vm_name)?;
        if let Some(id) = self.vmid {
            write!(f, "vmid {id}, ")?;
        }
        // A machine behind a BMC is bare metal: it has the CPUs, memory and disks it was
        // built with, and the sizes a VM would be made with mean nothing for it.
        if self.bmc.is_none() {
            write!(
                f,
                "{} vCPU, {} MiB, disk {} GiB, ",
                self.cores, self.memory_mib, self.disk_gib
            )?;
        }
        write!(f, "mac {}, boot ", self.mac)?;
        let order: Vec<&str> = self.boot_order.iter().map(|d| d.as_str()).collect();
        f.write_str(&order.join(","))?;
        if let InstallMedium::Iso { url, file_name } = &self.install {
            write!(f, ", iso {url} as {file_name}")?;
        }
        if let Some(bmc) = &self.bmc {
            write!(
                f,
                ", bmc {} as {} (password from {}, trust {})",
                bmc.url, bmc.username, bmc.password, bmc.trust
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_machines_boot_the_disk_first_and_pxe_machines_the_network() {
        let settings = |install| MachineSettings {
            node: "worker-0".into(),
            cores: 2,
            memory_mib: 8192,
            disk_gib: 120,
            install,
            vmid: None,
            bmc: None,
        };
        let mac = MacAddr([0x52, 0x54, 0, 0, 0, 5]);
        let args = vec!["coreos.inst.install_dev=/dev/vda".to_owned()];
        let iso = spec(
            &settings(InstallPath::Iso),
            Role::Worker,
            mac,
            "okd.example.com",
            "http://10.0.0.1:8080",
            &args,
        );
        assert_eq!(iso.boot_order, [BootDevice::Disk, BootDevice::Cdrom]);
        let InstallMedium::Iso { url, file_name } = &iso.install else {
            panic!("{:?}", iso.install)
        };
        assert_eq!(url, "http://10.0.0.1:8080/iso/worker-0.iso");
        assert!(
            is_iso_of("worker-0.okd.example.com", file_name),
            "{file_name}"
        );
        // Other kernel arguments, another name: an ISO made with the old ones is never reused.
        let other = spec(
            &settings(InstallPath::Iso),
            Role::Worker,
            mac,
            "okd.example.com",
            "http://10.0.0.1:8080",
            &["coreos.inst.install_dev=/dev/sda".to_owned()],
        );
        let InstallMedium::Iso {
            file_name: other, ..
        } = &other.install
        else {
            panic!()
        };
        assert_ne!(file_name, other);
        assert!(is_iso_of("worker-0.okd.example.com", other));
        assert!(is_iso_of(
            "worker-0.okd.example.com",
            "worker-0.okd.example.com.iso"
        ));
        for not_its in [
            "worker-01.okd.example.com-0123abcd.iso",
            "worker-0.okd.example.com-0123abc.iso",
            "worker-0.okd.example.com-0123abcd.img",
            "worker-0.okd.example.com.evil-0123abcd.iso",
        ] {
            assert!(!is_iso_of("worker-0.okd.example.com", not_its), "{not_its}");
        }
        let pxe = spec(
            &settings(InstallPath::Pxe),
            Role::Worker,
            mac,
            "okd.example.com",
            "http://10.0.0.1:8080",
            &args,
        );
        assert_eq!(pxe.boot_order, [BootDevice::Network, BootDevice::Disk]);
        assert_eq!(pxe.vm_name, "worker-0.okd.example.com");
    }
}
