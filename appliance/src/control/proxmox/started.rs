//! Creates this host started, kept on disk until their end is known: one file per VM name in
//! `<state_dir>/proxmox-creates/`, written before the create request is sent (the VM ID) and
//! again once Proxmox answered it (the task's UPID).
//!
//! Why: a token granted on a pool alone (`/pool/NAME`) does not see a VM being created.
//! qemu-server's `create_vm` writes the `lock: create` placeholder before its worker starts
//! and adds the VM to its pool only at the worker's very end, after `write_config`
//! (`src/PVE/API2/Qemu.pm` at e6352be, lines 1374 and 1553), and pool roles reach `/vms/ID`
//! only for the pool's members (pve-access-control `RPCEnvironment.pm`
//! `compute_api_permission`). So a create that outlives `timeouts.task` is invisible to such a
//! token; without this record a rerun would make a second VM of the same name and MAC. The
//! next run follows the recorded task to its end instead.
//!
//! Whether an ID is taken, whoever may see its VM, is asked with `GET /cluster/nextid?vmid=N`
//! (pve-manager `PVE/API2/Cluster.pm` `nextid`: any user; the ID back when no guest holds it,
//! a parameter error "VM N already exists" otherwise).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::control::ControlError;

/// A create this host started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    pub vmid: u32,
    /// The Proxmox node it was asked of.
    pub node: String,
    /// Its task, once Proxmox answered the create request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upid: Option<String>,
}

/// The records' directory.
#[derive(Debug, Clone)]
pub struct Records {
    dir: PathBuf,
}

impl Records {
    pub fn new(dir: PathBuf) -> Records {
        Records { dir }
    }

    fn path(&self, vm_name: &str) -> PathBuf {
        // VM names are DNS names (`<node>.<domain>`): no separator, safe as a file name.
        self.dir.join(format!("{vm_name}.json"))
    }

    /// The create recorded for `vm_name`. A record that can't be read is an error, never
    /// taken for "none": it may be all that says a VM is being made.
    pub fn get(&self, vm_name: &str) -> Result<Option<Started>, ControlError> {
        let path = self.path(vm_name);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(unreadable(&path, &e.to_string())),
        };
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| unreadable(&path, &e.to_string()))
    }

    /// Keeps `started` for `vm_name`, durably, before the step it records goes on; the error
    /// says which file could not be written.
    pub fn put(&self, vm_name: &str, started: &Started) -> Result<(), String> {
        let path = self.path(vm_name);
        let bytes = serde_json::to_vec(started).expect("a record serializes");
        std::fs::create_dir_all(&self.dir)
            .and_then(|()| crate::durable::write(&path, &bytes))
            .map_err(|e| {
                format!(
                    "can't keep the record of {vm_name}'s create in {}: {e}",
                    path.display()
                )
            })
    }

    /// The create's end is known: its record goes.
    pub fn done(&self, vm_name: &str) {
        let path = self.path(vm_name);
        if let Err(e) = crate::durable::remove(&path) {
            tracing::warn!(
                "can't remove {}: {e}; the next run asks Proxmox about it again",
                path.display()
            );
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn unreadable(path: &Path, why: &str) -> ControlError {
    ControlError::Failed(format!(
        "can't read the create record {}: {why}; it says a create was started: check the VM it names in Proxmox, then remove the file",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_kept_until_done_and_a_broken_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::new(dir.path().join("proxmox-creates"));
        assert_eq!(records.get("master-0.okd.lab").unwrap(), None);
        let started = Started {
            vmid: 9002,
            node: "pve1".into(),
            upid: None,
        };
        records.put("master-0.okd.lab", &started).unwrap();
        assert_eq!(records.get("master-0.okd.lab").unwrap(), Some(started));
        records.done("master-0.okd.lab");
        assert_eq!(records.get("master-0.okd.lab").unwrap(), None);
        std::fs::write(records.path("worker-0.okd.lab"), b"{").unwrap();
        let err = records.get("worker-0.okd.lab").unwrap_err().to_string();
        assert!(err.contains("can't read the create record"), "{err}");
    }
}
