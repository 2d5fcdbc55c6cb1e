//! The TCP data path of one frontend: pick a backend, connect (trying the next one if the
//! connect is refused or times out, before the client notices), then copy both ways until both
//! sides are done: small messages are copied, bulk data goes with splice(2) through a pipe, so
//! its bytes never pass through user space (see `forward`). Half-close is passed on (one side's
//! EOF becomes a `shutdown` of the other's write half); a connection idle in both directions for the idle timeout is closed, and so is
//! one whose backend's drain timeout passes.
//!
//! Each connection is two tasks: the relay, which only copies (and stores a timestamp after each
//! write), and its keeper, which sleeps until the relay ends, the connection has been idle both
//! ways for the idle timeout, the backend's connections are cut (drain timeout) or the appliance
//! stops, and aborts the relay in the last three cases. Selecting on those signals, or arming a
//! timer, inside the relay would cost at every read of the copy loop: polling a
//! `CancellationToken` takes its mutex, one shared by every connection, and a timer per read
//! takes the timer wheel's. The timestamp is `crate::idle::Progress`, shared with the HTTP
//! server.
//!
//! Each direction copies (`recv`, then at once `send`) until a read fills the 16 KiB copy
//! buffer; from then on it carries bulk data and splices (pipes from `pipes`). A read shorter
//! than the buffer took everything the socket had queued, so it clears the socket's readiness
//! itself instead of reading once more only to hear "would block" (nginx's `ngx_unix_recv` and
//! HAProxy's `raw_sock_to_buf` use the same rule; a FIN is not lost by it, since tokio never
//! clears a "read closed" readiness): keep-alive requests measured 6.0 to 6.1 system calls each
//! against 7.3 when every direction spliced from the first byte (HAProxy 7.4 to 8.4;
//! `perf stat -e raw_syscalls:sys_enter` during wrk). The copy buffer is one per runtime
//! thread, and only bytes the other side would not take yet are copied into a buffer of the
//! connection's own, so an idle connection holds no buffer (`tests/e2e/lb.rs`
//! `idle_connections_hold_no_copy_buffers` holds it under 12 KiB a connection; about 3 KiB
//! measured, 34 KiB with a buffer per direction).
//!
//! A read that comes with the peer's FIN ends its direction without one more read to hear the
//! EOF (`read_through`): a system call fewer a short connection. The client's first message is
//! acknowledged by the answer when it came whole, by a quick ACK at once when not (see
//! `tune`: a packet fewer a connection); on the backend's side, holding the
//! handshake's last ACK for the first bytes sent (`tcp-smart-connect`) needs to know at connect
//! time that the client has sent some, or a backend that speaks first waits for the kernel's
//! timer, 200 ms (the greeting backends of `tests/e2e/lb.rs` `reload_under_load_drops_nothing`
//! did; tokio's readiness of a socket just accepted did not tell a silent client from one that
//! had sent).

use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use nix::fcntl::{SpliceFFlags, splice};
use nix::sys::socket::MsgFlags;
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::pipes::{self, Pipe};
use super::pool::{Claim, Pools};
use super::route;
use crate::budget::{Budget, Gate};
use crate::idle::Progress;
use crate::plan::FrontendKind;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// As HAProxy's `timeout client`/`timeout server 1h` in the OpenShift docs: API watches idle long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(3600);
/// The copy buffer of each direction: a read that fills it switches the direction to splice.
const BUFFER: usize = 16 * 1024;

/// Accepts on `listener` until `stop` is cancelled; each connection is balanced over `pools`
/// and relayed until it ends or `token` is cancelled.
pub async fn serve(
    listener: TcpListener,
    kind: FrontendKind,
    pools: Arc<ArcSwap<Pools>>,
    (gate, budget): (Gate, Budget),
    (stop, token): (CancellationToken, CancellationToken),
) -> anyhow::Result<()> {
    accept(listener, kind, &gate, &stop, move |client, peer| {
        let (pools, token, budget) = (Arc::clone(&pools), token.clone(), budget.clone());
        async move { pass(kind, peer, (client, &[]), (&pools, budget), &token).await }
    })
    .await
}

/// Accepts on `listener` until `token` is cancelled, and runs `handle` on each connection in a
/// task of its own, as many at once as `gate` admits.
pub(super) async fn accept<F, Fut>(
    listener: TcpListener,
    kind: FrontendKind,
    gate: &Gate,
    token: &CancellationToken,
    handle: F,
) -> anyhow::Result<()>
where
    F: Fn(TcpStream, std::net::SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tune(&listener, kind);
    // Registered with the token once, not at every connection (each `cancelled()` takes the
    // token's lock when it is polled and when it is dropped).
    let cancelled = token.cancelled();
    let mut cancelled = std::pin::pin!(cancelled);
    loop {
        let (client, peer) = tokio::select! {
            () = &mut cancelled => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("lb/{}: accept: {e}", kind.name());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let permit = match gate.admit(peer.ip()) {
            Ok(ticket) => ticket,
            Err(why) => {
                if let Some(n) = REFUSED.admit(std::time::Instant::now()) {
                    tracing::warn!("lb/{}: {why}; refusing {peer} (+{n} unlogged)", kind.name());
                }
                continue;
            }
        };
        let handled = handle(client, peer);
        tokio::spawn(async move {
            let _permit = permit;
            crate::isolate::connection(crate::isolate::Wire::Lb, handled).await;
        });
    }
}

/// The listener's options, which every accepted socket inherits (Linux copies them into the
/// child socket): TCP_NODELAY, so that the relay needs no setsockopt on the client's side, and
/// delayed-ACK mode (TCP_QUICKACK off, HAProxy's `option tcp-smart-accept`, set on its
/// listeners the same way): the client's first message is acknowledged by the answer relayed
/// back instead of by a bare ACK of its own, which the load's side pays to send and to take
/// (22.7 → 21.5 packets a connection in bench/lb.sh). A client with Nagle's algorithm on that
/// sends its first message in pieces would wait for that ACK, 40 ms of the kernel's timer,
/// before its next piece leaves; so as HAProxy does in HTTP mode, quick ACKs go back on for a
/// client whose first bytes are not a whole message (`route::first_message_whole`: a
/// ClientHello, or an HTTP request with its body), at once (`forward`, and `router` while it
/// reads the name).
fn tune(listener: &TcpListener, kind: FrontendKind) {
    let socket = socket2::SockRef::from(listener);
    if let Err(e) = socket.set_tcp_nodelay(true) {
        tracing::warn!("lb/{}: TCP_NODELAY on the listener: {e}", kind.name());
    }
    if let Err(e) = socket.set_tcp_quickack(false) {
        tracing::warn!("lb/{}: delayed ACKs on the listener: {e}", kind.name());
    }
}

/// Turns quick ACKs back on for `client`, which also sends the ACK its socket holds now.
pub(super) fn quick_acks(client: &TcpStream) {
    if let Err(e) = socket2::SockRef::from(client).set_tcp_quickack(true) {
        tracing::debug!("lb: TCP_QUICKACK on a client's socket: {e}");
    }
}

/// Connections refused at a gate, logged once per 10 s.
static REFUSED: crate::isolate::LogGate = crate::isolate::LogGate::new();

/// Passes `client` to a backend of `kind` in `pools`, sending it `first` (what the client
/// sent before it was passed) before anything else, and relays until the connection ends or
/// `token` is cancelled.
pub(super) async fn pass(
    kind: FrontendKind,
    peer: std::net::SocketAddr,
    (client, first): (TcpStream, &[u8]),
    (pools, budget): (&ArcSwap<Pools>, Budget),
    token: &CancellationToken,
) {
    let Some(mut upstream) = connect(kind, pools).await else {
        tracing::debug!("lb/{}: no backend for {peer}", kind.name());
        return;
    };
    if !first.is_empty() {
        let sent = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio::io::AsyncWriteExt::write_all(&mut upstream.stream, first),
        )
        .await;
        if !matches!(sent, Ok(Ok(()))) {
            tracing::debug!(
                "lb/{} {peer}: {} did not take the client's first bytes",
                kind.name(),
                upstream.claim.backend().addr
            );
            return;
        }
        let backend = upstream.claim.backend();
        backend
            .bytes_to_backend
            .fetch_add(first.len() as u64, Ordering::Relaxed);
        if !route::first_message_whole(kind, first) {
            quick_acks(&client);
        }
    }
    // The relay looks at the client's first message if nobody has.
    let first = first.is_empty().then_some(kind);
    keep(kind, peer, (client, upstream, first), budget, token).await;
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
    (client, upstream, first): (TcpStream, Upstream, Option<FrontendKind>),
    budget: Budget,
    token: &CancellationToken,
) {
    let Upstream {
        claim,
        stream,
        mut cut,
    } = upstream;
    let addr = claim.backend().addr;
    let progress = Progress::new();
    let ends = Ends { kind, peer, addr };
    let mut relay = tokio::spawn(relay(
        (client, stream, first),
        claim,
        progress.clone(),
        budget,
        ends,
    ));
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
        joined = &mut relay => match joined {
            // Each side's close has its line already (see `relay`).
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!("lb/{} {peer} <-> {addr}: {e}", kind.name()),
            // A panic: the relay is never aborted in this branch.
            Err(e) => tracing::debug!("lb/{} {peer} <-> {addr}: {e}", kind.name()),
        },
    }
}

/// The two ends of a connection, for the data path's debug lines.
#[derive(Clone, Copy)]
struct Ends {
    kind: FrontendKind,
    peer: std::net::SocketAddr,
    addr: std::net::SocketAddr,
}

async fn connect(kind: FrontendKind, pools: &ArcSwap<Pools>) -> Option<Upstream> {
    let snapshot = pools.load();
    let pool = snapshot.pool(kind)?;
    for backend in pool.candidates(snapshot.balance()) {
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
            snapshot.failures().notify_one();
        }
    }
    None
}

/// Copies both ways until both are done; the claim keeps the connection counted meanwhile.
async fn relay(
    (client, upstream, first): (TcpStream, TcpStream, Option<FrontendKind>),
    claim: Claim,
    progress: Progress,
    budget: Budget,
    ends: Ends,
) -> std::io::Result<()> {
    let backend = claim.backend();
    backend.connections.fetch_add(1, Ordering::Relaxed);
    // The client's socket has it from the listener (see `accept`).
    let _ = upstream.set_nodelay(true);
    // Whether one direction has ended: the one that ends second needs no shutdown, since
    // both sockets close as the relay returns, and a close sends the same FIN (nothing is
    // left unread in either socket, so it is a FIN and not a reset).
    let one_ended = std::sync::atomic::AtomicBool::new(false);
    tokio::try_join!(
        async {
            forward(
                (&client, &upstream),
                &backend.bytes_to_backend,
                &progress,
                (&budget, first),
            )
            .await?;
            half_close(
                &upstream,
                ends,
                "client",
                one_ended.swap(true, Ordering::AcqRel),
            )
        },
        async {
            forward(
                (&upstream, &client),
                &backend.bytes_to_client,
                &progress,
                (&budget, None),
            )
            .await?;
            half_close(
                &client,
                ends,
                "backend",
                one_ended.swap(true, Ordering::AcqRel),
            )
        },
    )?;
    Ok(())
}

/// `side` ended its half of the connection (its EOF): says so, then shuts down `to`'s write
/// half, unless the other side had `ended` too (the relay closes both sockets next). To
/// `to`'s peer that shutdown looks like a close while the relay goes on, so it gets a line of
/// its own, written before the shutdown so it is there when the peer sees the EOF.
fn half_close(to: &TcpStream, ends: Ends, side: &str, ended: bool) -> std::io::Result<()> {
    let Ends { kind, peer, addr } = ends;
    tracing::debug!(
        "lb/{} {peer} <-> {addr}: the {side} closed its side",
        kind.name()
    );
    if ended {
        return Ok(());
    }
    socket2::SockRef::from(to).shutdown(std::net::Shutdown::Write)
}

/// Moves one direction until EOF (the caller passes the EOF on: [`half_close`]). Messages are
/// copied (`recv`, `send`) until a read fills the copy buffer: the direction then carries bulk
/// data, and the rest goes with splice(2) through a pipe, the bytes never entering user space
/// (bench/lb.sh: ~1.5x the throughput of copying when splice came in). Requests and small
/// responses stay on the copy path, which needs no pipe and, thanks to [`read_through`], one
/// system call fewer per message than splicing, and no memory of its own between messages.
async fn forward(
    (from, to): (&TcpStream, &TcpStream),
    counter: &AtomicU64,
    progress: &Progress,
    (budget, first): (&Budget, Option<FrontendKind>),
) -> std::io::Result<()> {
    // `first`: `from` is a client whose first message is still to come, to a frontend of
    // that kind; its ACKs wait for the answer only if it comes whole (see `tune`).
    let mut first = first;
    loop {
        let mut whole = true;
        let moved = read_through(from, to, |bytes| {
            if let Some(kind) = first {
                whole = route::first_message_whole(kind, bytes);
            }
        })
        .await?;
        if first.take().is_some() && !whole {
            quick_acks(from);
        }
        let Some(Moved { n, rest, last }) = moved else {
            return Ok(());
        };
        if let Some(rest) = rest {
            write_all(to, &rest).await?;
        }
        counter.fetch_add(n as u64, Ordering::Relaxed);
        progress.touch();
        if last {
            return Ok(());
        }
        if n == BUFFER {
            match pipes::take(budget) {
                Ok(pipe) => {
                    splice_pump(from, to, &pipe, counter, progress).await?;
                    // Ended at EOF with every byte written on: the pipe is empty.
                    pipes::give_back(pipe);
                    return Ok(());
                }
                // Out of descriptors (or out of budget): go on copying.
                Err(e) => tracing::debug!("lb: no pipe for splice ({e}); copying"),
            }
        }
    }
}

thread_local! {
    /// The copy buffer, one per runtime thread: [`read_through`] reads into it and writes from it
    /// without an await in between, so an idle connection holds no buffer (as HAProxy and nginx
    /// allocate theirs only while bytes wait in them).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; BUFFER]);
}

/// Reads what `from` has and writes at once what `to` takes: `None` at EOF, else the bytes
/// read and a copy of those `to` did not take yet. A read shorter than the buffer took
/// everything the socket had queued (TCP hands over all queued bytes up to the length asked),
/// so the socket's readiness is cleared then and there, instead of by one more read that would
/// only say "would block": the next data or the FIN raises it again (epoll is edge-triggered,
/// and tokio never clears a "closed" readiness). nginx's `ngx_unix_recv` and HAProxy's
/// `raw_sock_to_buf` rely on the same rule.
async fn read_through(
    from: &TcpStream,
    to: &TcpStream,
    mut seen: impl FnMut(&[u8]),
) -> std::io::Result<Option<Moved>> {
    loop {
        let ready = from.ready(Interest::READABLE).await?;
        // The peer's FIN is in already (and no error): a read shorter than the buffer takes
        // the last bytes before it, since TCP takes a FIN only in sequence, after every byte
        // it follows. The direction then ends with those bytes, without a read that would
        // only say EOF.
        let closing = ready.is_read_closed() && !ready.is_error();
        let mut short = None;
        let read = from.try_io(Interest::READABLE, || {
            SCRATCH.with_borrow_mut(|buf| {
                let n = nix::sys::socket::recv(from.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT)?;
                if n == 0 {
                    return Ok(None);
                }
                let last = closing && n < buf.len();
                seen(&buf[..n]);
                let sent = match to.try_write(&buf[..n]) {
                    Ok(k) => k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
                    Err(e) => return Err(e),
                };
                let moved = Moved {
                    n,
                    rest: (sent < n).then(|| buf[sent..n].to_vec()),
                    last,
                };
                if n < buf.len() {
                    short = Some(moved);
                    // Tells tokio the socket is drained.
                    return Err(std::io::ErrorKind::WouldBlock.into());
                }
                Ok(Some(moved))
            })
        });
        match read {
            Ok(moved) => return Ok(moved),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Some(moved) = short {
                    return Ok(Some(moved));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// What one [`read_through`] moved.
struct Moved {
    /// Bytes read.
    n: usize,
    /// A copy of those the other side did not take yet.
    rest: Option<Vec<u8>>,
    /// The peer's FIN came with them: the direction is at its end.
    last: bool,
}

async fn write_all(to: &TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        to.writable().await?;
        match to.try_write(bytes) {
            Ok(k) => bytes = &bytes[k..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Size asked of each splice: a default Linux pipe holds 64 KiB.
const PIPE_CHUNK: usize = 64 * 1024;

/// Moves one direction through `pipe` with splice(2), socket to pipe then pipe to socket,
/// emptying the pipe before reading more, until EOF.
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
            return Ok(());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepted sockets have TCP_NODELAY from the listener, and the listener is in delayed-ACK
    /// mode (see `tune`: an accepted socket's getsockopt does not show the mode it inherits;
    /// `tests/e2e/lb.rs` `a_client_sending_its_first_message_in_pieces_does_not_wait` checks
    /// the ACKs on the wire).
    #[tokio::test]
    async fn accepted_sockets_have_no_delay_and_delayed_acks() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        tune(&listener, FrontendKind::IngressHttp);
        assert!(!socket2::SockRef::from(&listener).tcp_quickack().unwrap());
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(socket2::SockRef::from(&accepted).tcp_nodelay().unwrap());
    }
}
