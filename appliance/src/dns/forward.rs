//! Forwarding names outside the cluster to the upstream resolvers, with a cache.
//!
//! An upstream reply is accepted only from the upstream asked (a connected socket), with the
//! random ID sent and the question exactly as sent, case included. Truncated replies are
//! fetched again over TCP. Every exchange is bounded in time: an unreachable upstream yields
//! SERVFAIL within 3 s, never a hang. A cached reply is served as a copy with the client's ID
//! and question case and its TTLs counted down; negative answers are cached for the SOA's
//! negative TTL (RFC 2308) and SERVFAIL never.
//!
//! The cache is bounded in bytes (every entry weighs its reply, its TTL index and its key), not
//! in entries: 64 KiB replies can't make it grow past [`MAX_CACHE_BYTES`] (16 MiB; quick_cache's
//! S3-FIFO evicts). Its key holds the CD bit besides name, type and class (RFC 4035 section
//! 4.7: data fetched with checking disabled must not answer a client that wants it checked).
//! Section counts of an upstream reply are only believed as far as its bytes go: they never
//! size an allocation.
//!
//! Architecture invariant: knows upstreams and the cache; not who may recurse (the caller
//! decided) and not the cluster zones (never forwarded).

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::wire::{self, EDNS_UDP, HEADER_LEN, Query, rcode, rtype};

/// One upstream gets this long per attempt over UDP.
const UDP_ATTEMPT: Duration = Duration::from_millis(1200);
const TCP_ATTEMPT: Duration = Duration::from_secs(2);
/// All attempts together; the client sees SERVFAIL after this at most.
const DEADLINE: Duration = Duration::from_secs(3);
/// What the cache may hold, counted as `Entry::weight` plus the key and `ENTRY_OVERHEAD`.
pub const MAX_CACHE_BYTES: u64 = 16 * 1024 * 1024;
/// Per entry beyond its reply and key: the `Arc`, the heap headers, the map slot.
const ENTRY_OVERHEAD: u64 = 128;
/// A typical cached reply, for sizing the cache's index up front.
const TYPICAL_ENTRY: u64 = 512;
/// The smallest resource record on the wire: a root owner (1), type, class, TTL and RDLENGTH
/// (10), no data. A reply can't hold more records than its bytes allow for.
const MIN_RECORD: usize = 11;
/// Cap on how long anything stays cached.
const MAX_TTL: u32 = 86_400;

#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("too many upstream queries in flight")]
    Busy,
    #[error("no upstream resolver configured")]
    NoUpstream,
    #[error("no upstream answered within {0:?}")]
    Timeout(Duration),
    #[error("upstream {upstream}: {reason}")]
    Upstream {
        upstream: SocketAddr,
        reason: String,
    },
}

#[derive(Debug)]
pub struct Forwarder {
    cache: Cache,
    /// Upstream queries in flight at once (`budget::Kind::Forwards`, each a socket of the
    /// process's descriptors); more get SERVFAIL at once instead of piling up.
    in_flight: crate::budget::Gate,
}

/// Cached replies by [`key`], weighed in bytes.
type Cache = quick_cache::sync::Cache<Box<[u8]>, Arc<Entry>, EntryWeight>;

/// How much memory an entry holds, for the cache's byte bound.
#[derive(Debug, Clone, Copy)]
struct EntryWeight;

impl quick_cache::Weighter<Box<[u8]>, Arc<Entry>> for EntryWeight {
    fn weight(&self, key: &Box<[u8]>, entry: &Arc<Entry>) -> u64 {
        entry.weight() + key.len() as u64 + ENTRY_OVERHEAD
    }
}

impl Default for Forwarder {
    fn default() -> Self {
        let budget = crate::budget::Budget::unbounded();
        let at = SocketAddr::from(([0; 4], 0));
        Forwarder::new(
            MAX_CACHE_BYTES,
            budget.gate(crate::budget::Kind::Forwards, at),
        )
    }
}

/// A reply as the upstream sent it, minus its OPT record, with where its TTLs are.
#[derive(Debug, Clone)]
pub struct Entry {
    bytes: Vec<u8>,
    question_end: usize,
    ttl_at: Vec<usize>,
    stored: Instant,
    /// Seconds it may be served from cache; 0 means not cacheable.
    ttl: u32,
}

/// The cache key: lowercase name, type, class and the CD bit, in a stack buffer. CD is part
/// of it because an upstream that validates answers a CD query with data it would refuse
/// (SERVFAIL) without CD; serving that to a client that did not set CD would hand it data
/// that failed validation (RFC 4035 section 4.7).
fn key<'b>(query: &Query, lower: &[u8], buf: &'b mut [u8; wire::MAX_NAME + 5]) -> &'b [u8] {
    // `lower` is a parsed name: at most MAX_NAME bytes, so the key always fits.
    let [qt0, qt1] = query.qtype.to_be_bytes();
    let [qc0, qc1] = query.qclass.to_be_bytes();
    let tail = [qt0, qt1, qc0, qc1, u8::from(query.checking_disabled)];
    let n = lower.len();
    if let Some((name, rest)) = buf.split_at_mut_checked(n)
        && let Some(after) = rest.first_chunk_mut::<5>()
    {
        name.copy_from_slice(lower);
        *after = tail;
    }
    buf.get(..n + 5).unwrap_or_default()
}

impl Forwarder {
    /// A forwarder whose cache holds at most `bytes` (see [`MAX_CACHE_BYTES`]), whose upstream
    /// queries in flight are admitted by `in_flight`.
    pub fn new(bytes: u64, in_flight: crate::budget::Gate) -> Forwarder {
        Forwarder {
            cache: Cache::with_weighter(
                usize::try_from(bytes / TYPICAL_ENTRY).unwrap_or(usize::MAX),
                bytes,
                EntryWeight,
            ),
            in_flight,
        }
    }

    /// Serves `packet` from the cache into `out`; returns the reply's length on a hit.
    pub fn cached(
        &self,
        packet: &[u8],
        query: &Query,
        lower: &[u8],
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        let mut k = [0u8; wire::MAX_NAME + 5];
        let k = key(query, lower, &mut k);
        let entry = self.cache.get(k)?;
        let age = Instant::now().duration_since(entry.stored).as_secs();
        if age >= u64::from(entry.ttl) {
            self.cache.remove(k);
            return None;
        }
        Some(entry.write_reply(packet, query, age as u32, limit, out))
    }

    /// Asks the upstreams, caches what may be cached, and writes the reply for `packet`.
    pub async fn forward(
        &self,
        packet: &[u8],
        query: &Query,
        lower: &[u8],
        upstreams: &[SocketAddr],
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, ForwardError> {
        if upstreams.is_empty() {
            return Err(ForwardError::NoUpstream);
        }
        let _ticket = self.in_flight.take().map_err(|_| ForwardError::Busy)?;
        let id: u16 = rand::random();
        let upstream_query = upstream_query(packet, query, id);
        let exchange = async {
            let mut last = None;
            for &upstream in upstreams {
                match exchange(upstream, &upstream_query, query.question_end).await {
                    Ok(reply) => {
                        // `exchange` returns only replies that `matches` (a whole header).
                        let code = reply.get(3).map_or(rcode::SERVFAIL, |b| b & 0x0f);
                        // Another upstream may do better than SERVFAIL or REFUSED.
                        if code == rcode::SERVFAIL || code == rcode::REFUSED {
                            last = Some(Err(ForwardError::Upstream {
                                upstream,
                                reason: format!("answered rcode {code}"),
                            }));
                            continue;
                        }
                        return Ok(reply);
                    }
                    Err(e) => last = Some(Err(e)),
                }
            }
            last.expect("at least one upstream")
        };
        let reply = tokio::time::timeout(DEADLINE, exchange)
            .await
            .map_err(|_| ForwardError::Timeout(DEADLINE))??;
        let entry = Entry::from_reply(reply, query.question_end).map_err(|reason| {
            ForwardError::Upstream {
                upstream: upstreams
                    .first()
                    .copied()
                    .unwrap_or(SocketAddr::from(([0; 4], 0))),
                reason: reason.to_owned(),
            }
        })?;
        let len = entry.write_reply(packet, query, 0, limit, out);
        self.store(query, lower, entry);
        Ok(len)
    }

    /// Caches `entry` as the answer to `query` if it may be cached. The cache evicts what it
    /// must to stay within its bytes; an expired entry goes when it is next looked up or
    /// evicted, whichever comes first.
    fn store(&self, query: &Query, lower: &[u8], entry: Entry) {
        if entry.ttl > 0 {
            let mut k = [0u8; wire::MAX_NAME + 5];
            let k: Box<[u8]> = key(query, lower, &mut k).into();
            self.cache.insert(k, Arc::new(entry));
        }
    }

    pub fn cached_entries(&self) -> usize {
        self.cache.len()
    }

    /// The weight of everything cached, in bytes as `EntryWeight` counts them.
    pub fn cached_bytes(&self) -> u64 {
        self.cache.weight()
    }
}

/// The client's question with a fresh ID, RD set and our own OPT (no DNSSEC: we don't validate).
fn upstream_query(packet: &[u8], query: &Query, id: u16) -> Vec<u8> {
    let mut q = Vec::with_capacity(query.question_end + 11);
    q.extend_from_slice(&id.to_be_bytes());
    let cd = if query.checking_disabled { 0x10 } else { 0 };
    q.extend_from_slice(&[0x01, cd]);
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 1]);
    q.extend_from_slice(
        packet
            .get(HEADER_LEN..query.question_end)
            .unwrap_or_default(),
    );
    q.push(0);
    q.extend_from_slice(&rtype::OPT.to_be_bytes());
    q.extend_from_slice(&EDNS_UDP.to_be_bytes());
    q.extend_from_slice(&[0; 6]);
    q
}

/// Whether `reply` answers `query` (same ID and the same question, byte for byte).
fn matches(reply: &[u8], query: &[u8], question_end: usize) -> bool {
    let (Some(reply_head), Some(query_head)) =
        (reply.get(..question_end), query.get(..question_end))
    else {
        return false;
    };
    let (Some(r), Some(q)) = (
        reply_head.first_chunk::<HEADER_LEN>(),
        query_head.first_chunk::<HEADER_LEN>(),
    ) else {
        return false;
    };
    r[..2] == q[..2]
        && r[2] & 0x80 != 0
        && r[4..6] == [0, 1]
        && reply_head.get(HEADER_LEN..) == query_head.get(HEADER_LEN..)
}

async fn exchange(
    upstream: SocketAddr,
    query: &[u8],
    question_end: usize,
) -> Result<Vec<u8>, ForwardError> {
    let err = |reason: String| ForwardError::Upstream { upstream, reason };
    let bind: SocketAddr = if upstream.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    // A fresh socket per query: the kernel picks a random source port (RFC 5452).
    let socket = UdpSocket::bind(bind)
        .await
        .map_err(|e| err(e.to_string()))?;
    socket
        .connect(upstream)
        .await
        .map_err(|e| err(e.to_string()))?;
    socket.send(query).await.map_err(|e| err(e.to_string()))?;
    let mut buf = vec![0u8; usize::from(EDNS_UDP) * 4];
    let deadline = tokio::time::Instant::now() + UDP_ATTEMPT;
    let reply = loop {
        let n = match tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
            Err(_) => return Err(err(format!("no answer within {UDP_ATTEMPT:?}"))),
            Ok(Err(e)) => return Err(err(e.to_string())),
            Ok(Ok(n)) => n,
        };
        // Anything that is not the answer to this question is ignored (spoofing, stale replies).
        if matches(buf.get(..n).unwrap_or_default(), query, question_end) {
            buf.truncate(n);
            break buf;
        }
    };
    // TC clear (`matches` saw a whole header).
    if reply.get(2).is_some_and(|flags| flags & 0x02 == 0) {
        return Ok(reply);
    }
    // Truncated: the whole answer over TCP.
    tokio::time::timeout(TCP_ATTEMPT, exchange_tcp(upstream, query, question_end))
        .await
        .map_err(|_| err(format!("no TCP answer within {TCP_ATTEMPT:?}")))?
}

async fn exchange_tcp(
    upstream: SocketAddr,
    query: &[u8],
    question_end: usize,
) -> Result<Vec<u8>, ForwardError> {
    let err = |reason: String| ForwardError::Upstream { upstream, reason };
    let mut stream = TcpStream::connect(upstream)
        .await
        .map_err(|e| err(e.to_string()))?;
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(query);
    stream
        .write_all(&framed)
        .await
        .map_err(|e| err(e.to_string()))?;
    let len = stream.read_u16().await.map_err(|e| err(e.to_string()))?;
    let mut reply = vec![0u8; usize::from(len)];
    stream
        .read_exact(&mut reply)
        .await
        .map_err(|e| err(e.to_string()))?;
    if !matches(&reply, query, question_end) {
        return Err(err("TCP answer does not match the question".into()));
    }
    Ok(reply)
}

impl Entry {
    /// Indexes an upstream reply: removes its OPT record, finds the TTLs, works out how long
    /// it may be cached.
    fn from_reply(mut bytes: Vec<u8>, question_end: usize) -> Result<Entry, &'static str> {
        let header = *bytes
            .first_chunk::<HEADER_LEN>()
            .ok_or("short upstream reply")?;
        let count = |hi: u8, lo: u8| usize::from(u16::from_be_bytes([hi, lo]));
        let (an, ns, ar) = (
            count(header[6], header[7]),
            count(header[8], header[9]),
            count(header[10], header[11]),
        );
        let code = header[3] & 0x0f;
        let mut pos = question_end;
        // The counts are the upstream's word; the bytes bound how many records there can be.
        let room = bytes.len().saturating_sub(question_end) / MIN_RECORD;
        let mut ttl_at = Vec::with_capacity((an + ns + ar).min(room));
        let mut min_ttl = MAX_TTL;
        let mut negative_ttl = None;
        let mut opt = None;
        for i in 0..an + ns + ar {
            let rr =
                wire::skip_record(&bytes, pos).ok_or("malformed record in the upstream reply")?;
            if rr.rtype == rtype::OPT {
                if i != an + ns + ar - 1 {
                    return Err("OPT record not last in the upstream reply");
                }
                opt = Some(pos);
            } else {
                ttl_at.push(rr.ttl_at);
                min_ttl = min_ttl.min(rr.ttl);
                if rr.rtype == rtype::SOA
                    && i >= an
                    && i < an + ns
                    && rr.end >= rr.rdata_at + 4
                    && let Some(m) = bytes.get(rr.end - 4..rr.end).and_then(|m| m.first_chunk())
                {
                    negative_ttl = Some(rr.ttl.min(u32::from_be_bytes(*m)));
                }
            }
            pos = rr.end;
        }
        if let Some(at) = opt {
            bytes.truncate(at);
            let ar = (ar - 1) as u16;
            wire::put_u16(&mut bytes, 10, ar);
        } else {
            bytes.truncate(pos);
        }
        // The receive buffer is larger than most replies; keep only what the reply needs.
        bytes.shrink_to_fit();
        ttl_at.shrink_to_fit();
        let negative = code == rcode::NXDOMAIN || (code == rcode::NOERROR && an == 0);
        let ttl = match code {
            _ if header[2] & 0x02 != 0 => 0,
            rcode::NOERROR | rcode::NXDOMAIN if negative => negative_ttl.unwrap_or(0).min(MAX_TTL),
            rcode::NOERROR => min_ttl,
            _ => 0,
        };
        Ok(Entry {
            bytes,
            question_end,
            ttl_at,
            stored: Instant::now(),
            ttl,
        })
    }

    /// The heap bytes this entry holds.
    fn weight(&self) -> u64 {
        (self.bytes.capacity() + self.ttl_at.capacity() * std::mem::size_of::<usize>()) as u64
    }

    /// This reply, addressed to `packet`: its ID and question (with its case), TTLs aged by
    /// `age` seconds, OPT when the client sent one, truncated to `limit`.
    fn write_reply(
        &self,
        packet: &[u8],
        query: &Query,
        age: u32,
        limit: usize,
        out: &mut Vec<u8>,
    ) -> usize {
        out.clear();
        out.extend_from_slice(&self.bytes);
        // The entry and the request both have whole headers and the same question (the cache
        // key is its lowercase name, type and class): nothing below is ever skipped.
        if let (Some(o), Some(p)) = (
            out.first_chunk_mut::<HEADER_LEN>(),
            packet.first_chunk::<HEADER_LEN>(),
        ) {
            (o[0], o[1]) = (p[0], p[1]);
            // Not authoritative; RD as the client asked, RA since we recursed for it.
            o[2] = (o[2] & !0x05) | (p[2] & 0x01);
            o[3] |= 0x80;
        }
        if let (Some(o), Some(p)) = (
            out.get_mut(HEADER_LEN..self.question_end),
            packet.get(HEADER_LEN..query.question_end),
        ) && o.len() == p.len()
        {
            o.copy_from_slice(p);
        }
        for &at in &self.ttl_at {
            if let Some(field) = out.get_mut(at..).and_then(|f| f.first_chunk_mut::<4>()) {
                *field = u32::from_be_bytes(*field).saturating_sub(age).to_be_bytes();
            }
        }
        let opt_len = if query.edns.is_some() { 11 } else { 0 };
        if out.len() + opt_len > limit {
            out.truncate(self.question_end);
            if let Some(o) = out.first_chunk_mut::<HEADER_LEN>() {
                o[6..].fill(0);
                o[2] |= 0x02;
            }
        }
        if let Some(e) = query.edns {
            out.push(0);
            out.extend_from_slice(&rtype::OPT.to_be_bytes());
            out.extend_from_slice(&EDNS_UDP.to_be_bytes());
            out.extend_from_slice(&[0, 0, if e.dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
            if let Some(o) = out.first_chunk_mut::<HEADER_LEN>() {
                let ar = u16::from_be_bytes([o[10], o[11]]).wrapping_add(1);
                [o[10], o[11]] = ar.to_be_bytes();
            }
        }
        out.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name` (`\3www\7example\3org\0` style wire form) with EDNS, CD as given.
    fn query_packet(name: &[u8], qtype: u16, cd: bool) -> Vec<u8> {
        let mut p = vec![0x12, 0x34, 0x01, if cd { 0x10 } else { 0 }];
        p.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(name);
        p.extend_from_slice(&qtype.to_be_bytes());
        p.extend_from_slice(&wire::CLASS_IN.to_be_bytes());
        p.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        p
    }

    fn parse(packet: &[u8]) -> (Query, Vec<u8>) {
        let mut lower = [0u8; wire::MAX_NAME];
        let q = wire::parse_query(packet, &mut lower).expect("a valid query");
        (q, lower[..q.qname_len].to_vec())
    }

    /// An upstream's reply to `query`: its question, then `records` records owned by the
    /// question name (a pointer) of type NULL with `rdata_len` bytes each, TTL 300.
    fn reply_to(query: &[u8], q: &Query, records: u16, rdata_len: u16) -> Vec<u8> {
        let mut r = query[..q.question_end].to_vec();
        r[2] |= 0x80;
        r[3] = (r[3] & 0xf0) | 0x80;
        r[6..8].copy_from_slice(&records.to_be_bytes());
        r[10..12].fill(0);
        for _ in 0..records {
            r.extend_from_slice(&[0xc0, 0x0c, 0, 10, 0, 1]);
            r.extend_from_slice(&300u32.to_be_bytes());
            r.extend_from_slice(&rdata_len.to_be_bytes());
            r.resize(r.len() + usize::from(rdata_len), 0xab);
        }
        r
    }

    fn name(i: usize) -> Vec<u8> {
        let label = format!("n{i}");
        let mut n = vec![label.len() as u8];
        n.extend_from_slice(label.as_bytes());
        n.extend_from_slice(b"\x07example\x03org\x00");
        n
    }

    #[test]
    fn the_cache_is_bounded_in_bytes_not_entries() {
        let forwarder = Forwarder::default();
        // 400 replies of 60 KiB each: 24 MB, far below the old 20 000-entry bound, far above
        // what the cache may hold.
        let count = 400;
        for i in 0..count {
            let packet = query_packet(&name(i), 10, false);
            let (q, lower) = parse(&packet);
            let entry = Entry::from_reply(reply_to(&packet, &q, 1, 60 * 1024), q.question_end)
                .expect("a well-formed reply");
            assert!(entry.weight() >= 60 * 1024);
            forwarder.store(&q, &lower, entry);
            assert!(
                forwarder.cached_bytes() <= MAX_CACHE_BYTES,
                "{} bytes cached after {} replies",
                forwarder.cached_bytes(),
                i + 1
            );
        }
        let held = forwarder.cached_entries();
        assert!(
            held < count && u64::try_from(held).unwrap() * 60 * 1024 <= MAX_CACHE_BYTES,
            "{held} entries of 60 KiB held"
        );
        // The newest reply is served.
        let packet = query_packet(&name(count - 1), 10, false);
        let (q, lower) = parse(&packet);
        let mut out = Vec::new();
        assert!(
            forwarder
                .cached(&packet, &q, &lower, 65_535, &mut out)
                .is_some()
        );
    }

    #[test]
    fn small_replies_weigh_what_they_hold_not_the_receive_buffer() {
        let packet = query_packet(&name(1), 1, false);
        let (q, _) = parse(&packet);
        // As `exchange` receives it: a buffer of four times the EDNS size, cut to the reply.
        let mut bytes = vec![0u8; usize::from(EDNS_UDP) * 4];
        let reply = reply_to(&packet, &q, 1, 4);
        bytes[..reply.len()].copy_from_slice(&reply);
        bytes.truncate(reply.len());
        let entry = Entry::from_reply(bytes, q.question_end).unwrap();
        assert!(entry.weight() < 200, "weighs {}", entry.weight());
    }

    #[test]
    fn the_cd_bit_is_part_of_the_cache_key() {
        let forwarder = Forwarder::default();
        let name = name(7);
        let with_cd = query_packet(&name, 1, true);
        let (q_cd, lower) = parse(&with_cd);
        let entry = Entry::from_reply(reply_to(&with_cd, &q_cd, 1, 4), q_cd.question_end).unwrap();
        forwarder.store(&q_cd, &lower, entry);
        let mut out = Vec::new();
        // Data fetched with checking disabled answers CD queries only (RFC 4035 section 4.7).
        let without_cd = query_packet(&name, 1, false);
        let (q, lower) = parse(&without_cd);
        assert_eq!(
            forwarder.cached(&without_cd, &q, &lower, 512, &mut out),
            None
        );
        assert!(
            forwarder
                .cached(&with_cd, &q_cd, &lower, 512, &mut out)
                .is_some()
        );
        // And the other way round: a reply to a query without CD is not served to CD queries.
        let other = query_packet(&self::name(8), 1, false);
        let (q, lower) = parse(&other);
        forwarder.store(
            &q,
            &lower,
            Entry::from_reply(reply_to(&other, &q, 1, 4), q.question_end).unwrap(),
        );
        let other_cd = query_packet(&self::name(8), 1, true);
        let (q_cd, _) = parse(&other_cd);
        assert!(
            forwarder
                .cached(&other, &q, &lower, 512, &mut out)
                .is_some()
        );
        assert_eq!(
            forwarder.cached(&other_cd, &q_cd, &lower, 512, &mut out),
            None
        );
    }

    #[tokio::test]
    async fn a_cd_answer_from_a_validating_upstream_is_not_served_without_cd() {
        // A validating upstream: data that fails validation comes only with CD; without CD it
        // answers SERVFAIL.
        let upstream = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = upstream.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            for _ in 0..4 {
                let Ok((n, from)) = upstream.recv_from(&mut buf).await else {
                    return;
                };
                let request = &buf[..n];
                let (q, _) = parse(request);
                let reply = if request[3] & 0x10 != 0 {
                    reply_to(request, &q, 1, 4)
                } else {
                    let mut r = request[..q.question_end].to_vec();
                    r[2] |= 0x80;
                    r[3] = (r[3] & 0xf0) | rcode::SERVFAIL;
                    r[10..12].fill(0);
                    r
                };
                let _ = upstream.send_to(&reply, from).await;
            }
        });
        let forwarder = Forwarder::default();
        let name = name(9);
        let mut out = Vec::new();
        let with_cd = query_packet(&name, 1, true);
        let (q_cd, lower) = parse(&with_cd);
        let len = forwarder
            .forward(&with_cd, &q_cd, &lower, &[addr], 1232, &mut out)
            .await
            .expect("the CD query is answered");
        assert_eq!(u16::from_be_bytes([out[6], out[7]]), 1, "one answer");
        assert!(len > 0);
        assert_eq!(forwarder.cached_entries(), 1);
        let without_cd = query_packet(&name, 1, false);
        let (q, _) = parse(&without_cd);
        assert_eq!(
            forwarder.cached(&without_cd, &q, &lower, 1232, &mut out),
            None
        );
        let refused = forwarder
            .forward(&without_cd, &q, &lower, &[addr], 1232, &mut out)
            .await;
        assert!(
            matches!(refused, Err(ForwardError::Upstream { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn section_counts_never_size_an_allocation() {
        let packet = query_packet(&name(3), 1, false);
        let (q, _) = parse(&packet);
        // One record, counts claiming 3 x 65 535.
        let mut lying = reply_to(&packet, &q, 1, 4);
        lying[6..12].fill(0xff);
        let reply_len = lying.len();
        let info = allocation_counter::measure(|| {
            assert!(Entry::from_reply(lying, q.question_end).is_err());
        });
        // A Vec of 196 605 offsets would be 1.5 MB; the reply itself is 48 bytes.
        assert!(
            info.bytes_max < 4096,
            "{} bytes allocated for a {}-byte reply",
            info.bytes_max,
            reply_len
        );
        // A truthful reply still gets a slot per record.
        let honest = reply_to(&packet, &q, 3, 4);
        let entry = Entry::from_reply(honest, q.question_end).unwrap();
        assert_eq!(entry.ttl_at.len(), 3);
        assert_eq!(entry.ttl, 300);
    }

    #[tokio::test]
    async fn queries_in_flight_are_held_to_the_forwarders_share() {
        use std::future::Future as _;
        use std::task::Poll;
        // A division of 4 descriptors gives a lone forwarder one query in flight.
        let at = SocketAddr::from(([127, 0, 0, 1], 53));
        let forwards = crate::budget::Demand {
            kind: crate::budget::Kind::Forwards,
            addr: at,
            cluster: None,
        };
        let budget = crate::budget::Budget::new(&crate::budget::divide(4, 0, vec![forwards]));
        let forwarder = Forwarder::new(
            MAX_CACHE_BYTES,
            budget.gate(crate::budget::Kind::Forwards, at),
        );
        // An upstream that never answers: the first query waits for it.
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let upstreams = [silent.local_addr().unwrap()];
        let packet = query_packet(&name(1), 1, false);
        let (q, lower) = parse(&packet);
        let (mut out, mut other) = (Vec::new(), Vec::new());
        let mut first = Box::pin(forwarder.forward(&packet, &q, &lower, &upstreams, 512, &mut out));
        let pending = std::future::poll_fn(|cx| Poll::Ready(first.as_mut().poll(cx).is_pending()));
        assert!(pending.await, "the first query waits for its upstream");
        let second = forwarder
            .forward(&packet, &q, &lower, &upstreams, 512, &mut other)
            .await;
        assert!(matches!(second, Err(ForwardError::Busy)), "{second:?}");
        // Its place is given back with it.
        drop(first);
        let mut third =
            Box::pin(forwarder.forward(&packet, &q, &lower, &upstreams, 512, &mut other));
        let pending = std::future::poll_fn(|cx| Poll::Ready(third.as_mut().poll(cx).is_pending()));
        assert!(pending.await, "a place was free again");
    }
}
