//! `okd-appliance nodes` with provider redfish against sushy-emulator (PyPI sushy-tools) with
//! its fake driver, over HTTPS with Basic authentication, on loopback: the node's system found
//! by its MAC, a one-time network boot for a PXE node, the node's ISO inserted as virtual media
//! (sushy downloads it from a local HTTP server, as a BMC would from the appliance) with a
//! one-time CD boot, power on and graceful off (the fake BMC applies power changes 1-11 s
//! later, like real hardware), and the error paths: a wrong password (401, exit 4), a pinned
//! fingerprint that does not match (exit 4), a MAC no system has (exit 5, nothing changed), a
//! system that does not exist (404, exit 3) and a BMC that never answers (bounded, exit 6).
//!
//! sushy-emulator comes from `$OKD_SUSHY_EMULATOR` or `PATH` (tests/run.sh installs it in a
//! venv); without it the tests skip loudly, and fail with CI=true.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use harness::{Process, require_tool, require_tools};

use crate::support::run_ok;

const MASTER_MAC: &str = "52:54:00:00:00:02";
const WORKER_MAC: &str = "52:54:00:00:00:05";
const PASSWORD: &str = "b4rem3tal-pw";

fn sushy() -> Option<PathBuf> {
    let tool = std::env::var("OKD_SUSHY_EMULATOR").unwrap_or_else(|_| "sushy-emulator".into());
    if !require_tool(&tool) || !require_tools(&["openssl", "python3"]) {
        return None;
    }
    harness::which(&tool)
}

/// A port for a server this test starts on 127.0.0.1, free when asked. Taken below the kernel's
/// ephemeral range (32768-60999 by default), from a counter of this test process, so that
/// neither an outgoing connection's local port nor another test's server can take it between
/// this check and the server's bind (a port from `bind(0)`, released, could be).
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 100) as u16 * 100;
    for _ in 0..1000 {
        let port = base + NEXT.fetch_add(1, Ordering::Relaxed) % 1000;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {base}..{}", base + 1000);
}

fn wait_tcp(addr: SocketAddr, p: &Process) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{} never listened on {addr}:\n{}", p.label(), p.log_tails());
}

/// A sushy-emulator with two fake systems (the nodes' MACs), HTTPS and a bcrypt auth file,
/// and an HTTP server for the node ISOs.
struct Bmc {
    dir: tempfile::TempDir,
    url: String,
    fingerprint: String,
    iso_base: String,
    port: u16,
    _sushy: Process,
    _iso: Process,
}

impl Bmc {
    fn start(emulator: &Path) -> Bmc {
        let dir = tempfile::tempdir().unwrap();
        let d = |f: &str| dir.path().join(f).to_str().unwrap().to_owned();
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
                "/CN=bmc.test",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-keyout",
                &d("bmc.key"),
                "-out",
                &d("bmc.pem"),
            ],
        );
        let out = Command::new("openssl")
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
        let fingerprint = String::from_utf8_lossy(&out.stdout)
            .trim()
            .rsplit('=')
            .next()
            .unwrap()
            .to_owned();
        // sushy's auth file takes bcrypt digests only (the venv that has sushy has bcrypt); it
        // checks one on every request, so the digest is made cheap (cost 4, not 12: ~0.4 s a
        // request here otherwise).
        let python = emulator.with_file_name("python3");
        let python = if python.exists() {
            python
        } else {
            PathBuf::from("python3")
        };
        let out = Command::new(&python)
            .args([
                "-c",
                &format!(
                    "import bcrypt; print(bcrypt.hashpw(b'{PASSWORD}', bcrypt.gensalt(rounds=4)).decode())"
                ),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bcrypt: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(
            d("htpasswd"),
            format!("admin:{}\n", String::from_utf8_lossy(&out.stdout).trim()),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("state")).unwrap();
        std::fs::write(
            d("sushy.conf"),
            format!(
                r#"SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_AUTH_FILE = {auth:?}
SUSHY_EMULATOR_STATE_DIR = {state:?}
SUSHY_EMULATOR_FAKE_SYSTEMS = [
    {{"uuid": "11111111-0000-4000-8000-000000000002", "name": "master-0", "power_state": "Off",
      "nics": [{{"mac": "{MASTER_MAC}", "ip": "10.0.0.2"}}]}},
    {{"uuid": "11111111-0000-4000-8000-000000000005", "name": "worker-0", "power_state": "Off",
      "nics": [{{"mac": "{WORKER_MAC}", "ip": "10.0.0.5"}}]}},
]
"#,
                auth = d("htpasswd"),
                state = d("state"),
            ),
        )
        .unwrap();
        let port = free_port();
        let mut cmd = Command::new(emulator);
        cmd.args([
            "--config",
            &d("sushy.conf"),
            "-i",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--ssl-certificate",
            &d("bmc.pem"),
            "--ssl-key",
            &d("bmc.key"),
        ]);
        let sushy = Process::spawn("sushy-emulator", cmd).unwrap();
        wait_tcp(SocketAddr::from(([127, 0, 0, 1], port)), &sushy);

        std::fs::create_dir_all(dir.path().join("www/iso")).unwrap();
        std::fs::write(
            dir.path().join("www/iso/worker-0.iso"),
            vec![0x42u8; 64 * 1024],
        )
        .unwrap();
        let iso_port = free_port();
        let mut cmd = Command::new("python3");
        cmd.args([
            "-m",
            "http.server",
            "-b",
            "127.0.0.1",
            "-d",
            &d("www"),
            &iso_port.to_string(),
        ]);
        let iso = Process::spawn("iso http server", cmd).unwrap();
        wait_tcp(SocketAddr::from(([127, 0, 0, 1], iso_port)), &iso);

        let secret = dir.path().join("bmc-password");
        std::fs::write(&secret, format!("{PASSWORD}\n")).unwrap();
        set_mode(&secret, 0o600);
        Bmc {
            url: format!("https://127.0.0.1:{port}"),
            port,
            fingerprint,
            iso_base: format!("http://127.0.0.1:{iso_port}"),
            dir,
            _sushy: sushy,
            _iso: iso,
        }
    }

    /// A cluster config whose two nodes' BMC is this emulator; `bmc` is the YAML of the
    /// master's `bmc:` settings (the worker's is the plain emulator URL).
    fn config(&self, master_bmc: &str, timeouts: &str) -> PathBuf {
        let path = self.dir.path().join("okd.yml");
        std::fs::write(
            &path,
            format!(
                r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }}
nodes:
  - {{ name: master-0, role: master, mac: "{MASTER_MAC}", ip: 10.0.0.2, machine: {{ bmc: {master_bmc} }} }}
  - {{ name: worker-0, role: worker, mac: "{WORKER_MAC}", ip: 10.0.0.5, machine: {{ install: iso, bmc: {{ url: "{url}" }} }} }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts, base_url: "{iso}" }}
control:
  provider: redfish
  redfish: {{ username: admin, password_file: bmc-password, fingerprint: "{fp}" }}
  timeouts: {timeouts}
"#,
                url = self.url,
                iso = self.iso_base,
                fp = self.fingerprint,
            ),
        )
        .unwrap();
        path
    }

    /// The fake system of `name`, as the BMC shows it.
    fn system(&self, name: &str) -> serde_json::Value {
        let id = match name {
            "master-0" => "11111111-0000-4000-8000-000000000002",
            _ => "11111111-0000-4000-8000-000000000005",
        };
        let out = Command::new("curl")
            .args([
                "-sk",
                "-u",
                &format!("admin:{PASSWORD}"),
                &format!("{}/redfish/v1/Systems/{id}", self.url),
            ])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn nodes(args: &[&str], config: &Path) -> (Option<i32>, String, String) {
    let bin = harness::appliance_bin().unwrap();
    let out: Output = Command::new(bin)
        .arg("nodes")
        .args(args)
        .arg(config)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const TIMEOUTS: &str = "{ request: 10s, task: 30s, shutdown: 20s }";

#[test]
fn redfish_prepares_boots_and_stops_bare_metal_through_sushy() {
    let Some(emulator) = sushy() else { return };
    if !require_tool("curl") {
        return;
    }
    let bmc = Bmc::start(&emulator);
    let cfg = bmc.config(&format!("{{ url: \"{}\" }}", bmc.url), TIMEOUTS);

    let (code, stdout, stderr) = nodes(&["create"], &cfg);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "master-0: create: system /redfish/v1/Systems/11111111-0000-4000-8000-000000000002"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("boots once from Pxe"), "{stdout}");
    let iso = format!("{}/iso/worker-0.iso", bmc.iso_base);
    assert!(stdout.contains(&format!("inserted {iso}")), "{stdout}");
    assert!(stdout.contains("boots once from Cd"), "{stdout}");
    let worker = bmc.system("worker-0");
    assert_eq!(worker["Boot"]["BootSourceOverrideTarget"], "Cd", "{worker}");
    // Sent as `Once`; sushy keeps overrides as `Continuous`, so the test does not depend on it.
    assert_ne!(
        worker["Boot"]["BootSourceOverrideEnabled"], "Disabled",
        "{worker}"
    );
    assert_eq!(
        bmc.system("master-0")["Boot"]["BootSourceOverrideTarget"],
        "Pxe"
    );

    let (code, stdout, _) = nodes(&["create"], &cfg);
    assert_eq!(code, Some(0));
    assert!(
        stdout.ends_with("2 nodes: 0 changed, 2 unchanged, 0 failed\n"),
        "{stdout}"
    );

    let (code, stdout, stderr) = nodes(&["start"], &cfg);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("master-0: start: powered on"), "{stdout}");
    assert_eq!(bmc.system("worker-0")["PowerState"], "On");

    let (code, stdout, _) = nodes(&["list"], &cfg);
    assert_eq!(code, Some(0));
    assert!(stdout.contains(&format!("running, cd {iso}")), "{stdout}");

    let (code, stdout, stderr) = nodes(&["stop"], &cfg);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("master-0: stop: shut down"), "{stdout}");
    assert_eq!(bmc.system("master-0")["PowerState"], "Off");

    let (code, stdout, stderr) = nodes(&["destroy", "--yes"], &cfg);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("worker-0: destroy:") && stdout.contains("ejected"),
        "{stdout}"
    );
    assert!(stdout.contains("(bare metal stays)"), "{stdout}");
}

#[test]
fn redfish_error_paths_exit_with_what_failed() {
    let Some(emulator) = sushy() else { return };
    let bmc = Bmc::start(&emulator);

    // A wrong password: 401, exit 4, the password never shown.
    let wrong = bmc.dir.path().join("wrong-password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    set_mode(&wrong, 0o600);
    let cfg = bmc.config(
        &format!("{{ url: \"{}\", password_file: wrong-password }}", bmc.url),
        TIMEOUTS,
    );
    let (code, stdout, stderr) = nodes(&["start", "master-0"], &cfg);
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    assert!(stderr.contains("refused the user admin (401"), "{stderr}");
    assert!(!stderr.contains("not-the-password") && !stdout.contains("not-the-password"));

    // A pinned fingerprint that is not the BMC's: TLS refused, exit 4.
    let cfg = bmc.config(
        &format!(
            "{{ url: \"{}\", fingerprint: \"{}\" }}",
            bmc.url,
            ["00"; 32].join(":")
        ),
        TIMEOUTS,
    );
    let (code, _, stderr) = nodes(&["start", "master-0"], &cfg);
    assert_eq!(code, Some(4), "{stderr}");
    assert!(stderr.contains("but the config pins"), "{stderr}");

    // A system that does not exist: 404, exit 3.
    let cfg = bmc.config(
        &format!(
            "{{ url: \"{}/redfish/v1/Systems/no-such-system\" }}",
            bmc.url
        ),
        TIMEOUTS,
    );
    let (code, _, stderr) = nodes(&["start", "master-0"], &cfg);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("answered 404"), "{stderr}");

    // The master's system named explicitly for the worker: its MAC is not there, exit 5.
    let cfg = bmc.config(
        &format!(
            "{{ url: \"{}/redfish/v1/Systems/11111111-0000-4000-8000-000000000005\" }}",
            bmc.url
        ),
        TIMEOUTS,
    );
    let (code, _, stderr) = nodes(&["start", "master-0"], &cfg);
    assert_eq!(code, Some(5), "{stderr}");
    assert!(stderr.contains("has the MAC 52:54:00:00:00:02"), "{stderr}");
    assert_eq!(bmc.system("worker-0")["PowerState"], "Off");

    // A BMC that accepts connections and never answers: bounded by the request timeout.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = bmc.config(
        &format!("{{ url: \"https://{}\" }}", silent.local_addr().unwrap()),
        "{ request: 2s, task: 30s, shutdown: 20s }",
    );
    let started = Instant::now();
    let (code, _, stderr) = nodes(&["start", "master-0"], &cfg);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(code, Some(6), "{stderr}");
    assert!(stderr.contains("within 2s"), "{stderr}");
    drop(silent);
}

/// A BMC that offers sessions (redfish_sessions.py in front of sushy): every action opens one
/// (Basic is refused there), uses its `X-Auth-Token`, and closes it, so none is left open; a
/// full BMC (no session slot free) refuses the session and the client stays with Basic, which
/// that BMC refuses: exit 4 with what the BMC said; a wrong password is refused at the login.
#[test]
fn redfish_uses_a_session_where_the_bmc_offers_one_and_closes_it() {
    let Some(emulator) = sushy() else { return };
    let bmc = Bmc::start(&emulator);
    let d = |f: &str| bmc.dir.path().join(f).to_str().unwrap().to_owned();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/redfish_sessions.py");
    let front = |max: &str, state: &str| {
        let port = free_port();
        let mut cmd = Command::new("python3");
        cmd.args([
            script.to_str().unwrap(),
            &port.to_string(),
            &d("bmc.pem"),
            &d("bmc.key"),
            &format!("https://127.0.0.1:{}", bmc.port),
            "admin",
            PASSWORD,
            &d(state),
            max,
        ]);
        let p = Process::spawn("redfish sessions", cmd).unwrap();
        wait_tcp(SocketAddr::from(([127, 0, 0, 1], port)), &p);
        (p, format!("https://127.0.0.1:{port}"))
    };
    let counts = |state: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(d(state)).unwrap()).unwrap()
    };

    let (_front, url) = front("4", "sessions.json");
    let cfg = bmc.config(&format!("{{ url: \"{url}\" }}"), TIMEOUTS);
    let (code, stdout, stderr) = nodes(&["start", "master-0"], &cfg);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("master-0: start: powered on"), "{stdout}");
    let (code, stdout, stderr) = nodes(&["list", "master-0"], &cfg);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("running"), "{stdout}");
    let c = counts("sessions.json");
    assert_eq!((&c["opened"], &c["open"]), (&2.into(), &0.into()), "{c}");
    assert_eq!(c["refused_basic"], 0, "{c}");

    // Wrong password: refused at the login, exit 4, the password never shown.
    let wrong = bmc.dir.path().join("wrong-password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    set_mode(&wrong, 0o600);
    let cfg = bmc.config(
        &format!("{{ url: \"{url}\", password_file: wrong-password }}"),
        TIMEOUTS,
    );
    let (code, stdout, stderr) = nodes(&["start", "master-0"], &cfg);
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    assert!(
        stderr.contains("refused a session for the user admin (401)"),
        "{stderr}"
    );
    assert!(!stderr.contains("not-the-password") && !stdout.contains("not-the-password"));

    // No session slot free: Basic instead, which this BMC refuses.
    let (_full, url) = front("0", "full.json");
    let cfg = bmc.config(&format!("{{ url: \"{url}\" }}"), TIMEOUTS);
    let (code, stdout, stderr) = nodes(&["start", "master-0"], &cfg);
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    assert!(stderr.contains("a session token is required"), "{stderr}");
    assert!(counts("full.json")["refused_basic"].as_u64().unwrap() >= 1);
}
