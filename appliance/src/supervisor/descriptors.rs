//! What each listener of a layout asks of the descriptor budget (`crate::budget`), and the
//! division `serve` starts with and `check` shows.

use std::net::SocketAddr;

use super::instance::Role;
use crate::budget::{self, Demand, Division, Kind};
use crate::config::Target;
use crate::plan::Plan;
use crate::sockets::{Proto, Service};

/// The descriptors `serve` may open: its soft limit (raised to the hard one at start).
pub(super) fn limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit};
    getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft)
}

/// Divides `limit` among the listeners of `plans`, the API's, and the pair's replication
/// listener on `replication`.
pub(super) fn divide<'a>(
    limit: u64,
    plans: impl Iterator<Item = (&'a Role, &'a Plan)>,
    replication: Option<SocketAddr>,
) -> Division {
    let mut demands = Vec::new();
    let mut listening = 0;
    let mut api = None;
    for (role, plan) in plans {
        let cluster = role.cluster().map(str::to_owned);
        let mut ask = |kind, addr| {
            demands.push(Demand {
                kind,
                addr,
                cluster: cluster.clone(),
            });
        };
        let mut forwards = false;
        for spec in super::listener_specs(plan) {
            listening += 1;
            match (spec.service, spec.proto) {
                (Service::Dns, Proto::Tcp) => ask(Kind::DnsTcp, spec.addr),
                (Service::Dns, Proto::Udp) => forwards = true,
                (Service::Http, _) => ask(Kind::Http, spec.addr),
                (Service::Tftp, _) => ask(Kind::Transfers, spec.addr),
                (Service::Dhcp, _) => {}
                (Service::KubeApi | Service::MachineConfig, _)
                | (Service::IngressHttps | Service::IngressHttp, _) => ask(Kind::Lb, spec.addr),
            }
        }
        // One forwarder per DNS server (its UDP and TCP listeners share it).
        if forwards {
            ask(Kind::Forwards, crate::dns::forwards_at(plan));
        }
        api = api.or_else(|| plan.api.as_ref().map(|a| a.listen));
    }
    let mut ask = |kind, addr| {
        listening += 1;
        demands.push(Demand {
            kind,
            addr,
            cluster: None,
        });
    };
    if let Some(addr) = api {
        ask(Kind::Api, addr);
    }
    if let Some(addr) = replication {
        ask(Kind::Replication, addr);
    }
    budget::divide(limit, listening, demands)
}

/// The division `serve` would start `target` with under the unit's `LimitNOFILE`, for `check`.
pub fn of_unit(target: &Target) -> Result<Division, String> {
    let derived = super::layout::derive(target, 0, None)?;
    let plans = derived.plans.iter().map(|(role, plan)| (role, plan));
    // A pair's replication listener is on this host's address; either host's counts the same.
    let replication = derived
        .plans
        .first()
        .and_then(|(_, p)| p.ha.as_ref())
        .map(|ha| crate::replication::listen_addr(ha.hosts[0]));
    Ok(divide(budget::UNIT_LIMIT, plans, replication))
}

/// Says how the descriptors were divided: one line at start, a warning per cut kind.
pub(super) fn log(division: &Division) {
    tracing::info!(
        "open descriptors: {} ({} kept for files and listening sockets): {}",
        division.limit,
        division.reserve,
        division.lines().join("; ")
    );
    if division.cut().next().is_some() {
        tracing::warn!(
            "open descriptors: {} are too few for every listener's cap: caps are cut to fit (LimitNOFILE in the unit sets the limit)",
            division.limit
        );
    }
}
