//! The DNS sockets: UDP and TCP listeners handed over by the supervisor.
//!
//! Each UDP socket is served by one task that answers authoritative questions and cache hits
//! in place (no allocation per query) and hands cache misses to a task of their own. TCP
//! connections are served until idle, with a cap on how many are open at once. One bad packet
//! or connection never stops a listener.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use ipnet::IpNet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::authority::{Authority, Outcome};
use super::forward::Forwarder;
use super::respond::{Action, Context, Transport, respond};
use super::rrl::{RateLimiter, Verdict};
use super::wire::{
    self, CLASSIC_UDP, EDNS_UDP, MAX_NAME, Query, Reply, ReplyEdns, ReplyFlags, rcode,
};
use crate::plan::{self, Plan};

/// A TCP client that sends nothing for this long is closed (RFC 7766 section 6.2.3).
const TCP_IDLE: Duration = Duration::from_secs(10);
const MAX_TCP_CONNECTIONS: usize = 256;
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
        let ip = canonical(ip);
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

/// IPv4-mapped IPv6 addresses are their IPv4 selves for every access list.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl Shared {
    pub fn new(plan: plan::Handle, metrics: Arc<crate::metrics::Metrics>) -> Arc<Shared> {
        let indexed = Arc::new(Indexed::new(plan.load_full()));
        Arc::new(Shared {
            plan,
            current: Mutex::new(indexed),
            forwarder: Forwarder::default(),
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

/// Serves one UDP socket until `token` is cancelled.
pub async fn serve_udp(
    socket: UdpSocket,
    shared: Arc<Shared>,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let socket = Arc::new(socket);
    let local = socket.local_addr().context("udp socket address")?;
    let started = Instant::now();
    let mut indexed = shared.indexed();
    let mut rrl_settings = indexed.plan.resolver.rate_limit;
    let mut rrl = RateLimiter::new(rrl_settings.responses_per_second, rrl_settings.slip);
    let mut packet = vec![0u8; 65_535];
    let mut out = Vec::with_capacity(usize::from(EDNS_UDP) * 2);
    let mut lower = [0u8; MAX_NAME];
    let serve = async {
        loop {
            let (n, client) = match socket.recv_from(&mut packet).await {
                Ok(r) => r,
                // ICMP errors from earlier sends surface here on Linux; they concern one client.
                Err(e) => {
                    tracing::debug!("dns/udp on {local}: {e}");
                    continue;
                }
            };
            if !Arc::ptr_eq(&indexed.plan, &shared.plan.load()) {
                indexed = shared.indexed();
                // A reload may change the limits; unchanged, the table keeps its counts.
                if indexed.plan.resolver.rate_limit != rrl_settings {
                    rrl_settings = indexed.plan.resolver.rate_limit;
                    rrl = RateLimiter::new(rrl_settings.responses_per_second, rrl_settings.slip);
                }
            }
            let request = &packet[..n];
            let (ctx, trusted) = indexed.context(client.ip(), Transport::Udp);
            match respond(request, &ctx, &mut lower, &mut out) {
                Action::Drop | Action::Transfer(_) => continue,
                Action::Reply {
                    len,
                    outcome,
                    qname_len,
                } => {
                    let verdict = if trusted || outcome == Outcome::NotOurs {
                        Verdict::Send
                    } else {
                        let now = started.elapsed().as_secs() as u32;
                        rrl.check(client.ip(), outcome, &lower[..qname_len], now)
                    };
                    match verdict {
                        Verdict::Send => {
                            count(&shared.metrics, &out[..len]);
                            send(&socket, &out[..len], client).await;
                        }
                        Verdict::Drop => {}
                        Verdict::Slip => {
                            let len = slip_reply(request, &mut out);
                            send(&socket, &out[..len], client).await;
                        }
                    }
                }
                Action::Forward(query) => {
                    let limit = udp_limit(&query);
                    let qname = &lower[..query.qname_len];
                    if let Some(len) = shared
                        .forwarder
                        .cached(request, &query, qname, limit, &mut out)
                    {
                        shared.metrics.dns_cache_hits.inc();
                        count(&shared.metrics, &out[..len]);
                        send(&socket, &out[..len], client).await;
                        continue;
                    }
                    shared.metrics.dns_cache_misses.inc();
                    let (socket, shared, indexed) = (
                        Arc::clone(&socket),
                        Arc::clone(&shared),
                        Arc::clone(&indexed),
                    );
                    let request = request.to_vec();
                    let qname = qname.to_vec();
                    tokio::spawn(async move {
                        let mut out = Vec::new();
                        let len = forward_or_servfail(
                            &shared, &indexed, &request, &query, &qname, limit, &mut out,
                        )
                        .await;
                        count(&shared.metrics, &out[..len]);
                        send(&socket, &out[..len], client).await;
                    });
                }
            }
        }
    };
    tokio::select! {
        () = token.cancelled() => Ok(()),
        () = serve => Ok(()),
    }
}

/// Counts an answer by its rcode and question type, read from its wire form.
fn count(metrics: &crate::metrics::Metrics, reply: &[u8]) {
    if reply.len() < 12 {
        return;
    }
    let qtype = wire::skip_name(reply, 12)
        .and_then(|p| reply.get(p..p + 2))
        .map_or(0, |t| u16::from_be_bytes([t[0], t[1]]));
    metrics.dns_answer(reply[3] & 0x0f, qtype);
}

async fn send(socket: &UdpSocket, reply: &[u8], client: SocketAddr) {
    if let Err(e) = socket.send_to(reply, client).await {
        tracing::debug!("dns/udp reply to {client}: {e}");
    }
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
    token: CancellationToken,
) -> anyhow::Result<()> {
    let slots = Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS));
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
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!("dns/tcp: {MAX_TCP_CONNECTIONS} connections open; closing {client}");
            continue;
        };
        let (shared, token) = (Arc::clone(&shared), token.clone());
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                () = token.cancelled() => {}
                result = serve_connection(stream, client, &shared) => {
                    if let Err(e) = result {
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
        let request = &mut request[..len];
        tokio::time::timeout(TCP_IDLE, stream.read_exact(request))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request body"))??;
        let indexed = shared.indexed();
        let (ctx, _) = indexed.context(client.ip(), Transport::Tcp);
        let len = match respond(request, &ctx, &mut lower, &mut out) {
            Action::Drop => continue,
            Action::Reply { len, .. } => len,
            Action::Forward(query) => {
                let qname = lower[..query.qname_len].to_vec();
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
                    &lower[..query.qname_len],
                    &indexed.authority,
                )
                .await?;
                continue;
            }
        };
        count(&shared.metrics, &out[..len]);
        write_framed(&mut stream, &out[..len]).await?;
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
    let Some(records) = authority.transfer(origin) else {
        return Ok(());
    };
    let soa = &records[0];
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
        write_framed(stream, &out[..len]).await?;
    }
    Ok(())
}
