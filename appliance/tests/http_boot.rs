//! The HTTP boot server with the simplest clients a boot environment has: a request written
//! by hand (busybox `nc`), after which the client closes its sending side and waits for the
//! answer. Found by the boot-chain VM tests: the test initramfs's HEAD of the rootfs came
//! back empty about one time in two. And ipxe.efi for UEFI HTTP boot when it is a symlink out
//! of `ipxe_dir`, as Debian installs it.

mod common;

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use common::Serve;

fn start(dir: &std::path::Path) -> (Serve, String) {
    std::fs::create_dir_all(dir.join("install_dir")).unwrap();
    std::fs::write(dir.join("install_dir/master.ign"), "{}").unwrap();
    std::fs::create_dir_all(dir.join("artifacts")).unwrap();
    std::fs::write(dir.join("artifacts/rootfs.img"), vec![7u8; 100_000]).unwrap();
    // As Debian's ipxe package has it: /usr/lib/ipxe/ipxe.efi -> /boot/ipxe.efi.
    std::fs::create_dir_all(dir.join("ipxe")).unwrap();
    std::fs::write(dir.join("boot-ipxe.efi"), b"an EFI binary").unwrap();
    std::os::unix::fs::symlink(dir.join("boot-ipxe.efi"), dir.join("ipxe/ipxe.efi")).unwrap();
    std::fs::write(dir.join("ipxe/ipxe.lkrn"), b"not a boot file").unwrap();
    let config = dir.join("okd.yml");
    std::fs::write(
        &config,
        r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts, ipxe_dir: ./ipxe }
state_dir: ./state
listen: { http: ["127.0.0.1:0"], tftp: [], dns: [], dhcp: [], api: [], machine_config: [], ingress_https: [], ingress_http: [] }
"#,
    )
    .unwrap();
    let mut serve = Serve::start(&config);
    let line = serve.expect_line("listening for http/tcp on 127.0.0.1:");
    let addr = line.rsplit(' ').next().unwrap().trim().to_owned();
    serve.expect_line("ready");
    (serve, addr)
}

/// Sends `request`, shuts the write side down at once, and returns everything read back.
fn half_closed(addr: &str, request: &str) -> String {
    // Bodies are read whole; only heads go into failure messages.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut back = Vec::new();
    let _ = s.read_to_end(&mut back);
    String::from_utf8_lossy(&back).into_owned()
}

#[test]
fn a_client_that_half_closes_after_its_request_gets_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (_serve, addr) = start(dir.path());
    // Each round is a race between the server reading the client's FIN and answering; a file
    // (opened on the blocking pool) loses it most of the time without half-close support.
    for round in 0..20 {
        for (request, want) in [
            (
                "HEAD /artifacts/rootfs.img HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                "content-length: 100000",
            ),
            (
                "GET /artifacts/rootfs.img HTTP/1.0\r\nHost: x\r\n\r\n",
                "content-length: 100000",
            ),
            (
                "GET /boot/52-54-00-00-00-02.ipxe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                "#!ipxe",
            ),
        ] {
            let answer = half_closed(&addr, request);
            let head = answer.split("\r\n\r\n").next().unwrap_or_default();
            assert!(
                head.starts_with("HTTP/1.") && head.contains(" 200 "),
                "round {round}: {request:?} got {head:?}"
            );
            assert!(
                answer.to_lowercase().contains(want),
                "round {round}: {request:?} got {head:?}"
            );
        }
    }
}

#[test]
fn ipxe_efi_is_served_through_debians_symlink_and_nothing_else_is() {
    let dir = tempfile::tempdir().unwrap();
    let (_serve, addr) = start(dir.path());
    let get = |path: &str| {
        half_closed(
            &addr,
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        )
    };
    let efi = get("/ipxe.efi");
    assert!(efi.starts_with("HTTP/1.1 200"), "{efi}");
    assert!(efi.ends_with("\r\n\r\nan EFI binary"), "{efi}");
    for other in ["/undionly.kpxe", "/ipxe.lkrn", "/ipxe/ipxe.efi"] {
        let answer = get(other);
        assert!(answer.starts_with("HTTP/1.1 404"), "{other}: {answer}");
    }
    // A boot file the DHCP server hands out but `ipxe_dir` lacks: the 404 says what to install.
    let missing = get("/undionly.kpxe");
    assert!(
        missing.ends_with("\r\n\r\niPXE binary not installed (Debian: apt install ipxe)\n"),
        "{missing}"
    );
}
