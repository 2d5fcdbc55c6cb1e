//! `okd-appliance cluster up|status|wait|scale|down`: the install orchestration of a running
//! appliance, through its admin socket.
//!
//! Exit codes: 0 done, 1 the appliance refused or can't be reached (or the orchestration
//! stopped short, for `wait`), 2 usage, 6 `wait` timed out.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::Subcommand;
use okd_appliance::operator::admin;
use okd_appliance::operator::wire::{ClusterRequest, Request};
use okd_appliance::orchestration::RunStatus;
use okd_appliance::orchestration::phases::{ClusterPhase, Step};

use super::{Appliance, Target};

#[derive(Debug, Subcommand)]
pub enum ClusterAction {
    /// Start the install, or resume it where it was (after a crash or a reboot).
    ///
    /// Named by its config, with `install.openshift_install` set: the ignition set is made
    /// first (as `ignition create`) when it is missing, or when bootstrap.ign is older than its
    /// certificates' 24 hours and no node has fetched its ignition yet.
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
        /// The phase: the bootstrap done (`openshift-install wait-for bootstrap-complete`'s
        /// point), or the whole install.
        #[arg(long = "for", value_enum, default_value_t = WaitFor::InstallComplete)]
        phase: WaitFor,
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

/// `cluster up|status|wait|scale|down`.
pub fn run(action: &ClusterAction) -> ExitCode {
    use std::time::Duration;
    let target = match action {
        ClusterAction::Up { target }
        | ClusterAction::Status { target, .. }
        | ClusterAction::Wait { target, .. }
        | ClusterAction::Scale { target, .. }
        | ClusterAction::Down { target, .. } => target,
    };
    let appliance = match target.appliance() {
        Ok(a) => a,
        Err(code) => return code,
    };
    let dir = &appliance;
    let quick = Duration::from_secs(10);
    match action {
        ClusterAction::Up { target } => {
            // With the config at hand, the ignition set is made first when it must be.
            if let Some(file) = target.file()
                && let Err(code) = super::installer::before_up(file, target.cluster())
            {
                return code;
            }
            request(dir, ClusterRequest::Up, quick)
        }
        ClusterAction::Status { json, .. } => status(dir, *json),
        ClusterAction::Wait { phase, timeout, .. } => wait(dir, *phase, *timeout),
        ClusterAction::Scale { workers, .. } => {
            request(dir, ClusterRequest::Scale(*workers), quick)
        }
        ClusterAction::Down { yes: false, .. } => {
            eprintln!(
                "error: down destroys every machine of the cluster and its disks: run it again with --yes to go ahead"
            );
            ExitCode::from(2)
        }
        ClusterAction::Down { yes: true, .. } => {
            request(dir, ClusterRequest::Down, Duration::from_secs(600))
        }
    }
}

/// The cluster phases `wait --for` can wait for, in install order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WaitFor {
    BootstrapComplete,
    InstallComplete,
}

/// One request; prints the reply's text (without its `ok`) or the error.
fn request(appliance: &Appliance, request: ClusterRequest, limit: Duration) -> ExitCode {
    match call(appliance, request, limit) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// The text of the reply to `request`: its `ok` line's, or its body.
fn call(
    appliance: &Appliance,
    request: ClusterRequest,
    limit: Duration,
) -> Result<String, ExitCode> {
    let state_dir = appliance.state_dir.as_path();
    match admin::call_waiting(state_dir, &appliance.ask(Request::Cluster(request)), limit) {
        Ok(reply) => match super::admin::answered(reply)? {
            (Some(line), body) => Ok(format!("{line}\n{body}")),
            (None, body) => Ok(body),
        },
        Err(e) => Err(super::admin::unreachable(state_dir, &e)),
    }
}

fn status_of(appliance: &Appliance) -> Result<(RunStatus, String), ExitCode> {
    let json = call(appliance, ClusterRequest::Status, Duration::from_secs(10))?;
    match serde_json::from_str(&json) {
        Ok(s) => Ok((s, json)),
        Err(e) => {
            eprintln!("error: the appliance's status does not read: {e}");
            Err(ExitCode::from(1))
        }
    }
}

fn status(appliance: &Appliance, json: bool) -> ExitCode {
    let (status, raw) = match status_of(appliance) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if json {
        print!("{raw}");
    } else {
        print!("{}", table(&status, SystemTime::now()));
    }
    ExitCode::SUCCESS
}

/// Waits until the cluster reached `target`; bounded by `timeout`.
fn wait(appliance: &Appliance, target: WaitFor, timeout: Duration) -> ExitCode {
    let want = match target {
        WaitFor::BootstrapComplete => ClusterPhase::BootstrapComplete,
        WaitFor::InstallComplete => ClusterPhase::Installed,
    };
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let status = match status_of(appliance) {
            Ok((s, _)) => s,
            Err(code) => return code,
        };
        if let Some(reached) = status.cluster.filter(|&p| p >= want) {
            println!("cluster phase {}", reached.name());
            return ExitCode::SUCCESS;
        }
        if let Some(why) = status.failed.as_ref().filter(|_| !status.running) {
            eprintln!(
                "error: the install stopped: {why} (fix it, then `{}`)",
                appliance.command("cluster up")
            );
            return ExitCode::from(1);
        }
        if !status.running {
            eprintln!(
                "error: no install is running (cluster phase {}): start one with `{}`",
                status.cluster.map_or("none", ClusterPhase::name),
                appliance.command("cluster up")
            );
            return ExitCode::from(1);
        }
        let line = format!(
            "cluster phase {}; waiting for {}",
            status.cluster.map_or("none", ClusterPhase::name),
            status.waiting_for.as_deref().unwrap_or("the next poll")
        );
        if line != last {
            eprintln!("{line}");
            last = line;
        }
        if start.elapsed() >= timeout {
            eprintln!(
                "error: not {} after {}",
                want.name(),
                humantime::format_duration(timeout)
            );
            return ExitCode::from(6);
        }
        std::thread::sleep(Duration::from_secs(2).min(timeout));
    }
}

/// The status for people: the cluster's phases, then one line per node with its timeline.
fn table(s: &RunStatus, now: SystemTime) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let state = if s.running {
        match &s.waiting_for {
            Some(w) => format!("running, waiting for {w}"),
            None => "running".to_owned(),
        }
    } else if let Some(why) = &s.failed {
        format!("stopped: {why}")
    } else if s.up_requested {
        "not running (an unfinished `cluster up`)".to_owned()
    } else {
        "idle".to_owned()
    };
    let _ = writeln!(
        out,
        "cluster: {} ({state})",
        s.cluster.map_or("not started", ClusterPhase::name)
    );
    if !s.cluster_steps.is_empty() {
        let _ = writeln!(out, "  {}", timeline(&s.cluster_steps));
    }
    if let Some(n) = s.workers_wanted {
        let _ = writeln!(out, "workers wanted: {n}");
    }
    // Every column as wide as its widest cell, so long values never shift the others.
    let mut rows: Vec<[String; 5]> = vec![[
        "NODE".into(),
        "ROLE".into(),
        "PHASE".into(),
        "SINCE".into(),
        "TIMELINE".into(),
    ]];
    rows.extend(s.nodes.iter().map(|n| {
        let since = n
            .steps
            .last()
            .map(|st| ago(st.at, now))
            .unwrap_or_else(|| "-".into());
        [
            n.name.clone(),
            n.role.as_str().to_owned(),
            n.phase.name().to_owned(),
            since,
            timeline(&n.steps),
        ]
    }));
    // At least the widths of the usual values (roles, phases, "59m ago"); wider when needed.
    let mut widths = [4usize, 9, 13, 9];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for [name, role, phase, since, line] in &rows {
        let _ = writeln!(
            out,
            "{name:<w0$}  {role:<w1$}  {phase:<w2$}  {since:<w3$}  {line}",
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
        );
    }
    out
}

/// `created 12:00:01, powered-on +2s, dhcp +19s, ...`: when it started, then how long each
/// step took.
fn timeline<P: std::fmt::Display>(steps: &[Step<P>]) -> String {
    let mut parts = Vec::with_capacity(steps.len());
    let mut previous: Option<u64> = None;
    for st in steps {
        match previous {
            None => parts.push(format!(
                "{} {}",
                st.phase,
                humantime::format_rfc3339_seconds(
                    SystemTime::UNIX_EPOCH + Duration::from_secs(st.at)
                )
            )),
            Some(p) => parts.push(format!(
                "{} +{}",
                st.phase,
                humantime::format_duration(Duration::from_secs(st.at.saturating_sub(p)))
            )),
        }
        previous = Some(st.at);
    }
    parts.join(", ")
}

fn ago(at: u64, now: SystemTime) -> String {
    super::status::ago(Some(at), now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_each_nodes_timeline() {
        // As the admin socket answers it.
        let s: RunStatus = serde_json::from_str(
            r#"{"cluster":"bootstrap-complete",
                "cluster_steps":[{"phase":"bootstrapping","at":1000},{"phase":"bootstrap-complete","at":2260}],
                "running":true,"up_requested":true,
                "waiting_for":"2 connections to bootstrap to end","failed":null,"workers_wanted":null,
                "nodes":[{"name":"master-0","role":"master","phase":"dhcp",
                          "steps":[{"phase":"created","at":1000},{"phase":"dhcp","at":1065}]}]}"#,
        )
        .unwrap();
        // Long values widen their column instead of pushing the next ones out of line.
        let mut long = s.clone();
        long.nodes[0].name = "a-rather-long-worker-name-7".into();
        let text = table(&long, SystemTime::UNIX_EPOCH + Duration::from_secs(400_000));
        let lines: Vec<&str> = text.lines().skip(2).collect();
        let timeline_at: Vec<Option<usize>> = lines
            .iter()
            .map(|l| l.find("TIMELINE").or_else(|| l.find("created")))
            .collect();
        assert_eq!(timeline_at[0], timeline_at[1], "{text}");
        assert!(lines[1].contains("4days 14h"), "{text}");
        let text = table(&s, SystemTime::UNIX_EPOCH + Duration::from_secs(1_125));
        assert_eq!(
            text,
            "cluster: bootstrap-complete (running, waiting for 2 connections to bootstrap to end)\n  \
             bootstrapping 1970-01-01T00:16:40Z, bootstrap-complete +21m\n\
             NODE      ROLE       PHASE          SINCE      TIMELINE\n\
             master-0  master     dhcp           1m ago     created 1970-01-01T00:16:40Z, dhcp +1m 5s\n"
        );
    }
}
