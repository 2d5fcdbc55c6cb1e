//! The operator wing's one dispatcher: a decoded [`Request`] done on an [`Operator`], with a
//! typed outcome. The admin socket decodes its line into a [`Request`] and encodes the outcome
//! as a [`Reply`] (`Reply::from`); the HTTP API decodes its method and path into the same
//! [`Request`] (`Request::from_api`) and answers the outcome with a status from the error's
//! type (`OpError::http_status`). Neither front does an operation itself (firecracker's
//! `VmmAction` behind its API and socket).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::wire::{ClusterRequest, HaRequest, Reply, Request};
use super::{Clusters, OpError, Operator};
use crate::journal::Journal;
use crate::lb::pool::Pools;
use crate::orchestration::Orchestrator;

/// What a request that succeeded answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// One line saying what was done (`ok: LINE`).
    Done(String),
    /// Data lines, after an optional summary line.
    Lines { line: Option<String>, body: String },
    /// A JSON document (`status`, `cluster status`).
    Json(String),
}

impl Answer {
    fn done(outcome: Result<impl std::fmt::Display, OpError>) -> Result<Answer, OpError> {
        outcome.map(|done| Answer::Done(done.to_string()))
    }

    fn lines(body: String) -> Answer {
        Answer::Lines { line: None, body }
    }

    fn json<T: serde::Serialize>(value: &T) -> Result<Answer, OpError> {
        serde_json::to_string(value)
            .map(Answer::Json)
            .map_err(|e| OpError::Failed(e.to_string()))
    }
}

impl From<Result<Answer, OpError>> for Reply {
    fn from(outcome: Result<Answer, OpError>) -> Reply {
        match outcome {
            Ok(Answer::Done(line)) => Reply::line(line),
            Ok(Answer::Lines { line, body }) => Reply::Ok { line, body },
            Ok(Answer::Json(json)) => Reply::body(format!("{json}\n")),
            Err(e) => Reply::of::<String>(Err(e)),
        }
    }
}

/// Does `request` with cluster `op` of `clusters`.
pub async fn perform(
    clusters: &Clusters,
    op: &Operator,
    request: Request,
) -> Result<Answer, OpError> {
    match request {
        Request::Node { op: what, node } => Answer::done(op.node(what, &node).await),
        Request::LbStatus => Ok(Answer::lines(lb_status(&op.pools.load()))),
        Request::Journal => Ok(Answer::lines(journal_lines(&op.journal))),
        Request::Reload => Answer::done(op.reload().await),
        Request::Status => Answer::json(&op.status()),
        // The socket answers it before an operator is picked.
        Request::Clusters => Ok(Answer::lines(
            clusters.ids().iter().map(|id| format!("{id}\n")).collect(),
        )),
        Request::Cluster(c) => cluster(op.orchestration()?, c).await,
        Request::Ha(h) => ha(clusters, op, h).await,
        Request::Machine {
            node,
            action,
            result,
        } => Answer::done(op.machine(&node, action, result)),
        Request::Ignition { result } => Ok(Answer::Done(op.ignition(result))),
    }
}

/// The journal's recent events, one a line with its date.
pub(super) fn journal_lines(journal: &Journal) -> String {
    let mut out = String::new();
    for e in journal.recent() {
        let _ = writeln!(out, "{} {e}", httpdate::fmt_http_date(e.at));
    }
    out
}

/// `ha status | ha set active|standby | ha health`: the pair, for keepalived and people.
async fn ha(clusters: &Clusters, op: &Operator, request: HaRequest) -> Result<Answer, OpError> {
    let host = op.ha_host()?;
    let role = |active: bool| if active { "active" } else { "standby" };
    let activity = op.activity();
    match request {
        HaRequest::Status => {
            let r = activity.replication();
            let direction = if activity.is_active() {
                "sending to the peer"
            } else {
                "receiving from the peer"
            };
            let link = if r.connected {
                "connected"
            } else {
                "not connected"
            };
            let last = r.last_update.map_or_else(
                || "no update yet".to_owned(),
                |t| {
                    let ago = t.elapsed().unwrap_or_default();
                    format!(
                        "last update {} ago",
                        humantime::format_duration(Duration::from_millis(
                            u64::try_from(ago.as_millis()).unwrap_or(u64::MAX)
                        ))
                    )
                },
            );
            let line = format!("{} (host {host})", role(activity.is_active()));
            let mut out = format!(
                "replication: {direction}, {link}, {} updates, {last}\n",
                r.updates
            );
            if !r.waiting.is_empty() {
                let _ = writeln!(
                    out,
                    "replication not connected for: {}",
                    r.waiting.join(", ")
                );
            }
            if let Some(e) = r.last_error.filter(|_| !r.connected) {
                let _ = writeln!(out, "replication error: {e}");
            }
            Ok(Answer::Lines {
                line: Some(line),
                body: out,
            })
        }
        // The role is the host's: every cluster's journal records its change.
        HaRequest::Set { active } => {
            Answer::done(clusters.set_active(active).map(|()| role(active)))
        }
        HaRequest::Health => {
            let active = activity.is_active();
            Answer::done(
                op.ha_health()
                    .await
                    .map(|line| format!("{} host {host}: {line}", role(active))),
            )
        }
    }
}

/// `cluster ...`: the install orchestration.
async fn cluster(o: &Orchestrator, request: ClusterRequest) -> Result<Answer, OpError> {
    let outcome = match request {
        ClusterRequest::Status => return Answer::json(&o.status()),
        ClusterRequest::Up => o.up().await,
        ClusterRequest::Scale(n) => o.scale(n).await,
        ClusterRequest::Down => o.down().await,
    };
    Answer::done(outcome.map_err(|e| OpError::Refused(e.to_string())))
}

/// Every backend: its state, connections open now (`active`, which a drain waits for), the time
/// left before its drain timeout closes them, and its counters.
pub(super) fn lb_status(pools: &Pools) -> String {
    let mut out = String::new();
    for (pool, b) in pools.backends() {
        let state = b.state(pool.served);
        let _ = write!(
            out,
            "{} {} {} {state} active={} connections={} bytes_in={} bytes_out={}",
            pool.kind.name(),
            b.name,
            b.addr,
            b.active(),
            b.connections.load(Ordering::Relaxed),
            b.bytes_to_backend.load(Ordering::Relaxed),
            b.bytes_to_client.load(Ordering::Relaxed),
        );
        if let Some(left) = b.drain_closes_in() {
            let _ = write!(out, " closing_in={}s", left.as_secs());
        }
        out.push('\n');
    }
    out
}
