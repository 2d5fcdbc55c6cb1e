//! The pair: which two hosts share the virtual addresses, how keepalived is told to move them.
//!
//! A cluster file's pair moves its `appliance_ip` (and the IPv6 one); a host file's moves every
//! cluster's, each on its cluster's interface, and the shared frontend's ([`HaPlan::of_host`]).
//! In a pair, DNS also listens on each host's own address, and every listener is bound with
//! IP_FREEBIND (`sockets.rs`), so the standby holds its sockets on the virtual addresses.
//!
//! Architecture invariant: pure, and the same on both hosts (one config for the pair); which
//! host a process runs on is found at start (`crate::ha`), never here.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use ipnet::IpNet;

use crate::config::Config;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaPlan {
    /// The hosts' own addresses, the preferred (higher VRRP priority) first.
    pub hosts: [Ipv4Addr; 2],
    pub router_id: u8,
    pub secret_file: PathBuf,
    /// Where VRRP runs: the interface of the hosts' own addresses.
    pub interface: String,
    /// What keepalived moves: IPv4 first, in the config's order.
    pub addresses: Vec<VirtualAddress>,
}

/// One virtual address, with its prefix, on its interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualAddress {
    pub ip: IpAddr,
    pub prefix: u8,
    pub interface: String,
}

impl HaPlan {
    /// VRRP priorities: the preferred host wins when both are healthy.
    pub fn priority(&self, host: usize) -> u8 {
        if host == 0 { 150 } else { 100 }
    }

    /// The host-wide pair of a host file, from its clusters' pairs (every cluster carries the
    /// host's `ha`, each with its own addresses): VRRP on the interface of the subnet holding
    /// the hosts, every cluster's addresses, and each `shared` address on the interface of the
    /// cluster subnet that holds it (else the VRRP interface, as a host route).
    pub fn of_host<'a>(
        clusters: impl IntoIterator<Item = &'a HaPlan>,
        shared: &[IpAddr],
    ) -> Option<HaPlan> {
        let clusters: Vec<&HaPlan> = clusters.into_iter().collect();
        let first = clusters.first()?;
        let on = |ip: IpAddr| {
            clusters
                .iter()
                .flat_map(|c| &c.addresses)
                .find(|a| IpNet::new(a.ip, a.prefix).is_ok_and(|n| n.contains(&ip)))
        };
        let interface = on(IpAddr::V4(first.hosts[0]))
            .map_or_else(|| first.interface.clone(), |a| a.interface.clone());
        let mut addresses: Vec<VirtualAddress> = Vec::new();
        for a in clusters.iter().flat_map(|c| &c.addresses) {
            if !addresses.iter().any(|o| o.ip == a.ip) {
                addresses.push(a.clone());
            }
        }
        for &ip in shared {
            let address = match on(ip) {
                Some(a) => VirtualAddress { ip, ..a.clone() },
                None => VirtualAddress {
                    ip,
                    prefix: if ip.is_ipv4() { 32 } else { 128 },
                    interface: interface.clone(),
                },
            };
            if !addresses.iter().any(|o| o.ip == ip) {
                addresses.push(address);
            }
        }
        addresses.sort_by_key(|a| a.ip.is_ipv6());
        Some(HaPlan {
            interface,
            addresses,
            ..(*first).clone()
        })
    }
}

pub fn derive(config: &Config) -> Option<HaPlan> {
    let ha = config.ha.as_ref()?;
    let net = &config.network;
    // Validation refuses `ha` without an interface.
    let interface = net.interface.clone().unwrap_or_default();
    let mut addresses = vec![VirtualAddress {
        ip: net.v4.appliance.into(),
        prefix: net.v4.subnet.prefix_len(),
        interface: interface.clone(),
    }];
    if let Some(v6) = &net.v6 {
        addresses.push(VirtualAddress {
            ip: v6.appliance.into(),
            prefix: v6.subnet.prefix_len(),
            interface: interface.clone(),
        });
    }
    Some(HaPlan {
        hosts: ha.hosts,
        router_id: ha.router_id,
        secret_file: ha.secret_file.clone(),
        interface,
        addresses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(interface: &str, addresses: &[(&str, u8)]) -> HaPlan {
        HaPlan {
            hosts: ["10.0.0.3".parse().unwrap(), "10.0.0.4".parse().unwrap()],
            router_id: 51,
            secret_file: "ha-secret".into(),
            interface: interface.into(),
            addresses: addresses
                .iter()
                .map(|(ip, prefix)| VirtualAddress {
                    ip: ip.parse().unwrap(),
                    prefix: *prefix,
                    interface: interface.into(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_hosts_pair_moves_every_clusters_addresses_and_the_shared_frontend() {
        let lab = pair("ens20", &[("10.0.20.1", 24)]);
        let okd = pair("ens19", &[("10.0.0.1", 24), ("fd00::1", 64)]);
        let test = pair("ens19", &[("10.0.0.2", 24)]);
        let shared: Vec<IpAddr> = vec!["10.0.0.9".parse().unwrap(), "fd00::9".parse().unwrap()];
        let host = HaPlan::of_host([&lab, &okd, &test], &shared).unwrap();
        // VRRP runs where the hosts' own addresses are, whichever cluster is listed first.
        assert_eq!(host.interface, "ens19");
        let moved: Vec<String> = host
            .addresses
            .iter()
            .map(|a| format!("{}/{} dev {}", a.ip, a.prefix, a.interface))
            .collect();
        assert_eq!(
            moved,
            [
                "10.0.20.1/24 dev ens20",
                "10.0.0.1/24 dev ens19",
                "10.0.0.2/24 dev ens19",
                "10.0.0.9/24 dev ens19",
                "fd00::1/64 dev ens19",
                "fd00::9/64 dev ens19",
            ]
        );
        // A shared address on no cluster's subnet goes on the VRRP interface as a host route.
        let apart = HaPlan::of_host([&okd], &["192.0.2.9".parse().unwrap()]).unwrap();
        assert_eq!(
            apart
                .addresses
                .iter()
                .find(|a| a.ip.to_string() == "192.0.2.9")
                .map(|a| (a.prefix, a.interface.as_str())),
            Some((32, "ens19"))
        );
        assert_eq!(HaPlan::of_host([], &shared), None);
    }
}
