//! The HTTP boot server with curl in node namespaces: per-node iPXE scripts by MAC, ignition
//! only to the node (or role) it belongs to, the install phases (ignition fetched: try the disk
//! once; role config fetched: installed, boot locally until `okd-appliance node reinstall`), artifacts with HEAD, ranges, conditional
//! requests and 20 parallel downloads checked byte for byte, traversal attempts, and slow
//! clients that must not starve anyone.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use harness::{Netns, Topology, require_root, require_tools, wait_until};

use crate::dns_support::{start_appliance, write_config};
use crate::support::appliance;

const BASE: &str = "http://10.99.0.1:8080";

fn config(dir: &Path) -> std::path::PathBuf {
    write_config(
        dir,
        &format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
  - {{ name: boot, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.99.0.7 }}
  - {{ name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }}
  - {{ name: wrk0, role: worker, mac: "52:54:00:00:00:21", ip: 10.99.0.21 }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts, base_url: "{BASE}" }}
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
}

/// `curl -s ARGS` from `ns`, with a time limit.
pub(crate) fn curl(ns: &Netns, args: &[&str]) -> Output {
    ns.exec(["curl", "-s", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl runs")
}

/// The status code of `curl ARGS URL`.
pub(crate) fn status(ns: &Netns, args: &[&str], url: &str) -> String {
    let mut all = vec!["-o", "/dev/null", "-w", "%{http_code}"];
    all.extend_from_slice(args);
    all.push(url);
    String::from_utf8(curl(ns, &all).stdout).unwrap()
}

fn body(ns: &Netns, url: &str) -> String {
    let out = curl(ns, &["-f", url]);
    assert!(out.status.success(), "GET {url}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The response head (`curl -D -`).
fn head(ns: &Netns, args: &[&str], url: &str) -> String {
    let mut all = vec!["-D", "-", "-o", "/dev/null"];
    all.extend_from_slice(args);
    all.push(url);
    String::from_utf8(curl(ns, &all).stdout).unwrap()
}

/// A header's value; names are case-insensitive, values are not (HTTP dates).
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Deterministic bytes that differ at every offset a range test could pick.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

#[test]
fn serves_scripts_ignition_and_artifacts_to_the_right_nodes() {
    if !require_root() || !require_tools(&["curl", "sha256sum"]) {
        return;
    }
    let topo = Topology::new("http").unwrap();
    let mst0 = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let wrk0 = topo.add_node("wrk0", "10.99.0.21/24", None).unwrap();
    let other = topo.add_node("oth", "10.99.0.50/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    std::fs::write(
        dir.path().join("install_dir/master.ign"),
        r#"{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core"}]}}"#,
    )
    .unwrap();
    let artifacts = dir.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let kernel = pattern(3_000_000);
    std::fs::write(artifacts.join("kernel"), &kernel).unwrap();
    std::fs::write(artifacts.join("initramfs.img"), pattern(1_000_000)).unwrap();
    let mut app = start_appliance(topo.services(), &config);

    // The node's script installs it, with its own ignition URL on the kernel command line.
    let script = body(&mst0, &format!("{BASE}/boot/52-54-00-00-00-11.ipxe"));
    assert!(script.starts_with("#!ipxe\n"), "{script}");
    assert!(
        script.contains(&format!("kernel {BASE}/artifacts/kernel ")),
        "{script}"
    );
    assert!(
        script.contains(&format!(
            "coreos.inst.ignition_url={BASE}/ignition/mst0.ign"
        )),
        "{script}"
    );
    let unknown = body(&other, &format!("{BASE}/boot/52-54-00-00-00-99.ipxe"));
    assert!(
        unknown.contains("no node in the cluster config has MAC"),
        "{unknown}"
    );

    // Ignition: only to its node, and role configs only to nodes of that role.
    let own = format!("{BASE}/ignition/mst0.ign");
    assert_eq!(status(&other, &[], &own), "403");
    assert_eq!(status(&wrk0, &[], &own), "403");
    let ign: serde_json::Value = serde_json::from_str(&body(&mst0, &own)).unwrap();
    assert_eq!(
        ign["ignition"]["config"]["merge"][0]["source"],
        format!("{BASE}/ignition/roles/master.ign")
    );
    assert_eq!(
        ign["storage"]["files"][0]["contents"]["source"],
        "data:,mst0%0A"
    );
    // Its ignition fetched, the node is not installed yet: its next script boots the disk (and
    // installs again if that fails), and so does every network boot of the same power-on (a
    // firmware with several network entries fetches it once per entry); a network boot of a
    // later power-on without the installed system having fetched its role config means the
    // disk did not boot: install again.
    let script_url = format!("{BASE}/boot/52-54-00-00-00-11.ipxe");
    for _entry in 0..3 {
        let script = body(&mst0, &script_url);
        assert!(
            script.contains("sanboot --no-describe --drive 0x80 ||"),
            "{script}"
        );
        assert!(script.contains("coreos.inst.ignition_url="), "{script}");
    }
    // The offer's power-on is over (its time moved back past the window).
    let offered = dir.path().join("state/disk-boot-offered/mst0");
    assert!(offered.exists());
    std::fs::write(
        &offered,
        "disk boot offered Mon, 01 Jan 2024 00:00:00 GMT\n",
    )
    .unwrap();
    let script = body(&mst0, &script_url);
    assert!(!script.contains("sanboot"), "{script}");
    assert!(script.contains("coreos.inst.ignition_url="), "{script}");
    assert!(!dir.path().join("state/installed/mst0").exists());
    let role = format!("{BASE}/ignition/roles/master.ign");
    assert_eq!(
        body(&mst0, &role),
        std::fs::read_to_string(dir.path().join("install_dir/master.ign")).unwrap()
    );
    assert_eq!(status(&wrk0, &[], &role), "403");
    assert_eq!(status(&other, &[], &role), "403");
    assert_eq!(
        status(&mst0, &[], &format!("{BASE}/ignition/roles/bootstrap.ign")),
        "403"
    );
    for fetched in [
        "mst0: ignition fetched by 10.99.0.11:",
        "mst0: master.ign fetched by 10.99.0.11:",
        "mst0: installed: its installed system fetched master.ign from 10.99.0.11:",
        "mst0: ignition refused to 10.99.0.50:",
        "wrk0: master.ign refused to 10.99.0.21:",
    ] {
        assert!(
            app.stderr().contains(fetched),
            "journal: {fetched}\n{}",
            app.log_tails()
        );
    }
    assert!(
        !app.stderr().contains("passwd"),
        "ignition content must never be logged"
    );

    // Its installed system having fetched the role config, the node boots from disk, until
    // reinstall.
    let script = body(&mst0, &format!("{BASE}/boot/52-54-00-00-00-11.ipxe"));
    assert!(
        script.contains("is installed, booting from disk"),
        "{script}"
    );
    let state = dir.path().join("state");
    let state = state.to_str().unwrap();
    let out = appliance(["node", "reinstall", "mst0", "--state-dir", state]);
    assert!(out.status.success(), "{out:?}");
    // An unknown node is a usage error, as it is for every command that names one.
    let out = appliance(["node", "reinstall", "nobody", "--state-dir", state]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let script = body(&mst0, &format!("{BASE}/boot/52-54-00-00-00-11.ipxe"));
    assert!(script.contains("coreos.inst.ignition_url="), "{script}");

    // Artifacts: HEAD, ranges, conditional requests.
    let url = format!("{BASE}/artifacts/kernel");
    let h = head(&other, &["-I"], &url);
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert_eq!(header(&h, "content-length"), Some("3000000"));
    assert_eq!(header(&h, "accept-ranges"), Some("bytes"));
    let etag = header(&h, "etag").expect("etag").to_owned();
    let modified = header(&h, "last-modified")
        .expect("last-modified")
        .to_owned();
    let part = curl(&other, &["-r", "1000-1999", &url]);
    assert_eq!(part.stdout, kernel[1000..2000]);
    let h = head(&other, &["-r", "2999990-"], &url);
    assert!(h.starts_with("HTTP/1.1 206"), "{h}");
    assert_eq!(
        header(&h, "content-range"),
        Some("bytes 2999990-2999999/3000000")
    );
    let suffix = curl(&other, &["-H", "Range: bytes=-10", &url]);
    assert_eq!(suffix.stdout, kernel[kernel.len() - 10..]);
    let h = head(&other, &["-r", "5000000-"], &url);
    assert!(h.starts_with("HTTP/1.1 416"), "{h}");
    assert_eq!(header(&h, "content-range"), Some("bytes */3000000"));
    let inm = format!("If-None-Match: {etag}");
    assert_eq!(status(&other, &["-H", &inm], &url), "304");
    let ims = format!("If-Modified-Since: {modified}");
    assert_eq!(status(&other, &["-H", &ims], &url), "304");
    assert_eq!(status(&other, &["-H", "If-None-Match: \"x\""], &url), "200");
    // A stale If-Range means the whole file, not the range.
    let stale = curl(&other, &["-r", "0-9", "-H", "If-Range: \"stale\"", &url]);
    assert_eq!(stale.stdout.len(), kernel.len());

    // Small files back to back on one keep-alive connection: the body (sendfile, less than one
    // segment) must not wait for the client's delayed ACK of the head (with Nagle's algorithm
    // on: ~40 ms a response, 0.83 s for these 20).
    std::fs::write(artifacts.join("small.bin"), pattern(1000)).unwrap();
    let small = format!("{BASE}/artifacts/small.bin");
    let mut args = vec!["-w", "%{size_download} %{num_connects} %{time_total}\n"];
    for _ in 0..20 {
        args.extend(["-o", "/dev/null", small.as_str()]);
    }
    let out = curl(&other, &args);
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    let runs: Vec<Vec<f64>> = lines
        .lines()
        .map(|l| l.split(' ').map(|f| f.parse().unwrap()).collect())
        .collect();
    assert_eq!(runs.len(), 20, "{lines}");
    assert!(runs.iter().all(|r| r[0] == 1000.0), "{lines}");
    assert_eq!(
        runs.iter().map(|r| r[1]).sum::<f64>(),
        1.0,
        "one connection: {lines}"
    );
    // The delayed-ACK stall would be in every response (~40 ms each); a busy machine's stall
    // is in a few. So: the median is fast, and at most two take as long as the stall would.
    let mut times: Vec<f64> = runs.iter().map(|r| r[2]).collect();
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let slow = times.iter().filter(|&&t| t >= 0.035).count();
    assert!(
        median < 0.02 && slow <= 2,
        "small responses: median {median:.3} s, {slow} of 20 took 35 ms or more:\n{lines}"
    );

    // Traversal, encoded or not, and a symlink out of the directory: all 404.
    std::os::unix::fs::symlink(
        dir.path().join("install_dir/master.ign"),
        artifacts.join("escape"),
    )
    .unwrap();
    for path in [
        "/artifacts/../install_dir/master.ign",
        "/artifacts/%2e%2e/install_dir/master.ign",
        "/artifacts/%2E%2E%2Finstall_dir%2Fmaster.ign",
        "/artifacts/..%2f..%2fetc%2fpasswd",
        "/artifacts/%252e%252e/install_dir/master.ign",
        "/artifacts/escape",
        "/artifacts/",
    ] {
        assert_eq!(
            status(&other, &["--path-as-is"], &format!("{BASE}{path}")),
            "404",
            "{path}"
        );
    }
    assert_eq!(status(&other, &["-X", "POST"], &url), "405");
    assert_eq!(status(&other, &["-X", "DELETE"], &url), "405");

    // 20 parallel downloads, each checked.
    let children: Vec<_> = (0..20)
        .map(|_| {
            other
                .exec([
                    "sh",
                    "-c",
                    &format!("curl -sf --max-time 30 {url} | sha256sum"),
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let want = String::from_utf8(
        std::process::Command::new("sha256sum")
            .arg(artifacts.join("kernel"))
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let want = want.split_whitespace().next().unwrap().to_owned();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let got = String::from_utf8(out.stdout).unwrap();
        assert_eq!(got.split_whitespace().next(), Some(want.as_str()));
    }
    app.assert_running().unwrap();
}

#[test]
fn slow_clients_do_not_starve_the_server() {
    if !require_root() || !require_tools(&["curl"]) {
        return;
    }
    let topo = Topology::new("slow").unwrap();
    let node = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let mut app = start_appliance(topo.services(), &config);

    // 200 slowloris connections from the services namespace: each sends half a request head
    // and then dribbles a header byte now and then, never finishing.
    let slow: Vec<TcpStream> = topo
        .services()
        .run(|| {
            (0..200)
                .map(|_| {
                    let mut s = TcpStream::connect("10.99.0.1:8080")?;
                    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-a: ")?;
                    Ok(s)
                })
                .collect::<std::io::Result<Vec<_>>>()
        })
        .unwrap()
        .unwrap();
    let started = Instant::now();
    // Everyone else is still served at once.
    for _ in 0..5 {
        assert_eq!(status(&node, &[], &format!("{BASE}/healthz")), "200");
    }
    for mut s in &slow {
        let _ = s.write_all(b"a");
    }
    // The server gives up on them once the head has taken too long (10 s), whatever trickles in.
    let mut closed = 0;
    for mut s in slow {
        let left = Duration::from_secs(15).saturating_sub(started.elapsed());
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        let mut buf = [0u8; 512];
        let answer = s.read(&mut buf);
        if answer.is_ok() || answer.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 200, "slow connections still open after 15 s");
    assert!(wait_until(Duration::from_secs(1), || app.is_running()));
    assert_eq!(status(&node, &[], &format!("{BASE}/healthz")), "200");
}

/// The response head of `curl -D - URL` as (lowercased name, value) lines, `date` left out:
/// what must not differ between the fast way and hyper's.
fn fields(head: &str) -> Vec<(String, String)> {
    head.lines()
        .skip(1)
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            let n = n.to_ascii_lowercase();
            (n != "date").then(|| (n, v.trim().to_owned()))
        })
        .collect()
}

/// A small artifact the open-file cache holds is answered before hyper (`http::fastpath`):
/// the same status, headers and bytes as hyper's answer (its first request, which enters the
/// cache), HEAD, pipelined requests in one segment, one keep-alive connection through both
/// ways (a Range request hands the connection to hyper, which answers the rest), and the
/// artifact fetch recorded for the node as before.
#[test]
fn small_cached_artifacts_are_answered_the_same_on_the_fast_way() {
    if !require_root() || !require_tools(&["curl"]) {
        return;
    }
    let topo = Topology::new("fast").unwrap();
    let mst0 = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let artifacts = dir.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let small = pattern(4096);
    std::fs::write(artifacts.join("small.bin"), &small).unwrap();
    let mut app = start_appliance(topo.services(), &config);
    let url = format!("{BASE}/artifacts/small.bin");

    // The first answer is hyper's (it enters the cache); later ones are the fast way's.
    let hypers = head(&mst0, &[], &url);
    let fast = head(&mst0, &[], &url);
    assert!(hypers.starts_with("HTTP/1.1 200"), "{hypers}");
    assert!(fast.starts_with("HTTP/1.1 200"), "{fast}");
    assert_eq!(fields(&fast), fields(&hypers));
    assert!(header(&fast, "date").is_some(), "{fast}");
    let got = curl(&mst0, &["-f", &url]);
    assert!(got.status.success());
    assert_eq!(got.stdout, small);
    let head_only = curl(&mst0, &["-I", "-w", "%{size_download}", &url]);
    let text = String::from_utf8_lossy(&head_only.stdout);
    assert_eq!(header(&text, "content-length"), Some("4096"), "{text}");
    assert!(text.ends_with("\r\n\r\n0"), "HEAD has no body: {text:?}");
    // Each GET from the node is recorded as before (the log shows the journal's lines).
    assert!(wait_until(Duration::from_secs(5), || {
        app.stderr()
            .matches("small.bin fetched by 10.99.0.11:")
            .count()
            >= 3
    }));

    // Three requests in one segment, then a Range request, then a plain one again, on one
    // connection: the fast way answers the first three in order, hyper the rest.
    let answers = topo
        .services()
        .run(|| -> std::io::Result<Vec<u8>> {
            let mut s = TcpStream::connect("10.99.0.1:8080")?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            let get = "GET /artifacts/small.bin HTTP/1.1\r\nHost: x\r\n\r\n";
            s.write_all(
                format!("{get}{get}HEAD /artifacts/small.bin HTTP/1.1\r\n\r\n").as_bytes(),
            )?;
            s.write_all(b"GET /artifacts/small.bin HTTP/1.1\r\nRange: bytes=10-19\r\n\r\n")?;
            s.write_all(get.as_bytes())?;
            s.write_all(b"GET /artifacts/small.bin HTTP/1.1\r\nConnection: close\r\n\r\n")?;
            let mut all = Vec::new();
            s.read_to_end(&mut all)?;
            Ok(all)
        })
        .unwrap()
        .unwrap();
    let mut rest = &answers[..];
    let mut next = |expect_status: &str, expect_body: &[u8]| {
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a response head")
            + 4;
        let head = String::from_utf8_lossy(&rest[..end]).into_owned();
        assert!(head.starts_with(expect_status), "{head}");
        let len: usize = header(&head, "content-length").unwrap().parse().unwrap();
        let body_len = if expect_body.is_empty() { 0 } else { len };
        assert_eq!(&rest[end..end + body_len], expect_body, "{head}");
        rest = &rest[end + body_len..];
        head
    };
    next("HTTP/1.1 200", &small);
    next("HTTP/1.1 200", &small);
    next("HTTP/1.1 200", b"");
    let ranged = next("HTTP/1.1 206", &small[10..20]);
    assert_eq!(header(&ranged, "content-range"), Some("bytes 10-19/4096"));
    next("HTTP/1.1 200", &small);
    let last = next("HTTP/1.1 200", &small);
    assert_eq!(header(&last, "connection"), Some("close"), "{last}");
    assert!(rest.is_empty(), "{} bytes more", rest.len());
    assert!(app.is_running());
}

/// A node whose boot asks for a file that isn't there says why it waits (issue 46): the 404 is
/// on that node, in `status --json` and `status`, with the file and what puts it in place, until
/// a later step shows it got past it; a stranger's 404 is on no node. Before, only the
/// start-up log and a counter had it.
#[test]
fn a_node_whose_kernel_is_missing_says_why_it_waits() {
    if !require_root() || !require_tools(&["curl"]) {
        return;
    }
    let topo = Topology::new("hpb").unwrap();
    let mst0 = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let other = topo.add_node("oth", "10.99.0.50/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let artifacts = dir.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let mut app = start_appliance(topo.services(), &config);
    let problem = || {
        let out = appliance([
            "status".as_ref(),
            "--json".as_ref(),
            "--state-dir".as_ref(),
            dir.path().join("state").as_os_str(),
        ]);
        assert!(out.status.success(), "{out:?}");
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let node = |name: &str| {
            status["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["name"] == name)
                .unwrap()["problem"]
                .as_str()
                .map(str::to_owned)
        };
        (node("mst0"), node("wrk0"))
    };
    let kernel = format!("{BASE}/artifacts/kernel");
    assert_eq!(status(&other, &[], &kernel), "404");
    assert_eq!(
        problem(),
        (None, None),
        "a stranger's 404 is nobody's problem"
    );
    assert_eq!(status(&mst0, &[], &kernel), "404");
    let (said, _) = problem();
    let said = said.expect("the node's problem");
    assert!(
        said.starts_with("kernel can't be served to 10.99.0.11:"),
        "{said}"
    );
    assert!(
        said.contains("(404): not in ") && said.contains("okd-appliance check --install"),
        "{said}"
    );
    let table = appliance([
        "status".as_ref(),
        "--state-dir".as_ref(),
        dir.path().join("state").as_os_str(),
    ]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("kernel can't be served"),
        "{table:?}"
    );
    // The file arrives and the node fetches it: no problem any more.
    std::fs::write(artifacts.join("kernel"), pattern(1000)).unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        status(&mst0, &[], &kernel) == "200" && problem().0.is_none()
    }));
    app.assert_running().unwrap();
}
