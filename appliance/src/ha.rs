//! A pair of appliances behind one virtual address: which host this process runs on, and
//! whether it is the active one (keepalived says so through `okd-appliance ha notify`). The
//! check keepalived runs is `crate::operator::health`.
//!
//! Only the active host answers DHCP and hands out ignition, so a node never gets two
//! different answers; both hosts answer DNS (from the same plan) and both hold their listeners
//! on the virtual address (IP_FREEBIND), so the new active host serves the moment keepalived
//! moves the address to it.
//!
//! Which host this is: the one of `ha.hosts` an interface here has, found at start. The flag is
//! the host's, one for every cluster: `okd-appliance ha notify active|standby` (keepalived's
//! notify hooks) sets it through the admin socket, and a change is recorded in every cluster's
//! journal and log (`operator::Clusters::set_active`). DHCP answers, the boot server hands out
//! ignition (503 otherwise) and the orchestration drives the install only while it is set.
//!
//! Architecture invariant: the [`Activity`] flag is the only state; services read it per
//! message. A process outside a pair is always active. Below the services: it imports only the
//! pair's plan (`plan::ha`), and the services import it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::plan::ha::HaPlan;

/// Whether this host is the active one of its pair, and how its replication goes.
#[derive(Debug, Clone)]
pub struct Activity {
    active: Arc<AtomicBool>,
    /// This host's place in the pair (0: the preferred host), when in one.
    host: Option<usize>,
    paired: bool,
    replication: Arc<std::sync::Mutex<Replication>>,
}

/// The replication link as `ha status` reports it.
#[derive(Debug, Clone, Default)]
pub struct Replication {
    /// Every channel has an authenticated session in this host's direction: sending to the
    /// peer (active) or receiving from it (standby). Derived from the live sessions when read,
    /// so a stranger's connection or a session of the other direction never changes it.
    pub connected: bool,
    /// A host file's channels (`cluster/<id>`, `segment/<interface>`) without such a session.
    pub waiting: Vec<String>,
    pub last_update: Option<std::time::SystemTime>,
    pub updates: u64,
    /// While not connected: the last error of each channel that has one (its name first on a
    /// host's).
    pub last_error: Option<String>,
    /// The last error of each channel ("" also for a session refused before it named one),
    /// until that channel's next session.
    errors: std::collections::BTreeMap<String, String>,
    /// The channels this host replicates ("" for a cluster file's one), each once per
    /// instance that serves it.
    channels: Vec<String>,
    sending: HashMap<String, usize>,
    receiving: HashMap<String, usize>,
}

/// Which way an authenticated replication session carries the updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Sending,
    Receiving,
}

/// Counts an authenticated session of a channel as live until dropped.
#[derive(Debug)]
pub struct Session {
    activity: Activity,
    direction: Direction,
    channel: String,
}

impl Drop for Session {
    fn drop(&mut self) {
        let (direction, channel) = (self.direction, &self.channel);
        self.activity.update_replication(|r| {
            let count = match direction {
                Direction::Sending => r.sending.get_mut(channel),
                Direction::Receiving => r.receiving.get_mut(channel),
            };
            if let Some(n) = count {
                *n = n.saturating_sub(1);
            }
        });
    }
}

/// Keeps a channel among those this host replicates until dropped.
#[derive(Debug)]
pub struct Served {
    activity: Activity,
    channel: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.activity.update_replication(|r| {
            if let Some(i) = r.channels.iter().position(|c| *c == self.channel) {
                r.channels.swap_remove(i);
            }
        });
    }
}

impl Activity {
    /// Outside a pair: always active.
    pub fn always() -> Activity {
        Activity {
            active: Arc::new(AtomicBool::new(true)),
            host: None,
            paired: false,
            replication: Arc::default(),
        }
    }

    /// Host `host` (0 or 1) of a pair, standby until keepalived says otherwise.
    pub fn standby(host: usize) -> Activity {
        Activity {
            active: Arc::new(AtomicBool::new(false)),
            host: Some(host),
            paired: true,
            replication: Arc::default(),
        }
    }

    /// One of a pair (whose state is replicated).
    pub fn paired(&self) -> bool {
        self.paired
    }

    pub fn replication(&self) -> Replication {
        let mut r = self
            .replication
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let live = if self.is_active() {
            &r.sending
        } else {
            &r.receiving
        };
        let mut waiting: Vec<String> = r
            .channels
            .iter()
            .filter(|c| live.get(*c).is_none_or(|n| *n == 0))
            .cloned()
            .collect();
        waiting.sort();
        waiting.dedup();
        r.connected = !r.channels.is_empty() && waiting.is_empty();
        r.last_error = if r.connected || r.errors.is_empty() {
            None
        } else {
            let each: Vec<String> = r
                .errors
                .iter()
                .map(|(c, e)| {
                    if c.is_empty() {
                        e.clone()
                    } else {
                        format!("{c}: {e}")
                    }
                })
                .collect();
            Some(each.join("; "))
        };
        r.waiting = waiting.into_iter().filter(|c| !c.is_empty()).collect();
        r
    }

    /// This host replicates `channel` ("" for a cluster file's one) until the guard drops.
    pub fn serve_channel(&self, channel: &str) -> Served {
        self.update_replication(|r| r.channels.push(channel.to_owned()));
        Served {
            activity: self.clone(),
            channel: channel.to_owned(),
        }
    }

    /// An authenticated replication session of `channel` starts: live until the returned
    /// guard drops.
    pub fn session(&self, direction: Direction, channel: &str) -> Session {
        self.update_replication(|r| {
            let count = match direction {
                Direction::Sending => &mut r.sending,
                Direction::Receiving => &mut r.receiving,
            };
            *count.entry(channel.to_owned()).or_default() += 1;
            r.errors.remove(channel);
        });
        Session {
            activity: self.clone(),
            direction,
            channel: channel.to_owned(),
        }
    }

    /// What went wrong with `channel` ("" when the session named none), shown until its next
    /// session.
    pub fn replication_failed(&self, channel: &str, error: String) {
        self.update_replication(|r| {
            r.errors.insert(channel.to_owned(), error);
        });
    }

    pub fn update_replication(&self, f: impl FnOnce(&mut Replication)) {
        f(&mut self.replication.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// This host's place in its pair (0: the preferred host).
    pub fn host(&self) -> Option<usize> {
        self.host
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Returns whether it changed.
    pub fn set(&self, active: bool) -> bool {
        self.active.swap(active, Ordering::Relaxed) != active
    }
}

/// The addresses this host's interfaces have now (IPv4 and IPv6).
pub fn local_addresses() -> nix::Result<Vec<IpAddr>> {
    Ok(nix::ifaddrs::getifaddrs()?
        .filter_map(|i| i.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|s| IpAddr::V4(s.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))
        })
        .collect())
}

/// Which of the pair's hosts this is: the one whose address an interface here has.
pub fn this_host(ha: &HaPlan) -> Result<usize, String> {
    let local = local_addresses().map_err(|e| format!("can't list this host's addresses: {e}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connected_means_every_channel_has_a_session_in_this_hosts_direction() {
        let standby = Activity::standby(1);
        let (_a, _b) = (
            standby.serve_channel("cluster/okd"),
            standby.serve_channel("segment/ens19"),
        );
        let r = standby.replication();
        assert!(!r.connected);
        assert_eq!(r.waiting, ["cluster/okd", "segment/ens19"]);
        let okd = standby.session(Direction::Receiving, "cluster/okd");
        // A session of the other direction counts for nothing on the standby.
        let _sending = standby.session(Direction::Sending, "segment/ens19");
        standby.replication_failed("segment/ens19", "10.0.0.3:7443: refused".into());
        let r = standby.replication();
        assert_eq!(r.waiting, ["segment/ens19"]);
        assert_eq!(
            r.last_error.as_deref(),
            Some("segment/ens19: 10.0.0.3:7443: refused")
        );
        let segment = standby.session(Direction::Receiving, "segment/ens19");
        let r = standby.replication();
        assert!(r.connected && r.waiting.is_empty() && r.last_error.is_none());
        drop(okd);
        assert_eq!(standby.replication().waiting, ["cluster/okd"]);
        drop(segment);
        // A cluster file's one channel is unnamed: never listed, still counted.
        let single = Activity::standby(0);
        let _one = single.serve_channel("");
        let r = single.replication();
        assert!(!r.connected && r.waiting.is_empty());
        let _s = single.session(Direction::Receiving, "");
        assert!(single.replication().connected);
    }
}
