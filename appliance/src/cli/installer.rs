//! `okd-appliance installer fetch FILE` and `okd-appliance ignition create FILE [--force]`: the
//! installer of the configured release, and the ignition set made from the config with it
//! (`cluster up` makes the set too, when it is missing or expired and no node has used it).
//!
//! Exit codes: 0 done, 1 invalid config, a failed download or step, or a refusal, 2 usage.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

use clap::Subcommand;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use okd_appliance::config::{
    self, Config, InstallCheck, InstallFiles, Installer, Problems, RealFiles, RenderStyle, Role,
};
use okd_appliance::installer::{self, create, fresh};
use okd_appliance::operator::wire::{Addressed, Request};
use okd_appliance::vocabulary::RoleConfig;

use super::OneCluster;

#[derive(Debug, Subcommand)]
pub enum InstallerAction {
    /// Download the release `install.openshift_install: { release: ... }` names beside the
    /// config (`openshift-install/<release>/openshift-install`), verified against the release's
    /// published sha256sum.txt; a tarball that does not match is deleted.
    Fetch {
        /// The cluster config (YAML), or a host file.
        file: PathBuf,
        /// With a host file of several clusters: the cluster whose installer this is.
        #[arg(long, value_name = "ID")]
        cluster: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum IgnitionAction {
    /// Make the ignition set with openshift-install: install-config.yaml as `render` writes it,
    /// `create manifests`, `install.manifests_dir`'s files into openshift/, `create
    /// ignition-configs` (or `create single-node-ignition-config`), checked as `check` does, then
    /// put in place as `install.ignition_dir` at once (the set it replaces kept as
    /// `<ignition_dir>.previous`).
    Create {
        /// The cluster config (YAML), or a host file.
        file: PathBuf,
        /// With a host file of several clusters: the cluster whose set this is.
        #[arg(long, value_name = "ID")]
        cluster: Option<String>,
        /// Make it even though nodes have fetched their ignition from the set in place (they
        /// then need `okd-appliance node reinstall`).
        #[arg(long)]
        force: bool,
    },
}

/// `installer fetch`.
pub fn fetch(action: InstallerAction) -> ExitCode {
    let InstallerAction::Fetch { file, cluster } = action;
    let one = match super::load_one_cluster(&file, cluster.as_deref(), InstallCheck::Skip) {
        Ok(one) => one,
        Err(code) => return code,
    };
    let (version, mirror) = match &one.config.install.installer {
        Some(Installer::Release { version, mirror }) => (version, mirror),
        Some(Installer::Path(path)) => {
            eprintln!(
                "error: install.openshift_install is the path {}: nothing to fetch (name a release, `openshift_install: {{ release: 4.19.0-okd-scos.1 }}`, to have it fetched)",
                path.display()
            );
            return ExitCode::from(1);
        }
        None => {
            eprintln!(
                "error: {} names no installer: add `openshift_install: {{ release: <OKD release> }}` to its install section",
                file.display()
            );
            return ExitCode::from(1);
        }
    };
    let runtime = match super::runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let arch = std::env::consts::ARCH;
    let dir = config_dir(&file);
    match runtime.block_on(installer::release::fetch(version, mirror, &dir, arch)) {
        Ok(fetched) => {
            for line in fetched.lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// `ignition create`.
pub fn ignition(action: IgnitionAction) -> ExitCode {
    let IgnitionAction::Create {
        file,
        cluster,
        force,
    } = action;
    let one = match super::load_one_cluster(&file, cluster.as_deref(), InstallCheck::Skip) {
        Ok(one) => one,
        Err(code) => return code,
    };
    let fetched = fetched_nodes(&one);
    if !fetched.is_empty() {
        let nodes = fetched.join(", ");
        let (their, them) = if fetched.len() == 1 {
            ("its", "it")
        } else {
            ("their", "each of them")
        };
        if !force {
            eprintln!(
                "error: {nodes} fetched {their} ignition from the set in {}: a new set would not be {}s (run again with --force, then `okd-appliance node reinstall` {them})",
                one.config.install.ignition_dir.display(),
                if fetched.len() == 1 { "it" } else { "their" }
            );
            return ExitCode::from(1);
        }
        eprintln!(
            "warning: --force: {nodes} fetched {their} ignition from the set being replaced: `okd-appliance node reinstall` {them}"
        );
    }
    match make(&one, &file, "asked for", force) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// What `cluster up FILE` does before it asks the appliance: with an installer configured, the
/// ignition set is made when it is missing or expired and no node has used it; a set that
/// can't be used and must not be replaced stops it (exit 1).
pub fn before_up(file: &Path, cluster: Option<&str>) -> Result<(), ExitCode> {
    let loaded = match config::load_any(file, InstallCheck::Skip) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprint!("{}", e.render(super::style()));
            return Err(ExitCode::from(1));
        }
    };
    // A host of several clusters without --cluster: the appliance's usage error names them.
    if let config::Target::Host(host) = &loaded
        && cluster.is_none()
        && host.clusters.len() > 1
    {
        return Ok(());
    }
    let one = super::one_cluster(loaded, cluster, &file.display().to_string())?;
    if one.config.install.installer.is_none() {
        return Ok(());
    }
    match fresh::judge(&set_state(&one.config), &fetched_nodes(&one)) {
        fresh::Verdict::Use { note } => {
            if let Some(note) = note {
                println!("ignition set in place: {note}");
            }
            Ok(())
        }
        fresh::Verdict::Make { why } => {
            println!("making the ignition set: {why}");
            make(&one, file, &why, false)
        }
        fresh::Verdict::Refuse { why } => {
            eprintln!("error: {why}");
            tell(
                &one,
                Err(format!("`cluster up` did not make a new set: {why}")),
            );
            Err(ExitCode::from(1))
        }
    }
}

/// The folder of the config file a command was given: where `installer fetch` keeps releases.
pub fn config_dir(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Runs `ignition create` for `one` (`why`: what asked for it), prints the outcome and tells a
/// running appliance, whose journal records it. Unless `force`, the set is replaced only if no
/// node fetched its ignition from it meanwhile.
fn make(one: &OneCluster, file: &Path, why: &str, force: bool) -> Result<(), ExitCode> {
    let config = &one.config;
    let Some(which) = &config.install.installer else {
        eprintln!(
            "error: {} names no installer: add `openshift_install: <path>` or `openshift_install: {{ release: <OKD release> }}` to its install section",
            file.display()
        );
        return Err(ExitCode::from(1));
    };
    let binary = installer::binary(which, &config_dir(file));
    if matches!(which, Installer::Release { .. }) && !binary.exists() {
        eprintln!(
            "error: {} is not there yet: `okd-appliance installer fetch {}` gets it",
            binary.display(),
            file.display()
        );
        tell(one, Err(format!("{} is not there yet", binary.display())));
        return Err(ExitCode::from(1));
    }
    let ignition_dir = config.install.ignition_dir.clone();
    let check = |work: &Path| check_work(file, one.id.as_deref(), &ignition_dir, work);
    let unused = || match fetched_nodes(one).as_slice() {
        _ if force => Ok(()),
        [] => Ok(()),
        nodes => Err(format!(
            "{} fetched ignition from the set in place while this one was made: it is kept",
            nodes.join(", ")
        )),
    };
    let mut shown = Shown::new();
    let result = create::create(config, &binary, &mut shown, &check, &unused);
    shown.done();
    match result {
        Ok(made) => {
            let custom = match made.manifests.len() {
                0 => String::new(),
                n => format!(
                    ", with {n} custom manifest{}",
                    if n == 1 { "" } else { "s" }
                ),
            };
            let kept = made
                .previous
                .as_ref()
                .map(|p| format!("; the set it replaced is in {}", p.display()))
                .unwrap_or_default();
            let line = format!(
                "{} made by {}{custom} ({why}){kept}",
                made.ignition_dir.display(),
                binary.display()
            );
            println!("{line}");
            tell(one, Ok(line));
            Ok(())
        }
        Err(failed) => {
            let line = if failed.untouched {
                format!("{failed}; {} is untouched", ignition_dir.display())
            } else {
                failed.to_string()
            };
            eprintln!("error: {line}");
            tell(one, Err(line));
            Err(ExitCode::from(1))
        }
    }
}

/// Tells the appliance serving `one` what became of its ignition set; nothing when none runs.
fn tell(one: &OneCluster, result: Result<String, String>) {
    let request = Addressed::new(one.id.as_deref(), Request::ignition(result, 900));
    match okd_appliance::operator::admin::call(&one.state_dir, &request) {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) => {}
        Err(e) => eprintln!("warning: can't tell the running appliance: {e}"),
    }
}

/// Where `one`'s install markers are: its own state directory, or its cluster's under a host's.
fn markers_dir(one: &OneCluster) -> PathBuf {
    match &one.id {
        Some(id) => okd_appliance::plan::views::cluster_state_dir(&one.state_dir, id),
        None => one.state_dir.clone(),
    }
}

/// The nodes whose markers say they fetched their ignition from the set in place.
fn fetched_nodes(one: &OneCluster) -> Vec<String> {
    let config = &one.config;
    let markers = markers_dir(one);
    let single = config.single_node().is_some();
    config
        .nodes
        .iter()
        .filter(|node| {
            let file = config
                .install
                .ignition_dir
                .join(RoleConfig::of(node.role, single).file());
            let written = std::fs::metadata(file).and_then(|m| m.modified()).ok();
            let marked = okd_appliance::install_state::marked_at(&markers, &node.name);
            fresh::fetched_from_set(marked, written)
        })
        .map(|node| node.name.clone())
        .collect()
}

/// What the ignition directory holds for the config's nodes.
fn set_state(config: &Config) -> fresh::Set {
    let single = config.single_node().is_some();
    let dir = &config.install.ignition_dir;
    let now = SystemTime::now();
    let mut set = fresh::Set {
        missing: Vec::new(),
        expiring: None,
    };
    for role in Role::ALL {
        let Some(node) = config.nodes_with_role(role).next() else {
            continue;
        };
        let kind = RoleConfig::of(role, single);
        match std::fs::metadata(dir.join(kind.file())).and_then(|m| m.modified()) {
            Err(_) => set.missing.push(kind.file()),
            Ok(written) if kind.lifetime().is_some() => {
                set.expiring = Some(fresh::Expiring {
                    file: kind.file(),
                    node: node.name.clone(),
                    age: now.duration_since(written).unwrap_or_default(),
                });
            }
            Ok(_) => {}
        }
    }
    // `cluster up` reads the admin kubeconfig; by default the set's own.
    let kubeconfig = &config.orchestration.kubeconfig;
    if kubeconfig.starts_with(dir) && !kubeconfig.exists() {
        set.missing.push("auth/kubeconfig");
    }
    set
}

/// `check`'s findings about the ignition files, on `work` as the ignition directory.
fn check_work(
    file: &Path,
    cluster: Option<&str>,
    ignition_dir: &Path,
    work: &Path,
) -> Result<(), String> {
    let files = InWorkDir {
        from: ignition_dir.to_owned(),
        to: work.to_owned(),
        real: RealFiles {
            now: SystemTime::now(),
        },
    };
    let loaded = config::load_any(file, InstallCheck::Warn(&files))
        .map_err(|e| e.render(RenderStyle::Plain))?;
    let findings = |problems: &Problems| {
        let mut mine = Problems::new(problems.source().clone());
        for p in problems.iter() {
            if p.code().starts_with("config::ignition") {
                mine.push(p.clone());
            }
        }
        mine
    };
    let found = match &loaded {
        config::Target::Cluster(l) => findings(&l.warnings),
        config::Target::Host(host) => {
            let name = host
                .clusters
                .iter()
                .find(|m| Some(m.id.as_str()) == cluster)
                .or_else(|| host.clusters.first())
                .map(|m| m.name.clone())
                .unwrap_or_default();
            match host.warnings.problems().find(|p| p.file_name() == name) {
                Some(p) => findings(p),
                None => return Ok(()),
            }
        }
    };
    if found.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the new set does not match the config:\n{}",
            found.render(RenderStyle::Plain)
        ))
    }
}

/// The file system, with the ignition directory read from the work directory.
struct InWorkDir {
    from: PathBuf,
    to: PathBuf,
    real: RealFiles,
}

impl InWorkDir {
    fn map(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(&self.from) {
            Ok(rest) => self.to.join(rest),
            Err(_) => path.to_owned(),
        }
    }
}

impl InstallFiles for InWorkDir {
    fn age(&self, path: &Path) -> std::io::Result<std::time::Duration> {
        self.real.age(&self.map(path))
    }
    fn mode(&self, path: &Path) -> std::io::Result<u32> {
        self.real.mode(&self.map(path))
    }
    fn pair_secret(&self, path: &Path) -> Result<(), String> {
        self.real.pair_secret(&self.map(path))
    }
    fn read(&self, path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
        self.real.read(&self.map(path), max)
    }
    fn kubeconfig(&self, path: &Path) -> Result<Vec<u8>, String> {
        self.real.kubeconfig(&self.map(path))
    }
    fn now(&self) -> SystemTime {
        self.real.now
    }
}

/// The steps and the installer's output on stderr, under a progress line on a terminal.
struct Shown {
    bar: Option<ProgressBar>,
    step: String,
    started: Instant,
}

impl Shown {
    fn new() -> Shown {
        let bar = okd_appliance::terminal::stderr_progress().map(|target: ProgressDrawTarget| {
            let style = ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            ProgressBar::with_draw_target(None, target).with_style(style)
        });
        Shown {
            bar,
            step: String::new(),
            started: Instant::now(),
        }
    }

    fn print(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl create::Report for Shown {
    fn step(&mut self, step: create::Step, what: &str) {
        self.step = format!("[{}/{}] {what}", step.number(), create::Step::COUNT);
        self.started = Instant::now();
        self.print(&self.step);
        self.tick();
    }

    fn line(&mut self, line: &str) {
        self.print(&format!("  {line}"));
    }

    fn note(&mut self, note: &str) {
        self.print(&format!("  {note}"));
    }

    fn tick(&mut self) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!(
                "{} ({} s)",
                self.step,
                self.started.elapsed().as_secs()
            ));
            bar.tick();
        }
    }
}
