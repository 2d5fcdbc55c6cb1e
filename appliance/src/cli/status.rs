//! `okd-appliance status FILE|--state-dir DIR [--json]`: the running appliance at a glance,
//! through its admin socket. Tables for people (colour only on a terminal), JSON for scripts.
//!
//! Exit codes: 0 shown, 1 the appliance can't be reached (or the config is invalid).

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, Color, Table};
use okd_appliance::operator::admin;
use okd_appliance::operator::status::Status;
use okd_appliance::operator::wire::{Addressed, Reply, Request};

use super::{Appliance, Target};

/// `status FILE|--state-dir DIR [--json]`.
pub fn command(target: &Target, json: bool) -> ExitCode {
    match target.appliance() {
        Ok(appliance) => run(&appliance, json),
        Err(code) => code,
    }
}

fn run(appliance: &Appliance, json: bool) -> ExitCode {
    if !appliance.names_a_cluster() {
        // An appliance serving several clusters: each one's status, one after the other.
        let ids = match clusters(appliance) {
            Ok(ids) => ids,
            Err(code) => return code,
        };
        if ids.len() > 1 {
            return every_cluster(appliance, &ids, json);
        }
    }
    one(appliance, json)
}

/// The ids of the clusters the appliance serves (one, unnamed, for an appliance too old to
/// answer `clusters`).
fn clusters(appliance: &Appliance) -> Result<Vec<String>, ExitCode> {
    let state_dir = appliance.state_dir.as_path();
    match admin::call(state_dir, &Addressed::new(None, Request::Clusters)) {
        Ok(Reply::Ok { body, .. }) => Ok(body.lines().map(str::to_owned).collect()),
        Ok(Reply::Error { .. }) => Ok(Vec::new()),
        Err(e) => Err(super::admin::unreachable(state_dir, &e)),
    }
}

/// Every cluster's status: a heading and its tables each, or one JSON object by id.
fn every_cluster(appliance: &Appliance, ids: &[String], json: bool) -> ExitCode {
    let mut all = serde_json::Map::new();
    for id in ids {
        let one = appliance.for_cluster(id);
        let reply = match admin::call(&one.state_dir, &one.ask(Request::Status)) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: cluster {id}'s status: {e}");
                return ExitCode::from(1);
            }
        };
        let body = match reply {
            Reply::Ok { body, .. } => body,
            Reply::Error { .. } => {
                eprint!("cluster {id}: {}", reply.text());
                return ExitCode::from(1);
            }
        };
        let status: serde_json::Value = match serde_json::from_str(&body) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("error: cluster {id}'s status does not read: {e}");
                return ExitCode::from(1);
            }
        };
        if !json {
            let Ok(status) = serde_json::from_value::<Status>(status.clone()) else {
                eprintln!("error: cluster {id}'s status does not read");
                return ExitCode::from(1);
            };
            let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            println!("== cluster {id}");
            print!("{}", render(&status, SystemTime::now(), colour));
        }
        all.insert(id.clone(), status);
    }
    if json {
        println!("{}", serde_json::Value::Object(all));
    }
    ExitCode::SUCCESS
}

fn one(appliance: &Appliance, json: bool) -> ExitCode {
    let state_dir = appliance.state_dir.as_path();
    let body = match admin::call(state_dir, &appliance.ask(Request::Status)) {
        Ok(reply) => match super::admin::answered(reply) {
            Ok((_, body)) => body,
            Err(code) => return code,
        },
        Err(e) => return super::admin::unreachable(state_dir, &e),
    };
    if json {
        print!("{body}");
        return ExitCode::SUCCESS;
    }
    match serde_json::from_str::<Status>(&body) {
        Ok(status) => {
            let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            print!("{}", render(&status, SystemTime::now(), colour));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: the appliance's status does not read: {e}");
            ExitCode::from(1)
        }
    }
}

/// `5m 3s ago`, or `-` for never.
pub fn ago(at: Option<u64>, now: SystemTime) -> String {
    let Some(at) = at else {
        return "-".to_owned();
    };
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "{} ago",
        humantime::format_duration(Duration::from_secs(now.saturating_sub(at)))
    )
}

fn state_colour(state: &str) -> Option<Color> {
    match state {
        "up" | "ready" | "installed" | "joined" => Some(Color::Green),
        "down" => Some(Color::Red),
        "draining" => Some(Color::Yellow),
        _ => None,
    }
}

fn cell(text: &str, colour: bool) -> Cell {
    let c = Cell::new(text);
    match state_colour(text).filter(|_| colour) {
        Some(col) => c.fg(col),
        None => c,
    }
}

fn render(s: &Status, now: SystemTime, colour: bool) -> String {
    let a = &s.appliance;
    let mut out = format!(
        "okd-appliance {}: up {}, plan {}{}\n",
        a.version,
        humantime::format_duration(Duration::from_secs(a.uptime_secs)),
        a.plan_serial,
        a.cluster_phase
            .as_ref()
            .map(|p| format!(", cluster {p}"))
            .unwrap_or_default()
    );
    if let Some(ha) = &a.ha {
        out.push_str(&format!(
            "pair: host {} is {}; replication {} ({} updates, last {})\n",
            ha.host,
            if ha.active { "active" } else { "standby" },
            if ha.replication_connected {
                "connected".to_owned()
            } else if ha.replication_waiting.is_empty() {
                "not connected".to_owned()
            } else {
                format!("not connected for {}", ha.replication_waiting.join(", "))
            },
            ha.replication_updates,
            ago(ha.last_update, now)
        ));
    }
    let listeners: Vec<String> = a
        .listeners
        .iter()
        .map(|l| format!("{}/{} {}", l.service, l.proto, l.addr))
        .collect();
    out.push_str(&format!("listeners: {}\n", listeners.join(", ")));
    for fault in &a.faults {
        out.push_str(&format!(
            "fault: {}\n",
            okd_appliance::operator::status::fault_line(
                fault,
                now.duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
            )
        ));
    }
    if let Some(e) = &a.endpoints {
        match &e.api_url {
            Some(url) => out.push_str(&format!(
                "status page and API: {url} (TLS and the token); locally {}\n",
                e.api_socket
            )),
            None => out.push_str(&format!(
                "API: {} (local socket; no api.listen)\n",
                e.api_socket
            )),
        }
        out.push_str(&format!("admin socket: {}\n", e.admin_socket));
    }
    if let Some(why) = &a.cluster_waiting {
        out.push_str(&format!("cluster waiting for {why}\n"));
    }

    let mut nodes = Table::new();
    nodes.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "node",
        "role",
        "address",
        "mac",
        "phase",
        "dhcp",
        "script",
        "kernel",
        "ignition",
        "installed",
        "waiting for",
    ]);
    for n in &s.nodes {
        nodes.add_row(vec![
            Cell::new(&n.name),
            Cell::new(&n.role),
            Cell::new(&n.ip),
            Cell::new(&n.mac),
            cell(&n.phase, colour),
            Cell::new(ago(n.dhcp, now)),
            Cell::new(ago(n.script, now)),
            Cell::new(ago(n.kernel, now)),
            Cell::new(ago(n.ignition, now)),
            Cell::new(ago(n.installed, now)),
            Cell::new(match (&n.waiting_for, &n.problem) {
                (Some(w), Some(p)) => format!("{w}\n{p}"),
                (None, Some(p)) => p.clone(),
                (Some(w), None) => w.clone(),
                (None, None) => "-".to_owned(),
            }),
        ]);
    }
    out.push_str(&format!("{nodes}\n"));
    // Frontends without a listener carry nothing: left out.
    let served: Vec<_> = s.backends.iter().filter(|b| b.state != "off").collect();
    if served.is_empty() {
        out.push_str("load balancer: no frontend listens\n");
    } else {
        let mut lb = Table::new();
        lb.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "frontend",
            "backend",
            "address",
            "state",
            "since",
            "last check",
            "active",
            "connections",
        ]);
        for b in served {
            lb.add_row(vec![
                Cell::new(&b.frontend),
                Cell::new(&b.node),
                Cell::new(b.addr),
                cell(&b.state, colour),
                Cell::new(ago(b.since, now)),
                Cell::new(b.check.as_ref().map_or_else(
                    || "-".to_owned(),
                    |c| {
                        format!(
                            "{} in {:.1} ms, {}",
                            if c.passed { "passed" } else { "failed" },
                            c.latency_us as f64 / 1000.0,
                            ago(Some(c.at), now)
                        )
                    },
                )),
                Cell::new(b.active),
                Cell::new(b.connections),
            ]);
        }
        out.push_str(&format!("{lb}\n"));
    }
    out
}
