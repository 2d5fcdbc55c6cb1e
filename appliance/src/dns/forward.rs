//! Forwarding names outside the cluster to the upstream resolvers, with a cache.
//!
//! An upstream reply is accepted only from the upstream asked (a connected socket), with the
//! random ID sent and the question exactly as sent, case included. Truncated replies are
//! fetched again over TCP. Every exchange is bounded in time: an unreachable upstream yields
//! SERVFAIL, never a hang. Cached replies are served with their TTLs counted down; negative
//! answers are cached for the SOA's negative TTL (RFC 2308) and SERVFAIL never.
//!
//! Architecture invariant: knows upstreams and the cache; not who may recurse (the caller
//! decided) and not the cluster zones (never forwarded).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use super::wire::{self, EDNS_UDP, HEADER_LEN, Query, rcode, rtype};

/// One upstream gets this long per attempt over UDP.
const UDP_ATTEMPT: Duration = Duration::from_millis(1200);
const TCP_ATTEMPT: Duration = Duration::from_secs(2);
/// All attempts together; the client sees SERVFAIL after this at most.
const DEADLINE: Duration = Duration::from_secs(3);
/// Upstream queries in flight at once; more get SERVFAIL at once instead of piling up.
const MAX_IN_FLIGHT: usize = 512;
const MAX_ENTRIES: usize = 20_000;
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
    cache: Mutex<HashMap<Box<[u8]>, Entry>>,
    in_flight: Semaphore,
}

impl Default for Forwarder {
    fn default() -> Self {
        Forwarder {
            cache: Mutex::new(HashMap::new()),
            in_flight: Semaphore::new(MAX_IN_FLIGHT),
        }
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

/// The cache key: lowercase name, type and class, in a stack buffer.
fn key<'b>(query: &Query, lower: &[u8], buf: &'b mut [u8; wire::MAX_NAME + 4]) -> &'b [u8] {
    let n = lower.len();
    buf[..n].copy_from_slice(lower);
    buf[n..n + 2].copy_from_slice(&query.qtype.to_be_bytes());
    buf[n + 2..n + 4].copy_from_slice(&query.qclass.to_be_bytes());
    &buf[..n + 4]
}

impl Forwarder {
    /// Serves `packet` from the cache into `out`; returns the reply's length on a hit.
    pub fn cached(
        &self,
        packet: &[u8],
        query: &Query,
        lower: &[u8],
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        let mut k = [0u8; wire::MAX_NAME + 4];
        let k = key(query, lower, &mut k);
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let entry = cache.get(k)?;
        let age = now.duration_since(entry.stored).as_secs();
        if age >= u64::from(entry.ttl) {
            cache.remove(k);
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
        let _permit = self
            .in_flight
            .try_acquire()
            .map_err(|_| ForwardError::Busy)?;
        let id: u16 = rand::random();
        let upstream_query = upstream_query(packet, query, id);
        let exchange = async {
            let mut last = None;
            for &upstream in upstreams {
                match exchange(upstream, &upstream_query, query.question_end).await {
                    Ok(reply) => {
                        let code = reply[3] & 0x0f;
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
                upstream: upstreams[0],
                reason: reason.to_owned(),
            }
        })?;
        let len = entry.write_reply(packet, query, 0, limit, out);
        if entry.ttl > 0 {
            let mut k = [0u8; wire::MAX_NAME + 4];
            let k: Box<[u8]> = key(query, lower, &mut k).into();
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= MAX_ENTRIES {
                evict(&mut cache);
            }
            cache.insert(k, entry);
        }
        Ok(len)
    }

    pub fn cached_entries(&self) -> usize {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Drops expired entries; if none expired, an arbitrary tenth of the cache.
fn evict(cache: &mut HashMap<Box<[u8]>, Entry>) {
    let now = Instant::now();
    cache.retain(|_, e| now.duration_since(e.stored).as_secs() < u64::from(e.ttl));
    if cache.len() >= MAX_ENTRIES {
        let doomed: Vec<Box<[u8]>> = cache.keys().take(MAX_ENTRIES / 10).cloned().collect();
        for k in doomed {
            cache.remove(&k);
        }
    }
}

/// The client's question with a fresh ID, RD set and our own OPT (no DNSSEC: we don't validate).
fn upstream_query(packet: &[u8], query: &Query, id: u16) -> Vec<u8> {
    let mut q = Vec::with_capacity(query.question_end + 11);
    q.extend_from_slice(&id.to_be_bytes());
    let cd = if query.checking_disabled { 0x10 } else { 0 };
    q.extend_from_slice(&[0x01, cd]);
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 1]);
    q.extend_from_slice(&packet[HEADER_LEN..query.question_end]);
    q.push(0);
    q.extend_from_slice(&rtype::OPT.to_be_bytes());
    q.extend_from_slice(&EDNS_UDP.to_be_bytes());
    q.extend_from_slice(&[0; 6]);
    q
}

/// Whether `reply` answers `query` (same ID and the same question, byte for byte).
fn matches(reply: &[u8], query: &[u8], question_end: usize) -> bool {
    reply.len() >= question_end
        && reply[0..2] == query[0..2]
        && reply[2] & 0x80 != 0
        && reply[4..6] == [0, 1]
        && reply[HEADER_LEN..question_end] == query[HEADER_LEN..question_end]
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
        if matches(&buf[..n], query, question_end) {
            buf.truncate(n);
            break buf;
        }
    };
    if reply[2] & 0x02 == 0 {
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
        let count = |b: &[u8], i: usize| usize::from(u16::from_be_bytes([b[i], b[i + 1]]));
        let (an, ns, ar) = (count(&bytes, 6), count(&bytes, 8), count(&bytes, 10));
        let code = bytes[3] & 0x0f;
        let mut pos = question_end;
        let mut ttl_at = Vec::with_capacity(an + ns + ar);
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
                if rr.rtype == rtype::SOA && i >= an && i < an + ns && rr.end >= rr.rdata_at + 4 {
                    let m = &bytes[rr.end - 4..rr.end];
                    let minimum = u32::from_be_bytes([m[0], m[1], m[2], m[3]]);
                    negative_ttl = Some(rr.ttl.min(minimum));
                }
            }
            pos = rr.end;
        }
        if let Some(at) = opt {
            bytes.truncate(at);
            let ar = (ar - 1) as u16;
            bytes[10..12].copy_from_slice(&ar.to_be_bytes());
        } else {
            bytes.truncate(pos);
        }
        let negative = code == rcode::NXDOMAIN || (code == rcode::NOERROR && an == 0);
        let ttl = match code {
            _ if bytes[2] & 0x02 != 0 => 0,
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
        out[0..2].copy_from_slice(&packet[0..2]);
        // Not authoritative; RD as the client asked, RA since we recursed for it.
        out[2] = (out[2] & !0x05) | (packet[2] & 0x01);
        out[3] |= 0x80;
        out[HEADER_LEN..self.question_end].copy_from_slice(&packet[HEADER_LEN..query.question_end]);
        for &at in &self.ttl_at {
            let ttl = u32::from_be_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]]);
            out[at..at + 4].copy_from_slice(&ttl.saturating_sub(age).to_be_bytes());
        }
        let opt_len = if query.edns.is_some() { 11 } else { 0 };
        if out.len() + opt_len > limit {
            out.truncate(self.question_end);
            out[6..12].fill(0);
            out[2] |= 0x02;
        }
        if let Some(e) = query.edns {
            out.push(0);
            out.extend_from_slice(&rtype::OPT.to_be_bytes());
            out.extend_from_slice(&EDNS_UDP.to_be_bytes());
            out.extend_from_slice(&[0, 0, if e.dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
            let ar = u16::from_be_bytes([out[10], out[11]]) + 1;
            out[10..12].copy_from_slice(&ar.to_be_bytes());
        }
        out.len()
    }
}
