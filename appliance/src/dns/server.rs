//! The DNS sockets: UDP and TCP listeners handed over by the supervisor.
//!
//! Each UDP socket is served by blocking threads that take queries in batches (recvmmsg),
//! answer authoritative questions and cache hits in place (no allocation per query or per
//! batch) and send the batch's replies at once (sendmmsg); cache misses go to a task of their
//! own. TCP connections are served until idle, with a cap on how many are open at once (the
//! listener's share of the descriptor budget). One bad packet or connection never stops a
//! listener.
//!
//! A UDP socket gets as many threads as the runtime has workers (one with
//! `TOKIO_WORKER_THREADS=1`). Each takes up to 32 queries with one `recvmmsg` (`MSG_WAITFORONE`:
//! it waits for the first, then takes what is queued), answers them into per-slot reply
//! buffers made once per thread, and sends the batch with one `sendmmsg`: under load a
//! fraction of a system call per query instead of a `recvfrom`, a `sendto` and the reactor's
//! `epoll_wait` (docs/performance.md). The threads share the socket (the kernel wakes one waiter
//! per datagram) and its rate limiter, one table and one clock, so a client gets the configured
//! rate whichever thread answers it. Each wakes every 200 ms to see the shutdown token, and
//! dropping the service's future stops them. A cache miss becomes a task that sends its reply
//! itself with `MSG_DONTWAIT` (a full send buffer drops that reply; the client asks again), so
//! no runtime worker ever blocks on the socket.

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::AsRawFd as _;

use anyhow::Context as _;
use ipnet::IpNet;
use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg, sendto};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;

use super::authority::{Authority, Outcome};
use super::forward::Forwarder;
use super::respond::{Action, Context, Transport, respond};
use super::rrl::{RateLimiter, Verdict};
use super::wire::{
    self, CLASSIC_UDP, EDNS_UDP, MAX_NAME, Query, Reply, ReplyEdns, ReplyFlags, rcode,
};
use crate::isolate::Wire;
use crate::plan::{self, Plan};

/// A TCP client that sends nothing for this long is closed (RFC 7766 section 6.2.3).
const TCP_IDLE: Duration = Duration::from_secs(10);
/// Records per message of a zone transfer.
const TRANSFER_BATCH: usize = 100;

/// What every DNS task shares: the plan handle, the index derived from the current plan, the
/// forwarder and its cache.
#[derive(Debug)]
pub struct Shared {
    plan: plan::Handle,
    current: Mutex<Arc<Indexed>>,
    forwarder: Forwarder,
    metrics: Arc<crate::metrics::Metrics>,
}

/// A plan made ready for answering.
#[derive(Debug)]
pub struct Indexed {
    plan: Arc<Plan>,
    authority: Authority,
}

impl Indexed {
    fn new(plan: Arc<Plan>) -> Indexed {
        Indexed {
            authority: Authority::from_plan(&plan),
            plan,
        }
    }

    fn allowed(&self, nets: &[IpNet], ip: IpAddr) -> bool {
        let ip = IpAddr::to_canonical(&ip);
        nets.iter().any(|n| n.contains(&ip))
    }

    /// What the responder needs to know about `client`, and whether the client is trusted (in
    /// `recursion_allowed`: it may recurse when upstreams exist, and RRL leaves it alone).
    fn context(&self, client: IpAddr, transport: Transport) -> (Context<'_>, bool) {
        let policy = &self.plan.resolver;
        let trusted = self.allowed(&policy.recursion_allowed, client);
        let ctx = Context {
            authority: &self.authority,
            transport,
            recursion: trusted && !policy.upstreams.is_empty(),
            transfer_allowed: self.allowed(&policy.axfr_allowed, client),
        };
        (ctx, trusted)
    }
}

impl Shared {
    /// The shared state of one DNS server, whose forwarded queries `forwards` admits.
    pub fn new(
        plan: plan::Handle,
        metrics: Arc<crate::metrics::Metrics>,
        forwards: crate::budget::Gate,
    ) -> Arc<Shared> {
        let indexed = Arc::new(Indexed::new(plan.load_full()));
        Arc::new(Shared {
            plan,
            current: Mutex::new(indexed),
            forwarder: Forwarder::new(super::forward::MAX_CACHE_BYTES, forwards),
            metrics,
        })
    }

    /// The index of the current plan, rebuilt once after each reload.
    fn indexed(&self) -> Arc<Indexed> {
        let plan = self.plan.load();
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if !Arc::ptr_eq(&current.plan, &plan) {
            *current = Arc::new(Indexed::new(Arc::clone(&plan)));
        }
        Arc::clone(&current)
    }
}

/// How many queries one system call takes in, and how many replies one sends.
const BATCH: usize = 32;
/// The largest UDP datagram: every query is read whole, however large.
const MAX_DATAGRAM: usize = 65_535;
/// How often a thread waiting for queries looks at the shutdown token.
const POLL: Duration = Duration::from_millis(200);

/// Serves one UDP socket until `token` is cancelled (or this future is dropped).
///
/// The socket is read by blocking threads, as many as the runtime has workers: each takes up to
/// `BATCH` queries with one recvmmsg(2), answers them in place and sends the replies with one
/// sendmmsg(2), so a busy server makes a fraction of a system call per query (one recvfrom, one
/// sendto and the readiness polling before). Cache misses become tasks on the runtime, which send
/// their replies themselves.
pub async fn serve_udp(
    socket: UdpSocket,
    shared: Arc<Shared>,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let socket = socket.into_std().context("udp socket")?;
    socket
        .set_nonblocking(false)
        .and_then(|()| socket.set_read_timeout(Some(POLL)))
        .context("udp socket options")?;
    let socket = Arc::new(socket);
    let runtime = tokio::runtime::Handle::current();
    let threads = runtime.metrics().num_workers().max(1);
    // One rate limiter per socket, whichever thread a query reaches, with one clock.
    let started = Instant::now();
    let settings = shared.indexed().plan.resolver.rate_limit;
    let rrl = Arc::new(Mutex::new(RateLimiter::new(
        settings.responses_per_second,
        settings.slip,
    )));
    // Dropping this future (the service set failing elsewhere) stops the threads too.
    let stop = token.child_token();
    let _stop_on_drop = stop.clone().drop_guard();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..threads {
        let (socket, shared, runtime, rrl, stop) = (
            Arc::clone(&socket),
            Arc::clone(&shared),
            runtime.clone(),
            Arc::clone(&rrl),
            stop.clone(),
        );
        workers.spawn_blocking(move || {
            UdpWorker::new(socket, shared, runtime, (started, rrl)).run(&stop)
        });
    }
    while let Some(done) = workers.join_next().await {
        done.context("a dns/udp thread panicked")??;
    }
    Ok(())
}

/// Response rate limiting of one socket, shared by its threads.
type SharedRateLimiter = Arc<Mutex<RateLimiter>>;

/// One thread's buffers and state for serving a UDP socket: made once, reused for every batch.
struct UdpWorker {
    socket: Arc<std::net::UdpSocket>,
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    /// The rate limiter's clock: when the socket started serving.
    started: Instant,
    indexed: Arc<Indexed>,
    /// Shared by the socket's threads; locked only for clients outside `recursion_allowed`.
    rrl: SharedRateLimiter,
    /// `BATCH` slots of `MAX_DATAGRAM` bytes; the kernel touches only what it writes.
    packets: Vec<u8>,
    /// Length and source of each query the last receive took.
    queries: [(usize, Option<SockaddrStorage>); BATCH],
    replies: Vec<Vec<u8>>,
    /// Length and destination of each reply queued for the next send (the destinations as
    /// sendmmsg takes them).
    reply_lens: [usize; BATCH],
    destinations: [Option<SockaddrStorage>; BATCH],
    recv_headers: MultiHeaders<SockaddrStorage>,
    send_headers: MultiHeaders<SockaddrStorage>,
    lower: [u8; MAX_NAME],
}

impl UdpWorker {
    fn new(
        socket: Arc<std::net::UdpSocket>,
        shared: Arc<Shared>,
        runtime: tokio::runtime::Handle,
        (started, rrl): (Instant, SharedRateLimiter),
    ) -> UdpWorker {
        UdpWorker {
            socket,
            runtime,
            started,
            rrl,
            indexed: shared.indexed(),
            shared,
            packets: vec![0u8; BATCH * MAX_DATAGRAM],
            queries: [(0, None); BATCH],
            replies: (0..BATCH)
                .map(|_| Vec::with_capacity(usize::from(EDNS_UDP) * 2))
                .collect(),
            reply_lens: [0; BATCH],
            destinations: [None; BATCH],
            recv_headers: MultiHeaders::preallocate(BATCH, None),
            send_headers: MultiHeaders::preallocate(BATCH, None),
            lower: [0u8; MAX_NAME],
        }
    }

    fn run(mut self, stop: &CancellationToken) -> anyhow::Result<()> {
        let local = self.socket.local_addr().context("udp socket address")?;
        while !stop.is_cancelled() {
            let received = match self.receive() {
                Ok(n) => n,
                // The read timeout: time to look at the token.
                Err(Errno::EAGAIN | Errno::EINTR) => continue,
                // ICMP errors from earlier sends surface here on Linux; they concern one client.
                Err(e @ (Errno::ECONNREFUSED | Errno::EHOSTUNREACH | Errno::ENETUNREACH)) => {
                    tracing::debug!("dns/udp on {local}: {e}");
                    continue;
                }
                Err(e) => {
                    tracing::warn!("dns/udp on {local}: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            self.refresh();
            let mut queued = 0;
            for i in 0..received {
                let Some(&(len, Some(from))) = self.queries.get(i) else {
                    continue;
                };
                let Some(client) = socket_addr(&from) else {
                    continue;
                };
                // One query's fault stays with it: counted, logged (rate-limited), dropped.
                let answered =
                    crate::isolate::packet(Wire::Dns, || self.answer(i, len, client, queued));
                if let Some(reply_len) = answered.flatten()
                    && let (Some(len), Some(to)) = (
                        self.reply_lens.get_mut(queued),
                        self.destinations.get_mut(queued),
                    )
                {
                    (*len, *to) = (reply_len, Some(from));
                    queued += 1;
                }
            }
            self.send(queued, local);
        }
        Ok(())
    }

    /// Takes in up to `BATCH` queries: waits for the first (at most `POLL`), then takes what
    /// is already there.
    fn receive(&mut self) -> Result<usize, Errno> {
        let mut slots = self.packets.chunks_exact_mut(MAX_DATAGRAM);
        let mut iovs: [[IoSliceMut<'_>; 1]; BATCH] =
            std::array::from_fn(|_| [IoSliceMut::new(slots.next().unwrap_or_default())]);
        let results = recvmmsg(
            self.socket.as_raw_fd(),
            &mut self.recv_headers,
            iovs.iter_mut(),
            MsgFlags::MSG_WAITFORONE,
            None,
        )?;
        let mut received = 0;
        for (slot, message) in self.queries.iter_mut().zip(results) {
            *slot = (message.bytes, message.address);
            received += 1;
        }
        Ok(received)
    }

    /// Picks up a reloaded plan before answering a batch.
    fn refresh(&mut self) {
        if Arc::ptr_eq(&self.indexed.plan, &self.shared.plan.load()) {
            return;
        }
        self.indexed = self.shared.indexed();
        // A reload may change the limits; unchanged, the table keeps its counts.
        let settings = self.indexed.plan.resolver.rate_limit;
        let limits = (settings.responses_per_second, settings.slip);
        let mut rrl = self.rrl.lock().unwrap_or_else(|e| e.into_inner());
        if rrl.limits() != limits {
            *rrl = RateLimiter::new(limits.0, limits.1);
        }
    }

    /// Answers query `i` (`len` bytes from `client`) into reply slot `slot`: the reply's length
    /// when one goes back in this batch.
    fn answer(&mut self, i: usize, len: usize, client: SocketAddr, slot: usize) -> Option<usize> {
        let request = self.packets.get(i * MAX_DATAGRAM..)?.get(..len)?;
        let out = self.replies.get_mut(slot)?;
        let (ctx, trusted) = self.indexed.context(client.ip(), Transport::Udp);
        match respond(request, &ctx, &mut self.lower, out) {
            Action::Drop | Action::Transfer(_) => None,
            Action::Reply {
                len,
                outcome,
                qname_len,
            } => {
                let verdict = if trusted || outcome == Outcome::NotOurs {
                    Verdict::Send
                } else {
                    let now = self.started.elapsed().as_secs() as u32;
                    let qname = self.lower.get(..qname_len).unwrap_or_default();
                    let mut rrl = self.rrl.lock().unwrap_or_else(|e| e.into_inner());
                    rrl.check(client.ip(), outcome, qname, now)
                };
                match verdict {
                    Verdict::Send => {
                        count(&self.shared.metrics, out.get(..len).unwrap_or_default());
                        Some(len)
                    }
                    Verdict::Drop => None,
                    Verdict::Slip => Some(slip_reply(request, out)),
                }
            }
            Action::Forward(query) => {
                let limit = udp_limit(&query);
                let qname = self.lower.get(..query.qname_len).unwrap_or_default();
                let forwarder = &self.shared.forwarder;
                if let Some(len) = forwarder.cached(request, &query, qname, limit, out) {
                    self.shared.metrics.dns_cache_hits.inc();
                    count(&self.shared.metrics, out.get(..len).unwrap_or_default());
                    return Some(len);
                }
                self.shared.metrics.dns_cache_misses.inc();
                let (socket, shared, indexed) = (
                    Arc::clone(&self.socket),
                    Arc::clone(&self.shared),
                    Arc::clone(&self.indexed),
                );
                let request = request.to_vec();
                let qname = qname.to_vec();
                self.runtime.spawn(async move {
                    let mut out = Vec::new();
                    let len = forward_or_servfail(
                        &shared, &indexed, &request, &query, &qname, limit, &mut out,
                    )
                    .await;
                    let reply = out.get(..len).unwrap_or_default();
                    count(&shared.metrics, reply);
                    // Never blocks a runtime worker: a full send buffer drops this reply, and
                    // the client asks again.
                    let to = SockaddrStorage::from(client);
                    if let Err(e) = sendto(socket.as_raw_fd(), reply, &to, MsgFlags::MSG_DONTWAIT) {
                        tracing::debug!("dns/udp reply to {client}: {e}");
                    }
                });
                None
            }
        }
    }

    /// Sends the first `queued` replies, as few system calls as the kernel allows. A reply the
    /// kernel refuses (an unreachable destination, a firewall) is skipped; the rest still go.
    fn send(&mut self, queued: usize, local: SocketAddr) {
        let mut sent = 0;
        while sent < queued {
            let iovs: [[IoSlice<'_>; 1]; BATCH] = std::array::from_fn(|i| {
                let len = self.reply_lens.get(sent + i).copied().unwrap_or(0);
                [IoSlice::new(
                    self.replies
                        .get(sent + i)
                        .and_then(|r| r.get(..len))
                        .unwrap_or_default(),
                )]
            });
            let result = sendmmsg(
                self.socket.as_raw_fd(),
                &mut self.send_headers,
                iovs.get(..queued - sent).unwrap_or_default().iter(),
                self.destinations.get(sent..queued).unwrap_or_default(),
                [],
                MsgFlags::empty(),
            )
            .map(Iterator::count);
            match result {
                Ok(0) => break,
                Ok(n) => sent += n,
                Err(Errno::EINTR) => {}
                Err(e) => {
                    tracing::debug!(
                        "dns/udp on {local}: a reply to {:?}: {e}",
                        self.destinations.get(sent)
                    );
                    sent += 1;
                }
            }
        }
    }
}

/// The standard library's form of a socket address the kernel reported.
fn socket_addr(address: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = address.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    address
        .as_sockaddr_in6()
        .map(|v6| SocketAddr::V6((*v6).into()))
}

/// Counts an answer by its rcode and question type, read from its wire form.
fn count(metrics: &crate::metrics::Metrics, reply: &[u8]) {
    let Some(header) = reply.first_chunk::<12>() else {
        return;
    };
    let qtype = wire::skip_name(reply, 12)
        .and_then(|p| reply.get(p..)?.first_chunk::<2>())
        .map_or(0, |t| u16::from_be_bytes(*t));
    metrics.dns_answer(header[3] & 0x0f, qtype);
}

fn udp_limit(query: &Query) -> usize {
    query
        .edns
        .map_or(CLASSIC_UDP, |e| usize::from(e.udp_size.min(EDNS_UDP)))
}

/// The empty, truncated reply RRL sends instead of a limited answer: a limit of zero keeps
/// only the question (and the OPT record) and sets TC.
fn slip_reply(request: &[u8], out: &mut Vec<u8>) -> usize {
    let mut lower = [0u8; MAX_NAME];
    let Ok(query) = wire::parse_query(request, &mut lower) else {
        return 0;
    };
    let flags = ReplyFlags {
        authoritative: true,
        recursion_available: false,
        rcode: rcode::NOERROR,
    };
    let edns = query.edns.map(|e| ReplyEdns {
        upper_rcode: 0,
        dnssec_ok: e.dnssec_ok,
    });
    Reply::start(out, request, Some(query.question_end), flags).finish(edns, 0)
}

async fn forward_or_servfail(
    shared: &Shared,
    indexed: &Indexed,
    request: &[u8],
    query: &Query,
    qname: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> usize {
    let upstreams = &indexed.plan.resolver.upstreams;
    let asked = std::time::Instant::now();
    let forwarded = shared
        .forwarder
        .forward(request, query, qname, upstreams, limit, out)
        .await;
    shared
        .metrics
        .dns_upstream_seconds
        .observe(asked.elapsed().as_secs_f64());
    match forwarded {
        Ok(len) => len,
        Err(e) => {
            tracing::debug!("forwarding failed: {e}");
            let flags = ReplyFlags {
                authoritative: false,
                recursion_available: true,
                rcode: rcode::SERVFAIL,
            };
            let edns = query.edns.map(|e| ReplyEdns {
                upper_rcode: 0,
                dnssec_ok: e.dnssec_ok,
            });
            Reply::start(out, request, Some(query.question_end), flags).finish(edns, limit)
        }
    }
}

/// Accepts TCP clients until `token` is cancelled.
pub async fn serve_tcp(
    listener: TcpListener,
    shared: Arc<Shared>,
    gate: crate::budget::Gate,
    token: CancellationToken,
) -> anyhow::Result<()> {
    // Its cap and one client address's share of it, so that one host's idle connections can't
    // get every other client's TCP query (a truncated answer's retry) refused: a resolver keeps
    // a few, a node one at a time (`crate::budget`).
    loop {
        let (stream, client) = tokio::select! {
            () = token.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: back off, keep listening.
                    tracing::warn!("dns/tcp accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let ticket = match gate.admit(client.ip()) {
            Ok(ticket) => ticket,
            Err(why) => {
                tracing::debug!("dns/tcp {client}: {why}; closed");
                continue;
            }
        };
        let (shared, token) = (Arc::clone(&shared), token.clone());
        tokio::spawn(async move {
            let _ticket = ticket;
            tokio::select! {
                () = token.cancelled() => {}
                result = crate::isolate::connection(Wire::Dns, serve_connection(stream, client, &shared)) => {
                    if let Some(Err(e)) = result {
                        tracing::debug!("dns/tcp {client}: {e}");
                    }
                }
            }
        });
    }
}

async fn serve_connection(
    mut stream: TcpStream,
    client: SocketAddr,
    shared: &Shared,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut request = vec![0u8; 65_535];
    let mut out = Vec::new();
    let mut lower = [0u8; MAX_NAME];
    loop {
        let len = match tokio::time::timeout(TCP_IDLE, stream.read_u16()).await {
            Err(_) => return Ok(()),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(r) => usize::from(r?),
        };
        // A u16 length, and the buffer holds 65,535 bytes: always there.
        let Some(request) = request.get_mut(..len) else {
            return Ok(());
        };
        tokio::time::timeout(TCP_IDLE, stream.read_exact(request))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request body"))??;
        let indexed = shared.indexed();
        let (ctx, _) = indexed.context(client.ip(), Transport::Tcp);
        let len = match respond(request, &ctx, &mut lower, &mut out) {
            Action::Drop => continue,
            Action::Reply { len, .. } => len,
            Action::Forward(query) => {
                let qname = lower.get(..query.qname_len).unwrap_or_default().to_vec();
                let limit = usize::from(u16::MAX);
                match shared
                    .forwarder
                    .cached(request, &query, &qname, limit, &mut out)
                {
                    Some(len) => {
                        shared.metrics.dns_cache_hits.inc();
                        len
                    }
                    None => {
                        shared.metrics.dns_cache_misses.inc();
                        forward_or_servfail(
                            shared, &indexed, request, &query, &qname, limit, &mut out,
                        )
                        .await
                    }
                }
            }
            Action::Transfer(query) => {
                transfer(
                    &mut stream,
                    request,
                    &query,
                    lower.get(..query.qname_len).unwrap_or_default(),
                    &indexed.authority,
                )
                .await?;
                continue;
            }
        };
        let reply = out.get(..len).unwrap_or_default();
        count(&shared.metrics, reply);
        write_framed(&mut stream, reply).await?;
    }
}

async fn write_framed(stream: &mut TcpStream, message: &[u8]) -> std::io::Result<()> {
    let mut framed = Vec::with_capacity(message.len() + 2);
    framed.extend_from_slice(&(message.len() as u16).to_be_bytes());
    framed.extend_from_slice(message);
    stream.write_all(&framed).await
}

/// AXFR (and IXFR answered as AXFR, RFC 1995 section 4): the SOA, every record, the SOA again.
async fn transfer(
    stream: &mut TcpStream,
    request: &[u8],
    query: &Query,
    origin: &[u8],
    authority: &Authority,
) -> std::io::Result<()> {
    // A zone's transfer starts with its SOA: never empty.
    let Some((records, soa)) = authority
        .transfer(origin)
        .and_then(|r| Some((r, r.first()?)))
    else {
        return Ok(());
    };
    let all: Vec<&super::authority::TransferRecord> =
        records.iter().chain(std::iter::once(soa)).collect();
    let mut out = Vec::new();
    for (i, batch) in all.chunks(TRANSFER_BATCH).enumerate() {
        let flags = ReplyFlags {
            authoritative: true,
            recursion_available: false,
            rcode: rcode::NOERROR,
        };
        // The question goes in the first message only (RFC 5936 section 2.2).
        let question_end = (i == 0).then_some(query.question_end);
        let mut reply = Reply::start(&mut out, request, question_end, flags);
        for (owner, tail) in batch {
            reply.push_owned(wire::Section::Answer, owner, tail, 1);
        }
        let edns = query.edns.filter(|_| i == 0).map(|e| ReplyEdns {
            upper_rcode: 0,
            dnssec_ok: e.dnssec_ok,
        });
        let len = reply.finish(edns, usize::from(u16::MAX));
        write_framed(stream, out.get(..len).unwrap_or_default()).await?;
    }
    Ok(())
}

/// DNS over TCP on loopback: one client address holds at most its share of the connections,
/// and another address is still answered (issue 39: 300 idle connections from one host got
/// every other client's TCP query reset).
#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use hickory_proto::op::{Message, MessageType, OpCode, Query};
    use hickory_proto::rr::{Name, RecordType};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpSocket, TcpStream};
    use tokio_util::sync::CancellationToken;

    use super::{Shared, serve_tcp};
    use crate::dns::tests::LAB;

    async fn connect_from(source: [u8; 4], to: std::net::SocketAddr) -> TcpStream {
        let socket = TcpSocket::new_v4().unwrap();
        socket
            .bind(std::net::SocketAddr::from((source, 0)))
            .unwrap();
        socket.connect(to).await.unwrap()
    }

    #[tokio::test]
    async fn one_address_holds_at_most_its_share_and_others_are_answered() {
        let loaded = crate::config::parse(
            LAB,
            "lab.yml",
            std::path::Path::new("."),
            crate::config::InstallCheck::Skip,
        )
        .unwrap_or_else(|e| panic!("{}", e.render(crate::config::RenderStyle::Plain)));
        let plan = crate::plan::Plan::derive(&loaded.config, 7);
        let handle = Arc::new(arc_swap::ArcSwap::from_pointee(plan));
        let budget = crate::budget::Budget::unbounded();
        let forwards = budget.gate(
            crate::budget::Kind::Forwards,
            std::net::SocketAddr::from(([0; 4], 0)),
        );
        let shared = Shared::new(handle, Arc::new(crate::metrics::Metrics::new()), forwards);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let token = CancellationToken::new();
        let gate = crate::budget::Budget::unbounded().gate(crate::budget::Kind::DnsTcp, at);
        let share = gate.per_address();
        assert_eq!(share, 32);
        let server = tokio::spawn(serve_tcp(listener, shared, gate, token.clone()));

        let mut held = Vec::new();
        for _ in 0..share {
            held.push(connect_from([127, 0, 0, 2], at).await);
        }
        // Accepted in order: once one more from the same address is closed, the share is full.
        let mut over = connect_from([127, 0, 0, 2], at).await;
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), over.read(&mut byte)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "the connection over the share was not closed: {read:?}"
        );

        // Another address is served.
        let mut query = Message::new(7, MessageType::Query, OpCode::Query);
        query.add_query(Query::query(
            Name::from_ascii("api.okd.lab.example.com.").unwrap(),
            RecordType::A,
        ));
        let bytes = query.to_vec().unwrap();
        let mut other = connect_from([127, 0, 0, 3], at).await;
        other
            .write_all(&u16::try_from(bytes.len()).unwrap().to_be_bytes())
            .await
            .unwrap();
        other.write_all(&bytes).await.unwrap();
        let len = tokio::time::timeout(Duration::from_secs(5), other.read_u16())
            .await
            .expect("an answer in time")
            .unwrap();
        let mut reply = vec![0u8; usize::from(len)];
        other.read_exact(&mut reply).await.unwrap();
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.metadata.id, 7);
        assert_eq!(reply.answers.len(), 1, "{reply:?}");
        drop(held);
        token.cancel();
        server.await.unwrap().unwrap();
    }
}
