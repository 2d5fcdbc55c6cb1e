//! The HTTP API and the status page: `GET /` (the page), `GET /api/v1/status` (JSON),
//! `GET /api/v1/events` (the journal as server-sent events: the recent history, then live),
//! `GET /metrics`, and the admin socket's actions as `POST /api/v1/nodes/NODE/drain`,
//! `.../undrain` and `.../reinstall`.
//!
//! Always on the local socket `<state_dir>/api.sock` (owner-only; `curl --unix-socket`). On
//! TCP (`api.listen`) only with TLS and a bearer token: every request carries
//! `Authorization: Bearer TOKEN` or, from a browser, the cookie that `GET /?token=TOKEN` sets
//! (HttpOnly, Secure, SameSite=Strict) with a redirect to `/`, so the token leaves the address
//! bar; a token in the URL is accepted there only. Anything else is answered 401 before it is
//! looked at.
//!
//! Architecture invariant: a front like the admin socket: it calls the [`Operator`]'s typed
//! operations and answers an [`super::OpError`] with its own status
//! ([`super::OpError::http_status`]); it holds no state of its own.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, UnixListener};

use super::Operator as Parts;
use crate::service::Running;

pub const SOCKET_NAME: &str = "api.sock";

type Body = BoxBody<Bytes, Infallible>;

/// Who may ask: anyone on the owner-only local socket; on TCP, the token's holder.
#[derive(Clone)]
struct Access {
    /// An HMAC of the token under a key made at start: comparing tags is constant-time.
    token: Option<(ring::hmac::Key, ring::hmac::Tag)>,
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

impl Access {
    fn admit(&self, req: &Request<Incoming>) -> Admitted {
        let Some((key, tag)) = &self.token else {
            return Admitted::Yes;
        };
        let valid = |given: &str| ring::hmac::verify(key, given.as_bytes(), tag.as_ref()).is_ok();
        let from_header = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let from_cookie = req
            .headers()
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='));
        if from_header.or(from_cookie).is_some_and(valid) {
            return Admitted::Yes;
        }
        // In the URL only for the page's first GET: a URL lands in histories and logs.
        let from_query = (req.method() == Method::GET && req.uri().path() == "/")
            .then(|| req.uri().query())
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
/// before privileges are dropped).
pub fn start(
    local: std::os::unix::net::UnixListener,
    tcp: Option<std::net::TcpListener>,
    parts: Parts,
) -> anyhow::Result<Running> {
    let local = UnixListener::from_std(local).context("adopting the API socket")?;
    let token = parts.shutdown.clone();
    let mut tasks: Vec<Running> = vec![Box::pin(serve_local(local, parts.clone(), token.clone()))];
    if let Some(listener) = tcp {
        let plan = parts.plan.load();
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
            },
            parts,
            token,
        )));
    }
    Ok(crate::service::all(tasks))
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
    parts: Parts,
    token: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    let access = Access { token: None };
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
        tokio::spawn(connection(
            TokioIo::new(stream),
            parts.clone(),
            access.clone(),
        ));
    }
}

async fn serve_tcp(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    access: Access,
    parts: Parts,
    token: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
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
        let (acceptor, parts, access) = (acceptor.clone(), parts.clone(), access.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                Ok(Ok(tls)) => connection(TokioIo::new(tls), parts, access).await,
                Ok(Err(e)) => tracing::debug!("api TLS from {peer}: {e}"),
                Err(_) => tracing::debug!("api TLS from {peer}: handshake timed out"),
            }
        });
    }
}

async fn connection<I>(io: TokioIo<I>, parts: Parts, access: Access)
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

async fn handle(req: Request<Incoming>, parts: &Parts, access: &Access) -> Response<Body> {
    match access.admit(&req) {
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
            let mut r = text(StatusCode::UNAUTHORIZED, "a bearer token is required\n");
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"okd-appliance\""),
            );
            return r;
        }
    }
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (req.method(), segments.as_slice()) {
        (&Method::GET, [""]) => {
            let status = parts.status();
            full(
                StatusCode::OK,
                "text/html; charset=utf-8",
                super::status_page::render(&status, SystemTime::now()),
            )
        }
        (&Method::GET, ["api", "v1", "status"]) => match serde_json::to_vec(&parts.status()) {
            Ok(json) => full(StatusCode::OK, "application/json", json),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        },
        (&Method::GET, ["api", "v1", "events"]) => events(parts),
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
        (
            &Method::POST,
            [
                "api",
                "v1",
                "nodes",
                node,
                action @ ("drain" | "undrain" | "reinstall"),
            ],
        ) => {
            let outcome = match *action {
                "reinstall" => parts.reinstall(node).await.map(|r| r.to_string()),
                "drain" => parts.drain(node).map(|d| d.to_string()),
                _ => parts.undrain(node).map(|u| u.to_string()),
            };
            match outcome {
                Ok(done) => text(StatusCode::OK, format!("{done}\n")),
                Err(e) => text(
                    StatusCode::from_u16(e.http_status())
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    format!("{e}\n"),
                ),
            }
        }
        (_, ["api", "v1", "nodes", _, _]) | (_, ["api", "v1", "status" | "events"]) => {
            text(StatusCode::METHOD_NOT_ALLOWED, "wrong method\n")
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
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

/// The journal as server-sent events: the recent history, then each new event (a keep-alive
/// comment every 15 s keeps proxies from closing an idle stream); ends with the appliance.
fn events(parts: &Parts) -> Response<Body> {
    use tokio::sync::broadcast::error::RecvError;
    let live = parts.journal.subscribe();
    let history: std::collections::VecDeque<String> = parts
        .journal
        .recent()
        .iter()
        .map(|e| format!("data: {}\n\n", event_json(e)))
        .collect();
    let shutdown = parts.shutdown.clone();
    let following = Following::new(&parts.metrics.api_event_streams);
    let stream = futures_util::stream::unfold(
        (history, live, shutdown, following),
        |(mut history, mut live, shutdown, following)| async move {
            let chunk = match history.pop_front() {
                Some(frame) => frame,
                None => loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return None,
                        () = tokio::time::sleep(Duration::from_secs(15)) => {
                            break ": keep-alive\n\n".to_owned();
                        }
                        r = live.recv() => match r {
                            Ok(e) => break format!("data: {}\n\n", event_json(&e)),
                            Err(RecvError::Lagged(_)) => continue,
                            Err(RecvError::Closed) => return None,
                        },
                    }
                },
            };
            Some((
                Ok::<_, Infallible>(Frame::data(Bytes::from(chunk))),
                (history, live, shutdown, following),
            ))
        },
    );
    let mut r = Response::new(StreamBody::new(stream).boxed());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
