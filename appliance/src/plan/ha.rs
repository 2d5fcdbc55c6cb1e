//! The pair: which two hosts share the virtual address, how keepalived is told to move it.
//!
//! Architecture invariant: pure, and the same on both hosts (one config for the pair); which
//! host a process runs on is found at start (`crate::ha`), never here.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use crate::config::Config;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaPlan {
    /// The hosts' own addresses, the preferred (higher VRRP priority) first.
    pub hosts: [Ipv4Addr; 2],
    pub router_id: u8,
    pub secret_file: PathBuf,
    /// Where VRRP runs and the virtual addresses go.
    pub interface: String,
    pub vip4: Ipv4Addr,
    pub prefix4: u8,
    pub vip6: Option<(Ipv6Addr, u8)>,
}

impl HaPlan {
    /// VRRP priorities: the preferred host wins when both are healthy.
    pub fn priority(&self, host: usize) -> u8 {
        if host == 0 { 150 } else { 100 }
    }
}

pub fn derive(config: &Config) -> Option<HaPlan> {
    let ha = config.ha.as_ref()?;
    let net = &config.network;
    Some(HaPlan {
        hosts: ha.hosts,
        router_id: ha.router_id,
        secret_file: ha.secret_file.clone(),
        // Validation refuses `ha` without an interface.
        interface: net.interface.clone().unwrap_or_default(),
        vip4: net.v4.appliance,
        prefix4: net.v4.subnet.prefix_len(),
        vip6: net
            .v6
            .as_ref()
            .map(|v6| (v6.appliance, v6.subnet.prefix_len())),
    })
}
