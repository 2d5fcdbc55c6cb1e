//! The Proxmox VE REST API client: the providers' reqwest client (`control::https`, idle
//! connections dropped after 3 s, before pveproxy's 5 s; a request timeout of at least 5 s,
//! since pveproxy delays a 401 by 3 s), an API token in every request,
//! answers unwrapped from their `{"data": ...}` envelope, errors sorted by what they mean, and
//! tasks (UPIDs) awaited until they stop.
//!
//! Architecture invariant: every request is bounded by the request timeout and every task wait
//! by its own limit; the token's secret lives in one header marked sensitive and nowhere else.

use std::time::Duration;

use bytes::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, StatusCode};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::answers::{ErrorBody, TaskStatus};
use super::spell;
use crate::control::https::{self, HttpsClient};
use crate::control::{ControlError, provider_trust};
use crate::plan::machines::Proxmox;
use crate::secrets::Secret;

/// Characters a path segment keeps as they are: RFC 3986 unreserved, and `:`, `@` and `!`,
/// which UPIDs and token names are full of and a path segment may hold. `/` (in volume IDs)
/// and the rest are encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':')
    .remove(b'@')
    .remove(b'!');

/// pveproxy answers a refused token after 3 s (pve-http-server `src/PVE/APIServer/AnyEvent.pm`:
/// "always delay unauthorized calls by 3 seconds"): a shorter request timeout would report a
/// wrong token as "no answer".
pub const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// pveproxy closes a connection that has been idle for 5 s (pve-http-server
/// `src/PVE/APIServer/AnyEvent.pm`: the handle's `timeout`, 5 unless set; pve-manager's
/// pveproxy keeps it): a pooled connection kept longer may be closed just as a request goes
/// out on it.
const POOL_IDLE: Duration = Duration::from_secs(3);

/// A path segment (node, storage, volume, UPID), percent-encoded.
pub fn seg(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// What went wrong with a call or a task, before the provider decides what it means.
#[derive(Debug)]
pub enum PveError {
    /// Final: connection, TLS, credentials, privilege, timeout.
    Control(ControlError),
    /// Proxmox answered the request with an error.
    Refused { status: u16, message: String },
    /// A bare 403 `Permission check failed`, which names no privilege (an `or` of checks, or
    /// a handler's own `raise_perm_exc()`): the caller knows what the call needs.
    Denied { message: String },
    /// A task ran and failed.
    TaskFailed { upid: String, exitstatus: String },
    /// A task (or the state change it asked for) did not end within its limit; it goes on in
    /// Proxmox. Unlike a request that got no answer, it says something about the task.
    TaskTimeout(String),
}

impl PveError {
    /// Proxmox's own words, for errors that have them.
    pub fn message(&self) -> Option<&str> {
        match self {
            PveError::Refused { message, .. } | PveError::Denied { message } => Some(message),
            PveError::TaskFailed { exitstatus, .. } => Some(exitstatus),
            PveError::Control(_) | PveError::TaskTimeout(_) => None,
        }
    }

    pub fn is_lock_timeout(&self) -> bool {
        self.message().is_some_and(spell::is_lock_timeout)
    }

    pub fn is_already_exists(&self) -> bool {
        self.message().is_some_and(spell::is_already_exists)
    }

    /// An error that says nothing about the request itself: the connection failed or was
    /// closed (pveproxy reloading ends its old workers' connections), no answer came within
    /// the request timeout, or pveproxy could not relay it (595/596 and the other 59x of
    /// AnyEvent::HTTP that pve-http-server `APIServer/AnyEvent.pm` `proxy_request` passes on;
    /// 502-504). Worth asking again while there is time.
    pub fn is_transient(&self) -> bool {
        match self {
            PveError::Control(ControlError::Unreachable { .. } | ControlError::Timeout(_)) => true,
            PveError::Control(ControlError::Failed(m)) => m.contains("reading the answer"),
            PveError::Refused { status, .. } => matches!(status, 502..=504 | 595..=599),
            _ => false,
        }
    }

    /// The error as the operator sees it, `what` saying what was being done.
    pub fn into_control(self, what: &str) -> ControlError {
        match self {
            PveError::Control(e) => e,
            PveError::Refused { status, message } => {
                ControlError::Failed(format!("{what}: proxmox answered {status}: {message}"))
            }
            PveError::Denied { message } => {
                ControlError::Failed(format!("{what}: proxmox answered 403: {message}"))
            }
            PveError::TaskFailed { upid, exitstatus } => {
                ControlError::Failed(format!("{what}: task {upid} failed: {exitstatus}"))
            }
            PveError::TaskTimeout(why) => ControlError::Timeout(why),
        }
    }
}

impl From<ControlError> for PveError {
    fn from(e: ControlError) -> Self {
        PveError::Control(e)
    }
}

/// How a task ended well.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskEnd {
    Ok,
    /// `WARNINGS: n`: done, with warnings in the task log.
    Warnings(String),
}

pub struct Api {
    client: HttpsClient,
    /// `https://host:port/api2/json`.
    base: String,
    endpoint: String,
    token_id: String,
    secret_source: String,
    /// `PVEAPIToken=USER@REALM!ID=SECRET`, marked sensitive.
    auth: HeaderValue,
    request_timeout: Duration,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .field("token_id", &self.token_id)
            .finish_non_exhaustive()
    }
}

impl Api {
    /// Reads the token's secret and builds the TLS client; nothing is sent yet.
    pub fn new(px: &Proxmox, request_timeout: Duration) -> Result<Api, ControlError> {
        let secret = crate::control::credential(&px.token_secret)
            .map_err(|e| ControlError::Credentials(e.to_string()))?;
        Self::with_secret(px, &secret, request_timeout)
    }

    fn with_secret(
        px: &Proxmox,
        secret: &Secret,
        request_timeout: Duration,
    ) -> Result<Api, ControlError> {
        // A file that holds the whole `USER@REALM!ID=SECRET` (as `pveum` prints the pair)
        // works too.
        let value = secret
            .expose()
            .strip_prefix(&format!("{}=", px.token_id))
            .unwrap_or(secret.expose());
        let mut auth = HeaderValue::from_str(&format!("PVEAPIToken={}={value}", px.token_id))
            .map_err(|_| {
                ControlError::Credentials(format!(
                    "the token secret from {} holds characters a header can't carry",
                    px.token_secret
                ))
            })?;
        auth.set_sensitive(true);
        let tls = provider_trust::client_config(&px.trust).map_err(|e| ControlError::Tls {
            endpoint: px.url.clone(),
            reason: e.to_string(),
        })?;
        let request_timeout = request_timeout.max(MIN_REQUEST_TIMEOUT);
        let client = https::client_with_idle(tls, request_timeout, POOL_IDLE);
        Ok(Api {
            client,
            base: format!("{}/api2/json", px.url),
            endpoint: px.url.clone(),
            token_id: px.token_id.clone(),
            secret_source: px.token_secret.to_string(),
            auth,
            request_timeout,
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A bare 403 of a call that needs `privilege` on `path` becomes the privilege error that
    /// names them.
    pub fn needs(&self, e: PveError, path: &str, privilege: &str) -> PveError {
        match e {
            PveError::Denied { .. } => PveError::Control(ControlError::Privilege {
                token: self.token_id.clone(),
                privilege: privilege.to_owned(),
                path: path.to_owned(),
                grant: spell::grant(&self.token_id, path, privilege),
            }),
            other => other,
        }
    }

    pub async fn get(&self, path: &str, params: &[(&str, String)]) -> Result<Value, PveError> {
        self.call(Method::GET, path, params).await
    }

    /// A GET whose `data` is read as `T`; an answer of another shape is an error that names
    /// the call and what was expected (`expected`: "a list", "an object").
    pub async fn get_as<T: DeserializeOwned>(
        &self,
        path: &str,
        params: &[(&str, String)],
        expected: &str,
    ) -> Result<T, PveError> {
        let data = self.get(path, params).await?;
        read(data, expected).map_err(|why| {
            PveError::Control(ControlError::Failed(format!(
                "GET {path}: proxmox at {} {why}",
                self.endpoint
            )))
        })
    }

    pub async fn post(&self, path: &str, params: &[(&str, String)]) -> Result<Value, PveError> {
        self.call(Method::POST, path, params).await
    }

    pub async fn put(&self, path: &str, params: &[(&str, String)]) -> Result<Value, PveError> {
        self.call(Method::PUT, path, params).await
    }

    pub async fn delete(&self, path: &str, params: &[(&str, String)]) -> Result<Value, PveError> {
        self.call(Method::DELETE, path, params).await
    }

    /// One request: GET and DELETE carry their parameters in the query, POST and PUT as a
    /// form body. Returns the `data` member of the answer.
    async fn call(
        &self,
        method: Method,
        path: &str,
        params: &[(&str, String)],
    ) -> Result<Value, PveError> {
        let encoded = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            for (k, v) in params {
                form.append_pair(k, v);
            }
            form.finish()
        };
        let in_query = matches!(method, Method::GET | Method::DELETE);
        let uri = if in_query && !encoded.is_empty() {
            format!("{}{path}?{encoded}", self.base)
        } else {
            format!("{}{path}", self.base)
        };
        let mut request = Request::builder()
            .method(method.clone())
            .uri(&uri)
            .header(AUTHORIZATION, self.auth.clone());
        let body = if in_query {
            Bytes::new()
        } else {
            request = request.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
            Bytes::from(encoded)
        };
        let request = request.body(body).map_err(|e| {
            PveError::Control(ControlError::Failed(format!(
                "can't build the request {method} {path}: {e}"
            )))
        })?;
        let what = format!("{method} {path}");
        let answer = https::exchange(
            &self.client,
            request,
            self.request_timeout,
            &self.endpoint,
            &what,
        )
        .await?;
        let (status, reason, body) = (answer.status, answer.reason, answer.body);
        let json: Option<Value> = serde_json::from_slice(&body).ok();
        if status.is_success() {
            return match json {
                Some(mut v) => Ok(v.get_mut("data").map(Value::take).unwrap_or(Value::Null)),
                None => Err(PveError::Control(ControlError::Failed(format!(
                    "{method} {path}: the answer is not JSON"
                )))),
            };
        }
        let message = error_message(status, reason.as_deref(), json.as_ref());
        Err(match status {
            StatusCode::UNAUTHORIZED => PveError::Control(ControlError::Credentials(format!(
                "proxmox at {} refused the API token {} (401 {}): check token_id and the secret in {}; the token may have expired or been removed",
                self.endpoint,
                self.token_id,
                message.trim(),
                self.secret_source
            ))),
            // pveproxy could not reach the node the call is for (AnyEvent::HTTP's 595:
            // connecting; 596: TLS or sending): a connection problem, not a refusal.
            s if s.as_u16() == 595 || s.as_u16() == 596 => {
                PveError::Control(ControlError::Unreachable {
                    endpoint: self.endpoint.clone(),
                    reason: format!(
                        "{method} {path}: proxmox could not reach the node that serves it ({} {})",
                        s.as_u16(),
                        message.trim()
                    ),
                })
            }
            StatusCode::FORBIDDEN => match spell::missing_privilege(&message) {
                Some((path, privilege)) => PveError::Control(ControlError::Privilege {
                    token: self.token_id.clone(),
                    grant: spell::grant(&self.token_id, &path, &privilege),
                    privilege,
                    path,
                }),
                None if spell::is_bare_permission_denial(&message) => PveError::Denied { message },
                None => PveError::Refused {
                    status: status.as_u16(),
                    message,
                },
            },
            _ => PveError::Refused {
                status: status.as_u16(),
                message,
            },
        })
    }

    /// Waits until the task `upid` stops, polling every `poll`, for at most `limit`.
    pub async fn wait(
        &self,
        upid: &str,
        limit: Duration,
        poll: Duration,
    ) -> Result<TaskEnd, PveError> {
        let node = upid
            .split(':')
            .nth(1)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                PveError::Control(ControlError::Failed(format!(
                    "proxmox returned `{upid}` where a task ID (UPID) was expected"
                )))
            })?;
        let path = format!("/nodes/{}/tasks/{}/status", seg(node), seg(upid));
        let deadline = tokio::time::Instant::now() + limit;
        // The task goes on in Proxmox whatever happens to one poll: a transient error is
        // asked again until the deadline, and named if the wait ends on it.
        loop {
            let (status, failing) = match self
                .get_as::<TaskStatus>(&path, &[], "a task status (an object)")
                .await
            {
                Ok(status) => (status, None),
                Err(e) if e.is_transient() => {
                    let why = e.into_control(&format!("polling task {upid}")).to_string();
                    tracing::info!("{why}; polling again");
                    (TaskStatus::default(), Some(why))
                }
                Err(e) => return Err(e),
            };
            if status.status.as_deref() == Some("stopped") {
                let exit = status.exitstatus.unwrap_or_default();
                return if exit == "OK" {
                    Ok(TaskEnd::Ok)
                } else if exit.starts_with("WARNINGS") {
                    Ok(TaskEnd::Warnings(exit))
                } else {
                    Err(PveError::TaskFailed {
                        upid: upid.to_owned(),
                        exitstatus: if exit.is_empty() {
                            "stopped without an exit status".to_owned()
                        } else {
                            exit
                        },
                    })
                };
            }
            if tokio::time::Instant::now() + poll > deadline {
                let last = failing
                    .map(|why| format!("; the last poll failed: {why}"))
                    .unwrap_or_default();
                return Err(PveError::TaskTimeout(format!(
                    "task {upid} still running after {}: it goes on in proxmox (see its task log, or stop it there){last}",
                    humantime::format_duration(limit)
                )));
            }
            tokio::time::sleep(poll).await;
        }
    }
}

/// `data` read as `T`, or what the answer was instead (`did not answer with a list: ...`).
pub fn read<T: DeserializeOwned>(data: Value, expected: &str) -> Result<T, String> {
    let shown = data.to_string();
    serde_json::from_value(data)
        .map_err(|e| format!("did not answer with {expected}: `{}` ({e})", clip(&shown)))
}

/// At most 200 characters of an answer, for an error message.
fn clip(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_owned(),
    }
}

/// Proxmox puts its message in the body (`message`, and per-parameter `errors`) and in the
/// status line's reason phrase.
fn error_message(status: StatusCode, reason: Option<&str>, json: Option<&Value>) -> String {
    let body = json
        .and_then(|j| ErrorBody::deserialize(j).ok())
        .unwrap_or_default();
    let mut message = body
        .message
        .or_else(|| reason.map(str::to_owned))
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned())
        .trim()
        .to_owned();
    if let Some(errors) = body.errors {
        let details: Vec<String> = errors
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.as_str().unwrap_or("invalid").trim()))
            .collect();
        if !details.is_empty() {
            message.push_str(&format!(" ({})", details.join("; ")));
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_come_from_body_then_reason() {
        let body = serde_json::json!({"data": null, "message": "Parameter verification failed.\n", "errors": {"net0": "invalid format"}});
        assert_eq!(
            error_message(StatusCode::BAD_REQUEST, Some("x"), Some(&body)),
            "Parameter verification failed. (net0: invalid format)"
        );
        assert_eq!(
            error_message(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some("can't lock file"),
                None
            ),
            "can't lock file"
        );
        assert_eq!(
            error_message(StatusCode::NOT_FOUND, None, None),
            "Not Found"
        );
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(
            seg("UPID:pve1:0000A1B2:00C0FFEE:66000000:qmcreate:101:okd@pve!appliance:"),
            "UPID:pve1:0000A1B2:00C0FFEE:66000000:qmcreate:101:okd@pve!appliance:"
        );
        assert_eq!(seg("local:iso/w-0.okd.iso"), "local:iso%2Fw-0.okd.iso");
    }
}
