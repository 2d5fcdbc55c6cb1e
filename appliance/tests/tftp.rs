//! The TFTP server with curl's TFTP client on loopback: whole files with and without options,
//! block-number rollover, a boot file that is a symlink out of the directory (as Debian
//! installs ipxe.efi), and refusals for every other name. And with raw packets, what a hostile
//! client can and can't make it do: the `timeout` option is honoured only up to 3 s, a
//! transfer nobody acknowledges is forgotten after two sends of its first packet, and one
//! address gets at most four transfers at once. (A flood against a real client, from another
//! network namespace, is in tests/e2e/tftp.rs.)

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Serve;

fn curl(url: &str, extra: &[&str], out: &std::path::Path) -> std::process::ExitStatus {
    Command::new("curl")
        .args(["--silent", "--max-time", "30", "--output"])
        .arg(out)
        .args(extra)
        .arg(url)
        .status()
        .expect("curl runs")
}

#[test]
fn tftp_serves_boot_files_and_nothing_else() {
    if Command::new("curl").arg("--version").output().is_err() {
        assert!(std::env::var("CI").is_err(), "curl is missing in CI");
        eprintln!("SKIPPED tftp_serves_boot_files_and_nothing_else: needs curl");
        return;
    }
    let (dir, boot, _serve, port) = start_tftp();
    let root = dir.path().join("ipxe");
    let base = format!("tftp://127.0.0.1:{port}");
    let out = dir.path().join("out");

    assert!(curl(&format!("{base}/undionly.kpxe"), &[], &out).success());
    assert_eq!(
        std::fs::read(&out).unwrap(),
        boot,
        "default 512-byte blocks"
    );
    assert!(
        curl(
            &format!("{base}/undionly.kpxe"),
            &["--tftp-blksize", "1432"],
            &out
        )
        .success()
    );
    assert_eq!(std::fs::read(&out).unwrap(), boot, "negotiated block size");
    assert!(
        curl(
            &format!("{base}/undionly.kpxe"),
            &["--tftp-blksize", "8"],
            &out
        )
        .success()
    );
    assert_eq!(
        std::fs::read(&out).unwrap(),
        boot,
        "block numbers past 65535"
    );

    // Debian's ipxe package installs ipxe.efi as a symlink to /boot/ipxe.efi: a boot file may
    // point out of the directory (the name is one the DHCP server hands out).
    let efi = dir.path().join("elsewhere.efi");
    std::fs::write(&efi, b"an EFI binary").unwrap();
    std::os::unix::fs::symlink(&efi, root.join("ipxe.efi")).unwrap();
    assert!(curl(&format!("{base}/ipxe.efi"), &[], &out).success());
    assert_eq!(std::fs::read(&out).unwrap(), b"an EFI binary");
    // Nothing else is served, whether it exists in the directory or not.
    std::fs::write(root.join("other.bin"), b"x").unwrap();
    for bad in [
        "/../secret",
        "/escape",
        "/missing.efi",
        "/other.bin",
        "undionly.kpxe/..",
    ] {
        let _ = std::fs::remove_file(&out);
        let status = curl(&format!("{base}{bad}"), &[], &out);
        assert!(!status.success(), "{bad} was served");
        let leaked = std::fs::read_to_string(&out).unwrap_or_default();
        assert!(!leaked.contains("not for you"), "{bad} leaked the file");
    }
}

/// A boot directory with a 600 000-byte `undionly.kpxe` (and a symlink out of it), served by
/// `okd-appliance serve` on 127.0.0.1 (TFTP only). Returns the directory, the file's bytes, the
/// server and its port.
fn start_tftp() -> (tempfile::TempDir, Vec<u8>, Serve, u16) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ipxe");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(dir.path().join("install_dir")).unwrap();
    std::fs::write(dir.path().join("install_dir/master.ign"), "{}").unwrap();
    // 600 000 bytes: 75 000 blocks of 8 bytes roll the 16-bit block number over.
    let boot: Vec<u8> = (0..600_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("undionly.kpxe"), &boot).unwrap();
    std::fs::write(dir.path().join("secret"), "not for you").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret"), root.join("escape")).unwrap();
    let config = dir.path().join("okd.yml");
    std::fs::write(
        &config,
        r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts, ipxe_dir: ./ipxe }
state_dir: ./state
listen: { tftp: ["127.0.0.1:0"], dns: [], dhcp: [], http: [], api: [], machine_config: [], ingress_https: [], ingress_http: [] }
"#,
    )
    .unwrap();
    let mut serve = Serve::start(&config);
    let line = serve.expect_line("listening for tftp/udp on 127.0.0.1:");
    let port = line.rsplit(':').next().unwrap().trim().parse().unwrap();
    serve.expect_line("ready");
    (dir, boot, serve, port)
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

/// Every datagram `socket` receives until `until` (and what is already queued after it), with
/// when it came and from where.
fn collect(socket: &UdpSocket, until: Instant) -> Vec<(Duration, SocketAddr, Vec<u8>)> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        socket
            .set_read_timeout(Some(left.max(Duration::from_millis(20))))
            .unwrap();
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => got.push((start.elapsed(), from, buf[..n].to_vec())),
            Err(_) => return got,
        }
    }
}

/// The options of an OACK packet.
fn oack_options(packet: &[u8]) -> Vec<(String, String)> {
    assert_eq!(&packet[..2], &[0, 6], "not an OACK: {packet:?}");
    let fields: Vec<String> = packet[2..]
        .split(|&b| b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8_lossy(f).to_ascii_lowercase())
        .collect();
    fields
        .chunks(2)
        .map(|c| (c[0].clone(), c[1].clone()))
        .collect()
}

#[test]
fn tftp_caps_the_client_timeout_and_forgets_a_transfer_nobody_acknowledges() {
    let (_dir, boot, _serve, port) = start_tftp();
    let server = SocketAddr::from(([127, 0, 0, 1], port));

    // 255 s is declined (left out of the OACK); nobody acknowledges the OACK.
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .send_to(
            &rrq("undionly.kpxe", &[("tsize", "0"), ("timeout", "255")]),
            server,
        )
        .unwrap();
    let got = collect(&client, Instant::now() + Duration::from_secs(9));
    assert!(!got.is_empty(), "no answer");
    let options = oack_options(&got[0].2);
    assert!(
        options.contains(&("tsize".into(), boot.len().to_string())),
        "{options:?}"
    );
    assert!(
        !options.iter().any(|(name, _)| name == "timeout"),
        "a 255 s timeout was accepted: {options:?}"
    );
    // Sent twice, 2 s apart (the default timeout), then forgotten.
    let times: Vec<Duration> = got.iter().map(|g| g.0).collect();
    assert_eq!(
        got.len(),
        2,
        "sends of the unacknowledged OACK at {times:?}"
    );
    assert!(got.iter().all(|g| g.2 == got[0].2 && g.1 == got[0].1));
    let gap = times[1] - times[0];
    assert!(
        gap >= Duration::from_millis(1500) && gap < Duration::from_secs(4),
        "{times:?}"
    );

    // Within the cap, the timeout is honoured: the OACK carries it.
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .send_to(&rrq("undionly.kpxe", &[("timeout", "3")]), server)
        .unwrap();
    let got = collect(&client, Instant::now() + Duration::from_secs(1));
    assert_eq!(
        oack_options(&got[0].2),
        vec![("timeout".to_owned(), "3".to_owned())]
    );
}

#[test]
fn tftp_gives_one_address_at_most_four_transfers_and_ignores_repeated_requests() {
    let (_dir, _boot, _serve, port) = start_tftp();
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    // Ten requests from ten ports of one address, two of them twice; nobody acknowledges.
    let sockets: Vec<UdpSocket> = (0..10)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for (i, s) in sockets.iter().enumerate() {
        s.send_to(&rrq("undionly.kpxe", &[]), server).unwrap();
        if i < 2 {
            s.send_to(&rrq("undionly.kpxe", &[]), server).unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_millis(1000);
    let answered: Vec<Vec<SocketAddr>> = sockets
        .iter()
        .map(|s| {
            let mut from: Vec<SocketAddr> = collect(s, deadline).iter().map(|g| g.1).collect();
            from.dedup();
            from
        })
        .collect();
    let served = answered.iter().filter(|a| !a.is_empty()).count();
    assert_eq!(served, 4, "transfers per address: {answered:?}");
    // A repeated request is a retransmission: one transfer (one server port) for it.
    assert!(answered.iter().all(|a| a.len() <= 1), "{answered:?}");
    assert!(!answered[0].is_empty(), "the first request is served");

    // Another address is not affected.
    let other = UdpSocket::bind("127.0.0.2:0").unwrap();
    other.send_to(&rrq("undionly.kpxe", &[]), server).unwrap();
    let got = collect(&other, Instant::now() + Duration::from_millis(500));
    assert!(
        got.first().is_some_and(|g| g.2[..4] == [0, 3, 0, 1]),
        "DATA 1 for another address: {got:?}"
    );

    // Unacknowledged transfers are given up after two sends 2 s apart: the address gets its
    // four slots back within about 4 s.
    std::thread::sleep(Duration::from_millis(3500));
    let later = UdpSocket::bind("127.0.0.1:0").unwrap();
    later.send_to(&rrq("undionly.kpxe", &[]), server).unwrap();
    let got = collect(&later, Instant::now() + Duration::from_millis(1000));
    assert!(
        !got.is_empty(),
        "the address's slots were not freed 4.5 s after its last request"
    );
}
