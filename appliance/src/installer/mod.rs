//! The appliance drives openshift-install: `installer fetch` gets a release's binary,
//! `ignition create` makes the ignition set from the config, and `cluster up` makes it again
//! when it is missing or expired and no node has used it yet.
//!
//! - [`release`]: where an OKD release publishes its installer and checksums, and the fetch
//!   into `openshift-install/<release>/` beside the config (verified against the release's
//!   `sha256sum.txt`, through the same `.part`-and-rename path as the CoreOS files,
//!   `artifacts::Fetcher::fetch_checked`);
//! - [`create`]: `ignition create`, one step after the other in a work directory beside
//!   `install.ignition_dir`, then one rename that puts the new set in place;
//! - [`fresh`]: pure: whether a set can be used, must be made, or must not be replaced (a node
//!   fetched its ignition from it).
//!
//! Architecture invariant: the installer is run only by the CLI (the person who owns the
//! ignition directory), never by `serve`, whose sandbox reads the ignition directory only, and
//! only from a file no other account can replace ([`trusted`]): not from the state directory,
//! which belongs to the service's account. What the installer did is told to a running
//! appliance through its admin socket (`ignition ok|failed TEXT`), which journals it as
//! `IgnitionMade`. No library module imports this one: `appliance/tests/tidy.rs`'s map test
//! would show the arrow.

pub mod create;
pub mod fresh;
pub mod release;

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::config::Installer;

/// The installer binary `installer` names: the configured path, or where `installer fetch`
/// puts the release's, beside the config (`config_dir`, the folder of the file the command was
/// given).
pub fn binary(installer: &Installer, config_dir: &Path) -> PathBuf {
    match installer {
        Installer::Path(path) => path.clone(),
        Installer::Release { version, .. } => {
            release::dir(config_dir, version).join(release::BINARY)
        }
    }
}

/// Whether `path` may be run as this user: it and every directory above it are owned by root
/// or by this user and writable by nobody else (a sticky directory such as /tmp excepted), as
/// ssh's StrictModes asks of a key. Otherwise another account could put its own program there,
/// and the operator (often root) would run it with the pull secret at hand.
pub fn trusted(path: &Path) -> Result<(), String> {
    let me = nix::unistd::geteuid().as_raw();
    let real = std::fs::canonicalize(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{} does not exist", path.display()),
        _ => format!("{}: {e}", path.display()),
    })?;
    let mut at = Some(real.as_path());
    while let Some(p) = at {
        let m = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let sticky_dir = m.is_dir() && m.mode() & 0o1000 != 0;
        let why = if m.uid() != 0 && m.uid() != me {
            Some(format!("owned by uid {}", m.uid()))
        } else if m.mode() & 0o022 != 0 && !sticky_dir {
            Some("writable by its group or others".to_owned())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(format!(
                "{} can't be trusted: {} is {why}, so another account could replace the installer; it must be owned by root or you and writable by no one else",
                path.display(),
                p.display()
            ));
        }
        at = p.parent();
    }
    Ok(())
}
