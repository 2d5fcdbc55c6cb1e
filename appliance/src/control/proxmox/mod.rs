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
//! through ha-manager, awaited), paused VMs. A failed create says whether its VM is gone,
//! still being created or left behind.

mod api;
pub mod spell;

use std::time::Duration;

use serde_json::{Map, Value};

use self::api::{Api, PveError, TaskEnd, seg};
use super::{Action, ControlError, MachineStatus, Outcome, Power, Provider};
use crate::plan::machines::{BootDevice, InstallMedium, MachineSpec};
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
    /// Reads the token's secret and sets up TLS; sends nothing yet.
    pub fn new(px: &Proxmox, timeouts: ControlTimeouts) -> Result<Self, ControlError> {
        Ok(ProxmoxProvider {
            api: Api::new(px, timeouts.request)?,
            px: px.clone(),
            timeouts,
            pace: Pace::default(),
            serial: tokio::sync::Mutex::new(()),
            checked: tokio::sync::OnceCell::new(),
        })
    }

    pub fn with_pace(mut self, pace: Pace) -> Self {
        self.pace = pace;
        self
    }

    /// Checks that the API answers and takes the token: `Proxmox VE 8.2.4`.
    pub async fn version(&self) -> Result<String, ControlError> {
        let v = self
            .api
            .get("/version", &[])
            .await
            .map_err(|e| e.into_control("asking for the version"))?;
        Ok(format!(
            "Proxmox VE {}",
            v.get("version").and_then(Value::as_str).unwrap_or("?")
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
        let version = v
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
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

    /// The cluster's QEMU VMs this token may see (VM.Audit on each), wherever they run.
    async fn list(&self) -> Result<Vec<Listed>, ControlError> {
        let data = self
            .api
            .get("/cluster/resources", &[("type", "vm".to_owned())])
            .await
            .map_err(|e| e.into_control("listing the cluster's VMs"))?;
        let items = data.as_array().ok_or_else(|| {
            ControlError::Failed(
                "listing the cluster's VMs: proxmox did not answer with a list".into(),
            )
        })?;
        let mut vms: Vec<Listed> = items
            .iter()
            .filter(|vm| vm.get("type").and_then(Value::as_str) == Some("qemu"))
            .filter_map(|vm| {
                let text = |key: &str| vm.get(key).and_then(Value::as_str).map(str::to_owned);
                Some(Listed {
                    vmid: vm.get("vmid").and_then(as_u32)?,
                    node: text("node")?,
                    name: text("name"),
                    power: match vm.get("status").and_then(Value::as_str) {
                        Some("running") => Power::On,
                        Some("stopped") => Power::Off,
                        other => Power::Other(other.unwrap_or("unknown").to_owned()),
                    },
                    lock: text("lock"),
                    ha: text("hastate").is_some(),
                })
            })
            .collect();
        // The name comes from the nodes' status data, which a new VM is not in for a few
        // seconds: its config says (unless its node can't be reached: then it stays unnamed).
        for vm in vms.iter_mut().filter(|vm| vm.name.is_none()) {
            match self.config(&vm.vm()).await {
                Ok(cfg) => {
                    vm.name = cfg.get("name").and_then(Value::as_str).map(str::to_owned);
                    vm.lock = cfg.get("lock").and_then(Value::as_str).map(str::to_owned);
                }
                Err(e) => tracing::info!("vm {} has no name in the listing: {e}", vm.vmid),
            }
        }
        // A create's placeholder has no name of its own.
        for vm in vms.iter_mut().filter(|vm| vm.placeholder()) {
            vm.name = None;
        }
        Ok(vms)
    }

    /// The machine's VM, if it exists. A configured VM ID that another VM holds, or a VM of
    /// this name under another ID, is a conflict.
    async fn find(&self, m: &MachineSpec) -> Result<Option<Vm>, ControlError> {
        let vms = self.list().await?;
        self.pick(m, &vms)
    }

    /// The machine's VM among the listed ones.
    fn pick(&self, m: &MachineSpec, vms: &[Listed]) -> Result<Option<Vm>, ControlError> {
        let named: Vec<&Listed> = vms
            .iter()
            .filter(|vm| vm.name.as_deref() == Some(m.vm_name.as_str()))
            .collect();
        if named.len() > 1 {
            let ids: Vec<String> = named.iter().map(|vm| Self::id(&vm.vm())).collect();
            return Err(ControlError::Conflict(format!(
                "{} VMs of the cluster are named {}: {}; okd-appliance can't tell which one is the node's",
                named.len(),
                m.vm_name,
                ids.join(", ")
            )));
        }
        if let Some(want) = m.vmid {
            if let Some(other) = vms.iter().find(|vm| {
                vm.vmid == want
                    && vm.name.as_deref() != Some(m.vm_name.as_str())
                    && !vm.placeholder()
            }) {
                return Err(ControlError::Conflict(format!(
                    "VM ID {want}, configured for {}, belongs to VM `{}` on {}: nothing was changed; give the node another vmid",
                    m.node,
                    other.name.as_deref().unwrap_or("(no name)"),
                    other.node
                )));
            }
            if let Some(vm) = named.first()
                && vm.vmid != want
            {
                return Err(ControlError::Conflict(format!(
                    "{} exists as VM {} on {}, but the config gives it VM ID {want}: nothing was changed",
                    m.vm_name, vm.vmid, vm.node
                )));
            }
        }
        Ok(named.first().map(|vm| vm.vm()))
    }

    /// Creates still running that may be the machine's: its configured VM ID's, or without
    /// one, any (their placeholder names nothing).
    fn in_flight<'a>(&self, m: &MachineSpec, vms: &'a [Listed]) -> Vec<&'a Listed> {
        vms.iter()
            .filter(|vm| vm.placeholder() && m.vmid.is_none_or(|id| id == vm.vmid))
            .collect()
    }

    /// `vm 100 on pve1, vm 101 on pve2`.
    fn ids(vms: &[&Listed]) -> String {
        vms.iter()
            .map(|vm| Self::id(&vm.vm()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The machine's VM, once no create that may be its own is running: those are waited for,
    /// up to the task timeout (a rerun after a create outlived it must not make a second VM).
    async fn find_settled(&self, m: &MachineSpec) -> Result<Option<Vm>, ControlError> {
        let deadline = tokio::time::Instant::now() + self.timeouts.task;
        loop {
            let vms = self.list().await?;
            if let Some(vm) = self.pick(m, &vms)? {
                return Ok(Some(vm));
            }
            let busy = self.in_flight(m, &vms);
            if busy.is_empty() {
                return Ok(None);
            }
            if tokio::time::Instant::now() + self.pace.poll > deadline {
                return Err(ControlError::Timeout(format!(
                    "{} is still being created (lock: create) after {}; it may be {}, from an earlier run or another client: nothing was created; run again when its task ends",
                    Self::ids(&busy),
                    humantime::format_duration(self.timeouts.task),
                    m.vm_name
                )));
            }
            tokio::time::sleep(self.pace.poll).await;
        }
    }

    /// The machine's VM's create still running, when its VM ID is configured.
    fn creating(&self, m: &MachineSpec, vms: &[Listed]) -> Option<Vm> {
        m.vmid?;
        self.in_flight(m, vms).first().map(|vm| vm.vm())
    }

    async fn config(&self, vm: &Vm) -> Result<Map<String, Value>, ControlError> {
        let id = Self::id(vm);
        let data = self
            .api
            .get(&format!("{}/config", self.vm_path(vm)), &[])
            .await
            .map_err(|e| e.into_control(&format!("reading the config of {id}")))?;
        match data {
            Value::Object(map) => Ok(map),
            _ => Err(ControlError::Failed(format!(
                "reading the config of {id}: proxmox did not answer with an object"
            ))),
        }
    }

    /// Where the VM differs from the plan. Err when its NIC has another MAC (or none): that
    /// VM is not the node's, whatever its name says.
    fn differences(
        &self,
        m: &MachineSpec,
        vm: &Vm,
        cfg: &Map<String, Value>,
    ) -> Result<Vec<String>, ControlError> {
        let nic = cfg.get(spell::NIC).and_then(Value::as_str);
        let mac = nic.and_then(spell::nic_mac);
        if mac != Some(m.mac) {
            let found = match (nic, mac) {
                (None, _) => "no net0".to_owned(),
                (Some(_), None) => "net0 without a MAC".to_owned(),
                (Some(_), Some(mac)) => format!("net0 MAC {mac}"),
            };
            return Err(ControlError::Conflict(format!(
                "{} ({}) has {found}, but the config gives {} the MAC {}: okd-appliance doesn't change it; fix the config or the VM, or destroy the VM",
                m.vm_name,
                Self::id(vm),
                m.node,
                m.mac
            )));
        }
        let mut drift = Vec::new();
        if let Some(bridge) = nic.and_then(spell::nic_bridge)
            && bridge != self.px.bridge
        {
            drift.push(format!("bridge {bridge} (config {})", self.px.bridge));
        }
        let num = |key: &str| cfg.get(key).and_then(as_u64);
        if let Some(cores) = num("cores")
            && cores != u64::from(m.cores)
        {
            drift.push(format!("{cores} cores (config {})", m.cores));
        }
        if let Some(mem) = num("memory")
            && mem != m.memory_mib
        {
            drift.push(format!("{mem} MiB (config {})", m.memory_mib));
        }
        let boot = spell::boot_order(&m.boot_order);
        match cfg.get("boot").and_then(Value::as_str) {
            Some(b) if b == boot => {}
            other => drift.push(format!("boot `{}` (config `{boot}`)", other.unwrap_or(""))),
        }
        Ok(drift)
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
            match upid.as_str() {
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

    async fn existing(&self, m: &MachineSpec) -> Result<(Vm, Map<String, Value>), ControlError> {
        let vms = self.list().await?;
        let Some(vm) = self.pick(m, &vms)? else {
            if let Some(vm) = self.creating(m, &vms) {
                return Err(ControlError::Failed(format!(
                    "{} ({}) is still being created (lock: create): run again when its task ends",
                    m.vm_name,
                    Self::id(&vm)
                )));
            }
            return Err(ControlError::Absent(format!(
                "{} does not exist in the cluster: create it first (`okd-appliance nodes create {}`)",
                m.vm_name, m.node
            )));
        };
        let cfg = self.config(&vm).await?;
        self.differences(m, &vm, &cfg)?;
        let vm = self.refine_power(vm).await?;
        Ok((vm, cfg))
    }

    /// A running VM may be paused: `/cluster/resources` says `running` for it, QEMU's own
    /// state (`qmpstatus`) says `paused` (qemu-server `src/PVE/QemuServer.pm` `vmstatus`,
    /// `vm_is_paused`: `paused`, `prelaunch`, `suspended`).
    async fn refine_power(&self, mut vm: Vm) -> Result<Vm, ControlError> {
        // `unknown`: not in the nodes' status data yet; the node itself knows.
        if vm.running != Power::On && vm.running != Power::Other("unknown".into()) {
            return Ok(vm);
        }
        let status = self
            .api
            .get(&format!("{}/status/current", self.vm_path(&vm)), &[])
            .await
            .map_err(|e| e.into_control(&format!("reading the status of {}", Self::id(&vm))))?;
        match status.get("qmpstatus").and_then(Value::as_str) {
            Some(q @ ("paused" | "prelaunch" | "suspended")) => {
                vm.running = Power::Other(if q == "prelaunch" { "paused" } else { q }.to_owned());
            }
            Some("stopped") => vm.running = Power::Off,
            _ => match status.get("status").and_then(Value::as_str) {
                Some("running") => vm.running = Power::On,
                Some("stopped") => vm.running = Power::Off,
                _ => {}
            },
        }
        Ok(vm)
    }

    async fn ensure(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let _one_at_a_time = self.serial.lock().await;
        if let Some(vm) = self.find_settled(m).await? {
            let cfg = self.config(&vm).await?;
            let drift = self.differences(m, &vm, &cfg)?;
            let fetched = self.ensure_iso(m).await?;
            let mut what = format!("{} exists", Self::id(&vm));
            if !drift.is_empty() {
                what.push_str(&format!(
                    "; differs from the config (not changed): {}",
                    drift.join(", ")
                ));
            }
            return Ok(match fetched {
                Some(iso) => Outcome::Changed(format!("{what}; downloaded {iso}")),
                None => Outcome::Unchanged(what),
            });
        }
        // The ISO first: a download that fails leaves no VM behind.
        let fetched = self.ensure_iso(m).await?;
        let vmid = self.create(m).await?;
        let mut what = format!(
            "created vm {vmid} on {} ({} vCPU, {} MiB, {} GiB on {}, {}, {})",
            self.px.node,
            m.cores,
            m.memory_mib,
            m.disk_gib,
            self.px.storage,
            spell::nic(m.mac, &self.px),
            spell::boot_order(&m.boot_order)
        );
        if let Some(iso) = fetched {
            what.push_str(&format!("; downloaded {iso}"));
        }
        Ok(Outcome::Changed(what))
    }

    /// Creates the VM: the configured VM ID, or the next free one (asked again when another
    /// client takes it first). Lock timeouts are retried with backoff.
    async fn create(&self, m: &MachineSpec) -> Result<u32, ControlError> {
        let path = format!("{}/qemu", self.node_path());
        let mut wait = self.pace.backoff;
        let mut attempt = 1;
        loop {
            let vmid = match m.vmid {
                Some(id) => id,
                None => self.next_id().await?,
            };
            let params = spell::create_params(m, &self.px, vmid);
            let result = match self.api.post(&path, &params).await {
                Ok(upid) => match upid.as_str() {
                    Some(upid) => self
                        .api
                        .wait(upid, self.timeouts.task, self.pace.poll)
                        .await
                        .map(drop),
                    None => Err(PveError::Refused {
                        status: 200,
                        message: "the create request returned no task".into(),
                    }),
                },
                // Create's VM.Allocate check answers a bare 403 (qemu-server
                // `src/PVE/API2/Qemu.pm` `create_vm`: `raise_perm_exc()`).
                Err(e) => Err(self.api.needs(e, &self.allocate_path(vmid), "VM.Allocate")),
            };
            let err = match result {
                Ok(()) => return Ok(vmid),
                Err(e) => e,
            };
            // A lock held by another task, or a free ID another client took between
            // `nextid` and the create, is worth another attempt; anything else is not.
            let retryable = err.is_lock_timeout() || (m.vmid.is_none() && err.is_already_exists());
            if !retryable || attempt >= self.pace.attempts {
                return Err(self.failed_create(m, vmid, err).await);
            }
            // A lost answer may hide a create that happened: look before trying again.
            if let Ok(Some(vm)) = self.find(m).await {
                return Ok(vm.vmid);
            }
            tracing::info!(
                "creating {}: {} (attempt {attempt} of {}), retrying in {}",
                m.vm_name,
                err.message().unwrap_or("failed"),
                self.pace.attempts,
                humantime::format_duration(wait)
            );
            tokio::time::sleep(wait).await;
            wait *= 2;
            attempt += 1;
        }
    }

    async fn next_id(&self) -> Result<u32, ControlError> {
        let v = self
            .api
            .get("/cluster/nextid", &[])
            .await
            .map_err(|e| e.into_control("asking for a free VM ID"))?;
        as_u32(&v).ok_or_else(|| {
            ControlError::Failed(format!(
                "proxmox answered `{v}` when asked for a free VM ID"
            ))
        })
    }

    /// The create's error, saying whether a VM was left behind.
    async fn failed_create(&self, m: &MachineSpec, vmid: u32, err: PveError) -> ControlError {
        let listed = self.list().await;
        let left = match &listed {
            Ok(vms) => match vms.iter().find(|vm| vm.vmid == vmid && vm.placeholder()) {
                Some(vm) => format!(
                    "; {} is still being created (lock: create): its task goes on in proxmox, and `okd-appliance nodes create {}` again waits for it",
                    Self::id(&vm.vm()),
                    m.node
                ),
                None => match self.pick(m, vms) {
                    Ok(Some(vm)) => format!(
                        "; {} was left behind: remove it with `okd-appliance nodes destroy {} --yes`",
                        Self::id(&vm),
                        m.node
                    ),
                    Ok(None) => "; no VM was left behind".to_owned(),
                    Err(e) => format!("; {e}"),
                },
            },
            Err(_) => format!(
                "; whether vm {vmid} was left behind is unknown: check {} in the Proxmox GUI",
                m.vm_name
            ),
        };
        let mut left = left;
        if let InstallMedium::Iso { file_name, .. } = &m.install {
            // Downloaded before the create; kept for the next attempt.
            left.push_str(&format!(
                "; the ISO {} stays (`nodes destroy {}` removes it)",
                spell::iso_volume(&self.px, file_name),
                m.node
            ));
        }
        let mut e = err.into_control(&format!("creating {} as vm {vmid}", m.vm_name));
        match &mut e {
            ControlError::Failed(msg) | ControlError::Timeout(msg) => msg.push_str(&left),
            // Privilege and connection errors happen before Proxmox creates anything.
            _ => {}
        }
        e
    }

    /// The node's ISO in the ISO storage: downloaded with `download-url` unless there.
    /// Returns the volume when it was downloaded now.
    async fn ensure_iso(&self, m: &MachineSpec) -> Result<Option<String>, ControlError> {
        let InstallMedium::Iso { url, file_name } = &m.install else {
            return Ok(None);
        };
        let volume = spell::iso_volume(&self.px, file_name);
        let held = self.isos_of(m).await?;
        if held.contains(&volume) {
            return Ok(None);
        }
        let path = format!(
            "{}/storage/{}/download-url",
            self.node_path(),
            seg(&self.px.iso_storage)
        );
        let params = [
            ("url", url.clone()),
            ("content", "iso".to_owned()),
            ("filename", file_name.clone()),
        ];
        // pve-storage `src/PVE/API2/Storage/Status.pm` `download_url`: Datastore.AllocateTemplate
        // on the storage (named when missing), then `or(Sys.Audit and Sys.Modify on /,
        // Sys.AccessNetwork on the node)`, a bare 403.
        self.task("POST", &path, &params, self.timeouts.task)
            .await
            .map_err(|e| {
                self.api
                    .needs(e, &format!("/nodes/{}", self.px.node), "Sys.AccessNetwork")
                    .into_control(&format!("downloading {url} into {volume}"))
            })?;
        // The node's ISOs made with other kernel arguments (their names carry a digest of
        // them): never booted again, so removed; a failure leaves them, and says so.
        for stale in held {
            if let Err(e) = self.delete_iso(&stale).await {
                tracing::warn!("{}: the outdated ISO {stale} stays: {e}", m.node);
            }
        }
        Ok(Some(volume))
    }

    /// Every ISO volume of the node's VM in the ISO storage: the current one and those made
    /// with older kernel arguments (`plan::machines::is_iso_of`).
    async fn isos_of(&self, m: &MachineSpec) -> Result<Vec<String>, ControlError> {
        let path = format!(
            "{}/storage/{}/content",
            self.node_path(),
            seg(&self.px.iso_storage)
        );
        let items = self
            .api
            .get(&path, &[("content", "iso".to_owned())])
            .await
            .map_err(|e| e.into_control(&format!("listing the ISOs of {}", self.px.iso_storage)))?;
        let prefix = format!("{}:iso/", self.px.iso_storage);
        Ok(items
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i.get("volid").and_then(Value::as_str))
            .filter(|v| {
                v.strip_prefix(&prefix)
                    .is_some_and(|f| crate::plan::machines::is_iso_of(&m.vm_name, f))
            })
            .map(str::to_owned)
            .collect())
    }

    /// Deletes an ISO volume (Datastore.Allocate on its storage).
    async fn delete_iso(&self, volume: &str) -> Result<(), ControlError> {
        let path = format!(
            "{}/storage/{}/content/{}",
            self.node_path(),
            seg(&self.px.iso_storage),
            seg(volume)
        );
        self.task("DELETE", &path, &[], self.timeouts.task)
            .await
            .map(drop)
            .map_err(|e| e.into_control(&format!("removing {volume}")))
    }

    /// Starts or stops the VM: a task at its node, and for an HA-managed VM the wait until
    /// ha-manager has done it.
    async fn power_task(
        &self,
        vm: &Vm,
        action: &str,
        params: &[(&str, String)],
        limit: Duration,
    ) -> Result<(), PveError> {
        let path = format!("{}/status/{action}", self.vm_path(vm));
        self.task("POST", &path, params, limit).await?;
        if vm.ha && matches!(action, "start" | "stop" | "shutdown") {
            self.await_power(vm, action == "start", limit).await?;
        }
        Ok(())
    }

    /// Waits until the VM runs (or stops), for at most `limit`: ha-manager acts on a request
    /// after its task has ended, and a request that got no answer may have been done.
    async fn await_power(&self, vm: &Vm, running: bool, limit: Duration) -> Result<(), PveError> {
        let deadline = tokio::time::Instant::now() + limit;
        let path = format!("{}/status/current", self.vm_path(vm));
        loop {
            let status = self.api.get(&path, &[]).await?;
            let now = status.get("status").and_then(Value::as_str);
            if now == Some(if running { "running" } else { "stopped" }) {
                return Ok(());
            }
            if tokio::time::Instant::now() + self.pace.poll > deadline {
                let asked = if vm.ha {
                    "ha-manager was asked to "
                } else {
                    "proxmox was asked to "
                };
                return Err(PveError::TaskTimeout(format!(
                    "{asked}{} {}, and it is still {} after {}",
                    if running { "start" } else { "stop" },
                    Self::id(vm),
                    now.unwrap_or("unknown"),
                    humantime::format_duration(limit)
                )));
            }
            tokio::time::sleep(self.pace.poll).await;
        }
    }

    /// Stops the VM at once: `overrule-shutdown` ends a shutdown task still holding its lock
    /// (not for HA-managed VMs: qemu-server refuses it for them).
    async fn stop(&self, vm: &Vm) -> Result<(), PveError> {
        let params: &[(&str, String)] = if vm.ha {
            &[]
        } else {
            &[("overrule-shutdown", "1".to_owned())]
        };
        self.power_task(vm, "stop", params, self.timeouts.task)
            .await
    }

    async fn power_on(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let (vm, _) = self.existing(m).await?;
        if vm.running == Power::On {
            return Ok(Outcome::Unchanged(format!("{} is running", Self::id(&vm))));
        }
        if let Power::Other(state) = &vm.running
            && state != "unknown"
        {
            // Paused (or suspended): a start would answer "already running".
            self.power_task(&vm, "resume", &[], self.timeouts.task)
                .await
                .map_err(|e| e.into_control(&format!("resuming {}", Self::id(&vm))))?;
            return Ok(Outcome::Changed(format!(
                "resumed {} (it was {state})",
                Self::id(&vm)
            )));
        }
        self.power_task(&vm, "start", &[], self.timeouts.task)
            .await
            .map_err(|e| e.into_control(&format!("starting {}", Self::id(&vm))))?;
        Ok(Outcome::Changed(format!("started {}", Self::id(&vm))))
    }

    /// ACPI shutdown first; if the guest is still running after the shutdown timeout, stop it.
    async fn power_off(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let (vm, _) = self.existing(m).await?;
        if vm.running == Power::Off {
            return Ok(Outcome::Unchanged(format!("{} is stopped", Self::id(&vm))));
        }
        if let Power::Other(state) = &vm.running
            && state != "unknown"
        {
            // qemu-server's `vm_shutdown` refuses a paused VM ("sending a graceful shutdown
            // command to paused VMs runs into timeouts").
            self.stop(&vm)
                .await
                .map_err(|e| e.into_control(&format!("stopping {}", Self::id(&vm))))?;
            return Ok(Outcome::Changed(format!(
                "{} was {state}: stopped (a {state} guest can't shut down)",
                Self::id(&vm)
            )));
        }
        let grace = self.timeouts.shutdown;
        let shutdown = self
            .power_task(
                &vm,
                "shutdown",
                &[("timeout", grace.as_secs().max(1).to_string())],
                // Proxmox ends the task itself at its timeout; allow it a little more.
                grace + self.timeouts.request,
            )
            .await;
        match shutdown {
            Ok(()) => return Ok(Outcome::Changed(format!("shut down {}", Self::id(&vm)))),
            // The request got no answer: the node may well be shutting the VM down. That is
            // no sign of a guest ignoring ACPI; wait for it instead of forcing it off.
            Err(PveError::Control(ControlError::Timeout(why))) => {
                return match self.await_power(&vm, false, grace).await {
                    Ok(()) => Ok(Outcome::Changed(format!("shut down {}", Self::id(&vm)))),
                    Err(_) => Err(ControlError::Timeout(format!(
                        "{why}; {} is still running {} later: it may be shutting down; run `nodes stop` again to force it off after timeouts.shutdown",
                        Self::id(&vm),
                        humantime::format_duration(grace)
                    ))),
                };
            }
            // Connection, TLS and privilege problems would hit the stop too.
            Err(PveError::Control(e)) => return Err(e),
            Err(e) => tracing::info!(
                "{}: graceful shutdown did not finish ({}), forcing it off",
                Self::id(&vm),
                e.message().unwrap_or("timeout")
            ),
        }
        self.stop(&vm)
            .await
            .map_err(|e| e.into_control(&format!("stopping {}", Self::id(&vm))))?;
        Ok(Outcome::Changed(format!(
            "{} did not shut down within {}: forced off",
            Self::id(&vm),
            humantime::format_duration(grace)
        )))
    }

    async fn reset(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let (vm, _) = self.existing(m).await?;
        if vm.running != Power::On {
            return Err(ControlError::Failed(format!(
                "{} is {}: start it instead of resetting it",
                Self::id(&vm),
                match &vm.running {
                    Power::Off => "not running".to_owned(),
                    other => other.to_string(),
                }
            )));
        }
        self.power_task(&vm, "reset", &[], self.timeouts.task)
            .await
            .map_err(|e| e.into_control(&format!("resetting {}", Self::id(&vm))))?;
        Ok(Outcome::Changed(format!("reset {}", Self::id(&vm))))
    }

    /// Proxmox has no one-time boot override: the device goes first in the persistent order.
    async fn boot_once(
        &self,
        m: &MachineSpec,
        device: BootDevice,
    ) -> Result<Outcome, ControlError> {
        let (vm, cfg) = self.existing(m).await?;
        if device == BootDevice::Cdrom
            && cfg
                .get(spell::CDROM)
                .and_then(Value::as_str)
                .and_then(spell::cdrom_volume)
                .is_none()
        {
            return Err(ControlError::Failed(format!(
                "{} has no ISO in its CD drive: insert the media first",
                Self::id(&vm)
            )));
        }
        let order = spell::boot_first(&m.boot_order, device);
        if cfg.get("boot").and_then(Value::as_str) == Some(order.as_str()) {
            return Ok(Outcome::Unchanged(format!(
                "{} boots `{order}`",
                Self::id(&vm)
            )));
        }
        self.set(&vm, "boot", &order).await?;
        // `boot` is no hot-pluggable option (qemu-server `src/PVE/QemuServer.pm`
        // `vmconfig_hotplug_pending`): on a running VM it stays pending until a cold start.
        let pending = if vm.running == Power::Off {
            ""
        } else {
            "; it is pending until the VM is stopped and started (a reset or a reboot inside the guest keeps the old order)"
        };
        Ok(Outcome::Changed(format!(
            "{} boots `{order}` (proxmox has no one-time boot device: the order stays until changed){pending}",
            Self::id(&vm)
        )))
    }

    async fn insert_media(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let InstallMedium::Iso { file_name, .. } = &m.install else {
            return Err(ControlError::Failed(format!(
                "{} installs over the network (install: pxe): it has no ISO",
                m.node
            )));
        };
        let (vm, cfg) = self.existing(m).await?;
        let volume = spell::iso_volume(&self.px, file_name);
        let fetched = self.ensure_iso(m).await?;
        let inserted = cfg
            .get(spell::CDROM)
            .and_then(Value::as_str)
            .and_then(spell::cdrom_volume);
        if inserted == Some(volume.as_str()) && fetched.is_none() {
            return Ok(Outcome::Unchanged(format!(
                "{} has {volume}",
                Self::id(&vm)
            )));
        }
        self.set(&vm, spell::CDROM, &spell::cdrom(&volume)).await?;
        Ok(Outcome::Changed(format!(
            "inserted {volume} into {}",
            Self::id(&vm)
        )))
    }

    async fn eject_media(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let (vm, cfg) = self.existing(m).await?;
        let inserted = cfg
            .get(spell::CDROM)
            .and_then(Value::as_str)
            .and_then(spell::cdrom_volume);
        let Some(volume) = inserted else {
            return Ok(Outcome::Unchanged(format!(
                "{} has no media",
                Self::id(&vm)
            )));
        };
        let volume = volume.to_owned();
        self.set(&vm, spell::CDROM, spell::empty_cdrom()).await?;
        Ok(Outcome::Changed(format!(
            "ejected {volume} from {}",
            Self::id(&vm)
        )))
    }

    async fn status(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let vms = self.list().await?;
        let Some(vm) = self.pick(m, &vms)? else {
            if let Some(vm) = self.creating(m, &vms) {
                return Ok(Outcome::Status(MachineStatus::Present {
                    id: Self::id(&vm),
                    power: Power::Other("being created (lock: create)".into()),
                    media: None,
                    drift: Vec::new(),
                }));
            }
            return Ok(Outcome::Status(MachineStatus::Absent));
        };
        let cfg = self.config(&vm).await?;
        let vm = self.refine_power(vm).await?;
        let drift = match self.differences(m, &vm, &cfg) {
            Ok(drift) => drift,
            Err(ControlError::Conflict(why)) => vec![why],
            Err(e) => return Err(e),
        };
        Ok(Outcome::Status(MachineStatus::Present {
            id: Self::id(&vm),
            power: vm.running,
            media: cfg
                .get(spell::CDROM)
                .and_then(Value::as_str)
                .and_then(spell::cdrom_volume)
                .map(str::to_owned),
            drift,
        }))
    }

    async fn destroy(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let _one_at_a_time = self.serial.lock().await;
        // The ISO storage is listed first: without the privilege to list it, nothing is
        // destroyed.
        // Listing the ISO storage needs Datastore.Audit or Datastore.AllocateSpace on it.
        let isos = self.isos_of(m).await?;
        let vms = self.list().await?;
        let Some(vm) = self.pick(m, &vms)? else {
            if let Some(vm) = self.creating(m, &vms) {
                return Err(ControlError::Failed(format!(
                    "{} ({}) is still being created (lock: create): nothing was destroyed; run again when its task ends",
                    m.vm_name,
                    Self::id(&vm)
                )));
            }
            if isos.is_empty() {
                return Ok(Outcome::Unchanged(format!("{} is absent", m.vm_name)));
            }
            for iso in &isos {
                self.delete_iso(iso).await?;
            }
            return Ok(Outcome::Changed(format!(
                "no VM; removed {}",
                isos.join(", ")
            )));
        };
        // A VM with the node's name but another MAC may be someone else's: never destroy it.
        let cfg = self.config(&vm).await?;
        self.differences(m, &vm, &cfg)?;
        if vm.running != Power::Off {
            self.stop(&vm).await.map_err(|e| {
                e.into_control(&format!("stopping {} to destroy it", Self::id(&vm)))
            })?;
        }
        self.task(
            "DELETE",
            &self.vm_path(&vm),
            &[
                ("purge", "1".to_owned()),
                ("destroy-unreferenced-disks", "1".to_owned()),
            ],
            self.timeouts.task,
        )
        .await
        .map_err(|e| e.into_control(&format!("destroying {}", Self::id(&vm))))?;
        let mut what = format!("destroyed {} and its disks", Self::id(&vm));
        for iso in &isos {
            if let Err(e) = self.delete_iso(iso).await {
                return Err(ControlError::Failed(format!(
                    "{what}, but {iso} stays: {e} (`nodes destroy {}` again removes it)",
                    m.node
                )));
            }
            what.push_str(&format!("; removed {iso}"));
        }
        Ok(Outcome::Changed(what))
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

/// Proxmox sends numbers as JSON numbers or, in configs, as strings.
fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

fn as_u32(v: &Value) -> Option<u32> {
    as_u64(v).and_then(|n| u32::try_from(n).ok())
}
