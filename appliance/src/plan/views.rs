//! What each service instance of a host serves (docs/design/several-clusters.md, §2): the
//! services that one listener serves for every cluster (DNS, DHCP on a segment, TFTP) get one
//! plan cut from all the clusters' plans; HTTP, the load balancer and the orchestration run
//! once per cluster, each on its own plan.
//!
//! Architecture invariant: pure, like [`Plan::derive`]. A service still sees one [`Plan`], so
//! no service learns what a host is; only DHCP looks past its plan, to the other clusters'
//! reservations on its segment ([`DhcpPlan::for_mac`](super::DhcpPlan::for_mac)).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ipnet::IpNet;

use super::host::{Ambiguous, HostPlan, Member};
use super::{FrontendKind, Plan, Sharing};
use crate::config::{Host, Listen, SharedFrontend};

/// Every plan a host's services serve. Only DNS's has zones.
#[derive(Debug)]
pub struct HostViews {
    /// Every cluster's zones (shared reverse zones merged), on every cluster's DNS listeners.
    pub dns: Plan,
    /// One per segment (cluster interface): its clusters' reservations, the pool of the one
    /// that has it.
    pub dhcp: Vec<Plan>,
    /// The iPXE binaries, on every cluster's TFTP listeners.
    pub tftp: Plan,
    /// With a shared frontend: the router's listeners on it (6443, 22623, 443, 80 of each of
    /// its addresses); it routes to the clusters' pools, which the clusters' instances check.
    pub router: Option<Plan>,
    /// Each cluster's own plan, in the host file's order: HTTP, the load balancer, the
    /// orchestration, its state under `<state_dir>/clusters/<id>/`.
    pub clusters: Vec<(String, Plan)>,
    /// The indexes and zones, for the next reload's serials.
    pub host: HostPlan,
}

/// Where cluster `id`'s install state lives.
pub fn cluster_state_dir(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("clusters").join(id)
}

/// Where the lease journal of the segment on `interface` lives.
pub fn segment_state_dir(state_dir: &Path, interface: Option<&str>) -> PathBuf {
    state_dir.join("dhcp").join(interface.unwrap_or("any"))
}

impl HostViews {
    /// Derives every view of `host`; `previous` keeps unchanged zones' serials (see
    /// [`HostPlan::assemble`]).
    pub fn derive(
        host: &Host,
        serial: u32,
        previous: Option<&HostPlan>,
    ) -> Result<HostViews, Ambiguous> {
        let members: Vec<Member> = host
            .clusters
            .iter()
            .map(|m| {
                let mut plan = Plan::derive(&m.config, serial);
                plan.dhcp.cluster.clone_from(&m.id);
                plan.dhcp.host_cluster = Some(Arc::from(m.id.as_str()));
                Member {
                    id: m.id.clone(),
                    plan: Arc::new(plan),
                }
            })
            .collect();
        let plans: Vec<&Plan> = members.iter().map(|m| &*m.plan).collect();
        let dns = dns(&plans, host);
        let tftp = tftp(&plans, host);
        let dhcp = segments(&plans, host);
        let router = host
            .shared_frontend
            .as_ref()
            .map(|s| router(&plans, host, s));
        let clusters = members
            .iter()
            .map(|m| (m.id.clone(), cluster(&m.plan, &host.state_dir, &m.id)))
            .collect();
        // One pair for the host: every instance knows every address it moves.
        let pair = super::ha::HaPlan::of_host(
            plans.iter().filter_map(|p| p.ha.as_ref()),
            &host
                .shared_frontend
                .as_ref()
                .map(SharedFrontend::addresses)
                .unwrap_or_default(),
        );
        let host_plan = HostPlan::assemble(members, serial, previous)?;
        let mut views = HostViews {
            dns: Plan {
                zones: host_plan.zones().to_vec(),
                ..dns
            },
            dhcp,
            tftp,
            router,
            clusters,
            host: host_plan,
        };
        for p in views.plans_mut() {
            p.ha.clone_from(&pair);
        }
        Ok(views)
    }
}

impl HostViews {
    /// Every plan, each once.
    fn plans_mut(&mut self) -> impl Iterator<Item = &mut Plan> {
        std::iter::once(&mut self.dns)
            .chain(&mut self.dhcp)
            .chain(std::iter::once(&mut self.tftp))
            .chain(&mut self.router)
            .chain(self.clusters.iter_mut().map(|(_, p)| p))
    }
}

/// Cluster `id`'s plan: its HTTP and load-balancer listeners (DNS, DHCP and TFTP are the
/// host's), its state in its own directory.
fn cluster(plan: &Plan, state_dir: &Path, id: &str) -> Plan {
    let mut p = plan.clone();
    p.listen.dns.clear();
    p.listen.dhcp.clear();
    p.listen.tftp.clear();
    p.zones.clear();
    p.state_dir = cluster_state_dir(state_dir, id);
    p.host_cluster = Some(Arc::from(id));
    p
}

/// Each address once, in first-seen order.
fn union<T: PartialEq + Clone>(lists: impl IntoIterator<Item = impl AsRef<[T]>>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for list in lists {
        for x in list.as_ref() {
            if !out.contains(x) {
                out.push(x.clone());
            }
        }
    }
    out
}

/// The networks in every one of `lists` (each net of the first list that every other list
/// covers): a zone transfer is allowed only to a client every cluster would allow, since one
/// listener answers for all.
fn everyones(lists: &[&[IpNet]]) -> Vec<IpNet> {
    let Some((first, rest)) = lists.split_first() else {
        return Vec::new();
    };
    first
        .iter()
        .filter(|net| rest.iter().all(|l| l.iter().any(|o| o.contains(*net))))
        .copied()
        .collect()
}

/// DNS: the first cluster's plan with every cluster's listeners, upstreams and recursion
/// clients; zone transfers only for clients all clusters allow.
fn dns(plans: &[&Plan], host: &Host) -> Plan {
    let mut p = only(plans, host, |l| &mut l.dns);
    p.resolver.upstreams = union(plans.iter().map(|p| &p.resolver.upstreams));
    p.resolver.recursion_allowed = union(plans.iter().map(|p| &p.resolver.recursion_allowed));
    let axfr: Vec<&[IpNet]> = plans
        .iter()
        .map(|p| p.resolver.axfr_allowed.as_slice())
        .collect();
    p.resolver.axfr_allowed = everyones(&axfr);
    p
}

/// TFTP: the first cluster's iPXE directory on every cluster's TFTP listeners.
fn tftp(plans: &[&Plan], host: &Host) -> Plan {
    only(plans, host, |l| &mut l.tftp)
}

/// The router: the first cluster's plan with only the frontend listeners, each at every shared
/// address on the frontend's usual port.
fn router(plans: &[&Plan], host: &Host, shared: &SharedFrontend) -> Plan {
    let mut p = only(plans, host, |l| &mut l.api);
    let at = |port: u16| -> Vec<SocketAddr> {
        shared
            .addresses()
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect()
    };
    p.listen = Listen {
        api: at(FrontendKind::Api.backend_port()),
        machine_config: at(FrontendKind::MachineConfig.backend_port()),
        ingress_https: at(FrontendKind::IngressHttps.backend_port()),
        ingress_http: at(FrontendKind::IngressHttp.backend_port()),
        ..Listen::default()
    };
    p.lb.sharing = Sharing::Router {
        default_cluster: shared.default_cluster.clone(),
    };
    p
}

/// The first cluster's plan with one kind of listener, `pick`, the union over every
/// cluster's, and no other.
fn only(plans: &[&Plan], host: &Host, pick: fn(&mut Listen) -> &mut Vec<SocketAddr>) -> Plan {
    let merged = union(plans.iter().map(|p| {
        let mut listen = p.listen.clone();
        std::mem::take(pick(&mut listen))
    }));
    let mut p = plans[0].clone();
    p.state_dir = host.state_dir.clone();
    p.zones.clear();
    // Neither DNS nor TFTP is bound to an interface: no cluster's stays with them (a reload
    // that removes the first cluster must not look like an interface change).
    p.interface = None;
    p.listen = Listen::default();
    *pick(&mut p.listen) = merged;
    p
}

/// DHCP: one plan per cluster interface. The cluster with the dynamic pool (check allows one
/// per segment) answers clients no cluster knows; every other cluster's reservations ride
/// along and are answered with their own cluster's options. Every other node of the host (of
/// another segment, or of a cluster on this one whose DHCP is another server's) is never
/// answered here.
fn segments(plans: &[&Plan], host: &Host) -> Vec<Plan> {
    let mut interfaces: Vec<Option<&str>> = Vec::new();
    for p in plans {
        if !p.listen.dhcp.is_empty() && !interfaces.contains(&p.interface.as_deref()) {
            interfaces.push(p.interface.as_deref());
        }
    }
    interfaces
        .into_iter()
        .map(|interface| {
            let on: Vec<&Plan> = plans
                .iter()
                .copied()
                .filter(|p| !p.listen.dhcp.is_empty() && p.interface.as_deref() == interface)
                .collect();
            let base = on.iter().position(|p| p.dhcp.pool.is_some()).unwrap_or(0);
            let mut p = on[base].clone();
            p.state_dir = segment_state_dir(&host.state_dir, interface);
            p.zones.clear();
            p.listen = Listen {
                dhcp: union(on.iter().map(|p| &p.listen.dhcp)),
                ..Listen::default()
            };
            p.dhcp.others = on
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != base)
                .map(|(_, o)| o.dhcp.clone())
                .collect();
            // Every other node of the host: a cluster's node whose DHCP is another server's,
            // or a node of another segment that reached this one (a VM on the wrong bridge),
            // never gets this segment's pool.
            p.dhcp.silent = plans
                .iter()
                .filter(|o| !on.iter().any(|mine| std::ptr::eq(*mine, **o)))
                .flat_map(|o| o.dhcp.reservations.iter().map(|r| r.mac))
                .collect();
            p
        })
        .collect()
}

#[cfg(test)]
mod tests;
