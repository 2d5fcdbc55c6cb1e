//! Running `ip` (iproute2) and other short helper commands, with their stderr in the error.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{Context as _, Result, bail};

/// Absolute path of the `ip` binary (PATH first, then the usual sbin directories), or `None`.
pub(crate) fn ip_path() -> Option<&'static Path> {
    static IP: OnceLock<Option<PathBuf>> = OnceLock::new();
    IP.get_or_init(|| {
        crate::prereq::which("ip").or_else(|| {
            ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
    })
    .as_deref()
}

/// A `Command` for `ip` (falls back to the bare name so the error names it).
pub(crate) fn ip_command() -> Command {
    Command::new(ip_path().unwrap_or_else(|| Path::new("ip")))
}

/// Runs `ip ARGS...`, returns its stdout; fails with the command line and stderr otherwise.
pub(crate) fn ip<I, S>(args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = ip_command();
    cmd.args(args);
    run(&mut cmd)
}

/// Runs a short command to completion (stdin closed), returns stdout or an error with stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
