//! `okd-appliance nodes list|create|start|stop|reset|destroy [NAME...] FILE`: the control
//! module from the command line, one progress line per node as each result comes. On a
//! terminal that can redraw a line, an indicatif spinner on stderr says what is still waited
//! for: the machines not done yet, the time so far and the longest each may take (for `stop`,
//! the shutdown timeout after which a machine is forced off, and how much of it is left). It
//! draws through `okd_appliance::terminal` rather than indicatif's stderr target, which hides
//! bars under `NO_COLOR`. Each action is also told to a running appliance (its admin socket's
//! `machine` request), whose journal, phases and status page then show it.
//!
//! Exit codes: 0 every node done, 1 invalid config or no provider, 2 usage (unknown node,
//! destroy without --yes), and when nodes fail, the highest of: 3 an action failed (refused,
//! task failed, privilege missing, machine absent), 4 the provider could not be reached or
//! refused TLS or the credentials, 5 a machine contradicts the config (another MAC, a VM ID
//! taken; nothing changed), 6 a wait timed out.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressState, ProgressStyle};

use okd_appliance::config::{self, InstallCheck, Provider as ProviderConfig, RealFiles};
use okd_appliance::control::{
    self, Action, AnyProvider, ControlError, NodeReport, Outcome, Provider,
};
use okd_appliance::journal::{EventKind, Journal};
use okd_appliance::operator::wire::{Addressed, Reply, Request};
use okd_appliance::plan::Plan;
use okd_appliance::plan::machines::{ControlPlan, ControlTimeouts, MachineSpec};

#[derive(Debug, Subcommand)]
pub enum NodesAction {
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
pub struct NodeTargets {
    /// The nodes to act on (all when none is named), then the cluster config (YAML) or a host
    /// file.
    #[arg(value_name = "[NAME]... FILE", required = true, num_args = 1..)]
    args: Vec<String>,
    /// With a host file of several clusters: the cluster whose machines these are, by its id.
    #[arg(long, value_name = "ID")]
    cluster: Option<String>,
}

/// `nodes ACTION [NAME]... FILE`.
pub fn command(action: NodesAction) -> ExitCode {
    let (verb, targets, yes) = match action {
        NodesAction::List(t) => (Verb::List, t, false),
        NodesAction::Create(t) => (Verb::Create, t, false),
        NodesAction::Start(t) => (Verb::Start, t, false),
        NodesAction::Stop(t) => (Verb::Stop, t, false),
        NodesAction::Reset(t) => (Verb::Reset, t, false),
        NodesAction::Destroy { targets, yes } => (Verb::Destroy, targets, yes),
    };
    run(
        verb,
        (&targets.args, targets.cluster.as_deref()),
        yes,
        super::style(),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
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

/// `args` is `[NAME...] FILE`; `cluster`, the cluster of a host file.
fn run(
    verb: Verb,
    (args, cluster): (&[String], Option<&str>),
    yes: bool,
    style: config::RenderStyle,
) -> ExitCode {
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
    let loaded = match config::load_any(
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
    let (config, appliance) = match super::one_cluster(loaded, cluster, file) {
        Ok(one) => {
            let appliance = Appliance {
                state_dir: one.state_dir,
                cluster: one.id,
            };
            (one.config, appliance)
        }
        Err(code) => return code,
    };
    let plan = Plan::derive(&config, 1).control;
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
            Ok(Some(provider)) => act(&Arc::new(provider), &plan, &machines, verb, appliance).await,
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
    appliance: Appliance,
) -> ExitCode {
    let journal = Journal::new();
    // Progress comes from the journal, so what is printed is what was recorded.
    let mut events = journal.subscribe();
    // What is still being waited for and how long that may take (a graceful stop waits up to
    // the shutdown timeout, a provider that never answers up to the request timeout, with
    // nothing else to show): a line redrawn on a terminal, else a line now and then.
    let mut waiting = Waiting::start(verb, machines, &plan.timeouts, &provider.describe());
    let printer = tokio::spawn(async move {
        let mut told = Told::default();
        let mut causes = Causes::default();
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + STILL_WAITING, STILL_WAITING);
        loop {
            let event = tokio::select! {
                event = events.recv() => match event {
                    Ok(event) => event,
                    Err(_) => break,
                },
                _ = tick.tick() => {
                    waiting.still();
                    continue;
                }
            };
            if verb != Verb::List
                && let (Some(node), EventKind::Machine { action, result }) =
                    (&event.node, &event.kind)
            {
                told.note(appliance.tell(node, action, result).await);
            }
            let (Some(node), EventKind::Machine { action, result }) = (&event.node, &event.kind)
            else {
                continue;
            };
            // `list` prints its table at the end; the others a line per result as it comes,
            // a cause already said once naming the node it was said for.
            let print = || match result {
                _ if verb == Verb::List => {}
                Ok(_) => println!("{event}"),
                Err(why) => match causes.first(why, node) {
                    Some(first) => eprintln!("{node}: {action} failed: as for {first}"),
                    None => eprintln!("{event}"),
                },
            };
            waiting.done(node, print);
        }
        waiting.finish();
        told.say(&appliance);
    });
    if verb == Verb::List {
        println!("{plan}");
    }
    let reports = control::run(provider, machines, verb.action(), &plan.timeouts, &journal).await;
    drop(journal);
    let _ = printer.await;
    if verb == Verb::List {
        list(machines, &reports);
    }
    summarize(&reports, verb)
}

/// `nodes list`'s table: each machine and its state; a failure's cause once, after the table,
/// with every node it concerns (one unreachable provider is one line, not one per node).
fn list(machines: &[MachineSpec], reports: &[NodeReport]) {
    let mut causes: Vec<(String, Vec<&str>)> = Vec::new();
    for (m, report) in machines.iter().zip(reports) {
        println!("{m}");
        match &report.result {
            Ok(Outcome::Status(status)) => println!("  {status}"),
            Ok(other) => println!("  {other}"),
            Err(e) => {
                println!("  status unknown: see below");
                let why = e.to_string();
                match causes.iter_mut().find(|(c, _)| *c == why) {
                    Some((_, nodes)) => nodes.push(&m.node),
                    None => causes.push((why, vec![&m.node])),
                }
            }
        }
    }
    for (why, nodes) in causes {
        eprintln!("{}: status failed: {why}", nodes.join(", "));
    }
}

/// Each failure's text and the first node it was said for.
#[derive(Default)]
struct Causes(Vec<(String, String)>);

impl Causes {
    /// The node `why` was said for before, or `None` (and it is noted for `node`).
    fn first(&mut self, why: &str, node: &str) -> Option<String> {
        if let Some((_, first)) = self.0.iter().find(|(w, _)| w == why) {
            return Some(first.clone());
        }
        self.0.push((why.to_owned(), node.to_owned()));
        None
    }
}

/// The running appliance serving this config, if any: each machine action is recorded in its
/// journal too (through its admin socket), where it moves the node's install phase and shows
/// on its status page, as the orchestration's own actions do.
struct Appliance {
    state_dir: std::path::PathBuf,
    /// The cluster's id, when the appliance serves a host file.
    cluster: Option<String>,
}

/// What telling the appliance of one action came to.
enum Telling {
    Told,
    /// No appliance runs with this `state_dir` (no socket, or nobody answers it).
    NotRunning,
    Failed(String),
}

impl Appliance {
    /// Sends `machine NODE ACTION ok|failed TEXT`, the text on one line and cut to fit the
    /// socket's request limit.
    async fn tell(
        &self,
        node: &str,
        action: &'static str,
        result: &Result<String, String>,
    ) -> Telling {
        const ROOM: usize = 900;
        let request = Addressed::new(
            self.cluster.as_deref(),
            Request::machine(node, action, result.clone(), ROOM),
        );
        let state_dir = self.state_dir.clone();
        let sent = tokio::task::spawn_blocking(move || {
            okd_appliance::operator::admin::call(&state_dir, &request)
        })
        .await;
        match sent {
            Ok(Ok(Reply::Ok { .. })) => Telling::Told,
            Ok(Ok(reply)) => Telling::Failed(reply.text().trim().to_owned()),
            Ok(Err(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) =>
            {
                Telling::NotRunning
            }
            Ok(Err(e)) => Telling::Failed(e.to_string()),
            Err(e) => Telling::Failed(e.to_string()),
        }
    }
}

/// How telling the appliance went, said once at the end.
#[derive(Default)]
struct Told {
    told: usize,
    failed: Option<String>,
}

impl Told {
    fn note(&mut self, telling: Telling) {
        match telling {
            Telling::Told => self.told += 1,
            Telling::NotRunning => {}
            Telling::Failed(why) => {
                self.failed.get_or_insert(why);
            }
        }
    }

    fn say(&self, appliance: &Appliance) {
        let socket = okd_appliance::operator::admin::socket_path(&appliance.state_dir);
        if let Some(why) = &self.failed {
            eprintln!(
                "note: the running appliance's journal ({}) was not told of every action: {why}",
                socket.display()
            );
        } else if self.told > 0 {
            println!(
                "recorded in the running appliance's journal ({})",
                socket.display()
            );
        }
    }
}

/// How often, off a terminal, a line says what is still waited for.
const STILL_WAITING: Duration = Duration::from_secs(5);

/// What the command waits for: the machines not done yet and how long each may take (for a
/// stop, the shutdown timeout after which a machine is forced off, and how much of it is left).
/// On a terminal (stderr) a spinner line; elsewhere a line every [`STILL_WAITING`] while
/// machines are left, so a provider that accepts and never answers is never silence.
struct Waiting {
    /// `None`: not a terminal.
    bar: Option<ProgressBar>,
    /// The machines not done yet, in config order.
    left: Vec<String>,
    verb: Verb,
    timeouts: ControlTimeouts,
    /// The provider, as its lines name it.
    provider: String,
    since: std::time::Instant,
}

impl Waiting {
    fn start(
        verb: Verb,
        machines: &[MachineSpec],
        timeouts: &ControlTimeouts,
        provider: &str,
    ) -> Waiting {
        let left: Vec<String> = machines.iter().map(|m| m.node.clone()).collect();
        Waiting {
            bar: Waiting::bar(verb, timeouts, &left),
            left,
            verb,
            timeouts: *timeouts,
            provider: provider.to_owned(),
            since: std::time::Instant::now(),
        }
    }

    fn bar(verb: Verb, timeouts: &ControlTimeouts, left: &[String]) -> Option<ProgressBar> {
        let target = okd_appliance::terminal::stderr_progress()?;
        let timeouts = *timeouts;
        let style = ProgressStyle::with_template(TEMPLATE)
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .with_key(
                "deadline",
                move |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                    let _ = out.write_str(&deadline(verb, state.elapsed(), &timeouts));
                },
            );
        // Hidden until it has its words, so the first line drawn is whole.
        let bar = ProgressBar::hidden().with_style(style);
        bar.set_prefix(prefix(verb));
        bar.set_message(waiting_for(left));
        bar.set_draw_target(target);
        bar.enable_steady_tick(Duration::from_millis(200));
        Some(bar)
    }

    /// `node`'s result came: `print` writes its line (above the spinner).
    fn done(&mut self, node: &str, print: impl FnOnce()) {
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
        if let Some(at) = self.left.iter().position(|n| n == node) {
            self.left.remove(at);
        }
        if let Some(bar) = &self.bar {
            bar.set_message(waiting_for(&self.left));
        }
    }

    /// Off a terminal, while machines are left: `list: still waiting for proxmox node pve1 at
    /// URL (5s; each request up to 30s): master-0, worker-0`.
    fn still(&self) {
        if self.bar.is_some() || self.left.is_empty() {
            return;
        }
        let elapsed = Duration::from_secs(self.since.elapsed().as_secs());
        eprintln!(
            "{}: still waiting for {} ({}{}): {}",
            prefix(self.verb),
            self.provider,
            humantime::format_duration(elapsed),
            deadline(self.verb, elapsed, &self.timeouts),
            waiting_for(&self.left)
        );
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

fn prefix(verb: Verb) -> &'static str {
    match verb {
        Verb::Stop => "stop: shutting down",
        Verb::List => "list",
        other => other.action().name(),
    }
}

/// `⠙ stop: shutting down (12s; forced off after 2m, 1m 48s left): master-0, worker-0`; the
/// names are cut at the terminal's width, so the line never wraps.
const TEMPLATE: &str = "{spinner} {prefix} ({elapsed}{deadline}): {wide_msg}";

/// How long each machine may take: for a stop, the shutdown timeout after which it is forced
/// off and how much of it is left (whole seconds, rounded up: the elapsed time beside it is
/// rounded down); for a list, the request timeout (it only asks); otherwise the provider task
/// timeout.
fn deadline(verb: Verb, elapsed: Duration, timeouts: &ControlTimeouts) -> String {
    let secs = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
    if verb == Verb::List {
        return format!("; each request up to {}", secs(timeouts.request));
    }
    if verb != Verb::Stop {
        return format!("; each task up to {}", secs(timeouts.task));
    }
    let left = timeouts.shutdown.saturating_sub(elapsed);
    if left.is_zero() {
        return format!(
            "; forced off after {}: forcing off",
            secs(timeouts.shutdown)
        );
    }
    let up = Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() > 0));
    format!(
        "; forced off after {}, {} left",
        secs(timeouts.shutdown),
        secs(up)
    )
}

/// The machines not done yet: the first three by name, then how many more.
fn waiting_for(left: &[String]) -> String {
    const NAMED: usize = 3;
    match left.len() {
        0 => "the last results".to_owned(),
        n if n <= NAMED => left.join(", "),
        n => format!("{} and {} more", left[..NAMED].join(", "), n - NAMED),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts() -> ControlTimeouts {
        ControlTimeouts {
            request: Duration::from_secs(30),
            task: Duration::from_secs(600),
            shutdown: Duration::from_secs(300),
        }
    }

    #[test]
    fn the_line_says_how_long_each_machine_may_take() {
        let t = timeouts();
        let stop = |ms| deadline(Verb::Stop, Duration::from_millis(ms), &t);
        assert_eq!(stop(0), "; forced off after 5m, 5m left");
        assert_eq!(stop(500), "; forced off after 5m, 5m left");
        assert_eq!(stop(12_500), "; forced off after 5m, 4m 48s left");
        assert_eq!(stop(299_500), "; forced off after 5m, 1s left");
        assert_eq!(stop(300_000), "; forced off after 5m: forcing off");
        assert_eq!(stop(400_000), "; forced off after 5m: forcing off");
        assert_eq!(
            deadline(Verb::Create, Duration::from_secs(30), &t),
            "; each task up to 10m"
        );
    }

    #[test]
    fn the_line_names_the_machines_not_done_yet() {
        let names: Vec<String> = ["master-0", "master-1", "master-2", "worker-0", "worker-1"]
            .map(String::from)
            .to_vec();
        assert_eq!(waiting_for(&names[..2]), "master-0, master-1");
        assert_eq!(
            waiting_for(&names),
            "master-0, master-1, master-2 and 2 more"
        );
        assert_eq!(waiting_for(&[]), "the last results");
    }

    #[test]
    fn the_template_parses() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
    }
}
