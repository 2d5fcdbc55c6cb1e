//! The one-shot requests to a running appliance's admin socket: `reload`, `lb
//! drain|undrain|status`, `node reinstall`, `ha check|notify|status`. Each sends one line and
//! prints the reply.
//!
//! Exit codes: 0 the appliance said ok, 1 it refused (or can't be reached, or the config is
//! invalid), 2 usage (also a node the appliance does not know).

use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};

use okd_appliance::operator::wire::{HaRequest, NodeOp, Reply, Request};

use super::Target;

#[derive(Debug, Subcommand)]
pub enum HaAction {
    /// keepalived's check: exit 0 when DNS answers at this host's own address and, on the
    /// active host, every load-balancer and boot-server listener accepts connections.
    Check {
        #[command(flatten)]
        target: Target,
    },
    /// keepalived's notify hook: this host became the active one, or the standby (DHCP and
    /// ignition answer only on the active host).
    #[command(override_usage = "okd-appliance ha notify <STATE> <FILE|--state-dir <STATE_DIR>>")]
    Notify {
        /// What this host became: `active` for keepalived's MASTER, `standby` for BACKUP,
        /// FAULT and stop (as the rendered keepalived.conf calls it).
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
pub enum HaState {
    Active,
    Standby,
}

#[derive(Debug, Subcommand)]
pub enum LbAction {
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

/// `lb drain|undrain NODE`, `lb status`.
pub fn lb(action: &LbAction) -> ExitCode {
    let (request, target) = match action {
        LbAction::Drain { node, target } => (Request::node(NodeOp::Drain, node), target),
        LbAction::Undrain { node, target } => (Request::node(NodeOp::Undrain, node), target),
        LbAction::Status { target } => (Request::LbStatus, target),
    };
    call(target, request)
}

/// `ha check`, `ha notify active|standby`, `ha status`.
pub fn ha(action: &HaAction) -> ExitCode {
    let (request, target) = match action {
        HaAction::Check { target } => (HaRequest::Health, target),
        HaAction::Notify { state, target } => (
            HaRequest::Set {
                active: matches!(state, HaState::Active),
            },
            target,
        ),
        HaAction::Status { target } => (HaRequest::Status, target),
    };
    call(target, Request::Ha(request))
}

/// `node reinstall NODE`.
pub fn reinstall(node: &str, target: &Target) -> ExitCode {
    call(target, Request::node(NodeOp::Reinstall, node))
}

/// `reload`.
pub fn reload(target: &Target) -> ExitCode {
    call(target, Request::Reload)
}

/// An `ok` reply's line and body; an error reply is printed, and its kind is the exit code
/// (2 for a node or cluster the appliance does not know, or no cluster named where several
/// are served, as `nodes` says it; else 1).
pub fn answered(reply: Reply) -> Result<(Option<String>, String), ExitCode> {
    match reply {
        Reply::Ok { line, body } => Ok((line, body)),
        Reply::Error { kind, .. } => {
            eprint!("{}", reply.text());
            Err(ExitCode::from(kind.exit_code()))
        }
    }
}

/// Says the admin socket of `state_dir` can't be reached: exit 1.
pub fn unreachable(state_dir: &std::path::Path, e: &std::io::Error) -> ExitCode {
    let socket = okd_appliance::operator::admin::socket_path(state_dir);
    eprintln!(
        "error: can't reach {}: {e} (is okd-appliance serve running with this state_dir? a changed state_dir takes a restart)",
        socket.display()
    );
    ExitCode::from(1)
}

/// Sends one request to the running appliance's admin socket and prints its reply.
fn call(target: &Target, request: Request) -> ExitCode {
    let appliance = match target.appliance() {
        Ok(a) => a,
        Err(code) => return code,
    };
    let state_dir = appliance.state_dir.as_path();
    match okd_appliance::operator::admin::call(state_dir, &appliance.ask(request)) {
        Ok(reply @ Reply::Ok { .. }) => {
            print!("{}", reply.text());
            ExitCode::SUCCESS
        }
        Ok(reply) => answered(reply).err().unwrap_or(ExitCode::FAILURE),
        Err(e) => unreachable(state_dir, &e),
    }
}
