//! The `okd-appliance` command line: check, render and serve one cluster config, and fetch the
//! CoreOS artifacts it serves.
//!
//! Exit codes: 0 success, 1 invalid config or a failure while serving, 2 usage error.

mod cluster_cmd;
mod nodes_cmd;
mod status_cmd;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use clap::{Args, Parser, Subcommand, ValueEnum};
use okd_appliance::artifacts::{self, StreamSource};
use okd_appliance::config::{self, InstallCheck, RealFiles, RenderStyle};
use okd_appliance::http::iso::IsoCheck;
use okd_appliance::plan::Plan;
use okd_appliance::render::{self, Format};
use okd_appliance::supervisor::{self, ServeError};

#[derive(Debug, Parser)]
#[command(name = "okd-appliance", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a cluster config and list every problem with its line and column.
    Check {
        /// The cluster config (YAML).
        file: PathBuf,
        /// Also require what installing nodes needs: the ignition files of every role present,
        /// and a bootstrap.ign younger than 24 hours while a bootstrap node is listed (without
        /// it these are warnings: they never stop DNS, DHCP or the load balancer).
        #[arg(long)]
        install: bool,
        /// Print only the secret files the config names (API key and token, the pair's secret,
        /// provider credentials, the kubeconfig), one absolute path a line, whatever their
        /// mode: for provisioning that gives them to the service account with mode 0600.
        #[arg(long, conflicts_with = "install")]
        secret_files: bool,
    },
    /// Print what the appliance derives from a config: zones, reservations, pools, boot parameters.
    Render {
        /// The cluster config (YAML).
        file: PathBuf,
        /// `human` for reading; `bind`, `dnsmasq` or `haproxy` for the configs of those tools;
        /// `networkd` for the services host's own cluster NIC (a systemd-networkd file);
        /// `install-config` for openshift-install's install-config.yaml (written owner-only:
        /// it holds the pull secret).
        #[arg(long, value_enum, default_value_t = FormatArg::Human)]
        format: FormatArg,
        /// Write each output file into this directory instead of printing it.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// The SOA serial to write (default: seconds since the epoch, as `serve` uses).
        #[arg(long)]
        serial: Option<u32>,
    },
    /// Serve DNS, DHCP, the load balancer and the boot files for the cluster.
    Serve {
        /// The cluster config (YAML); `reload` or SIGHUP reads it again.
        file: PathBuf,
    },
    /// Make the running appliance re-read its config, and say what happened: exit 0 when it
    /// serves the new plan (or the config is unchanged), 1 when it keeps the previous plan
    /// (an invalid config, or a change that takes a restart).
    Reload {
        #[command(flatten)]
        target: Target,
    },
    /// Ask a running appliance's load balancer to drain a node, put it back, or report.
    Lb {
        #[command(subcommand)]
        action: LbAction,
    },
    /// Put the CoreOS PXE files into `install.artifacts_dir`, verified against the stream.
    ///
    /// The kernel, initramfs and rootfs (and with --metal the metal disk image, with --iso the
    /// live ISO) of one architecture, as a CoreOS stream metadata JSON lists them; each is
    /// checked against the stream's SHA-256 before it gets its configured name.
    Artifacts {
        #[command(subcommand)]
        action: ArtifactsAction,
    },
    /// Create, start, stop, reset or destroy the cluster's machines through `control.provider`.
    ///
    /// Exit codes: 0 done, 1 invalid config, 2 usage; when nodes fail, the highest of 3 (an
    /// action failed), 4 (provider unreachable, TLS or credentials refused), 5 (a machine
    /// contradicts the config; nothing changed), 6 (timeout).
    Nodes {
        #[command(subcommand)]
        action: NodesAction,
    },
    /// Manage a node of a running appliance.
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
    /// The running appliance at a glance: every node's reservation, last DHCP exchange, files
    /// fetched and install phase; every load-balancer backend; listeners, plan, uptime.
    Status {
        #[command(flatten)]
        target: Target,
        /// JSON, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// One of a pair of appliances: keepalived's check and notify hooks, and its state.
    Ha {
        #[command(subcommand)]
        action: HaAction,
    },
    /// Drive the install through the running appliance: create and boot the machines, wait for
    /// bootstrap, drain and remove the bootstrap node, start the workers, approve the known
    /// nodes' certificate requests, wait for the cluster operators.
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
    },
}

#[derive(Debug, Subcommand)]
enum HaAction {
    /// keepalived's check: exit 0 when DNS answers at this host's own address and, on the
    /// active host, every load-balancer and boot-server listener accepts connections.
    Check {
        #[command(flatten)]
        target: Target,
    },
    /// keepalived's notify hook: this host became the active one, or the standby (DHCP and
    /// ignition answer only on the active host).
    Notify {
        #[arg(value_enum)]
        state: HaState,
        #[command(flatten)]
        target: Target,
    },
    /// Whether this host is the active one.
    Status {
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum HaState {
    Active,
    Standby,
}

#[derive(Debug, Subcommand)]
enum ClusterAction {
    /// Start the install, or resume it where it was (after a crash or a reboot).
    Up {
        #[command(flatten)]
        target: Target,
    },
    /// Each node's install phase and how long each step took; the cluster's phase.
    Status {
        #[command(flatten)]
        target: Target,
        /// The status as JSON, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Wait until the cluster reached a phase (exit 1 when the install stops, 6 on timeout).
    Wait {
        #[command(flatten)]
        target: Target,
        #[arg(long = "for", value_enum, default_value_t = cluster_cmd::WaitFor::InstallComplete)]
        phase: cluster_cmd::WaitFor,
        /// How long to wait at most, e.g. `40m`.
        #[arg(long, default_value = "2h", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Bring WORKERS of the configured workers (in config order) into the cluster.
    Scale {
        /// How many of the configured workers the cluster should have (the first WORKERS).
        #[arg(long)]
        workers: usize,
        #[command(flatten)]
        target: Target,
    },
    /// Destroy every machine of the cluster through the provider and forget the install.
    Down {
        /// Required: the machines and their disks are gone afterwards.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Debug, Subcommand)]
enum ArtifactsAction {
    /// Download the files, verify them, put them in place.
    ///
    /// A `.part` left by an interrupted run is continued; a file already in place with the
    /// right SHA-256 is skipped; a file with the wrong one is deleted and the exit code is 1.
    Fetch {
        #[command(flatten)]
        args: ArtifactsArgs,
    },
    /// Copy files downloaded by other means, verifying each.
    ///
    /// The files are looked up in DIR under their names on the mirror (the last part of their
    /// URL in the stream).
    Import {
        #[command(flatten)]
        args: ArtifactsArgs,
        /// The directory holding the downloaded files.
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
    },
}

#[derive(Debug, Args)]
struct ArtifactsArgs {
    /// The cluster config (YAML): where the files go (`install.artifacts_dir`) and their names.
    file: PathBuf,
    /// The CoreOS stream metadata, a URL or a file, e.g.
    /// https://builds.coreos.fedoraproject.org/streams/stable.json
    #[arg(long, value_name = "URL|FILE", value_parser = parse_stream)]
    stream: StreamSource,
    /// The architecture, as the stream names it.
    #[arg(long, default_value = "x86_64")]
    arch: String,
    /// Also the metal disk image (raw.xz), kept under its name on the mirror.
    #[arg(long)]
    metal: bool,
    /// Also the live ISO, under `install.artifacts.iso` (default live.iso): the base of the
    /// per-node ISOs served at /iso/<node>.iso.
    #[arg(long)]
    iso: bool,
    /// Also check each file's detached OpenPGP signature against this key file (armored or
    /// binary; Fedora CoreOS: https://fedoraproject.org/fedora.gpg), with gpgv. Signatures come
    /// from the stream's URLs (fetch) or `<name>.sig` beside each file (import), and are kept
    /// beside the artifacts as `<name>.sig`.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

fn parse_stream(arg: &str) -> Result<StreamSource, String> {
    StreamSource::parse(arg).map_err(|e| format!("{e:#}"))
}

/// Which running appliance to talk to: the one serving a config file (its `state_dir`, relative
/// to the file), or the one whose state directory is named.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct Target {
    /// The cluster config the appliance serves.
    file: Option<PathBuf>,
    /// The running appliance's `state_dir` (where its admin socket is), instead of a config.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

impl Target {
    /// The state directory: from the flag, or from the config (which must be valid).
    fn state_dir(&self) -> Result<PathBuf, ExitCode> {
        match (&self.state_dir, &self.file) {
            (Some(dir), _) => Ok(dir.clone()),
            (None, Some(file)) => Ok(load(file, InstallCheck::Skip)?.config.state_dir),
            (None, None) => unreachable!("clap requires one of them"),
        }
    }
}

#[derive(Debug, Subcommand)]
enum NodesAction {
    /// Every node's machine as the config describes it, and its state at the provider.
    List(NodeTargets),
    /// Create the machines that don't exist (MAC, disk, NIC, boot order, ISO); check the others.
    Create(NodeTargets),
    /// Power the machines on.
    Start(NodeTargets),
    /// Shut the machines down (ACPI), forcing them off after `control.timeouts.shutdown`.
    Stop(NodeTargets),
    /// Hard-reset running machines.
    Reset(NodeTargets),
    /// Remove the machines, their disks and their ISOs.
    Destroy {
        #[command(flatten)]
        targets: NodeTargets,
        /// Yes, remove them.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Args)]
struct NodeTargets {
    /// The nodes to act on (all when none is named), then the cluster config (YAML).
    #[arg(value_name = "[NAME]... FILE", required = true, num_args = 1..)]
    args: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum NodeAction {
    /// Install NODE again at its next network boot (its iPXE script stops booting the disk).
    #[command(
        override_usage = "okd-appliance node reinstall <NODE> <FILE|--state-dir <STATE_DIR>>"
    )]
    Reinstall {
        /// The node to install again (as named in the config).
        node: String,
        #[command(flatten)]
        target: Target,
    },
    /// Print the kernel arguments to type at NODE's live ISO boot prompt (those that
    /// /iso/NODE.iso has built in); with --pxe, the whole line of its PXE boot.
    Kargs {
        node: String,
        /// The cluster config (YAML).
        file: PathBuf,
        /// The arguments of the live PXE kernel instead (with coreos.live.rootfs_url).
        #[arg(long)]
        pxe: bool,
    },
}

#[derive(Debug, Subcommand)]
enum LbAction {
    /// Stop sending new connections to NODE; open ones may finish until `lb.drain_timeout`.
    #[command(override_usage = "okd-appliance lb drain <NODE> <FILE|--state-dir <STATE_DIR>>")]
    Drain {
        /// The node whose backends leave the pools (as named in the config).
        node: String,
        #[command(flatten)]
        target: Target,
    },
    /// Put NODE back into rotation (it still has to pass its health checks).
    #[command(override_usage = "okd-appliance lb undrain <NODE> <FILE|--state-dir <STATE_DIR>>")]
    Undrain {
        /// The node whose backends come back (as named in the config).
        node: String,
        #[command(flatten)]
        target: Target,
    },
    /// Every backend with its state and counters.
    Status {
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    Human,
    Bind,
    Dnsmasq,
    Haproxy,
    Networkd,
    Keepalived,
    InstallConfig,
}

impl FormatArg {
    /// The plan renderer, or `None` for `networkd` (the host's set-up, not the plan).
    fn plan_format(self) -> Option<Format> {
        match self {
            FormatArg::Human => Some(Format::Human),
            FormatArg::Bind => Some(Format::Bind),
            FormatArg::Dnsmasq => Some(Format::Dnsmasq),
            FormatArg::Haproxy => Some(Format::Haproxy),
            FormatArg::Networkd | FormatArg::Keepalived | FormatArg::InstallConfig => None,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            file,
            secret_files: true,
            ..
        } => secret_files(&file),
        Command::Check { file, install, .. } => check(&file, install),
        Command::Render {
            file,
            format,
            output,
            serial,
        } => render(&file, format, output.as_deref(), serial),
        Command::Serve { file } => serve(&file),
        Command::Reload { target } => admin(&target, "reload"),
        Command::Lb { action } => {
            let (request, target) = match &action {
                LbAction::Drain { node, target } => (format!("lb drain {node}"), target),
                LbAction::Undrain { node, target } => (format!("lb undrain {node}"), target),
                LbAction::Status { target } => ("lb status".to_owned(), target),
            };
            admin(target, &request)
        }
        Command::Artifacts { action } => artifacts(action),
        Command::Nodes { action } => {
            use nodes_cmd::Verb;
            let (verb, targets, yes) = match action {
                NodesAction::List(t) => (Verb::List, t, false),
                NodesAction::Create(t) => (Verb::Create, t, false),
                NodesAction::Start(t) => (Verb::Start, t, false),
                NodesAction::Stop(t) => (Verb::Stop, t, false),
                NodesAction::Reset(t) => (Verb::Reset, t, false),
                NodesAction::Destroy { targets, yes } => (Verb::Destroy, targets, yes),
            };
            nodes_cmd::run(verb, &targets.args, yes, style())
        }
        Command::Cluster { action } => cluster(&action),
        Command::Status { target, json } => match target.state_dir() {
            Ok(dir) => status_cmd::run(&dir, json),
            Err(code) => code,
        },
        Command::Ha { action } => match &action {
            HaAction::Check { target } => admin(target, "ha health"),
            HaAction::Notify { state, target } => admin(
                target,
                match state {
                    HaState::Active => "ha set active",
                    HaState::Standby => "ha set standby",
                },
            ),
            HaAction::Status { target } => admin(target, "ha status"),
        },
        Command::Node { action } => match action {
            NodeAction::Reinstall { node, target } => {
                admin(&target, &format!("node reinstall {node}"))
            }
            NodeAction::Kargs { node, file, pxe } => node_kargs(&node, &file, pxe),
        },
    }
}

fn style() -> RenderStyle {
    if std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
        RenderStyle::Color
    } else {
        RenderStyle::Plain
    }
}

fn real_files() -> RealFiles {
    RealFiles {
        now: SystemTime::now(),
    }
}

/// Loads the config for a command; its warnings as one line (`check` lists them: see
/// [`load_listing_warnings`]), errors in full.
fn load(file: &Path, files: InstallCheck<'_>) -> Result<config::Loaded, ExitCode> {
    let loaded = load_quietly(file, files)?;
    eprint!("{}", loaded.warnings.warnings_line());
    Ok(loaded)
}

/// [`load`] for `check`: every warning in full.
fn load_listing_warnings(file: &Path, files: InstallCheck<'_>) -> Result<config::Loaded, ExitCode> {
    let loaded = load_quietly(file, files)?;
    if !loaded.warnings.is_empty() {
        eprint!("{}", loaded.warnings.render(style()));
    }
    Ok(loaded)
}

fn load_quietly(file: &Path, files: InstallCheck<'_>) -> Result<config::Loaded, ExitCode> {
    match config::load(file, files) {
        Ok(loaded) => Ok(loaded),
        Err(e) => {
            eprint!("{}", e.render(style()));
            Err(ExitCode::from(1))
        }
    }
}

/// `check --secret-files`: the config's secret files, absolute. Their modes are not looked at
/// (this is how a too-open file gets fixed).
fn secret_files(file: &Path) -> ExitCode {
    let loaded = match load(file, InstallCheck::Skip) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    for (_, path) in config::secret_files(&loaded.config) {
        match std::path::absolute(&path) {
            Ok(p) => println!("{}", p.display()),
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}

fn check(file: &Path, install: bool) -> ExitCode {
    let files = real_files();
    let mode = if install {
        InstallCheck::Require(&files)
    } else {
        InstallCheck::Warn(&files)
    };
    let loaded = match load_listing_warnings(file, mode) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let c = &loaded.config;
    // The per-node ISOs are checked when the base ISO is in place (the ISO install path is
    // optional). Like the ignition files, an unusable ISO never stops a running cluster's
    // services: a warning, an error only with --install.
    let iso = match okd_appliance::http::iso::check(&Plan::derive(c, 0)) {
        IsoCheck::Absent(_) => None,
        IsoCheck::Ready(summary) => Some(summary),
        IsoCheck::Problems(problems) => {
            let severity = if install { "error" } else { "warning" };
            for p in problems {
                eprintln!("{severity}: {p}");
            }
            if install {
                return ExitCode::from(1);
            }
            None
        }
    };
    // What the nodes' boots will fetch from here: present? (An error only with --install, as
    // for the ignition files: a running cluster's services never depend on them.)
    let missing = okd_appliance::http::preflight::missing(&Plan::derive(c, 0));
    for m in &missing {
        let severity = if install { "error" } else { "warning" };
        eprintln!("{severity}: {m}: a node that asks for it gets 404");
    }
    if install && !missing.is_empty() {
        eprintln!(
            "hint: `okd-appliance artifacts fetch {}` puts the CoreOS artifacts in place",
            file.display()
        );
        return ExitCode::from(1);
    }
    println!(
        "{}: ok: cluster {} with {} nodes",
        file.display(),
        c.cluster.domain(),
        c.nodes.len()
    );
    if let Some(node) = c.single_node() {
        println!(
            "single-node cluster: {} boots the live system with {} and installs itself (bootstrap in place); {}",
            node.name,
            okd_appliance::vocabulary::RoleConfig::SingleNode.file(),
            match c.lb.single_node {
                config::SingleNodeRouting::Direct =>
                    "api, api-int and *.apps resolve to it (lb.single_node: direct)",
                config::SingleNodeRouting::Proxied =>
                    "api, api-int and *.apps resolve to the appliance, which balances to it (lb.single_node: proxied)",
            }
        );
    }
    if let Some(summary) = iso {
        println!("{summary}");
    }
    ExitCode::SUCCESS
}

/// `node kargs NODE FILE`: the node's kernel arguments, one line, exactly as served.
fn node_kargs(node: &str, file: &Path, pxe: bool) -> ExitCode {
    // Like the artifacts, this is useful before the ignition configs exist.
    let loaded = match load(file, InstallCheck::Skip) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let plan = Plan::derive(&loaded.config, 0);
    let Some(boot) = plan.boot.iter().find(|b| b.node == node) else {
        let names: Vec<&str> = plan.boot.iter().map(|b| b.node.as_str()).collect();
        eprintln!(
            "error: no node `{node}` in {} (nodes: {})",
            file.display(),
            names.join(", ")
        );
        return ExitCode::from(1);
    };
    let args = if pxe {
        &boot.kernel_args
    } else {
        &boot.iso_kernel_args
    };
    println!("{}", args.join(" "));
    ExitCode::SUCCESS
}

fn render(file: &Path, format: FormatArg, output: Option<&Path>, serial: Option<u32>) -> ExitCode {
    // Zones, pools and reservations have nothing to do with the ignition files.
    let loaded = match load(file, InstallCheck::Skip) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let files = if let FormatArg::InstallConfig = format {
        let rendered = okd_appliance::install_config::Inputs::read(&loaded.config)
            .and_then(|inputs| okd_appliance::install_config::render(&loaded.config, &inputs));
        match rendered {
            Ok(text) => vec![render::Rendered {
                file_name: okd_appliance::install_config::FILE_NAME.into(),
                text,
            }],
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    } else if let FormatArg::Keepalived = format {
        match keepalived(&loaded.config) {
            Ok(files) => files,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    } else if let Some(format) = format.plan_format() {
        let serial = serial.unwrap_or_else(|| {
            let secs = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            u32::try_from(secs).unwrap_or(u32::MAX)
        });
        render::render(&Plan::derive(&loaded.config, serial), format)
    } else {
        match okd_appliance::host_network::networkd(&loaded.config) {
            Ok(text) => vec![render::Rendered {
                file_name: okd_appliance::host_network::FILE_NAME.into(),
                text,
            }],
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    };
    match output {
        None => {
            for f in &files {
                print!("{}", f.text);
            }
        }
        Some(dir) => {
            if let Err(e) = std::fs::create_dir_all(dir) {
                eprintln!("error: can't create {}: {e}", dir.display());
                return ExitCode::from(1);
            }
            // keepalived's files hold the VRRP password, the install-config the pull secret:
            // owner-only.
            let mode = if let FormatArg::Keepalived | FormatArg::InstallConfig = format {
                0o600
            } else {
                0o644
            };
            for f in &files {
                let path = dir.join(&f.file_name);
                if let Err(e) = write_mode(&path, &f.text, mode) {
                    eprintln!("error: can't write {}: {e}", path.display());
                    return ExitCode::from(1);
                }
                println!("{}", path.display());
            }
        }
    }
    ExitCode::SUCCESS
}

/// Writes `text` to `path` with `mode`, also when the file is already there with another.
fn write_mode(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.write_all(text.as_bytes())
}

/// keepalived's config for both hosts of the pair, naming this binary and the state directory
/// by their absolute paths, with the VRRP password derived from the pair's secret.
fn keepalived(config: &config::Config) -> Result<Vec<render::Rendered>, String> {
    let ha = config
        .ha
        .as_ref()
        .ok_or("the config has no ha section: keepalived is for a pair of appliances")?;
    let keys =
        okd_appliance::secrets::PairKeys::read(&ha.secret_file).map_err(|e| e.to_string())?;
    let binary = std::env::current_exe().map_err(|e| format!("can't find this binary: {e}"))?;
    let state_dir = std::path::absolute(&config.state_dir)
        .map_err(|e| format!("{}: {e}", config.state_dir.display()))?;
    render::keepalived::render(
        &Plan::derive(config, 0),
        &binary,
        &state_dir,
        &keys.vrrp_password,
    )
}

/// `artifacts fetch` and `artifacts import`.
fn artifacts(action: ArtifactsAction) -> ExitCode {
    let (args, from) = match action {
        ArtifactsAction::Fetch { args } => (args, None),
        ArtifactsAction::Import { args, from } => (args, Some(from)),
    };
    // The artifacts are usually fetched before `openshift-install create ignition-configs`
    // (whose output expires in 24 hours), so the ignition files are not required here.
    let loaded = match load(&args.file, config::InstallCheck::Skip) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let install = &loaded.config.install;
    let options = artifacts::Options {
        stream: args.stream,
        arch: args.arch,
        metal: args.metal,
        iso: args.iso,
        key: args.key,
    };
    // One download at a time: a current-thread runtime is all it needs.
    let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let result = runtime.block_on(async {
        match &from {
            None => artifacts::fetch(install, &options).await,
            Some(dir) => artifacts::import(install, &options, dir).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn cluster(action: &ClusterAction) -> ExitCode {
    use std::time::Duration;
    let target = match action {
        ClusterAction::Up { target }
        | ClusterAction::Status { target, .. }
        | ClusterAction::Wait { target, .. }
        | ClusterAction::Scale { target, .. }
        | ClusterAction::Down { target, .. } => target,
    };
    let state_dir = match target.state_dir() {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    let dir = state_dir.as_path();
    let quick = Duration::from_secs(10);
    match action {
        ClusterAction::Up { .. } => cluster_cmd::request(dir, "cluster up", quick),
        ClusterAction::Status { json, .. } => cluster_cmd::status(dir, *json),
        ClusterAction::Wait { phase, timeout, .. } => cluster_cmd::wait(dir, *phase, *timeout),
        ClusterAction::Scale { workers, .. } => {
            cluster_cmd::request(dir, &format!("cluster scale {workers}"), quick)
        }
        ClusterAction::Down { yes: false, .. } => {
            eprintln!(
                "error: down destroys every machine of the cluster and its disks: run it again with --yes to go ahead"
            );
            ExitCode::from(2)
        }
        ClusterAction::Down { yes: true, .. } => {
            cluster_cmd::request(dir, "cluster down", Duration::from_secs(600))
        }
    }
}

/// Sends one request to the running appliance's admin socket and prints its reply.
fn admin(target: &Target, request: &str) -> ExitCode {
    let state_dir = match target.state_dir() {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    let state_dir = state_dir.as_path();
    match okd_appliance::operator::admin::call(state_dir, request) {
        Ok(reply) if reply.starts_with("ok") => {
            print!("{reply}");
            ExitCode::SUCCESS
        }
        // A node the appliance does not know: a usage error, 2, as `nodes` says it.
        Ok(reply) if reply.starts_with("error: no ") => {
            eprint!("{reply}");
            ExitCode::from(2)
        }
        Ok(reply) => {
            eprint!("{reply}");
            ExitCode::from(1)
        }
        Err(e) => {
            let socket = okd_appliance::operator::admin::socket_path(state_dir);
            eprintln!(
                "error: can't reach {}: {e} (is okd-appliance serve running with this state_dir? a changed state_dir takes a restart)",
                socket.display()
            );
            ExitCode::from(1)
        }
    }
}

fn serve(file: &Path) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // kube's client logs every failed connection as an error; an API that is not
                // up yet is normal for the first minutes of an install, and `cluster status`
                // says what the orchestration waits for.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_client=off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_target(false)
        .init();
    let runtime = match runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(supervisor::serve(file)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(ServeError::Config(e)) => {
            eprint!("{}", e.render(style()));
            ExitCode::from(1)
        }
        Err(ServeError::Bind(errors)) => {
            for e in &errors {
                tracing::error!("{e}");
            }
            tracing::error!("nothing is served: every listener must bind first");
            ExitCode::from(1)
        }
        Err(e) => {
            // Each error's message leaves its cause to `source()`: `{:#}` prints the chain once.
            tracing::error!("{:#}", anyhow::Error::new(e));
            ExitCode::from(1)
        }
    }
}

/// Builds a tokio runtime with I/O and timers, or says why not (exit code 1).
fn runtime(mut builder: tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("error: can't start the async runtime: {e}");
        ExitCode::from(1)
    })
}
