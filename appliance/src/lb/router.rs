//! The host's router at a shared frontend: one listener per port for every cluster. Each
//! connection's first bytes are read until they name a server ([`route`]), then the
//! connection goes to that cluster's pools and on through the same data path as a cluster's
//! own frontend ([`proxy::pass`]), which sends the backend those bytes first. A connection that names no cluster's server goes to the default cluster,
//! or is reset and counted (`okd_appliance_lb_unrouted_total`).
//!
//! The read is bounded: at most [`route::TLS_PEEK_MAX`] (or [`route::HTTP_PEEK_MAX`]) bytes,
//! within [`PEEK_TIME`] of the accept. Its buffer grows with what arrived, so a connection that
//! sends nothing holds a page, not the whole bound; each byte is parsed once (a request head
//! again at each line's end), so a client sending a byte at a time costs no more parsing than
//! one sending it whole.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::proxy;
use super::route::{self, Peeked, Routes, Unrouted};
use crate::metrics::Metrics;
use crate::plan::FrontendKind;
use crate::service::{self, Context, Running};
use crate::sockets::BoundSocket;

/// How long a client has from its connect to naming its server.
pub const PEEK_TIME: Duration = Duration::from_secs(5);
/// The peek buffer's first size.
const FIRST_PEEK: usize = 4096;

/// The routed clusters, swapped whole when a reload adds or removes one.
pub type SharedRoutes = Arc<ArcSwap<Routes>>;

/// Routes every frontend listener in `sockets` over `routes`.
pub fn start(
    sockets: Vec<BoundSocket>,
    ctx: &Context,
    routes: &SharedRoutes,
) -> anyhow::Result<Running> {
    let mut tasks: Vec<Running> = Vec::new();
    for bound in sockets {
        let addr = bound.local_addr;
        let service = bound.spec.service;
        let kind = super::frontend_of(service)
            .with_context(|| format!("{} is not a load-balancer frontend", service.name()))?;
        let listener = bound
            .into_tcp()
            .with_context(|| format!("adopting the {} listener on {addr}", service.name()))?;
        tasks.push(Box::pin(serve(
            listener,
            kind,
            Arc::clone(routes),
            Arc::clone(&ctx.metrics),
            ctx.shutdown.clone(),
        )));
    }
    Ok(service::all(tasks))
}

async fn serve(
    listener: TcpListener,
    kind: FrontendKind,
    routes: SharedRoutes,
    metrics: Arc<Metrics>,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let port = listener.local_addr()?.port();
    proxy::accept(listener, kind, &token, move |client, peer| {
        let (routes, metrics) = (Arc::clone(&routes), Arc::clone(&metrics));
        async move {
            let deadline = tokio::time::Instant::now() + PEEK_TIME;
            let (peeked, first) = match first_bytes(&client, kind, deadline).await {
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
                    proxy::pass(kind, peer, (client, &first), &route.pools, &route.token).await;
                }
                Err(why) => {
                    metrics.lb_unrouted(port, why.reason());
                    tracing::debug!(
                        "lb/{} {peer}: reset: {}",
                        kind.name(),
                        explain(why, &peeked)
                    );
                    // A reset, not a close: the client learns at once that nothing is there.
                    let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
                }
            }
        }
    })
    .await
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
        let n = match client.try_read(&mut buf[len..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        len += n;
        let peeked = match kind {
            FrontendKind::IngressHttp => head.feed_tail(&buf[..len], n),
            _ => hello.feed(&buf[len - n..len]),
        };
        if peeked != Peeked::More {
            buf.truncate(len);
            return Ok((peeked, buf));
        }
    }
}
