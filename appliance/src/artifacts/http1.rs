//! The client side of HTTP/1.1 message framing (RFC 9112), without sockets: the request head,
//! the response head (parsed by httparse), and how the body is delimited (Content-Length,
//! chunked, or the end of the connection).
//!
//! Why not hyper's client: its `client` feature needs `want` 0.3.2, and this build can only use
//! the crates vendored on this machine, which hold `want` 0.3.1. A GET that reads one response
//! per connection is small enough to do here, and every rule has a test.

use anyhow::{Context as _, anyhow, bail};
use hyper::StatusCode;

/// The largest response head accepted.
pub const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 100;
/// The longest chunk-size line (with extensions) or trailer line accepted.
const MAX_LINE: usize = 4096;

/// A GET request head; `Connection: close` because each connection carries one request, which
/// also makes a body without a length end cleanly with the connection.
pub fn request_head(target: &str, host: &str, from: u64) -> String {
    let range = if from > 0 {
        format!("Range: bytes={from}-\r\n")
    } else {
        String::new()
    };
    format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: okd-appliance/{}\r\n\
         Accept-Encoding: identity\r\nConnection: close\r\n{range}\r\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// A response's status line and headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: StatusCode,
    /// Names lowercased; values as sent (non-UTF-8 values are dropped: none the client reads
    /// may contain such bytes).
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The value of the first header `name` (lowercase).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses a response head from the start of `buf`: the head and its length in bytes, or
/// `None` while it is incomplete.
pub fn parse_head(buf: &[u8]) -> anyhow::Result<Option<(Head, usize)>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            bail!("the response head is longer than {MAX_HEAD} bytes")
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => bail!("not an HTTP/1.x response: {e}"),
    };
    let code = response.code.context("a response without a status")?;
    let status = StatusCode::from_u16(code).map_err(|_| anyhow!("status {code} is not valid"))?;
    let headers = response
        .headers
        .iter()
        .filter_map(|h| {
            let value = std::str::from_utf8(h.value).ok()?;
            Some((h.name.to_ascii_lowercase(), value.trim().to_owned()))
        })
        .collect();
    Ok(Some((Head { status, headers }, len)))
}

/// How the body of a response to a GET ends (RFC 9112 section 6.3).
pub fn framing(head: &Head) -> anyhow::Result<Decoder> {
    let s = head.status.as_u16();
    if head.status.is_informational() || s == 204 || s == 304 {
        return Ok(Decoder::Length { left: 0 });
    }
    if let Some(te) = head.get("transfer-encoding") {
        // Only a final `chunked` delimits the body; any other coding runs to the close.
        let last = te.rsplit(',').next().unwrap_or_default().trim();
        return Ok(if last.eq_ignore_ascii_case("chunked") {
            Decoder::Chunked(Chunk::Size)
        } else {
            Decoder::UntilClose
        });
    }
    let mut length = None;
    for value in head.all("content-length") {
        for part in value.split(',') {
            let n: u64 = part
                .trim()
                .parse()
                .map_err(|_| anyhow!("Content-Length `{value}` is not a number"))?;
            if length.is_some_and(|l| l != n) {
                bail!("conflicting Content-Length headers");
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(left) => Decoder::Length { left },
        None => Decoder::UntilClose,
    })
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    Size,
    Data {
        left: u64,
    },
    /// The CRLF after a chunk's data.
    DataEnd,
    Trailers,
}

/// Reads a body out of the bytes that arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoder {
    Length { left: u64 },
    Chunked(Chunk),
    UntilClose,
    Done,
}

/// What to do with the buffered bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Read more from the connection.
    NeedMore,
    /// The first `n` buffered bytes are body.
    Data(usize),
    /// The first `n` buffered bytes are framing to drop.
    Skip(usize),
    /// The body is complete.
    Done,
}

impl Decoder {
    /// The next step for `buf`, the bytes received and not yet consumed. The caller consumes
    /// what `Data` and `Skip` say and calls again.
    pub fn step(&mut self, buf: &[u8]) -> anyhow::Result<Step> {
        match *self {
            Decoder::Done | Decoder::Length { left: 0 } => {
                *self = Decoder::Done;
                Ok(Step::Done)
            }
            Decoder::Length { left } => Ok(match take(left, buf) {
                0 => Step::NeedMore,
                n => {
                    *self = Decoder::Length {
                        left: left - n as u64,
                    };
                    Step::Data(n)
                }
            }),
            Decoder::UntilClose if buf.is_empty() => Ok(Step::NeedMore),
            Decoder::UntilClose => Ok(Step::Data(buf.len())),
            Decoder::Chunked(chunk) => self.chunked(chunk, buf),
        }
    }

    fn chunked(&mut self, chunk: Chunk, buf: &[u8]) -> anyhow::Result<Step> {
        match chunk {
            Chunk::Size => match httparse::parse_chunk_size(buf) {
                Ok(httparse::Status::Complete((used, 0))) => {
                    *self = Decoder::Chunked(Chunk::Trailers);
                    Ok(Step::Skip(used))
                }
                Ok(httparse::Status::Complete((used, left))) => {
                    *self = Decoder::Chunked(Chunk::Data { left });
                    Ok(Step::Skip(used))
                }
                Ok(httparse::Status::Partial) if buf.len() > MAX_LINE => {
                    bail!("a chunk-size line longer than {MAX_LINE} bytes")
                }
                Ok(httparse::Status::Partial) => Ok(Step::NeedMore),
                Err(_) => bail!("a chunked body with an invalid chunk size"),
            },
            Chunk::Data { left } => Ok(match take(left, buf) {
                0 => Step::NeedMore,
                n => {
                    let left = left - n as u64;
                    *self = Decoder::Chunked(if left == 0 {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data { left }
                    });
                    Step::Data(n)
                }
            }),
            Chunk::DataEnd => match buf {
                [b'\r', b'\n', ..] => {
                    *self = Decoder::Chunked(Chunk::Size);
                    Ok(Step::Skip(2))
                }
                [] | [b'\r'] => Ok(Step::NeedMore),
                _ => bail!("a chunk not followed by CRLF"),
            },
            Chunk::Trailers => match buf.windows(2).position(|w| w == b"\r\n") {
                // An empty line ends the trailers and the message.
                Some(0) => {
                    *self = Decoder::Done;
                    Ok(Step::Skip(2))
                }
                Some(end) => Ok(Step::Skip(end + 2)),
                None if buf.len() > MAX_LINE => {
                    bail!("a trailer line longer than {MAX_LINE} bytes")
                }
                None => Ok(Step::NeedMore),
            },
        }
    }

    /// The connection closed: the end of the body only for a body delimited by the close.
    pub fn at_close(&mut self) -> anyhow::Result<()> {
        match *self {
            Decoder::UntilClose | Decoder::Done => {
                *self = Decoder::Done;
                Ok(())
            }
            Decoder::Length { left } => {
                bail!("the connection closed {left} bytes before the end of the body")
            }
            Decoder::Chunked(_) => bail!("the connection closed inside a chunked body"),
        }
    }
}

/// How many of `buf`'s bytes belong to a body part with `left` bytes to go.
fn take(left: u64, buf: &[u8]) -> usize {
    usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        parse_head(text.as_bytes()).unwrap().unwrap().0
    }

    /// Runs `decoder` over `input` delivered in pieces of `piece` bytes, then the close.
    fn decode(mut decoder: Decoder, input: &[u8], piece: usize) -> anyhow::Result<Vec<u8>> {
        let mut buf = Vec::new();
        let mut rest = input;
        let mut out = Vec::new();
        loop {
            match decoder.step(&buf)? {
                Step::Done => return Ok(out),
                Step::Data(n) => {
                    out.extend_from_slice(&buf[..n]);
                    buf.drain(..n);
                }
                Step::Skip(n) => {
                    buf.drain(..n);
                }
                Step::NeedMore if rest.is_empty() => {
                    decoder.at_close()?;
                    return Ok(out);
                }
                Step::NeedMore => {
                    let n = piece.min(rest.len());
                    buf.extend_from_slice(&rest[..n]);
                    rest = &rest[n..];
                }
            }
        }
    }

    #[test]
    fn the_request_asks_for_a_range_only_when_resuming() {
        let r = request_head("/a/k?x=1", "127.0.0.1:8000", 0);
        assert!(
            r.starts_with("GET /a/k?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"),
            "{r}"
        );
        assert!(r.contains("Connection: close\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\n"), "{r}");
        assert!(!r.contains("Range"), "{r}");
        let r = request_head("/k", "h", 1234);
        assert!(r.contains("\r\nRange: bytes=1234-\r\n\r\n"), "{r}");
    }

    #[test]
    fn heads_parse_with_lowercase_names_and_wait_when_incomplete() {
        let text =
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 5-9/10\r\nX: y\r\n\r\nbody";
        let (h, len) = parse_head(text.as_bytes()).unwrap().unwrap();
        assert_eq!(h.status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(h.get("content-range"), Some("bytes 5-9/10"));
        assert_eq!(&text[len..], "body");
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le").unwrap(), None);
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        let long = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(MAX_HEAD));
        assert!(parse_head(long.as_bytes()).is_err());
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let f = |t: &str| framing(&head(t)).unwrap();
        assert_eq!(
            f("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n"),
            Decoder::Length { left: 12 }
        );
        // Transfer-Encoding wins over Content-Length.
        assert_eq!(
            f("HTTP/1.1 200 OK\r\nContent-Length: 12\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Decoder::Chunked(Chunk::Size)
        );
        assert_eq!(
            f("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Decoder::UntilClose
        );
        assert_eq!(f("HTTP/1.0 200 OK\r\n\r\n"), Decoder::UntilClose);
        assert_eq!(
            f("HTTP/1.1 304 Not Modified\r\nContent-Length: 12\r\n\r\n"),
            Decoder::Length { left: 0 }
        );
        assert_eq!(
            f("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n"),
            Decoder::Length { left: 7 }
        );
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        ] {
            assert!(framing(&head(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_length_body_stops_at_its_length_and_a_short_one_is_an_error() {
        for piece in [1, 3, 100] {
            let out = decode(Decoder::Length { left: 5 }, b"hello, and more", piece).unwrap();
            assert_eq!(out, b"hello");
        }
        let e = decode(Decoder::Length { left: 10 }, b"short", 2).unwrap_err();
        assert!(
            e.to_string().contains("closed 5 bytes before the end"),
            "{e}"
        );
    }

    #[test]
    fn a_chunked_body_is_decoded_in_any_pieces() {
        let body = b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\nnext";
        for piece in [1, 2, 5, 1000] {
            let out = decode(Decoder::Chunked(Chunk::Size), body, piece).unwrap();
            assert_eq!(out, b"hello, world", "pieces of {piece}");
        }
    }

    #[test]
    fn broken_chunked_bodies_are_errors() {
        for bad in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"5\r\nhel",
            b"5\r\nhello\r\n",
        ] {
            assert!(
                decode(Decoder::Chunked(Chunk::Size), bad, 3).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = vec![b'1'; MAX_LINE + 1];
        assert!(decode(Decoder::Chunked(Chunk::Size), &long, MAX_LINE + 1).is_err());
    }

    #[test]
    fn a_body_without_length_ends_with_the_connection() {
        let out = decode(Decoder::UntilClose, b"all of it", 4).unwrap();
        assert_eq!(out, b"all of it");
    }
}
