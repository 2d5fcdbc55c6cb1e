//! Self-tests of the namespace harness: connectivity across the bridge, cleanup after the guards
//! drop (also when the test body panics), process supervision, tap devices, and the skip/fail
//! rules for missing prerequisites.

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use harness::{
    Netns, Outcome, Process, Topology, list_netns, netns_exists, outcome, pid_alive, require_path,
    require_root, wait_for, wait_until, which,
};

const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Echo server bound inside `ns` on `addr:0`, serving exactly one connection on a thread.
fn one_shot_echo(ns: &Netns, addr: std::net::IpAddr) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let listener = ns
        .run(move || TcpListener::bind(SocketAddr::new(addr, 0)))
        .expect("enter namespace")
        .expect("bind echo listener");
    let local = listener.local_addr().expect("local_addr");
    let handle = std::thread::spawn(move || {
        // Bounded: a single accept, with a deadline enforced by the client side's timeouts and
        // by non-blocking polling here.
        listener.set_nonblocking(true).expect("nonblocking");
        let conn = wait_for(IO_TIMEOUT, "echo client", || listener.accept().ok());
        let Ok((mut conn, _)) = conn else { return };
        conn.set_nonblocking(false).expect("blocking");
        conn.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        let mut buf = Vec::new();
        let _ = conn.read_to_end(&mut buf);
        let _ = conn.write_all(&buf);
    });
    (local, handle)
}

/// Connects from inside `ns` to `to`, sends `msg`, returns what came back.
fn echo_roundtrip(ns: &Netns, to: SocketAddr, msg: &[u8]) -> Vec<u8> {
    let msg = msg.to_vec();
    ns.run(move || {
        let mut s = TcpStream::connect_timeout(&to, IO_TIMEOUT).expect("connect");
        s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        s.write_all(&msg).expect("write");
        s.shutdown(Shutdown::Write).expect("shutdown");
        let mut back = Vec::new();
        s.read_to_end(&mut back).expect("read");
        back
    })
    .expect("enter namespace")
}

#[test]
fn two_nodes_reach_each_other_over_the_bridge() {
    if !require_root() {
        return;
    }
    let topo = Topology::new("hsv").expect("topology");
    let a = topo
        .add_node("hna", "10.99.0.10/24", Some("fd99::10/64"))
        .expect("node a");
    let b = topo
        .add_node("hnb", "10.99.0.11/24", Some("fd99::11/64"))
        .expect("node b");
    let b4 = b.addr4().expect("b has IPv4").into();
    let b6 = b.addr6().expect("b has IPv6").into();

    if which("ping").is_some() {
        for target in [b4, b6, std::net::IpAddr::from(topo.addr4())] {
            let out = a
                .exec(["ping", "-c", "1", "-W", "2", &target.to_string()])
                .output()
                .expect("run ping");
            assert!(
                out.status.success(),
                "ping {target} from {}: {}",
                a.name(),
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }

    // TCP echo with std::net on threads inside the namespaces: IPv4 and IPv6, node to node.
    for (addr, msg) in [(b4, &b"over IPv4"[..]), (b6, &b"over IPv6"[..])] {
        let (server, handle) = one_shot_echo(&b, addr);
        assert_eq!(echo_roundtrip(&a, server, msg), msg);
        handle.join().expect("echo thread");
    }

    // Node to the services namespace's bridge address.
    let (server, handle) = one_shot_echo(topo.services(), topo.addr4().into());
    assert_eq!(echo_roundtrip(&a, server, b"to services"), b"to services");
    handle.join().expect("echo thread");

    // The namespaces are isolated from the host: the bridge address is not bound in ours.
    assert!(TcpStream::connect_timeout(&server, Duration::from_millis(300)).is_err());
}

#[test]
fn namespaces_and_processes_are_gone_after_drop() {
    if !require_root() {
        return;
    }
    let topo = Topology::new("hsv").expect("topology");
    let node = topo.add_node("hnd", "10.99.0.20/24", None).expect("node");
    let names = [topo.services().name().to_owned(), node.name().to_owned()];
    let mut sleeper = node
        .spawn("sleeper", ["sleep", "300"])
        .expect("spawn sleep");
    let guarded = sleeper.pid();
    // A daemon-like process outside any guard: only the namespace's drop can kill it.
    let out = node
        .exec(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
        .output()
        .expect("start orphan");
    let orphan: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("orphan pid");
    assert!(sleeper.is_running());
    let inside = node.pids().expect("ip netns pids");
    assert!(inside.contains(&guarded), "{guarded} not in {inside:?}");
    assert!(inside.contains(&orphan), "{orphan} not in {inside:?}");
    let listed = list_netns().expect("ip netns list");
    assert!(names.iter().all(|n| listed.contains(n)), "{listed:?}");

    drop(sleeper);
    assert!(!pid_alive(guarded), "guarded sleep {guarded} survived");
    drop(node);
    drop(topo);

    let listed = list_netns().expect("ip netns list");
    for name in &names {
        assert!(!listed.contains(name), "{name} still in {listed:?}");
    }
    assert!(
        wait_until(Duration::from_secs(5), || !pid_alive(orphan)),
        "orphan sleep {orphan} survived its namespace"
    );
}

#[test]
fn cleanup_happens_when_the_test_body_panics() {
    if !require_root() {
        return;
    }
    let mut seen: Option<(Vec<String>, u32)> = None;
    let result = catch_unwind(AssertUnwindSafe(|| {
        let topo = Topology::new("hsv").expect("topology");
        let node = topo
            .add_node("hnp", "10.99.0.30/24", Some("fd99::30/64"))
            .expect("node");
        let _tap = topo.add_tap("tap0").expect("tap");
        let p = node
            .spawn("doomed", ["sh", "-c", "echo doomed-output; exec sleep 300"])
            .expect("spawn");
        seen = Some((
            vec![topo.services().name().to_owned(), node.name().to_owned()],
            p.pid(),
        ));
        panic!("deliberate panic inside the test body");
    }));
    assert!(result.is_err(), "the body should have panicked");
    let (names, pid) = seen.expect("body ran up to the panic");
    for name in &names {
        assert!(!netns_exists(name), "{name} left behind after a panic");
    }
    assert!(!pid_alive(pid), "process {pid} left behind after a panic");
}

#[test]
fn tap_device_is_created_on_the_services_bridge() {
    if !require_root() || !require_path("/dev/net/tun") {
        return;
    }
    let topo = Topology::with_addrs("hsv", "10.98.0.1/24", None).expect("topology");
    assert_eq!(topo.addr6(), None);
    let tap = topo.add_tap("tapvm0").expect("tap");
    let details = topo
        .services()
        .ip(["-d", "link", "show", "dev", tap.name()])
        .expect("ip link show");
    assert!(details.contains("tun type tap"), "{details}");
    assert!(
        details.contains(&format!("master {}", topo.bridge().name())),
        "{details}"
    );
    // Created in the services namespace only.
    assert!(topo.services().has_link("tapvm0"));
    drop(tap);
    assert!(
        !topo.services().has_link("tapvm0"),
        "tap not deleted on drop"
    );
}

/// A process that exits leaving a stray in its group: the stray dies before the leader is
/// reaped (while the group's id is still surely its own), and once reaped the harness never
/// signals that id again, since the kernel may have given it to another test's process.
#[test]
fn a_reaped_process_group_is_never_signalled_again() {
    let mut sh = std::process::Command::new("sh");
    sh.args(["-c", "sleep 300 & echo $!; exit 0"]);
    let mut p = Process::spawn("leaves-a-stray", sh).expect("spawn");
    assert!(wait_until(Duration::from_secs(10), || !p
        .stdout()
        .is_empty()));
    let stray: i32 = p.stdout().trim().parse().unwrap();
    assert!(
        p.wait_timeout(Duration::from_secs(10))
            .expect("wait")
            .is_some_and(|s| s.success())
    );
    assert!(
        wait_until(Duration::from_secs(5), || nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(stray),
            None
        )
        .is_err()
            || std::fs::read_to_string(format!("/proc/{stray}/stat"))
                .is_ok_and(|s| s.split(' ').nth(2) == Some("Z"))),
        "the stray outlived its group's leader"
    );
    // A new group leader that may well take the reaped id: stopping the old one leaves it be.
    let mut other = Process::spawn("other", {
        let mut c = std::process::Command::new("sleep");
        c.arg("300");
        c
    })
    .expect("spawn");
    let status = p.stop().expect("stop");
    assert!(status.success());
    assert!(other.is_running());
    drop(other);
}

#[test]
fn process_logs_exit_status_and_sigkill_escalation() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("hpr").expect("netns");

    let mut p = ns
        .spawn("exits", ["sh", "-c", "echo out; echo err >&2; exit 3"])
        .expect("spawn");
    let status = p
        .wait_timeout(Duration::from_secs(10))
        .expect("wait")
        .expect("exited in time");
    assert_eq!(status.code(), Some(3));
    assert_eq!(p.stdout(), "out\n");
    assert_eq!(p.stderr(), "err\n");
    assert!(p.assert_running().is_err());
    assert!(p.log_tails().contains("err"));
    drop(p); // prints its tail: it failed on its own

    // Ignores SIGTERM (ignored dispositions survive exec): stop() must escalate to SIGKILL.
    let mut stubborn = ns
        .spawn("stubborn", ["sh", "-c", "trap '' TERM; exec sleep 300"])
        .expect("spawn")
        .with_grace(Duration::from_millis(300));
    // Give sh time to install the trap and exec.
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(format!("/proc/{}/comm", stubborn.pid()))
            .is_ok_and(|c| c.trim() == "sleep")
    }));
    let status = stubborn.stop().expect("stop");
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(9), "{status}");

    // Spawning through Process::spawn with a plain command works too (here: outside netns).
    let mut plain = Process::spawn("true", std::process::Command::new("true")).expect("spawn");
    assert!(
        plain
            .wait_timeout(Duration::from_secs(10))
            .expect("wait")
            .is_some_and(|s| s.success())
    );
}

#[test]
fn namespace_names_are_unique_and_short() {
    if !require_root() {
        return;
    }
    let a = Netns::new("abcd").expect("netns");
    let b = Netns::new("abcd").expect("netns");
    assert_ne!(a.name(), b.name());
    for ns in [&a, &b] {
        assert!(ns.name().len() <= 15, "{}", ns.name());
        assert!(ns.name().contains(&std::process::id().to_string()));
    }
    assert!(Netns::new("toolong").is_err());
    assert!(Netns::new("a/b").is_err());
}

#[test]
fn missing_prerequisite_skips_outside_ci_and_fails_in_ci() {
    let skip = outcome(false, "t1", "`dig`", "not found in PATH");
    assert_eq!(
        skip,
        Outcome::Skip("SKIPPED t1: needs `dig` (not found in PATH)".to_owned())
    );
    let Outcome::Fail(msg) = outcome(true, "t1", "`dig`", "not found in PATH") else {
        panic!("CI must fail, not skip");
    };
    assert!(msg.contains("t1") && msg.contains("CI=true"), "{msg}");
    assert!(which("sh").is_some());
    assert!(which("definitely-not-a-tool-okd").is_none());
}

/// A program in a test namespace that rewrites /etc/resolv.conf (as dhcpcd's and dhclient's
/// default hooks do) changes the namespace's private copy, never the host's file.
#[test]
fn resolv_conf_writes_stay_inside_the_namespace() {
    if !harness::require_root() {
        return;
    }
    let before = std::fs::read("/etc/resolv.conf").unwrap_or_default();
    let ns = harness::Netns::new("rslv").unwrap();
    let status = ns
        .exec([
            "sh",
            "-c",
            "echo 'nameserver 203.0.113.53' > /etc/resolv.conf && cat /etc/resolv.conf",
        ])
        .output()
        .unwrap();
    assert!(status.status.success());
    assert!(String::from_utf8_lossy(&status.stdout).contains("203.0.113.53"));
    assert_eq!(
        std::fs::read("/etc/resolv.conf").unwrap_or_default(),
        before,
        "the host's resolv.conf changed"
    );
    let name = ns.name().to_owned();
    drop(ns);
    assert!(!std::path::Path::new("/etc/netns").join(name).exists());
}
