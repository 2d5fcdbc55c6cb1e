//! DHCPv4 reservations and the options every client gets.
//!
//! Architecture invariant: values only. Option codes, packet encoding and lease bookkeeping
//! belong to the DHCP service.

use std::net::Ipv4Addr;
use std::time::Duration;

use ipnet::Ipv4Net;

use crate::config::{Config, MacAddr};
// The dynamic range, as the config validated it; the DHCP server names it from here.
pub use crate::config::Pool;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpPlan {
    /// The cluster these answers are for: its name, or its id in a host file.
    pub cluster: String,
    /// Its id when it is one of a host's clusters (its DHCP messages are counted under it);
    /// `None` for a cluster file.
    pub host_cluster: Option<std::sync::Arc<str>>,
    /// The server identifier (option 54): the appliance's address.
    pub server_id: Ipv4Addr,
    pub subnet: Ipv4Net,
    pub router: Option<Ipv4Addr>,
    pub dns_servers: Vec<Ipv4Addr>,
    /// Option 15: the cluster domain.
    pub domain_name: String,
    /// Option 119: the cluster domain first, then the configured extras.
    pub domain_search: Vec<String>,
    pub ntp_servers: Vec<Ipv4Addr>,
    pub mtu: Option<u16>,
    pub lease_time: Duration,
    /// T1: renew with the same server after half the lease (RFC 2131 section 4.4.5).
    pub renewal_time: Duration,
    /// T2: rebind with any server after 7/8 of the lease.
    pub rebinding_time: Duration,
    pub pool: Option<Pool>,
    /// The iPXE script for clients without a reservation, which tells them they are unknown.
    pub unknown_script_url: String,
    /// What UEFI HTTP boot firmware is sent: iPXE over HTTP.
    pub http_boot_url: String,
    /// Sorted by IP address.
    pub reservations: Vec<Reservation>,
    /// The other clusters on this segment, when one DHCP socket serves several (a host file):
    /// a client reserved in one of them gets that cluster's answer, options and all.
    pub others: Vec<DhcpPlan>,
    /// The nodes of clusters on this segment whose DHCP is not the appliance's
    /// (`listen.dhcp: []`): never answered, not even from the pool.
    pub silent: Vec<MacAddr>,
}

impl DhcpPlan {
    /// The plan that answers `mac`: the cluster that reserves it, or this one (its own nodes,
    /// and its pool for anyone else).
    pub fn for_mac(&self, mac: MacAddr) -> &DhcpPlan {
        self.others
            .iter()
            .find(|o| o.reservations.iter().any(|r| r.mac == mac))
            .unwrap_or(self)
    }

    /// The host's cluster `mac`'s messages are counted under: the one that answers it; `None`
    /// for a cluster file's, or a node this segment never answers.
    pub fn counted_as(&self, mac: MacAddr) -> Option<&std::sync::Arc<str>> {
        if self.silent.contains(&mac) {
            return None;
        }
        self.for_mac(mac).host_cluster.as_ref()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub mac: MacAddr,
    pub ip: Ipv4Addr,
    /// Option 12: the node's short name; Kubernetes takes the node name from it.
    pub host_name: String,
    /// The per-node iPXE script an iPXE client is sent to (DHCP option 67 / the file field).
    pub ipxe_script_url: String,
}

pub fn derive(config: &Config) -> DhcpPlan {
    let net = &config.network;
    let domain = config.cluster.domain();
    let mut domain_search = vec![domain.clone()];
    domain_search.extend(net.domain_search.iter().filter(|d| **d != domain).cloned());
    let mut reservations: Vec<Reservation> = config
        .nodes
        .iter()
        .map(|n| Reservation {
            mac: n.mac,
            ip: n.ipv4,
            host_name: n.name.clone(),
            ipxe_script_url: super::route::script_url(&config.install.base_url, n.mac),
        })
        .collect();
    reservations.sort_by_key(|r| r.ip);
    DhcpPlan {
        cluster: config.cluster.name.clone(),
        host_cluster: None,
        server_id: net.v4.appliance,
        subnet: net.v4.subnet,
        router: net.v4.gateway,
        dns_servers: vec![net.v4.appliance],
        domain_name: domain,
        domain_search,
        ntp_servers: net.ntp.clone(),
        mtu: net.mtu,
        lease_time: net.lease_time,
        renewal_time: net.lease_time / 2,
        rebinding_time: net.lease_time * 7 / 8,
        pool: net.dhcp_pool,
        // iPXE expands settings in the boot file name: the script URL carries the client's
        // MAC, so the boot server's log names it (any name that is no node's MAC gets the
        // unknown-node script).
        unknown_script_url: super::route::script_url_of(
            &config.install.base_url,
            "${netX/mac:hexhyp}",
        ),
        http_boot_url: super::route::ipxe_url(
            &config.install.base_url,
            super::boot::UEFI_BOOT_FILE,
        ),
        reservations,
        others: Vec::new(),
        silent: Vec::new(),
    }
}
