//! `Process`: a program started for a test (usually inside a namespace via `Netns::spawn`), in its
//! own process group, with stdout and stderr in files of a temporary directory. On drop it is
//! stopped (SIGTERM to the group, a bounded grace period, then SIGKILL) and reaped; when the test
//! is panicking or the program had failed on its own, the tail of both logs is printed so the
//! failing test keeps them. Set `OKD_E2E_KEEP_LOGS=1` to keep the log directory.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::wait::wait_until;

/// Default time between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// Lines of each log printed on failure.
const TAIL_LINES: usize = 40;

/// A running program owned by the test.
#[derive(Debug)]
pub struct Process {
    label: String,
    child: Child,
    status: Option<ExitStatus>,
    stopped_by_us: bool,
    grace: Duration,
    stdout: PathBuf,
    stderr: PathBuf,
    // Last: the files must outlive the tail printing in `drop`.
    dir: Option<tempfile::TempDir>,
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path).map_or_else(
        |e| format!("<cannot read: {e}>"),
        |b| String::from_utf8_lossy(&b).into_owned(),
    );
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Process {
    /// Spawns `cmd` (stdin closed, stdout/stderr to log files, own process group). `label` names
    /// the process in messages and its log directory.
    pub fn spawn(label: &str, mut cmd: Command) -> Result<Process> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("okd-e2e-{label}-"))
            .tempdir()
            .context("cannot create a log directory")?;
        let stdout = dir.path().join("stdout.log");
        let stderr = dir.path().join("stderr.log");
        cmd.stdin(Stdio::null())
            .stdout(File::create(&stdout).context("cannot create stdout.log")?)
            .stderr(File::create(&stderr).context("cannot create stderr.log")?)
            .process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot spawn {label}: {cmd:?}"))?;
        Ok(Process {
            label: label.to_owned(),
            child,
            status: None,
            stopped_by_us: false,
            grace: DEFAULT_GRACE,
            stdout,
            stderr,
            dir: Some(dir),
        })
    }

    /// Sets the time between SIGTERM and SIGKILL when stopping (default 5 s).
    #[must_use]
    pub fn with_grace(mut self, grace: Duration) -> Process {
        self.grace = grace;
        self
    }

    /// The process's PID (also its process group id).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The label given at spawn.
    #[must_use]
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Path of the stdout log.
    #[must_use]
    pub fn stdout_path(&self) -> &Path {
        &self.stdout
    }

    /// Path of the stderr log.
    #[must_use]
    pub fn stderr_path(&self) -> &Path {
        &self.stderr
    }

    /// Everything written to stdout so far (lossy UTF-8).
    #[must_use]
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stdout).unwrap_or_default()).into_owned()
    }

    /// Everything written to stderr so far (lossy UTF-8).
    #[must_use]
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stderr).unwrap_or_default()).into_owned()
    }

    /// The exit status if the process has exited (reaping it), without blocking. Before the
    /// exited process is reaped, what is left of its process group gets SIGKILL: only while
    /// the zombie holds its PID is the group's id sure to be this group's (see
    /// [`Process::signal_group`]).
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if self.status.is_none() {
            if self.exited_unreaped() {
                self.signal_group(Signal::SIGKILL);
            }
            self.status = self.child.try_wait().context("waitpid")?;
        }
        Ok(self.status)
    }

    /// Whether the process has exited, without reaping it (`waitid` with `WNOWAIT`).
    fn exited_unreaped(&self) -> bool {
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
        let Ok(pid) = i32::try_from(self.child.id()) else {
            return false;
        };
        matches!(
            waitid(
                Id::Pid(Pid::from_raw(pid)),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
            ),
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
        )
    }

    /// Waits at most `timeout` for the process to exit.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let mut err = None;
        wait_until(timeout, || match self.try_wait() {
            Ok(s) => s.is_some(),
            Err(e) => {
                err = Some(e);
                true
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok(self.status),
        }
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.try_wait(), Ok(None))
    }

    /// Fails (with the log tails in the message) if the process has already exited: for checking
    /// that a server is still up.
    pub fn assert_running(&mut self) -> Result<()> {
        if let Some(status) = self.try_wait()? {
            bail!(
                "{} exited early ({status})\n{}",
                self.label,
                self.log_tails()
            );
        }
        Ok(())
    }

    /// Signals the process group, only while its leader is not reaped: once it is, the
    /// kernel may give its PID, and so the group id, to a new process (every `Process` leads
    /// a group of its own), and a signal would hit another test's server. That happened: a
    /// load-balancer test's backend closed its connection early, killed by another test's
    /// clean-up of a process that had long exited.
    fn signal_group(&self, sig: Signal) {
        if self.status.is_some() {
            return;
        }
        if let Ok(pgid) = i32::try_from(self.child.id()) {
            // ESRCH (group already gone) is fine.
            let _ = killpg(Pid::from_raw(pgid), sig);
        }
    }

    /// Stops the process: SIGTERM to its process group, up to the grace period, then SIGKILL;
    /// reaps it and returns its exit status. Stray group members get SIGKILL too.
    pub fn stop(&mut self) -> Result<ExitStatus> {
        // `try_wait` kills the group's strays before it reaps the leader.
        if let Some(status) = self.try_wait()? {
            return Ok(status);
        }
        self.stopped_by_us = true;
        self.signal_group(Signal::SIGTERM);
        if let Some(status) = self.wait_timeout(self.grace)? {
            return Ok(status);
        }
        self.signal_group(Signal::SIGKILL);
        match self.wait_timeout(Duration::from_secs(10))? {
            Some(status) => Ok(status),
            None => bail!(
                "{} (pid {}) survived SIGKILL for 10 s",
                self.label,
                self.pid()
            ),
        }
    }

    /// The last lines of stdout and stderr, with their paths, as one string.
    #[must_use]
    pub fn log_tails(&self) -> String {
        format!(
            "---- {} stdout ({}), last {TAIL_LINES} lines ----\n{}\n---- {} stderr ({}), last \
             {TAIL_LINES} lines ----\n{}\n---- end of {} logs ----",
            self.label,
            self.stdout.display(),
            tail(&self.stdout, TAIL_LINES),
            self.label,
            self.stderr.display(),
            tail(&self.stderr, TAIL_LINES),
            self.label,
        )
    }

    /// Prints [`Process::log_tails`] to stderr (captured by libtest, shown when the test fails).
    pub fn print_logs(&self) {
        eprintln!("{}", self.log_tails());
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let stopped = self.stop();
        let failed_on_its_own = !self.stopped_by_us && matches!(&stopped, Ok(s) if !s.success());
        if let Err(e) = &stopped {
            let _ = writeln!(
                std::io::stderr(),
                "harness: cannot stop {}: {e:#}",
                self.label
            );
        }
        if std::thread::panicking() || failed_on_its_own || stopped.is_err() {
            let how = match &stopped {
                Ok(s) if self.stopped_by_us => format!("was stopped by the harness ({s})"),
                Ok(s) => format!("had exited on its own ({s})"),
                Err(_) => "could not be stopped".to_owned(),
            };
            eprintln!("harness: process {} (pid {}) {how}", self.label, self.pid());
            self.print_logs();
        }
        if std::env::var_os("OKD_E2E_KEEP_LOGS").is_some_and(|v| v == "1")
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            eprintln!("harness: kept logs of {} in {}", self.label, kept.display());
        }
    }
}
