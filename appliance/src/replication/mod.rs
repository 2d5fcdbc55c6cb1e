//! A pair's replication: the active host sends what must survive a failover to the standby.
//!
//! What: dynamic DHCP leases (reservations are the same on both by construction), each node's
//! install markers, the install phase record, and load-balancer drains. How: on connecting, a
//! full copy (the lease journal's live leases, every node's markers, the phase record, the
//! drained nodes), then each change as the journal announces it, one JSON line per update:
//! `LeaseRecorded` from the DHCP server in a pair, `DrainRequested` from `lb::drain`, phase
//! changes, and `InstallRecorded`, a node's install state as `install_state::step` recorded it,
//! shipped as its markers (never read back from disk) at every install event, changed or not,
//! so a standby that missed one is mended by the next (it writes only markers that differ). Direction: from whichever host is active
//! to the other; a host applies updates only while it is the standby: markers through
//! `install_state::write_markers`, phases through the orchestration's record, drains through
//! `lb::drain::drain_quietly`, leases as `LeaseReplicated` journal events that its DHCP server
//! records (it subscribes when it is set up, so a lease replicated before its task first runs is
//! not missed). Node lists and the state directory are read from the current plan at each use,
//! so a node added by `reload` is replicated like the others.
//!
//! Failures: the link drops, and the active host reconnects every second and sends a full copy
//! again; a silent link (a heartbeat every 2 s, `TCP_USER_TIMEOUT` and a read timeout of 10 s),
//! the same; a lagging journal subscription, the same. Both hosts active (split brain): each
//! ignores the other's updates except leases of the other's half of the pool. New pool
//! addresses come from each host's own half (`dhcp::reply::share`), so none is offered twice; at
//! every new session the standby sends its own live leases back and the active host records
//! those of the standby's half, so a lease the standby granted during a split brain is renewed
//! after the heal. `ha status` counts only authenticated sessions in this host's direction.
//!
//! A host file's pair replicates over one listener ([`Hub`], bound by the supervisor) with a
//! channel per cluster and per DHCP segment, each its own session: the sender's first line after
//! the proofs is `{"channel":"cluster/<id>"}` or `{"channel":"segment/<interface>"}`, and the
//! receiver applies that channel's updates through that instance's plan, journal, pools and
//! orchestrator only ([`Carries`]; an update a channel does not carry is dropped with a
//! warning). A cluster file's one channel sends no hello, as before channels existed, so a pair
//! of cluster files can be upgraded one host at a time. A channel opens and closes with its
//! instance (a reload adding or removing a cluster); a channel opened again is not closed by its
//! previous opening's end, and a receiving session ends when its channel closes. A named
//! channel is acknowledged before the sender counts its session. `connected` means every channel
//! this host serves has a session in its direction (`ha.rs`
//! `connected_means_every_channel_has_a_session_in_this_hosts_direction`).
//!
//! Its connections are bounded in all (256) and per address (128, so a stranger can take at
//! most half), through the descriptor budget (`budget.rs` `Kind::Replication`), since the port is
//! on the cluster network. Failed handshakes are logged at most once per 10 s. Under hostile
//! input: the served `replication` fuzz target (`fuzzing/served.rs`
//! `replication_applies_after_the_proof_only`), and `tests/e2e/ha.rs`
//! `a_pair_moves_the_virtual_address_when_the_active_appliance_dies`, which sends the standby's
//! listener 2,000 malformed inputs and 100 sessions with a wrong proof, then holds 140
//! connections while the real session stays connected.
//!
//! The channel is TLS 1.3 (rustls) on port [`PORT`] of each host's own address. Each host's
//! certificate is made at start and is not what authenticates it: both ends prove they hold the
//! pair's replication key (derived from the pair's secret, apart from VRRP's password: see
//! `secrets::PairKeys`) with an HMAC-SHA256 over the session's exported keying material (RFC 5705), so
//! a proof is worth nothing on another connection and a man in the middle, who has two
//! sessions, can't relay it. A peer without the secret is refused before anything is applied.
//!
//! Architecture invariant: it acts on the standby only through the same calls the services
//! use (`install_state`, `lb::drain`, the orchestration's phase record, and for leases the
//! journal, which the DHCP server follows); every wait is bounded or ends with the shutdown.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::ha::{Activity, Direction};
use crate::install_state::{self, Markers};
use crate::journal::{EventKind, Journal};
use crate::lb::SharedPools;
use crate::orchestration::Orchestrator;
use crate::orchestration::phases::Progress;
use crate::service::{Context, Running};
use crate::vocabulary::MacAddr;

mod receive;
use receive::{apply, in_peer_half, next_line, receive};

/// The replication port on each host's own address.
pub const PORT: u16 = 7443;
/// The exporter label of the session's keying material each end's proof covers (RFC 5705).
pub(crate) const LABEL: &[u8] = b"EXPORTER-okd-appliance-replication";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A line longer than this ends the connection.
const MAX_LINE: u64 = 1 << 20;
/// The sender's heartbeat when nothing changes.
const HEARTBEAT: Duration = Duration::from_secs(2);
/// A session that carried nothing (not even a heartbeat) for this long is over, on both ends.
const SILENCE: Duration = Duration::from_secs(10);

/// One update, as a JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "update", rename_all = "kebab-case")]
pub enum Update {
    Lease {
        ip: Ipv4Addr,
        mac: String,
        expires: u64,
    },
    Markers {
        node: String,
        markers: Markers,
    },
    Phases {
        progress: Progress,
    },
    Drain {
        node: String,
        draining: bool,
    },
    /// Nothing changed: the sender is there (every `HEARTBEAT`).
    Alive,
}

/// What a channel carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carries {
    /// A cluster file's one channel: its leases and its cluster's state.
    Everything,
    /// A host's segment: its lease journal.
    Leases,
    /// One of a host's clusters: its markers, phase record and drains.
    Cluster,
}

/// The first line a host's channel sends once both ends proved the secret: which of the
/// receiver's channels the updates are for. A cluster file's one channel sends none (as before
/// channels existed, so a pair can be upgraded one host at a time).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Hello {
    channel: String,
}

/// What a replication channel's ends need.
struct Parts {
    /// `None`: a cluster file's one channel.
    channel: Option<String>,
    carries: Carries,
    peer: Ipv4Addr,
    secret: Arc<Vec<u8>>,
    /// The current plan: its state directory and node list are read at each use, so a node
    /// added by `reload` is replicated like the others.
    plan: crate::plan::Handle,
    active: Activity,
    journal: Journal,
    /// A cluster's pools (not a segment's).
    pools: Option<SharedPools>,
    orchestrator: Option<Orchestrator>,
    /// Cancelled when the channel closes (its instance's token).
    closed: CancellationToken,
}

impl Parts {
    fn name(&self) -> &str {
        self.channel.as_deref().unwrap_or_default()
    }
}

/// The channels this host serves, by name (`None`: a cluster file's one), each as its latest
/// opening made it (a channel opened again is not closed by its previous opening's end).
type Channels = Arc<std::sync::Mutex<HashMap<Option<String>, Arc<Parts>>>>;

/// The replication of a pair: one listener on this host's own address for every channel, and
/// a sender per channel.
#[derive(Clone)]
pub struct Hub {
    peer: Ipv4Addr,
    secret: Arc<Vec<u8>>,
    connector: tokio_rustls::TlsConnector,
    channels: Channels,
}

/// Reads the secret, makes this host's certificate, and starts the listener (bound by the
/// supervisor on this host's address): the hub the instances open their channels on, and the
/// listener's task.
pub fn listen(
    listener: std::net::TcpListener,
    peer: Ipv4Addr,
    ctx: &Context,
) -> anyhow::Result<(Hub, Running)> {
    let plan = ctx.plan.load();
    let ha = plan.ha.as_ref().context("replication without a pair")?;
    let keys = crate::secrets::PairKeys::read(&ha.secret_file)?;
    let local = listener.local_addr()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(local.ip())?));
    let connector = tokio_rustls::TlsConnector::from(Arc::new(
        crate::tls_trust::client_config(crate::tls_trust::Trust::AnyCertificate)
            .context("the replication client's TLS")?,
    ));
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let gate = ctx.budget.gate(crate::budget::Kind::Replication, local);
    let hub = Hub {
        peer,
        secret: Arc::new(keys.replication.to_vec()),
        connector,
        channels: Arc::default(),
    };
    let token = ctx.shutdown.clone();
    let (channels, secret, active) = (
        Arc::clone(&hub.channels),
        Arc::clone(&hub.secret),
        ctx.active.clone(),
    );
    Ok((
        hub,
        Box::pin(async move {
            tokio::select! {
                () = token.cancelled() => Ok(()),
                r = receive((listener, gate), acceptor, channels, secret, active) => r,
            }
        }),
    ))
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let channels: Vec<Option<String>> = self
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        f.debug_struct("Hub")
            .field("peer", &self.peer)
            .field("channels", &channels)
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// Opens `channel` for the instance whose context is `ctx`: the peer's updates of it are
    /// applied through `ctx`'s journal, plan, `pools` and `orchestrator`, and this host's are
    /// sent while it is active. The channel closes when the task ends (the instance's token).
    pub fn channel(
        &self,
        channel: Option<String>,
        carries: Carries,
        ctx: &Context,
        pools: Option<SharedPools>,
        orchestrator: Option<Orchestrator>,
    ) -> Running {
        let parts = Parts {
            channel: channel.clone(),
            carries,
            peer: self.peer,
            secret: Arc::clone(&self.secret),
            plan: ctx.plan.clone(),
            active: ctx.active.clone(),
            journal: ctx.journal.clone(),
            pools,
            orchestrator,
            closed: ctx.shutdown.clone(),
        };
        let parts = Arc::new(parts);
        let open = Open {
            channels: Arc::clone(&self.channels),
            channel: channel.clone(),
            opening: Arc::clone(&parts),
            _served: parts.active.serve_channel(parts.name()),
        };
        self.channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(channel, Arc::clone(&parts));
        let (connector, token) = (self.connector.clone(), ctx.shutdown.clone());
        Box::pin(async move {
            let _open = open;
            tokio::select! {
                () = token.cancelled() => {}
                () = send(connector, &parts) => {}
            }
            Ok(())
        })
    }
}

/// A channel in the hub until dropped.
struct Open {
    channels: Channels,
    channel: Option<String>,
    opening: Arc<Parts>,
    _served: crate::ha::Served,
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if channels
            .get(&self.channel)
            .is_some_and(|parts| Arc::ptr_eq(parts, &self.opening))
        {
            channels.remove(&self.channel);
        }
    }
}

fn server_config(ip: std::net::IpAddr) -> anyhow::Result<rustls::ServerConfig> {
    let key = rcgen::KeyPair::generate().context("the replication key")?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.subject_alt_names.push(rcgen::SanType::IpAddress(ip));
    let cert = params
        .self_signed(&key)
        .context("the replication certificate")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )?)
}

/// HMAC-SHA256 of `role` and the session's exported key material.
pub(crate) fn proof(secret: &[u8], role: &[u8], exported: &[u8; 32]) -> ring::hmac::Tag {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let mut ctx = ring::hmac::Context::with_key(&key);
    ctx.update(role);
    ctx.update(exported);
    ctx.sign()
}

fn verify(secret: &[u8], role: &[u8], exported: &[u8; 32], tag: &[u8]) -> bool {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let mut message = role.to_vec();
    message.extend_from_slice(exported);
    ring::hmac::verify(&key, &message, tag).is_ok()
}

/// While this host is active: connects to the peer, sends everything, then every change.
async fn send(connector: tokio_rustls::TlsConnector, parts: &Parts) {
    loop {
        if parts.active.is_active()
            && let Err(e) = send_to_peer(&connector, parts).await
        {
            tracing::debug!("replication to {}: {e:#}", parts.peer);
            parts
                .active
                .replication_failed(parts.name(), format!("{}: {e:#}", parts.peer));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn send_to_peer(connector: &tokio_rustls::TlsConnector, parts: &Parts) -> anyhow::Result<()> {
    let addr = SocketAddr::new(parts.peer.into(), PORT);
    // Subscribed before the copy is taken: nothing changes unseen in between.
    let mut events = parts.journal.subscribe();
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .context("connect timed out")??;
    // Updates the peer does not acknowledge within this time end the session (a cut link is
    // found by the heartbeats, not after the kernel's 15 minutes of retransmissions).
    nix::sys::socket::setsockopt(
        &stream,
        nix::sys::socket::sockopt::TcpUserTimeout,
        &u32::try_from(SILENCE.as_millis()).unwrap_or(u32::MAX),
    )?;
    let name = rustls::pki_types::ServerName::IpAddress(std::net::IpAddr::from(parts.peer).into());
    let mut tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, stream))
        .await
        .context("TLS handshake timed out")??;
    let mut exported = [0u8; 32];
    tls.get_ref()
        .1
        .export_keying_material(&mut exported, LABEL, None)?;
    tls.write_all(proof(&parts.secret, b"client", &exported).as_ref())
        .await?;
    tls.flush().await?;
    let mut tag = [0u8; 32];
    tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.read_exact(&mut tag))
        .await
        .context("the peer sent no proof")??;
    anyhow::ensure!(
        verify(&parts.secret, b"server", &exported, &tag),
        "the peer does not hold the pair's secret"
    );
    if let Some(channel) = &parts.channel {
        let hello = Hello {
            channel: channel.clone(),
        };
        write(&mut tls, &hello).await?;
        tracing::info!("replication: sending {channel} to {addr}");
    } else {
        tracing::info!("replication: sending to {addr}");
    }
    let (reader, mut writer) = tokio::io::split(tls);
    let mut reader = BufReader::new(reader);
    if let Some(channel) = &parts.channel {
        // The peer's acknowledgement: without it, it does not serve this channel.
        next_line(&mut reader, HANDSHAKE_TIMEOUT)
            .await?
            .with_context(|| format!("the peer does not serve {channel}"))?;
    }
    let _session = parts.active.session(Direction::Sending, parts.name());
    // What the peer sends back: its own leases (those it granted while both were active).
    let merging = merge_peer_leases(reader, parts);
    tokio::pin!(merging);
    // The copy goes out while the peer's own leases come in: both ends write theirs first, and
    // neither may wait for the other to read (a pool of thousands fills the sockets' buffers).
    let copy = snapshot(parts).await?;
    let sending = async {
        for update in &copy {
            write(&mut writer, update).await?;
        }
        Ok::<(), anyhow::Error>(())
    };
    tokio::select! {
        r = sending => r?,
        r = &mut merging => {
            r?;
            anyhow::bail!("the peer closed the session");
        }
    }
    parts.active.update_replication(|r| {
        r.last_update = Some(SystemTime::now());
    });
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    loop {
        let event = tokio::select! {
            e = events.recv() => match e {
                Ok(e) => e,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    // Changes were missed: start over with a full copy.
                    anyhow::bail!("{n} journal events missed");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            },
            _ = heartbeat.tick() => {
                if !parts.active.is_active() {
                    return Ok(());
                }
                write(&mut writer, &Update::Alive).await?;
                continue;
            }
            r = &mut merging => {
                r?;
                anyhow::bail!("the peer closed the session");
            }
        };
        if !parts.active.is_active() {
            return Ok(());
        }
        for update in updates_for(parts, &event).await {
            write(&mut writer, &update).await?;
            parts.active.update_replication(|r| {
                r.updates += 1;
                r.last_update = Some(SystemTime::now());
            });
        }
    }
}

/// Reads the peer's own leases from the session and records those of its half of the pool
/// (so no lease the peer granted during a split brain is lost). Ends when the peer closes.
async fn merge_peer_leases<R: tokio::io::AsyncRead + Unpin>(
    reader: R,
    parts: &Parts,
) -> anyhow::Result<()> {
    let mut lines = BufReader::new(reader);
    let mut line = String::new();
    loop {
        line.clear();
        if (&mut lines).take(MAX_LINE).read_line(&mut line).await? == 0 {
            return Ok(());
        }
        match serde_json::from_str::<Update>(&line) {
            Ok(update @ Update::Lease { ip, .. }) if in_peer_half(parts, ip) => {
                apply(parts, update).await;
            }
            Ok(_) => {}
            Err(e) => anyhow::bail!("a lease that does not read: {e}"),
        }
    }
}

/// This host's live leases, as updates (none on a cluster's channel of a host).
async fn own_leases(parts: &Parts) -> anyhow::Result<Vec<Update>> {
    if parts.carries == Carries::Cluster {
        return Ok(Vec::new());
    }
    let dir = parts.plan.load().state_dir.clone();
    let leases =
        tokio::task::spawn_blocking(move || crate::dhcp::leases::read_live(&dir, unix_now()))
            .await??;
    Ok(leases
        .into_iter()
        .map(|l| Update::Lease {
            ip: l.ip,
            mac: l.mac.to_string(),
            expires: l.expires,
        })
        .collect())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One JSON line: an update, or a channel's hello.
async fn write<S: tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    line: &impl Serialize,
) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(line)?;
    line.push(b'\n');
    s.write_all(&line).await?;
    s.flush().await?;
    Ok(())
}

/// Everything the channel carries, for a peer that just connected.
async fn snapshot(parts: &Parts) -> anyhow::Result<Vec<Update>> {
    let (leases, cluster) = match parts.carries {
        Carries::Everything => (true, true),
        Carries::Leases => (true, false),
        Carries::Cluster => (false, true),
    };
    let (dir, nodes) = {
        let plan = parts.plan.load();
        let nodes: Vec<String> = if cluster {
            plan.boot.iter().map(|b| b.node.clone()).collect()
        } else {
            Vec::new()
        };
        (plan.state_dir.clone(), nodes)
    };
    let (leases, markers) = tokio::task::spawn_blocking(move || {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let leases = if leases {
            crate::dhcp::leases::read_live(&dir, now)?
        } else {
            Vec::new()
        };
        let markers = nodes
            .into_iter()
            .map(|n| install_state::read_markers(&dir, &n).map(|m| (n, m)))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok::<_, std::io::Error>((leases, markers))
    })
    .await??;
    let mut out: Vec<Update> = leases
        .into_iter()
        .map(|l| Update::Lease {
            ip: l.ip,
            mac: l.mac.to_string(),
            expires: l.expires,
        })
        .collect();
    out.extend(
        markers
            .into_iter()
            .map(|(node, markers)| Update::Markers { node, markers }),
    );
    if let Some(o) = &parts.orchestrator {
        out.push(Update::Phases {
            progress: o.progress(),
        });
    }
    let Some(pools) = &parts.pools else {
        return Ok(out);
    };
    let pools = pools.load();
    // Every backend's node, drained or not: a standby away at an undrain is told too.
    let mut nodes: Vec<(String, bool)> = pools
        .served()
        .map(|(_, b)| (b.name.clone(), b.is_draining()))
        .collect();
    nodes.sort();
    nodes.dedup();
    out.extend(
        nodes
            .into_iter()
            .map(|(node, draining)| Update::Drain { node, draining }),
    );
    Ok(out)
}

/// The updates a journal event calls for.
async fn updates_for(parts: &Parts, event: &crate::journal::Event) -> Vec<Update> {
    match (&event.kind, &event.node) {
        (EventKind::LeaseRecorded { mac, ip, expires }, _) => vec![Update::Lease {
            ip: *ip,
            mac: mac.to_string(),
            expires: *expires,
        }],
        (EventKind::DrainRequested { draining }, Some(node)) => vec![Update::Drain {
            node: node.clone(),
            draining: *draining,
        }],
        (EventKind::NodePhase { .. } | EventKind::ClusterPhase { .. }, _) => parts
            .orchestrator
            .as_ref()
            .map(|o| Update::Phases {
                progress: o.progress(),
            })
            .into_iter()
            .collect(),
        (EventKind::InstallRecorded { state }, Some(node)) => vec![Update::Markers {
            node: node.clone(),
            markers: Markers::of(state),
        }],
        _ => Vec::new(),
    }
}

/// The replication listener's address: this host's own, [`PORT`].
pub fn listen_addr(host: Ipv4Addr) -> SocketAddr {
    SocketAddr::new(host.into(), PORT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_holds_only_for_its_secret_role_and_session() {
        let exported = [7u8; 32];
        let tag = proof(b"pair-secret", b"client", &exported);
        assert!(verify(b"pair-secret", b"client", &exported, tag.as_ref()));
        assert!(!verify(
            b"another-secret",
            b"client",
            &exported,
            tag.as_ref()
        ));
        assert!(!verify(b"pair-secret", b"server", &exported, tag.as_ref()));
        assert!(!verify(b"pair-secret", b"client", &[8u8; 32], tag.as_ref()));
    }

    #[test]
    fn updates_are_one_json_line_each() {
        let u = Update::Drain {
            node: "bootstrap".into(),
            draining: true,
        };
        let text = serde_json::to_string(&u).unwrap();
        assert_eq!(
            text,
            r#"{"update":"drain","node":"bootstrap","draining":true}"#
        );
        assert_eq!(serde_json::from_str::<Update>(&text).unwrap(), u);
    }
}
