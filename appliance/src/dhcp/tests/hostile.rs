//! DHCP decisions on hostile or stale input: packets that once tripped the decoder or the
//! server, and a client whose reservation a reload removed.

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, MessageType};

use super::super::leases::Leases;
use super::super::reply::{State, handle};
use super::{MASTER, plan, request};

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
    let decoded = super::super::decode(PACKET);
    std::panic::set_hook(before);
    if cfg!(debug_assertions) {
        assert!(decoded.is_none());
    }
}

/// A BOOTREQUEST whose `hlen` is longer than `chaddr` (17 or 255, with a message type, as in
/// issue 39's reproducer): dhcproto decodes it and its `chaddr()` panics, which stopped the
/// whole appliance. `decode` refuses it; an `hlen` the field holds still decodes.
#[test]
fn a_hardware_address_longer_than_chaddr_is_refused_at_decode() {
    let packet = |hlen: u8| {
        let mut p = vec![1, 1, hlen, 0, 0, 0, 0x12, 0x34, 0, 0, 0x80, 0];
        p.resize(236, 0);
        p.extend_from_slice(&[0x63, 0x82, 0x53, 0x63, 0x35, 0x01, 0x01, 0xff]);
        p
    };
    for hlen in [17, 32, 255] {
        assert!(super::super::decode(&packet(hlen)).is_none(), "hlen {hlen}");
    }
    for hlen in [0, 6, 16] {
        let decoded = super::super::decode(&packet(hlen)).expect("decodes");
        assert_eq!(decoded.chaddr().len(), usize::from(hlen));
    }
}

/// A node whose reservation a reload removed while its lease was live (issue 39): its renewal
/// gets one NAK, then nothing (no pool) or a pool address (a pool), never the OFFER/NAK loop
/// of its old address until the lease ran out.
#[test]
fn a_removed_reservation_gets_one_nak_then_nothing_or_a_pool_address() {
    let reserved = Ipv4Addr::new(10, 0, 0, 2);
    for pool in ["", "  dhcp_pool: { start: 10.0.0.100, end: 10.0.0.110 }"] {
        let mut plan = plan(pool);
        let mut state = State::new(Leases::in_memory());
        let ask = |ip| vec![DhcpOption::RequestedIpAddress(ip)];
        let ack = handle(
            &request(MASTER, MessageType::Request, ask(reserved)),
            &plan,
            &mut state,
            1000,
        )
        .unwrap();
        assert_eq!(ack.message.opts().msg_type(), Some(MessageType::Ack));
        // The reload: master-0 is no longer in the config.
        plan.reservations.clear();
        let renew = handle(
            &request(MASTER, MessageType::Request, ask(reserved)),
            &plan,
            &mut state,
            1100,
        )
        .expect("an answer to the renewal");
        assert_eq!(
            renew.message.opts().msg_type(),
            Some(MessageType::Nak),
            "{pool:?}"
        );
        let again = handle(
            &request(MASTER, MessageType::Discover, vec![]),
            &plan,
            &mut state,
            1101,
        );
        match pool {
            "" => {
                assert!(again.is_none(), "silence without a pool");
                let asked = handle(
                    &request(MASTER, MessageType::Request, ask(reserved)),
                    &plan,
                    &mut state,
                    1102,
                );
                assert!(asked.is_none(), "one NAK, then silence");
            }
            _ => {
                let offer = again.expect("a pool offer");
                assert_eq!(offer.message.opts().msg_type(), Some(MessageType::Offer));
                assert_ne!(offer.message.yiaddr(), reserved);
                let ip = offer.message.yiaddr();
                let ack = handle(
                    &request(MASTER, MessageType::Request, ask(ip)),
                    &plan,
                    &mut state,
                    1102,
                )
                .unwrap();
                assert_eq!(ack.message.opts().msg_type(), Some(MessageType::Ack));
            }
        }
    }
}
