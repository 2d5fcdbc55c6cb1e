//! The shared vocabulary: words that the config, the plan, the journal and the services all
//! use (a node's role, its Ethernet address, how a pool balances).
//!
//! Architecture invariant: a leaf, like `records.rs`. It imports nothing of the crate, so any
//! module may name these types without depending on the config that first parses them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Bootstrap,
    Master,
    Worker,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Bootstrap, Role::Master, Role::Worker];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Bootstrap => "bootstrap",
            Role::Master => "master",
            Role::Worker => "worker",
        }
    }
}

/// The ignition config `openshift-install` writes for a kind of node, which the node's own
/// ignition merges (and the boot server serves only to nodes of that kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoleConfig {
    Bootstrap,
    Master,
    Worker,
    /// The live system of a single-node cluster: `openshift-install create
    /// single-node-ignition-config` writes it; the live system bootstraps the cluster and then
    /// installs itself to disk (bootstrap in place).
    SingleNode,
}

impl RoleConfig {
    pub const ALL: [RoleConfig; 4] = [
        RoleConfig::Bootstrap,
        RoleConfig::Master,
        RoleConfig::Worker,
        RoleConfig::SingleNode,
    ];

    /// What a node of `role` boots with; `single_node` when it is the only master of a cluster
    /// with no bootstrap node.
    pub fn of(role: Role, single_node: bool) -> RoleConfig {
        match role {
            Role::Bootstrap => RoleConfig::Bootstrap,
            Role::Master if single_node => RoleConfig::SingleNode,
            Role::Master => RoleConfig::Master,
            Role::Worker => RoleConfig::Worker,
        }
    }

    /// Its file in the install directory.
    pub fn file(self) -> &'static str {
        match self {
            RoleConfig::Bootstrap => "bootstrap.ign",
            RoleConfig::Master => "master.ign",
            RoleConfig::Worker => "worker.ign",
            RoleConfig::SingleNode => "bootstrap-in-place-for-live-iso.ign",
        }
    }

    /// How long the file stays usable after `openshift-install` wrote it: bootstrap.ign and
    /// the single node's live config embed certificates that expire after 24 hours; master.ign
    /// and worker.ign only point at the machine config server and stay valid (workers added
    /// months later still use worker.ign).
    pub fn lifetime(self) -> Option<Duration> {
        match self {
            RoleConfig::Bootstrap | RoleConfig::SingleNode => Some(IGNITION_LIFETIME),
            RoleConfig::Master | RoleConfig::Worker => None,
        }
    }

    /// Whether a fetch of this config means the node's installed system booted: true where
    /// the installed system's first boot merges it; false for the single node, whose live
    /// system merges it before it installs itself.
    pub fn fetched_by_installed_system(self) -> bool {
        self != RoleConfig::SingleNode
    }
}

impl fmt::Display for RoleConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.file())
    }
}

/// The lifetime of the certificates in bootstrap.ign.
pub const IGNITION_LIFETIME: Duration = Duration::from_secs(24 * 3600);

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What becomes of the bootstrap machine once bootstrap is complete and it left the pools
/// (`orchestration.bootstrap_after_complete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterBootstrap {
    Destroy,
    PowerOff,
    Keep,
}

/// An Ethernet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// Group (multicast or broadcast) addresses can't belong to a network card.
    pub fn is_group(self) -> bool {
        self.0[0] & 1 == 1
    }

    pub fn is_zero(self) -> bool {
        self.0 == [0; 6]
    }

    /// `52-54-00-00-00-02`, the form used in URLs and file names.
    pub fn hyphenated(self) -> String {
        let [a, b, c, d, e, g] = self.0;
        format!("{a:02x}-{b:02x}-{c:02x}-{d:02x}-{e:02x}-{g:02x}")
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a MAC address: expected six hex octets separated by ':' or '-'")]
pub struct MacAddrParseError;

impl FromStr for MacAddr {
    type Err = MacAddrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let sep = if s.contains('-') { '-' } else { ':' };
        let mut out = [0u8; 6];
        let mut parts = s.split(sep);
        for byte in &mut out {
            let part = parts.next().ok_or(MacAddrParseError)?;
            if part.len() != 2 {
                return Err(MacAddrParseError);
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| MacAddrParseError)?;
        }
        if parts.next().is_some() {
            return Err(MacAddrParseError);
        }
        Ok(MacAddr(out))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    RoundRobin,
    LeastConnections,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parses_both_separators_and_prints_lowercase() {
        let mac: MacAddr = "52:54:00:AB:00:07".parse().unwrap();
        assert_eq!(mac.to_string(), "52:54:00:ab:00:07");
        assert_eq!("52-54-00-ab-00-07".parse::<MacAddr>(), Ok(mac));
        assert_eq!(mac.hyphenated(), "52-54-00-ab-00-07");
        for bad in [
            "52:54:00:ab:00",
            "52:54:00:ab:00:07:08",
            "5:54:00:ab:00:07",
            "zz:54:00:ab:00:07",
            "",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
        assert!("01:00:5e:00:00:01".parse::<MacAddr>().unwrap().is_group());
    }
}
