//! The `okd-appliance` command line's shape and what its commands share: the clap types of the
//! top-level commands (each family's subcommands live in its own file), the running appliance a
//! command talks to (`Target`), loading the config with its warnings, the error style, the
//! tokio runtime. The families: `check.rs` (check, node kargs), `render.rs`, `serve.rs`,
//! `artifacts.rs`, `admin.rs` (reload, lb, node reinstall, ha: one admin-socket request each),
//! `cluster.rs`, `nodes.rs`, `status.rs`. A family's subcommand types live in its file
//! (`cluster.rs`'s `ClusterAction`), and the CLI reads the library's own types back from the
//! admin socket (`orchestration::RunStatus`, `operator::status::Status`) rather than mirroring
//! them.
//!
//! Exit codes shared by every command: 0 success, 1 invalid config (or a failure), 2 usage
//! error; each family's file lists its own.

pub mod admin;
pub mod artifacts;
pub mod check;
pub mod cluster;
pub mod installer;
pub mod nodes;
pub mod render;
pub mod serve;
pub mod status;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use clap::{Args, Parser, Subcommand};
use okd_appliance::config::{self, InstallCheck, RealFiles, RenderStyle};
use okd_appliance::operator::wire::{Addressed, Request};

use admin::{HaAction, LbAction};
use artifacts::ArtifactsAction;
use cluster::ClusterAction;
use nodes::NodesAction;
use render::FormatArg;

#[derive(Debug, Parser)]
#[command(name = "okd-appliance", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a cluster config and list every problem with its line and column.
    Check {
        /// The cluster config (YAML), or a host file that lists several clusters' configs.
        file: PathBuf,
        /// Also require what installing nodes needs: the ignition files of every role present,
        /// a bootstrap.ign younger than 24 hours while a bootstrap node is listed, every
        /// artifact the boots fetch (hashed against what `artifacts fetch` verified), the
        /// kubeconfig `cluster up` reads, and a provider that answers for every machine
        /// (without it the file findings are warnings: they never stop DNS, DHCP or the load
        /// balancer).
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
        /// The cluster config (YAML), or a host file that lists several clusters' configs.
        file: PathBuf,
        /// With a host file: render this cluster (its id) in any format, as its own file
        /// renders; without it a host file renders as human, bind or haproxy, for every cluster.
        #[arg(long, value_name = "ID")]
        cluster: Option<String>,
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
    /// The openshift-install of the configured release, fetched into the state directory.
    Installer {
        #[command(subcommand)]
        action: installer::InstallerAction,
    },
    /// The ignition set, made from the config by openshift-install.
    Ignition {
        #[command(subcommand)]
        action: installer::IgnitionAction,
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

/// Which running appliance to talk to, and which of its clusters.
#[derive(Debug, Args)]
pub struct Target {
    #[command(flatten)]
    at: Where,
    /// The cluster to ask about, by its id in the host file: needed only when the appliance
    /// serves several.
    #[arg(long, value_name = "ID")]
    cluster: Option<String>,
}

/// The appliance serving a config file (its `state_dir`, relative to the file), or the one
/// whose state directory is named.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct Where {
    /// The config the appliance serves: a cluster config, or a host file.
    file: Option<PathBuf>,
    /// The running appliance's `state_dir` (where its admin socket is), instead of a config.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

/// A running appliance's admin socket, and the cluster the requests are for.
#[derive(Debug)]
pub struct Appliance {
    pub state_dir: PathBuf,
    cluster: Option<String>,
    /// How the command line named it: the config file, or `--state-dir DIR`.
    named: String,
}

impl Appliance {
    /// Whether `--cluster` named one.
    pub fn names_a_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The same appliance, asked about cluster `id`.
    pub fn for_cluster(&self, id: &str) -> Appliance {
        Appliance {
            state_dir: self.state_dir.clone(),
            cluster: Some(id.to_owned()),
            named: self.named.clone(),
        }
    }

    /// The command line of `okd-appliance COMMAND` for this appliance and cluster, as a hint
    /// names it: `okd-appliance cluster up lab.yml --cluster b`.
    pub fn command(&self, command: &str) -> String {
        let cluster = self
            .cluster
            .as_deref()
            .map(|id| format!(" --cluster {id}"))
            .unwrap_or_default();
        format!("okd-appliance {command} {}{cluster}", self.named)
    }

    /// `request` addressed to the named cluster, if one is.
    pub fn ask(&self, request: Request) -> Addressed {
        Addressed::new(self.cluster.as_deref(), request)
    }
}

impl Target {
    /// The config file it names, when it names one rather than a state directory.
    pub fn file(&self) -> Option<&Path> {
        self.at.file.as_deref()
    }

    /// The cluster `--cluster` names.
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// The appliance: its state directory from the flag, or from the config (which must be
    /// valid; a host file's cluster ids are checked against `--cluster` here).
    fn appliance(&self) -> Result<Appliance, ExitCode> {
        let (state_dir, named) = match (&self.at.state_dir, &self.at.file) {
            (Some(dir), _) => (dir.clone(), format!("--state-dir {}", dir.display())),
            (None, Some(file)) => (self.state_dir_of(file)?, file.display().to_string()),
            (None, None) => unreachable!("clap requires one of them"),
        };
        Ok(Appliance {
            state_dir,
            cluster: self.cluster.clone(),
            named,
        })
    }

    fn state_dir_of(&self, file: &Path) -> Result<PathBuf, ExitCode> {
        match config::load_any(file, InstallCheck::Skip) {
            Ok(config::Target::Cluster(loaded)) => {
                eprint!("{}", loaded.warnings.warnings_line());
                Ok(loaded.config.state_dir)
            }
            Ok(config::Target::Host(host)) => {
                eprint!("{}", host.warnings.warnings_line());
                let ids: Vec<&str> = host.clusters.iter().map(|m| m.id.as_str()).collect();
                if let Some(id) = self.cluster.as_deref().filter(|id| !ids.contains(id)) {
                    eprintln!(
                        "error: {} has no cluster {id} (its clusters: {})",
                        file.display(),
                        ids.join(", ")
                    );
                    return Err(ExitCode::from(2));
                }
                Ok(host.state_dir)
            }
            Err(e) => {
                eprint!("{}", e.render(style()));
                Err(ExitCode::from(1))
            }
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum NodeAction {
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
        /// The node, as named in the config.
        node: String,
        /// The cluster config (YAML), or a host file.
        file: PathBuf,
        /// The arguments of the live PXE kernel instead (with coreos.live.rootfs_url).
        #[arg(long)]
        pxe: bool,
        /// With a host file of several clusters: the node's cluster, by its id.
        #[arg(long, value_name = "ID")]
        cluster: Option<String>,
    },
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
/// One cluster of a config file: its config, the state directory of the appliance serving it,
/// and its id when that appliance serves a host file.
struct OneCluster {
    config: config::Config,
    state_dir: PathBuf,
    id: Option<String>,
}

/// The cluster `--cluster` names in a host file (or its only one), or a cluster file's (whose
/// name `cluster`, when given, must be). Warnings as one line; a usage error exits 2.
fn one_cluster(
    loaded: config::Target,
    cluster: Option<&str>,
    file: &str,
) -> Result<OneCluster, ExitCode> {
    match loaded {
        config::Target::Cluster(loaded) => {
            eprint!("{}", loaded.warnings.warnings_line());
            if let Some(id) = cluster.filter(|id| **id != loaded.config.cluster.name) {
                eprintln!(
                    "error: {file} is cluster {}'s config, not {id}'s",
                    loaded.config.cluster.name
                );
                return Err(ExitCode::from(2));
            }
            Ok(OneCluster {
                state_dir: loaded.config.state_dir.clone(),
                config: loaded.config,
                id: None,
            })
        }
        config::Target::Host(host) => {
            eprint!("{}", host.warnings.warnings_line());
            let ids: Vec<String> = host.clusters.iter().map(|m| m.id.clone()).collect();
            let picked = match (cluster, host.clusters.len()) {
                (Some(id), _) => host.clusters.into_iter().find(|m| m.id == id),
                (None, 1) => host.clusters.into_iter().next(),
                (None, _) => {
                    eprintln!(
                        "error: {file} lists several clusters ({}): name one with --cluster ID",
                        ids.join(", ")
                    );
                    return Err(ExitCode::from(2));
                }
            };
            let Some(member) = picked else {
                eprintln!(
                    "error: {file} has no cluster {} (its clusters: {})",
                    cluster.unwrap_or_default(),
                    ids.join(", ")
                );
                return Err(ExitCode::from(2));
            };
            Ok(OneCluster {
                config: member.config,
                state_dir: host.state_dir,
                id: Some(member.id),
            })
        }
    }
}

/// [`one_cluster`] of the file at `file`, loaded with `files`.
fn load_one_cluster(
    file: &Path,
    cluster: Option<&str>,
    files: InstallCheck<'_>,
) -> Result<OneCluster, ExitCode> {
    match config::load_any(file, files) {
        Ok(loaded) => one_cluster(loaded, cluster, &file.display().to_string()),
        Err(e) => {
            eprint!("{}", e.render(style()));
            Err(ExitCode::from(1))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ha_notify_shows_its_arguments_in_the_order_it_takes_them() {
        use clap::CommandFactory as _;
        let mut cli = Cli::command();
        let notify = cli
            .find_subcommand_mut("ha")
            .and_then(|ha| ha.find_subcommand_mut("notify"))
            .unwrap();
        let usage = notify.render_usage().to_string();
        assert!(
            usage.contains("ha notify <STATE> <FILE|--state-dir"),
            "{usage}"
        );
        let parsed = Cli::try_parse_from(["okd-appliance", "ha", "notify", "active", "lab.yml"]);
        assert!(parsed.is_ok(), "{parsed:?}");
    }

    #[test]
    fn every_command_and_argument_says_what_it_is() {
        use clap::CommandFactory as _;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                let path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() {
                    missing.push(path.clone());
                }
                for arg in sub.get_arguments().filter(|a| a.get_id() != "help") {
                    if arg.get_help().is_none() && arg.get_long_help().is_none() {
                        missing.push(format!("{path} <{}>", arg.get_id()));
                    }
                }
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "okd-appliance", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }

    #[test]
    fn a_hint_names_the_appliance_as_the_command_line_did() {
        let by_file = Appliance {
            state_dir: PathBuf::from("/var/lib/okd-appliance"),
            cluster: None,
            named: "lab.yml".into(),
        };
        assert_eq!(
            by_file.command("cluster up"),
            "okd-appliance cluster up lab.yml"
        );
        let by_dir = Appliance {
            named: "--state-dir /var/lib/okd-appliance".into(),
            ..by_file
        };
        assert_eq!(
            by_dir.for_cluster("b").command("cluster up"),
            "okd-appliance cluster up --state-dir /var/lib/okd-appliance --cluster b"
        );
    }
}
