//! `/metrics` as scrapers read it: `okd-appliance serve` on 127.0.0.1 answers the Prometheus
//! text format 0.0.4 unless OpenMetrics is asked for (as Prometheus asks), with each format's
//! content type; the text passes `promtool check metrics` (Debian's prometheus package: its
//! parser and its lint rules, `_total` on counters among them) and the OpenMetrics exposition
//! passes the official Python client's OpenMetrics parser (python3-prometheus-client), which
//! refuses what breaks the format (no `# EOF`, a counter sample not named `_total`, ...).
//! Runs without root; without promtool or the parser it says SKIPPED (fails under `CI=true`).

mod common;

use std::io::{Read, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Serve;

/// What Prometheus 2.42 (Debian 12's) sends.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `GET path` with `accept` (none when `None`): the response head, lowercased, and the body.
fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a head");
    (head.to_ascii_lowercase(), body.to_owned())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Runs `program args` with `input` on stdin: (success, stdout and stderr).
fn pipe(program: &str, args: &[&str], input: &str) -> (bool, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// Debian's Python, where python3-prometheus-client is (not a `python3` earlier in `PATH`).
const PYTHON: &str = "/usr/bin/python3";

/// The official client's OpenMetrics parser: every sample, one `name value` a line.
const OPENMETRICS_PARSER: &str = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        print(s.name, s.value)
"#;

#[test]
fn metrics_are_text_by_default_and_openmetrics_when_asked_and_both_pass_their_checkers() {
    if !harness::require_tools(&["promtool", PYTHON]) {
        return;
    }
    let (parser, said) = pipe(
        PYTHON,
        &["-c", "import prometheus_client.openmetrics.parser"],
        "",
    );
    if !parser && !harness::skip_or_fail("python3-prometheus-client", said.trim()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_serve, addr) = Serve::start_http(&common::loopback_config(dir.path()));
    // Something counted: a request for a script nobody has.
    let (head, _) = get(addr, "/boot/52-54-00-00-00-99.ipxe", None);
    assert!(head.starts_with("http/1.1 200"), "{head}");

    // No Accept, an explicit 0.0.4, and a scraper that ranks text above OpenMetrics.
    for accept in [
        None,
        Some("text/plain; version=0.0.4"),
        Some("application/openmetrics-text;q=0.3,text/plain;q=0.9"),
    ] {
        let (head, body) = get(addr, "/metrics", accept);
        assert_eq!(
            header(&head, "content-type"),
            Some(TEXT),
            "{accept:?}: {head}"
        );
        assert_eq!(header(&head, "vary"), Some("accept"), "{head}");
        assert!(!body.contains("# EOF"), "{body}");
        let (ok, said) = pipe("promtool", &["check", "metrics"], &body);
        assert!(ok && said.trim().is_empty(), "promtool: {said}\n{body}");
        assert!(
            body.contains("# TYPE okd_appliance_http_requests_total counter\n"),
            "{body}"
        );
        assert!(
            body.contains("okd_appliance_http_requests_total{route=\"script\",status=\"200\"} 1\n"),
            "{body}"
        );
    }

    let (head, om) = get(addr, "/metrics", Some(PROMETHEUS_ACCEPT));
    assert_eq!(header(&head, "content-type"), Some(OPENMETRICS), "{head}");
    assert!(om.ends_with("# EOF\n"), "{om}");
    let (ok, parsed) = pipe(PYTHON, &["-c", OPENMETRICS_PARSER], &om);
    assert!(ok, "the OpenMetrics parser refused it: {parsed}\n{om}");
    assert!(
        parsed.contains("okd_appliance_http_requests_total 1"),
        "{parsed}"
    );
    // The checkers do check: each refuses the other's format, the way a scraper that got the
    // wrong one would.
    let (ok, said) = pipe("promtool", &["check", "metrics"], &om);
    assert!(!ok, "promtool took OpenMetrics as the text format: {said}");
    let (_, text) = get(addr, "/metrics", None);
    let (ok, _) = pipe(PYTHON, &["-c", OPENMETRICS_PARSER], &text);
    assert!(!ok, "the OpenMetrics parser took the text format");
}
