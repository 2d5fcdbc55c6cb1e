//! The boot server's plain responses: the body type every route answers with, and the small
//! text and empty answers. Its own module so that `server` and `iso` both use it without one
//! depending on the other.

use std::io;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::Response;
use hyper::StatusCode;
use hyper::header::{self, HeaderValue};

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
