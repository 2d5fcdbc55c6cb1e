//! `okd-appliance render --format single-node-network`: a MachineConfig that gives the
//! installed single node the addresses its live system had, for openshift-install's manifests.
//!
//! Why it is needed (each checked in upstream's source): the live system gets its addresses from
//! the `ip=` kernel arguments the appliance serves, but bootstrap-in-place writes the disk with
//! `coreos-installer install -i /opt/openshift/master.ign <disk>` and nothing else
//! (openshift/installer `data/data/bootstrap/bootstrap-in-place/files/usr/local/bin/
//! install-to-disk.sh.template` at 1ad01588, line 14: no `--copy-network`, no kernel
//! arguments); coreos-installer copies no kernel argument of the live system and keyfiles only
//! with `--copy-network` (coreos/coreos-installer `src/install.rs` at bee45001, lines 85-93 and
//! 466-503); and `master.ign` holds what the machine config server renders, which is the
//! cluster's MachineConfigs (`bootstrap-in-place.sh` at 1401d0d2, lines 29-50). So the
//! installed disk comes up with NetworkManager's default, DHCP and IPv6 autoconfiguration: the
//! IPv4 reservation still gives it its address, but the IPv6 address (no DHCPv6 here), the
//! name server and the host name are gone. A MachineConfig for the master role carrying a
//! keyfile is what upstream's design leaves (fedora-coreos-tracker#288: networking comes from
//! Ignition and keyfiles, not kernel arguments): put it in `<dir>/openshift/` between
//! `openshift-install create manifests` and `create single-node-ignition-config`.
//!
//! Architecture invariant: reads the config only, pure.

use std::fmt::Write as _;

use crate::config::Config;

/// The manifest's file name in openshift-install's `openshift/` directory.
pub const FILE_NAME: &str = "99-master-okd-appliance-network.yaml";

/// The MachineConfig of `config`'s single node, or why there is none.
pub fn render(config: &Config) -> Result<String, String> {
    let Some(node) = config.single_node() else {
        return Err(
            "this is not a single-node cluster: nodes that install from a bootstrap node keep \
             the addresses DHCP reserves for them"
                .to_owned(),
        );
    };
    let net = &config.network;
    let mut keyfile = String::new();
    let _ = writeln!(
        keyfile,
        "[connection]\nid=okd-appliance\ntype=ethernet\nautoconnect-priority=100\n\n[ethernet]\nmac-address={}",
        node.mac
    );
    if let Some(mtu) = net.mtu {
        let _ = writeln!(keyfile, "mtu={mtu}");
    }
    let gateway4 = net.v4.gateway.map(|g| format!(",{g}")).unwrap_or_default();
    let _ = writeln!(
        keyfile,
        "\n[ipv4]\nmethod=manual\naddress1={}/{}{gateway4}\ndns={};",
        node.ipv4,
        net.v4.subnet.prefix_len(),
        net.v4.appliance
    );
    if !net.domain_search.is_empty() {
        let _ = writeln!(keyfile, "dns-search={};", net.domain_search.join(";"));
    }
    match (&net.v6, node.ipv6) {
        (Some(v6), Some(ip)) => {
            let gateway6 = v6.gateway.map(|g| format!(",{g}")).unwrap_or_default();
            let _ = writeln!(
                keyfile,
                "\n[ipv6]\nmethod=manual\naddress1={ip}/{}{gateway6}\ndns={};",
                v6.subnet.prefix_len(),
                v6.appliance
            );
        }
        _ => {
            let _ = writeln!(keyfile, "\n[ipv6]\nmethod=disabled");
        }
    }
    let data_url = |text: &str| {
        format!(
            "data:,{}",
            percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC)
        )
    };
    let files = [
        (
            "/etc/NetworkManager/system-connections/okd-appliance.nmconnection",
            // NetworkManager ignores a keyfile others can read.
            0o600,
            data_url(&keyfile),
        ),
        (
            "/etc/hostname",
            0o644,
            data_url(&format!("{}\n", node.name)),
        ),
    ];
    let mut o = format!(
        "# The addresses of {node} on its installed disk, written by `okd-appliance render --format\n\
         # single-node-network`: put it in <dir>/openshift/ after `openshift-install create manifests`\n\
         # and before `create single-node-ignition-config` (bootstrap-in-place does not copy the\n\
         # live system's network to the disk).\n\
         apiVersion: machineconfiguration.openshift.io/v1\n\
         kind: MachineConfig\n\
         metadata:\n  name: 99-master-okd-appliance-network\n  labels:\n    \
         machineconfiguration.openshift.io/role: master\n\
         spec:\n  config:\n    ignition:\n      version: 3.2.0\n    storage:\n      files:\n",
        node = node.name
    );
    for (path, mode, source) in files {
        let _ = write!(
            o,
            "        - path: {path}\n          mode: {mode}\n          overwrite: true\n          \
             contents:\n            source: \"{source}\"\n"
        );
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{InstallCheck, parse};

    const SNO: &str = r#"version: 1
cluster: { name: sno, base_domain: lab.example.com }
network:
  subnet: 10.0.0.0/24
  gateway: 10.0.0.254
  appliance_ip: 10.0.0.1
  mtu: 9000
  ipv6: { subnet: "fd00:10::/64", gateway: "fd00:10::fe", appliance_ip: "fd00:10::1" }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2, ipv6: "fd00:10::2" }
install: { ignition_dir: ./i, artifacts_dir: ./a }
"#;

    fn config(yaml: &str) -> Config {
        parse(yaml, "sno.yml", Path::new("."), InstallCheck::Skip)
            .expect("valid config")
            .config
    }

    /// The files of the MachineConfig, decoded: (path, mode, contents).
    fn files(yaml: &str) -> Vec<(String, u64, String)> {
        let doc: serde_json::Value = serde_saphyr::from_str(yaml).expect("YAML");
        assert_eq!(doc["kind"], "MachineConfig");
        assert_eq!(
            doc["metadata"]["labels"]["machineconfiguration.openshift.io/role"],
            "master"
        );
        doc["spec"]["config"]["storage"]["files"]
            .as_array()
            .expect("files")
            .iter()
            .map(|f| {
                let source = f["contents"]["source"].as_str().unwrap();
                let text =
                    percent_encoding::percent_decode_str(source.strip_prefix("data:,").unwrap())
                        .decode_utf8()
                        .unwrap()
                        .into_owned();
                (
                    f["path"].as_str().unwrap().to_owned(),
                    f["mode"].as_u64().unwrap(),
                    text,
                )
            })
            .collect()
    }

    #[test]
    fn the_single_node_keeps_both_addresses_its_name_server_and_its_name() {
        let rendered = render(&config(SNO)).unwrap();
        let files = files(&rendered);
        assert_eq!(files.len(), 2);
        let (path, mode, keyfile) = &files[0];
        assert_eq!(
            (path.as_str(), *mode),
            (
                "/etc/NetworkManager/system-connections/okd-appliance.nmconnection",
                0o600
            )
        );
        for line in [
            "mac-address=52:54:00:00:00:02\nmtu=9000\n",
            "[ipv4]\nmethod=manual\naddress1=10.0.0.2/24,10.0.0.254\ndns=10.0.0.1;\n",
            "[ipv6]\nmethod=manual\naddress1=fd00:10::2/64,fd00:10::fe\ndns=fd00:10::1;\n",
        ] {
            assert!(keyfile.contains(line), "{line:?} in\n{keyfile}");
        }
        assert_eq!(
            files[1],
            ("/etc/hostname".into(), 0o644, "master-0\n".into())
        );
    }

    #[test]
    fn ipv4_only_disables_ipv6_and_a_cluster_of_several_has_none() {
        let v4 = SNO
            .replace("  ipv6: { subnet: \"fd00:10::/64\", gateway: \"fd00:10::fe\", appliance_ip: \"fd00:10::1\" }\n", "")
            .replace(", ipv6: \"fd00:10::2\"", "");
        let keyfile = &files(&render(&config(&v4)).unwrap())[0].2;
        assert!(keyfile.ends_with("[ipv6]\nmethod=disabled\n"), "{keyfile}");
        let several = SNO.replace(
            "install:",
            "  - { name: worker-0, role: worker, mac: \"52:54:00:00:00:05\", ip: 10.0.0.5, ipv6: \"fd00:10::5\" }\ninstall:",
        );
        assert!(render(&config(&several)).is_err());
    }
}
