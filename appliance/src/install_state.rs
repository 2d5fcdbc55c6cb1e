//! Where each node is in its install, as marker files under `<state_dir>`:
//!
//! - `ignition-fetched/<node>`: the live installer fetched the node's ignition (the install
//!   started; the disk may or may not have been written);
//! - `disk-boot-offered/<node>`: since then, a script told the node to try its disk;
//! - `installed/<node>`: the node's installed system fetched its role config (the merge source
//!   of its ignition), which only Ignition on the installed system's first boot does.
//!
//! Only the last one makes a node installed: a failed install (a wrong `install_dev`) fetches
//! its ignition and then never boots an installed system, and marking it installed at that
//! point sent it to a blank disk at every boot. `okd-appliance node reinstall NAME` removes all
//! three.
//!
//! Every marker is written and removed durably (`durable`: temporary file, fsync, rename, fsync
//! of the directory), so a power cut never loses an install that was recorded.
//!
//! Architecture invariant: files only, plain `std::fs` (callers on the async runtime run these
//! on its blocking pool); the HTTP service reads the phase per script request (up to three
//! `stat`s), so the CLI can change it while `serve` runs without any admin channel.

use std::io;
use std::path::{Path, PathBuf};

const IGNITION_FETCHED: &str = "ignition-fetched";
const DISK_BOOT_OFFERED: &str = "disk-boot-offered";
const INSTALLED: &str = "installed";
/// The markers' directories, each named after its kind.
pub const DIRECTORIES: [&str; 3] = [IGNITION_FETCHED, DISK_BOOT_OFFERED, INSTALLED];

/// What the appliance knows of a node's install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallPhase {
    /// Nothing recorded: the next network boot installs.
    NotInstalled,
    /// The installer fetched the ignition; no installed system has fetched its role config
    /// yet. `disk_boot_offered`: a script since then already told the node to try its disk.
    IgnitionFetched { disk_boot_offered: bool },
    /// The installed system fetched its role config: boot from disk until `node reinstall`.
    Installed,
}

/// Creates the markers' directories (at start, while the appliance may still be root, so that
/// they are there to hand over to the `run_as` account).
pub fn prepare(state_dir: &Path) -> io::Result<()> {
    for kind in DIRECTORIES {
        std::fs::create_dir_all(state_dir.join(kind))?;
    }
    Ok(())
}

fn marker(state_dir: &Path, kind: &str, node: &str) -> PathBuf {
    state_dir.join(kind).join(node)
}

/// Durably (`durable::write`): an `installed` marker lost to a power cut would send the node
/// to a blank disk at its next network boot.
fn write(state_dir: &Path, kind: &str, node: &str, text: &str) -> io::Result<()> {
    let path = marker(state_dir, kind, node);
    std::fs::create_dir_all(path.parent().expect("marker has a parent"))?;
    crate::durable::write(&path, text.as_bytes())
}

/// Removes a marker durably; returns whether there was one.
fn remove(state_dir: &Path, kind: &str, node: &str) -> io::Result<bool> {
    crate::durable::remove(&marker(state_dir, kind, node))
}

pub fn phase(state_dir: &Path, node: &str) -> InstallPhase {
    if marker(state_dir, INSTALLED, node).exists() {
        InstallPhase::Installed
    } else if marker(state_dir, IGNITION_FETCHED, node).exists() {
        InstallPhase::IgnitionFetched {
            disk_boot_offered: marker(state_dir, DISK_BOOT_OFFERED, node).exists(),
        }
    } else {
        InstallPhase::NotInstalled
    }
}

/// The installer fetched the node's ignition: an install (or a reinstall) has started, so the
/// node is not installed until its new system reports. Returns the phase before.
pub fn record_ignition_fetched(
    state_dir: &Path,
    node: &str,
    when: &str,
) -> io::Result<InstallPhase> {
    let before = phase(state_dir, node);
    write(
        state_dir,
        IGNITION_FETCHED,
        node,
        &format!("ignition fetched {when}\n"),
    )?;
    remove(state_dir, DISK_BOOT_OFFERED, node)?;
    remove(state_dir, INSTALLED, node)?;
    Ok(before)
}

/// A script told the node to try its disk.
pub fn record_disk_boot_offered(state_dir: &Path, node: &str, when: &str) -> io::Result<()> {
    write(
        state_dir,
        DISK_BOOT_OFFERED,
        node,
        &format!("disk boot offered {when}\n"),
    )
}

/// The node's installed system fetched its role config: it is installed. Returns the phase
/// before (so the caller can tell a new install from a repeated fetch).
pub fn record_role_config_fetched(
    state_dir: &Path,
    node: &str,
    when: &str,
) -> io::Result<InstallPhase> {
    let before = phase(state_dir, node);
    if before != InstallPhase::Installed {
        write(
            state_dir,
            INSTALLED,
            node,
            &format!("role config fetched {when}\n"),
        )?;
    }
    remove(state_dir, IGNITION_FETCHED, node)?;
    remove(state_dir, DISK_BOOT_OFFERED, node)?;
    Ok(before)
}

/// A node's three markers as they are, each with its text (the time it was written): what a
/// pair's active host replicates to the standby.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Markers {
    pub ignition_fetched: Option<String>,
    pub disk_boot_offered: Option<String>,
    pub installed: Option<String>,
}

pub fn read_markers(state_dir: &Path, node: &str) -> io::Result<Markers> {
    let read = |kind| match std::fs::read_to_string(marker(state_dir, kind, node)) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    };
    Ok(Markers {
        ignition_fetched: read(IGNITION_FETCHED)?,
        disk_boot_offered: read(DISK_BOOT_OFFERED)?,
        installed: read(INSTALLED)?,
    })
}

/// Makes the node's markers exactly `markers`.
pub fn write_markers(state_dir: &Path, node: &str, markers: &Markers) -> io::Result<()> {
    for (kind, text) in [
        (IGNITION_FETCHED, &markers.ignition_fetched),
        (DISK_BOOT_OFFERED, &markers.disk_boot_offered),
        (INSTALLED, &markers.installed),
    ] {
        match text {
            Some(text) => write(state_dir, kind, node, text)?,
            None => {
                remove(state_dir, kind, node)?;
            }
        }
    }
    Ok(())
}

/// Forgets everything about the node's install. Returns whether it was marked installed.
pub fn reset(state_dir: &Path, node: &str) -> io::Result<bool> {
    remove(state_dir, IGNITION_FETCHED, node)?;
    remove(state_dir, DISK_BOOT_OFFERED, node)?;
    remove(state_dir, INSTALLED, node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_installed_only_once_its_system_fetched_the_role_config() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(phase(d, "m0"), InstallPhase::NotInstalled);
        assert_eq!(
            record_ignition_fetched(d, "m0", "t1").unwrap(),
            InstallPhase::NotInstalled
        );
        assert_eq!(
            phase(d, "m0"),
            InstallPhase::IgnitionFetched {
                disk_boot_offered: false
            }
        );
        record_disk_boot_offered(d, "m0", "t2").unwrap();
        assert_eq!(
            phase(d, "m0"),
            InstallPhase::IgnitionFetched {
                disk_boot_offered: true
            }
        );
        // The install is retried: a fresh attempt, no disk boot offered yet.
        assert_eq!(
            record_ignition_fetched(d, "m0", "t3").unwrap(),
            InstallPhase::IgnitionFetched {
                disk_boot_offered: true
            }
        );
        assert_eq!(
            phase(d, "m0"),
            InstallPhase::IgnitionFetched {
                disk_boot_offered: false
            }
        );
        assert_ne!(
            record_role_config_fetched(d, "m0", "t4").unwrap(),
            InstallPhase::Installed
        );
        assert_eq!(phase(d, "m0"), InstallPhase::Installed);
        assert_eq!(
            record_role_config_fetched(d, "m0", "t5").unwrap(),
            InstallPhase::Installed
        );
        assert_eq!(phase(d, "other"), InstallPhase::NotInstalled);
    }

    #[test]
    fn reinstalling_and_resetting_forget_the_install() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        record_role_config_fetched(d, "m0", "t1").unwrap();
        // An installer fetching the ignition again (a reinstall from an ISO, say): not
        // installed until the new system reports.
        assert_eq!(
            record_ignition_fetched(d, "m0", "t2").unwrap(),
            InstallPhase::Installed
        );
        assert!(matches!(
            phase(d, "m0"),
            InstallPhase::IgnitionFetched { .. }
        ));
        assert!(!reset(d, "m0").unwrap());
        assert_eq!(phase(d, "m0"), InstallPhase::NotInstalled);
        record_role_config_fetched(d, "m0", "t3").unwrap();
        assert!(reset(d, "m0").unwrap());
        assert!(!reset(d, "m0").unwrap());
        assert_eq!(phase(d, "m0"), InstallPhase::NotInstalled);
    }
}
