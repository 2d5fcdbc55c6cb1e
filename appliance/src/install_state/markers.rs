//! A node's install state ([`NodeState`]) as marker files under `<state_dir>`, one
//! directory per kind, one file per node, each holding what happened and its HTTP date:
//!
//! - `ignition-fetched/<node>`: `ignition fetched DATE` (installing);
//! - `disk-boot-offered/<node>`: `disk boot offered DATE` (installing, and the power-on that
//!   offer opened);
//! - `installed/<node>`: `role config fetched DATE` (installed; it wins over the other two, so
//!   a crash between writing it and removing them leaves the node installed).
//!
//! [`step`] is the one way a node's state moves: it reads the node's markers, asks
//! [`observe`] what the observation does, and writes only what changed (writes before
//! removals). Every marker is written and removed durably (`durable`: temporary file, fsync,
//! rename, fsync of the directory), so a power cut never loses an install that was recorded.
//! The boot server reads the state per script request (up to three small files), so the CLI
//! can change it while `serve` runs without any admin channel.
//!
//! Beside them, `drained/<node>`: the operator drained the node's backends (`lb drain`, the
//! API, the page) and has not undrained them. A drain lives in the load balancer's memory; this
//! marker makes a restart drain the node again, so a restart never silently puts back into
//! rotation a node someone took out of it.
//!
//! A pair's standby receives the active host's [`Markers`] and writes them as they are
//! ([`write_markers`]).

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{NodeState, Observation, Transition, observe};

const IGNITION_FETCHED: &str = "ignition-fetched";
const DISK_BOOT_OFFERED: &str = "disk-boot-offered";
const INSTALLED: &str = "installed";
const DRAINED: &str = "drained";
/// The markers' directories, each named after its kind.
pub const DIRECTORIES: [&str; 3] = [IGNITION_FETCHED, DISK_BOOT_OFFERED, INSTALLED];

/// A node's three markers as they are, each with its text: what a pair's active host
/// replicates to the standby.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Markers {
    pub ignition_fetched: Option<String>,
    pub disk_boot_offered: Option<String>,
    pub installed: Option<String>,
}

impl Markers {
    /// The markers that keep `state`.
    pub fn of(state: &NodeState) -> Markers {
        let date = |t: &SystemTime| httpdate::fmt_http_date(*t);
        match state {
            NodeState::NotInstalled => Markers::default(),
            NodeState::Installing {
                ignition_fetched,
                disk_boot_offered,
            } => Markers {
                ignition_fetched: Some(format!("ignition fetched {}\n", date(ignition_fetched))),
                disk_boot_offered: disk_boot_offered
                    .as_ref()
                    .map(|t| format!("disk boot offered {}\n", date(t))),
                installed: None,
            },
            NodeState::Installed { since } => Markers {
                installed: Some(format!("role config fetched {}\n", date(since))),
                ..Markers::default()
            },
        }
    }

    /// The state these markers keep. A time that can't be read is long past (a disk offer's
    /// power-on is over); an offer with no text at all (one that could not be read) is none.
    pub fn state(&self) -> NodeState {
        let when = |text: &Option<String>, prefix: &str| {
            text.as_deref()
                .and_then(|t| t.trim_end().strip_prefix(prefix))
                .and_then(|date| httpdate::parse_http_date(date.trim_start()).ok())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        if self.installed.is_some() {
            NodeState::Installed {
                since: when(&self.installed, "role config fetched"),
            }
        } else if self.ignition_fetched.is_some() {
            NodeState::Installing {
                ignition_fetched: when(&self.ignition_fetched, "ignition fetched"),
                disk_boot_offered: self
                    .disk_boot_offered
                    .as_ref()
                    .is_some_and(|text| !text.is_empty())
                    .then(|| when(&self.disk_boot_offered, "disk boot offered")),
            }
        } else {
            NodeState::NotInstalled
        }
    }

    fn kinds(&self) -> [(&'static str, &Option<String>); 3] {
        [
            (IGNITION_FETCHED, &self.ignition_fetched),
            (DISK_BOOT_OFFERED, &self.disk_boot_offered),
            (INSTALLED, &self.installed),
        ]
    }
}

/// One observation's step, as [`step`] took it.
#[derive(Debug)]
pub struct Stepped {
    pub before: NodeState,
    pub transition: Transition,
    /// Whether the state after is on disk (`Ok(true)`: something was written).
    pub recorded: io::Result<bool>,
}

/// Takes `observation` at `now` for `node`: reads its markers, applies [`observe`], and makes
/// the markers keep the state after, writing only what changed. A state directory that can't
/// be looked into counts as nothing recorded (the step is then not recorded, and says why).
pub fn step(state_dir: &Path, node: &str, observation: Observation, now: SystemTime) -> Stepped {
    step_then(state_dir, node, observation, now, |_| {})
}

/// [`step`], then `then` on what it did, before any other step of the same node begins: the
/// node's steps read, decide and write one at a time, and what `then` publishes of them (the
/// journal's news and the recorded state a pair replicates) comes in the order they were taken.
pub fn step_then(
    state_dir: &Path,
    node: &str,
    observation: Observation,
    now: SystemTime,
    then: impl FnOnce(&Stepped),
) -> Stepped {
    let _one_at_a_time = one_at_a_time(node);
    let stepped = take(state_dir, node, observation, now);
    then(&stepped);
    stepped
}

/// [`step_then`] on the blocking pool (file operations, fsyncs), for async callers: the boot
/// server's fetches and `node reinstall`. `then` gets the node's name and what the step did; a
/// step whose task died is not taken (`Stepped::not_taken`) and `then` is not called.
pub async fn step_blocking(
    state_dir: PathBuf,
    node: &str,
    observation: Observation,
    then: impl FnOnce(&str, &Stepped) + Send + 'static,
) -> Stepped {
    let now = SystemTime::now();
    let name = node.to_owned();
    tokio::task::spawn_blocking(move || {
        step_then(&state_dir, &name, observation, now, |s| then(&name, s))
    })
    .await
    .unwrap_or_else(|e| Stepped::not_taken(observation, now, io::Error::other(e)))
}

/// The lock a node's steps take: one of a few, by the node's name (two nodes may share one;
/// a step holds it for a few small file operations).
fn one_at_a_time(node: &str) -> std::sync::MutexGuard<'static, ()> {
    use std::hash::{BuildHasher as _, BuildHasherDefault, DefaultHasher};
    static LOCKS: [std::sync::Mutex<()>; 16] = [const { std::sync::Mutex::new(()) }; 16];
    let at = BuildHasherDefault::<DefaultHasher>::default().hash_one(node) as usize % LOCKS.len();
    LOCKS[at]
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn take(state_dir: &Path, node: &str, observation: Observation, now: SystemTime) -> Stepped {
    let on_disk = match read_markers(state_dir, node) {
        Ok(markers) => markers,
        Err(e) => return Stepped::not_taken(observation, now, e),
    };
    let before = on_disk.state();
    let transition = observe(before, observation, now);
    let recorded = record(state_dir, node, &on_disk, &before, &transition.after);
    Stepped {
        before,
        transition,
        recorded,
    }
}

impl Stepped {
    /// A step whose markers could not be read (or whose task died): taken as from nothing
    /// recorded, and not recorded.
    pub fn not_taken(observation: Observation, now: SystemTime, why: io::Error) -> Stepped {
        let before = NodeState::NotInstalled;
        Stepped {
            before,
            transition: observe(before, observation, now),
            recorded: Err(why),
        }
    }
}

/// Makes the markers on disk (`on_disk`, which keep `before`) keep `after`: a marker is written
/// when its text changed (or it is missing), removed when `after` has none; writes come first.
fn record(
    state_dir: &Path,
    node: &str,
    on_disk: &Markers,
    before: &NodeState,
    after: &NodeState,
) -> io::Result<bool> {
    let (had, want) = (Markers::of(before), Markers::of(after));
    let mut changed = false;
    for (((kind, want), (_, had)), (_, disk)) in want
        .kinds()
        .into_iter()
        .zip(had.kinds())
        .zip(on_disk.kinds())
    {
        if let Some(text) = want
            && (want != had || disk.is_none())
        {
            write(state_dir, kind, node, text)?;
            changed = true;
        }
    }
    for ((kind, want), (_, disk)) in want.kinds().into_iter().zip(on_disk.kinds()) {
        if want.is_none() && disk.is_some() {
            changed |= remove(state_dir, kind, node)?;
        }
    }
    Ok(changed)
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

/// Markers there but unreadable, logged once per 10 s.
static UNREADABLE: crate::isolate::LogGate = crate::isolate::LogGate::new();

/// The node's state as its markers keep it (a state directory that can't be looked into:
/// not installed).
pub fn load(state_dir: &Path, node: &str) -> NodeState {
    read_markers(state_dir, node).unwrap_or_default().state()
}

/// The node's markers with their text. A marker that is there but can't be read (its
/// permissions, text that is not UTF-8, a directory in its place) counts by its presence, as
/// one whose text is empty: an `installed` node stays installed (its time unknown), and an
/// offer whose time is unknown is none (the next script offers the disk again). A state
/// directory that can't be looked into (or is not a directory) is an error.
pub fn read_markers(state_dir: &Path, node: &str) -> io::Result<Markers> {
    let read = |kind| {
        let path = marker(state_dir, kind, node);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => match std::fs::symlink_metadata(&path) {
                Ok(_) => {
                    if let Some(n) = UNREADABLE.admit(std::time::Instant::now()) {
                        tracing::warn!(
                            "{}: can't be read ({e}); counted as there, its time unknown (+{n} unlogged)",
                            path.display()
                        );
                    }
                    Ok(Some(String::new()))
                }
                // Removed in between.
                Err(m) if m.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(_) => Err(e),
            },
        }
    };
    Ok(Markers {
        ignition_fetched: read(IGNITION_FETCHED)?,
        disk_boot_offered: read(DISK_BOOT_OFFERED)?,
        installed: read(INSTALLED)?,
    })
}

/// Makes the node's markers exactly `markers` (a pair's standby, from the active host),
/// writing only those whose text differs (writes before removals, as a step's), so a state
/// shipped again changes nothing on disk.
pub fn write_markers(state_dir: &Path, node: &str, markers: &Markers) -> io::Result<()> {
    let _one_at_a_time = one_at_a_time(node);
    let on_disk = read_markers(state_dir, node)?;
    for ((kind, want), (_, have)) in markers.kinds().into_iter().zip(on_disk.kinds()) {
        if let Some(text) = want
            && have.as_ref() != Some(text)
        {
            write(state_dir, kind, node, text)?;
        }
    }
    for ((kind, want), (_, have)) in markers.kinds().into_iter().zip(on_disk.kinds()) {
        if want.is_none() && have.is_some() {
            remove(state_dir, kind, node)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install_state::{BootScript, IfUnrecorded, News};
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn from() -> std::net::SocketAddr {
        "192.0.2.10:40000".parse().unwrap()
    }
    fn script() -> Observation {
        Observation::Script {
            from: from(),
            by_node: true,
            get: true,
            single_node: false,
        }
    }

    fn role() -> Observation {
        Observation::RoleConfig {
            from: from(),
            file: "worker.ign",
            by_installed_system: true,
        }
    }

    fn ignition() -> Observation {
        Observation::Ignition { from: from() }
    }

    fn files(d: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for kind in DIRECTORIES {
            if let Ok(text) = std::fs::read_to_string(marker(d, kind, "m0")) {
                out.push(format!("{kind}: {}", text.trim_end()));
            }
        }
        out
    }

    #[test]
    fn each_step_leaves_exactly_the_markers_of_its_state() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let s = step(d, "m0", ignition(), at(1_000));
        assert_eq!(s.before, NodeState::NotInstalled);
        assert!(s.recorded.unwrap());
        assert_eq!(
            files(d),
            ["ignition-fetched: ignition fetched Thu, 01 Jan 1970 00:16:40 GMT"]
        );
        let s = step(d, "m0", script(), at(2_000));
        assert_eq!(s.transition.script, Some(BootScript::TryDisk));
        assert!(s.recorded.unwrap());
        assert_eq!(
            load(d, "m0"),
            NodeState::Installing {
                ignition_fetched: at(1_000),
                disk_boot_offered: Some(at(2_000))
            }
        );
        // The same power-on: nothing to write.
        let s = step(d, "m0", script(), at(2_100));
        assert!(!s.recorded.unwrap());
        assert_eq!(files(d).len(), 2);
        let s = step(d, "m0", role(), at(3_000));
        assert!(s.recorded.unwrap());
        assert_eq!(
            files(d),
            ["installed: role config fetched Thu, 01 Jan 1970 00:50:00 GMT"]
        );
        // A repeated fetch writes nothing: the install's time stays.
        let s = step(d, "m0", role(), at(4_000));
        assert!(!s.recorded.unwrap());
        assert_eq!(
            s.transition.news,
            [News::RoleConfigFetched {
                from: from(),
                file: "worker.ign"
            }]
        );
        assert_eq!(load(d, "m0"), NodeState::Installed { since: at(3_000) });
        let s = step(d, "m0", Observation::ReinstallRequested, at(5_000));
        assert_eq!(s.before, NodeState::Installed { since: at(3_000) });
        assert!(s.recorded.unwrap());
        assert!(files(d).is_empty());
        assert!(
            !step(d, "m0", Observation::ReinstallRequested, at(6_000))
                .recorded
                .unwrap()
        );
        assert_eq!(load(d, "other"), NodeState::NotInstalled);
    }

    #[test]
    fn markers_left_by_a_crash_between_two_writes_are_cleaned_by_the_next_step() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // The installed marker was written, the power went before the others were removed.
        let text = |t| format!("{t}\n");
        write_markers(
            d,
            "m0",
            &Markers {
                ignition_fetched: Some(text("ignition fetched now")),
                disk_boot_offered: Some(text("disk boot offered now")),
                installed: Some(text("role config fetched now")),
            },
        )
        .unwrap();
        assert!(matches!(load(d, "m0"), NodeState::Installed { .. }));
        assert!(step(d, "m0", role(), at(1)).recorded.unwrap());
        // The text it could not read stays as it was: it was not changed.
        assert_eq!(files(d), ["installed: role config fetched now"]);
    }

    #[test]
    fn an_offer_whose_time_cannot_be_read_belongs_to_a_past_power_on() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        step(d, "m0", ignition(), at(1_000));
        write(d, DISK_BOOT_OFFERED, "m0", "yesterday").unwrap();
        assert_eq!(
            load(d, "m0"),
            NodeState::Installing {
                ignition_fetched: at(1_000),
                disk_boot_offered: Some(SystemTime::UNIX_EPOCH)
            }
        );
        let s = step(d, "m0", script(), SystemTime::now());
        assert_eq!(s.transition.script, Some(BootScript::Install));
    }

    #[test]
    fn a_marker_that_can_t_be_read_counts_by_its_presence() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let garbled = |kind| {
            let path = marker(d, kind, "m0");
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, [0xff, 0xfe, b'\n']).unwrap();
        };
        // An installed node whose marker is not text stays installed: its disk is not wiped.
        garbled(INSTALLED);
        assert_eq!(
            load(d, "m0"),
            NodeState::Installed {
                since: SystemTime::UNIX_EPOCH
            }
        );
        let s = step(d, "m0", script(), at(1_000));
        assert_eq!(s.transition.script, Some(BootScript::LocalBoot));
        assert!(!s.recorded.unwrap());
        // And a reinstall still removes it.
        let s = step(d, "m0", Observation::ReinstallRequested, at(2_000));
        assert!(s.recorded.unwrap());
        assert!(!marker(d, INSTALLED, "m0").exists());
        // An offer that can't be read is none: the disk is offered again, the offer rewritten.
        step(d, "m0", ignition(), at(3_000));
        garbled(DISK_BOOT_OFFERED);
        let s = step(d, "m0", script(), at(4_000));
        assert_eq!(s.transition.script, Some(BootScript::TryDisk));
        assert!(s.recorded.unwrap());
        assert_eq!(
            load(d, "m0"),
            NodeState::Installing {
                ignition_fetched: at(3_000),
                disk_boot_offered: Some(at(4_000))
            }
        );
    }

    #[test]
    fn markers_shipped_again_are_not_written_again() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let installing = Markers::of(&NodeState::Installing {
            ignition_fetched: at(1_000),
            disk_boot_offered: Some(at(2_000)),
        });
        write_markers(d, "m0", &installing).unwrap();
        let inode = |kind| std::fs::metadata(marker(d, kind, "m0")).unwrap().ino();
        let before = inode(IGNITION_FETCHED);
        write_markers(d, "m0", &installing).unwrap();
        assert_eq!(inode(IGNITION_FETCHED), before);
        let installed = Markers::of(&NodeState::Installed { since: at(3_000) });
        write_markers(d, "m0", &installed).unwrap();
        assert_eq!(read_markers(d, "m0").unwrap(), installed);
    }

    #[test]
    fn a_step_that_can_t_be_written_says_so_and_what_the_fetch_gets() {
        let dir = tempfile::tempdir().unwrap();
        // The state directory is a file: no marker can be written there.
        let d = dir.path().join("file");
        std::fs::write(&d, "").unwrap();
        let s = step(&d, "m0", ignition(), at(1));
        assert!(s.recorded.is_err());
        assert_eq!(s.transition.if_unrecorded, IfUnrecorded::Refuse);
        let s = step(&d, "m0", script(), at(1));
        assert!(s.recorded.is_err());
        assert_eq!(s.transition.script, Some(BootScript::Install));
        assert_eq!(s.transition.if_unrecorded, IfUnrecorded::Answer);
    }

    #[test]
    fn the_markers_keep_the_state_they_are_made_of() {
        for state in [
            NodeState::NotInstalled,
            NodeState::Installing {
                ignition_fetched: at(1_000),
                disk_boot_offered: None,
            },
            NodeState::Installing {
                ignition_fetched: at(1_000),
                disk_boot_offered: Some(at(2_000)),
            },
            NodeState::Installed { since: at(3_000) },
        ] {
            assert_eq!(Markers::of(&state).state(), state);
        }
    }
}
