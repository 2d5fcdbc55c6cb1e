//! The HTTPS client the providers share: hyper's pooled client over hyper-rustls with the
//! trust the config names, one bounded exchange per request, and transport failures sorted
//! into "TLS refused" and "unreachable".
//!
//! Architecture invariant: every exchange is bounded by the caller's timeout, from connecting
//! to the last byte of the body, and bodies are size-limited.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::ControlError;

/// An answer larger than this is not from a provider API.
const MAX_BODY: usize = 16 * 1024 * 1024;

pub type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

pub fn client(tls: rustls::ClientConfig, connect_timeout: Duration) -> HttpsClient {
    client_with_idle(tls, connect_timeout, Duration::from_secs(30))
}

/// [`client`] whose idle connections are dropped after `idle` (before the server drops them:
/// pveproxy closes an idle keep-alive connection after 5 s).
pub fn client_with_idle(
    tls: rustls::ClientConfig,
    connect_timeout: Duration,
    idle: Duration,
) -> HttpsClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(idle)
        .build(https)
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
    request: Request<Full<Bytes>>,
    timeout: Duration,
    endpoint: &str,
    what: &str,
) -> Result<Answer, ControlError> {
    let work = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| transport(&e, endpoint))?;
        let status = response.status();
        let headers = response.headers().clone();
        let reason = response
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned());
        let body = http_body_util::Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| ControlError::Failed(format!("{what}: reading the answer: {e}")))?
            .to_bytes();
        Ok(Answer {
            status,
            reason,
            headers,
            body,
        })
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(answer) => answer,
        Err(_) => Err(ControlError::Timeout(format!(
            "{what}: no answer from {endpoint} within {}",
            humantime::format_duration(timeout)
        ))),
    }
}

/// A request that got no HTTP answer: TLS refused, connection refused, or lost.
fn transport(e: &hyper_util::client::legacy::Error, endpoint: &str) -> ControlError {
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
