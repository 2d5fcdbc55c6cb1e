//! One descriptor budget (issue 39): `serve` under `RLIMIT_NOFILE` 1024 with a host file of two
//! clusters, while 64 addresses of one node hold as many connections as each DNS/TCP and boot
//! server listener of both clusters takes. Before, their caps (256 and 512 each, 1,536 in all)
//! added up past the limit: accept(2) failed with EMFILE, the load balancer could not take a
//! connection, and the log filled with "Too many open files". With the budget, each listener
//! holds its share of the 512 descriptors left after the reserve (the boot server lets the
//! rest wait in its listen backlog, DNS closes them): the balanced connections
//! still reach their backend, DNS over UDP answers, nothing hits the limit, and once the
//! connections close every listener serves again.

use std::net::Ipv4Addr;
use std::time::Duration;

use harness::{Process, appliance_bin, require_root, require_tools, wait_until};

use crate::clusters::{
    TwoSegments, answer, expect_balanced_to, expect_names, get, okd_on_its_own_segment, script_url,
    test_on_its_own_segment, wait_up, write_host,
};

/// Holds connections to each `ip:port` target from `--sources` addresses (round robin), says
/// how many are held and how many the server closed, then holds them until killed (60 s at
/// most).
const HOLDER: &str = r#"
import json, resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
per, sources, targets = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3:]
held = {}
n = 0
for t in targets:
    host, port = t.rsplit(":", 1)
    socks = []
    for i in range(per):
        s = socket.socket()
        s.bind((sources[n % len(sources)], 0))
        n += 1
        s.settimeout(2)
        try:
            s.connect((host, int(port)))
        except OSError:
            s.close()
            continue
        s.setblocking(False)
        socks.append(s)
    held[t] = socks
time.sleep(1.5)
report = {}
for t, socks in held.items():
    open_ = 0
    for s in socks:
        try:
            if s.recv(1) == b"":
                continue
        except BlockingIOError:
            open_ += 1
        except OSError:
            continue
    report[t] = open_
print(json.dumps(report), flush=True)
time.sleep(60)
"#;

#[test]
fn listeners_under_attack_hold_their_share_and_the_balancer_keeps_balancing() {
    if !require_root() || !require_tools(&["dig", "unshare", "curl", "python3", "prlimit"]) {
        return;
    }
    let (okd, test) = (okd_on_its_own_segment(), test_on_its_own_segment());
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-fds-")
        .tempdir()
        .expect("tempdir");
    let host = write_host(dir.path(), &[&okd, &test]);
    let lab = TwoSegments::start("fds", &okd, &test);

    let bin = appliance_bin().expect("okd-appliance binary");
    let mut cmd = lab.topo.services().exec([
        "prlimit".as_ref(),
        "--nofile=1024:1024".as_ref(),
        "--".as_ref(),
        bin.as_os_str(),
        "serve".as_ref(),
        host.as_os_str(),
    ]);
    cmd.env("RUST_LOG", "info").env("NO_COLOR", "1");
    cmd.current_dir(dir.path());
    let mut app = Process::spawn("okd-appliance", cmd).expect("spawn okd-appliance");
    let ready = wait_until(Duration::from_secs(30), || {
        !app.is_running() || app.stderr().lines().any(|l| l.ends_with(" ready"))
    });
    assert!(ready, "okd-appliance not ready\n{}", app.log_tails());
    let log = app.stderr();
    assert!(
        log.contains("open descriptors: 1024 (512 kept for files and listening sockets)"),
        "{log}"
    );
    assert!(log.contains("caps are cut to fit"), "{log}");
    wait_up(&app, &okd.node("master-0"));

    // 64 more addresses on okd's master-0, each a client of every attacked listener.
    let sources: Vec<String> = (150..214u8)
        .map(|n| Ipv4Addr::new(10, 98, 1, n).to_string())
        .collect();
    for s in &sources {
        lab.okd_node
            .add_addr("eth0", &format!("{s}/24"))
            .expect("source address");
    }
    let targets: Vec<String> = [okd.appliance, test.appliance]
        .iter()
        .flat_map(|ip| [format!("{ip}:53"), format!("{ip}:8080")])
        .collect();
    let mut argv: Vec<String> = vec![
        "python3".into(),
        "-c".into(),
        HOLDER.into(),
        "520".into(),
        sources.join(","),
    ];
    argv.extend(targets.iter().cloned());
    let holder = lab
        .okd_node
        .spawn("holder", argv.iter().map(String::as_str))
        .expect("holder");
    assert!(
        wait_until(Duration::from_secs(60), || holder.stdout().contains('}')),
        "the holder did not report\n{}",
        holder.log_tails()
    );
    let report: serde_json::Value =
        serde_json::from_str(holder.stdout().trim()).expect("holder's report");
    for t in targets.iter().filter(|t| t.ends_with(":53")) {
        let open = report[t].as_u64().unwrap_or_else(|| panic!("{report}"));
        // DNS keeps its share of the 512 descriptors, and closes what is over it (it was 256).
        assert!(open > 0 && open <= 16, "{t}: {open} held\n{report}");
    }
    // The boot server lets what is over its share wait in the listen backlog (held by the
    // kernel, not the process): the process holds far fewer descriptors than its limit.
    let fds = std::fs::read_dir(format!("/proc/{}/fd", app.pid()))
        .expect("the appliance's descriptors")
        .count();
    assert!(fds < 600, "{fds} descriptors open\n{report}");

    // While they are held: balanced connections reach the backend, DNS answers over UDP.
    expect_balanced_to(&lab.okd_node, okd.appliance, "okd-master-0");
    expect_names(&lab.test_node, test.appliance, &test);
    let log = app.stderr();
    assert!(
        !log.contains("Too many open files"),
        "the process hit its descriptor limit\n{log}"
    );

    // Once they close, every listener serves again.
    drop(holder);
    let okd_m0 = okd.node("master-0");
    let served = wait_until(Duration::from_secs(15), || {
        get(&lab.okd_node, &script_url(&okd, &okd_m0)).0 == "200"
    });
    assert!(served, "okd's boot server\n{}", app.log_tails());
    // A positive authoritative answer, over TCP.
    answer(
        &lab.okd_node,
        okd.appliance,
        &["+tcp", &okd.fqdn("api"), "A"],
    );
    app.assert_running()
        .expect("okd-appliance is still running");
}
