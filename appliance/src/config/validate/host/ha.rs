//! A host file's `ha` against its clusters: a pair of appliances serving every cluster, with
//! one VRRP instance that moves every cluster's `appliance_ip` (and the shared frontend) as
//! virtual addresses.

use std::net::{IpAddr, Ipv4Addr};

use serde_saphyr::Location;

use super::super::super::diagnostic::{Problem, Severity, Source};
use super::Listed;
use crate::config::SharedFrontend;

/// Every problem the pair of `hosts` (its `ha` stated at `at`, each host at `hosts_at`) has
/// with `members`, each with the member whose file it is reported in (`None`: the host file).
/// Independent of the pair's other keys, so a bad secret file hides none of them.
pub(in crate::config) fn pair(
    host_src: &Source,
    (hosts, at, hosts_at): (&[Ipv4Addr; 2], Location, &[Location]),
    members: &[Listed],
    shared: Option<&SharedFrontend>,
) -> Vec<(Option<usize>, Problem)> {
    let mut out = Vec::new();
    let in_host = |at, message: String, label: &str, hint: &str| {
        (None, problem(host_src, at, message, label, hint))
    };
    // VRRP runs on the segment of the hosts' own addresses: the first host's.
    let segment = members
        .iter()
        .find(|m| m.config.network.v4.subnet.contains(&hosts[0]));
    match segment {
        None => out.push(in_host(
            hosts_at.first().copied().unwrap_or(at),
            format!("ha host {} is on no cluster's subnet", hosts[0]),
            "not on a cluster network",
            "list the two hosts' own addresses on the segment VRRP is to run on",
        )),
        Some(s) if !s.config.network.v4.subnet.contains(&hosts[1]) => out.push(in_host(
            hosts_at.get(1).copied().unwrap_or(at),
            format!(
                "ha host {} is outside {}, the subnet of the first host (cluster {})",
                hosts[1], s.config.network.v4.subnet, s.id
            ),
            "another segment",
            "VRRP runs on one segment: both hosts' own addresses are on it",
        )),
        Some(_) => {}
    }
    let shared = shared.map(SharedFrontend::addresses).unwrap_or_default();
    for (n, host) in hosts.iter().enumerate() {
        let host_at = hosts_at.get(n).copied().unwrap_or(at);
        let ip = IpAddr::V4(*host);
        if shared.contains(&ip) {
            out.push(in_host(
                host_at,
                format!("ha host {host} is the shared frontend, a virtual address"),
                "the shared frontend",
                "list the two hosts' own addresses; the shared frontend moves between them",
            ));
        }
        if let Some(subnet) = members
            .iter()
            .map(|m| m.config.network.v4.subnet)
            .find(|s| s.contains(host))
            && subnet.prefix_len() < 31
            && (*host == subnet.network() || *host == subnet.broadcast())
        {
            out.push(in_host(
                host_at,
                format!("ha host {host} is not a host address of {subnet}"),
                "not a host address",
                "list the two hosts' own addresses",
            ));
        }
        for m in members {
            let c = &m.config;
            if c.network.v4.appliance == *host {
                out.push(in_host(
                    host_at,
                    format!(
                        "ha host {host} is the appliance_ip of cluster {}, a virtual address",
                        m.id
                    ),
                    "a virtual address",
                    "list the two hosts' own addresses; every cluster's appliance_ip moves between them",
                ));
            }
            if let Some(node) = c.nodes.iter().find(|n| n.ipv4 == *host) {
                out.push(in_host(
                    host_at,
                    format!("ha host {host} is node {} of cluster {}", node.name, m.id),
                    "a node's address",
                    "list the two hosts' own addresses",
                ));
            }
            if c.network.v4.gateway == Some(*host) {
                out.push(in_host(
                    host_at,
                    format!("ha host {host} is the gateway of cluster {}", m.id),
                    "the gateway",
                    "list the two hosts' own addresses",
                ));
            }
            let l = &c.listen;
            let replication = [
                &l.dns,
                &l.http,
                &l.api,
                &l.machine_config,
                &l.ingress_https,
                &l.ingress_http,
            ]
            .into_iter()
            .flatten()
            .find(|a| a.port() == REPLICATION_PORT && (a.ip().is_unspecified() || a.ip() == ip));
            if let Some(addr) = replication {
                out.push(in_host(
                    host_at,
                    format!(
                        "cluster {} listens on {addr}, the pair's replication port on ha host {host}",
                        m.id
                    ),
                    "replication listens here",
                    "the pair replicates on TCP 7443 of each host's own address: move that listener",
                ));
            }
            if c.network.dhcp_pool.is_some_and(|p| p.contains(*host)) {
                out.push(in_host(
                    host_at,
                    format!("ha host {host} is in the DHCP pool of cluster {}", m.id),
                    "leased to strangers",
                    "keep the hosts' own addresses out of every pool",
                ));
            }
        }
    }
    // keepalived adds each cluster's appliance_ip to that cluster's interface.
    for (i, m) in members.iter().enumerate() {
        if m.config.network.interface.is_none() {
            let message = format!(
                "cluster {} has no network.interface, and the pair adds its appliance_ip to one",
                m.id
            );
            let mut p = problem(
                &m.src,
                m.raw.network.appliance_ip.referenced,
                message,
                "a virtual address of the pair",
                "set network.interface to the cluster-side NIC (the same name on both hosts)",
            );
            p.related_at(host_src, at, "the host file's pair", "ha");
            out.push((Some(i), p));
        }
    }
    out
}

/// The pair's replication port on each host's own address (`replication::PORT`).
pub(super) const REPLICATION_PORT: u16 = 7443;

/// A `host::ha` error in `src` at `at`.
fn problem(src: &Source, at: Location, message: String, label: &str, hint: &str) -> Problem {
    let mut p = Problem::new(src, Severity::Error, "host::ha", at, message, label);
    p.hint(hint);
    p
}
