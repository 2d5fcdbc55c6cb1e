//! How Proxmox VE spells a machine spec: the parameters of a VM, its NIC and CD drive
//! property strings, its boot order, and what its error messages mean.
//!
//! Architecture invariant: pure text in, text out; no I/O. The decisions (MAC, sizes, boot
//! order) were made in the plan; this only writes them the way the API reads them.

use crate::plan::machines::Proxmox;
use crate::plan::machines::{BootDevice, InstallMedium, MachineSpec};
use crate::vocabulary::MacAddr;

/// The devices a created VM has; their names in the API.
pub const NIC: &str = "net0";
pub const DISK: &str = "scsi0";
pub const CDROM: &str = "ide2";
/// CoreOS 9 (OKD/SCOS, RHCOS 9) needs x86-64-v2; Proxmox's old default `kvm64` is v1, and
/// `host` would tie the VM to this node's CPU model. Proxmox 8's default for new VMs.
pub const CPU: &str = "x86-64-v2-AES";
const EMPTY_CDROM: &str = "none,media=cdrom";

/// `virtio=BC:24:11:00:00:02,bridge=vmbr1[,tag=20]`.
pub fn nic(mac: MacAddr, px: &Proxmox) -> String {
    let mut s = format!(
        "virtio={},bridge={}",
        mac.to_string().to_ascii_uppercase(),
        px.bridge
    );
    if let Some(tag) = px.vlan {
        s.push_str(&format!(",tag={tag}"));
    }
    s
}

/// The MAC of a `net[n]` property string: `virtio=MAC,...`, `e1000=MAC,...` or
/// `model=virtio,macaddr=MAC`.
pub fn nic_mac(value: &str) -> Option<MacAddr> {
    value.split(',').find_map(|part| {
        let (key, val) = part.split_once('=')?;
        (key != "bridge" && key != "tag" && key != "firewall" && key != "link_down")
            .then(|| val.parse().ok())
            .flatten()
    })
}

/// The `bridge=` of a `net[n]` property string.
pub fn nic_bridge(value: &str) -> Option<&str> {
    value
        .split(',')
        .find_map(|part| part.strip_prefix("bridge="))
}

fn device(d: BootDevice) -> &'static str {
    match d {
        BootDevice::Network => NIC,
        BootDevice::Disk => DISK,
        BootDevice::Cdrom => CDROM,
    }
}

/// `order=net0;scsi0`: the plan's boot devices as this VM names them.
pub fn boot_order(order: &[BootDevice]) -> String {
    let names: Vec<&str> = order.iter().map(|d| device(*d)).collect();
    format!("order={}", names.join(";"))
}

/// The plan's order with `first` moved to the front (Proxmox has no one-time override).
pub fn boot_first(order: &[BootDevice], first: BootDevice) -> String {
    let mut devices = vec![first];
    devices.extend(order.iter().copied().filter(|d| *d != first));
    boot_order(&devices)
}

/// `local:iso/<file>`, the volume ID of a node's ISO.
pub fn iso_volume(px: &Proxmox, file_name: &str) -> String {
    format!("{}:iso/{file_name}", px.iso_storage)
}

pub fn cdrom(volume: &str) -> String {
    format!("{volume},media=cdrom")
}

pub fn empty_cdrom() -> &'static str {
    EMPTY_CDROM
}

/// The volume in a CD drive's property string, or `None` when it is empty.
pub fn cdrom_volume(value: &str) -> Option<&str> {
    let first = value.split(',').next()?;
    let volume = first.strip_prefix("file=").unwrap_or(first);
    (volume != "none" && !volume.is_empty() && !volume.contains('=')).then_some(volume)
}

/// The parameters of `POST /nodes/{node}/qemu` for a new VM.
pub fn create_params(m: &MachineSpec, px: &Proxmox, vmid: u32) -> Vec<(&'static str, String)> {
    let mut p = vec![
        ("vmid", vmid.to_string()),
        ("name", m.vm_name.clone()),
        ("cores", m.cores.to_string()),
        ("memory", m.memory_mib.to_string()),
        ("cpu", CPU.to_owned()),
        ("ostype", "l26".to_owned()),
        ("scsihw", "virtio-scsi-single".to_owned()),
        // `STORAGE:SIZE` allocates a new volume of SIZE GiB.
        (DISK, format!("{}:{}", px.storage, m.disk_gib)),
        (NIC, nic(m.mac, px)),
        ("boot", boot_order(&m.boot_order)),
        (
            "description",
            format!(
                "okd-appliance: {} node {} (do not rename: the appliance finds it by name)",
                m.role, m.node
            ),
        ),
    ];
    if let InstallMedium::Iso { file_name, .. } = &m.install {
        p.push((CDROM, cdrom(&iso_volume(px, file_name))));
    }
    if let Some(pool) = &px.pool {
        p.push(("pool", pool.clone()));
    }
    p
}

/// `Permission check failed (/vms/100, VM.Allocate)` -> (`/vms/100`, `VM.Allocate`).
pub fn missing_privilege(message: &str) -> Option<(String, String)> {
    let rest = message.split("Permission check failed (").nth(1)?;
    let inner = rest.split(')').next()?;
    let (path, privilege) = inner.rsplit_once(',')?;
    Some((path.trim().to_owned(), privilege.trim().to_owned()))
}

/// A built-in Proxmox role that holds `privilege`, for the hint.
pub fn role_with(privilege: &str) -> &'static str {
    match privilege {
        "VM.PowerMgmt" | "VM.Console" | "VM.Audit" => "PVEVMUser",
        p if p.starts_with("VM.") => "PVEVMAdmin",
        "Datastore.AllocateSpace" | "Datastore.Audit" => "PVEDatastoreUser",
        p if p.starts_with("Datastore.") => "PVEDatastoreAdmin",
        "SDN.Use" | "SDN.Audit" => "PVESDNUser",
        "Sys.Audit" => "PVEAuditor",
        "Pool.Allocate" | "Pool.Audit" => "PVEPoolAdmin",
        _ => "PVEAdmin",
    }
}

/// `can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout`: another task holds
/// the lock; it is worth trying again later.
pub fn is_lock_timeout(message: &str) -> bool {
    message.contains("can't lock file") && message.contains("got timeout")
}

/// `VM 101 already exists on node 'pve1'` (or a config file that already exists).
pub fn is_already_exists(message: &str) -> bool {
    message.contains("already exists")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::machines::{SecretSource, TlsTrust};

    fn px(vlan: Option<u16>) -> Proxmox {
        Proxmox {
            url: "https://pve1:8006".into(),
            node: "pve1".into(),
            token_id: "okd@pve!appliance".into(),
            token_secret: SecretSource::Env("T".into()),
            trust: TlsTrust::Fingerprint([0; 32]),
            storage: "local-lvm".into(),
            iso_storage: "local".into(),
            bridge: "vmbr1".into(),
            vlan,
            pool: None,
        }
    }

    #[test]
    fn nics_round_trip_their_mac_in_every_spelling() {
        let mac: MacAddr = "bc:24:11:00:00:02".parse().unwrap();
        let spelled = nic(mac, &px(Some(20)));
        assert_eq!(spelled, "virtio=BC:24:11:00:00:02,bridge=vmbr1,tag=20");
        assert_eq!(nic_mac(&spelled), Some(mac));
        assert_eq!(nic_bridge(&spelled), Some("vmbr1"));
        assert_eq!(
            nic_mac("model=e1000,macaddr=bc:24:11:00:00:02,bridge=vmbr0"),
            Some(mac)
        );
        assert_eq!(nic_mac("bridge=vmbr0,firewall=1"), None);
    }

    #[test]
    fn boot_orders_name_the_vm_devices() {
        use BootDevice::*;
        assert_eq!(boot_order(&[Network, Disk]), "order=net0;scsi0");
        assert_eq!(boot_first(&[Disk, Cdrom], Cdrom), "order=ide2;scsi0");
        assert_eq!(boot_first(&[Network, Disk], Cdrom), "order=ide2;net0;scsi0");
    }

    #[test]
    fn cd_drives_show_their_volume_or_none() {
        assert_eq!(
            cdrom_volume("local:iso/w.iso,media=cdrom,size=1G"),
            Some("local:iso/w.iso")
        );
        assert_eq!(cdrom_volume(empty_cdrom()), None);
        assert_eq!(cdrom_volume("media=cdrom"), None);
    }

    #[test]
    fn proxmox_error_messages_are_recognised() {
        assert_eq!(
            missing_privilege("Permission check failed (/sdn/zones/localnetwork/vmbr0, SDN.Use)\n"),
            Some(("/sdn/zones/localnetwork/vmbr0".into(), "SDN.Use".into()))
        );
        assert_eq!(missing_privilege("permission denied"), None);
        assert!(is_lock_timeout(
            "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout"
        ));
        assert!(is_already_exists("VM 101 already exists on node 'pve1'"));
        assert_eq!(role_with("VM.Config.Disk"), "PVEVMAdmin");
        assert_eq!(role_with("Datastore.AllocateTemplate"), "PVEDatastoreAdmin");
    }
}
