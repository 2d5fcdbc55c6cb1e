//! The appliance drives openshift-install (`install.openshift_install`): `ignition create` from
//! a config and an empty `ignition_dir` to a set `check` passes, with a custom manifest inside
//! bootstrap.ign; a failing installer (or one whose set disagrees with the config) leaves the
//! set in place; the refusal once a node fetched its ignition from the set (`ignition create`
//! and `cluster up`); `cluster up` making a missing or expired set before any fetch; `installer
//! fetch` from a release mirror in a namespace, with a good and a tampered tarball.
//!
//! The installer is `openshift_install_double.py`, which does to its `--dir` what the real one
//! does for these commands (its header cites openshift/installer for each file) and logs its
//! calls.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use harness::{Topology, repo_root, require_root, require_tools, wait_until};

use crate::dns_support::start_appliance;
use crate::support::appliance;

const BASE: &str = "http://10.99.0.1:8080";
const RELEASE: &str = "4.19.0-okd-scos.1";
const CHRONY: &str = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  labels:\n    machineconfiguration.openshift.io/role: worker\n  name: 99-worker-chrony\n";

/// The stand-in, in the repository.
fn source() -> PathBuf {
    repo_root().join("tests/e2e/openshift_install_double.py")
}

/// The stand-in, copied into the test's own directory `dir`: the appliance runs an installer
/// only from a path no other account can write to (`installer::trusted`), and the clone's
/// directories may be group-writable on a CI machine.
fn double(dir: &Path) -> PathBuf {
    let path = dir.join("openshift-install-double");
    if !path.exists() {
        std::fs::copy(source(), &path).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    path
}

/// A cluster directory: okd.yml naming `installer` (YAML), its pull secret, a manifests
/// directory with one MachineConfig and a README the installer would not read; no ignition set.
fn cluster(dir: &Path, installer: &str) -> PathBuf {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(manifests.join("99-worker-chrony.yaml"), CHRONY).unwrap();
    std::fs::write(manifests.join("README"), "not a manifest\n").unwrap();
    let secret = dir.join("pull-secret.json");
    std::fs::write(&secret, r#"{"auths":{"quay.io":{"auth":"eDp5"}}}"#).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = dir.join("okd.yml");
    std::fs::write(
        &config,
        format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
  - {{ name: boot, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.99.0.7 }}
  - {{ name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }}
  - {{ name: wrk0, role: worker, mac: "52:54:00:00:00:21", ip: 10.99.0.21 }}
install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  base_url: "{BASE}"
  openshift_install: {installer}
  manifests_dir: ./manifests
install_config: {{ pull_secret_file: ./pull-secret.json }}
orchestration: {{ poll: 200ms, settle: 1s }}
state_dir: {}
listen:
  dns: []
  dhcp: []
  tftp: []
  http: ["10.99.0.1:8080"]
  api: []
  machine_config: []
  ingress_https: []
  ingress_http: []
"#,
            dir.join("state").display()
        ),
    )
    .unwrap();
    config
}

/// `okd-appliance ARGS` with the installer's call log at `log` and `env` set.
fn run(args: &[&str], log: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(harness::appliance_bin().unwrap());
    cmd.args(args)
        .env("OPENSHIFT_INSTALL_DOUBLE_LOG", log)
        .env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("okd-appliance runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The installer's calls: (argv, the files in --dir before it ran).
fn calls(log: &Path) -> Vec<(Vec<String>, Vec<String>)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let strings = |k: &str| -> Vec<String> {
                v[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_owned())
                    .collect()
            };
            // The appliance's own mark of its work directory is not the installer's business.
            let before = strings("before")
                .into_iter()
                .filter(|f| f != ".okd-appliance-work")
                .collect();
            (strings("argv"), before)
        })
        .collect()
}

/// The contents of `path` among bootstrap.ign's storage files.
fn bootstrap_file(ignition_dir: &Path, path: &str) -> Option<String> {
    let ign: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ignition_dir.join("bootstrap.ign")).unwrap())
            .unwrap();
    let file = ign["storage"]["files"]
        .as_array()?
        .iter()
        .find(|f| f["path"] == path)?;
    let url = file["contents"]["source"].as_str()?;
    let b64 = url.strip_prefix("data:text/plain;charset=utf-8;base64,")?;
    let out = Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(b64.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    Some(String::from_utf8(out.stdout).unwrap())
}

/// What `check` says about the ignition set: its lines that speak of ignition.
fn check_findings(config: &Path) -> Vec<String> {
    let out = appliance(["check".as_ref(), config.as_os_str()]);
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
        .lines()
        .filter(|l| l.contains("ignition") || l.contains("kubeconfig"))
        .map(str::to_owned)
        .collect()
}

fn set_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    [
        "bootstrap.ign",
        "master.ign",
        "worker.ign",
        "auth/kubeconfig",
    ]
    .iter()
    .map(|f| {
        (
            (*f).to_owned(),
            std::fs::read(dir.join(f)).unwrap_or_default(),
        )
    })
    .collect()
}

/// bootstrap.ign written `hours` ago.
fn age_bootstrap(ignition_dir: &Path, hours: u64) {
    let file = std::fs::File::options()
        .write(true)
        .open(ignition_dir.join("bootstrap.ign"))
        .unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(hours * 3600))
        .unwrap();
}

/// The running appliance's journal, as its admin socket gives it.
fn journal(state_dir: &Path) -> String {
    let mut s = UnixStream::connect(state_dir.join("admin.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"journal\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn ignition_create_makes_a_set_check_passes_with_the_custom_manifest_inside() {
    if !require_tools(&["python3", "base64"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(dir.path(), &double(dir.path()).display().to_string());
    let ignition_dir = dir.path().join("install_dir");
    let log = dir.path().join("calls.jsonl");
    // Without a set, `check` says so and names the one command that makes it.
    let before = check_findings(&config);
    assert!(
        before
            .iter()
            .any(|l| l.contains("okd-appliance ignition create")),
        "{before:?}"
    );

    let out = run(&["ignition", "create", config.to_str().unwrap()], &log, &[]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    for step in [
        "[1/6] install-config.yaml",
        "[2/6] openshift-install create manifests",
        "[3/6] custom manifests into openshift/",
        "[4/6] openshift-install create ignition-configs",
        "[5/6] check the set against the config",
        "[6/6] put the set in place",
        // The installer's own output streams through.
        "level=info msg=\"Consuming Install Config from target directory\"",
        "README skipped",
    ] {
        assert!(said.contains(step), "{step:?} in:\n{said}");
    }
    assert!(
        check_findings(&config).is_empty(),
        "{:?}",
        check_findings(&config)
    );

    // The installer saw what the real one would: install-config.yaml alone, then the manifests
    // with the custom one among them (and never the README).
    let calls = calls(&log);
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].0, ["create", "manifests"]);
    assert_eq!(calls[0].1, ["install-config.yaml"]);
    assert_eq!(calls[1].0, ["create", "ignition-configs"]);
    assert!(
        calls[1]
            .1
            .contains(&"openshift/99-worker-chrony.yaml".to_owned()),
        "{:?}",
        calls[1].1
    );
    assert!(!calls[1].1.iter().any(|f| f.contains("README")));
    assert_eq!(
        bootstrap_file(
            &ignition_dir,
            "/opt/openshift/openshift/99-worker-chrony.yaml"
        )
        .as_deref(),
        Some(CHRONY)
    );
    // install-config.yaml was consumed, and was this config's.
    assert!(!ignition_dir.join("install-config.yaml").exists());
    let state: serde_json::Value = serde_json::from_slice(
        &std::fs::read(ignition_dir.join(".openshift_install_state.json")).unwrap(),
    )
    .unwrap();
    let ic = &state["*installconfig.InstallConfig"]["config"];
    assert_eq!(ic["metadata"]["name"], "okd");
    assert_eq!(ic["baseDomain"], "lab.example.com");
    assert!(!dir.path().join(".install_dir.new").exists());
    assert!(!dir.path().join("install_dir.previous").exists());
    assert!(!ignition_dir.join(".okd-appliance-work").exists());

    // Again: the new set replaces the first, which is kept beside it.
    let first = set_bytes(&ignition_dir);
    let out = run(&["ignition", "create", config.to_str().unwrap()], &log, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(set_bytes(&dir.path().join("install_dir.previous")), first);
    assert_ne!(set_bytes(&ignition_dir), first, "a new CA, a new set");
    assert!(
        text(&out).contains("the set it replaced is in"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_failing_installer_or_a_set_for_another_cluster_leaves_the_set_in_place() {
    if !require_tools(&["python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(dir.path(), &double(dir.path()).display().to_string());
    let ignition_dir = dir.path().join("install_dir");
    let log = dir.path().join("calls.jsonl");
    let c = config.to_str().unwrap();
    assert!(run(&["ignition", "create", c], &log, &[]).status.success());
    let made = set_bytes(&ignition_dir);
    for (env, step) in [
        (
            ("OPENSHIFT_INSTALL_DOUBLE_FAIL", "manifests"),
            "step 2/6 failed",
        ),
        (
            ("OPENSHIFT_INSTALL_DOUBLE_FAIL", "ignition-configs"),
            "step 4/6 failed",
        ),
        // The installer made a set for another domain: check refuses it.
        (
            ("OPENSHIFT_INSTALL_DOUBLE_BASE_DOMAIN", "other.example.com"),
            "step 5/6 failed: the new set does not match the config",
        ),
    ] {
        let out = run(&["ignition", "create", c], &log, &[env]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(said.contains(step), "{step:?} in:\n{said}");
        assert!(said.contains("install_dir is untouched"), "{said}");
        assert_eq!(set_bytes(&ignition_dir), made, "{env:?}");
        assert!(!dir.path().join("install_dir.previous").exists());
    }
    // A missing installer is named, with the command that gets one.
    let other = tempfile::tempdir().unwrap();
    let config = cluster(other.path(), "./no-such-openshift-install");
    let out = run(&["ignition", "create", config.to_str().unwrap()], &log, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("does not exist"), "{}", text(&out));
}

/// Starts the appliance in `topo`'s services namespace on the cluster in `dir`.
fn serve(topo: &Topology, config: &Path) -> harness::Process {
    start_appliance(topo.services(), config)
}

#[test]
fn a_set_a_node_fetched_its_ignition_from_is_never_made_again() {
    if !require_root() || !require_tools(&["python3", "curl"]) {
        return;
    }
    let topo = Topology::new("inst").unwrap();
    let mst0 = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(dir.path(), &double(dir.path()).display().to_string());
    let c = config.to_str().unwrap();
    let ignition_dir = dir.path().join("install_dir");
    let log = dir.path().join("calls.jsonl");
    assert!(run(&["ignition", "create", c], &log, &[]).status.success());
    let made = set_bytes(&ignition_dir);
    let appliance = serve(&topo, &config);

    let fetched = crate::http::status(&mst0, &[], &format!("{BASE}/ignition/mst0.ign"));
    assert_eq!(fetched, "200", "{}", appliance.log_tails());
    let out = run(&["ignition", "create", c], &log, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("mst0 fetched its ignition from the set in "),
        "{}",
        text(&out)
    );
    // `cluster up` with that set expired: refused, journalled, nothing made.
    age_bootstrap(&ignition_dir, 25);
    let calls_before = calls(&log).len();
    let out = run(&["cluster", "up", c], &log, &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("bootstrap.ign was written 25 h ago")
            && said.contains("mst0 fetched its ignition from this set"),
        "{said}"
    );
    assert_eq!(calls(&log).len(), calls_before, "the installer never ran");
    assert_eq!(set_bytes(&ignition_dir), made);
    let journal = journal(&dir.path().join("state"));
    assert!(
        journal.contains("ignition set not made: `cluster up` did not make a new set"),
        "{journal}"
    );
    // --force makes it, and says which node needs a reinstall.
    let out = run(&["ignition", "create", "--force", c], &log, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("mst0 fetched its ignition from the set being replaced"));
    assert_ne!(set_bytes(&ignition_dir), made);
    drop(appliance);
}

#[test]
fn cluster_up_makes_a_missing_or_expired_set_before_any_fetch() {
    if !require_root() || !require_tools(&["python3", "curl"]) {
        return;
    }
    let topo = Topology::new("inup").unwrap();
    let mst0 = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(dir.path(), &double(dir.path()).display().to_string());
    let c = config.to_str().unwrap();
    let ignition_dir = dir.path().join("install_dir");
    let state_dir = dir.path().join("state");
    let log = dir.path().join("calls.jsonl");
    // No set yet: the appliance serves (DNS, DHCP and the load balancer never wait for one)
    // and refuses the ignition it does not have.
    let appliance = serve(&topo, &config);
    assert_eq!(
        crate::http::status(&mst0, &[], &format!("{BASE}/ignition/mst0.ign")),
        "404"
    );

    let out = run(&["cluster", "up", c], &log, &[]);
    let said = text(&out);
    assert!(out.status.success(), "{said}\n{}", appliance.log_tails());
    assert!(
        said.contains("making the ignition set: bootstrap.ign, master.ign, worker.ign and auth/kubeconfig not in the ignition directory"),
        "{said}"
    );
    assert!(said.contains("started"), "{said}");
    assert_eq!(calls(&log).len(), 2);
    assert!(check_findings(&config).is_empty());
    assert!(wait_until(Duration::from_secs(10), || {
        journal(&state_dir).contains("ignition set made: ")
    }));

    // Expired with no fetch: made again; the expired set is kept beside it.
    let first = set_bytes(&ignition_dir);
    age_bootstrap(&ignition_dir, 25);
    let out = run(&["cluster", "up", c], &log, &[]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("making the ignition set: bootstrap.ign was written 25 h ago"),
        "{said}"
    );
    assert_eq!(set_bytes(&dir.path().join("install_dir.previous")), first);
    assert_ne!(set_bytes(&ignition_dir), first);
    assert_eq!(calls(&log).len(), 4);

    // Fresh: used as it is, the installer not run.
    let out = run(&["cluster", "up", c], &log, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("making the ignition set"));
    assert_eq!(calls(&log).len(), 4);
    // The new set is served at once: the boot server reads it per request.
    assert_eq!(
        crate::http::status(&mst0, &[], &format!("{BASE}/ignition/mst0.ign")),
        "200"
    );
    drop(appliance);
}

#[test]
fn installer_fetch_takes_a_verified_release_and_refuses_a_tampered_one() {
    if !require_root() || !require_tools(&["python3", "tar", "sha256sum"]) {
        return;
    }
    let topo = Topology::new("infe").unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The mirror: per release, the tarball oc's extract writes and its sha256sum.txt.
    let www = dir.path().join("www");
    let publish = |release: &str, tamper: bool| {
        let rel = www.join(release);
        let staging = dir.path().join(format!("staging-{release}"));
        std::fs::create_dir_all(&rel).unwrap();
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::copy(source(), staging.join("openshift-install")).unwrap();
        std::fs::write(staging.join("README.md"), "# OpenShift Install\n").unwrap();
        let tarball = format!("openshift-install-linux-{release}.tar.gz");
        let ok = Command::new("tar")
            .args(["-C", staging.to_str().unwrap(), "-czf"])
            .arg(rel.join(&tarball))
            .args(["README.md", "openshift-install"])
            .status()
            .unwrap();
        assert!(ok.success());
        let sums = Command::new("sha256sum")
            .arg(&tarball)
            .current_dir(&rel)
            .output()
            .unwrap();
        std::fs::write(rel.join("sha256sum.txt"), &sums.stdout).unwrap();
        if tamper {
            let mut bytes = std::fs::read(rel.join(&tarball)).unwrap();
            let last = bytes.len() - 20;
            bytes[last] ^= 0xff;
            std::fs::write(rel.join(&tarball), bytes).unwrap();
        }
    };
    publish(RELEASE, false);
    publish("4.19.0-okd-scos.2", true);
    let mirror = topo
        .services()
        .spawn(
            "mirror",
            [
                "python3",
                "-m",
                "http.server",
                "8000",
                "--bind",
                "10.99.0.1",
                "--directory",
                www.to_str().unwrap(),
            ],
        )
        .unwrap();
    topo.services()
        .wait_tcp("10.99.0.1:8000".parse().unwrap(), Duration::from_secs(10))
        .unwrap();
    let installer =
        |release: &str| format!("{{ release: {release}, mirror: \"http://10.99.0.1:8000/\" }}");
    let config = cluster(dir.path(), &installer(RELEASE));
    let in_ns = |args: &[&str]| {
        topo.services()
            .exec([harness::appliance_bin().unwrap().as_os_str()])
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    let out = in_ns(&["installer", "fetch", config.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out),
        mirror.log_tails()
    );
    let binary = dir
        .path()
        .join(format!("openshift-install/{RELEASE}/openshift-install"));
    assert_eq!(
        std::fs::read(&binary).unwrap(),
        std::fs::read(source()).unwrap()
    );
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&binary).unwrap().permissions().mode() & 0o111,
        0o111
    );
    assert!(
        text(&out).contains(&format!(
            "verified against http://10.99.0.1:8000/{RELEASE}/sha256sum.txt"
        )),
        "{}",
        text(&out)
    );
    // A second run finds it in place and downloads no tarball.
    let gets = |log: &str| log.matches(".tar.gz HTTP/1.1\" 200").count();
    let before = gets(&mirror.stderr());
    let out = in_ns(&["installer", "fetch", config.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("already in place"), "{}", text(&out));
    assert_eq!(gets(&mirror.stderr()), before);
    // The fetched release runs `ignition create`.
    let out = run(
        &["ignition", "create", config.to_str().unwrap()],
        &dir.path().join("calls.jsonl"),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&binary.display().to_string()));

    // `artifacts fetch` without --stream: the stream the installer prints (`coreos
    // print-stream-json`), its files from the mirror.
    let coreos = www.join("coreos");
    std::fs::create_dir_all(&coreos).unwrap();
    let mut pxe = serde_json::Map::new();
    for (kind, body) in [("kernel", "k"), ("initramfs", "i"), ("rootfs", "r")] {
        let name = format!("fedora-coreos-42.1-live-{kind}.x86_64");
        std::fs::write(coreos.join(&name), body.repeat(1000)).unwrap();
        let sum = Command::new("sha256sum")
            .arg(coreos.join(&name))
            .output()
            .unwrap();
        let sum = String::from_utf8(sum.stdout).unwrap();
        pxe.insert(
            kind.to_owned(),
            serde_json::json!({
                "location": format!("http://10.99.0.1:8000/coreos/{name}"),
                "sha256": sum.split_whitespace().next().unwrap(),
            }),
        );
    }
    let stream = dir.path().join("stream.json");
    std::fs::write(
        &stream,
        serde_json::json!({
            "stream": "stable",
            "metadata": { "last-modified": "2026-11-01T00:00:00Z" },
            "architectures": { "x86_64": { "artifacts": { "metal": {
                "release": "42.1", "formats": { "pxe": pxe } } } } },
        })
        .to_string(),
    )
    .unwrap();
    let out = topo
        .services()
        .exec([harness::appliance_bin().unwrap().as_os_str()])
        .args(["artifacts", "fetch", config.to_str().unwrap()])
        .env("OPENSHIFT_INSTALL_DOUBLE_STREAM", &stream)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("coreos print-stream-json"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("artifacts/kernel")).unwrap(),
        "k".repeat(1000)
    );

    // A tarball that is not the one the release lists: refused, deleted, nothing in place.
    let other = tempfile::tempdir().unwrap();
    let config = cluster(other.path(), &installer("4.19.0-okd-scos.2"));
    let out = in_ns(&["installer", "fetch", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("sha256 mismatch"), "{}", text(&out));
    let rel = other.path().join("openshift-install/4.19.0-okd-scos.2");
    let left: Vec<_> = std::fs::read_dir(&rel)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    drop(mirror);
}

/// A single-node config: `create single-node-ignition-config`, with the MachineConfig that
/// keeps the node's addresses on its installed disk added to the installer's manifests; its
/// live config is what `check` reads, and it carries the MachineConfig.
#[test]
fn a_single_node_set_is_made_with_its_network_machineconfig() {
    if !require_tools(&["python3", "base64"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(dir.path(), &double(dir.path()).display().to_string());
    let written = std::fs::read_to_string(&config).unwrap();
    let single = written
        .lines()
        .filter(|l| !l.contains("role: bootstrap") && !l.contains("role: worker"))
        .map(|l| {
            l.replace(
                "ip: 10.99.0.11 }",
                "ip: 10.99.0.11, install_dev: /dev/vda }",
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&config, single).unwrap();
    let log = dir.path().join("calls.jsonl");
    let out = run(&["ignition", "create", config.to_str().unwrap()], &log, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let calls = calls(&log);
    assert_eq!(calls[1].0, ["create", "single-node-ignition-config"]);
    let ignition_dir = dir.path().join("install_dir");
    assert!(
        ignition_dir
            .join("bootstrap-in-place-for-live-iso.ign")
            .exists()
    );
    assert!(!ignition_dir.join("bootstrap.ign").exists());
    let live: serde_json::Value = serde_json::from_slice(
        &std::fs::read(ignition_dir.join("bootstrap-in-place-for-live-iso.ign")).unwrap(),
    )
    .unwrap();
    let paths: Vec<&str> = live["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    for wanted in [
        "/opt/openshift/openshift/99-master-okd-appliance-network.yaml",
        "/opt/openshift/openshift/99-worker-chrony.yaml",
    ] {
        assert!(paths.contains(&wanted), "{wanted} in {paths:?}");
    }
    assert!(
        check_findings(&config).is_empty(),
        "{:?}",
        check_findings(&config)
    );
}

/// The new set is read by the appliance's account through its directory's group: it keeps the
/// group and mode of the one it replaces, and a symlinked `ignition_dir` stays a link (to the
/// new set). An installer another account could replace is never run.
#[test]
fn the_new_set_keeps_the_group_and_the_link_and_an_untrusted_installer_is_not_run() {
    if !require_root() || !require_tools(&["python3"]) {
        return;
    }
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    const NOGROUP: u32 = 65534;
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(dir.path(), &double(dir.path()).display().to_string());
    let c = config.to_str().unwrap();
    let log = dir.path().join("calls.jsonl");
    let real = dir.path().join("sets/okd");
    std::fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::chown(&real, None, Some(NOGROUP)).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o2750)).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("install_dir")).unwrap();
    for round in 0..2 {
        let out = run(&["ignition", "create", c], &log, &[]);
        assert!(out.status.success(), "round {round}: {}", text(&out));
        let link = std::fs::symlink_metadata(dir.path().join("install_dir")).unwrap();
        assert!(link.file_type().is_symlink(), "round {round}");
        let set = std::fs::metadata(&real).unwrap();
        assert_eq!(
            (set.gid(), set.mode() & 0o7777),
            (NOGROUP, 0o2750),
            "round {round}"
        );
        for file in [
            "bootstrap.ign",
            "master.ign",
            "worker.ign",
            "auth/kubeconfig",
        ] {
            let m = std::fs::metadata(real.join(file)).unwrap();
            assert_eq!(m.gid(), NOGROUP, "round {round}: {file}");
            assert_eq!(
                m.mode() & 0o040,
                0o040,
                "round {round}: {file} group-readable"
            );
        }
    }
    assert!(dir.path().join("sets/okd.previous/bootstrap.ign").exists());

    // A copy of the installer in a directory anyone may write to: refused before anything runs.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::copy(source(), bin.join("openshift-install")).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o777)).unwrap();
    let other = tempfile::tempdir().unwrap();
    let config = cluster(
        other.path(),
        &bin.join("openshift-install").display().to_string(),
    );
    let calls_before = calls(&log).len();
    let out = run(&["ignition", "create", config.to_str().unwrap()], &log, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(
            "is writable by its group or others, so another account could replace the installer"
        ),
        "{}",
        text(&out)
    );
    assert_eq!(calls(&log).len(), calls_before, "the installer never ran");
    assert!(!other.path().join(".install_dir.new").exists());
}
