//! The HTTPS client the providers share: reqwest (the HTTP client the project already carries
//! for `artifacts`) with a preconfigured rustls config holding the trust the config names (a CA
//! file, a pinned fingerprint's own verifier), one bounded exchange per request, and transport
//! failures sorted into "TLS refused" and "unreachable".
//!
//! Why reqwest rather than hyper-util's legacy client with hyper-rustls: what the providers need
//! is all there. `ClientBuilder::tls_backend_preconfigured` takes the rustls `ClientConfig` of
//! `control/provider_trust.rs` as it is, so a CA file, a pinned fingerprint's verifier and a
//! BMC's `insecure: true` work unchanged; the pool's idle timeout, HTTP/1.1 only, HTTPS only, no
//! redirect, no proxy from the environment and the reason phrase of an answer (for Proxmox's
//! messages) are settings. One difference is handled: reqwest's connect timeout also covers the
//! TLS handshake, and its expiry is reported as no answer within the request timeout, as the
//! exchange's own bound reports it.
//!
//! Architecture invariant: every exchange is bounded by the caller's timeout, from connecting
//! to the last byte of the body, and bodies are size-limited. No proxy from the environment,
//! no redirect followed by the client (Redfish follows its own, on the same service), HTTPS
//! only, HTTP/1.1.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::{Request, StatusCode};

use super::ControlError;

/// An answer larger than this is not from a provider API.
const MAX_BODY: usize = 16 * 1024 * 1024;

pub type HttpsClient = reqwest::Client;

pub fn client(tls: rustls::ClientConfig, connect_timeout: Duration) -> HttpsClient {
    client_with_idle(tls, connect_timeout, Duration::from_secs(30))
}

/// [`client`] whose idle connections are dropped after `idle` (before the server drops them:
/// pveproxy closes an idle keep-alive connection after 5 s).
pub fn client_with_idle(
    mut tls: rustls::ClientConfig,
    connect_timeout: Duration,
    idle: Duration,
) -> HttpsClient {
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .https_only(true)
        .http1_only()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(idle)
        .build()
        // Only a TLS backend reqwest can't take fails the build: the config above is rustls's
        // own type, which `rustls-no-provider` takes.
        .expect("reqwest takes a preconfigured rustls ClientConfig")
}

/// An HTTP answer: status, the reason phrase when it is not the standard one, and the body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub reason: Option<String>,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

/// Sends `request` and reads the whole answer within `timeout`. `what` names the request in
/// errors (`GET /version`); `endpoint` names the server.
pub async fn exchange(
    client: &HttpsClient,
    request: Request<Bytes>,
    timeout: Duration,
    endpoint: &str,
    what: &str,
) -> Result<Answer, ControlError> {
    let no_answer = || {
        ControlError::Timeout(format!(
            "{what}: no answer from {endpoint} within {}",
            humantime::format_duration(timeout)
        ))
    };
    let work = async {
        let request = reqwest::Request::try_from(request)
            .map_err(|e| ControlError::Failed(format!("can't build {what}: {e}")))?;
        let mut response = client.execute(request).await.map_err(|e| {
            // reqwest's connect timeout covers the TLS handshake too (a listener that
            // never answers it): no answer, as when the whole exchange runs out of time.
            if e.is_timeout() {
                no_answer()
            } else {
                transport(&e, endpoint)
            }
        })?;
        let status = response.status();
        let headers = response.headers().clone();
        let reason = response
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned());
        let mut body = BytesMut::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| ControlError::Failed(format!("{what}: reading the answer: {e}")))?
        {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(ControlError::Failed(format!(
                    "{what}: reading the answer: longer than {MAX_BODY} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer {
            status,
            reason,
            headers,
            body: body.freeze(),
        })
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(answer) => answer,
        Err(_) => Err(no_answer()),
    }
}

/// A request that got no HTTP answer: TLS refused, connection refused, or lost.
fn transport(e: &reqwest::Error, endpoint: &str) -> ControlError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut deepest = e.to_string();
    while let Some(err) = source {
        if let Some(tls) = as_rustls(err) {
            return ControlError::Tls {
                endpoint: endpoint.to_owned(),
                reason: tls.to_string(),
            };
        }
        deepest = err.to_string();
        source = err.source();
    }
    ControlError::Unreachable {
        endpoint: endpoint.to_owned(),
        reason: deepest,
    }
}

/// rustls's error, also when it was wrapped in an `io::Error` (or two: tokio-rustls and the
/// connector each wrap), whose `source()` skips the wrapped error itself.
fn as_rustls<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = err.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    let inner = err.downcast_ref::<std::io::Error>()?.get_ref()?;
    as_rustls(inner)
}
