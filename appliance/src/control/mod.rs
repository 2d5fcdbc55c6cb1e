//! The control module: creates, powers and destroys the cluster's machines through a provider's
//! API (Proxmox VE's REST API, libvirt through `virsh`, a BMC's Redfish), from the machine specs
//! of the plan.
//!
//! One closed set of [`Action`]s, one [`Provider`] trait whose `act` routes each action, the
//! [`ControlError`] classes the CLI turns into exit codes, and [`run`], which applies an action
//! to a list of machines (configuration changes one at a time, power and status in parallel)
//! and publishes every result into the node-event journal.
//!
//! Where the providers differ: Proxmox has no one-time boot override, so `BootOnce` puts the
//! device first in the persistent order and says so; a Redfish boot override the BMC reports as
//! `Continuous` with the asked target counts as in effect (sushy-emulator keeps every override
//! that way; some BMCs do too), so reruns stay idempotent; bare metal is never destroyed, only
//! powered off with its media ejected. The `nodes` commands load the config without requiring
//! the ignition files (machines are often made before `openshift-install create
//! ignition-configs`), but check credential files for real.
//!
//! Architecture invariants:
//! - Reads the plan ([`crate::plan::machines`]); derives nothing. What a VM gets (name, MAC,
//!   sizes, boot order, ISO URL) was decided there, purely; a provider only spells it.
//! - Idempotent: an action whose effect is already in place reports `Unchanged` and changes
//!   nothing. A machine that exists but contradicts the plan (another MAC, a VM ID owned by
//!   another VM) is an error, never silently "fixed".
//! - Every wait is bounded (request, task and shutdown timeouts from the config, and an outer
//!   bound per action in [`run`]).
//! - Credentials are read when acting, from a file or the environment, and never printed.

pub mod https;
pub mod libvirt;
pub mod provider_trust;
pub mod proxmox;
pub mod redfish;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::journal::{EventKind, Journal};
use crate::plan::machines::ControlTimeouts;
use crate::plan::machines::{BootDevice, MachineSpec};

/// Everything a provider can be asked to do to one machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Create the machine if absent (MAC, disk, NIC on the cluster network, boot order, the
    /// node's ISO for the ISO path); check it if present.
    Ensure,
    PowerOn,
    /// Graceful shutdown, forced off after the shutdown timeout.
    PowerOff,
    Reset,
    /// Boot from this device next time.
    BootOnce(BootDevice),
    /// The node's live ISO in the virtual CD drive.
    InsertMedia,
    EjectMedia,
    Status,
    /// Remove the machine and its disks (and the node's ISO from the provider's storage).
    Destroy,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Ensure => "create",
            Action::PowerOn => "start",
            Action::PowerOff => "stop",
            Action::Reset => "reset",
            Action::BootOnce(_) => "boot device",
            Action::InsertMedia => "insert media",
            Action::EjectMedia => "eject media",
            Action::Status => "status",
            Action::Destroy => "destroy",
        }
    }

    /// Actions that change a machine's configuration run one machine at a time: Proxmox
    /// serializes them behind per-VM and storage locks anyway, and parallel creates are what
    /// makes it answer `can't lock file ... got timeout`. Power and status run in parallel.
    fn serialized(self) -> bool {
        !matches!(
            self,
            Action::PowerOn | Action::PowerOff | Action::Reset | Action::Status
        )
    }
}

/// What an action did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The machine was changed as asked.
    Changed(String),
    /// It already was as asked; nothing was changed.
    Unchanged(String),
    Status(MachineStatus),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Changed(what) => f.write_str(what),
            Outcome::Unchanged(what) => write!(f, "{what} (unchanged)"),
            Outcome::Status(status) => status.fmt(f),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineStatus {
    Absent,
    Present {
        /// The provider's name for it (`vm 9002 on pve1`).
        id: String,
        power: Power,
        /// What is in the virtual CD drive, if anything.
        media: Option<String>,
        /// Where the machine differs from the plan; a MAC difference is listed first.
        drift: Vec<String>,
    },
}

impl fmt::Display for MachineStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MachineStatus::Absent => f.write_str("absent"),
            MachineStatus::Present {
                id,
                power,
                media,
                drift,
            } => {
                write!(f, "{id}, {power}")?;
                if let Some(media) = media {
                    write!(f, ", cd {media}")?;
                }
                if !drift.is_empty() {
                    write!(f, "; differs from the config: {}", drift.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Power {
    On,
    Off,
    /// A state the provider names otherwise (paused, unknown).
    Other(String),
}

impl fmt::Display for Power {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Power::On => f.write_str("running"),
            Power::Off => f.write_str("stopped"),
            Power::Other(s) => f.write_str(s),
        }
    }
}

/// Why an action failed. The variants sort failures into what the operator must do next
/// (see [`ControlError::kind`]); the messages say it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ControlError {
    /// The provider could not be reached at all.
    #[error("can't reach {endpoint}: {reason}")]
    Unreachable { endpoint: String, reason: String },
    /// The provider's certificate is not the one the config trusts.
    #[error("TLS with {endpoint} refused: {reason}")]
    Tls { endpoint: String, reason: String },
    /// The credentials could not be read, or the provider refused them.
    #[error("{0}")]
    Credentials(String),
    /// Authenticated, but a privilege is missing (Proxmox names it, or the call says what it
    /// needs where Proxmox answers a bare "Permission check failed").
    #[error("the API token {token} lacks {privilege} on {path}: {grant}")]
    Privilege {
        token: String,
        /// One privilege, or `A|B` when any of them would do.
        privilege: String,
        path: String,
        /// How to grant it: the `pveum` lines for the token and its user (a privilege-separated
        /// token has only what both have).
        grant: String,
    },
    /// A machine exists but contradicts the config (another MAC, a VM ID taken by another
    /// VM). Nothing was changed.
    #[error("{0}")]
    Conflict(String),
    /// A bounded wait ran out.
    #[error("{0}")]
    Timeout(String),
    /// The machine does not exist (yet).
    #[error("{0}")]
    Absent(String),
    /// The provider refused or a task failed.
    #[error("{0}")]
    Failed(String),
}

/// Failure classes, in the order the exit code reports them (highest code wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FailureKind {
    /// An action failed on a machine (refused, task failed, privilege missing, absent).
    Action,
    /// The provider could not be reached, or it refused TLS or the credentials.
    Connection,
    /// A machine contradicts the config.
    Conflict,
    /// A wait ran out.
    Timeout,
}

impl FailureKind {
    /// The process exit code for this class (0, 1 and 2 are success, bad config and usage).
    pub fn exit_code(self) -> u8 {
        match self {
            FailureKind::Action => 3,
            FailureKind::Connection => 4,
            FailureKind::Conflict => 5,
            FailureKind::Timeout => 6,
        }
    }
}

impl ControlError {
    pub fn kind(&self) -> FailureKind {
        match self {
            ControlError::Unreachable { .. }
            | ControlError::Tls { .. }
            | ControlError::Credentials(_) => FailureKind::Connection,
            ControlError::Conflict(_) => FailureKind::Conflict,
            ControlError::Timeout(_) => FailureKind::Timeout,
            ControlError::Privilege { .. } | ControlError::Absent(_) | ControlError::Failed(_) => {
                FailureKind::Action
            }
        }
    }
}

/// A provider: one entry point that routes every [`Action`].
pub trait Provider: Send + Sync + 'static {
    /// Where the machines live, for messages (`proxmox node pve1 at https://...`).
    fn describe(&self) -> String;

    fn act(
        &self,
        machine: &MachineSpec,
        action: Action,
    ) -> impl Future<Output = Result<Outcome, ControlError>> + Send;
}

/// The configured provider, whichever it is: what `okd-appliance nodes` and the install
/// orchestration act through.
pub enum AnyProvider {
    Proxmox(proxmox::ProxmoxProvider),
    Libvirt(libvirt::LibvirtProvider),
    Redfish(redfish::RedfishProvider),
}

impl AnyProvider {
    /// The plan's provider; `None` for `provider: none` (machines made by hand).
    pub fn from_plan(
        plan: &crate::plan::machines::ControlPlan,
    ) -> Result<Option<AnyProvider>, ControlError> {
        use crate::plan::machines::Provider as Settings;
        Ok(Some(match &plan.provider {
            Settings::None => return Ok(None),
            Settings::Proxmox(px) => AnyProvider::Proxmox(proxmox::ProxmoxProvider::new(
                px,
                plan.timeouts,
                &plan.state_dir,
            )?),
            Settings::Libvirt(lv) => {
                AnyProvider::Libvirt(libvirt::LibvirtProvider::new(lv, plan.timeouts))
            }
            Settings::Redfish => AnyProvider::Redfish(redfish::RedfishProvider::new(plan.timeouts)),
        }))
    }
}

impl fmt::Debug for AnyProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Provider for AnyProvider {
    fn describe(&self) -> String {
        match self {
            AnyProvider::Proxmox(p) => p.describe(),
            AnyProvider::Libvirt(p) => p.describe(),
            AnyProvider::Redfish(p) => p.describe(),
        }
    }

    async fn act(&self, machine: &MachineSpec, action: Action) -> Result<Outcome, ControlError> {
        match self {
            AnyProvider::Proxmox(p) => p.act(machine, action).await,
            AnyProvider::Libvirt(p) => p.act(machine, action).await,
            AnyProvider::Redfish(p) => p.act(machine, action).await,
        }
    }
}

/// One machine's result.
#[derive(Debug)]
pub struct NodeReport {
    pub node: String,
    pub result: Result<Outcome, ControlError>,
}

/// The longest one action may take, whatever the provider does: every wait inside it is
/// bounded already; this catches one that is not.
/// A provider's credential, from where the config says: an owner-only file or an environment
/// variable (`crate::secrets` reads both; a loose file is refused).
pub fn credential(
    source: &crate::plan::machines::SecretSource,
) -> Result<crate::secrets::Secret, crate::secrets::SecretError> {
    use crate::plan::machines::SecretSource;
    match source {
        SecretSource::File(path) => crate::secrets::read_line(path),
        SecretSource::Env(name) => crate::secrets::read_env(name),
    }
}

pub fn action_bound(t: &ControlTimeouts) -> Duration {
    t.task * 3 + t.shutdown + t.request * 20
}

/// Applies `action` to every machine, one at a time for actions that change configuration
/// and in parallel for power and status, and publishes each result into the journal as it
/// comes. Reports come back in the order of `machines`.
pub async fn run<P: Provider>(
    provider: &Arc<P>,
    machines: &[MachineSpec],
    action: Action,
    timeouts: &ControlTimeouts,
    journal: &Journal,
) -> Vec<NodeReport> {
    let bound = action_bound(timeouts);
    let mut reports = Vec::with_capacity(machines.len());
    if action.serialized() {
        for m in machines {
            let result = bounded(provider.as_ref(), m, action, bound).await;
            publish(journal, &m.node, action, &result);
            reports.push(NodeReport {
                node: m.node.clone(),
                result,
            });
        }
        return reports;
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (i, m) in machines.iter().enumerate() {
        let (provider, m, journal) = (Arc::clone(provider), m.clone(), journal.clone());
        tasks.spawn(async move {
            let result = bounded(provider.as_ref(), &m, action, bound).await;
            publish(&journal, &m.node, action, &result);
            (i, result)
        });
    }
    let mut results: Vec<Option<Result<Outcome, ControlError>>> = vec![None; machines.len()];
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((i, result)) => results[i] = Some(result),
            // A panicking provider is a bug; its machine reports it instead of taking the
            // others down.
            Err(e) => tracing::error!("control task failed: {e}"),
        }
    }
    for (m, result) in machines.iter().zip(results) {
        let result = result.unwrap_or_else(|| {
            let e = ControlError::Failed("the action's task ended without a result (a bug)".into());
            publish(journal, &m.node, action, &Err(e.clone()));
            Err(e)
        });
        reports.push(NodeReport {
            node: m.node.clone(),
            result,
        });
    }
    reports
}

async fn bounded<P: Provider>(
    provider: &P,
    m: &MachineSpec,
    action: Action,
    bound: Duration,
) -> Result<Outcome, ControlError> {
    match tokio::time::timeout(bound, provider.act(m, action)).await {
        Ok(result) => result,
        Err(_) => Err(ControlError::Timeout(format!(
            "{} of {} did not finish within {}",
            action.name(),
            m.vm_name,
            humantime::format_duration(bound)
        ))),
    }
}

fn publish(journal: &Journal, node: &str, action: Action, result: &Result<Outcome, ControlError>) {
    journal.publish(
        Some(node.to_owned()),
        EventKind::Machine {
            action: action.name(),
            result: match result {
                Ok(outcome) => Ok(outcome.to_string()),
                Err(e) => Err(e.to_string()),
            },
        },
    );
}
