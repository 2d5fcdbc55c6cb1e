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
    /// How the cluster's machines are created and powered (`none` when absent).
    #[serde(default)]
    pub control: Option<Spanned<RawControl>>,
    /// How `okd-appliance cluster up` drives an install (`None`: no section, the defaults).
    #[serde(default)]
    pub orchestration: Option<RawOrchestration>,
    /// Two appliances sharing `network.appliance_ip` as a virtual address (keepalived).
    #[serde(default)]
    pub ha: Option<Spanned<RawHa>>,
    /// The HTTP API and status page beyond the local socket.
    #[serde(default)]
    pub api: Option<Spanned<RawApi>>,
    /// What `render --format install-config` writes beyond what the rest of the file says.
    #[serde(default)]
    pub install_config: Option<Spanned<RawInstallConfig>>,
}

/// The `install_config:` section: the parts of openshift-install's `install-config.yaml` the
/// rest of the file does not already say (the cluster, the machine network and the replicas
/// come from `cluster`, `network` and `nodes`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInstallConfig {
    /// An owner-only file with the pull secret (JSON, `{"auths": ...}`).
    pub pull_secret_file: Text,
    /// A file with the SSH public key(s) for the `core` user.
    #[serde(default)]
    pub ssh_key_file: Option<Text>,
    /// The pod networks; the installer's documented defaults when absent.
    #[serde(default)]
    pub cluster_network: Option<Spanned<Vec<RawClusterNetwork>>>,
    /// The service networks, one per address family.
    #[serde(default)]
    pub service_network: Option<Spanned<Vec<Text>>>,
    /// The cluster-wide proxy.
    #[serde(default)]
    pub proxy: Option<Spanned<RawProxy>>,
    /// A PEM file of CA certificates the nodes trust (a mirror registry's, a proxy's).
    #[serde(default)]
    pub additional_trust_bundle_file: Option<Text>,
    /// `Proxyonly` or `Always`, as the installer spells them.
    #[serde(default)]
    pub additional_trust_bundle_policy: Option<Text>,
    /// Mirrors of the release images.
    #[serde(default)]
    pub image_digest_sources: Vec<Spanned<RawImageDigestSource>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClusterNetwork {
    pub cidr: Text,
    /// The prefix length of each node's share (23 for IPv4, 64 for IPv6 when absent).
    #[serde(default)]
    pub host_prefix: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProxy {
    #[serde(default)]
    pub http_proxy: Option<Text>,
    #[serde(default)]
    pub https_proxy: Option<Text>,
    /// Domains, addresses and CIDRs reached directly (joined with commas in the output).
    #[serde(default)]
    pub no_proxy: Vec<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawImageDigestSource {
    /// The repository image references name, e.g. `quay.io/openshift/okd`.
    pub source: Text,
    /// Repositories that hold the same images.
    pub mirrors: Spanned<Vec<Text>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApi {
    /// `address:port` to serve the API on, with TLS and a bearer token.
    pub listen: Text,
    pub cert_file: Text,
    pub key_file: Text,
    /// An owner-only file with the bearer token.
    pub token_file: Text,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHa {
    /// The two services hosts' own addresses on the cluster network; the first is preferred.
    pub hosts: Spanned<Vec<Text>>,
    /// The VRRP virtual router ID (1-255), unique on the segment.
    #[serde(default)]
    pub router_id: Option<Spanned<u32>>,
    /// An owner-only file with the pair's shared secret (VRRP authentication).
    pub secret_file: Text,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOrchestration {
    /// The admin kubeconfig `openshift-install` wrote (default `<ignition_dir>/auth/kubeconfig`).
    #[serde(default)]
    pub kubeconfig: Option<Text>,
    /// The API server to ask (default: the appliance's own API frontend).
    #[serde(default)]
    pub api_url: Option<Text>,
    /// `destroy`, `poweroff` or `keep`.
    #[serde(default)]
    pub bootstrap_after_complete: Option<Text>,
    /// How often the cluster is asked (bootstrap status, CSRs, nodes, operators).
    #[serde(default)]
    pub poll: Option<Text>,
    /// How long every ClusterOperator must stay settled before the install counts as complete.
    #[serde(default)]
    pub settle: Option<Text>,
    /// How long `up` waits for bootstrap complete before it reports the install failed.
    #[serde(default)]
    pub bootstrap_timeout: Option<Text>,
    /// How long `up` waits, once bootstrap is over, for the cluster to be installed.
    #[serde(default)]
    pub install_timeout: Option<Text>,
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
    /// What the control provider gives this node's machine; role minimums when absent.
    #[serde(default)]
    pub machine: Option<Spanned<RawMachine>>,
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
    /// The openshift-install `ignition create` runs: a path, or `{ release: VERSION }`.
    #[serde(default)]
    pub openshift_install: Option<Spanned<RawInstaller>>,
    /// Custom manifests and MachineConfigs `ignition create` adds to the installer's.
    #[serde(default)]
    pub manifests_dir: Option<Text>,
}

/// `install.openshift_install`: a path to the binary, or the release `installer fetch` gets.
#[derive(Debug)]
pub enum RawInstaller {
    Path(String),
    Release(RawRelease),
}

#[derive(Debug)]
pub struct RawRelease {
    /// The OKD release, as its tag on the release page (`4.19.0-okd-scos.1`).
    pub release: String,
    /// Where releases are published, one directory per release (default: OKD's GitHub
    /// releases).
    pub mirror: Option<String>,
}

/// A string, or a map of `release` (a tag, a string: YAML reads `4.10` as the number 4.1, so a
/// number is refused with the quotes to add) and `mirror`; anything else says what it takes.
impl<'de> Deserialize<'de> for RawInstaller {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        const WANTED: &str = "a path, or { release: TAG, mirror: URL }";
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RawInstaller;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(WANTED)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawInstaller, E> {
                Ok(RawInstaller::Path(v.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RawInstaller, A::Error> {
                let (mut release, mut mirror) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "release" => release = Some(map.next_value::<Scalar>()?.0),
                        "mirror" => mirror = Some(map.next_value::<String>()?),
                        other => {
                            return Err(serde::de::Error::custom(format!(
                                "unknown key `{other}` in openshift_install: {WANTED}"
                            )));
                        }
                    }
                }
                let release = release.ok_or_else(|| {
                    serde::de::Error::custom(format!("openshift_install has no release: {WANTED}"))
                })?;
                Ok(RawInstaller::Release(RawRelease { release, mirror }))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A release tag: a string; a number is refused (`4.10` would be 4.1).
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a release tag")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_owned()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Scalar, E> {
                Err(E::custom(format!(
                    "release {v} is a number: quote the tag, `release: \"{v}...\"`"
                )))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Scalar, E> {
                Err(E::custom(format!(
                    "release {v} is a number (YAML reads 4.10 as 4.1): quote the tag, `release: \"4.19.0-okd-scos.1\"`"
                )))
            }
        }
        d.deserialize_any(Visit)
    }
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
    /// A single-node cluster: `direct` (api, api-int and *.apps name the node) or `proxied`
    /// (they name the appliance, which balances to the node).
    #[serde(default)]
    pub single_node: Option<Text>,
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

/// The `control:` section: which provider creates and powers the machines, and how to reach it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawControl {
    /// `none`, `proxmox`, `libvirt` or `redfish`.
    pub provider: Text,
    /// The install path of every node that does not choose its own: `pxe` or `iso`.
    #[serde(default)]
    pub install: Option<Text>,
    #[serde(default)]
    pub proxmox: Option<Spanned<RawProxmox>>,
    /// Defaults for every node's BMC (each node names its own `machine.bmc.url`).
    #[serde(default)]
    pub redfish: Option<Spanned<RawBmc>>,
    #[serde(default)]
    pub libvirt: Option<Spanned<RawLibvirt>>,
    #[serde(default)]
    pub timeouts: RawControlTimeouts,
}

/// A libvirt connection, driven through `virsh`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLibvirt {
    /// `qemu:///system` (default) or a remote URI such as `qemu+ssh://root@kvm1/system`.
    #[serde(default)]
    pub uri: Option<Text>,
    /// A libvirt network the NICs join (one of `network` and `bridge`).
    #[serde(default)]
    pub network: Option<Text>,
    /// A host bridge the NICs join.
    #[serde(default)]
    pub bridge: Option<Text>,
    /// The storage pool of the disks (`default` when absent).
    #[serde(default)]
    pub pool: Option<Text>,
    /// `bios` (default) or `uefi`.
    #[serde(default)]
    pub firmware: Option<Text>,
    /// `kvm` (default) or `qemu` (software emulation).
    #[serde(default)]
    pub domain_type: Option<Text>,
}

/// A Redfish BMC: per node in `machine.bmc`, defaults in `control.redfish`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBmc {
    /// `https://host[:port]`, or the system's own URL (`.../redfish/v1/Systems/<id>`).
    #[serde(default)]
    pub url: Option<Text>,
    #[serde(default)]
    pub username: Option<Text>,
    #[serde(default)]
    pub password_file: Option<Text>,
    #[serde(default)]
    pub password_env: Option<Text>,
    #[serde(default)]
    pub ca_file: Option<Text>,
    #[serde(default)]
    pub fingerprint: Option<Text>,
    /// Accept any certificate from this BMC; only when set to true explicitly.
    #[serde(default)]
    pub insecure: Option<Spanned<bool>>,
}

/// A Proxmox VE node reached over its REST API with an API token.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProxmox {
    /// `https://host[:port]`; the API lives under `/api2/json`.
    pub url: Text,
    /// The Proxmox node (host name in the cluster) the VMs are created on.
    pub node: Text,
    /// `USER@REALM!TOKENID`; not a secret.
    pub token_id: Text,
    /// A file holding the token's secret (owner-only).
    #[serde(default)]
    pub token_secret_file: Option<Text>,
    /// An environment variable holding the token's secret.
    #[serde(default)]
    pub token_secret_env: Option<Text>,
    /// PEM CA the API's certificate must chain to.
    #[serde(default)]
    pub ca_file: Option<Text>,
    /// SHA-256 fingerprint of the API's certificate, as `pvenode cert info` prints it.
    #[serde(default)]
    pub fingerprint: Option<Text>,
    /// Storage for the VM disks.
    pub storage: Text,
    /// Storage (with content type `iso`) the node ISOs are downloaded into.
    #[serde(default)]
    pub iso_storage: Option<Text>,
    /// The bridge of the cluster network.
    pub bridge: Text,
    #[serde(default)]
    pub vlan: Option<Spanned<u32>>,
    /// A resource pool the VMs are put in.
    #[serde(default)]
    pub pool: Option<Text>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawControlTimeouts {
    /// One API request, from connecting to the last byte of the answer.
    #[serde(default)]
    pub request: Option<Text>,
    /// One provider task (create, download, start, destroy) until it ends.
    #[serde(default)]
    pub task: Option<Text>,
    /// A graceful shutdown before the machine is forced off.
    #[serde(default)]
    pub shutdown: Option<Text>,
}

/// A node's machine: what the provider creates for it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMachine {
    #[serde(default)]
    pub cores: Option<Spanned<u32>>,
    /// A size with a unit: `16GiB`, `16384MiB`.
    #[serde(default)]
    pub memory: Option<Text>,
    /// A size with a unit: `120GiB`.
    #[serde(default)]
    pub disk: Option<Text>,
    /// `pxe` or `iso`; the `control.install` default when absent.
    #[serde(default)]
    pub install: Option<Text>,
    /// The Proxmox VM ID; the next free one when absent.
    #[serde(default)]
    pub vmid: Option<Spanned<u32>>,
    /// The node's BMC (provider redfish).
    #[serde(default)]
    pub bmc: Option<Spanned<RawBmc>>,
}

/// `shared_frontend:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShared {
    pub address: Text,
    #[serde(default)]
    pub address_v6: Option<Text>,
    #[serde(default)]
    pub default_cluster: Option<Text>,
}
