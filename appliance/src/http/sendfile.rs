//! Zero-copy file bodies: file ranges that reach the socket through sendfile(2) although hyper
//! writes the response.
//!
//! hyper writes byte slices and nothing else. A [`FileBody`] therefore yields frames whose bytes
//! are a placeholder (zeroed memory that is never read) and queues the file range each frame
//! stands for in the connection's [`Segments`]. The connection's socket, [`SendfileStream`],
//! recognises placeholder slices by their address and sends the next bytes of the queued range
//! with sendfile(2) in their place. Everything else (heads, generated bodies) is written as usual.
//!
//! This is exact because of two properties of hyper's HTTP/1 writer with `writev(true)`:
//! body buffers are queued as given, never copied into another buffer, and every queued byte is
//! written once, in order. The stream still checks that each slice it is handed starts where
//! its frame's placeholder range began (frames start at different offsets, so a skipped or
//! reordered frame shows) and is what is left of that frame, and fails the connection rather
//! than send anything else; the end-to-end tests compare checksums of every download.
//!
//! Like nginx without thread pools, the file read happens in the sendfile call on the runtime
//! thread: artifacts live on a local disk and are usually in the page cache. A file is looked
//! up, opened and stat'ed there too: on tokio's blocking pool each of those calls was a
//! hand-off that cost more than the call, and small files were answered at 0.56 times
//! nginx's rate instead of about 1.3 times (docs/performance.md).
//!
//! Only bodies over `files::SMALL_BODY` (16 KiB: artifacts, iPXE binaries, role ignition)
//! come here. Smaller ones (scripts, per-node configs, small files) are read with one `pread`
//! and go out with the response head in one `writev`, as nginx serves small files at its best
//! (`sendfile off`): with sendfile each response was two writes, so two packets
//! (docs/performance.md, `## HTTP boot server: small files`). Head and body are still two
//! writes for a large file, so connections run with `TCP_NODELAY`: with Nagle's algorithm a
//! body smaller than a segment waited for the client's delayed ACK of the head (about 40 ms a
//! response). Why not hyper's own streaming: it reads each chunk into memory on tokio's
//! blocking pool and writes it again, which `bench/http.sh` measured at 0.55 to 0.70 times a
//! sendfile server.
//!
//! hyper is pinned to an exact version in appliance/Cargo.toml, with what to re-read before
//! moving it, since the two properties above are not documented. `appliance/tests/http_bytes.rs`
//! serves files of many sizes around page, buffer and frame boundaries through `serve`, whole,
//! in ranges, with HEAD and conditional requests, pipelined, in parallel and to a slow reader,
//! and compares every byte. A file that shrinks while it is sent ends the connection short (no
//! SIGBUS, as mmap would risk).

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::AsFd as _;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::idle::Watched;

/// Bytes one frame stands for. The kernel sends what the socket buffer takes per call, so this
/// only sets how often the body is polled; the placeholder is never touched, so it costs address
/// space, not memory.
const FRAME: usize = 8 * 1024 * 1024;

/// Frames start at different places in the placeholder, one byte apart, cycling through this
/// many: a frame that hyper skipped or delivered out of order would present a slice at the wrong
/// place, which the stream detects, instead of passing for the next range.
const STARTS: usize = 4096;

static PLACEHOLDER: LazyLock<&'static [u8]> = LazyLock::new(|| vec![0u8; FRAME + STARTS].leak());

/// The file ranges a connection's body frames stand for, oldest first. Only a connection served
/// through a [`SendfileStream`] over these segments, by hyper with `writev(true)`, may carry the
/// bodies made by [`Segments::body`]: anywhere else their placeholder bytes would be sent.
#[derive(Debug, Clone, Default)]
pub struct Segments(Arc<Mutex<Queue>>);

#[derive(Debug, Default)]
struct Queue {
    ranges: VecDeque<Segment>,
    /// Frames queued so far on this connection: picks each frame's start.
    queued: usize,
}

#[derive(Debug)]
struct Segment {
    file: Arc<File>,
    offset: u64,
    len: usize,
    /// Where the frame's slice begins in the placeholder.
    start: usize,
    sent: usize,
}

impl Segments {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `len` bytes of `file` from `offset`, as a body for this connection.
    pub fn body(&self, file: File, offset: u64, len: u64) -> FileBody {
        self.shared_body(Arc::new(file), offset, len)
    }

    /// Like [`Segments::body`] for a file that several bodies (or pieces of one) share.
    pub fn shared_body(&self, file: Arc<File>, offset: u64, len: u64) -> FileBody {
        FileBody {
            file,
            offset,
            remaining: len,
            segments: self.clone(),
        }
    }
}

/// `len` bytes of `file` from `offset`, sent by the connection's [`SendfileStream`].
#[derive(Debug)]
pub struct FileBody {
    file: Arc<File>,
    offset: u64,
    remaining: u64,
    segments: Segments,
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let len = usize::try_from(self.remaining).map_or(FRAME, |r| r.min(FRAME));
        let start = {
            let mut queue = self.segments.lock();
            let start = queue.queued % STARTS;
            queue.queued += 1;
            queue.ranges.push_back(Segment {
                file: Arc::clone(&self.file),
                offset: self.offset,
                len,
                start,
                sent: 0,
            });
            start
        };
        self.offset += len as u64;
        self.remaining -= len as u64;
        let placeholder: &'static [u8] = &PLACEHOLDER[start..start + len];
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(placeholder)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// Where `slice` starts inside the placeholder, if it is a piece of it.
fn placeholder_offset(slice: &[u8]) -> Option<usize> {
    let base = PLACEHOLDER.as_ptr() as usize;
    let at = slice.as_ptr() as usize;
    (!slice.is_empty() && at >= base && at + slice.len() <= base + PLACEHOLDER.len())
        .then(|| at - base)
}

fn out_of_step(what: &str) -> io::Error {
    io::Error::other(format!("sendfile bookkeeping out of step: {what}"))
}

/// A connection's socket as hyper sees it: placeholder bytes become sendfile(2) calls.
#[derive(Debug)]
pub struct SendfileStream {
    inner: Watched<TcpStream>,
    segments: Segments,
    /// Read from the socket already (by `fastpath`): what a read returns first.
    ahead: Bytes,
}

impl SendfileStream {
    pub fn new(inner: Watched<TcpStream>, segments: Segments) -> Self {
        SendfileStream {
            inner,
            segments,
            ahead: Bytes::new(),
        }
    }

    /// Reads return `ahead` before anything more from the socket.
    pub fn read_ahead(mut self, ahead: Bytes) -> Self {
        self.ahead = ahead;
        self
    }

    /// Sends the file bytes `slice` (a piece of the placeholder) stands for.
    fn poll_sendfile(&self, cx: &mut Context<'_>, slice: &[u8]) -> Poll<io::Result<usize>> {
        let at = placeholder_offset(slice).ok_or_else(|| out_of_step("not a placeholder"))?;
        let mut queue = self.segments.lock();
        let seg = queue
            .ranges
            .front_mut()
            .ok_or_else(|| out_of_step("no file range queued"))?;
        // hyper hands over what is left of the frame's bytes, whole, where the frame began.
        if at != seg.start + seg.sent || slice.len() != seg.len - seg.sent {
            return Poll::Ready(Err(out_of_step("unexpected placeholder range")));
        }
        let socket = self.inner.get_ref();
        loop {
            ready!(socket.poll_write_ready(cx))?;
            let mut offset = i64::try_from(seg.offset + seg.sent as u64)
                .map_err(|_| io::Error::other("file offset out of range"))?;
            let sent = socket.try_io(Interest::WRITABLE, || {
                nix::sys::sendfile::sendfile64(
                    socket,
                    seg.file.as_fd(),
                    Some(&mut offset),
                    slice.len(),
                )
                .map_err(io::Error::from)
            });
            match sent {
                Ok(0) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file shrank while it was being sent",
                    )));
                }
                Ok(n) => {
                    seg.sent += n;
                    if seg.sent == seg.len {
                        queue.ranges.pop_front();
                    }
                    self.inner.progress().touch();
                    return Poll::Ready(Ok(n));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => {
                    // The head is out already: the client sees a short body, the log says why
                    // (a file system without sendfile support would fail every download here).
                    // A client that went away (reset, closed) is its own business: debug.
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset
                            | io::ErrorKind::BrokenPipe
                            | io::ErrorKind::ConnectionAborted
                    ) {
                        tracing::debug!("http: the client left during a file body: {e}");
                    } else {
                        tracing::error!("http: sendfile of a file body failed: {e}");
                    }
                    return Poll::Ready(Err(e));
                }
            }
        }
    }
}

impl AsyncRead for SendfileStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.ahead.is_empty() {
            let n = self.ahead.len().min(buf.remaining());
            buf.put_slice(&self.ahead.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for SendfileStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if placeholder_offset(data).is_some() {
            self.poll_sendfile(cx, data)
        } else {
            Pin::new(&mut self.inner).poll_write(cx, data)
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // Plain slices up to the first placeholder go out in one writev; the caller comes back
        // for the rest, and a placeholder at the front becomes one sendfile call.
        match bufs.iter().position(|b| placeholder_offset(b).is_some()) {
            None => Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
            Some(0) => self.poll_sendfile(cx, &bufs[0]),
            Some(first) => Pin::new(&mut self.inner).poll_write_vectored(cx, &bufs[..first]),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use http_body_util::BodyExt as _;
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper::{Request, Response};
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;

    type TestBody = http_body_util::combinators::BoxBody<Bytes, io::Error>;

    /// Serves one connection: each request's path is `/<offset>/<len>` of `path`, or `/text` for
    /// an in-memory body, through a [`SendfileStream`].
    async fn serve_one(listener: TcpListener, path: std::path::PathBuf) {
        let (stream, _) = listener.accept().await.unwrap();
        let segments = Segments::default();
        let (watched, _) = Watched::new(stream);
        let io = SendfileStream::new(watched, segments.clone());
        let service = service_fn(move |req: Request<hyper::body::Incoming>| {
            let (segments, path) = (segments.clone(), path.clone());
            async move {
                let parts: Vec<&str> = req.uri().path().split('/').collect();
                let body: TestBody = if parts[1] == "text" {
                    http_body_util::Full::new(Bytes::from_static(b"plain bytes"))
                        .map_err(|never| match never {})
                        .boxed()
                } else {
                    let (offset, len) = (parts[1].parse().unwrap(), parts[2].parse().unwrap());
                    let file = File::open(&path).unwrap();
                    segments.body(file, offset, len).boxed()
                };
                Ok::<_, std::convert::Infallible>(Response::new(body))
            }
        });
        let _ = http1::Builder::new()
            .writev(true)
            .serve_connection(TokioIo::new(io), service)
            .await;
    }

    /// Reads one response off `stream`: (head, body), the body as long as Content-Length says.
    async fn response(stream: &mut TcpStream, pending: &mut Vec<u8>) -> (String, Vec<u8>) {
        loop {
            if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8(pending[..end].to_vec()).unwrap();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                while pending.len() < end + 4 + len {
                    let mut buf = vec![0u8; 1 << 20];
                    let n = stream.read(&mut buf).await.unwrap();
                    assert!(n > 0, "connection closed inside a body");
                    pending.extend_from_slice(&buf[..n]);
                }
                let body = pending[end + 4..end + 4 + len].to_vec();
                pending.drain(..end + 4 + len);
                return (head, body);
            }
            let mut buf = vec![0u8; 65536];
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "connection closed before a head");
            pending.extend_from_slice(&buf[..n]);
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i % 251) as u8 ^ (i >> 16) as u8)
            .collect()
    }

    /// `data` in a temporary file, a server for it, and a client connected to that server.
    async fn connected(
        data: &[u8],
    ) -> (
        tempfile::NamedTempFile,
        TcpStream,
        tokio::task::JoinHandle<()>,
    ) {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(data).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_one(listener, tmp.path().to_path_buf()));
        let client = TcpStream::connect(addr).await.unwrap();
        (tmp, client, server)
    }

    #[tokio::test]
    async fn file_ranges_and_plain_bodies_share_a_keep_alive_connection() {
        // Larger than a frame, so one body is several segments.
        let data = pattern(FRAME * 2 + 12345);
        let (_tmp, mut client, server) = connected(&data).await;
        // Pipelined: hyper answers in order, so bodies and heads interleave on the socket.
        let requests = [
            format!("/0/{}", data.len()),
            "/text".to_string(),
            "/7/1".to_string(),
            format!("/{}/{}", FRAME - 3, FRAME + 10),
        ];
        for r in &requests {
            let req = format!("GET {r} HTTP/1.1\r\nhost: t\r\n\r\n");
            client.write_all(req.as_bytes()).await.unwrap();
        }
        let mut pending = Vec::new();
        let (head, body) = response(&mut client, &mut pending).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(body == data, "whole file differs");
        let (_, body) = response(&mut client, &mut pending).await;
        assert_eq!(body, b"plain bytes");
        let (_, body) = response(&mut client, &mut pending).await;
        assert_eq!(body, &data[7..8]);
        let (_, body) = response(&mut client, &mut pending).await;
        assert!(
            body == data[FRAME - 3..FRAME * 2 + 7],
            "range across frames differs"
        );
        drop(client);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_file_that_shrinks_ends_the_connection_short() {
        let data = pattern(4 * 1024 * 1024);
        let (_tmp, mut client, server) = connected(&data).await;
        // The body promises more than the file holds: the connection must close after the
        // bytes that exist, never pad with anything.
        let req = format!("GET /0/{} HTTP/1.1\r\nhost: t\r\n\r\n", data.len() + 100);
        client.write_all(req.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(
            got[end..] == data[..],
            "sent something other than the file's bytes"
        );
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_frame_presented_out_of_order_fails_instead_of_sending_the_wrong_range() {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&pattern(100)).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let segments = Segments::default();
        let (watched, _) = Watched::new(server);
        let mut stream = SendfileStream::new(watched, segments.clone());
        let mut first = segments.body(File::open(tmp.path()).unwrap(), 0, 10);
        let mut second = segments.body(File::open(tmp.path()).unwrap(), 50, 10);
        let frame = |body: &mut FileBody| {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            match Pin::new(body).poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(f))) => f.into_data().unwrap(),
                other => panic!("{other:?}"),
            }
        };
        let (a, b) = (frame(&mut first), frame(&mut second));
        // The second frame's bytes while the first range is still queued: refused.
        let err = stream.write(&b).await.unwrap_err();
        assert!(err.to_string().contains("out of step"), "{err}");
        // Part of a frame that is not what is left of it: refused too.
        let err = stream.write(&a[..5]).await.unwrap_err();
        assert!(err.to_string().contains("out of step"), "{err}");
        // In order, both ranges go out.
        assert_eq!(stream.write(&a).await.unwrap(), 10);
        assert_eq!(stream.write(&b).await.unwrap(), 10);
        drop(stream);
        let mut got = Vec::new();
        let mut client = client;
        client.read_to_end(&mut got).await.unwrap();
        let data = pattern(100);
        assert_eq!(got[..10], data[..10]);
        assert_eq!(got[10..], data[50..60]);
    }

    #[test]
    fn placeholder_slices_are_told_from_other_bytes() {
        assert_eq!(placeholder_offset(&PLACEHOLDER[..10]), Some(0));
        assert_eq!(placeholder_offset(&PLACEHOLDER[5..10]), Some(5));
        assert_eq!(
            placeholder_offset(&PLACEHOLDER[FRAME - 1..]),
            Some(FRAME - 1)
        );
        assert_eq!(placeholder_offset(&PLACEHOLDER[3..3]), None);
        assert_eq!(placeholder_offset(&[0u8; 16]), None);
    }
}
