//! Helpers for the load-balancer end-to-end tests: a cluster of `lb_peer.py` backends behind a
//! running appliance, client connections that know which backend they reached and check every
//! byte both ways (CRC-32, as the peer computes it), and the `okd-appliance lb` admin commands.

use std::io::{self, BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::{Netns, Node, Process, Topology, appliance_bin, wait_until};

use crate::dns_support::{start_appliance_env, write_config};

/// The API frontend, on the services namespace's bridge address.
pub const API: &str = "10.99.0.1:6443";
/// Every socket operation of a test client is bounded by this.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// The CRC-32 (IEEE) that Python's `zlib.crc32` computes.
pub fn crc32(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, slot) in (0u32..).zip(t.iter_mut()) {
            *slot = (0..8).fold(i, |c, _| {
                if c & 1 == 1 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                }
            });
        }
        t
    });
    !data
        .iter()
        .fold(!0u32, |c, &b| table[usize::from((c as u8) ^ b)] ^ (c >> 8))
}

/// `len` bytes that differ with `seed` (xorshift), so each client sends its own data.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// One client connection through the load balancer to an `lb_peer.py` backend.
#[derive(Debug)]
pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// The backend's name, from its greeting.
    pub backend: String,
}

fn protocol_error(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl Conn {
    /// Connects to `addr` from the calling thread's namespace and reads the greeting.
    pub fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let mut conn = Conn {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            backend: String::new(),
        };
        conn.backend = conn.line()?;
        if conn.backend.is_empty() {
            return Err(protocol_error("no greeting".into()));
        }
        Ok(conn)
    }

    /// Connects from inside `ns` (the socket stays in `ns` and works from any thread).
    pub fn open(ns: &Netns, addr: SocketAddr) -> io::Result<Conn> {
        ns.run(|| Conn::connect(addr)).map_err(io::Error::other)?
    }

    /// The client's end of the connection: the address the balancer's debug lines name it by.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.writer.local_addr()
    }

    fn line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end().to_owned())
    }

    /// Sends `data` after `SINK`, half-closes (shutdown of the write side) and returns the
    /// backend's verdict line, read after that: `GOT LEN CRC`.
    pub fn sink(mut self, data: &[u8]) -> io::Result<String> {
        self.writer.write_all(b"SINK\n")?;
        self.writer.write_all(data)?;
        self.writer.shutdown(std::net::Shutdown::Write)?;
        let verdict = self.line()?;
        // Then the backend closes: EOF reaches us too.
        let mut rest = Vec::new();
        self.reader.read_to_end(&mut rest)?;
        if !rest.is_empty() {
            return Err(protocol_error(format!(
                "{} bytes after the verdict",
                rest.len()
            )));
        }
        Ok(verdict)
    }

    /// The backend still answers on this connection, and it is still the same backend.
    pub fn ping(&mut self) -> io::Result<()> {
        self.writer.write_all(b"PING\n")?;
        let expected = format!("PONG {}", self.backend);
        match self.line()? {
            reply if reply == expected => Ok(()),
            other => Err(protocol_error(format!("ping: {other:?}"))),
        }
    }

    /// Sends `data` with its CRC (the backend checks it) and checks the CRC of the same amount
    /// of fresh data the backend sends back.
    pub fn exchange(&mut self, data: &[u8]) -> io::Result<()> {
        let header = format!("PUT {} {:08x}\n", data.len(), crc32(data));
        self.writer.write_all(header.as_bytes())?;
        self.writer.write_all(data)?;
        let reply = self.line()?;
        let words: Vec<&str> = reply.split_whitespace().collect();
        let ["OK", len, crc] = words.as_slice() else {
            return Err(protocol_error(format!("put: {reply:?}")));
        };
        let len: usize = len.parse().map_err(|_| protocol_error(reply.clone()))?;
        let crc = u32::from_str_radix(crc, 16).map_err(|_| protocol_error(reply.clone()))?;
        let mut back = vec![0; len];
        self.reader.read_exact(&mut back)?;
        if len != data.len() || crc32(&back) != crc {
            return Err(protocol_error(format!(
                "{len} bytes back, CRC {:08x}, announced {crc:08x}",
                crc32(&back)
            )));
        }
        Ok(())
    }

    /// Waits at most `within` for the balancer to close this connection: how it ended (EOF or
    /// the error a read returned), or `None` when it is still open. Bytes that arrive meanwhile
    /// are read and ignored; an interrupted read is tried again.
    pub fn closed_within(&mut self, within: Duration) -> Option<Closed> {
        let deadline = Instant::now() + within;
        let mut buf = [0u8; 64];
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let _ = self
                .reader
                .get_ref()
                .set_read_timeout(Some(left.max(Duration::from_millis(1))));
            match self.reader.read(&mut buf) {
                Ok(0) => return Some(Closed::Eof),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Some(Closed::Error(e)),
            }
        }
        None
    }
}

/// How a connection the test held was closed.
#[derive(Debug)]
pub enum Closed {
    /// The balancer's FIN.
    Eof,
    /// A read failed (a reset, typically).
    Error(io::Error),
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Closed::Eof => f.write_str("EOF"),
            Closed::Error(e) => write!(f, "read error: {e}"),
        }
    }
}

/// Backends named `mstN` at 10.99.0.(11+N) running `lb_peer.py` on 6443, a client namespace,
/// and (once started) the appliance balancing the API over the ones its config lists.
pub struct LbCluster {
    // Drop order: processes first, then the namespaces they run in.
    pub appliance: Option<Process>,
    peers: Vec<Process>,
    pub client: Node,
    /// The peers' namespaces, kept for as long as the peers run.
    _nodes: Vec<Node>,
    topo: Topology,
    pub dir: tempfile::TempDir,
}

impl LbCluster {
    /// `backends` peers (mst0, mst1, ...), each up and accepting before this returns.
    pub fn new(backends: usize) -> LbCluster {
        let topo = Topology::new("lb").unwrap();
        let client = topo.add_node("cli", "10.99.0.99/24", None).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/lb_peer.py");
        let mut nodes = Vec::new();
        let mut peers = Vec::new();
        for i in 0..backends {
            let (name, ip) = (format!("mst{i}"), backend_ip(i));
            let node = topo.add_node(&name, &format!("{ip}/24"), None).unwrap();
            let peer = node
                .spawn(
                    &name,
                    ["python3", script.to_str().unwrap(), &name, &ip, "6443"],
                )
                .unwrap();
            node.wait_tcp(format!("{ip}:6443").parse().unwrap(), IO_TIMEOUT)
                .unwrap_or_else(|e| panic!("{e:#}\n{}", peer.log_tails()));
            nodes.push(node);
            peers.push(peer);
        }
        LbCluster {
            appliance: None,
            peers,
            client,
            _nodes: nodes,
            topo,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Writes (or rewrites) the config: masters `members` (indexes of the peers), the API
    /// frontend only, fast health checks, and `lb_extra` lines inside `lb:`.
    pub fn write_config(&self, members: &[usize], lb_extra: &str) -> PathBuf {
        let nodes: String = members
            .iter()
            .map(|&i| {
                format!(
                    "  - {{ name: mst{i}, role: master, mac: \"52:54:00:00:00:{:02x}\", ip: {} }}\n",
                    0x11 + i,
                    backend_ip(i)
                )
            })
            .collect();
        write_config(
            self.dir.path(),
            &format!(
                "version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
{nodes}install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
state_dir: {}
lb:
  health: {{ interval: 200ms, timeout: 150ms, rise: 2, fall: 2, control_plane_check: tcp }}
{lb_extra}listen:
  dns: []
  dhcp: []
  tftp: []
  http: []
  api: [\"{API}\"]
  machine_config: []
  ingress_https: []
  ingress_http: []
",
                self.state_dir().display()
            ),
        )
    }

    /// Starts the appliance on `config` and waits until the API backends of `members` are up.
    pub fn start(&mut self, config: &Path, members: &[usize]) {
        // The data path's debug lines say why each relay ended: a failing test shows them.
        let log = (
            "RUST_LOG".to_owned(),
            "info,okd_appliance::lb::proxy=debug".into(),
        );
        let appliance = start_appliance_env(self.topo.services(), config, &[log]);
        self.appliance = Some(appliance);
        for &i in members {
            self.wait_log(&up_line(i), Duration::from_secs(10));
        }
    }

    pub fn appliance(&self) -> &Process {
        self.appliance.as_ref().expect("started")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Waits for `line` in the appliance's log; panics with the log tails otherwise.
    pub fn wait_log(&self, line: &str, within: Duration) {
        assert!(
            wait_until(within, || self.appliance().stderr().contains(line)),
            "no {line:?} within {within:?}\n{}",
            self.appliance().log_tails()
        );
    }

    /// How often `line` is in the appliance's log.
    pub fn log_count(&self, line: &str) -> usize {
        self.appliance().stderr().matches(line).count()
    }

    /// A connection from the client namespace to the API frontend.
    pub fn open(&self) -> io::Result<Conn> {
        Conn::open(&self.client, API.parse().unwrap())
    }

    /// Opens connections until one reaches `backend` (at most 10); the others are closed.
    pub fn open_on(&self, backend: &str) -> Conn {
        for _ in 0..10 {
            let conn = self.open().expect("a connection through the balancer");
            if conn.backend == backend {
                return conn;
            }
        }
        panic!(
            "10 connections and none reached {backend}\n{}",
            self.lb(&["status"])
        );
    }

    /// `okd-appliance lb ARGS --state-dir STATE`: its stdout; panics when it fails.
    pub fn lb(&self, args: &[&str]) -> String {
        lb_admin(&self.state_dir(), args)
    }

    /// The `lb status` line of `backend` on the API frontend.
    pub fn status_of(&self, backend: &str) -> String {
        let status = self.lb(&["status"]);
        status
            .lines()
            .find(|l| l.starts_with(&format!("api {backend} ")))
            .unwrap_or_else(|| panic!("no api {backend} in\n{status}"))
            .to_owned()
    }

    /// Checks every peer is still running.
    pub fn assert_peers_running(&mut self) {
        for p in &mut self.peers {
            p.assert_running().unwrap();
        }
    }
}

/// The address of peer `i`.
pub fn backend_ip(i: usize) -> String {
    format!("10.99.0.{}", 11 + i)
}

/// The journal line of peer `i` coming up in the API pool.
pub fn up_line(i: usize) -> String {
    format!("mst{i}: api backend {}:6443 is up", backend_ip(i))
}

/// `okd-appliance lb ARGS --state-dir STATE`: its stdout; panics when it fails.
pub fn lb_admin(state: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(appliance_bin().unwrap())
        .arg("lb")
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The sum of `active=` over the API frontend's lines of an `lb status` reply.
pub fn api_active(status: &str) -> usize {
    status
        .lines()
        .filter(|l| l.starts_with("api "))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("active="))
                .and_then(|n| n.parse::<usize>().ok())
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_zlib() {
        // zlib.crc32(b"123456789") == 0xcbf43926, the standard check value.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }
}
