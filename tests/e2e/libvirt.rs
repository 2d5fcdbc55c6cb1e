//! `okd-appliance nodes` with provider libvirt against a real libvirtd (Debian's, started by
//! hand without systemd) driving qemu under TCG, all inside the test's network namespace and
//! a private mount namespace (tmpfs over /run/libvirt, /var/lib/libvirt, /var/log/libvirt,
//! /var/cache/libvirt and a copy of /etc/libvirt), so nothing of the host's libvirt (nor of a
//! colleague's test) is seen or touched. `virsh` reaches it through `nsenter`
//! (`OKD_VIRSH`).
//!
//! Two nodes: a PXE master and an ISO worker whose CD QEMU reads over HTTP from a server in
//! the namespace. `create` defines both with their MACs and volumes, twice (the second run
//! changes nothing); `start` runs them; `stop` asks for a shutdown the firmware ignores and
//! forces them off after the shutdown timeout; a domain whose MAC differs from the config is
//! refused (exit 5); `destroy --yes` undefines both and removes their volumes.
//!
//! And the whole path: two domains made by `nodes create` + `start` on the boot lab's services
//! bridge network-boot from the real appliance (DHCP, iPXE script, Debian's kernel with the
//! test initramfs of harness::initramfs, ignition fetched) and the master installs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use harness::{Bridge, Netns, Process, require_root, require_tools, wait_until};

/// A Range-capable file server (QEMU's curl driver reads the ISO in ranges; python's
/// http.server does not do ranges).
const RANGE_SERVER: &str = r#"
import http.server, os, re, sys
root = sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self): self.answer(True)
    def do_HEAD(self): self.answer(False)
    def answer(self, body):
        path = os.path.join(root, self.path.lstrip("/"))
        if not os.path.isfile(path):
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        data = open(path, "rb").read()
        m = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m:
            start = int(m.group(1)); end = int(m.group(2)) if m.group(2) else len(data) - 1
            chunk = data[start:end + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{start + len(chunk) - 1}/{len(data)}")
        else:
            chunk = data
            self.send_response(200)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(chunk)))
        self.end_headers()
        if body: self.wfile.write(chunk)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

/// Runs libvirtd in a private mount namespace: tmpfs over libvirt's state, a copy of its
/// configuration with the QEMU driver running as root (so it opens /dev/kvm and does not
/// re-probe QEMU on every define).
const START: &str = r#"set -e
etc=$1
for d in /run/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt; do
  mkdir -p "$d"; mount -t tmpfs tmpfs "$d"
done
cp -a /etc/libvirt/. "$etc/"
mount --bind "$etc" /etc/libvirt
printf 'user = "root"\ngroup = "root"\n' > /etc/libvirt/qemu.conf
mkdir -p /var/lib/libvirt/images
# Pid files inside the private tmpfs: the default /run/*.pid would collide with any other
# libvirtd on the machine (a parallel test's, a colleague's).
virtlogd -d --pid-file /run/libvirt/virtlogd.pid
exec libvirtd --pid-file /run/libvirt/libvirtd.pid
"#;

/// A private libvirtd inside `ns` (and its own mount namespace), with a directory pool `okd`.
/// Dropped in this order: the daemon, then its files.
pub struct Libvirtd {
    daemon: Process,
    virsh: PathBuf,
    dir: tempfile::TempDir,
}

impl Libvirtd {
    pub fn start(ns: &Netns) -> Libvirtd {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        let script = dir.path().join("start.sh");
        std::fs::write(&script, START).unwrap();
        let daemon = ns
            .spawn(
                "libvirtd",
                [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "sh",
                    script.to_str().unwrap(),
                    etc.to_str().unwrap(),
                ],
            )
            .unwrap();
        // `ip netns exec`, unshare and sh all exec: the process is libvirtd itself.
        let virsh = dir.path().join("virsh");
        std::fs::write(
            &virsh,
            format!(
                "#!/bin/sh\nexec nsenter --mount=/proc/{}/ns/mnt --net={} virsh \"$@\"\n",
                daemon.pid(),
                ns.path().display()
            ),
        )
        .unwrap();
        set_mode(&virsh, 0o755);
        let up = wait_until(Duration::from_secs(30), || {
            Command::new(&virsh)
                .args(["-c", "qemu:///system", "list"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        assert!(up, "libvirtd did not come up:\n{}", daemon.log_tails());
        let lv = Libvirtd { daemon, virsh, dir };
        lv.must(&[
            "pool-define-as",
            "okd",
            "dir",
            "--target",
            "/var/lib/libvirt/images",
        ]);
        lv.must(&["pool-start", "okd"]);
        lv
    }

    fn must(&self, args: &[&str]) {
        let out = Command::new(&self.virsh)
            .args(["-c", "qemu:///system"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "virsh {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.daemon.log_tails()
        );
    }

    pub fn virsh(&self, args: &[&str]) -> String {
        let out = Command::new(&self.virsh)
            .args(["-q", "-c", "qemu:///system"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `okd-appliance nodes ARGS CONFIG` with virsh reaching this daemon.
    pub fn nodes(&self, args: &[&str], config: &Path) -> (Option<i32>, String, String) {
        let out = Command::new(harness::appliance_bin().unwrap())
            .arg("nodes")
            .args(args)
            .arg(config)
            .env("NO_COLOR", "1")
            .env("OKD_VIRSH", &self.virsh)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// libvirtd's PID (its mount namespace is where its socket is).
    pub fn pid(&self) -> u32 {
        self.daemon.pid()
    }

    /// The `virsh` wrapper that reaches this daemon (for `OKD_VIRSH`).
    pub fn virsh_path(&self) -> &Path {
        &self.virsh
    }
}

/// The lifecycle lab: its own namespace with a bridge, the daemon, and an ISO server.
struct Libvirt {
    lv: Libvirtd,
    _iso: Process,
    _bridge: Bridge,
    _ns: Netns,
}

impl Libvirt {
    fn start() -> Libvirt {
        let ns = Netns::new("lvrt").unwrap();
        let bridge = Bridge::create(&ns, "br0").unwrap();
        let lv = Libvirtd::start(&ns);
        let dir = lv.dir();
        let www = dir.join("www/iso");
        std::fs::create_dir_all(&www).unwrap();
        std::fs::write(www.join("worker-0.iso"), vec![0u8; 1024 * 1024]).unwrap();
        let server = dir.join("range_server.py");
        std::fs::write(&server, RANGE_SERVER).unwrap();
        let iso = ns
            .spawn(
                "iso server",
                [
                    "python3",
                    server.to_str().unwrap(),
                    "8080",
                    dir.join("www").to_str().unwrap(),
                ],
            )
            .unwrap();
        ns.wait_tcp("127.0.0.1:8080".parse().unwrap(), Duration::from_secs(10))
            .unwrap();
        Libvirt {
            lv,
            _iso: iso,
            _bridge: bridge,
            _ns: ns,
        }
    }

    fn virsh(&self, args: &[&str]) -> String {
        self.lv.virsh(args)
    }

    fn nodes(&self, args: &[&str], config: &Path) -> (Option<i32>, String, String) {
        self.lv.nodes(args, config)
    }

    fn config(&self, master_mac: &str) -> PathBuf {
        let path = self
            .lv
            .dir()
            .join(format!("okd-{}.yml", master_mac.replace(':', "")));
        std::fs::write(
            &path,
            format!(
                r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }}
nodes:
  - {{ name: master-0, role: master, mac: "{master_mac}", ip: 10.0.0.2, machine: {{ cores: 1, memory: 1GiB, disk: 10GiB }} }}
  - {{ name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.0.0.5, machine: {{ cores: 1, memory: 1GiB, disk: 10GiB, install: iso }} }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts, base_url: "http://127.0.0.1:8080" }}
control:
  provider: libvirt
  libvirt: {{ uri: "qemu:///system", bridge: br0, pool: okd, domain_type: qemu }}
  timeouts: {{ request: 60s, task: 60s, shutdown: 3s }}
"#
            ),
        )
        .unwrap();
        path
    }
}

/// Both VM slots of the boot tests (each test here runs two TCG guests). The lock makes the two
/// tests here take their pairs one after the other: each holding one slot while waiting for a
/// second would wait forever.
pub fn two_vm_slots() -> (
    std::sync::MutexGuard<'static, ()>,
    crate::boot_support::VmSlot,
    crate::boot_support::VmSlot,
) {
    static PAIRS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let pair = PAIRS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let first = crate::boot_support::vm_slot();
    (pair, first, crate::boot_support::vm_slot())
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn libvirt_defines_starts_stops_and_undefines_domains() {
    if !require_root()
        || !require_tools(&[
            "libvirtd",
            "virtlogd",
            "virsh",
            "nsenter",
            "unshare",
            "qemu-system-x86_64",
            "python3",
        ])
    {
        return;
    }
    let _slots = two_vm_slots();
    let lv = Libvirt::start();
    let cfg = lv.config("52:54:00:00:00:02");
    const MASTER: &str = "master-0.okd.lab.example.com";
    const WORKER: &str = "worker-0.okd.lab.example.com";

    let (code, stdout, stderr) = lv.nodes(&["create"], &cfg);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("master-0: create: defined domain {MASTER}")),
        "{stdout}"
    );
    assert!(
        lv.virsh(&["domiflist", MASTER])
            .contains("52:54:00:00:00:02")
    );
    let xml = lv.virsh(&["dumpxml", WORKER]);
    assert!(xml.contains("name='/iso/worker-0.iso'"), "{xml}");
    assert!(
        lv.virsh(&["vol-list", "okd"])
            .contains(&format!("{MASTER}.qcow2"))
    );

    let (code, stdout, _) = lv.nodes(&["create"], &cfg);
    assert_eq!(code, Some(0));
    assert!(
        stdout.ends_with("2 nodes: 0 changed, 2 unchanged, 0 failed\n"),
        "{stdout}"
    );

    let (code, stdout, stderr) = lv.nodes(&["start"], &cfg);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(lv.virsh(&["domstate", WORKER]).trim(), "running");
    let (code, stdout, _) = lv.nodes(&["list"], &cfg);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains(&format!(
            "domain {WORKER} at qemu:///system, running, cd /iso/worker-0.iso"
        )),
        "{stdout}"
    );

    // The firmware ignores ACPI (no OS booted): forced off after 3 s.
    let (code, stdout, stderr) = lv.nodes(&["stop"], &cfg);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("did not shut down within 3s: forced off"),
        "{stdout}"
    );
    assert_eq!(lv.virsh(&["domstate", MASTER]).trim(), "shut off");

    // The config now gives master-0 another MAC: its domain is not touched.
    let drifted = lv.config("52:54:00:00:00:99");
    let (code, _, stderr) = lv.nodes(&["start", "master-0"], &drifted);
    assert_eq!(code, Some(5), "{stderr}");
    assert!(stderr.contains("has MAC 52:54:00:00:00:02"), "{stderr}");
    assert_eq!(lv.virsh(&["domstate", MASTER]).trim(), "shut off");

    let (code, stdout, stderr) = lv.nodes(&["destroy", "--yes"], &cfg);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(lv.virsh(&["list", "--all", "--name"]).trim().is_empty());
    assert!(lv.virsh(&["vol-list", "okd"]).trim().is_empty());
    let (code, stdout, _) = lv.nodes(&["destroy", "--yes"], &cfg);
    assert_eq!(code, Some(0));
    assert!(
        stdout.ends_with("2 nodes: 0 changed, 2 unchanged, 0 failed\n"),
        "{stdout}"
    );
}

/// The issue's end-to-end path: `nodes create` + `start` for two nodes on the boot lab's
/// services bridge, whose libvirt domains then network-boot from the appliance (DHCP, iPXE
/// script, kernel and initramfs with the node's arguments, ignition fetched); the master
/// installs. `destroy` removes both domains and their volumes.
#[test]
fn libvirt_domains_network_boot_from_the_appliance() {
    use crate::boot_support::{BOOT_TIMEOUT, BootLab, MST0_IP, MST0_MAC, WRK0_IP, WRK0_MAC};
    use harness::initramfs::{InitramfsBuilder, Kernel};
    use harness::vm::{Firmware, VmSpec};

    let spec = VmSpec::new(Firmware::Bios, MST0_MAC, "unused");
    if !crate::boot_support::prerequisites(&[&spec])
        || !require_tools(&["libvirtd", "virtlogd", "virsh", "nsenter", "unshare"])
    {
        return;
    }
    let _slots = two_vm_slots();
    let lab = BootLab::start("lvbt", &InitramfsBuilder::new(&Kernel::find().unwrap()));
    let lv = Libvirtd::start(lab.topo.services());
    let config = lv.dir().join("nodes.yml");
    std::fs::write(
        &config,
        format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
  - {{ name: mst0, role: master, mac: "{MST0_MAC}", ip: {MST0_IP}, machine: {{ cores: 1, memory: 1GiB, disk: 10GiB }} }}
  - {{ name: wrk0, role: worker, mac: "{WRK0_MAC}", ip: {WRK0_IP}, machine: {{ cores: 1, memory: 1GiB, disk: 10GiB }} }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
control:
  provider: libvirt
  libvirt: {{ uri: "qemu:///system", bridge: br0, pool: okd, domain_type: qemu }}
  timeouts: {{ request: 60s, task: 60s, shutdown: 5s }}
"#
        ),
    )
    .unwrap();
    let (code, stdout, stderr) = lv.nodes(&["create"], &config);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let (code, stdout, stderr) = lv.nodes(&["start"], &config);
    assert_eq!(code, Some(0), "{stdout}{stderr}");

    for (node, ip, mac) in [("mst0", MST0_IP, MST0_MAC), ("wrk0", WRK0_IP, WRK0_MAC)] {
        let line = format!("{node}: ignition fetched by {ip}:");
        assert!(
            lab.wait_log(&line, BOOT_TIMEOUT),
            "{node}'s domain never fetched its ignition\n{}\n{}",
            lab.app.log_tails(),
            lv.virsh(&["list", "--all"])
        );
        lab.assert_log(&format!("{node}: dhcp ack {ip} to {mac}"));
    }
    // The master's install writes its disk, as CoreOS's installer would. Its role config is
    // fetched after its ignition, the rootfs and the disk check: waited for, not assumed done
    // by the time the worker fetched its ignition.
    assert!(
        lab.wait_log("mst0: master.ign fetched by 10.99.0.11:", BOOT_TIMEOUT),
        "{}",
        lab.app.log_tails()
    );
    assert!(
        lab.wait_log("mst0: installed", BOOT_TIMEOUT),
        "{}",
        lab.app.log_tails()
    );

    let (code, stdout, stderr) = lv.nodes(&["destroy", "--yes"], &config);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(lv.virsh(&["list", "--all", "--name"]).trim().is_empty());
    assert!(lv.virsh(&["vol-list", "okd"]).trim().is_empty());
    drop(lv);
}

/// Bare metal through Redfish virtual media, for real: sushy-emulator's libvirt driver (the
/// BMC) in front of a libvirt domain; `okd-appliance nodes create` with provider redfish inserts
/// the node's live ISO from the appliance (`/iso/<node>.iso`, which sushy downloads as a BMC
/// would) and sets a CD boot, `nodes start` powers it on, and the VM boots the ISO (sushy makes
/// the CD the only boot device, so no network boot can stand in) and fetches its ignition.
#[test]
fn redfish_virtual_media_boots_a_vm_from_its_node_iso() {
    use crate::boot_support::{BOOT_TIMEOUT, BootLab, WRK0_IP, WRK0_MAC};
    use harness::initramfs::{InitramfsBuilder, Kernel};
    use harness::liveiso::{self, LiveIsoBuilder};
    use harness::vm::{Firmware, VmSpec};

    let Some(venv) = std::env::var_os("OKD_SUSHY_LIBVIRT_VENV").map(PathBuf::from) else {
        let _ = harness::skip_or_fail(
            "sushy-emulator with the libvirt driver",
            "OKD_SUSHY_LIBVIRT_VENV is not set (tests/run.sh makes it)",
        );
        return;
    };
    let spec = VmSpec::new(Firmware::Bios, WRK0_MAC, "unused");
    if !crate::boot_support::prerequisites(&[&spec])
        || !require_tools(&[
            "libvirtd", "virtlogd", "virsh", "nsenter", "unshare", "openssl",
        ])
        || !require_tools(liveiso::TOOLS)
    {
        return;
    }
    let _slots = two_vm_slots();
    let mut libvirtd = None;
    let lab = BootLab::start_with(
        "rfvm",
        &InitramfsBuilder::new(&Kernel::find().unwrap()),
        |topo| {
            libvirtd = Some(Libvirtd::start(topo.services()));
            (
                format!(
                    r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ interface: br0, subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
  - {{ name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }}
  - {{ name: wrk0, role: worker, mac: "{WRK0_MAC}", ip: {WRK0_IP} }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts, install_dev: /dev/vda }}
listen: {{ dns: [], api: [], machine_config: [], ingress_https: [], ingress_http: [] }}
"#
                ),
                Vec::new(),
            )
        },
    );
    let lv = libvirtd.take().unwrap();
    let dir = lv.dir().to_owned();
    let artifacts = lab.dir().join("artifacts");
    LiveIsoBuilder::new(&artifacts.join("kernel"), &artifacts.join("initramfs.img"))
        .build(&dir.join("iso-work"), &artifacts.join("live.iso"))
        .expect("test live ISO");

    // The domain, made by the libvirt provider (a network-boot domain: the BMC changes that).
    let domains = dir.join("domains.yml");
    std::fs::write(
        &domains,
        format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
  - {{ name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }}
  - {{ name: wrk0, role: worker, mac: "{WRK0_MAC}", ip: {WRK0_IP}, machine: {{ cores: 1, memory: 1GiB, disk: 10GiB }} }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
control:
  provider: libvirt
  libvirt: {{ uri: "qemu:///system", bridge: br0, pool: okd, domain_type: qemu }}
  timeouts: {{ request: 60s, task: 60s, shutdown: 5s }}
"#
        ),
    )
    .unwrap();
    let (code, stdout, stderr) = lv.nodes(&["create", "wrk0"], &domains);
    assert_eq!(code, Some(0), "{stdout}{stderr}");

    // The BMC: sushy-emulator's libvirt driver, inside libvirtd's mount and network namespace,
    // over HTTPS with a password.
    let d = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    crate::support::self_signed(&dir, "bmc", "IP:127.0.0.1");
    let fp = Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-fingerprint",
            "-sha256",
            "-in",
            &d("bmc.pem"),
        ])
        .output()
        .unwrap();
    let fingerprint = String::from_utf8_lossy(&fp.stdout)
        .trim()
        .rsplit('=')
        .next()
        .unwrap()
        .to_owned();
    let python = venv.join("bin/python3");
    let hash = Command::new(&python)
        .args([
            "-c",
            "import bcrypt; print(bcrypt.hashpw(b'rf-pass-0123', bcrypt.gensalt(rounds=4)).decode())",
        ])
        .output()
        .unwrap();
    std::fs::write(
        d("htpasswd"),
        format!("admin:{}\n", String::from_utf8_lossy(&hash.stdout).trim()),
    )
    .unwrap();
    std::fs::write(
        d("sushy.conf"),
        format!(
            "SUSHY_EMULATOR_LIBVIRT_URI = 'qemu:///system'\nSUSHY_EMULATOR_STORAGE_POOL = 'okd'\nSUSHY_EMULATOR_AUTH_FILE = {:?}\n",
            d("htpasswd")
        ),
    )
    .unwrap();
    let secret = dir.join("bmc-password");
    std::fs::write(&secret, "rf-pass-0123\n").unwrap();
    set_mode(&secret, 0o600);
    let sushy = lab
        .topo
        .services()
        .spawn(
            "sushy-emulator (libvirt)",
            [
                "nsenter",
                &format!("--mount=/proc/{}/ns/mnt", lv.pid()),
                venv.join("bin/sushy-emulator").to_str().unwrap(),
                "--config",
                &d("sushy.conf"),
                "-i",
                "127.0.0.1",
                "-p",
                "8443",
                "--ssl-certificate",
                &d("bmc.pem"),
                "--ssl-key",
                &d("bmc.key"),
            ],
        )
        .unwrap();
    lab.topo
        .services()
        .wait_tcp("127.0.0.1:8443".parse().unwrap(), Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", sushy.log_tails()));

    // The node as bare metal behind that BMC, installed from its ISO.
    let metal = dir.join("metal.yml");
    std::fs::write(
        &metal,
        format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
  - {{ name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11, machine: {{ bmc: {{ url: "https://127.0.0.1:8443/redfish/v1/Systems/mst0" }} }} }}
  - {{ name: wrk0, role: worker, mac: "{WRK0_MAC}", ip: {WRK0_IP}, machine: {{ install: iso, bmc: {{ url: "https://127.0.0.1:8443/redfish/v1/Systems/wrk0.okd.lab.example.com" }} }} }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
control:
  provider: redfish
  redfish: {{ username: admin, password_file: bmc-password, fingerprint: "{fingerprint}" }}
  timeouts: {{ request: 60s, task: 60s, shutdown: 10s }}
"#
        ),
    )
    .unwrap();
    let nodes = |args: &[&str]| {
        let out = lab
            .topo
            .services()
            .exec([harness::appliance_bin().unwrap().to_str().unwrap(), "nodes"])
            .args(args)
            .arg(&metal)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (code, out) = nodes(&["create", "wrk0"]);
    assert_eq!(code, Some(0), "{out}\n{}", sushy.log_tails());
    assert!(
        out.contains("inserted http://10.99.0.1:8080/iso/wrk0.iso"),
        "{out}"
    );
    assert!(out.contains("boots once from Cd"), "{out}");
    let (code, out) = nodes(&["start", "wrk0"]);
    assert_eq!(code, Some(0), "{out}\n{}", sushy.log_tails());

    assert!(
        lab.wait_log(
            &format!("wrk0: ignition fetched by {WRK0_IP}:"),
            BOOT_TIMEOUT
        ),
        "the VM never fetched its ignition from the ISO boot\n{}\n{}\n{}",
        lab.app.log_tails(),
        sushy.log_tails(),
        lv.virsh(&["dumpxml", "wrk0.okd.lab.example.com"])
    );
    lab.assert_log("wrk0: live ISO read by ");
    assert!(
        !lab.log().contains("wrk0: ipxe script fetched"),
        "the VM booted from the network, not the ISO"
    );
    let (code, out) = nodes(&["destroy", "--yes", "wrk0"]);
    assert_eq!(code, Some(0), "{out}");
    let (code, stdout, stderr) = lv.nodes(&["destroy", "--yes", "wrk0"], &domains);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    drop(sushy);
    drop(lv);
}
