//! The domain XML the libvirt provider defines, for every machine of the shipped libvirt
//! config and for both firmwares and domain types, validates against libvirt's own schema
//! (`virt-xml-validate`, libvirt-clients with xmllint). Without the tool the test says SKIPPED
//! (and fails with CI=true).

use std::path::Path;
use std::process::Command;

use okd_appliance::config::{self, DomainType, Firmware, LibvirtNet, Provider};
use okd_appliance::control::libvirt::xml;
use okd_appliance::plan::Plan;

#[test]
fn domain_xml_validates_against_libvirt_schema() {
    let ok = Command::new("virt-xml-validate")
        .arg("--help")
        .output()
        .is_ok()
        && Command::new("xmllint").arg("--version").output().is_ok();
    if !ok {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "virt-xml-validate and xmllint are needed (libvirt-clients, libxml2-utils)"
        );
        eprintln!(
            "SKIPPED domain_xml_validates_against_libvirt_schema: needs virt-xml-validate and xmllint"
        );
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/libvirt.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let loaded = config::parse(
        &text,
        "libvirt.yml",
        path.parent().unwrap(),
        config::InstallCheck::Skip,
    )
    .unwrap();
    let plan = Plan::derive(&loaded.config, 1).control;
    let Provider::Libvirt(base) = &plan.provider else {
        panic!("config/libvirt.yml is not libvirt")
    };
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (firmware, domain_type, attach) in [
        (
            Firmware::Uefi,
            DomainType::Kvm,
            LibvirtNet::Bridge("br-okd".into()),
        ),
        (
            Firmware::Bios,
            DomainType::Qemu,
            LibvirtNet::Network("default".into()),
        ),
    ] {
        let mut lv = base.clone();
        lv.firmware = firmware;
        lv.domain_type = domain_type;
        lv.attach = attach;
        for m in &plan.machines {
            let file = dir.path().join(format!("{}-{checked}.xml", m.node));
            std::fs::write(&file, xml::domain(m, &lv).unwrap()).unwrap();
            let out = Command::new("virt-xml-validate")
                .arg(&file)
                .arg("domain")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}{}\n{}",
                m.node,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(&file).unwrap()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 2 * plan.machines.len());
}
