//! The standby's side of replication: the peer's sessions are accepted, authenticated and
//! their updates applied while this host is the standby (and this host's own leases sent
//! back, for a split brain).

use super::*;

/// Failed handshakes (anyone on the cluster network can fail one), logged once per 10 s.
static FAILED_HANDSHAKES: crate::isolate::LogGate = crate::isolate::LogGate::new();

/// Accepts the peer's connections; applies its updates while this host is the standby.
pub(super) async fn receive(
    (listener, gate): (TcpListener, crate::budget::Gate),
    acceptor: tokio_rustls::TlsAcceptor,
    channels: Channels,
    secret: Arc<Vec<u8>>,
    active: Activity,
) -> anyhow::Result<()> {
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("replication accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // The port is on the cluster network: the connections, and one address's, are bounded
        // (a stranger's each for at most the handshake's two timeouts): `crate::budget`.
        let ticket = match gate.admit(from.ip()) {
            Ok(ticket) => ticket,
            Err(why) => {
                tracing::debug!("replication from {from}: {why}; closed");
                continue;
            }
        };
        let (acceptor, channels, secret) =
            (acceptor.clone(), Arc::clone(&channels), Arc::clone(&secret));
        let active = active.clone();
        tokio::spawn(async move {
            crate::isolate::connection(crate::isolate::Wire::Replication, async move {
                // Before the peer proved the secret, nothing it does reaches the status: a
                // stranger's connection can't make the pair look disconnected.
                let _ticket = ticket;
                let proved = authenticate_peer(stream, acceptor, &secret).await;
                let tls = match proved {
                    Ok(tls) => tls,
                    Err(e) => {
                        if let Some(n) = FAILED_HANDSHAKES.admit(std::time::Instant::now()) {
                            tracing::warn!("replication from {from}: {e:#} (+{n} unlogged)");
                        }
                        return;
                    }
                };
                let (reader, writer) = tokio::io::split(tls);
                let mut lines = BufReader::new(reader);
                let (parts, first) = match channel_of(&mut lines, &channels).await {
                    Ok(found) => found,
                    Err(e) => {
                        tracing::warn!("replication from {from}: {e:#}");
                        active.replication_failed("", format!("{from}: {e:#}"));
                        return;
                    }
                };
                let _session = parts.active.session(Direction::Receiving, parts.name());
                // The session ends with its channel: a channel closed by a reload (and maybe opened
                // again, with another instance) takes none of the peer's updates after that.
                let received = tokio::select! {
                    r = receive_from(lines, writer, first, from, &parts) => r,
                    () = parts.closed.cancelled() => Ok(()),
                };
                if let Err(e) = received {
                    tracing::warn!("replication from {from}: {e:#}");
                    parts
                        .active
                        .replication_failed(parts.name(), format!("{from}: {e:#}"));
                }
            })
            .await;
        });
    }
}

type Lines = BufReader<tokio::io::ReadHalf<ServerTls>>;

/// The channel an authenticated session is for: its first line names it, or is already an
/// update of a cluster file's one channel (returned, to be applied first).
async fn channel_of(
    lines: &mut Lines,
    channels: &Channels,
) -> anyhow::Result<(Arc<Parts>, Option<String>)> {
    let line = next_line(lines, SILENCE)
        .await?
        .context("the peer closed the session")?;
    let (channel, first) = match serde_json::from_str::<Hello>(&line) {
        Ok(hello) => (Some(hello.channel), None),
        Err(_) => (None, Some(line)),
    };
    let parts = channels
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&channel)
        .cloned();
    let parts = parts.with_context(|| match &channel {
        Some(c) => format!("the peer replicates {c}, which this host does not serve"),
        None => "the peer replicates a cluster file, and this host serves a host file".into(),
    })?;
    Ok((parts, first))
}

type ServerTls = tokio_rustls::server::TlsStream<TcpStream>;

/// The peer's next line (at most [`MAX_LINE`] bytes), `None` when it closed the session; an
/// error when nothing came for `wait`.
pub(super) async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    wait: Duration,
) -> anyhow::Result<Option<String>> {
    let mut line = String::new();
    let n = tokio::time::timeout(wait, reader.take(MAX_LINE).read_line(&mut line))
        .await
        .with_context(|| format!("nothing from the peer for {wait:?}"))??;
    Ok((n > 0).then_some(line))
}

/// The TLS handshake and the proofs of the secret, both ways.
async fn authenticate_peer(
    stream: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    secret: &[u8],
) -> anyhow::Result<ServerTls> {
    let mut tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .context("TLS handshake timed out")??;
    let mut exported = [0u8; 32];
    tls.get_ref()
        .1
        .export_keying_material(&mut exported, LABEL, None)?;
    let mut tag = [0u8; 32];
    tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.read_exact(&mut tag))
        .await
        .context("no proof of the secret")??;
    if !verify(secret, b"client", &exported, &tag) {
        // Logged by the caller, rate-limited (anyone on the network can fail the proof).
        anyhow::bail!("refused: the peer does not hold the pair's secret");
    }
    tls.write_all(proof(secret, b"server", &exported).as_ref())
        .await?;
    tls.flush().await?;
    Ok(tls)
}

/// An authenticated session of one channel from the peer: first this host's own live leases
/// go back to it (the peer, active, learns the leases this host granted while both were
/// active: a split brain), then the peer's updates (`first` the one already read) are applied
/// while this host is the standby.
async fn receive_from(
    mut lines: Lines,
    mut writer: tokio::io::WriteHalf<ServerTls>,
    first: Option<String>,
    from: SocketAddr,
    parts: &Parts,
) -> anyhow::Result<()> {
    match &parts.channel {
        Some(c) => {
            tracing::info!("replication: receiving {c} from {from}");
            // A named channel is acknowledged: the sender counts its session from here.
            write(&mut writer, &Update::Alive).await?;
        }
        None => tracing::info!("replication: receiving from {from}"),
    }
    for update in own_leases(parts).await? {
        write(&mut writer, &update).await?;
    }
    let mut first = first;
    loop {
        let line = match first.take() {
            Some(line) => line,
            None => match next_line(&mut lines, SILENCE).await? {
                Some(line) => line,
                None => return Ok(()),
            },
        };
        let update: Update = serde_json::from_str(&line)
            .with_context(|| format!("an update that does not read: {}", line.trim()))?;
        if update == Update::Alive {
            continue;
        }
        if parts.active.is_active() {
            // Both active: a split brain. This host's own state wins on this host, except for
            // leases of the peer's half of the pool, which only the peer grants.
            if let Update::Lease { ip, .. } = &update
                && in_peer_half(parts, *ip)
            {
                apply(parts, update).await;
            } else {
                tracing::debug!(
                    "replication: ignoring an update from {from}: this host is active too"
                );
            }
            continue;
        }
        apply(parts, update).await;
        parts.active.update_replication(|r| {
            r.updates += 1;
            r.last_update = Some(SystemTime::now());
        });
    }
}

/// Whether `ip` is in the other host's half of the dynamic pool (see `dhcp::reply::share`).
pub(super) fn in_peer_half(parts: &Parts, ip: Ipv4Addr) -> bool {
    let plan = parts.plan.load();
    let peer = parts.active.host().map(|h| 1 - h.min(1));
    plan.dhcp
        .pool
        .and_then(|p| crate::dhcp::reply::share(p, peer))
        .is_some_and(|p| p.contains(ip))
}

pub(super) async fn apply(parts: &Parts, update: Update) {
    let lease = matches!(update, Update::Lease { .. });
    let carried = match parts.carries {
        Carries::Everything => true,
        Carries::Leases => lease,
        Carries::Cluster => !lease,
    };
    if !carried {
        tracing::warn!(
            "replication: an update {} does not carry: {update:?}",
            parts.name()
        );
        return;
    }
    match update {
        Update::Alive => {}
        Update::Lease { ip, mac, expires } => match mac.parse::<MacAddr>() {
            Ok(mac) => parts
                .journal
                .publish(None, EventKind::LeaseReplicated { mac, ip, expires }),
            Err(_) => tracing::warn!("replication: a lease with a bad MAC {mac}"),
        },
        Update::Markers { node, markers } => {
            let plan = parts.plan.load();
            if !plan.boot.iter().any(|b| b.node == node) {
                tracing::warn!("replication: markers of {node}, which the config does not have");
                return;
            }
            let dir = plan.state_dir.clone();
            let written = tokio::task::spawn_blocking(move || {
                install_state::write_markers(&dir, &node, &markers)
            })
            .await;
            if let Ok(Err(e)) = written {
                tracing::error!("replication: can't write install markers: {e}");
            }
        }
        Update::Phases { progress } => {
            if let Some(o) = &parts.orchestrator {
                o.replace_progress(progress).await;
            }
        }
        Update::Drain { node, draining } => {
            let Some(pools) = &parts.pools else { return };
            // Kept for this host's next start, for a node of the pools only (a file name).
            if crate::lb::drain::replicated(&pools.load(), &node, draining, &parts.journal) == 0 {
                return;
            }
            let dir = parts.plan.load().state_dir.clone();
            let keep = move || install_state::keep_drained(&dir, &node, draining);
            if let Ok(Err(e)) = tokio::task::spawn_blocking(keep).await {
                tracing::error!("replication: can't keep a drain for the next start: {e}");
            }
        }
    }
}
