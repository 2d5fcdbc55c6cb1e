//! The HTTP boot server: per-node iPXE scripts, per-node and role ignition configs (each only to
//! the nodes it belongs to), the CoreOS artifacts, streamed from disk with Range, HEAD and
//! conditional requests, and the per-node live ISOs (`iso`).
//!
//! The socket layer on hyper's HTTP/1.1 server connection. Each path is parsed once into a
//! `plan::route::Route` (the request counters' label comes from the same parse), and `handle`
//! is a match on it: `/boot/<mac>.ipxe`, `/ignition/<node>.ign`, `/ignition/roles/<file>`,
//! `/artifacts/...`, `/iso/<node>.iso`, the iPXE binaries, `/healthz`, `/metrics`. Which file a
//! route answers with is decided here; `response.rs` makes the answer.
//!
//! Access: a node's ignition only to that node's reserved addresses, a role's config only to
//! nodes of that role, both only on the active host of a pair; anyone else gets 403, journaled
//! without content. What a permitted fetch means for the install is `install_state`'s to decide
//! (`install_steps::observe`).
//!
//! Hardening: the request head must arrive within 10 s (slowloris) and fit in 16 KiB; the
//! listener's share of the descriptor budget caps its connections (512, and 32 per address, when
//! they fit: `budget.rs`; more wait in the listen backlog); a connection on which nothing moves
//! for 60 s is closed (`crate::idle::Watched`); only GET and HEAD; paths are percent-decoded
//! before they are checked and never leave their directory. Ignition content is never logged. A
//! client that half-closes after its request (busybox `nc` in a boot environment) still gets its
//! answer, which hyper otherwise drops (`appliance/tests/http_boot.rs`
//! `a_client_that_half_closes_after_its_request_gets_the_answer`).
//!
//! Invariant (not enforced by a test): the handler reads the plan from the `ArcSwap` once per
//! request and the node's install state from its marker files, so a reload or a `node
//! reinstall` applies to the next request without any lock.

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::install_steps::{
    Unrecorded, artifact_fetched, fetch_failed, ignition_refusal, is_node, observe, script,
};
use super::iso::{self, IsoCache};
use super::opencache::{Found, OpenCache};
use super::response::{ARTIFACT_TYPE, Body, Source, empty, file, from_disk, full, text};
use super::sendfile::{Segments, SendfileStream};
use super::{HEADER_TIMEOUT, MAX_HEAD, fastpath, files};
use crate::idle::Watched;
use crate::install_state::Observation;
use crate::isolate::Wire;
use crate::journal::{EventKind, Journal};
use crate::plan::route::Route;
use crate::plan::{self, BootParams, Plan};
use crate::vocabulary::RoleConfig;

/// A connection on which no byte moved either way for this long is closed (a stalled reader).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Serves HTTP on `listener` until `token` is cancelled; open connections finish their request.
pub async fn serve(
    listener: TcpListener,
    plan: plan::Handle,
    journal: Journal,
    active: crate::ha::Activity,
    (metrics, gate, faults): (
        Arc<crate::metrics::Metrics>,
        crate::budget::Gate,
        crate::faults::Faults,
    ),
    token: CancellationToken,
) -> anyhow::Result<()> {
    // The gate: its cap and each address's share (a booting node opens a few connections, iPXE
    // and curl in parallel at most a handful; one host can't take every slot from the rest of
    // the rack, TFTP's admission has the same rule): `crate::budget`.
    let isos = Arc::new(IsoCache::default());
    let opened_files = Arc::new(OpenCache::default());
    {
        let (isos, plan, token) = (Arc::clone(&isos), Arc::clone(&plan), token.clone());
        tokio::spawn(async move { isos.watch(plan, token).await });
    }
    loop {
        // Past the limit, new clients wait in the listen backlog rather than being cut off; a
        // held slot is bounded by the header timeout until a request arrives.
        let slot = tokio::select! {
            () = token.cancelled() => return Ok(()),
            slot = gate.slot() => slot,
        };
        let (stream, peer) = tokio::select! {
            () = token.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("http accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let ticket = match slot.admit(peer.ip()) {
            Ok(ticket) => ticket,
            Err(why) => {
                tracing::debug!("http {peer}: {why}; closed");
                continue;
            }
        };
        let (plan, journal, token, isos, active, metrics, opened_files) = (
            Arc::clone(&plan),
            journal.clone(),
            token.clone(),
            Arc::clone(&isos),
            active.clone(),
            Arc::clone(&metrics),
            Arc::clone(&opened_files),
        );
        let faults = faults.clone();
        // A response head and a sendfile body are two writes: with Nagle's algorithm the body
        // of a small file would wait for the client's delayed ACK of the head (~40 ms).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("http {peer}: TCP_NODELAY: {e}");
        }
        // The address the client reached: equal to the peer's when the client runs on this host.
        let local = stream.local_addr().ok();
        let (mut stream, progress) = Watched::new(stream);
        let segments = Segments::default();
        tokio::spawn(async move {
            crate::isolate::connection(Wire::Http, async move {
                let _ticket = ticket;
                // Small cached artifacts first (`fastpath`); hyper takes over for anything else.
                let shared = fastpath::Shared {
                    peer,
                    plan: &plan,
                    journal: &journal,
                    opened_files: &opened_files,
                    metrics: &metrics,
                };
                let ahead = tokio::select! {
                    outcome = fastpath::serve(&mut stream, &shared, &token) => match outcome {
                        Ok(fastpath::Outcome::Hyper(ahead)) => ahead,
                        Ok(fastpath::Outcome::Done) => return,
                        Err(e) => {
                            tracing::debug!("http {peer}: {e}");
                            return;
                        }
                    },
                    () = progress.stalled(IDLE_TIMEOUT) => {
                        tracing::info!("http {peer}: nothing moved for {IDLE_TIMEOUT:?}; closing");
                        return;
                    }
                };
                let stream = SendfileStream::new(stream, segments.clone()).read_ahead(ahead);
                let service = service_fn(move |req| {
                    let (plan, journal, segments, isos, active, metrics, opened_files) = (
                        Arc::clone(&plan),
                        journal.clone(),
                        segments.clone(),
                        Arc::clone(&isos),
                        active.is_active(),
                        Arc::clone(&metrics),
                        Arc::clone(&opened_files),
                    );
                    let faults = faults.clone();
                    async move {
                        let plan = plan.load_full();
                        let context = Context {
                            peer,
                            local,
                            plan: &plan,
                            journal: &journal,
                            segments: &segments,
                            isos: &isos,
                            opened_files: &opened_files,
                            active,
                            metrics: &metrics,
                            faults: &faults,
                        };
                        let response = handle(&req, &context).await;
                        // What the body announces: a file's length, a generated document's size.
                        let bytes = hyper::body::Body::size_hint(response.body())
                            .exact()
                            .or_else(|| {
                                response
                                    .headers()
                                    .get(header::CONTENT_LENGTH)
                                    .and_then(|v| v.to_str().ok())
                                    .and_then(|v| v.parse().ok())
                            })
                            .unwrap_or(0);
                        metrics.http_request(
                            plan.host_cluster.as_ref(),
                            Route::parse(req.uri().path()).label(),
                            response.status().as_u16(),
                            bytes,
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    // Body buffers are queued as given, never copied: `SendfileStream` relies on it.
                    .writev(true)
                    .header_read_timeout(HEADER_TIMEOUT)
                    .max_buf_size(MAX_HEAD)
                    // A client may close its sending side once the request is out (busybox `nc`
                    // in a boot environment, HTTP/1.0 scripts) and still wait for the answer;
                    // without this hyper drops the request in flight when it reads that EOF.
                    .half_close(true)
                    .serve_connection(TokioIo::new(stream), service);
                let mut conn = std::pin::pin!(conn);
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!("http {peer}: {e}");
                        }
                    }
                    () = progress.stalled(IDLE_TIMEOUT) => {
                        tracing::info!("http {peer}: nothing moved for {IDLE_TIMEOUT:?}; closing");
                    }
                    () = token.cancelled() => {
                        conn.as_mut().graceful_shutdown();
                        // The response in flight finishes, unless its client stopped reading.
                        tokio::select! {
                            _ = conn.as_mut() => {}
                            () = progress.stalled(IDLE_TIMEOUT) => {}
                        }
                    }
                }
            })
            .await;
        });
    }
}

/// Whether a reader at `ip` of `boot`'s ISO is the machine that boots it: the node itself, or
/// what reads its virtual CD for it, by the provider: the BMC (redfish), the Proxmox host
/// (its download), the libvirt host (QEMU's HTTP driver; for a local URI, this host itself,
/// which a local curl can't be told apart from). Providers named by host name are matched
/// only through the node's own address: nothing here resolves names per request.
fn boots_from_iso(plan: &Plan, boot: &BootParams, ip: IpAddr, local: Option<SocketAddr>) -> bool {
    use crate::plan::machines::Provider;
    if is_node(boot, ip) {
        return true;
    }
    let host_is = |url: &str| {
        url::Url::parse(url).ok().is_some_and(|u| match u.host() {
            Some(url::Host::Ipv4(a)) => IpAddr::to_canonical(&ip) == IpAddr::V4(a),
            Some(url::Host::Ipv6(a)) => IpAddr::to_canonical(&ip) == IpAddr::V6(a),
            _ => false,
        })
    };
    match &plan.control.provider {
        Provider::None => false,
        Provider::Redfish => plan
            .control
            .machine(&boot.node)
            .and_then(|m| m.bmc.as_ref())
            .is_some_and(|bmc| host_is(&bmc.url)),
        Provider::Proxmox(px) => host_is(&px.url),
        Provider::Libvirt(lv) => match url::Url::parse(&lv.uri) {
            Ok(u) if u.host().is_some() => host_is(&lv.uri),
            // qemu:///system: QEMU runs here and reads from one of this host's addresses.
            _ => ip.is_loopback() || local.is_some_and(|l| IpAddr::to_canonical(&l.ip()) == ip),
        },
    }
}

/// What a request is answered with, besides itself.
struct Context<'a> {
    peer: SocketAddr,
    /// This end of the connection.
    local: Option<SocketAddr>,
    plan: &'a Plan,
    journal: &'a Journal,
    segments: &'a Segments,
    isos: &'a IsoCache,
    /// Small artifact files kept open between requests.
    opened_files: &'a OpenCache,
    /// This host is the active one of its pair (always, outside a pair).
    active: bool,
    metrics: &'a crate::metrics::Metrics,
    /// Where a marker that can't be written is reported.
    faults: &'a crate::faults::Faults,
}

async fn handle(req: &Request<Incoming>, cx: &Context<'_>) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let route = Route::parse(req.uri().path());
    if route.is_ignition() && !cx.active {
        // Only the active host of a pair hands out ignition (and records installs): a node
        // never gets two answers. The standby has the virtual address only after a failover.
        let mut r = text(
            StatusCode::SERVICE_UNAVAILABLE,
            "this appliance is the standby of its pair\n",
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return r;
    }
    match route {
        Route::Healthz => text(StatusCode::OK, "ok\n"),
        Route::Metrics => metrics_page(req, cx),
        Route::Script(name) => script(req, name, cx.peer, cx.plan, (cx.journal, cx.faults)).await,
        Route::RoleIgnition(role) => role_ignition(req, role, cx).await,
        Route::Ignition(name) => node_ignition(req, name, cx).await,
        Route::Iso(name) => iso(req, name, cx).await,
        Route::Artifact(rest) => artifact(req, rest, cx),
        Route::Other(path) => ipxe_binary(req, path, cx),
        Route::Malformed(_) => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// `/metrics`: this boot server's cluster's series (a host's own boot server: every one).
fn metrics_page(req: &Request<Incoming>, cx: &Context<'_>) -> Response<Body> {
    let Context { plan, metrics, .. } = *cx;
    let accept = req.headers().get(header::ACCEPT);
    let accept = accept.and_then(|v| v.to_str().ok());
    // On a host of several clusters, each boot server shows its own cluster's series.
    let (content_type, body) = match plan.host_cluster.as_deref() {
        Some(id) => metrics.exposition_of(accept, id),
        None => metrics.exposition(accept),
    };
    let mut r = Response::new(full(body));
    let headers = r.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::VARY, HeaderValue::from_static("accept"));
    r
}

/// `/ignition/roles/<file>`: a role's config, only to the nodes of that role; the installed
/// system's fetch of it marks the node installed.
async fn role_ignition(req: &Request<Incoming>, role: &str, cx: &Context<'_>) -> Response<Body> {
    let Context {
        peer,
        plan,
        journal,
        segments,
        faults,
        ..
    } = *cx;
    let ip = IpAddr::to_canonical(&peer.ip());
    let files = &plan.files;
    let role = RoleConfig::ALL.into_iter().find(|r| r.file() == role);
    let Some(role) = role else {
        return text(StatusCode::NOT_FOUND, "no such role\n");
    };
    // Role configs hold the cluster's secrets: only nodes of that role get them.
    let Some(node) = plan
        .boot
        .iter()
        .find(|b| b.role_config == role && is_node(b, ip))
    else {
        let asker = plan.boot.iter().find(|b| is_node(b, ip));
        journal.publish(
            asker.map(|b| b.node.clone()),
            EventKind::FetchRefused {
                from: peer,
                what: role.file().to_owned(),
                why: "not the address of a node of that role",
            },
        );
        return text(StatusCode::FORBIDDEN, "not a node of this role\n");
    };
    if let Some(refused) = ignition_refusal(files, role, &node.node, peer, journal).await {
        return refused;
    }
    if req.method() == Method::GET {
        if !role.fetched_by_installed_system() {
            tracing::info!(
                "http: {} fetched by the live system of {} ({peer})",
                role.file(),
                node.node
            );
        }
        // Only Ignition on the installed system's first boot fetches the role config that
        // the node's own ignition merges: this, not the installer's fetch, means installed.
        let seen = Observation::RoleConfig {
            from: peer,
            file: role.file(),
            by_installed_system: role.fetched_by_installed_system(),
        };
        if let Err(Unrecorded::Refused(refused)) =
            observe((plan, journal, faults), &node.node, seen).await
        {
            return *refused;
        }
    }
    let path = files.ignition_dir.join(role.file());
    file(
        req,
        from_disk(open_file(&path)),
        &path,
        "application/vnd.coreos.ignition+json",
        false,
        segments,
    )
}

/// `/ignition/<node>.ign`: the node's own ignition, only to its address; the live installer's
/// fetch of it marks the install started.
async fn node_ignition(req: &Request<Incoming>, name: &str, cx: &Context<'_>) -> Response<Body> {
    let Context {
        peer,
        plan,
        journal,
        faults,
        ..
    } = *cx;
    let ip = IpAddr::to_canonical(&peer.ip());
    let files = &plan.files;
    let Some(node) = plan.boot.iter().find(|b| b.node == name) else {
        return text(StatusCode::NOT_FOUND, "no such node\n");
    };
    if !is_node(node, ip) {
        journal.publish(
            Some(node.node.clone()),
            EventKind::FetchRefused {
                from: peer,
                what: "ignition".to_owned(),
                why: "not the node's address",
            },
        );
        return text(
            StatusCode::FORBIDDEN,
            "this ignition belongs to another address\n",
        );
    }
    // The node's ignition merges its role's: refused now rather than by Ignition at the
    // installed system's first boot, after the disk was written.
    if let Some(refused) =
        ignition_refusal(files, node.role_config, &node.node, peer, journal).await
    {
        return refused;
    }
    if req.method() == Method::GET {
        let seen = Observation::Ignition { from: peer };
        if let Err(Unrecorded::Refused(refused)) =
            observe((plan, journal, faults), &node.node, seen).await
        {
            return *refused;
        }
    }
    let body = node.documents.ignition.clone();
    generated(req, body, "application/vnd.coreos.ignition+json")
}

/// `/iso/<node>.iso`: the node's live ISO.
async fn iso(req: &Request<Incoming>, name: &str, cx: &Context<'_>) -> Response<Body> {
    let Context {
        peer,
        local,
        plan,
        journal,
        segments,
        isos,
        ..
    } = *cx;
    let ip = IpAddr::to_canonical(&peer.ip());
    // Served to any address: the image holds no secret (see `iso`). Only a read by the
    // machine that boots it moves the node's install phase.
    let boots = plan
        .boot
        .iter()
        .find(|b| b.node == name)
        .is_some_and(|b| boots_from_iso(plan, b, ip, local));
    iso::respond(req, name, peer, boots, plan, isos, journal, segments).await
}

/// `/artifacts/<path>`: a CoreOS artifact (never an ignition or auth file beside them).
fn artifact(req: &Request<Incoming>, rest: &str, cx: &Context<'_>) -> Response<Body> {
    let Context {
        peer,
        plan,
        journal,
        segments,
        opened_files,
        ..
    } = *cx;
    let files = &plan.files;
    // On the runtime thread, like `open_file`. Only artifact files, whatever else the
    // directory holds (see `files::is_artifact_path`); the cache only holds what
    // `files::open_relative` opened for the same path.
    let found = files::artifact_relative(rest)
        .and_then(|relative| opened_files.open(&files.artifacts_dir, &relative));
    if req.method() == Method::GET && found.is_some() && from_the_start(req) {
        artifact_fetched(plan, journal, peer, req.uri().path());
    }
    match found {
        Some(Found::Cached {
            meta,
            validators,
            body,
        }) => file(
            req,
            Ok((Source::Read(body, validators), meta)),
            Path::new(rest),
            ARTIFACT_TYPE,
            true,
            segments,
        ),
        Some(Found::Opened(real, opened)) => {
            file(req, from_disk(opened), &real, ARTIFACT_TYPE, true, segments)
        }
        None => {
            let name = rest.rsplit('/').next().unwrap_or(rest);
            let fix = format!(
                "not in {}: `okd-appliance check --install` on the services host names the command that fetches it",
                files.artifacts_dir.display()
            );
            fetch_failed((plan, journal), peer, name, StatusCode::NOT_FOUND, fix);
            text(StatusCode::NOT_FOUND, "no such artifact\n")
        }
    }
}

/// Any other path: an iPXE binary by the names DHCP hands out, or not found.
fn ipxe_binary(req: &Request<Incoming>, path: &str, cx: &Context<'_>) -> Response<Body> {
    let (plan, journal, peer, segments) = (cx.plan, cx.journal, cx.peer, cx.segments);
    let files = &plan.files;
    let Some(binary) = files.ipxe_binary(path) else {
        return text(StatusCode::NOT_FOUND, "not found\n");
    };
    let opened = open_file(&binary);
    // Missing (or not a file): say what to install. Other errors are `file`'s 500.
    let missing = match &opened {
        Ok((_, m)) => !m.is_file(),
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    };
    if missing {
        let name = binary.file_name().map_or_else(
            || binary.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let fix = format!(
            "not in {}: Debian's ipxe package has it (`apt-get install ipxe`), or point install.ipxe_dir at a directory that has it",
            files.ipxe_dir.display()
        );
        fetch_failed((plan, journal), peer, &name, StatusCode::NOT_FOUND, fix);
        return text(
            StatusCode::NOT_FOUND,
            "iPXE binary not installed (Debian: apt install ipxe)\n",
        );
    }
    file(
        req,
        from_disk(opened),
        &binary,
        "application/octet-stream",
        true,
        segments,
    )
}

/// A GET without a Range, or one whose range starts at the first byte: the start of a
/// download rather than its continuation.
fn from_the_start(req: &Request<Incoming>) -> bool {
    match req
        .headers()
        .get(header::RANGE)
        .and_then(|r| r.to_str().ok())
    {
        None => true,
        Some(r) => r
            .strip_prefix("bytes=")
            .is_some_and(|spec| spec.trim_start().starts_with("0-")),
    }
}

/// A generated document (never cached: it changes with the plan and may be per node).
fn generated(req: &Request<Incoming>, body: String, content_type: &'static str) -> Response<Body> {
    let len = body.len();
    let mut r = Response::new(if req.method() == Method::HEAD {
        empty()
    } else {
        full(body)
    });
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Opens a file and reads its metadata, on the runtime thread: the file's bytes are read there
/// too, in the sendfile calls (`sendfile.rs`), as nginx does without thread pools, since files
/// live on a local disk and are usually in the page cache. On the blocking pool instead, each
/// call was a hand-off (a futex wake-up and a context switch) that cost more than the call: with
/// one for the path, one for `open` and one for `stat`, small files were answered at 0.56x
/// nginx's rate (futex about 30% of the samples of `PROFILE=1 bash bench/http.sh`), at 0.82x with
/// one hand-off, and at about 1.3x with none.
fn open_file(path: &Path) -> files::Opened {
    let f = std::fs::File::open(path)?;
    let m = f.metadata()?;
    Ok((f, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(file: &str, edit: impl Fn(String) -> String) -> Plan {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
        let text = edit(std::fs::read_to_string(dir.join(file)).unwrap());
        let loaded = crate::config::parse(&text, file, &dir, crate::config::InstallCheck::Skip)
            .unwrap_or_else(|e| panic!("{e:?}"));
        Plan::derive(&loaded.config, 1)
    }

    #[test]
    fn only_the_machine_that_boots_a_node_moves_it_by_reading_its_iso() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let local = |s: &str| Some(SocketAddr::new(ip(s), 8080));
        // Redfish: the node's own BMC, by address; not another BMC, nor this host.
        let metal = plan("baremetal.yml", |t| t);
        let worker = metal.boot.iter().find(|b| b.node == "worker-0").unwrap();
        let reads =
            |from: &str, at: Option<SocketAddr>| boots_from_iso(&metal, worker, ip(from), at);
        assert!(reads("172.16.20.20", local("172.16.10.2")));
        assert!(
            reads("172.16.10.20", local("172.16.10.2")),
            "the node itself"
        );
        assert!(reads("::ffff:172.16.20.20", local("172.16.10.2")));
        assert!(
            !reads("172.16.20.10", local("172.16.10.2")),
            "another node's BMC"
        );
        assert!(
            !reads("172.16.10.2", local("172.16.10.2")),
            "a curl on this host"
        );
        assert!(!reads("127.0.0.1", local("127.0.0.1")));
        // libvirt on this host: QEMU reads from here, and nothing else can be told apart.
        let lv = plan("libvirt.yml", |t| {
            t.replace("qemu+ssh://root@kvm1.example.org/system", "qemu:///system")
        });
        let node = &lv.boot[0];
        let appliance = IpAddr::V4(lv.dhcp.server_id);
        assert!(boots_from_iso(
            &lv,
            node,
            appliance,
            Some(SocketAddr::new(appliance, 8080))
        ));
        assert!(!boots_from_iso(
            &lv,
            node,
            ip("192.0.2.99"),
            Some(SocketAddr::new(appliance, 8080))
        ));
        // Proxmox by host name: only the node's own address can be matched.
        let px = plan("proxmox.yml", |t| t);
        let node = &px.boot[0];
        assert!(!boots_from_iso(&px, node, ip("192.0.2.99"), None));
        assert!(boots_from_iso(&px, node, IpAddr::V4(node.ipv4), None));
        let px = plan("proxmox.yml", |t| {
            t.replace(
                "https://pve1.pve.example.com:8006",
                "https://192.0.2.8:8006",
            )
        });
        assert!(boots_from_iso(&px, &px.boot[0], ip("192.0.2.8"), None));
    }
}
