//! The libvirt provider: the cluster's machines as libvirt domains, driven through `virsh`.
//!
//! A domain is found by its name (`<node>.<cluster domain>`), defined from the plan's machine
//! spec (`xml.rs`) with a new qcow2 volume in the configured pool, started, shut down (forced
//! off after the shutdown timeout), and undefined with its volumes.
//!
//! Why `virsh` and not the `virt` crate: `virt` links libvirt's C library (libvirt.so and its
//! dependencies), which the one static okd-appliance binary can't carry and a CI build would
//! need libvirt-dev for; `virsh` is where libvirt is anyway (libvirt-clients), reaches remote
//! hypervisors over `qemu+ssh://` with no code here, and the XML is the interface either way.
//! The cost is reading virsh's text, which is kept to a few stable tables (`domstate`,
//! `domiflist`, `domblklist`). `test:///default` could not stand in for libvirtd in the tests:
//! its state lives in one client process, and every virsh run is a new one; the tests run a real
//! libvirtd in a private mount namespace instead (`tests/e2e/libvirt.rs`).
//!
//! Architecture invariant: as every provider, it reads the plan and derives nothing; a domain
//! with another MAC is never changed; every virsh run is bounded by the request timeout.

pub mod xml;

use std::time::Duration;

use super::{Action, ControlError, MachineStatus, Outcome, Power, Provider};
use crate::plan::machines::{BootDevice, InstallMedium, MachineSpec};
use crate::plan::machines::{ControlTimeouts, Firmware, Libvirt};

#[derive(Debug)]
pub struct LibvirtProvider {
    lv: Libvirt,
    timeouts: ControlTimeouts,
    poll: Duration,
    virsh: String,
    /// Defines and undefines one at a time.
    serial: tokio::sync::Mutex<()>,
}

/// How `virsh` failed.
enum VirshError {
    /// The domain (or volume) does not exist.
    NotFound,
    Other(ControlError),
}

impl LibvirtProvider {
    pub fn new(lv: &Libvirt, timeouts: ControlTimeouts) -> Self {
        LibvirtProvider {
            lv: lv.clone(),
            timeouts,
            poll: Duration::from_millis(500),
            virsh: std::env::var("OKD_VIRSH").unwrap_or_else(|_| "virsh".to_owned()),
            serial: tokio::sync::Mutex::new(()),
        }
    }

    /// Runs `virsh -c URI ARGS`, bounded by the request timeout.
    async fn virsh(&self, args: &[&str]) -> Result<String, VirshError> {
        let mut cmd = tokio::process::Command::new(&self.virsh);
        cmd.arg("-q")
            .arg("-c")
            .arg(&self.lv.uri)
            .args(args)
            .kill_on_drop(true)
            .stdin(std::process::Stdio::null());
        let what = format!("virsh {}", args.join(" "));
        let out = match tokio::time::timeout(self.timeouts.request, cmd.output()).await {
            Err(_) => {
                return Err(VirshError::Other(ControlError::Timeout(format!(
                    "{what}: no answer from {} within {}",
                    self.lv.uri,
                    humantime::format_duration(self.timeouts.request)
                ))));
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(VirshError::Other(ControlError::Unreachable {
                    endpoint: self.lv.uri.clone(),
                    reason: format!("{} not found: install libvirt-clients", self.virsh),
                }));
            }
            Ok(Err(e)) => {
                return Err(VirshError::Other(ControlError::Failed(format!(
                    "{what}: {e}"
                ))));
            }
            Ok(Ok(out)) => out,
        };
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let message = stderr
            .lines()
            .map(|l| l.trim().trim_start_matches("error: ").trim())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        Err(
            if message.contains("Domain not found")
                || message.contains("failed to get domain")
                || message.contains("Storage volume not found")
                || message.contains("failed to get vol")
            {
                VirshError::NotFound
            } else if message.contains("failed to connect to the hypervisor") {
                VirshError::Other(ControlError::Unreachable {
                    endpoint: self.lv.uri.clone(),
                    reason: message,
                })
            } else {
                VirshError::Other(ControlError::Failed(format!("{what}: {message}")))
            },
        )
    }

    /// `virsh` where "not found" is an error too.
    async fn run(&self, args: &[&str]) -> Result<String, ControlError> {
        self.virsh(args).await.map_err(|e| match e {
            VirshError::NotFound => ControlError::Failed(format!(
                "virsh {}: not found at {}",
                args.join(" "),
                self.lv.uri
            )),
            VirshError::Other(e) => e,
        })
    }

    /// The domain's power state, or `None` when there is no such domain.
    async fn state(&self, m: &MachineSpec) -> Result<Option<Power>, ControlError> {
        match self.virsh(&["domstate", &m.vm_name]).await {
            Ok(out) => Ok(Some(match out.trim() {
                "running" => Power::On,
                "shut off" => Power::Off,
                other => Power::Other(other.to_owned()),
            })),
            Err(VirshError::NotFound) => Ok(None),
            Err(VirshError::Other(e)) => Err(e),
        }
    }

    /// Err when the domain's NICs don't carry the node's MAC.
    async fn check_mac(&self, m: &MachineSpec) -> Result<(), ControlError> {
        let macs = xml::macs(&self.run(&["domiflist", &m.vm_name]).await?);
        if macs.contains(&m.mac) {
            return Ok(());
        }
        let found = if macs.is_empty() {
            "no NIC".to_owned()
        } else {
            format!(
                "MAC {}",
                macs.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        Err(ControlError::Conflict(format!(
            "domain {} at {} has {found}, but the config gives {} the MAC {}: okd-appliance doesn't change it; fix the config or the domain, or destroy it",
            m.vm_name, self.lv.uri, m.node, m.mac
        )))
    }

    async fn existing(&self, m: &MachineSpec) -> Result<Power, ControlError> {
        let Some(power) = self.state(m).await? else {
            return Err(ControlError::Absent(format!(
                "domain {} does not exist at {}: create it first (`okd-appliance nodes create {}`)",
                m.vm_name, self.lv.uri, m.node
            )));
        };
        self.check_mac(m).await?;
        Ok(power)
    }

    async fn volume_exists(&self, m: &MachineSpec) -> Result<bool, ControlError> {
        match self
            .virsh(&["vol-info", "--pool", &self.lv.pool, &xml::volume(m)])
            .await
        {
            Ok(_) => Ok(true),
            Err(VirshError::NotFound) => Ok(false),
            Err(VirshError::Other(e)) => Err(e),
        }
    }

    async fn ensure(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let _one_at_a_time = self.serial.lock().await;
        if self.state(m).await?.is_some() {
            self.check_mac(m).await?;
            return Ok(Outcome::Unchanged(format!(
                "domain {} exists at {}",
                m.vm_name, self.lv.uri
            )));
        }
        let domain = xml::domain(m, &self.lv).map_err(ControlError::Failed)?;
        let volume = xml::volume(m);
        let reused = self.volume_exists(m).await?;
        if !reused {
            self.run(&[
                "vol-create-as",
                &self.lv.pool,
                &volume,
                &format!("{}G", m.disk_gib),
                "--format",
                "qcow2",
            ])
            .await?;
        }
        let file = tempfile::Builder::new()
            .prefix("okd-appliance-domain")
            .suffix(".xml")
            .tempfile()
            .map_err(|e| ControlError::Failed(format!("a file for the domain XML: {e}")))?;
        std::fs::write(file.path(), domain)
            .map_err(|e| ControlError::Failed(format!("writing the domain XML: {e}")))?;
        let path = file.path().to_string_lossy().into_owned();
        if let Err(e) = self.run(&["define", &path]).await {
            // Nothing half-made: the volume made for this domain goes too.
            let cleanup = if reused {
                String::new()
            } else {
                match self
                    .run(&["vol-delete", "--pool", &self.lv.pool, &volume])
                    .await
                {
                    Ok(_) => format!("; the volume {volume} made for it was removed"),
                    Err(_) => format!(
                        "; the volume {volume} made for it was left in pool {}: remove it with `okd-appliance nodes destroy {} --yes`",
                        self.lv.pool, m.node
                    ),
                }
            };
            return Err(match e {
                ControlError::Failed(msg) => ControlError::Failed(format!("{msg}{cleanup}")),
                other => other,
            });
        }
        Ok(Outcome::Changed(format!(
            "defined domain {} at {} ({} vCPU, {} MiB, {} GiB volume {} in pool {}{})",
            m.vm_name,
            self.lv.uri,
            m.cores,
            m.memory_mib,
            m.disk_gib,
            volume,
            self.lv.pool,
            if reused { ", reused" } else { "" }
        )))
    }

    async fn power_on(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        if self.existing(m).await? == Power::On {
            return Ok(Outcome::Unchanged(format!(
                "domain {} is running",
                m.vm_name
            )));
        }
        self.run(&["start", &m.vm_name]).await?;
        Ok(Outcome::Changed(format!("started domain {}", m.vm_name)))
    }

    async fn wait_off(&self, m: &MachineSpec, limit: Duration) -> Result<bool, ControlError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.state(m).await? != Some(Power::On) {
                return Ok(true);
            }
            if tokio::time::Instant::now() + self.poll > deadline {
                return Ok(false);
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    async fn power_off(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        if self.existing(m).await? == Power::Off {
            return Ok(Outcome::Unchanged(format!(
                "domain {} is stopped",
                m.vm_name
            )));
        }
        self.run(&["shutdown", &m.vm_name]).await?;
        let grace = self.timeouts.shutdown;
        if self.wait_off(m, grace).await? {
            return Ok(Outcome::Changed(format!("shut down domain {}", m.vm_name)));
        }
        match self.virsh(&["destroy", &m.vm_name]).await {
            Ok(_) => {}
            // It went off between the last look and the destroy.
            Err(_) if self.state(m).await? == Some(Power::Off) => {}
            Err(VirshError::NotFound) => {}
            Err(VirshError::Other(e)) => return Err(e),
        }
        Ok(Outcome::Changed(format!(
            "domain {} did not shut down within {}: forced off",
            m.vm_name,
            humantime::format_duration(grace)
        )))
    }

    async fn reset(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        if self.existing(m).await? != Power::On {
            return Err(ControlError::Failed(format!(
                "domain {} is not running: start it instead of resetting it",
                m.vm_name
            )));
        }
        self.run(&["reset", &m.vm_name]).await?;
        Ok(Outcome::Changed(format!("reset domain {}", m.vm_name)))
    }

    /// Inserts the node's ISO (`Some`) or ejects the CD (`None`) with `update-device`.
    async fn media(&self, m: &MachineSpec, insert: bool) -> Result<Outcome, ControlError> {
        let InstallMedium::Iso { url, .. } = &m.install else {
            return Err(ControlError::Failed(format!(
                "{} installs over the network (install: pxe): its domain has no CD drive",
                m.node
            )));
        };
        let power = self.existing(m).await?;
        let current = xml::cdrom_source(&self.run(&["domblklist", &m.vm_name, "--details"]).await?)
            .ok_or_else(|| ControlError::Failed(format!("domain {} has no CD drive", m.vm_name)))?;
        let path = url::Url::parse(url)
            .map(|u| u.path().to_owned())
            .unwrap_or_default();
        if insert && current.as_deref() == Some(path.as_str()) {
            return Ok(Outcome::Unchanged(format!(
                "domain {} has {url}",
                m.vm_name
            )));
        }
        if !insert && current.is_none() {
            return Ok(Outcome::Unchanged(format!(
                "domain {} has no media",
                m.vm_name
            )));
        }
        let device = xml::cdrom(insert.then_some(url.as_str()), &m.boot_order)
            .map_err(ControlError::Failed)?;
        let file = tempfile::Builder::new()
            .prefix("okd-appliance-cdrom")
            .suffix(".xml")
            .tempfile()
            .map_err(|e| ControlError::Failed(format!("a file for the CD XML: {e}")))?;
        std::fs::write(file.path(), device)
            .map_err(|e| ControlError::Failed(format!("writing the CD XML: {e}")))?;
        let path = file.path().to_string_lossy().into_owned();
        let mut args = vec![
            "update-device",
            m.vm_name.as_str(),
            path.as_str(),
            "--config",
        ];
        if power == Power::On {
            args.push("--live");
        }
        self.run(&args).await?;
        Ok(Outcome::Changed(if insert {
            format!("inserted {url} into domain {}", m.vm_name)
        } else {
            format!("ejected the CD of domain {}", m.vm_name)
        }))
    }

    async fn status(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let Some(power) = self.state(m).await? else {
            return Ok(Outcome::Status(MachineStatus::Absent));
        };
        let drift = match self.check_mac(m).await {
            Ok(()) => Vec::new(),
            Err(ControlError::Conflict(why)) => vec![why],
            Err(e) => return Err(e),
        };
        let media = match self.virsh(&["domblklist", &m.vm_name, "--details"]).await {
            Ok(out) => xml::cdrom_source(&out).flatten(),
            Err(_) => None,
        };
        Ok(Outcome::Status(MachineStatus::Present {
            id: format!("domain {} at {}", m.vm_name, self.lv.uri),
            power,
            media,
            drift,
        }))
    }

    async fn destroy(&self, m: &MachineSpec) -> Result<Outcome, ControlError> {
        let _one_at_a_time = self.serial.lock().await;
        let Some(power) = self.state(m).await? else {
            if self.volume_exists(m).await? {
                let volume = xml::volume(m);
                self.run(&["vol-delete", "--pool", &self.lv.pool, &volume])
                    .await?;
                return Ok(Outcome::Changed(format!(
                    "no domain; removed the volume {volume} left in pool {}",
                    self.lv.pool
                )));
            }
            return Ok(Outcome::Unchanged(format!(
                "domain {} is absent",
                m.vm_name
            )));
        };
        // A domain with the node's name but another MAC may be someone else's.
        self.check_mac(m).await?;
        if power != Power::Off {
            self.run(&["destroy", &m.vm_name]).await?;
        }
        let mut args = vec!["undefine", m.vm_name.as_str(), "--remove-all-storage"];
        if self.lv.firmware == Firmware::Uefi {
            args.push("--nvram");
        }
        self.run(&args).await?;
        Ok(Outcome::Changed(format!(
            "undefined domain {} and removed its volumes",
            m.vm_name
        )))
    }
}

impl Provider for LibvirtProvider {
    fn describe(&self) -> String {
        format!("libvirt at {}", self.lv.uri)
    }

    async fn act(&self, m: &MachineSpec, action: Action) -> Result<Outcome, ControlError> {
        match action {
            Action::Ensure => self.ensure(m).await,
            Action::PowerOn => self.power_on(m).await,
            Action::PowerOff => self.power_off(m).await,
            Action::Reset => self.reset(m).await,
            Action::BootOnce(device) => Err(ControlError::Failed(format!(
                "libvirt has no one-time boot device ({} asked): the plan's boot order ({}) is in the domain",
                device.as_str(),
                m.boot_order
                    .iter()
                    .map(|d: &BootDevice| d.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
            Action::InsertMedia => self.media(m, true).await,
            Action::EjectMedia => self.media(m, false).await,
            Action::Status => self.status(m).await,
            Action::Destroy => self.destroy(m).await,
        }
    }
}
