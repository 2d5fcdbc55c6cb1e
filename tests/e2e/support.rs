//! Helpers shared by the end-to-end modules: a shipped config copied next to a fresh install
//! directory, and running the appliance binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use harness::{Netns, Process, appliance_bin, repo_root, write_install_dir};

/// Copies `config/<name>.yml` into `dir` with its ignition directory pointed at a freshly
/// written `dir/install_dir`, as an operator's services host would have it.
pub fn stage_config(name: &str, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo_root().join("config").join(format!("{name}.yml")))
        .unwrap_or_else(|e| panic!("config/{name}.yml: {e}"));
    let staged: String = text
        .lines()
        .map(|line| {
            if line.trim_start().starts_with("ignition_dir:") {
                "  ignition_dir: ./install_dir".to_owned()
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    write_install_dir(&dir.join("install_dir")).unwrap();
    let path = dir.join(format!("{name}.yml"));
    std::fs::write(&path, staged + "\n").unwrap();
    path
}

/// Starts `argv` in `ns` and waits (10 s at most) until `addr` accepts TCP connections.
pub fn spawn_listening<I, S>(ns: &Netns, label: &str, argv: I, addr: &str) -> Process
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let p = ns.spawn(label, argv).unwrap();
    let ready = ns.wait_tcp(addr.parse().unwrap(), std::time::Duration::from_secs(10));
    assert!(
        ready.is_ok(),
        "{label} on {addr}: {ready:?}\n{}",
        p.log_tails()
    );
    p
}

/// Runs `okd-appliance ARGS` to completion.
pub fn appliance<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(appliance_bin().unwrap())
        .args(args)
        .output()
        .expect("okd-appliance runs")
}

/// `status --json --cluster CLUSTER`'s appliance faults, asked of the appliance whose state is
/// in `state`.
pub fn faults(state: &Path, cluster: &str) -> Vec<serde_json::Value> {
    let out = appliance([
        "status".as_ref(),
        "--json".as_ref(),
        "--cluster".as_ref(),
        cluster.as_ref(),
        "--state-dir".as_ref(),
        state.as_os_str(),
    ]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{json}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_str(&json).expect("status JSON");
    status["appliance"]["faults"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Runs a third-party tool; panics with its output when it fails.
pub fn run_ok(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `/metrics` at `url`, fetched from inside `ns` as OpenMetrics (asked for with `Accept`, as
/// Prometheus asks; the text format is the default) and read by the official Prometheus
/// client's OpenMetrics parser (Debian's python3-prometheus-client, which refuses malformed
/// exposition): every sample as `name{label="value",...}` (labels sorted) to its value.
pub fn scrape(ns: &harness::Netns, url: &str) -> std::collections::HashMap<String, f64> {
    const PARSE: &str = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join('%s="%s"' % kv for kv in sorted(s.labels.items()))
        print("%s{%s} %r" % (s.name, labels, s.value))
"#;
    let body = ns
        .exec([
            "curl",
            "-sf",
            "--max-time",
            "5",
            "-H",
            "Accept: application/openmetrics-text; version=1.0.0",
            url,
        ])
        .output()
        .expect("curl");
    assert!(body.status.success(), "GET {url} failed");
    let mut parse = std::process::Command::new("/usr/bin/python3")
        .args(["-c", PARSE])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write as _;
    parse
        .stdin
        .take()
        .expect("stdin")
        .write_all(&body.stdout)
        .expect("write");
    let out = parse.wait_with_output().expect("parser");
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused {url}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&body.stdout)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

/// A self-signed P-256 certificate for `san` (e.g. `IP:10.99.0.1`) made with openssl: writes
/// `DIR/NAME.pem` and `DIR/NAME.key` and returns their paths.
pub fn self_signed(dir: &Path, name: &str, san: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    run_ok(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            &format!("subjectAltName={san}"),
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            cert.to_str().unwrap(),
        ],
    );
    (cert, key)
}
