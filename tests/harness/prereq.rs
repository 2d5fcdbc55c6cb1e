//! Prerequisites of privileged or tool-dependent tests, with loud skips outside CI and hard
//! failures in CI.
//!
//! A test calls `if !require_root() { return; }` first. When the prerequisite is missing:
//! - outside CI it writes `SKIPPED <test>: needs ... (why)` straight to the process's stderr
//!   (not through the test harness's output capture, so it shows even for passing tests), also
//!   appends that line to the file named by `OKD_E2E_SKIPPED_FILE` when set, and returns `false`;
//! - when the environment variable `CI` is `true` (or `1`) it panics: in CI nothing is skipped.

use std::env;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// True when the environment variable `CI` is `true` or `1` (case-insensitive).
#[must_use]
pub fn in_ci() -> bool {
    env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Finds an executable named `tool` in `PATH` (or checks it directly when it contains a `/`).
#[must_use]
pub fn which(tool: &str) -> Option<PathBuf> {
    fn executable(p: &Path) -> bool {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    if tool.contains('/') {
        let p = PathBuf::from(tool);
        return executable(&p).then_some(p);
    }
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| executable(p))
}

/// The running test's name: libtest names each test's thread after the test.
fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .map_or_else(|| "<test>".to_owned(), str::to_owned)
}

/// Requires root and a working iproute2 with `ip netns`. Returns `false` when the test must
/// return early (outside CI); panics in CI.
#[must_use = "return from the test when this is false"]
pub fn require_root() -> bool {
    static PROBLEM: OnceLock<Option<String>> = OnceLock::new();
    let problem = PROBLEM.get_or_init(|| {
        if !nix::unistd::geteuid().is_root() {
            return Some("not root".to_owned());
        }
        if crate::cmd::ip_path().is_none() {
            return Some("`ip` not found".to_owned());
        }
        match crate::cmd::ip(["netns", "list"]) {
            Ok(_) => None,
            Err(e) => Some(format!("`ip netns list` fails: {e:#}")),
        }
    });
    match problem {
        None => true,
        Some(why) => skip_or_fail("root and iproute2", why),
    }
}

/// Requires the executable `tool` in `PATH` (same skip/fail rules as [`require_root`]).
#[must_use = "return from the test when this is false"]
pub fn require_tool(tool: &str) -> bool {
    if which(tool).is_some() {
        true
    } else {
        skip_or_fail(&format!("`{tool}`"), "not found in PATH")
    }
}

/// Requires every tool in `tools`; reports all the missing ones at once.
#[must_use = "return from the test when this is false"]
pub fn require_tools(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| which(t).is_none())
        .collect();
    if missing.is_empty() {
        true
    } else {
        skip_or_fail(&format!("`{}`", missing.join("`, `")), "not found in PATH")
    }
}

/// Requires that `path` exists (for example `/dev/net/tun` or an iPXE ROM).
#[must_use = "return from the test when this is false"]
pub fn require_path(path: impl AsRef<Path>) -> bool {
    let path = path.as_ref();
    if path.exists() {
        true
    } else {
        skip_or_fail(&path.display().to_string(), "does not exist")
    }
}

/// What happens to a test whose prerequisite is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Outside CI: print this `SKIPPED ...` line and return early.
    Skip(String),
    /// In CI: panic with this message.
    Fail(String),
}

/// Decides the [`Outcome`] for test `test` missing `need` (because `why`); pure, for testing.
#[must_use]
pub fn outcome(ci: bool, test: &str, need: &str, why: &str) -> Outcome {
    if ci {
        Outcome::Fail(format!(
            "{test}: needs {need} ({why}); CI=true, so this is a failure, not a skip"
        ))
    } else {
        Outcome::Skip(format!("SKIPPED {test}: needs {need} ({why})"))
    }
}

/// Reports a missing prerequisite `need` (because `why`) for the current test: panics in CI,
/// otherwise prints the SKIPPED line and returns `false`.
#[must_use = "return from the test when this is false"]
pub fn skip_or_fail(need: &str, why: &str) -> bool {
    match outcome(in_ci(), &test_name(), need, why) {
        Outcome::Fail(msg) => panic!("{msg}"),
        Outcome::Skip(line) => {
            // Straight to fd 2: libtest captures `eprintln!` of passing tests; a skip must show.
            let _ = writeln!(std::io::stderr(), "{line}");
            if let Some(file) = env::var_os("OKD_E2E_SKIPPED_FILE")
                && let Ok(mut f) = OpenOptions::new().create(true).append(true).open(file)
            {
                let _ = writeln!(f, "{line}");
            }
            false
        }
    }
}
