//! The views of config/hosts/two-labs.yml and one-subnet.yml: what each service instance serves,
//! and DHCP on a shared segment answering each client as its own cluster.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};

use super::*;
use crate::config::{InstallCheck, Target};
use crate::dhcp::leases::Leases;
use crate::dhcp::reply::{State, handle};
use crate::plan::DhcpPlan;
use crate::vocabulary::MacAddr;

fn views(file: &str) -> HostViews {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config/hosts")
        .join(file);
    let Ok(Target::Host(host)) = crate::config::load_any(&path, InstallCheck::Skip) else {
        panic!("config/hosts/{file} does not load as a host");
    };
    HostViews::derive(&host, 1, None).expect("a checked host")
}

fn mac(s: &str) -> MacAddr {
    s.parse().unwrap()
}

#[test]
fn dns_answers_every_zone_on_every_clusters_address() {
    let v = views("two-labs.yml");
    let dns: Vec<String> = v.dns.listen.dns.iter().map(|a| a.to_string()).collect();
    assert_eq!(dns, ["10.0.0.1:53", "10.0.20.1:53"]);
    let origins: Vec<&str> = v.dns.zones.iter().map(|z| z.origin.as_str()).collect();
    assert_eq!(
        origins,
        [
            "okd.lab.example.com.",
            "test.lab.example.com.",
            "0.0.10.in-addr.arpa.",
            "20.0.10.in-addr.arpa."
        ]
    );
    // DNS serves nothing else.
    let l = &v.dns.listen;
    assert!(l.dhcp.is_empty() && l.tftp.is_empty() && l.http.is_empty() && l.api.is_empty());
    // Both subnets may recurse.
    for net in ["10.0.0.0/24", "10.0.20.0/24"] {
        let net: IpNet = net.parse().unwrap();
        assert!(
            v.dns.resolver.recursion_allowed.contains(&net),
            "{net}: {:?}",
            v.dns.resolver.recursion_allowed
        );
    }
}

#[test]
fn each_cluster_serves_its_own_http_and_frontends_and_keeps_its_state_apart() {
    let v = views("two-labs.yml");
    let ids: Vec<&str> = v.clusters.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["okd", "test"]);
    for ((id, plan), ip) in v.clusters.iter().zip(["10.0.0.1", "10.0.20.1"]) {
        assert_eq!(
            plan.state_dir,
            Path::new("/var/lib/okd-appliance/clusters").join(id)
        );
        let http: Vec<String> = plan
            .listen
            .http
            .iter()
            .map(|a| a.ip().to_string())
            .collect();
        assert_eq!(http, [ip], "{id}");
        assert!(plan.listen.api.iter().all(|a| a.ip().to_string() == ip));
        let l = &plan.listen;
        assert!(
            l.dns.is_empty() && l.dhcp.is_empty() && l.tftp.is_empty(),
            "{id}"
        );
        assert!(plan.zones.is_empty(), "only DNS has zones");
    }
    let tftp: Vec<String> = v.tftp.listen.tftp.iter().map(|a| a.to_string()).collect();
    assert_eq!(tftp, ["10.0.0.1:69", "10.0.20.1:69"]);
}

#[test]
fn a_segment_per_interface_and_a_shared_segment_answers_each_mac_for_its_cluster() {
    let v = views("two-labs.yml");
    let segments: Vec<(Option<&str>, &Path)> = v
        .dhcp
        .iter()
        .map(|p| (p.interface.as_deref(), p.state_dir.as_path()))
        .collect();
    assert_eq!(
        segments,
        [
            (
                Some("ens19"),
                Path::new("/var/lib/okd-appliance/dhcp/ens19")
            ),
            (
                Some("ens19.20"),
                Path::new("/var/lib/okd-appliance/dhcp/ens19.20")
            ),
        ]
    );
    assert!(v.dhcp.iter().all(|p| p.dhcp.others.is_empty()));

    let v = views("one-subnet.yml");
    let [segment] = v.dhcp.as_slice() else {
        panic!("one interface, one segment: {:?}", v.dhcp.len());
    };
    // okd has the pool: it answers strangers; ci's reservations ride along.
    assert_eq!(
        segment.dhcp.server_id,
        "10.0.0.1".parse::<std::net::Ipv4Addr>().unwrap()
    );
    assert!(segment.dhcp.pool.is_some());
    assert_eq!(segment.dhcp.others.len(), 1);
    let ci = segment.dhcp.for_mac(mac("52:54:00:00:21:02"));
    assert_eq!(ci.server_id.to_string(), "10.0.0.21");
    assert_eq!(
        ci.dns_servers,
        ["10.0.0.21".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert_eq!(ci.domain_name, "ci.lab.example.com");
    let okd = segment.dhcp.for_mac(mac("52:54:00:00:00:02"));
    assert_eq!(okd.domain_name, "okd.lab.example.com");
    let stranger = segment.dhcp.for_mac(mac("52:54:00:99:99:99"));
    assert_eq!(stranger.server_id.to_string(), "10.0.0.1");
    // The shared reverse zone once, with both clusters' PTRs.
    let reverse: Vec<&str> = v
        .dns
        .zones
        .iter()
        .filter(|z| z.network.is_some())
        .map(|z| z.origin.as_str())
        .collect();
    assert_eq!(reverse, ["0.0.10.in-addr.arpa."]);
}

#[test]
fn a_zone_transfer_is_allowed_only_to_clients_every_cluster_allows() {
    let net = |s: &str| s.parse::<IpNet>().unwrap();
    let a = [net("10.0.0.0/16"), net("192.0.2.0/24")];
    let b = [net("10.0.1.0/24"), net("10.0.0.0/24")];
    // A's /16 is wider than anything B allows; B's two /24s are inside A's /16.
    assert_eq!(
        everyones(&[&b, &a]),
        [net("10.0.1.0/24"), net("10.0.0.0/24")]
    );
    assert_eq!(everyones(&[&a, &b]), Vec::<IpNet>::new());
    assert_eq!(everyones(&[&a]), a);
    assert_eq!(everyones(&[]), Vec::<IpNet>::new());
}

// DHCP on config/hosts/one-subnet.yml's segment: okd (10.0.0.1, with the pool) and ci
// (10.0.0.21).

/// config/hosts/one-subnet.yml's segment: okd (10.0.0.1, with the pool) and ci (10.0.0.21).
fn segment() -> DhcpPlan {
    views("one-subnet.yml").dhcp[0].dhcp.clone()
}

const CI_MASTER: [u8; 6] = [0x52, 0x54, 0, 0, 0x21, 2];
const OKD_MASTER: [u8; 6] = [0x52, 0x54, 0, 0, 0, 2];
const STRANGER: [u8; 6] = [0x52, 0x54, 0, 0x99, 0, 1];

fn message(mac: [u8; 6], kind: MessageType, opts: Vec<DhcpOption>) -> Message {
    let z = Ipv4Addr::UNSPECIFIED;
    let mut m = Message::new_with_id(7, z, z, z, z, &mac);
    m.opts_mut().insert(DhcpOption::MessageType(kind));
    for o in opts {
        m.opts_mut().insert(o);
    }
    m
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

#[test]
fn a_client_of_each_cluster_gets_its_own_clusters_answer() {
    let plan = segment();
    let mut state = State::new(Leases::in_memory());
    let offer = handle(
        &message(CI_MASTER, MessageType::Discover, vec![]),
        &plan,
        &mut state,
        10,
    )
    .unwrap()
    .message;
    assert_eq!(offer.yiaddr(), ip("10.0.0.22"));
    let o = |code| offer.opts().get(code).cloned();
    assert_eq!(
        o(OptionCode::ServerIdentifier),
        Some(DhcpOption::ServerIdentifier(ip("10.0.0.21")))
    );
    assert_eq!(
        o(OptionCode::DomainNameServer),
        Some(DhcpOption::DomainNameServer(vec![ip("10.0.0.21")]))
    );
    assert_eq!(
        o(OptionCode::DomainName),
        Some(DhcpOption::DomainName("ci.lab.example.com".into()))
    );
    // The REQUEST for ci's offer is acknowledged as ci.
    let req = message(
        CI_MASTER,
        MessageType::Request,
        vec![
            DhcpOption::ServerIdentifier(ip("10.0.0.21")),
            DhcpOption::RequestedIpAddress(ip("10.0.0.22")),
        ],
    );
    let ack = handle(&req, &plan, &mut state, 11).unwrap();
    assert_eq!(ack.message.opts().msg_type(), Some(MessageType::Ack));
    assert_eq!(ack.acked.unwrap().node.as_deref(), Some("master-0"));

    // okd's node, on the same socket, is okd's.
    let offer = handle(
        &message(OKD_MASTER, MessageType::Discover, vec![]),
        &plan,
        &mut state,
        12,
    )
    .unwrap()
    .message;
    assert_eq!(offer.yiaddr(), ip("10.0.0.2"));
    assert_eq!(
        offer.opts().get(OptionCode::ServerIdentifier),
        Some(&DhcpOption::ServerIdentifier(ip("10.0.0.1")))
    );

    // A stranger gets okd's pool (okd has it), from okd.
    let offer = handle(
        &message(STRANGER, MessageType::Discover, vec![]),
        &plan,
        &mut state,
        13,
    )
    .unwrap()
    .message;
    let pool = plan.pool.unwrap();
    assert!(pool.contains(offer.yiaddr()), "{}", offer.yiaddr());
    assert_eq!(
        offer.opts().get(OptionCode::ServerIdentifier),
        Some(&DhcpOption::ServerIdentifier(ip("10.0.0.1")))
    );
}

#[test]
fn a_request_naming_the_other_clusters_server_is_not_answered() {
    let plan = segment();
    let mut state = State::new(Leases::in_memory());
    // A client of okd that took "ci's offer" (there was none): another server's business.
    for (mac, server, wanted) in [
        (OKD_MASTER, "10.0.0.21", "10.0.0.2"),
        (CI_MASTER, "10.0.0.1", "10.0.0.22"),
    ] {
        let req = message(
            mac,
            MessageType::Request,
            vec![
                DhcpOption::ServerIdentifier(ip(server)),
                DhcpOption::RequestedIpAddress(ip(wanted)),
            ],
        );
        assert!(handle(&req, &plan, &mut state, 5).is_none(), "{server}");
    }
}

#[test]
fn a_node_of_a_cluster_without_dhcp_on_the_segment_is_not_answered_from_the_pool() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/hosts/one-subnet.yml");
    let Ok(Target::Host(mut host)) = crate::config::load_any(&path, InstallCheck::Skip) else {
        panic!("one-subnet.yml loads as a host");
    };
    // ci leaves its DHCP to another server.
    host.clusters[1].config.listen.dhcp.clear();
    let v = HostViews::derive(&host, 1, None).unwrap();
    let [segment] = v.dhcp.as_slice() else {
        panic!("one segment");
    };
    assert!(segment.dhcp.others.is_empty());
    let mut state = State::new(Leases::in_memory());
    let discover = message(CI_MASTER, MessageType::Discover, vec![]);
    assert!(
        handle(&discover, &segment.dhcp, &mut state, 1).is_none(),
        "ci's node got an answer from okd's pool"
    );
    // okd's own nodes and strangers are answered as before.
    let okd = handle(
        &message(OKD_MASTER, MessageType::Discover, vec![]),
        &segment.dhcp,
        &mut state,
        2,
    );
    assert_eq!(okd.unwrap().message.yiaddr(), ip("10.0.0.2"));
    assert!(
        handle(
            &message(STRANGER, MessageType::Discover, vec![]),
            &segment.dhcp,
            &mut state,
            3
        )
        .is_some()
    );
}

#[test]
fn a_node_of_another_segment_gets_nothing_from_this_ones_pool() {
    let v = views("two-labs.yml");
    // okd's segment (ens19) has the pool; test's node there is never answered.
    let okd = &v.dhcp[0].dhcp;
    assert!(okd.pool.is_some());
    let test_master = mac("52:54:00:20:00:02");
    assert!(okd.silent.contains(&test_master), "{:?}", okd.silent);
    assert!(!okd.silent.contains(&mac("52:54:00:00:00:02")));
    let mut state = State::new(Leases::in_memory());
    let discover = message(test_master.0, MessageType::Discover, vec![]);
    assert!(handle(&discover, okd, &mut state, 1).is_none());
    // DNS and TFTP carry no interface: removing the first cluster changes none of theirs.
    assert_eq!(v.dns.interface, None);
    assert_eq!(v.tftp.interface, None);
}

#[test]
fn a_segments_dhcp_messages_are_counted_under_the_cluster_that_answers_them() {
    let segment = segment();
    let counted = |m: [u8; 6]| segment.counted_as(MacAddr(m)).map(|c| c.to_string());
    assert_eq!(counted(OKD_MASTER).as_deref(), Some("okd"));
    assert_eq!(counted(CI_MASTER).as_deref(), Some("ci"));
    // A stranger gets the pool's cluster's answer.
    assert_eq!(counted(STRANGER).as_deref(), Some("okd"));
    // Another segment's node is answered by none: counted under none.
    let v = views("two-labs.yml");
    assert_eq!(v.dhcp[0].dhcp.counted_as(mac("52:54:00:20:00:02")), None);
}

#[test]
fn a_shared_frontend_is_the_routers_and_every_clusters_names_point_there() {
    let v = views("shared-frontend.yml");
    let router = v.router.as_ref().expect("a router view");
    let l = &router.listen;
    let at = |addrs: &[SocketAddr]| addrs.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(at(&l.api), ["192.168.1.10:6443"]);
    assert_eq!(at(&l.machine_config), ["192.168.1.10:22623"]);
    assert_eq!(at(&l.ingress_https), ["192.168.1.10:443"]);
    assert_eq!(at(&l.ingress_http), ["192.168.1.10:80"]);
    assert!(l.dns.is_empty() && l.dhcp.is_empty() && l.tftp.is_empty() && l.http.is_empty());
    assert_eq!(
        router.lb.sharing,
        Sharing::Router {
            default_cluster: Some("okd".to_owned())
        }
    );
    // The clusters listen on none of their own frontends: the router does; they check.
    for (id, plan) in &v.clusters {
        let l = &plan.listen;
        assert!(l.api.is_empty() && l.machine_config.is_empty(), "{id}");
        assert!(
            l.ingress_https.is_empty() && l.ingress_http.is_empty(),
            "{id}"
        );
        assert!(!l.http.is_empty(), "{id}: the boot server stays");
        assert_eq!(plan.lb.sharing, Sharing::Routed, "{id}");
        assert!(plan.lb.frontends.iter().all(|f| !f.backends.is_empty()));
        // `cluster up` asks the router, which the client's server name routes.
        assert_eq!(
            plan.orchestration.api_url, "https://192.168.1.10:6443",
            "{id}"
        );
    }
    // Every cluster's api, api-int and *.apps resolve to the shared address; the appliance
    // address is only its name server's, in both directions.
    let shared: IpAddr = "192.168.1.10".parse().unwrap();
    for zone in &v.dns.zones {
        for r in &zone.records {
            let label = r.name.split('.').next().unwrap_or_default();
            match &r.data {
                crate::records::RecordData::A(ip) if ["api", "api-int", "*"].contains(&label) => {
                    assert_eq!(IpAddr::V4(*ip), shared, "{}", r.name);
                }
                crate::records::RecordData::A(ip) => assert_ne!(IpAddr::V4(*ip), shared),
                crate::records::RecordData::Ptr(name) => {
                    assert!(!name.starts_with("api"), "{} PTR {name}", r.name);
                }
                _ => {}
            }
        }
    }
    let zone = |origin: &str| v.dns.zones.iter().find(|z| z.origin == origin).unwrap();
    let ptr = zone("0.0.10.in-addr.arpa.")
        .records
        .iter()
        .find(|r| r.name == "1.0.0.10.in-addr.arpa.")
        .expect("the appliance's PTR");
    assert_eq!(
        ptr.data,
        crate::records::RecordData::Ptr("ns1.okd.lab.example.com.".to_owned())
    );
    // Without a shared frontend there is no router.
    assert!(views("two-labs.yml").router.is_none());
}
