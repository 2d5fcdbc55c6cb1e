//! The services VM image (images/build.sh), booted for real: qemu (TCG, q35, OVMF) with the image
//! behind a copy-on-write overlay bigger than the image, a seed disk labelled OKDSEED holding the
//! config and its install directory, and one NIC on a tap in the test's bridge. From namespaces
//! on that bridge, real clients use what the appliance in the VM serves: udhcpc gets its
//! reservation, dig gets api, api-int and *.apps, curl goes through the load balancer to a
//! backend and fetches its ignition. At the serial console, as root: the unit is `active` under
//! systemd (Type=notify), runs sandboxed as its own account, and `systemctl reload` applies a
//! good edit and refuses one that changes `listen`.
//!
//! Minutes under TCG, so not part of `cargo test`: `tests/image/run.sh` builds the image and
//! runs this test with `OKD_IMAGE` set.

use std::process::Command;
use std::time::{Duration, Instant};

use harness::{
    Topology, require_path, require_root, require_tools, skip_or_fail, write_install_dir,
};

use crate::dhcp_support::{Hook, guarded};
use crate::image_support::{
    Console, OVMF_CODE, OVMF_VARS, qemu_argv, run_checked, seed_disk, start_vm,
};

/// The image's virtual size is 4 GiB (images/build.sh --size); the overlay is bigger, so the
/// root file system must have grown at boot (systemd-repart + x-systemd.growfs).
const OVERLAY_SIZE: &str = "6G";
const APPLIANCE: &str = "10.99.0.10";
const VM_MAC: &str = "52:54:00:99:00:0a";
const MASTER_IP: &str = "10.99.0.2";
const WORKER_IP: &str = "10.99.0.5";
const WORKER_MAC: &str = "52:54:00:99:00:05";
/// From qemu's start to the login prompt: OVMF, systemd-boot, the kernel and systemd, all
/// emulated, on a machine shared with other builds.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(600);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

fn config() -> String {
    format!(
        r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network:
  interface: enp0s5
  subnet: 10.99.0.0/24
  gateway: 10.99.0.254
  appliance_ip: {APPLIANCE}
nodes:
  - {{ name: master-0, role: master, mac: "52:54:00:99:00:02", ip: {MASTER_IP} }}
  - {{ name: worker-0, role: worker, mac: "{WORKER_MAC}", ip: {WORKER_IP} }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
lb:
  health: {{ interval: 1s, timeout: 500ms, rise: 1, fall: 1, control_plane_check: tcp, ingress_check: tcp }}
"#
    )
}

/// `dig +short` from `ns` against the appliance in the VM.
fn dig(ns: &harness::Netns, name: &str, kind: &str) -> String {
    let out = ns
        .exec([
            "dig",
            "+short",
            "+time=2",
            "+tries=3",
            &format!("@{APPLIANCE}"),
            name,
            kind,
        ])
        .output()
        .expect("dig");
    assert!(out.status.success(), "dig {name} {kind}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `curl` from `ns`; returns the body, or `None` when the request failed.
fn curl(ns: &harness::Netns, url: &str) -> Option<String> {
    let out = ns
        .exec(["curl", "-sf", "-m", "5", url])
        .output()
        .expect("curl");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
#[ignore = "boots the services VM image for minutes under TCG: run tests/image/run.sh"]
fn the_services_vm_serves_the_cluster_under_systemd() {
    if !require_root()
        || !require_tools(&[
            "qemu-system-x86_64",
            "qemu-img",
            "mkfs.vfat",
            "mcopy",
            "dig",
            "curl",
            "busybox",
            "unshare",
            "python3",
        ])
        || !require_path(OVMF_CODE)
        || !require_path(OVMF_VARS)
        || !require_path("/dev/net/tun")
    {
        return;
    }
    let Some(image) = std::env::var_os("OKD_IMAGE") else {
        let _ = skip_or_fail(
            "OKD_IMAGE",
            "not set: build the image with images/build.sh, or run tests/image/run.sh",
        );
        return;
    };
    let image = std::path::PathBuf::from(image);
    assert!(
        image.is_file(),
        "OKD_IMAGE={}: no such file",
        image.display()
    );

    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-image-")
        .tempdir()
        .expect("tempdir");
    let overlay = dir.path().join("disk.qcow2");
    run_checked(
        Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
            .arg(&image)
            .arg(&overlay)
            .arg(OVERLAY_SIZE),
    );
    std::fs::copy(OVMF_VARS, dir.path().join("vars.fd")).expect("OVMF vars");
    let seed = dir.path().join("seed");
    std::fs::create_dir(&seed).expect("seed dir");
    std::fs::write(seed.join("okd.yml"), config()).expect("seed config");
    write_install_dir(&seed.join("install_dir")).expect("seed install dir");
    let seed_img = dir.path().join("seed.img");
    seed_disk(&seed, &seed_img);

    // The bridge is the cluster network; its own address is the gateway the config names.
    let topo = Topology::with_addrs("img", "10.99.0.254/24", None).expect("topology");
    let tap = topo.add_tap("tap0").expect("tap");
    let backend = topo
        .add_node("bk", &format!("{MASTER_IP}/24"), None)
        .expect("backend node");
    let client = topo.add_bare_node("cl").expect("client node");
    client.set_mac(WORKER_MAC).expect("client mac");

    // master-0's API as the load balancer sees it: a plain TCP server (the config checks the
    // control plane with TCP connects) whose answer names it.
    let www = dir.path().join("www");
    std::fs::create_dir(&www).expect("www");
    let token = format!(
        "master-0 behind the okd-appliance LB, test {}",
        std::process::id()
    );
    std::fs::write(www.join("who"), &token).expect("token");
    let _api = backend
        .spawn(
            "master-0-api",
            [
                "python3",
                "-m",
                "http.server",
                "6443",
                "--bind",
                MASTER_IP,
                "--directory",
                www.to_str().expect("UTF-8 path"),
            ],
        )
        .expect("backend");

    let started = Instant::now();
    let argv = qemu_argv(dir.path(), &overlay, &seed_img, tap.name(), VM_MAC);
    let mut vm = start_vm(topo.services(), &argv);
    let mut console = Console::connect(
        &dir.path().join("serial.sock"),
        &dir.path().join("serial.log"),
    );
    console.login(LOGIN_TIMEOUT);
    let login_after = started.elapsed();

    // Type=notify: `active` only after READY=1; `activating` until then, `failed` if it died.
    let mut state = String::new();
    let became_active = harness::wait_until(Duration::from_secs(300), || {
        state = console
            .type_command("systemctl is-active okd-appliance", COMMAND_TIMEOUT)
            .output
            .trim()
            .to_owned();
        state == "active" || state == "failed"
    });
    let active_after = started.elapsed();
    if state != "active" {
        let status = console.type_command(
            "systemctl status okd-appliance --no-pager -l; journalctl -b -u okd-appliance-prepare -u okd-appliance --no-pager | tail -40",
            COMMAND_TIMEOUT,
        );
        panic!(
            "okd-appliance is {state:?} (waited: {became_active})\n{}",
            status.output
        );
    }
    vm.assert_running().expect("qemu runs");
    let in_guest = console.ok(
        "systemctl show -P ActiveEnterTimestampMonotonic okd-appliance; systemd-analyze",
        COMMAND_TIMEOUT,
    );
    let active_us: u64 = in_guest
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ActiveEnterTimestampMonotonic: {in_guest}"));
    println!(
        "image test: login prompt answered {:.0} s after qemu started; okd-appliance active \
         {:.0} s after qemu started, {:.1} s after the guest kernel started\n{}",
        login_after.as_secs_f64(),
        active_after.as_secs_f64(),
        active_us as f64 / 1e6,
        in_guest.lines().skip(1).collect::<Vec<_>>().join("\n")
    );

    // The config came from the seed disk, and the cluster NIC got its address from it.
    let prepare = console.ok(
        "journalctl -b -u okd-appliance-prepare --no-pager -o cat; ip -4 -br addr show enp0s5",
        COMMAND_TIMEOUT,
    );
    assert!(
        prepare.contains("copied the cluster config from the seed disk"),
        "{prepare}"
    );
    assert!(prepare.contains(&format!("{APPLIANCE}/24")), "{prepare}");

    // The sandbox is on: the unit's account, only the two capabilities, no new privileges, a
    // seccomp filter; the checks below run against this process.
    let sandbox = console.ok(
        "P=$(systemctl show -P MainPID okd-appliance); id -u okd-appliance; \
         grep -E '^(Uid|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/$P/status; \
         systemctl show -p ProtectSystem -p RestrictAddressFamilies okd-appliance",
        COMMAND_TIMEOUT,
    );
    let uid = sandbox.lines().next().unwrap_or_default().trim().to_owned();
    assert!(uid.parse::<u32>().is_ok_and(|u| u != 0), "{sandbox}");
    for expected in [
        format!("Uid:\t{uid}\t{uid}\t{uid}\t{uid}"),
        // CAP_NET_BIND_SERVICE (10) and CAP_NET_RAW (13), nothing else.
        "CapBnd:\t0000000000002400".to_owned(),
        "CapAmb:\t0000000000002400".to_owned(),
        "NoNewPrivs:\t1".to_owned(),
        "Seccomp:\t2".to_owned(),
        "ProtectSystem=strict".to_owned(),
    ] {
        assert!(
            sandbox.contains(&expected),
            "no {expected:?} in:\n{sandbox}"
        );
    }

    // DHCP: udhcpc in the client namespace (its own hook, its own resolv.conf) gets worker-0's
    // reservation from the appliance in the VM.
    let hook = Hook::new(dir.path(), "udhcpc");
    let hook_path = hook.path.display().to_string();
    let mut udhcpc = harness::Process::spawn(
        "udhcpc",
        guarded(
            &client,
            &dir.path().join("resolv.conf"),
            &[
                "busybox", "udhcpc", "-i", "eth0", "-s", &hook_path, "-f", "-q", "-n", "-t", "10",
                "-T", "2",
            ],
        ),
    )
    .expect("udhcpc");
    let bound = hook
        .wait(0, &["bound"], Duration::from_secs(40))
        .unwrap_or_else(|| panic!("no lease: {:?}\n{}", hook.reasons(), udhcpc.log_tails()));
    bound.expect(&[
        ("ip", WORKER_IP.to_owned()),
        ("hostname", "worker-0".to_owned()),
        ("dns", APPLIANCE.to_owned()),
        ("router", "10.99.0.254".to_owned()),
        ("serverid", APPLIANCE.to_owned()),
        ("domain", "okd.lab.example.com".to_owned()),
    ]);
    let _ = udhcpc.wait_timeout(Duration::from_secs(5));

    // DNS from the leased address.
    for name in [
        "api.okd.lab.example.com",
        "api-int.okd.lab.example.com",
        "console-openshift-console.apps.okd.lab.example.com",
    ] {
        assert_eq!(dig(&client, name, "A"), APPLIANCE, "{name}");
    }
    assert_eq!(dig(&client, "master-0.okd.lab.example.com", "A"), MASTER_IP);
    let ptr = client
        .exec(["dig", "+short", &format!("@{APPLIANCE}"), "-x", WORKER_IP])
        .output()
        .expect("dig -x");
    assert_eq!(
        String::from_utf8_lossy(&ptr.stdout).trim(),
        "worker-0.okd.lab.example.com."
    );

    // The load balancer: API traffic reaches master-0 once its health check passed.
    let mut body = None;
    harness::wait_until(Duration::from_secs(30), || {
        body = curl(&client, &format!("http://{APPLIANCE}:6443/who"));
        body.is_some()
    });
    assert_eq!(
        body.as_deref(),
        Some(token.as_str()),
        "through the LB on 6443"
    );

    // The boot server: worker-0's ignition (its host name, merging the role's file), to
    // worker-0's address only, and the role's file as openshift-install wrote it, read from
    // /etc/okd-appliance/install_dir; the fetch is recorded in the state directory (the one
    // place ProtectSystem=strict leaves writable).
    let ignition = curl(
        &client,
        &format!("http://{APPLIANCE}:8080/ignition/worker-0.ign"),
    )
    .expect("worker-0's ignition");
    for part in [
        "data:,worker-0",
        "\"path\":\"/etc/hostname\"",
        "/ignition/roles/worker.ign",
    ] {
        assert!(ignition.contains(part), "no {part} in {ignition}");
    }
    assert_eq!(
        curl(
            &client,
            &format!("http://{APPLIANCE}:8080/ignition/roles/worker.ign")
        )
        .as_deref(),
        Some(r#"{"ignition":{"version":"3.2.0"}}"#),
        "the worker role's ignition"
    );
    console.ok(
        "test -f /var/lib/okd-appliance/installed/worker-0",
        COMMAND_TIMEOUT,
    );

    // systemctl reload, a good edit: a new record is served.
    assert_eq!(dig(&client, "registry.okd.lab.example.com", "A"), "");
    let reload = console.type_command(
        "printf 'dns:\\n  records:\\n    - { name: registry, type: A, value: 10.99.0.77 }\\n' \
         >> /etc/okd-appliance/okd.yml; systemctl reload okd-appliance",
        COMMAND_TIMEOUT,
    );
    assert_eq!(reload.status, 0, "good reload: {}", reload.output);
    assert_eq!(
        dig(&client, "registry.okd.lab.example.com", "A"),
        "10.99.0.77"
    );

    // An edit that changes `listen` takes a restart: the reload fails and says why, the
    // appliance stays active and keeps serving the previous plan.
    let reload = console.type_command(
        "printf 'listen:\\n  http: [\"10.99.0.10:8081\"]\\n' >> /etc/okd-appliance/okd.yml; \
         systemctl reload okd-appliance",
        COMMAND_TIMEOUT,
    );
    assert_ne!(
        reload.status, 0,
        "reload of a listen change: {}",
        reload.output
    );
    let after = console.ok(
        "systemctl is-active okd-appliance; journalctl -u okd-appliance -n 20 --no-pager -o cat",
        COMMAND_TIMEOUT,
    );
    assert!(after.starts_with("active\n"), "{after}");
    assert!(
        after.contains("reload refused: listen.http") && after.contains("takes a restart"),
        "{after}"
    );
    assert_eq!(
        dig(&client, "registry.okd.lab.example.com", "A"),
        "10.99.0.77"
    );
    assert!(
        curl(
            &client,
            &format!("http://{APPLIANCE}:8080/ignition/worker-0.ign")
        )
        .is_some()
    );

    // The disk grew: the overlay is 6 GiB, the image 4 GiB.
    let size = console.ok("df -B1 --output=size / | tail -n 1", COMMAND_TIMEOUT);
    let size: u64 = size.trim().parse().unwrap_or_else(|_| panic!("df: {size}"));
    assert!(
        size > 5 << 30,
        "root file system of {size} bytes did not grow"
    );

    // A config that is gone is seeded again (the seed's, without the edits above) while the
    // seed disk is there ...
    let reseeded = console.ok(
        "mv /etc/okd-appliance/okd.yml /root/; systemctl restart okd-appliance-prepare; \
         cat /etc/okd-appliance/okd.yml",
        COMMAND_TIMEOUT,
    );
    assert_eq!(reseeded, config());
    // ... and once it is detached too (the guest unbinds its virtio disk), the console and
    // the login banner say where the config goes and how to check it.
    let banner = console.ok(
        "seed=$(readlink -f /dev/disk/by-label/OKDSEED); \
         virtio=$(basename $(readlink -f /sys/class/block/${seed#/dev/}/device)); \
         echo $virtio > /sys/bus/virtio/drivers/virtio_blk/unbind; udevadm settle; \
         rm /etc/okd-appliance/okd.yml; systemctl restart okd-appliance-prepare; \
         journalctl -u okd-appliance-prepare -n 40 -o cat; cat /etc/issue.d/okd-appliance.issue",
        COMMAND_TIMEOUT,
    );
    for part in [
        "no cluster config yet",
        "/etc/okd-appliance/okd.yml",
        "okd-appliance check /etc/okd-appliance/okd.yml",
        "OKDSEED",
    ] {
        // Twice: once from the journal (what the console showed), once from the issue file.
        assert!(
            banner.matches(part).count() >= 2,
            "{part:?} not twice in:\n{banner}"
        );
    }

    // A clean shutdown: the appliance stops within its TimeoutStopSec, qemu exits.
    console.send("systemctl poweroff\n");
    let status = vm
        .wait_timeout(Duration::from_secs(120))
        .expect("wait for qemu");
    assert!(
        status.is_some_and(|s| s.success()),
        "qemu after poweroff: {status:?}"
    );
}
