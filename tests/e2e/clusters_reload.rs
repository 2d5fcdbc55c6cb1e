//! `reload` adds and removes a cluster of a host file without touching the others
//! (docs/design/several-clusters.md, step 10): two clusters on their own segments, as in
//! clusters.rs. Cluster okd holds a TCP stream through its API frontend and a DHCP lease (a
//! udhcpc that stays to renew) while test is removed from the host file and added back.
//!
//! - Removed: okd's stream still echoes and okd's client renews the same address; test's API
//!   frontend and boot server refuse connections, its names are gone from DNS (at either
//!   address: the removed cluster's DNS address stays bound until a restart, answering for the
//!   others), the CLI no longer knows it, and its state directory is kept.
//! - Added back: test's frontend balances to its master again, its boot server serves, DNS has
//!   its names, and okd's stream (the same connection) still echoes.
//! - Then okd, the first-listed cluster, is removed: the admin socket (the host's, not okd's)
//!   answers for test alone.
//! - The appliance is never restarted: one `ready` line in its log from start to end.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use harness::{require_root, require_tools, wait_until};

use crate::clusters::{
    BIND_TIMEOUT, Client, Cluster, TwoSegments, expect_balanced_to, expect_lease, expect_names,
    get, okd_on_its_own_segment, test_on_its_own_segment, wait_up, write_host,
};
use crate::dns_support::{dig_in, start_appliance};
use crate::lb_support::Conn;
use crate::support::appliance;

/// Gives `cluster`'s file a 3 s drain timeout.
fn short_drain(dir: &Path, cluster: &Cluster) {
    let file = dir.join(format!("{}.yml", cluster.name));
    let text = std::fs::read_to_string(&file).expect("cluster file");
    assert!(text.contains("\nlb:\n"), "{text}");
    std::fs::write(
        &file,
        text.replace("\nlb:\n", "\nlb:\n  drain_timeout: 3s\n"),
    )
    .expect("write");
}

/// The `listeners:` line of `okd-appliance status --cluster ID --state-dir DIR`.
fn listeners(state: &Path, id: &str) -> String {
    let out = appliance([
        "status".as_ref(),
        "--cluster".as_ref(),
        id.as_ref(),
        "--state-dir".as_ref(),
        state.as_os_str(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("listeners: "))
        .unwrap_or_else(|| {
            panic!(
                "no listeners line:\n{text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .to_owned()
}

/// `okd-appliance reload --state-dir DIR`: exit code and output.
fn reload(state: &Path) -> (Option<i32>, String) {
    let out = appliance(["reload".as_ref(), "--state-dir".as_ref(), state.as_os_str()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// Whether a TCP connection to `addr` from `ns` is refused (or otherwise fails) within a second.
fn refused(ns: &harness::Netns, addr: SocketAddr) -> bool {
    ns.run(|| std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err())
        .unwrap_or(false)
}

#[test]
fn reload_removes_and_adds_back_a_cluster_while_the_other_goes_on() {
    if !require_root() || !require_tools(&["dig", "busybox", "unshare", "curl", "python3"]) {
        return;
    }
    let (okd, test) = (okd_on_its_own_segment(), test_on_its_own_segment());
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-clusters-reload-")
        .tempdir()
        .expect("tempdir");
    let state = dir.path().join("state");
    let host = write_host(dir.path(), &[&okd, &test]);
    short_drain(dir.path(), &test);
    let lab = TwoSegments::start("clr", &okd, &test);
    let (okd_m0, test_m0) = (okd.node("master-0"), test.node("master-0"));
    let (okd_node, test_node, seg1) = (&lab.okd_node, &lab.test_node, &lab.seg1);
    let mut app = start_appliance(lab.topo.services(), &host);
    wait_up(&app, &okd_m0);
    wait_up(&app, &test_m0);

    // okd's held stream and lease.
    let okd_api = SocketAddr::from((okd.appliance, 6443));
    let mut held = Conn::open(okd_node, okd_api).expect("connect to okd's API frontend");
    assert_eq!(held.backend, "okd-master-0");
    held.ping().expect("ping");
    let okd_m1 = okd.node("master-1");
    let client = Client::start(seg1, dir.path(), "okd-m1", okd_m1.mac, &[]);
    let bound = client.wait(0, &["bound"]);
    expect_lease(&bound, &okd, &okd_m1);

    // A stream through test's API frontend, which test's removal lets run for its drain
    // timeout.
    let test_api = SocketAddr::from((test.appliance, 6443));
    let mut draining = Conn::open(test_node, test_api).expect("connect to test's API frontend");
    assert_eq!(draining.backend, "test-master-0");

    // Remove test.
    write_host(dir.path(), &[&okd]);
    let (code, text) = reload(&state);
    let removed = Instant::now();
    assert_eq!(code, Some(0), "{text}\n{}", app.log_tails());
    draining
        .ping()
        .expect("a removed cluster's open connection goes on for its drain timeout");
    assert!(
        wait_until(Duration::from_secs(10), || draining.ping().is_err()),
        "a removed cluster's connection outlived its drain timeout\n{}",
        app.log_tails()
    );
    let cut = removed.elapsed();
    assert!(
        cut >= Duration::from_millis(2500),
        "cut after {cut:?}, before the 3 s drain timeout"
    );
    assert!(text.contains("reloaded: now serving plan"), "{text}");
    held.ping()
        .expect("okd's stream goes on across test's removal");
    let renewed = client.renew();
    assert_eq!(
        renewed.env.get("ip"),
        Some(&okd_m1.ip.to_string()),
        "{renewed:?}"
    );
    let test_http = SocketAddr::from((test.appliance, 8080));
    assert!(
        wait_until(BIND_TIMEOUT, || refused(test_node, test_api)
            && refused(test_node, test_http)),
        "test's frontends still accept after its removal\n{}",
        app.log_tails()
    );
    for (ns, server) in [(&okd_node, okd.appliance), (&test_node, test.appliance)] {
        expect_names(ns, server, &okd);
        let gone = dig_in(
            ns,
            "dig",
            IpAddr::V4(server),
            &["+norecurse", &test.fqdn("api"), "A"],
        );
        assert_ne!(
            gone.last().status,
            "NOERROR",
            "test's name at {server}:\n{}",
            gone.stdout
        );
    }
    let out = appliance([
        "lb".as_ref(),
        "status".as_ref(),
        "--cluster".as_ref(),
        "test".as_ref(),
        "--state-dir".as_ref(),
        state.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no cluster has the id test"));
    assert!(
        state.join("clusters/test").is_dir(),
        "a removed cluster's state is kept"
    );
    // `status` lists the sockets open now: test's are gone, okd's and the DNS addresses stay.
    let shown = listeners(&state, "okd");
    assert!(
        !shown.contains(&format!("http/tcp {}:8080", test.appliance)),
        "{shown}"
    );
    assert!(
        !shown.contains(&format!("api/tcp {}:6443", test.appliance)),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("http/tcp {}:8080", okd.appliance)),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("dns/udp {}:53", test.appliance)),
        "{shown}"
    );

    // Add test back.
    write_host(dir.path(), &[&okd, &test]);
    short_drain(dir.path(), &test);
    let (code, text) = reload(&state);
    assert_eq!(code, Some(0), "{text}\n{}", app.log_tails());
    let ups = |app: &harness::Process| {
        let line = format!("{}: api backend {}:6443 is up", test_m0.name, test_m0.ip);
        app.stderr().matches(&line).count()
    };
    assert!(
        wait_until(Duration::from_secs(10), || ups(&app) >= 2),
        "test's backend not up again\n{}",
        app.log_tails()
    );
    expect_balanced_to(test_node, test.appliance, "test-master-0");
    // Each cluster's status lists its own listeners and the host's (DNS at every cluster's
    // address), not the other cluster's boot server and frontends.
    let theirs = listeners(&state, "okd");
    assert!(
        !theirs.contains(&format!("http/tcp {}:8080", test.appliance))
            && theirs.contains(&format!("dns/udp {}:53", test.appliance)),
        "{theirs}"
    );
    let shown = listeners(&state, "test");
    assert!(
        shown.contains(&format!("http/tcp {}:8080", test.appliance))
            && !shown.contains(&format!("http/tcp {}:8080", okd.appliance)),
        "{shown}"
    );
    assert_eq!(
        shown
            .matches(&format!("dns/udp {}:53", test.appliance))
            .count(),
        1,
        "{shown}"
    );
    let (code, body) = get(test_node, &format!("{}/ignition/master-0.ign", test.http()));
    assert_eq!(code, "200", "{body}");
    expect_names(okd_node, okd.appliance, &test);
    held.ping()
        .expect("okd's stream goes on across test's return");
    // The first-listed cluster goes too: the admin socket and the API are the host's, not
    // its, and go on answering for the one left.
    write_host(dir.path(), &[&test]);
    let (code, text) = reload(&state);
    assert_eq!(code, Some(0), "{text}\n{}", app.log_tails());
    let out = appliance([
        "lb".as_ref(),
        "status".as_ref(),
        "--state-dir".as_ref(),
        state.as_os_str(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", app.log_tails());
    assert!(stdout.contains(&format!("{}:6443", test_m0.ip)), "{stdout}");
    assert!(!stdout.contains(&format!("{}:6443", okd_m0.ip)), "{stdout}");
    assert_eq!(
        app.stderr()
            .lines()
            .filter(|l| l.ends_with(" ready"))
            .count(),
        1,
        "the appliance restarted\n{}",
        app.log_tails()
    );
    app.assert_running()
        .expect("okd-appliance is still running");
}

/// A host file's first start over the state directory okd's own file used: okd's install
/// markers move into `clusters/okd/`, so its installed master boots its disk instead of
/// installing again; a host of two clusters over the same state refuses to start and moves
/// nothing.
#[test]
fn a_host_file_takes_over_its_one_clusters_state_and_a_host_of_two_refuses() {
    if !require_root() || !require_tools(&["curl"]) {
        return;
    }
    let (okd, test) = (okd_on_its_own_segment(), test_on_its_own_segment());
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-clusters-adopt-")
        .tempdir()
        .expect("tempdir");
    let state = dir.path().join("state");
    let okd_m0 = okd.node("master-0");
    // What `serve okd.yml` left: master-0 installed.
    std::fs::create_dir_all(state.join("installed")).expect("state");
    std::fs::write(state.join("installed").join(okd_m0.name), "installed\n").expect("marker");

    // Two clusters: whose state is it? Refused, nothing moved.
    let host = write_host(dir.path(), &[&okd, &test]);
    let lab = TwoSegments::start("cla", &okd, &test);
    let out = lab
        .topo
        .services()
        .exec([
            harness::appliance_bin().expect("binary").as_os_str(),
            "serve".as_ref(),
            host.as_os_str(),
        ])
        .output()
        .expect("serve runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("holds one cluster's install state (installed)")
            && stderr.contains("lists 2 clusters"),
        "{stderr}"
    );
    assert!(state.join("installed").join(okd_m0.name).is_file());

    // okd alone: taken over, and master-0 boots its disk.
    let host = write_host(dir.path(), &[&okd]);
    let app = start_appliance(lab.topo.services(), &host);
    assert!(
        app.stderr().contains("taken over by the host file"),
        "{}",
        app.log_tails()
    );
    assert!(
        state
            .join("clusters/okd/installed")
            .join(okd_m0.name)
            .is_file()
    );
    let (code, script) = get(&lab.okd_node, &crate::clusters::script_url(&okd, &okd_m0));
    assert_eq!(code, "200", "{script}");
    assert!(
        script.contains(&format!("{} is installed, booting from disk", okd_m0.name)),
        "{script}"
    );
}
