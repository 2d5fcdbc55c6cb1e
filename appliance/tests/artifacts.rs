//! `okd-appliance artifacts fetch|import` as a process, against a small HTTP(S) server on
//! 127.0.0.1 in this test (it records every request, so resuming can be seen): files land under
//! the configured names, every digest is checked, a corrupted file is refused and leaves
//! nothing behind, an interrupted download continues with a Range request. Downloads go through
//! a proxy (a forward proxy and CONNECT tunnels, also in this test, on 127.0.0.1) when
//! `HTTP_PROXY`/`HTTPS_PROXY` say so and `NO_PROXY` does not, and https trusts the CAs of
//! `SSL_CERT_FILE` (a CA made for the test) and no others.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use okd_appliance::digest::Sha256;

/// What the server does for a path.
#[derive(Clone)]
enum Route {
    /// The file, honouring `Range: bytes=N-`.
    File(Vec<u8>),
    /// The file, always whole with 200 (a server without range support).
    NoRanges(Vec<u8>),
    /// The file in chunked transfer coding, in pieces of 1000 bytes.
    Chunked(Vec<u8>),
    /// Announces the whole length but sends only the first half, then closes.
    Short(Vec<u8>),
    Redirect(String),
    Status(u16),
}

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    path: String,
    range: Option<String>,
}

struct Server {
    addr: SocketAddr,
    /// `https` when the server speaks TLS.
    scheme: &'static str,
    routes: Arc<Mutex<HashMap<String, Route>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// Serves on 127.0.0.1 on a port of the system's choosing, one connection at a time, on a
    /// thread that ends with the test process.
    fn start() -> Server {
        Server::serve(None)
    }

    /// The same over TLS, with `tls`'s certificate.
    fn start_tls(tls: Arc<rustls::ServerConfig>) -> Server {
        Server::serve(Some(tls))
    }

    fn serve(tls: Option<Arc<rustls::ServerConfig>>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let routes = Arc::new(Mutex::new(HashMap::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (r, s) = (Arc::clone(&routes), Arc::clone(&seen));
        let scheme = if tls.is_some() { "https" } else { "http" };
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                // A client that misbehaves fails its own test; the server goes on.
                let _ = accept(stream, tls.as_ref(), &r, &s);
            }
        });
        Server {
            addr,
            scheme,
            routes,
            seen,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    fn route(&self, path: &str, route: Route) {
        self.routes.lock().unwrap().insert(path.to_owned(), route);
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn forget(&self) {
        self.seen.lock().unwrap().clear();
    }
}

/// One connection: plain, or TLS (closed with close_notify) when `tls` is given.
fn accept(
    stream: TcpStream,
    tls: Option<&Arc<rustls::ServerConfig>>,
    routes: &Mutex<HashMap<String, Route>>,
    seen: &Mutex<Vec<Seen>>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let Some(tls) = tls else {
        return answer(stream, routes, seen);
    };
    let conn = rustls::ServerConnection::new(Arc::clone(tls)).map_err(std::io::Error::other)?;
    let mut stream = rustls::StreamOwned::new(conn, stream);
    answer(&mut stream, routes, seen)?;
    stream.conn.send_close_notify();
    stream.flush()
}

fn answer(
    stream: impl Read + Write,
    routes: &Mutex<HashMap<String, Route>>,
    seen: &Mutex<Vec<Seen>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
    let mut range = None;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        if header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("range")
        {
            range = Some(value.trim().to_owned());
        }
    }
    seen.lock().unwrap().push(Seen {
        path: path.clone(),
        range: range.clone(),
    });
    let route = routes.lock().unwrap().get(&path).cloned();
    let out = reader.get_mut();
    match route {
        None => respond(out, "404 Not Found", &[], b"not here\n"),
        Some(Route::Status(code)) => respond(out, &format!("{code} Oops"), &[], b"oops\n"),
        Some(Route::Redirect(to)) => respond(out, "302 Found", &[("Location", &to)], b""),
        Some(Route::NoRanges(body)) => respond(out, "200 OK", &[], &body),
        Some(Route::File(body)) => match range.as_deref().and_then(range_start) {
            None => respond(out, "200 OK", &[], &body),
            Some(start) if start < body.len() => {
                let cr = format!("bytes {start}-{}/{}", body.len() - 1, body.len());
                respond(
                    out,
                    "206 Partial Content",
                    &[("Content-Range", &cr)],
                    &body[start..],
                )
            }
            Some(_) => {
                let cr = format!("bytes */{}", body.len());
                respond(
                    out,
                    "416 Range Not Satisfiable",
                    &[("Content-Range", &cr)],
                    b"",
                )
            }
        },
        Some(Route::Chunked(body)) => {
            write!(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")?;
            for piece in body.chunks(1000) {
                write!(out, "{:x};ext=1\r\n", piece.len())?;
                out.write_all(piece)?;
                out.write_all(b"\r\n")?;
            }
            out.write_all(b"0\r\n\r\n")
        }
        Some(Route::Short(body)) => {
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )?;
            out.write_all(&body[..body.len() / 2])
        }
    }
}

fn range_start(value: &str) -> Option<usize> {
    value
        .strip_prefix("bytes=")?
        .strip_suffix('-')?
        .parse()
        .ok()
}

fn respond(
    out: &mut impl Write,
    status: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(body)
}

/// Test content: `len` bytes that differ per `seed`, so a mix-up of files shows.
fn content(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// One release: the files' content and their names on the "mirror".
struct Release {
    kernel: Vec<u8>,
    initramfs: Vec<u8>,
    rootfs: Vec<u8>,
    metal: Vec<u8>,
    iso: Vec<u8>,
}

const UPSTREAM: [(&str, &str); 5] = [
    ("kernel", "fcos-40.1-live-kernel-x86_64"),
    ("initramfs", "fcos-40.1-live-initramfs.x86_64.img"),
    ("rootfs", "fcos-40.1-live-rootfs.x86_64.img"),
    ("metal", "fcos-40.1-metal.x86_64.raw.xz"),
    ("iso", "fcos-40.1-live.x86_64.iso"),
];

impl Release {
    fn new() -> Release {
        Release {
            kernel: content(1, 70_000),
            initramfs: content(2, 150_000),
            rootfs: content(3, 600_000),
            metal: content(4, 90_000),
            iso: content(5, 120_000),
        }
    }

    fn bodies(&self) -> [&Vec<u8>; 5] {
        [
            &self.kernel,
            &self.initramfs,
            &self.rootfs,
            &self.metal,
            &self.iso,
        ]
    }

    /// The stream metadata, with locations under `base` (a URL ending in `/`).
    fn stream(&self, base: &str) -> String {
        let entry = |i: usize| {
            serde_json::json!({
                "location": format!("{base}{}", UPSTREAM[i].1),
                "signature": format!("{base}{}.sig", UPSTREAM[i].1),
                "sha256": Sha256::of(self.bodies()[i]).to_string(),
            })
        };
        serde_json::json!({
            "stream": "stable",
            "metadata": { "last-modified": "2026-01-01T00:00:00Z" },
            "architectures": { "x86_64": { "artifacts": {
                "metal": {
                    "release": "40.1",
                    "formats": {
                        "pxe": { "kernel": entry(0), "initramfs": entry(1), "rootfs": entry(2) },
                        "raw.xz": { "disk": entry(3) },
                        "iso": { "disk": entry(4) },
                    },
                },
                "qemu": { "release": "40.1", "formats": {} },
            } } },
        })
        .to_string()
    }

    /// Serves the stream at /streams/stable.json and every file under /prod/.
    fn serve(&self, server: &Server) {
        server.route(
            "/streams/stable.json",
            Route::File(self.stream(&server.url("/prod/")).into_bytes()),
        );
        for (i, (_, name)) in UPSTREAM.iter().enumerate() {
            server.route(
                &format!("/prod/{name}"),
                Route::File(self.bodies()[i].clone()),
            );
        }
    }
}

/// A cluster config in `dir` that names the artifacts as `serve` will publish them. There is
/// no ignition directory: the artifacts are fetched before the ignition configs exist.
fn config(dir: &Path) -> PathBuf {
    let path = dir.join("okd.yml");
    std::fs::write(
        &path,
        r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }
# `check --install` runs on a host without 10.0.0.1: the listeners on the wildcard address.
listen: { dns: ["0.0.0.0:53"], http: ["0.0.0.0:8080"] }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  artifacts: { kernel: vmlinuz, initramfs: initrd.img, rootfs: rootfs.img }
"#,
    )
    .unwrap();
    path
}

/// The variables that route or trust the downloads: cleared for every run, so the caller's
/// environment can't send the test's traffic elsewhere.
const NETWORK_VARIABLES: [&str; 10] = [
    "ALL_PROXY",
    "all_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

fn run(args: &[&str]) -> Output {
    run_with(args, &[])
}

/// Runs the binary with `env` set (after clearing [`NETWORK_VARIABLES`]).
fn run_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_okd-appliance"));
    command.args(args).env("NO_COLOR", "1");
    for name in NETWORK_VARIABLES {
        command.env_remove(name);
    }
    command.envs(env.iter().copied()).output().unwrap()
}

fn fetch(config: &Path, stream: &str, extra: &[&str]) -> Output {
    fetch_with(config, stream, extra, &[])
}

fn fetch_with(config: &Path, stream: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = vec!["artifacts", "fetch", "--stream", stream];
    args.extend_from_slice(extra);
    args.push(config.to_str().unwrap());
    run_with(&args, env)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Output for assertion messages.
fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

fn artifact(dir: &Path, name: &str) -> PathBuf {
    dir.join("artifacts").join(name)
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The requests for one path, with their Range headers.
fn requests_for(server: &Server, path: &str) -> Vec<Option<String>> {
    server
        .seen()
        .into_iter()
        .filter(|s| s.path == path)
        .map(|s| s.range)
        .collect()
}

#[test]
fn fetch_puts_each_file_in_place_under_its_configured_name_and_skips_it_next_time() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    let stream = server.url("/streams/stable.json");

    let out = fetch(&cfg, &stream, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(read(&artifact(dir.path(), "vmlinuz")), release.kernel);
    assert_eq!(read(&artifact(dir.path(), "initrd.img")), release.initramfs);
    assert_eq!(read(&artifact(dir.path(), "rootfs.img")), release.rootfs);
    let mut names: Vec<String> = std::fs::read_dir(dir.path().join("artifacts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".okd-appliance-artifacts.json",
            "initrd.img",
            "rootfs.img",
            "vmlinuz"
        ],
        "the three files and their record, no .part"
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("CoreOS 40.1 (stable stream), x86_64: 3 files"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("sha256 verified").count(), 3, "{stdout}");
    assert!(
        !stdout.contains("image_url"),
        "no metal image, no hint: {stdout}"
    );

    // A second run checks the files on disk and downloads nothing but the stream.
    server.forget();
    let out = fetch(&cfg, &stream, &[]);
    assert_up_to_date(&out, &server, "already up to date (sha256 verified)");
}

/// `artifacts fetch` records what it verified beside the files; `check` then finds a file of
/// another size, and `check --install` one of the same size with other bytes, each named with
/// the release it should be.
#[test]
fn check_finds_an_artifact_changed_since_it_was_fetched() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    let out = fetch(&cfg, &server.url("/streams/stable.json"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let record: serde_json::Value = serde_json::from_slice(&read(&artifact(
        dir.path(),
        ".okd-appliance-artifacts.json",
    )))
    .unwrap();
    assert_eq!(
        record["files"]["vmlinuz"],
        serde_json::json!({
            "release": "40.1",
            "stream": "stable",
            "arch": "x86_64",
            "size": 70_000,
            "sha256": Sha256::of(&release.kernel).to_string(),
        })
    );
    assert_eq!(record["files"].as_object().unwrap().len(), 3, "{record}");
    // The only node is a master: a single-node cluster's live config.
    std::fs::create_dir_all(dir.path().join("install_dir")).unwrap();
    std::fs::write(
        dir.path()
            .join("install_dir/bootstrap-in-place-for-live-iso.ign"),
        "{}",
    )
    .unwrap();
    let check = |install: bool| {
        let file = cfg.to_str().unwrap();
        let args: &[&str] = if install {
            &["check", "--install", file]
        } else {
            &["check", file]
        };
        run(args)
    };
    let out = check(true);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("checking the SHA-256 of 3 artifacts (800.8 KiB)"),
        "{}",
        show(&out)
    );

    // The same size, other bytes: only the digest tells.
    let rootfs = artifact(dir.path(), "rootfs.img");
    std::fs::write(&rootfs, content(9, release.rootfs.len())).unwrap();
    let out = check(false);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(!text(&out.stderr).contains("rootfs.img"), "{}", show(&out));
    let out = check(true);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let said = text(&out.stderr);
    assert!(
        said.contains(&format!(
            "error: {}: its SHA-256 is {}, the file of CoreOS 40.1 (stable, x86_64) `artifacts fetch` verified there was {}",
            rootfs.display(),
            Sha256::of(&content(9, release.rootfs.len())),
            Sha256::of(&release.rootfs)
        )),
        "{said}"
    );
    assert_eq!(said.matches("error: ").count(), 1, "{said}");

    // Cut short: the size tells, without reading it.
    std::fs::write(&rootfs, &release.rootfs[..1000]).unwrap();
    let out = check(false);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stderr).contains(&format!(
            "warning: {} is 1000 bytes, but the file of CoreOS 40.1 (stable, x86_64) `artifacts fetch` verified there was 600000 bytes (needed by master-0): the nodes would boot another file",
            rootfs.display()
        )),
        "{}",
        show(&out)
    );
    assert_eq!(check(true).status.code(), Some(1));

    // Fetched again, all is well.
    let out = fetch(&cfg, &server.url("/streams/stable.json"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(check(true).status.code(), Some(0));
}

/// Every file was found in place (`phrase` says how it was checked) and nothing but the
/// stream was fetched.
fn assert_up_to_date(out: &Output, server: &Server, phrase: &str) {
    assert_eq!(out.status.code(), Some(0), "{}", show(out));
    assert_eq!(
        text(&out.stdout).matches(phrase).count(),
        3,
        "{}",
        show(out)
    );
    let paths: Vec<String> = server.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/streams/stable.json"]);
}

#[test]
fn a_corrupted_file_is_rejected_and_nothing_is_left_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    let mut bad = release.rootfs.clone();
    bad[123_456] ^= 0x01;
    server.route(
        &format!("/prod/{}", UPSTREAM[2].1),
        Route::File(bad.clone()),
    );

    let out = fetch(&cfg, &server.url("/streams/stable.json"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("sha256 mismatch for "), "{stderr}");
    assert!(stderr.contains("rootfs.img"), "{stderr}");
    assert!(
        stderr.contains(&format!("expected {}", Sha256::of(&release.rootfs))),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("got {}", Sha256::of(&bad))),
        "{stderr}"
    );
    assert!(stderr.contains("1 of 3 artifacts failed"), "{stderr}");
    assert!(!artifact(dir.path(), "rootfs.img").exists());
    assert!(!artifact(dir.path(), "rootfs.img.part").exists());
    // The good files are still put in place.
    assert_eq!(read(&artifact(dir.path(), "vmlinuz")), release.kernel);
    assert_eq!(read(&artifact(dir.path(), "initrd.img")), release.initramfs);
}

#[test]
fn an_interrupted_download_continues_with_a_range_request() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    let half = release.rootfs.len() / 2;
    std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
    std::fs::write(
        artifact(dir.path(), "rootfs.img.part"),
        &release.rootfs[..half],
    )
    .unwrap();

    let out = fetch(&cfg, &server.url("/streams/stable.json"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(
        requests_for(&server, &format!("/prod/{}", UPSTREAM[2].1)),
        [Some(format!("bytes={half}-"))]
    );
    assert_eq!(read(&artifact(dir.path(), "rootfs.img")), release.rootfs);
    assert!(!artifact(dir.path(), "rootfs.img.part").exists());
    assert!(
        text(&out.stdout).contains("resumed after 0.3 MiB"),
        "{}",
        show(&out)
    );
    // Files without a .part are asked for whole.
    assert_eq!(
        requests_for(&server, &format!("/prod/{}", UPSTREAM[0].1)),
        [None]
    );
}

#[test]
fn a_server_without_ranges_sends_the_whole_file_which_replaces_the_part() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    let path = format!("/prod/{}", UPSTREAM[2].1);
    server.route(&path, Route::NoRanges(release.rootfs.clone()));
    std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
    std::fs::write(
        artifact(dir.path(), "rootfs.img.part"),
        &release.rootfs[..1000],
    )
    .unwrap();

    let out = fetch(&cfg, &server.url("/streams/stable.json"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(
        requests_for(&server, &path),
        [Some("bytes=1000-".to_owned())]
    );
    assert_eq!(read(&artifact(dir.path(), "rootfs.img")), release.rootfs);
}

#[test]
fn a_complete_part_is_renamed_and_a_stale_one_is_fetched_again() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
    // A run that stopped between the last byte and the rename: the server answers 416.
    std::fs::write(artifact(dir.path(), "vmlinuz.part"), &release.kernel).unwrap();
    // A .part longer than the file (from another release): 416, wrong digest, fetched anew.
    let mut stale = release.initramfs.clone();
    stale.extend_from_slice(b"left over from something else");
    std::fs::write(artifact(dir.path(), "initrd.img.part"), &stale).unwrap();

    let out = fetch(&cfg, &server.url("/streams/stable.json"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(read(&artifact(dir.path(), "vmlinuz")), release.kernel);
    assert_eq!(read(&artifact(dir.path(), "initrd.img")), release.initramfs);
    let kernel_len = release.kernel.len();
    assert_eq!(
        requests_for(&server, &format!("/prod/{}", UPSTREAM[0].1)),
        [Some(format!("bytes={kernel_len}-"))],
        "the complete .part needs no body"
    );
    assert_eq!(
        requests_for(&server, &format!("/prod/{}", UPSTREAM[1].1)),
        [Some(format!("bytes={}-", stale.len())), None]
    );
}

#[test]
fn a_part_with_wrong_bytes_fails_the_digest_is_deleted_and_the_next_run_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
    std::fs::write(artifact(dir.path(), "rootfs.img.part"), vec![0u8; 1000]).unwrap();
    let stream = server.url("/streams/stable.json");

    let out = fetch(&cfg, &stream, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("sha256 mismatch"),
        "{}",
        show(&out)
    );
    assert!(!artifact(dir.path(), "rootfs.img.part").exists());

    let out = fetch(&cfg, &stream, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(read(&artifact(dir.path(), "rootfs.img")), release.rootfs);
}

#[test]
fn a_body_cut_short_is_kept_as_part_and_continued_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    let path = format!("/prod/{}", UPSTREAM[2].1);
    server.route(&path, Route::Short(release.rootfs.clone()));
    let stream = server.url("/streams/stable.json");

    let out = fetch(&cfg, &stream, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("before the end of the body"), "{stderr}");
    assert!(stderr.contains("for the next run to continue"), "{stderr}");
    let half = release.rootfs.len() / 2;
    assert_eq!(
        read(&artifact(dir.path(), "rootfs.img.part")),
        &release.rootfs[..half]
    );
    assert!(!artifact(dir.path(), "rootfs.img").exists());

    server.route(&path, Route::File(release.rootfs.clone()));
    server.forget();
    let out = fetch(&cfg, &stream, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(
        requests_for(&server, &path),
        [Some(format!("bytes={half}-"))]
    );
    assert_eq!(read(&artifact(dir.path(), "rootfs.img")), release.rootfs);
}

#[test]
fn redirects_and_chunked_bodies_are_followed_and_http_errors_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    // The stream itself sits behind a relative redirect and comes chunked.
    server.route("/stable.json", Route::Redirect("/s/stable.json".to_owned()));
    server.route(
        "/s/stable.json",
        Route::Chunked(release.stream(&server.url("/prod/")).into_bytes()),
    );
    let kernel = format!("/prod/{}", UPSTREAM[0].1);
    server.route(&kernel, Route::Redirect(server.url("/mirror/kernel")));
    server.route("/mirror/kernel", Route::Chunked(release.kernel.clone()));
    server.route(&format!("/prod/{}", UPSTREAM[1].1), Route::Status(500));
    // The rootfs is not there at all: 404.

    let out = fetch(&cfg, &server.url("/stable.json"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_eq!(read(&artifact(dir.path(), "vmlinuz")), release.kernel);
    let stderr = text(&out.stderr);
    let initramfs_url = server.url(&format!("/prod/{}", UPSTREAM[1].1));
    assert!(
        stderr.contains(&format!("GET {initramfs_url}: the server answered 500")),
        "{stderr}"
    );
    assert!(stderr.contains("404 Not Found"), "{stderr}");
    assert!(stderr.contains("2 of 3 artifacts failed"), "{stderr}");
    assert!(!artifact(dir.path(), "initrd.img").exists());
    assert!(!artifact(dir.path(), "rootfs.img").exists());

    // A redirect loop ends.
    server.route("/loop", Route::Redirect("/loop".to_owned()));
    let out = fetch(&cfg, &server.url("/loop"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("more than 5 redirects"),
        "{}",
        show(&out)
    );
}

#[test]
fn metal_also_fetches_the_disk_image_under_its_upstream_name() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);

    let out = fetch(&cfg, &server.url("/streams/stable.json"), &["--metal"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(read(&artifact(dir.path(), UPSTREAM[3].1)), release.metal);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("4 files"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "coreos.inst.image_url=http://10.0.0.1:8080/artifacts/{}",
            UPSTREAM[3].1
        )),
        "{stdout}"
    );
    // No signature was kept, so coreos-installer would refuse the image: the hint says so.
    assert!(stdout.contains("coreos.inst.insecure"), "{stdout}");

    // With --key the signature is kept beside the image, where coreos-installer looks.
    let Some(signer) = Signer::new("release") else {
        return;
    };
    release.serve_signatures(&server, &signer);
    let out = fetch(
        &cfg,
        &server.url("/streams/stable.json"),
        &["--metal", "--key", signer.path(true)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(!text(&out.stdout).contains("insecure"), "{}", show(&out));
    assert!(artifact(dir.path(), &format!("{}.sig", UPSTREAM[3].1)).exists());
}

#[test]
fn iso_also_fetches_the_live_iso_under_its_configured_name() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    let stream = server.url("/streams/stable.json");

    let out = fetch(&cfg, &stream, &["--iso"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    // The config names no ISO: the default name, which serve's /iso/<node>.iso reads.
    assert_eq!(read(&artifact(dir.path(), "live.iso")), release.iso);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("4 files"), "{stdout}");
    assert!(
        stdout.contains("live ISO: fetched ") && stdout.contains("live.iso"),
        "{stdout}"
    );
    assert!(!artifact(dir.path(), UPSTREAM[4].1).exists());

    // A corrupted ISO is refused like any artifact, and the one in place stays.
    let mut bad = release.iso.clone();
    bad[70_000] ^= 0x80;
    server.route(&format!("/prod/{}", UPSTREAM[4].1), Route::File(bad));
    std::fs::remove_file(artifact(dir.path(), "live.iso")).unwrap();
    let out = fetch(&cfg, &stream, &["--iso"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("live ISO: sha256 mismatch for "),
        "{stderr}"
    );
    assert!(!artifact(dir.path(), "live.iso").exists());
    assert!(!artifact(dir.path(), "live.iso.part").exists());
}

#[test]
fn a_stream_without_the_arch_or_not_a_stream_at_all_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    let stream = server.url("/streams/stable.json");

    let out = fetch(&cfg, &stream, &["--arch", "s390x"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("the stream has no architecture `s390x` (it has: x86_64)"),
        "{stderr}"
    );
    assert!(stderr.contains(&stream), "names the stream: {stderr}");
    assert!(
        !dir.path().join("artifacts").exists(),
        "nothing was started"
    );

    server.route("/bad.json", Route::File(b"{\"architectures\": {".to_vec()));
    let out = fetch(&cfg, &server.url("/bad.json"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("is not CoreOS stream metadata JSON"),
        "{}",
        show(&out)
    );

    let out = fetch(&cfg, &server.url("/missing.json"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("404 Not Found"),
        "{}",
        show(&out)
    );

    // Nothing listens on this port once the listener is dropped: a connection error.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = fetch(&cfg, &format!("http://{closed}/stable.json"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("can't connect to 127.0.0.1"),
        "{}",
        show(&out)
    );
}

/// Writes the stream to a file and the files, named as upstream, into `downloads/`.
fn downloads(dir: &Path, release: &Release) -> (PathBuf, PathBuf) {
    let stream = dir.join("stable.json");
    std::fs::write(&stream, release.stream("https://builds.example/prod/")).unwrap();
    let from = dir.join("downloads");
    std::fs::create_dir_all(&from).unwrap();
    for (i, (_, name)) in UPSTREAM.iter().enumerate() {
        std::fs::write(from.join(name), release.bodies()[i]).unwrap();
    }
    (stream, from)
}

fn import(config: &Path, stream: &Path, from: &Path) -> Output {
    run(&[
        "artifacts",
        "import",
        "--stream",
        stream.to_str().unwrap(),
        "--from",
        from.to_str().unwrap(),
        config.to_str().unwrap(),
    ])
}

#[test]
fn import_verifies_and_copies_under_the_configured_names() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let (stream, from) = downloads(dir.path(), &release);

    let out = import(&cfg, &stream, &from);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(read(&artifact(dir.path(), "vmlinuz")), release.kernel);
    assert_eq!(read(&artifact(dir.path(), "initrd.img")), release.initramfs);
    assert_eq!(read(&artifact(dir.path(), "rootfs.img")), release.rootfs);
    assert_eq!(
        text(&out.stdout).matches("imported").count(),
        3,
        "{}",
        show(&out)
    );
    // The source files stay where they were.
    assert_eq!(read(&from.join(UPSTREAM[2].1)), release.rootfs);
}

#[test]
fn import_rejects_a_corrupted_or_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let (stream, from) = downloads(dir.path(), &release);
    let mut bad = release.initramfs.clone();
    bad.truncate(bad.len() - 1);
    std::fs::write(from.join(UPSTREAM[1].1), &bad).unwrap();
    std::fs::remove_file(from.join(UPSTREAM[2].1)).unwrap();

    let out = import(&cfg, &stream, &from);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("sha256 mismatch for "), "{stderr}");
    assert!(stderr.contains(UPSTREAM[1].1), "names the source: {stderr}");
    assert!(
        stderr.contains(&format!("expected {}", Sha256::of(&release.initramfs))),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("got {}", Sha256::of(&bad))),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("the stream's rootfs is {}", UPSTREAM[2].1)),
        "{stderr}"
    );
    assert!(stderr.contains("2 of 3 artifacts failed"), "{stderr}");
    assert_eq!(read(&artifact(dir.path(), "vmlinuz")), release.kernel);
    for name in [
        "initrd.img",
        "initrd.img.part",
        "rootfs.img",
        "rootfs.img.part",
    ] {
        assert!(!artifact(dir.path(), name).exists(), "{name}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let cfg = cfg.to_str().unwrap();
    assert_eq!(run(&["artifacts", "fetch", cfg]).status.code(), Some(2));
    let out = run(&["artifacts", "fetch", "--stream", "ftp://mirror/s.json", cfg]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("http:// or https://"),
        "{}",
        show(&out)
    );
    assert_eq!(
        run(&["artifacts", "import", "--stream", "s.json", cfg])
            .status
            .code(),
        Some(2),
        "import needs --from"
    );
}

#[test]
fn an_invalid_config_exits_1_before_anything_is_fetched() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("okd.yml");
    std::fs::write(&cfg, "version: 1\ncluster: {}\n").unwrap();
    let out = fetch(&cfg, "http://127.0.0.1:9/never.json", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(!dir.path().join("artifacts").exists());
}

/// A signing key made for the test by gpg in a GNUPGHOME of its own, and its public key in both
/// forms gpgv's callers meet: armored (as Fedora publishes it) and binary.
struct Signer {
    home: tempfile::TempDir,
    armored: PathBuf,
    binary: PathBuf,
}

impl Signer {
    /// `None` (after saying so) when gpg can't be run outside CI; with CI=true that fails.
    fn new(name: &str) -> Option<Signer> {
        if Command::new("gpg").arg("--version").output().is_err() {
            assert!(
                std::env::var_os("CI").is_none(),
                "gpg is needed (apt install gpg)"
            );
            eprintln!("SKIPPED: gpg is not installed");
            return None;
        }
        let home = tempfile::tempdir().unwrap();
        let gpg = |args: &[&str]| {
            let out = Command::new("gpg")
                .env("GNUPGHOME", home.path())
                .args(["--batch", "--quiet", "--pinentry-mode", "loopback"])
                .args(["--passphrase", ""])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "gpg {args:?}: {}", show(&out));
            out.stdout
        };
        let uid = format!("{name} <{name}@example.test>");
        gpg(&["--quick-gen-key", &uid, "ed25519", "sign", "never"]);
        let armored = home.path().join("key.asc");
        let binary = home.path().join("key.gpg");
        std::fs::write(&armored, gpg(&["--armor", "--export"])).unwrap();
        std::fs::write(&binary, gpg(&["--export"])).unwrap();
        Some(Signer {
            home,
            armored,
            binary,
        })
    }

    /// A detached binary signature of `data`.
    fn sign(&self, data: &[u8]) -> Vec<u8> {
        let input = self.home.path().join("to-sign");
        std::fs::write(&input, data).unwrap();
        let sig = self.home.path().join("to-sign.sig");
        let _ = std::fs::remove_file(&sig);
        let out = Command::new("gpg")
            .env("GNUPGHOME", self.home.path())
            .args(["--batch", "--quiet", "--detach-sign", "-o"])
            .arg(&sig)
            .arg(&input)
            .output()
            .unwrap();
        assert!(out.status.success(), "gpg --detach-sign: {}", show(&out));
        read(&sig)
    }

    fn path(&self, armored: bool) -> &str {
        let p = if armored { &self.armored } else { &self.binary };
        p.to_str().unwrap()
    }
}

impl Release {
    /// Serves every file's signature by `signer` at the stream's `signature` URLs.
    fn serve_signatures(&self, server: &Server, signer: &Signer) {
        for (i, (_, name)) in UPSTREAM.iter().enumerate() {
            server.route(
                &format!("/prod/{name}.sig"),
                Route::File(signer.sign(self.bodies()[i])),
            );
        }
    }
}

#[test]
fn with_a_key_every_signature_is_checked_and_kept_beside_its_file() {
    let Some(signer) = Signer::new("release") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    release.serve_signatures(&server, &signer);
    let stream = server.url("/streams/stable.json");

    let out = fetch(&cfg, &stream, &["--key", signer.path(true)]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout.matches("sha256 and OpenPGP signature by ").count(),
        3,
        "{stdout}"
    );
    assert_eq!(read(&artifact(dir.path(), "rootfs.img")), release.rootfs);
    // The signature is kept under the served name, for clients that fetch `<url>.sig`.
    let kept = read(&artifact(dir.path(), "rootfs.img.sig"));
    let served = Command::new("gpgv")
        .args(["--keyring", signer.path(false)])
        .arg(artifact(dir.path(), "rootfs.img.sig"))
        .arg(artifact(dir.path(), "rootfs.img"))
        .output()
        .unwrap();
    assert!(served.status.success(), "kept signature: {}", show(&served));
    assert!(!kept.is_empty());

    // A second run checks the files in place against the kept signatures: nothing fetched.
    server.forget();
    let out = fetch(&cfg, &stream, &["--key", signer.path(false)]);
    assert_up_to_date(
        &out,
        &server,
        "already up to date (sha256 and OpenPGP signature by ",
    );
}

#[test]
fn a_wrong_signature_or_an_unknown_signer_keeps_the_file_out() {
    let (Some(signer), Some(stranger)) = (Signer::new("release"), Signer::new("stranger")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    release.serve_signatures(&server, &signer);
    // The rootfs is served with the kernel's signature: right key, wrong file.
    server.route(
        &format!("/prod/{}.sig", UPSTREAM[2].1),
        Route::File(signer.sign(&release.kernel)),
    );
    let stream = server.url("/streams/stable.json");

    let out = fetch(&cfg, &stream, &["--key", signer.path(true)]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("rootfs: "), "{stderr}");
    assert!(stderr.contains("BAD signature"), "{stderr}");
    assert!(stderr.contains("1 of 3 artifacts failed"), "{stderr}");
    for name in ["rootfs.img", "rootfs.img.part", "rootfs.img.sig"] {
        assert!(!artifact(dir.path(), name).exists(), "{name}");
    }
    assert_eq!(read(&artifact(dir.path(), "vmlinuz")), release.kernel);

    // Another signer's key: every file is refused, whatever is already in place included.
    let out = fetch(&cfg, &stream, &["--key", stranger.path(false)]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("which the key file does not hold").count(),
        3,
        "{stderr}"
    );
    assert!(
        stderr.contains("was in place with the right sha256 and has been removed"),
        "{stderr}"
    );
    let left: Vec<String> = std::fs::read_dir(dir.path().join("artifacts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "nothing unverified stays: {left:?}");
}

#[test]
fn import_with_a_key_reads_the_signatures_beside_the_files() {
    let Some(signer) = Signer::new("release") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let (stream, from) = downloads(dir.path(), &release);
    for (i, (_, name)) in UPSTREAM.iter().enumerate().take(2) {
        let sig = signer.sign(release.bodies()[i]);
        std::fs::write(from.join(format!("{name}.sig")), sig).unwrap();
    }
    let key = signer.path(true);
    let args = |from: &Path| {
        let mut a = vec!["artifacts", "import", "--key", key, "--stream"];
        a.push(stream.to_str().unwrap());
        a.push("--from");
        a.push(from.to_str().unwrap());
        a.push(cfg.to_str().unwrap());
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let argv = args(&from);
    let out = run(&argv.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    // The rootfs has no signature beside it: refused, with where to get one.
    assert!(
        stderr.contains(&format!("{}.sig", UPSTREAM[2].1)),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "download it from https://builds.example/prod/{}.sig",
            UPSTREAM[2].1
        )),
        "{stderr}"
    );
    assert!(!artifact(dir.path(), "rootfs.img").exists());
    assert!(artifact(dir.path(), "vmlinuz.sig").exists());
    assert!(artifact(dir.path(), "initrd.img.sig").exists());
}

#[test]
fn a_key_file_that_is_not_a_key_stops_before_anything_is_fetched() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let server = Server::start();
    Release::new().serve(&server);
    let key = dir.path().join("not-a-key.asc");
    for content in [
        &b"just text\n"[..],
        b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n**\n-----END PGP PUBLIC KEY BLOCK-----\n",
    ] {
        std::fs::write(&key, content).unwrap();
        let out = fetch(
            &cfg,
            &server.url("/streams/stable.json"),
            &["--key", key.to_str().unwrap()],
        );
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        assert!(
            text(&out.stderr).contains("not-a-key.asc"),
            "{}",
            show(&out)
        );
        assert!(
            server.seen().is_empty(),
            "fetched something: {:?}",
            server.seen()
        );
    }
}

/// A proxy on 127.0.0.1 as lab networks have one: absolute-form requests are forwarded to the
/// origin, CONNECT opens a tunnel. It records each request line, and only ever connects to
/// 127.0.0.1 (anything else gets a 403).
struct Proxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    let _ = proxy_one(client, &s);
                });
            }
        });
        Proxy { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn proxy_one(client: TcpStream, seen: &Mutex<Vec<String>>) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        if header.trim().is_empty() {
            break;
        }
        headers.push(header);
    }
    seen.lock().unwrap().push(line.clone());
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut client = client;
    if method == "CONNECT" {
        if !target.starts_with("127.0.0.1:") {
            return client.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
        }
        let upstream = TcpStream::connect(target)?;
        upstream.set_read_timeout(Some(Duration::from_secs(10)))?;
        client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
        // The client speaks only after the 200: nothing of the tunnel is in `reader`'s buffer.
        return tunnel(client, upstream);
    }
    let Some((authority, path)) = target
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .filter(|(authority, _)| authority.starts_with("127.0.0.1:"))
    else {
        return client.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
    };
    let mut upstream = TcpStream::connect(authority)?;
    upstream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head = format!("{method} /{path} HTTP/1.1\r\n");
    for h in headers
        .iter()
        .filter(|h| !h.to_ascii_lowercase().starts_with("proxy-"))
    {
        head.push_str(h);
    }
    head.push_str("\r\n");
    upstream.write_all(head.as_bytes())?;
    // The test server closes after each response.
    std::io::copy(&mut upstream, &mut client)?;
    Ok(())
}

/// Copies both ways until each side has closed.
fn tunnel(client: TcpStream, upstream: TcpStream) -> std::io::Result<()> {
    let (mut c_read, mut u_write) = (client.try_clone()?, upstream.try_clone()?);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c_read, &mut u_write);
        let _ = u_write.shutdown(std::net::Shutdown::Write);
    });
    let (mut u_read, mut c_write) = (upstream, client);
    let _ = std::io::copy(&mut u_read, &mut c_write);
    let _ = c_write.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
    Ok(())
}

#[test]
fn http_proxy_carries_every_request_and_no_proxy_bypasses_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start();
    release.serve(&server);
    let proxy = Proxy::start();
    let stream = server.url("/streams/stable.json");
    // A .part shows that the Range header travels through the proxy too.
    let half = release.rootfs.len() / 2;
    std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
    std::fs::write(
        artifact(dir.path(), "rootfs.img.part"),
        &release.rootfs[..half],
    )
    .unwrap();

    let out = fetch_with(&cfg, &stream, &[], &[("HTTP_PROXY", &proxy.url())]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(read(&artifact(dir.path(), "rootfs.img")), release.rootfs);
    let mut expected = vec![format!("GET {stream} HTTP/1.1")];
    for (_, name) in &UPSTREAM[..3] {
        expected.push(format!(
            "GET {} HTTP/1.1",
            server.url(&format!("/prod/{name}"))
        ));
    }
    assert_eq!(proxy.seen(), expected);
    assert_eq!(
        requests_for(&server, &format!("/prod/{}", UPSTREAM[2].1)),
        [Some(format!("bytes={half}-"))]
    );

    // NO_PROXY names the mirror: the proxy (here one that is not even there) is not used.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dead_url = format!("http://{dead}");
    let fresh = tempfile::tempdir().unwrap();
    let cfg = config(fresh.path());
    let out = fetch_with(
        &cfg,
        &stream,
        &[],
        &[
            ("http_proxy", &dead_url),
            ("NO_PROXY", "localhost, 127.0.0.0/8"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(proxy.seen().len(), 4, "the first proxy saw nothing new");

    // Without NO_PROXY the dead proxy is named in the error.
    let out = fetch_with(&cfg, &stream, &[], &[("http_proxy", &dead_url)]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains(&format!("can't connect to the proxy {dead}")),
        "{}",
        show(&out)
    );

    // A proxy variable that is not a usable proxy URL stops the run instead of being ignored.
    for bad in ["::not a url::", "ftp://127.0.0.1:21"] {
        let out = fetch_with(&cfg, &stream, &[], &[("HTTPS_PROXY", bad)]);
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("HTTPS_PROXY is not a proxy URL this client can use"),
            "{stderr}"
        );
        assert!(!stderr.contains(bad), "the value is not repeated: {stderr}");
    }
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("the HTTPS tests need the openssl command (Debian: openssl)");
    assert!(out.status.success(), "openssl {args:?}: {}", show(&out));
}

/// A CA made for the test and a server configuration whose certificate (for 127.0.0.1) it
/// signed: (the CA's PEM file, the server's TLS configuration).
fn test_pki(dir: &Path) -> (PathBuf, Arc<rustls::ServerConfig>) {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let p = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    let curve = "ec_paramgen_curve:prime256v1";
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        curve,
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=artifacts test CA",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.pem"),
    ]);
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        curve,
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &p("key.pem"),
        "-out",
        &p("csr.pem"),
    ]);
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        &p("csr.pem"),
        "-CA",
        &p("ca.pem"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &p("ext"),
        "-out",
        &p("cert.pem"),
    ]);
    let certs = CertificateDer::pem_file_iter(dir.join("cert.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("key.pem")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    (dir.join("ca.pem"), Arc::new(config))
}

#[test]
fn https_goes_through_a_connect_tunnel_and_trusts_only_the_platform_store() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, tls) = test_pki(pki.path());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let release = Release::new();
    let server = Server::start_tls(tls);
    release.serve(&server);
    let proxy = Proxy::start();
    let stream = server.url("/streams/stable.json");
    assert!(stream.starts_with("https://127.0.0.1:"), "{stream}");
    let ca = ca.to_str().unwrap();

    // SSL_CERT_FILE names the platform's trust store: the test CA, and only it.
    let out = fetch_with(
        &cfg,
        &stream,
        &[],
        &[("HTTPS_PROXY", &proxy.url()), ("SSL_CERT_FILE", ca)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(read(&artifact(dir.path(), "vmlinuz")), release.kernel);
    assert_eq!(read(&artifact(dir.path(), "rootfs.img")), release.rootfs);
    let tunnel = format!("CONNECT {} HTTP/1.1", server.addr);
    assert_eq!(proxy.seen(), vec![tunnel; 4], "the stream and 3 files");
    assert_eq!(server.seen().len(), 4);

    // Without it, the system's bundle does not know the test CA: the handshake fails.
    let fresh = tempfile::tempdir().unwrap();
    let cfg = config(fresh.path());
    let out = fetch_with(&cfg, &stream, &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("TLS with {}", server.addr)),
        "{stderr}"
    );
    assert!(stderr.contains("certificate"), "{stderr}");

    // A trust store that can't be read is named, and nothing is sent.
    server.forget();
    let out = fetch_with(
        &cfg,
        &stream,
        &[],
        &[("SSL_CERT_FILE", "/nonexistent/ca.pem")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no trusted CA certificates for https"),
        "{stderr}"
    );
    assert!(stderr.contains("/nonexistent/ca.pem"), "{stderr}");
    assert!(server.seen().is_empty());
}
