//! A hostile segment (issue 39): while a client holds a stream through the load balancer, a
//! host on the cluster segment sends every listener 2,000 malformed inputs or more
//! (`hostile_inputs.rs`: DHCP with `hlen` 0/17/255 and broken options, DNS with compression
//! loops over UDP and TCP, TFTP with every opcode and option out of range, HTTP heads broken
//! every way for the fast path and hyper, TLS garbage for the API), each TCP burst behind
//! half-open connections from four addresses (each past its per-address share) while four
//! others send. After each burst the good clients are answered
//! (dig over UDP and TCP, a node's boot script, a TFTP read, a DHCP lease, the API with its
//! token) and the relayed stream still carries its pings; at the end the nodes fetch their
//! ignition, no handler panicked (`okd_appliance_panics_total`), and the process never exited.
//!
//! Not here: replication's listener (it needs a pair: its hostile burst is in `tests/e2e/ha.rs`,
//! its fuzz target `fuzzing::served::replication`), and VMs (the nodes are namespaces fetching what a
//! boot fetches; the boot chain in VMs is `boot.rs`).

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use harness::{Netns, require_root, require_tools};

use crate::clusters::{
    TwoSegments, answer, attach, expect_names, expect_own_ignition, get, lease,
    okd_on_its_own_segment, script_url, test_on_its_own_segment, write_host,
};
use crate::dns_support::start_appliance;
use crate::hostile_inputs as inputs;
use crate::lb_support::Conn;

const INPUTS: usize = 2_000;
const APPLIANCE: Ipv4Addr = Ipv4Addr::new(10, 98, 1, 1);
const TOKEN: &str = "hostile-t0ken-8c1d5e2f9a";
/// The attacker's addresses: 10.98.1.66 .. 10.98.1.73; the first four hold half-open
/// connections, the others send the inputs.
const SOURCES: std::ops::Range<u8> = 66..74;
const HOLDERS: std::ops::Range<u8> = 66..70;
const SENDERS: u8 = 70;

/// Sends each input to `to` from one socket (broadcast allowed); what comes back is drained.
fn udp_burst(ns: &Netns, to: SocketAddr, inputs: &[Vec<u8>]) -> usize {
    ns.run(|| {
        let socket = UdpSocket::bind("0.0.0.0:0").expect("udp socket");
        socket.set_broadcast(true).expect("broadcast");
        socket.set_nonblocking(true).expect("nonblocking");
        let mut buf = vec![0u8; 65_536];
        let mut sent = 0;
        for (i, input) in inputs.iter().enumerate() {
            if socket.send_to(input, to).is_ok() {
                sent += 1;
            }
            while socket.recv_from(&mut buf).is_ok() {}
            // The server's receive buffer is not the test's subject: a breath every 50.
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        sent
    })
    .expect("udp burst")
}

/// One TCP connection from `source` to `to`, or `None` when the server did not take it.
fn connect(source: Ipv4Addr, to: SocketAddr) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    socket.bind(&SocketAddr::from((source, 0)).into()).ok()?;
    socket
        .connect_timeout(&to.into(), Duration::from_secs(1))
        .ok()?;
    Some(socket.into())
}

/// Connections that send nothing, `n` from each holding address (past its share: the server
/// closes those), held until dropped.
fn half_open(ns: &Netns, to: SocketAddr, n: usize) -> Vec<TcpStream> {
    ns.run(|| {
        HOLDERS
            .flat_map(|s| std::iter::repeat_n(s, n))
            .filter_map(|s| connect(Ipv4Addr::new(10, 98, 1, s), to))
            .collect()
    })
    .expect("half-open connections")
}

/// Each input on a connection of its own (16 at a time, from the sending addresses): written,
/// the write side shut, the answer read until EOF or 100 ms. `frame` wraps an input (DNS's
/// length prefix). Returns the inputs written.
fn tcp_burst(
    ns: &Netns,
    to: SocketAddr,
    inputs: &[Vec<u8>],
    frame: fn(usize, &[u8]) -> Vec<u8>,
) -> usize {
    ns.run(|| {
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..16)
                .map(|w| {
                    s.spawn(move || {
                        let mut written = 0;
                        let mut buf = [0u8; 4096];
                        for (i, input) in inputs.iter().enumerate().skip(w).step_by(16) {
                            let source = Ipv4Addr::new(10, 98, 1, SENDERS + (i % 4) as u8);
                            let Some(mut stream) = connect(source, to) else {
                                continue;
                            };
                            if stream.write_all(&frame(i, input)).is_ok() {
                                written += 1;
                            }
                            let _ = stream.shutdown(std::net::Shutdown::Write);
                            let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
                            let until = Instant::now() + Duration::from_millis(300);
                            while Instant::now() < until
                                && matches!(stream.read(&mut buf), Ok(n) if n > 0)
                            {
                            }
                        }
                        written
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        })
    })
    .expect("tcp burst")
}

/// A TCP burst to `port` behind half-open connections, 40 from each holding address (past the
/// per-address share of 32), dropped after it.
fn held_burst(ns: &Netns, port: u16, inputs: &[Vec<u8>], frame: fn(usize, &[u8]) -> Vec<u8>) {
    let to = SocketAddr::from((APPLIANCE, port));
    let holders = half_open(ns, to, 40);
    let sent = tcp_burst(ns, to, inputs, frame);
    drop(holders);
    assert!(
        sent >= INPUTS / 2,
        "port {port}: only {sent} inputs written"
    );
}

/// The sum of the samples whose line starts with `prefix`.
fn sum(metrics: &str, prefix: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

fn as_is(_: usize, input: &[u8]) -> Vec<u8> {
    input.to_vec()
}

/// DNS over TCP's length prefix: right, zero, or longer than what follows.
fn dns_frame(i: usize, input: &[u8]) -> Vec<u8> {
    let len = u16::try_from(input.len()).unwrap_or(u16::MAX);
    let prefix = match i % 5 {
        0 => len.saturating_add(100),
        1 => 0,
        _ => len,
    };
    let mut framed = prefix.to_be_bytes().to_vec();
    framed.extend_from_slice(&input[..input.len().min(usize::from(u16::MAX))]);
    framed
}

#[test]
fn every_listener_survives_a_hostile_segment_and_good_clients_are_served_after_each_burst() {
    if !require_root()
        || !require_tools(&["dig", "busybox", "unshare", "curl", "python3", "openssl"])
    {
        return;
    }
    let (okd, test) = (okd_on_its_own_segment(), test_on_its_own_segment());
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-hostile-")
        .tempdir()
        .expect("tempdir");
    let host = write_host(dir.path(), &[&okd, &test]);
    // The API on the okd segment's address, with a certificate and a token.
    crate::support::self_signed(dir.path(), "api", &format!("IP:{APPLIANCE}"));
    std::fs::write(dir.path().join("api-token"), format!("{TOKEN}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    for f in ["api-token", "api.key"] {
        std::fs::set_permissions(dir.path().join(f), std::fs::Permissions::from_mode(0o600))
            .unwrap();
    }
    let mut text = std::fs::read_to_string(&host).unwrap();
    text.push_str(&format!(
        "api: {{ listen: \"{APPLIANCE}:9443\", cert_file: api.pem, key_file: api.key, token_file: api-token }}\n"
    ));
    std::fs::write(&host, text).unwrap();

    let lab = TwoSegments::start("hst", &okd, &test);
    let attacker = attach(lab.topo.bridge(), "atk", Some("10.98.1.66/24"));
    for s in SOURCES.skip(1) {
        attacker
            .add_addr("eth0", &format!("10.98.1.{s}/24"))
            .expect("attacker address");
    }
    attacker
        .ip(["route", "add", "default", "via", &APPLIANCE.to_string()])
        .expect("default route");
    let mut app = start_appliance(lab.topo.services(), &host);
    let m0 = okd.node("master-0");
    crate::clusters::wait_up(&app, &m0);
    let mut stream = Conn::open(&lab.okd_node, SocketAddr::from((APPLIANCE, 6443)))
        .expect("a stream through the balancer");
    assert_eq!(stream.backend, "okd-master-0");

    let worker = okd.node("worker-0");
    let mut round = 0;
    let mut good = |app: &mut harness::Process, stream: &mut Conn, what: &str| {
        round += 1;
        app.assert_running()
            .unwrap_or_else(|e| panic!("after the {what} burst: {e}"));
        stream
            .ping()
            .unwrap_or_else(|e| panic!("the relayed stream after the {what} burst: {e}"));
        expect_names(&lab.okd_node, APPLIANCE, &okd);
        answer(&lab.okd_node, APPLIANCE, &["+tcp", &okd.fqdn("api"), "A"]);
        let (code, body) = get(&lab.okd_node, &script_url(&okd, &m0));
        assert_eq!(code, "200", "boot script after the {what} burst: {body}");
        let tftp = lab
            .okd_node
            .exec([
                "curl",
                "-s",
                "--max-time",
                "3",
                "-o",
                "/dev/null",
                &format!("tftp://{APPLIANCE}/undionly.kpxe"),
            ])
            .status()
            .expect("curl tftp");
        // Served, or "file not found": answered either way, not timed out (28).
        assert!(
            matches!(tftp.code(), Some(0 | 68)),
            "tftp after the {what} burst: {tftp:?}"
        );
        let bound = lease(&lab.seg1, dir.path(), &format!("good{round}"), worker.mac);
        assert_eq!(
            bound.env.get("ip").map(String::as_str),
            Some(worker.ip.to_string().as_str()),
            "DHCP after the {what} burst: {bound:?}"
        );
        let out = lab
            .okd_node
            .exec([
                "curl",
                "-sk",
                "--max-time",
                "5",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-H",
                &format!("Authorization: Bearer {TOKEN}"),
                &format!("https://{APPLIANCE}:9443/api/v1/clusters/okd/status"),
            ])
            .output()
            .expect("curl api");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "200",
            "the API after the {what} burst"
        );
    };
    good(&mut app, &mut stream, "first (none yet)");

    let dhcp = inputs::dhcp(INPUTS);
    let broadcast = udp_burst(
        &attacker,
        SocketAddr::from(([255, 255, 255, 255], 67)),
        &dhcp,
    );
    let unicast = udp_burst(&attacker, SocketAddr::from((APPLIANCE, 67)), &dhcp);
    assert!(
        broadcast + unicast >= INPUTS,
        "{broadcast} + {unicast} DHCP inputs sent"
    );
    good(&mut app, &mut stream, "DHCP");

    let dns = inputs::dns(INPUTS);
    assert!(udp_burst(&attacker, SocketAddr::from((APPLIANCE, 53)), &dns) >= INPUTS);
    good(&mut app, &mut stream, "DNS/UDP");
    let holders = half_open(&attacker, SocketAddr::from((APPLIANCE, 53)), 40);
    let sent = tcp_burst(
        &attacker,
        SocketAddr::from((APPLIANCE, 53)),
        &dns,
        dns_frame,
    );
    drop(holders);
    eprintln!("hostile: {sent} DNS/TCP inputs written");
    assert!(sent > 0, "no DNS/TCP input was taken");
    good(&mut app, &mut stream, "DNS/TCP");

    let tftp = inputs::tftp(INPUTS);
    assert!(udp_burst(&attacker, SocketAddr::from((APPLIANCE, 69)), &tftp) >= INPUTS);
    good(&mut app, &mut stream, "TFTP");

    let http = inputs::http(INPUTS, &script_url(&okd, &m0).replace(&okd.http(), ""));
    held_burst(&attacker, 8080, &http, as_is);
    good(&mut app, &mut stream, "HTTP");

    let tls = inputs::tls(INPUTS);
    held_burst(&attacker, 9443, &tls, as_is);
    good(&mut app, &mut stream, "API");

    // The nodes finish what their boot fetches, and nothing panicked on the way.
    expect_own_ignition(&lab.okd_node, &okd, &m0);
    expect_own_ignition(&lab.test_node, &test, &test.node("master-0"));
    let (code, metrics) = get(&lab.okd_node, &format!("{}/metrics", okd.http()));
    assert_eq!(code, "200");
    let panics: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("okd_appliance_panics_total") && !l.ends_with(" 0"))
        .collect();
    assert!(panics.is_empty(), "{panics:?}");
    // The inputs reached the handlers: malformed queries were answered with an error.
    let refused = sum(
        &metrics,
        "okd_appliance_dns_answers_total{rcode=\"FORMERR\"",
    ) + sum(&metrics, "okd_appliance_dns_answers_total{rcode=\"NOTIMP\"");
    let requests = sum(&metrics, "okd_appliance_http_requests_total");
    eprintln!("hostile: {refused} DNS error answers, {requests} HTTP requests counted");
    assert!(refused >= 1_000, "{refused} DNS error answers");
    assert!(requests >= 2_000, "{requests} HTTP requests");
    stream.ping().expect("the relayed stream at the end");
    app.assert_running()
        .expect("okd-appliance is still running");
}
