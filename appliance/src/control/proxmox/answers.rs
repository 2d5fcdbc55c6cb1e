//! The Proxmox VE API's answers the provider reads, as typed structs: only the fields it uses,
//! each optional where the API may leave it out (pve-api-schema.json in tests/contracts
//! describes them; its `returns` of each call). The `{"data": ...}` envelope is unwrapped by
//! `api.rs` before these are read.
//!
//! Proxmox sends numbers as JSON numbers or, in configs, as strings: those fields take either,
//! and a value that is neither counts as absent, as it did when the answers were walked as
//! JSON values.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A number sent as a JSON number or as a string; anything else is absent.
pub fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

pub fn as_u32(v: &Value) -> Option<u32> {
    as_u64(v).and_then(|n| u32::try_from(n).ok())
}

fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Option::<Value>::deserialize(d)?.as_ref().and_then(as_u64))
}

fn vmid<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Ok(Option::<Value>::deserialize(d)?.as_ref().and_then(as_u32))
}

/// A string, or absent when the field holds anything else.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        Some(Value::String(s)) => Some(s),
        _ => None,
    })
}

/// `GET /version` (pve-manager `PVE/API2.pm` `version`).
#[derive(Debug, Default, Deserialize)]
pub struct Version {
    /// The package version: `8.2.4`, before 8.0 `7.4-17`.
    #[serde(default, deserialize_with = "text")]
    pub version: Option<String>,
    /// `x.y`.
    #[serde(default, deserialize_with = "text")]
    pub release: Option<String>,
}

/// One entry of `GET /cluster/resources?type=vm`.
#[derive(Debug, Deserialize)]
pub struct Resource {
    /// `qemu` or `lxc`.
    #[serde(rename = "type", default, deserialize_with = "text")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "vmid")]
    pub vmid: Option<u32>,
    #[serde(default, deserialize_with = "text")]
    pub node: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub name: Option<String>,
    /// `running`, `stopped`, `unknown`.
    #[serde(default, deserialize_with = "text")]
    pub status: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub lock: Option<String>,
    /// Present for HA-managed VMs.
    #[serde(default, deserialize_with = "text")]
    pub hastate: Option<String>,
}

/// `GET /nodes/{node}/qemu/{vmid}/config`: the keys the provider compares and changes.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct VmConfig {
    #[serde(default, deserialize_with = "text")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub lock: Option<String>,
    /// The NIC ([`super::spell::NIC`]): `virtio=MAC,bridge=...`.
    #[serde(default, deserialize_with = "text")]
    pub net0: Option<String>,
    /// The CD drive ([`super::spell::CDROM`]): `VOLUME,media=cdrom`.
    #[serde(default, deserialize_with = "text")]
    pub ide2: Option<String>,
    #[serde(default, deserialize_with = "number")]
    pub cores: Option<u64>,
    /// MiB (a string in configs, `[current=]<integer>`).
    #[serde(default, deserialize_with = "number")]
    pub memory: Option<u64>,
    /// `order=scsi0;net0`.
    #[serde(default, deserialize_with = "text")]
    pub boot: Option<String>,
}

/// `GET /nodes/{node}/qemu/{vmid}/status/current`.
#[derive(Debug, Default, Deserialize)]
pub struct VmStatus {
    /// `running` or `stopped`.
    #[serde(default, deserialize_with = "text")]
    pub status: Option<String>,
    /// QEMU's own state: `running`, `paused`, `prelaunch`, `suspended`...
    #[serde(default, deserialize_with = "text")]
    pub qmpstatus: Option<String>,
}

/// `GET /nodes/{node}/tasks/{upid}/status`.
#[derive(Debug, Default, Deserialize)]
pub struct TaskStatus {
    /// `running` or `stopped`.
    #[serde(default, deserialize_with = "text")]
    pub status: Option<String>,
    /// Once stopped: `OK`, `WARNINGS: n` or the error.
    #[serde(default, deserialize_with = "text")]
    pub exitstatus: Option<String>,
}

/// One entry of `GET /nodes/{node}/storage/{storage}/content`.
#[derive(Debug, Deserialize)]
pub struct Volume {
    #[serde(default, deserialize_with = "text")]
    pub volid: Option<String>,
}

/// An error answer's body: the message and the per-parameter errors.
#[derive(Debug, Default, Deserialize)]
pub struct ErrorBody {
    #[serde(default, deserialize_with = "text")]
    pub message: Option<String>,
    /// Parameter name to what is wrong with it (a string, or anything else: "invalid").
    #[serde(default)]
    pub errors: Option<serde_json::Map<String, Value>>,
}

/// What a task-starting call answers: its UPID, or nothing when it finished at once.
pub fn upid(data: &Value) -> Option<&str> {
    data.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_come_as_numbers_or_strings_and_odd_values_are_absent() {
        let cfg: VmConfig = serde_json::from_value(
            json!({"cores": 4, "memory": "16384", "boot": "order=scsi0;net0", "name": 7}),
        )
        .unwrap();
        assert_eq!(cfg.cores, Some(4));
        assert_eq!(cfg.memory, Some(16384));
        assert_eq!(cfg.boot.as_deref(), Some("order=scsi0;net0"));
        assert_eq!(cfg.name, None);
        let r: Resource =
            serde_json::from_value(json!({"type": "qemu", "vmid": "101", "node": "pve1"})).unwrap();
        assert_eq!((r.vmid, r.node.as_deref()), (Some(101), Some("pve1")));
        let r: Resource = serde_json::from_value(json!({"vmid": -1})).unwrap();
        assert_eq!(r.vmid, None);
    }

    #[test]
    fn the_config_fields_are_the_devices_spell_names() {
        // `VmConfig` reads the NIC and the CD drive under the names the create writes.
        assert_eq!(super::super::spell::NIC, "net0");
        assert_eq!(super::super::spell::CDROM, "ide2");
        let cfg: VmConfig = serde_json::from_value(json!({
            "net0": "virtio=52:54:00:00:00:01,bridge=vmbr0",
            "ide2": "local:iso/a.iso,media=cdrom"
        }))
        .unwrap();
        assert!(cfg.net0.is_some() && cfg.ide2.is_some());
    }
}
