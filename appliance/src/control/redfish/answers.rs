//! The Redfish resources the provider reads, as typed structs: only the properties it uses
//! (DMTF DSP0268 schemas: ServiceRoot, ComputerSystem, Manager, VirtualMedia,
//! EthernetInterface, the resource collections and the error body), every one optional, as
//! BMCs leave out what they don't implement. A property of another type than the schema's
//! counts as absent, as it did when the answers were walked as JSON values.

use serde::{Deserialize, Deserializer};

/// A property read as `T`, or absent when it holds something else.
fn lenient<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}

/// The strings of a list, skipping what is no string; absent when it is no list.
fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    Ok(value.and_then(|v| match v {
        serde_json::Value::Array(items) => Some(
            items
                .into_iter()
                .filter_map(|i| match i {
                    serde_json::Value::String(s) => Some(s),
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    }))
}

/// The links of a list, skipping entries without an `@odata.id`.
fn links<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    Ok(match value {
        Some(serde_json::Value::Array(items)) => items
            .into_iter()
            .filter_map(|i| serde_json::from_value::<Link>(i).ok()?.id)
            .collect(),
        _ => Vec::new(),
    })
}

/// `{"@odata.id": "/redfish/v1/..."}`.
#[derive(Debug, Default, Deserialize)]
pub struct Link {
    #[serde(rename = "@odata.id", default, deserialize_with = "lenient")]
    pub id: Option<String>,
}

/// `/redfish/v1/`.
#[derive(Debug, Default, Deserialize)]
pub struct ServiceRoot {
    #[serde(rename = "Systems", default, deserialize_with = "lenient")]
    pub systems: Option<Link>,
    /// Present when the service has sessions.
    #[serde(rename = "SessionService", default)]
    pub session_service: Option<serde::de::IgnoredAny>,
    #[serde(rename = "Links", default, deserialize_with = "lenient")]
    pub links: Option<RootLinks>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RootLinks {
    #[serde(rename = "Sessions", default, deserialize_with = "lenient")]
    pub sessions: Option<Link>,
}

/// A resource collection: its members' links.
#[derive(Debug, Default, Deserialize)]
pub struct Collection {
    #[serde(rename = "Members", default, deserialize_with = "links")]
    pub members: Vec<String>,
}

/// A `ComputerSystem`.
#[derive(Debug, Default, Deserialize)]
pub struct System {
    /// `On`, `Off`, `PoweringOn`, `PoweringOff`, `Paused`.
    #[serde(rename = "PowerState", default, deserialize_with = "lenient")]
    pub power_state: Option<String>,
    #[serde(rename = "Actions", default, deserialize_with = "lenient")]
    pub actions: Option<SystemActions>,
    #[serde(rename = "Boot", default, deserialize_with = "lenient")]
    pub boot: Option<Boot>,
    #[serde(rename = "VirtualMedia", default, deserialize_with = "lenient")]
    pub virtual_media: Option<Link>,
    #[serde(rename = "EthernetInterfaces", default, deserialize_with = "lenient")]
    pub ethernet_interfaces: Option<Link>,
    #[serde(rename = "Links", default, deserialize_with = "lenient")]
    pub links: Option<SystemLinks>,
}

#[derive(Debug, Default, Deserialize)]
pub struct SystemActions {
    #[serde(
        rename = "#ComputerSystem.Reset",
        default,
        deserialize_with = "lenient"
    )]
    pub reset: Option<ResetAction>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ResetAction {
    #[serde(default, deserialize_with = "lenient")]
    pub target: Option<String>,
    #[serde(
        rename = "ResetType@Redfish.AllowableValues",
        default,
        deserialize_with = "strings"
    )]
    pub allowed: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Boot {
    /// `Pxe`, `Cd`, `Hdd`...
    #[serde(
        rename = "BootSourceOverrideTarget",
        default,
        deserialize_with = "lenient"
    )]
    pub target: Option<String>,
    /// `Disabled`, `Once`, `Continuous`.
    #[serde(
        rename = "BootSourceOverrideEnabled",
        default,
        deserialize_with = "lenient"
    )]
    pub enabled: Option<String>,
    #[serde(
        rename = "BootSourceOverrideTarget@Redfish.AllowableValues",
        default,
        deserialize_with = "strings"
    )]
    pub allowed: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct SystemLinks {
    #[serde(rename = "ManagedBy", default, deserialize_with = "links")]
    pub managed_by: Vec<String>,
}

/// A `Manager`: where some BMCs keep the virtual media.
#[derive(Debug, Default, Deserialize)]
pub struct Manager {
    #[serde(rename = "VirtualMedia", default, deserialize_with = "lenient")]
    pub virtual_media: Option<Link>,
}

/// A `VirtualMedia` slot.
#[derive(Debug, Default, Deserialize)]
pub struct VirtualMedia {
    #[serde(rename = "MediaTypes", default, deserialize_with = "strings")]
    pub media_types: Option<Vec<String>>,
    #[serde(rename = "Inserted", default, deserialize_with = "lenient")]
    pub inserted: Option<bool>,
    #[serde(rename = "Image", default, deserialize_with = "lenient")]
    pub image: Option<String>,
    #[serde(rename = "Actions", default, deserialize_with = "lenient")]
    pub actions: Option<MediaActions>,
}

impl VirtualMedia {
    pub fn is_cd(&self) -> bool {
        self.media_types
            .iter()
            .flatten()
            .any(|t| matches!(t.as_str(), "CD" | "DVD"))
    }

    pub fn holds_media(&self) -> bool {
        self.inserted == Some(true)
    }

    /// The target of `#VirtualMedia.<name>` (`InsertMedia`, `EjectMedia`), or its
    /// conventional path under the slot's `path`.
    pub fn action_target(&self, path: &str, name: &str) -> String {
        let action = self.actions.as_ref().and_then(|a| match name {
            "InsertMedia" => a.insert.as_ref(),
            _ => a.eject.as_ref(),
        });
        action
            .and_then(|a| a.target.clone())
            .unwrap_or_else(|| format!("{path}/Actions/VirtualMedia.{name}"))
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct MediaActions {
    #[serde(
        rename = "#VirtualMedia.InsertMedia",
        default,
        deserialize_with = "lenient"
    )]
    pub insert: Option<Target>,
    #[serde(
        rename = "#VirtualMedia.EjectMedia",
        default,
        deserialize_with = "lenient"
    )]
    pub eject: Option<Target>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Target {
    #[serde(default, deserialize_with = "lenient")]
    pub target: Option<String>,
}

/// An `EthernetInterface`.
#[derive(Debug, Default, Deserialize)]
pub struct EthernetInterface {
    #[serde(rename = "MACAddress", default, deserialize_with = "lenient")]
    pub mac: Option<String>,
    #[serde(rename = "PermanentMACAddress", default, deserialize_with = "lenient")]
    pub permanent_mac: Option<String>,
}

/// A Redfish error body: `{"error": {"message", "@Message.ExtendedInfo": [{"Message"}]}}`.
#[derive(Debug, Default, Deserialize)]
pub struct ErrorBody {
    #[serde(default, deserialize_with = "lenient")]
    pub error: Option<ErrorInfo>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ErrorInfo {
    #[serde(default, deserialize_with = "lenient")]
    pub message: Option<String>,
    #[serde(
        rename = "@Message.ExtendedInfo",
        default,
        deserialize_with = "lenient"
    )]
    pub extended_info: Option<Vec<Message>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Message {
    #[serde(rename = "Message", default, deserialize_with = "lenient")]
    pub message: Option<String>,
}

impl ErrorBody {
    /// `error.@Message.ExtendedInfo[0].Message`, else `error.message`.
    pub fn message(self) -> Option<String> {
        let error = self.error?;
        let first = error
            .extended_info
            .and_then(|info| info.into_iter().next())
            .and_then(|m| m.message);
        first.or(error.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_system_reads_what_the_provider_uses_and_skips_odd_values() {
        let sys: System = serde_json::from_value(json!({
            "PowerState": "On",
            "Actions": {"#ComputerSystem.Reset": {
                "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": ["On", 3, "ForceOff"]
            }},
            "Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": null},
            "Links": {"ManagedBy": [{"@odata.id": "/redfish/v1/Managers/1"}, {"x": 1}]},
            "VirtualMedia": "not a link"
        }))
        .unwrap();
        assert_eq!(sys.power_state.as_deref(), Some("On"));
        let reset = sys.actions.unwrap().reset.unwrap();
        assert_eq!(reset.allowed.unwrap(), ["On", "ForceOff"]);
        assert_eq!(sys.boot.as_ref().unwrap().target.as_deref(), Some("Pxe"));
        assert_eq!(sys.boot.unwrap().enabled, None);
        assert_eq!(sys.links.unwrap().managed_by, ["/redfish/v1/Managers/1"]);
        assert!(sys.virtual_media.is_none());
    }

    #[test]
    fn media_actions_have_their_target_or_the_conventional_path() {
        let media: VirtualMedia = serde_json::from_value(json!({
            "MediaTypes": ["DVD"], "Inserted": true,
            "Actions": {"#VirtualMedia.EjectMedia": {"target": "/x/eject"}}
        }))
        .unwrap();
        assert!(media.is_cd() && media.holds_media());
        assert_eq!(media.action_target("/m/1", "EjectMedia"), "/x/eject");
        assert_eq!(
            media.action_target("/m/1", "InsertMedia"),
            "/m/1/Actions/VirtualMedia.InsertMedia"
        );
    }
}
