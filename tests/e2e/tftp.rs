//! TFTP under a read-request flood: the appliance serves TFTP on 10.99.0.1:69 in the services
//! namespace; a "flood" namespace with twenty addresses sends read requests from 320 source
//! ports (asking for the 255 s timeout RFC 2349 allows), never acknowledging anything, as
//! spoofed requests would; meanwhile real TFTP clients (curl and busybox tftp) in a node
//! namespace must get the boot file, byte for byte, within seconds.
//!
//! Before the fix, 64 such requests held every transfer slot for about 20 minutes (255 s x 5
//! tries) and every real client got "server busy". The flood first shows it has taken the slots
//! (replies from at least 64 distinct transfer ports, that is transfers it holds) before the
//! clients start.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use harness::{Topology, require_root, require_tools, wait_until};

use crate::dns_support::{start_appliance, write_config};

const SERVER: &str = "10.99.0.1";
/// The flood's addresses: 10.99.0.40 .. 10.99.0.59.
const FLOOD_FIRST: u8 = 40;
const FLOOD_ADDRESSES: u8 = 20;
const PORTS_PER_ADDRESS: usize = 16;
/// How long the flood runs before the first client asks.
const STEADY: Duration = Duration::from_secs(6);
/// The flood stops after this whatever happens (every load loop is bounded).
const FLOOD_LIMIT: Duration = Duration::from_secs(120);

fn config(dir: &Path) -> std::path::PathBuf {
    write_config(
        dir,
        r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }
nodes:
  - { name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts, ipxe_dir: ./ipxe }
listen:
  dns: []
  dhcp: []
  tftp: ["10.99.0.1:69"]
  http: ["127.0.0.1:0"]
  api: []
  machine_config: []
  ingress_https: []
  ingress_http: []
"#,
    )
}

fn rrq(file: &str, options: &[(&str, &str)]) -> Vec<u8> {
    let mut p = vec![0, 1];
    for part in [file, "octet"]
        .into_iter()
        .chain(options.iter().flat_map(|(n, v)| [*n, *v]))
    {
        p.extend_from_slice(part.as_bytes());
        p.push(0);
    }
    p
}

/// What the flood saw.
#[derive(Debug, Default)]
struct FloodReport {
    requests: usize,
    replies: usize,
    /// "server busy" errors.
    busy: usize,
}

/// Sends read requests from every socket, round after round, until `stop` (or
/// [`FLOOD_LIMIT`]); reads and drops whatever comes back, never acknowledging. `transfers`
/// counts the distinct server ports (transfers) that answered.
fn flood(
    sockets: &[UdpSocket],
    stop: &AtomicBool,
    transfers: &AtomicUsize,
    server: SocketAddr,
) -> FloodReport {
    let request = rrq(
        "undionly.kpxe",
        &[("tsize", "0"), ("timeout", "255"), ("blksize", "1432")],
    );
    let mut report = FloodReport::default();
    let mut ports = std::collections::BTreeSet::new();
    let mut buf = [0u8; 2048];
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < FLOOD_LIMIT {
        for s in sockets {
            if s.send_to(&request, server).is_ok() {
                report.requests += 1;
            }
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                report.replies += 1;
                if n >= 4 && buf[..2] == [0, 5] {
                    report.busy += 1;
                } else if ports.insert(from.port()) {
                    transfers.store(ports.len(), Ordering::Relaxed);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    report
}

#[test]
fn a_read_request_flood_does_not_keep_real_tftp_clients_out() {
    if !require_root() || !require_tools(&["curl", "busybox"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let ipxe = dir.path().join("ipxe");
    std::fs::create_dir_all(&ipxe).unwrap();
    // 300 000 bytes: 586 blocks of 512, so a client needs its transfer for a while.
    let boot: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(ipxe.join("undionly.kpxe"), &boot).unwrap();

    let topo = Topology::new("tft").expect("topology");
    let flooder = topo
        .add_node("fl", &format!("10.99.0.{FLOOD_FIRST}/24"), None)
        .expect("node");
    for i in 1..FLOOD_ADDRESSES {
        flooder
            .add_addr(flooder.iface(), &format!("10.99.0.{}/24", FLOOD_FIRST + i))
            .unwrap();
    }
    let pxe = topo.add_node("pxe", "10.99.0.7/24", None).expect("node");
    let mut appliance = start_appliance(topo.services(), &cfg);
    let server = SocketAddr::new(SERVER.parse().unwrap(), 69);

    let sockets: Vec<UdpSocket> = flooder
        .run(|| {
            (0..FLOOD_ADDRESSES)
                .flat_map(|i| {
                    let ip = Ipv4Addr::new(10, 99, 0, FLOOD_FIRST + i);
                    (0..PORTS_PER_ADDRESS).map(move |_| {
                        let s = UdpSocket::bind(SocketAddrV4::new(ip, 0)).unwrap();
                        s.set_nonblocking(true).unwrap();
                        s
                    })
                })
                .collect()
        })
        .expect("enter the flood namespace");
    let stop = AtomicBool::new(false);
    let transfers = AtomicUsize::new(0);
    let out = dir.path().join("out");
    let (report, results) = std::thread::scope(|scope| {
        let flooding = scope.spawn(|| flood(&sockets, &stop, &transfers, server));
        // The flood holds every slot before any real client asks, and has gone on for longer
        // than the server's patience with unanswered transfers and their two sends, so the
        // clients meet it in its steady state.
        let flood_started = Instant::now();
        let engaged = wait_until(Duration::from_secs(20), || {
            transfers.load(Ordering::Relaxed) >= 64
        });
        std::thread::sleep(STEADY.saturating_sub(flood_started.elapsed()));
        let mut results = Vec::new();
        if engaged {
            let clients: [(&str, Vec<String>); 4] = [
                ("curl", curl_args(&out, &[])),
                ("curl --tftp-blksize 1432", curl_args(&out, &["1432"])),
                (
                    "busybox tftp",
                    ["busybox", "tftp", "-g", "-r", "undionly.kpxe", "-l"]
                        .map(str::to_owned)
                        .into_iter()
                        .chain([out.display().to_string(), SERVER.to_owned()])
                        .collect(),
                ),
                ("curl again", curl_args(&out, &[])),
            ];
            for (label, argv) in clients {
                let _ = std::fs::remove_file(&out);
                let started = Instant::now();
                let status = pxe.exec(&argv).output().expect("client runs");
                let took = started.elapsed();
                let got = std::fs::read(&out).unwrap_or_default();
                results.push((label, status, took, got == boot, got.len()));
            }
        }
        stop.store(true, Ordering::Relaxed);
        let report = flooding.join().expect("flood thread");
        assert!(
            engaged,
            "the flood never held 64 transfers ({} distinct transfer ports; {report:?})",
            transfers.load(Ordering::Relaxed)
        );
        (report, results)
    });
    appliance.assert_running().unwrap();
    // A count, not a rate: the flood's rounds (320 requests each) slow down on a busy machine;
    // `engaged` above already proves it held every transfer slot.
    assert!(report.requests > 2_000, "not much of a flood: {report:?}");
    let summary = format!(
        "TFTP flood: {} requests from {} ports on {} addresses, {} replies ({} busy), {} \
         transfers seen\n{}",
        report.requests,
        sockets.len(),
        FLOOD_ADDRESSES,
        report.replies,
        report.busy,
        transfers.load(Ordering::Relaxed),
        results
            .iter()
            .map(|(label, out, took, _, len)| format!(
                "  {label}: {}, {len} bytes in {took:.1?}",
                out.status
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{summary}\n").as_bytes());
    for l in appliance
        .stderr()
        .lines()
        .filter(|l| l.contains("10.99.0.7"))
    {
        eprintln!("DEBUG {l}");
    }
    for (label, status, took, same, _) in &results {
        assert!(
            status.status.success() && *same,
            "{label} did not get the file under the flood: {}\n{summary}\n{}",
            String::from_utf8_lossy(&status.stderr),
            appliance.log_tails()
        );
        assert!(
            *took < Duration::from_secs(20),
            "{label} took {took:?}\n{summary}"
        );
    }
}

/// `curl` fetching the boot file into `out`, with `--tftp-blksize` when given.
fn curl_args(out: &Path, blksize: &[&str]) -> Vec<String> {
    let mut argv: Vec<String> = ["curl", "--silent", "--show-error", "--max-time", "30"]
        .map(str::to_owned)
        .to_vec();
    if let [size] = blksize {
        argv.extend(["--tftp-blksize".to_owned(), (*size).to_owned()]);
    }
    argv.extend([
        "--output".to_owned(),
        out.display().to_string(),
        format!("tftp://{SERVER}/undionly.kpxe"),
    ]);
    argv
}
