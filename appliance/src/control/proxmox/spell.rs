//! How Proxmox VE spells a machine spec: the parameters of a VM, its NIC and CD drive
//! property strings, its boot order, and what its error messages mean.
//!
//! Architecture invariant: pure text in, text out; no I/O. The decisions (MAC, sizes, boot
//! order) were made in the plan; this only writes them the way the API reads them.

use serde::Deserialize;

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
        // `STORAGE:SIZE` allocates a new volume of SIZE GiB (qemu-server
        // `src/PVE/QemuServer/Drive.pm` `$NEW_DISK_RE`); with virtio-scsi-single each disk
        // has its own controller, and `iothread=1` its own IO thread, as Proxmox's wizard
        // sets them (pve-manager `www/manager6/qemu/HDEdit.js`).
        (DISK, format!("{}:{},iothread=1", px.storage, m.disk_gib)),
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

/// `Permission check failed (/vms/100, VM.Allocate)` -> (`/vms/100`, `VM.Allocate`);
/// `(/storage/local, Datastore.Audit|Datastore.AllocateSpace)` names any-of privileges
/// (pve-access-control `src/PVE/RPCEnvironment.pm` `check`, `check_any`; pve-common
/// `src/PVE/Exception.pm` `raise_perm_exc`). Other texts in the parentheses (`pool 'x' does
/// not exist`) are not privileges.
pub fn missing_privilege(message: &str) -> Option<(String, String)> {
    let rest = message.split("Permission check failed (").nth(1)?;
    let inner = rest.split(')').next()?;
    let (path, privilege) = inner.rsplit_once(',')?;
    let (path, privilege) = (path.trim(), privilege.trim());
    let named = |p: &str| {
        p.split_once('.')
            .is_some_and(|(cat, name)| !cat.is_empty() && !name.is_empty())
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '.')
    };
    (path.starts_with('/') && privilege.split('|').all(named))
        .then(|| (path.to_owned(), privilege.to_owned()))
}

/// A 403 that names nothing: `raise_perm_exc()` without an argument, which Proxmox gives for
/// an `or` of checks (`exec_api2_perm_check`) and for create's VM.Allocate.
pub fn is_bare_permission_denial(message: &str) -> bool {
    message.trim() == "Permission check failed"
}

/// A built-in Proxmox role that holds `privilege`, the narrowest there is (pve-access-control
/// `src/PVE/AccessControl.pm`, `$privgroups` and `create_roles`: `PVE<Cat>User` holds a
/// category's user and audit privileges, `PVE<Cat>Admin` its admin ones too). `None` for the
/// privileges only `Administrator` holds (Sys.AccessNetwork, Sys.Modify...: PVEAdmin has
/// none of them).
pub fn role_with(privilege: &str) -> Option<&'static str> {
    Some(match privilege {
        "VM.Config.CDROM"
        | "VM.Config.Cloudinit"
        | "VM.Console"
        | "VM.Backup"
        | "VM.PowerMgmt"
        | "VM.Audit" => "PVEVMUser",
        p if p.starts_with("VM.GuestAgent.") && p != "VM.GuestAgent.Unrestricted" => "PVEVMUser",
        p if p.starts_with("VM.") => "PVEVMAdmin",
        "Datastore.AllocateSpace" | "Datastore.Audit" => "PVEDatastoreUser",
        p if p.starts_with("Datastore.") => "PVEDatastoreAdmin",
        "SDN.Use" | "SDN.Audit" => "PVESDNUser",
        p if p.starts_with("SDN.") => "PVESDNAdmin",
        "Sys.Audit" => "PVEAuditor",
        "Sys.Console" | "Sys.Syslog" => "PVESysAdmin",
        "Pool.Audit" => "PVEPoolUser",
        "Pool.Allocate" => "PVEPoolAdmin",
        "Mapping.Use" | "Mapping.Audit" => "PVEMappingUser",
        "Mapping.Modify" => "PVEMappingAdmin",
        "User.Modify" | "Group.Allocate" | "Realm.AllocateUser" => "PVEUserAdmin",
        _ => return None,
    })
}

/// How to grant `privilege` on `path` to the token `token_id` and to its user, as `pveum`
/// lines in backticks: a privilege-separated token (pveum's default) gets only what both its
/// own ACLs and its user's give (pve-access-control `src/PVE/RPCEnvironment.pm`
/// `permissions`), so granting the token alone changes nothing. `privilege` may be
/// `A|B` (any of them). A VM's path is widened to `/vms`: the most specific ACL path wins, so
/// a role on `/vms/100` would hide what `/vms` gives that VM.
pub fn grant(token_id: &str, path: &str, privilege: &str) -> String {
    let user = token_id.split_once('!').map_or(token_id, |(user, _)| user);
    let path = if path.starts_with("/vms/") {
        "/vms"
    } else {
        path
    };
    let first = privilege.split('|').next().unwrap_or(privilege);
    let acl = |role: &str| {
        format!("pveum acl modify {path} --users {user} --tokens '{token_id}' --roles {role}")
    };
    match role_with(first) {
        Some(role) => format!(
            "grant it to the token and to its user (a privilege-separated token has only what both have): `{}`",
            acl(role)
        ),
        None => {
            let role = format!("OKD{}", first.replace('.', ""));
            let mut text = format!(
                "only the built-in Administrator role holds {first} (PVEAdmin does not); rather than Administrator, make a role with just it and grant that to the token and to its user (a privilege-separated token has only what both have): `pveum role add {role} --privs {first}` (if the role exists already: `pveum role modify {role} --privs {first}`, which sets exactly that) and `{}`",
                acl(&role)
            );
            if first == "Sys.AccessNetwork" {
                // pve-storage `src/PVE/API2/Storage/Status.pm` `download_url`.
                text.push_str(
                    "; download-url also takes Sys.Audit and Sys.Modify on / instead (as before Proxmox VE 8.2), which allow far more",
                );
            }
            text
        }
    }
}

/// The oldest Proxmox VE release the provider works with, and why: `overrule-shutdown` on
/// stop came with qemu-server 8.1.2, Sys.AccessNetwork for download-url with
/// pve-access-control 8.1.2 and pve-storage 8.1.0, the x86-64-v2-AES CPU type with
/// qemu-server 8.0.4; pve-manager 8.2.0 (`debian/control`) is the first release that depends
/// on all of them.
pub const OLDEST_RELEASE: (u32, u32) = (8, 2);
/// The newest major release the provider was checked against (the API schema of
/// tests/contracts is a 9.x one).
pub const NEWEST_MAJOR: u32 = 9;

/// The `x.y` release of a `GET /version` answer (pve-manager `PVE/API2.pm` `version`:
/// `release` is `x.y`; `version` is the package version, `8.2.4` or before 8.0 `7.4-17`).
pub fn release(version: &serde_json::Value) -> Option<(u32, u32)> {
    let version = super::answers::Version::deserialize(version).ok()?;
    let text = version.release.or(version.version)?;
    let mut parts = text.split(['.', '-']);
    let major = parts.next()?.trim().parse().ok()?;
    let minor = parts.next()?.trim().parse().ok()?;
    Some((major, minor))
}

/// Why a release can't be used, or `None` when it can.
pub fn unsupported(endpoint: &str, version: &str, release: (u32, u32)) -> Option<String> {
    (release < OLDEST_RELEASE).then(|| {
        format!(
            "proxmox at {endpoint} runs Proxmox VE {version} (release {}.{}); okd-appliance needs Proxmox VE {}.{} or later (stop's overrule-shutdown, download-url with Sys.AccessNetwork, the x86-64-v2-AES CPU type): upgrade the node",
            release.0, release.1, OLDEST_RELEASE.0, OLDEST_RELEASE.1
        )
    })
}

/// Another task holds a lock the call needs; it is worth trying again later:
/// `can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout` (pve-common
/// `src/PVE/Tools.pm` `lock_file_full`), `cfs-lock 'file-...' error: got lock request
/// timeout` (pve-cluster `src/PVE/Cluster.pm` `cfs_lock`), `VM is locked (backup)`
/// (pve-guest-common `src/PVE/AbstractConfig.pm` `check_lock`: a backup, migration or
/// snapshot holds the VM's config).
/// What to do about a failed `download-url` of `url`, when its task's exit status says.
/// pve-storage `download_url` runs wget (pve-common `Tools.pm` `download_file_from_url`,
/// `errmsg => "download failed"`), which checks an https URL against the Proxmox node's
/// system CA store and exits 5 on "SSL verification failure" (wget(1), EXIT STATUS).
pub fn download_hint(url: &str, exitstatus: &str) -> Option<&'static str> {
    (url.starts_with("https://") && exitstatus.trim_end().ends_with("download failed: exit code 5"))
        .then_some(
            "the Proxmox node's wget could not verify the certificate of install.base_url: add the CA that signed it to each Proxmox node's system store (`cp ca.pem /usr/local/share/ca-certificates/okd-appliance.crt && update-ca-certificates`), or serve base_url over http (the ISO carries no secret; the ignition it names is fetched by the node itself)",
        )
}

pub fn is_lock_timeout(message: &str) -> bool {
    (message.contains("can't lock file") && message.contains("got timeout"))
        || (message.contains("cfs-lock") && message.contains("got lock request timeout"))
        || message.contains(" is locked (")
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
        assert_eq!(
            missing_privilege("Permission check failed (pool 'okd' does not exist)"),
            None
        );
        assert_eq!(
            missing_privilege(
                "Permission check failed (/storage/local, Datastore.Audit|Datastore.AllocateSpace)"
            ),
            Some((
                "/storage/local".into(),
                "Datastore.Audit|Datastore.AllocateSpace".into()
            ))
        );
        assert!(is_bare_permission_denial("Permission check failed\n"));
        assert!(!is_bare_permission_denial(
            "Permission check failed (/vms/100, VM.Allocate)"
        ));
        assert!(is_lock_timeout(
            "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout"
        ));
        assert!(is_lock_timeout(
            "cfs-lock 'file-qemu-server_101_conf' error: got lock request timeout"
        ));
        assert!(is_lock_timeout("VM is locked (backup)"));
        assert!(!is_lock_timeout("VM 101 already running"));
        assert!(is_already_exists("VM 101 already exists on node 'pve1'"));
        assert_eq!(role_with("VM.Config.Disk"), Some("PVEVMAdmin"));
        assert_eq!(role_with("VM.Config.CDROM"), Some("PVEVMUser"));
        assert_eq!(
            role_with("Datastore.AllocateTemplate"),
            Some("PVEDatastoreAdmin")
        );
        assert_eq!(role_with("Sys.AccessNetwork"), None);
    }

    #[test]
    fn releases_are_read_and_checked() {
        use serde_json::json;
        assert_eq!(
            release(&json!({"version": "8.2.4", "release": "8.2"})),
            Some((8, 2))
        );
        assert_eq!(release(&json!({"version": "7.4-17"})), Some((7, 4)));
        assert_eq!(
            release(&json!({"version": "9.1.2", "release": "9.1"})),
            Some((9, 1))
        );
        assert_eq!(release(&json!({})), None);
        assert!(unsupported("https://pve", "8.1.10", (8, 1)).is_some());
        assert!(unsupported("https://pve", "8.2.4", (8, 2)).is_none());
        assert!(unsupported("https://pve", "10.0.1", (10, 0)).is_none());
    }

    #[test]
    fn grants_name_the_token_and_its_user() {
        let g = grant("okd@pve!appliance", "/vms/9002", "VM.Allocate");
        assert!(
            g.contains("`pveum acl modify /vms --users okd@pve --tokens 'okd@pve!appliance' --roles PVEVMAdmin`"),
            "{g}"
        );
        let any = grant(
            "okd@pve!appliance",
            "/storage/local",
            "Datastore.AllocateSpace|Datastore.Audit",
        );
        assert!(any.contains("/storage/local --users okd@pve"), "{any}");
        assert!(any.contains("--roles PVEDatastoreUser"), "{any}");
        let net = grant("okd@pve!appliance", "/nodes/pve1", "Sys.AccessNetwork");
        assert!(
            net.contains("`pveum role add OKDSysAccessNetwork --privs Sys.AccessNetwork`"),
            "{net}"
        );
        // pve-access-control `src/PVE/API2/Role.pm`: `create_role` refuses an existing role;
        // `update_role` without `--append` replaces its privileges, so a second run works.
        assert!(
            net.contains("`pveum role modify OKDSysAccessNetwork --privs Sys.AccessNetwork`"),
            "{net}"
        );
        assert!(net.contains("PVEAdmin does not"), "{net}");
    }
}
