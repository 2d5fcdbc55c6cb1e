//! From one request to one action: a reply written into a buffer, a query to forward, a zone
//! transfer, or nothing. A pure function of the packet and a [`Context`]; the socket layers
//! around it do the I/O, and the fuzz target drives it directly.

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

use super::authority::{Authority, Outcome};
use super::wire::{
    self, CLASS_ANY, CLASS_IN, CLASSIC_UDP, EDNS_UDP, MAX_NAME, Malformed, Query, Reply, ReplyEdns,
    ReplyFlags, rcode, rtype,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// What the responder knows about the request besides its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub authority: &'a Authority,
    pub transport: Transport,
    /// The client may use the forwarder (it is in an allowed network and upstreams exist).
    pub recursion: bool,
    /// The client may transfer zones (AXFR).
    pub transfer_allowed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `buf[..len]` is the reply; `lower[..qname_len]` the query name (0 when unparsed).
    Reply {
        len: usize,
        outcome: Outcome,
        qname_len: usize,
    },
    /// Not ours; ask the upstreams. `lower[..query.qname_len]` is the lowercase name.
    Forward(Query),
    /// Stream the zone whose origin is the query name (TCP only).
    Transfer(Query),
    Drop,
}

/// Handles one request. `lower` receives the query name in lowercase wire form.
pub fn respond(
    packet: &[u8],
    ctx: &Context<'_>,
    lower: &mut [u8; MAX_NAME],
    buf: &mut Vec<u8>,
) -> Action {
    let query = match wire::parse_query(packet, lower) {
        Ok(q) => q,
        Err(Malformed::Drop) => return Action::Drop,
        Err(Malformed::Reply {
            rcode,
            question_end,
            edns,
        }) => {
            let flags = ReplyFlags {
                authoritative: false,
                recursion_available: false,
                rcode,
            };
            // At most a header, one question and an OPT record: within 512 octets.
            let edns = edns.map(|e| ReplyEdns {
                upper_rcode: 0,
                dnssec_ok: e.dnssec_ok,
            });
            let len = Reply::start(buf, packet, question_end, flags).finish(edns, usize::MAX);
            return Action::Reply {
                len,
                outcome: Outcome::NotOurs,
                qname_len: 0,
            };
        }
    };
    let limit = match ctx.transport {
        Transport::Tcp => usize::from(u16::MAX),
        Transport::Udp => query
            .edns
            .map_or(CLASSIC_UDP, |e| usize::from(e.udp_size.min(EDNS_UDP))),
    };
    let edns = query.edns.map(|e| ReplyEdns {
        upper_rcode: 0,
        dnssec_ok: e.dnssec_ok,
    });

    if let Some(e) = query.edns
        && e.version != 0
    {
        // RFC 6891 section 6.1.3: BADVERS (16) is 1 in the OPT's upper bits, 0 in the header.
        let edns = Some(ReplyEdns {
            upper_rcode: (rcode::BADVERS >> 4) as u8,
            dnssec_ok: e.dnssec_ok,
        });
        return rcode_reply(packet, &query, ctx, buf, rcode::NOERROR, edns, limit);
    }
    let Some(qname) = lower.get(..query.qname_len) else {
        return Action::Drop;
    };
    // Only class IN is served. QCLASS * is answered from it, authoritatively, as Knot does
    // (RFC 1035 section 6.2 asks for AA only when the answer covers every class: every record
    // here is IN). Other classes (CHAOS `version.bind` and the like) are refused.
    if query.qclass != CLASS_IN && query.qclass != CLASS_ANY {
        return rcode_reply(packet, &query, ctx, buf, rcode::REFUSED, edns, limit);
    }
    if matches!(query.qtype, rtype::AXFR | rtype::IXFR) {
        return transfer(packet, &query, qname, ctx, buf, limit, edns);
    }
    // Every other QTYPE is looked up like data, the meta types MAILA, MAILB and OPT included:
    // a name has no records of them, so they get NODATA (or NXDOMAIN), as from Knot and NSD.

    let flags = ReplyFlags {
        authoritative: true,
        recursion_available: ctx.recursion,
        rcode: rcode::NOERROR,
    };
    let mut answer = Reply::start(buf, packet, Some(query.question_end), flags);
    let outcome = ctx.authority.answer(qname, query.qtype, &mut answer);
    if outcome == Outcome::NotOurs {
        if ctx.recursion {
            return Action::Forward(query);
        }
        return rcode_reply(packet, &query, ctx, buf, rcode::REFUSED, edns, limit);
    }
    let len = answer.finish(edns, limit);
    Action::Reply {
        len,
        outcome,
        qname_len: query.qname_len,
    }
}

/// AXFR and IXFR, answered as Knot and NSD do: AXFR over UDP is not defined (RFC 5936
/// section 4.2), NOTIMP; a transfer of a name that is not the apex of a zone served here,
/// NOTAUTH; a transfer the policy does not allow, REFUSED (RFC 1035 4.1.1, its own example);
/// over UDP an allowed IXFR gets the SOA alone, which tells the client to come back over TCP
/// (RFC 1995 section 2).
fn transfer(
    packet: &[u8],
    query: &Query,
    qname: &[u8],
    ctx: &Context<'_>,
    buf: &mut Vec<u8>,
    limit: usize,
    edns: Option<ReplyEdns>,
) -> Action {
    if ctx.transport == Transport::Udp && query.qtype == rtype::AXFR {
        return rcode_reply(packet, query, ctx, buf, rcode::NOTIMP, edns, limit);
    }
    let Some(zone) = ctx.authority.zone(qname) else {
        return rcode_reply(packet, query, ctx, buf, rcode::NOTAUTH, edns, limit);
    };
    // A zone is transferred in its own class only (RFC 5936 section 2.1.1).
    if !ctx.transfer_allowed || query.qclass != CLASS_IN {
        return rcode_reply(packet, query, ctx, buf, rcode::REFUSED, edns, limit);
    }
    if ctx.transport == Transport::Tcp {
        return Action::Transfer(*query);
    }
    let flags = ReplyFlags {
        authoritative: true,
        recursion_available: ctx.recursion,
        rcode: rcode::NOERROR,
    };
    let mut reply = Reply::start(buf, packet, Some(query.question_end), flags);
    reply.push_at_qname(wire::Section::Answer, zone.soa(), 1);
    let len = reply.finish(edns, limit);
    Action::Reply {
        len,
        outcome: Outcome::Answered,
        qname_len: query.qname_len,
    }
}

/// A reply without records: the question, the rcode, and OPT when the query had EDNS.
fn rcode_reply(
    packet: &[u8],
    query: &Query,
    ctx: &Context<'_>,
    buf: &mut Vec<u8>,
    rcode: u8,
    edns: Option<ReplyEdns>,
    limit: usize,
) -> Action {
    let flags = ReplyFlags {
        authoritative: false,
        recursion_available: ctx.recursion,
        rcode,
    };
    let len = Reply::start(buf, packet, Some(query.question_end), flags).finish(edns, limit);
    Action::Reply {
        len,
        outcome: Outcome::NotOurs,
        qname_len: query.qname_len,
    }
}
