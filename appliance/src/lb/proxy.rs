//! The TCP data path of one frontend: pick a backend, connect (trying the next one if the
//! connect is refused or times out, before the client notices), then copy both ways until both
//! sides are done: with splice(2) through a pipe per direction, so the bytes never pass through
//! user space (a read/write copy when no pipe can be had). Half-close is passed on (one side's
//! EOF becomes a `shutdown` of the other's write half); a connection idle in both directions for the idle timeout is closed, and so is
//! one whose backend's drain timeout passes.
//!
//! Each connection is two tasks: the relay, which only copies (and stores a timestamp after each
//! write), and its keeper, which sleeps until the relay ends, the connection has been idle both
//! ways for the idle timeout, the backend's connections are cut (drain timeout) or the appliance
//! stops, and aborts the relay in the last three cases. Selecting on those signals, or arming a
//! timer, inside the relay would cost at every read of the copy loop: polling a
//! `CancellationToken` takes its mutex, one shared by every connection, and a timer per read
//! takes the timer wheel's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use nix::fcntl::{SpliceFFlags, splice};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::pipes::{self, Pipe};
use super::pool::{Claim, Pools};
use crate::idle::Progress;
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
            let Some(upstream) = connect(kind, &pools).await else {
                tracing::debug!("lb/{}: no backend for {peer}", kind.name());
                return;
            };
            keep(kind, peer, client, upstream, &token).await;
        });
    }
}

/// A connection made to a backend, counted on it, with the backend's cut signal.
struct Upstream {
    claim: Claim,
    stream: TcpStream,
    cut: watch::Receiver<u64>,
}

/// Runs the relay of one connection in its own task until it ends, or aborts it when the
/// backend's connections are cut or the appliance stops.
async fn keep(
    kind: FrontendKind,
    peer: std::net::SocketAddr,
    client: TcpStream,
    upstream: Upstream,
    token: &CancellationToken,
) {
    let Upstream {
        claim,
        stream,
        mut cut,
    } = upstream;
    let addr = claim.backend().addr;
    let progress = Progress::new();
    let mut relay = tokio::spawn(relay(client, stream, claim, progress.clone()));
    tokio::select! {
        () = token.cancelled() => relay.abort(),
        () = progress.stalled(IDLE_TIMEOUT) => {
            relay.abort();
            tracing::debug!("lb/{} {peer} <-> {addr}: idle for {IDLE_TIMEOUT:?}; closed", kind.name());
        }
        Ok(()) = cut.changed() => {
            relay.abort();
            tracing::debug!("lb/{} {peer} <-> {addr}: closed at the drain timeout", kind.name());
        }
        joined = &mut relay => {
            if let Ok(Err(e)) = joined {
                tracing::debug!("lb/{} {peer} <-> {addr}: {e}", kind.name());
            }
        }
    }
}

async fn connect(kind: FrontendKind, pools: &ArcSwap<Pools>) -> Option<Upstream> {
    let snapshot = pools.load();
    let pool = snapshot.pool(kind)?;
    for backend in pool.candidates(snapshot.balance) {
        // Drained (or down) since the pick: the next one.
        let Some((claim, cut)) = backend.claim() else {
            continue;
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(backend.addr)).await {
            Ok(Ok(stream)) => return Some(Upstream { claim, stream, cut }),
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
        // The checker takes a look now rather than at its next interval.
        if backend.suspect() {
            snapshot.failures.notify_one();
        }
    }
    None
}

/// Copies both ways until both are done; the claim keeps the connection counted meanwhile.
async fn relay(
    client: TcpStream,
    upstream: TcpStream,
    claim: Claim,
    progress: Progress,
) -> std::io::Result<()> {
    let backend = claim.backend();
    backend.connections.fetch_add(1, Ordering::Relaxed);
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    // splice(2) through a pipe per direction: the bytes never enter user space (bench/lb.sh:
    // ~1.5x the throughput of read/write). Without pipes (out of descriptors), copy instead.
    match (pipes::take(), pipes::take()) {
        (Ok(up), Ok(down)) => {
            tokio::try_join!(
                splice_pump(
                    &client,
                    &upstream,
                    &up,
                    &backend.bytes_to_backend,
                    &progress
                ),
                splice_pump(
                    &upstream,
                    &client,
                    &down,
                    &backend.bytes_to_client,
                    &progress
                ),
            )?;
            // Both directions ended at EOF with every byte written on: the pipes are empty.
            pipes::give_back(up);
            pipes::give_back(down);
            return Ok(());
        }
        (Err(e), _) | (_, Err(e)) => {
            tracing::debug!("lb: no pipe for splice ({e}); copying through user space");
        }
    }
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    tokio::try_join!(
        pump(cr, uw, &backend.bytes_to_backend, &progress),
        pump(ur, cw, &backend.bytes_to_client, &progress),
    )?;
    Ok(())
}

/// Copies one direction until EOF, then shuts down the other side's write half (half-close).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    counter: &AtomicU64,
    progress: &Progress,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            to.shutdown().await?;
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
        counter.fetch_add(n as u64, Ordering::Relaxed);
        progress.touch();
    }
}

/// Size asked of each splice: a default Linux pipe holds 64 KiB.
const PIPE_CHUNK: usize = 64 * 1024;

/// Moves one direction through `pipe` with splice(2), socket to pipe then pipe to socket,
/// emptying the pipe before reading more; at EOF shuts down the other side's write half
/// (half-close).
async fn splice_pump(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &Pipe,
    counter: &AtomicU64,
    progress: &Progress,
) -> std::io::Result<()> {
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    loop {
        let n = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                Ok(splice(from, None, &pipe.write, None, PIPE_CHUNK, flags)?)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            return socket2::SockRef::from(to).shutdown(std::net::Shutdown::Write);
        }
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                Ok(splice(&pipe.read, None, to, None, left, flags)?)
            }) {
                Ok(k) => left -= k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        counter.fetch_add(n as u64, Ordering::Relaxed);
        progress.touch();
    }
}
