//! `okd-appliance nodes list|create|start|stop|reset|destroy [NAME...] FILE`: the control
//! module from the command line, one progress line per node as each result comes.
//!
//! Exit codes: 0 every node done, 1 invalid config or no provider, 2 usage (unknown node,
//! destroy without --yes), and when nodes fail, the highest of: 3 an action failed (refused,
//! task failed, privilege missing, machine absent), 4 the provider could not be reached or
//! refused TLS or the credentials, 5 a machine contradicts the config (another MAC, a VM ID
//! taken; nothing changed), 6 a wait timed out.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use okd_appliance::config::{self, InstallCheck, Provider as ProviderConfig, RealFiles};
use okd_appliance::control::{
    self, Action, AnyProvider, ControlError, NodeReport, Outcome, Provider,
};
use okd_appliance::journal::{EventKind, Journal};
use okd_appliance::plan::Plan;
use okd_appliance::plan::machines::{ControlPlan, MachineSpec};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    List,
    Create,
    Start,
    Stop,
    Reset,
    Destroy,
}

impl Verb {
    fn action(self) -> Action {
        match self {
            Verb::List => Action::Status,
            Verb::Create => Action::Ensure,
            Verb::Start => Action::PowerOn,
            Verb::Stop => Action::PowerOff,
            Verb::Reset => Action::Reset,
            Verb::Destroy => Action::Destroy,
        }
    }
}

/// `args` is `[NAME...] FILE`.
pub fn run(verb: Verb, args: &[String], yes: bool, style: config::RenderStyle) -> ExitCode {
    let Some((file, names)) = args.split_last() else {
        eprintln!("error: the cluster config file is missing");
        return ExitCode::from(2);
    };
    if verb == Verb::Destroy && !yes {
        eprintln!(
            "error: destroy removes the VMs and their disks: run it again with --yes to go ahead"
        );
        return ExitCode::from(2);
    }
    let loaded = match config::load(
        Path::new(file),
        // Machines are made before or after `openshift-install create ignition-configs`: the
        // ignition files need not exist yet; credential files are checked for real.
        InstallCheck::Machines(&RealFiles {
            now: std::time::SystemTime::now(),
        }),
    ) {
        Ok(l) => l,
        Err(e) => {
            eprint!("{}", e.render(style));
            return ExitCode::from(1);
        }
    };
    eprint!("{}", loaded.warnings.warnings_line());
    let plan = Plan::derive(&loaded.config, 1).control;
    let machines = match select(&plan, names) {
        Ok(m) => m,
        Err(code) => return code,
    };
    if plan.provider == ProviderConfig::None {
        if verb == Verb::List {
            println!("{plan}");
            for m in &machines {
                println!("{m}");
            }
            return ExitCode::SUCCESS;
        }
        eprintln!(
            "error: {file}: control.provider is none, so okd-appliance creates no machines: set control.provider (e.g. proxmox)"
        );
        return ExitCode::from(1);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: can't start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async {
        match AnyProvider::from_plan(&plan) {
            Ok(Some(provider)) => act(&Arc::new(provider), &plan, &machines, verb).await,
            Ok(None) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(e.kind().exit_code())
            }
        }
    })
}

/// The named machines in config order, or all of them; an unknown name is a usage error.
fn select(plan: &ControlPlan, names: &[String]) -> Result<Vec<MachineSpec>, ExitCode> {
    if names.is_empty() {
        return Ok(plan.machines.clone());
    }
    let unknown: Vec<&String> = names.iter().filter(|n| plan.machine(n).is_none()).collect();
    if !unknown.is_empty() {
        let known: Vec<&str> = plan.machines.iter().map(|m| m.node.as_str()).collect();
        eprintln!(
            "error: no node named {} in the config (it has {})",
            unknown
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
            known.join(", ")
        );
        return Err(ExitCode::from(2));
    }
    Ok(plan
        .machines
        .iter()
        .filter(|m| names.contains(&m.node))
        .cloned()
        .collect())
}

async fn act<P: Provider>(
    provider: &Arc<P>,
    plan: &ControlPlan,
    machines: &[MachineSpec],
    verb: Verb,
) -> ExitCode {
    let journal = Journal::new();
    // Progress comes from the journal, so what is printed is what was recorded.
    let mut events = journal.subscribe();
    // On a terminal, what is still being waited for and how long that may take (a graceful
    // stop waits up to the shutdown timeout with nothing else to show).
    let waiting = (verb != Verb::List)
        .then(|| waiting_line(verb, machines.len(), &plan.timeouts))
        .flatten();
    let total = machines.len();
    let printer = (verb != Verb::List).then(|| {
        let waiting = waiting.clone();
        tokio::spawn(async move {
            let mut left = total;
            while let Ok(event) = events.recv().await {
                if let EventKind::Machine { result, .. } = &event.kind {
                    let print = || {
                        if result.is_ok() {
                            println!("{event}");
                        } else {
                            eprintln!("{event}");
                        }
                    };
                    match &waiting {
                        Some(bar) => {
                            bar.suspend(print);
                            left = left.saturating_sub(1);
                            bar.set_message(format!("{left} left"));
                        }
                        None => print(),
                    }
                }
            }
        })
    });
    if verb == Verb::List {
        println!("{plan}");
    }
    let reports = control::run(provider, machines, verb.action(), &plan.timeouts, &journal).await;
    drop(journal);
    if let Some(printer) = printer {
        let _ = printer.await;
    }
    if let Some(bar) = &waiting {
        bar.finish_and_clear();
    }
    if verb == Verb::List {
        for (m, report) in machines.iter().zip(&reports) {
            println!("{m}");
            match &report.result {
                Ok(Outcome::Status(status)) => println!("  {status}"),
                Ok(other) => println!("  {other}"),
                Err(e) => eprintln!("  {}: status failed: {e}", m.node),
            }
        }
    }
    summarize(&reports, verb)
}

/// The line that says what is being waited for, on a terminal only (a spinner on stderr);
/// `None` elsewhere, where each node's result line is the progress.
fn waiting_line(
    verb: Verb,
    machines: usize,
    timeouts: &okd_appliance::plan::machines::ControlTimeouts,
) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal as _;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let what = match verb {
        Verb::Stop => format!(
            "asking {machines} machine(s) to shut down; forced off after {} each",
            humantime::format_duration(timeouts.shutdown)
        ),
        _ => format!(
            "waiting for {machines} machine(s); each provider task may take up to {}",
            humantime::format_duration(timeouts.task)
        ),
    };
    let bar = indicatif::ProgressBar::new_spinner().with_style(
        indicatif::ProgressStyle::with_template("{spinner} {prefix} ({elapsed}; {msg})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.set_prefix(what);
    bar.set_message(format!("{machines} left"));
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(bar)
}

fn summarize(reports: &[NodeReport], verb: Verb) -> ExitCode {
    let failed: Vec<&ControlError> = reports
        .iter()
        .filter_map(|r| r.result.as_ref().err())
        .collect();
    let changed = reports
        .iter()
        .filter(|r| matches!(r.result, Ok(Outcome::Changed(_))))
        .count();
    if verb != Verb::List {
        println!(
            "{} node{}: {changed} changed, {} unchanged, {} failed",
            reports.len(),
            if reports.len() == 1 { "" } else { "s" },
            reports.len() - changed - failed.len(),
            failed.len()
        );
    }
    match failed.iter().map(|e| e.kind()).max() {
        None => ExitCode::SUCCESS,
        Some(kind) => ExitCode::from(kind.exit_code()),
    }
}
