//! The appliance drives openshift-install: `installer fetch` gets a release's binary,
//! `ignition create` makes the ignition set from the config, and `cluster up` makes it again
//! when it is missing or expired and no node has used it yet.
//!
//! - [`release`]: where an OKD release publishes its installer and checksums, and the fetch
//!   into `<state_dir>/installer/<release>/` (verified against the release's `sha256sum.txt`);
//! - [`create`]: `ignition create`, one step after the other in a work directory beside
//!   `install.ignition_dir`, then one rename that puts the new set in place;
//! - [`fresh`]: pure: whether a set can be used, must be made, or must not be replaced (a node
//!   fetched its ignition from it).
//!
//! Architecture invariant: the installer is run only by the CLI (the person who owns the
//! ignition directory), never by `serve`, whose sandbox reads the ignition directory only.
//! What the installer did is told to a running appliance through its admin socket, which
//! journals it.

pub mod create;
pub mod fresh;
pub mod release;

use std::path::{Path, PathBuf};

use crate::config::Installer;

/// The installer binary `installer` names: the configured path, or where `installer fetch`
/// puts the release's (in the appliance's `state_dir`).
pub fn binary(installer: &Installer, state_dir: &Path) -> PathBuf {
    match installer {
        Installer::Path(path) => path.clone(),
        Installer::Release { version, .. } => {
            release::dir(state_dir, version).join(release::BINARY)
        }
    }
}
