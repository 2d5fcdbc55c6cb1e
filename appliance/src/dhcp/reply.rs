//! One DHCPv4 request in, at most one reply out (RFC 2131 section 4.3), decided from the plan's
//! reservations, the dynamic pool and the lease table.
//!
//! Reservations come first and are never touched by anything an unknown client does: they lie
//! outside the pool (validation guarantees it) and a pool address is given only when no live
//! lease, recent offer or recent DECLINE holds it. Without a pool, unknown clients get no answer
//! (the server names them in a log line at most every 10 s and in an `UnknownClient` event of
//! the segment's cluster, with the reserved MAC each may be a typo of: `server::Stranger`).
//! A request for a wrong address gets a NAK; a relayed one is answered through `giaddr` with
//! option 82 echoed; optional options are limited by the parameter request list.
//!
//! Boot: iPXE (user class "iPXE", or option 175) gets its node's script URL; BIOS and UEFI PXE
//! firmware get `undionly.kpxe` or `snponly.efi` from the TFTP server (why not `ipxe.efi`:
//! `plan::boot::UEFI_BOOT_FILE`); UEFI HTTP boot gets an HTTP URL with the `HTTPClient` class.
//! Replies go through the relay if there is one, renewals unicast to the client, everything
//! else broadcast (no ARP injection: every client accepts broadcast).
//!
//! Architecture invariant: no sockets and no clock: the caller passes `now` and sends what comes
//! back; lease changes are recorded in [`Leases`] and made durable by the caller before sending.

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};

use dhcproto::v4::{DhcpOption, HType, Message, MessageType, Opcode, OptionCode};

use super::fit::fit;
use super::leases::{Lease, Leases};
use crate::plan::DhcpPlan;
use crate::plan::dhcp::Pool;
use crate::vocabulary::MacAddr;

/// An OFFER holds its address this long for the client's REQUEST.
const OFFER_HOLD: u64 = 60;
/// A DECLINEd address (someone else uses it) rests this long.
const DECLINE_HOLD: u64 = 600;
/// Boot files for PXE firmware that is not iPXE yet, served by TFTP.
pub use crate::plan::boot::{BIOS_BOOT_FILE, UEFI_BOOT_FILE};

/// Lease state the server keeps between requests.
#[derive(Debug)]
pub struct State {
    pub leases: Leases,
    offers: HashMap<Ipv4Addr, (MacAddr, u64)>,
    declined: HashMap<Ipv4Addr, u64>,
    /// Where the next pool search starts, so addresses are reused last.
    cursor: u32,
    /// In a pair: this host's half of the pool (0 the lower, 1 the upper), from which alone it
    /// hands out new addresses, so two hosts cut from each other never give one address to two
    /// clients. A lease either host granted is renewed by both.
    half: Option<usize>,
}

impl State {
    /// Whether pool address `ip` may go to `mac`: no live lease, fresh offer or recent DECLINE
    /// holds it for someone else.
    fn free_for(&self, ip: Ipv4Addr, mac: MacAddr, now: u64) -> bool {
        !self.leases.taken_by_other(ip, mac, now)
            && self.declined.get(&ip).is_none_or(|until| *until <= now)
            && self
                .offers
                .get(&ip)
                .is_none_or(|(m, until)| *m == mac || *until <= now)
    }

    pub fn new(leases: Leases) -> State {
        State {
            leases,
            offers: HashMap::new(),
            declined: HashMap::new(),
            cursor: 0,
            half: None,
        }
    }

    /// This server is host `host` of a pair: new addresses come from its half of the pool.
    pub fn in_pair(&mut self, host: usize) {
        self.half = Some(host.min(1));
    }
}

/// A reply and where it goes; `acked` names the client and address of a DHCPACK.
#[derive(Debug)]
pub struct Outgoing {
    pub message: Message,
    pub to: SocketAddrV4,
    pub acked: Option<Acked>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    /// The cluster that answered ([`DhcpPlan::cluster`]).
    pub cluster: String,
    pub mac: MacAddr,
    pub ip: Ipv4Addr,
    /// The node's name when it has a reservation.
    pub node: Option<String>,
}

/// How the client boots, from options 60, 77, 93 and 175.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Firmware {
    /// An operating system's DHCP client: no boot options.
    None,
    /// iPXE: the HTTP URL of its script.
    Ipxe,
    /// Legacy BIOS PXE: chainload undionly.kpxe over TFTP.
    BiosPxe,
    /// UEFI PXE: chainload snponly.efi over TFTP.
    UefiPxe,
    /// UEFI HTTP boot: snponly.efi over HTTP.
    UefiHttp,
}

/// Handles one request; `None` means stay silent.
pub fn handle(req: &Message, plan: &DhcpPlan, state: &mut State, now: u64) -> Option<Outgoing> {
    if req.opcode() != Opcode::BootRequest || req.htype() != HType::Eth || req.hlen() != 6 {
        return None;
    }
    let mac = MacAddr(req.chaddr().get(..6)?.try_into().ok()?);
    // A node of a cluster whose DHCP is another server's, on a segment this socket serves.
    if plan.silent.contains(&mac) {
        return None;
    }
    // On a segment several clusters share, the client's own cluster answers.
    let plan = plan.for_mac(mac);
    let giaddr = req.giaddr();
    // Relayed requests must come from a relay on the cluster subnet: it is the only one served.
    if !giaddr.is_unspecified() && !plan.subnet.contains(&giaddr) {
        return None;
    }
    let reservation = plan.reservations.iter().find(|r| r.mac == mac);
    match req.opts().msg_type()? {
        MessageType::Discover => {
            let ip = match reservation {
                Some(r) => r.ip,
                None => allocate(req, plan, state, mac, now)?,
            };
            state.offers.insert(ip, (mac, now + OFFER_HOLD));
            Some(reply(req, plan, MessageType::Offer, ip, mac, None))
        }
        MessageType::Request => request(req, plan, state, mac, now),
        MessageType::Decline => {
            let ip = requested(req)?;
            if reservation.is_some_and(|r| r.ip == ip) {
                tracing::warn!(
                    "{mac} declined its reserved address {ip}: another host on the network uses it"
                );
            } else if state.leases.on_ip(ip).is_some_and(|l| l.mac == mac) {
                state.leases.record(Lease {
                    ip,
                    mac,
                    expires: 0,
                });
                state.declined.insert(ip, now + DECLINE_HOLD);
                tracing::warn!(
                    "{mac} declined {ip}: another host uses it; resting it for {DECLINE_HOLD} s"
                );
            }
            None
        }
        MessageType::Release => {
            let ip = req.ciaddr();
            if state.leases.on_ip(ip).is_some_and(|l| l.mac == mac) {
                state.leases.record(Lease {
                    ip,
                    mac,
                    expires: 0,
                });
            }
            None
        }
        MessageType::Inform => {
            // Configuration only: no address, no lease (RFC 2131 section 3.4).
            let ciaddr = req.ciaddr();
            if ciaddr.is_unspecified() || !plan.subnet.contains(&ciaddr) {
                return None;
            }
            Some(reply(
                req,
                plan,
                MessageType::Ack,
                Ipv4Addr::UNSPECIFIED,
                mac,
                None,
            ))
        }
        _ => None,
    }
}

/// The part of `pool` this server hands new addresses out of: all of it, or in a pair its
/// half (the lower one for the preferred host, which gets the odd address); `None` if empty.
pub fn share(pool: Pool, half: Option<usize>) -> Option<Pool> {
    let (start, end) = (u32::from(pool.start), u32::from(pool.end));
    let lower_end = start + (end - start) / 2;
    match half {
        None => Some(pool),
        Some(0) => Some(Pool {
            start: pool.start,
            end: lower_end.into(),
        }),
        Some(_) => (lower_end < end).then(|| Pool {
            start: (lower_end + 1).into(),
            end: pool.end,
        }),
    }
}

fn requested(req: &Message) -> Option<Ipv4Addr> {
    match req.opts().get(OptionCode::RequestedIpAddress) {
        Some(DhcpOption::RequestedIpAddress(ip)) => Some(*ip),
        _ => None,
    }
}

fn request(
    req: &Message,
    plan: &DhcpPlan,
    state: &mut State,
    mac: MacAddr,
    now: u64,
) -> Option<Outgoing> {
    let server_id = match req.opts().get(OptionCode::ServerIdentifier) {
        Some(DhcpOption::ServerIdentifier(id)) => Some(*id),
        _ => None,
    };
    if server_id.is_some_and(|id| id != plan.server_id) {
        // The client took another server's offer: ours is free again.
        state.offers.retain(|_, (m, _)| *m != mac);
        return None;
    }
    let ciaddr = req.ciaddr();
    let wanted = requested(req).or((!ciaddr.is_unspecified()).then_some(ciaddr))?;
    let reservation = plan.reservations.iter().find(|r| r.mac == mac);
    let grant = match reservation {
        Some(r) => r.ip == wanted,
        // Without a pool only reservations are served; unknown clients get silence. A client
        // still holding a lease from this server (its reservation was removed by a reload)
        // is told once that the address is no longer its own: the lease is forgotten, so its
        // next try gets silence, never an OFFER of the address it can't have.
        None if plan.pool.is_none() => {
            if state.leases.of_mac(mac, now).is_none_or(|l| l.ip != wanted) {
                return None;
            }
            forget(state, wanted, mac);
            return Some(nak(req, plan, mac));
        }
        None => {
            let held = state
                .leases
                .of_mac(mac, now)
                .is_some_and(|l| l.ip == wanted);
            let ours = plan
                .pool
                .and_then(|p| share(p, state.half))
                .is_some_and(|p| p.contains(wanted));
            let in_pool = plan.pool.is_some_and(|p| p.contains(wanted));
            in_pool && (held || ours) && state.free_for(wanted, mac, now)
        }
    };
    if !grant {
        // In a pair, the other host's half is the other host's to answer: both carry the same
        // server identifier, so a REQUEST for an address it offered reaches this host too.
        let others = reservation.is_none()
            && state.half.is_some()
            && plan.pool.is_some_and(|p| {
                p.contains(wanted) && !share(p, state.half).is_some_and(|s| s.contains(wanted))
            });
        if others {
            return None;
        }
        // The address is wrong for this client; as the subnet's authority, say so at once.
        if !plan.subnet.contains(&wanted) && server_id.is_none() && reservation.is_none() {
            return None;
        }
        // A lease this server gave for it is over (a reservation a reload removed, an address
        // out of the pool now): forgotten, so the next DISCOVER gets a servable address.
        if state
            .leases
            .of_mac(mac, now)
            .is_some_and(|l| l.ip == wanted)
        {
            forget(state, wanted, mac);
        }
        return Some(nak(req, plan, mac));
    }
    state.offers.remove(&wanted);
    let lease_secs = plan.lease_time.as_secs();
    state.leases.record(Lease {
        ip: wanted,
        mac,
        expires: now + lease_secs,
    });
    let node = reservation.map(|r| r.host_name.clone());
    Some(reply(req, plan, MessageType::Ack, wanted, mac, node))
}

/// Ends `mac`'s lease of `ip` (recorded as expired, as a RELEASE is).
fn forget(state: &mut State, ip: Ipv4Addr, mac: MacAddr) {
    state.leases.record(Lease {
        ip,
        mac,
        expires: 0,
    });
}

/// A free pool address for `mac`: its own live or expired lease first, then the address it asks
/// for, then the next free one after the last given.
fn allocate(
    req: &Message,
    plan: &DhcpPlan,
    state: &mut State,
    mac: MacAddr,
    now: u64,
) -> Option<Ipv4Addr> {
    let pool = share(plan.pool?, state.half)?;
    let free = |state: &State, ip: Ipv4Addr| pool.contains(ip) && state.free_for(ip, mac, now);
    // Its own lease or offer only while this server could still grant it: an address that is
    // no longer in the pool (a reservation a reload removed) would be offered, refused with a
    // NAK at the REQUEST, and offered again, until the lease ran out.
    if let Some(lease) = state.leases.of_mac(mac, now).filter(|l| free(state, l.ip)) {
        return Some(lease.ip);
    }
    if let Some((&ip, _)) = state
        .offers
        .iter()
        .find(|(ip, (m, until))| *m == mac && *until > now && free(state, **ip))
    {
        return Some(ip);
    }
    if let Some(ip) = requested(req).filter(|ip| free(state, *ip)) {
        return Some(ip);
    }
    let (start, end) = (u32::from(pool.start), u32::from(pool.end));
    let size = end - start + 1;
    for i in 0..size {
        let ip = Ipv4Addr::from(start + (state.cursor + i) % size);
        if free(state, ip) {
            state.cursor = (state.cursor + i + 1) % size;
            return Some(ip);
        }
    }
    None
}

fn firmware(req: &Message) -> Firmware {
    let opts = req.opts();
    let user_class_ipxe = match opts.get(OptionCode::UserClass) {
        // RFC 3004 user classes are length-prefixed; iPXE sends "iPXE" either way.
        Some(DhcpOption::UserClass(bytes)) => bytes.windows(4).any(|w| w == b"iPXE"),
        _ => false,
    };
    if user_class_ipxe || opts.get(OptionCode::Unknown(175)).is_some() {
        return Firmware::Ipxe;
    }
    let class = match opts.get(OptionCode::ClassIdentifier) {
        Some(DhcpOption::ClassIdentifier(c)) => c.as_slice(),
        _ => return Firmware::None,
    };
    let arch = match opts.get(OptionCode::ClientSystemArchitecture) {
        Some(DhcpOption::ClientSystemArchitecture(a)) => u16::from(*a),
        _ => 0,
    };
    if class.starts_with(b"HTTPClient") {
        Firmware::UefiHttp
    } else if class.starts_with(b"PXEClient") {
        // RFC 4578 / IANA processor architecture types: 0 is BIOS, the rest here are EFI.
        if arch == 0 {
            Firmware::BiosPxe
        } else {
            Firmware::UefiPxe
        }
    } else {
        Firmware::None
    }
}

fn base_reply(req: &Message, msg_type: MessageType, yiaddr: Ipv4Addr) -> Message {
    let mut m = Message::default();
    m.set_opcode(Opcode::BootReply)
        .set_htype(req.htype())
        .set_xid(req.xid())
        .set_flags(req.flags())
        .set_giaddr(req.giaddr())
        .set_chaddr(req.chaddr())
        .set_yiaddr(yiaddr);
    if msg_type == MessageType::Ack && !req.ciaddr().is_unspecified() {
        m.set_ciaddr(req.ciaddr());
    }
    m.opts_mut().insert(DhcpOption::MessageType(msg_type));
    m
}

fn nak(req: &Message, plan: &DhcpPlan, mac: MacAddr) -> Outgoing {
    let mut m = base_reply(req, MessageType::Nak, Ipv4Addr::UNSPECIFIED);
    if !req.giaddr().is_unspecified() {
        // RFC 2131 section 4.3.2: a relay must broadcast a NAK, and does so only when the
        // broadcast bit says so; otherwise it unicasts to yiaddr, 0.0.0.0 here, which no IP
        // stack accepts. The client's address is wrong, so it can't take a unicast anyway.
        m.set_flags(req.flags().set_broadcast());
    }
    m.opts_mut()
        .insert(DhcpOption::ServerIdentifier(plan.server_id));
    echo_client_id(req, &mut m);
    echo_relay_info(req, &mut m);
    tracing::debug!("NAK to {mac}");
    Outgoing {
        to: destination(req, MessageType::Nak),
        message: m,
        acked: None,
    }
}

fn reply(
    req: &Message,
    plan: &DhcpPlan,
    msg_type: MessageType,
    ip: Ipv4Addr,
    mac: MacAddr,
    node: Option<String>,
) -> Outgoing {
    let mut m = base_reply(req, msg_type, ip);
    let reservation = plan.reservations.iter().find(|r| r.mac == mac);
    let requested: Vec<OptionCode> = match req.opts().get(OptionCode::ParameterRequestList) {
        Some(DhcpOption::ParameterRequestList(list)) => list.clone(),
        _ => Vec::new(),
    };
    // Options everyone gets, and options sent when asked for (or when the client sent no list).
    let wants = |code: OptionCode| requested.is_empty() || requested.contains(&code);
    let secs = |d: std::time::Duration| u32::try_from(d.as_secs()).unwrap_or(u32::MAX);
    let o = m.opts_mut();
    o.insert(DhcpOption::ServerIdentifier(plan.server_id));
    // An INFORM answer (no address) carries no lease times (RFC 2131 section 3.4).
    if !ip.is_unspecified() {
        o.insert(DhcpOption::AddressLeaseTime(secs(plan.lease_time)));
        o.insert(DhcpOption::Renewal(secs(plan.renewal_time)));
        o.insert(DhcpOption::Rebinding(secs(plan.rebinding_time)));
    }
    o.insert(DhcpOption::SubnetMask(plan.subnet.netmask()));
    if let Some(router) = plan.router {
        o.insert(DhcpOption::Router(vec![router]));
    }
    o.insert(DhcpOption::DomainNameServer(plan.dns_servers.clone()));
    o.insert(DhcpOption::DomainName(plan.domain_name.clone()));
    if let Some(r) = reservation {
        o.insert(DhcpOption::Hostname(r.host_name.clone()));
    }
    if wants(OptionCode::BroadcastAddr) {
        o.insert(DhcpOption::BroadcastAddr(plan.subnet.broadcast()));
    }
    if let Some(mtu) = plan.mtu.filter(|_| wants(OptionCode::InterfaceMtu)) {
        o.insert(DhcpOption::InterfaceMtu(mtu));
    }
    if !plan.ntp_servers.is_empty() && wants(OptionCode::NtpServers) {
        o.insert(DhcpOption::NtpServers(plan.ntp_servers.clone()));
    }
    if wants(OptionCode::DomainSearch) {
        let names: Vec<dhcproto::Name> = plan
            .domain_search
            .iter()
            .filter_map(|d| d.parse().ok())
            .collect();
        o.insert(DhcpOption::DomainSearch(names));
    }
    let url = reservation.map_or_else(
        || plan.unknown_script_url.clone(),
        |r| r.ipxe_script_url.clone(),
    );
    match firmware(req) {
        Firmware::None => {}
        Firmware::Ipxe => {
            m.set_fname_str(&url);
            let o = m.opts_mut();
            o.insert(DhcpOption::BootfileName(url.into_bytes()));
            // iPXE's encapsulated option 175.176 (no-pxedhcp = 1): this offer carries the
            // boot file, so iPXE requests it at once instead of waiting 2 s for ProxyDHCP
            // offers that never come.
            o.insert(DhcpOption::Unknown(dhcproto::v4::UnknownOption::new(
                OptionCode::Unknown(175),
                vec![176, 1, 1],
            )));
        }
        Firmware::BiosPxe | Firmware::UefiPxe => {
            let file = if firmware(req) == Firmware::BiosPxe {
                BIOS_BOOT_FILE
            } else {
                UEFI_BOOT_FILE
            };
            // The TFTP server is the appliance itself (siaddr, and option 66 for firmware that reads it).
            m.set_siaddr(plan.server_id).set_fname_str(file);
            let o = m.opts_mut();
            o.insert(DhcpOption::Unknown(dhcproto::v4::UnknownOption::new(
                OptionCode::Unknown(66),
                plan.server_id.to_string().into_bytes(),
            )));
            o.insert(DhcpOption::BootfileName(file.as_bytes().to_vec()));
        }
        Firmware::UefiHttp => {
            let efi = plan.http_boot_url.clone();
            m.set_fname_str(&efi);
            let o = m.opts_mut();
            // UEFI HTTP boot only accepts offers that say they are for HTTPClient.
            o.insert(DhcpOption::ClassIdentifier(b"HTTPClient".to_vec()));
            o.insert(DhcpOption::BootfileName(efi.into_bytes()));
        }
    }
    echo_client_id(req, &mut m);
    echo_relay_info(req, &mut m);
    fit(&mut m, req, &requested);
    Outgoing {
        to: destination(req, msg_type),
        acked: (msg_type == MessageType::Ack && !ip.is_unspecified()).then(|| Acked {
            cluster: plan.cluster.clone(),
            mac,
            ip,
            node,
        }),
        message: m,
    }
}

/// RFC 6842: a client identifier (option 61) comes back in every OFFER, ACK and NAK, so a
/// client that sent one can match replies on it; clients that require it drop replies without.
fn echo_client_id(req: &Message, reply: &mut Message) {
    if let Some(id) = req.opts().get(OptionCode::ClientIdentifier) {
        reply.opts_mut().insert(id.clone());
    }
}

/// RFC 3046 section 2.2: relay agent information goes back to the relay unchanged.
fn echo_relay_info(req: &Message, reply: &mut Message) {
    if let Some(info) = req.opts().get(OptionCode::RelayAgentInformation) {
        reply.opts_mut().insert(info.clone());
    }
}

/// RFC 2131 section 4.1: through the relay if there is one, NAKs broadcast, renewals unicast
/// to the client's address, everything else broadcast (a client without an address can't
/// answer ARP, and broadcast works for every client).
fn destination(req: &Message, msg_type: MessageType) -> SocketAddrV4 {
    let giaddr = req.giaddr();
    if !giaddr.is_unspecified() {
        return SocketAddrV4::new(giaddr, 67);
    }
    if msg_type != MessageType::Nak && !req.ciaddr().is_unspecified() {
        return SocketAddrV4::new(req.ciaddr(), 68);
    }
    SocketAddrV4::new(Ipv4Addr::BROADCAST, 68)
}
