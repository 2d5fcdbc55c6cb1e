//! A pair of appliances behind one virtual address: which host this process runs on, and
//! whether it is the active one (keepalived says so through `okd-appliance ha notify`). The
//! check keepalived runs is `crate::health`.
//!
//! Only the active host answers DHCP and hands out ignition, so a node never gets two
//! different answers; both hosts answer DNS (from the same plan) and both hold their listeners
//! on the virtual address (IP_FREEBIND), so the new active host serves the moment keepalived
//! moves the address to it.
//!
//! Architecture invariant: the [`Activity`] flag is the only state; services read it per
//! message. A process outside a pair is always active. A leaf: services import it.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::plan::Plan;
use crate::plan::ha::HaPlan;

/// Whether this host is the active one of its pair.
#[derive(Debug, Clone)]
pub struct Activity(Arc<AtomicBool>);

impl Activity {
    /// Outside a pair: always active.
    pub fn always() -> Activity {
        Activity(Arc::new(AtomicBool::new(true)))
    }

    /// In a pair, until keepalived says otherwise.
    pub fn standby() -> Activity {
        Activity(Arc::new(AtomicBool::new(false)))
    }

    pub fn for_plan(plan: &Plan) -> Activity {
        if plan.ha.is_some() {
            Activity::standby()
        } else {
            Activity::always()
        }
    }

    pub fn is_active(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Returns whether it changed.
    pub fn set(&self, active: bool) -> bool {
        self.0.swap(active, Ordering::Relaxed) != active
    }
}

/// Which of the pair's hosts this is: the one whose address an interface here has.
pub fn this_host(ha: &HaPlan) -> Result<usize, String> {
    let local: Vec<IpAddr> = nix::ifaddrs::getifaddrs()
        .map_err(|e| format!("can't list this host's addresses: {e}"))?
        .filter_map(|i| i.address)
        .filter_map(|a| a.as_sockaddr_in().map(|s| IpAddr::V4(s.ip())))
        .collect();
    let mine: Vec<usize> = (0..2)
        .filter(|&i| local.contains(&IpAddr::V4(ha.hosts[i])))
        .collect();
    match mine.as_slice() {
        [i] => Ok(*i),
        [] => Err(format!(
            "this host has neither of ha.hosts ({}, {}): give the cluster NIC its own address",
            ha.hosts[0], ha.hosts[1]
        )),
        _ => Err("this host has both of ha.hosts: each host must have only its own".into()),
    }
}
