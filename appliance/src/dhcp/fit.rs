//! Fitting a reply into the client's maximum message size (option 57; RFC 2131 section 2
//! guarantees 576 bytes): options that do not fit in the options field go into the `file` and
//! then the `sname` header fields under option 52 (option overload, RFC 2131 section 4.1,
//! RFC 2132 section 9.3), as ISC dhcpd does; only optional options that still do not fit are
//! left out (search list, NTP, broadcast address, MTU: each stays, most wanted first, if room
//! remains). The options the client asked for stay in the options field first, in its order;
//! the message type, server identifier and relay agent information never move. A reply with a
//! boot file name is trimmed, never overloaded (`spare_fields` says why).
//!
//! dhcproto encodes `file` and `sname` as opaque bytes and neither writes nor reads overloaded
//! fields, so the fields' contents are encoded here, option by option, with dhcproto's own
//! option encoder.
//!
//! Architecture invariant: pure; the reply `Message` leaves here exactly as it goes on the wire.

use dhcproto::Encodable;
use dhcproto::v4::{DhcpOption, Message, OptionCode};

/// The smallest reply every client must accept (RFC 2131 section 2).
const MIN_MESSAGE: usize = 576;
/// IP and UDP headers count against the client's maximum (RFC 2132 section 9.10).
const IP_UDP_HEADERS: usize = 28;
/// The fixed BOOTP header and the magic cookie before the options field.
const FIXED_HEADER: usize = 240;
/// Option 52 itself: code, length, value.
const OVERLOAD_LEN: usize = 3;
/// The END option that closes the options field and every overloaded field.
const END: u8 = 255;
/// The sizes of the `file` and `sname` header fields.
const FILE_LEN: usize = 128;
const SNAME_LEN: usize = 64;

/// Options kept in the options field whatever happens: the message type and server identifier,
/// which clients check before reading further, and relay agent information, which a relay
/// looks for there only, to strip it before forwarding (RFC 3046 section 2.2).
const MAIN_ONLY: [OptionCode; 3] = [
    OptionCode::MessageType,
    OptionCode::ServerIdentifier,
    OptionCode::RelayAgentInformation,
];

/// Options a client can do without: the only ones left out when even overload runs short.
/// Everything else a reply carries is needed to use the address or to boot.
const TRIMMABLE: [OptionCode; 4] = [
    OptionCode::DomainSearch,
    OptionCode::NtpServers,
    OptionCode::BroadcastAddr,
    OptionCode::InterfaceMtu,
];

/// A place in the message that holds options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Options,
    /// The 128-byte boot file name field, read first after the options (RFC 2131 section 4.1).
    File,
    /// The 64-byte server host name field, read last.
    Sname,
}

/// One option of the reply with its wire form.
struct Encoded {
    code: OptionCode,
    bytes: Vec<u8>,
}

/// Keeps `reply` within the maximum message size of the client that sent `req`: first by
/// moving options into free header fields, then by leaving out the least important optional
/// ones. `requested` is the client's parameter request list (option 55), most wanted first.
pub fn fit(reply: &mut Message, req: &Message, requested: &[OptionCode]) {
    let room = (max_message(req) - IP_UDP_HEADERS).saturating_sub(FIXED_HEADER);
    let pinned: usize = reply
        .opts()
        .iter()
        .filter(|(code, _)| MAIN_ONLY.contains(code))
        .filter_map(|(_, opt)| encode(opt))
        .map(|bytes| bytes.len())
        .sum();
    // The END closing the options field takes one byte of it.
    let main_room = room.saturating_sub(pinned + 1);
    let spare = spare_fields(reply);
    let options = by_priority(reply, requested);
    let keep = choose(&options, main_room, &spare);
    for (o, _) in options.iter().zip(&keep).filter(|(_, keep)| !**keep) {
        reply.opts_mut().remove(o.code);
    }
    let kept = subset(&options, &keep);
    let places = pack(&kept, main_room, &spare);
    place(reply, &kept, &places);
}

/// Which options the reply keeps: every one the client needs, then each optional one, most
/// wanted first, if it finds room without pushing out anything already in.
fn choose(options: &[Encoded], main_room: usize, spare: &[(Field, usize)]) -> Vec<bool> {
    let unplaced = |keep: &[bool]| {
        pack(&subset(options, keep), main_room, spare)
            .iter()
            .filter(|p| p.is_none())
            .count()
    };
    let mut keep: Vec<bool> = options
        .iter()
        .map(|o| !TRIMMABLE.contains(&o.code))
        .collect();
    for i in 0..options.len() {
        if keep[i] {
            continue;
        }
        let before = unplaced(&keep);
        keep[i] = true;
        keep[i] = unplaced(&keep) == before;
    }
    keep
}

fn subset<'a>(options: &'a [Encoded], keep: &[bool]) -> Vec<&'a Encoded> {
    options
        .iter()
        .zip(keep)
        .filter(|(_, keep)| **keep)
        .map(|(o, _)| o)
        .collect()
}

/// The maximum DHCP message size the client accepts, IP and UDP headers included.
fn max_message(req: &Message) -> usize {
    match req.opts().get(OptionCode::MaxMessageSize) {
        Some(DhcpOption::MaxMessageSize(n)) => usize::from(*n).max(MIN_MESSAGE),
        _ => MIN_MESSAGE,
    }
}

/// The header fields free to carry options, `file` first, with their room for options (less
/// the END that closes them): both, unless the reply carries boot information in either, and
/// then none. PXE firmware reads its boot file from `file`, and boot firmware is where option
/// 52 goes unread: iPXE parses only the options field and takes a non-empty `sname` for the
/// TFTP server name (option 66), so options moved there would be lost and misread. Replies to
/// boot firmware are trimmed instead.
fn spare_fields(reply: &Message) -> Vec<(Field, usize)> {
    let used = |field: Option<&[u8]>| field.is_some_and(|f| !f.is_empty());
    if used(reply.fname()) || used(reply.sname()) {
        return Vec::new();
    }
    vec![(Field::File, FILE_LEN - 1), (Field::Sname, SNAME_LEN - 1)]
}

/// The reply's options that may leave the options field, most important first: those the
/// client asked for, in the order it asked, then the rest in code order.
fn by_priority(reply: &Message, requested: &[OptionCode]) -> Vec<Encoded> {
    let rank = |code: &OptionCode| {
        requested
            .iter()
            .position(|r| r == code)
            .unwrap_or(requested.len())
    };
    let mut options: Vec<Encoded> = reply
        .opts()
        .iter()
        .filter(|(code, _)| !MAIN_ONLY.contains(code))
        .filter_map(|(code, opt)| {
            Some(Encoded {
                code: *code,
                bytes: encode(opt)?,
            })
        })
        .collect();
    // Stable: unrequested options keep dhcproto's code order.
    options.sort_by_key(|o| rank(&o.code));
    options
}

/// Where each option goes (`None`: nowhere): all in the options field when they fit there,
/// otherwise each, in turn, in the first field with room left for it. An option is never split
/// across fields, so each field decodes on its own.
fn pack(options: &[&Encoded], main_room: usize, spare: &[(Field, usize)]) -> Vec<Option<Field>> {
    let total: usize = options.iter().map(|o| o.bytes.len()).sum();
    if total <= main_room {
        return vec![Some(Field::Options); options.len()];
    }
    let overload = if spare.is_empty() { 0 } else { OVERLOAD_LEN };
    let mut rooms: Vec<(Field, usize)> =
        std::iter::once((Field::Options, main_room.saturating_sub(overload)))
            .chain(spare.iter().copied())
            .collect();
    options
        .iter()
        .map(|o| {
            let (field, room) = rooms.iter_mut().find(|(_, room)| *room >= o.bytes.len())?;
            *room -= o.bytes.len();
            Some(*field)
        })
        .collect()
}

/// Applies a packing to `reply`: options bound for `file` or `sname` leave the options map
/// and are written into their field, closed by END and padded with PAD (zero) bytes by the
/// encoder; option 52 names the fields used. Trimmable options with no place are left out;
/// any other option with no place stays in the options field, over the limit, since a reply
/// without it is of no use to the client.
fn place(reply: &mut Message, options: &[&Encoded], places: &[Option<Field>]) {
    let mut file = Vec::new();
    let mut sname = Vec::new();
    for (o, place) in options.iter().zip(places) {
        let field = match place {
            Some(Field::Options) => continue,
            Some(Field::File) => &mut file,
            Some(Field::Sname) => &mut sname,
            None if TRIMMABLE.contains(&o.code) => {
                reply.opts_mut().remove(o.code);
                continue;
            }
            None => {
                tracing::debug!("dhcp: option {:?} does not fit; sent anyway", o.code);
                continue;
            }
        };
        field.extend_from_slice(&o.bytes);
        reply.opts_mut().remove(o.code);
    }
    // Option 52's value: 1 for `file`, 2 for `sname`, 3 for both (RFC 2132 section 9.3).
    let overload = u8::from(!file.is_empty()) | u8::from(!sname.is_empty()) << 1;
    if !file.is_empty() {
        file.push(END);
        reply.set_fname(&file);
    }
    if !sname.is_empty() {
        sname.push(END);
        reply.set_sname(&sname);
    }
    if overload != 0 {
        reply
            .opts_mut()
            .insert(DhcpOption::OptionOverload(overload));
    }
}

/// An option's wire form as dhcproto writes it in the options field (split per RFC 3396 when
/// longer than 255 bytes). An option dhcproto cannot encode is not moved anywhere: it fails
/// the whole reply's encoding, which the server logs.
fn encode(opt: &DhcpOption) -> Option<Vec<u8>> {
    opt.to_vec().ok()
}
