//! Helpers shared by the DNS end-to-end modules: the appliance started in a services namespace
//! and waited for, `dig`/`kdig` run from node namespaces with their output parsed into sections,
//! and a small UDP/TCP DNS client (hickory-proto for the messages, std sockets for transport)
//! for tests that need exact header bits and many queries.
//!
//! Every wait is bounded; every process is a harness [`Process`] (killed by PID on drop).

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr as _;
use std::time::Duration;

use harness::{Netns, Process, appliance_bin, wait_until, write_install_dir};
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};

/// How long a started daemon gets to say it is ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-exchange timeout of the built-in client.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Starts `okd-appliance serve CONFIG` inside `ns` and waits until it logs `ready`.
pub fn start_appliance(ns: &Netns, config: &Path) -> Process {
    start_appliance_env(ns, config, &[])
}

/// [`start_appliance`] with more environment variables (`OKD_VIRSH` for a test's libvirtd).
pub fn start_appliance_env(
    ns: &Netns,
    config: &Path,
    env: &[(String, std::ffi::OsString)],
) -> Process {
    let bin = appliance_bin().expect("okd-appliance binary");
    let mut cmd = ns.exec([bin.as_os_str(), "serve".as_ref(), config.as_os_str()]);
    cmd.env("RUST_LOG", "info").env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(dir) = config.parent() {
        cmd.current_dir(dir);
    }
    let mut p = Process::spawn("okd-appliance", cmd).expect("spawn okd-appliance");
    let ready = wait_until(START_TIMEOUT, || {
        !p.is_running() || p.stderr().lines().any(|l| l.ends_with(" ready"))
    });
    p.assert_running().expect("okd-appliance is running");
    assert!(ready, "okd-appliance not ready in time\n{}", p.log_tails());
    p
}

/// Writes a fresh `install_dir` next to `config` and the config text itself.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    write_install_dir(&dir.join("install_dir")).expect("install dir");
    let path = dir.join("okd.yml");
    // Leases and the admin socket stay in the test's directory, never in /var/lib.
    let text = if text.contains("\nstate_dir:") {
        text.to_owned()
    } else {
        format!("{text}\nstate_dir: {}\n", dir.join("state").display())
    };
    std::fs::write(&path, text).expect("write config");
    path
}

/// The `listen:` section that puts DNS on `dns` and every other service on loopback port 0
/// of the services namespace (DHCP off), so nothing but DNS is reachable on the bridge.
pub fn listen_section(dns: &[&str]) -> String {
    let dns: Vec<String> = dns.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        // The load balancer stays off: DNS tests need no health checks probing the nodes.
        "listen:\n  dns: [{}]\n  dhcp: []\n  tftp: []\n  http: [\"127.0.0.1:0\"]\n  api: []\n  \
         machine_config: []\n  ingress_https: []\n  ingress_http: []\n",
        dns.join(", ")
    )
}

/// One resource record as `dig`/`kdig` print it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rr {
    pub owner: String,
    pub ttl: u32,
    pub rtype: String,
    pub rdata: String,
}

/// One reply as printed by `dig` or `kdig`.
#[derive(Debug, Clone, Default)]
pub struct Printed {
    pub status: String,
    pub flags: Vec<String>,
    /// `(version, udp payload size)` from the OPT pseudo-section.
    pub edns: Option<(u8, u16)>,
    pub answer: Vec<Rr>,
    pub authority: Vec<Rr>,
    pub additional: Vec<Rr>,
}

impl Printed {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// The rdata of every answer record of type `rtype`, sorted.
    pub fn rdata(&self, rtype: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .answer
            .iter()
            .filter(|r| r.rtype == rtype)
            .map(|r| r.rdata.clone())
            .collect();
        v.sort();
        v
    }
}

/// The output of one `dig`/`kdig` run: every reply it printed, in order (dig prints two after a
/// truncated reply when it retries over TCP without `+ignore`).
#[derive(Debug, Clone)]
pub struct DigRun {
    pub replies: Vec<Printed>,
    pub stdout: String,
    /// kdig reports a failed transfer here.
    pub stderr: String,
}

impl DigRun {
    /// The last reply printed (the one a client would use).
    pub fn last(&self) -> &Printed {
        self.replies
            .last()
            .unwrap_or_else(|| panic!("no reply printed:\n{}", self.stdout))
    }
}

fn field_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let lower = line.to_ascii_lowercase();
    let at = lower.find(key)? + key.len();
    let rest = line[at..].trim_start();
    let end = rest.find([',', ';']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// Parses `dig` or `kdig` default output (both print a `->>HEADER<<-` line per reply, flags,
/// an EDNS pseudo-section, and record sections separated by blank lines).
pub fn parse_dig(stdout: &str) -> Vec<Printed> {
    #[derive(Clone, Copy)]
    enum Sect {
        None,
        Answer,
        Authority,
        Additional,
    }
    let mut replies: Vec<Printed> = Vec::new();
    let mut sect = Sect::None;
    for line in stdout.lines() {
        let t = line.trim();
        if t.contains("->>HEADER<<-") {
            replies.push(Printed {
                status: field_after(t, "status:").unwrap_or("").to_owned(),
                ..Printed::default()
            });
            sect = Sect::None;
            continue;
        }
        let Some(cur) = replies.last_mut() else {
            continue;
        };
        let lower = t.to_ascii_lowercase();
        if lower.starts_with(";; flags:") {
            cur.flags = field_after(t, "flags:")
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_owned)
                .collect();
        } else if lower.starts_with("; edns: version:") || lower.starts_with(";; version:") {
            // dig: `; EDNS: version: 0, flags:; udp: 1232`; kdig: `;; Version: 0; flags: ;
            // UDP size: 1232 B; ext-rcode: NOERROR`.
            let version = field_after(t, "version:").and_then(|v| v.parse().ok());
            let udp = field_after(t, "udp:")
                .or_else(|| field_after(t, "udp size:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok());
            if let (Some(v), Some(u)) = (version, udp) {
                cur.edns = Some((v, u));
            }
        } else if t.starts_with(";; ANSWER SECTION") {
            sect = Sect::Answer;
        } else if t.starts_with(";; AUTHORITY SECTION") {
            sect = Sect::Authority;
        } else if t.starts_with(";; ADDITIONAL SECTION") {
            sect = Sect::Additional;
        } else if t.is_empty() || t.starts_with(';') {
            sect = Sect::None;
        } else if let Some(rr) = parse_rr(t) {
            match sect {
                Sect::Answer => cur.answer.push(rr),
                Sect::Authority => cur.authority.push(rr),
                Sect::Additional => cur.additional.push(rr),
                Sect::None => {}
            }
        }
    }
    replies
}

/// `owner ttl class type rdata...` (whitespace separated, rdata re-joined with single spaces).
pub fn parse_rr(line: &str) -> Option<Rr> {
    let mut it = line.split_whitespace();
    let owner = it.next()?.to_owned();
    let ttl = it.next()?.parse().ok()?;
    let _class = it.next()?;
    let rtype = it.next()?.to_owned();
    let rdata = it.collect::<Vec<_>>().join(" ");
    Some(Rr {
        owner,
        ttl,
        rtype,
        rdata,
    })
}

/// Runs `tool @server ARGS` (`tool` is `dig` or `kdig`) inside `ns`, one try with a short
/// timeout, and parses what it printed.
pub fn dig_in(ns: &Netns, tool: &str, server: IpAddr, args: &[&str]) -> DigRun {
    let bounded: &[&str] = if tool == "kdig" {
        &["+time=2", "+retry=0"]
    } else {
        &["+time=2", "+tries=1"]
    };
    let out = dig_command(ns, tool, server, args, bounded)
        .output()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    DigRun {
        replies: parse_dig(&stdout),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The command line of [`dig_in`], for running it in the background.
pub fn dig_command(
    ns: &Netns,
    tool: &str,
    server: IpAddr,
    args: &[&str],
    bounded: &[&str],
) -> Command {
    let mut argv: Vec<String> = vec![tool.to_owned(), format!("@{server}")];
    argv.extend(bounded.iter().map(|s| (*s).to_owned()));
    argv.extend(args.iter().map(|s| (*s).to_owned()));
    ns.exec(argv)
}

/// A query message: `name` kept as written (case included), RD set, EDNS with `edns` as the
/// payload size when given.
pub fn query_message(id: u16, name: &str, qtype: RecordType, edns: Option<u16>) -> Message {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    let name = Name::from_str(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    m.add_query(Query::query(name, qtype));
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        m.set_edns(e);
    }
    m
}

/// Sends `packet` over UDP from `socket` (already inside a namespace) to `server` and waits
/// for the reply with the same ID; one retry. `None` when nothing came back.
pub fn udp_exchange(socket: &UdpSocket, server: SocketAddr, packet: &[u8]) -> Option<Vec<u8>> {
    socket.set_read_timeout(Some(IO_TIMEOUT)).ok()?;
    let mut buf = vec![0u8; 65_535];
    for _attempt in 0..2 {
        socket.send_to(packet, server).ok()?;
        // Bounded: at most 16 stray datagrams per attempt, each within the read timeout.
        for _ in 0..16 {
            match socket.recv_from(&mut buf) {
                Ok((n, from)) if from == server && n >= 2 && buf[..2] == packet[..2] => {
                    return Some(buf[..n].to_vec());
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
    None
}

/// One query over TCP (a fresh connection), bounded by [`IO_TIMEOUT`].
pub fn tcp_exchange(server: SocketAddr, packet: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&server, IO_TIMEOUT)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut framed = (packet.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(packet);
    s.write_all(&framed)?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut reply)?;
    Ok(reply)
}

/// Binds a UDP socket for talking to `server` (same address family, port chosen by the kernel).
/// Call inside [`Netns::run`].
pub fn client_socket(server: SocketAddr) -> UdpSocket {
    let bind: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    UdpSocket::bind(bind).expect("bind client socket")
}

/// Polls `server` from inside `ns` with a UDP query for `name`/`qtype` until a reply satisfies
/// `accept` (bounded by [`START_TIMEOUT`]).
pub fn wait_reply(
    ns: &Netns,
    server: SocketAddr,
    name: &str,
    qtype: RecordType,
    accept: impl Fn(&Message) -> bool + Send + Sync,
) -> bool {
    let packet = query_message(1, name, qtype, None)
        .to_vec()
        .expect("encode");
    ns.run(|| {
        let socket = client_socket(server);
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        wait_until(START_TIMEOUT, || {
            let mut buf = [0u8; 4096];
            socket.send_to(&packet, server).is_ok()
                && socket
                    .recv_from(&mut buf)
                    .is_ok_and(|(n, _)| Message::from_vec(&buf[..n]).is_ok_and(|m| accept(&m)))
        })
    })
    .expect("enter namespace")
}
