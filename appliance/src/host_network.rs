//! The services host's own cluster-side NIC, as a systemd-networkd `.network` file: the
//! appliance's addresses on the cluster subnets, on `network.interface`.
//!
//! The appliance binds its listeners to `network.appliance_ip` (and the IPv6 one), so something
//! must put those addresses on the cluster NIC before it starts. On the services VM image
//! (`images/`) this file is written from the config at every start, so the config stays the one
//! place that names them.
//!
//! Architecture invariant: this reads the validated config's `network` section only; it is not a
//! renderer of the plan (the plan describes what is served, not how the host is set up).

use std::fmt::Write as _;

use crate::config::Config;

/// Where networkd looks for runtime `.network` files, and the name this one takes there: it sorts
/// before the image's catch-all DHCP file for the other NICs (`90-okd-appliance-dhcp.network`).
pub const FILE_NAME: &str = "10-okd-appliance-cluster.network";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostNetworkError {
    /// Without `network.interface` the appliance does not know which NIC is the cluster's.
    #[error(
        "network.interface is not set, so the cluster NIC is unknown: name it in the config or \
         configure the appliance's addresses by other means"
    )]
    NoInterface,
}

/// The `.network` file for the cluster NIC of `config`.
pub fn networkd(config: &Config) -> Result<String, HostNetworkError> {
    let net = &config.network;
    let iface = net
        .interface
        .as_deref()
        .ok_or(HostNetworkError::NoInterface)?;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# The cluster NIC of okd-appliance ({}), written by\n\
         # `okd-appliance render --format networkd`. Edit the cluster config, not this file.",
        config.cluster.domain()
    );
    let _ = writeln!(o, "[Match]\nName={iface}\n");
    let _ = writeln!(o, "[Link]");
    // Online as soon as the addresses are set, cable or not: the appliance can then bind, and a
    // cluster network that is not wired yet does not hold up the boot.
    let _ = writeln!(o, "RequiredForOnline=no-carrier");
    if let Some(mtu) = net.mtu {
        // The MTU the nodes are told (DHCP option 26) is the link's.
        let _ = writeln!(o, "MTUBytes={mtu}");
    }
    let _ = writeln!(o, "\n[Network]");
    // The appliance is the DHCP server on this link, not a client; a router advertising on the
    // cluster subnet must not give the host addresses or routes it did not ask for.
    let _ = writeln!(o, "DHCP=no\nIPv6AcceptRA=no\nConfigureWithoutCarrier=yes");
    let _ = writeln!(
        o,
        "\n[Address]\nAddress={}/{}",
        net.v4.appliance,
        net.v4.subnet.prefix_len()
    );
    if let Some(v6) = &net.v6 {
        // A tentative address can't be bound, and without a carrier duplicate address detection
        // never finishes: the appliance owns this address by configuration.
        let _ = writeln!(
            o,
            "\n[Address]\nAddress={}/{}\nDuplicateAddressDetection=none",
            v6.appliance,
            v6.subnet.prefix_len()
        );
    }
    Ok(o)
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
        let text = networkd(&config(BASE)).unwrap();
        assert_eq!(
            text,
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
        let text = networkd(&config(&yaml)).unwrap();
        assert!(!text.contains("MTUBytes"), "{text}");
        assert!(
            text.ends_with(
                "[Address]\nAddress=10.0.0.1/24\n\n[Address]\nAddress=fd00:10::2/64\n\
                 DuplicateAddressDetection=none\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn without_an_interface_there_is_nothing_to_configure() {
        let yaml = BASE.replace("  interface: ens19\n", "");
        assert_eq!(networkd(&config(&yaml)), Err(HostNetworkError::NoInterface));
    }
}
