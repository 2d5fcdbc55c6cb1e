//! `okd-appliance ignition create`: the ignition set made from the config by openshift-install,
//! in a fresh work directory beside `install.ignition_dir`, then put in place at once.
//!
//! What openshift-install does to its `--dir` (openshift/installer; `pkg/asset/store/store.go`
//! `Fetch` and `purge`, `pkg/asset/targets/targets.go`):
//!
//! 1. `create manifests` reads `install-config.yaml` and *consumes* it (deletes it: "Consuming
//!    Install Config from target directory"), writing `manifests/` and `openshift/` and the
//!    state file `.openshift_install_state.json`;
//! 2. files added to `openshift/` (`*.yaml`, `*.yml`, `*.json`: `pkg/asset/manifests/
//!    openshift.go`, `Openshift.Load`) become part of the cluster: bootstrap.ign carries each
//!    as `/opt/openshift/openshift/<name>` (`pkg/asset/ignition/bootstrap/common.go`,
//!    `addParentFiles`), and a MachineConfig among them ends up in the role's config;
//! 3. `create ignition-configs` consumes `manifests/` and `openshift/` and writes bootstrap.ign,
//!    master.ign, worker.ign, metadata.json and `auth/` (kubeconfig, kubeadmin-password);
//!    `create single-node-ignition-config` writes `bootstrap-in-place-for-live-iso.ign` instead
//!    of the three (it wants `bootstrapInPlace.installationDisk`, which `render` writes for a
//!    single-node config).
//!
//! Each step is named when it fails, and a failure leaves `ignition_dir` as it was (the work
//! directory stays for its `.openshift_install.log`; the next run starts it afresh). The
//! result is checked as `check` checks `ignition_dir` (the caller's check, run on the work
//! directory) before `renameat2(RENAME_EXCHANGE)` swaps it with `ignition_dir` in one step; the
//! set it replaces is kept beside it as `<ignition_dir>.previous`.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::install_config;

/// How long one installer command may take: `create manifests` and `create ignition-configs`
/// take seconds to a minute; one that takes this long is stuck.
const STEP_LIMIT: Duration = Duration::from_secs(30 * 60);

/// The steps, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    InstallConfig,
    Manifests,
    CustomManifests,
    IgnitionConfigs,
    Check,
    Replace,
}

impl Step {
    pub const COUNT: usize = 6;

    /// Its number, from 1.
    pub fn number(self) -> usize {
        self as usize + 1
    }

    /// What it does, in the words of its command.
    pub fn describe(self, single_node: bool) -> &'static str {
        match self {
            Step::InstallConfig => "install-config.yaml (as `render --format install-config`)",
            Step::Manifests => "openshift-install create manifests",
            Step::CustomManifests => "custom manifests into openshift/",
            Step::IgnitionConfigs if single_node => {
                "openshift-install create single-node-ignition-config"
            }
            Step::IgnitionConfigs => "openshift-install create ignition-configs",
            Step::Check => "check the set against the config",
            Step::Replace => "put the set in place",
        }
    }
}

/// Where the steps' progress and the installer's output go.
pub trait Report {
    /// `step` starts.
    fn step(&mut self, step: Step, what: &str);
    /// A line the installer printed (on its standard output or error).
    fn line(&mut self, line: &str);
    /// A note of the step (a file copied, a file skipped).
    fn note(&mut self, note: &str);
    /// Called about ten times a second while the installer runs.
    fn tick(&mut self) {}
}

/// Why `create` stopped: the step, and the reason.
#[derive(Debug)]
pub struct Failed {
    pub step: Step,
    pub why: String,
    /// Where the work directory was left, for the installer's log.
    pub work_dir: Option<PathBuf>,
    /// `ignition_dir` is as it was (false only when the new set went in and what followed
    /// failed).
    pub untouched: bool,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step {}/{} failed: {}",
            self.step.number(),
            Step::COUNT,
            self.why
        )?;
        if let Some(w) = &self.work_dir {
            write!(f, " (its work is in {})", w.display())?;
        }
        Ok(())
    }
}

/// What `create` made.
#[derive(Debug)]
pub struct Made {
    pub ignition_dir: PathBuf,
    /// Where the set it replaced is now.
    pub previous: Option<PathBuf>,
    /// The custom manifests copied in.
    pub manifests: Vec<String>,
}

/// The work directory beside `ignition_dir`.
pub fn work_dir(ignition_dir: &Path) -> PathBuf {
    sibling(ignition_dir, ".", ".new")
}

/// Where the set a new one replaced is kept.
pub fn previous_dir(ignition_dir: &Path) -> PathBuf {
    sibling(ignition_dir, "", ".previous")
}

fn sibling(dir: &Path, prefix: &str, suffix: &str) -> PathBuf {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    dir.with_file_name(format!("{prefix}{name}{suffix}"))
}

/// Makes the ignition set of `config` with `installer`; `check` is `check`'s verdict on a
/// directory as the ignition directory, and `unused` says, right before the set is replaced,
/// whether it still may be (no node fetched its ignition from it meanwhile).
pub fn create(
    config: &Config,
    installer: &Path,
    report: &mut dyn Report,
    check: &dyn Fn(&Path) -> Result<(), String>,
    unused: &dyn Fn() -> Result<(), String>,
) -> Result<Made, Failed> {
    let single = config.single_node().is_some();
    let early = |why: String| Failed {
        step: Step::InstallConfig,
        why,
        work_dir: None,
        untouched: true,
    };
    let ignition_dir = in_place(&config.install.ignition_dir).map_err(early)?;
    // Everything that can be known before the installer runs is checked first.
    super::trusted(installer).map_err(early)?;
    if let Some(dir) = &config.install.manifests_dir
        && !dir.is_dir()
    {
        return Err(early(format!(
            "install.manifests_dir {} is not a directory (create it, or remove the key)",
            dir.display()
        )));
    }
    let _lock = lock(&ignition_dir).map_err(early)?;
    // A mark left in the live set by a run that died right after its swap: the set is no work.
    unmark(&ignition_dir).map_err(early)?;
    let work = work_dir(&ignition_dir);
    let fail = |step: Step, why: String, kept: bool| Failed {
        step,
        why,
        work_dir: kept.then(|| work.clone()),
        untouched: true,
    };
    let begin = |report: &mut dyn Report, step: Step| {
        report.step(step, step.describe(single));
    };

    begin(report, Step::InstallConfig);
    let text = install_config::Inputs::read(config)
        .and_then(|inputs| install_config::render(config, &inputs))
        .map_err(|e| fail(Step::InstallConfig, e, false))?;
    fresh_dir(&work, &previous_dir(&ignition_dir), report)
        .map_err(|e| fail(Step::InstallConfig, e, false))?;
    write_private(&work.join(install_config::FILE_NAME), text.as_bytes())
        .map_err(|e| fail(Step::InstallConfig, e, true))?;

    begin(report, Step::Manifests);
    run(installer, &["create", "manifests"], &work, report)
        .map_err(|e| fail(Step::Manifests, e, true))?;

    begin(report, Step::CustomManifests);
    let manifests = custom_manifests(config, &work.join("openshift"), report)
        .map_err(|e| fail(Step::CustomManifests, e, true))?;

    begin(report, Step::IgnitionConfigs);
    let target = if single {
        "single-node-ignition-config"
    } else {
        "ignition-configs"
    };
    run(installer, &["create", target], &work, report)
        .map_err(|e| fail(Step::IgnitionConfigs, e, true))?;

    begin(report, Step::Check);
    check(&work).map_err(|e| fail(Step::Check, e, true))?;

    begin(report, Step::Replace);
    unused().map_err(|e| fail(Step::Replace, e, true))?;
    let previous = replace(&work, &ignition_dir).map_err(|(why, untouched)| Failed {
        untouched,
        ..fail(Step::Replace, why, true)
    })?;
    Ok(Made {
        ignition_dir,
        previous,
        manifests,
    })
}

/// The directory the set goes in: `dir`, or what it links to (the link stays and points at the
/// new set). Refused when it is a mount point: its set could not be renamed in.
fn in_place(dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt as _;
    let dir = match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(dir)
            .map_err(|e| format!("{} links to nothing usable: {e}", dir.display()))?,
        _ => dir.to_owned(),
    };
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let parent_dev = std::fs::metadata(&parent)
        .map_err(|e| format!("{}: {e}", parent.display()))?
        .dev();
    match std::fs::metadata(&dir) {
        Ok(m) if !m.is_dir() => Err(format!("{} is not a directory", dir.display())),
        Ok(m) if m.dev() != parent_dev => Err(format!(
            "{} is a mount point: a new set can't be renamed in; point install.ignition_dir at a directory inside it",
            dir.display()
        )),
        _ => Ok(dir),
    }
}

/// One `ignition create` at a time per ignition directory: a lock file beside it, held until
/// the run ends (and released by the kernel if it dies).
fn lock(ignition_dir: &Path) -> Result<std::fs::File, String> {
    let path = sibling(ignition_dir, ".", ".lock");
    let file = std::fs::File::create(&path)
        .map_err(|e| format!("can't create {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(format!(
            "another `ignition create` (or `cluster up`) is making {}'s set: {} is locked",
            ignition_dir.display(),
            path.display()
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(format!("can't lock {}: {e}", path.display())),
    }
}

/// What every work directory holds from its start. A directory at the work path without it is
/// the set a run swapped out and died before keeping as `.previous`: kept now, not deleted.
const WORK_MARK: &str = ".okd-appliance-work";

/// An empty directory at `dir`, owner-only (install-config.yaml holds the pull secret), with
/// its mark; what a failed run left there goes, and a set a run swapped out goes to `previous`.
/// The directory is made under a temporary name with its mark and renamed into place, so the
/// work path never holds an unmarked directory that is not a swapped-out set.
fn fresh_dir(dir: &Path, previous: &Path, report: &mut dyn Report) -> Result<(), String> {
    let marked = dir
        .join(WORK_MARK)
        .try_exists()
        .map_err(|e| format!("can't read {}: {e}", dir.display()))?;
    if dir.is_dir() && !marked {
        keep_as(dir, previous).map_err(|e| {
            format!(
                "{} holds the set an earlier run replaced; it can't be kept: {e}",
                dir.display()
            )
        })?;
        report.note(&format!(
            "{}: the set an interrupted run replaced, kept",
            previous.display()
        ));
    }
    remove_all(dir)?;
    let staging = sibling(dir, "", ".tmp");
    remove_all(&staging)?;
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(|e| format!("can't create {}: {e}", staging.display()))?;
    write_private(&staging.join(WORK_MARK), b"")?;
    std::fs::rename(&staging, dir).map_err(|e| {
        format!(
            "can't rename {} to {}: {e}",
            staging.display(),
            dir.display()
        )
    })
}

/// `dir` renamed to `previous`; what was at `previous` is deleted only once it has.
fn keep_as(dir: &Path, previous: &Path) -> Result<(), String> {
    let aside = sibling(previous, ".", ".old");
    remove_all(&aside)?;
    let had = match std::fs::rename(previous, &aside) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(format!("can't move {} aside: {e}", previous.display())),
    };
    if let Err(e) = std::fs::rename(dir, previous) {
        if had {
            let _ = std::fs::rename(&aside, previous);
        }
        return Err(format!(
            "can't rename {} to {}: {e}",
            dir.display(),
            previous.display()
        ));
    }
    remove_all(&aside)
}

fn remove_all(dir: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("can't remove {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| format!("can't write {}: {e}", path.display()))
}

/// `installer ARGS --dir work`, its output streamed to `report` line by line.
fn run(
    installer: &Path,
    args: &[&str],
    work: &Path,
    report: &mut dyn Report,
) -> Result<(), String> {
    let shown = format!(
        "{} {} --dir {}",
        installer.display(),
        args.join(" "),
        work.display()
    );
    let mut child = Command::new(installer)
        .args(args)
        .arg("--dir")
        .arg(work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!(
                "{} does not exist (with `openshift_install: {{ release: ... }}`, `okd-appliance installer fetch` gets it)",
                installer.display()
            ),
            _ => format!("can't run {}: {e}", installer.display()),
        })?;
    let (send, lines) = mpsc::channel::<String>();
    let mut readers = Vec::new();
    let outputs: [Option<Box<dyn std::io::Read + Send>>; 2] = [
        child.stdout.take().map(|o| Box::new(o) as _),
        child.stderr.take().map(|e| Box::new(e) as _),
    ];
    for output in outputs.into_iter().flatten() {
        let send = send.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(output).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        }));
    }
    drop(send);
    let started = Instant::now();
    let mut timed_out = false;
    // Until the outputs close and the installer has exited, within the step's limit: a
    // program of its that keeps the outputs open, or an installer that closes them and goes
    // on, neither makes this wait forever.
    let mut outputs_open = true;
    let mut exited = None;
    let status = loop {
        if outputs_open {
            match lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => report.line(&line),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    report.tick();
                    // Exited, and what it wrote has been read: done.
                    if let Some(status) = exited {
                        break status;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => outputs_open = false,
            }
        } else if let Some(status) = exited {
            break status;
        } else {
            std::thread::sleep(Duration::from_millis(100));
            report.tick();
        }
        if exited.is_none() {
            exited = child
                .try_wait()
                .map_err(|e| format!("`{shown}`: can't wait for it: {e}"))?;
        }
        if started.elapsed() > STEP_LIMIT {
            // Exited, and a program of its still writing: not waited for any longer.
            if let Some(status) = exited {
                break status;
            }
            timed_out = true;
            let _ = child.kill();
            break child
                .wait()
                .map_err(|e| format!("`{shown}`: can't wait for it: {e}"))?;
        }
    };
    // The readers are done once the outputs closed; one held open by another process is left.
    if !outputs_open {
        for reader in readers {
            let _ = reader.join();
        }
    }
    if timed_out {
        return Err(format!(
            "`{shown}` ran for more than {} minutes and was stopped",
            STEP_LIMIT.as_secs() / 60
        ));
    }
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{shown}` failed ({status})"))
    }
}

/// Copies `install.manifests_dir`'s manifests into `openshift` (and, for a single node, the
/// MachineConfig that keeps its addresses on the installed disk, unless the directory has a
/// file of that name); returns the names copied.
fn custom_manifests(
    config: &Config,
    openshift: &Path,
    report: &mut dyn Report,
) -> Result<Vec<String>, String> {
    if !openshift.is_dir() {
        return Err(format!(
            "{} is not there: `create manifests` did not write it",
            openshift.display()
        ));
    }
    let mut copied = Vec::new();
    if let Some(dir) = &config.install.manifests_dir {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| format!("install.manifests_dir {}: {e}", dir.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("install.manifests_dir {}: {e}", dir.display()))?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            // openshift-install reads these three kinds from openshift/ and nothing else.
            let manifest = [".yaml", ".yml", ".json"].iter().any(|x| name.ends_with(x));
            if !path.is_file() || !manifest || name.starts_with('.') {
                report.note(&format!(
                    "{} skipped: openshift-install reads only *.yaml, *.yml and *.json files of openshift/",
                    path.display()
                ));
                continue;
            }
            std::fs::copy(&path, openshift.join(&name))
                .map_err(|e| format!("can't copy {}: {e}", path.display()))?;
            report.note(&format!("{} -> openshift/{name}", path.display()));
            copied.push(name);
        }
    }
    let network = install_config::single_node::FILE_NAME;
    if config.single_node().is_some() && !copied.iter().any(|c| c == network) {
        let text = install_config::single_node::render(config)?;
        std::fs::write(openshift.join(network), text)
            .map_err(|e| format!("can't write openshift/{network}: {e}"))?;
        report.note(&format!(
            "openshift/{network}: the single node's addresses on its installed disk (`render --format single-node-network`)"
        ));
        copied.push(network.to_owned());
    }
    Ok(copied)
}

/// Puts `work` in place as `ignition_dir` in one rename, keeping what was there as
/// `<ignition_dir>.previous`. The new set gets the old directory's permissions, and its files
/// the old directory's group, through which the appliance's account reads them (the installer
/// writes them with its user's group). An error says whether `ignition_dir` is untouched.
fn replace(work: &Path, ignition_dir: &Path) -> Result<Option<PathBuf>, (String, bool)> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let untouched = |why: String| (why, true);
    let old = match std::fs::metadata(ignition_dir) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(untouched(format!(
                "can't read {}: {e}",
                ignition_dir.display()
            )));
        }
    };
    let (mode, gid) = old
        .as_ref()
        .map_or((0o750, None), |m| (m.mode() & 0o7777, Some(m.gid())));
    if let Some(gid) = gid {
        adopt_group(work, gid).map_err(|e| {
            untouched(format!(
                "can't give the new set the group of {} (gid {gid}), which the appliance reads it through: {e}",
                ignition_dir.display()
            ))
        })?;
    }
    std::fs::set_permissions(work, std::fs::Permissions::from_mode(mode))
        .map_err(|e| untouched(format!("can't set the mode of {}: {e}", work.display())))?;
    let sync_parent = || {
        if let Some(parent) = ignition_dir.parent() {
            let _ = std::fs::File::open(parent).and_then(|d| d.sync_all());
        }
    };
    if old.is_none() {
        std::fs::rename(work, ignition_dir).map_err(|e| {
            untouched(format!(
                "can't rename {} to {}: {e}",
                work.display(),
                ignition_dir.display()
            ))
        })?;
        sync_parent();
        unmark(ignition_dir).map_err(|e| (e, false))?;
        return Ok(None);
    }
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    renameat2(
        AT_FDCWD,
        work,
        AT_FDCWD,
        ignition_dir,
        RenameFlags::RENAME_EXCHANGE,
    )
    .map_err(|e| {
        untouched(format!(
            "can't swap {} with {} (renameat2 RENAME_EXCHANGE: {e})",
            work.display(),
            ignition_dir.display()
        ))
    })?;
    sync_parent();
    // The new set is no work directory any more; `work` now holds the set that was in place.
    unmark(ignition_dir).map_err(|e| (e, false))?;
    let in_place = |why: String| (why, false);
    let previous = previous_dir(ignition_dir);
    // The earlier `.previous` is deleted only once this one is in its place.
    keep_as(work, &previous).map_err(|e| {
        in_place(format!(
            "the new set is in place; the one it replaced is in {} ({e})",
            work.display()
        ))
    })?;
    sync_parent();
    Ok(Some(previous))
}

/// Removes the work mark from the set in `dir`, durably.
fn unmark(dir: &Path) -> Result<(), String> {
    let mark = dir.join(WORK_MARK);
    crate::durable::remove(&mark)
        .map(drop)
        .map_err(|e| format!("can't remove {}: {e}", mark.display()))
}

/// Gives `dir` and everything in it the group `gid`.
fn adopt_group(dir: &Path, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, None, Some(gid))?;
    if std::fs::symlink_metadata(dir)?.is_dir() {
        for entry in std::fs::read_dir(dir)? {
            adopt_group(&entry?.path(), gid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_and_previous_directories_sit_beside_the_ignition_directory() {
        let dir = Path::new("/etc/okd/install_dir");
        assert_eq!(work_dir(dir), Path::new("/etc/okd/.install_dir.new"));
        assert_eq!(
            previous_dir(dir),
            Path::new("/etc/okd/install_dir.previous")
        );
    }

    struct Quiet;
    impl Report for Quiet {
        fn step(&mut self, _: Step, _: &str) {}
        fn line(&mut self, _: &str) {}
        fn note(&mut self, _: &str) {}
    }

    struct Lines(Vec<String>);
    impl Report for Lines {
        fn step(&mut self, _: Step, _: &str) {}
        fn line(&mut self, line: &str) {
            self.0.push(line.to_owned());
        }
        fn note(&mut self, _: &str) {}
    }

    /// An installer that exits while a program of its still holds its output open: its lines
    /// are all read and its exit is not waited past; a failure is its status.
    #[test]
    fn the_installer_s_exit_ends_the_step_even_if_its_output_stays_open() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let script = tmp.path().join("installer");
        std::fs::write(
            &script,
            "#!/bin/sh\necho one\necho two >&2\nsleep 6 &\nexit 3\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut seen = Lines(Vec::new());
        let started = Instant::now();
        let e = run(&script, &["create", "manifests"], tmp.path(), &mut seen).unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(e.contains("exit status: 3"), "{e}");
        seen.0.sort();
        assert_eq!(seen.0, ["one", "two"]);
    }

    #[test]
    fn a_set_swapped_out_by_a_run_that_died_is_kept_and_a_failed_run_s_work_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let ignition = tmp.path().join("install_dir");
        let (work, previous) = (work_dir(&ignition), previous_dir(&ignition));
        // A failed run's work: marked, so it goes.
        fresh_dir(&work, &previous, &mut Quiet).unwrap();
        std::fs::write(work.join("bootstrap.ign"), "half made").unwrap();
        fresh_dir(&work, &previous, &mut Quiet).unwrap();
        assert!(!work.join("bootstrap.ign").exists());
        assert!(!previous.exists());
        // The set a run swapped out before it died: no mark, so it is kept as `.previous`.
        std::fs::remove_dir_all(&work).unwrap();
        std::fs::create_dir(&work).unwrap();
        std::fs::write(work.join("bootstrap.ign"), "the old set").unwrap();
        fresh_dir(&work, &previous, &mut Quiet).unwrap();
        assert_eq!(
            std::fs::read_to_string(previous.join("bootstrap.ign")).unwrap(),
            "the old set"
        );
        assert!(work.join(WORK_MARK).exists());
    }

    #[test]
    fn a_replace_swaps_the_sets_and_keeps_the_old_one() {
        let tmp = tempfile::tempdir().unwrap();
        let ignition = tmp.path().join("install_dir");
        std::fs::create_dir(&ignition).unwrap();
        std::fs::write(ignition.join("bootstrap.ign"), "old").unwrap();
        let work = work_dir(&ignition);
        std::fs::create_dir(&work).unwrap();
        std::fs::write(work.join("bootstrap.ign"), "new").unwrap();
        let previous = replace(&work, &ignition).unwrap().unwrap();
        assert_eq!(
            std::fs::read_to_string(ignition.join("bootstrap.ign")).unwrap(),
            "new"
        );
        assert_eq!(
            std::fs::read_to_string(previous.join("bootstrap.ign")).unwrap(),
            "old"
        );
        assert!(!work.exists());
        // Again: the older previous set goes, the one just replaced is kept.
        std::fs::create_dir(&work).unwrap();
        std::fs::write(work.join("bootstrap.ign"), "newer").unwrap();
        replace(&work, &ignition).unwrap();
        assert_eq!(
            std::fs::read_to_string(ignition.join("bootstrap.ign")).unwrap(),
            "newer"
        );
        assert_eq!(
            std::fs::read_to_string(previous.join("bootstrap.ign")).unwrap(),
            "new"
        );
    }
}
