//! Entry points shared by the cargo-fuzz targets (tests/fuzz) and the tests that replay their
//! saved corpora, so a crash found by the fuzzer stays a regression test.
//!
//! Compiled only for tests and with the `fuzzing` feature (which `tests/fuzz/Cargo.toml` turns
//! on), so the product carries none of it; the unit tests here replay every saved corpus on
//! every test run. `served` holds the targets that go through the listeners themselves.
//!
//! Architecture invariant: each function takes untrusted bytes and must never panic; they
//! assert the properties a reply must have (a DNS reply has the query's ID, QR set, every
//! record it counts, and over UDP at most 1232 bytes), so the fuzzer finds wrong answers too.

use std::path::Path;
use std::sync::OnceLock;

use crate::config;
use crate::dns::authority::Authority;
use crate::dns::respond::{Action, Context, Transport, respond};
use crate::dns::wire::{MAX_NAME, parse_query};
use crate::plan::Plan;

pub mod served;

/// A cluster with every record kind: wildcards, CNAMEs, SRV, IPv6, split reverse zones.
const CLUSTER: &str = r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network:
  subnet: 10.1.16.0/20
  appliance_ip: 10.1.16.1
  ipv6: { subnet: "fd00:10::/62", appliance_ip: "fd00:10::1" }
  upstream_dns: [192.0.2.53]
nodes:
  - { name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.1.16.7 }
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.1.17.2, ipv6: "fd00:10::2" }
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.1.31.5, ipv6: "fd00:10:0:3::5" }
install: { ignition_dir: ./i, artifacts_dir: ./a }
dns:
  legacy_etcd: true
  records:
    - { name: registry, type: A, value: 10.1.16.9 }
    - { name: nfs, type: CNAME, value: registry }
    - { name: loop-a, type: CNAME, value: loop-b }
    - { name: loop-b, type: CNAME, value: loop-a }
    - { name: mail, type: MX, value: 10 registry }
    - { name: "*.wild", type: TXT, value: "wildcard" }
"#;

/// The plan of [`CLUSTER`], derived once.
pub(crate) fn cluster_plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| {
        let loaded = config::parse(
            CLUSTER,
            "fuzz.yml",
            Path::new("."),
            config::InstallCheck::Skip,
        )
        .unwrap_or_else(|e| panic!("{}", e.render(config::RenderStyle::Plain)));
        Plan::derive(&loaded.config, 1)
    })
}

fn authority() -> &'static Authority {
    static AUTHORITY: OnceLock<Authority> = OnceLock::new();
    AUTHORITY.get_or_init(|| Authority::from_plan(cluster_plan()))
}

/// One DNS request through the responder, over UDP and TCP, with and without recursion.
pub fn dns_request(data: &[u8]) {
    let authority = authority();
    let mut lower = [0u8; MAX_NAME];
    let mut buf = Vec::new();
    for transport in [Transport::Udp, Transport::Tcp] {
        for (recursion, transfer_allowed) in [(false, false), (true, true)] {
            let ctx = Context {
                authority,
                transport,
                recursion,
                transfer_allowed,
            };
            match respond(data, &ctx, &mut lower, &mut buf) {
                Action::Reply { len, .. } => check_reply(data, &buf[..len], transport),
                Action::Forward(_) => assert!(recursion, "forwarded without recursion"),
                Action::Transfer(_) => assert!(transfer_allowed && transport == Transport::Tcp),
                Action::Drop => {}
            }
        }
    }
}

/// What every reply must be: a response to this request's ID, a header that counts what
/// follows, and small enough for the transport.
fn check_reply(request: &[u8], reply: &[u8], transport: Transport) {
    assert!(reply.len() >= 12, "reply shorter than a header");
    assert_eq!(reply[0..2], request[0..2], "reply ID differs");
    assert!(reply[2] & 0x80 != 0, "reply without QR");
    if transport == Transport::Udp {
        assert!(reply.len() <= 1232, "UDP reply of {} bytes", reply.len());
    }
    // Every record the header counts is really there.
    let mut lower = [0u8; MAX_NAME];
    let count = |i: usize| usize::from(u16::from_be_bytes([reply[i], reply[i + 1]]));
    let mut pos = 12;
    if count(4) == 1 {
        let end = crate::dns::wire::skip_name(reply, pos).expect("question name");
        pos = end + 4;
        assert!(pos <= reply.len(), "question cut short");
    }
    for _ in 0..count(6) + count(8) + count(10) {
        let rr = crate::dns::wire::skip_record(reply, pos).expect("record the header counts");
        pos = rr.end;
    }
    assert_eq!(pos, reply.len(), "bytes after the last record");
    // A reply is itself a packet our parser must survive.
    let _ = parse_query(reply, &mut lower);
}

/// Any bytes as a DHCP packet: decoding fails cleanly or the decision logic answers within the
/// rules (a reply to the same transaction, never a reservation to another client).
pub fn dhcp_packet(data: &[u8]) {
    use dhcproto::Encodable;
    static PLAN: OnceLock<crate::plan::DhcpPlan> = OnceLock::new();
    let plan = PLAN.get_or_init(|| {
        let loaded = config::parse(
            DHCP_CLUSTER,
            "fuzz.yml",
            Path::new("."),
            config::InstallCheck::Skip,
        )
        .unwrap_or_else(|e| panic!("{}", e.render(config::RenderStyle::Plain)));
        Plan::derive(&loaded.config, 1).dhcp
    });
    static METRICS: OnceLock<crate::metrics::Metrics> = OnceLock::new();
    let metrics = METRICS.get_or_init(crate::metrics::Metrics::new);
    let from = std::net::SocketAddr::from(([10, 0, 0, 99], 68));
    // The server's own path for a received datagram (decode, count, decide): the first
    // one-packet crash sat between the parser and the reply.
    let mut state = crate::dhcp::reply::State::new(crate::dhcp::leases::Leases::in_memory());
    for now in [0, 1] {
        let out = match crate::dhcp::server::receive(data, from, plan, &mut state, metrics, now) {
            Ok(out) => out,
            Err(stranger) => {
                // Only a MAC nothing serves is a stranger: a reserved one never is.
                if let Some(s) = stranger {
                    assert!(plan.pool.is_none(), "a stranger with a pool");
                    assert!(plan.reservations.iter().all(|r| r.mac != s.mac), "{s:?}");
                }
                continue;
            }
        };
        let request = crate::dhcp::decode(data).expect("a decided packet decodes");
        assert_eq!(
            out.message.xid(),
            request.xid(),
            "reply to another transaction"
        );
        assert_eq!(
            out.message.chaddr(),
            request.chaddr(),
            "reply for another client"
        );
        let yiaddr = out.message.yiaddr();
        if let Some(r) = plan.reservations.iter().find(|r| r.ip == yiaddr) {
            assert_eq!(
                &r.mac.0[..],
                &request.chaddr()[..6],
                "a reserved address offered to a stranger"
            );
        }
        out.message.to_vec().expect("replies encode");
    }
}

const DHCP_CLUSTER: &str = r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network:
  interface: eth0
  subnet: 10.0.0.0/24
  gateway: 10.0.0.254
  appliance_ip: 10.0.0.1
  ntp: [10.0.0.1]
  mtu: 9000
  dhcp_pool: { start: 10.0.0.100, end: 10.0.0.103 }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.0.0.5 }
install: { ignition_dir: ./i, artifacts_dir: ./a }
"#;

/// Arbitrary text as a config file: errors are fine, panics are not.
pub fn config_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = config::parse(text, "fuzz.yml", Path::new("."), config::InstallCheck::Skip) {
        let _ = e.render(config::RenderStyle::Plain);
    }
}

/// The served files of the HTTP boot server's fuzz input: `<root>/a` (the artifacts directory:
/// a file, a subdirectory, a symlink inside and one leading out) beside `<root>/secret`.
fn http_tree() -> &'static (std::path::PathBuf, std::path::PathBuf) {
    static TREE: OnceLock<(std::path::PathBuf, std::path::PathBuf)> = OnceLock::new();
    TREE.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("okd-fuzz-http-{}", std::process::id()));
        let served = root.join("a");
        let create = || -> std::io::Result<()> {
            std::fs::create_dir_all(served.join("sub dir"))?;
            std::fs::write(root.join("secret"), b"outside")?;
            std::fs::write(served.join("rootfs.img"), b"inside")?;
            std::fs::write(served.join("sub dir").join("kernel"), b"inside")?;
            for (link, target) in [("inner", "rootfs.img"), ("escape", "../secret")] {
                match std::os::unix::fs::symlink(target, served.join(link)) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                    _ => {}
                }
            }
            Ok(())
        };
        create().unwrap_or_else(|e| panic!("can't create {}: {e}", root.display()));
        let served = served.canonicalize().unwrap_or_else(|e| panic!("{e}"));
        let secret = root
            .join("secret")
            .canonicalize()
            .unwrap_or_else(|e| panic!("{e}"));
        (served, secret)
    })
}

/// One artifact request as the HTTP server sees it: input lines are the URL path under
/// `/artifacts/`, If-None-Match, If-Modified-Since, Range and If-Range. A path opens only a
/// file inside the served directory (what was opened is read back from `/proc/self/fd`); a
/// decision is consistent with the headers and the size.
pub fn http_file_request(data: &[u8]) {
    use std::os::fd::AsRawFd as _;

    use crate::http::files::{Conditions, Decision, FileMeta, decide, open_beneath};

    let (served, secret) = http_tree();
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let path = lines.next().unwrap_or("");
    let mut header = || lines.next().filter(|l| !l.is_empty());
    let conditions = Conditions {
        if_none_match: header(),
        if_modified_since: header(),
        range: header(),
        if_range: header(),
    };
    if let Some((_, Ok((file, meta)))) = open_beneath(served, path) {
        let found = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(found.starts_with(served), "{path:?} opened {found:?}");
        assert!(&found != secret, "{path:?} reached the secret");
        assert!(meta.is_file(), "{path:?} opened a non-file");
    }
    let modified = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    for len in [0, 1, 6, 1 << 30, u64::MAX] {
        let meta = FileMeta { len, modified };
        match decide(&conditions, meta) {
            Decision::Partial { start, end } => {
                assert!(conditions.range.is_some(), "a partial answer without Range");
                assert!(start <= end && end < len, "{start}-{end} of {len}");
            }
            Decision::RangeNotSatisfiable => assert!(conditions.range.is_some()),
            Decision::NotModified => assert!(
                conditions.if_none_match.is_some() || conditions.if_modified_since.is_some()
            ),
            Decision::Full => {}
        }
    }
}

/// A CoreOS-like ISO (`liveiso::testimage::coreos_template`) with bytes changed and possibly
/// cut short as `data` says (3 bytes a change: a little-endian u16 offset into the first 64 KiB
/// and the new byte; a first byte with its low bit set also truncates the image to the length
/// in bytes 1-2, in 32-byte units). Reading it never panics, and whatever it yields is sound:
/// areas sorted, inside the image and not overlapping; a node image exactly the base's length,
/// with one patch per area, and pieces that add up to every range asked for.
pub fn live_iso(data: &[u8]) {
    use crate::liveiso::Piece;
    use crate::liveiso::embed::{KargsAreas, check_no_ignition};
    use crate::liveiso::iso9660::Volume;
    use crate::liveiso::testimage::coreos_template;

    static TEMPLATE: OnceLock<Vec<u8>> = OnceLock::new();
    let mut image = TEMPLATE.get_or_init(coreos_template).clone();
    let mut changes = data;
    if let [first, lo, hi, rest @ ..] = data
        && first & 1 == 1
    {
        let len = usize::from(u16::from_le_bytes([*lo, *hi])) * 32;
        image.truncate(len);
        changes = rest;
    }
    for change in changes.chunks_exact(3) {
        let at = usize::from(u16::from_le_bytes([change[0], change[1]]));
        if let Some(b) = image.get_mut(at) {
            *b = change[2];
        }
    }
    let image = image.as_slice();
    let Ok(vol) = Volume::open(image) else {
        return;
    };
    let _ = check_no_ignition(image, &vol);
    let Ok(kargs) = KargsAreas::read(image, &vol) else {
        return;
    };
    let len = image.len() as u64;
    assert!(kargs.size > 0 && kargs.size <= crate::liveiso::embed::MAX_AREA);
    for pair in kargs.areas.windows(2) {
        assert!(
            pair[0].offset + kargs.size as u64 <= pair[1].offset,
            "areas overlap"
        );
    }
    for area in &kargs.areas {
        assert!(area.offset + kargs.size as u64 <= len, "area past the end");
    }
    let base = crate::liveiso::BaseIso {
        identity: crate::liveiso::FileIdentity {
            dev: 0,
            ino: 0,
            len,
            mtime_ns: 0,
        },
        kargs,
        ignition_file: String::new(),
    };
    let args = ["coreos.inst.install_dev=/dev/vda".to_owned()];
    let Ok(node) = base.node_image(&args) else {
        return;
    };
    assert_eq!(node.patches.len(), base.kargs.areas.len());
    assert!(
        node.patches
            .iter()
            .all(|p| p.bytes.len() == base.kargs.size)
    );
    let seed = data
        .iter()
        .fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    for (start, n) in [(0, len), (seed % (len + 1), seed % 5000), (len, 10)] {
        let pieces = node.pieces(start, n);
        let total: u64 = pieces
            .iter()
            .map(|p| match p {
                Piece::Base { len, .. } => *len,
                Piece::Patch(b) => b.len() as u64,
            })
            .sum();
        assert_eq!(total, n.min(len.saturating_sub(start)), "{start}+{n}");
    }
}

/// A connection's first bytes at the shared frontend's router, as a TLS port and as the HTTP
/// port peek them (`lb::route`): never a panic; a name is lowercase, without a trailing dot
/// (or a port, for `Host`); and a decision made on a prefix (the first byte says where to cut)
/// is the decision on the whole, since the router acts on the bytes it has seen so far; a first
/// message whole in a prefix is whole in the whole.
pub fn lb_peek(data: &[u8]) {
    use crate::lb::route::{Peeked, first_message_whole, http_host, tls_server_name};
    use crate::plan::FrontendKind;

    let cut = data
        .first()
        .map_or(0, |b| usize::from(*b) * data.len() / 256);
    for parse in [tls_server_name as fn(&[u8]) -> Peeked, http_host] {
        let whole = parse(data);
        if let Peeked::Name(name) = &whole {
            assert!(!name.ends_with('.'), "{name:?}");
            assert_eq!(*name, name.to_ascii_lowercase());
        }
        let prefix = parse(&data[..cut]);
        if prefix != Peeked::More {
            assert_eq!(prefix, whole, "decided at {cut} of {}", data.len());
        }
    }
    // A first message found whole in a prefix is whole with what follows it (the relay looks
    // at the first bytes it reads, which any later ones extend).
    for kind in [FrontendKind::IngressHttp, FrontendKind::Api] {
        if first_message_whole(kind, &data[..cut]) {
            assert!(first_message_whole(kind, data), "{kind:?}, whole at {cut}");
        }
    }
}

/// Any bytes as a datagram on the TFTP listener, through the server's own path
/// (`tftp::server::receive`: parse, admit, look the file up): the parser never panics (a panic
/// would be caught and counted there, so the count is checked), an ERROR is a well-formed
/// packet, a started transfer's file is one of the boot files right inside the iPXE directory
/// and its block size within its limits, and the same datagram again is a retransmission,
/// not a second transfer.
pub fn tftp_request(data: &[u8]) {
    use crate::isolate::{Wire, panics};
    use crate::tftp::admission::Admission;
    use crate::tftp::packet::MAX_BLOCK;
    use crate::tftp::server::{Step, receive};

    let plan = cluster_plan();
    let admission = Admission::new(2, 1, std::time::Duration::from_secs(1));
    let client: std::net::SocketAddr = "10.1.16.50:2070".parse().unwrap_or_else(|e| panic!("{e}"));
    let before = panics(Wire::Tftp);
    let step = receive(data, client, &admission, plan);
    assert_eq!(
        panics(Wire::Tftp),
        before,
        "the parser panicked on {data:?}"
    );
    match &step {
        Step::Ignore => {}
        Step::Refuse(error) => {
            assert!(error.len() >= 5 && error.len() <= 516, "{error:?}");
            assert_eq!(&error[..2], &[0, 5], "not an ERROR: {error:?}");
            assert_eq!(error.last(), Some(&0), "unterminated message: {error:?}");
        }
        Step::Start { path, req, .. } => {
            if let Some(path) = path {
                assert_eq!(
                    path.parent(),
                    Some(plan.files.ipxe_dir.as_path()),
                    "{path:?}"
                );
            }
            if let Some(size) = req.block_size {
                assert!((8..=MAX_BLOCK).contains(&size), "block size {size}");
            }
            // A `timeout` past MAX_TIMEOUT_SECS is kept here and declined by the transfer.
            assert!(req.timeout_secs != Some(0), "a timeout of 0");
            assert!(
                matches!(receive(data, client, &admission, plan), Step::Ignore),
                "a retransmission started a second transfer"
            );
        }
    }
}

/// Replays the fuzzers' saved corpora (tests/fuzz/corpus) and any crash they kept
/// (tests/fuzz/artifacts): every input that once mattered stays a regression test.
#[cfg(test)]
mod corpus {
    use std::path::Path;
    fn replay(target: &str, run: fn(&[u8])) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz");
        let mut count = 0;
        for dir in [
            root.join("corpus").join(target),
            root.join("artifacts").join(target),
        ] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let result = std::panic::catch_unwind(|| run(&data));
                assert!(result.is_ok(), "{} panics", path.display());
                count += 1;
            }
        }
        assert!(count > 20, "the {target} corpus has only {count} inputs");
    }

    #[test]
    fn dns_request_corpus() {
        replay("dns_request", super::dns_request);
    }

    #[test]
    fn config_text_corpus() {
        replay("config_text", super::config_text);
    }

    #[test]
    fn dhcp_packet_corpus() {
        replay("dhcp_packet", super::dhcp_packet);
    }

    #[test]
    fn http_file_request_corpus() {
        replay("http_file_request", super::http_file_request);
    }

    #[test]
    fn live_iso_corpus() {
        replay("live_iso", super::live_iso);
    }

    #[test]
    fn tftp_request_corpus() {
        replay("tftp_request", super::tftp_request);
    }

    #[test]
    fn lb_peek_corpus() {
        replay("lb_peek", super::lb_peek);
    }

    #[test]
    fn dns_udp_corpus() {
        // The responder's corpus, each input as a datagram to the listener.
        replay("dns_request", super::served::dns_udp);
    }

    #[test]
    fn dns_tcp_corpus() {
        replay("dns_tcp", super::served::dns_tcp);
    }

    #[test]
    fn http_corpus() {
        replay("http", super::served::http);
    }

    #[test]
    fn api_corpus() {
        replay("api", super::served::api);
    }

    #[test]
    fn replication_corpus() {
        replay("replication", super::served::replication);
    }
}
