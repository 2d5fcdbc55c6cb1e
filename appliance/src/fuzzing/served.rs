//! The fuzz targets that go through the listeners themselves: the fuzzer's bytes reach the real
//! DNS (UDP and TCP), boot-server and API tasks as a client on the segment sends them, through the
//! socket, the server's per-datagram or per-connection function, its isolation and its
//! budget's gate, not only through the parser behind them.
//!
//! The servers start once per process, on loopback listeners of their own, in a runtime of
//! their own, with the plan of [`super::CLUSTER`]: its upstreams removed (nothing is forwarded
//! anywhere), loopback allowed to recurse and to transfer (so no rate limit drops the check
//! that follows each input, and AXFR is reached), one node moved to 127.0.0.2 so that a
//! connection from there is that node's (ignition, role config, its ISO), and an API with a
//! certificate and token of its own, over an operator wing built as the supervisor builds it
//! (with no install to drive and no reload taken). Each input must leave
//! the process with no caught panic and the listener answering: after a datagram, a good query
//! from the same socket is answered; a connection is closed by the server after the client's
//! end of input, and every byte it sent back is well framed.
//!
//! Architecture invariant: test support (the `fuzzing` feature) that talks to this process's
//! loopback listeners only.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;

use crate::budget::{Budget, Kind};
use crate::isolate::{Wire, panics};

/// The node whose address a connection comes from when the input's first byte is odd.
const NODE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// A host no cluster knows.
const STRANGER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// How long a server may take to answer the check or to close after the client's end of input:
/// far more than any answer takes here, far less than the idle timeouts (10 s and more) that
/// would otherwise close a connection the server forgot.
const PROMPT: Duration = Duration::from_secs(5);
/// The largest datagram a UDP socket sends.
const MAX_UDP: usize = 65_507;

struct Served {
    runtime: tokio::runtime::Runtime,
    dns_udp: SocketAddr,
    dns_tcp: SocketAddr,
    http: SocketAddr,
    api: SocketAddr,
    /// The API's bearer token and the client side of its TLS (replication's too).
    api_token: String,
    api_tls: tokio_rustls::TlsConnector,
    /// A standby's replication listener, and the pair's replication key.
    replication: SocketAddr,
    pair_key: [u8; 32],
    /// The plan's state directory (what a replicated marker is written to).
    state_dir: PathBuf,
    /// Kept for the process's life: cancelling it would stop the servers.
    _token: CancellationToken,
}

fn served() -> &'static Served {
    static SERVED: OnceLock<Served> = OnceLock::new();
    SERVED.get_or_init(|| start().unwrap_or_else(|e| panic!("starting the served targets: {e:#}")))
}

/// The files the boot server serves, in a directory of this process.
fn tree(plan: &crate::plan::Plan) -> std::io::Result<PathBuf> {
    let root = std::env::temp_dir().join(format!("okd-fuzz-served-{}", std::process::id()));
    for dir in ["i", "a", "ipxe", "state"] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    for role in ["bootstrap", "master", "worker"] {
        std::fs::write(
            root.join("i").join(format!("{role}.ign")),
            br#"{"ignition":{"version":"3.2.0"}}"#,
        )?;
    }
    let boot = plan.boot.first();
    let urls = boot
        .iter()
        .flat_map(|b| [&b.kernel_url, &b.initramfs_url, &b.rootfs_url]);
    for url in urls {
        let name = url.rsplit('/').next().unwrap_or("kernel");
        std::fs::write(root.join("a").join(name), b"an artifact's bytes\n")?;
    }
    std::fs::write(root.join("ipxe").join("snponly.efi"), b"MZ not really\n")?;
    Ok(root)
}

/// The API's certificate, key and token files in `root` (the key and token owner-only, as the
/// appliance wants its secrets): the token.
fn api_files(root: &std::path::Path) -> anyhow::Result<(crate::config::Api, String)> {
    use std::os::unix::fs::PermissionsExt as _;
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])?.self_signed(&key)?;
    let token = "fuzz-token-0123456789abcdef".to_owned();
    let api = crate::config::Api {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        cert_file: root.join("api.crt"),
        key_file: root.join("api.key"),
        token_file: root.join("api.token"),
    };
    std::fs::write(&api.cert_file, cert.pem())?;
    for (path, text) in [
        (&api.key_file, key.serialize_pem()),
        (&api.token_file, token.clone()),
    ] {
        std::fs::write(path, text)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok((api, token))
}

/// The operator wing of the plan in `ctx`, as the supervisor builds it, with no orchestration
/// and nobody taking reloads (a reload asked for is refused: its channel is closed).
fn clusters(ctx: &crate::service::Context) -> crate::operator::Clusters {
    let plan = ctx.plan.load();
    let (reloads, _) = tokio::sync::mpsc::channel(1);
    let fixed = crate::operator::status::Fixed {
        started: std::time::SystemTime::now(),
        faults: ctx.faults.clone(),
        listeners: Arc::default(),
        endpoints: None,
    };
    let operator = crate::operator::Operator::new(
        ctx,
        crate::lb::shared_pools(&plan),
        reloads,
        Err("the fuzz target drives no install".to_owned()),
        None,
        fixed,
    );
    crate::operator::Clusters::new(vec![("okd".to_owned(), operator)], ctx.shutdown.clone())
}

fn start() -> anyhow::Result<Served> {
    let mut plan = super::cluster_plan().clone();
    let root = tree(&plan)?;
    plan.files.ignition_dir = root.join("i");
    plan.files.artifacts_dir = root.join("a");
    plan.files.ipxe_dir = root.join("ipxe");
    plan.files.base_iso = root.join("a").join("live.iso");
    plan.state_dir = root.join("state");
    plan.resolver.upstreams.clear();
    let loopback: ipnet::IpNet = "127.0.0.0/8".parse()?;
    plan.resolver.recursion_allowed = vec![loopback];
    plan.resolver.axfr_allowed = vec![loopback];
    if let Some(boot) = plan.boot.first_mut() {
        boot.ipv4 = NODE;
    }
    let (api, api_token) = api_files(&root)?;
    plan.api = Some(api);
    crate::install_state::prepare(&plan.state_dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let token = CancellationToken::new();
    let handle: crate::plan::Handle = Arc::new(arc_swap::ArcSwap::from_pointee(plan));
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let budget = Budget::unbounded();
    let ctx = crate::service::Context {
        plan: Arc::clone(&handle),
        journal: crate::journal::Journal::new(),
        shutdown: token.clone(),
        active: crate::ha::Activity::always(),
        metrics: Arc::clone(&metrics),
        budget: budget.clone(),
        faults: crate::faults::Faults::default(),
    };
    let api = runtime.block_on(async {
        let local = crate::operator::api::bind_local(&root.join("state"))?;
        let tcp = std::net::TcpListener::bind("127.0.0.1:0")?;
        let at = tcp.local_addr()?;
        let gate = budget.gate(Kind::Api, at);
        let running = crate::operator::api::start(local, Some((tcp, gate)), clusters(&ctx))?;
        tokio::spawn(running);
        anyhow::Ok(at)
    })?;
    let api_tls = tokio_rustls::TlsConnector::from(Arc::new(crate::tls_trust::client_config(
        crate::tls_trust::Trust::AnyCertificate,
    )?));
    let (dns_udp, dns_tcp, http) = runtime.block_on(async {
        let udp = UdpSocket::bind("127.0.0.1:0").await?;
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let web = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addrs = (udp.local_addr()?, tcp.local_addr()?, web.local_addr()?);
        let forwards = budget.gate(Kind::Forwards, addrs.1);
        let shared =
            crate::dns::server::Shared::new(Arc::clone(&handle), Arc::clone(&metrics), forwards);
        let (token, gate) = (token.clone(), budget.gate(Kind::DnsTcp, addrs.1));
        tokio::spawn(crate::dns::server::serve_udp(
            udp,
            Arc::clone(&shared),
            token.clone(),
        ));
        tokio::spawn(crate::dns::server::serve_tcp(
            tcp,
            shared,
            gate,
            token.clone(),
        ));
        tokio::spawn(crate::http::server::serve(
            web,
            handle,
            ctx.journal.clone(),
            ctx.active.clone(),
            (
                metrics,
                budget.gate(Kind::Http, addrs.2),
                ctx.faults.clone(),
            ),
            token,
        ));
        anyhow::Ok(addrs)
    })?;
    let (replication, pair_key) = runtime.block_on(standby(&root, &ctx))?;
    Ok(Served {
        runtime,
        dns_udp,
        dns_tcp,
        http,
        api,
        api_token,
        api_tls,
        replication,
        pair_key,
        state_dir: root.join("state"),
        _token: token,
    })
}

/// The pair's peer, where nothing listens (this host is the standby: it sends nothing).
const PEER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);

/// A standby host of a pair (whose peer is [`PEER`]) serving a cluster file's one replication
/// channel, as the supervisor starts it, on a loopback listener: its address and the pair's
/// replication key.
async fn standby(
    root: &std::path::Path,
    ctx: &crate::service::Context,
) -> anyhow::Result<(SocketAddr, [u8; 32])> {
    use std::os::unix::fs::PermissionsExt as _;
    let secret_file = root.join("pair.secret");
    std::fs::write(&secret_file, "fuzz-pair-secret-0123456789abcdef\n")?;
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600))?;
    let mut plan = (*ctx.plan.load_full()).clone();
    plan.ha = Some(crate::plan::ha::HaPlan {
        hosts: [PEER, Ipv4Addr::LOCALHOST],
        router_id: 51,
        secret_file: secret_file.clone(),
        interface: "lo".to_owned(),
        addresses: Vec::new(),
    });
    let pools = crate::lb::shared_pools(&plan);
    let ctx = crate::service::Context {
        plan: Arc::new(arc_swap::ArcSwap::from_pointee(plan)),
        active: crate::ha::Activity::standby(1),
        ..ctx.clone()
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let at = listener.local_addr()?;
    let (hub, receiving) = crate::replication::listen(listener, PEER, &ctx)?;
    tokio::spawn(receiving);
    let channel = crate::replication::Carries::Everything;
    tokio::spawn(hub.channel(None, channel, &ctx, Some(pools), None));
    let key = crate::secrets::PairKeys::read(&secret_file)?.replication;
    Ok((at, key))
}

/// A query for `api.<cluster>` with id `id`, which the authority always answers.
fn check_query(id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in ["api", "okd", "lab", "example", "com"] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// Asserts that nothing panicked in `wire` while `run` sent `data`.
fn no_panic(wire: Wire, data: &[u8], run: impl FnOnce()) {
    let before = panics(wire);
    run();
    let after = panics(wire);
    assert_eq!(after, before, "{} panicked on {data:?}", wire.name());
}

/// Any bytes as one datagram to the DNS/UDP listener; then a good query from the same socket
/// is answered (the listener is alive and was not wedged by the input).
pub fn dns_udp(data: &[u8]) {
    let served = served();
    let data = data.get(..MAX_UDP).unwrap_or(data);
    no_panic(Wire::Dns, data, || {
        served.runtime.block_on(async {
            let socket = UdpSocket::bind("127.0.0.1:0")
                .await
                .expect("a client socket");
            socket.connect(served.dns_udp).await.expect("connect");
            socket.send(data).await.expect("send the input");
            // An id the input's own reply can't have.
            let id = match data {
                [a, b, ..] => !u16::from_be_bytes([*a, *b]),
                _ => 0x5a5a,
            };
            socket.send(&check_query(id)).await.expect("send the check");
            let mut buf = vec![0u8; 65_535];
            let answered = tokio::time::timeout(PROMPT, async {
                loop {
                    let n = socket.recv(&mut buf).await.expect("receive");
                    if buf.get(..2) == Some(&id.to_be_bytes()[..]) {
                        return n;
                    }
                }
            })
            .await;
            let n = answered.unwrap_or_else(|_| panic!("no answer to the check after {data:?}"));
            // QR set, NOERROR, one answer.
            let reply = buf.get(..n).unwrap_or_default();
            assert!(
                reply.len() > 12 && reply[2] & 0x80 != 0 && reply[3] & 0x0f == 0 && reply[7] == 1,
                "a wrong answer to the check after {data:?}: {reply:?}"
            );
        });
    });
}

/// Any bytes as what a client writes on one DNS/TCP connection before it closes its side (so
/// any number of length-prefixed messages, cut anywhere): the server closes the connection
/// promptly, every reply is framed, and nothing panics.
pub fn dns_tcp(data: &[u8]) {
    let served = served();
    no_panic(Wire::Dns, data, || {
        let back = exchange(served, served.dns_tcp, Ipv4Addr::LOCALHOST, data);
        let mut rest = back.as_slice();
        while !rest.is_empty() {
            let [hi, lo, tail @ ..] = rest else {
                panic!("a cut length prefix after {data:?}");
            };
            let len = usize::from(u16::from_be_bytes([*hi, *lo]));
            assert!(len >= 12 && len <= tail.len(), "a cut reply after {data:?}");
            rest = &tail[len..];
        }
    });
}

/// Any bytes as what a client writes on one boot-server connection before it closes its side,
/// from a node's address when the first byte is odd and from a stranger's otherwise: the fast
/// path or hyper answers, the server closes the connection promptly, and what it sent is HTTP.
pub fn http(data: &[u8]) {
    let served = served();
    let (from, rest) = match data {
        [first, rest @ ..] if first & 1 == 1 => (NODE, rest),
        [_, rest @ ..] => (STRANGER, rest),
        [] => (STRANGER, data),
    };
    no_panic(Wire::Http, data, || {
        let back = exchange(served, served.http, from, rest);
        assert!(
            back.is_empty() || back.starts_with(b"HTTP/1.1 ") || back.starts_with(b"HTTP/1.0 "),
            "not an HTTP response after {data:?}: {:?}",
            String::from_utf8_lossy(back.get(..back.len().min(200)).unwrap_or_default())
        );
    });
}

/// Any bytes as one client's side of an API connection, after the TLS handshake: with the
/// bearer token added after the first line when the first byte is odd (so the fuzzer reaches
/// the operations, not only the refusal), without it otherwise. Nothing panics, the server
/// closes the connection promptly after the client's end, and what it sent is HTTP.
pub fn api(data: &[u8]) {
    let served = served();
    let request = match data {
        [first, rest @ ..] if first & 1 == 1 => {
            let cut = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .map_or(rest.len(), |i| i + 2);
            let (line, headers) = rest.split_at(cut);
            let auth = format!("Authorization: Bearer {}\r\n", served.api_token);
            [line, auth.as_bytes(), headers].concat()
        }
        [_, rest @ ..] => rest.to_vec(),
        [] => Vec::new(),
    };
    no_panic(Wire::Api, data, || {
        let back = served.runtime.block_on(async {
            let tcp = TcpStream::connect(served.api).await.expect("connect");
            let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
            let tls = served
                .api_tls
                .connect(name, tcp)
                .await
                .expect("the TLS handshake");
            half_close_and_read(tls, &request)
                .await
                .unwrap_or_else(|| panic!("the API didn't close after {data:?}"))
        });
        assert!(
            back.is_empty() || back.starts_with(b"HTTP/1.1 ") || back.starts_with(b"HTTP/1.0 "),
            "not an HTTP response after {data:?}: {:?}",
            String::from_utf8_lossy(back.get(..back.len().min(200)).unwrap_or_default())
        );
    });
}

/// Any bytes as one client's side of a connection to a standby's replication listener, chosen
/// by the first byte: 0 before any TLS (a stranger's bytes), 1 after the TLS handshake in place
/// of the proof, 2 (and above) after the handshake and a valid proof of the pair's key, as the
/// peer's lines (its channel's hello, its updates). Nothing panics, the standby closes promptly
/// after the client's end, and after a proof what it sent is its own proof, then JSON lines.
pub fn replication(data: &[u8]) {
    let served = served();
    let (mode, rest) = data.split_first().map_or((0, data), |(m, r)| (*m, r));
    no_panic(Wire::Replication, data, || {
        let back = served.runtime.block_on(async {
            let tcp = TcpStream::connect(served.replication)
                .await
                .expect("connect");
            if mode == 0 {
                return half_close_and_read(tcp, rest).await;
            }
            let name = rustls::pki_types::ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
            let tls = served
                .api_tls
                .connect(name, tcp)
                .await
                .expect("the TLS handshake");
            let mut exported = [0u8; 32];
            tls.get_ref()
                .1
                .export_keying_material(&mut exported, crate::replication::LABEL, None)
                .expect("keying material");
            let sent = if mode == 1 {
                rest.to_vec()
            } else {
                let proof = crate::replication::proof(&served.pair_key, b"client", &exported);
                [proof.as_ref(), rest].concat()
            };
            half_close_and_read(tls, &sent).await
        });
        let back = back.unwrap_or_else(|| panic!("replication didn't close after {data:?}"));
        match mode {
            0 => {}
            1 => assert!(back.is_empty(), "a stranger got {back:?} after {data:?}"),
            _ => {
                // Its proof, then one update per line.
                let lines = back.get(32..).unwrap_or_default();
                let text = String::from_utf8_lossy(lines);
                for line in text.lines() {
                    assert!(
                        serde_json::from_str::<crate::replication::Update>(line).is_ok(),
                        "not an update: {line:?} after {data:?}"
                    );
                }
            }
        }
    });
}

/// Connects from `from` to `to`, writes `data` and closes the sending side while reading what
/// comes back, until the server closes: what it sent. Panics when it doesn't close in time.
fn exchange(served: &Served, to: SocketAddr, from: Ipv4Addr, data: &[u8]) -> Vec<u8> {
    served.runtime.block_on(async {
        let socket = TcpSocket::new_v4().expect("a client socket");
        socket
            .bind(SocketAddr::new(IpAddr::V4(from), 0))
            .expect("bind the client's address");
        let stream: TcpStream = socket.connect(to).await.expect("connect");
        half_close_and_read(stream, data)
            .await
            .unwrap_or_else(|| panic!("{to} didn't close after {data:?}"))
    })
}

/// Writes `data` on `stream` and closes the sending side while reading what comes back until
/// the server closes: what it sent, or `None` when it didn't close within [`PROMPT`].
async fn half_close_and_read<S>(stream: S, data: &[u8]) -> Option<Vec<u8>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite,
{
    let (mut read, mut write) = tokio::io::split(stream);
    let writer = async {
        // The server may close first (a request it refuses): what it didn't read is fine.
        if write.write_all(data).await.is_ok() {
            let _ = write.shutdown().await;
        }
    };
    let reader = async {
        let mut back = Vec::new();
        // A reset after an answer (the server closed with input unread) ends it too.
        let _ = read.read_to_end(&mut back).await;
        back
    };
    tokio::time::timeout(PROMPT, async { tokio::join!(writer, reader).1 })
        .await
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness reaches what it claims to: the node's address is the node's, a stranger's
    /// is refused, and the DNS check is answered over TCP as over UDP.
    #[test]
    fn the_listeners_see_a_node_a_stranger_and_a_resolver() {
        let served = served();
        let get = |from, path: &str| {
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
            let back = exchange(served, served.http, from, request.as_bytes());
            String::from_utf8_lossy(&back).into_owned()
        };
        let status = |r: String| r.get(..12).unwrap_or_default().to_owned();
        assert_eq!(status(get(STRANGER, "/healthz")), "HTTP/1.1 200");
        assert_eq!(status(get(NODE, "/ignition/bootstrap.ign")), "HTTP/1.1 200");
        assert_eq!(
            status(get(STRANGER, "/ignition/bootstrap.ign")),
            "HTTP/1.1 403"
        );
        let query = check_query(7);
        let mut framed = u16::try_from(query.len()).unwrap().to_be_bytes().to_vec();
        framed.extend_from_slice(&query);
        let back = exchange(served, served.dns_tcp, Ipv4Addr::LOCALHOST, &framed);
        assert_eq!(back.get(2..4), Some(&[0, 7][..]), "{back:?}");
        dns_udp(&query);
    }

    /// The API target reaches past the token with an odd first byte, and not without it.
    #[test]
    fn the_api_answers_with_the_token_and_refuses_without() {
        let served = served();
        let get = |with_token: bool| {
            let mut data = vec![u8::from(with_token)];
            data.extend_from_slice(
                b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            );
            data
        };
        for (with_token, status) in [(true, "HTTP/1.1 200"), (false, "HTTP/1.1 401")] {
            let back = served.runtime.block_on(async {
                let tcp = TcpStream::connect(served.api).await.unwrap();
                let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
                let mut tls = served.api_tls.connect(name, tcp).await.unwrap();
                let data = get(with_token);
                let request = if with_token {
                    let text = String::from_utf8(data[1..].to_vec()).unwrap();
                    text.replacen(
                        "\r\n",
                        &format!("\r\nAuthorization: Bearer {}\r\n", served.api_token),
                        1,
                    )
                } else {
                    String::from_utf8(data[1..].to_vec()).unwrap()
                };
                tls.write_all(request.as_bytes()).await.unwrap();
                let mut back = Vec::new();
                let _ = tls.read_to_end(&mut back).await;
                String::from_utf8_lossy(&back).into_owned()
            });
            assert!(back.starts_with(status), "{with_token}: {back}");
            api(&get(with_token));
        }
    }

    /// The replication target reaches the standby's apply with a valid proof, and nothing
    /// without one.
    #[test]
    fn replication_applies_after_the_proof_only() {
        let served = served();
        let node = super::super::cluster_plan().boot[0].node.clone();
        let update = |installed: &str| {
            let markers = crate::install_state::Markers {
                ignition_fetched: None,
                disk_boot_offered: None,
                installed: Some(installed.to_owned()),
            };
            let line = crate::replication::Update::Markers {
                node: node.clone(),
                markers,
            };
            format!("{}\n", serde_json::to_string(&line).unwrap())
        };
        let installed = || {
            crate::install_state::read_markers(&served.state_dir, &node)
                .unwrap()
                .installed
        };
        replication(&[&[1u8][..], &[0u8; 32], update("refused").as_bytes()].concat());
        assert_eq!(installed(), None);
        replication(&[&[2u8][..], update("replicated").as_bytes()].concat());
        assert_eq!(installed().as_deref(), Some("replicated"));
    }
}
