//! The responder against the lab plan, every reply read back with hickory-proto.

use std::path::Path;
use std::str::FromStr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};

use super::authority::{Authority, Outcome};
use super::respond::{Action, Context, Transport, respond};
use super::wire::MAX_NAME;
use crate::config;
use crate::plan::Plan;

pub(super) const LAB: &str = r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network:
  subnet: 10.0.0.0/24
  gateway: 10.0.0.1
  appliance_ip: 10.0.0.1
  ipv6: { subnet: "fd00:10::/64", appliance_ip: "fd00:10::1" }
  upstream_dns: [192.0.2.53]
nodes:
  - { name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.0.0.7 }
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2, ipv6: "fd00:10::2" }
  - { name: master-1, role: master, mac: "52:54:00:00:00:03", ip: 10.0.0.3 }
  - { name: master-2, role: master, mac: "52:54:00:00:00:04", ip: 10.0.0.4 }
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.0.0.5 }
install: { ignition_dir: ./i, artifacts_dir: ./a }
dns:
  legacy_etcd: true
  records:
    - { name: registry, type: A, value: 10.0.0.1 }
    - { name: nfs, type: CNAME, value: registry }
    - { name: dangling, type: CNAME, value: nothing-here }
    - { name: outside, type: CNAME, value: www.example.org. }
    - { name: mail, type: MX, value: 10 registry }
    - { name: "*.wild", type: TXT, value: "wildcard text" }
"#;

fn authority(extra: &str) -> Authority {
    let loaded = config::parse(
        &format!("{LAB}{extra}"),
        "lab.yml",
        Path::new("."),
        config::InstallCheck::Skip,
    )
    .unwrap_or_else(|e| panic!("{}", e.render(config::RenderStyle::Plain)));
    Authority::from_plan(&Plan::derive(&loaded.config, 7))
}

struct Ask<'a> {
    authority: &'a Authority,
    transport: Transport,
    recursion: bool,
    transfer_allowed: bool,
    edns: Option<u16>,
}

impl<'a> Ask<'a> {
    fn new(authority: &'a Authority) -> Self {
        Ask {
            authority,
            transport: Transport::Udp,
            recursion: false,
            transfer_allowed: false,
            edns: None,
        }
    }

    fn packet(&self, name: &str, qtype: RecordType) -> Vec<u8> {
        let mut m = Message::new(4242, MessageType::Query, OpCode::Query);
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_str(name).unwrap(), qtype));
        if let Some(size) = self.edns {
            let mut e = Edns::new();
            e.set_max_payload(size);
            m.set_edns(e);
        }
        m.to_vec().unwrap()
    }

    fn raw(&self, packet: &[u8]) -> (Action, Option<Message>) {
        let ctx = Context {
            authority: self.authority,
            transport: self.transport,
            recursion: self.recursion,
            transfer_allowed: self.transfer_allowed,
        };
        let mut lower = [0u8; MAX_NAME];
        let mut buf = Vec::new();
        let action = respond(packet, &ctx, &mut lower, &mut buf);
        let message = match action {
            Action::Reply { len, .. } => {
                let m = Message::from_vec(&buf[..len]).expect("every reply parses");
                assert_eq!(m.metadata.message_type, MessageType::Response);
                Some(m)
            }
            _ => None,
        };
        (action, message)
    }

    fn reply(&self, name: &str, qtype: RecordType) -> Message {
        let packet = self.packet(name, qtype);
        let (_, m) = self.raw(&packet);
        let m = m.unwrap_or_else(|| panic!("no reply for {name} {qtype}"));
        assert_eq!(m.metadata.id, 4242);
        assert_eq!(
            m.queries[0].name().to_string(),
            Name::from_str(name).unwrap().to_string(),
            "question echoed as sent"
        );
        m
    }
}

fn answers(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .map(|r| format!("{} {} {}", r.name, r.record_type(), r.data))
        .collect()
}

#[test]
fn api_and_api_int_resolve_to_the_appliance_with_the_query_case() {
    let auth = authority("");
    let ask = Ask::new(&auth);
    let m = ask.reply("API.Okd.LAB.example.com.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.metadata.authoritative);
    assert_eq!(answers(&m), ["api.okd.lab.example.com. A 10.0.0.1"]);
    // The owner is a pointer to the question, which keeps the query's case (hickory lowercases
    // names it decodes through pointers, so check the bytes).
    let packet = ask.packet("API.Okd.LAB.example.com.", RecordType::A);
    let (action, _) = ask.raw(&packet);
    let Action::Reply { len, .. } = action else {
        panic!("{action:?}")
    };
    let mut buf = Vec::new();
    let mut lower = [0u8; MAX_NAME];
    let ctx = Context {
        authority: &auth,
        transport: Transport::Udp,
        recursion: false,
        transfer_allowed: false,
    };
    respond(&packet, &ctx, &mut lower, &mut buf);
    let question_end = 12 + "API.Okd.LAB.example.com.".len() + 1 + 4;
    assert_eq!(&buf[12..question_end], &packet[12..question_end]);
    assert_eq!(&buf[question_end..question_end + 2], &[0xc0, 0x0c]);
    assert_eq!(len, buf.len());
    let m = ask.reply("api-int.okd.lab.example.com.", RecordType::AAAA);
    assert_eq!(
        answers(&m),
        ["api-int.okd.lab.example.com. AAAA fd00:10::1"]
    );
    assert!(
        m.authorities.is_empty(),
        "minimal responses: no NS in authority"
    );
}

#[test]
fn wildcard_answers_any_depth_below_apps_but_never_an_existing_name() {
    let auth = authority("");
    let ask = Ask::new(&auth);
    let m = ask.reply(
        "console-openshift-console.apps.okd.lab.example.com.",
        RecordType::A,
    );
    assert_eq!(
        answers(&m),
        ["console-openshift-console.apps.okd.lab.example.com. A 10.0.0.1"]
    );
    let m = ask.reply("a.b.apps.okd.lab.example.com.", RecordType::A);
    assert_eq!(answers(&m), ["a.b.apps.okd.lab.example.com. A 10.0.0.1"]);
    // apps itself is an empty non-terminal: NODATA, not NXDOMAIN, and not the wildcard.
    let m = ask.reply("apps.okd.lab.example.com.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.answers.is_empty());
    // A name below an existing node is not covered by a wildcard elsewhere.
    let m = ask.reply("x.master-0.okd.lab.example.com.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    // The wildcard matches names, not types: AAAA at *.apps exists (dual stack), TXT does not.
    let m = ask.reply("x.apps.okd.lab.example.com.", RecordType::TXT);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.answers.is_empty());
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
}

#[test]
fn nxdomain_and_nodata_carry_the_soa_with_the_negative_ttl() {
    let auth = authority("");
    let ask = Ask::new(&auth);
    for (name, qtype, rcode) in [
        (
            "nothing.okd.lab.example.com.",
            RecordType::A,
            ResponseCode::NXDomain,
        ),
        (
            "worker-0.okd.lab.example.com.",
            RecordType::AAAA,
            ResponseCode::NoError,
        ),
        (
            "99.0.0.10.in-addr.arpa.",
            RecordType::PTR,
            ResponseCode::NXDomain,
        ),
    ] {
        let m = ask.reply(name, qtype);
        assert_eq!(m.metadata.response_code, rcode, "{name}");
        assert!(m.metadata.authoritative);
        assert!(m.answers.is_empty());
        assert_eq!(m.authorities.len(), 1);
        let soa = &m.authorities[0];
        assert_eq!(soa.record_type(), RecordType::SOA);
        assert_eq!(soa.ttl, 60, "min(SOA TTL, MINIMUM)");
    }
}

#[test]
fn ptr_records_for_nodes_api_and_ipv6() {
    let auth = authority("");
    let ask = Ask::new(&auth);
    let m = ask.reply("5.0.0.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(
        answers(&m),
        ["5.0.0.10.in-addr.arpa. PTR worker-0.okd.lab.example.com."]
    );
    let m = ask.reply("1.0.0.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(m.answers.len(), 2);
    let m = ask.reply(
        "2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.0.0.0.d.f.ip6.arpa.",
        RecordType::PTR,
    );
    assert_eq!(m.answers.len(), 1);
    assert_eq!(
        m.answers[0].data.to_string(),
        "master-0.okd.lab.example.com."
    );
}

#[test]
fn cnames_are_followed_inside_the_zones() {
    let auth = authority("");
    let ask = Ask::new(&auth);
    let m = ask.reply("nfs.okd.lab.example.com.", RecordType::A);
    assert_eq!(
        answers(&m),
        [
            "nfs.okd.lab.example.com. CNAME registry.okd.lab.example.com.",
            "registry.okd.lab.example.com. A 10.0.0.1"
        ]
    );
    // RFC 6604: a chain ending at a missing name is NXDOMAIN, with the CNAME in the answer.
    let m = ask.reply("dangling.okd.lab.example.com.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(m.answers.len(), 1);
    // Out of our zones: the CNAME alone, the resolver follows it.
    let m = ask.reply("outside.okd.lab.example.com.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert_eq!(
        answers(&m),
        ["outside.okd.lab.example.com. CNAME www.example.org."]
    );
    // Asking for the CNAME itself does not follow it.
    let m = ask.reply("nfs.okd.lab.example.com.", RecordType::CNAME);
    assert_eq!(m.answers.len(), 1);
}

#[test]
fn ns_mx_and_srv_answers_carry_target_addresses() {
    let auth = authority("");
    let ask = Ask::new(&auth);
    let m = ask.reply("okd.lab.example.com.", RecordType::NS);
    assert_eq!(
        answers(&m),
        ["okd.lab.example.com. NS ns1.okd.lab.example.com."]
    );
    assert_eq!(m.additionals.len(), 2, "A and AAAA of ns1");
    let m = ask.reply("mail.okd.lab.example.com.", RecordType::MX);
    assert_eq!(m.additionals.len(), 1);
    let m = ask.reply(
        "_etcd-server-ssl._tcp.okd.lab.example.com.",
        RecordType::SRV,
    );
    assert_eq!(m.answers.len(), 3);
    assert_eq!(m.additionals.len(), 3, "etcd-0..2 addresses");
    let targets: Vec<String> = m
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::SRV(srv) => format!("{} {}", srv.port, srv.target),
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(
        targets.contains(&"2380 etcd-1.okd.lab.example.com.".to_owned()),
        "{targets:?}"
    );
    let m = ask.reply("etcd-1.okd.lab.example.com.", RecordType::A);
    assert_eq!(answers(&m), ["etcd-1.okd.lab.example.com. A 10.0.0.3"]);
}

#[test]
fn any_gets_a_minimal_hinfo_answer() {
    let auth = authority("");
    let m = Ask::new(&auth).reply("api.okd.lab.example.com.", RecordType::ANY);
    assert_eq!(m.answers.len(), 1);
    assert_eq!(m.answers[0].record_type(), RecordType::HINFO);
    let m = Ask::new(&auth).reply("nothing.okd.lab.example.com.", RecordType::ANY);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
}

#[test]
fn other_names_are_refused_or_forwarded() {
    let auth = authority("");
    let mut ask = Ask::new(&auth);
    let m = ask.reply("www.example.org.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
    assert!(!m.metadata.authoritative);
    // Above the zone is not ours either.
    let m = ask.reply("lab.example.com.", RecordType::SOA);
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
    ask.recursion = true;
    let packet = ask.packet("www.example.org.", RecordType::A);
    assert!(matches!(ask.raw(&packet).0, Action::Forward(_)));
    // Cluster names never leave the appliance.
    let m = ask.reply("nothing.okd.lab.example.com.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert!(m.metadata.recursion_available);
}

#[test]
fn edns_is_echoed_and_unknown_versions_get_badvers() {
    let auth = authority("");
    let mut ask = Ask::new(&auth);
    ask.edns = Some(4096);
    let m = ask.reply("api.okd.lab.example.com.", RecordType::A);
    let edns = m.edns.as_ref().expect("OPT in the reply");
    assert_eq!(edns.max_payload(), 1232);
    let mut packet = ask.packet("api.okd.lab.example.com.", RecordType::A);
    // The OPT's TTL is the last RR's bytes -6..-2 from the end: ext-rcode, version, flags.
    let n = packet.len();
    packet[n - 5] = 1;
    let (_, m) = ask.raw(&packet);
    let m = m.unwrap();
    // 16 is BADVERS in an OPT context (hickory names the shared code BADSIG).
    assert_eq!(u16::from(m.metadata.response_code), 16);
    assert!(m.answers.is_empty());
}

#[test]
fn large_answers_truncate_over_udp_and_fit_over_tcp() {
    let many: String = (1..=60)
        .map(|i| {
            format!(
                "    - {{ name: big, type: A, value: 10.0.0.{} }}\n",
                i + 100
            )
        })
        .collect();
    let auth = authority(&many);
    let mut ask = Ask::new(&auth);
    let m = ask.reply("big.okd.lab.example.com.", RecordType::A);
    assert!(m.metadata.truncation);
    assert!(m.answers.is_empty());
    ask.edns = Some(1232);
    let m = ask.reply("big.okd.lab.example.com.", RecordType::A);
    assert!(!m.metadata.truncation, "60 A records fit in 1232 bytes");
    assert_eq!(m.answers.len(), 60);
    ask.edns = None;
    ask.transport = Transport::Tcp;
    let m = ask.reply("big.okd.lab.example.com.", RecordType::A);
    assert!(!m.metadata.truncation);
    assert_eq!(m.answers.len(), 60);
}

/// As Knot and NSD answer (found by the differential run): AXFR over UDP NOTIMP, a name that is
/// not a zone apex NOTAUTH, policy REFUSED.
#[test]
fn transfers_are_refused_unless_allowed() {
    let auth = authority("");
    let mut ask = Ask::new(&auth);
    ask.transport = Transport::Tcp;
    let m = ask.reply("okd.lab.example.com.", RecordType::AXFR);
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
    for name in [
        "api.okd.lab.example.com.",
        "nothing.okd.lab.example.com.",
        "example.org.",
    ] {
        let m = ask.reply(name, RecordType::AXFR);
        assert_eq!(m.metadata.response_code, ResponseCode::NotAuth, "{name}");
    }
    ask.transfer_allowed = true;
    let packet = ask.packet("okd.lab.example.com.", RecordType::AXFR);
    assert!(matches!(ask.raw(&packet).0, Action::Transfer(_)));
    let m = ask.reply("api.okd.lab.example.com.", RecordType::AXFR);
    assert_eq!(m.metadata.response_code, ResponseCode::NotAuth);
    ask.transport = Transport::Udp;
    for allowed in [true, false] {
        ask.transfer_allowed = allowed;
        for name in ["okd.lab.example.com.", "api.okd.lab.example.com."] {
            let m = ask.reply(name, RecordType::AXFR);
            assert_eq!(m.metadata.response_code, ResponseCode::NotImp, "{name}");
            assert!(!m.metadata.authoritative);
        }
    }
    ask.transfer_allowed = true;
    let m = ask.reply("okd.lab.example.com.", RecordType::IXFR);
    assert_eq!(m.answers[0].record_type(), RecordType::SOA);
    let m = ask.reply("api.okd.lab.example.com.", RecordType::IXFR);
    assert_eq!(m.metadata.response_code, ResponseCode::NotAuth);
}

/// MAILA, MAILB and OPT as QTYPEs are looked up like data (NODATA, NXDOMAIN, CNAMEs followed)
/// and QCLASS * is answered from class IN, authoritatively: as Knot does.
#[test]
fn meta_qtypes_and_qclass_any_are_answered_like_data() {
    let auth = authority("");
    let ask = Ask::new(&auth);
    for qtype in [
        RecordType::Unknown(254),
        RecordType::Unknown(253),
        RecordType::OPT,
    ] {
        let m = ask.reply("api.okd.lab.example.com.", qtype);
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{qtype}");
        assert!(m.metadata.authoritative);
        assert!(m.answers.is_empty());
        assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
        let m = ask.reply("nothing.okd.lab.example.com.", qtype);
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "{qtype}");
        let m = ask.reply("nfs.okd.lab.example.com.", qtype);
        assert_eq!(
            answers(&m),
            ["nfs.okd.lab.example.com. CNAME registry.okd.lab.example.com."],
            "{qtype}"
        );
    }
    let class_any = |name: &str, qtype| {
        let mut m = Message::new(7, MessageType::Query, OpCode::Query);
        let mut q = Query::query(Name::from_str(name).unwrap(), qtype);
        q.set_query_class(DNSClass::ANY);
        m.add_query(q);
        ask.raw(&m.to_vec().unwrap()).1.unwrap()
    };
    let m = class_any("api.okd.lab.example.com.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.metadata.authoritative);
    assert_eq!(answers(&m), ["api.okd.lab.example.com. A 10.0.0.1"]);
    assert_eq!(m.answers[0].dns_class, DNSClass::IN);
    assert_eq!(
        m.queries[0].query_class(),
        DNSClass::ANY,
        "question as sent"
    );
    let m = class_any("nothing.okd.lab.example.com.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(m.authorities.len(), 1);
    let m = class_any("www.example.org.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
}

/// A CNAME loop answers each CNAME once, as Knot and NSD do (it used to repeat the loop up to
/// the chain limit).
#[test]
fn cname_loops_end_at_the_first_repeat() {
    let auth = authority(
        "    - { name: loop1, type: CNAME, value: loop2 }\n    - { name: loop2, type: CNAME, value: loop1 }\n    - { name: self, type: CNAME, value: self }\n    - { name: chain, type: CNAME, value: nfs }\n",
    );
    let ask = Ask::new(&auth);
    let m = ask.reply("loop1.okd.lab.example.com.", RecordType::A);
    assert_eq!(
        answers(&m),
        [
            "loop1.okd.lab.example.com. CNAME loop2.okd.lab.example.com.",
            "loop2.okd.lab.example.com. CNAME loop1.okd.lab.example.com."
        ]
    );
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    let m = ask.reply("self.okd.lab.example.com.", RecordType::A);
    assert_eq!(
        answers(&m),
        ["self.okd.lab.example.com. CNAME self.okd.lab.example.com."]
    );
    // A chain that ends is still followed to its end.
    let m = ask.reply("chain.okd.lab.example.com.", RecordType::A);
    assert_eq!(m.answers.len(), 3, "{:?}", answers(&m));
}

/// The additional section holds addresses from the answer's own zone only (Knot and NSD stay
/// minimal there too): the NS of a reverse zone names ns1 of the forward zone, whose address
/// is not added.
#[test]
fn additional_addresses_come_from_the_answers_zone_only() {
    let auth = authority("");
    let ask = Ask::new(&auth);
    let m = ask.reply("0.0.10.in-addr.arpa.", RecordType::NS);
    assert_eq!(
        answers(&m),
        ["0.0.10.in-addr.arpa. NS ns1.okd.lab.example.com."]
    );
    assert!(m.additionals.is_empty(), "{:?}", m.additionals);
    let m = ask.reply("okd.lab.example.com.", RecordType::NS);
    assert_eq!(m.additionals.len(), 2);
}

/// The answer path allocates nothing: every kind of reply, once the buffers have their size.
#[test]
fn answering_allocates_nothing() {
    let auth = authority(
        "    - { name: loop1, type: CNAME, value: loop2 }\n    - { name: loop2, type: CNAME, value: loop1 }\n",
    );
    let mut ask = Ask::new(&auth);
    ask.edns = Some(1232);
    let mut packets: Vec<Vec<u8>> = [
        ("api.okd.lab.example.com.", RecordType::A),
        ("ApI.oKd.lab.example.com.", RecordType::AAAA),
        ("x.y.apps.okd.lab.example.com.", RecordType::A),
        ("api.okd.lab.example.com.", RecordType::ANY),
        ("loop1.okd.lab.example.com.", RecordType::A),
        ("nfs.okd.lab.example.com.", RecordType::A),
        ("dangling.okd.lab.example.com.", RecordType::A),
        ("nothing.okd.lab.example.com.", RecordType::A),
        ("apps.okd.lab.example.com.", RecordType::TXT),
        ("okd.lab.example.com.", RecordType::NS),
        ("mail.okd.lab.example.com.", RecordType::MX),
        (
            "_etcd-server-ssl._tcp.okd.lab.example.com.",
            RecordType::SRV,
        ),
        ("2.0.0.10.in-addr.arpa.", RecordType::PTR),
        ("api.okd.lab.example.com.", RecordType::Unknown(253)),
        ("okd.lab.example.com.", RecordType::AXFR),
        ("okd.lab.example.com.", RecordType::IXFR),
        ("www.example.org.", RecordType::A),
    ]
    .into_iter()
    .map(|(name, qtype)| ask.packet(name, qtype))
    .collect();
    let mut notify = ask.packet("okd.lab.example.com.", RecordType::SOA);
    notify[2] = (notify[2] & 0x87) | (4 << 3);
    packets.push(notify);
    let ctx = Context {
        authority: &auth,
        transport: Transport::Udp,
        recursion: false,
        transfer_allowed: true,
    };
    let mut lower = [0u8; MAX_NAME];
    let mut buf = Vec::with_capacity(4096);
    for p in &packets {
        let _ = respond(p, &ctx, &mut lower, &mut buf);
    }
    for p in &packets {
        let info = allocation_counter::measure(|| {
            let _ = respond(p, &ctx, &mut lower, &mut buf);
        });
        assert_eq!(
            info.count_total,
            0,
            "{:?} allocated",
            Message::from_vec(p).unwrap().queries
        );
    }
}

#[test]
fn malformed_requests_get_formerr_notimp_or_nothing() {
    let auth = authority("");
    let ask = Ask::new(&auth);
    assert_eq!(ask.raw(&[0u8; 5]).0, Action::Drop);
    let mut response = ask.packet("api.okd.lab.example.com.", RecordType::A);
    response[2] |= 0x80;
    assert_eq!(
        ask.raw(&response).0,
        Action::Drop,
        "never answer a response"
    );
    let mut two = ask.packet("api.okd.lab.example.com.", RecordType::A);
    two[5] = 2;
    assert_eq!(
        ask.raw(&two).1.unwrap().metadata.response_code,
        ResponseCode::FormErr
    );
    let mut notify = ask.packet("okd.lab.example.com.", RecordType::SOA);
    notify[2] = (notify[2] & 0x87) | (4 << 3);
    assert_eq!(
        ask.raw(&notify).1.unwrap().metadata.response_code,
        ResponseCode::NotAuth,
        "NOTIFY: not a secondary for the zone"
    );
    let mut update = ask.packet("okd.lab.example.com.", RecordType::SOA);
    update[2] = (update[2] & 0x87) | (5 << 3);
    assert_eq!(
        ask.raw(&update).1.unwrap().metadata.response_code,
        ResponseCode::NotImp
    );
    let mut short = ask.packet("api.okd.lab.example.com.", RecordType::A);
    short.truncate(short.len() - 2);
    assert_eq!(
        ask.raw(&short).1.unwrap().metadata.response_code,
        ResponseCode::FormErr
    );
    let mut chaos = Message::new(1, MessageType::Query, OpCode::Query);
    let mut q = Query::query(Name::from_str("version.bind.").unwrap(), RecordType::TXT);
    q.set_query_class(DNSClass::CH);
    chaos.add_query(q);
    let (_, m) = ask.raw(&chaos.to_vec().unwrap());
    assert_eq!(m.unwrap().metadata.response_code, ResponseCode::Refused);
}

/// RFC 6891 section 6.1.1: a request with an OPT record gets one back, error replies included
/// (found by the differential test against Knot: NOTIFY and QDCOUNT=0 came back without one).
#[test]
fn error_replies_keep_edns() {
    let auth = authority("");
    let mut ask = Ask::new(&auth);
    ask.edns = Some(1232);
    let mut notify = ask.packet("okd.lab.example.com.", RecordType::SOA);
    notify[2] = (notify[2] & 0x87) | (4 << 3);
    let m = ask.raw(&notify).1.unwrap();
    assert_eq!(m.metadata.response_code, ResponseCode::NotAuth);
    assert_eq!(m.metadata.op_code, OpCode::Notify);
    assert_eq!(m.queries.len(), 1, "the question is echoed");
    assert_eq!(m.edns.as_ref().map(Edns::max_payload), Some(1232));

    // No question at all, then two: FORMERR, with the OPT record found after them.
    let packet = ask.packet("api.okd.lab.example.com.", RecordType::A);
    let question_end = 12 + "api.okd.lab.example.com.".len() + 1 + 4;
    let mut none = packet[..12].to_vec();
    none[5] = 0;
    none.extend_from_slice(&packet[question_end..]);
    let mut two = packet[..question_end].to_vec();
    two[5] = 2;
    two.extend_from_slice(&packet[12..]);
    for (what, request) in [("QDCOUNT=0", none), ("QDCOUNT=2", two)] {
        let m = ask.raw(&request).1.unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::FormErr, "{what}");
        assert!(m.queries.is_empty(), "{what}");
        assert!(m.edns.is_some(), "{what}: no OPT record");
    }

    // Without EDNS in the request, none in the reply.
    ask.edns = None;
    let mut notify = ask.packet("okd.lab.example.com.", RecordType::SOA);
    notify[2] = (notify[2] & 0x87) | (4 << 3);
    assert!(ask.raw(&notify).1.unwrap().edns.is_none());
}

#[test]
fn outcomes_classify_replies_for_rate_limiting() {
    let auth = authority("");
    let ask = Ask::new(&auth);
    let outcome = |name: &str, t| match ask.raw(&ask.packet(name, t)).0 {
        Action::Reply { outcome, .. } => outcome,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        outcome("api.okd.lab.example.com.", RecordType::A),
        Outcome::Answered
    );
    assert_eq!(
        outcome("nope.okd.lab.example.com.", RecordType::A),
        Outcome::NxDomain
    );
    assert_eq!(
        outcome("api.okd.lab.example.com.", RecordType::TXT),
        Outcome::NoData
    );
}

/// A /25 is served from its enclosing /24 zone (zone cuts fall on octets), but only its own
/// addresses are the appliance's: the other half's names are forwarded (or refused) like any
/// name outside the zones, never answered NXDOMAIN with authority.
#[test]
fn a_subnet_narrower_than_its_zone_answers_only_for_its_addresses() {
    let yaml = r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.0.0.128/25, appliance_ip: 10.0.0.129, upstream_dns: [192.0.2.53] }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.130 }
install: { ignition_dir: ./i, artifacts_dir: ./a }
"#;
    let loaded = config::parse(yaml, "half.yml", Path::new("."), config::InstallCheck::Skip)
        .unwrap_or_else(|e| panic!("{}", e.render(config::RenderStyle::Plain)));
    let auth = Authority::from_plan(&Plan::derive(&loaded.config, 7));
    let mut ask = Ask::new(&auth);
    let m = ask.reply("130.0.0.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(
        answers(&m),
        ["130.0.0.10.in-addr.arpa. PTR master-0.okd.lab.example.com."]
    );
    assert!(m.metadata.authoritative);
    // Inside the subnet without a record: NXDOMAIN, with authority.
    let m = ask.reply("200.0.0.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    // The apex is the zone's, and so is a label that names no address.
    let m = ask.reply("0.0.10.in-addr.arpa.", RecordType::SOA);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert_eq!(m.answers.len(), 1);
    let m = ask.reply("_x.0.0.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    // The other half, and names below its addresses: someone else's.
    for name in [
        "5.0.0.10.in-addr.arpa.",
        "127.0.0.10.in-addr.arpa.",
        "x.5.0.0.10.in-addr.arpa.",
    ] {
        let m = ask.reply(name, RecordType::PTR);
        assert_eq!(m.metadata.response_code, ResponseCode::Refused, "{name}");
        assert!(!m.metadata.authoritative, "{name}");
    }
    ask.recursion = true;
    let packet = ask.packet("5.0.0.10.in-addr.arpa.", RecordType::PTR);
    assert!(matches!(ask.raw(&packet).0, Action::Forward(_)));
    // An octet with a leading zero is not an address's name: the zone's, NXDOMAIN.
    ask.recursion = false;
    let m = ask.reply("05.0.0.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
}
