//! Where each node is in its install, as marker files under `<state_dir>`:
//!
//! - `ignition-fetched/<node>`: the live installer fetched the node's ignition (the install
//!   started; the disk may or may not have been written);
//! - `disk-boot-offered/<node>`: since then, a script told the node to try its disk; the time
//!   it holds opens the power-on that offer belongs to (below);
//! - `installed/<node>`: the node's installed system fetched its role config (the merge source
//!   of its ignition), which only Ignition on the installed system's first boot does.
//!
//! Only the last one makes a node installed: a failed install (a wrong `install_dev`) fetches
//! its ignition and then never boots an installed system, and marking it installed at that
//! point sent it to a blank disk at every boot. `okd-appliance node reinstall NAME` removes all
//! three.
//!
//! Beside them, `drained/<node>`: the operator drained the node's backends (`lb drain`, the
//! API, the page) and has not undrained them. A drain lives in the load balancer's memory; this
//! marker makes a restart drain the node again, so a restart never silently puts back into
//! rotation a node someone took out of it.
//!
//! **One answer per power-on.** Between the installer's ignition fetch and the installed
//! system's report, the node's next network boot is told to try its disk, and a network boot
//! after that try means the disk did not bring up an installed system, so it installs again.
//! But one power-on can reach the network several times: OVMF with the iPXE ROM walks PXEv4
//! (the ROM), PXEv4 (its own), PXEv6, HTTPv4 and HTTPv6 before the disk, and each entry that
//! gets an answer fetches the script. So "after that try" is not "at the next fetch": every
//! script fetch within [`POWER_ON_WINDOW`] of the first offer is the same power-on and gets
//! the same answer ([`script_for`], pure). A power-on walks its firmware's entries in about
//! two minutes under qemu's TCG (five network entries, two of them IPv6 timeouts); the window
//! leaves five times that. The cost of the rule: an install whose disk does not boot is
//! installed again only at a network boot at least that long after its first offer.
//!
//! Every marker is written and removed durably (`durable`: temporary file, fsync, rename, fsync
//! of the directory), so a power cut never loses an install that was recorded.
//!
//! Architecture invariant: files only, plain `std::fs` (callers on the async runtime run these
//! on its blocking pool), and one pure decision ([`script_for`]); the HTTP service reads the
//! phase per script request (up to three small files), so the CLI can change it while `serve`
//! runs without any admin channel.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const IGNITION_FETCHED: &str = "ignition-fetched";
const DISK_BOOT_OFFERED: &str = "disk-boot-offered";
const INSTALLED: &str = "installed";
const DRAINED: &str = "drained";
/// The markers' directories, each named after its kind.
pub const DIRECTORIES: [&str; 3] = [IGNITION_FETCHED, DISK_BOOT_OFFERED, INSTALLED];

/// How long one power-on of a machine may take to walk its firmware's network boot entries
/// after the first one got a "try your disk" script (see the module's header).
pub const POWER_ON_WINDOW: Duration = Duration::from_secs(600);

/// What the appliance knows of a node's install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallPhase {
    /// Nothing recorded: the next network boot installs.
    NotInstalled,
    /// The installer fetched the ignition; no installed system has fetched its role config
    /// yet. `disk_boot_offered`: when a script since then first told the node to try its disk.
    IgnitionFetched {
        disk_boot_offered: Option<SystemTime>,
    },
    /// The installed system fetched its role config: boot from disk until `node reinstall`.
    Installed,
}

/// Which of its scripts a node's network boot gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootScript {
    /// Install CoreOS.
    Install,
    /// Try the disk (UEFI: back to the firmware's next boot option; BIOS: the disk, then the
    /// install if it does not boot).
    TryDisk,
    /// Boot the disk: the node is installed.
    LocalBoot,
}

/// The script a network boot at `now` gets, and whether it opens a power-on (the first offer
/// of the disk since the ignition fetch, to record with [`record_disk_boot_offered`]).
///
/// A single node's installed system never reports here (it builds its own config), so once its
/// live system has its ignition every network boot tries the disk: BIOS falls through to the
/// live system when the disk does not boot; on UEFI, `okd-appliance node reinstall` starts
/// over.
pub fn script_for(phase: InstallPhase, single_node: bool, now: SystemTime) -> (BootScript, bool) {
    match phase {
        InstallPhase::Installed => (BootScript::LocalBoot, false),
        InstallPhase::NotInstalled => (BootScript::Install, false),
        InstallPhase::IgnitionFetched { .. } if single_node => (BootScript::TryDisk, false),
        InstallPhase::IgnitionFetched {
            disk_boot_offered: None,
        } => (BootScript::TryDisk, true),
        InstallPhase::IgnitionFetched {
            disk_boot_offered: Some(offered),
        } => {
            // A clock set back puts the offer in the future: the same power-on, unless by more
            // than a window (then no power-on could still be walking).
            let same_power_on = match now.duration_since(offered) {
                Ok(since) => since < POWER_ON_WINDOW,
                Err(ahead) => ahead.duration() < POWER_ON_WINDOW,
            };
            if same_power_on {
                (BootScript::TryDisk, false)
            } else {
                // The disk was tried in an earlier power-on and brought up no installed system.
                (BootScript::Install, false)
            }
        }
    }
}

/// When the node's ignition-fetched or installed marker was last written: when it last
/// fetched an ignition (or reported installed), if it did since its last reset.
pub fn marked_at(state_dir: &Path, node: &str) -> Option<SystemTime> {
    [IGNITION_FETCHED, INSTALLED]
        .into_iter()
        .filter_map(|kind| std::fs::metadata(marker(state_dir, kind, node)).ok())
        .filter_map(|m| m.modified().ok())
        .max()
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
        let offered = std::fs::read_to_string(marker(state_dir, DISK_BOOT_OFFERED, node));
        InstallPhase::IgnitionFetched {
            disk_boot_offered: offered.ok().map(|text| offered_at(&text)),
        }
    } else {
        InstallPhase::NotInstalled
    }
}

/// When a `disk-boot-offered` marker says the offer was made (`disk boot offered DATE`, an
/// HTTP date). A marker whose time can't be read is an offer long past: its power-on is over.
fn offered_at(text: &str) -> SystemTime {
    text.trim_end()
        .strip_prefix("disk boot offered ")
        .and_then(|date| httpdate::parse_http_date(date).ok())
        .unwrap_or(SystemTime::UNIX_EPOCH)
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

/// Keeps that the operator drained `node` (`drained` true), or forgets it (undrained).
pub fn keep_drained(state_dir: &Path, node: &str, drained: bool) -> io::Result<()> {
    if drained {
        write(state_dir, DRAINED, node, "")
    } else {
        remove(state_dir, DRAINED, node).map(drop)
    }
}

/// The nodes the operator drained and has not undrained, by name.
pub fn drained(state_dir: &Path) -> io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(state_dir.join(DRAINED)) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut nodes = Vec::new();
    for entry in entries {
        let name = entry?.file_name();
        // `durable::write`'s temporary files start with a dot; no node name does.
        if let Some(name) = name.to_str().filter(|n| !n.starts_with('.')) {
            nodes.push(name.to_owned());
        }
    }
    nodes.sort();
    Ok(nodes)
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

    fn date(secs: u64) -> String {
        httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_node_is_installed_only_once_its_system_fetched_the_role_config() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(phase(d, "m0"), InstallPhase::NotInstalled);
        assert_eq!(
            record_ignition_fetched(d, "m0", &date(1_000)).unwrap(),
            InstallPhase::NotInstalled
        );
        assert_eq!(
            phase(d, "m0"),
            InstallPhase::IgnitionFetched {
                disk_boot_offered: None
            }
        );
        record_disk_boot_offered(d, "m0", &date(2_000)).unwrap();
        assert_eq!(
            phase(d, "m0"),
            InstallPhase::IgnitionFetched {
                disk_boot_offered: Some(at(2_000))
            }
        );
        // The install is retried: a fresh attempt, no disk boot offered yet.
        assert_eq!(
            record_ignition_fetched(d, "m0", &date(3_000)).unwrap(),
            InstallPhase::IgnitionFetched {
                disk_boot_offered: Some(at(2_000))
            }
        );
        assert_eq!(
            phase(d, "m0"),
            InstallPhase::IgnitionFetched {
                disk_boot_offered: None
            }
        );
        assert_ne!(
            record_role_config_fetched(d, "m0", &date(4_000)).unwrap(),
            InstallPhase::Installed
        );
        assert_eq!(phase(d, "m0"), InstallPhase::Installed);
        assert_eq!(
            record_role_config_fetched(d, "m0", &date(5_000)).unwrap(),
            InstallPhase::Installed
        );
        assert_eq!(phase(d, "other"), InstallPhase::NotInstalled);
    }

    #[test]
    fn an_offer_whose_time_cannot_be_read_belongs_to_a_past_power_on() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        record_ignition_fetched(d, "m0", &date(1_000)).unwrap();
        record_disk_boot_offered(d, "m0", "yesterday").unwrap();
        assert_eq!(
            phase(d, "m0"),
            InstallPhase::IgnitionFetched {
                disk_boot_offered: Some(SystemTime::UNIX_EPOCH)
            }
        );
    }

    #[test]
    fn every_network_boot_of_one_power_on_gets_the_same_answer() {
        let fetched = |offered| InstallPhase::IgnitionFetched {
            disk_boot_offered: offered,
        };
        let now = at(100_000);
        // The first network boot after the install opens the power-on...
        assert_eq!(
            script_for(fetched(None), false, now),
            (BootScript::TryDisk, true)
        );
        // ...and every network entry the firmware tries in it is told the same, without
        // opening another.
        for since in [0, 1, 30, 120, POWER_ON_WINDOW.as_secs() - 1] {
            assert_eq!(
                script_for(fetched(Some(now)), false, at(100_000 + since)),
                (BootScript::TryDisk, false),
                "{since} s after the offer"
            );
        }
        // A network boot after the window is a later power-on: the disk did not bring up an
        // installed system.
        let later = at(100_000 + POWER_ON_WINDOW.as_secs());
        assert_eq!(
            script_for(fetched(Some(now)), false, later),
            (BootScript::Install, false)
        );
        // A clock set back by a little is still the same power-on; by more than a window, not.
        assert_eq!(
            script_for(fetched(Some(now)), false, at(100_000 - 60)),
            (BootScript::TryDisk, false)
        );
        assert_eq!(
            script_for(
                fetched(Some(now)),
                false,
                at(100_000 - 2 * POWER_ON_WINDOW.as_secs())
            ),
            (BootScript::Install, false)
        );
    }

    #[test]
    fn installed_nodes_boot_their_disk_and_others_install() {
        let now = at(100_000);
        assert_eq!(
            script_for(InstallPhase::Installed, false, now),
            (BootScript::LocalBoot, false)
        );
        assert_eq!(
            script_for(InstallPhase::NotInstalled, false, now),
            (BootScript::Install, false)
        );
        // A single node never reports its installed system: it always tries its disk.
        let long_ago = InstallPhase::IgnitionFetched {
            disk_boot_offered: Some(SystemTime::UNIX_EPOCH),
        };
        assert_eq!(
            script_for(long_ago, true, now),
            (BootScript::TryDisk, false)
        );
        let fresh = InstallPhase::IgnitionFetched {
            disk_boot_offered: None,
        };
        assert_eq!(script_for(fresh, true, now), (BootScript::TryDisk, false));
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
