//! The TCP data path of one frontend: pick a backend, connect (trying the next one if the
//! connect is refused or times out, before the client notices), then copy both ways until both
//! sides are done. Half-close is passed on (one side's EOF becomes a `shutdown` of the other's
//! write half); a connection idle in both directions for the idle timeout is closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::pool::{Backend, Pools};
use crate::plan::FrontendKind;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// As HAProxy's `timeout client`/`timeout server 1h` in the OpenShift docs: API watches idle long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(3600);
const MAX_CONNECTIONS: usize = 20_000;
const BUFFER: usize = 32 * 1024;

pub async fn serve(
    listener: TcpListener,
    kind: FrontendKind,
    pools: Arc<ArcSwap<Pools>>,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (client, peer) = tokio::select! {
            () = token.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("lb/{}: accept: {e}", kind.name());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(
                "lb/{}: {MAX_CONNECTIONS} connections open; refusing {peer}",
                kind.name()
            );
            continue;
        };
        let (pools, token) = (Arc::clone(&pools), token.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let Some((backend, upstream)) = connect(kind, &pools).await else {
                tracing::debug!("lb/{}: no backend for {peer}", kind.name());
                return;
            };
            tokio::select! {
                () = token.cancelled() => {}
                result = relay(client, upstream, &backend) => {
                    if let Err(e) = result {
                        tracing::debug!("lb/{} {peer} <-> {}: {e}", kind.name(), backend.addr);
                    }
                }
            }
        });
    }
}

async fn connect(kind: FrontendKind, pools: &ArcSwap<Pools>) -> Option<(Arc<Backend>, TcpStream)> {
    let snapshot = pools.load();
    let pool = snapshot.pool(kind)?;
    for backend in pool.candidates(snapshot.balance) {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(backend.addr)).await {
            Ok(Ok(stream)) => return Some((backend, stream)),
            Ok(Err(e)) => tracing::debug!(
                "lb/{}: {} refused: {e}; trying the next",
                kind.name(),
                backend.addr
            ),
            Err(_) => tracing::debug!(
                "lb/{}: {} did not answer; trying the next",
                kind.name(),
                backend.addr
            ),
        }
    }
    None
}

/// Counts a connection on its backend for as long as it lives.
struct Active<'a>(&'a Backend);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn relay(client: TcpStream, upstream: TcpStream, backend: &Backend) -> std::io::Result<()> {
    backend.active.fetch_add(1, Ordering::Relaxed);
    backend.connections.fetch_add(1, Ordering::Relaxed);
    let _active = Active(backend);
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let started = Instant::now();
    let last = AtomicU64::new(0);
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    tokio::try_join!(
        pump(cr, uw, &backend.bytes_to_backend, &last, started),
        pump(ur, cw, &backend.bytes_to_client, &last, started),
    )?;
    Ok(())
}

/// Copies one direction until EOF, then shuts down the other side's write half (half-close).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    counter: &AtomicU64,
    last: &AtomicU64,
    started: Instant,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = match tokio::time::timeout(IDLE_TIMEOUT, from.read(&mut buf)).await {
            Ok(r) => r?,
            Err(_) => {
                // Quiet this way; closed only if the other way was quiet too.
                let idle = started
                    .elapsed()
                    .saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
                if idle >= IDLE_TIMEOUT {
                    return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "idle"));
                }
                continue;
            }
        };
        if n == 0 {
            to.shutdown().await?;
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
        counter.fetch_add(n as u64, Ordering::Relaxed);
        last.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}
