//! The plan: everything the services serve, derived from a validated config by a pure function.
//!
//! Architecture invariant: no I/O and no clock. [`Plan::derive`] is a function of the config and
//! the SOA serial the caller picks, so the same inputs give the same plan, golden tests pin it,
//! and a reload can build the next plan beside the current one and swap it in whole.

pub mod boot;
pub mod dhcp;
pub mod documents;
pub mod ha;
pub mod host;
pub mod lb;
pub mod machines;
pub mod orchestration;
pub mod reverse;
pub mod route;
pub mod views;
pub mod zones;

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use ipnet::IpNet;

use crate::config::{Config, Listen, RateLimit};

pub use boot::{BootFiles, BootParams};
pub use dhcp::{DhcpPlan, Reservation};
pub use lb::{Backend, Frontend, FrontendKind, HealthCheck, LbPlan, Probe, Sharing};
pub use zones::{Record, Zone};

/// The plan every service reads; replaced whole on reload (one atomic pointer swap, so a
/// request in flight keeps the plan it started with).
pub type Handle = Arc<ArcSwap<Plan>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The serial it was derived with: the plan's number in logs and status (each zone's SOA
    /// serial starts at it).
    pub serial: u32,
    /// `<cluster>.<base_domain>`, without a trailing dot.
    pub cluster_domain: String,
    /// The forward zone first, then the reverse zones (IPv4, then IPv6).
    pub zones: Vec<Zone>,
    pub resolver: ResolverPolicy,
    pub dhcp: DhcpPlan,
    pub lb: LbPlan,
    pub boot: Vec<BootParams>,
    /// The iPXE script for a MAC address no node has.
    pub unknown_script: String,
    pub listen: Listen,
    /// The DHCP service's interface, when one is configured.
    pub interface: Option<String>,
    /// Where leases and install state are kept.
    pub state_dir: std::path::PathBuf,
    /// The directories and base URL of the boot files.
    pub files: BootFiles,
    /// The machines a control provider creates and powers.
    pub control: machines::ControlPlan,
    /// How `okd-appliance cluster up` reaches the cluster and which nodes it knows.
    pub orchestration: orchestration::OrchestrationPlan,
    /// The pair sharing the virtual address, when there is one.
    pub ha: Option<ha::HaPlan>,
    /// The HTTP API on TCP (TLS and a token), when configured.
    pub api: Option<crate::config::Api>,
    /// The cluster's id when it is served as one of a host's clusters (its boot server's
    /// `/metrics` then shows only its own series); `None` for a cluster file.
    pub host_cluster: Option<std::sync::Arc<str>>,
}

/// The listeners as configured; with a pair, DNS also on each host's own address (the
/// standby answers there too, and the health check asks there), bound with IP_FREEBIND like
/// every listener of a pair, since only the active host has the virtual address.
fn listen(config: &Config) -> Listen {
    let mut listen = config.listen.clone();
    if let Some(ha) = &config.ha {
        let vip = std::net::IpAddr::V4(config.network.v4.appliance);
        let ports: Vec<u16> = listen
            .dns
            .iter()
            .filter(|a| a.ip() == vip)
            .map(|a| a.port())
            .collect();
        for port in ports {
            for host in ha.hosts {
                let addr = std::net::SocketAddr::new(host.into(), port);
                if !listen.dns.contains(&addr) {
                    listen.dns.push(addr);
                }
            }
        }
    }
    listen
}

/// Who may use the forwarder and where it forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverPolicy {
    pub upstreams: Vec<SocketAddr>,
    pub recursion_allowed: Vec<IpNet>,
    pub axfr_allowed: Vec<IpNet>,
    /// Applies to clients outside `recursion_allowed`.
    pub rate_limit: RateLimit,
}

impl Plan {
    /// Derives the plan. `serial` becomes the SOA serial of every zone; callers pass a value
    /// that grows with each reload (seconds since the epoch work).
    pub fn derive(config: &Config, serial: u32) -> Plan {
        let boot = boot::derive(config);
        let control = machines::derive(config, &boot);
        Plan {
            serial,
            cluster_domain: config.cluster.domain(),
            zones: zones::derive(config, serial),
            resolver: ResolverPolicy {
                upstreams: config.network.upstream_dns.clone(),
                recursion_allowed: config.dns.recursion_allowed.clone(),
                axfr_allowed: config.dns.axfr_allowed.clone(),
                rate_limit: config.dns.rate_limit,
            },
            dhcp: dhcp::derive(config),
            lb: lb::derive(config),
            boot,
            unknown_script: documents::unknown_script(),
            listen: listen(config),
            interface: config.network.interface.clone(),
            state_dir: config.state_dir.clone(),
            files: boot::files(config),
            control,
            orchestration: orchestration::derive(config),
            ha: ha::derive(config),
            api: config.api.clone(),
            host_cluster: None,
        }
    }
}
