//! What the install orchestration needs: where the cluster's API is, the admin kubeconfig that
//! authenticates to it, the nodes it may approve certificates for, and its pacing.
//!
//! Architecture invariant: pure, like the rest of the plan. The API endpoint is derived here
//! (the appliance's own API frontend unless the config names one); the orchestration reads it.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::config::Config;
use crate::vocabulary::AfterBootstrap;
use crate::vocabulary::Role;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrchestrationPlan {
    /// The admin kubeconfig: credentials and the cluster CA.
    pub kubeconfig: PathBuf,
    /// Where the API is asked.
    pub api_url: String,
    /// The name the API server's certificate must carry (its SNI too).
    pub api_server_name: String,
    pub after_bootstrap: AfterBootstrap,
    /// One master, no bootstrap node: the install has no bootstrap phase.
    pub single_node: bool,
    pub poll: Duration,
    pub settle: Duration,
    /// How long a run of `up` waits in the bootstrap phase, and then for installed.
    pub bootstrap_timeout: Duration,
    pub install_timeout: Duration,
    /// Every node, in config order: whose certificate requests may be approved, with which
    /// names and addresses.
    pub nodes: Vec<KnownNode>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownNode {
    /// The Kubernetes node name (its host name, which DHCP and its ignition give it).
    pub name: String,
    pub role: Role,
    pub addresses: Vec<IpAddr>,
}

impl OrchestrationPlan {
    pub fn bootstrap(&self) -> Option<&KnownNode> {
        self.nodes.iter().find(|n| n.role == Role::Bootstrap)
    }

    pub fn node(&self, name: &str) -> Option<&KnownNode> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

pub fn derive(config: &Config) -> OrchestrationPlan {
    let o = &config.orchestration;
    let api_server_name = format!("api-int.{}", config.cluster.domain());
    let api_url = o.api_url.clone().unwrap_or_else(|| {
        // The appliance balances the API itself: ask it there, as the nodes do; a single node
        // reached directly is asked directly.
        match (config.direct_single_node(), config.listen.api.first()) {
            (Some(node), _) => format!("https://{}:6443", node.ipv4),
            (None, Some(addr)) => format!("https://{}", reachable(*addr, config)),
            // The host's router at the shared frontend: the client's server name (api-int,
            // sent as SNI for an address) is what routes it to this cluster.
            (None, None) => match config.lb.shared.as_deref() {
                Some([first, ..]) => format!("https://{}", SocketAddr::new(*first, 6443)),
                _ => format!("https://{api_server_name}:6443"),
            },
        }
    });
    OrchestrationPlan {
        kubeconfig: o.kubeconfig.clone(),
        api_url,
        api_server_name,
        after_bootstrap: o.bootstrap_after_complete,
        single_node: config.single_node().is_some(),
        poll: o.poll,
        settle: o.settle,
        bootstrap_timeout: o.bootstrap_timeout,
        install_timeout: o.install_timeout,
        nodes: config
            .nodes
            .iter()
            .map(|n| KnownNode {
                name: n.name.clone(),
                role: n.role,
                addresses: std::iter::once(IpAddr::V4(n.ipv4))
                    .chain(n.ipv6.map(IpAddr::V6))
                    .collect(),
            })
            .collect(),
    }
}

/// A listener address to connect to: a wildcard listener is reached at the appliance address.
fn reachable(addr: SocketAddr, config: &Config) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::new(IpAddr::V4(config.network.v4.appliance), addr.port())
    } else {
        addr
    }
}
