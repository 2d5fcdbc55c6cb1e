//! Which cluster a connection to the host's shared frontend is for: the name in its first
//! bytes (a TLS ClientHello's server name on 6443, 22623 and 443, an HTTP request's `Host` on
//! 80), matched exactly against each routed cluster's names.
//!
//! Architecture invariant: pure. The parsers see a bounded prefix of what the client sent and
//! say whether it names a server, names none, is not what the port speaks, or needs more; the
//! table never guesses: a name no cluster has goes to the default cluster or nowhere.

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;

use super::SharedPools;
use crate::plan::FrontendKind;

/// The most of a ClientHello read before giving up: one full TLS record and its header.
pub const TLS_PEEK_MAX: usize = 16 * 1024 + 5;
/// The most of an HTTP request head read before giving up.
pub const HTTP_PEEK_MAX: usize = 8 * 1024;

/// What a connection's first bytes say so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeked {
    /// Not enough yet.
    More,
    /// The name it asks for: lowercase, without a trailing dot or a port.
    Name(String),
    /// A complete ClientHello without a server name, or a request head without `Host`.
    NoName,
    /// Not a ClientHello (not TLS), or not an HTTP request.
    Unparsable,
}

/// The server name of the ClientHello that `bytes` begin with (split across records and
/// segments as it may be: `More` until it is complete).
pub fn tls_server_name(bytes: &[u8]) -> Peeked {
    TlsHello::default().feed(bytes)
}

/// The `Host` of the HTTP/1 request head that `bytes` begin with, without its port.
pub fn http_host(bytes: &[u8]) -> Peeked {
    HttpHead::default().feed(bytes)
}

/// A ClientHello read as it arrives: each byte is parsed once.
#[derive(Default)]
pub struct TlsHello {
    acceptor: rustls::server::Acceptor,
}

impl std::fmt::Debug for TlsHello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsHello")
    }
}

impl TlsHello {
    /// What the bytes so far say, given the ones that arrived since the last call.
    pub fn feed(&mut self, new: &[u8]) -> Peeked {
        let mut rest = new;
        loop {
            match self.acceptor.accept() {
                Ok(None) => {}
                Ok(Some(accepted)) => {
                    return accepted
                        .client_hello()
                        .server_name()
                        .map_or(Peeked::NoName, |n| Peeked::Name(normal(n)));
                }
                Err(_) => return Peeked::Unparsable,
            }
            if rest.is_empty() {
                return Peeked::More;
            }
            match self.acceptor.read_tls(&mut rest) {
                Ok(0) => return Peeked::More,
                Ok(_) => {}
                Err(_) => return Peeked::Unparsable,
            }
        }
    }
}

/// A request head read as it arrives: parsed again only when a line ends, so a head sent a
/// byte at a time costs one parse per line, and a head has at most 64 header lines.
#[derive(Debug, Default)]
pub struct HttpHead {
    parsed_once: bool,
}

impl HttpHead {
    /// What the head so far, `all` (the bytes since the last call at its end, `new` of them),
    /// says.
    pub fn feed_tail(&mut self, all: &[u8], new: usize) -> Peeked {
        let fresh = all.get(all.len().saturating_sub(new)..).unwrap_or_default();
        if self.parsed_once && !fresh.contains(&b'\n') {
            return Peeked::More;
        }
        self.parsed_once = true;
        head_host(all)
    }

    fn feed(&mut self, all: &[u8]) -> Peeked {
        self.feed_tail(all, all.len())
    }
}

fn head_host(bytes: &[u8]) -> Peeked {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(bytes) {
        Ok(httparse::Status::Partial) => Peeked::More,
        Err(_) => Peeked::Unparsable,
        Ok(httparse::Status::Complete(_)) => {
            let host = request
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("host"))
                .and_then(|h| std::str::from_utf8(h.value).ok())
                .map(str::trim);
            match host {
                None | Some("") => Peeked::NoName,
                Some(h) => Peeked::Name(normal(without_port(h))),
            }
        }
    }
}

/// Whether `bytes`, the first a client sent to `kind`'s port, hold its first message whole:
/// on 6443, 22623 and 443 a TLS handshake record holding its first handshake message (the
/// ClientHello) whole, on 80 an HTTP/1 request head and all of the body its `Content-Length`
/// gives. Anything else is not: a message in pieces, a chunked body, bytes that are not what
/// the port speaks. A client that sent a whole message waits for the answer; one that did not
/// may be waiting to send the rest (the load balancer's delayed ACKs, `proxy::tune`).
pub fn first_message_whole(kind: FrontendKind, bytes: &[u8]) -> bool {
    match kind {
        FrontendKind::IngressHttp => http_request_whole(bytes),
        FrontendKind::Api | FrontendKind::MachineConfig | FrontendKind::IngressHttps => {
            tls_handshake_whole(bytes)
        }
    }
}

/// A handshake record (type 22, RFC 8446 section 5.1: type, version, 2-byte length) whose
/// first handshake message (type, 3-byte length, section 4) ends within it.
fn tls_handshake_whole(bytes: &[u8]) -> bool {
    let [22, _, _, r0, r1, rest @ ..] = bytes else {
        return false;
    };
    let Some(record) = rest.get(..usize::from(u16::from_be_bytes([*r0, *r1]))) else {
        return false;
    };
    let [_, m0, m1, m2, message @ ..] = record else {
        return false;
    };
    let length = u32::from_be_bytes([0, *m0, *m1, *m2]);
    usize::try_from(length).is_ok_and(|length| message.len() >= length)
}

/// A request head, then at least the body its `Content-Length` gives (none without one); a
/// `Transfer-Encoding` body's end is not looked for.
fn http_request_whole(bytes: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(head)) = request.parse(bytes) else {
        return false;
    };
    let mut body = 0;
    for header in request.headers.iter() {
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return false;
        }
        if header.name.eq_ignore_ascii_case("content-length") {
            let length = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
            match length {
                Some(length) => body = length,
                None => return false,
            }
        }
    }
    bytes.len().saturating_sub(head) >= body
}

/// `host[:port]` or `[v6]:port` without the port.
fn without_port(host: &str) -> &str {
    if let Some(v6) = host.strip_prefix('[') {
        return v6.split_once(']').map_or(host, |(ip, _)| ip);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// A name as the table keys it: lowercase, one trailing dot dropped.
fn normal(name: &str) -> String {
    let name = name.strip_suffix('.').unwrap_or(name);
    name.to_ascii_lowercase()
}

/// A routed cluster: its pools, and the token its connections end with (the appliance's stop,
/// or its removal's drain timeout).
#[derive(Debug, Clone)]
pub struct Route {
    pub id: std::sync::Arc<str>,
    pub pools: SharedPools,
    pub token: CancellationToken,
}

/// Why a connection went to no cluster (the `reason` of `okd_appliance_lb_unrouted_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrouted {
    /// It named no server (no SNI, no `Host`).
    NoName,
    /// It named a server no cluster has.
    UnknownName,
    /// Not a ClientHello, or not an HTTP request; or one longer than the peek allows.
    Unparsable,
    /// Nothing routable within the time allowed.
    Timeout,
    /// Too many connections were still naming their server (the router's pending cap).
    Busy,
}

impl Unrouted {
    pub fn reason(self) -> &'static str {
        match self {
            Unrouted::NoName => "no-name",
            Unrouted::UnknownName => "unknown-name",
            Unrouted::Unparsable => "unparsable",
            Unrouted::Timeout => "timeout",
            Unrouted::Busy => "busy",
        }
    }
}

/// The routed clusters by domain, and the default one.
#[derive(Debug, Default)]
pub struct Routes {
    by_domain: HashMap<String, usize>,
    clusters: Vec<Route>,
    default: Option<usize>,
}

impl Routes {
    /// `clusters` by their domain (`<name>.<base_domain>`; domains never nest on a host), and
    /// `default` among them (absent: no default).
    pub fn new(clusters: Vec<(String, Route)>, default: Option<&str>) -> Routes {
        let mut routes = Routes::default();
        for (domain, route) in clusters {
            routes
                .by_domain
                .insert(normal(&domain), routes.clusters.len());
            routes.clusters.push(route);
        }
        routes.default = default.and_then(|id| routes.clusters.iter().position(|r| &*r.id == id));
        routes
    }

    /// The cluster a connection to `kind`'s port that asked for `peeked` is for.
    pub fn pick(&self, kind: FrontendKind, peeked: &Peeked) -> Result<&Route, Unrouted> {
        let found = match peeked {
            Peeked::Name(name) => self.owner(kind, name).ok_or(Unrouted::UnknownName),
            Peeked::NoName => Err(Unrouted::NoName),
            Peeked::Unparsable => Err(Unrouted::Unparsable),
            // The peek ran out of time.
            Peeked::More => Err(Unrouted::Timeout),
        };
        let i = match (found, self.default) {
            (Ok(i), _) => i,
            (Err(_), Some(d)) => d,
            (Err(why), None) => return Err(why),
        };
        self.clusters.get(i).ok_or(Unrouted::UnknownName)
    }

    /// The cluster whose name `name` is on `kind`'s port: `api.<domain>` or
    /// `api-int.<domain>` for the API and the machine config server, a name under
    /// `apps.<domain>` for ingress.
    fn owner(&self, kind: FrontendKind, name: &str) -> Option<usize> {
        match kind {
            FrontendKind::Api | FrontendKind::MachineConfig => {
                let domain = name
                    .strip_prefix("api.")
                    .or_else(|| name.strip_prefix("api-int."))?;
                self.by_domain.get(domain).copied()
            }
            FrontendKind::IngressHttps | FrontendKind::IngressHttp => {
                // The first ".apps." whose rest is a cluster's domain, with a label before it.
                name.match_indices(".apps.")
                    .filter(|(at, _)| *at > 0)
                    .find_map(|(at, _)| self.by_domain.get(&name[at + ".apps.".len()..]))
                    .copied()
            }
        }
    }
}

#[cfg(test)]
mod tests;
