//! The API pool's HTTPS health checks against real TLS servers in node namespaces (python3's
//! http.server behind `ssl`, certificates made with the openssl command): a backend whose
//! `/readyz` answers 500 (an API server shutting down) leaves the pool though its port still
//! accepts TLS connections, and comes back on 200; with `lb.health.ca_file` a backend whose
//! certificate does not chain to that CA never enters the pool. A third master that accepts
//! connections and never answers (probes that time out) does not slow the verdicts on the others.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::{Netns, Process, Topology, require_root, require_tools, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::dns_support::{start_appliance, write_config};
use crate::support::{run_ok, spawn_listening};

const DOMAIN: &str = "okd.lab.example.com";

/// An HTTPS server whose `/readyz` answers the status code in the file `readyz` and whose
/// `/whoami` answers its name.
const SERVER: &str = r#"
import http.server, os, ssl, sys
port, bind, root, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/readyz":
            code = int(open(os.path.join(root, "readyz")).read().strip())
            body = b"ok" if code == 200 else b"shutting down"
        elif self.path == "/whoami":
            code, body = 200, open(os.path.join(root, "name"), "rb").read()
        else:
            code, body = 404, b"not found"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
server = http.server.ThreadingHTTPServer((bind, port), Handler)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

/// A CA and a serving certificate for `api-int.DOMAIN` signed by it, as the cluster's
/// installer makes them; returns (ca.pem, cert.pem, key.pem).
fn pki(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let p = |f: &str| dir.join(format!("{name}-{f}"));
    let s = |f: &str| p(f).to_str().unwrap().to_owned();
    run_ok(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name} test CA"),
            "-keyout",
            &s("ca.key"),
            "-out",
            &s("ca.pem"),
        ],
    );
    run_ok(
        "openssl",
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN=api-int.{DOMAIN}"),
            "-keyout",
            &s("key.pem"),
            "-out",
            &s("csr.pem"),
        ],
    );
    std::fs::write(
        p("ext"),
        format!("subjectAltName=DNS:api-int.{DOMAIN}\nextendedKeyUsage=serverAuth\n"),
    )
    .unwrap();
    run_ok(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            &s("csr.pem"),
            "-CA",
            &s("ca.pem"),
            "-CAkey",
            &s("ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &s("ext"),
            "-out",
            &s("cert.pem"),
        ],
    );
    (p("ca.pem"), p("cert.pem"), p("key.pem"))
}

fn https_backend(ns: &Netns, ip: &str, root: &Path, cert: &Path, key: &Path) -> Process {
    let script = root.join("server.py");
    std::fs::write(&script, SERVER).unwrap();
    let argv = [&script, Path::new("6443"), Path::new(ip), root, cert, key];
    let argv = std::iter::once(Path::new("python3")).chain(argv);
    spawn_listening(ns, "https", argv, &format!("{ip}:6443"))
}

fn config(dir: &Path, ca: Option<&Path>) -> PathBuf {
    let ca = ca.map_or(String::new(), |c| format!(", ca_file: {}", c.display()));
    write_config(
        dir,
        &format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
  - {{ name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }}
  - {{ name: mst1, role: master, mac: "52:54:00:00:00:12", ip: 10.99.0.12 }}
  - {{ name: mst9, role: master, mac: "52:54:00:00:00:19", ip: 10.99.0.19 }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
lb:
  # mst9 accepts connections and never answers: its probes wait out the whole timeout, which
  # must not slow the verdict on the others (the limits below, well under its timeout).
  health: {{ interval: 300ms, timeout: 3s, rise: 2, fall: 2{ca} }}
listen:
  dns: []
  dhcp: []
  tftp: []
  http: []
  api: ["10.99.0.1:6443"]
  machine_config: []
  ingress_https: []
  ingress_http: []
"#
        ),
    )
}

/// `curl -k https://.../whoami` through the load balancer.
fn whoami(client: &Netns) -> Option<String> {
    let out = client
        .exec([
            "curl",
            "-skf",
            "--max-time",
            "3",
            "https://10.99.0.1:6443/whoami",
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn readyz_500_takes_an_api_server_out_and_a_ca_is_enforced() {
    if !require_root() || !require_tools(&["python3", "curl", "openssl"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = pki(dir.path(), "cluster");
    let (other_ca, _, _) = pki(dir.path(), "other");
    let topo = Topology::new("tls").unwrap();
    let client = topo.add_node("cli", "10.99.0.99/24", None).unwrap();
    let mut servers = Vec::new();
    for (name, ip) in [("mst0", "10.99.0.11"), ("mst1", "10.99.0.12")] {
        let node = topo.add_node(name, &format!("{ip}/24"), None).unwrap();
        let root = dir.path().join(name);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("name"), name).unwrap();
        std::fs::write(root.join("readyz"), "200").unwrap();
        servers.push((https_backend(&node, ip, &root, &cert, &key), node));
    }
    let mute = topo.add_node("mst9", "10.99.0.19/24", None).unwrap();
    let listener = spawn_listening(
        &mute,
        "mute",
        [
            "python3",
            "-c",
            "import socket, time\n\
             s = socket.socket()\n\
             s.bind(('10.99.0.19', 6443))\n\
             s.listen(128)\n\
             time.sleep(600)",
        ],
        "10.99.0.19:6443",
    );

    // Verification against a CA that did not sign the nodes' certificates: nobody comes up.
    let config = config(dir.path(), Some(&other_ca));
    let app = start_appliance(topo.services(), &config);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !app.stderr().contains("api backend 10.99.0.11:6443 is up"),
        "a certificate from another CA was accepted\n{}",
        app.log_tails()
    );
    assert_eq!(whoami(&client), None);

    // The right CA (through a reload): both come up and share the load.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(other_ca.to_str().unwrap(), ca.to_str().unwrap());
    std::fs::write(&config, text).unwrap();
    kill(Pid::from_raw(app.pid() as i32), Signal::SIGHUP).unwrap();
    for name in ["mst0", "mst1"] {
        let ip = if name == "mst0" {
            "10.99.0.11"
        } else {
            "10.99.0.12"
        };
        assert!(
            wait_until(Duration::from_secs(5), || app
                .stderr()
                .contains(&format!("{name}: api backend {ip}:6443 is up"))),
            "{}",
            app.log_tails()
        );
    }
    let answers: Vec<String> = (0..6).filter_map(|_| whoami(&client)).collect();
    assert!(
        answers.iter().any(|a| a == "mst0") && answers.iter().any(|a| a == "mst1"),
        "{answers:?}"
    );

    // mst1's API server starts shutting down: /readyz 500 while TLS connects still succeed.
    std::fs::write(dir.path().join("mst1/readyz"), "500").unwrap();
    let changed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(3), || app
            .stderr()
            .contains("mst1: api backend 10.99.0.12:6443 is down")),
        "{}",
        app.log_tails()
    );
    // fall (2) x interval (300 ms) and a little (two HTTPS checks, this test's polling, a busy
    // machine): a checker that waited for mst9's 3 s timeout between rounds would take at
    // least 3.3 s.
    let took = changed.elapsed();
    assert!(took < Duration::from_millis(2500), "down after {took:?}");
    for _ in 0..6 {
        assert_eq!(whoami(&client).as_deref(), Some("mst0"));
    }
    // Ready again: back after `rise` checks.
    std::fs::write(dir.path().join("mst1/readyz"), "200").unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || app
            .stderr()
            .rsplit_once("mst1: api backend 10.99.0.12:6443 is down")
            .is_some_and(
                |(_, after)| after.contains("mst1: api backend 10.99.0.12:6443 is up")
            )),
        "{}",
        app.log_tails()
    );
    drop((servers, listener));
}
