//! The Proxmox VE provider: the cluster's machines as QEMU VMs on one Proxmox node, driven over
//! the REST API with an API token.
//!
//! A VM is found by its name (`<node>.<cluster domain>`), created with the node's MAC on
//! `net0`, a new disk on `scsi0`, the boot order of the plan and, for the ISO path, the node's
//! live ISO (fetched into the ISO storage with `download-url`) on `ide2`. Nothing relies on
//! `args` (root@pam only: an API token can't set it).
//!
//! Known failure modes, each with its own handling: a missing privilege (403, named in the
//! error with the role that grants it), `can't lock file ... got timeout` (retried with
//! exponential backoff; creates run one at a time), a `nextid` race (another client took the
//! ID: a fresh one is asked for), MAC drift (an error, never "fixed"), a task that never ends
//! (bounded wait). A create that fails after a VM appeared says which VM was left behind.

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
}

/// A VM as the node's VM list shows it.
#[derive(Debug, Clone)]
struct Vm {
    vmid: u32,
    running: Power,
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

    fn node_path(&self) -> String {
        format!("/nodes/{}", seg(&self.px.node))
    }

    fn vm_path(&self, vmid: u32) -> String {
        format!("{}/qemu/{vmid}", self.node_path())
    }

    fn id(&self, vmid: u32) -> String {
        format!("vm {vmid} on {}", self.px.node)
    }

    /// The node's VMs this token may see (VM.Audit).
    async fn list(&self) -> Result<Vec<(u32, Option<String>, Power)>, ControlError> {
        let data = self
            .api
            .get(&format!("{}/qemu", self.node_path()), &[])
            .await
            .map_err(|e| e.into_control("listing the VMs"))?;
        let items = data.as_array().ok_or_else(|| {
            ControlError::Failed("listing the VMs: proxmox did not answer with a list".into())
        })?;
        Ok(items
            .iter()
            .filter_map(|vm| {
                let vmid = vm.get("vmid").and_then(as_u32)?;
                let name = vm.get("name").and_then(Value::as_str).map(str::to_owned);
                let power = match vm.get("status").and_then(Value::as_str) {
                    Some("running") => Power::On,
                    Some("stopped") => Power::Off,
                    other => Power::Other(other.unwrap_or("unknown").to_owned()),
                };
                Some((vmid, name, power))
            })
            .collect())
    }

    /// The machine's VM, if it exists. A configured VM ID that another VM holds, or a VM of
    /// this name under another ID, is a conflict.
    async fn find(&self, m: &MachineSpec) -> Result<Option<Vm>, ControlError> {
        let vms = self.list().await?;
        let named: Vec<&(u32, Option<String>, Power)> = vms
            .iter()
            .filter(|(_, name, _)| name.as_deref() == Some(m.vm_name.as_str()))
            .collect();
        if named.len() > 1 {
            let ids: Vec<String> = named.iter().map(|(id, _, _)| id.to_string()).collect();
            return Err(ControlError::Conflict(format!(
                "{} VMs on {} are named {}: {}; okd-appliance can't tell which one is the node's",
                named.len(),
                self.px.node,
                m.vm_name,
                ids.join(", ")
            )));
        }
        if let Some(want) = m.vmid {
            if let Some((_, other, _)) = vms
                .iter()
                .find(|(id, name, _)| *id == want && name.as_deref() != Some(m.vm_name.as_str()))
            {
                return Err(ControlError::Conflict(format!(
                    "VM ID {want}, configured for {}, belongs to VM `{}` on {}: nothing was changed; give the node another vmid",
                    m.node,
                    other.as_deref().unwrap_or("(no name)"),
                    self.px.node
                )));
            }
            if let Some((id, _, _)) = named.first()
                && *id != want
            {
                return Err(ControlError::Conflict(format!(
                    "{} exists as VM {id}, but the config gives it VM ID {want}: nothing was changed",
                    m.vm_name
                )));
            }
        }
        Ok(named.first().map(|(vmid, _, power)| Vm {
            vmid: *vmid,
            running: power.clone(),
        }))
    }

    async fn config(&self, vmid: u32) -> Result<Map<String, Value>, ControlError> {
        let data = self
            .api
            .get(&format!("{}/config", self.vm_path(vmid)), &[])
            .await
            .map_err(|e| e.into_control(&format!("reading the config of vm {vmid}")))?;
        match data {
            Value::Object(map) => Ok(map),
            _ => Err(ControlError::Failed(format!(
                "reading the config of vm {vmid}: proxmox did not answer with an object"
            ))),
        }
    }

    /// Where the VM differs from the plan. Err when its NIC has another MAC (or none): that
    /// VM is not the node's, whatever its name says.
    fn differences(
        &self,
        m: &MachineSpec,
        vmid: u32,
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
                self.id(vmid),
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
    async fn set(&self, vmid: u32, key: &str, value: &str) -> Result<(), ControlError> {
        let path = format!("{}/config", self.vm_path(vmid));
        let params = [(key, value.to_owned())];
        self.locked(|| self.api.put(&path, &params))
            .await
            .map(drop)
            .map_err(|e| e.into_control(&format!("setting {key} of vm {vmid}")))
    }

    async fn existing(&self, m: &MachineSpec) -> Result<(Vm, Map<String, Value>), ControlError> {
        let Some(vm) = self.find(m).await? else {
            return Err(ControlError::Absent(format!(
                "{} does not exist on {}: create it first (`okd-appliance nodes create {}`)",
                m.vm_name, self.px.node, m.node
            )));
        };
        let cfg = self.config(vm.vmid).await?;
        self.differences(m, vm.vmid, &cfg)?;
        Ok((vm, cfg))
    }

    async fn ensure(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let _one_at_a_time = self.serial.lock().await;
        if let Some(vm) = self.find(m).await? {
            let cfg = self.config(vm.vmid).await?;
            let drift = self.differences(m, vm.vmid, &cfg)?;
            let fetched = self.ensure_iso(m).await?;
            let mut what = format!("{} exists", self.id(vm.vmid));
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
            "created {} ({} vCPU, {} MiB, {} GiB on {}, {}, {})",
            self.id(vmid),
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
                Err(e) => Err(e),
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
        let left = match self.find(m).await {
            Ok(Some(vm)) => format!(
                "; {} was left behind: remove it with `okd-appliance nodes destroy {} --yes`",
                self.id(vm.vmid),
                m.node
            ),
            Ok(None) => "; no VM was left behind".to_owned(),
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
        if self.iso_present(&volume).await? {
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
        self.task("POST", &path, &params, self.timeouts.task)
            .await
            .map_err(|e| e.into_control(&format!("downloading {url} into {volume}")))?;
        Ok(Some(volume))
    }

    async fn iso_present(&self, volume: &str) -> Result<bool, ControlError> {
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
        Ok(items.as_array().is_some_and(|items| {
            items
                .iter()
                .any(|i| i.get("volid").and_then(Value::as_str) == Some(volume))
        }))
    }

    async fn remove_iso(&self, m: &MachineSpec) -> Result<Option<String>, ControlError> {
        let InstallMedium::Iso { file_name, .. } = &m.install else {
            return Ok(None);
        };
        let volume = spell::iso_volume(&self.px, file_name);
        if !self.iso_present(&volume).await? {
            return Ok(None);
        }
        let path = format!(
            "{}/storage/{}/content/{}",
            self.node_path(),
            seg(&self.px.iso_storage),
            seg(&volume)
        );
        self.task("DELETE", &path, &[], self.timeouts.task)
            .await
            .map_err(|e| e.into_control(&format!("removing {volume}")))?;
        Ok(Some(volume))
    }

    async fn power_on(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let (vm, _) = self.existing(m).await?;
        if vm.running == Power::On {
            return Ok(Outcome::Unchanged(format!(
                "{} is running",
                self.id(vm.vmid)
            )));
        }
        self.task(
            "POST",
            &format!("{}/status/start", self.vm_path(vm.vmid)),
            &[],
            self.timeouts.task,
        )
        .await
        .map_err(|e| e.into_control(&format!("starting vm {}", vm.vmid)))?;
        Ok(Outcome::Changed(format!("started {}", self.id(vm.vmid))))
    }

    /// ACPI shutdown first; if the guest is still running after the shutdown timeout, stop it.
    async fn power_off(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let (vm, _) = self.existing(m).await?;
        if vm.running == Power::Off {
            return Ok(Outcome::Unchanged(format!(
                "{} is stopped",
                self.id(vm.vmid)
            )));
        }
        let grace = self.timeouts.shutdown;
        let shutdown = self
            .task(
                "POST",
                &format!("{}/status/shutdown", self.vm_path(vm.vmid)),
                &[("timeout", grace.as_secs().max(1).to_string())],
                // Proxmox ends the task itself at its timeout; allow it a little more.
                grace + self.timeouts.request,
            )
            .await;
        match shutdown {
            Ok(_) => return Ok(Outcome::Changed(format!("shut down {}", self.id(vm.vmid)))),
            // Connection, TLS and privilege problems would hit the stop too.
            Err(PveError::Control(e)) if !matches!(e, ControlError::Timeout(_)) => return Err(e),
            Err(e) => tracing::info!(
                "vm {}: graceful shutdown did not finish ({}), forcing it off",
                vm.vmid,
                e.message().unwrap_or("timeout")
            ),
        }
        self.task(
            "POST",
            &format!("{}/status/stop", self.vm_path(vm.vmid)),
            // Ends a shutdown task still holding the VM's lock.
            &[("overrule-shutdown", "1".to_owned())],
            self.timeouts.task,
        )
        .await
        .map_err(|e| e.into_control(&format!("stopping vm {}", vm.vmid)))?;
        Ok(Outcome::Changed(format!(
            "{} did not shut down within {}: forced off",
            self.id(vm.vmid),
            humantime::format_duration(grace)
        )))
    }

    async fn reset(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let (vm, _) = self.existing(m).await?;
        if vm.running != Power::On {
            return Err(ControlError::Failed(format!(
                "{} is not running: start it instead of resetting it",
                self.id(vm.vmid)
            )));
        }
        self.task(
            "POST",
            &format!("{}/status/reset", self.vm_path(vm.vmid)),
            &[],
            self.timeouts.task,
        )
        .await
        .map_err(|e| e.into_control(&format!("resetting vm {}", vm.vmid)))?;
        Ok(Outcome::Changed(format!("reset {}", self.id(vm.vmid))))
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
                self.id(vm.vmid)
            )));
        }
        let order = spell::boot_first(&m.boot_order, device);
        if cfg.get("boot").and_then(Value::as_str) == Some(order.as_str()) {
            return Ok(Outcome::Unchanged(format!(
                "{} boots `{order}`",
                self.id(vm.vmid)
            )));
        }
        self.set(vm.vmid, "boot", &order).await?;
        Ok(Outcome::Changed(format!(
            "{} boots `{order}` (proxmox has no one-time boot device: the order stays until changed)",
            self.id(vm.vmid)
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
                self.id(vm.vmid)
            )));
        }
        self.set(vm.vmid, spell::CDROM, &spell::cdrom(&volume))
            .await?;
        Ok(Outcome::Changed(format!(
            "inserted {volume} into {}",
            self.id(vm.vmid)
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
                self.id(vm.vmid)
            )));
        };
        let volume = volume.to_owned();
        self.set(vm.vmid, spell::CDROM, spell::empty_cdrom())
            .await?;
        Ok(Outcome::Changed(format!(
            "ejected {volume} from {}",
            self.id(vm.vmid)
        )))
    }

    async fn status(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let Some(vm) = self.find(m).await? else {
            return Ok(Outcome::Status(MachineStatus::Absent));
        };
        let cfg = self.config(vm.vmid).await?;
        let drift = match self.differences(m, vm.vmid, &cfg) {
            Ok(drift) => drift,
            Err(ControlError::Conflict(why)) => vec![why],
            Err(e) => return Err(e),
        };
        Ok(Outcome::Status(MachineStatus::Present {
            id: self.id(vm.vmid),
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
        let Some(vm) = self.find(m).await? else {
            return Ok(match self.remove_iso(m).await? {
                Some(iso) => Outcome::Changed(format!("no VM; removed {iso}")),
                None => Outcome::Unchanged(format!("{} is absent", m.vm_name)),
            });
        };
        // A VM with the node's name but another MAC may be someone else's: never destroy it.
        let cfg = self.config(vm.vmid).await?;
        self.differences(m, vm.vmid, &cfg)?;
        if vm.running != Power::Off {
            self.task(
                "POST",
                &format!("{}/status/stop", self.vm_path(vm.vmid)),
                &[("overrule-shutdown", "1".to_owned())],
                self.timeouts.task,
            )
            .await
            .map_err(|e| e.into_control(&format!("stopping vm {} to destroy it", vm.vmid)))?;
        }
        self.task(
            "DELETE",
            &self.vm_path(vm.vmid),
            &[
                ("purge", "1".to_owned()),
                ("destroy-unreferenced-disks", "1".to_owned()),
            ],
            self.timeouts.task,
        )
        .await
        .map_err(|e| e.into_control(&format!("destroying vm {}", vm.vmid)))?;
        let mut what = format!("destroyed {} and its disks", self.id(vm.vmid));
        if let Some(iso) = self.remove_iso(m).await? {
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
