//! The forward zone of the cluster and the reverse zones of its subnets.
//!
//! ns1 resolves to the appliance. api, api-int and `*.apps` resolve to the appliance too (its
//! load balancer forwards to the nodes), except for a single node reached directly
//! (`lb.single_node: direct`, the default: they resolve to the node, as OpenShift's
//! single-node requirements say) and on a host with a shared frontend (they resolve to its
//! addresses). The appliance's address then has two PTRs, api and api-int, as the OpenShift
//! docs' record table has; with a shared frontend its PTR is ns1 (the shared address, being
//! every cluster's, has none), and a directly reached single node's address keeps its own name.
//!
//! Architecture invariant: zones are data. This module decides which records exist; how they are
//! looked up, compressed or put on the wire is the DNS service's business.

use std::net::IpAddr;

use ipnet::IpNet;

use super::reverse;
use crate::config::{Config, Role};
use crate::records::{RecordData, Soa};

/// SOA timers (RFC 1912 section 2.2 ranges); the negative TTL keeps NXDOMAIN short so a node
/// added by reload resolves quickly.
const REFRESH: u32 = 3600;
const RETRY: u32 = 600;
const EXPIRE: u32 = 1_209_600;
const NEGATIVE_TTL: u32 = 60;
/// The etcd peer port advertised by the legacy SRV records.
const ETCD_PEER_PORT: u16 = 2380;

/// One zone the appliance is authoritative for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    /// Absolute, lowercase, with a trailing dot.
    pub origin: String,
    /// For reverse zones, the addresses the zone covers.
    pub network: Option<IpNet>,
    /// For a reverse zone wider than the subnets it was derived for (a /25's enclosing /24,
    /// since zone cuts fall on label boundaries): those subnets. The names of the zone's other
    /// addresses are someone else's and are not answered here (the DNS service treats them as
    /// outside its zones: forwarded). Empty: the whole zone is the appliance's.
    pub covers: Vec<IpNet>,
    /// Every record including the SOA and NS at the apex, sorted by name then type then data.
    pub records: Vec<Record>,
}

impl Zone {
    pub fn soa(&self) -> &Soa {
        self.records
            .iter()
            .find_map(|r| match &r.data {
                RecordData::Soa(soa) => Some(soa),
                _ => None,
            })
            .expect("every zone has a SOA")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    /// Absolute, lowercase, with a trailing dot; a wildcard starts with `*.`.
    pub name: String,
    pub ttl: u32,
    pub data: RecordData,
}

/// The name server name every zone lists in its NS record.
pub fn ns_name(domain: &str) -> String {
    format!("ns1.{domain}.")
}

pub fn derive(config: &Config, serial: u32) -> Vec<Zone> {
    let mut zones = vec![forward_zone(config, serial)];
    let mut subnets = vec![IpNet::V4(config.network.v4.subnet)];
    if let Some(v6) = &config.network.v6 {
        subnets.push(IpNet::V6(v6.subnet));
    }
    for subnet in subnets {
        for network in reverse::zone_networks(subnet) {
            let mut zone = reverse_zone(config, serial, network);
            if network.prefix_len() < subnet.prefix_len() {
                zone.covers = vec![subnet];
            }
            zones.push(zone);
        }
    }
    zones
}

fn apex(origin: &str, domain: &str, ttl: u32, serial: u32) -> Vec<Record> {
    let soa = Soa {
        mname: ns_name(domain),
        rname: format!("hostmaster.{domain}."),
        serial,
        refresh: REFRESH,
        retry: RETRY,
        expire: EXPIRE,
        minimum: NEGATIVE_TTL,
    };
    vec![
        Record {
            name: origin.to_owned(),
            ttl,
            data: RecordData::Soa(soa),
        },
        Record {
            name: origin.to_owned(),
            ttl,
            data: RecordData::Ns(ns_name(domain)),
        },
    ]
}

/// The appliance's addresses: the target of ns1, and of api, api-int and `*.apps` unless
/// [`cluster_addresses`] says otherwise.
fn appliance_addresses(config: &Config) -> Vec<IpAddr> {
    let mut out = vec![IpAddr::V4(config.network.v4.appliance)];
    if let Some(v6) = &config.network.v6 {
        out.push(IpAddr::V6(v6.appliance));
    }
    out
}

/// The target of api, api-int and `*.apps`: the appliance, whose load balancer forwards to the
/// nodes; a single-node cluster's node itself when reached directly (OpenShift's single-node
/// requirements point all three at the node).
/// On a host with a shared frontend, the shared addresses, where the host's router listens.
fn cluster_addresses(config: &Config) -> Vec<IpAddr> {
    match (config.direct_single_node(), &config.lb.shared) {
        (Some(node), _) => std::iter::once(IpAddr::V4(node.ipv4))
            .chain(node.ipv6.map(IpAddr::V6))
            .collect(),
        (None, Some(shared)) => shared.clone(),
        (None, None) => appliance_addresses(config),
    }
}

fn address_record(name: String, ttl: u32, ip: IpAddr) -> Record {
    let data = match ip {
        IpAddr::V4(ip) => RecordData::A(ip),
        IpAddr::V6(ip) => RecordData::Aaaa(ip),
    };
    Record { name, ttl, data }
}

fn forward_zone(config: &Config, serial: u32) -> Zone {
    let domain = config.cluster.domain();
    let origin = format!("{domain}.");
    let ttl = config.dns.ttl;
    let mut records = apex(&origin, &domain, ttl, serial);
    for ip in appliance_addresses(config) {
        records.push(address_record(format!("ns1.{origin}"), ttl, ip));
    }
    for ip in cluster_addresses(config) {
        for label in ["api", "api-int", "*.apps"] {
            records.push(address_record(format!("{label}.{origin}"), ttl, ip));
        }
    }
    for node in &config.nodes {
        let name = format!("{}.{origin}", node.name);
        records.push(address_record(name.clone(), ttl, IpAddr::V4(node.ipv4)));
        if let Some(ip) = node.ipv6 {
            records.push(address_record(name, ttl, IpAddr::V6(ip)));
        }
    }
    if config.dns.legacy_etcd {
        // OpenShift before 4.4 looked its etcd members up by these names.
        for (i, master) in config.nodes_with_role(Role::Master).enumerate() {
            let target = format!("etcd-{i}.{origin}");
            records.push(address_record(target.clone(), ttl, IpAddr::V4(master.ipv4)));
            records.push(Record {
                name: format!("_etcd-server-ssl._tcp.{origin}"),
                ttl,
                data: RecordData::Srv {
                    priority: 0,
                    weight: 10,
                    port: ETCD_PEER_PORT,
                    target,
                },
            });
        }
    }
    for extra in &config.dns.records {
        records.push(Record {
            name: extra.name.clone(),
            ttl: extra.ttl.unwrap_or(ttl),
            data: extra.data.clone(),
        });
    }
    sort(&mut records);
    Zone {
        origin,
        network: None,
        covers: Vec::new(),
        records,
    }
}

fn reverse_zone(config: &Config, serial: u32, network: IpNet) -> Zone {
    let domain = config.cluster.domain();
    let origin = reverse::zone_origin(network);
    let ttl = config.dns.ttl;
    let mut records = apex(&origin, &domain, ttl, serial);
    let mut ptr = |ip: IpAddr, host: String| {
        if network.contains(&ip) {
            records.push(Record {
                name: reverse::ptr_name(ip),
                ttl,
                data: RecordData::Ptr(host),
            });
        }
    };
    // A single node's address keeps its own name as its PTR (the node's records below). A
    // shared frontend is every cluster's, so it has no PTR, and the appliance's own address
    // is then its name server's.
    if config.lb.shared.is_some() {
        for ip in appliance_addresses(config) {
            ptr(ip, format!("ns1.{domain}."));
        }
    } else if config.direct_single_node().is_none() {
        for ip in appliance_addresses(config) {
            ptr(ip, format!("api.{domain}."));
            ptr(ip, format!("api-int.{domain}."));
        }
    }
    for node in &config.nodes {
        ptr(IpAddr::V4(node.ipv4), format!("{}.{domain}.", node.name));
        if let Some(ip) = node.ipv6 {
            ptr(IpAddr::V6(ip), format!("{}.{domain}.", node.name));
        }
    }
    sort(&mut records);
    Zone {
        origin,
        network: Some(network),
        covers: Vec::new(),
        records,
    }
}

/// A reverse zone several clusters of a host share (their nodes on one subnet): the first
/// zone's apex (SOA and NS) and every zone's other records, in zone order, each once. The
/// union is well defined because an address belongs to one cluster on a host.
pub fn union(zones: &[&Zone]) -> Zone {
    let first = zones[0];
    let mut records = first.records.clone();
    for z in &zones[1..] {
        let apex = |r: &&Record| {
            r.name == z.origin && matches!(r.data, RecordData::Soa(_) | RecordData::Ns(_))
        };
        records.extend(z.records.iter().filter(|r| !apex(r)).cloned());
    }
    sort(&mut records);
    records.dedup();
    // The subnets of every zone (clusters on two halves of one /24), or the whole zone when any
    // of them had it whole.
    let mut covers: Vec<IpNet> = Vec::new();
    if zones.iter().all(|z| !z.covers.is_empty()) {
        for net in zones.iter().flat_map(|z| &z.covers) {
            if !covers.contains(net) {
                covers.push(*net);
            }
        }
    }
    Zone {
        origin: first.origin.clone(),
        network: first.network,
        covers,
        records,
    }
}

impl Zone {
    /// The zone with its SOA serial set to `serial`.
    pub fn with_serial(mut self, serial: u32) -> Zone {
        for r in &mut self.records {
            if let RecordData::Soa(soa) = &mut r.data {
                soa.serial = serial;
            }
        }
        self
    }

    /// Whether the two zones hold the same records, whatever their serials.
    pub fn same_records(&self, other: &Zone) -> bool {
        let same = |a: &Record, b: &Record| match (&a.data, &b.data) {
            (RecordData::Soa(x), RecordData::Soa(y)) => {
                a.name == b.name
                    && a.ttl == b.ttl
                    && Soa {
                        serial: y.serial,
                        ..x.clone()
                    } == *y
            }
            _ => a == b,
        };
        self.origin == other.origin
            && self.network == other.network
            && self.records.len() == other.records.len()
            && self
                .records
                .iter()
                .zip(&other.records)
                .all(|(a, b)| same(a, b))
    }
}

/// Zone-file order: the apex SOA first, then by owner name with labels compared right to left (as
/// RFC 4034 section 6.1 does, but numeric labels by value so 10.0.0.2 sorts before 10.0.0.10),
/// then type and data.
fn sort(records: &mut [Record]) {
    records.sort_by(|a, b| {
        let soa_first = |r: &Record| !matches!(r.data, RecordData::Soa(_));
        soa_first(a)
            .cmp(&soa_first(b))
            .then_with(|| canonical_key(&a.name).cmp(&canonical_key(&b.name)))
            .then_with(|| a.data.type_name().cmp(b.data.type_name()))
            .then_with(|| a.data.cmp(&b.data))
    });
}

fn canonical_key(name: &str) -> Vec<(Option<u64>, &str)> {
    name.trim_end_matches('.')
        .rsplit('.')
        .map(|label| (label.parse().ok(), label))
        .collect()
}
