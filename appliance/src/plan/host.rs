//! The plans of a host's clusters, and the indexes that say which cluster a request is for
//! (docs/design/several-clusters.md, §2): a DHCP client by its MAC, an ignition fetch by its
//! source address, a DNS question by the longest cluster domain it ends in, a load-balancer
//! connection by the address it was made to.
//!
//! It also holds the host's zones: each cluster's forward zone, and the reverse zones of
//! clusters on one subnet merged into one ([`zones::union`]: the first cluster's SOA and NS,
//! every cluster's PTRs). A zone's serial moves only when its records change, compared with
//! the previous `HostPlan`, so a secondary transfers only what changed and a serial never goes
//! back when a cluster is removed. `render HOST_FILE` shows every cluster's plan and these
//! zones (`--format bind` writes their master files).
//!
//! Architecture invariant: every index is injective. `check` proves it over the configs
//! (`config/validate/host/`) and assembles this plan for every host file;
//! [`HostPlan::assemble`] refuses what would break it rather than picking one cluster, so a
//! service never guesses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::Plan;
use super::zones::{self, Zone};
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
    /// Every zone of every cluster, reverse zones shared by clusters on one subnet as one.
    zones: Vec<Zone>,
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
    /// Builds the indexes and the zones over `members`. Without `previous` (the first plan),
    /// each zone keeps the serial its cluster's plan gave it (a merged one the newest of
    /// them). With it, a zone whose records are unchanged keeps its serial, so a secondary
    /// transfers only what changed, and one that changed (or is new) takes `serial`, or one
    /// more than the zone had if `serial` is not past it (RFC 1982): a serial never stands
    /// still or goes back on a change, whatever `serial` the caller passes.
    pub fn assemble(
        members: Vec<Member>,
        serial: u32,
        previous: Option<&HostPlan>,
    ) -> Result<HostPlan, Ambiguous> {
        let mut host = HostPlan {
            members: Vec::new(),
            by_mac: HashMap::new(),
            by_address: HashMap::new(),
            by_frontend: HashMap::new(),
            by_domain: HashMap::new(),
            zones: Vec::new(),
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
        host.zones = host_zones(&members, serial, previous);
        host.members = members;
        Ok(host)
    }

    /// Every zone the host's DNS answers: each cluster's forward zone, then the reverse zones,
    /// those of clusters sharing a subnet merged into one.
    pub fn zones(&self) -> &[Zone] {
        &self.zones
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

/// The host's zones: forward zones as their clusters derived them, reverse zones of one
/// origin merged ([`zones::union`]); then each serial as [`HostPlan::assemble`] says.
fn host_zones(members: &[Member], serial: u32, previous: Option<&HostPlan>) -> Vec<Zone> {
    let all = members.iter().flat_map(|m| &m.plan.zones);
    let mut out: Vec<Zone> = all
        .clone()
        .filter(|z| z.network.is_none())
        .cloned()
        .collect();
    let mut origins: Vec<&str> = Vec::new();
    for z in all.clone().filter(|z| z.network.is_some()) {
        if !origins.contains(&z.origin.as_str()) {
            origins.push(&z.origin);
        }
    }
    for origin in origins {
        let same: Vec<&Zone> = all.clone().filter(|z| z.origin == origin).collect();
        let zone = match same.as_slice() {
            [one] => (*one).clone(),
            many => {
                // Before any previous plan: the newest of the clusters' serials.
                let newest = many.iter().map(|z| z.soa().serial).max().unwrap_or(serial);
                zones::union(many).with_serial(newest)
            }
        };
        out.push(zone);
    }
    let Some(previous) = previous else {
        return out;
    };
    out.into_iter()
        .map(
            |zone| match previous.zones.iter().find(|p| p.origin == zone.origin) {
                Some(p) if p.same_records(&zone) => zone.with_serial(p.soa().serial),
                Some(p) => zone.with_serial(after(p.soa().serial, serial)),
                None => zone.with_serial(serial),
            },
        )
        .collect()
}

/// `serial` if it is past `old` in RFC 1982 serial arithmetic, else `old + 1`.
fn after(old: u32, serial: u32) -> u32 {
    let ahead = serial.wrapping_sub(old);
    if ahead != 0 && ahead < 1 << 31 {
        serial
    } else {
        old.wrapping_add(1)
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
        HostPlan::assemble(members, 1, None).expect("a checked host assembles")
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
        let err = HostPlan::assemble(
            vec![
                Member {
                    id: "a".into(),
                    plan: plan(0),
                },
                Member {
                    id: "b".into(),
                    plan: plan(0),
                },
            ],
            1,
            None,
        )
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
        let err = HostPlan::assemble(
            vec![
                Member {
                    id: "okd".into(),
                    plan: plan(0),
                },
                Member {
                    id: "test".into(),
                    plan: Arc::new(stolen),
                },
            ],
            1,
            None,
        )
        .unwrap_err();
        assert!(err.what.starts_with("MAC "), "{err}");
        assert_eq!((err.first.as_str(), err.second.as_str()), ("okd", "test"));
    }

    /// A cluster on 10.0.0.0/24 (ens19) with the appliance at `.appliance` and masters at
    /// `.first`, `.first+1`, `.first+2`.
    fn on_one_subnet(name: &str, appliance: u8, first: u8, serial: u32) -> Arc<Plan> {
        on_subnet(name, ("ens19", "10.0.0.0/24"), appliance, first, serial)
    }

    /// A cluster on `subnet` of `interface`, as [`on_one_subnet`].
    fn on_subnet(
        name: &str,
        (interface, subnet): (&str, &str),
        appliance: u8,
        first: u8,
        serial: u32,
    ) -> Arc<Plan> {
        let mut text = format!(
            "version: 1\ncluster: {{ name: {name}, base_domain: lab.example.com }}\n\
             network: {{ interface: {interface}, subnet: {subnet}, appliance_ip: 10.0.0.{appliance} }}\n\
             install: {{ ignition_dir: ./{name}-install, artifacts_dir: ./artifacts }}\nnodes:\n"
        );
        for i in 0..3u8 {
            text.push_str(&format!(
                "  - {{ name: master-{i}, role: master, mac: \"52:54:00:00:{first:02x}:{i:02x}\", ip: 10.0.0.{} }}\n",
                first + i
            ));
        }
        let loaded =
            crate::config::parse(&text, name, std::path::Path::new("."), InstallCheck::Skip)
                .unwrap_or_else(|e| panic!("{}", e.render(crate::config::RenderStyle::Plain)));
        Arc::new(Plan::derive(&loaded.config, serial))
    }

    fn ptrs(zone: &Zone) -> Vec<String> {
        zone.records
            .iter()
            .filter_map(|r| match &r.data {
                crate::records::RecordData::Ptr(host) => Some(format!("{} {host}", r.name)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn clusters_on_one_subnet_share_one_reverse_zone_with_both_clusters_ptrs() {
        let members = vec![
            Member {
                id: "okd".into(),
                plan: on_one_subnet("okd", 1, 2, 5),
            },
            Member {
                id: "test".into(),
                plan: on_one_subnet("test", 11, 12, 7),
            },
        ];
        let host = HostPlan::assemble(members, 7, None).unwrap();
        let origins: Vec<&str> = host.zones().iter().map(|z| z.origin.as_str()).collect();
        assert_eq!(
            origins,
            [
                "okd.lab.example.com.",
                "test.lab.example.com.",
                "0.0.10.in-addr.arpa."
            ]
        );
        let shared = &host.zones()[2];
        // The first cluster's apex; the newest serial of the two.
        assert_eq!(shared.soa().mname, "ns1.okd.lab.example.com.");
        assert_eq!(shared.soa().serial, 7);
        assert_eq!(
            ptrs(shared),
            [
                "1.0.0.10.in-addr.arpa. api-int.okd.lab.example.com.",
                "1.0.0.10.in-addr.arpa. api.okd.lab.example.com.",
                "2.0.0.10.in-addr.arpa. master-0.okd.lab.example.com.",
                "3.0.0.10.in-addr.arpa. master-1.okd.lab.example.com.",
                "4.0.0.10.in-addr.arpa. master-2.okd.lab.example.com.",
                "11.0.0.10.in-addr.arpa. api-int.test.lab.example.com.",
                "11.0.0.10.in-addr.arpa. api.test.lab.example.com.",
                "12.0.0.10.in-addr.arpa. master-0.test.lab.example.com.",
                "13.0.0.10.in-addr.arpa. master-1.test.lab.example.com.",
                "14.0.0.10.in-addr.arpa. master-2.test.lab.example.com.",
            ]
        );
        let apex_records = shared
            .records
            .iter()
            .filter(|r| r.name == shared.origin)
            .count();
        assert_eq!(apex_records, 2, "one SOA and one NS: {:?}", shared.records);
    }

    /// Two halves of one /24 share its zone, which answers for both halves only.
    #[test]
    fn clusters_on_two_halves_of_a_24_share_its_zone_for_their_halves() {
        let members = vec![
            Member {
                id: "okd".into(),
                plan: on_subnet("okd", ("ens19", "10.0.0.0/25"), 1, 2, 5),
            },
            Member {
                id: "test".into(),
                plan: on_subnet("test", ("ens20", "10.0.0.128/25"), 129, 130, 7),
            },
        ];
        let one = &members[0].plan.zones;
        let covers: Vec<String> = one
            .iter()
            .flat_map(|z| &z.covers)
            .map(ToString::to_string)
            .collect();
        assert_eq!(covers, ["10.0.0.0/25"]);
        let host = HostPlan::assemble(members, 7, None).unwrap();
        let shared = &host.zones()[2];
        assert_eq!(shared.origin, "0.0.10.in-addr.arpa.");
        let covers: Vec<String> = shared.covers.iter().map(ToString::to_string).collect();
        assert_eq!(covers, ["10.0.0.0/25", "10.0.0.128/25"]);
        // A whole /24 covers all of its zone.
        assert!(
            on_one_subnet("lab", 1, 2, 5)
                .zones
                .iter()
                .all(|z| z.covers.is_empty())
        );
    }

    #[test]
    fn a_zone_serial_moves_only_with_its_records() {
        let okd = on_one_subnet("okd", 1, 2, 5);
        let test = on_one_subnet("test", 11, 12, 5);
        let member = |id: &str, plan: &Arc<Plan>| Member {
            id: id.into(),
            plan: Arc::clone(plan),
        };
        let first =
            HostPlan::assemble(vec![member("okd", &okd), member("test", &test)], 5, None).unwrap();
        // A reload that changes nothing: every serial stays.
        let again = HostPlan::assemble(
            vec![member("okd", &okd), member("test", &test)],
            6,
            Some(&first),
        )
        .unwrap();
        let serials = |h: &HostPlan| h.zones().iter().map(|z| z.soa().serial).collect::<Vec<_>>();
        assert_eq!(serials(&again), [5, 5, 5]);
        // test loses a node (re-derived at serial 7): its forward zone and the shared reverse
        // zone move, okd's forward zone does not.
        let smaller = {
            let mut plan = (*on_one_subnet("test", 11, 12, 7)).clone();
            for z in &mut plan.zones {
                z.records
                    .retain(|r| !r.name.starts_with("master-2.") && !r.name.starts_with("14."));
            }
            Arc::new(plan)
        };
        let changed = HostPlan::assemble(
            vec![member("okd", &okd), member("test", &smaller)],
            7,
            Some(&again),
        )
        .unwrap();
        assert_eq!(serials(&changed), [5, 7, 7]);
        // Removing test moves the shared zone again, never back to an older serial: here the
        // caller's serial (6) is older than the zone's (7).
        let alone = HostPlan::assemble(vec![member("okd", &okd)], 6, Some(&changed)).unwrap();
        assert_eq!(serials(&alone), [5, 8]);
        // The same serial twice (two reloads in one second) still moves a changed zone.
        let back = HostPlan::assemble(
            vec![member("okd", &okd), member("test", &test)],
            6,
            Some(&alone),
        )
        .unwrap();
        assert_eq!(serials(&back), [5, 6, 9]);
        assert_eq!(after(u32::MAX, 0), 0, "serial arithmetic wraps");
        assert_eq!(after(5, 5), 6);
    }
}
