//! The `okd-appliance` command line: check, render and serve one cluster config, fetch the
//! CoreOS artifacts it serves, drive its machines and its install, and talk to the running
//! appliance. This file only parses and dispatches: each command family is a file of `cli/`.
//!
//! Exit codes: 0 success, 1 invalid config or a failure while serving, 2 usage error; `nodes`
//! and `cluster wait` add their own (see their files).

mod cli;

use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Command, NodeAction};

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Check {
            file,
            secret_files: true,
            ..
        } => cli::check::secret_files(&file),
        Command::Check { file, install, .. } => cli::check::check(&file, install),
        Command::Render {
            file,
            cluster,
            format,
            output,
            serial,
        } => cli::render::run(&file, cluster.as_deref(), format, output.as_deref(), serial),
        Command::Serve { file } => cli::serve::run(&file),
        Command::Reload { target } => cli::admin::reload(&target),
        Command::Lb { action } => cli::admin::lb(&action),
        Command::Artifacts { action } => cli::artifacts::run(action),
        Command::Installer { action } => cli::installer::fetch(action),
        Command::Ignition { action } => cli::installer::ignition(action),
        Command::Nodes { action } => cli::nodes::command(action),
        Command::Cluster { action } => cli::cluster::run(&action),
        Command::Status { target, json } => cli::status::command(&target, json),
        Command::Ha { action } => cli::admin::ha(&action),
        Command::Node { action } => match action {
            NodeAction::Reinstall { node, target } => cli::admin::reinstall(&node, &target),
            NodeAction::Kargs {
                node,
                file,
                pxe,
                cluster,
            } => cli::check::node_kargs(&node, &file, pxe, cluster.as_deref()),
        },
    }
}
