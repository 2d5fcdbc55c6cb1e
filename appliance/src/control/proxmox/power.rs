//! The Proxmox VE provider's actions on an existing VM: its live ISO fetched, swapped and
//! removed, power on, off (shutdown, then stop) and reset (HA-managed VMs through ha-manager,
//! awaited), the boot order, media, status and destroy.

use std::time::Duration;

use super::answers::{VmStatus, Volume};
use super::api::{self, PveError, seg};
use super::{ProxmoxProvider, Vm, spell};
use crate::control::{ControlError, MachineStatus, Outcome, Power};
use crate::plan::machines::{BootDevice, InstallMedium, MachineSpec};

impl ProxmoxProvider {
    /// The node's ISO in the ISO storage: downloaded with `download-url` unless there.
    /// Returns the volume when it was downloaded now.
    pub(super) async fn ensure_iso(&self, m: &MachineSpec) -> Result<Option<String>, ControlError> {
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
                let hint = e.message().and_then(|m| spell::download_hint(url, m));
                let e = self
                    .api
                    .needs(e, &format!("/nodes/{}", self.px.node), "Sys.AccessNetwork")
                    .into_control(&format!("downloading {url} into {volume}"));
                match (e, hint) {
                    (ControlError::Failed(msg), Some(hint)) => {
                        ControlError::Failed(format!("{msg}: {hint}"))
                    }
                    (e, _) => e,
                }
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
        let what = format!("listing the ISOs of {}", self.px.iso_storage);
        let data = self
            .api
            .get(&path, &[("content", "iso".to_owned())])
            .await
            .map_err(|e| e.into_control(&what))?;
        // Not a list: no ISOs, as before the answers were typed.
        let items: Vec<Volume> = api::read(data, "a list").unwrap_or_default();
        let prefix = format!("{}:iso/", self.px.iso_storage);
        Ok(items
            .into_iter()
            .filter_map(|i| i.volid)
            .filter(|v| {
                v.strip_prefix(&prefix)
                    .is_some_and(|f| crate::plan::machines::is_iso_of(&m.vm_name, f))
            })
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
            let status: VmStatus = self
                .api
                .get_as(&path, &[], "a VM status (an object)")
                .await?;
            let now = status.status.as_deref();
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

    pub(super) async fn power_on(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
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
    pub(super) async fn power_off(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
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

    pub(super) async fn reset(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
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
    pub(super) async fn boot_once(
        &self,
        m: &MachineSpec,
        device: BootDevice,
    ) -> Result<Outcome, ControlError> {
        let (vm, cfg) = self.existing(m).await?;
        if device == BootDevice::Cdrom
            && cfg.ide2.as_deref().and_then(spell::cdrom_volume).is_none()
        {
            return Err(ControlError::Failed(format!(
                "{} has no ISO in its CD drive: insert the media first",
                Self::id(&vm)
            )));
        }
        let order = spell::boot_first(&m.boot_order, device);
        if cfg.boot.as_deref() == Some(order.as_str()) {
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

    pub(super) async fn insert_media(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let InstallMedium::Iso { file_name, .. } = &m.install else {
            return Err(ControlError::Failed(format!(
                "{} installs over the network (install: pxe): it has no ISO",
                m.node
            )));
        };
        let (vm, cfg) = self.existing(m).await?;
        let volume = spell::iso_volume(&self.px, file_name);
        let fetched = self.ensure_iso(m).await?;
        let inserted = cfg.ide2.as_deref().and_then(spell::cdrom_volume);
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

    pub(super) async fn eject_media(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let (vm, cfg) = self.existing(m).await?;
        let inserted = cfg.ide2.as_deref().and_then(spell::cdrom_volume);
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

    pub(super) async fn status(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
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
                .ide2
                .as_deref()
                .and_then(spell::cdrom_volume)
                .map(str::to_owned),
            drift,
        }))
    }

    pub(super) async fn destroy(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
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
