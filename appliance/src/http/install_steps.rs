//! What a node's fetches do to its install: each script, ignition and role-config fetch is
//! reported to the node's install lifecycle ([`observe`]: `install_state`'s rule decides, with
//! the fetch's address, and picks the script); why an ignition can't be served now; and the
//! journal events of a node's artifact fetches (begun, or failed with its fix).
//!
//! A step that can't be recorded (a full or read-only state disk) refuses the ignition fetch,
//! and the installed system's role-config fetch, with a 503 and `Retry-After` (a step the
//! appliance can't remember is not taken), while a script still goes out unrecorded (the disk
//! is the safe answer). Each is an `install markers` fault of its cluster, a refused fetch on
//! the node's events, and an error logged at most once per 10 s; the next step that is recorded
//! clears the fault (`tests/e2e/state_disk.rs`).
//! The boot server (`super::server`) and its fast path (`super::fastpath`) both call these,
//! and they know nothing of either's connections, so neither imports the other's internals.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::SystemTime;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::response::{Body, text};
use crate::install_state::{self, BootScript, IfUnrecorded, Observation, Stepped, Transition};
use crate::journal::{EventKind, Journal};
use crate::plan::{self, BootParams, Plan};
use crate::vocabulary::{MacAddr, RoleConfig};

/// A node's download of an artifact began (a GET of the file from its first byte): recorded
/// when `peer` is a node's address.
pub(super) fn artifact_fetched(plan: &Plan, journal: &Journal, peer: SocketAddr, path: &str) {
    if let Some(node) = node_at(plan, peer) {
        journal.publish(
            Some(node.node.clone()),
            EventKind::ArtifactFetched {
                from: peer,
                file: path.rsplit('/').next().unwrap_or(path).to_owned(),
            },
        );
    }
}

/// A file a node's boot asked for can't be served: recorded on that node (when `peer` is a
/// node's address), so its status says why it waits, with `fix`.
pub(super) fn fetch_failed(
    (plan, journal): (&Plan, &Journal),
    peer: SocketAddr,
    file: &str,
    status: StatusCode,
    fix: String,
) {
    if let Some(node) = node_at(plan, peer) {
        journal.publish(
            Some(node.node.clone()),
            EventKind::FetchFailed {
                from: peer,
                file: file.to_owned(),
                status: status.as_u16(),
                fix,
            },
        );
    }
}

/// The node whose address `peer` is, if any.
fn node_at(plan: &Plan, peer: SocketAddr) -> Option<&BootParams> {
    let ip = IpAddr::to_canonical(&peer.ip());
    plan.boot.iter().find(|b| is_node(b, ip))
}

/// Whether `ip` is `boot`'s node's own address.
pub(super) fn is_node(boot: &BootParams, ip: IpAddr) -> bool {
    ip == IpAddr::V4(boot.ipv4) || boot.ipv6.is_some_and(|v6| ip == IpAddr::V6(v6))
}

/// Why `role`'s ignition can't be served to `node` now, as the response: 404 when the file is
/// missing from the ignition directory (deleted after the install, or never created), 410 when
/// it is a bootstrap.ign older than its certificates. Journaled and logged (without content).
/// The other services never depend on the ignition files: a services host restarted days after
/// the install only refuses these fetches.
pub(super) async fn ignition_refusal(
    files: &plan::BootFiles,
    role: RoleConfig,
    node: &str,
    peer: SocketAddr,
    journal: &Journal,
) -> Option<Response<Body>> {
    let file = role.file();
    let (status, why) = match tokio::fs::metadata(files.ignition_dir.join(file)).await {
        Err(e) => (
            StatusCode::NOT_FOUND,
            format!(
                "{file} is not in the ignition directory ({}): run `openshift-install create ignition-configs`",
                match e.kind() {
                    io::ErrorKind::NotFound => "it does not exist".to_owned(),
                    _ => e.to_string(),
                }
            ),
        ),
        Ok(meta) => {
            let age = meta
                .modified()
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok());
            match (role.lifetime(), age) {
                (Some(lifetime), Some(age)) if age > lifetime => (
                    StatusCode::GONE,
                    format!(
                        "{file} was written {} h ago and its certificates expire after {} h: create the ignition configs again",
                        age.as_secs() / 3600,
                        lifetime.as_secs() / 3600
                    ),
                ),
                _ => return None,
            }
        }
    };
    tracing::warn!("http: {file} for {node} not served to {peer}: {why}");
    journal.publish(
        Some(node.to_owned()),
        EventKind::IgnitionUnavailable {
            from: peer,
            file,
            why: why.clone(),
        },
    );
    Some(text(status, &format!("{why}\n")))
}

/// The node's script, to any address, chosen by its install state; only a request from the
/// node's own address changes that state (`install_state::observe`).
pub(super) async fn script(
    req: &Request<Incoming>,
    name: &str,
    peer: SocketAddr,
    plan: &Plan,
    (journal, faults): (&Journal, &crate::faults::Faults),
) -> Response<Body> {
    let mac = name.parse::<MacAddr>().ok();
    let node = mac.and_then(|mac| plan.boot.iter().find(|b| b.mac == mac));
    let by_node = node.is_some_and(|b| is_node(b, IpAddr::to_canonical(&peer.ip())));
    if let (Some(node), false) = (node, by_node) {
        tracing::info!(
            "http: iPXE script of {} read by {peer}, not the node's address: its install state is unchanged",
            node.node
        );
    }
    let body: &str = match node {
        None => {
            tracing::info!(
                "http: iPXE script for unknown MAC {} from {peer}",
                name.escape_debug()
            );
            &plan.unknown_script
        }
        Some(node) => {
            let seen = Observation::Script {
                from: peer,
                by_node,
                get: req.method() == Method::GET,
                single_node: node.role_config == RoleConfig::SingleNode,
            };
            // A script is answered even when its step can't be recorded.
            let chosen = match observe((plan, journal, faults), &node.node, seen).await {
                Ok(transition) | Err(Unrecorded::Answered(transition)) => transition.script,
                Err(Unrecorded::Refused(_)) => None,
            };
            match chosen.unwrap_or(BootScript::Install) {
                BootScript::LocalBoot => &node.documents.local_boot_script,
                BootScript::TryDisk => &node.documents.first_boot_script,
                BootScript::Install => &node.documents.install_script,
            }
        }
    };
    let mut r = text(StatusCode::OK, body);
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Steps that failed to be recorded, logged once per 10 s.
static UNRECORDED: crate::isolate::LogGate = crate::isolate::LogGate::new();

/// A step the appliance could not record (a full or read-only state disk).
pub(super) enum Unrecorded {
    /// The fetch is answered anyway (`IfUnrecorded::Answer`).
    Answered(Transition),
    /// The fetch is refused with this 503, which the client retries (`IfUnrecorded::Refuse`).
    Refused(Box<Response<Body>>),
}

/// Reports `observation` of `node` to its install lifecycle: the step is taken on the blocking
/// pool (`install_state::step`), then its news is announced, and the state recorded
/// (`EventKind::InstallRecorded`, what a pair replicates). A step that can't be recorded is a
/// fault in `status` and an event on the node, and its news is not announced when the fetch is
/// refused; the next step that is recorded clears the fault.
pub(super) async fn observe(
    (plan, journal, faults): (&Plan, &Journal, &crate::faults::Faults),
    node: &str,
    observation: Observation,
) -> Result<Transition, Unrecorded> {
    const SERVICE: &str = "install markers";
    let announcer = journal.clone();
    let Stepped {
        transition,
        recorded,
        ..
    } = install_state::step_blocking(plan.state_dir.clone(), node, observation, move |node, s| {
        announcer.announce_step(node, s);
    })
    .await;
    let scope = plan.host_cluster.as_ref().map(|c| format!("cluster {c}"));
    match recorded {
        // Announced in the step (see `install_state::step_then`).
        Ok(_) => {
            faults.clear(SERVICE, scope.as_deref());
            Ok(transition)
        }
        Err(e) => {
            let error = format!("{}: {e}", plan.state_dir.display());
            faults.record(
                SERVICE,
                scope.as_deref(),
                crate::faults::FaultState::Unwritable,
                Some(&error),
            );
            let from = match observation {
                Observation::Script { from, .. }
                | Observation::Ignition { from }
                | Observation::RoleConfig { from, .. } => Some(from),
                Observation::ReinstallRequested => None,
            };
            let peer = from.map_or_else(String::new, |f| format!(" from {f}"));
            let answer = match transition.if_unrecorded {
                IfUnrecorded::Answer => "answered",
                IfUnrecorded::Refuse => "answered 503, the node retries",
            };
            if let Some(n) = UNRECORDED.admit(std::time::Instant::now()) {
                tracing::error!(
                    "http: {node}'s fetch{peer} can't be recorded ({error}): {answer} (+{n} unlogged)"
                );
            }
            if let Some(from) = from {
                journal.publish(
                    Some(node.to_owned()),
                    EventKind::FetchRefused {
                        from,
                        what: "its install step".to_owned(),
                        why: "the appliance can't record it: its state directory can't be written",
                    },
                );
            }
            match transition.if_unrecorded {
                IfUnrecorded::Answer => {
                    journal.announce(node, &transition, false);
                    Err(Unrecorded::Answered(transition))
                }
                IfUnrecorded::Refuse => {
                    let mut r = text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the appliance can't record this step of the install (its state directory can't be written): try again\n",
                    );
                    r.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
                    Err(Unrecorded::Refused(Box::new(r)))
                }
            }
        }
    }
}
