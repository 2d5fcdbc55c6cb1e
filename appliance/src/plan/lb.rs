//! Load-balancer frontends and the pools behind them, derived from node roles: the bootstrap
//! node and the masters for the API (6443) and the machine config server (22623); the workers
//! for ingress (443 and 80), or the masters when there are no workers (a compact cluster).
//!
//! Architecture invariant: who belongs in which pool and how to check them; not whether a
//! backend is up right now (that is the LB service's live state).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::config::{Balance, Config, ControlPlaneCheck, IngressCheck, Role};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbPlan {
    pub balance: Balance,
    /// How long a drained backend's open connections may go on.
    pub drain_timeout: Duration,
    pub frontends: Vec<Frontend>,
    /// The CA HTTPS checks verify against; `None`: no verification.
    pub check_ca: Option<std::path::PathBuf>,
    /// Whose listeners these frontends are.
    pub sharing: Sharing,
}

/// Who listens for a cluster's frontends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Sharing {
    /// The cluster itself, on its own addresses (or nobody: a single node reached directly).
    #[default]
    Own,
    /// The host's router, at the host's shared frontend: the cluster's instance listens on
    /// none of them and only checks its backends.
    Routed,
    /// This plan is the host's router's: it listens at the shared frontend and passes each
    /// connection to the routed cluster its name belongs to, else to `default_cluster`.
    Router { default_cluster: Option<String> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrontendKind {
    /// Kubernetes API, 6443.
    Api,
    /// Machine config server, 22623 (ignition for joining nodes).
    MachineConfig,
    /// Ingress routers, 443.
    IngressHttps,
    /// Ingress routers, 80.
    IngressHttp,
}

impl FrontendKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::MachineConfig => "machine-config",
            Self::IngressHttps => "ingress-https",
            Self::IngressHttp => "ingress-http",
        }
    }

    /// The port the backends listen on.
    pub fn backend_port(self) -> u16 {
        match self {
            Self::Api => 6443,
            Self::MachineConfig => 22623,
            Self::IngressHttps => 443,
            Self::IngressHttp => 80,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontend {
    pub kind: FrontendKind,
    pub listen: Vec<SocketAddr>,
    pub backends: Vec<Backend>,
    pub check: HealthCheck,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// The node's name.
    pub name: String,
    pub role: Role,
    pub addr: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub probe: Probe,
    pub interval: Duration,
    pub timeout: Duration,
    pub rise: u32,
    pub fall: u32,
}

/// How a backend proves it is ready, as OpenShift documents for user-provisioned load balancers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// GET over TLS, with `server_name` as SNI (and as the name verified when a CA is
    /// configured); ready on 200.
    Https {
        port: u16,
        path: &'static str,
        server_name: String,
    },
    /// GET over plain HTTP; ready on 200.
    Http { port: u16, path: &'static str },
    /// A TCP handshake on the service port.
    Tcp,
}

pub fn derive(config: &Config) -> LbPlan {
    let h = &config.lb.health;
    let check = |probe| HealthCheck {
        probe,
        interval: h.interval,
        timeout: h.timeout,
        rise: h.rise,
        fall: h.fall,
    };
    let control_plane: Vec<&crate::config::Node> = config
        .nodes
        .iter()
        .filter(|n| matches!(n.role, Role::Bootstrap | Role::Master))
        .collect();
    let workers: Vec<&crate::config::Node> = config.nodes_with_role(Role::Worker).collect();
    // Without workers the routers run on the masters (a compact cluster).
    let ingress: Vec<&crate::config::Node> = if workers.is_empty() {
        config.nodes_with_role(Role::Master).collect()
    } else {
        workers
    };
    let ingress_probe = match h.ingress_check {
        IngressCheck::Http => Probe::Http {
            port: 1936,
            path: "/healthz/ready",
        },
        IngressCheck::Tcp => Probe::Tcp,
    };
    // The API server and the machine config server present the api-int certificate for it.
    let api_int = format!("api-int.{}", config.cluster.domain());
    let control_plane_probe = |port, path| match h.control_plane_check {
        ControlPlaneCheck::Https => Probe::Https {
            port,
            path,
            server_name: api_int.clone(),
        },
        ControlPlaneCheck::Tcp => Probe::Tcp,
    };
    let frontend = |kind: FrontendKind,
                    listen: &[SocketAddr],
                    nodes: &[&crate::config::Node],
                    probe| Frontend {
        kind,
        listen: listen.to_vec(),
        backends: nodes
            .iter()
            .map(|n| Backend {
                name: n.name.clone(),
                role: n.role,
                addr: SocketAddr::new(IpAddr::V4(n.ipv4), kind.backend_port()),
            })
            .collect(),
        check: check(probe),
    };
    let l = &config.listen;
    LbPlan {
        balance: config.lb.balance,
        check_ca: config.lb.check_ca.clone(),
        drain_timeout: config.lb.drain_timeout,
        sharing: if config.lb.shared.is_some() {
            Sharing::Routed
        } else {
            Sharing::Own
        },
        frontends: vec![
            frontend(
                FrontendKind::Api,
                &l.api,
                &control_plane,
                control_plane_probe(6443, "/readyz"),
            ),
            frontend(
                FrontendKind::MachineConfig,
                &l.machine_config,
                &control_plane,
                control_plane_probe(22623, "/healthz"),
            ),
            frontend(
                FrontendKind::IngressHttps,
                &l.ingress_https,
                &ingress,
                ingress_probe.clone(),
            ),
            frontend(
                FrontendKind::IngressHttp,
                &l.ingress_http,
                &ingress,
                ingress_probe,
            ),
        ],
    }
}
