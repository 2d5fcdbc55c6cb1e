//! The DHCP socket: requests are read in batches and decided; replies that promise no lease
//! (OFFER, NAK, INFORM) leave at once, the batch's lease changes are synced to disk once, and
//! only then do the ACKs leave. A failed sync sends no ACK: a client without one retries, a
//! client with an ACK for a lost lease could see its address given twice.

use std::net::{SocketAddr, SocketAddrV4};
use std::time::SystemTime;

use anyhow::Context as _;
use dhcproto::Encodable;
use dhcproto::v4::Message;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::leases::Leases;
use super::reply::{Outgoing, State, handle};
use crate::journal::{EventKind, Journal};
use crate::plan;

/// Requests handled per disk sync at most.
const BATCH: usize = 64;

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Prepares `socket` (bound to the cluster interface) for DHCP: broadcast, a large receive
/// buffer.
pub fn prepare(socket: &UdpSocket) -> anyhow::Result<()> {
    socket
        .set_broadcast(true)
        .context("enabling broadcast on the DHCP socket")?;
    // Room for the requests that arrive while a batch is being synced to disk; the kernel caps
    // it at net.core.rmem_max.
    if let Err(e) = socket2::SockRef::from(socket).set_recv_buffer_size(4 << 20) {
        tracing::debug!("dhcp: can't enlarge the receive buffer: {e}");
    }
    Ok(())
}

/// Serves DHCP on `socket` with the lease table `leases` until `token` is cancelled.
pub async fn serve(
    socket: UdpSocket,
    leases: Leases,
    plan: plan::Handle,
    journal: Journal,
    active: crate::ha::Activity,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let mut state = State::new(leases);
    if let Some(host) = active.host() {
        state.in_pair(host);
    }
    // In a pair, leases travel through the journal: recorded here (the active host's
    // replication sends them) and replicated here (the standby's records them).
    let mut replicated = active.paired().then(|| {
        state.leases.track_changes();
        journal.subscribe()
    });
    let mut packets: Vec<(Vec<u8>, SocketAddr)> = Vec::with_capacity(BATCH);
    let mut buf = vec![0u8; 65_535];
    let mut replies: Vec<Outgoing> = Vec::with_capacity(BATCH);
    loop {
        let first = tokio::select! {
            () = token.cancelled() => return Ok(()),
            r = socket.recv_from(&mut buf) => r,
            event = next_event(&mut replicated) => {
                if let EventKind::LeaseReplicated { mac, ip, expires } = event.kind {
                    state.leases.record(super::leases::Lease { ip, mac, expires });
                    state.leases.take_changes();
                    if let Err(e) = tokio::task::block_in_place(|| state.leases.sync()) {
                        tracing::error!("{:#}: a replicated lease is not on disk", anyhow::Error::new(e));
                    }
                }
                continue;
            }
        };
        packets.clear();
        match first {
            Ok((n, from)) => packets.push((buf[..n].to_vec(), from)),
            Err(e) => {
                tracing::debug!("dhcp receive: {e}");
                continue;
            }
        }
        while packets.len() < BATCH {
            match socket.try_recv_from(&mut buf) {
                Ok((n, from)) => packets.push((buf[..n].to_vec(), from)),
                Err(_) => break,
            }
        }
        // The standby of a pair stays silent: one DHCP server answers a node.
        if !active.is_active() {
            continue;
        }
        let current = plan.load();
        let now = unix_now();
        replies.clear();
        for (packet, from) in &packets {
            let Some(request) = super::decode(packet) else {
                tracing::debug!("dhcp: undecodable packet from {from}");
                continue;
            };
            if let Some(kind) = request.opts().msg_type() {
                metrics.dhcp_message(u8::from(kind));
            }
            match handle(&request, &current.dhcp, &mut state, now) {
                // OFFERs, NAKs and INFORM answers promise no lease: they leave at once.
                Some(out) if out.acked.is_none() => send(&socket, &out.message, out.to).await,
                Some(out) => replies.push(out),
                None => {}
            }
        }
        // Durable before any ACK leaves.
        let synced = tokio::task::block_in_place(|| state.leases.sync());
        if let Err(e) = synced {
            tracing::error!("{:#}: not answering this batch", anyhow::Error::new(e));
            continue;
        }
        let live = state.leases.len();
        metrics
            .dhcp_leases
            .set(i64::try_from(live).unwrap_or(i64::MAX));
        if let Some(pool) = current.dhcp.pool {
            let size = u64::from(u32::from(pool.end) - u32::from(pool.start)) + 1;
            let used = state.leases.iter().filter(|l| pool.contains(l.ip)).count() as u64;
            metrics
                .dhcp_pool_free
                .set(i64::try_from(size.saturating_sub(used)).unwrap_or(i64::MAX));
        }
        for lease in state.leases.take_changes() {
            journal.publish(
                None,
                EventKind::LeaseRecorded {
                    mac: lease.mac,
                    ip: lease.ip,
                    expires: lease.expires,
                },
            );
        }
        for out in replies.drain(..) {
            send(&socket, &out.message, out.to).await;
            if let Some(acked) = out.acked {
                journal.publish(
                    acked.node,
                    EventKind::DhcpAck {
                        mac: acked.mac,
                        ip: acked.ip.into(),
                    },
                );
            }
        }
    }
}

/// The next journal event, or never without a subscription (outside a pair).
async fn next_event(
    events: &mut Option<tokio::sync::broadcast::Receiver<crate::journal::Event>>,
) -> crate::journal::Event {
    loop {
        match events {
            None => std::future::pending::<()>().await,
            Some(rx) => match rx.recv().await {
                Ok(e) => return e,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        "dhcp: {n} journal events missed (replicated leases among them, maybe)"
                    );
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => *events = None,
            },
        }
    }
}

async fn send(socket: &UdpSocket, message: &Message, to: SocketAddrV4) {
    match message.to_vec() {
        Ok(bytes) => {
            if let Err(e) = socket.send_to(&bytes, to).await {
                tracing::debug!("dhcp reply to {to}: {e}");
            }
        }
        Err(e) => tracing::warn!("dhcp reply to {to} could not be encoded: {e}"),
    }
}
