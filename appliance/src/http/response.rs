//! The boot server's plain responses: the body type every route answers with, the small text
//! and empty answers, what a file answer's range decision (`files::decide`) means on the
//! wire, and the file answer itself ([`file()`]). Its own module so that `server` and `iso` both
//! use it without one depending on the other.

use std::io;
use std::path::Path;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::files::{self, Conditions, Decision, FileMeta};
use super::sendfile::Segments;

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

/// `Cache-Control` of a file answer that may be cached (artifacts, iPXE binaries).
pub const CACHEABLE: &str = "public, max-age=3600";
/// `Content-Type` of an artifact.
pub const ARTIFACT_TYPE: &str = "application/octet-stream";

/// Where a file answer's bytes come from.
#[derive(Debug)]
pub enum Source {
    /// An open file, read (up to [`files::SMALL_BODY`]) or sent with sendfile(2) as needed.
    Disk(std::fs::File),
    /// The whole file, already read, and its validators (`opencache`).
    Read(bytes::Bytes, files::Validators),
}

/// `opened` (by `server::open_file` or `files::open_relative`) as a [`file()`] answer's source.
pub fn from_disk(opened: files::Opened) -> io::Result<(Source, FileMeta)> {
    opened.and_then(|(f, m)| {
        Ok((
            Source::Disk(f),
            FileMeta {
                len: m.len(),
                modified: m.modified()?,
            },
        ))
    })
}

/// A file (`opened`; `path` names it in the log), honouring conditional and range requests:
/// up to [`files::SMALL_BODY`] bytes read into memory, larger bodies sent with sendfile(2)
/// (never read into memory).
pub fn file(
    req: &Request<Incoming>,
    opened: io::Result<(Source, FileMeta)>,
    path: &Path,
    content_type: &'static str,
    cacheable: bool,
    segments: &Segments,
) -> Response<Body> {
    let (source, meta) = match opened {
        Ok(x) => x,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return text(StatusCode::NOT_FOUND, "not found\n");
        }
        Err(e) => return file_error(path, &e),
    };
    let validators = match &source {
        Source::Read(_, v) => v.clone(),
        Source::Disk(_) => meta.validators(),
    };
    let decision = files::decide_for(
        &conditions(req.headers()),
        validators.etag.to_str().unwrap_or_default(),
        Some(meta.modified),
        meta.len,
    );
    let (status, start, len) = sending(decision, meta.len);
    let body = if req.method() == Method::HEAD || len == 0 {
        empty()
    } else {
        match source {
            // The whole file, `meta.len` bytes: the decision's range is within it.
            Source::Read(whole, _) => match usize::try_from(start)
                .ok()
                .zip(usize::try_from(start + len).ok())
                .filter(|&(_, end)| end <= whole.len())
            {
                Some((from, to)) => full(whole.slice(from..to)),
                None => return file_error(path, &io::ErrorKind::UnexpectedEof.into()),
            },
            Source::Disk(f) if len <= files::SMALL_BODY => {
                match files::read_range(&f, start, len) {
                    Ok(buf) => full(buf),
                    Err(e) => return file_error(path, &e),
                }
            }
            Source::Disk(f) => segments.body(f, start, len).boxed(),
        }
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    // ETag, Last-Modified, Cache-Control, Accept-Ranges, Content-Type, Content-Length,
    // Content-Range: reserved at once rather than grown.
    h.reserve(7);
    h.insert(header::ETAG, validators.etag);
    h.insert(header::LAST_MODIFIED, validators.last_modified);
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if cacheable { CACHEABLE } else { "no-store" }),
    );
    range_headers(h, decision, meta.len, len, content_type);
    r
}

fn file_error(path: &Path, e: &io::Error) -> Response<Body> {
    tracing::error!("http: {}: {e}", path.display());
    text(StatusCode::INTERNAL_SERVER_ERROR, "can't read the file\n")
}
