//! DNS wire format (RFC 1035 section 4, RFC 6891 EDNS): just enough to read a query and write a
//! reply without allocating.
//!
//! Architecture invariant: bytes in, bytes out. No knowledge of zones, clients or sockets.

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

pub const HEADER_LEN: usize = 12;
/// The largest name on the wire (RFC 1035 section 2.3.4).
pub const MAX_NAME: usize = 255;
/// A reply to a query without EDNS must fit in this (RFC 1035 section 4.2.1).
pub const CLASSIC_UDP: usize = 512;
/// The EDNS payload size we advertise and never exceed over UDP (DNS flag day 2020).
pub const EDNS_UDP: u16 = 1232;

pub mod rtype {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const PTR: u16 = 12;
    pub const HINFO: u16 = 13;
    pub const MX: u16 = 15;
    pub const TXT: u16 = 16;
    pub const AAAA: u16 = 28;
    pub const SRV: u16 = 33;
    pub const OPT: u16 = 41;
    pub const TSIG: u16 = 250;
    pub const IXFR: u16 = 251;
    pub const AXFR: u16 = 252;
    pub const MAILB: u16 = 253;
    pub const MAILA: u16 = 254;
    pub const ANY: u16 = 255;
}

pub const CLASS_IN: u16 = 1;
/// QCLASS `*` (RFC 1035 section 3.2.5).
pub const CLASS_ANY: u16 = 255;

/// The DNS opcodes this server treats differently (RFC 1035 4.1.1, RFC 1996).
pub mod opcode {
    pub const QUERY: u8 = 0;
    pub const NOTIFY: u8 = 4;
}

pub mod rcode {
    pub const NOERROR: u8 = 0;
    pub const FORMERR: u8 = 1;
    pub const SERVFAIL: u8 = 2;
    pub const NXDOMAIN: u8 = 3;
    pub const NOTIMP: u8 = 4;
    pub const REFUSED: u8 = 5;
    /// Not authoritative for the zone (RFC 2136 section 2.2, RFC 1996 section 4.7).
    pub const NOTAUTH: u8 = 9;
    /// Extended: 16 = BADVERS (RFC 6891 section 9), carried as 1 in the OPT's upper bits.
    pub const BADVERS: u16 = 16;
}

/// EDNS parameters a query carried in its OPT record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edns {
    /// The requestor's UDP payload size (values below 512 count as 512).
    pub udp_size: u16,
    pub version: u8,
    pub dnssec_ok: bool,
}

/// A parsed query. Borrowed from the packet; the lowercase name lives in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    pub opcode: u8,
    pub recursion_desired: bool,
    pub checking_disabled: bool,
    pub qtype: u16,
    pub qclass: u16,
    /// Offset just past the question; `packet[12..question_end]` is the question as sent.
    pub question_end: usize,
    /// Length of the qname in wire form (including the root label).
    pub qname_len: usize,
    pub edns: Option<Edns>,
}

/// Why a packet gets no normal answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Not worth a reply: too short for a header, or a response rather than a query.
    Drop,
    /// Answer with this rcode; `question_end` is set when the question parsed and can be echoed.
    Reply {
        rcode: u8,
        question_end: Option<usize>,
        /// The request's EDNS when its OPT record could be read: an error reply carries an OPT
        /// record too (RFC 6891 section 6.1.1: a responder MUST include one when the request had
        /// one), so the client keeps talking EDNS to us.
        edns: Option<Edns>,
    },
}

/// What the sections after the question hold, as far as answering is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Extra {
    edns: Option<Edns>,
    /// A TSIG record: the request is signed.
    signed: bool,
}

/// Walks the answer, authority and additional sections from `pos` (`records` answer and
/// authority records, then `additional` ones) for the OPT and TSIG records. `None` when a
/// record is malformed or the OPT record breaks RFC 6891 section 6.1.1 (not owned by the
/// root, or more than one).
fn read_extra(packet: &[u8], mut pos: usize, records: u32, additional: u16) -> Option<Extra> {
    for _ in 0..records {
        pos = skip_record(packet, pos)?.end;
    }
    let mut extra = Extra {
        edns: None,
        signed: false,
    };
    for _ in 0..additional {
        let rr = skip_record(packet, pos)?;
        if rr.rtype == rtype::OPT {
            if extra.edns.is_some() || rr.owner_len != 1 || packet.get(pos) != Some(&0) {
                return None;
            }
            extra.edns = Some(Edns {
                udp_size: rr.class.max(CLASSIC_UDP as u16),
                version: (rr.ttl >> 16) as u8,
                dnssec_ok: rr.ttl & 0x8000 != 0,
            });
        } else if rr.rtype == rtype::TSIG {
            extra.signed = true;
        }
        pos = rr.end;
    }
    Some(extra)
}

/// Reads a query, writing its name in lowercase wire form into `lower`.
pub fn parse_query(packet: &[u8], lower: &mut [u8; MAX_NAME]) -> Result<Query, Malformed> {
    let Some(Ok(header)) = packet.get(..HEADER_LEN).map(<&[u8; HEADER_LEN]>::try_from) else {
        return Err(Malformed::Drop);
    };
    let flags = u16::from_be_bytes([header[2], header[3]]);
    if flags & 0x8000 != 0 {
        return Err(Malformed::Drop);
    }
    let opcode = ((flags >> 11) & 0xf) as u8;
    let (qdcount, ancount, nscount, arcount) = (
        u16::from_be_bytes([header[4], header[5]]),
        u16::from_be_bytes([header[6], header[7]]),
        u16::from_be_bytes([header[8], header[9]]),
        u16::from_be_bytes([header[10], header[11]]),
    );
    let records = u32::from(ancount) + u32::from(nscount);
    if qdcount != 1 {
        let rcode = if opcode == opcode::QUERY {
            rcode::FORMERR
        } else {
            rcode::NOTIMP
        };
        // Skip whatever questions there are to find the OPT record for the error reply.
        // Each question consumes at least five octets, so a hostile count stops at the end of
        // the packet.
        let mut pos = Some(HEADER_LEN);
        for _ in 0..qdcount {
            let Some(p) = pos else { break };
            pos = skip_name(packet, p)
                .map(|p| p + 4)
                .filter(|&p| p <= packet.len());
        }
        let edns = pos
            .and_then(|p| read_extra(packet, p, records, arcount))
            .and_then(|e| e.edns);
        return Err(Malformed::Reply {
            rcode,
            question_end: None,
            edns,
        });
    }
    let formerr = Malformed::Reply {
        rcode: rcode::FORMERR,
        question_end: None,
        edns: None,
    };
    let qname_len = read_question_name(packet, HEADER_LEN, lower).ok_or(formerr)?;
    let mut pos = HEADER_LEN + qname_len;
    let Some(&[t0, t1, c0, c1]) = packet.get(pos..pos + 4) else {
        return Err(formerr);
    };
    let (qtype, qclass) = (u16::from_be_bytes([t0, t1]), u16::from_be_bytes([c0, c1]));
    pos += 4;
    let question_end = pos;
    let extra = read_extra(packet, pos, records, arcount);
    if opcode != opcode::QUERY {
        // The appliance is nobody's secondary: a NOTIFY concerns a zone it is not a secondary
        // for, NOTAUTH (RFC 1996 section 4.7; Knot answers the same). UPDATE and the rest are
        // not implemented. A request we can't walk further still gets its rcode, only without
        // an OPT record.
        let rcode = if opcode == opcode::NOTIFY {
            rcode::NOTAUTH
        } else {
            rcode::NOTIMP
        };
        return Err(Malformed::Reply {
            rcode,
            question_end: Some(question_end),
            edns: extra.and_then(|e| e.edns),
        });
    }
    let extra = extra.ok_or(Malformed::Reply {
        rcode: rcode::FORMERR,
        question_end: Some(question_end),
        edns: None,
    })?;
    if extra.signed {
        // Signed requests need keys we don't have.
        return Err(Malformed::Reply {
            rcode: rcode::NOTIMP,
            question_end: Some(question_end),
            edns: extra.edns,
        });
    }
    Ok(Query {
        id: u16::from_be_bytes([header[0], header[1]]),
        opcode,
        recursion_desired: flags & 0x0100 != 0,
        checking_disabled: flags & 0x0010 != 0,
        qtype,
        qclass,
        question_end,
        qname_len,
        edns: extra.edns,
    })
}

/// An uncompressed name at `start` (a query's first name can't point anywhere), lowercased into
/// `lower`. Returns its wire length.
fn read_question_name(packet: &[u8], start: usize, lower: &mut [u8; MAX_NAME]) -> Option<usize> {
    let mut pos = start;
    loop {
        let len = usize::from(*packet.get(pos)?);
        if len & 0xc0 != 0 {
            return None;
        }
        let end = pos + 1 + len;
        if end - start > MAX_NAME {
            return None;
        }
        let label = packet.get(pos + 1..end)?;
        let [out_len, out @ ..] = lower.get_mut(pos - start..end - start)? else {
            return None;
        };
        *out_len = len as u8;
        for (o, b) in out.iter_mut().zip(label) {
            *o = b.to_ascii_lowercase();
        }
        pos = end;
        if len == 0 {
            return Some(pos - start);
        }
    }
}

/// What `skip_record` learns about a resource record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub owner_len: usize,
    pub rtype: u16,
    pub class: u16,
    pub ttl: u32,
    /// Offset of the TTL field.
    pub ttl_at: usize,
    pub rdata_at: usize,
    pub end: usize,
}

/// Walks one resource record at `pos` (owner possibly compressed).
pub fn skip_record(packet: &[u8], pos: usize) -> Option<RecordHeader> {
    let name_end = skip_name(packet, pos)?;
    let fixed: &[u8; 10] = packet.get(name_end..name_end + 10)?.try_into().ok()?;
    let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
    let end = name_end + 10 + rdlen;
    if end > packet.len() {
        return None;
    }
    Some(RecordHeader {
        owner_len: name_end - pos,
        rtype: u16::from_be_bytes([fixed[0], fixed[1]]),
        class: u16::from_be_bytes([fixed[2], fixed[3]]),
        ttl: u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]),
        ttl_at: name_end + 4,
        rdata_at: name_end + 10,
        end,
    })
}

/// The offset past a possibly compressed name at `pos`.
pub fn skip_name(packet: &[u8], mut pos: usize) -> Option<usize> {
    let mut total = 0usize;
    loop {
        let len = *packet.get(pos)?;
        match len & 0xc0 {
            0x00 => {
                total += usize::from(len) + 1;
                if total > MAX_NAME {
                    return None;
                }
                pos += usize::from(len) + 1;
                if len == 0 {
                    return (pos <= packet.len()).then_some(pos);
                }
            }
            0xc0 => {
                packet.get(pos + 1)?;
                return Some(pos + 2);
            }
            _ => return None,
        }
    }
}

/// Reads a possibly compressed name at `pos` into lowercase wire form; pointers must point
/// backwards, so a hostile packet can't loop.
pub fn read_name(packet: &[u8], mut pos: usize, out: &mut [u8; MAX_NAME]) -> Option<usize> {
    let mut written = 0usize;
    let mut limit = pos;
    loop {
        let len = *packet.get(pos)?;
        match len & 0xc0 {
            0x00 => {
                let len = usize::from(len);
                if written + len + 1 > MAX_NAME {
                    return None;
                }
                let label = packet.get(pos + 1..pos + 1 + len)?;
                let [out_len, dst @ ..] = out.get_mut(written..written + 1 + len)? else {
                    return None;
                };
                *out_len = len as u8;
                for (d, b) in dst.iter_mut().zip(label) {
                    *d = b.to_ascii_lowercase();
                }
                written += len + 1;
                if len == 0 {
                    return Some(written);
                }
                pos += len + 1;
            }
            0xc0 => {
                let target = usize::from(u16::from_be_bytes([len, *packet.get(pos + 1)?]) & 0x3fff);
                if target >= limit {
                    return None;
                }
                limit = target;
                pos = target;
            }
            _ => return None,
        }
    }
}

/// Offsets of the labels of a wire name (the root label excluded): `[0, 4, 8]` for
/// `\3api\3okd\4test\0`.
pub fn label_offsets(name: &[u8], out: &mut [u8; 128]) -> usize {
    let mut n = 0;
    let mut pos = 0;
    while let Some(&len) = name.get(pos)
        && len != 0
        && let Some(slot) = out.get_mut(n)
    {
        *slot = pos as u8;
        n += 1;
        pos += usize::from(len) + 1;
    }
    n
}

/// Converts `api.okd.test.` (or without the trailing dot) to lowercase wire form.
pub fn name_to_wire(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 2);
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        out.push(label.len() as u8);
        out.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    }
    out.push(0);
    out
}

/// Builds a reply in a reusable buffer: header, the question copied as sent (its case kept),
/// then records in section order; `finish` adds the OPT record and truncates to the size the
/// client accepts.
#[derive(Debug)]
pub struct Reply<'b> {
    buf: &'b mut Vec<u8>,
    counts: [u16; 3],
    question_end: usize,
    section: Section,
}

/// The reply sections, in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    Answer = 0,
    Authority = 1,
    Additional = 2,
}

/// Header bits of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyFlags {
    pub authoritative: bool,
    pub recursion_available: bool,
    pub rcode: u8,
}

/// What the OPT record of a reply carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyEdns {
    /// The upper 8 bits of a 12-bit extended rcode (1 for BADVERS).
    pub upper_rcode: u8,
    /// Copied from the query (RFC 3225 section 3).
    pub dnssec_ok: bool,
}

impl<'b> Reply<'b> {
    /// Starts a reply to the query in `packet`, echoing `packet[12..question_end]`.
    pub fn start(
        buf: &'b mut Vec<u8>,
        packet: &[u8],
        question_end: Option<usize>,
        flags: ReplyFlags,
    ) -> Self {
        buf.clear();
        let (id, request_flags) = match packet {
            [a, b, c, d, ..] => ([*a, *b], u16::from_be_bytes([*c, *d])),
            _ => ([0, 0], 0),
        };
        // QR set; the request's opcode, RD and CD copied; AA and RA as given.
        let mut f = 0x8000 | (request_flags & 0x7800) | (request_flags & 0x0110);
        if flags.authoritative {
            f |= 0x0400;
        }
        if flags.recursion_available {
            f |= 0x0080;
        }
        f |= u16::from(flags.rcode & 0xf);
        buf.extend_from_slice(&id);
        buf.extend_from_slice(&f.to_be_bytes());
        let question = question_end.and_then(|end| packet.get(HEADER_LEN..end));
        let qd: u16 = question.is_some().into();
        buf.extend_from_slice(&qd.to_be_bytes());
        buf.extend_from_slice(&[0; 6]);
        buf.extend_from_slice(question.unwrap_or_default());
        let question_end = buf.len();
        Reply {
            buf,
            counts: [0; 3],
            question_end,
            section: Section::Answer,
        }
    }

    pub fn set_rcode(&mut self, rcode: u8) {
        if let Some(flags) = self.buf.get_mut(3) {
            *flags = (*flags & 0xf0) | (rcode & 0xf);
        }
    }

    fn count_of(&mut self, section: Section) -> &mut u16 {
        let [answer, authority, additional] = &mut self.counts;
        match section {
            Section::Answer => answer,
            Section::Authority => authority,
            Section::Additional => additional,
        }
    }

    fn enter(&mut self, section: Section) {
        debug_assert!(section >= self.section, "sections are written in order");
        self.section = section;
    }

    /// Appends `count` records owned by the query name (a pointer to offset 12), stored back
    /// to back in `tails` as type, class, TTL, length and data.
    pub fn push_at_qname(&mut self, section: Section, tails: &[u8], count: u16) {
        self.enter(section);
        for tail in Tails(tails).take(usize::from(count)) {
            self.buf.extend_from_slice(&[0xc0, 0x0c]);
            self.buf.extend_from_slice(tail);
        }
        *self.count_of(section) += count;
    }

    /// Appends `count` records owned by `owner` (wire form), stored back to back in `tails`.
    pub fn push_owned(&mut self, section: Section, owner: &[u8], tails: &[u8], count: u16) {
        self.enter(section);
        for tail in Tails(tails).take(usize::from(count)) {
            self.buf.extend_from_slice(owner);
            self.buf.extend_from_slice(tail);
        }
        *self.count_of(section) += count;
    }

    /// Writes the counts and the OPT record (when the query had EDNS) and truncates to `limit`:
    /// a reply that does not fit keeps only its question and gets TC (RFC 2181 section 9), and
    /// the OPT record is kept (RFC 6891 section 7). Returns the reply's length.
    pub fn finish(self, edns: Option<ReplyEdns>, limit: usize) -> usize {
        const OPT_LEN: usize = 11;
        let opt_len = if edns.is_some() { OPT_LEN } else { 0 };
        let mut counts = self.counts;
        if self.buf.len() + opt_len > limit {
            self.buf.truncate(self.question_end);
            counts = [0; 3];
            if let Some(flags) = self.buf.get_mut(2) {
                *flags |= 0x02;
            }
        }
        put_u16(self.buf, 6, counts[0]);
        put_u16(self.buf, 8, counts[1]);
        let mut arcount = counts[2];
        if let Some(e) = edns {
            // Root owner, type OPT, class = our payload size, TTL = extended rcode, version 0, DO.
            self.buf.push(0);
            self.buf.extend_from_slice(&rtype::OPT.to_be_bytes());
            self.buf.extend_from_slice(&EDNS_UDP.to_be_bytes());
            let ttl = (u32::from(e.upper_rcode) << 24) | if e.dnssec_ok { 0x8000 } else { 0 };
            self.buf.extend_from_slice(&ttl.to_be_bytes());
            self.buf.extend_from_slice(&0u16.to_be_bytes());
            arcount += 1;
        }
        put_u16(self.buf, 10, arcount);
        self.buf.len()
    }
}

/// Writes `value` at `at` of a message whose header is whole (a reply under construction, a
/// cached one); a shorter buffer is left as it is.
pub fn put_u16(buf: &mut [u8], at: usize, value: u16) {
    if let Some(field) = buf.get_mut(at..at + 2) {
        field.copy_from_slice(&value.to_be_bytes());
    }
}

/// Stored record tails back to back: type, class, TTL, RDLENGTH (10 bytes) and the data, each.
struct Tails<'a>(&'a [u8]);

impl<'a> Iterator for Tails<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let &[.., hi, lo] = self.0.get(..10)? else {
            return None;
        };
        let (tail, rest) = self
            .0
            .split_at_checked(10 + usize::from(u16::from_be_bytes([hi, lo])))?;
        self.0 = rest;
        Some(tail)
    }
}

/// Encodes a record tail: type, class IN, TTL, RDLENGTH and `rdata`.
pub fn encode_tail(out: &mut Vec<u8>, rtype: u16, ttl: u32, rdata: &[u8]) {
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    out.extend_from_slice(rdata);
}
