//! DHCP decisions against a lab plan: reservations, pool, states, PXE flavours, relays.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use dhcproto::v4::{Architecture, DhcpOption, DhcpOptions, Message, MessageType, OptionCode};
use dhcproto::{Decodable, Decoder, Encodable};

use super::leases::Leases;
use super::reply::{BIOS_BOOT_FILE, State, UEFI_BOOT_FILE, handle};
use crate::config;
use crate::plan::{DhcpPlan, Plan};

mod hostile;
mod overload;

pub(super) fn plan(pool: &str) -> DhcpPlan {
    let text = format!(
        r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network:
  interface: eth0
  subnet: 10.0.0.0/24
  gateway: 10.0.0.254
  appliance_ip: 10.0.0.1
  ntp: [10.0.0.1]
  mtu: 9000
  lease_time: 1h
{pool}
nodes:
  - {{ name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }}
install: {{ ignition_dir: ./i, artifacts_dir: ./a }}
"#
    );
    let loaded = config::parse(&text, "t.yml", Path::new("."), config::InstallCheck::Skip)
        .unwrap_or_else(|e| panic!("{}", e.render(config::RenderStyle::Plain)));
    Plan::derive(&loaded.config, 1).dhcp
}

pub(super) const MASTER: [u8; 6] = [0x52, 0x54, 0, 0, 0, 2];

pub(super) fn request(mac: [u8; 6], kind: MessageType, opts: Vec<DhcpOption>) -> Message {
    let mut m = Message::new_with_id(
        0x1234,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        &mac,
    );
    m.opts_mut().insert(DhcpOption::MessageType(kind));
    for o in opts {
        m.opts_mut().insert(o);
    }
    m
}

fn opt(m: &Message, code: OptionCode) -> Option<&DhcpOption> {
    m.opts().get(code)
}

#[test]
fn a_node_gets_its_reservation_name_and_options() {
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let offer = handle(
        &request(MASTER, MessageType::Discover, vec![]),
        &plan,
        &mut state,
        1000,
    )
    .unwrap();
    assert_eq!(offer.message.opts().msg_type(), Some(MessageType::Offer));
    assert_eq!(offer.message.yiaddr(), Ipv4Addr::new(10, 0, 0, 2));
    assert_eq!(offer.to, SocketAddrV4::new(Ipv4Addr::BROADCAST, 68));
    assert!(offer.acked.is_none());
    let m = &offer.message;
    assert_eq!(
        opt(m, OptionCode::Hostname),
        Some(&DhcpOption::Hostname("master-0".into()))
    );
    assert_eq!(
        opt(m, OptionCode::DomainName),
        Some(&DhcpOption::DomainName("okd.lab.example.com".into()))
    );
    assert_eq!(
        opt(m, OptionCode::Router),
        Some(&DhcpOption::Router(vec![Ipv4Addr::new(10, 0, 0, 254)]))
    );
    assert_eq!(
        opt(m, OptionCode::DomainNameServer),
        Some(&DhcpOption::DomainNameServer(vec![Ipv4Addr::new(
            10, 0, 0, 1
        )]))
    );
    assert_eq!(
        opt(m, OptionCode::ServerIdentifier),
        Some(&DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 0, 0, 1)))
    );
    assert_eq!(
        opt(m, OptionCode::AddressLeaseTime),
        Some(&DhcpOption::AddressLeaseTime(3600))
    );
    assert_eq!(
        opt(m, OptionCode::Renewal),
        Some(&DhcpOption::Renewal(1800))
    );
    assert_eq!(
        opt(m, OptionCode::InterfaceMtu),
        Some(&DhcpOption::InterfaceMtu(9000))
    );
    assert_eq!(
        opt(m, OptionCode::NtpServers),
        Some(&DhcpOption::NtpServers(vec![Ipv4Addr::new(10, 0, 0, 1)]))
    );
    assert!(
        opt(m, OptionCode::BootfileName).is_none(),
        "an OS client gets no boot file"
    );

    let req = request(
        MASTER,
        MessageType::Request,
        vec![
            DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 0, 0, 1)),
            DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 0, 0, 2)),
        ],
    );
    let ack = handle(&req, &plan, &mut state, 1001).unwrap();
    assert_eq!(ack.message.opts().msg_type(), Some(MessageType::Ack));
    let acked = ack.acked.unwrap();
    assert_eq!(
        (acked.ip, acked.node.as_deref()),
        (Ipv4Addr::new(10, 0, 0, 2), Some("master-0"))
    );
}

#[test]
fn the_parameter_request_list_limits_optional_options() {
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let prl = DhcpOption::ParameterRequestList(vec![OptionCode::SubnetMask, OptionCode::Router]);
    let offer = handle(
        &request(MASTER, MessageType::Discover, vec![prl]),
        &plan,
        &mut state,
        0,
    )
    .unwrap();
    assert!(opt(&offer.message, OptionCode::NtpServers).is_none());
    assert!(opt(&offer.message, OptionCode::InterfaceMtu).is_none());
    assert!(opt(&offer.message, OptionCode::SubnetMask).is_some());
}

#[test]
fn wrong_addresses_are_naked_and_other_servers_offers_respected() {
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let wrong = request(
        MASTER,
        MessageType::Request,
        vec![DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 0, 0, 9))],
    );
    let nak = handle(&wrong, &plan, &mut state, 0).unwrap();
    assert_eq!(nak.message.opts().msg_type(), Some(MessageType::Nak));
    assert_eq!(nak.to, SocketAddrV4::new(Ipv4Addr::BROADCAST, 68));
    let elsewhere = request(
        MASTER,
        MessageType::Request,
        vec![
            DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 0, 0, 99)),
            DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 0, 0, 2)),
        ],
    );
    assert!(handle(&elsewhere, &plan, &mut state, 0).is_none());
}

#[test]
fn renewals_are_unicast_to_the_client() {
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let mut renew = request(MASTER, MessageType::Request, vec![]);
    renew.set_ciaddr(Ipv4Addr::new(10, 0, 0, 2));
    let ack = handle(&renew, &plan, &mut state, 0).unwrap();
    assert_eq!(ack.message.opts().msg_type(), Some(MessageType::Ack));
    assert_eq!(ack.to, SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 68));
    assert_eq!(ack.message.ciaddr(), Ipv4Addr::new(10, 0, 0, 2));
}

#[test]
fn unknown_clients_get_nothing_without_a_pool() {
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let stranger = [2, 0, 0, 0, 0, 1];
    assert!(
        handle(
            &request(stranger, MessageType::Discover, vec![]),
            &plan,
            &mut state,
            0
        )
        .is_none()
    );
    let req = request(
        stranger,
        MessageType::Request,
        vec![DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 0, 0, 2))],
    );
    assert!(handle(&req, &plan, &mut state, 0).is_none());
}

/// The server's own path says who went unanswered and which reservation it looks like a typo
/// of (issue 46: a mistyped MAC used to be dropped without a word); with a pool, or for a
/// reserved MAC, nobody is a stranger.
#[test]
fn an_unanswered_client_is_named_with_the_reservation_it_looks_like() {
    use super::server::{Stranger, receive};
    let metrics = crate::metrics::Metrics::new();
    let from = std::net::SocketAddr::from(([0, 0, 0, 0], 68));
    let ask = |plan: &DhcpPlan, mac: [u8; 6]| {
        let packet = request(mac, MessageType::Discover, vec![])
            .to_vec()
            .unwrap();
        let mut state = State::new(Leases::in_memory());
        receive(&packet, from, plan, &mut state, &metrics, 0)
    };
    let none = plan("");
    let typo = [0x52, 0x54, 0, 0, 0, 0x12];
    let master = none
        .reservations
        .iter()
        .find(|r| r.mac.0 == MASTER)
        .unwrap();
    assert_eq!(
        ask(&none, typo).err(),
        Some(Some(Stranger {
            mac: crate::vocabulary::MacAddr(typo),
            closest: Some((master.mac, master.host_name.clone())),
        }))
    );
    let far = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];
    assert_eq!(
        ask(&none, far).err(),
        Some(Some(Stranger {
            mac: crate::vocabulary::MacAddr(far),
            closest: None,
        }))
    );
    assert!(ask(&none, MASTER).is_ok(), "a reservation is answered");
    let pooled = plan("  dhcp_pool: { start: 10.0.0.100, end: 10.0.0.110 }");
    assert!(ask(&pooled, typo).is_ok(), "a pool answers strangers");
}

#[test]
fn the_pool_is_shared_fairly_and_never_reaches_a_reservation() {
    let plan = plan("  dhcp_pool: { start: 10.0.0.100, end: 10.0.0.103 }");
    let mut state = State::new(Leases::in_memory());
    let mut given = Vec::new();
    // A starvation attempt: far more clients than addresses.
    for n in 0..50u8 {
        let mac = [2, 0, 0, 0, 1, n];
        let Some(offer) = handle(
            &request(mac, MessageType::Discover, vec![]),
            &plan,
            &mut state,
            0,
        ) else {
            continue;
        };
        let ip = offer.message.yiaddr();
        let req = request(
            mac,
            MessageType::Request,
            vec![
                DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 0, 0, 1)),
                DhcpOption::RequestedIpAddress(ip),
            ],
        );
        let ack = handle(&req, &plan, &mut state, 0).unwrap();
        assert_eq!(ack.message.opts().msg_type(), Some(MessageType::Ack));
        given.push(ip);
    }
    given.sort();
    given.dedup();
    assert_eq!(given.len(), 4, "each pool address once: {given:?}");
    assert!(given.iter().all(|ip| (100..=103).contains(&ip.octets()[3])));
    // The node still gets its reservation.
    let offer = handle(
        &request(MASTER, MessageType::Discover, vec![]),
        &plan,
        &mut state,
        0,
    )
    .unwrap();
    assert_eq!(offer.message.yiaddr(), Ipv4Addr::new(10, 0, 0, 2));
    // Another client asking for a taken address is refused.
    let greedy = request(
        [2, 0, 0, 0, 2, 0],
        MessageType::Request,
        vec![DhcpOption::RequestedIpAddress(given[0])],
    );
    assert_eq!(
        handle(&greedy, &plan, &mut state, 0)
            .unwrap()
            .message
            .opts()
            .msg_type(),
        Some(MessageType::Nak)
    );
    // A released address can be given again; a declined one rests.
    let first_mac = state.leases.on_ip(given[0]).unwrap().mac.0;
    let mut release = request(first_mac, MessageType::Release, vec![]);
    release.set_ciaddr(given[0]);
    assert!(handle(&release, &plan, &mut state, 0).is_none());
    assert!(state.leases.on_ip(given[0]).is_none());
}

#[test]
fn a_returning_client_gets_its_old_address() {
    let plan = plan("  dhcp_pool: { start: 10.0.0.100, end: 10.0.0.110 }");
    let mut state = State::new(Leases::in_memory());
    let mac = [2, 0, 0, 0, 3, 3];
    let ip = handle(
        &request(mac, MessageType::Discover, vec![]),
        &plan,
        &mut state,
        0,
    )
    .unwrap()
    .message
    .yiaddr();
    let req = request(
        mac,
        MessageType::Request,
        vec![DhcpOption::RequestedIpAddress(ip)],
    );
    handle(&req, &plan, &mut state, 0).unwrap();
    let again = handle(
        &request(mac, MessageType::Discover, vec![]),
        &plan,
        &mut state,
        100,
    )
    .unwrap();
    assert_eq!(again.message.yiaddr(), ip);
}

#[test]
fn firmware_gets_the_right_boot_file() {
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let ipxe = handle(
        &request(
            MASTER,
            MessageType::Discover,
            vec![DhcpOption::UserClass(b"iPXE".to_vec())],
        ),
        &plan,
        &mut state,
        0,
    )
    .unwrap();
    assert_eq!(
        ipxe.message.fname_str().unwrap().unwrap(),
        "http://10.0.0.1:8080/boot/52-54-00-00-00-02.ipxe"
    );
    // No ProxyDHCP wait: encapsulated 175.176 (no-pxedhcp) = 1, only for iPXE.
    let no_pxedhcp = |m: &dhcproto::v4::Message| match m.opts().get(OptionCode::Unknown(175)) {
        Some(DhcpOption::Unknown(o)) => o.data().to_vec(),
        _ => Vec::new(),
    };
    assert_eq!(no_pxedhcp(&ipxe.message), [176, 1, 1]);

    let pxe = |arch: u16, class: &[u8], state: &mut State| {
        let opts = vec![
            DhcpOption::ClassIdentifier(class.to_vec()),
            DhcpOption::ClientSystemArchitecture(Architecture::from(arch)),
        ];
        handle(
            &request(MASTER, MessageType::Discover, opts),
            &plan,
            state,
            0,
        )
        .unwrap()
        .message
    };
    let bios = pxe(0, b"PXEClient:Arch:00000:UNDI:002001", &mut state);
    assert_eq!(bios.fname_str().unwrap().unwrap(), BIOS_BOOT_FILE);
    assert!(no_pxedhcp(&bios).is_empty());
    assert_eq!(bios.siaddr(), Ipv4Addr::new(10, 0, 0, 1));
    let uefi = pxe(7, b"PXEClient:Arch:00007:UNDI:003016", &mut state);
    assert_eq!(uefi.fname_str().unwrap().unwrap(), UEFI_BOOT_FILE);
    let http = pxe(16, b"HTTPClient:Arch:00016:UNDI:003001", &mut state);
    assert_eq!(
        http.fname_str().unwrap().unwrap(),
        "http://10.0.0.1:8080/snponly.efi"
    );
    assert_eq!(
        opt(&http, OptionCode::ClassIdentifier),
        Some(&DhcpOption::ClassIdentifier(b"HTTPClient".to_vec()))
    );
}

#[test]
fn relayed_requests_go_back_through_the_relay_with_option_82() {
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let mut req = request(MASTER, MessageType::Discover, vec![]);
    req.set_giaddr(Ipv4Addr::new(10, 0, 0, 250));
    let info = dhcproto::v4::relay::RelayAgentInformation::default();
    req.opts_mut()
        .insert(DhcpOption::RelayAgentInformation(info.clone()));
    let offer = handle(&req, &plan, &mut state, 0).unwrap();
    assert_eq!(
        offer.to,
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 250), 67)
    );
    assert_eq!(offer.message.giaddr(), Ipv4Addr::new(10, 0, 0, 250));
    assert!(opt(&offer.message, OptionCode::RelayAgentInformation).is_some());
    // A relay on another network is not ours to serve.
    req.set_giaddr(Ipv4Addr::new(192, 168, 1, 1));
    assert!(handle(&req, &plan, &mut state, 0).is_none());
}

#[test]
fn relayed_naks_carry_the_broadcast_bit() {
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    // dhclient's INIT-REBOOT for a stale address, without the broadcast bit, through a relay.
    let mut stale = request(
        MASTER,
        MessageType::Request,
        vec![DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 0, 0, 77))],
    );
    stale.set_giaddr(Ipv4Addr::new(10, 0, 0, 250));
    let nak = handle(&stale, &plan, &mut state, 0).unwrap();
    assert_eq!(nak.message.opts().msg_type(), Some(MessageType::Nak));
    assert_eq!(nak.to, SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 250), 67));
    assert!(
        nak.message.flags().broadcast(),
        "the relay would unicast to 0.0.0.0"
    );
    // Offers keep the client's own choice: the relay may unicast them to yiaddr.
    let mut discover = request(MASTER, MessageType::Discover, vec![]);
    discover.set_giaddr(Ipv4Addr::new(10, 0, 0, 250));
    let offer = handle(&discover, &plan, &mut state, 0).unwrap();
    assert!(!offer.message.flags().broadcast());
}

#[test]
fn the_client_identifier_comes_back() {
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let id = DhcpOption::ClientIdentifier(vec![1, 0x52, 0x54, 0, 0, 0, 2]);
    let offer = handle(
        &request(MASTER, MessageType::Discover, vec![id.clone()]),
        &plan,
        &mut state,
        0,
    )
    .unwrap();
    assert_eq!(opt(&offer.message, OptionCode::ClientIdentifier), Some(&id));
    let wrong = request(
        MASTER,
        MessageType::Request,
        vec![
            id.clone(),
            DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 0, 0, 9)),
        ],
    );
    let nak = handle(&wrong, &plan, &mut state, 0).unwrap();
    assert_eq!(opt(&nak.message, OptionCode::ClientIdentifier), Some(&id));
    // Without one, none is made up.
    let plain = handle(
        &request(MASTER, MessageType::Discover, vec![]),
        &plan,
        &mut state,
        0,
    )
    .unwrap();
    assert!(opt(&plain.message, OptionCode::ClientIdentifier).is_none());
}

#[test]
fn inform_gets_options_without_a_lease() {
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let mut inform = request([2, 0, 0, 0, 9, 9], MessageType::Inform, vec![]);
    inform.set_ciaddr(Ipv4Addr::new(10, 0, 0, 77));
    let ack = handle(&inform, &plan, &mut state, 0).unwrap();
    assert_eq!(ack.message.yiaddr(), Ipv4Addr::UNSPECIFIED);
    assert!(opt(&ack.message, OptionCode::AddressLeaseTime).is_none());
    assert!(ack.acked.is_none());
    assert_eq!(ack.to, SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 77), 68));
}

/// A pair's hosts hand out new addresses from their own halves of the pool, so two hosts cut
/// from each other (both active) never give one address to two clients; a lease one host
/// granted (and replicated) is renewed by the other.
#[test]
fn a_pair_splits_the_pool_and_renews_each_others_leases() {
    use super::leases::Lease;
    use super::reply::share;
    let plan = plan("  dhcp_pool: { start: 10.0.0.100, end: 10.0.0.110 }");
    let pool = plan.pool.unwrap();
    let (lower, upper) = (share(pool, Some(0)).unwrap(), share(pool, Some(1)).unwrap());
    assert_eq!(
        (lower.start, lower.end),
        ([10, 0, 0, 100].into(), [10, 0, 0, 105].into())
    );
    assert_eq!(
        (upper.start, upper.end),
        ([10, 0, 0, 106].into(), [10, 0, 0, 110].into())
    );
    let one = config::Pool {
        start: [10, 0, 0, 9].into(),
        end: [10, 0, 0, 9].into(),
    };
    assert!(
        share(one, Some(1)).is_none(),
        "a one-address pool is the first host's"
    );

    let mut hosts = [
        State::new(Leases::in_memory()),
        State::new(Leases::in_memory()),
    ];
    hosts[0].in_pair(0);
    hosts[1].in_pair(1);
    let mut given = Vec::new();
    // Eleven clients at each host, both believing they are alone.
    for (h, state) in hosts.iter_mut().enumerate() {
        for c in 0..11u8 {
            let mac = [2, 0, 0, 0, h as u8, c];
            if let Some(out) = handle(
                &request(mac, MessageType::Discover, vec![]),
                &plan,
                state,
                0,
            ) {
                let ip = out.message.yiaddr();
                let share = if h == 0 { lower } else { upper };
                assert!(share.contains(ip), "host {h} offered {ip} outside its half");
                given.push(ip);
            }
        }
    }
    let mut unique = given.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        given.len(),
        "an address offered twice: {given:?}"
    );
    assert_eq!(given.len(), 11, "each half is used up, not more");

    // A lease from the lower half, replicated to the upper host, is renewed there.
    let mac = [2, 0, 0, 0, 9, 9];
    hosts[1].leases.record(Lease {
        ip: [10, 0, 0, 101].into(),
        mac: super::super::vocabulary::MacAddr(mac),
        expires: 10_000,
    });
    let renew = handle(
        &request(
            mac,
            MessageType::Request,
            vec![DhcpOption::RequestedIpAddress([10, 0, 0, 101].into())],
        ),
        &plan,
        &mut hosts[1],
        100,
    )
    .unwrap();
    assert_eq!(renew.message.opts().msg_type(), Some(MessageType::Ack));
    assert_eq!(renew.message.yiaddr(), Ipv4Addr::new(10, 0, 0, 101));
    // Without that lease, the upper host neither grants a lower-half address nor NAKs it (the
    // lower host may have offered it: both carry the same server identifier).
    let stranger = handle(
        &request(
            [2, 0, 0, 0, 8, 8],
            MessageType::Request,
            vec![DhcpOption::RequestedIpAddress([10, 0, 0, 102].into())],
        ),
        &plan,
        &mut hosts[1],
        100,
    );
    assert!(stranger.is_none(), "{stranger:?}");
}
