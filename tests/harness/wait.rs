//! Bounded waiting: poll a condition until it holds or a deadline passes (no unbounded loops),
//! and check whether a PID is still a live process.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

const FIRST_POLL: Duration = Duration::from_millis(5);
const MAX_POLL: Duration = Duration::from_millis(200);

/// Polls `cond` (backing off from 5 ms to 200 ms) until it returns true or `timeout` passes.
/// Returns whether it held. `cond` is always tried at least once and once more at the deadline.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut pause = FIRST_POLL;
    loop {
        if cond() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(MAX_POLL);
    }
}

/// Polls `f` until it yields a value, at most `timeout`; the error names `what`.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> Result<T> {
    let mut found = None;
    if wait_until(timeout, || {
        found = f();
        found.is_some()
    }) && let Some(v) = found
    {
        return Ok(v);
    }
    bail!("timed out after {timeout:?} waiting for {what}")
}

/// True when `pid` is a process that has not exited (a zombie counts as exited).
#[must_use]
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Format: `PID (COMM) STATE ...`; COMM may contain spaces and parentheses.
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}
