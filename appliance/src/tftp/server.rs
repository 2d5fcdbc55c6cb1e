//! TFTP transfers: each read request admitted by [`Admission`] gets its own task and
//! ephemeral socket; blocks are resent when an ACK does not come in time, and a transfer gives
//! up after a few silent rounds.
//!
//! Every way a transfer can hold its slot is bounded: the client's `timeout` option is honoured
//! only up to [`MAX_TIMEOUT_SECS`] (a larger one is declined, RFC 2347, and the default used);
//! a first packet nobody acknowledges is sent [`FIRST_TRIES`] times, so a spoofed request is
//! forgotten within seconds; later blocks get [`RETRIES`] tries; a whole transfer ends after
//! [`MAX_TRANSFER`].
//!
//! A request turned away (by [`Admission`], or because the process's descriptor budget is
//! spent) gets silence, not an ERROR: an ERROR ends a PXE boot, while silence makes the
//! firmware ask again.

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::admission::{Admission, Admit, Ticket};
use super::files::{BootFiles, Loaded};
use super::packet::{self, DATA, DEFAULT_BLOCK, ReadRequest, Request};
use crate::plan;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest `timeout` option honoured (RFC 2349 allows 255 s): with 255 s a spoofed
/// request would hold its slot for minutes.
pub const MAX_TIMEOUT_SECS: u8 = 3;
/// Sends of the first packet (OACK or DATA 1) before a client that never answered is given up.
/// A real client that lost it repeats its request.
pub const FIRST_TRIES: usize = 2;
/// Sends of every later block.
pub const RETRIES: usize = 5;
/// A transfer, however slowly acknowledged, ends after this (a boot file takes seconds).
pub const MAX_TRANSFER: Duration = Duration::from_secs(300);
/// Transfers at once per client address: firmware fetches one file at a time, and a few allow
/// for a retry that starts before the old transfer gave up.
pub const PER_CLIENT: usize = 4;
/// How long a transfer whose client has not acknowledged anything is safe from eviction by
/// any newcomer (see `admission`): far longer than a round trip on a boot network.
pub const PATIENCE: Duration = Duration::from_secs(1);

/// Serves read requests arriving on `socket` until `token` is cancelled, with as many
/// transfers at once as `transfers` (`budget::Kind::Transfers`, 64 when the descriptors are not
/// cut; PXE boots of a whole rack stay well below) allows, each holding its socket and file of
/// the process's descriptors.
pub async fn serve(
    socket: UdpSocket,
    plan: plan::Handle,
    transfers: crate::budget::Gate,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let local = socket.local_addr()?;
    let admission = Admission::new(transfers.connections(), PER_CLIENT, PATIENCE);
    let files = Arc::new(BootFiles::default());
    let mut buf = vec![0u8; 1500];
    loop {
        let (n, client) = tokio::select! {
            () = token.cancelled() => return Ok(()),
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!("tftp receive: {e}");
                    continue;
                }
            },
        };
        let (ticket, path, req) = match receive(
            buf.get(..n).unwrap_or_default(),
            client,
            &admission,
            &plan.load(),
        ) {
            Step::Ignore => continue,
            Step::Refuse(error) => {
                let _ = socket.send_to(&error, client).await;
                continue;
            }
            Step::Start { ticket, path, req } => (ticket, path, req),
        };
        // Its socket and file, when the process has them (else nothing goes back, as over a
        // limit: the client repeats its request).
        let Ok(descriptors) = transfers.descriptors() else {
            tracing::debug!("tftp {client}: the process's descriptor budget is spent");
            continue;
        };
        let (token, files) = (token.clone(), Arc::clone(&files));
        tokio::spawn(async move {
            crate::isolate::connection(crate::isolate::Wire::Tftp, async move {
            let _descriptors = descriptors;
            let evicted = ticket.evicted().clone();
            tokio::select! {
                () = token.cancelled() => {}
                () = evicted.cancelled() => {
                    tracing::debug!("tftp {client}: transfer gave way to a newer request");
                }
                result = tokio::time::timeout(MAX_TRANSFER, transfer(local, client, files, path, req, &ticket)) => {
                    match result {
                        Err(_) => tracing::info!("tftp {client}: transfer ended after {MAX_TRANSFER:?}"),
                        Ok(Err(e)) => tracing::debug!("tftp transfer to {client}: {e}"),
                        Ok(Ok(())) => {}
                    }
                }
            }
        })
            .await;
        });
    }
}

/// What one datagram on the listening socket leads to.
#[derive(Debug)]
pub enum Step {
    /// Nothing goes back: not a request, a retransmission, or over a limit (a real client
    /// repeats its request; an ERROR would end its boot attempt, a flood gets nothing back).
    Ignore,
    /// This ERROR packet goes back.
    Refuse(Vec<u8>),
    /// A transfer of `path` (`None`: a name the DHCP server never hands out, answered "not
    /// found" by the transfer) in the slot `ticket` holds.
    Start {
        ticket: Ticket,
        path: Option<PathBuf>,
        req: ReadRequest,
    },
}

/// Decides what the datagram `data` from `client` leads to: parsed (a panic while parsing is
/// counted and the datagram dropped, `isolate::packet`), admitted, and its file looked up in
/// `plan`'s iPXE directory. The fuzz target `tftp_request` drives this.
pub fn receive(
    data: &[u8],
    client: SocketAddr,
    admission: &Arc<Admission>,
    plan: &plan::Plan,
) -> Step {
    let Some(request) =
        crate::isolate::packet(crate::isolate::Wire::Tftp, || packet::parse_request(data))
    else {
        return Step::Ignore;
    };
    let req = match request {
        Request::Ignore => return Step::Ignore,
        Request::Refuse(c, message) => return Step::Refuse(packet::error(c, message)),
        Request::Read(req) => req,
    };
    let ticket = match admission.admit(client, data, Instant::now()) {
        Admit::Start(ticket) => ticket,
        Admit::Duplicate => return Step::Ignore,
        Admit::ClientLimit => {
            tracing::debug!("tftp {client}: {PER_CLIENT} transfers to this address running");
            return Step::Ignore;
        }
        Admit::Busy => {
            tracing::debug!("tftp {client}: every transfer slot is taken");
            return Step::Ignore;
        }
    };
    let path = plan.files.ipxe_binary(&req.file);
    Step::Start { ticket, path, req }
}

/// The boot file at `path` (from [`plan::BootFiles::ipxe_binary`]; `None` for a name the DHCP
/// server never hands out), on the blocking pool: `stat` and a read when the file is new or
/// changed are file-system calls that may block.
async fn load(files: Arc<BootFiles>, path: Option<PathBuf>) -> std::io::Result<Loaded> {
    tokio::task::spawn_blocking(move || files.load(path.as_deref()))
        .await
        .map_err(std::io::Error::other)?
}

async fn transfer(
    local: SocketAddr,
    client: SocketAddr,
    files: Arc<BootFiles>,
    path: Option<PathBuf>,
    req: ReadRequest,
    ticket: &Ticket,
) -> std::io::Result<()> {
    // A fresh port on the address the request came to, so the reply's source is what the client expects.
    let socket = UdpSocket::bind(SocketAddr::new(local.ip(), 0)).await?;
    socket.connect(client).await?;
    let data = match load(files, path).await? {
        Loaded::File(data) => data,
        Loaded::Refused(c, message) => {
            tracing::info!(
                "tftp {client}: {} refused: {message}",
                req.file.escape_debug()
            );
            socket.send(&packet::error(c, message)).await?;
            return Ok(());
        }
    };
    let size = data.len();
    tracing::info!(
        "tftp {client}: sending {} ({size} bytes)",
        req.file.escape_debug()
    );
    let block_size = req.block_size.unwrap_or(DEFAULT_BLOCK);
    // A timeout above the cap is declined: left out of the OACK, the default applies.
    let timeout_secs = req.timeout_secs.filter(|&t| t <= MAX_TIMEOUT_SECS);
    let timeout = timeout_secs.map_or(DEFAULT_TIMEOUT, |t| Duration::from_secs(t.into()));
    let mut options = Vec::new();
    if let Some(b) = req.block_size {
        options.push(("blksize", b.to_string()));
    }
    if req.wants_size {
        options.push(("tsize", size.to_string()));
    }
    if let Some(t) = timeout_secs {
        options.push(("timeout", t.to_string()));
    }
    let mut ack_buf = vec![0u8; 516];
    let mut answered = false;
    let tries = |answered: bool| if answered { RETRIES } else { FIRST_TRIES };
    if !options.is_empty() {
        // OACK is acknowledged as block 0 (RFC 2347).
        let oack = packet::oack(&options);
        if !exchange(&socket, &oack, 0, timeout, tries(false), &mut ack_buf).await? {
            return Ok(());
        }
        answered = true;
        ticket.answered();
    }
    let blocks = data.len() / block_size + 1;
    let mut out = Vec::with_capacity(block_size + 4);
    for i in 0..blocks {
        let chunk = data.get(i * block_size..).unwrap_or_default();
        let chunk = chunk.get(..block_size).unwrap_or(chunk);
        // Block numbers start at 1 and roll over past 65535, as most clients expect.
        let number = ((i + 1) % 65_536) as u16;
        out.clear();
        out.extend_from_slice(&DATA.to_be_bytes());
        out.extend_from_slice(&number.to_be_bytes());
        out.extend_from_slice(chunk);
        if !exchange(
            &socket,
            &out,
            number,
            timeout,
            tries(answered),
            &mut ack_buf,
        )
        .await?
        {
            tracing::info!(
                "tftp {client}: gave up on {} at block {number}",
                req.file.escape_debug()
            );
            return Ok(());
        }
        if !answered {
            answered = true;
            ticket.answered();
        }
    }
    Ok(())
}

/// Sends `packet` until block `number` is acknowledged; false after `tries` sends or on an
/// ERROR from the client.
async fn exchange(
    socket: &UdpSocket,
    packet: &[u8],
    number: u16,
    timeout: Duration,
    tries: usize,
    buf: &mut [u8],
) -> std::io::Result<bool> {
    for _ in 0..tries {
        socket.send(packet).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, socket.recv(buf)).await {
                Err(_) => break,
                Ok(Err(e)) => return Err(e),
                Ok(Ok(n)) => {
                    let reply = buf.get(..n).unwrap_or_default();
                    if let [hi, lo, ..] = reply
                        && u16::from_be_bytes([*hi, *lo]) == packet::ERROR
                    {
                        return Ok(false);
                    }
                    // Duplicate ACKs of earlier blocks are ignored, not answered (Sorcerer's Apprentice).
                    if packet::acked_block(reply) == Some(number) {
                        return Ok(true);
                    }
                }
            }
        }
    }
    Ok(false)
}
