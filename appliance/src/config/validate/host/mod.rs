//! The clusters of a host file against each other: what one services host can't serve twice.
//! Each cluster file passed its own rules first; a conflict is reported once, in the later
//! file, with the earlier file's place drawn under it (docs/design/several-clusters.md, 1.2):
//! a [`Problem`] carries related problems in other files ([`Problem::related_at`]), which
//! miette draws at their own file, line and column.
//!
//! What is compared: this file's ids, domains (equal or nested), MACs, addresses (two clusters
//! whose api and `*.apps` would share one appliance address is `host::frontend-collision`) and
//! `ignition_dir`s; the network (`network.rs`: one subnet on one interface, no overlapping
//! subnets, a segment's gateway, MTU, NTP and lease time stated one way, pools clear of every
//! cluster's addresses, no socket two clusters would both listen on); the machines
//! (`machines.rs`: one Proxmox VM ID or BMC system for one cluster; VM names embed the cluster
//! domain, so they can't collide); the pair (`ha.rs`, `host::ha`), the shared frontend
//! (`shared.rs`, `host::shared-frontend`) and the host's secrets under a cluster's
//! `artifacts_dir` (`exposure.rs`). The host's own keys (`state_dir`, `run_as`, `api`, `ha`)
//! stated in a cluster file are `host::host-key-in-cluster`; a file listed twice is one error
//! (`host::listed-twice`, `config/host.rs`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde_saphyr::Location;

use super::super::Config;
use super::super::diagnostic::{Problem, Severity, Source};
use super::super::raw::RawConfig;
use crate::vocabulary::MacAddr;
pub(in crate::config) use exposure::{HostSecrets, exposure};
pub(in crate::config) use ha::pair;
use machines::machines;
use network::{dhcp_interfaces, listeners, pools, subnets};
pub(in crate::config) use shared::shared;

mod exposure;
mod ha;
mod machines;
mod network;
mod shared;

/// A cluster file that loaded, with what the comparison needs: its source and the YAML's
/// locations.
#[derive(Debug)]
pub(in crate::config) struct Listed {
    pub id: String,
    /// The entry's place in the host file (its id, or its file).
    pub at: serde_saphyr::Location,
    /// Its place in the host file's problems' cluster files (`config::host`).
    pub(in crate::config) slot: usize,
    pub src: Source,
    pub path: PathBuf,
    /// The path as shown: next to the host file's name.
    pub name: String,
    pub raw: RawConfig,
    pub config: Config,
}
#[cfg(test)]
mod tests;

/// Every conflict between `members`, each with the member whose file it is reported in (`None`:
/// the host file).
pub(in crate::config) fn conflicts(
    host_src: &Source,
    members: &[Listed],
) -> Vec<(Option<usize>, Problem)> {
    let mut out = Vec::new();
    host_keys(members, &mut out);
    ids(host_src, members, &mut out);
    domains(members, &mut out);
    macs(members, &mut out);
    addresses(members, &mut out);
    subnets(members, &mut out);
    pools(members, &mut out);
    dhcp_interfaces(members, &mut out);
    ignition_dirs(members, &mut out);
    machines(members, &mut out);
    listeners(members, &mut out);
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

/// A key that is the host's, stated in a cluster file: one process has one state directory
/// and one account, and the cluster files would disagree.
fn host_keys(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    for (i, m) in members.iter().enumerate() {
        let raw = &m.raw;
        let stated = [
            ("state_dir", raw.state_dir.as_ref().map(|s| s.referenced)),
            ("run_as", raw.run_as.as_ref().map(|r| r.user.referenced)),
            ("api", raw.api.as_ref().map(|a| a.referenced)),
            ("ha", raw.ha.as_ref().map(|h| h.referenced)),
        ];
        for (key, at) in stated {
            let Some(at) = at else { continue };
            let hint = format!(
                "`{key}` is the host's: move it to the host file, which states it once for every cluster"
            );
            let mut p = Problem::new(
                &m.src,
                Severity::Error,
                "host::host-key-in-cluster",
                at,
                format!("`{key}` in a cluster file of a host file"),
                "here",
            );
            p.hint(&hint);
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
            // The services host's own addresses may be several clusters' gateway, and one
            // gateway for clusters on one subnet is the usual case; only two clusters'
            // frontends on one address clash. One cluster's own uses were checked by its
            // file's rules.
            let host_side = |u: Use| matches!(u, Use::Gateway | Use::Appliance);
            if j == i
                || (host_side(what)
                    && host_side(theirs)
                    && (what, theirs) != (Use::Appliance, Use::Appliance))
            {
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

/// Each cluster's ignition files are its own: one directory for two would serve one cluster's
/// certificates to the other's nodes.
fn ignition_dirs(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    let mut seen = FirstUse::<PathBuf>::new();
    for (i, m) in members.iter().enumerate() {
        let dir = &m.config.install.ignition_dir;
        let key = same_place(dir);
        let written = &m.raw.install.value.ignition_dir;
        let at = written.referenced;
        seen.check(
            (key, at),
            (i, members),
            "host::shared-ignition-dir",
            // As written: the file's own words, the same on every machine.
            |other| {
                format!(
                    "ignition_dir {} is the directory cluster {} uses too",
                    written.value, other.id
                )
            },
            "openshift-install writes one cluster's ignition files per directory: give each cluster its own",
            out,
        );
    }
}

/// What `dir` names, for comparing two paths: the real path when it exists (symlinks
/// followed), else the absolute path with `.` and `..` taken lexically.
fn same_place(dir: &std::path::Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(dir) {
        return real;
    }
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
    let mut out = PathBuf::new();
    for part in absolute.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
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
