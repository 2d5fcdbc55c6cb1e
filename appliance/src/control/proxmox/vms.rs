//! The Proxmox VE provider's VMs found and made: the cluster's VMs listed, the machine's
//! picked by name and VM ID (a create still running waited for, a conflict refused), its config
//! compared with the plan, and `ensure`, which creates it (serialized, lock errors and `nextid`
//! races retried) or brings it in line.

use super::answers::{self, Resource, VmConfig, VmStatus};
use super::api::{self, PveError};
use super::started::Started;
use super::{Listed, ProxmoxProvider, Vm, spell};
use crate::control::{ControlError, Outcome, Power};
use crate::plan::machines::{InstallMedium, MachineSpec};

impl ProxmoxProvider {
    /// The cluster's QEMU VMs this token may see (VM.Audit on each), wherever they run.
    pub(super) async fn list(&self) -> Result<Vec<Listed>, ControlError> {
        let data = self
            .api
            .get("/cluster/resources", &[("type", "vm".to_owned())])
            .await
            .map_err(|e| e.into_control("listing the cluster's VMs"))?;
        let items: Vec<Resource> = api::read(data, "a list").map_err(|why| {
            ControlError::Failed(format!("listing the cluster's VMs: proxmox {why}"))
        })?;
        let mut vms: Vec<Listed> = items
            .into_iter()
            .filter(|vm| vm.kind.as_deref() == Some("qemu"))
            .filter_map(|vm| {
                Some(Listed {
                    vmid: vm.vmid?,
                    node: vm.node?,
                    name: vm.name,
                    power: match vm.status.as_deref() {
                        Some("running") => Power::On,
                        Some("stopped") => Power::Off,
                        other => Power::Other(other.unwrap_or("unknown").to_owned()),
                    },
                    lock: vm.lock,
                    // pve-ha-manager `src/PVE/HA/Config.pm` `vm_is_ha_managed`: a resource
                    // in state `ignored` is not HA-managed; power calls act directly.
                    ha: vm
                        .hastate
                        .as_deref()
                        .is_some_and(|state| state != "ignored"),
                })
            })
            .collect();
        // The name comes from the nodes' status data, which a new VM is not in for a few
        // seconds: its config says (unless its node can't be reached: then it stays unnamed).
        for vm in vms.iter_mut().filter(|vm| vm.name.is_none()) {
            match self.config(&vm.vm()).await {
                Ok(cfg) => {
                    vm.name = cfg.name;
                    vm.lock = cfg.lock;
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
    pub(super) fn pick(&self, m: &MachineSpec, vms: &[Listed]) -> Result<Option<Vm>, ControlError> {
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
                    "{} is still being created (lock: create) after {}; it may be {}, from an earlier run or another client: nothing was created; run again when its task ends. If no task runs for it (a create cut off by a crash leaves its lock behind), clear it as root on the Proxmox node that holds it: `qm unlock {id}` then `qm destroy {id}` (qemu-server's `qm unlock` removes any lock; the destroy removes the placeholder)",
                    Self::ids(&busy),
                    humantime::format_duration(self.timeouts.task),
                    m.vm_name,
                    id = busy[0].vmid
                )));
            }
            tokio::time::sleep(self.pace.poll).await;
        }
    }

    /// The machine's VM's create still running, when its VM ID is configured.
    pub(super) fn creating(&self, m: &MachineSpec, vms: &[Listed]) -> Option<Vm> {
        m.vmid?;
        self.in_flight(m, vms).first().map(|vm| vm.vm())
    }

    pub(super) async fn config(&self, vm: &Vm) -> Result<VmConfig, ControlError> {
        let id = Self::id(vm);
        let data = self
            .api
            .get(&format!("{}/config", self.vm_path(vm)), &[])
            .await
            .map_err(|e| e.into_control(&format!("reading the config of {id}")))?;
        api::read(data, "an object").map_err(|why| {
            ControlError::Failed(format!("reading the config of {id}: proxmox {why}"))
        })
    }

    /// Where the VM differs from the plan. Err when its NIC has another MAC (or none): that
    /// VM is not the node's, whatever its name says.
    pub(super) fn differences(
        &self,
        m: &MachineSpec,
        vm: &Vm,
        cfg: &VmConfig,
    ) -> Result<Vec<String>, ControlError> {
        let nic = cfg.net0.as_deref();
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
        if let Some(cores) = cfg.cores
            && cores != u64::from(m.cores)
        {
            drift.push(format!("{cores} cores (config {})", m.cores));
        }
        if let Some(mem) = cfg.memory
            && mem != m.memory_mib
        {
            drift.push(format!("{mem} MiB (config {})", m.memory_mib));
        }
        let boot = spell::boot_order(&m.boot_order);
        match cfg.boot.as_deref() {
            Some(b) if b == boot => {}
            other => drift.push(format!("boot `{}` (config `{boot}`)", other.unwrap_or(""))),
        }
        Ok(drift)
    }

    pub(super) async fn existing(&self, m: &MachineSpec) -> Result<(Vm, VmConfig), ControlError> {
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
    pub(super) async fn refine_power(&self, mut vm: Vm) -> Result<Vm, ControlError> {
        // `unknown`: not in the nodes' status data yet; the node itself knows.
        if vm.running != Power::On && vm.running != Power::Other("unknown".into()) {
            return Ok(vm);
        }
        let status: VmStatus = self
            .api
            .get_as(
                &format!("{}/status/current", self.vm_path(&vm)),
                &[],
                "a VM status (an object)",
            )
            .await
            .map_err(|e| e.into_control(&format!("reading the status of {}", Self::id(&vm))))?;
        match status.qmpstatus.as_deref() {
            Some(q @ ("paused" | "prelaunch" | "suspended")) => {
                vm.running = Power::Other(if q == "prelaunch" { "paused" } else { q }.to_owned());
            }
            Some("stopped") => vm.running = Power::Off,
            _ => match status.status.as_deref() {
                Some("running") => vm.running = Power::On,
                Some("stopped") => vm.running = Power::Off,
                _ => {}
            },
        }
        Ok(vm)
    }

    pub(super) async fn ensure(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let _one_at_a_time = self.serial.lock().await;
        self.follow_started(m).await?;
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
            let mut started = Started {
                vmid,
                node: self.px.node.clone(),
                upid: None,
            };
            self.records.put(&m.vm_name, &started).map_err(|why| {
                ControlError::Failed(format!(
                    "{why}; nothing was created (okd-appliance records a create before it asks for one, so a rerun never makes a second VM)"
                ))
            })?;
            let result = match self.api.post(&path, &params).await {
                Ok(upid) => match answers::upid(&upid) {
                    Some(upid) => {
                        started.upid = Some(upid.to_owned());
                        // The create is under way now: a record that can't take its task is
                        // no reason to stop waiting for it (the one written before still says
                        // which ID a rerun must ask about).
                        if let Err(e) = self.records.put(&m.vm_name, &started) {
                            tracing::warn!("{} was started as task {upid}: {e}", m.vm_name);
                        }
                        self.api
                            .wait(upid, self.timeouts.task, self.pace.poll)
                            .await
                            .map(drop)
                    }
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
                Ok(()) => {
                    self.records.done(&m.vm_name);
                    return Ok(vmid);
                }
                Err(e) => e,
            };
            // Its end is known when its task failed (the worker unlinks the config: qemu-server
            // `create_vm`) or Proxmox refused the request; not after a timeout or a lost answer.
            if matches!(
                err,
                PveError::TaskFailed { .. } | PveError::Refused { .. } | PveError::Denied { .. }
            ) {
                self.records.done(&m.vm_name);
            }
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

    /// A create an earlier run started and whose end is not known: followed to its end before
    /// anything else, so a VM a pool-only grant can't see yet is never made twice.
    async fn follow_started(&self, m: &MachineSpec) -> Result<(), ControlError> {
        let Some(rec) = self.records.get(&m.vm_name)? else {
            return Ok(());
        };
        if let Some(upid) = &rec.upid {
            match self
                .api
                .wait(upid, self.timeouts.task, self.pace.poll)
                .await
            {
                // Created, or failed and unlinked: what Proxmox holds now says the rest.
                Ok(_) | Err(PveError::TaskFailed { .. }) => {
                    self.records.done(&m.vm_name);
                    return Ok(());
                }
                Err(PveError::TaskTimeout(why)) => {
                    return Err(ControlError::Timeout(format!(
                        "{} (vm {} on {}) is still being created by an earlier run: {why}; nothing was created, and `okd-appliance nodes create {}` again goes on following it",
                        m.vm_name, rec.vmid, rec.node, m.node
                    )));
                }
                // Proxmox no longer knows the task (the node's task index was cleared): the
                // VM ID says.
                Err(PveError::Refused { .. }) => {}
                Err(e) => {
                    return Err(e.into_control(&format!("following the create of {}", m.vm_name)));
                }
            }
        }
        if self.id_is_free(rec.vmid).await? {
            self.records.done(&m.vm_name);
            return Ok(());
        }
        let vms = self.list().await?;
        if let Some(vm) = self.pick(m, &vms)? {
            if vm.vmid == rec.vmid {
                self.records.done(&m.vm_name);
            }
            return Ok(());
        }
        if vms.iter().any(|vm| vm.vmid == rec.vmid && vm.placeholder()) {
            // Visible and still running: waited for as any create in flight.
            return Ok(());
        }
        Err(ControlError::Failed(format!(
            "VM ID {} on {}, which an earlier run asked Proxmox to create as {}, is taken but this token can't see it: the create may still be running (a grant on a pool reaches a VM only once its create ended) or the VM is another's; nothing was created. Check vm {} in Proxmox; if it is not {}, remove {}",
            rec.vmid,
            rec.node,
            m.vm_name,
            rec.vmid,
            m.vm_name,
            self.records
                .dir()
                .join(format!("{}.json", m.vm_name))
                .display()
        )))
    }

    /// Whether no guest of the cluster holds `vmid`, whoever may see it (`nextid?vmid=`).
    async fn id_is_free(&self, vmid: u32) -> Result<bool, ControlError> {
        match self
            .api
            .get("/cluster/nextid", &[("vmid", vmid.to_string())])
            .await
        {
            Ok(_) => Ok(true),
            Err(PveError::Refused { status: 400, .. }) => Ok(false),
            Err(e) => Err(e.into_control(&format!("asking whether VM ID {vmid} is free"))),
        }
    }

    async fn next_id(&self) -> Result<u32, ControlError> {
        let v = self
            .api
            .get("/cluster/nextid", &[])
            .await
            .map_err(|e| e.into_control("asking for a free VM ID"))?;
        answers::as_u32(&v).ok_or_else(|| {
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
                    // Only with proof: the task failed (its worker unlinked the config), Proxmox
                    // refused the request, or no guest holds the ID.
                    Ok(None) => match &err {
                        PveError::TaskFailed { .. }
                        | PveError::Refused { .. }
                        | PveError::Denied { .. } => "; no VM was left behind".to_owned(),
                        _ => match self.id_is_free(vmid).await {
                            Ok(true) => format!("; no VM was left behind (VM ID {vmid} is free)"),
                            _ => format!(
                                "; vm {vmid} may still be being created out of this token's sight (a grant on a pool reaches a VM only once its create ended): the create is recorded, and `okd-appliance nodes create {}` again follows it to its end",
                                m.node
                            ),
                        },
                    },
                    Err(e) => format!("; {e}"),
                },
            },
            Err(_) => format!(
                "; whether vm {vmid} was left behind is unknown: check {} in the Proxmox GUI",
                m.vm_name
            ),
        };
        let mut left = left;
        if let Some(pool) = &self.px.pool
            && err
                .message()
                .is_some_and(|msg| msg.contains(&format!("pool '{pool}' does not exist")))
        {
            // `check_pool_exist` (pve-access-control `RPCEnvironment.pm`): the pool is made by
            // hand, once, on any node of the cluster.
            left.push_str(&format!(
                "; create the pool on a Proxmox node first: `pveum pool add {pool}`"
            ));
        }
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
}
