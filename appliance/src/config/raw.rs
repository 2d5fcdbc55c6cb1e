//! The YAML file as written: serde DTOs whose leaves keep their source location.
//!
//! Architecture invariant: nothing here interprets a value. Addresses, names and durations stay
//! strings with their span so that validation can report every bad one at once, each pointing at
//! its own line and column. Only `validate` turns these into the typed [`super::Config`].

use serde::Deserialize;
use serde_saphyr::Spanned;

/// A string with the place it came from.
pub type Text = Spanned<String>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Schema version; only `1` exists.
    pub version: Spanned<u32>,
    pub cluster: RawCluster,
    pub network: RawNetwork,
    pub nodes: Spanned<Vec<RawNode>>,
    pub install: Spanned<RawInstall>,
    #[serde(default)]
    pub dns: RawDns,
    #[serde(default)]
    pub lb: RawLb,
    #[serde(default)]
    pub listen: RawListen,
    /// Account to switch to once every socket is bound.
    #[serde(default)]
    pub run_as: Option<RawRunAs>,
    /// Where leases and node install state live.
    #[serde(default)]
    pub state_dir: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub name: Text,
    pub base_domain: Text,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNetwork {
    /// Cluster-side network interface (DHCP binds to it).
    #[serde(default)]
    pub interface: Option<Text>,
    pub subnet: Text,
    #[serde(default)]
    pub gateway: Option<Text>,
    pub appliance_ip: Text,
    #[serde(default)]
    pub ipv6: Option<RawIpv6>,
    #[serde(default)]
    pub upstream_dns: Vec<Text>,
    #[serde(default)]
    pub ntp: Vec<Text>,
    #[serde(default)]
    pub mtu: Option<Spanned<u32>>,
    #[serde(default)]
    pub dhcp_pool: Option<RawPool>,
    #[serde(default)]
    pub lease_time: Option<Text>,
    /// Extra DNS search domains handed out by DHCP, after the cluster domain.
    #[serde(default)]
    pub domain_search: Vec<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIpv6 {
    pub subnet: Text,
    #[serde(default)]
    pub gateway: Option<Text>,
    pub appliance_ip: Text,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPool {
    pub start: Text,
    pub end: Text,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNode {
    pub name: Text,
    pub role: Text,
    pub mac: Text,
    pub ip: Text,
    #[serde(default)]
    pub ipv6: Option<Text>,
    #[serde(default)]
    pub install_dev: Option<Text>,
    #[serde(default)]
    pub kernel_args: Vec<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInstall {
    pub ignition_dir: Text,
    pub artifacts_dir: Text,
    #[serde(default)]
    pub install_dev: Option<Text>,
    #[serde(default)]
    pub kernel_args: Vec<Text>,
    /// Base URL the nodes use to reach the HTTP boot server; derived when absent.
    #[serde(default)]
    pub base_url: Option<Text>,
    #[serde(default)]
    pub artifacts: RawArtifacts,
    /// Where the iPXE binaries PXE firmware chainloads live (Debian's `ipxe` package).
    #[serde(default)]
    pub ipxe_dir: Option<Text>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawArtifacts {
    #[serde(default)]
    pub kernel: Option<Text>,
    #[serde(default)]
    pub initramfs: Option<Text>,
    #[serde(default)]
    pub rootfs: Option<Text>,
    /// The CoreOS live ISO the per-node ISOs are made from.
    #[serde(default)]
    pub iso: Option<Text>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDns {
    #[serde(default)]
    pub ttl: Option<Spanned<u32>>,
    #[serde(default)]
    pub records: Vec<RawRecord>,
    /// Networks whose clients may use the forwarder; defaults to the cluster subnets and loopback.
    #[serde(default)]
    pub recursion_allowed: Option<Vec<Text>>,
    /// Networks allowed to transfer the zones (AXFR); nobody by default.
    #[serde(default)]
    pub axfr_allowed: Vec<Text>,
    /// Publish etcd-N and `_etcd-server-ssl._tcp` records (OpenShift before 4.4).
    #[serde(default)]
    pub legacy_etcd: Option<Spanned<bool>>,
    /// Response rate limiting for clients outside `recursion_allowed`.
    #[serde(default)]
    pub rate_limit: Option<RawRateLimit>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// Identical answers per second to one client network; 0 turns limiting off.
    #[serde(default)]
    pub responses_per_second: Option<Spanned<u32>>,
    /// Every n-th limited answer goes out truncated (TC) instead of being dropped; 0 drops all.
    #[serde(default)]
    pub slip: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecord {
    pub name: Text,
    #[serde(rename = "type")]
    pub kind: Text,
    pub value: Text,
    #[serde(default)]
    pub ttl: Option<Spanned<u32>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLb {
    #[serde(default)]
    pub balance: Option<Text>,
    #[serde(default)]
    pub health: RawHealth,
    /// How long a drained backend's open connections may go on before they are closed.
    #[serde(default)]
    pub drain_timeout: Option<Text>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    #[serde(default)]
    pub interval: Option<Text>,
    #[serde(default)]
    pub timeout: Option<Text>,
    #[serde(default)]
    pub rise: Option<Spanned<u32>>,
    #[serde(default)]
    pub fall: Option<Spanned<u32>>,
    /// `http` (the OpenShift endpoints) or `tcp` (connect only) for the ingress pools.
    #[serde(default)]
    pub ingress_check: Option<Text>,
    /// `https` (GET /readyz on 6443, /healthz on 22623) or `tcp` for the API and machine-config
    /// pools.
    #[serde(default)]
    pub control_plane_check: Option<Text>,
    /// PEM CA that signed the nodes' serving certificates; without it HTTPS checks don't verify.
    #[serde(default)]
    pub ca_file: Option<Text>,
}

/// Socket addresses per service; each defaults to the appliance address(es) on the standard port.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListen {
    #[serde(default)]
    pub dns: Option<Vec<Text>>,
    #[serde(default)]
    pub dhcp: Option<Vec<Text>>,
    #[serde(default)]
    pub tftp: Option<Vec<Text>>,
    #[serde(default)]
    pub http: Option<Vec<Text>>,
    #[serde(default)]
    pub api: Option<Vec<Text>>,
    #[serde(default)]
    pub machine_config: Option<Vec<Text>>,
    #[serde(default)]
    pub ingress_https: Option<Vec<Text>>,
    #[serde(default)]
    pub ingress_http: Option<Vec<Text>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRunAs {
    pub user: Text,
    #[serde(default)]
    pub group: Option<Text>,
}
