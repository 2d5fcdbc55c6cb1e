//! DHCP decisions against a lab plan: reservations, pool, states, PXE flavours, relays.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use dhcproto::v4::{Architecture, DhcpOption, Message, MessageType, OptionCode};

use super::leases::Leases;
use super::reply::{BIOS_BOOT_FILE, State, UEFI_BOOT_FILE, handle};
use crate::config;
use crate::plan::{DhcpPlan, Plan};

fn plan(pool: &str) -> DhcpPlan {
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
    let loaded = config::parse(&text, "t.yml", Path::new("."), &config::AssumeFresh)
        .unwrap_or_else(|e| panic!("{}", e.render(config::RenderStyle::Plain)));
    Plan::derive(&loaded.config, 1).dhcp
}

const MASTER: [u8; 6] = [0x52, 0x54, 0, 0, 0, 2];

fn request(mac: [u8; 6], kind: MessageType, opts: Vec<DhcpOption>) -> Message {
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
    assert_eq!(bios.siaddr(), Ipv4Addr::new(10, 0, 0, 1));
    let uefi = pxe(7, b"PXEClient:Arch:00007:UNDI:003016", &mut state);
    assert_eq!(uefi.fname_str().unwrap().unwrap(), UEFI_BOOT_FILE);
    let http = pxe(16, b"HTTPClient:Arch:00016:UNDI:003001", &mut state);
    assert_eq!(
        http.fname_str().unwrap().unwrap(),
        "http://10.0.0.1:8080/ipxe.efi"
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

#[test]
fn replies_fit_the_client_maximum() {
    use dhcproto::Encodable;
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let offer = handle(
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
    assert!(offer.message.to_vec().unwrap().len() <= 576 - 28);
}

/// Found by the dhcp_packet fuzzer: dhcproto debug-asserts on a bulk-leasequery option whose
/// length is not 4. The packet is dropped; the server goes on.
#[test]
fn a_packet_that_trips_the_decoder_is_dropped_not_fatal() {
    const PACKET: &[u8] = &[
        1, 1, 6, 0, 15, 62, 189, 211, 0, 0, 0, 0, 0, 0, 0, 0, 0, 232, 232, 232, 232, 232, 232, 232,
        232, 232, 232, 232, 232, 232, 232, 232, 232, 232, 122, 232, 232, 232, 232, 232, 232, 232,
        232, 232, 232, 232, 232, 232, 232, 232, 232, 232, 232, 232, 232, 232, 232, 232, 232, 232,
        232, 232, 232, 232, 232, 232, 232, 1, 1, 1, 6, 0, 177, 133, 47, 71, 0, 0, 0, 39, 10, 64, 0,
        0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 63, 0, 0, 0, 0, 0, 0, 0, 0, 253, 255, 255, 151,
        104, 104, 104, 104, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 0, 0, 10, 4, 0,
        253, 255, 255, 255, 0, 6, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152,
        152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152,
        152, 152, 152, 152, 152, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 250, 0, 0, 0, 49, 0, 0, 0, 0,
        0, 0, 9, 93, 0, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 0, 152,
        152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152, 152,
        152, 152, 152, 152, 152, 0, 0, 152, 152, 152, 152, 0, 8, 0, 82, 84,
    ];
    let before = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let decoded = super::decode(PACKET);
    std::panic::set_hook(before);
    if cfg!(debug_assertions) {
        assert!(decoded.is_none());
    }
}
