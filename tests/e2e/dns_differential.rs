//! Differential test: the appliance against Knot DNS and NSD serving the same plan.
//!
//! The plan of a shipped example (with extra records: CNAME loops, a chain, a CNAME into a
//! reverse zone and one out of the zones, MX and SRV targets) is served three times: by
//! `okd-appliance serve` in the services namespace (10.99.0.1) and, rendered with `render
//! --format bind` at the serial the appliance serves, by `knotd` (10.99.0.2) and `nsd`
//! (10.99.0.3, `minimal-responses: yes`) in node namespaces. All get the same query set,
//! generated here from the rendered zones: every name × many types, wildcard matches, empty
//! non-terminals, names below existing ones, names above the zones, reverse names across the
//! zone cuts of a /20 (config/large.yml, sixteen reverse zones) and of an IPv6 /64
//! (config/dual-stack.yml), mixed case, meta types (MAILA, MAILB, OPT) and unknown types, QCLASS
//! `*`, zone transfers (AXFR and IXFR over UDP and TCP, at apexes and elsewhere), NOTIFY and the
//! other opcodes over UDP and TCP, with and without EDNS, some with DO, AD or CD set, some over
//! TCP; plus odd packets: other classes, no question, EDNS version 1, a payload size below 512.
//!
//! Replies are compared on every header bit but ID and QR (opcode, AA, TC, RD, RA, Z, AD, CD,
//! the full rcode), the EDNS pseudo-record (version, payload size, DO, option codes), the
//! question as echoed (case kept), and the answer/authority/additional sections as sets of
//! (owner lowercased, type, TTL, rdata; names inside rdata lowercased, RFC 4343). Every
//! difference from either reference must match an entry of [`ACCEPTED`] for that reference
//! exactly (each is documented in docs/dns-conformance.md with the RFC that allows it); any
//! other one fails the test. Where Knot and NSD differ from each other, the appliance matches
//! one of them and the other difference is an entry. A summary goes to stderr (`cargo test --
//! --nocapture` shows it on success too).
//!
//! Two clients: `no` (10.99.0.12) is outside `recursion_allowed`, like a resolver asking an
//! authoritative server, and sends everything; `na` (10.99.0.11) is inside it and sends the
//! in-zone queries again, where the appliance sets RA (it will recurse for that client) and
//! the references, authoritative only, do not. Response rate limiting is off for the run (in
//! NSD too): hundreds of queries a second from one outside client are the point here.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use harness::{Node, Process, Topology, require_root, require_tools};
use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;

use crate::dns_support::{
    client_socket, listen_section, query_message, start_appliance, tcp_exchange, udp_exchange,
    wait_reply,
};
use crate::support::{appliance, stage_config};

const APPLIANCE: &str = "10.99.0.1";
const KNOT: &str = "10.99.0.2";
const NSD: &str = "10.99.0.3";
const ALLOWED_CLIENT: &str = "10.99.0.11";

/// The reference servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reference {
    Knot,
    Nsd,
}

impl Reference {
    const ALL: [Reference; 2] = [Reference::Knot, Reference::Nsd];

    fn name(self) -> &'static str {
        match self {
            Reference::Knot => "knot",
            Reference::Nsd => "nsd",
        }
    }
}

/// One query of the set, encoded by hand so odd packets (other opcodes and classes, no
/// question, EDNS version 1, AD/CD bits) are as easy as ordinary ones.
#[derive(Debug, Clone)]
struct Probe {
    /// The name as sent (case included), in presentation form without escapes.
    name: String,
    qtype: u16,
    qclass: u16,
    opcode: u8,
    /// QDCOUNT 1 (else 0 and no question at all).
    question: bool,
    /// EDNS payload size, or no OPT record.
    edns: Option<u16>,
    edns_version: u8,
    dnssec_ok: bool,
    ad: bool,
    cd: bool,
    tcp: bool,
    /// The served zone the name is in (its origin), if any.
    zone: Option<String>,
    /// What the query is about, for the summary.
    kind: &'static str,
}

impl Probe {
    fn new(name: &str, qtype: u16, kind: &'static str) -> Probe {
        Probe {
            name: name.to_owned(),
            qtype,
            qclass: CLASS_IN,
            opcode: 0,
            question: true,
            edns: Some(1232),
            edns_version: 0,
            dnssec_ok: false,
            ad: false,
            cd: false,
            tcp: false,
            zone: None,
            kind,
        }
    }

    fn packet(&self, id: u16) -> Vec<u8> {
        let mut flags: u16 = 0x0100 | (u16::from(self.opcode & 0xf) << 11);
        if self.ad {
            flags |= 0x0020;
        }
        if self.cd {
            flags |= 0x0010;
        }
        let mut p = Vec::with_capacity(64);
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&flags.to_be_bytes());
        p.extend_from_slice(&u16::from(self.question).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0]);
        p.extend_from_slice(&u16::from(self.edns.is_some()).to_be_bytes());
        if self.question {
            for label in self.name.split('.').filter(|l| !l.is_empty()) {
                p.push(label.len() as u8);
                p.extend_from_slice(label.as_bytes());
            }
            p.push(0);
            p.extend_from_slice(&self.qtype.to_be_bytes());
            p.extend_from_slice(&self.qclass.to_be_bytes());
        }
        if let Some(size) = self.edns {
            let ttl = (u32::from(self.edns_version) << 16) | (u32::from(self.dnssec_ok) << 15);
            p.push(0);
            p.extend_from_slice(&41u16.to_be_bytes());
            p.extend_from_slice(&size.to_be_bytes());
            p.extend_from_slice(&ttl.to_be_bytes());
            p.extend_from_slice(&[0, 0]);
        }
        p
    }

    fn describe(&self) -> String {
        let mut how = Vec::new();
        match self.edns {
            None => how.push("no EDNS".to_owned()),
            Some(s) => how.push(format!("EDNS{} {s}", self.edns_version)),
        }
        for (set, what) in [
            (self.dnssec_ok, "DO"),
            (self.ad, "AD"),
            (self.cd, "CD"),
            (self.tcp, "TCP"),
            (!self.question, "QDCOUNT=0"),
        ] {
            if set {
                how.push(what.to_owned());
            }
        }
        if self.opcode != 0 {
            how.push(format!("opcode {}", self.opcode));
        }
        if self.qclass != CLASS_IN {
            how.push(format!("class {}", self.qclass));
        }
        format!(
            "{} {} ({}; {})",
            self.name,
            RecordType::from(self.qtype),
            how.join(", "),
            self.kind
        )
    }
}

const CLASS_IN: u16 = 1;

/// A record as compared: owner lowercased, type, TTL, rdata in presentation form.
type Rec = (String, u16, u32, String);

/// What is compared of one reply.
#[derive(Debug, Clone, PartialEq, Eq)]
struct View {
    /// From the header as sent: opcode, AA, TC, RD, RA, Z, AD, CD.
    opcode: u8,
    aa: bool,
    tc: bool,
    rd: bool,
    ra: bool,
    z: bool,
    ad: bool,
    cd: bool,
    /// The full rcode (the OPT record's upper bits included).
    rcode: u16,
    /// (version, payload size, DO) of the OPT record.
    edns: Option<(u8, u16, bool)>,
    /// EDNS option codes.
    edns_options: BTreeSet<u16>,
    /// The question as echoed: name with its case, type, class.
    question: Vec<(String, u16, u16)>,
    answer: BTreeSet<Rec>,
    authority: BTreeSet<Rec>,
    additional: BTreeSet<Rec>,
}

/// Types whose rdata holds domain names, which compare without case (RFC 4343 section 3):
/// Knot compresses them against the query name and so echoes its case, the appliance writes
/// them lowercase and uncompressed.
const NAME_RDATA: [u16; 6] = [2, 5, 6, 12, 15, 33];

fn records(rrs: &[hickory_proto::rr::Record]) -> BTreeSet<Rec> {
    rrs.iter()
        .filter(|r| r.record_type() != RecordType::OPT)
        .map(|r| {
            let rtype = u16::from(r.record_type());
            let mut rdata = r.data.to_string();
            if NAME_RDATA.contains(&rtype) {
                rdata = rdata.to_ascii_lowercase();
            }
            (r.name.to_lowercase().to_string(), rtype, r.ttl, rdata)
        })
        .collect()
}

impl View {
    fn of(bytes: &[u8]) -> Result<View, String> {
        if bytes.len() < 12 {
            return Err(format!("{} byte reply", bytes.len()));
        }
        let flags = u16::from_be_bytes([bytes[2], bytes[3]]);
        let bit = |b: u16| flags & b != 0;
        let m = Message::from_vec(bytes).map_err(|e| format!("unparseable reply: {e}"))?;
        Ok(View {
            opcode: ((flags >> 11) & 0xf) as u8,
            aa: bit(0x0400),
            tc: bit(0x0200),
            rd: bit(0x0100),
            ra: bit(0x0080),
            z: bit(0x0040),
            ad: bit(0x0020),
            cd: bit(0x0010),
            rcode: u16::from(m.metadata.response_code),
            edns: m
                .edns
                .as_ref()
                .map(|e| (e.version(), e.max_payload(), e.flags().dnssec_ok)),
            edns_options: m
                .edns
                .as_ref()
                .map(|e| {
                    e.options()
                        .as_ref()
                        .iter()
                        .map(|(code, _)| u16::from(*code))
                        .collect()
                })
                .unwrap_or_default(),
            question: m
                .queries
                .iter()
                .map(|q| {
                    (
                        q.name().to_string(),
                        u16::from(q.query_type()),
                        u16::from(q.query_class()),
                    )
                })
                .collect(),
            answer: records(&m.answers),
            authority: records(&m.authorities),
            additional: records(&m.additionals),
        })
    }
}

/// The parts of a reply a difference can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Aspect {
    NoReply,
    Opcode,
    Rcode,
    Aa,
    Tc,
    Rd,
    Ra,
    Z,
    Ad,
    Cd,
    Edns,
    EdnsOptions,
    Question,
    Answer,
    Authority,
    Additional,
}

/// One observed difference between the appliance (`ours`) and a reference (`peer`).
#[derive(Debug)]
struct Difference<'a> {
    probe: &'a Probe,
    /// The client was inside `recursion_allowed`.
    recursive_client: bool,
    aspect: Aspect,
    ours: &'a View,
    peer: &'a View,
}

/// An accepted difference: a kind (for the summary), the RFC text that allows it, and the exact
/// shape it must have. Everything else is a failure.
struct Accepted {
    kind: &'static str,
    /// The references this difference is accepted against.
    against: &'static [Reference],
    rfc: &'static str,
    matches: fn(&Difference<'_>) -> bool,
}

const T_ANY: u16 = 255;
const T_HINFO: u16 = 13;
const T_A: u16 = 1;
const T_AAAA: u16 = 28;
const T_CNAME: u16 = 5;
const T_IXFR: u16 = 251;
const T_AXFR: u16 = 252;
const RCODE_NOERROR: u16 = 0;
const RCODE_FORMERR: u16 = 1;
const RCODE_NXDOMAIN: u16 = 3;
const RCODE_NOTIMP: u16 = 4;
const RCODE_REFUSED: u16 = 5;
const RCODE_NOTAUTH: u16 = 9;
const CLASS_CH: u16 = 3;
const CLASS_ANY: u16 = 255;
const OPCODE_NOTIFY: u8 = 4;
const OPCODE_UPDATE: u8 = 5;
/// EDNS option 15: Extended DNS Error (RFC 8914).
const EDE: u16 = 15;

const KNOT_ONLY: &[Reference] = &[Reference::Knot];
const NSD_ONLY: &[Reference] = &[Reference::Nsd];
const BOTH: &[Reference] = &Reference::ALL;

fn qtype(d: &Difference<'_>) -> u16 {
    d.probe.qtype
}

/// Our reply is a bare error: `rcode`, not authoritative, nothing in any section.
fn bare(v: &View, rcode: u16) -> bool {
    v.rcode == rcode
        && !v.aa
        && v.answer.is_empty()
        && v.authority.is_empty()
        && v.additional.is_empty()
}

/// NSD's error replies to other opcodes and classes: nothing at all, not even the question or
/// an OPT record.
fn nsd_empty(v: &View) -> bool {
    v.question.is_empty()
        && v.edns.is_none()
        && v.answer.is_empty()
        && v.authority.is_empty()
        && v.additional.is_empty()
}

/// The documented, RFC-backed differences (docs/dns-conformance.md explains each), each against
/// the references it is seen with. A difference is accepted only in exactly the shape written
/// here.
const ACCEPTED: &[Accepted] = &[
    Accepted {
        kind: "ra-for-recursive-clients",
        against: BOTH,
        rfc: "RFC 1035 4.1.1: RA says recursion is available, and it is for this client",
        matches: |d| d.recursive_client && d.aspect == Aspect::Ra && d.ours.ra && !d.peer.ra,
    },
    Accepted {
        kind: "cd-copied",
        against: BOTH,
        rfc: "RFC 4035 3.2.2 (CD copied, as BIND does); 3.1.6 clears it only in security-aware servers",
        matches: |d| d.aspect == Aspect::Cd && d.probe.cd && d.ours.cd && !d.peer.cd,
    },
    Accepted {
        kind: "any-synthesized-hinfo",
        against: BOTH,
        rfc: "RFC 8482 4.2 (synthesized HINFO) vs 4.1 (the references: one RRset); 4.4: TCP may differ",
        matches: |d| {
            qtype(d) == T_ANY
                && match d.aspect {
                    // Our answer is the one HINFO "RFC8482" record; the reference's are RRsets
                    // of the node. Both are owned by the query name.
                    Aspect::Answer => {
                        d.ours.answer.len() == 1
                            && d.ours
                                .answer
                                .iter()
                                .all(|r| r.1 == T_HINFO && r.3.starts_with("RFC8482"))
                            && !d.peer.answer.is_empty()
                            && d.peer.answer.iter().all(|r| r.1 != T_HINFO)
                            && same_owners(&d.ours.answer, &d.peer.answer)
                    }
                    // The reference adds the addresses of the targets of what it chose.
                    Aspect::Additional => {
                        d.ours.additional.is_empty() && only_addresses(&d.peer.additional)
                    }
                    _ => false,
                }
        },
    },
    Accepted {
        kind: "transfer-refused-not-notauth",
        against: KNOT_ONLY,
        rfc: "RFC 1035 4.1.1 (REFUSED: policy, its example a zone transfer), as NSD; Knot: NOTAUTH",
        matches: |d| {
            d.aspect == Aspect::Rcode
                && bare(d.ours, RCODE_REFUSED)
                && matches!(qtype(d), T_AXFR | T_IXFR)
                && d.peer.rcode == RCODE_NOTAUTH
        },
    },
    Accepted {
        kind: "update-notimp",
        against: KNOT_ONLY,
        rfc: "RFC 2136 2.2: NOTIMP, the opcode is not supported, as NSD; Knot: NOTAUTH",
        matches: |d| {
            d.probe.opcode == OPCODE_UPDATE
                && d.aspect == Aspect::Rcode
                && bare(d.ours, RCODE_NOTIMP)
                && d.peer.rcode == RCODE_NOTAUTH
        },
    },
    Accepted {
        kind: "cname-followed-across-zones",
        against: KNOT_ONLY,
        rfc: "RFC 1034 4.3.2 step 3a: restart at the canonical name, as NSD; Knot stops at its zone",
        matches: |d| {
            // Knot's answer is the CNAMEs up to the zone's edge; ours goes on in another zone.
            let chain_stops = !d.peer.answer.is_empty()
                && d.peer.answer.iter().all(|r| r.1 == T_CNAME)
                && d.peer.answer.is_subset(&d.ours.answer)
                && d.ours
                    .answer
                    .difference(&d.peer.answer)
                    .all(|r| !under_qname_zone(d, &r.0));
            chain_stops
                && match d.aspect {
                    Aspect::Answer => d.ours.answer.len() > d.peer.answer.len(),
                    // The end of our chain is negative: the other zone's SOA, NXDOMAIN.
                    Aspect::Authority => {
                        d.peer.authority.is_empty()
                            && d.ours.authority.iter().all(|r| !under_qname_zone(d, &r.0))
                    }
                    Aspect::Rcode => {
                        d.ours.rcode == RCODE_NXDOMAIN && d.peer.rcode == RCODE_NOERROR
                    }
                    _ => false,
                }
        },
    },
    Accepted {
        kind: "chaos-identity-refused",
        against: BOTH,
        rfc: "RFC 4892 2 (version.bind & co. are a convention); RFC 1035 4.1.1 REFUSED",
        matches: |d| {
            d.probe.qclass == CLASS_CH
                && bare(d.ours, RCODE_REFUSED)
                && matches!(d.aspect, Aspect::Rcode | Aspect::Aa | Aspect::Answer)
        },
    },
    Accepted {
        kind: "no-extended-dns-errors",
        against: BOTH,
        rfc: "RFC 8914 3: Extended DNS Errors are optional (MAY)",
        matches: |d| {
            d.aspect == Aspect::EdnsOptions
                && d.ours.edns_options.is_empty()
                && d.peer.edns_options.iter().all(|&c| c == EDE)
        },
    },
    Accepted {
        kind: "notify-notauth",
        against: NSD_ONLY,
        rfc: "RFC 1996 4.7 (not a secondary for the zone), as Knot; NSD: REFUSED or NXDOMAIN",
        matches: |d| {
            d.probe.opcode == OPCODE_NOTIFY
                && bare(d.ours, RCODE_NOTAUTH)
                && matches!(d.aspect, Aspect::Rcode | Aspect::Question | Aspect::Edns)
                && nsd_empty(d.peer)
        },
    },
    Accepted {
        kind: "error-keeps-question-and-opt",
        against: NSD_ONLY,
        rfc: "RFC 6891 6.1.1: a reply to a request with OPT MUST carry OPT; NSD drops it, or the question",
        matches: |d| {
            d.ours.rcode == d.peer.rcode
                && match d.aspect {
                    Aspect::Question => d.peer.question.is_empty() && !d.ours.question.is_empty(),
                    Aspect::Edns => d.peer.edns.is_none() && d.ours.edns.is_some(),
                    _ => false,
                }
        },
    },
    Accepted {
        kind: "no-question-formerr",
        against: NSD_ONLY,
        rfc: "RFC 1035 4.1.2 (a query carries its question), as Knot; NSD: NOERROR for QDCOUNT=0 with OPT (RFC 7873 5.4 cookie style)",
        matches: |d| {
            !d.probe.question
                && d.aspect == Aspect::Rcode
                && bare(d.ours, RCODE_FORMERR)
                && d.peer.rcode == RCODE_NOERROR
                && d.peer.question.is_empty()
        },
    },
    Accepted {
        kind: "additional-target-addresses",
        against: NSD_ONLY,
        rfc: "RFC 1034 4.3.2 step 6 (addresses of MX/SRV targets in the zone), as Knot; NSD's minimal-responses leaves them out",
        matches: |d| {
            d.aspect == Aspect::Additional
                && d.peer.additional.is_subset(&d.ours.additional)
                && d.ours
                    .additional
                    .difference(&d.peer.additional)
                    .all(|r| (r.1 == T_A || r.1 == T_AAAA) && under_qname_zone(d, &r.0))
        },
    },
    Accepted {
        kind: "qclass-any-authoritative",
        against: NSD_ONLY,
        rfc: "RFC 1035 6.2: AA when the answer covers every class (all data here is IN), as Knot",
        matches: |d| {
            d.probe.qclass == CLASS_ANY
                && d.ours.aa
                && match d.aspect {
                    Aspect::Aa => !d.peer.aa,
                    // Knot and the appliance put the SOA in negative answers, NSD nothing.
                    Aspect::Authority => d.peer.authority.is_empty(),
                    _ => false,
                }
        },
    },
];

fn same_owners(a: &BTreeSet<Rec>, b: &BTreeSet<Rec>) -> bool {
    let owners = |s: &BTreeSet<Rec>| s.iter().map(|r| r.0.clone()).collect::<BTreeSet<_>>();
    owners(a) == owners(b)
}

fn only_addresses(s: &BTreeSet<Rec>) -> bool {
    s.iter().all(|r| r.1 == T_A || r.1 == T_AAAA)
}

/// Whether `owner` is in the zone the query was answered from.
fn under_qname_zone(d: &Difference<'_>, owner: &str) -> bool {
    d.probe
        .zone
        .as_deref()
        .is_some_and(|z| owner == z || owner.ends_with(&format!(".{z}")))
}

/// Origins (with the trailing dot) of the zone files written by `render --format bind`.
fn zone_origins(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("zones dir")
        .map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix("zone").expect("ORIGIN.zone").to_owned()
        })
        .collect();
    v.sort();
    v
}

/// Owner names and their types from a rendered zone file.
fn zone_owners(path: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with([';', '$', ' ', '\t']) {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 4 {
            out.entry(f[0].to_ascii_lowercase())
                .or_default()
                .insert(f[3].to_owned());
        }
    }
    out
}

fn parent(name: &str) -> Option<&str> {
    if name == "." {
        return None;
    }
    name.split_once('.')
        .map(|(_, rest)| if rest.is_empty() { "." } else { rest })
}

/// Deterministic mixed case: every other letter upper-cased, starting at `phase`.
fn mix_case(name: &str, phase: usize) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            if (i + phase).is_multiple_of(2) {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

/// The query set for the zones in `zones_dir` (origins `origins`).
fn query_set(zones_dir: &Path, origins: &[String]) -> Vec<Probe> {
    // Every ordinary type a client might ask plus odd ones: NULL (10), HINFO (13), CAA (257),
    // DS (43), a private-use type (65280) and ANY (255).
    let all_types: &[u16] = &[1, 28, 2, 6, 5, 12, 15, 16, 33, 255, 10, 13, 257, 43, 65280];
    let few_types: &[u16] = &[1, 28, 16, 255, 12];
    // The longest origin the name is at or below.
    let zone_of = |name: &str| -> Option<String> {
        origins
            .iter()
            .filter(|o| name == o.as_str() || name.ends_with(&format!(".{o}")))
            .max_by_key(|o| o.len())
            .cloned()
    };
    let in_zone = |name: &str| zone_of(name).is_some();
    let mut names: Vec<(String, &[u16], &'static str)> = Vec::new();
    let mut existing: BTreeSet<String> = BTreeSet::new();
    for origin in origins {
        for (owner, _types) in zone_owners(&zones_dir.join(format!("{origin}zone"))) {
            existing.insert(owner);
        }
    }
    // Empty non-terminals: ancestors of owners inside a zone that own nothing themselves.
    let mut ents: BTreeSet<String> = BTreeSet::new();
    for owner in &existing {
        let mut n = parent(owner);
        while let Some(p) = n {
            if !in_zone(p) || existing.contains(p) {
                break;
            }
            ents.insert(p.to_owned());
            n = parent(p);
        }
    }
    for owner in &existing {
        if let Some(base) = owner.strip_prefix("*.") {
            // The wildcard itself, matches one and two labels deep, and below the literal `*`.
            names.push((owner.clone(), all_types, "wildcard-literal"));
            names.push((format!("console.{base}"), all_types, "wildcard"));
            names.push((format!("a.b.{base}"), few_types, "wildcard-deep"));
            names.push((format!("x.*.{base}"), few_types, "wildcard-below"));
            continue;
        }
        let kind = if owner.ends_with(".arpa.") {
            "reverse"
        } else {
            "derived"
        };
        names.push((owner.clone(), all_types, kind));
        names.push((format!("below.{owner}"), &[1, 12], "below-existing"));
    }
    for ent in &ents {
        names.push((ent.clone(), few_types, "empty-non-terminal"));
        names.push((format!("nx.{ent}"), &[1, 12], "below-ent"));
    }
    // Names above every zone (up to the root).
    let mut above: BTreeSet<String> = BTreeSet::new();
    for origin in origins {
        let mut n = parent(origin);
        while let Some(p) = n {
            if !in_zone(p) {
                above.insert(p.to_owned());
            }
            n = parent(p);
        }
    }
    for name in &above {
        names.push((name.clone(), &[1, 2, 6], "above-zone"));
    }
    names.push(("www.example.org.".to_owned(), &[1], "foreign"));
    // Reverse names beside the zones: a host nobody has in each zone, and the zones next to
    // the served ones.
    for origin in origins.iter().filter(|o| o.ends_with(".in-addr.arpa.")) {
        names.push((format!("250.{origin}"), &[12, 1], "reverse-unknown-host"));
        if let Some((first, rest)) = origin.split_once('.')
            && let Ok(octet) = first.parse::<u8>()
        {
            for neighbour in [octet.wrapping_sub(1), octet.wrapping_add(1)] {
                let n = format!("{neighbour}.{rest}");
                if !origins.contains(&n) {
                    names.push((format!("5.{n}"), &[12], "reverse-neighbour-zone"));
                }
            }
        }
    }
    for origin in origins.iter().filter(|o| o.ends_with(".ip6.arpa.")) {
        let host = "f.f.f.f.0.0.0.0.0.0.0.0.0.0.0.0.";
        names.push((format!("{host}{origin}"), &[12], "reverse-unknown-host"));
        names.push((format!("1.{origin}"), &[12, 6], "reverse-ent-or-nx"));
    }
    // Meta types at each apex: IXFR and AXFR (over UDP or TCP as the variation below has
    // it), MAILB, MAILA, and OPT as a QTYPE; and the mail meta types and OPT at names that
    // exist, don't, or are CNAMEs (loops included).
    for origin in origins {
        names.push((origin.clone(), &[251, 252, 253, 254, 41], "meta-type"));
    }
    for owner in existing.iter().filter(|o| !o.starts_with('*')) {
        names.push((owner.clone(), &[253, 254, 41], "meta-type-at-name"));
    }

    let mut probes = Vec::new();
    for (i, (name, types, kind)) in names
        .iter()
        .flat_map(|(n, ts, k)| ts.iter().map(move |t| (n, *t, *k)))
        .enumerate()
    {
        let mut p = Probe::new(name, types, kind);
        p.zone = zone_of(name);
        // Vary what else is in the packet, deterministically: one query in three without EDNS,
        // one in seven with DO, one in five with CD, one in six with AD, one in four in mixed
        // case, one in nine over TCP.
        if i.is_multiple_of(3) {
            p.edns = None;
        }
        p.dnssec_ok = p.edns.is_some() && i.is_multiple_of(7);
        p.cd = i.is_multiple_of(5);
        p.ad = i.is_multiple_of(6);
        if i % 4 == 1 {
            p.name = mix_case(name, i);
        }
        p.tcp = i % 9 == 4;
        probes.push(p);
    }

    // Odd packets at the first zone's apex and a few names: other opcodes, other classes, no
    // question, EDNS version 1, a payload size below 512, ANY over TCP.
    let apex = &origins[0];
    let some_names = [apex.clone(), format!("x.{apex}"), "example.org.".to_owned()];
    for name in &some_names {
        for opcode in [1u8, 2, 3, 4, 5, 15] {
            let mut p = Probe::new(name, 6, "opcode");
            p.opcode = opcode;
            probes.push(p);
        }
        for qclass in [3u16, 4, 254, 255] {
            let mut p = Probe::new(name, 1, "class");
            p.qclass = qclass;
            probes.push(p);
        }
        for edns in [None, Some(1232)] {
            let mut p = Probe::new(name, 6, "no-question");
            p.question = false;
            p.edns = edns;
            probes.push(p);
        }
        let mut p = Probe::new(name, 6, "edns-version-1");
        p.edns_version = 1;
        probes.push(p);
        let mut p = Probe::new(name, 6, "edns-payload-100");
        p.edns = Some(100);
        probes.push(p);
    }
    // Zone transfers and NOTIFY over both transports: at every apex, at a name in a zone, at
    // a name that does not exist and at a foreign name.
    let mut transfer_names: Vec<String> = origins.to_vec();
    transfer_names.extend([
        format!("api.{apex}"),
        format!("nx.{apex}"),
        "example.org.".to_owned(),
    ]);
    for name in &transfer_names {
        for tcp in [false, true] {
            for qtype in [252u16, 251] {
                let mut p = Probe::new(name, qtype, "transfer");
                p.tcp = tcp;
                probes.push(p);
            }
            let mut p = Probe::new(name, 6, "notify");
            p.opcode = 4;
            p.tcp = tcp;
            probes.push(p);
        }
    }
    // QCLASS * for every name of the set (its first type), as an outside client asks it.
    let class_any: Vec<Probe> = names
        .iter()
        .map(|(name, types, _)| {
            let mut p = Probe::new(name, types[0], "qclass-any");
            p.qclass = CLASS_ANY;
            p
        })
        .collect();
    probes.extend(class_any);
    for name in ["version.bind.", "hostname.bind.", "id.server."] {
        let mut p = Probe::new(name, 16, "chaos");
        p.qclass = 3;
        probes.push(p);
    }
    for name in existing.iter().filter(|n| !n.starts_with('*')).take(12) {
        let mut p = Probe::new(name, 255, "any-over-tcp");
        p.tcp = true;
        p.zone = zone_of(name);
        probes.push(p);
    }
    for p in probes.iter_mut().filter(|p| p.zone.is_none()) {
        p.zone = zone_of(&p.name.to_ascii_lowercase());
    }
    probes
}

/// The raw replies to one probe of the appliance, Knot and NSD (`None`: no reply in time).
type Replies = [Option<Vec<u8>>; 3];

/// Sends every probe to the three servers from inside `node`; returns the raw replies.
fn ask_all(node: &Node, probes: &[Probe]) -> Vec<Replies> {
    let servers: [SocketAddr; 3] =
        [APPLIANCE, KNOT, NSD].map(|ip| SocketAddr::new(ip.parse().unwrap(), 53));
    let packets: Vec<(Vec<u8>, bool)> = probes
        .iter()
        .enumerate()
        .map(|(i, p)| (p.packet(i as u16), p.tcp))
        .collect();
    node.run(move || {
        let sockets = servers.map(client_socket);
        packets
            .iter()
            .map(|(q, tcp)| {
                std::array::from_fn(|i| {
                    if *tcp {
                        tcp_exchange(servers[i], q).ok()
                    } else {
                        udp_exchange(&sockets[i], servers[i], q)
                    }
                })
            })
            .collect()
    })
    .expect("enter namespace")
}

fn start_knot(node: &Node, dir: &Path, zones: &Path, origins: &[String]) -> Process {
    for sub in ["db", "run"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let mut conf = format!(
        "server:\n  rundir: \"{run}\"\n  listen: {KNOT}@53\n  udp-workers: 1\n  tcp-workers: 1\n  \
         background-workers: 1\nlog:\n  - target: stderr\n    any: info\ndatabase:\n  \
         storage: \"{db}\"\ntemplate:\n  - id: default\n    storage: \"{zones}\"\n    \
         file: \"%s.zone\"\n    journal-content: none\n    zonefile-sync: -1\nzone:\n",
        run = dir.join("run").display(),
        db = dir.join("db").display(),
        zones = zones.display(),
    );
    for origin in origins {
        writeln!(conf, "  - domain: \"{origin}\"").unwrap();
    }
    let path = dir.join("knot.conf");
    std::fs::write(&path, conf).unwrap();
    let knot = node
        .spawn("knotd", ["knotd", "-c", path.to_str().unwrap()])
        .expect("spawn knotd");
    let server = SocketAddr::new(KNOT.parse().unwrap(), 53);
    for origin in origins {
        assert!(
            wait_reply(node, server, origin, RecordType::SOA, |m| {
                m.metadata.authoritative && !m.answers.is_empty()
            }),
            "knotd does not serve {origin}\n{}",
            knot.log_tails()
        );
    }
    knot
}

/// NSD serving the zone files in `zones`: minimal responses (as the appliance and Knot give),
/// no rate limiting, no chroot, no privilege drop, everything under `dir`.
fn start_nsd(node: &Node, dir: &Path, zones: &Path, origins: &[String]) -> Process {
    std::fs::create_dir_all(dir).unwrap();
    let mut conf = format!(
        "server:\n  ip-address: {NSD}@53\n  server-count: 1\n  username: \"\"\n  chroot: \"\"\n  \
         zonesdir: \"{zones}\"\n  pidfile: \"{run}/nsd.pid\"\n  database: \"\"\n  \
         xfrdfile: \"{run}/xfrd.state\"\n  zonelistfile: \"{run}/zone.list\"\n  \
         xfrdir: \"{run}\"\n  minimal-responses: yes\n  rrl-ratelimit: 0\n  verbosity: 1\n\
         remote-control:\n  control-enable: no\n",
        zones = zones.display(),
        run = dir.display(),
    );
    for origin in origins {
        writeln!(
            conf,
            "zone:\n  name: \"{origin}\"\n  zonefile: \"{origin}zone\""
        )
        .unwrap();
    }
    let path = dir.join("nsd.conf");
    std::fs::write(&path, conf).unwrap();
    let nsd = node
        .spawn("nsd", ["nsd", "-d", "-c", path.to_str().unwrap()])
        .expect("spawn nsd");
    let server = SocketAddr::new(NSD.parse().unwrap(), 53);
    for origin in origins {
        assert!(
            wait_reply(node, server, origin, RecordType::SOA, |m| {
                m.metadata.authoritative && !m.answers.is_empty()
            }),
            "nsd does not serve {origin}\n{}",
            nsd.log_tails()
        );
    }
    nsd
}

/// The SOA serial the appliance serves for `origin`, asked from inside `node`.
fn served_serial(node: &Node, origin: &str) -> u32 {
    let server = SocketAddr::new(APPLIANCE.parse().unwrap(), 53);
    let q = query_message(9, origin, RecordType::SOA, None)
        .to_vec()
        .unwrap();
    let reply = node
        .run(move || udp_exchange(&client_socket(server), server, &q))
        .unwrap()
        .expect("SOA from the appliance");
    let m = Message::from_vec(&reply).unwrap();
    let soa = m.answers[0].data.to_string();
    soa.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Tallies of one run, for the summary and the verdict.
#[derive(Default)]
struct Tally {
    sent: usize,
    identical: usize,
    /// Replies whose three record sections are the same (header bits may differ), and how
    /// many of those have a non-empty answer (so "the same" is not all errors).
    same_sections: usize,
    same_answers: usize,
    /// Queries whose differences were all accepted.
    accepted_queries: usize,
    /// Per accepted kind and reference: queries showing it.
    accepted: BTreeMap<(&'static str, Reference), usize>,
    /// Queries with an unexpected difference.
    unexpected_queries: usize,
    rejected: Vec<String>,
}

fn compare(
    tally: &mut Tally,
    reference: Reference,
    probe: &Probe,
    recursive_client: bool,
    ours: &View,
    peer: &View,
) {
    let mut aspects = Vec::new();
    let mut check = |aspect: Aspect, differs: bool| {
        if differs {
            aspects.push(aspect);
        }
    };
    check(Aspect::Opcode, ours.opcode != peer.opcode);
    check(Aspect::Rcode, ours.rcode != peer.rcode);
    check(Aspect::Aa, ours.aa != peer.aa);
    check(Aspect::Tc, ours.tc != peer.tc);
    check(Aspect::Rd, ours.rd != peer.rd);
    check(Aspect::Ra, ours.ra != peer.ra);
    check(Aspect::Z, ours.z != peer.z);
    check(Aspect::Ad, ours.ad != peer.ad);
    check(Aspect::Cd, ours.cd != peer.cd);
    check(Aspect::Edns, ours.edns != peer.edns);
    check(Aspect::EdnsOptions, ours.edns_options != peer.edns_options);
    check(Aspect::Question, ours.question != peer.question);
    check(Aspect::Answer, ours.answer != peer.answer);
    check(Aspect::Authority, ours.authority != peer.authority);
    check(Aspect::Additional, ours.additional != peer.additional);
    if ours.answer == peer.answer
        && ours.authority == peer.authority
        && ours.additional == peer.additional
    {
        tally.same_sections += 1;
        tally.same_answers += usize::from(!ours.answer.is_empty());
    }
    if aspects.is_empty() {
        tally.identical += 1;
        return;
    }
    let mut kinds = BTreeSet::new();
    let mut unexpected = false;
    for aspect in aspects {
        let d = Difference {
            probe,
            recursive_client,
            aspect,
            ours,
            peer,
        };
        match ACCEPTED
            .iter()
            .find(|a| a.against.contains(&reference) && (a.matches)(&d))
        {
            Some(a) => {
                kinds.insert(a.kind);
            }
            None => {
                unexpected = true;
                tally.rejected.push(format!(
                    "{} from {}: {aspect:?} differs from {}\n  appliance: {ours:?}\n  {:<10} {peer:?}",
                    probe.describe(),
                    if recursive_client {
                        "a recursive client"
                    } else {
                        "an outside client"
                    },
                    reference.name(),
                    format!("{}:", reference.name()),
                ));
            }
        }
    }
    if unexpected {
        tally.unexpected_queries += 1;
        return;
    }
    tally.accepted_queries += 1;
    for kind in kinds {
        *tally.accepted.entry((kind, reference)).or_default() += 1;
    }
}

/// Extra records for the differential, in the `dns.records` list: CNAME loops (two names and
/// one onto itself), a chain that ends at an address, a CNAME into a reverse zone
/// (`reverse_name`) and one out of every zone, MX and SRV with targets in the zone.
fn extra_records(reverse_name: &str) -> String {
    format!(
        "  records:\n    \
         - {{ name: loop1, type: CNAME, value: loop2 }}\n    \
         - {{ name: loop2, type: CNAME, value: loop1 }}\n    \
         - {{ name: self, type: CNAME, value: self }}\n    \
         - {{ name: chain1, type: CNAME, value: chain2 }}\n    \
         - {{ name: chain2, type: CNAME, value: master-0 }}\n    \
         - {{ name: to-reverse, type: CNAME, value: \"{reverse_name}\" }}\n    \
         - {{ name: outside, type: CNAME, value: www.example.org. }}\n    \
         - {{ name: mail, type: MX, value: \"10 master-0\" }}\n    \
         - {{ name: _http._tcp, type: SRV, value: \"0 0 80 api\" }}\n"
    )
}

/// Runs the whole comparison for `config/<example>.yml`; `patch` adapts the staged config.
fn differential(prefix: &str, example: &str, patch: impl FnOnce(String) -> String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = stage_config(example, dir.path());
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        patch(text) + &listen_section(&[&format!("{APPLIANCE}:53")]),
    )
    .unwrap();

    let topo = Topology::new(prefix).expect("topology");
    let outside = topo.add_node("no", "10.99.0.12/24", None).expect("node");
    let inside = topo
        .add_node("na", &format!("{ALLOWED_CLIENT}/24"), None)
        .expect("node");
    let knot_node = topo
        .add_node("kn", &format!("{KNOT}/24"), None)
        .expect("node");
    let nsd_node = topo
        .add_node("ns", &format!("{NSD}/24"), None)
        .expect("node");
    let mut ours = start_appliance(topo.services(), &cfg);

    // Render the same plan at the serial the appliance serves, and load it into the references.
    let zones = dir.path().join("zones");
    let out = appliance([
        "render".as_ref(),
        cfg.as_os_str(),
        "--format".as_ref(),
        "bind".as_ref(),
        "-o".as_ref(),
        zones.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let origins = zone_origins(&zones);
    let serial = served_serial(&outside, &origins[0]);
    std::fs::remove_dir_all(&zones).unwrap();
    let out = appliance([
        "render".as_ref(),
        cfg.as_os_str(),
        "--format".as_ref(),
        "bind".as_ref(),
        "--serial".as_ref(),
        serial.to_string().as_ref(),
        "-o".as_ref(),
        zones.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut knot = start_knot(&knot_node, &dir.path().join("knot"), &zones, &origins);
    let mut nsd = start_nsd(&nsd_node, &dir.path().join("nsd"), &zones, &origins);

    let probes = query_set(&zones, &origins);
    let mut tallies: BTreeMap<Reference, Tally> = BTreeMap::new();
    let mut by_kind: BTreeMap<&'static str, usize> = BTreeMap::new();
    let recursive: Vec<Probe> = probes
        .iter()
        .filter(|p| p.zone.is_some())
        .cloned()
        .collect();
    for (client, set, recursive_client) in [(&outside, &probes, false), (&inside, &recursive, true)]
    {
        let replies = ask_all(client, set);
        for (probe, [a, k, n]) in set.iter().zip(replies) {
            *by_kind.entry(probe.kind).or_default() += 1;
            let view = |r: &Option<Vec<u8>>| r.as_deref().map(View::of);
            let ours = view(&a);
            for (reference, reply) in [(Reference::Knot, &k), (Reference::Nsd, &n)] {
                let tally = tallies.entry(reference).or_default();
                tally.sent += 1;
                match (&ours, view(reply)) {
                    (Some(Ok(a)), Some(Ok(r))) => {
                        compare(tally, reference, probe, recursive_client, a, &r);
                    }
                    (a, r) => {
                        tally.unexpected_queries += 1;
                        tally.rejected.push(format!(
                            "{}: {:?}: appliance {a:?}, {} {r:?}",
                            probe.describe(),
                            Aspect::NoReply,
                            reference.name(),
                        ));
                    }
                }
            }
        }
    }
    ours.assert_running().unwrap();
    knot.assert_running().unwrap();
    nsd.assert_running().unwrap();

    let mut summary = format!(
        "DNS differential, config/{example}.yml ({} zones)\n",
        origins.len()
    );
    for (reference, tally) in &tallies {
        writeln!(
            summary,
            "  vs {}: {} queries sent, {} identical, {} with the same records in every section \
             ({} with a non-empty answer), {} with accepted differences only, {} with \
             unexpected differences",
            reference.name(),
            tally.sent,
            tally.identical,
            tally.same_sections,
            tally.same_answers,
            tally.accepted_queries,
            tally.unexpected_queries,
        )
        .unwrap();
    }
    writeln!(summary, "  queries by kind: {by_kind:?}").unwrap();
    for a in ACCEPTED {
        for reference in a.against {
            let n = tallies
                .get(reference)
                .and_then(|t| t.accepted.get(&(a.kind, *reference)))
                .copied()
                .unwrap_or(0);
            writeln!(
                summary,
                "  accepted vs {:<4} {:<30} {n:>4}  ({})",
                reference.name(),
                a.kind,
                a.rfc
            )
            .unwrap();
        }
    }
    // Straight to fd 2 so the summary shows even when libtest captures the output.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{summary}\n").as_bytes());
    let rejected: Vec<&String> = tallies.values().flat_map(|t| &t.rejected).collect();
    for (reference, tally) in &tallies {
        assert!(
            tally.sent >= 200,
            "only {} queries to {}",
            tally.sent,
            reference.name()
        );
    }
    assert!(
        rejected.is_empty(),
        "{summary}unexpected differences (fix appliance/src/dns or document and allow them):\n{}",
        rejected
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn large_example_matches_knot_and_nsd() {
    if !require_root() || !require_tools(&["knotd", "nsd"]) {
        return;
    }
    differential("dfl", "large", |text| {
        let from = "recursion_allowed: [10.20.0.0/16, 127.0.0.1]";
        assert!(
            text.contains(from),
            "config/large.yml changed: update this test"
        );
        assert!(
            !text.contains("records:"),
            "config/large.yml has records: update this test"
        );
        text.replace(
            from,
            &format!(
                "recursion_allowed: [10.20.0.0/16, 127.0.0.1, {ALLOWED_CLIENT}]\n  \
                 rate_limit: {{ responses_per_second: 0 }}\n{}",
                extra_records("11.17.20.10.in-addr.arpa.").trim_end()
            ),
        )
    });
}

#[test]
fn dual_stack_example_matches_knot_and_nsd() {
    if !require_root() || !require_tools(&["knotd", "nsd"]) {
        return;
    }
    differential("dfd", "dual-stack", |text| {
        assert!(
            !text.contains("\ndns:"),
            "config/dual-stack.yml changed: update this test"
        );
        text + &format!(
            "dns:\n  recursion_allowed: [172.16.10.0/24, \"fd00:10::/64\", 127.0.0.1, \
             {ALLOWED_CLIENT}]\n  rate_limit: {{ responses_per_second: 0 }}\n{}",
            extra_records("9.10.16.172.in-addr.arpa.")
        )
    });
}
