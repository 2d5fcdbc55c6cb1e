//! The validated configuration: typed, complete (every default filled in), free of spans.
//!
//! Architecture invariant: a value of [`Config`] is only ever built by `validate`, so every
//! invariant that validation checks (unique addresses, nodes inside the subnet, one bootstrap at
//! most, at least one master) holds for every `Config` the rest of the program sees.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::records::RecordData;
pub use crate::vocabulary::{
    AfterBootstrap, Balance, MacAddr, MacAddrParseError, Role, RoleConfig,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub cluster: Cluster,
    pub network: Network,
    pub nodes: Vec<Node>,
    pub install: Install,
    pub dns: Dns,
    pub lb: Lb,
    pub listen: Listen,
    pub run_as: Option<RunAs>,
    pub state_dir: PathBuf,
    pub control: super::control::Control,
    pub orchestration: Orchestration,
    pub ha: Option<Ha>,
    pub api: Option<Api>,
    pub install_config: InstallConfig,
}

/// What `render --format install-config` adds to what the rest of the config says. Complete:
/// the networks hold the installer's defaults when the file leaves them out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallConfig {
    /// `None` when the config has no `install_config` section (nothing to render then).
    pub pull_secret_file: Option<PathBuf>,
    pub ssh_key_file: Option<PathBuf>,
    /// IPv4 entries first, as the installer requires of a dual-stack cluster.
    pub cluster_network: Vec<ClusterNetwork>,
    /// One per address family of the machine network, IPv4 first.
    pub service_network: Vec<IpNet>,
    pub proxy: Option<Proxy>,
    pub additional_trust_bundle_file: Option<PathBuf>,
    pub additional_trust_bundle_policy: Option<TrustBundlePolicy>,
    pub image_digest_sources: Vec<ImageDigestSource>,
}

/// A pod network: each node gets a block of `host_prefix` bits from `cidr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterNetwork {
    pub cidr: IpNet,
    pub host_prefix: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    pub no_proxy: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustBundlePolicy {
    ProxyOnly,
    Always,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageDigestSource {
    pub source: String,
    pub mirrors: Vec<String>,
}

/// The HTTP API on TCP: always TLS, always a bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Api {
    pub listen: std::net::SocketAddr,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub token_file: PathBuf,
}

/// Two appliances, one virtual address (`network.appliance_ip`, and the IPv6 one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ha {
    /// The hosts' own addresses; the first has the higher VRRP priority.
    pub hosts: [Ipv4Addr; 2],
    pub router_id: u8,
    pub secret_file: PathBuf,
}

/// How `okd-appliance cluster up` drives an install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orchestration {
    pub kubeconfig: PathBuf,
    /// `None`: the appliance's own API frontend.
    pub api_url: Option<String>,
    pub bootstrap_after_complete: AfterBootstrap,
    pub poll: Duration,
    pub settle: Duration,
    /// How long a run of `up` waits in the bootstrap phase, and then for installed.
    pub bootstrap_timeout: Duration,
    pub install_timeout: Duration,
}

impl Config {
    pub fn nodes_with_role(&self, role: Role) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(move |n| n.role == role)
    }

    /// The master of a single-node cluster (its only node, a master: it bootstraps in place),
    /// or `None`.
    pub fn single_node(&self) -> Option<&Node> {
        single_node_of(self.nodes.iter().map(|n| n.role)).then(|| {
            self.nodes_with_role(Role::Master)
                .next()
                .expect("one master")
        })
    }

    /// The master of a single-node cluster that its names resolve to directly
    /// (`lb.single_node: direct`, the default).
    pub fn direct_single_node(&self) -> Option<&Node> {
        self.single_node()
            .filter(|_| self.lb.single_node == SingleNodeRouting::Direct)
    }

    /// Whether the operator's kernel arguments for `node` (`install.kernel_args` and its own)
    /// configure its network with `ip=`: then the appliance adds no `ip=` of its own for it.
    pub fn sets_own_ip(&self, node: &Node) -> bool {
        self.install
            .kernel_args
            .iter()
            .chain(&node.kernel_args)
            .any(|a| is_ip_arg(a))
    }
}

/// `ip=...`, the dracut (and nm-initrd-generator) network argument.
pub fn is_ip_arg(arg: &str) -> bool {
    arg.starts_with("ip=")
}

/// Whether nodes of these roles make a single-node cluster: one master and nothing else, as
/// `openshift-install create single-node-ignition-config` installs it (one control plane
/// replica, no compute replicas, no bootstrap node). One master beside workers and no bootstrap
/// node stays an ordinary cluster (one whose bootstrap node was removed after the install).
pub fn single_node_of(roles: impl IntoIterator<Item = Role>) -> bool {
    let mut roles = roles.into_iter();
    matches!((roles.next(), roles.next()), (Some(Role::Master), None))
}

/// Where a single-node cluster's api, api-int and `*.apps` names point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SingleNodeRouting {
    /// At the node, as OpenShift documents for single-node clusters: no hop through the
    /// services host, and the load balancer's listeners are off unless `listen` names them.
    Direct,
    /// At the appliance, whose load balancer forwards to the node (as for larger clusters).
    Proxied,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// A host label, the first label of the cluster domain.
    pub name: String,
    /// Lowercase, without a trailing dot.
    pub base_domain: String,
}

impl Cluster {
    /// `<name>.<base_domain>`, lowercase, without a trailing dot.
    pub fn domain(&self) -> String {
        format!("{}.{}", self.name, self.base_domain)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    pub interface: Option<String>,
    pub v4: Ipv4Network,
    pub v6: Option<Ipv6Network>,
    /// Resolvers the forwarder asks for names outside the cluster; port 53 unless given.
    pub upstream_dns: Vec<SocketAddr>,
    pub ntp: Vec<Ipv4Addr>,
    pub mtu: Option<u16>,
    pub dhcp_pool: Option<Pool>,
    pub lease_time: Duration,
    pub domain_search: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Network {
    pub subnet: Ipv4Net,
    pub gateway: Option<Ipv4Addr>,
    pub appliance: Ipv4Addr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Network {
    pub subnet: Ipv6Net,
    pub gateway: Option<Ipv6Addr>,
    pub appliance: Ipv6Addr,
}

/// An inclusive range of dynamic addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    pub start: Ipv4Addr,
    pub end: Ipv4Addr,
}

impl Pool {
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.start <= ip && ip <= self.end
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub role: Role,
    pub mac: MacAddr,
    pub ipv4: Ipv4Addr,
    pub ipv6: Option<Ipv6Addr>,
    /// The disk CoreOS installs to; the install default when absent.
    pub install_dev: Option<String>,
    pub kernel_args: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    pub ignition_dir: PathBuf,
    pub artifacts_dir: PathBuf,
    pub install_dev: String,
    pub kernel_args: Vec<String>,
    /// `http://host[:port]` without a trailing slash: where nodes reach the boot server.
    pub base_url: String,
    pub artifacts: Artifacts,
    /// undionly.kpxe and snponly.efi, served over TFTP (and snponly.efi over HTTP).
    pub ipxe_dir: PathBuf,
    /// The openshift-install `ignition create` runs, when the config names one.
    pub installer: Option<Installer>,
    /// Files `ignition create` copies into the installer's `openshift/` directory.
    pub manifests_dir: Option<PathBuf>,
}

/// `install.openshift_install`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installer {
    /// A binary the operator installed.
    Path(PathBuf),
    /// A release's binary, which `okd-appliance installer fetch` puts into the state directory.
    Release {
        version: String,
        /// The base URL with one directory per release, without a trailing slash.
        mirror: String,
    },
}

impl Installer {
    /// Where OKD publishes its releases: a GitHub release per tag, its files under
    /// `<this>/<tag>/` (see `crate::installer`).
    pub const OKD_RELEASES: &str = "https://github.com/okd-project/okd/releases/download";
}

/// File names of the CoreOS live PXE artifacts inside the artifacts directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifacts {
    pub kernel: String,
    pub initramfs: String,
    pub rootfs: String,
    /// The live ISO `/iso/<node>.iso` is made from.
    pub iso: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dns {
    pub ttl: u32,
    pub records: Vec<ExtraRecord>,
    pub recursion_allowed: Vec<IpNet>,
    pub axfr_allowed: Vec<IpNet>,
    pub legacy_etcd: bool,
    pub rate_limit: RateLimit,
}

/// Response rate limiting (as BIND and Knot do it) against reflection attacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Identical answers per second to one /24 (IPv4) or /56 (IPv6); 0 is off.
    pub responses_per_second: u32,
    /// Every `slip`-th limited answer is sent truncated so real clients retry over TCP.
    pub slip: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraRecord {
    /// Absolute, lowercase, with a trailing dot; always inside the cluster domain.
    pub name: String,
    pub ttl: Option<u32>,
    pub data: RecordData,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lb {
    pub balance: Balance,
    pub health: HealthSettings,
    /// The CA that HTTPS health checks verify the nodes' certificates against (as
    /// `api-int.<cluster domain>`); `None` checks without verification, as HAProxy's
    /// `verify none` in OpenShift's documented configuration.
    pub check_ca: Option<PathBuf>,
    /// After `lb drain`, connections still open this long are closed, so a drain always ends.
    pub drain_timeout: Duration,
    pub single_node: SingleNodeRouting,
    /// The host's shared frontend addresses (a host file's `shared_frontend`, never a cluster
    /// file's): api, api-int and `*.apps` resolve there, and the host's router passes each
    /// connection to this cluster's pools by the name it asks for. `None`: the cluster's own
    /// frontends, on its own address.
    pub shared: Option<Vec<IpAddr>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthSettings {
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive successes that bring a backend up.
    pub rise: u32,
    /// Consecutive failures that take it down.
    pub fall: u32,
    pub ingress_check: IngressCheck,
    pub control_plane_check: ControlPlaneCheck,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlPlaneCheck {
    /// HTTPS GET /readyz (API) and /healthz (machine config server), ready on 200.
    Https,
    /// A TCP connect to the service port.
    Tcp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngressCheck {
    /// HTTP GET /healthz/ready on the router's stats port 1936.
    Http,
    /// A TCP connect to the service port.
    Tcp,
}

/// Where each service listens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listen {
    pub dns: Vec<SocketAddr>,
    pub dhcp: Vec<SocketAddr>,
    pub tftp: Vec<SocketAddr>,
    pub http: Vec<SocketAddr>,
    pub api: Vec<SocketAddr>,
    pub machine_config: Vec<SocketAddr>,
    pub ingress_https: Vec<SocketAddr>,
    pub ingress_http: Vec<SocketAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub user: String,
    pub group: Option<String>,
}
