//! Running `okd-appliance serve` as a child process in tests: its log lines on a channel,
//! signals, a bounded wait for exit, and a kill on drop; a config that serves only on loopback.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A running `serve` whose log lines arrive on a channel; killed on drop.
pub struct Serve {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Serve {
    pub fn start(config: &Path) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_okd-appliance"))
            .arg("serve")
            .arg(config)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Serve {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Starts `serve` on `config` and waits until it is ready: the boot server's address.
    #[allow(dead_code, reason = "not every test binary serves HTTP")]
    pub fn start_http(config: &Path) -> (Serve, SocketAddr) {
        let mut serve = Serve::start(config);
        let line = serve.expect_line("listening for http/tcp on ");
        let addr = line
            .rsplit(' ')
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        serve.expect_line("ready");
        (serve, addr)
    }

    /// Waits (bounded) for a log line containing `needle`.
    pub fn expect_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    panic!(
                        "no log line containing {needle:?}; log so far:\n{}",
                        self.seen.join("\n")
                    )
                }
            }
        }
    }

    #[allow(dead_code, reason = "not every test binary sends signals")]
    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    #[allow(dead_code, reason = "not every test binary waits for an exit")]
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("serve did not exit; log:\n{}", self.seen.join("\n"));
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `dir/okd.yml`: a bootstrap and a master, DNS and the boot server on ephemeral 127.0.0.1
/// ports, nothing else listening; `dir/install_dir` with the three role ignitions.
#[allow(dead_code, reason = "not every test binary serves")]
pub fn loopback_config(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("install_dir")).unwrap();
    for role in ["bootstrap", "master", "worker"] {
        std::fs::write(
            dir.join(format!("install_dir/{role}.ign")),
            r#"{"ignition":{"version":"3.2.0"}}"#,
        )
        .unwrap();
    }
    let path = dir.join("okd.yml");
    std::fs::write(
        &path,
        r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }
nodes:
  - { name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.0.0.7 }
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
state_dir: ./state
listen:
  dns: ["127.0.0.1:0"]
  dhcp: []
  tftp: []
  http: ["127.0.0.1:0"]
  # Off: the checks would probe the nodes' 10.0.0.x addresses.
  api: []
  machine_config: []
  ingress_https: []
  ingress_http: []
"#,
    )
    .unwrap();
    path
}
