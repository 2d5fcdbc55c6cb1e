//! The boot server's plain responses: the body type every route answers with, the small text
//! and empty answers, and what a file answer's range decision (`files::decide`) means on the
//! wire. Its own module so that `server` and `iso` both use it without one depending on the
//! other.

use std::io;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};

use super::files::{Conditions, Decision};

/// What every response carries: bytes in memory or a file body (`sendfile`).
pub type Body = BoxBody<Bytes, io::Error>;

/// `bytes` as a body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

/// A `text/plain` answer with `status`.
pub fn text(status: StatusCode, body: &str) -> Response<Body> {
    let mut r = Response::new(full(body.to_owned()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The request headers that decide what a file answer sends.
pub fn conditions(headers: &HeaderMap) -> Conditions<'_> {
    let header = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    Conditions {
        if_none_match: header(header::IF_NONE_MATCH),
        if_modified_since: header(header::IF_MODIFIED_SINCE),
        range: header(header::RANGE),
        if_range: header(header::IF_RANGE),
    }
}

/// The status, first byte and length of the body `decision` sends of a `total`-byte file.
pub fn sending(decision: Decision, total: u64) -> (StatusCode, u64, u64) {
    match decision {
        Decision::NotModified => (StatusCode::NOT_MODIFIED, 0, 0),
        Decision::RangeNotSatisfiable => (StatusCode::RANGE_NOT_SATISFIABLE, 0, 0),
        Decision::Full => (StatusCode::OK, 0, total),
        Decision::Partial { start, end } => (StatusCode::PARTIAL_CONTENT, start, end - start + 1),
    }
}

/// The headers `decision` calls for (RFC 9110 14): `Accept-Ranges`; with a body, its type, its
/// length `len` and for a part its `Content-Range`; for a 416, the file's size `total`.
pub fn range_headers(
    h: &mut HeaderMap,
    decision: Decision,
    total: u64,
    len: u64,
    content_type: &'static str,
) {
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let range = match decision {
        Decision::NotModified => return,
        Decision::RangeNotSatisfiable => Some(format!("bytes */{total}")),
        Decision::Full => None,
        Decision::Partial { start, end } => Some(format!("bytes {start}-{end}/{total}")),
    };
    if decision != Decision::RangeNotSatisfiable {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    if let Some(v) = range.and_then(|r| HeaderValue::from_str(&r).ok()) {
        h.insert(header::CONTENT_RANGE, v);
    }
}
