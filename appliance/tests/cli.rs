//! The command line's contract: exit codes 0 (ok), 1 (invalid config), 2 (usage), `--version`,
//! and diagnostics on stderr with file, line and column.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_okd-appliance"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn fixture(rel: &str) -> String {
    format!("{}/../{rel}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn version_prints_the_crate_version() {
    let out = run(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("okd-appliance {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(run(&[]).status.code(), Some(2));
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        run(&["render", "x.yml", "--format", "nginx"]).status.code(),
        Some(2)
    );
}

#[test]
fn an_invalid_config_exits_1_with_every_problem_located() {
    let out = run(&["check", &fixture("config/bad/many-problems.yml")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("many-problems.yml:3:36"), "{stderr}");
    // Eight mistakes in the file; its ignition directory, which does not exist here, only
    // warns without --install.
    assert!(
        stderr.contains("many-problems.yml: 8 errors, 1 warning"),
        "{stderr}"
    );
}

#[test]
fn check_lists_every_unknown_key_with_the_other_problems_and_exits_1() {
    let out = run(&["check", &fixture("config/bad/unknown-keys.yml")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (at, said) in [
        ("unknown-keys.yml:9:3", "did you mean `upstream_dns`?"),
        ("unknown-keys.yml:17:5", "did you mean `install_dev`?"),
        ("unknown-keys.yml:20:3", "did you mean `drain_timeout`?"),
        ("unknown-keys.yml:21:27", "`lb.health` takes interval"),
        ("unknown-keys.yml:22:1", "did you mean `state_dir`?"),
        ("unknown-keys.yml:12:67", "outside the subnet"),
    ] {
        assert!(
            stderr.contains(at) && stderr.contains(said),
            "{at} {said}: {stderr}"
        );
    }
    assert!(
        stderr.contains("unknown-keys.yml: 6 errors, 1 warning"),
        "{stderr}"
    );
    // A misspelt required key: the unknown key, then serde's missing field.
    let out = run(&["check", &fixture("config/bad/unknown-key-missing.yml")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("did you mean `subnet`?"), "{stderr}");
    assert!(stderr.contains("missing field `subnet`"), "{stderr}");
    assert!(
        stderr.contains("unknown-key-missing.yml: 2 errors, 0 warnings"),
        "{stderr}"
    );
}

#[test]
fn a_missing_file_exits_1() {
    let out = run(&["check", "/nonexistent/okd.yml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("can't read /nonexistent/okd.yml"));
}

/// The warnings `check` printed: drawn by miette (`⚠`) and as plain `warning:` lines.
fn warnings_shown(stderr: &str) -> (usize, usize) {
    let drawn = stderr
        .lines()
        .filter(|l| l.trim_start().starts_with('⚠'))
        .count();
    let plain = stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .count();
    (drawn, plain)
}

#[test]
fn check_warns_of_missing_ignition_files_and_check_install_refuses_them() {
    // The shipped lab config points at ./install_dir, which the repository does not ship. A
    // services host restarted after the install directory was deleted must still start (the
    // unit runs `check` before `serve`): a warning, exit 0.
    let out = run(&["check", &fixture("config/lab.yml")]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ignition directory"), "{stderr}");
    // The summary ends the run and counts every warning: the config's (drawn, ⚠) and the boot
    // files' (plain lines), each with its next step.
    let (drawn, plain) = warnings_shown(&stderr);
    assert!(drawn == 1 && plain >= 3, "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!(
            "{}: 0 errors, {} warnings",
            fixture("config/lab.yml"),
            drawn + plain
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: `okd-appliance artifacts fetch "),
        "{stderr}"
    );

    // Before an install, the same finding is an error, with the fix: lab.yml names its
    // installer, so the one command that runs it.
    let out = run(&["check", "--install", &fixture("config/lab.yml")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ignition directory"), "{stderr}");
    assert!(
        stderr.contains("make them: `okd-appliance ignition create "),
        "{stderr}"
    );
    // Without an installer, the two commands that make them by hand.
    let out = run(&["check", "--install", &fixture("config/compact.yml")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("openshift-install create ignition-configs"),
        "{stderr}"
    );
}

#[test]
fn render_ignores_the_ignition_files() {
    let out = run(&["render", "--serial", "1", &fixture("config/lab.yml")]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).is_empty());
}

/// `render --format networkd -o DIR FIXTURE`.
fn render_networkd_into(dir: &std::path::Path, fixture_path: &str) -> std::process::Output {
    run(&[
        "render",
        "--format",
        "networkd",
        "-o",
        dir.to_str().unwrap(),
        &fixture(fixture_path),
    ])
}

#[test]
fn render_networkd_writes_the_cluster_nic_or_says_why_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let out = render_networkd_into(dir.path(), "config/lab.yml");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let file = dir.path().join("10-okd-appliance-ens19.network");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        file.display().to_string()
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("Name=ens19\n"), "{text}");
    assert!(text.contains("Address=10.0.0.1/24\n"), "{text}");

    // demo.yml serves on loopback ports and names no cluster NIC.
    let out = run(&[
        "render",
        "--format",
        "networkd",
        &fixture("config/demo.yml"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("network.interface is not set"),
        "{out:?}"
    );
}

/// A host file's networkd: one file per interface its clusters name (two-labs: ens19 and the
/// VLAN ens19.20), clusters on one interface in one file (one-subnet); `--cluster` is refused,
/// since one cluster's file would drop the other addresses on its NIC. `check --secret-files`
/// of a host file lists every cluster's secrets (the image hands them to the service account).
#[test]
fn a_host_file_renders_a_networkd_file_per_nic_and_lists_every_clusters_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let out = render_networkd_into(dir.path(), "config/hosts/two-labs.yml");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let expected: Vec<String> = ["ens19", "ens19.20"]
        .iter()
        .map(|i| {
            dir.path()
                .join(format!("10-okd-appliance-{i}.network"))
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(listed, expected);
    let vlan = std::fs::read_to_string(&expected[1]).unwrap();
    assert!(
        vlan.contains("Name=ens19.20\n") && vlan.contains("Address=10.0.20.1/24\n"),
        "{vlan}"
    );

    let out = run(&[
        "render",
        "--format",
        "networkd",
        &fixture("config/hosts/one-subnet.yml"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("[Match]").count(), 1, "{text}");
    assert!(text.contains("Address=10.0.0.1/24\n") && text.contains("Address=10.0.0.21/24\n"));

    let out = run(&[
        "render",
        "--format",
        "networkd",
        "--cluster",
        "test",
        &fixture("config/hosts/two-labs.yml"),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("without --cluster"));

    let out = run(&[
        "check",
        "--secret-files",
        &fixture("config/hosts/two-labs.yml"),
    ]);
    assert!(out.status.success(), "{out:?}");
    let secrets = String::from_utf8_lossy(&out.stdout);
    for f in [
        "okd-install/auth/kubeconfig",
        "test-install/auth/kubeconfig",
    ] {
        assert!(secrets.lines().any(|l| l.ends_with(f)), "{f}: {secrets}");
    }
}

/// `render --format keepalived`: one file per host of the pair, the preferred host with the
/// higher priority, unicast to the other, the virtual addresses, the check and notify hooks
/// naming this binary and the absolute state directory; a config without `ha` is refused.
#[test]
fn keepalived_is_rendered_for_each_host_of_a_pair() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("ha-secret");
    std::fs::write(&secret, "s3cret-of-the-pair-s3cret-of-the-pair\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = dir.path().join("okd.yml");
    std::fs::write(
        &config,
        r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network:
  interface: ens19
  subnet: 10.0.0.0/24
  appliance_ip: 10.0.0.10
  ipv6: { subnet: "fd00::/64", appliance_ip: "fd00::10" }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
state_dir: ./state
ha: { hosts: [10.0.0.3, 10.0.0.4], secret_file: ha-secret }
"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let rendered = run(&[
        "render",
        "--format",
        "keepalived",
        "-o",
        out.to_str().unwrap(),
        config.to_str().unwrap(),
    ]);
    assert!(rendered.status.success(), "{rendered:?}");
    let state = std::path::absolute(dir.path().join("state")).unwrap();
    let bin = env!("CARGO_BIN_EXE_okd-appliance");
    for (host, peer, priority) in [("10.0.0.3", "10.0.0.4", 150), ("10.0.0.4", "10.0.0.3", 100)] {
        let text = std::fs::read_to_string(out.join(format!("keepalived-{host}.conf"))).unwrap();
        for line in [
            "    interface ens19\n".to_owned(),
            "    virtual_router_id 51\n".to_owned(),
            format!("    priority {priority}\n"),
            format!("    unicast_src_ip {host}\n"),
            format!("    unicast_peer {{\n        {peer}\n    }}\n"),
            "        10.0.0.10/24 dev ens19\n".to_owned(),
            "        fd00::10/64 dev ens19\n".to_owned(),
            format!(
                "    script \"{bin} ha check --state-dir {}\"\n",
                state.display()
            ),
            format!(
                "    notify_master \"{bin} ha notify active --state-dir {}\"\n",
                state.display()
            ),
            format!(
                "    notify_fault \"{bin} ha notify standby --state-dir {}\"\n",
                state.display()
            ),
        ] {
            assert!(text.contains(&line), "no {line:?} in\n{text}");
        }
        // VRRP's password is sent in cleartext: derived from the secret, never a piece of it,
        // and the file that holds it is owner-only.
        let pass = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("auth_pass "))
            .unwrap_or_else(|| panic!("no auth_pass in\n{text}"));
        assert_eq!(pass.len(), 8, "{pass}");
        assert!(
            !"s3cret-of-the-pair-s3cret-of-the-pair".contains(pass),
            "{pass}"
        );
        let mode = std::fs::metadata(out.join(format!("keepalived-{host}.conf")))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    // One rule for the pair's secret in render, check and serve: 32 characters at least.
    std::fs::write(&secret, "pair-secret-0123\n").unwrap();
    for args in [
        vec![
            "render",
            "--format",
            "keepalived",
            "-o",
            out.to_str().unwrap(),
        ],
        vec!["check"],
    ] {
        let mut args = args;
        args.push(config.to_str().unwrap());
        let refused = run(&args);
        let said = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{args:?}: {said}");
        assert!(
            said.contains("is 16 characters long; it needs at least 32"),
            "{args:?}: {said}"
        );
    }
    let plain = run(&[
        "render",
        "--format",
        "keepalived",
        &fixture("config/lab.yml"),
    ]);
    assert_eq!(plain.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&plain.stderr).contains("no ha section"));
}

/// `check --secret-files`: every secret file the config names, absolute, whatever its mode (the
/// services VM image gives them to the service account, 0600, from this list); plain `check`
/// refuses the same files while they are too open.
#[test]
fn check_lists_the_secret_files_and_refuses_them_loose() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    for f in ["ha-secret", "api-token", "api.key"] {
        std::fs::write(base.join(f), "0123456789abcdef0123456789abcdef\n").unwrap();
        std::fs::set_permissions(base.join(f), std::fs::Permissions::from_mode(0o640)).unwrap();
    }
    let config = base.join("okd.yml");
    std::fs::write(
        &config,
        r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { interface: ens19, subnet: 10.0.0.0/24, appliance_ip: 10.0.0.10 }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
state_dir: ./state
ha: { hosts: [10.0.0.3, 10.0.0.4], secret_file: ha-secret }
api: { listen: "10.0.0.10:9443", cert_file: api.pem, key_file: api.key, token_file: api-token }
"#,
    )
    .unwrap();
    let listed = run(&["check", "--secret-files", config.to_str().unwrap()]);
    assert!(listed.status.success(), "{listed:?}");
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let expected: Vec<String> = [
        "install_dir/auth/kubeconfig",
        "api.key",
        "api-token",
        "ha-secret",
    ]
    .iter()
    .map(|f| base.join(f).display().to_string())
    .collect();
    assert_eq!(listed.lines().collect::<Vec<_>>(), expected);
    let checked = run(&["check", config.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(1), "{said}");
    for f in ["ha-secret", "api-token", "api.key"] {
        assert!(
            said.contains(&format!("chmod 600 {}", base.join(f).display())),
            "{f}: {said}"
        );
    }
}

/// Warnings: `check` lists them all; every other command says how many in one line and where
/// to see them (a small lab's 100 lines of sizing warnings once came with every command).
#[test]
fn only_check_lists_the_warnings() {
    let file = fixture("config/warn/machine-below-minimum.yml");
    let checked = run(&["check", &file]);
    let listed = String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success(), "{listed}");
    assert!(
        listed.matches("⚠").count() >= 2 || listed.matches("warning").count() >= 2,
        "{listed}"
    );
    let rendered = run(&["render", &file]);
    assert!(rendered.status.success());
    let said = String::from_utf8_lossy(&rendered.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains(" warnings (`okd-appliance check ") && said.contains("lists them)"),
        "{said}"
    );
}

/// `check --install` refuses a config whose nodes would boot into a 404 (the artifacts their
/// scripts name are not there); plain `check` warns; with the files in place both pass.
#[test]
fn check_install_wants_every_artifact_the_scripts_name() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("okd.yml");
    std::fs::write(
        &config,
        r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.10 }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
state_dir: ./state
listen: { tftp: [] }
"#,
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("install_dir")).unwrap();
    // The only node is a master: a single-node cluster, whose master boots with the
    // bootstrap-in-place config.
    std::fs::write(
        dir.path()
            .join("install_dir/bootstrap-in-place-for-live-iso.ign"),
        "{}",
    )
    .unwrap();
    let file = config.to_str().unwrap();
    let refused = run(&["check", "--install", file]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    for name in ["kernel", "initramfs.img", "rootfs.img"] {
        assert!(
            said.contains(&format!(
                "error: {}",
                dir.path().join("artifacts").join(name).display()
            )),
            "{name}: {said}"
        );
    }
    // And the appliance's address, which this host doesn't have (issue 39).
    assert!(
        said.contains("error: 10.0.0.10 is not on this host: dns/udp, dns/tcp, http/tcp can't listen there until it is"),
        "{said}"
    );
    let warned = run(&["check", file]);
    assert!(warned.status.success());
    let warnings = String::from_utf8_lossy(&warned.stderr);
    assert!(warnings.contains("warning: "), "{warnings}");
    assert!(!warnings.contains("not on this host"), "{warnings}");
    // On the wildcard address, the listeners need no address of their own.
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "listen: { tftp: [] }",
        r#"listen: { tftp: [], dns: ["0.0.0.0:53"], http: ["0.0.0.0:8080"] }"#,
    );
    std::fs::write(&config, text).unwrap();
    std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
    for name in ["kernel", "initramfs.img", "rootfs.img"] {
        std::fs::write(dir.path().join("artifacts").join(name), b"x").unwrap();
    }
    let ok = run(&["check", "--install", file]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

/// A host file (issue 26): `check` validates every cluster file and the clusters against each
/// other; a conflict exits 1 drawn in both files; `render` shows every cluster and the host's
/// zones; a command that takes one cluster's file says it was given a host file.
#[test]
fn check_reads_a_host_file_and_the_other_commands_refuse_it() {
    let out = run(&["check", &fixture("config/hosts/two-labs.yml")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("cluster okd ("), "{stdout}");
    assert!(stdout.contains("cluster test ("), "{stdout}");
    assert!(
        stdout.contains("two-labs.yml: ok: 2 clusters on one host, no conflict between them"),
        "{stdout}"
    );

    let out = run(&["check", &fixture("config/hosts/bad/conflicts.yml")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The MAC b.yml repeats: at b.yml's line, with a.yml's line drawn under it.
    assert!(stderr.contains("host::duplicate-mac"), "{stderr}");
    assert!(stderr.contains("b.yml:10:42"), "{stderr}");
    assert!(stderr.contains("a.yml:10:42"), "{stderr}");
    assert!(
        stderr.contains("conflicts.yml: 4 cluster files, 10 errors"),
        "{stderr}"
    );

    // node kargs: a host file's node by its cluster.
    let out = run(&[
        "node",
        "kargs",
        "master-0",
        &fixture("config/hosts/two-labs.yml"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("name one with --cluster ID"), "{stderr}");
    let out = run(&[
        "node",
        "kargs",
        "master-0",
        "--cluster",
        "test",
        &fixture("config/hosts/two-labs.yml"),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let alone = run(&[
        "node",
        "kargs",
        "master-0",
        &fixture("config/hosts/test.yml"),
    ]);
    assert_eq!(
        out.stdout, alone.stdout,
        "test's master-0, as its own file says"
    );

    // render: every cluster's plan and the host's zones; one cluster's formats per cluster.
    let out = run(&[
        "render",
        &fixture("config/hosts/two-labs.yml"),
        "--serial",
        "5",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "# cluster okd (",
        "# cluster test (",
        "20.0.10.in-addr.arpa. serial 5, 8 records",
    ] {
        assert!(stdout.contains(line), "{line:?} in\n{stdout}");
    }
    let out = run(&[
        "render",
        &fixture("config/hosts/two-labs.yml"),
        "--format",
        "dnsmasq",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("add `--cluster ID` (its clusters: okd, test)"),
        "{stderr}"
    );
    // `--cluster ID`: that cluster in any format, as its own file renders it.
    let host = fixture("config/hosts/two-labs.yml");
    for format in ["dnsmasq", "bind", "human"] {
        let one = run(&[
            "render",
            &host,
            "--cluster",
            "test",
            "--format",
            format,
            "--serial",
            "5",
        ]);
        assert_eq!(one.status.code(), Some(0), "{format}");
        // two-labs.yml lists `{ file: test.yml, id: test }`.
        let alone = run(&[
            "render",
            &fixture("config/hosts/test.yml"),
            "--format",
            format,
            "--serial",
            "5",
        ]);
        assert_eq!(
            one.stdout, alone.stdout,
            "{format}: --cluster test renders as test's file"
        );
    }
    let out = run(&["render", &host, "--cluster", "nope", "--format", "dnsmasq"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("lists no cluster nope; its clusters: okd, test"),
        "{stderr}"
    );
    let sno = fixture("config/single-node.yml");
    let out = run(&["render", &sno, "--cluster", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is the file of cluster sno, not nope"));
    let out = run(&["render", &sno, "--cluster", "sno", "--serial", "5"]);
    assert_eq!(out.status.code(), Some(0));
}

/// A single-node cluster: `check` says so and where its names point; api, api-int and `*.apps`
/// resolve to the node itself by default and to the appliance with `lb.single_node: proxied`,
/// whose load balancer then has the node as its only backend.
#[test]
fn check_and_render_show_where_a_single_nodes_names_point() {
    let file = fixture("config/single-node.yml");
    let checked = run(&["check", &file]);
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{said}");
    assert!(
        said.contains("single-node cluster: sno-0 boots the live system with bootstrap-in-place-for-live-iso.ign and installs itself (bootstrap in place); api, api-int and *.apps resolve to it (lb.single_node: direct)"),
        "{said}"
    );
    let names = |file: &str| -> Vec<String> {
        let out = run(&["render", "--format", "bind", file]);
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("api") || l.starts_with("*.apps"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    assert_eq!(
        names(&file),
        [
            "api.sno.home.example.net. 300 IN A 10.40.0.10",
            "api-int.sno.home.example.net. 300 IN A 10.40.0.10",
            "*.apps.sno.home.example.net. 300 IN A 10.40.0.10",
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    let proxied = dir.path().join("sno.yml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&proxied, format!("{text}lb: {{ single_node: proxied }}\n")).unwrap();
    let proxied = proxied.to_str().unwrap();
    let checked = run(&["check", proxied]);
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(
        said.contains("api, api-int and *.apps resolve to the appliance, which balances to it (lb.single_node: proxied)"),
        "{said}"
    );
    assert_eq!(
        names(proxied),
        [
            "api.sno.home.example.net. 300 IN A 10.40.0.2",
            "api-int.sno.home.example.net. 300 IN A 10.40.0.2",
            "*.apps.sno.home.example.net. 300 IN A 10.40.0.2",
        ]
    );
    let haproxy = run(&["render", "--format", "haproxy", proxied]);
    let conf = String::from_utf8_lossy(&haproxy.stdout);
    assert!(haproxy.status.success(), "{conf}");
    for port in [6443, 22623, 443, 80] {
        assert!(
            conf.contains(&format!("bind 10.40.0.2:{port}")),
            "{port}: {conf}"
        );
    }
    assert!(conf.contains("server sno-0 10.40.0.10:6443"), "{conf}");
}

/// The operator commands take a host file and `--cluster ID`: needed only when the host lists
/// several clusters, checked against its ids before anything is asked.
#[test]
fn operator_commands_name_a_host_files_cluster() {
    let host = fixture("config/hosts/two-labs.yml");
    let out = run(&["nodes", "list", "--cluster", "test", &host]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("master-0 (master): vm master-0.test.lab.example.com"),
        "{stdout}"
    );
    assert!(!stdout.contains(".okd."), "only test's machines: {stdout}");

    let out = run(&["nodes", "list", &host]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("lists several clusters (okd, test): name one with --cluster ID"),
        "{stderr}"
    );
    for args in [
        &["nodes", "list", "--cluster", "nope", host.as_str()][..],
        &["status", "--cluster", "nope", host.as_str()],
        &["cluster", "status", "--cluster", "nope", host.as_str()],
        &[
            "lb",
            "drain",
            "master-0",
            "--cluster",
            "nope",
            host.as_str(),
        ],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("has no cluster nope (its clusters: okd, test)"),
            "{args:?}: {stderr}"
        );
    }
    // A cluster file is its own cluster: another id is a usage error.
    let out = run(&[
        "nodes",
        "list",
        "--cluster",
        "okd",
        &fixture("config/hosts/test.yml"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is cluster test's config, not okd's"));
}

/// An admin socket in `dir` that answers each of `replies` to one request, in order, and
/// returns the request lines it was sent.
fn admin_socket(
    dir: &std::path::Path,
    replies: &'static [&'static str],
) -> std::thread::JoinHandle<Vec<String>> {
    use std::io::{BufRead as _, Write as _};
    let listener = std::os::unix::net::UnixListener::bind(dir.join("admin.sock")).unwrap();
    std::thread::spawn(move || {
        let mut asked = Vec::new();
        for reply in replies {
            let (stream, _) = listener.accept().unwrap();
            let mut line = String::new();
            std::io::BufReader::new(&stream)
                .read_line(&mut line)
                .unwrap();
            asked.push(line.trim_end().to_owned());
            (&stream).write_all(reply.as_bytes()).unwrap();
        }
        asked
    })
}

#[test]
fn an_admin_reply_s_kind_is_the_exit_code_not_its_words() {
    // A timeout whose reason starts "no ..." is exit 1, a node the appliance does not know
    // exit 2, a refusal exit 1, whatever the words.
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let socket = admin_socket(
        dir.path(),
        &[
            "error(timeout): no answer within 5s\n",
            "error(usage): no node is named nobody\n",
            "error: no backends left to drain: the pool would be empty\n",
            "ok: master-0 drained\n",
        ],
    );
    let said = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let out = run(&["reload", "--state-dir", state]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert_eq!(said(&out), "error: no answer within 5s\n");
    let out = run(&["lb", "drain", "nobody", "--state-dir", state]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    let out = run(&["lb", "drain", "master-1", "--state-dir", state]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let out = run(&["lb", "drain", "master-0", "--state-dir", state]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok: master-0 drained\n"
    );
    assert_eq!(
        socket.join().unwrap(),
        [
            "reload",
            "lb drain nobody",
            "lb drain master-1",
            "lb drain master-0"
        ]
    );
}
