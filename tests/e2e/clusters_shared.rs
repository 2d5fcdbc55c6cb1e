//! One shared frontend for two clusters (a host file's `shared_frontend`): every cluster's api,
//! api-int and `*.apps` resolve to one address of the services namespace, and the router there
//! passes each connection to the cluster whose name it asks for, by the TLS server name on 6443,
//! 22623 and 443 and by `Host` on 80, with its bytes untouched.
//!
//! The backends are each cluster's master-0 (a compact cluster: the masters run the routers),
//! a python3 server on its four ports that answers `/whoami` with its name, its port and the
//! server name it was asked for (TLS with a certificate whose CN is its name). The clients are
//! unmodified curl and openssl s_client, and python3's ssl module writing a ClientHello in small
//! pieces. A name no cluster has, no name, or nothing within the peek time is reset and counted;
//! after a reload that names a default cluster, it goes there.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::{Process, require_root, require_tools, wait_until};

use crate::clusters::{Cluster, TwoSegments, get, reserved};
use crate::dns_support::start_appliance;
use crate::support::appliance;

/// The shared frontend: an address of the services namespace on okd's segment.
const SHARED: Ipv4Addr = Ipv4Addr::new(10, 98, 1, 50);

/// The host's API on TCP.
const API_LISTEN: &str = "10.98.1.1:9443";
const API_TOKEN: &str = "shared-api-t0ken-9c1e7d2b";

/// A compact cluster on its own segment (`third` octet), three masters, master-0 the only
/// one running.
fn compact(name: &'static str, interface: &'static str, third: u8) -> Cluster {
    let ip = move |n| Ipv4Addr::new(10, 98, third, n);
    Cluster {
        name,
        interface,
        subnet: if third == 1 {
            "10.98.1.0/24"
        } else {
            "10.98.2.0/24"
        },
        appliance: ip(1),
        gateway: ip(254),
        pool: None,
        nodes: vec![
            reserved("master-0", "master", macs(name)[0], ip(2)),
            reserved("master-1", "master", macs(name)[1], ip(3)),
            reserved("master-2", "master", macs(name)[2], ip(4)),
        ],
    }
}

fn macs(name: &str) -> [&'static str; 3] {
    if name == "okd" {
        [
            "52:54:00:98:11:02",
            "52:54:00:98:11:03",
            "52:54:00:98:11:04",
        ]
    } else {
        [
            "52:54:00:98:12:02",
            "52:54:00:98:12:03",
            "52:54:00:98:12:04",
        ]
    }
}

/// Writes both cluster files (ingress checked by TCP: the backends have no stats port) and
/// `DIR/host.yml` with the shared frontend and `default` as its default cluster; `check` must
/// accept it.
fn write_host(dir: &Path, clusters: &[&Cluster], default: Option<&str>) -> PathBuf {
    for c in clusters {
        c.write(dir);
        let file = dir.join(format!("{}.yml", c.name));
        let text = std::fs::read_to_string(&file).expect("cluster file");
        let text = text.replace(
            "control_plane_check: tcp }",
            "control_plane_check: tcp, ingress_check: tcp }",
        );
        std::fs::write(&file, text).expect("cluster file");
    }
    let default = default.map_or_else(String::new, |d| format!("  default_cluster: {d}\n"));
    // The host's API on TCP, for every cluster.
    crate::support::self_signed(dir, "api", "IP:10.98.1.1");
    std::fs::write(dir.join("api-token"), format!("{API_TOKEN}\n")).expect("token");
    for f in ["api-token", "api.key"] {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o600))
            .expect("owner-only");
    }
    let host = dir.join("host.yml");
    let entries: String = clusters
        .iter()
        .map(|c| format!("  - {{ file: {0}.yml, id: {0} }}\n", c.name))
        .collect();
    std::fs::write(
        &host,
        format!(
            "version: 1\nstate_dir: {}\napi: {{ listen: \"{API_LISTEN}\", cert_file: api.pem, key_file: api.key, token_file: api-token }}\nshared_frontend:\n  address: {SHARED}\n{default}clusters:\n{entries}",
            dir.join("state").display()
        ),
    )
    .expect("host file");
    let out = appliance(["check".as_ref(), host.as_os_str()]);
    assert!(
        out.status.success(),
        "check {}:\n{}{}",
        host.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    host
}

/// A backend on `ip`'s 6443, 22623 and 443 (TLS, with SNI recorded) and 80: `/whoami` answers
/// `NAME PORT SERVER-NAME` (`-` without one).
const BACKEND: &str = r#"
import http.server, ssl, sys, threading
name, ip, cert, key = sys.argv[1:5]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        sni = getattr(self.connection, "sni", None)
        host = (self.headers.get("Host") or "-") if sni is None else sni
        body = f"{name} {self.server.server_address[1]} {host}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
def remember(sock, server_name, _ctx):
    sock.sni = server_name or "-"
servers = []
for port in (6443, 22623, 443, 80):
    s = http.server.ThreadingHTTPServer((ip, port), Handler)
    if port != 80:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.sni_callback = remember
        s.socket = ctx.wrap_socket(s.socket, server_side=True)
    servers.append(s)
for s in servers[1:]:
    threading.Thread(target=s.serve_forever, daemon=True).start()
servers[0].serve_forever()
"#;

/// A TLS client that writes its ClientHello `piece` bytes at a time, 20 ms apart, then asks
/// `/whoami` and prints the answer's body.
const SLOW_HELLO: &str = r#"
import socket, ssl, sys, time
host, port, name, piece = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
tls = ctx.wrap_bio(inc, out, server_hostname=name)
s = socket.create_connection((host, port), timeout=10)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def flush(slow):
    data = out.read()
    step = piece if slow else max(len(data), 1)
    for i in range(0, len(data), step):
        s.sendall(data[i:i + step])
        if slow:
            time.sleep(0.02)
first = True
while True:
    try:
        tls.do_handshake()
        break
    except ssl.SSLWantReadError:
        flush(first)
        first = False
        data = s.recv(65536)
        if not data:
            sys.exit("closed during the handshake")
        inc.write(data)
flush(False)
tls.write(f"GET /whoami HTTP/1.0\r\nHost: {name}\r\n\r\n".encode())
flush(False)
body = b""
while True:
    data = s.recv(65536)
    if not data:
        break
    inc.write(data)
    try:
        while True:
            body += tls.read(65536)
    except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
        pass
    except ssl.SSLError:
        break
print(body.split(b"\r\n\r\n", 1)[-1].decode())
"#;

fn backend(ns: &harness::Netns, dir: &Path, name: &str, ip: Ipv4Addr) -> Process {
    let (cert, key) = crate::support::self_signed(dir, name, &format!("DNS:{name}"));
    let ip = ip.to_string();
    let p = ns
        .spawn(
            name,
            [
                "python3",
                "-c",
                BACKEND,
                name,
                &ip,
                cert.to_str().unwrap(),
                key.to_str().unwrap(),
            ],
        )
        .expect("backend");
    for port in [6443, 22623, 443, 80] {
        ns.wait_tcp(
            format!("{ip}:{port}").parse().unwrap(),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", p.log_tails()));
    }
    p
}

/// curl from `ns` to `url` with `name:port` resolved to the shared frontend: exit code and
/// body.
fn curl(ns: &harness::Netns, name: &str, port: u16, url: &str) -> (Option<i32>, String) {
    let resolve = format!("{name}:{port}:{SHARED}");
    let out = ns
        .exec([
            "curl",
            "-sk",
            "--max-time",
            "10",
            "--resolve",
            &resolve,
            url,
        ])
        .output()
        .expect("curl runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `/whoami` of `name` on `port` through the shared frontend (https but on 80).
#[track_caller]
fn whoami(ns: &harness::Netns, name: &str, port: u16) -> String {
    let scheme = if port == 80 { "http" } else { "https" };
    let url = format!("{scheme}://{name}:{port}/whoami");
    let (code, body) = curl(ns, name, port, &url);
    assert_eq!(code, Some(0), "curl {url}: {body}");
    body
}

/// python3 running `script` with `args` in `ns`: its stdout (trimmed) and stderr.
fn python(ns: &harness::Netns, script: &str, args: &[&str]) -> (String, String) {
    let mut argv = vec!["python3", "-c", script];
    argv.extend_from_slice(args);
    let out = ns.exec(argv).output().expect("python3");
    (
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `okd_appliance_lb_*` sample lines of okd's boot server's `/metrics`.
fn lb_metrics(ns: &harness::Netns, okd: &Cluster) -> String {
    let (code, body) = get(ns, &format!("{}/metrics", okd.http()));
    assert_eq!(code, "200", "{body}");
    body.lines()
        .filter(|l| {
            l.starts_with("okd_appliance_lb_routed") || l.starts_with("okd_appliance_lb_unrouted")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn one_shared_frontend_routes_each_connection_to_the_cluster_it_names() {
    if !require_root() || !require_tools(&["dig", "curl", "openssl", "python3", "unshare"]) {
        return;
    }
    let okd = compact("okd", "br0", 1);
    let test = compact("test", "br1", 2);
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-shared-")
        .tempdir()
        .expect("tempdir");
    let host = write_host(dir.path(), &[&okd, &test], None);
    let lab = TwoSegments::bare("shf", &okd, &test);
    lab.topo
        .bridge()
        .add_addr(&format!("{SHARED}/24"))
        .expect("the shared address");
    let (okd_node, test_node) = (&lab.okd_node, &lab.test_node);
    let _backends = [
        backend(
            okd_node,
            dir.path(),
            "okd-master-0",
            okd.node("master-0").ip,
        ),
        backend(
            test_node,
            dir.path(),
            "test-master-0",
            test.node("master-0").ip,
        ),
    ];
    let mut app = start_appliance(lab.topo.services(), &host);
    let log = app.stderr();
    for listening in [
        format!("listening for api/tcp on {SHARED}:6443"),
        format!("listening for ingress-http/tcp on {SHARED}:80"),
        "listening for http/tcp on 10.98.2.1:8080".to_owned(),
    ] {
        assert!(log.contains(&listening), "no {listening:?}\n{log}");
    }
    assert!(
        !log.contains("on 10.98.1.1:6443") && !log.contains("on 10.98.2.1:443"),
        "a routed cluster listens on its own frontends\n{log}"
    );
    // Every backend of both clusters up (the clusters' instances check them).
    for (node, frontend, port) in [
        (okd.node("master-0"), "api", 6443),
        (okd.node("master-0"), "machine-config", 22623),
        (okd.node("master-0"), "ingress-https", 443),
        (okd.node("master-0"), "ingress-http", 80),
        (test.node("master-0"), "api", 6443),
        (test.node("master-0"), "machine-config", 22623),
        (test.node("master-0"), "ingress-https", 443),
        (test.node("master-0"), "ingress-http", 80),
    ] {
        let line = format!("master-0: {frontend} backend {}:{port} is up", node.ip);
        assert!(
            wait_until(Duration::from_secs(10), || app.stderr().contains(&line)),
            "no {line:?}\n{}",
            app.log_tails()
        );
    }

    // DNS: both clusters' names resolve to the shared frontend.
    for name in [
        "api.okd.lab.example.com",
        "api-int.test.lab.example.com",
        "console.apps.test.lab.example.com",
    ] {
        let out = okd_node
            .exec(["dig", "+short", "@10.98.1.1", name, "A"])
            .output()
            .expect("dig");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            SHARED.to_string(),
            "{name}"
        );
    }

    // Each port routes each cluster's names to that cluster, from either segment, and the
    // backend sees the server name (or Host) the client sent.
    for ns in [okd_node, test_node] {
        for (name, port, want) in [
            (
                "api.okd.lab.example.com",
                6443,
                "okd-master-0 6443 api.okd.lab.example.com",
            ),
            (
                "api-int.test.lab.example.com",
                6443,
                "test-master-0 6443 api-int.test.lab.example.com",
            ),
            (
                "api-int.okd.lab.example.com",
                22623,
                "okd-master-0 22623 api-int.okd.lab.example.com",
            ),
            (
                "api-int.test.lab.example.com",
                22623,
                "test-master-0 22623 api-int.test.lab.example.com",
            ),
            (
                "console.apps.okd.lab.example.com",
                443,
                "okd-master-0 443 console.apps.okd.lab.example.com",
            ),
            (
                "a.b.apps.test.lab.example.com",
                443,
                "test-master-0 443 a.b.apps.test.lab.example.com",
            ),
            (
                "console.apps.test.lab.example.com",
                80,
                "test-master-0 80 console.apps.test.lab.example.com",
            ),
            (
                "x.apps.okd.lab.example.com",
                80,
                "okd-master-0 80 x.apps.okd.lab.example.com",
            ),
        ] {
            assert_eq!(whoami(ns, name, port), want, "{name}:{port}");
        }
    }
    // openssl s_client: the certificate is the named cluster's backend's.
    for (server_name, cn) in [
        ("api-int.test.lab.example.com", "CN=test-master-0"),
        ("api.okd.lab.example.com", "CN=okd-master-0"),
    ] {
        let out = okd_node
            .exec([
                "openssl",
                "s_client",
                "-connect",
                &format!("{SHARED}:6443"),
                "-servername",
                server_name,
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl s_client");
        let text = String::from_utf8_lossy(&out.stdout).replace(" = ", "=");
        assert!(
            text.contains(&format!("subject={cn}")),
            "{server_name}:\n{text}"
        );
    }
    // A ClientHello written 7 bytes at a time, 20 ms apart, still routes.
    let (stdout, stderr) = python(
        okd_node,
        SLOW_HELLO,
        &[&SHARED.to_string(), "6443", "api.test.lab.example.com", "7"],
    );
    assert_eq!(
        stdout, "test-master-0 6443 api.test.lab.example.com",
        "{stderr}"
    );

    // No cluster's name, no name at all, another port's name: reset, never guessed.
    for (url, resolve_name, port) in [
        (
            "https://api.prod.lab.example.com:6443/whoami",
            "api.prod.lab.example.com",
            6443,
        ),
        (
            "https://console.apps.okd.lab.example.com:6443/whoami",
            "console.apps.okd.lab.example.com",
            6443,
        ),
        (
            "http://api.okd.lab.example.com:80/whoami",
            "api.okd.lab.example.com",
            80,
        ),
    ] {
        let (code, body) = curl(okd_node, resolve_name, port, url);
        assert_ne!(code, Some(0), "{url} was routed: {body}");
    }
    let (code, body) = curl(
        okd_node,
        "x",
        6443,
        &format!("https://{SHARED}:6443/whoami"),
    );
    assert_ne!(
        code,
        Some(0),
        "an address (no server name) was routed: {body}"
    );
    // Plain HTTP to a TLS port is not a ClientHello.
    let (code, body) = curl(okd_node, "x", 6443, &format!("http://{SHARED}:6443/whoami"));
    assert_ne!(code, Some(0), "plain HTTP on 6443 was routed: {body}");
    // A client that says nothing is reset once the peek time is up.
    let started = Instant::now();
    let (stdout, stderr) = python(
        okd_node,
        "import socket,sys; s=socket.create_connection((sys.argv[1], 443), timeout=15)\n\
             try:\n  print(len(s.recv(1)))\nexcept ConnectionResetError:\n  print('reset')",
        &[&SHARED.to_string()],
    );
    let waited = started.elapsed();
    assert_eq!(stdout, "reset", "{stderr}");
    assert!(
        (Duration::from_secs(4)..Duration::from_secs(8)).contains(&waited),
        "reset after {waited:?}"
    );
    // Clients that send part of a ClientHello and then half-close are done with at once (no
    // verdict can come), and the router goes on routing the others.
    let (stdout, stderr) = python(
        okd_node,
        "import socket,sys,time\n\
             t=time.monotonic(); socks=[]\n\
             for _ in range(64):\n  s=socket.create_connection((sys.argv[1], 6443), timeout=10)\n  \
             s.sendall(bytes([0x16,3,1,2,0,1])); s.shutdown(socket.SHUT_WR); socks.append(s)\n\
             for s in socks:\n  try:\n    assert s.recv(1) == b''\n  except ConnectionResetError:\n    pass\n\
             print(round(time.monotonic()-t, 1))",
        &[&SHARED.to_string()],
    );
    let took: f64 = stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", stderr));
    assert!(took < 2.0, "half-closed partial hellos were held {took} s");
    assert_eq!(
        whoami(okd_node, "api.okd.lab.example.com", 6443),
        "okd-master-0 6443 api.okd.lab.example.com"
    );
    let metrics = lb_metrics(okd_node, &okd);
    for sample in [
        "okd_appliance_lb_unrouted_total{port=\"6443\",reason=\"unknown-name\"} 2",
        "okd_appliance_lb_unrouted_total{port=\"80\",reason=\"unknown-name\"} 1",
        "okd_appliance_lb_unrouted_total{port=\"6443\",reason=\"no-name\"} 1",
        "okd_appliance_lb_unrouted_total{port=\"6443\",reason=\"unparsable\"} 1",
        "okd_appliance_lb_unrouted_total{port=\"443\",reason=\"timeout\"} 1",
        "okd_appliance_lb_routed_total{port=\"6443\",cluster=\"okd\"}",
    ] {
        assert!(metrics.contains(sample), "no {sample:?} in\n{metrics}");
    }
    // okd's boot server shows okd's routed series only.
    assert!(!metrics.contains("cluster=\"test\""), "{metrics}");

    // The host's API on TCP: each cluster under its id, and a request that names none is
    // refused with the ids.
    let bearer = format!("Authorization: Bearer {API_TOKEN}");
    for (path, want) in [
        ("api/v1/clusters/test/status", "200"),
        ("api/v1/clusters/okd/status", "200"),
        ("api/v1/status", "409"),
    ] {
        let url = format!("https://{API_LISTEN}/{path}");
        let out = okd_node
            .exec([
                "curl",
                "-sk",
                "--max-time",
                "10",
                "-H",
                &bearer,
                "-w",
                "\n%{http_code}",
                &url,
            ])
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        assert_eq!(code, want, "{url}: {body}");
        if want == "200" {
            assert!(body.contains("master-0"), "{url}: {body}");
        }
    }
    let out = okd_node
        .exec([
            "curl",
            "-sk",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("https://{API_LISTEN}/api/v1/clusters/test/status"),
        ])
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401", "no token");

    // A reload that names a default cluster: what names no cluster goes there.
    write_host(dir.path(), &[&okd, &test], Some("test"));
    let state = dir.path().join("state");
    let out = appliance(["reload".as_ref(), "--state-dir".as_ref(), state.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "reload: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, body) = curl(
        okd_node,
        "x",
        6443,
        &format!("https://{SHARED}:6443/whoami"),
    );
    assert_eq!((code, body.as_str()), (Some(0), "test-master-0 6443 -"));
    assert_eq!(
        whoami(okd_node, "api.okd.lab.example.com", 6443),
        "okd-master-0 6443 api.okd.lab.example.com"
    );
    // A request head still unfinished when the peek time is up goes to the default cluster
    // with every byte read so far: the rest arrives after, and the backend reads it whole.
    let (stdout, stderr) = python(
        okd_node,
        "import socket,sys,time\n\
             s=socket.create_connection((sys.argv[1], 80), timeout=15)\n\
             s.sendall(b'GET /whoami HTTP/1.1\\r\\nHost: nowhere.example')\n\
             time.sleep(6)\n\
             s.sendall(b'\\r\\nConnection: close\\r\\n\\r\\n')\n\
             data=b''\n\
             while (chunk := s.recv(4096)):\n  data += chunk\n\
             print(data.split(b'\\r\\n\\r\\n', 1)[-1].decode())",
        &[&SHARED.to_string()],
    );
    assert_eq!(stdout, "test-master-0 80 nowhere.example", "{stderr}");
    app.assert_running()
        .expect("okd-appliance is still running");
}
