//! The host's router at a shared frontend: one listener per port for every cluster. Each
//! connection's first bytes are read until they name a server ([`route`]), then the connection goes
//! to that cluster's pools and on through the same data path as a cluster's own frontend
//! (`proxy::pass`), which sends the backend those bytes first. A connection that names no cluster's
//! server goes to the default cluster, or is reset and counted (`okd_appliance_lb_unrouted_total`).
//!
//! The read is bounded: at most [`route::TLS_PEEK_MAX`] (or [`route::HTTP_PEEK_MAX`]) bytes,
//! within [`PEEK_TIME`] of the accept. Its buffer grows with what arrived, so a connection that
//! sends nothing holds a page, not the whole bound; each byte is parsed once (a request head
//! again at each line's end), so a client sending a byte at a time costs no more parsing than
//! one sending it whole.
//!
//! At most `PENDING_MAX` (1024) connections at once are still naming their server, and
//! `PENDING_PER_ADDRESS` (64) of them per client address (`crate::per_address`); one more is reset
//! and counted as `busy`, so trickling clients can't make the router hold more than about
//! 32 MiB of buffers, and one host can't take every slot from the rest. The names are exact
//! (`route`): `api.<d>` and `api-int.<d>` on 6443 and 22623, a name under `apps.<d>` on 443
//! and 80, case and one trailing dot ignored. A connection that names no cluster's server (no
//! SNI: an IP literal; an unknown name; not the port's protocol; nothing routable in time) goes
//! to `default_cluster` with every byte read so far, or is reset (`SO_LINGER` 0) and counted in
//! `okd_appliance_lb_unrouted_total{port,reason}`; routed ones in
//! `okd_appliance_lb_routed_total{port,cluster}`. Never a guess. A client that closes before
//! its name is complete is closed too, uncounted: it can never be answered. A routed
//! connection ends with its cluster's connections token, as on the cluster's own frontend. The
//! router terminates nothing: the ClientHello passes to the backend untouched.
//!
//! What breaks with one shared address (docs/design/several-clusters.md, §3): clients that
//! connect by IP literal without a default cluster (`oc login https://10.0.0.1:6443`; `check`
//! already reports a pointer ignition whose merge source is not this cluster's `api-int` URL),
//! prior-knowledge h2c on 80, HTTP/1.1 keep-alive requests for another cluster's name on one
//! connection (routing is per connection, as HAProxy's `use_backend` in TCP mode), and HTTP/2
//! coalescing across clusters. `render --format haproxy` of such a host file writes HAProxy's
//! equivalent (`req_ssl_sni` and `req.hdr(host)` rules, `tcp-request inspect-delay 5s`). The
//! `lb_peek` fuzz target checks that a decision on a prefix is the decision on the whole.

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::proxy;
use super::route::{self, Peeked, Routes, Unrouted};
use crate::budget::{Budget, Gate};
use crate::metrics::Metrics;
use crate::per_address::PerAddress;
use crate::plan::FrontendKind;
use crate::service::{self, Context, Running};
use crate::sockets::BoundSocket;

/// How long a client has from its connect to naming its server.
pub const PEEK_TIME: Duration = Duration::from_secs(5);
/// The peek buffer's first size.
const FIRST_PEEK: usize = 4096;
/// The most connections the router holds at once while they have not named their server yet,
/// on all its listeners: each may hold a buffer of up to [`route::TLS_PEEK_MAX`] bytes (and
/// rustls its copy) for [`PEEK_TIME`], so clients that trickle their first bytes can't make the
/// router hold more than about 32 MiB. One more is reset and counted (`busy`).
const PENDING_MAX: usize = 1024;
/// Of those, the most one client address may hold: one host can't take every slot from the
/// others (the rest of the rack's kubelets, routers and browsers).
const PENDING_PER_ADDRESS: usize = 64;

/// The connections still naming their server: all of them, and each address's.
#[derive(Debug, Clone)]
struct Pending {
    all: Arc<Semaphore>,
    per_address: PerAddress,
}

/// The routed clusters, swapped whole when a reload adds or removes one.
pub type SharedRoutes = Arc<ArcSwap<Routes>>;

/// Routes every frontend listener in `sockets` over `routes`.
pub fn start(
    sockets: Vec<BoundSocket>,
    ctx: &Context,
    routes: &SharedRoutes,
) -> anyhow::Result<Running> {
    let mut tasks: Vec<Running> = Vec::new();
    let pending = Pending {
        all: Arc::new(Semaphore::new(PENDING_MAX)),
        per_address: PerAddress::new(PENDING_PER_ADDRESS),
    };
    for bound in sockets {
        let addr = bound.local_addr;
        let gate = ctx.budget.gate(crate::budget::Kind::Lb, bound.spec.addr);
        let service = bound.spec.service;
        let kind = super::frontend_of(service)
            .with_context(|| format!("{} is not a load-balancer frontend", service.name()))?;
        let listener = bound
            .into_tcp()
            .with_context(|| format!("adopting the {} listener on {addr}", service.name()))?;
        tasks.push(Box::pin(serve(
            listener,
            kind,
            (Arc::clone(routes), pending.clone()),
            (gate, ctx.budget.clone()),
            Arc::clone(&ctx.metrics),
            ctx.shutdown.clone(),
        )));
    }
    Ok(service::all(tasks))
}

/// Routes the connections `listener` accepts over `routes`, at most as many at once still
/// naming their server as `pending` allows.
async fn serve(
    listener: TcpListener,
    kind: FrontendKind,
    (routes, pending): (SharedRoutes, Pending),
    (gate, budget): (Gate, Budget),
    metrics: Arc<Metrics>,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let port = listener.local_addr()?.port();
    proxy::accept(listener, kind, &gate, &token, move |client, peer| {
        let (routes, metrics, budget) = (Arc::clone(&routes), Arc::clone(&metrics), budget.clone());
        let own = pending.per_address.admit(peer.ip());
        let all = Arc::clone(&pending.all).try_acquire_owned();
        let limit = pending.per_address.limit();
        async move {
            let (Some(own), Ok(all)) = (own, all) else {
                metrics.lb_unrouted(port, Unrouted::Busy.reason());
                tracing::debug!(
                    "lb/{} {peer}: reset: {PENDING_MAX} connections, or {limit} of its address, are naming their server",
                    kind.name()
                );
                reset(&client);
                return;
            };
            let waiting = (own, all);
            let deadline = tokio::time::Instant::now() + PEEK_TIME;
            let read = first_bytes(&client, kind, deadline).await;
            drop(waiting);
            let (peeked, first) = match read {
                Ok(read) => read,
                // Closed (or failed) before naming anything: nothing to pass on.
                Err(e) => {
                    tracing::debug!(
                        "lb/{} {peer}: closed before naming a server: {e}",
                        kind.name()
                    );
                    return;
                }
            };
            let picked = routes.load().pick(kind, &peeked).cloned();
            match picked {
                Ok(route) => {
                    metrics.lb_routed(port, &route.id);
                    let pools = (&*route.pools, budget);
                    proxy::pass(kind, peer, (client, &first), pools, &route.token).await;
                }
                Err(why) => {
                    metrics.lb_unrouted(port, why.reason());
                    tracing::debug!(
                        "lb/{} {peer}: reset: {}",
                        kind.name(),
                        explain(why, &peeked)
                    );
                    reset(&client);
                }
            }
        }
    })
    .await
}

/// Makes dropping `client` a reset, not a close: the client learns at once that nothing is
/// there for it.
fn reset(client: &TcpStream) {
    let _ = socket2::SockRef::from(client).set_linger(Some(Duration::ZERO));
}

fn explain(why: Unrouted, peeked: &Peeked) -> String {
    match (why, peeked) {
        (Unrouted::UnknownName, Peeked::Name(name)) => format!("{name} is no cluster's name"),
        (Unrouted::NoName, _) => "it named no server".to_owned(),
        (Unrouted::Timeout, _) => format!("nothing routable within {PEEK_TIME:?}"),
        _ => "not the port's protocol".to_owned(),
    }
}

/// Reads `client`'s first bytes until they say which server it wants, or that they never
/// will, or `deadline` passes (`More`); returns the verdict and the bytes, which the backend
/// gets first (the default cluster's too: nothing read is lost). A client that closes before
/// that is an `UnexpectedEof` error: it can never be answered. Each byte is read and parsed
/// once; the buffer grows with what arrived, up to the bound.
async fn first_bytes(
    client: &TcpStream,
    kind: FrontendKind,
    deadline: tokio::time::Instant,
) -> std::io::Result<(Peeked, Vec<u8>)> {
    let max = match kind {
        FrontendKind::IngressHttp => route::HTTP_PEEK_MAX,
        _ => route::TLS_PEEK_MAX,
    };
    let mut hello = route::TlsHello::default();
    let mut head = route::HttpHead::default();
    let mut buf = vec![0u8; FIRST_PEEK.min(max)];
    let mut len = 0;
    let mut acks_quick = false;
    loop {
        if len == buf.len() {
            if len == max {
                // As much as the bound allows, and still not a whole ClientHello or head.
                buf.truncate(len);
                return Ok((Peeked::Unparsable, buf));
            }
            buf.resize((len * 2).min(max), 0);
        }
        match tokio::time::timeout_at(deadline, client.readable()).await {
            Ok(ready) => ready?,
            Err(_) => {
                buf.truncate(len);
                return Ok((Peeked::More, buf));
            }
        }
        let n = match client.try_read(buf.get_mut(len..).unwrap_or_default()) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        len += n;
        let peeked = match kind {
            FrontendKind::IngressHttp => head.feed_tail(buf.get(..len).unwrap_or_default(), n),
            _ => hello.feed(buf.get(len - n..len).unwrap_or_default()),
        };
        if peeked != Peeked::More {
            buf.truncate(len);
            return Ok((peeked, buf));
        }
        // An incomplete message: a client with Nagle's algorithm on may hold its next write
        // for the ACK of this one, which the listener's delayed-ACK mode would hold 40 ms
        // (`proxy::tune`; HAProxy's HTTP mode does the same).
        if !acks_quick {
            proxy::quick_acks(client);
            acks_quick = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the pending cap, a connection is reset at once and counted as busy; the others
    /// wait for their name as before.
    #[tokio::test]
    async fn past_the_pending_cap_a_connection_is_reset_at_once() {
        third_of_two_is_reset(Pending {
            all: Arc::new(Semaphore::new(2)),
            per_address: PerAddress::new(64),
        })
        .await;
    }

    /// So is one past its address's share, however many slots the others leave.
    #[tokio::test]
    async fn past_its_addresss_share_a_connection_is_reset_at_once() {
        third_of_two_is_reset(Pending {
            all: Arc::new(Semaphore::new(64)),
            per_address: PerAddress::new(2),
        })
        .await;
    }

    /// With `pending` full after two silent connections from 127.0.0.1, a third from there is
    /// reset at once and counted as busy; the two are still held.
    async fn third_of_two_is_reset(pending: Pending) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::new());
        let token = CancellationToken::new();
        let routes: SharedRoutes = Arc::default();
        let budget = Budget::unbounded();
        let task = tokio::spawn(serve(
            listener,
            FrontendKind::IngressHttps,
            (routes, pending),
            (budget.gate(crate::budget::Kind::Lb, addr), budget),
            Arc::clone(&metrics),
            token.clone(),
        ));
        // Two clients that say nothing hold the two permits.
        let mut silent = Vec::new();
        for _ in 0..2 {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut third = TcpStream::connect(addr).await.unwrap();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::io::AsyncReadExt::read(&mut third, &mut byte),
        )
        .await
        .expect("the third connection is answered at once");
        assert!(
            matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
            "{read:?}"
        );
        let text = metrics.encode(crate::metrics::Format::Text);
        let port = addr.port();
        let busy = format!("okd_appliance_lb_unrouted_total{{port=\"{port}\",reason=\"busy\"}} 1");
        assert!(text.contains(&busy), "{text}");
        // The silent two are still held (not reset): nothing to read yet.
        for s in &silent {
            let mut b = [0u8; 1];
            assert!(
                matches!(s.try_read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            );
        }
        token.cancel();
        task.await.unwrap().unwrap();
    }
}
