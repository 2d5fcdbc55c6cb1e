//! The services host's own cluster-side NICs, as systemd-networkd `.network` files: the
//! appliance's addresses on the cluster subnets, on each `network.interface`.
//!
//! The appliance binds its listeners to `network.appliance_ip` (and the IPv6 one), so something
//! must put those addresses on the cluster NIC before it starts. On the services VM image
//! (`images/`) these files are written from the config at every start, so the config stays the
//! one place that names them. A host file's clusters get one file per interface, holding every
//! address its clusters put there (two clusters on one NIC: one file, both addresses; a file per
//! cluster would have networkd apply only the first that matches). Each file is
//! `10-okd-appliance-<interface>.network`; the image's `prepare` step removes the file of an
//! interface the config no longer names. `tests/e2e/networkd.rs` has that step and the real
//! systemd-networkd bring a host file's addresses up.
//!
//! Architecture invariant: this reads the validated config's `network` sections only; it is not
//! a renderer of the plan (the plan describes what is served, not how the host is set up).

use std::fmt::Write as _;
use std::net::IpAddr;

use crate::config::{Config, Host};

/// The name of `interface`'s file in networkd's runtime directory: it sorts before the image's
/// catch-all DHCP file for the other NICs (`90-okd-appliance-dhcp.network`), and each interface
/// has its own.
pub fn file_name(interface: &str) -> String {
    format!("10-okd-appliance-{interface}.network")
}

/// One interface's `.network` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkFile {
    pub interface: String,
    pub file_name: String,
    pub text: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostNetworkError {
    /// Without `network.interface` the appliance does not know which NIC is the cluster's.
    #[error(
        "network.interface is not set, so the cluster NIC is unknown: name it in the config or \
         configure the appliance's addresses by other means"
    )]
    NoInterface,
    /// A host file's clusters whose files name no interface: their addresses would be missing.
    #[error("{}", without_interface(.0))]
    ClustersWithoutInterface(Vec<String>),
    /// Two clusters on one NIC that want different MTUs: a link has one.
    #[error(
        "interface {interface} has MTU {mtu} for {cluster} and {other_mtu} for {other}: a link \
         has one MTU, give both the same network.mtu"
    )]
    MtuConflict {
        interface: String,
        cluster: String,
        mtu: u16,
        other: String,
        other_mtu: u16,
    },
}

fn without_interface(ids: &[String]) -> String {
    let (whose, them) = if ids.len() == 1 {
        ("its file names", "its address")
    } else {
        ("their files name", "their addresses")
    };
    format!(
        "cluster{} {}: {whose} no network.interface, so the NIC for {them} is unknown: name it \
         there, or configure {them} by other means",
        plural(ids),
        ids.join(", ")
    )
}

fn plural(v: &[String]) -> &'static str {
    if v.len() == 1 { "" } else { "s" }
}

/// One address on a NIC, and whose it is.
struct Address {
    ip: IpAddr,
    prefix: u8,
    owner: String,
}

/// What one NIC carries: its MTU (and which cluster set it) and its addresses.
struct Nic {
    interface: String,
    mtu: Option<(u16, String)>,
    addresses: Vec<Address>,
}

impl Nic {
    /// Adds `config`'s addresses, named `owner` in the file.
    fn add(&mut self, config: &Config, owner: String) -> Result<(), HostNetworkError> {
        let net = &config.network;
        if let Some(mtu) = net.mtu {
            match &self.mtu {
                Some((theirs, other)) if *theirs != mtu => {
                    return Err(HostNetworkError::MtuConflict {
                        interface: self.interface.clone(),
                        cluster: owner,
                        mtu,
                        other: other.clone(),
                        other_mtu: *theirs,
                    });
                }
                Some(_) => {}
                None => self.mtu = Some((mtu, owner.clone())),
            }
        }
        let v4 = (IpAddr::V4(net.v4.appliance), net.v4.subnet.prefix_len());
        let v6 = net
            .v6
            .as_ref()
            .map(|v6| (IpAddr::V6(v6.appliance), v6.subnet.prefix_len()));
        for (ip, prefix) in std::iter::once(v4).chain(v6) {
            // Clusters on one subnet may share the appliance's address there: one entry.
            if !self.addresses.iter().any(|a| a.ip == ip) {
                self.addresses.push(Address {
                    ip,
                    prefix,
                    owner: owner.clone(),
                });
            }
        }
        Ok(())
    }

    fn render(&self, header: &str) -> NetworkFile {
        let mut o = String::new();
        let _ = writeln!(o, "{header}");
        let _ = writeln!(o, "[Match]\nName={}\n", self.interface);
        let _ = writeln!(o, "[Link]");
        // Online as soon as the addresses are set, cable or not: the appliance can then bind,
        // and a cluster network that is not wired yet does not hold up the boot.
        let _ = writeln!(o, "RequiredForOnline=no-carrier");
        if let Some((mtu, _)) = &self.mtu {
            // The MTU the nodes are told (DHCP option 26) is the link's.
            let _ = writeln!(o, "MTUBytes={mtu}");
        }
        let _ = writeln!(o, "\n[Network]");
        // The appliance is the DHCP server on this link, not a client; a router advertising on
        // the cluster subnet must not give the host addresses or routes it did not ask for.
        let _ = writeln!(o, "DHCP=no\nIPv6AcceptRA=no\nConfigureWithoutCarrier=yes");
        for a in &self.addresses {
            let _ = writeln!(
                o,
                "\n# {}\n[Address]\nAddress={}/{}",
                a.owner, a.ip, a.prefix
            );
            if a.ip.is_ipv6() {
                // A tentative address can't be bound, and without a carrier duplicate address
                // detection never finishes: the appliance owns this address by configuration.
                let _ = writeln!(o, "DuplicateAddressDetection=none");
            }
        }
        NetworkFile {
            interface: self.interface.clone(),
            file_name: file_name(&self.interface),
            text: o,
        }
    }
}

/// The `.network` file for the cluster NIC of `config`.
pub fn networkd(config: &Config) -> Result<NetworkFile, HostNetworkError> {
    let iface = config
        .network
        .interface
        .as_deref()
        .ok_or(HostNetworkError::NoInterface)?;
    let domain = config.cluster.domain();
    let mut nic = Nic {
        interface: iface.to_owned(),
        mtu: None,
        addresses: Vec::new(),
    };
    nic.add(config, format!("okd-appliance's address for {domain}"))?;
    Ok(nic.render(&format!(
        "# The cluster NIC of okd-appliance ({domain}), written by\n\
         # `okd-appliance render --format networkd`. Edit the cluster config, not this file."
    )))
}

/// One `.network` file per interface the clusters of `host` name, in the order the clusters
/// first name them, each with every address its clusters put there. The shared frontend's
/// address is not among them: the host file says nothing of the interface it is on (README).
pub fn networkd_host(host: &Host) -> Result<Vec<NetworkFile>, HostNetworkError> {
    let without: Vec<String> = host
        .clusters
        .iter()
        .filter(|m| m.config.network.interface.is_none())
        .map(|m| m.id.clone())
        .collect();
    if !without.is_empty() {
        return Err(HostNetworkError::ClustersWithoutInterface(without));
    }
    let mut nics: Vec<(Nic, Vec<String>)> = Vec::new();
    for m in &host.clusters {
        let iface = m.config.network.interface.as_deref().unwrap_or_default();
        let at = match nics.iter().position(|(n, _)| n.interface == iface) {
            Some(at) => at,
            None => {
                nics.push((
                    Nic {
                        interface: iface.to_owned(),
                        mtu: None,
                        addresses: Vec::new(),
                    },
                    Vec::new(),
                ));
                nics.len() - 1
            }
        };
        let (nic, owners) = &mut nics[at];
        nic.add(
            &m.config,
            format!("cluster {} ({})", m.id, m.config.cluster.domain()),
        )?;
        owners.push(m.id.clone());
    }
    Ok(nics
        .iter()
        .map(|(nic, owners)| {
            nic.render(&format!(
                "# The cluster NIC of okd-appliance's cluster{} {}, written by\n\
                 # `okd-appliance render --format networkd` of the host file. Edit the cluster\n\
                 # configs, not this file.",
                plural(owners),
                owners.join(", ")
            ))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{InstallCheck, parse};

    fn config(yaml: &str) -> Config {
        parse(
            yaml,
            "okd.yml",
            Path::new("/etc/okd-appliance"),
            InstallCheck::Skip,
        )
        .expect("valid config")
        .config
    }

    const BASE: &str = "version: 1
cluster: { name: okd, base_domain: lab.example.com }
network:
  interface: ens19
  subnet: 10.0.0.0/24
  gateway: 10.0.0.254
  appliance_ip: 10.0.0.1
  mtu: 9000
nodes:
  - { name: master-0, role: master, mac: \"52:54:00:00:00:02\", ip: 10.0.0.2 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
";

    #[test]
    fn the_cluster_nic_carries_the_appliance_address_with_the_subnet_prefix() {
        let file = networkd(&config(BASE)).unwrap();
        assert_eq!(file.file_name, "10-okd-appliance-ens19.network");
        assert_eq!(file.interface, "ens19");
        assert_eq!(
            file.text,
            "# The cluster NIC of okd-appliance (okd.lab.example.com), written by
# `okd-appliance render --format networkd`. Edit the cluster config, not this file.
[Match]
Name=ens19

[Link]
RequiredForOnline=no-carrier
MTUBytes=9000

[Network]
DHCP=no
IPv6AcceptRA=no
ConfigureWithoutCarrier=yes

# okd-appliance's address for okd.lab.example.com
[Address]
Address=10.0.0.1/24
"
        );
    }

    #[test]
    fn an_ipv6_address_is_usable_at_once() {
        let yaml = BASE.replace(
            "  mtu: 9000\n",
            "  ipv6: { subnet: \"fd00:10::/64\", appliance_ip: \"fd00:10::2\" }\n",
        );
        let text = networkd(&config(&yaml)).unwrap().text;
        assert!(!text.contains("MTUBytes"), "{text}");
        assert!(
            text.ends_with(
                "[Address]\nAddress=10.0.0.1/24\n\n\
                 # okd-appliance's address for okd.lab.example.com\n\
                 [Address]\nAddress=fd00:10::2/64\nDuplicateAddressDetection=none\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn without_an_interface_there_is_nothing_to_configure() {
        let yaml = BASE.replace("  interface: ens19\n", "");
        assert_eq!(networkd(&config(&yaml)), Err(HostNetworkError::NoInterface));
    }

    fn host(file: &str) -> Host {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../config/hosts")
            .join(file);
        match crate::config::load_any(&path, InstallCheck::Skip).expect("valid host file") {
            crate::config::Target::Host(host) => host,
            crate::config::Target::Cluster(_) => panic!("{file} is a host file"),
        }
    }

    /// Each cluster's address in `files`, as (interface, address) pairs.
    fn addresses(files: &[NetworkFile]) -> Vec<(String, String)> {
        files
            .iter()
            .flat_map(|f| {
                f.text
                    .lines()
                    .filter_map(|l| l.strip_prefix("Address="))
                    .map(|a| (f.interface.clone(), a.to_owned()))
            })
            .collect()
    }

    #[test]
    fn clusters_on_two_interfaces_get_a_file_each() {
        let files = networkd_host(&host("two-labs.yml")).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.file_name.as_str()).collect();
        assert_eq!(
            names,
            [
                "10-okd-appliance-ens19.network",
                "10-okd-appliance-ens19.20.network"
            ]
        );
        assert_eq!(
            addresses(&files),
            [
                ("ens19".into(), "10.0.0.1/24".into()),
                ("ens19.20".into(), "10.0.20.1/24".into())
            ]
        );
        assert!(
            files[1]
                .text
                .contains("# cluster test (test.lab.example.com)\n")
        );
    }

    #[test]
    fn clusters_on_one_interface_share_its_file() {
        let files = networkd_host(&host("one-subnet.yml")).unwrap();
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(
            addresses(&files),
            [
                ("ens19".into(), "10.0.0.1/24".into()),
                ("ens19".into(), "10.0.0.21/24".into())
            ]
        );
        assert!(
            files[0].text.contains("clusters okd, ci,"),
            "{}",
            files[0].text
        );
    }

    #[test]
    fn a_host_file_says_which_clusters_lack_an_interface_or_disagree_on_the_mtu() {
        let mut h = host("two-labs.yml");
        h.clusters[1].config.network.interface = None;
        let e = networkd_host(&h).unwrap_err();
        assert_eq!(
            e,
            HostNetworkError::ClustersWithoutInterface(vec!["test".into()])
        );
        assert!(
            e.to_string().starts_with("cluster test: its file names no"),
            "{e}"
        );

        let mut h = host("one-subnet.yml");
        h.clusters[0].config.network.mtu = Some(9000);
        h.clusters[1].config.network.mtu = Some(1500);
        let e = networkd_host(&h).unwrap_err().to_string();
        assert!(
            e.starts_with("interface ens19 has MTU 1500 for cluster ci"),
            "{e}"
        );
        // One cluster's MTU is the link's when the other leaves it unset.
        h.clusters[1].config.network.mtu = None;
        let files = networkd_host(&h).unwrap();
        assert!(
            files[0].text.contains("MTUBytes=9000\n"),
            "{}",
            files[0].text
        );
    }
}
