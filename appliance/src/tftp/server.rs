//! TFTP transfers: each read request gets its own task and ephemeral socket; blocks are resent
//! when an ACK does not come in time, and a transfer gives up after a few silent rounds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::packet::{self, DATA, DEFAULT_BLOCK, ReadRequest, Request, code};
use crate::supervisor::PlanHandle;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
const RETRIES: usize = 5;
/// Transfers at once; PXE boots of a whole rack stay well below.
const MAX_TRANSFERS: usize = 64;
/// Boot files are small; a bigger file is a configuration mistake, not something to stream.
const MAX_FILE: u64 = 64 * 1024 * 1024;

/// Serves read requests arriving on `socket` until `token` is cancelled.
pub async fn serve(
    socket: UdpSocket,
    plan: PlanHandle,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let local = socket.local_addr()?;
    let slots = Arc::new(Semaphore::new(MAX_TRANSFERS));
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
        let request = packet::parse_request(&buf[..n]);
        let req = match request {
            Request::Ignore => continue,
            Request::Refuse(c, message) => {
                let _ = socket.send_to(&packet::error(c, message), client).await;
                continue;
            }
            Request::Read(req) => req,
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            let _ = socket
                .send_to(
                    &packet::error(code::UNDEFINED, "server busy, try again"),
                    client,
                )
                .await;
            continue;
        };
        let path = plan.load().files.ipxe_binary(&req.file);
        let token = token.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                () = token.cancelled() => {}
                result = transfer(local, client, path, req) => {
                    if let Err(e) = result {
                        tracing::debug!("tftp transfer to {client}: {e}");
                    }
                }
            }
        });
    }
}

/// Sends the iPXE binary at `path` (`None`: the client asked for a name the DHCP server never
/// hands out).
async fn transfer(
    local: SocketAddr,
    client: SocketAddr,
    path: Option<PathBuf>,
    req: ReadRequest,
) -> std::io::Result<()> {
    // A fresh port on the address the request came to, so the reply's source is what the client expects.
    let socket = UdpSocket::bind(SocketAddr::new(local.ip(), 0)).await?;
    socket.connect(client).await?;
    let checked = match &path {
        None => Err((code::ACCESS, "only the iPXE boot files are served")),
        // Followed if it is a symlink: the name is one of the boot files (see `ipxe_binary`).
        Some(p) => match tokio::fs::metadata(p).await {
            Ok(m) if m.is_file() => Ok((p.clone(), m.len())),
            _ => Err((code::NOT_FOUND, "file not found")),
        },
    };
    let (path, size) = match checked {
        Ok(found) => found,
        Err((c, message)) => {
            tracing::info!(
                "tftp {client}: {} refused: {message}",
                req.file.escape_debug()
            );
            socket.send(&packet::error(c, message)).await?;
            return Ok(());
        }
    };
    if size > MAX_FILE {
        socket
            .send(&packet::error(code::UNDEFINED, "file too large for TFTP"))
            .await?;
        return Ok(());
    }
    let data = tokio::fs::read(&path).await?;
    tracing::info!(
        "tftp {client}: sending {} ({size} bytes)",
        req.file.escape_debug()
    );
    let block_size = req.block_size.unwrap_or(DEFAULT_BLOCK);
    let timeout = req
        .timeout_secs
        .map_or(DEFAULT_TIMEOUT, |t| Duration::from_secs(t.into()));
    let mut options = Vec::new();
    if let Some(b) = req.block_size {
        options.push(("blksize", b.to_string()));
    }
    if req.wants_size {
        options.push(("tsize", size.to_string()));
    }
    if let Some(t) = req.timeout_secs {
        options.push(("timeout", t.to_string()));
    }
    let mut ack_buf = vec![0u8; 516];
    if !options.is_empty() {
        // OACK is acknowledged as block 0 (RFC 2347).
        let oack = packet::oack(&options);
        if !exchange(&socket, &oack, 0, timeout, &mut ack_buf).await? {
            return Ok(());
        }
    }
    let blocks = data.len() / block_size + 1;
    let mut out = Vec::with_capacity(block_size + 4);
    for i in 0..blocks {
        let chunk = &data[i * block_size..((i + 1) * block_size).min(data.len())];
        // Block numbers start at 1 and roll over past 65535, as most clients expect.
        let number = ((i + 1) % 65_536) as u16;
        out.clear();
        out.extend_from_slice(&DATA.to_be_bytes());
        out.extend_from_slice(&number.to_be_bytes());
        out.extend_from_slice(chunk);
        if !exchange(&socket, &out, number, timeout, &mut ack_buf).await? {
            tracing::info!(
                "tftp {client}: gave up on {} at block {number}",
                req.file.escape_debug()
            );
            return Ok(());
        }
    }
    Ok(())
}

/// Sends `packet` until block `number` is acknowledged; false after the retries run out or on
/// an ERROR from the client.
async fn exchange(
    socket: &UdpSocket,
    packet: &[u8],
    number: u16,
    timeout: Duration,
    buf: &mut [u8],
) -> std::io::Result<bool> {
    for _ in 0..RETRIES {
        socket.send(packet).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, socket.recv(buf)).await {
                Err(_) => break,
                Ok(Err(e)) => return Err(e),
                Ok(Ok(n)) => {
                    if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == packet::ERROR {
                        return Ok(false);
                    }
                    // Duplicate ACKs of earlier blocks are ignored, not answered (Sorcerer's Apprentice).
                    if packet::acked_block(&buf[..n]) == Some(number) {
                        return Ok(true);
                    }
                }
            }
        }
    }
    Ok(false)
}
