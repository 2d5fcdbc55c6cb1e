//! `shared_frontend` against the clusters: what one address for every cluster's frontends
//! needs from each of them.

use std::net::{IpAddr, SocketAddr};

use serde_saphyr::Location;

use super::super::super::diagnostic::{Problem, Severity, Source};
use super::super::super::raw::RawShared;
use super::Listed;
use crate::config::SharedFrontend;

/// The ports the host's router listens on at the shared addresses.
const ROUTED_PORTS: [u16; 4] = [6443, 22623, 443, 80];

/// Every problem `shared` has with `members`, each with the member whose file it is reported
/// in (`None`: the host file).
pub(in crate::config) fn shared(
    host_src: &Source,
    (shared, raw): (&SharedFrontend, &RawShared),
    members: &[Listed],
) -> Vec<(Option<usize>, Problem)> {
    let mut out = Vec::new();
    let in_host = |at, message: String, label: &str, hint: &str| {
        (None, problem(host_src, at, message, label, hint))
    };
    if let (Some(id), Some(at)) = (
        &shared.default_cluster,
        raw.default_cluster.as_ref().map(|t| t.referenced),
    ) && !members.iter().any(|m| &m.id == id)
    {
        let ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
        out.push(in_host(
            at,
            format!("no cluster has the id {id:?}"),
            "not a cluster of this host",
            &format!("the clusters are: {}", ids.join(", ")),
        ));
    }
    if let (Some(id), Some(at)) = (
        &shared.default_cluster,
        raw.default_cluster.as_ref().map(|t| t.referenced),
    ) && let Some(m) = members
        .iter()
        .find(|m| &m.id == id && m.config.direct_single_node().is_some())
    {
        out.push(in_host(
            at,
            format!(
                "cluster {} is a single node reached directly: its names point at its node, not here",
                m.id
            ),
            "not routed",
            "name a cluster whose frontends the shared frontend serves, or set its lb.single_node: proxied",
        ));
    }
    let addresses = shared.addresses();
    for (i, m) in members.iter().enumerate() {
        let c = &m.config;
        for node in &c.nodes {
            let own = std::iter::once(IpAddr::V4(node.ipv4)).chain(node.ipv6.map(IpAddr::V6));
            for ip in own.filter(|ip| addresses.contains(ip)) {
                out.push(in_host(
                    raw.address.referenced,
                    format!("{ip} is node {} of cluster {}", node.name, m.id),
                    "a node's address",
                    "the shared frontend is an address of this host",
                ));
            }
        }
        if let Some(pool) = &c.network.dhcp_pool
            && pool.contains(shared.v4)
        {
            out.push(in_host(
                raw.address.referenced,
                format!("{} is in the DHCP pool of cluster {}", shared.v4, m.id),
                "leased to strangers",
                "the shared frontend is an address of this host: keep it out of every pool",
            ));
        }
        out.extend(ports_taken(m, i, &addresses));
        // A single-node cluster whose names point at its node is not routed.
        if c.direct_single_node().is_some() {
            continue;
        }
        if c.network.v6.is_some() && shared.v6.is_none() {
            let at = m
                .raw
                .network
                .ipv6
                .as_ref()
                .map_or(m.raw.cluster.name.referenced, |v| v.subnet.referenced);
            let message = format!(
                "cluster {} is dual-stack, and the shared frontend has no IPv6 address for its AAAA records",
                m.id
            );
            let hint = "give the host file's shared_frontend an address_v6";
            out.push((Some(i), problem(&m.src, at, message, "dual-stack", hint)));
        }
        let l = &m.raw.listen;
        for (key, stated) in [
            ("api", &l.api),
            ("machine_config", &l.machine_config),
            ("ingress_https", &l.ingress_https),
            ("ingress_http", &l.ingress_http),
        ] {
            let Some(at) = stated
                .as_ref()
                .and_then(|v| v.first())
                .map(|t| t.referenced)
            else {
                continue;
            };
            let message = format!("`listen.{key}` in a cluster of a host with a shared frontend");
            let hint = "the host's router listens on the shared frontend for every cluster: leave this out";
            out.push((Some(i), problem(&m.src, at, message, "here", hint)));
        }
    }
    out
}

/// `m`'s own TCP listeners on a port the router takes at the shared addresses.
fn ports_taken(m: &Listed, i: usize, addresses: &[IpAddr]) -> Vec<(Option<usize>, Problem)> {
    let (c, l) = (&m.config, &m.raw.listen);
    let mut out = Vec::new();
    // The cluster's own TCP listeners must leave the router's ports free.
    let taken = |a: &SocketAddr| {
        ROUTED_PORTS.contains(&a.port()) && (a.ip().is_unspecified() || addresses.contains(&a.ip()))
    };
    for (key, addrs, stated) in [
        ("dns", &c.listen.dns, &l.dns),
        ("http", &c.listen.http, &l.http),
    ] {
        let Some(addr) = addrs.iter().find(|a| taken(a)) else {
            continue;
        };
        let at = stated
            .as_ref()
            .and_then(|v| v.first())
            .map_or(m.raw.network.appliance_ip.referenced, |t| t.referenced);
        out.push((
            Some(i),
            problem(
                &m.src,
                at,
                format!("{key} on {addr} takes a port the shared frontend's router listens on"),
                "port taken",
                "the router listens on 6443, 22623, 443 and 80 of the shared addresses",
            ),
        ));
    }
    out
}

/// A `host::shared-frontend` error in `src` at `at`.
fn problem(src: &Source, at: Location, message: String, label: &str, hint: &str) -> Problem {
    let mut p = Problem::new(
        src,
        Severity::Error,
        "host::shared-frontend",
        at,
        message,
        label,
    );
    p.hint(hint);
    p
}
