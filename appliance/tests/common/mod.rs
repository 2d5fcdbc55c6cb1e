//! Running `okd-appliance serve` as a child process in tests: its log lines on a channel,
//! signals, a bounded wait for exit, and a kill on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
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
