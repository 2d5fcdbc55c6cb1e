//! The control section's checks, each on a config that breaks one rule.

use super::*;

#[test]
fn fingerprints_are_sha256_with_or_without_colons() {
    let colons = (0..32)
        .map(|i| format!("{i:02X}"))
        .collect::<Vec<_>>()
        .join(":");
    let digest = parse_fingerprint(&colons).unwrap();
    assert_eq!(digest[31], 31);
    assert_eq!(
        parse_fingerprint(&colons.replace(':', "").to_lowercase()),
        Ok(digest)
    );
    let sha1 = (0..20)
        .map(|i| format!("{i:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    assert_eq!(parse_fingerprint(&sha1), Err(Some(20)));
    assert_eq!(parse_fingerprint("zz"), Err(None));
}

#[test]
fn secret_files_must_be_owner_only_regular_files() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "s3cret\n").unwrap();
    for (mode, ok) in [
        (0o600, true),
        (0o400, true),
        (0o640, false),
        (0o604, false),
        (0o620, false),
    ] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(file_mode(&path).unwrap() & 0o077 == 0, ok, "{mode:o}");
    }
    assert_eq!(
        file_mode(dir.path()).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        file_mode(&dir.path().join("absent")).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

/// Through the whole load with the real file system: a group-readable token file is
/// refused at its line, an owner-only one passes, and the secret never shows.
#[test]
fn a_group_readable_token_file_is_refused_where_it_is_named() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    for sub in ["install_dir", "artifacts"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    // Its only node is a master: a single-node cluster's config.
    std::fs::write(
        dir.path()
            .join("install_dir/bootstrap-in-place-for-live-iso.ign"),
        "{}",
    )
    .unwrap();
    // `cluster up` drives an install with a provider: its kubeconfig is checked too.
    std::fs::create_dir(dir.path().join("install_dir/auth")).unwrap();
    let kubeconfig = dir.path().join("install_dir/auth/kubeconfig");
    std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nclusters:\n- cluster:\n    server: https://api.okd.lab.example.com:6443\n  name: okd\n",
        )
        .unwrap();
    std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(dir.path().join("ca.pem"), "").unwrap();
    let token = dir.path().join("pve-token");
    std::fs::write(&token, "9f2d-very-secret\n").unwrap();
    let text = r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
control:
  provider: proxmox
  proxmox:
    url: https://pve1:8006
    node: pve1
    token_id: "okd@pve!appliance"
    token_secret_file: pve-token
    ca_file: ca.pem
    storage: local-lvm
    bridge: vmbr0
"#;
    let files = super::super::super::RealFiles {
        now: std::time::SystemTime::now(),
    };
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = super::super::super::parse(
        text,
        "okd.yml",
        dir.path(),
        super::super::super::InstallCheck::Require(&files),
    )
    .unwrap_err();
    let shown = err.render(super::super::super::RenderStyle::Plain);
    assert!(shown.contains("okd.yml:13:24"), "{shown}");
    assert!(shown.contains("(mode 0640)"), "{shown}");
    assert!(shown.contains("chmod 600"), "{shown}");
    assert!(!shown.contains("very-secret"), "{shown}");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let loaded = super::super::super::parse(
        text,
        "okd.yml",
        dir.path(),
        super::super::super::InstallCheck::Require(&files),
    )
    .unwrap();
    let Provider::Proxmox(px) = &loaded.config.control.provider else {
        panic!("not proxmox")
    };
    assert_eq!(px.token_secret, SecretSource::File(token));
    assert!(!format!("{:?}", loaded.config).contains("very-secret"));
}
