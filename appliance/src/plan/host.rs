//! The plans of a host's clusters, and the indexes that say which cluster a request is for
//! (docs/design/several-clusters.md, §2): a DHCP client by its MAC, an ignition fetch by its
//! source address, a DNS question by the longest cluster domain it ends in, a load-balancer
//! connection by the address it was made to.
//!
//! Architecture invariant: every index is injective. `check` proves it over the configs
//! (`config/validate/host.rs`); [`HostPlan::assemble`] refuses what would break it rather than
//! picking one cluster, so a service never guesses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::Plan;
use crate::vocabulary::MacAddr;

/// One cluster of a host: its id (what `--cluster` names) and its plan, derived from its file
/// alone.
#[derive(Debug)]
pub struct Member {
    pub id: String,
    pub plan: Arc<Plan>,
}

/// Every cluster of a host, in the host file's order, with the indexes over them.
#[derive(Debug)]
pub struct HostPlan {
    members: Vec<Member>,
    by_mac: HashMap<MacAddr, usize>,
    by_address: HashMap<IpAddr, usize>,
    by_frontend: HashMap<IpAddr, usize>,
    by_domain: HashMap<String, usize>,
}

/// Two clusters claim one key of an index: a host `check` would have refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} belongs to both cluster {first} and cluster {second}")]
pub struct Ambiguous {
    pub what: String,
    pub first: String,
    pub second: String,
}

/// Member `i` takes `key` in `index`; another member's key is a clash.
fn claim<'a, K: std::hash::Hash + Eq>(
    index: &mut HashMap<K, usize>,
    key: K,
    (members, i): (&'a [Member], usize),
) -> Result<(), Clash<'a>> {
    match index.insert(key, i) {
        Some(j) if j != i => Err(Clash {
            first: &members[j].id,
            second: &members[i].id,
        }),
        _ => Ok(()),
    }
}

/// Two members' ids, for [`Ambiguous`].
struct Clash<'a> {
    first: &'a str,
    second: &'a str,
}

impl Clash<'_> {
    fn ambiguous(self, what: String) -> Ambiguous {
        Ambiguous {
            what,
            first: self.first.to_owned(),
            second: self.second.to_owned(),
        }
    }
}

impl HostPlan {
    /// Builds the indexes over `members`.
    pub fn assemble(members: Vec<Member>) -> Result<HostPlan, Ambiguous> {
        let mut host = HostPlan {
            members: Vec::new(),
            by_mac: HashMap::new(),
            by_address: HashMap::new(),
            by_frontend: HashMap::new(),
            by_domain: HashMap::new(),
        };
        for (i, m) in members.iter().enumerate() {
            let plan = &m.plan;
            claim(
                &mut host.by_domain,
                plan.cluster_domain.clone(),
                (&members, i),
            )
            .map_err(|at| at.ambiguous(format!("the domain {}", plan.cluster_domain)))?;
            for r in &plan.dhcp.reservations {
                claim(&mut host.by_mac, r.mac, (&members, i))
                    .map_err(|at| at.ambiguous(format!("MAC {}", r.mac)))?;
            }
            for b in &plan.boot {
                let addresses = std::iter::once(IpAddr::V4(b.ipv4)).chain(b.ipv6.map(IpAddr::V6));
                for ip in addresses {
                    claim(&mut host.by_address, ip, (&members, i))
                        .map_err(|at| at.ambiguous(format!("the node address {ip}")))?;
                }
            }
            // A wildcard listener is every cluster's (the design's shared mode): not a key.
            let frontends = plan.lb.frontends.iter().flat_map(|f| &f.listen);
            for ip in frontends.map(|a| a.ip()).filter(|ip| !ip.is_unspecified()) {
                claim(&mut host.by_frontend, ip, (&members, i))
                    .map_err(|at| at.ambiguous(format!("the frontend address {ip}")))?;
            }
        }
        host.members = members;
        Ok(host)
    }

    /// The clusters, in the host file's order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The cluster `id`.
    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// The cluster whose node has `mac`.
    pub fn by_mac(&self, mac: MacAddr) -> Option<&Member> {
        self.by_mac.get(&mac).map(|&i| &self.members[i])
    }

    /// The cluster whose node has the address `ip`.
    pub fn by_address(&self, ip: IpAddr) -> Option<&Member> {
        self.by_address
            .get(&ip.to_canonical())
            .map(|&i| &self.members[i])
    }

    /// The cluster whose load-balancer frontends listen on `ip`.
    pub fn by_frontend(&self, ip: IpAddr) -> Option<&Member> {
        self.by_frontend
            .get(&ip.to_canonical())
            .map(|&i| &self.members[i])
    }

    /// The cluster whose domain `name` is in (the longest cluster domain it ends in; domains
    /// never nest on a host, so there is at most one). Case and a trailing dot don't matter.
    pub fn by_name(&self, name: &str) -> Option<&Member> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let mut rest = name.as_str();
        loop {
            if let Some(&i) = self.by_domain.get(rest) {
                return Some(&self.members[i]);
            }
            rest = rest.split_once('.')?.1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{InstallCheck, Target};

    fn two_labs() -> HostPlan {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/hosts/two-labs.yml");
        let Ok(Target::Host(host)) = crate::config::load_any(&path, InstallCheck::Skip) else {
            panic!("config/hosts/two-labs.yml does not load as a host");
        };
        let members = host
            .clusters
            .iter()
            .map(|m| Member {
                id: m.id.clone(),
                plan: Arc::new(Plan::derive(&m.config, 1)),
            })
            .collect();
        HostPlan::assemble(members).expect("a checked host assembles")
    }

    #[test]
    fn every_index_finds_its_cluster() {
        let host = two_labs();
        let ids: Vec<&str> = host.members().iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["okd", "test"]);
        let id = |m: Option<&Member>| m.map(|m| m.id.clone());
        let mac = |s: &str| s.parse::<MacAddr>().unwrap();
        assert_eq!(
            id(host.by_mac(mac("52:54:00:00:00:02"))),
            Some("okd".into())
        );
        assert_eq!(
            id(host.by_mac(mac("52:54:00:20:00:02"))),
            Some("test".into())
        );
        assert_eq!(id(host.by_mac(mac("52:54:00:99:00:02"))), None);
        assert_eq!(
            id(host.by_address("10.0.20.3".parse().unwrap())),
            Some("test".into())
        );
        // An IPv4-mapped IPv6 source (a dual-stack socket) is the IPv4 address.
        assert_eq!(
            id(host.by_address("::ffff:10.0.0.3".parse().unwrap())),
            Some("okd".into())
        );
        assert_eq!(id(host.by_address("10.0.0.1".parse().unwrap())), None);
        assert_eq!(
            id(host.by_frontend("10.0.20.1".parse().unwrap())),
            Some("test".into())
        );
        assert_eq!(
            id(host.by_frontend("10.0.0.1".parse().unwrap())),
            Some("okd".into())
        );
        assert_eq!(
            id(host.by_name("Master-0.TEST.lab.example.com.")),
            Some("test".into())
        );
        assert_eq!(
            id(host.by_name("x.apps.okd.lab.example.com")),
            Some("okd".into())
        );
        assert_eq!(id(host.by_name("okd.lab.example.com")), Some("okd".into()));
        assert_eq!(id(host.by_name("lab.example.com")), None);
        assert_eq!(id(host.by_name("example.org")), None);
        assert_eq!(
            host.member("test").map(|m| m.plan.cluster_domain.as_str()),
            Some("test.lab.example.com")
        );
    }

    #[test]
    fn a_key_two_clusters_claim_is_refused_not_picked() {
        let host = two_labs();
        let plan = |i: usize| Arc::clone(&host.members()[i].plan);
        // The same cluster twice under two ids: its domain comes first.
        let err = HostPlan::assemble(vec![
            Member {
                id: "a".into(),
                plan: plan(0),
            },
            Member {
                id: "b".into(),
                plan: plan(0),
            },
        ])
        .unwrap_err();
        assert_eq!(
            err,
            Ambiguous {
                what: "the domain okd.lab.example.com".into(),
                first: "a".into(),
                second: "b".into(),
            }
        );
        // Another cluster's MAC in a plan of its own.
        let mut stolen = (*plan(1)).clone();
        stolen.dhcp.reservations[0].mac = plan(0).dhcp.reservations[0].mac;
        let err = HostPlan::assemble(vec![
            Member {
                id: "okd".into(),
                plan: plan(0),
            },
            Member {
                id: "test".into(),
                plan: Arc::new(stolen),
            },
        ])
        .unwrap_err();
        assert!(err.what.starts_with("MAC "), "{err}");
        assert_eq!((err.first.as_str(), err.second.as_str()), ("okd", "test"));
    }
}
