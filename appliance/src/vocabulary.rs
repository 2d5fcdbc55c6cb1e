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

    /// The file `openshift-install create ignition-configs` writes for this role.
    pub fn ignition_file(self) -> &'static str {
        match self {
            Role::Bootstrap => "bootstrap.ign",
            Role::Master => "master.ign",
            Role::Worker => "worker.ign",
        }
    }

    /// How long this role's ignition file stays usable after `openshift-install` wrote it:
    /// bootstrap.ign embeds certificates that expire after 24 hours; master.ign and worker.ign
    /// only point at the machine config server and stay valid (workers added months later
    /// still use worker.ign).
    pub fn ignition_lifetime(self) -> Option<Duration> {
        match self {
            Role::Bootstrap => Some(IGNITION_LIFETIME),
            Role::Master | Role::Worker => None,
        }
    }
}

/// The lifetime of the certificates in bootstrap.ign.
pub const IGNITION_LIFETIME: Duration = Duration::from_secs(24 * 3600);

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
