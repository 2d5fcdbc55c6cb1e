//! How libvirt spells a machine spec: the domain XML `virsh define` reads, the CD drive XML
//! `virsh update-device` reads, and the text `virsh domstate`, `domiflist` and `domblklist`
//! print.
//!
//! Architecture invariant: pure text in, text out; no I/O. The decisions (MAC, sizes, boot
//! order, ISO URL) come from the plan.

use crate::plan::machines::{BootDevice, InstallMedium, MachineSpec};
use crate::plan::machines::{DomainType, Firmware, Libvirt, LibvirtNet};
use crate::vocabulary::MacAddr;

/// The CD drive's target: SATA on q35.
pub const CDROM_TARGET: &str = "sda";

/// The disk volume of a machine in the pool.
pub fn volume(m: &MachineSpec) -> String {
    format!("{}.qcow2", m.vm_name)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}

fn boot(order: &[BootDevice], device: BootDevice) -> String {
    order
        .iter()
        .position(|d| *d == device)
        .map(|i| format!("\n      <boot order='{}'/>", i + 1))
        .unwrap_or_default()
}

/// The CD drive with the node's ISO served over HTTP(S) by the appliance (QEMU's curl block
/// driver reads it; nothing is copied), or an empty drive.
pub fn cdrom(iso_url: Option<&str>, order: &[BootDevice]) -> Result<String, String> {
    let source = match iso_url {
        None => String::new(),
        Some(url) => {
            let u = url::Url::parse(url).map_err(|e| format!("ISO URL {url}: {e}"))?;
            let host = u
                .host_str()
                .ok_or_else(|| format!("ISO URL {url} has no host"))?;
            let port = u
                .port_or_known_default()
                .ok_or_else(|| format!("ISO URL {url} has no port"))?;
            format!(
                "\n      <source protocol='{}' name='{}'>\n        <host name='{}' port='{port}'/>\n      </source>",
                escape(u.scheme()),
                escape(u.path()),
                escape(host)
            )
        }
    };
    Ok(format!(
        "    <disk type='network' device='cdrom'>\n      <driver name='qemu' type='raw'/>{source}\n      <target dev='{CDROM_TARGET}' bus='sata'/>\n      <readonly/>{}\n    </disk>\n",
        boot(order, BootDevice::Cdrom)
    ))
}

/// The domain: q35, the node's MAC on a virtio NIC (non-transitional: Debian's iPXE ROM
/// matches only the modern device), a qcow2 volume from the pool, the ISO drive for the ISO
/// path, the plan's boot order as per-device `<boot order>`.
pub fn domain(m: &MachineSpec, lv: &Libvirt) -> Result<String, String> {
    let (kind, cpu) = match lv.domain_type {
        DomainType::Kvm => ("kvm", "<cpu mode='host-passthrough'/>"),
        // TCG: the most the emulator offers (CoreOS 9 needs x86-64-v2).
        DomainType::Qemu => ("qemu", "<cpu mode='maximum'/>"),
    };
    let firmware = match lv.firmware {
        Firmware::Bios => "",
        Firmware::Uefi => " firmware='efi'",
    };
    let interface = match &lv.attach {
        LibvirtNet::Network(n) => {
            format!("type='network'>\n      <source network='{}'/>", escape(n))
        }
        LibvirtNet::Bridge(b) => format!("type='bridge'>\n      <source bridge='{}'/>", escape(b)),
    };
    let cdrom = match &m.install {
        InstallMedium::Iso { url, .. } => cdrom(Some(url), &m.boot_order)?,
        InstallMedium::Network => String::new(),
    };
    Ok(format!(
        "<domain type='{kind}'>
  <name>{name}</name>
  <description>okd-appliance: {role} node {node} (do not rename: the appliance finds it by name)</description>
  <memory unit='MiB'>{memory}</memory>
  <vcpu>{cores}</vcpu>
  <os{firmware}>
    <type arch='x86_64' machine='q35'>hvm</type>
  </os>
  <features>
    <acpi/>
    <apic/>
  </features>
  {cpu}
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source pool='{pool}' volume='{volume}'/>
      <target dev='vda' bus='virtio'/>{disk_boot}
    </disk>
{cdrom}    <interface {interface}
      <mac address='{mac}'/>
      <model type='virtio-non-transitional'/>{net_boot}
    </interface>
    <serial type='pty'/>
    <console type='pty'/>
  </devices>
</domain>
",
        name = escape(&m.vm_name),
        role = m.role,
        node = escape(&m.node),
        memory = m.memory_mib,
        cores = m.cores,
        pool = escape(&lv.pool),
        volume = escape(&volume(m)),
        disk_boot = boot(&m.boot_order, BootDevice::Disk),
        net_boot = boot(&m.boot_order, BootDevice::Network),
        mac = m.mac,
    ))
}

/// `virsh domiflist`: the MAC of each NIC (the last column of each row).
pub fn macs(domiflist: &str) -> Vec<MacAddr> {
    domiflist
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// `virsh domblklist --details`: the source of the CD drive, if one is inserted.
pub fn cdrom_source(domblklist: &str) -> Option<Option<String>> {
    domblklist.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        match cols.as_slice() {
            [_, "cdrom", target, source] if *target == CDROM_TARGET => {
                Some((*source != "-").then(|| (*source).to_owned()))
            }
            [_, "cdrom", target] if *target == CDROM_TARGET => Some(None),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::Role;

    fn spec(install: InstallMedium, order: Vec<BootDevice>) -> MachineSpec {
        MachineSpec {
            node: "worker-0".into(),
            role: Role::Worker,
            vm_name: "worker-0.okd.example.com".into(),
            mac: "52:54:00:00:00:05".parse().unwrap(),
            cores: 2,
            memory_mib: 8192,
            disk_gib: 120,
            vmid: None,
            bmc: None,
            install,
            boot_order: order,
        }
    }

    fn lv() -> Libvirt {
        Libvirt {
            uri: "qemu:///system".into(),
            attach: LibvirtNet::Bridge("br0".into()),
            pool: "default".into(),
            firmware: Firmware::Uefi,
            domain_type: DomainType::Qemu,
        }
    }

    #[test]
    fn domains_carry_the_mac_and_the_plan_boot_order() {
        use BootDevice::*;
        let xml = domain(&spec(InstallMedium::Network, vec![Network, Disk]), &lv()).unwrap();
        assert!(xml.contains("<mac address='52:54:00:00:00:05'/>"), "{xml}");
        assert!(xml.contains("<source bridge='br0'/>"), "{xml}");
        assert!(
            xml.contains("<model type='virtio-non-transitional'/>\n      <boot order='1'/>"),
            "{xml}"
        );
        assert!(
            xml.contains("<target dev='vda' bus='virtio'/>\n      <boot order='2'/>"),
            "{xml}"
        );
        assert!(xml.contains("<os firmware='efi'>"), "{xml}");
        assert!(!xml.contains("cdrom"), "{xml}");

        let iso = InstallMedium::Iso {
            url: "http://10.0.0.1:8080/iso/worker-0.iso".into(),
            file_name: "x.iso".into(),
        };
        let xml = domain(&spec(iso, vec![Disk, Cdrom]), &lv()).unwrap();
        assert!(
            xml.contains("<source protocol='http' name='/iso/worker-0.iso'>\n        <host name='10.0.0.1' port='8080'/>"),
            "{xml}"
        );
        assert!(
            xml.contains("<readonly/>\n      <boot order='2'/>"),
            "{xml}"
        );
    }

    #[test]
    fn virsh_tables_are_read() {
        let iflist = " Interface   Type     Source   Model                     MAC\n---------------------------------------------------------\n vnet0       bridge   br0      virtio-non-transitional   52:54:00:00:00:05\n";
        assert_eq!(macs(iflist), ["52:54:00:00:00:05".parse().unwrap()]);
        let blk = " Type      Device   Target   Source\n------------------------------------------------\n file      disk     vda      /var/lib/libvirt/images/w.qcow2\n network   cdrom    sda      /iso/worker-0.iso\n";
        assert_eq!(cdrom_source(blk), Some(Some("/iso/worker-0.iso".into())));
        let empty = " network   cdrom    sda      -\n";
        assert_eq!(cdrom_source(empty), Some(None));
        assert_eq!(cdrom_source(" file disk vda /x\n"), None);
    }
}
