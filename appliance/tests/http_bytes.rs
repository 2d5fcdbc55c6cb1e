//! Every byte the HTTP boot server sends for a file is that file's byte: `okd-appliance serve`
//! on 127.0.0.1 (the real server, its sendfile path included), artifacts of many sizes around
//! the sendfile frame (8 MiB) and page boundaries, fetched whole, in ranges, with HEAD and
//! conditional requests, pipelined on keep-alive connections, over several connections at once
//! and through a slow reader with a small receive window (so sendfile writes are partial).
//!
//! The file bodies reach the socket through placeholder slices that `http/sendfile.rs` swaps for
//! sendfile(2) calls; that rests on how hyper's HTTP/1 writer queues body buffers (see the pin
//! of hyper in appliance/Cargo.toml). The placeholder is zeroed memory and no test file holds a
//! zero byte, so a single placeholder byte on the wire fails here, as does a range sent twice,
//! skipped or out of place. Runs without root, in the ordinary test suite.

mod common;

use std::io::{BufRead, BufReader, Read, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::Bytes;
use common::Serve;

/// The sendfile frame of `http/sendfile.rs`: one body frame stands for this many file bytes.
const FRAME: usize = 8 * 1024 * 1024;

/// File sizes: empty, tiny, around a page, a socket buffer, a frame and two frames.
const SIZES: [usize; 16] = [
    0,
    1,
    2,
    100,
    4095,
    4096,
    4097,
    65_535,
    65_536,
    65_537,
    (1 << 20) + 3,
    FRAME - 1,
    FRAME,
    FRAME + 1,
    2 * FRAME + 12_345,
    3 * FRAME + 7,
];

/// `len` bytes, never 0 (the placeholder's value), differing per file and per position.
fn content(seed: usize, len: usize) -> Vec<u8> {
    let mut x = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            // xorshift: no period short enough to hide a range sent at the wrong offset.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1 + (x % 255) as u8
        })
        .collect()
}

fn name(i: usize) -> String {
    format!("file-{i}.img")
}

/// The served files and a running `serve` for them.
struct Fixture {
    _dir: tempfile::TempDir,
    _serve: Serve,
    addr: SocketAddr,
    /// Shared buffers: every expected body is a slice of these, never a copy.
    files: Vec<Bytes>,
}

impl Fixture {
    fn start() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let cfg = common::loopback_config(dir.path());
        std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
        let files: Vec<Bytes> = SIZES
            .iter()
            .enumerate()
            .map(|(i, &len)| Bytes::from(content(i, len)))
            .collect();
        for (i, data) in files.iter().enumerate() {
            std::fs::write(dir.path().join("artifacts").join(name(i)), data).unwrap();
        }
        let (serve, addr) = Serve::start_http(&cfg);
        Fixture {
            _dir: dir,
            _serve: serve,
            addr,
            files,
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }
}

/// What a request should get back.
#[derive(Debug, Clone)]
struct Expect {
    request: String,
    status: u16,
    /// The body's bytes: `None` for no body at all (HEAD, 304).
    body: Option<Bytes>,
    /// The Content-Range header, if any.
    content_range: Option<String>,
}

fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n")
}

/// The requests for file `i` (`data`): whole, HEAD, and ranges at the edges, across frame
/// boundaries and in the middle, each with what it must return.
fn requests_for(i: usize, data: &Bytes) -> Vec<Expect> {
    let path = format!("/artifacts/{}", name(i));
    let len = data.len();
    let mut out = vec![
        Expect {
            request: get(&path, ""),
            status: 200,
            body: Some(data.clone()),
            content_range: None,
        },
        Expect {
            request: format!("HEAD {path} HTTP/1.1\r\nHost: t\r\n\r\n"),
            status: 200,
            body: None,
            content_range: None,
        },
    ];
    if len == 0 {
        out.push(Expect {
            request: get(&path, "Range: bytes=0-\r\n"),
            status: 416,
            body: Some(Bytes::new()),
            content_range: Some("bytes */0".to_owned()),
        });
        return out;
    }
    let mut ranges: Vec<(usize, usize)> = vec![(0, 0), (len - 1, len - 1), (len / 3, len - 1)];
    if len > 2 {
        ranges.push((1, len - 2));
    }
    for edge in [4096, 65_536, FRAME, 2 * FRAME] {
        if len > edge + 10 {
            ranges.push((edge - 3, edge + 10));
            ranges.push((edge, edge));
        }
    }
    if len > FRAME + 20 {
        ranges.push((5, FRAME + 20));
    }
    for (start, end) in ranges {
        out.push(Expect {
            request: get(&path, &format!("Range: bytes={start}-{end}\r\n")),
            status: 206,
            body: Some(data.slice(start..=end)),
            content_range: Some(format!("bytes {start}-{end}/{len}")),
        });
    }
    // A suffix range and an open one.
    let suffix = len.min(1000);
    out.push(Expect {
        request: get(&path, &format!("Range: bytes=-{suffix}\r\n")),
        status: 206,
        body: Some(data.slice(len - suffix..)),
        content_range: Some(format!("bytes {}-{}/{len}", len - suffix, len - 1)),
    });
    out.push(Expect {
        request: get(&path, &format!("Range: bytes={}-\r\n", len / 2)),
        status: 206,
        body: Some(data.slice(len / 2..)),
        content_range: Some(format!("bytes {}-{}/{len}", len / 2, len - 1)),
    });
    out.push(Expect {
        request: get(&path, &format!("Range: bytes={len}-\r\n")),
        status: 416,
        body: Some(Bytes::new()),
        content_range: Some(format!("bytes */{len}")),
    });
    out
}

/// Generated bodies (plain buffers, no sendfile) between the file bodies on the same connection.
fn plain(n: usize) -> Expect {
    if n.is_multiple_of(2) {
        Expect {
            request: get("/healthz", ""),
            status: 200,
            body: Some(Bytes::from_static(b"ok\n")),
            content_range: None,
        }
    } else {
        Expect {
            request: get("/artifacts/no-such-file", ""),
            status: 404,
            body: Some(Bytes::from_static(b"no such artifact\n")),
            content_range: None,
        }
    }
}

/// Everything for every file, with a plain response after every few file responses.
fn all_requests(files: &[Bytes]) -> Vec<Expect> {
    let mut out = Vec::new();
    for (i, data) in files.iter().enumerate() {
        for (k, e) in requests_for(i, data).into_iter().enumerate() {
            out.push(e);
            if k % 3 == 2 {
                out.push(plain(out.len()));
            }
        }
    }
    out
}

/// A response head: status and headers (names lowercased).
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Head {
    fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn read_head(reader: &mut impl BufRead) -> Head {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("HTTP/1.1 "),
        "not a status line: {line:?} (a body longer than announced, or placeholder bytes?)"
    );
    let status = line[9..12].parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':').unwrap();
        headers.push((n.to_ascii_lowercase(), v.trim().to_owned()));
    }
    Head { status, headers }
}

/// Sends `expects` pipelined on `stream` (from a writer thread, so neither side waits on the
/// other's buffers) and checks every response, byte for byte. `chunk`: how much the reader asks
/// for per read; `pause`: how long it waits between reads (a slow client).
fn exchange(stream: TcpStream, expects: &[Expect], chunk: usize, pause: Duration) {
    let mut writer = stream.try_clone().unwrap();
    let requests: String = expects.iter().map(|e| e.request.as_str()).collect();
    let sender = std::thread::spawn(move || writer.write_all(requests.as_bytes()));
    let mut reader = BufReader::with_capacity(chunk, Paced { stream, pause });
    for (n, e) in expects.iter().enumerate() {
        let what = format!("response {n} to {:?}", e.request.lines().next().unwrap());
        let head = read_head(&mut reader);
        assert_eq!(head.status, e.status, "{what}");
        assert_eq!(
            head.get("content-range"),
            e.content_range.as_deref(),
            "{what}"
        );
        let Some(expected) = &e.body else {
            continue;
        };
        let len: usize = head
            .get("content-length")
            .unwrap_or_else(|| panic!("{what}: no Content-Length"))
            .parse()
            .unwrap();
        assert_eq!(len, expected.len(), "{what}: Content-Length");
        let mut body = vec![0u8; len];
        reader
            .read_exact(&mut body)
            .unwrap_or_else(|err| panic!("{what}: the body broke off: {err}"));
        if body != *expected {
            let at = body.iter().zip(expected).position(|(a, b)| a != b).unwrap();
            let placeholder = body[at] == 0;
            panic!(
                "{what}: byte {at} of the body differs ({} instead of {}){}",
                body[at],
                expected[at],
                if placeholder {
                    ": a placeholder byte reached the client"
                } else {
                    ""
                }
            );
        }
    }
    sender.join().unwrap().unwrap();
}

/// A socket read that may wait before each read.
struct Paced {
    stream: TcpStream,
    pause: Duration,
}

impl Read for Paced {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.pause.is_zero() {
            std::thread::sleep(self.pause);
        }
        self.stream.read(buf)
    }
}

#[test]
fn every_byte_of_every_response_is_the_files_byte() {
    let fx = Fixture::start();
    let expects = all_requests(&fx.files);
    assert!(expects.len() > 200, "{} requests", expects.len());

    // All of it pipelined on one keep-alive connection.
    exchange(fx.connect(), &expects, 64 * 1024, Duration::ZERO);

    // Four connections at once, each with every request in another order.
    std::thread::scope(|s| {
        for k in 1..=4 {
            let mut mine = expects.clone();
            mine.rotate_left(expects.len() * k / 5);
            if k.is_multiple_of(2) {
                mine.reverse();
            }
            let stream = fx.connect();
            s.spawn(move || exchange(stream, &mine, 256 * 1024, Duration::ZERO));
        }
    });
}

#[test]
fn a_slow_reader_with_a_small_window_gets_every_byte() {
    let fx = Fixture::start();
    // The biggest file whole and a range across frames: partial sendfile writes all along.
    let i = SIZES.len() - 1;
    let reqs = requests_for(i, &fx.files[i]);
    let picked: Vec<Expect> = [0usize, 1, reqs.len() - 3, 9]
        .iter()
        .filter_map(|&k| reqs.get(k).cloned())
        .chain([plain(0)])
        .collect();
    let stream = {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.connect(&fx.addr.into()).unwrap();
        let s: TcpStream = socket.into();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    };
    exchange(stream, &picked, 7 * 1024, Duration::from_micros(50));
}

#[test]
fn conditional_requests_send_no_body_and_keep_the_connection_in_step() {
    let fx = Fixture::start();
    let i = 14;
    let path = format!("/artifacts/{}", name(i));
    // The ETag, from a HEAD.
    let mut s = fx.connect();
    s.write_all(format!("HEAD {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .unwrap();
    let head = read_head(&mut BufReader::new(&mut s));
    let etag = head.get("etag").expect("an ETag").to_owned();

    let data = &fx.files[i];
    let expects = vec![
        Expect {
            request: get(&path, &format!("If-None-Match: {etag}\r\n")),
            status: 304,
            body: None,
            content_range: None,
        },
        Expect {
            request: get(
                &path,
                &format!("If-Range: {etag}\r\nRange: bytes=10-19\r\n"),
            ),
            status: 206,
            body: Some(data.slice(10..20)),
            content_range: Some(format!("bytes 10-19/{}", data.len())),
        },
        // A stale validator: If-Range makes it the whole file.
        Expect {
            request: get(&path, "If-Range: \"stale\"\r\nRange: bytes=10-19\r\n"),
            status: 200,
            body: Some(data.clone()),
            content_range: None,
        },
        Expect {
            request: get(&path, &format!("If-None-Match: {etag}\r\n")),
            status: 304,
            body: None,
            content_range: None,
        },
        plain(0),
    ];
    exchange(fx.connect(), &expects, 64 * 1024, Duration::ZERO);
}

/// A small file replaced by a rename, or rewritten in place shorter, between two requests is
/// served new at the next request, with its new length: the open-file cache
/// (`http/opencache.rs`) reads the kernel's change events before every lookup, so this needs no
/// wait.
#[test]
fn a_small_file_changed_between_requests_is_served_new() {
    let fx = Fixture::start();
    let dir = fx._dir.path().join("artifacts");
    let i = SIZES.iter().position(|&n| n == 4095).unwrap();
    let path = format!("/artifacts/{}", name(i));
    let whole = |data: &Bytes| Expect {
        request: get(&path, ""),
        status: 200,
        body: Some(data.clone()),
        content_range: None,
    };
    let fetch = |data: &Bytes| {
        exchange(
            fx.connect(),
            &[whole(data), whole(data)],
            64 * 1024,
            Duration::ZERO,
        );
    };
    fetch(&fx.files[i]);
    let renamed = Bytes::from(content(100, 3000));
    std::fs::write(dir.join("next.tmp"), &renamed).unwrap();
    std::fs::rename(dir.join("next.tmp"), dir.join(name(i))).unwrap();
    fetch(&renamed);
    let shorter = Bytes::from(content(101, 10));
    std::fs::write(dir.join(name(i)), &shorter).unwrap();
    fetch(&shorter);
}
