//! The `okd-appliance` command line: check, render and serve one cluster config.
//!
//! Exit codes: 0 success, 1 invalid config or a failure while serving, 2 usage error.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use clap::{Parser, Subcommand, ValueEnum};
use okd_appliance::config::{self, RealFiles, RenderStyle};
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
    },
    /// Print what the appliance derives from a config: zones, reservations, pools, boot parameters.
    Render {
        file: PathBuf,
        /// `human` for reading; `bind`, `dnsmasq` or `haproxy` for the configs of those tools.
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
    Serve { file: PathBuf },
    /// Ask a running appliance's load balancer to drain a node, put it back, or report.
    Lb {
        #[command(subcommand)]
        action: LbAction,
        /// The `state_dir` of the running appliance (where its admin socket is).
        #[arg(long, global = true, default_value = "/var/lib/okd-appliance")]
        state_dir: PathBuf,
    },
    /// Manage a node of a running appliance.
    Node {
        #[command(subcommand)]
        action: NodeAction,
        /// The `state_dir` of the running appliance (where its admin socket is).
        #[arg(long, global = true, default_value = "/var/lib/okd-appliance")]
        state_dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum NodeAction {
    /// Install NODE again at its next network boot (its iPXE script stops booting the disk).
    Reinstall { node: String },
}

#[derive(Debug, Subcommand)]
enum LbAction {
    /// Stop sending new connections to NODE; open ones may finish until `lb.drain_timeout`.
    Drain { node: String },
    /// Put NODE back into rotation (it still has to pass its health checks).
    Undrain { node: String },
    /// Every backend with its state and counters.
    Status,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    Human,
    Bind,
    Dnsmasq,
    Haproxy,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Human => Format::Human,
            FormatArg::Bind => Format::Bind,
            FormatArg::Dnsmasq => Format::Dnsmasq,
            FormatArg::Haproxy => Format::Haproxy,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { file } => check(&file),
        Command::Render {
            file,
            format,
            output,
            serial,
        } => render(&file, format.into(), output.as_deref(), serial),
        Command::Serve { file } => serve(&file),
        Command::Lb { action, state_dir } => {
            let request = match &action {
                LbAction::Drain { node } => format!("lb drain {node}"),
                LbAction::Undrain { node } => format!("lb undrain {node}"),
                LbAction::Status => "lb status".to_owned(),
            };
            admin(&state_dir, &request)
        }
        Command::Node { action, state_dir } => match action {
            NodeAction::Reinstall { node } => admin(&state_dir, &format!("node reinstall {node}")),
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

fn load(file: &Path) -> Result<config::Loaded, ExitCode> {
    match config::load(
        file,
        &RealFiles {
            now: SystemTime::now(),
        },
    ) {
        Ok(loaded) => {
            if !loaded.warnings.is_empty() {
                eprint!("{}", loaded.warnings.render(style()));
            }
            Ok(loaded)
        }
        Err(e) => {
            eprint!("{}", e.render(style()));
            Err(ExitCode::from(1))
        }
    }
}

fn check(file: &Path) -> ExitCode {
    match load(file) {
        Ok(loaded) => {
            let c = &loaded.config;
            println!(
                "{}: ok: cluster {} with {} nodes",
                file.display(),
                c.cluster.domain(),
                c.nodes.len()
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn render(file: &Path, format: Format, output: Option<&Path>, serial: Option<u32>) -> ExitCode {
    let loaded = match load(file) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let serial = serial.unwrap_or_else(|| {
        let secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        u32::try_from(secs).unwrap_or(u32::MAX)
    });
    let plan = Plan::derive(&loaded.config, serial);
    let files = render::render(&plan, format);
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
            for f in &files {
                let path = dir.join(&f.file_name);
                if let Err(e) = std::fs::write(&path, &f.text) {
                    eprintln!("error: can't write {}: {e}", path.display());
                    return ExitCode::from(1);
                }
                println!("{}", path.display());
            }
        }
    }
    ExitCode::SUCCESS
}

/// Sends one request to the running appliance's admin socket and prints its reply.
fn admin(state_dir: &Path, request: &str) -> ExitCode {
    match okd_appliance::admin::call(state_dir, request) {
        Ok(reply) if reply.starts_with("ok") => {
            print!("{reply}");
            ExitCode::SUCCESS
        }
        Ok(reply) => {
            eprint!("{reply}");
            ExitCode::from(1)
        }
        Err(e) => {
            let socket = okd_appliance::admin::socket_path(state_dir);
            eprintln!(
                "error: can't reach {}: {e} (is okd-appliance serve running with this --state-dir?)",
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
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_target(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: can't start the async runtime: {e}");
            return ExitCode::from(1);
        }
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
            let mut msg = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            tracing::error!("{msg}");
            ExitCode::from(1)
        }
    }
}
