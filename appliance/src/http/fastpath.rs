//! The fast way for the request a boot storm repeats most: a plain GET or HEAD of a small
//! artifact that the open-file cache holds. The head is parsed with httparse (the parser hyper
//! itself uses) and the answer goes out as one `writev` of head and body, without hyper's
//! per-request machinery (its dispatcher, header maps, body channel and encoder: most of the
//! user time of a small request, docs/performance.md `## HTTP boot server: small files`).
//!
//! It answers exactly what the ordinary way would, by the same rules and from the same cache
//! ([`files::artifact_relative`], [`OpenCache::cached`]); the response carries the same headers.
//! Anything else goes to hyper with the bytes read so far, for the rest of the connection: a
//! request the cache does not hold (its first request enters it), any other path, method or
//! version, a query, a Range or conditional request, a body, `Expect`, `Upgrade`, a
//! `Connection` other than `keep-alive`, a head it can't parse (hyper answers the error) or
//! larger than `MAX_HEAD`. Hyper's limits hold here too: the head must be whole within
//! `HEADER_TIMEOUT` of the wait for it starting (as hyper's `header_read_timeout`), and the
//! connection's idle limit is the caller's. When the server stops, an idle keep-alive
//! connection closes, a new one goes to hyper (which still answers its first request), and an
//! answer given then says `connection: close`.

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::time::SystemTime;

use bytes::{Buf as _, Bytes, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::files;
use super::install_steps::artifact_fetched;
use super::opencache::{Found, OpenCache};
use super::response::{ARTIFACT_TYPE, CACHEABLE};
use super::{HEADER_TIMEOUT, MAX_HEAD};
use crate::idle::Watched;
use crate::journal::Journal;
use crate::plan;

/// Headers read at most; a request with more goes to hyper (which takes 100).
const HEADERS: usize = 32;
/// Only artifacts take the fast way.
const PREFIX: &str = crate::plan::route::ARTIFACTS;

/// What the fast way shares with the ordinary one.
#[derive(Debug)]
pub struct Shared<'a> {
    pub peer: SocketAddr,
    pub plan: &'a plan::Handle,
    pub journal: &'a Journal,
    pub opened_files: &'a OpenCache,
    pub metrics: &'a crate::metrics::Metrics,
}

/// How a connection left the fast way.
#[derive(Debug)]
pub enum Outcome {
    /// It is over: closed by the client, its head too slow, or the server stopping.
    Done,
    /// Hyper serves the rest of it, starting with these bytes, read already.
    Hyper(Bytes),
}

/// A request head the fast way may answer.
#[derive(Debug, PartialEq, Eq)]
struct Plain {
    /// The head's length in the buffer.
    len: usize,
    head: bool,
    /// Where the request target is in the buffer.
    target: std::ops::Range<usize>,
}

#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Plain(Plain),
    Partial,
    /// For hyper: another kind of request, or one it must refuse.
    Other,
}

/// Serves requests from `stream` while each is one the fast way answers.
pub async fn serve(
    stream: &mut Watched<TcpStream>,
    cx: &Shared<'_>,
    token: &CancellationToken,
) -> io::Result<Outcome> {
    let mut buf = BytesMut::with_capacity(2048);
    let mut out = Vec::with_capacity(512);
    let mut served = false;
    loop {
        let deadline = tokio::time::Instant::now() + HEADER_TIMEOUT;
        let plain = loop {
            match parse(&buf) {
                // hyper's limit for a head (a read may take the buffer past it).
                Parsed::Plain(p) if p.len <= MAX_HEAD => break p,
                Parsed::Partial if buf.len() < MAX_HEAD => {}
                _ => return Ok(Outcome::Hyper(buf.freeze())),
            }
            let read = tokio::select! {
                read = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)) => read,
                // Stopping: an idle keep-alive connection closes, as hyper's graceful shutdown
                // closes it; a new one goes to hyper, which still answers its first request.
                () = token.cancelled(), if buf.is_empty() => {
                    return Ok(if served { Outcome::Done } else { Outcome::Hyper(Bytes::new()) });
                }
            };
            match read {
                Err(_) => {
                    tracing::debug!(
                        "http {}: no whole request head in {HEADER_TIMEOUT:?}",
                        cx.peer
                    );
                    return Ok(Outcome::Done);
                }
                Ok(Ok(0)) if buf.is_empty() => return Ok(Outcome::Done),
                Ok(Ok(0)) => return Ok(Outcome::Hyper(buf.freeze())),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
            }
        };
        // Stopping: this answer is the connection's last, and says so (as hyper's does).
        let last = token.is_cancelled();
        let Some(body) = answer(&buf, &plain, cx, last, &mut out) else {
            return Ok(Outcome::Hyper(buf.freeze()));
        };
        let body = if plain.head { &[][..] } else { &body[..] };
        send(stream, &out, body).await?;
        served = true;
        buf.advance(plain.len);
        if last {
            return Ok(Outcome::Done);
        }
    }
}

/// The file's content, with its response head in `out`; `None` when the cache does not hold it.
fn answer(
    buf: &[u8],
    plain: &Plain,
    cx: &Shared<'_>,
    last: bool,
    out: &mut Vec<u8>,
) -> Option<Bytes> {
    let target = std::str::from_utf8(buf.get(plain.target.clone())?).ok()?;
    let rest = target.strip_prefix(PREFIX)?;
    let plan = cx.plan.load();
    let relative = files::artifact_relative(rest)?;
    let Some(Found::Cached {
        meta,
        validators,
        body,
    }) = cx.opened_files.cached(&plan.files.artifacts_dir, &relative)
    else {
        return None;
    };
    if !plain.head {
        artifact_fetched(&plan, cx.journal, cx.peer, target);
    }
    // Counted before it is sent, as the ordinary way counts.
    let sent = if plain.head { 0 } else { body.len() as u64 };
    let cluster = plan.host_cluster.as_ref();
    cx.metrics.http_request(cluster, "artifacts", 200, sent);
    out.clear();
    // The headers `response::file` gives a whole small file, in its order; hyper adds `date`.
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\netag: ");
    out.extend_from_slice(validators.etag.as_bytes());
    out.extend_from_slice(b"\r\nlast-modified: ");
    out.extend_from_slice(validators.last_modified.as_bytes());
    out.extend_from_slice(b"\r\ncache-control: ");
    out.extend_from_slice(CACHEABLE.as_bytes());
    out.extend_from_slice(b"\r\naccept-ranges: bytes\r\ncontent-type: ");
    out.extend_from_slice(ARTIFACT_TYPE.as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: ");
    // Infallible: a Vec takes every byte.
    let _ = std::io::Write::write_fmt(out, format_args!("{}", meta.len));
    if last {
        out.extend_from_slice(b"\r\nconnection: close");
    }
    out.extend_from_slice(b"\r\ndate: ");
    date(out);
    out.extend_from_slice(b"\r\n\r\n");
    Some(body)
}

/// The head and body in as few `writev`s as the socket takes (one, unless it is full).
async fn send(stream: &mut Watched<TcpStream>, head: &[u8], body: &[u8]) -> io::Result<()> {
    let (mut head, mut body) = (head, body);
    while !head.is_empty() || !body.is_empty() {
        let n = stream
            .write_vectored(&[IoSlice::new(head), IoSlice::new(body)])
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_head = n.min(head.len());
        head = head.get(from_head..).unwrap_or_default();
        body = body.get(n - from_head..).unwrap_or_default();
    }
    Ok(())
}

/// Whether `buf` starts with a request head the fast way may answer.
fn parse(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let (Some(method), Some(target), Some(1)) = (req.method, req.path, req.version) else {
        return Parsed::Other;
    };
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Parsed::Other,
    };
    // Only a target hyper takes as a path alone: the bytes http's `PathAndQuery` accepts in a
    // path (http 1.4, uri/path.rs `from_shared`), so no query (`?`), no fragment (`#`, which it
    // would cut off) and nothing it refuses with 400 (`<`, `>`, a backtick, controls).
    let path_byte = |b: u8| {
        matches!(b, 0x21 | 0x24..=0x3B | 0x3D | 0x40..=0x5F | 0x61..=0x7A | 0x7C | 0x7E | 0x7F..)
            || matches!(b, b'"' | b'{' | b'}')
    };
    if !target.starts_with(PREFIX) || !target.bytes().all(path_byte) {
        return Parsed::Other;
    }
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let plain = if name.eq_ignore_ascii_case(b"connection") {
            h.value.eq_ignore_ascii_case(b"keep-alive")
        } else {
            !(name
                .get(..3)
                .is_some_and(|p| p.eq_ignore_ascii_case(b"if-"))
                || [
                    &b"range"[..],
                    b"content-length",
                    b"transfer-encoding",
                    b"expect",
                    b"upgrade",
                ]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n)))
        };
        if !plain {
            return Parsed::Other;
        }
    }
    // httparse hands out slices of `buf` (after any empty lines it skipped).
    let start = target.as_ptr() as usize - buf.as_ptr() as usize;
    Parsed::Plain(Plain {
        len,
        head,
        target: start..start + target.len(),
    })
}

/// The `Date` header's value, formatted once a second.
fn date(out: &mut Vec<u8>) {
    use std::cell::RefCell;
    thread_local! {
        static NOW: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    NOW.with_borrow_mut(|(at, text)| {
        if *at != secs {
            *at = secs;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(req: &str) -> Option<(bool, String)> {
        match parse(req.as_bytes()) {
            Parsed::Plain(p) => {
                assert_eq!(p.len, req.find("\r\n\r\n").unwrap() + 4, "{req}");
                Some((p.head, req[p.target].to_owned()))
            }
            _ => None,
        }
    }

    #[test]
    fn only_plain_gets_and_heads_of_artifacts_are_taken() {
        let get = |extra: &str| format!("GET /artifacts/a.img HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
        assert_eq!(plain(&get("")), Some((false, "/artifacts/a.img".into())));
        assert_eq!(
            plain("HEAD /artifacts/sub/b HTTP/1.1\r\n\r\n"),
            Some((true, "/artifacts/sub/b".into()))
        );
        // An empty line before the request is skipped, as RFC 9112 §2.2 lets a server do.
        assert_eq!(
            plain("\r\nGET /artifacts/a HTTP/1.1\r\n\r\n"),
            Some((false, "/artifacts/a".into()))
        );
        assert!(plain(&get("Connection: Keep-Alive\r\nUser-Agent: iPXE/1.21\r\n")).is_some());
        for other in [
            "Connection: close\r\n",
            "Connection: upgrade\r\n",
            "Range: bytes=0-1\r\n",
            "If-None-Match: \"x\"\r\n",
            "if-modified-since: Thu, 01 Jan 1970 00:00:00 GMT\r\n",
            "If-Range: \"x\"\r\n",
            "Content-Length: 0\r\n",
            "Transfer-Encoding: chunked\r\n",
            "Expect: 100-continue\r\n",
            "Upgrade: h2c\r\n",
        ] {
            assert_eq!(plain(&get(other)), None, "{other}");
        }
        for other in [
            "POST /artifacts/a HTTP/1.1\r\n\r\n",
            "GET /artifacts/a HTTP/1.0\r\n\r\n",
            "GET /artifacts/a?x=1 HTTP/1.1\r\n\r\n",
            "GET /boot/52-54-00-00-00-02.ipxe HTTP/1.1\r\n\r\n",
            "GET http://x/artifacts/a HTTP/1.1\r\n\r\n",
            "GET /artifacts/a HTTP/1.1\r\nBad Header: x\r\n\r\n",
            "get /artifacts/a HTTP/1.1\r\n\r\n",
            "GET /artifacts/a#x HTTP/1.1\r\n\r\n",
            "GET /artifacts/a<b HTTP/1.1\r\n\r\n",
            "GET /artifacts/a`b HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(plain(other), None, "{other:?}");
        }
        assert_eq!(
            parse(b"GET /artifacts/a HTTP/1.1\r\nHost:"),
            Parsed::Partial
        );
        let many = (0..HEADERS + 1).fold(String::new(), |s, i| s + &format!("X-{i}: y\r\n"));
        assert_eq!(parse(get(&many).as_bytes()), Parsed::Other);
    }

    /// Hostile heads, made by mutating valid ones (a deterministic xorshift, no crate): parsing
    /// never panics; what it takes is a whole GET or HEAD head of `/artifacts/...` whose target
    /// lies inside it; and no proper prefix of a head it takes is taken or refused (so a head
    /// split across reads is never answered, nor handed to hyper, before it is whole).
    #[test]
    fn mutated_heads_are_taken_whole_or_not_at_all() {
        let seeds: [&[u8]; 6] = [
            b"GET /artifacts/a.img HTTP/1.1\r\nHost: x\r\n\r\n",
            b"HEAD /artifacts/sub/b HTTP/1.1\r\nConnection: keep-alive\r\n\r\nGET /",
            b"\r\nGET /artifacts/%2e%2e/x HTTP/1.1\r\nUser-Agent: iPXE/1.21\r\n\r\n",
            b"GET /artifacts/a HTTP/1.1\r\nRange: bytes=0-1\r\n\r\n",
            b"POST /artifacts/a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            b"GET /artifacts/a HTTP/1.1\nHost: x\n\n",
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut taken = 0;
        for round in 0..20_000usize {
            let mut buf = seeds[round % seeds.len()].to_vec();
            for _ in 0..(next() % 4) {
                if buf.is_empty() {
                    break;
                }
                let at = (next() as usize) % buf.len();
                match next() % 4 {
                    0 => buf[at] = next() as u8,
                    1 => buf.insert(at, b"\r\n: ?%\0 \t"[(next() % 9) as usize]),
                    2 => drop(buf.remove(at)),
                    _ => buf.truncate(at.max(1)),
                }
            }
            let Parsed::Plain(p) = parse(&buf) else {
                continue;
            };
            taken += 1;
            assert!(p.len <= buf.len() && p.target.end <= p.len, "{buf:?}");
            let target = std::str::from_utf8(&buf[p.target.clone()]).unwrap();
            assert!(
                target.starts_with(PREFIX) && !target.contains('?'),
                "{buf:?}"
            );
            let method = if p.head { &b"HEAD "[..] } else { b"GET " };
            assert!(buf[..p.target.start].ends_with(method), "{buf:?}");
            for cut in 0..p.len {
                assert_eq!(parse(&buf[..cut]), Parsed::Partial, "{cut} of {buf:?}");
            }
        }
        assert!(taken > 1000, "only {taken} mutated heads were taken");
    }
}
