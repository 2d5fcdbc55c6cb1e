//! Helpers for the DHCP end-to-end tests (dhcp.rs): the cluster config, the appliance and its
//! lease journal, hook scripts that dump what a DHCP client was told, client commands that can
//! never touch the host's /etc, and a small pipelined DHCP client of our own (dhcproto on one
//! UDP socket bound to a node's interface) for load, crash and starvation tests.
//!
//! Every client runs inside its node namespace and a private mount and UTS namespace whose
//! /etc/resolv.conf is a scratch file: a hook (ours or, by mistake, the distribution's) that
//! rewrites resolv.conf or the host name only ever changes that scratch copy.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dhcproto::v4::{DhcpOption, Flags, Message, MessageType, OptionCode};
use dhcproto::{Decodable, Encodable};
use harness::{Netns, Process, appliance_bin, wait_until, write_install_dir};
use socket2::{Domain, Protocol, Socket, Type};

/// The appliance's address on the services bridge (the harness's default bridge address).
pub const SERVER: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
/// The default gateway the config announces (option 3); deliberately not the appliance.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 254);
pub const DOMAIN: &str = "okd.lab.example.com";
pub const MTU: u16 = 1400;
pub const LEASE_SECS: u64 = 3600;
/// How long the appliance may take from spawn to serving DHCP.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A node with a DHCP reservation.
#[derive(Debug, Clone, Copy)]
pub struct Reserved {
    pub name: &'static str,
    pub role: &'static str,
    pub mac: &'static str,
    pub ip: Ipv4Addr,
}

pub const MASTER0: Reserved = Reserved {
    name: "master-0",
    role: "master",
    mac: "52:54:00:00:00:02",
    ip: Ipv4Addr::new(10, 99, 0, 2),
};
pub const MASTER1: Reserved = Reserved {
    name: "master-1",
    role: "master",
    mac: "52:54:00:00:00:03",
    ip: Ipv4Addr::new(10, 99, 0, 3),
};
pub const MASTER2: Reserved = Reserved {
    name: "master-2",
    role: "master",
    mac: "52:54:00:00:00:04",
    ip: Ipv4Addr::new(10, 99, 0, 4),
};
pub const WORKER0: Reserved = Reserved {
    name: "worker-0",
    role: "worker",
    mac: "52:54:00:00:00:05",
    ip: Ipv4Addr::new(10, 99, 0, 5),
};
pub const NODES: [Reserved; 4] = [MASTER0, MASTER1, MASTER2, WORKER0];

/// The cluster as one test wants it.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub subnet: &'static str,
    /// `network.dhcp_pool` as (start, end).
    pub pool: Option<(Ipv4Addr, Ipv4Addr)>,
    pub nodes: Vec<Reserved>,
    /// `network.ntp` (the appliance by default).
    pub ntp: Vec<Ipv4Addr>,
    /// `network.domain_search`: extra search domains after the cluster domain.
    pub domain_search: Vec<String>,
    /// `listen.dhcp`, when not the default (0.0.0.0:67 on network.interface).
    pub dhcp_listen: Option<String>,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            subnet: "10.99.0.0/24",
            pool: None,
            nodes: NODES.to_vec(),
            ntp: vec![SERVER],
            domain_search: Vec::new(),
            dhcp_listen: None,
        }
    }
}

/// A test directory holding the config, the install dir, the state dir and scratch files.
#[derive(Debug)]
pub struct Site {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
}

impl Site {
    pub fn new(cluster: &Cluster) -> Site {
        let dir = tempfile::Builder::new()
            .prefix("okd-e2e-dhcp-")
            .tempdir()
            .expect("tempdir");
        write_install_dir(&dir.path().join("install_dir")).expect("install dir");
        let config = dir.path().join("okd.yml");
        let site = Site { dir, config };
        site.write_config(cluster);
        site
    }

    /// (Re)writes the config for `cluster`, keeping the state directory.
    pub fn write_config(&self, cluster: &Cluster) {
        let mut nodes = String::new();
        for n in &cluster.nodes {
            let _ = writeln!(
                nodes,
                "  - {{ name: {}, role: {}, mac: \"{}\", ip: {} }}",
                n.name, n.role, n.mac, n.ip
            );
        }
        let pool = cluster.pool.map_or_else(String::new, |(s, e)| {
            format!("  dhcp_pool: {{ start: {s}, end: {e} }}\n")
        });
        let list = |items: &[String]| items.join(", ");
        let ntp = list(
            &cluster
                .ntp
                .iter()
                .map(Ipv4Addr::to_string)
                .collect::<Vec<_>>(),
        );
        let search = list(&cluster.domain_search);
        let dhcp_listen = cluster
            .dhcp_listen
            .as_ref()
            .map_or_else(String::new, |a| format!("dhcp: [\"{a}\"], "));
        // DHCP follows network.interface (0.0.0.0:67 bound to br0); everything else is off, so
        // the test owns the only socket that matters.
        let text = format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
state_dir: {state}
network:
  interface: br0
  subnet: {subnet}
  gateway: {GATEWAY}
  appliance_ip: {SERVER}
  ntp: [{ntp}]
  domain_search: [{search}]
  mtu: {MTU}
  lease_time: 1h
{pool}nodes:
{nodes}install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
listen: {{ {dhcp_listen}dns: [], http: [], api: [], machine_config: [], ingress_https: [], ingress_http: [] }}
"#,
            state = self.state_dir().display(),
            subnet = cluster.subnet,
        );
        std::fs::write(&self.config, text).expect("write config");
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn journal_path(&self) -> PathBuf {
        self.state_dir().join("dhcp-leases")
    }

    /// The lease journal as it is on disk now (empty when it does not exist yet).
    pub fn journal(&self) -> Journal {
        Journal::parse(&std::fs::read_to_string(self.journal_path()).unwrap_or_default())
    }

    /// Starts `okd-appliance serve` in `ns` and waits until the DHCP service has opened its
    /// lease journal (it reads requests from then on).
    pub fn start_appliance(&self, ns: &Netns) -> Process {
        let bin = appliance_bin().expect("okd-appliance binary");
        let mut cmd = ns.exec([bin.as_os_str(), "serve".as_ref(), self.config.as_os_str()]);
        cmd.env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .current_dir(self.path());
        let mut p = Process::spawn("okd-appliance", cmd).expect("spawn okd-appliance");
        let ready = wait_until(START_TIMEOUT, || {
            !p.is_running() || p.stderr().contains("lease journal:")
        });
        p.assert_running().expect("okd-appliance is running");
        assert!(ready, "DHCP not serving in time\n{}", p.log_tails());
        p
    }
}

/// How often the appliance logged `dhcp ack IP to MAC` (its journal event, at INFO).
pub fn acks_logged(app: &Process, ip: Ipv4Addr, mac: &str) -> usize {
    let needle = format!("dhcp ack {ip} to {}", mac.to_ascii_lowercase());
    app.stderr().lines().filter(|l| l.contains(&needle)).count()
}

/// Waits until the appliance has logged at least `n` ACKs of `ip` to `mac`.
#[track_caller]
pub fn expect_acks_logged(app: &Process, ip: Ipv4Addr, mac: &str, n: usize) {
    let ok = wait_until(Duration::from_secs(3), || acks_logged(app, ip, mac) >= n);
    assert!(
        ok,
        "expected {n} × `dhcp ack {ip} to {mac}` in the appliance log, found {}\n{}",
        acks_logged(app, ip, mac),
        app.log_tails()
    );
}

/// CRC-32 (IEEE, as crc32fast computes it) of `data`.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One line of `<state_dir>/dhcp-leases`: `<ip> <mac> <expires> <crc>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub ip: Ipv4Addr,
    pub mac: String,
    /// Seconds since the epoch; 0 ends the lease (release or decline).
    pub expires: u64,
}

/// The lease journal: its valid lines in order, and the lines that failed to parse or whose
/// CRC did not match.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    pub lines: Vec<Line>,
    pub bad: Vec<String>,
}

impl Journal {
    pub fn parse(text: &str) -> Journal {
        let mut j = Journal::default();
        for raw in text.lines().filter(|l| !l.is_empty()) {
            match Self::parse_line(raw) {
                Some(line) => j.lines.push(line),
                None => j.bad.push(raw.to_owned()),
            }
        }
        j
    }

    fn parse_line(raw: &str) -> Option<Line> {
        let (body, crc) = raw.rsplit_once(' ')?;
        if u32::from_str_radix(crc, 16).ok()? != crc32(body.as_bytes()) {
            return None;
        }
        let mut f = body.split(' ');
        let line = Line {
            ip: f.next()?.parse().ok()?,
            mac: f.next()?.to_owned(),
            expires: f.next()?.parse().ok()?,
        };
        f.next().is_none().then_some(line)
    }

    /// Replays the journal: who holds which address at the end (ip → (mac, expires)), or the
    /// first moment two clients held one address at once. A grant's time is its expiry minus
    /// the lease time, so a grant to B while A's lease was still running is a double grant.
    pub fn replay(&self, lease_secs: u64) -> Result<HashMap<Ipv4Addr, (String, u64)>, String> {
        let mut held: HashMap<Ipv4Addr, (String, u64)> = HashMap::new();
        let mut by_mac: HashMap<String, Ipv4Addr> = HashMap::new();
        for (n, l) in self.lines.iter().enumerate() {
            if l.expires == 0 {
                if held.get(&l.ip).is_some_and(|(m, _)| *m == l.mac) {
                    held.remove(&l.ip);
                    by_mac.remove(&l.mac);
                }
                continue;
            }
            let granted = l.expires - lease_secs;
            if let Some((other, until)) = held.get(&l.ip)
                && *other != l.mac
                && *until > granted
            {
                return Err(format!(
                    "line {}: {} granted to {} at {granted} while {other} held it until {until}",
                    n + 1,
                    l.ip,
                    l.mac
                ));
            }
            if let Some(old) = by_mac.insert(l.mac.clone(), l.ip)
                && old != l.ip
            {
                held.remove(&old);
            }
            held.insert(l.ip, (l.mac.clone(), l.expires));
        }
        Ok(held)
    }

    /// The live holder of `ip` after replaying the whole journal.
    pub fn holder(&self, ip: Ipv4Addr) -> Option<String> {
        self.replay(LEASE_SECS)
            .ok()?
            .remove(&ip)
            .map(|(mac, _)| mac)
    }
}

/// A hook script for dhclient (`-sf`), udhcpc (`-s`) or dhcpcd (`-c`): every call dumps its
/// arguments and environment to `<out>/<seq>-<reason>.env`, and on a new lease it puts the
/// address on the interface as a real hook would (dhclient and udhcpc leave that to the hook;
/// without it a unicast renewal could not reach the client).
#[derive(Debug)]
pub struct Hook {
    pub path: PathBuf,
    out: PathBuf,
}

/// What one hook call saw: `reason` (dhclient, dhcpcd) or the first argument (udhcpc).
#[derive(Debug, Clone)]
pub struct HookCall {
    pub reason: String,
    pub env: HashMap<String, String>,
}

impl HookCall {
    /// Asserts `key=value` for every pair.
    #[track_caller]
    pub fn expect(&self, pairs: &[(&str, String)]) {
        let mut wrong = Vec::new();
        for (key, want) in pairs {
            let got = self.env.get(*key);
            if got != Some(want) {
                wrong.push(format!("{key}: want {want:?}, got {got:?}"));
            }
        }
        assert!(
            wrong.is_empty(),
            "hook call {} saw wrong values:\n  {}\nenvironment: {:#?}",
            self.reason,
            wrong.join("\n  "),
            self.sorted_env()
        );
    }

    fn sorted_env(&self) -> Vec<String> {
        let mut v: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        v.sort();
        v
    }
}

impl Hook {
    pub fn new(dir: &Path, name: &str) -> Hook {
        let out = dir.join(format!("{name}-calls"));
        std::fs::create_dir_all(&out).expect("hook output dir");
        let path = dir.join(format!("{name}-hook.sh"));
        // dhclient runs its script with a cleared environment: the output directory is baked
        // in. `env` never prints a value with a newline here (no option carries one).
        let script = format!(
            r#"#!/bin/sh
out='{out}'
why="${{reason:-$1}}"
n=$(ls "$out" | wc -l)
{{ echo "ARG1=$1"; env; }} > "$out/.tmp"
case "$why" in
  BOUND|RENEW|REBIND|REBOOT)
    ip addr replace "$new_ip_address/$new_subnet_mask" dev "$interface" 2>/dev/null ;;
  bound|renew)
    ip addr replace "$ip/$subnet" dev "$interface" 2>/dev/null ;;
esac
# Last: a call the test sees has had its effect (the address is on the interface).
mv "$out/.tmp" "$out/$(printf %03d "$n")-$why.env"
exit 0
"#,
            out = out.display()
        );
        std::fs::write(&path, script).expect("write hook");
        let mut perm = std::fs::metadata(&path).expect("hook").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&path, perm).expect("chmod hook");
        Hook { path, out }
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<HookCall> {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.out)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        names.retain(|p| p.extension().is_some_and(|e| e == "env"));
        names.sort();
        names
            .iter()
            .filter_map(|p| {
                let stem = p.file_stem()?.to_str()?;
                let reason = stem.split_once('-')?.1.to_owned();
                let text = std::fs::read_to_string(p).ok()?;
                let env = text
                    .lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect();
                Some(HookCall { reason, env })
            })
            .collect()
    }

    /// Waits for a call with one of `reasons` after the first `skip` calls.
    pub fn wait(&self, skip: usize, reasons: &[&str], timeout: Duration) -> Option<HookCall> {
        let mut found = None;
        wait_until(timeout, || {
            found = self
                .calls()
                .into_iter()
                .skip(skip)
                .find(|c| reasons.contains(&c.reason.as_str()));
            found.is_some()
        });
        found
    }

    /// The reasons of every call so far, for messages.
    pub fn reasons(&self) -> Vec<String> {
        self.calls().into_iter().map(|c| c.reason).collect()
    }
}

/// A command that runs `argv` in `ns` inside a private mount and UTS namespace where
/// /etc/resolv.conf is `scratch` (created empty) and /run and /var/lib/dhcpcd are private
/// tmpfs mounts (dhcpcd keeps its pid file, control socket and leases there). Whatever a
/// client or a hook does to resolv.conf, the host name or those directories stays in here.
pub fn guarded(ns: &Netns, scratch: &Path, argv: &[&str]) -> Command {
    if !scratch.exists() {
        std::fs::write(scratch, "").expect("scratch resolv.conf");
    }
    let setup = "set -e; mount --bind \"$0\" /etc/resolv.conf; \
                 mount -t tmpfs okd-e2e /run; mkdir -p /run/dhcpcd; \
                 if [ -d /var/lib/dhcpcd ]; then mount -t tmpfs okd-e2e /var/lib/dhcpcd; fi; \
                 exec \"$@\"";
    let scratch = scratch.to_str().expect("UTF-8 path");
    let mut full: Vec<&str> = vec![
        "unshare",
        "--mount",
        "--uts",
        "--propagation",
        "private",
        "sh",
        "-c",
        setup,
        scratch,
    ];
    full.extend_from_slice(argv);
    let mut cmd = ns.exec(full);
    // A client's hook gets a small, known environment (udhcpc passes its own on).
    cmd.env_clear().env(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    cmd
}

/// A command run inside the mount and network namespaces of the running process `pid` (to
/// reach a dhcpcd daemon's control socket in its private /run).
pub fn inside(pid: u32, argv: &[&str]) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg("-t")
        .arg(pid.to_string())
        .args(["--mount", "--net", "--uts"])
        .args(argv)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        );
    cmd
}

/// Runs `cmd` as a guarded process and waits (bounded) for it to exit successfully.
#[track_caller]
pub fn run_bounded(label: &str, cmd: Command, timeout: Duration) -> Process {
    let mut p = Process::spawn(label, cmd).expect("spawn");
    let status = p.wait_timeout(timeout).expect("wait");
    match status {
        Some(s) if s.success() => p,
        Some(s) => panic!("{label} failed ({s})\n{}", p.log_tails()),
        None => panic!("{label} still running after {timeout:?}\n{}", p.log_tails()),
    }
}

/// A tiny xorshift generator: random MACs and transaction ids without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn seeded() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Rng(t ^ (u64::from(std::process::id()) << 32) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// `count` distinct locally administered unicast MACs starting with `02:<tag>`.
    pub fn macs(&mut self, tag: u8, count: usize) -> Vec<[u8; 6]> {
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let r = self.next().to_be_bytes();
            let mac = [0x02, tag, r[0], r[1], r[2], r[3]];
            if seen.insert(mac) {
                out.push(mac);
            }
        }
        out
    }
}

pub fn mac_text(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A UDP socket on port 68 of `iface` in `ns`, able to broadcast: many DHCP clients at once,
/// told apart by chaddr and xid (the server broadcasts every reply to a client without an
/// address, so they all arrive here).
pub fn client_socket(ns: &Netns, iface: &str) -> UdpSocket {
    let iface = iface.to_owned();
    ns.run(move || -> std::io::Result<UdpSocket> {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_reuse_address(true)?;
        s.set_broadcast(true)?;
        s.bind_device(Some(iface.as_bytes()))?;
        s.set_recv_buffer_size(4 << 20)?;
        s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68).into())?;
        Ok(s.into())
    })
    .expect("enter namespace")
    .expect("DHCP client socket")
}

fn base_message(mac: &[u8; 6], xid: u32, kind: MessageType) -> Message {
    let mut m = Message::new_with_id(
        xid,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        mac,
    );
    m.set_flags(Flags::default().set_broadcast());
    m.opts_mut().insert(DhcpOption::MessageType(kind));
    m.opts_mut().insert(DhcpOption::ParameterRequestList(vec![
        OptionCode::SubnetMask,
        OptionCode::Router,
        OptionCode::DomainNameServer,
        OptionCode::DomainName,
    ]));
    m
}

pub fn discover(mac: &[u8; 6], xid: u32) -> Message {
    base_message(mac, xid, MessageType::Discover)
}

/// A REQUEST in SELECTING state (with the server identifier) or, with `server` `None`, in
/// INIT-REBOOT state.
pub fn request(mac: &[u8; 6], xid: u32, ip: Ipv4Addr, server: Option<Ipv4Addr>) -> Message {
    let mut m = base_message(mac, xid, MessageType::Request);
    m.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
    if let Some(s) = server {
        m.opts_mut().insert(DhcpOption::ServerIdentifier(s));
    }
    m
}

pub fn send(sock: &UdpSocket, m: &Message) {
    let bytes = m.to_vec().expect("encode");
    // A full send buffer under load is a lost packet, like on a real network: retries cover it.
    let _ = sock.send_to(&bytes, SocketAddrV4::new(Ipv4Addr::BROADCAST, 67));
}

/// The next DHCP reply within `timeout`, or `None`.
pub fn recv(sock: &UdpSocket, timeout: Duration) -> Option<Message> {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 2048];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        match sock.recv_from(&mut buf) {
            Ok((n, _)) => {
                if let Ok(m) = Message::from_bytes(&buf[..n])
                    && m.opcode() == dhcproto::v4::Opcode::BootReply
                {
                    return Some(m);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None;
            }
            Err(_) => return None,
        }
    }
}

/// How the pipelined clients pace themselves.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Clients in flight at once.
    pub window: usize,
    /// Time before a message is sent again.
    pub retry: Duration,
    /// Sends of one message before the client gives up.
    pub tries: u32,
}

/// What a run of pipelined clients saw.
#[derive(Debug, Default)]
pub struct DoraStats {
    pub started: usize,
    /// Every OFFER's yiaddr, with the client's MAC.
    pub offers: Vec<([u8; 6], Ipv4Addr)>,
    pub naks: usize,
    pub gave_up: usize,
}

struct InFlight {
    mac: [u8; 6],
    message: Message,
    requesting: bool,
    sent: Instant,
    tries: u32,
}

/// Runs DISCOVER-OFFER-REQUEST-ACK for every MAC in `macs`, `pace.window` at a time, until all
/// are done, `stop` is set or `deadline` passes. Every ACK is pushed to `acked` at once, so
/// another thread can watch the count grow.
pub fn dora(
    sock: &UdpSocket,
    macs: &[[u8; 6]],
    pace: Pace,
    stop: &AtomicBool,
    deadline: Instant,
    acked: &Mutex<Vec<([u8; 6], Ipv4Addr)>>,
) -> DoraStats {
    let mut stats = DoraStats::default();
    let mut flight: HashMap<u32, InFlight> = HashMap::new();
    let xid_base = (Rng::seeded().next() as u32) & 0xfff0_0000;
    let mut next = 0usize;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        while flight.len() < pace.window && next < macs.len() {
            let xid = xid_base.wrapping_add(next as u32);
            let mac = macs[next];
            let message = discover(&mac, xid);
            send(sock, &message);
            flight.insert(
                xid,
                InFlight {
                    mac,
                    message,
                    requesting: false,
                    sent: Instant::now(),
                    tries: 1,
                },
            );
            next += 1;
            stats.started += 1;
        }
        if flight.is_empty() {
            break;
        }
        if let Some(reply) = recv(sock, Duration::from_millis(20)) {
            let xid = reply.xid();
            let Some(c) = flight.get_mut(&xid) else {
                continue;
            };
            if reply.chaddr().get(..6) != Some(&c.mac[..]) {
                continue;
            }
            match reply.opts().msg_type() {
                Some(MessageType::Offer) if !c.requesting => {
                    let ip = reply.yiaddr();
                    stats.offers.push((c.mac, ip));
                    let server = match reply.opts().get(OptionCode::ServerIdentifier) {
                        Some(DhcpOption::ServerIdentifier(s)) => *s,
                        _ => SERVER,
                    };
                    c.message = request(&c.mac, xid, ip, Some(server));
                    c.requesting = true;
                    c.tries = 1;
                    c.sent = Instant::now();
                    send(sock, &c.message);
                }
                Some(MessageType::Ack) if c.requesting => {
                    acked
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((c.mac, reply.yiaddr()));
                    flight.remove(&xid);
                }
                Some(MessageType::Nak) => {
                    stats.naks += 1;
                    flight.remove(&xid);
                }
                _ => {}
            }
        }
        let now = Instant::now();
        let mut dead = Vec::new();
        for (xid, c) in &mut flight {
            if now.duration_since(c.sent) >= pace.retry {
                if c.tries >= pace.tries {
                    dead.push(*xid);
                } else {
                    c.tries += 1;
                    c.sent = now;
                    send(sock, &c.message);
                }
            }
        }
        stats.gave_up += dead.len();
        for xid in dead {
            flight.remove(&xid);
        }
    }
    stats
}
