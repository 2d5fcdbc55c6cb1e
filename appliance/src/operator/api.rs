//! The HTTP API and the status page: `GET /` (the page), `GET /api/v1/status` (JSON),
//! `GET /api/v1/events` (the journal as server-sent events: the recent history, then live),
//! `GET /metrics`, and the admin socket's actions as `POST /api/v1/nodes/NODE/drain`,
//! `.../undrain` and `.../reinstall`.
//!
//! Always on the local socket `<state_dir>/api.sock` (owner-only; `curl --unix-socket`). On
//! TCP (`api.listen`) only with TLS and a bearer token: every request carries
//! `Authorization: Bearer TOKEN` or, from a browser, the cookie that `GET /?token=TOKEN` sets
//! (HttpOnly, Secure, SameSite=Strict) with a redirect to `/`, so the token leaves the address
//! bar; a token in the URL is accepted there only. The cookie alone reads; an action (a POST)
//! with the cookie must also carry the page's action token in the `X-Okd-Appliance-Action`
//! header (an HMAC under the key made at start, written into the page, which another site can
//! neither read nor send). Anything else is answered 401 before it is looked at, with a body
//! that names the token file (`api.token_file`) and the two ways to send it.
//!
//! `GET /api/v1/events?page` is the status page's stream: besides the journal's events, a
//! `page` event with the page's parts whenever they changed (checked every second).
//!
//! Architecture invariant: a front like the admin socket: its operations (the status, the node
//! actions) are decoded into the admin socket's request type (`wire::Request::from_api`) and
//! done by the one dispatcher ([`super::perform::perform`]), and an [`super::OpError`] is
//! answered with its own status ([`super::OpError::http_status`]); the page, the event stream
//! and the metrics are its own routes, which change nothing. It holds no state of its own.

use crate::isolate::Wire;
use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, UnixListener};

use super::Clusters;
use super::Operator as Parts;
use super::perform::{Answer, perform};
#[cfg(test)]
use super::status_page;
use super::wire::Request as Operation;
use crate::service::Running;

pub const SOCKET_NAME: &str = "api.sock";

type Body = BoxBody<Bytes, Infallible>;

/// Who may ask: anyone on the owner-only local socket; on TCP, the token's holder.
#[derive(Clone)]
struct Access {
    /// An HMAC of the token under a key made at start: comparing tags is constant-time.
    token: Option<(ring::hmac::Key, ring::hmac::Tag)>,
    /// What a request without the token is told (where the token is, how to send it).
    refusal: String,
}

/// The cookie the status page's first request sets, so the token leaves the address bar.
const COOKIE: &str = "okd_appliance_token";

/// How a request is let in.
#[derive(Debug, PartialEq, Eq)]
enum Admitted {
    /// The token in a header or the cookie (or the local socket): served.
    Yes,
    /// The status page asked with `?token=`: answered with the cookie and a redirect to the
    /// page without it.
    SetCookie(String),
    No,
}

/// What the page's action token is an HMAC of (under the key made at start).
const ACTION_LABEL: &[u8] = b"okd-appliance status page actions";

impl Access {
    /// The token the status page's actions carry with the cookie, when a token is needed.
    fn action_token(&self) -> Option<String> {
        let (key, _) = self.token.as_ref()?;
        Some(data_encoding::HEXLOWER.encode(ring::hmac::sign(key, ACTION_LABEL).as_ref()))
    }

    fn admit(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Admitted {
        let Some((key, tag)) = &self.token else {
            return Admitted::Yes;
        };
        let valid = |given: &str| ring::hmac::verify(key, given.as_bytes(), tag.as_ref()).is_ok();
        let from_header = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if from_header.is_some_and(valid) {
            return Admitted::Yes;
        }
        let from_cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='));
        // A browser sends the cookie with whatever a page makes it send: the cookie reads, and
        // acts only with the action token the status page holds.
        let reads = matches!(*method, Method::GET | Method::HEAD);
        let page_action = || {
            headers
                .get(super::status_page::ACTION_HEADER)
                .and_then(|v| data_encoding::HEXLOWER.decode(v.as_bytes()).ok())
                .is_some_and(|given| ring::hmac::verify(key, ACTION_LABEL, &given).is_ok())
        };
        if from_cookie.is_some_and(valid) && (reads || page_action()) {
            return Admitted::Yes;
        }
        // In the URL only for the page's first GET: a URL lands in histories and logs.
        let from_query = (method == Method::GET && uri.path() == "/")
            .then(|| uri.query())
            .flatten()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")));
        match from_query {
            Some(given) if valid(given) => Admitted::SetCookie(given.to_owned()),
            _ => Admitted::No,
        }
    }
}

/// Binds the local socket, replacing a stale one, owner-only.
pub fn bind_local(state_dir: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    crate::sockets::bind_unix_owner_only(
        &state_dir.join(SOCKET_NAME),
        crate::sockets::StaleSocket::Replace,
    )
}

/// Serves the local socket and, with `api.listen`, TCP with TLS and the token (read here,
/// before privileges are dropped), its connections admitted through the TCP listener's gate.
pub fn start(
    local: std::os::unix::net::UnixListener,
    tcp: Option<(std::net::TcpListener, crate::budget::Gate)>,
    parts: Clusters,
) -> anyhow::Result<Running> {
    let local = UnixListener::from_std(local).context("adopting the API socket")?;
    let token = parts.shutdown().clone();
    let mut tasks: Vec<Running> = vec![Box::pin(serve_local(local, parts.clone(), token.clone()))];
    if let Some((listener, gate)) = tcp {
        let plan = parts.host().plan.load();
        let api = plan
            .api
            .as_ref()
            .context("an API listener without an api section")?;
        let secret = crate::secrets::read_line(&api.token_file)?;
        let secret = secret.expose();
        anyhow::ensure!(
            secret.len() >= 16,
            "the API token in {} is shorter than 16 characters",
            api.token_file.display()
        );
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .map_err(|_| anyhow::anyhow!("no randomness for the API token's key"))?;
        let tag = ring::hmac::sign(&key, secret.as_bytes());
        let tls = tls_config(&api.cert_file, &api.key_file)?;
        listener.set_nonblocking(true)?;
        tasks.push(Box::pin(serve_tcp(
            TcpListener::from_std(listener)?,
            tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
            Access {
                token: Some((key, tag)),
                refusal: refusal(&api.token_file),
            },
            (parts, gate),
            token,
        )));
    }
    Ok(crate::service::all(tasks))
}

/// The 401's body: the token is the first line of `token_file` (owner-only on the appliance:
/// naming its path gives nothing away), sent as a bearer token, or once in the page's address.
fn refusal(token_file: &Path) -> String {
    format!(
        "a bearer token is required: send `Authorization: Bearer TOKEN` (curl: -H 'Authorization: \
         Bearer TOKEN'), TOKEN being the first line of {} on the appliance (the api section's \
         token_file); in a browser, open /?token=TOKEN once\n",
        token_file.display()
    )
}

fn tls_config(cert: &Path, key: &Path) -> anyhow::Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .with_context(|| format!("reading the API certificate {}", cert.display()))?;
    // The key is a secret: read as every other (owner-only, or refused).
    let key = crate::secrets::read_file(key)
        .map_err(anyhow::Error::from)
        .and_then(|pem| Ok(PrivateKeyDer::from_pem_slice(&pem)?))
        .with_context(|| format!("reading the API key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the API certificate and key do not go together")
}

async fn serve_local(
    listener: UnixListener,
    parts: Clusters,
    token: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    let access = Access {
        token: None,
        refusal: String::new(),
    };
    loop {
        let stream = tokio::select! {
            () = token.cancelled() => return Ok(()),
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!("api accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        tokio::spawn(crate::isolate::connection(
            Wire::Api,
            connection(TokioIo::new(stream), parts.clone(), access.clone()),
        ));
    }
}

async fn serve_tcp(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    access: Access,
    (parts, gate): (Clusters, crate::budget::Gate),
    token: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    // The gate: its cap (the status page holds one event stream per open tab) and one client
    // address's share of it (`crate::budget`).
    loop {
        let (stream, peer) = tokio::select! {
            () = token.cancelled() => return Ok(()),
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("api accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // A stranger's unauthenticated connections are bounded, in all and per address: the
        // descriptors they hold are the ones DNS and the boot server need (issue 39).
        let ticket = match gate.admit(peer.ip()) {
            Ok(ticket) => ticket,
            Err(why) => {
                tracing::debug!("api {peer}: {why}; closed");
                continue;
            }
        };
        let (acceptor, parts, access) = (acceptor.clone(), parts.clone(), access.clone());
        tokio::spawn(crate::isolate::connection(Wire::Api, async move {
            let _ticket = ticket;
            match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                Ok(Ok(tls)) => connection(TokioIo::new(tls), parts, access).await,
                Ok(Err(e)) => tracing::debug!("api TLS from {peer}: {e}"),
                Err(_) => tracing::debug!("api TLS from {peer}: handshake timed out"),
            }
        }));
    }
}

async fn connection<I>(io: TokioIo<I>, parts: Clusters, access: Access)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let (parts, access) = (parts.clone(), access.clone());
        async move { Ok::<_, Infallible>(handle(req, &parts, &access).await) }
    });
    if let Err(e) = http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .serve_connection(io, service)
        .await
    {
        tracing::debug!("api connection: {e}");
    }
}

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    full(status, "text/plain; charset=utf-8", body.into())
}

async fn handle(req: Request<Incoming>, clusters: &Clusters, access: &Access) -> Response<Body> {
    match access.admit(req.method(), req.uri(), req.headers()) {
        Admitted::Yes => {}
        Admitted::SetCookie(token) => {
            let mut r = text(StatusCode::SEE_OTHER, "the status page: /\n");
            let h = r.headers_mut();
            h.insert(header::LOCATION, HeaderValue::from_static("/"));
            if let Ok(v) = HeaderValue::from_str(&format!(
                "{COOKIE}={token}; Path=/; Secure; HttpOnly; SameSite=Strict"
            )) {
                h.insert(header::SET_COOKIE, v);
            }
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            return r;
        }
        Admitted::No => {
            let mut r = text(StatusCode::UNAUTHORIZED, access.refusal.clone());
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"okd-appliance\""),
            );
            return r;
        }
    }
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // `/api/v1/clusters/ID/...` is cluster ID's `/api/v1/...`; without it, the only cluster's.
    let (cluster, segments): (Option<&str>, Vec<&str>) = match segments.as_slice() {
        ["api", "v1", "clusters", id, rest @ ..] => (
            Some(*id),
            ["api", "v1"]
                .into_iter()
                .chain(rest.iter().copied())
                .collect(),
        ),
        _ => (None, segments),
    };
    let page = |parts: &Parts, of| {
        full(
            StatusCode::OK,
            "text/html; charset=utf-8",
            super::status_page::render(
                &parts.status(),
                SystemTime::now(),
                access.action_token().as_deref(),
                of,
            ),
        )
    };
    match (req.method(), segments.as_slice()) {
        // Several clusters: a section each, and each cluster's own page.
        (&Method::GET, [""]) if clusters.ids().len() > 1 => {
            let all: Vec<(String, super::status::Status)> = clusters
                .all()
                .iter()
                .map(|(id, op)| (id.clone(), op.status()))
                .collect();
            let html = super::status_page::index(&all, SystemTime::now());
            return full(StatusCode::OK, "text/html; charset=utf-8", html);
        }
        (&Method::GET, ["clusters", id, ""] | ["clusters", id]) => {
            return match clusters.pick(Some(id)) {
                Ok(parts) => {
                    let api = format!("/api/v1/clusters/{id}");
                    let of = super::status_page::PageOf {
                        api: &api,
                        cluster: Some(id),
                    };
                    page(&parts, of)
                }
                Err(e) => op_error(&e),
            };
        }
        _ => {}
    }
    let parts = match (segments.as_slice(), clusters.pick(cluster)) {
        // The metrics are the host's.
        (["metrics"], _) => clusters.host(),
        (_, Ok(parts)) => parts,
        (_, Err(e)) => return op_error(&e),
    };
    let parts = &parts;
    // An operation goes where the admin socket's go, and is answered from its typed outcome.
    if let ["api", "v1", path @ ..] = segments.as_slice()
        && let Some(request) = Operation::from_api(req.method().as_str(), path)
    {
        return match perform(clusters, parts, request).await {
            Ok(Answer::Json(json)) => full(StatusCode::OK, "application/json", json),
            Ok(Answer::Done(done)) => text(StatusCode::OK, format!("{done}\n")),
            Ok(Answer::Lines { line: None, body }) => text(StatusCode::OK, body),
            // As the admin socket's reply reads: the summary, then the lines.
            Ok(Answer::Lines {
                line: Some(line),
                body,
            }) => text(StatusCode::OK, format!("{line}\n{body}")),
            Err(e) => op_error(&e),
        };
    }
    match (req.method(), segments.as_slice()) {
        (&Method::GET, [""]) => page(parts, super::status_page::PageOf::ONLY),
        (&Method::GET, ["api", "v1", "events"]) => events(
            parts,
            req.uri()
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "page")),
        ),
        (&Method::GET, ["metrics"]) => {
            let accept = req.headers().get(header::ACCEPT);
            let (content_type, body) = parts
                .metrics
                .exposition(accept.and_then(|v| v.to_str().ok()));
            let mut r = full(StatusCode::OK, content_type, body);
            r.headers_mut()
                .insert(header::VARY, HeaderValue::from_static("accept"));
            r
        }
        (_, ["api", "v1", "nodes", _, _]) | (_, ["api", "v1", "status" | "events"]) => {
            text(StatusCode::METHOD_NOT_ALLOWED, "wrong method\n")
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// An operation's error, with its status.
fn op_error(e: &super::OpError) -> Response<Body> {
    text(
        StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        format!("{e}\n"),
    )
}

/// Counts a client on the event stream for as long as its stream lives.
struct Following(prometheus_client::metrics::gauge::Gauge);

impl Following {
    fn new(gauge: &prometheus_client::metrics::gauge::Gauge) -> Following {
        gauge.inc();
        Following(gauge.clone())
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One client's event stream.
struct Stream {
    parts: Parts,
    history: std::collections::VecDeque<String>,
    live: tokio::sync::broadcast::Receiver<crate::journal::Event>,
    /// Counted among the streams for as long as it lives.
    _following: Following,
    page: Option<PageParts>,
    last_frame: tokio::time::Instant,
}

/// The status page's parts as last sent on a stream.
struct PageParts {
    ticker: tokio::time::Interval,
    last: String,
}

impl Stream {
    /// The page's parts as a `page` event, when they changed since the last one sent.
    fn page_frame(&mut self) -> Option<String> {
        let page = self.page.as_mut()?;
        let parts: serde_json::Map<String, serde_json::Value> =
            super::status_page::fragments(&self.parts.status(), SystemTime::now())
                .into_iter()
                .map(|(id, html)| (id.to_owned(), serde_json::Value::String(html)))
                .collect();
        let json = serde_json::Value::Object(parts).to_string();
        if json == page.last {
            return None;
        }
        page.last.clone_from(&json);
        Some(format!("event: page\ndata: {json}\n\n"))
    }
}

/// One journal event as JSON for the stream.
fn event_json(e: &crate::journal::Event) -> String {
    let at =
        e.at.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
    let phase = match &e.kind {
        crate::journal::EventKind::NodePhase { phase, .. } => Some(*phase),
        _ => None,
    };
    serde_json::json!({
        "at": at,
        "node": e.node,
        "phase": phase,
        "text": e.to_string(),
    })
    .to_string()
}

/// The journal as server-sent events: the history kept from before this start (each marked
/// `earlier`, then a `restarted` event with this start's time), the recent history, then each
/// new event (a keep-alive
/// comment after 15 s without a frame keeps proxies from closing an idle stream); with `page`,
/// also the status page's parts as a `page` event, at once and then whenever they changed
/// (looked at every second). Ends with the appliance.
fn events(parts: &Parts, page: bool) -> Response<Body> {
    use tokio::sync::broadcast::error::RecvError;
    const KEEP_ALIVE: Duration = Duration::from_secs(15);
    let live = parts.journal.subscribe();
    // What came before this start (kept on disk) first, marked, then a `restarted` event, then
    // this run's.
    let earlier = parts.journal.earlier();
    let mut history: std::collections::VecDeque<String> = earlier
        .iter()
        .map(|p| {
            let e =
                serde_json::json!({"at": p.at, "node": p.node, "text": p.text, "earlier": true});
            format!("data: {e}\n\n")
        })
        .collect();
    if !earlier.is_empty() {
        let started = parts
            .fixed
            .started
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        history.push_back(format!(
            "event: restarted\ndata: {}\n\n",
            serde_json::json!({ "at": started })
        ));
    }
    history.extend(
        parts
            .journal
            .recent()
            .iter()
            .map(|e| format!("data: {}\n\n", event_json(e))),
    );
    let following = Following::new(&parts.metrics.api_event_streams);
    let stream = Stream {
        parts: parts.clone(),
        history,
        live,
        _following: following,
        page: page.then(|| {
            let mut ticker = tokio::time::interval(Duration::from_secs(1));
            // A client that fell behind gets the parts once, not a burst of them.
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            PageParts {
                ticker,
                last: String::new(),
            }
        }),
        last_frame: tokio::time::Instant::now(),
    };
    let stream = futures_util::stream::unfold(stream, |mut st| async move {
        let chunk = match st.history.pop_front() {
            Some(frame) => frame,
            None => loop {
                let quiet = tokio::time::sleep_until(st.last_frame + KEEP_ALIVE);
                let ticker = st.page.as_mut().map(|p| &mut p.ticker);
                let tick = async move {
                    match ticker {
                        Some(t) => {
                            t.tick().await;
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = st.parts.shutdown.cancelled() => return None,
                    () = quiet => break ": keep-alive\n\n".to_owned(),
                    () = tick => {
                        if let Some(frame) = st.page_frame() {
                            break frame;
                        }
                    }
                    r = st.live.recv() => match r {
                        // Signals between services are not the journal's news.
                        Ok(e) if e.kind.is_signal() => continue,
                        Ok(e) => break format!("data: {}\n\n", event_json(&e)),
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => return None,
                    },
                }
            },
        };
        st.last_frame = tokio::time::Instant::now();
        Some((Ok::<_, Infallible>(Frame::data(Bytes::from(chunk))), st))
    });
    let mut r = Response::new(StreamBody::new(stream).boxed());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "the-token-0123456789";

    fn access() -> Access {
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng).unwrap();
        let tag = ring::hmac::sign(&key, TOKEN.as_bytes());
        Access {
            token: Some((key, tag)),
            refusal: refusal(Path::new("/etc/okd-appliance/api.token")),
        }
    }

    fn ask(access: &Access, method: &Method, path: &str, headers: &[(&str, &str)]) -> Admitted {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        access.admit(method, &path.parse::<Uri>().unwrap(), &map)
    }

    #[test]
    fn the_cookie_reads_and_acts_only_with_the_pages_action_token() {
        let a = access();
        let cookie = format!("okd_appliance_token={TOKEN}");
        let action = a.action_token().unwrap();
        let drain = "/api/v1/nodes/mst0/drain";
        assert_eq!(
            ask(&a, &Method::GET, "/", &[("cookie", &cookie)]),
            Admitted::Yes
        );
        assert_eq!(
            ask(&a, &Method::POST, drain, &[("cookie", &cookie)]),
            Admitted::No,
            "a cookie alone never acts: any site can make a browser send it"
        );
        assert_eq!(
            ask(
                &a,
                &Method::POST,
                drain,
                &[("cookie", &cookie), (status_page::ACTION_HEADER, &action)]
            ),
            Admitted::Yes
        );
        let wrong = format!("{}0", &action[..action.len() - 1]);
        let wrong = if wrong == action {
            format!("{}1", &action[..action.len() - 1])
        } else {
            wrong
        };
        assert_eq!(
            ask(
                &a,
                &Method::POST,
                drain,
                &[("cookie", &cookie), (status_page::ACTION_HEADER, &wrong)]
            ),
            Admitted::No
        );
        assert_eq!(
            ask(
                &a,
                &Method::POST,
                drain,
                &[
                    ("cookie", "okd_appliance_token=wrong"),
                    (status_page::ACTION_HEADER, &action)
                ]
            ),
            Admitted::No,
            "the action token is no token by itself"
        );
        assert_eq!(
            ask(
                &a,
                &Method::POST,
                drain,
                &[(status_page::ACTION_HEADER, &action)]
            ),
            Admitted::No
        );
        let bearer = format!("Bearer {TOKEN}");
        assert_eq!(
            ask(&a, &Method::POST, drain, &[("authorization", &bearer)]),
            Admitted::Yes
        );
        assert_eq!(
            ask(&a, &Method::GET, &format!("/?token={TOKEN}"), &[]),
            Admitted::SetCookie(TOKEN.to_owned())
        );
        assert_eq!(
            ask(
                &a,
                &Method::GET,
                &format!("/api/v1/status?token={TOKEN}"),
                &[]
            ),
            Admitted::No
        );
        // Another start, another key: an old page's action token no longer acts.
        assert_ne!(access().action_token(), Some(action));
        let local = Access {
            token: None,
            refusal: String::new(),
        };
        assert_eq!(local.action_token(), None);
        assert_eq!(ask(&local, &Method::POST, drain, &[]), Admitted::Yes);
    }
}
