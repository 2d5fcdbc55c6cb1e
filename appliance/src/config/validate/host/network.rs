//! The clusters of a host on the network: one subnet is one segment (one interface, one
//! gateway, MTU, NTP and lease time, one pool), pools clear of every cluster's addresses, and
//! no socket two clusters' services would both listen on.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_saphyr::Location;

use super::super::super::diagnostic::Problem;
use super::Listed;
use super::{Use, conflict, second_use, uses};

/// One subnet is one segment: on one interface, and never overlapping another unequal one.
pub(super) fn subnets(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    for (i, m) in members.iter().enumerate() {
        for other in &members[..i] {
            for ((net, at), (theirs, their_at)) in subnet_pairs(m, other) {
                let message = if net == theirs {
                    match (&m.config.network.interface, &other.config.network.interface) {
                        (Some(a), Some(b)) if a != b => format!(
                            "subnet {net} is on interface {a} here and on {b} in cluster {}",
                            other.id
                        ),
                        _ => {
                            if matches!(net, IpNet::V4(_)) {
                                segment_keys(m, other, i, out);
                            }
                            continue;
                        }
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

/// Two clusters on one segment (one IPv4 subnet on one interface) say the same of it where
/// both say something: its gateway, MTU, NTP servers and lease time are the segment's, which
/// the DHCP server hands to every client on it. (Equal pools: `pools`.)
fn segment_keys(m: &Listed, other: &Listed, i: usize, out: &mut Vec<(Option<usize>, Problem)>) {
    let (mine, theirs) = (&m.config.network, &other.config.network);
    let (raw, their_raw) = (&m.raw.network, &other.raw.network);
    let mut differ = |key: &str, stated: Option<(Location, Location)>, same: bool| {
        if let Some((at, their_at)) = stated
            && !same
        {
            let message = format!(
                "network.{key} differs from cluster {}'s on the same segment",
                other.id
            );
            let p = conflict(
                (m, (at, "this value")),
                (other, (their_at, "that value")),
                "host::segment-mismatch",
                message,
                "a segment's gateway, MTU, NTP servers and lease time are one: state the same, or leave them to one cluster's file",
            );
            out.push((Some(i), p));
        }
    };
    let both = |a: Option<Location>, b: Option<Location>| a.zip(b);
    differ(
        "gateway",
        both(
            raw.gateway.as_ref().map(|t| t.referenced),
            their_raw.gateway.as_ref().map(|t| t.referenced),
        ),
        mine.v4.gateway == theirs.v4.gateway,
    );
    differ(
        "mtu",
        both(
            raw.mtu.as_ref().map(|t| t.referenced),
            their_raw.mtu.as_ref().map(|t| t.referenced),
        ),
        mine.mtu == theirs.mtu,
    );
    differ(
        "ntp",
        both(
            raw.ntp.first().map(|t| t.referenced),
            their_raw.ntp.first().map(|t| t.referenced),
        ),
        mine.ntp == theirs.ntp,
    );
    differ(
        "lease_time",
        both(
            raw.lease_time.as_ref().map(|t| t.referenced),
            their_raw.lease_time.as_ref().map(|t| t.referenced),
        ),
        mine.lease_time == theirs.lease_time,
    );
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
pub(super) fn pools(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    for (i, m) in members.iter().enumerate() {
        for other in &members[..i] {
            let mine = pool_of(m);
            let theirs = pool_of(other);
            // The same pool stated by two clusters of one segment is that segment's one pool
            // (each file stays servable alone); another that overlaps it is a clash.
            if let (Some((pool, at)), Some((their_pool, their_at))) = (mine, theirs)
                && pool != their_pool
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
                    "clusters on one segment share its one pool: state the same pool, or none",
                );
                out.push((Some(i), p));
            }
            // One DHCP socket serves an interface, with one pool: a second, different pool on
            // it (another subnet on the same interface) would never be served.
            let serves_dhcp = |m: &Listed| !m.config.listen.dhcp.is_empty();
            let interface = m.config.network.interface.as_deref();
            if let (Some((pool, at)), Some((their_pool, their_at))) = (mine, theirs)
                && (pool.end < their_pool.start || their_pool.end < pool.start)
                && serves_dhcp(m)
                && serves_dhcp(other)
                && interface == other.config.network.interface.as_deref()
            {
                let on = interface.map_or_else(
                    || "without network.interface".to_owned(),
                    |i| format!("on {i}"),
                );
                let message = format!(
                    "a second dynamic pool {on}: cluster {} has {}-{} there",
                    other.id, their_pool.start, their_pool.end
                );
                let p = conflict(
                    (m, (at, "this pool")),
                    (other, (their_at, "that pool")),
                    "host::second-pool",
                    message,
                    "one DHCP socket serves an interface, with one pool: state the same pool in both files, or keep it in one",
                );
                out.push((Some(i), p));
            }
            // This cluster's pool holds an address of the other's (a node's, its appliance
            // address, its gateway), or the other's pool holds one of this one's.
            if let Some((pool, at)) = mine {
                for (ip, what, their_at) in v4_uses(other).filter(|(ip, ..)| pool.contains(*ip)) {
                    let message = format!(
                        "dynamic pool {}-{} holds {ip}, {} in cluster {}",
                        pool.start,
                        pool.end,
                        what.noun(),
                        other.id
                    );
                    let p = conflict(
                        (m, (at, "this pool")),
                        (other, (their_at, "used here")),
                        "host::pool-overlap",
                        message,
                        POOL_HINT,
                    );
                    out.push((Some(i), p));
                }
            }
            if let Some((pool, pool_at)) = theirs {
                for (ip, what, at) in v4_uses(m).filter(|(ip, ..)| pool.contains(*ip)) {
                    let message = format!(
                        "{ip}, {} here, is in cluster {}'s dynamic pool {}-{}",
                        what.noun(),
                        other.id,
                        pool.start,
                        pool.end
                    );
                    let p = conflict(
                        (m, (at, "used here")),
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

/// Two clusters serving DHCP without `network.interface`: the host's DHCP sockets are one per
/// interface (a segment), and neither says which.
pub(super) fn dhcp_interfaces(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    let unbound =
        |m: &Listed| !m.config.listen.dhcp.is_empty() && m.config.network.interface.is_none();
    let Some(first) = members.iter().position(unbound) else {
        return;
    };
    for (i, m) in members
        .iter()
        .enumerate()
        .skip(first + 1)
        .filter(|(_, m)| unbound(m))
    {
        let other = &members[first];
        let p = conflict(
            (m, (m.raw.network.appliance_ip.referenced, "this cluster")),
            (
                other,
                (other.raw.network.appliance_ip.referenced, "that cluster"),
            ),
            "host::dhcp-without-interface",
            format!(
                "this cluster and cluster {} both serve DHCP without network.interface",
                other.id
            ),
            "one DHCP socket serves each interface of a host: set network.interface in each cluster file (or listen.dhcp: [] where another server does DHCP)",
        );
        out.push((Some(i), p));
    }
}

/// The IPv4 addresses `m` gives a meaning to (pools are IPv4).
fn v4_uses(m: &Listed) -> impl Iterator<Item = (std::net::Ipv4Addr, Use, Location)> {
    uses(m).into_iter().filter_map(|(ip, what, at)| match ip {
        IpAddr::V4(v4) => Some((v4, what, at)),
        IpAddr::V6(_) => None,
    })
}

const POOL_HINT: &str = "an unknown machine could be given that address: keep every pool clear of every cluster's addresses";

fn pool_of(m: &Listed) -> Option<(crate::config::Pool, Location)> {
    match (&m.config.network.dhcp_pool, &m.raw.network.dhcp_pool) {
        (Some(pool), Some(raw)) => Some((*pool, raw.start.referenced)),
        _ => None,
    }
}

/// One socket a cluster's services listen on.
struct Socket {
    service: &'static str,
    /// Written in the file's `listen` (or `api`), rather than derived from the appliance
    /// address, whose clash is `host::frontend-collision` already.
    explicit: bool,
    udp: bool,
    addr: std::net::SocketAddr,
    /// The interface a DHCP socket is bound to. Two on different interfaces don't meet; on
    /// one interface they are that segment's one DHCP socket, which the design serves for
    /// every cluster on it (docs/design/several-clusters.md, DHCP).
    device: Option<String>,
}

impl Socket {
    /// Whether the two would fight over one port: one protocol and port, the same address or
    /// a wildcard of the other's family, and not two interface-bound DHCP sockets. Port 0 is
    /// a free port, never shared.
    fn clashes(&self, other: &Socket) -> bool {
        let covers = |a: IpAddr, b: IpAddr| a.is_unspecified() && a.is_ipv4() == b.is_ipv4();
        let (a, b) = (self.addr.ip(), other.addr.ip());
        self.udp == other.udp
            && self.addr.port() != 0
            && self.addr.port() == other.addr.port()
            && (a == b || covers(a, b) || covers(b, a))
            && !(self.device.is_some() && other.device.is_some())
    }
}

/// Two clusters' services can't listen on one socket (two `serve` processes on one host, one
/// per cluster file, would fail to bind; one HAProxy of `render --format haproxy` would split
/// one port's connections between two clusters).
pub(super) fn listeners(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    let mut seen: Vec<(usize, Socket, Location)> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        for (socket, at) in sockets(m) {
            let first = seen.iter().find(|(j, theirs, _)| {
                *j != i && (socket.explicit || theirs.explicit) && socket.clashes(theirs)
            });
            if let Some((j, theirs, first)) = first {
                let other = &members[*j];
                let proto = if socket.udp { "udp" } else { "tcp" };
                let message = format!(
                    "{} listens on {proto} {} here, where cluster {}'s {} listens on {}",
                    socket.service, socket.addr, other.id, theirs.service, theirs.addr
                );
                let p = second_use(
                    m,
                    other,
                    "host::listener-collision",
                    (at, *first),
                    message,
                    "each cluster's services listen on its own addresses: give this one explicit `listen` addresses apart from the other's",
                );
                out.push((Some(i), p));
            }
            seen.push((i, socket, at));
        }
    }
}

/// A service's name, its protocols (`true`: UDP), its sockets and its `listen` entries.
type ServiceListen<'a> = (
    &'static str,
    &'static [bool],
    &'a Vec<std::net::SocketAddr>,
    &'a Option<Vec<super::super::Text>>,
);

/// Every socket `m`'s services listen on, with where its file says so (an explicit `listen`
/// entry, else the appliance address the default comes from, or the interface for DHCP).
fn sockets(m: &Listed) -> Vec<(Socket, Location)> {
    let listen = &m.config.listen;
    let raw = &m.raw.listen;
    let appliance_at = m.raw.network.appliance_ip.referenced;
    let device = m.config.network.interface.clone();
    let services: [ServiceListen<'_>; 8] = [
        ("dns", &[true, false], &listen.dns, &raw.dns),
        ("dhcp", &[true], &listen.dhcp, &raw.dhcp),
        ("tftp", &[true], &listen.tftp, &raw.tftp),
        ("http", &[false], &listen.http, &raw.http),
        ("api", &[false], &listen.api, &raw.api),
        (
            "machine_config",
            &[false],
            &listen.machine_config,
            &raw.machine_config,
        ),
        (
            "ingress_https",
            &[false],
            &listen.ingress_https,
            &raw.ingress_https,
        ),
        (
            "ingress_http",
            &[false],
            &listen.ingress_http,
            &raw.ingress_http,
        ),
    ];
    let mut out = Vec::new();
    for (service, protos, addrs, written) in services {
        for (k, addr) in addrs.iter().enumerate() {
            let at = match written {
                Some(entries) => entries.get(k).map_or(appliance_at, |t| t.referenced),
                None if service == "dhcp" => m
                    .raw
                    .network
                    .interface
                    .as_ref()
                    .map_or(appliance_at, |t| t.referenced),
                None => appliance_at,
            };
            for &udp in protos {
                let device = (service == "dhcp").then(|| device.clone()).flatten();
                out.push((
                    Socket {
                        service,
                        explicit: written.is_some(),
                        udp,
                        addr: *addr,
                        device,
                    },
                    at,
                ));
            }
        }
    }
    if let (Some(api), Some(raw_api)) = (&m.config.api, &m.raw.api) {
        let at = raw_api.value.listen.referenced;
        out.push((
            Socket {
                service: "the HTTP API",
                explicit: true,
                udp: false,
                addr: api.listen,
                device: None,
            },
            at,
        ));
    }
    out
}
