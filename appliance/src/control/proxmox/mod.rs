//! The Proxmox VE provider: the cluster's machines as QEMU VMs of a Proxmox VE (8.2 or later)
//! cluster, created on one configured node, driven over the REST API with an API token.
//!
//! A VM is found by its name (`<node>.<cluster domain>`) anywhere in the Proxmox cluster
//! (`/cluster/resources`: HA recovery or a migration may have moved it) and acted on at the
//! node that holds it; it is created on the configured node with the node's MAC on
//! `net0`, a new disk on `scsi0`, the boot order of the plan and, for the ISO path, the node's
//! live ISO (fetched into the ISO storage with `download-url`) on `ide2`. Nothing relies on
//! `args` (root@pam only: an API token can't set it).
//!
//! Known failure modes, each with its own handling: a release older than 8.2 (refused after one
//! `GET /version` per provider), a missing privilege (403, named in the error with the `pveum`
//! lines that grant it to the token and its user; named from the call where Proxmox answers a
//! bare "Permission check failed"), lock errors (file, cluster filesystem, `VM is locked`:
//! retried with exponential backoff; creates run one at a time), a `nextid` race (another
//! client took the ID: a fresh one is asked for), MAC drift (an error, never "fixed"), a task
//! that never ends (bounded wait, through transient poll failures), a create still running
//! (its `lock: create` placeholder is waited for, never created twice), HA-managed VMs (power
//! through ha-manager, awaited), paused VMs, a create a token granted on a pool alone can't
//! see until it ends (recorded before it is asked for and followed to its end by the next run:
//! `started.rs`). A failed create says whether its VM is gone (only with proof: its task
//! failed, Proxmox refused the request, or its VM ID is free), still being created or left
//! behind.

mod answers;
mod api;
mod power;
pub mod spell;
mod started;
mod vms;

use std::time::Duration;

use serde::Deserialize;

use self::answers::Version;
use self::api::{Api, PveError, TaskEnd, seg};
use super::{Action, ControlError, Outcome, Power, Provider};
use crate::plan::machines::MachineSpec;
use crate::plan::machines::{ControlTimeouts, Proxmox};

/// How often tasks are polled and how failed attempts are retried. Tests shorten it.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub poll: Duration,
    /// The first retry waits this long, each next one twice as long.
    pub backoff: Duration,
    /// Attempts of a step that hit a lock timeout or a `nextid` race, the first included.
    pub attempts: u32,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            poll: Duration::from_secs(1),
            backoff: Duration::from_secs(2),
            attempts: 5,
        }
    }
}

#[derive(Debug)]
pub struct ProxmoxProvider {
    api: Api,
    px: Proxmox,
    timeouts: ControlTimeouts,
    pace: Pace,
    /// Creates and destroys take storage and VM ID locks: one at a time, whoever calls.
    serial: tokio::sync::Mutex<()>,
    /// `GET /version`, asked once per provider (one per action batch, whose actions all wait
    /// for the one answer): the version, or why it can't be used or was not learned.
    checked: tokio::sync::OnceCell<Result<String, ControlError>>,
    /// Creates started and not known to have ended.
    records: started::Records,
}

/// A VM of the cluster, at the node that holds it.
#[derive(Debug, Clone)]
struct Vm {
    vmid: u32,
    node: String,
    running: Power,
    /// Managed by HA: starts and stops are requests to ha-manager, which acts on them a
    /// little later (qemu-server `src/PVE/API2/Qemu.pm` `vm_start`, `vm_stop`: `hastart`,
    /// `hastop` tasks).
    ha: bool,
}

/// One VM as `GET /cluster/resources?type=vm` lists it (pve-manager `PVE/API2/Cluster.pm`
/// `resources`, `PVE/API2Tools.pm` `extract_vm_stats`).
#[derive(Debug, Clone)]
struct Listed {
    vmid: u32,
    node: String,
    /// From the node's status data: missing for a VM that is not in it yet.
    name: Option<String>,
    power: Power,
    /// The config's `lock` (`create` while a create task runs, `backup`, `migrate`...).
    lock: Option<String>,
    ha: bool,
}

impl Listed {
    /// The placeholder of a create still running: qemu-server `src/PVE/API2/Qemu.pm`
    /// `create_vm` writes a config holding only `lock: create` (pve-guest-common
    /// `src/PVE/AbstractConfig.pm` `create_and_lock_config`), listed as `VM <id>` (qemu-server
    /// `src/PVE/QemuServer.pm` `vmstatus`), until its task writes the real one or unlinks it.
    fn placeholder(&self) -> bool {
        self.lock.as_deref() == Some("create")
            && self
                .name
                .as_deref()
                .is_none_or(|n| n == format!("VM {}", self.vmid))
    }

    fn vm(&self) -> Vm {
        Vm {
            vmid: self.vmid,
            node: self.node.clone(),
            running: self.power.clone(),
            ha: self.ha,
        }
    }
}

impl ProxmoxProvider {
    /// Reads the token's secret and sets up TLS; sends nothing yet. Creates are recorded under
    /// `state_dir` until their end is known.
    pub fn new(
        px: &Proxmox,
        timeouts: ControlTimeouts,
        state_dir: &std::path::Path,
    ) -> Result<Self, ControlError> {
        Ok(ProxmoxProvider {
            api: Api::new(px, timeouts.request)?,
            px: px.clone(),
            timeouts,
            pace: Pace::default(),
            serial: tokio::sync::Mutex::new(()),
            checked: tokio::sync::OnceCell::new(),
            records: started::Records::new(state_dir.join("proxmox-creates")),
        })
    }

    pub fn with_pace(mut self, pace: Pace) -> Self {
        self.pace = pace;
        self
    }

    /// Checks that the API answers and takes the token: `Proxmox VE 8.2.4`.
    pub async fn version(&self) -> Result<String, ControlError> {
        let v: Version = self
            .api
            .get_as("/version", &[], "a version (an object)")
            .await
            .map_err(|e| e.into_control("asking for the version"))?;
        Ok(format!(
            "Proxmox VE {}",
            v.version.as_deref().unwrap_or("?")
        ))
    }

    /// The node's release, checked once: older than 8.2 is refused (see
    /// [`spell::OLDEST_RELEASE`]); newer than the newest checked major is used with a warning.
    async fn supported(&self) -> Result<(), ControlError> {
        self.checked
            .get_or_init(|| self.check_version())
            .await
            .as_ref()
            .map(drop)
            .map_err(Clone::clone)
    }

    async fn check_version(&self) -> Result<String, ControlError> {
        let v = self
            .api
            .get("/version", &[])
            .await
            .map_err(|e| e.into_control("asking for the Proxmox VE version"))?;
        // The raw answer stays for the message below, which shows it as it came.
        let version = Version::deserialize(&v)
            .unwrap_or_default()
            .version
            .unwrap_or_else(|| "?".to_owned());
        let Some(release) = spell::release(&v) else {
            return Err(ControlError::Failed(format!(
                "proxmox at {} answered `{v}` for its version: okd-appliance can't tell whether it is Proxmox VE {}.{} or later",
                self.api.endpoint(),
                spell::OLDEST_RELEASE.0,
                spell::OLDEST_RELEASE.1
            )));
        };
        if let Some(why) = spell::unsupported(self.api.endpoint(), &version, release) {
            return Err(ControlError::Failed(why));
        }
        if release.0 > spell::NEWEST_MAJOR {
            tracing::warn!(
                "proxmox at {} runs Proxmox VE {version}, newer than the {}.x okd-appliance was checked against",
                self.api.endpoint(),
                spell::NEWEST_MAJOR
            );
        }
        Ok(version)
    }

    fn node_path(&self) -> String {
        format!("/nodes/{}", seg(&self.px.node))
    }

    /// The VM at the node that holds it.
    fn vm_path(&self, vm: &Vm) -> String {
        format!("/nodes/{}/qemu/{}", seg(&vm.node), vm.vmid)
    }

    /// Where create's VM.Allocate is checked: the pool when there is one.
    fn allocate_path(&self, vmid: u32) -> String {
        match &self.px.pool {
            Some(pool) => format!("/pool/{pool}"),
            None => format!("/vms/{vmid}"),
        }
    }

    fn id(vm: &Vm) -> String {
        format!("vm {} on {}", vm.vmid, vm.node)
    }

    /// Runs `step` again after a lock timeout, with exponential backoff, up to the attempts
    /// of the pace.
    async fn locked<T, F, Fut>(&self, mut step: F) -> Result<T, PveError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, PveError>>,
    {
        let mut wait = self.pace.backoff;
        let mut attempt = 1;
        loop {
            match step().await {
                Err(e) if e.is_lock_timeout() && attempt < self.pace.attempts => {
                    tracing::info!(
                        "proxmox lock timeout (attempt {attempt} of {}), retrying in {}",
                        self.pace.attempts,
                        humantime::format_duration(wait)
                    );
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Starts a task with `method path params` and waits for it, retrying lock timeouts.
    async fn task(
        &self,
        method: &str,
        path: &str,
        params: &[(&str, String)],
        limit: Duration,
    ) -> Result<TaskEnd, PveError> {
        self.locked(|| async {
            let upid = match method {
                "POST" => self.api.post(path, params).await?,
                "DELETE" => self.api.delete(path, params).await?,
                _ => self.api.put(path, params).await?,
            };
            match answers::upid(&upid) {
                Some(upid) => self.api.wait(upid, limit, self.pace.poll).await,
                // Some calls finish at once and return no task.
                None => Ok(TaskEnd::Ok),
            }
        })
        .await
    }

    /// A synchronous config change (`PUT .../config`), retrying lock timeouts.
    async fn set(&self, vm: &Vm, key: &str, value: &str) -> Result<(), ControlError> {
        let path = format!("{}/config", self.vm_path(vm));
        let params = [(key, value.to_owned())];
        self.locked(|| self.api.put(&path, &params))
            .await
            .map(drop)
            .map_err(|e| e.into_control(&format!("setting {key} of {}", Self::id(vm))))
    }
}

impl Provider for ProxmoxProvider {
    fn describe(&self) -> String {
        format!("proxmox node {} at {}", self.px.node, self.api.endpoint())
    }

    async fn act(&self, m: &MachineSpec, action: Action) -> Result<Outcome, ControlError> {
        self.supported().await?;
        match action {
            Action::Ensure => self.ensure(m).await,
            Action::PowerOn => self.power_on(m).await,
            Action::PowerOff => self.power_off(m).await,
            Action::Reset => self.reset(m).await,
            Action::BootOnce(device) => self.boot_once(m, device).await,
            Action::InsertMedia => self.insert_media(m).await,
            Action::EjectMedia => self.eject_media(m).await,
            Action::Status => self.status(m).await,
            Action::Destroy => self.destroy(m).await,
        }
    }
}
