//! The clusters of a host file against each other: what one services host can't serve twice.
//! Each cluster file passed its own rules first; a conflict is reported once, in the later
//! file, with the earlier file's place drawn under it (docs/design/several-clusters.md, 1.2).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde_saphyr::Location;

use super::super::diagnostic::{Problem, Severity, Source};
use super::super::host::Listed;
use crate::vocabulary::MacAddr;

/// Every conflict between `members`, each with the member whose file it is reported in (`None`:
/// the host file).
pub(in crate::config) fn conflicts(
    host_src: &Source,
    members: &[Listed],
) -> Vec<(Option<usize>, Problem)> {
    let mut out = Vec::new();
    ids(host_src, members, &mut out);
    domains(members, &mut out);
    macs(members, &mut out);
    addresses(members, &mut out);
    subnets(members, &mut out);
    pools(members, &mut out);
    ignition_dirs(members, &mut out);
    machines(members, &mut out);
    out
}

/// A conflict between `m`, whose file it is reported in, and `other`, drawn under it: each
/// file's place with its label.
fn conflict(
    (m, (at, label)): (&Listed, (Location, &str)),
    (other, (their_at, their_label)): (&Listed, (Location, &str)),
    code: &'static str,
    message: String,
    hint: &str,
) -> Problem {
    let mut p = Problem::new(&m.src, Severity::Error, code, at, message, label);
    p.related_at(
        &other.src,
        their_at,
        format!("cluster {}", other.id),
        their_label,
    )
    .hint(hint);
    p
}

/// A value `m` uses at `at` that cluster `other` used first, at `first`.
fn second_use(
    m: &Listed,
    other: &Listed,
    code: &'static str,
    (at, first): (Location, Location),
    message: String,
    hint: &str,
) -> Problem {
    conflict(
        (m, (at, "second use")),
        (other, (first, "first use")),
        code,
        message,
        hint,
    )
}

/// Who used each key first: a cluster and where.
struct FirstUse<K>(HashMap<K, (usize, Location)>);

impl<K: std::hash::Hash + Eq> FirstUse<K> {
    fn new() -> Self {
        FirstUse(HashMap::new())
    }

    /// Records member `i`'s use of `key` at `at`; the first use if another cluster's.
    fn claim(&mut self, key: K, i: usize, at: Location) -> Option<(usize, Location)> {
        match self.0.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let &(j, first) = e.get();
                (j != i).then_some((j, first))
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert((i, at));
                None
            }
        }
    }

    /// [`FirstUse::claim`], reporting a second use by another cluster as `code`, with the
    /// message `message(first user)`.
    fn check(
        &mut self,
        (key, at): (K, Location),
        (i, members): (usize, &[Listed]),
        code: &'static str,
        message: impl FnOnce(&Listed) -> String,
        hint: &str,
        out: &mut Vec<(Option<usize>, Problem)>,
    ) {
        if let Some((j, first)) = self.claim(key, i, at) {
            let (m, other) = (&members[i], &members[j]);
            let p = second_use(m, other, code, (at, first), message(other), hint);
            out.push((Some(i), p));
        }
    }
}

fn ids(host_src: &Source, members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, m) in members.iter().enumerate() {
        if let Some(&first) = seen.get(m.id.as_str()) {
            let mut p = Problem::new(
                host_src,
                Severity::Error,
                "host::duplicate-id",
                m.at,
                format!("two clusters have the id {:?}", m.id),
                "second use",
            );
            p.also(members[first].at, "first use").hint(
                "`--cluster` names a cluster by its id: give one entry `{ file: ..., id: ... }`",
            );
            out.push((None, p));
        } else {
            seen.insert(&m.id, i);
        }
    }
}

fn domains(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    for (i, m) in members.iter().enumerate() {
        let domain = m.config.cluster.domain();
        let at = m.raw.cluster.name.referenced;
        for other in &members[..i] {
            let theirs = other.config.cluster.domain();
            let other_at = other.raw.cluster.name.referenced;
            let (code, message, hint) = if theirs == domain {
                (
                    "host::duplicate-domain",
                    format!("cluster domain {domain} is also {}'s", other.id),
                    "one DNS server can hold one zone of a name: give this cluster another name or base_domain",
                )
            } else if domain.ends_with(&format!(".{theirs}"))
                || theirs.ends_with(&format!(".{domain}"))
            {
                (
                    "host::nested-domain",
                    format!(
                        "cluster domain {domain} and {}'s {theirs} are nested",
                        other.id
                    ),
                    "one cluster's zone would have to delegate to the other's: choose domains side by side",
                )
            } else {
                continue;
            };
            let p = conflict(
                (m, (at, "this cluster")),
                (other, (other_at, "that cluster")),
                code,
                message,
                hint,
            );
            out.push((Some(i), p));
        }
    }
}

fn macs(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    let mut seen = FirstUse::<MacAddr>::new();
    for (i, m) in members.iter().enumerate() {
        for n in &m.config.nodes {
            let at = node_field(m, &n.name, |r| r.mac.referenced);
            seen.check(
                (n.mac, at),
                (i, members),
                "host::duplicate-mac",
                |other| {
                    format!(
                        "MAC address {} is also a node's in cluster {}",
                        n.mac, other.id
                    )
                },
                "a MAC belongs to one cluster: DHCP could not tell which reservation answers it",
                out,
            );
        }
    }
}

/// What an address is in a cluster: a node's, the appliance's (the cluster's api, api-int and
/// `*.apps` resolve there and its frontends listen there) or the gateway's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    Node,
    Appliance,
    Gateway,
}

impl Use {
    fn noun(self) -> &'static str {
        match self {
            Use::Node => "a node's address",
            Use::Appliance => "the appliance address",
            Use::Gateway => "the gateway",
        }
    }
}

fn addresses(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    let mut seen: HashMap<IpAddr, (usize, Use, Location)> = HashMap::new();
    for (i, m) in members.iter().enumerate() {
        for (ip, what, at) in uses(m) {
            let Some(&(j, theirs, first)) = seen.get(&ip) else {
                seen.insert(ip, (i, what, at));
                continue;
            };
            // One gateway for clusters on one subnet is the usual case, and one cluster's own
            // uses were checked by its file's rules.
            if j == i || (what == Use::Gateway && theirs == Use::Gateway) {
                continue;
            }
            let other = &members[j];
            let (code, hint) = if what == Use::Appliance && theirs == Use::Appliance {
                (
                    "host::frontend-collision",
                    "each cluster needs its own address on this host: its api, api-int and *.apps resolve there and its load-balancer frontends listen there",
                )
            } else {
                (
                    "host::duplicate-address",
                    "an address belongs to one machine of one cluster",
                )
            };
            let message = if what == theirs {
                format!(
                    "{ip} is {} here and in cluster {} too",
                    what.noun(),
                    other.id
                )
            } else {
                format!(
                    "{ip} is {} here and {} in cluster {}",
                    what.noun(),
                    theirs.noun(),
                    other.id
                )
            };
            out.push((
                Some(i),
                second_use(m, other, code, (at, first), message, hint),
            ));
        }
    }
}

/// Every address `m` gives a meaning to, with where its file says so.
fn uses(m: &Listed) -> Vec<(IpAddr, Use, Location)> {
    let net = &m.config.network;
    let raw = &m.raw.network;
    let mut v = vec![(
        IpAddr::V4(net.v4.appliance),
        Use::Appliance,
        raw.appliance_ip.referenced,
    )];
    if let (Some(gw), Some(at)) = (net.v4.gateway, &raw.gateway) {
        v.push((IpAddr::V4(gw), Use::Gateway, at.referenced));
    }
    if let (Some(v6), Some(raw6)) = (&net.v6, &raw.ipv6) {
        v.push((
            IpAddr::V6(v6.appliance),
            Use::Appliance,
            raw6.appliance_ip.referenced,
        ));
        if let (Some(gw), Some(at)) = (v6.gateway, &raw6.gateway) {
            v.push((IpAddr::V6(gw), Use::Gateway, at.referenced));
        }
    }
    for n in &m.config.nodes {
        v.push((
            IpAddr::V4(n.ipv4),
            Use::Node,
            node_field(m, &n.name, |r| r.ip.referenced),
        ));
        if let Some(ip6) = n.ipv6 {
            let at = node_field(m, &n.name, |r| {
                r.ipv6.as_ref().map_or(r.ip.referenced, |t| t.referenced)
            });
            v.push((IpAddr::V6(ip6), Use::Node, at));
        }
    }
    v
}

/// One subnet is one segment: on one interface, and never overlapping another unequal one.
fn subnets(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    for (i, m) in members.iter().enumerate() {
        for other in &members[..i] {
            for ((net, at), (theirs, their_at)) in subnet_pairs(m, other) {
                let message = if net == theirs {
                    match (&m.config.network.interface, &other.config.network.interface) {
                        (Some(a), Some(b)) if a != b => format!(
                            "subnet {net} is on interface {a} here and on {b} in cluster {}",
                            other.id
                        ),
                        _ => continue,
                    }
                } else if net.contains(&theirs.network()) || theirs.contains(&net.network()) {
                    format!("subnet {net} overlaps cluster {}'s {theirs}", other.id)
                } else {
                    continue;
                };
                let p = conflict(
                    (m, (at, "this subnet")),
                    (other, (their_at, "that subnet")),
                    "host::segment-mismatch",
                    message,
                    "clusters share a segment with the same subnet on the same interface, or use subnets apart",
                );
                out.push((Some(i), p));
            }
        }
    }
}

fn subnet_pairs(a: &Listed, b: &Listed) -> Vec<((IpNet, Location), (IpNet, Location))> {
    let v4 = |m: &Listed| {
        (
            IpNet::V4(m.config.network.v4.subnet),
            m.raw.network.subnet.referenced,
        )
    };
    let v6 = |m: &Listed| match (&m.config.network.v6, &m.raw.network.ipv6) {
        (Some(v6), Some(raw)) => Some((IpNet::V6(v6.subnet), raw.subnet.referenced)),
        _ => None,
    };
    let mut pairs = vec![(v4(a), v4(b))];
    if let (Some(x), Some(y)) = (v6(a), v6(b)) {
        pairs.push((x, y));
    }
    pairs
}

/// A dynamic pool hands its addresses to unknown machines: it may not overlap another
/// cluster's pool or hold another cluster's reserved address. Reported in the later file.
fn pools(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    for (i, m) in members.iter().enumerate() {
        for other in &members[..i] {
            let mine = pool_of(m);
            let theirs = pool_of(other);
            if let (Some((pool, at)), Some((their_pool, their_at))) = (mine, theirs)
                && pool.start <= their_pool.end
                && their_pool.start <= pool.end
            {
                let message = format!(
                    "dynamic pool {}-{} overlaps cluster {}'s {}-{}",
                    pool.start, pool.end, other.id, their_pool.start, their_pool.end
                );
                let p = conflict(
                    (m, (at, "this pool")),
                    (other, (their_at, "that pool")),
                    "host::pool-overlap",
                    message,
                    "clusters on one segment share one pool: state it once, in one cluster's file",
                );
                out.push((Some(i), p));
            }
            // This cluster's pool holds the other's nodes, or the other's pool holds this one's.
            if let Some((pool, at)) = mine {
                for n in other.config.nodes.iter().filter(|n| pool.contains(n.ipv4)) {
                    let message = format!(
                        "dynamic pool {}-{} holds {}, node {} of cluster {}",
                        pool.start, pool.end, n.ipv4, n.name, other.id
                    );
                    let node_at = node_field(other, &n.name, |r| r.ip.referenced);
                    let p = conflict(
                        (m, (at, "this pool")),
                        (other, (node_at, "reserved here")),
                        "host::pool-overlap",
                        message,
                        POOL_HINT,
                    );
                    out.push((Some(i), p));
                }
            }
            if let Some((pool, pool_at)) = theirs {
                for n in m.config.nodes.iter().filter(|n| pool.contains(n.ipv4)) {
                    let message = format!(
                        "{} (node {}) is in cluster {}'s dynamic pool {}-{}",
                        n.ipv4, n.name, other.id, pool.start, pool.end
                    );
                    let node_at = node_field(m, &n.name, |r| r.ip.referenced);
                    let p = conflict(
                        (m, (node_at, "reserved here")),
                        (other, (pool_at, "that pool")),
                        "host::pool-overlap",
                        message,
                        POOL_HINT,
                    );
                    out.push((Some(i), p));
                }
            }
        }
    }
}

const POOL_HINT: &str = "an unknown machine could be given the node's address: keep every pool clear of every cluster's nodes";

fn pool_of(m: &Listed) -> Option<(crate::config::Pool, Location)> {
    match (&m.config.network.dhcp_pool, &m.raw.network.dhcp_pool) {
        (Some(pool), Some(raw)) => Some((*pool, raw.start.referenced)),
        _ => None,
    }
}

/// Each cluster's ignition files are its own: one directory for two would serve one cluster's
/// certificates to the other's nodes.
fn ignition_dirs(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    let mut seen = FirstUse::<PathBuf>::new();
    for (i, m) in members.iter().enumerate() {
        let dir = &m.config.install.ignition_dir;
        let key = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
        let at = m.raw.install.value.ignition_dir.referenced;
        seen.check(
            (key, at),
            (i, members),
            "host::shared-ignition-dir",
            |other| format!("ignition_dir {} is also cluster {}'s", dir.display(), other.id),
            "openshift-install writes one cluster's ignition files per directory: give each cluster its own",
            out,
        );
    }
}

/// A field of the node named `name` in `m`'s YAML (the node list's place if the name is not
/// found, which validation makes impossible).
fn node_field(m: &Listed, name: &str, field: impl Fn(&super::RawNode) -> Location) -> Location {
    m.raw
        .nodes
        .value
        .iter()
        .find(|r| r.name.value.eq_ignore_ascii_case(name))
        .map_or(m.raw.nodes.referenced, field)
}

/// One machine is driven by one cluster: an explicit Proxmox VM ID in two clusters on one
/// Proxmox (its API URL), or one BMC URL in two clusters. Machine names can't collide: a VM
/// is named `<node>.<cluster domain>`, and domains are unique on a host.
fn machines(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    let mut seen = FirstUse::<String>::new();
    for (i, m) in members.iter().enumerate() {
        for s in &m.config.control.machines {
            let raw = m
                .raw
                .nodes
                .value
                .iter()
                .find(|r| r.name.value.eq_ignore_ascii_case(&s.node))
                .and_then(|r| r.machine.as_ref());
            let mut keys = Vec::new();
            if let (crate::config::Provider::Proxmox(px), Some(id)) =
                (&m.config.control.provider, s.vmid)
            {
                let at = raw
                    .and_then(|r| r.value.vmid.as_ref())
                    .map(|v| v.referenced);
                keys.push((
                    format!("Proxmox VM {id} at {}", normalized_url(&px.url)),
                    at,
                ));
            }
            if let Some(bmc) = &s.bmc {
                let at = raw
                    .and_then(|r| r.value.bmc.as_ref())
                    .map(|b| b.value.url.as_ref().map_or(b.referenced, |u| u.referenced));
                keys.push((format!("the BMC at {}", normalized_url(&bmc.url)), at));
            }
            for (key, at) in keys {
                let at = at.unwrap_or_else(|| node_field(m, &s.node, |r| r.name.referenced));
                let message = format!("{key} is node {}'s here", s.node);
                seen.check(
                    (key, at),
                    (i, members),
                    "host::machine-collision",
                    |other| format!("{message} and a node's in cluster {}", other.id),
                    "two clusters would create, power and reinstall the same machine",
                    out,
                );
            }
        }
    }
}

/// A URL as compared between clusters: lowercase, without a trailing `/`.
fn normalized_url(url: &str) -> String {
    url.trim_end_matches('/').to_ascii_lowercase()
}
