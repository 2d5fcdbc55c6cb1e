//! The TFTP server with curl's TFTP client on loopback: whole files with and without options,
//! block-number rollover, a boot file that is a symlink out of the directory (as Debian
//! installs ipxe.efi), and refusals for every other name.

mod common;

use std::process::Command;

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
    let port = line.rsplit(':').next().unwrap().trim();
    serve.expect_line("ready");
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
