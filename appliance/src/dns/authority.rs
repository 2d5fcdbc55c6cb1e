//! The zones of a plan, indexed for answering: every name in lowercase wire form mapped to its
//! RRsets, already encoded, so answering copies bytes and allocates nothing.
//!
//! Lookup follows RFC 1034 section 4.3.2 with the wildcard rules of RFC 4592: a name that
//! exists (even as an empty non-terminal) is never covered by a wildcard; a wildcard answers
//! for the query name; CNAMEs are followed inside the zones the appliance serves. Responses are
//! minimal: no NS records in the authority section of positive answers, addresses of NS, MX
//! and SRV targets in the additional section.
//!
//! Architecture invariant: knows zones and records, not clients, transports or forwarding.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::wire::{self, MAX_NAME, Reply, Section, encode_tail, name_to_wire, rcode, rtype};
use crate::plan::{Plan, Zone};
use crate::records::RecordData;

/// A record for zone transfers: owner in wire form, then its tail.
pub type TransferRecord = (Box<[u8]>, Vec<u8>);

/// CNAME chains longer than this stop (RFC 1034 leaves the limit to the server).
const MAX_CNAME_CHAIN: usize = 8;

#[derive(Debug, Default)]
pub struct Authority {
    zones: Vec<ZoneIndex>,
    by_origin: HashMap<Box<[u8]>, usize>,
}

#[derive(Debug)]
pub struct ZoneIndex {
    pub origin: Box<[u8]>,
    nodes: HashMap<Box<[u8]>, Node>,
    /// The SOA record with the TTL of negative answers: min(SOA TTL, MINIMUM) (RFC 2308).
    negative_soa: Vec<u8>,
    /// The apex SOA as stored, for IXFR-over-UDP and transfers.
    soa: Vec<u8>,
    /// The RFC 8482 answer to QTYPE ANY: `HINFO "RFC8482" ""` with the SOA's TTL.
    hinfo: Vec<u8>,
    /// Every record in zone-file order (SOA first) for zone transfers.
    transfer: Vec<TransferRecord>,
    /// A reverse zone's network and, when it is wider than the subnets it serves, those
    /// subnets ([`Zone::covers`]): a name below the apex for an address outside them is not
    /// this zone's.
    network: Option<IpNet>,
    covers: Vec<IpNet>,
}

#[derive(Debug, Default)]
struct Node {
    rrsets: Vec<RRset>,
}

#[derive(Debug)]
struct RRset {
    rtype: u16,
    count: u16,
    tails: Vec<u8>,
    /// For CNAME: the target, in wire form.
    cname: Option<Box<[u8]>>,
    /// Names whose addresses go into the additional section (NS, MX, SRV targets).
    targets: Vec<Box<[u8]>>,
}

/// How a lookup ended, before any CNAME was followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not in any zone served here.
    NotOurs,
    Answered,
    NoData,
    NxDomain,
}

impl Authority {
    pub fn from_plan(plan: &Plan) -> Authority {
        let mut authority = Authority::default();
        for zone in &plan.zones {
            let index = ZoneIndex::build(zone);
            authority
                .by_origin
                .insert(index.origin.clone(), authority.zones.len());
            authority.zones.push(index);
        }
        authority
    }

    pub fn zone(&self, origin: &[u8]) -> Option<&ZoneIndex> {
        self.by_origin.get(origin).map(|&i| &self.zones[i])
    }

    /// The zone holding `name` (the longest origin that is a suffix on a label boundary), unless
    /// the name is an address of a reverse zone that the zone's subnets leave out.
    fn zone_of(&self, name: &[u8]) -> Option<&ZoneIndex> {
        let mut offsets = [0u8; 128];
        let n = wire::label_offsets(name, &mut offsets);
        let (k, zone) = offsets[..n].iter().enumerate().find_map(|(k, &off)| {
            self.by_origin
                .get(&name[usize::from(off)..])
                .map(|&i| (k, &self.zones[i]))
        })?;
        // The label just below the apex names the next octet (or nibble) of the address.
        let below = k
            .checked_sub(1)
            .map(|j| &name[usize::from(offsets[j])..usize::from(offsets[k])]);
        match below {
            Some(label) if !zone.claims(&label[1..]) => None,
            _ => Some(zone),
        }
    }

    /// Answers `qname` (lowercase wire form) / `qtype` into `reply`; sets the rcode.
    ///
    /// A CNAME is followed into any zone served here (as NSD does; RFC 1034 section 4.3.2
    /// step 3a restarts the lookup with the canonical name), for at most `MAX_CNAME_CHAIN`
    /// links, and never to a name already in the answer: a loop ends the chain as Knot and
    /// NSD end it, each CNAME once.
    pub fn answer(&self, qname: &[u8], qtype: u16, reply: &mut Reply<'_>) -> Outcome {
        let Some(mut zone) = self.zone_of(qname) else {
            return Outcome::NotOurs;
        };
        // The owners written so far, to stop at a loop without allocating.
        let mut chain: [&[u8]; MAX_CNAME_CHAIN] = [&[]; MAX_CNAME_CHAIN];
        let mut name = qname;
        let mut owner = Owner::QueryName;
        for depth in 0..MAX_CNAME_CHAIN {
            chain[depth] = name;
            let target = match self.answer_at(zone, name, qtype, reply, owner) {
                Step::Done(outcome) => {
                    // RFC 6604: the rcode describes the last name in the chain; the outcome (for
                    // rate limiting) the query name.
                    if outcome == Outcome::NxDomain {
                        reply.set_rcode(rcode::NXDOMAIN);
                    }
                    return if depth == 0 {
                        outcome
                    } else {
                        Outcome::Answered
                    };
                }
                Step::Cname(target) => target,
            };
            if chain[..=depth].contains(&target) {
                break;
            }
            let Some(next) = self.zone_of(target) else {
                // Out of the zones served here: the client's resolver goes on.
                break;
            };
            (zone, name, owner) = (next, target, Owner::Name(target));
        }
        Outcome::Answered
    }

    /// One link of an answer: the records of `name` in `zone`, or its CNAME to follow.
    fn answer_at<'z>(
        &'z self,
        zone: &'z ZoneIndex,
        name: &[u8],
        qtype: u16,
        reply: &mut Reply<'_>,
        owner: Owner<'_>,
    ) -> Step<'z> {
        let mut wildcard = [0u8; MAX_NAME];
        let Some(node) = zone.find(name, &mut wildcard) else {
            zone.push_negative_soa(reply);
            return Step::Done(Outcome::NxDomain);
        };
        if qtype == rtype::ANY {
            // RFC 8482: one synthesized HINFO instead of everything at the name.
            if node.rrsets.is_empty() {
                zone.push_negative_soa(reply);
                return Step::Done(Outcome::NoData);
            }
            owner.push(reply, Section::Answer, &zone.hinfo, 1);
            return Step::Done(Outcome::Answered);
        }
        if let Some(set) = node.rrset(qtype) {
            owner.push(reply, Section::Answer, &set.tails, set.count);
            self.push_additional(zone, set, reply);
            return Step::Done(Outcome::Answered);
        }
        if let Some(cname) = node.rrset(rtype::CNAME) {
            owner.push(reply, Section::Answer, &cname.tails, cname.count);
            let target = cname
                .cname
                .as_deref()
                .expect("CNAME sets carry their target");
            return Step::Cname(target);
        }
        zone.push_negative_soa(reply);
        Step::Done(Outcome::NoData)
    }

    /// Addresses of the targets of `set` (NS, MX, SRV) that are in `zone` itself. Minimal, as
    /// Knot and NSD answer: a target in another zone served here (ns1 of the forward zone for
    /// the NS of a reverse zone) is left to the client to ask for.
    fn push_additional(&self, zone: &ZoneIndex, set: &RRset, reply: &mut Reply<'_>) {
        for target in &set.targets {
            if !self.zone_of(target).is_some_and(|z| std::ptr::eq(z, zone)) {
                continue;
            }
            let Some(node) = zone.nodes.get(target) else {
                continue;
            };
            for t in [rtype::A, rtype::AAAA] {
                if let Some(addr) = node.rrset(t) {
                    reply.push_owned(Section::Additional, target, &addr.tails, addr.count);
                }
            }
        }
    }

    /// Every record of the zone at `origin`, SOA first, for AXFR.
    pub fn transfer(&self, origin: &[u8]) -> Option<&[TransferRecord]> {
        self.zone(origin).map(|z| z.transfer.as_slice())
    }
}

/// A decimal octet as a reverse name writes it: `0` to `255`, no leading zero.
fn octet(label: &[u8]) -> Option<u8> {
    match label {
        [b'0'] => Some(0),
        [b'1'..=b'9', rest @ ..] if rest.len() < 3 && rest.iter().all(u8::is_ascii_digit) => {
            std::str::from_utf8(label).ok()?.parse().ok()
        }
        _ => None,
    }
}

/// One hexadecimal nibble, as an ip6.arpa name writes it (lowercase: names are folded).
fn nibble(label: &[u8]) -> Option<u8> {
    match label {
        [c @ b'0'..=b'9'] => Some(c - b'0'),
        [c @ b'a'..=b'f'] => Some(c - b'a' + 10),
        _ => None,
    }
}

/// How one link of an answer ended.
#[derive(Debug, Clone, Copy)]
enum Step<'z> {
    Done(Outcome),
    /// A CNAME was written; its target (lowercase wire form) is next.
    Cname(&'z [u8]),
}

/// Who owns the records being written.
#[derive(Debug, Clone, Copy)]
enum Owner<'a> {
    /// The name in the question: written as a pointer, so the query's case is kept.
    QueryName,
    Name(&'a [u8]),
}

impl Owner<'_> {
    fn push(self, reply: &mut Reply<'_>, section: Section, tails: &[u8], count: u16) {
        match self {
            Owner::QueryName => reply.push_at_qname(section, tails, count),
            Owner::Name(name) => reply.push_owned(section, name, tails, count),
        }
    }
}

impl Node {
    fn rrset(&self, rtype: u16) -> Option<&RRset> {
        self.rrsets.iter().find(|s| s.rtype == rtype)
    }
}

impl ZoneIndex {
    /// Whether `label` (the one just below the apex) is this zone's: always, unless the zone is
    /// wider than its subnets and the label is an address outside them. A label that is no
    /// octet (or nibble) in canonical form names no address and stays the zone's.
    fn claims(&self, label: &[u8]) -> bool {
        let Some(network) = self.network.filter(|_| !self.covers.is_empty()) else {
            return true;
        };
        let address = match network {
            IpNet::V4(net) if net.prefix_len() == 24 => octet(label).map(|last| {
                let [a, b, c, _] = net.network().octets();
                IpAddr::V4(Ipv4Addr::new(a, b, c, last))
            }),
            IpNet::V6(net) if net.prefix_len() == 124 => nibble(label)
                .map(|last| IpAddr::V6(Ipv6Addr::from(net.network().to_bits() | u128::from(last)))),
            _ => None,
        };
        address.is_none_or(|ip| self.covers.iter().any(|c| c.contains(&ip)))
    }

    fn build(zone: &Zone) -> ZoneIndex {
        let origin: Box<[u8]> = name_to_wire(&zone.origin).into();
        let mut nodes: HashMap<Box<[u8]>, Node> = HashMap::new();
        let mut transfer = Vec::with_capacity(zone.records.len());
        let mut soa = Vec::new();
        let mut negative_soa = Vec::new();
        let mut ttl = 0;
        for record in &zone.records {
            let owner: Box<[u8]> = name_to_wire(&record.name).into();
            let rtype = record_type(&record.data);
            let rdata = encode_rdata(&record.data);
            let mut tail = Vec::with_capacity(10 + rdata.len());
            encode_tail(&mut tail, rtype, record.ttl, &rdata);
            if let RecordData::Soa(s) = &record.data {
                soa.clone_from(&tail);
                ttl = record.ttl;
                encode_tail(&mut negative_soa, rtype, record.ttl.min(s.minimum), &rdata);
            }
            // Every ancestor up to the apex exists, if only as an empty non-terminal.
            let mut offsets = [0u8; 128];
            let n = wire::label_offsets(&owner, &mut offsets);
            for &off in &offsets[..n] {
                let ancestor = &owner[usize::from(off)..];
                if ancestor.len() < origin.len() {
                    break;
                }
                nodes.entry(ancestor.into()).or_default();
            }
            let node = nodes.get_mut(&owner).expect("inserted above");
            let set = match node.rrsets.iter_mut().position(|s| s.rtype == rtype) {
                Some(i) => &mut node.rrsets[i],
                None => {
                    node.rrsets.push(RRset {
                        rtype,
                        count: 0,
                        tails: Vec::new(),
                        cname: None,
                        targets: Vec::new(),
                    });
                    node.rrsets.last_mut().expect("just pushed")
                }
            };
            set.count += 1;
            set.tails.extend_from_slice(&tail);
            match &record.data {
                RecordData::Cname(target) => set.cname = Some(name_to_wire(target).into()),
                RecordData::Ns(target)
                | RecordData::Mx {
                    exchange: target, ..
                }
                | RecordData::Srv { target, .. } => {
                    set.targets.push(name_to_wire(target).into());
                }
                _ => {}
            }
            transfer.push((owner, tail));
        }
        let mut hinfo = Vec::with_capacity(20);
        encode_tail(&mut hinfo, rtype::HINFO, ttl, b"\x07RFC8482\x00");
        ZoneIndex {
            network: zone.network,
            covers: zone.covers.clone(),
            origin,
            nodes,
            negative_soa,
            soa,
            hinfo,
            transfer,
        }
    }

    /// The node for `name`: an exact match, or else the wildcard at its closest encloser
    /// (RFC 4592 section 3.3.1). `scratch` holds the wildcard's name.
    fn find<'z>(&'z self, name: &[u8], scratch: &mut [u8; MAX_NAME]) -> Option<&'z Node> {
        if let Some(node) = self.nodes.get(name) {
            return Some(node);
        }
        let mut offsets = [0u8; 128];
        let n = wire::label_offsets(name, &mut offsets);
        for &off in &offsets[1..n] {
            let ancestor = &name[usize::from(off)..];
            if ancestor.len() < self.origin.len() {
                return None;
            }
            if self.nodes.contains_key(ancestor) {
                // The closest encloser: only its wildcard child may answer.
                scratch[0] = 1;
                scratch[1] = b'*';
                scratch[2..2 + ancestor.len()].copy_from_slice(ancestor);
                return self.nodes.get(&scratch[..2 + ancestor.len()]);
            }
        }
        None
    }

    fn push_negative_soa(&self, reply: &mut Reply<'_>) {
        reply.push_owned(Section::Authority, &self.origin, &self.negative_soa, 1);
    }

    /// The apex SOA record's tail.
    pub fn soa(&self) -> &[u8] {
        &self.soa
    }
}

fn record_type(data: &RecordData) -> u16 {
    match data {
        RecordData::A(_) => rtype::A,
        RecordData::Aaaa(_) => rtype::AAAA,
        RecordData::Ns(_) => rtype::NS,
        RecordData::Cname(_) => rtype::CNAME,
        RecordData::Ptr(_) => rtype::PTR,
        RecordData::Mx { .. } => rtype::MX,
        RecordData::Srv { .. } => rtype::SRV,
        RecordData::Txt(_) => rtype::TXT,
        RecordData::Soa(_) => rtype::SOA,
    }
}

/// RDATA in wire form, names uncompressed (RFC 3597 section 4 forbids compressing new types;
/// for the old ones it is optional).
fn encode_rdata(data: &RecordData) -> Vec<u8> {
    match data {
        RecordData::A(ip) => ip.octets().to_vec(),
        RecordData::Aaaa(ip) => ip.octets().to_vec(),
        RecordData::Ns(n) | RecordData::Cname(n) | RecordData::Ptr(n) => name_to_wire(n),
        RecordData::Mx {
            preference,
            exchange,
        } => {
            let mut out = preference.to_be_bytes().to_vec();
            out.extend(name_to_wire(exchange));
            out
        }
        RecordData::Srv {
            priority,
            weight,
            port,
            target,
        } => {
            let mut out = Vec::with_capacity(6 + target.len() + 2);
            out.extend_from_slice(&priority.to_be_bytes());
            out.extend_from_slice(&weight.to_be_bytes());
            out.extend_from_slice(&port.to_be_bytes());
            out.extend(name_to_wire(target));
            out
        }
        RecordData::Txt(strings) => {
            let mut out = Vec::new();
            for s in strings {
                // Validation keeps each string within 255 bytes.
                let bytes = &s.as_bytes()[..s.len().min(255)];
                out.push(bytes.len() as u8);
                out.extend_from_slice(bytes);
            }
            out
        }
        RecordData::Soa(soa) => {
            let mut out = name_to_wire(&soa.mname);
            out.extend(name_to_wire(&soa.rname));
            for v in [soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum] {
                out.extend_from_slice(&v.to_be_bytes());
            }
            out
        }
    }
}
