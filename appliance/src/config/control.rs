//! The validated `control:` section: which provider creates and powers the cluster's machines,
//! how to reach it, and what each node's machine gets.
//!
//! Architecture invariant: no secret is ever held here. A credential is a [`SecretSource`] (a
//! file path or an environment variable name) that the control module reads when it acts, so a
//! `Config` can be printed, logged and compared without leaking a token.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::Role;

/// OpenShift's documented minimum resources per role (bootstrap and control plane: 4 vCPU,
/// 16 GiB, 120 GB; compute: 2 vCPU, 8 GiB). Disks are counted in GiB, so 120 GiB is at least
/// the documented 120 GB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Minimum {
    pub cores: u32,
    pub memory_mib: u64,
    pub disk_gib: u64,
}

impl Minimum {
    pub fn of(role: Role) -> Minimum {
        match role {
            Role::Bootstrap | Role::Master => Minimum {
                cores: 4,
                memory_mib: 16 * 1024,
                disk_gib: 120,
            },
            Role::Worker => Minimum {
                cores: 2,
                memory_mib: 8 * 1024,
                disk_gib: 120,
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    pub provider: Provider,
    /// One per node, in the order of `nodes:`, every default filled in.
    pub machines: Vec<MachineSettings>,
    pub timeouts: ControlTimeouts,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            provider: Provider::None,
            machines: Vec::new(),
            timeouts: ControlTimeouts::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    /// The operator creates and powers the machines.
    None,
    Proxmox(Proxmox),
    /// Bare metal (or anything with a BMC) through each node's Redfish service.
    Redfish,
    Libvirt(Libvirt),
}

/// A libvirt connection, driven through `virsh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Libvirt {
    pub uri: String,
    pub attach: LibvirtNet,
    pub pool: String,
    pub firmware: Firmware,
    pub domain_type: DomainType,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LibvirtNet {
    Network(String),
    Bridge(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Firmware {
    Bios,
    Uefi,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainType {
    Kvm,
    /// Software emulation (TCG), where there is no KVM.
    Qemu,
}

impl Provider {
    pub fn name(&self) -> &'static str {
        match self {
            Provider::None => "none",
            Provider::Proxmox(_) => "proxmox",
            Provider::Redfish => "redfish",
            Provider::Libvirt(_) => "libvirt",
        }
    }
}

/// A node's Redfish BMC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bmc {
    /// `https://host[:port]` (the service root is found under it) or a system's own URL.
    pub url: String,
    pub username: String,
    pub password: SecretSource,
    pub trust: BmcTrust,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BmcTrust {
    Verify(TlsTrust),
    /// `insecure: true`: any certificate (the handshake is still checked against it).
    Insecure,
}

impl fmt::Display for BmcTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BmcTrust::Verify(t) => t.fmt(f),
            BmcTrust::Insecure => f.write_str("any certificate (insecure: true)"),
        }
    }
}

/// A Proxmox VE node reached over its REST API with an API token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxmox {
    /// `https://host[:port]` without a trailing slash.
    pub url: String,
    /// The Proxmox node the VMs live on.
    pub node: String,
    /// `USER@REALM!TOKENID`.
    pub token_id: String,
    pub token_secret: SecretSource,
    pub trust: TlsTrust,
    /// Storage for VM disks.
    pub storage: String,
    /// Storage the node ISOs are downloaded into (content type `iso`).
    pub iso_storage: String,
    pub bridge: String,
    pub vlan: Option<u16>,
    pub pool: Option<String>,
}

/// Where a credential is read from when it is needed; never the credential itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// A file readable by its owner only (checked when the config is validated and again when
    /// it is read).
    File(PathBuf),
    /// An environment variable of the process that acts.
    Env(String),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File(path) => write!(f, "file {}", path.display()),
            SecretSource::Env(name) => write!(f, "environment variable {name}"),
        }
    }
}

/// How a provider's TLS certificate is trusted. There is no "don't verify".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsTrust {
    /// The certificate must chain to a CA in this PEM file and name the host.
    CaFile(PathBuf),
    /// The certificate's SHA-256 digest must be exactly this (Proxmox's self-signed default).
    Fingerprint([u8; 32]),
}

impl fmt::Display for TlsTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsTrust::CaFile(path) => write!(f, "CA file {}", path.display()),
            TlsTrust::Fingerprint(digest) => {
                f.write_str("SHA-256 fingerprint ")?;
                for (i, b) in digest.iter().enumerate() {
                    if i > 0 {
                        f.write_str(":")?;
                    }
                    write!(f, "{b:02X}")?;
                }
                Ok(())
            }
        }
    }
}

/// How a node's machine gets CoreOS onto its disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallPath {
    /// Network boot: DHCP, iPXE, the node's script.
    Pxe,
    /// The node's live ISO (`/iso/<node>.iso`) as a CD-ROM or virtual media.
    Iso,
}

impl InstallPath {
    pub fn as_str(self) -> &'static str {
        match self {
            InstallPath::Pxe => "pxe",
            InstallPath::Iso => "iso",
        }
    }
}

impl fmt::Display for InstallPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one node's machine gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSettings {
    /// The node's name (as in `nodes:`).
    pub node: String,
    pub cores: u32,
    pub memory_mib: u64,
    pub disk_gib: u64,
    pub install: InstallPath,
    /// An explicit Proxmox VM ID; the next free one when absent.
    pub vmid: Option<u32>,
    /// The node's BMC, for provider redfish.
    pub bmc: Option<Bmc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlTimeouts {
    /// One API request, connect to last byte.
    pub request: Duration,
    /// One provider task until it ends (an ISO download is one).
    pub task: Duration,
    /// A graceful shutdown before the machine is forced off.
    pub shutdown: Duration,
}

impl Default for ControlTimeouts {
    fn default() -> Self {
        ControlTimeouts {
            request: Duration::from_secs(30),
            task: Duration::from_secs(15 * 60),
            shutdown: Duration::from_secs(120),
        }
    }
}
