//! Turns the raw YAML tree into a [`Config`], reporting every problem at once.
//!
//! Architecture invariant: validation reads the file system only through [`InstallFiles`] (the
//! ignition files' presence and age) and writes nothing, so a bad config can never touch on-disk
//! state and tests can pin the clock.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde_saphyr::{Location, Spanned};

use super::diagnostic::Problems;
use super::model::*;
use super::raw::*;
use crate::records::{RecordData, is_domain_name, is_host_domain, is_host_label};

/// Ignition configs embed certificates that expire 24 hours after `openshift-install` wrote them.
pub const IGNITION_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Past this age an install still works but is running out of time.
pub const IGNITION_WARN_AGE: Duration = Duration::from_secs(12 * 3600);

const DEFAULT_STATE_DIR: &str = "/var/lib/okd-appliance";
const DEFAULT_INSTALL_DEV: &str = "/dev/sda";
/// Debian's `ipxe` package puts undionly.kpxe and ipxe.efi here.
const DEFAULT_IPXE_DIR: &str = "/usr/lib/ipxe";
const DEFAULT_TTL: u32 = 300;
/// Generous: a node or a resolver never gets near it; a reflection attack does.
const DEFAULT_RRL_RATE: u32 = 50;
const DEFAULT_RRL_SLIP: u32 = 2;
const DEFAULT_LEASE_TIME: Duration = Duration::from_secs(3600);
/// Ample for requests in flight to finish; the long-lived ones (API watches, up to an hour) are
/// cut sooner, which their clients handle by reconnecting, now to another backend.
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

/// Names the plan publishes itself; a node may not take one.
const RESERVED_NAMES: [&str; 4] = ["api", "api-int", "apps", "ns1"];
/// Kernel arguments the boot plan sets per node.
const MANAGED_KERNEL_ARGS: [&str; 3] = [
    "coreos.inst.ignition_url",
    "coreos.live.rootfs_url",
    "coreos.inst.install_dev",
];

/// What validation needs to know about the install files.
pub trait InstallFiles {
    /// How long ago `path` was last written.
    fn age(&self, path: &Path) -> io::Result<Duration>;
}

/// The real file system, read at one instant.
#[derive(Debug, Clone, Copy)]
pub struct RealFiles {
    pub now: SystemTime,
}

impl InstallFiles for RealFiles {
    fn age(&self, path: &Path) -> io::Result<Duration> {
        let modified = std::fs::metadata(path)?.modified()?;
        // A file from the future (clock skew) counts as brand new.
        Ok(self.now.duration_since(modified).unwrap_or_default())
    }
}

/// Every install file exists and was written a minute ago: for fixtures, fuzzing and unit tests,
/// which check the config, not a machine, and for `artifacts fetch|import`, which only need the
/// install paths and run before the ignition configs are created.
#[derive(Debug, Clone, Copy)]
pub struct AssumeFresh;

impl InstallFiles for AssumeFresh {
    fn age(&self, _: &Path) -> io::Result<Duration> {
        Ok(Duration::from_secs(60))
    }
}

/// Validates `raw`, read from a file in `config_dir`. Returns the config when `problems` holds
/// no error afterwards (warnings may remain).
pub fn validate(
    raw: &RawConfig,
    config_dir: &Path,
    files: &dyn InstallFiles,
    problems: &mut Problems,
) -> Option<Config> {
    let mut v = Validator { p: problems };
    let config = v.config(raw, config_dir, files);
    if config.is_none() && !v.p.has_errors() {
        // Every path that gives up reports why; this catches one that forgot to.
        v.p.error(
            "config::internal",
            raw.version.referenced,
            "the config was refused without a reason: this is a bug in okd-appliance",
            "while reading this file",
        );
    }
    if v.p.has_errors() { None } else { config }
}

/// What node addresses are checked against. Parts that failed validation are absent, so a
/// mistake in the network section does not hide the nodes' own mistakes.
#[derive(Debug)]
struct AddressSpace {
    subnet: Option<Ipv4Net>,
    gateway: Option<Ipv4Addr>,
    appliance: Option<Ipv4Addr>,
    pool: Option<Pool>,
    v6: V6Space,
}

#[derive(Debug, Clone)]
enum V6Space {
    Absent,
    /// Configured but invalid (its error is reported).
    Invalid,
    Valid(Ipv6Network),
}

struct Validator<'a> {
    p: &'a mut Problems,
}

impl Validator<'_> {
    fn config(&mut self, raw: &RawConfig, dir: &Path, files: &dyn InstallFiles) -> Option<Config> {
        if raw.version.value != 1 {
            self.p
                .error(
                    "config::version",
                    raw.version.referenced,
                    format!("unsupported config version {}", raw.version.value),
                    "this version",
                )
                .hint("this okd-appliance reads `version: 1`");
        }
        let legacy_etcd = raw.dns.legacy_etcd.as_ref().is_some_and(|b| b.value);
        let cluster = self.cluster(&raw.cluster, legacy_etcd);
        let (network, space) = self.network(&raw.network);
        let nodes = self.nodes(&raw.nodes, &space, legacy_etcd);
        if let Some(c) = &cluster {
            self.node_name_lengths(&raw.nodes, &c.domain());
        }
        let listen = self.listen(&raw.listen, &raw.network, network.as_ref());
        // The roles as written, so a node with another mistake still asks for its ignition file.
        let roles: Vec<Role> = raw
            .nodes
            .value
            .iter()
            .filter_map(|n| parse_role(&n.role.value))
            .collect();
        let install = self.install(
            &raw.install,
            dir,
            network.as_ref(),
            listen.as_ref(),
            &roles,
            files,
        );
        let dns = match (&cluster, &network) {
            (Some(c), Some(n)) => self.dns(&raw.dns, c, n, &nodes),
            _ => None,
        };
        if let Some(l) = &listen {
            self.forwarding_loop(&raw.network, network.as_ref(), l);
        }
        let lb = self.lb(&raw.lb, dir);
        let run_as = raw.run_as.as_ref().and_then(|r| self.run_as(r));
        let state_dir = match &raw.state_dir {
            None => PathBuf::from(DEFAULT_STATE_DIR),
            Some(s) if s.value.trim().is_empty() => {
                self.p.error(
                    "config::state-dir",
                    s.referenced,
                    "state_dir is empty",
                    "here",
                );
                PathBuf::new()
            }
            Some(s) => dir.join(&s.value),
        };
        Some(Config {
            cluster: cluster?,
            network: network?,
            nodes,
            install: install?,
            dns: dns?,
            lb: lb?,
            listen: listen?,
            run_as: if raw.run_as.is_some() {
                Some(run_as?)
            } else {
                None
            },
            state_dir,
        })
    }

    fn cluster(&mut self, raw: &RawCluster, legacy_etcd: bool) -> Option<Cluster> {
        let name = self.host_label(&raw.name, "cluster name");
        let base = raw
            .base_domain
            .value
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let base = if is_host_domain(&base) {
            Some(base)
        } else {
            self.p
                .error(
                    "config::domain",
                    raw.base_domain.referenced,
                    format!("base domain `{}` is not a domain name", raw.base_domain.value),
                    "not a domain name",
                )
                .hint("use labels of letters, digits and hyphens separated by dots, e.g. lab.example.com");
            None
        };
        let (name, base_domain) = (name?, base?);
        // The longest fixed name the plan derives; node names are checked with the nodes.
        let longest = if legacy_etcd {
            "_etcd-server-ssl._tcp."
        } else {
            "api-int."
        };
        if longest.len() + name.len() + 1 + base_domain.len() > 253 {
            self.p.error(
                "config::domain",
                raw.base_domain.referenced,
                format!(
                    "cluster domain too long: {longest}<name>.<base_domain> exceeds 253 characters"
                ),
                "too long",
            );
            return None;
        }
        Some(Cluster { name, base_domain })
    }

    /// Every node's name fits in a domain name once the cluster domain is appended.
    fn node_name_lengths(&mut self, raw: &Spanned<Vec<RawNode>>, domain: &str) {
        for n in &raw.value {
            if is_host_label(&n.name.value) && n.name.value.len() + 1 + domain.len() > 253 {
                self.p
                    .error(
                        "config::name",
                        n.name.referenced,
                        format!("`{}.{domain}` is longer than 253 characters", n.name.value),
                        "too long with the cluster domain",
                    )
                    .hint("shorten the node name or the cluster domain");
            }
        }
    }

    fn host_label(&mut self, raw: &Text, what: &str) -> Option<String> {
        let s = &raw.value;
        if is_host_label(s) {
            return Some(s.clone());
        }
        let problem = self.p.error(
            "config::name",
            raw.referenced,
            format!("{what} `{s}` is not a DNS label"),
            "not a DNS label",
        );
        if is_host_label(&s.to_ascii_lowercase()) {
            problem.hint(format!(
                "host names must be lowercase (Kubernetes node names are): `{}`",
                s.to_ascii_lowercase()
            ));
        } else {
            problem.hint("use 1 to 63 lowercase letters, digits and hyphens, not starting or ending with a hyphen");
        }
        None
    }

    fn network(&mut self, raw: &RawNetwork) -> (Option<Network>, AddressSpace) {
        let subnet = self.ipv4_subnet(&raw.subnet);
        let host = |v: &mut Self, raw: &Text, what: &str| match subnet {
            Some(net) => v.host_in_v4_subnet(raw, net, what),
            // The subnet is broken: check the address's syntax only.
            None => v.ipv4(raw, what),
        };
        let gateway = raw.gateway.as_ref().and_then(|g| host(self, g, "gateway"));
        let appliance = host(self, &raw.appliance_ip, "appliance address");
        let v6 = match &raw.ipv6 {
            None => V6Space::Absent,
            Some(r) => self
                .ipv6_network(r)
                .map_or(V6Space::Invalid, V6Space::Valid),
        };
        let upstream_dns = raw
            .upstream_dns
            .iter()
            .filter_map(|u| self.upstream(u))
            .collect::<Vec<_>>();
        let ntp = raw
            .ntp
            .iter()
            .filter_map(|n| self.ipv4(n, "NTP server"))
            .collect::<Vec<_>>();
        let mtu = raw.mtu.as_ref().and_then(|m| {
            if (576..=9216).contains(&m.value) {
                u16::try_from(m.value).ok()
            } else {
                self.p
                    .error(
                        "config::mtu",
                        m.referenced,
                        format!("MTU {} is out of range", m.value),
                        "out of range",
                    )
                    .hint("use a value from 576 to 9216 (1500 for plain Ethernet)");
                None
            }
        });
        let lease_time = match &raw.lease_time {
            None => Some(DEFAULT_LEASE_TIME),
            Some(t) => self.duration(
                t,
                "lease time",
                Duration::from_secs(60),
                Duration::from_secs(365 * 86_400),
            ),
        };
        let domain_search = raw
            .domain_search
            .iter()
            .filter_map(|d| {
                let name = d.value.trim_end_matches('.').to_ascii_lowercase();
                if is_host_domain(&name) {
                    Some(name)
                } else {
                    self.p.error(
                        "config::domain",
                        d.referenced,
                        format!("search domain `{}` is not a domain name", d.value),
                        "not a domain name",
                    );
                    None
                }
            })
            .collect();
        let pool = match (subnet, &raw.dhcp_pool) {
            (Some(subnet), Some(p)) => self.pool(p, subnet, appliance, gateway),
            _ => None,
        };
        let space = AddressSpace {
            subnet,
            gateway,
            appliance,
            pool,
            v6: v6.clone(),
        };
        // Parts that failed are left out; their errors already fail the load.
        let network = match (subnet, appliance) {
            (Some(subnet), Some(appliance)) => Some(Network {
                interface: raw.interface.as_ref().map(|i| i.value.clone()),
                v4: Ipv4Network {
                    subnet,
                    gateway,
                    appliance,
                },
                v6: match v6 {
                    V6Space::Valid(v6) => Some(v6),
                    V6Space::Absent | V6Space::Invalid => None,
                },
                upstream_dns,
                ntp,
                mtu,
                dhcp_pool: pool,
                lease_time: lease_time.unwrap_or(DEFAULT_LEASE_TIME),
                domain_search,
            }),
            _ => None,
        };
        (network, space)
    }

    fn ipv4_subnet(&mut self, raw: &Text) -> Option<Ipv4Net> {
        let net: Ipv4Net = match raw.value.parse() {
            Ok(net) => net,
            Err(_) => {
                let problem = self.p.error(
                    "config::subnet",
                    raw.referenced,
                    format!("`{}` is not an IPv4 subnet", raw.value),
                    "expected an IPv4 network in CIDR form",
                );
                if raw.value.parse::<Ipv6Net>().is_ok() {
                    problem.hint("IPv6 goes under network.ipv6.subnet");
                } else {
                    problem.hint("write the network address and prefix length, e.g. 10.0.0.0/24");
                }
                return None;
            }
        };
        if net.addr() != net.network() {
            self.p
                .error(
                    "config::subnet",
                    raw.referenced,
                    format!("subnet `{net}` has host bits set"),
                    "host bits set",
                )
                .hint(format!("did you mean {}?", net.trunc()));
            return None;
        }
        let first = net.network();
        if first.is_multicast()
            || first.is_loopback()
            || first.is_unspecified()
            || first.octets()[0] >= 240
        {
            self.p
                .error(
                    "config::subnet",
                    raw.referenced,
                    format!("{net} is not a unicast network"),
                    "multicast, loopback, reserved or 0.0.0.0/8",
                )
                .hint("the cluster network is a private unicast range such as 10.0.0.0/24 or 192.168.50.0/24");
            return None;
        }
        if !(8..=30).contains(&net.prefix_len()) {
            self.p
                .error(
                    "config::subnet",
                    raw.referenced,
                    format!("a /{} subnet is not supported", net.prefix_len()),
                    "prefix length out of range",
                )
                .hint("use a prefix length from /8 to /30");
            return None;
        }
        Some(net)
    }

    fn ipv4(&mut self, raw: &Text, what: &str) -> Option<Ipv4Addr> {
        match raw.value.parse::<Ipv4Addr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                self.p.error(
                    "config::address",
                    raw.referenced,
                    format!("{what} `{}` is not an IPv4 address", raw.value),
                    "expected an IPv4 address",
                );
                None
            }
        }
    }

    fn ipv6(&mut self, raw: &Text, what: &str) -> Option<Ipv6Addr> {
        match raw.value.parse::<Ipv6Addr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                self.p.error(
                    "config::address",
                    raw.referenced,
                    format!("{what} `{}` is not an IPv6 address", raw.value),
                    "expected an IPv6 address",
                );
                None
            }
        }
    }

    /// An address a host can have in `subnet`: inside it, neither its network nor broadcast.
    fn host_in_v4_subnet(&mut self, raw: &Text, subnet: Ipv4Net, what: &str) -> Option<Ipv4Addr> {
        let ip = self.ipv4(raw, what)?;
        if !subnet.contains(&ip) {
            self.p
                .error(
                    "config::outside-subnet",
                    raw.referenced,
                    format!("{what} {ip} is outside the subnet {subnet}"),
                    "outside the subnet",
                )
                .hint(format!(
                    "use an address from {} to {}",
                    first_host(subnet),
                    last_host(subnet)
                ));
            return None;
        }
        if ip == subnet.network() || ip == subnet.broadcast() {
            let which = if ip == subnet.network() {
                "network"
            } else {
                "broadcast"
            };
            self.p
                .error(
                    "config::reserved-address",
                    raw.referenced,
                    format!("{what} {ip} is the {which} address of {subnet}"),
                    format!("{which} address"),
                )
                .hint(format!(
                    "use an address from {} to {}",
                    first_host(subnet),
                    last_host(subnet)
                ));
            return None;
        }
        Some(ip)
    }

    fn ipv6_network(&mut self, raw: &RawIpv6) -> Option<Ipv6Network> {
        let subnet: Ipv6Net = match raw.subnet.value.parse() {
            Ok(net) => net,
            Err(_) => {
                self.p
                    .error(
                        "config::subnet",
                        raw.subnet.referenced,
                        format!("`{}` is not an IPv6 subnet", raw.subnet.value),
                        "expected an IPv6 network in CIDR form",
                    )
                    .hint("write the network address and prefix length, e.g. fd00:10::/64");
                return None;
            }
        };
        if subnet.addr() != subnet.network() {
            self.p
                .error(
                    "config::subnet",
                    raw.subnet.referenced,
                    format!("subnet `{subnet}` has host bits set"),
                    "host bits set",
                )
                .hint(format!("did you mean {}?", subnet.trunc()));
            return None;
        }
        let first = subnet.network();
        if first.is_multicast()
            || first.is_loopback()
            || first.is_unspecified()
            || first.is_unicast_link_local()
            || first.to_ipv4_mapped().is_some()
        {
            self.p
                .error(
                    "config::subnet",
                    raw.subnet.referenced,
                    format!("{subnet} is not a routable unicast IPv6 network"),
                    "multicast, link-local, loopback or mapped IPv4",
                )
                .hint("use a ULA (fd00::/8) or global prefix, usually a /64");
            return None;
        }
        if !(16..=124).contains(&subnet.prefix_len()) {
            self.p
                .error(
                    "config::subnet",
                    raw.subnet.referenced,
                    format!("a /{} IPv6 subnet is not supported", subnet.prefix_len()),
                    "prefix length out of range",
                )
                .hint("use a prefix length from /16 to /124 (usually /64)");
            return None;
        }
        let host = |v: &mut Self, raw: &Text, what: &str| -> Option<Ipv6Addr> {
            let ip = v.ipv6(raw, what)?;
            if !subnet.contains(&ip) || ip == subnet.network() {
                v.p.error(
                    "config::outside-subnet",
                    raw.referenced,
                    format!("{what} {ip} is not a host address of {subnet}"),
                    "outside the subnet",
                );
                return None;
            }
            Some(ip)
        };
        let gateway = match &raw.gateway {
            None => None,
            Some(g) => Some(host(self, g, "IPv6 gateway")?),
        };
        let appliance = host(self, &raw.appliance_ip, "IPv6 appliance address")?;
        Some(Ipv6Network {
            subnet,
            gateway,
            appliance,
        })
    }

    fn upstream(&mut self, raw: &Text) -> Option<SocketAddr> {
        match parse_upstream(&raw.value) {
            Some(addr) => Some(addr),
            None => {
                self.p
                    .error(
                        "config::address",
                        raw.referenced,
                        format!("upstream resolver `{}` is not an IP address", raw.value),
                        "expected an address",
                    )
                    .hint("write an address, optionally with a port: 192.0.2.53, 192.0.2.53:5353 or [2001:db8::53]:53");
                None
            }
        }
    }

    fn duration(
        &mut self,
        raw: &Text,
        what: &str,
        min: Duration,
        max: Duration,
    ) -> Option<Duration> {
        match humantime::parse_duration(&raw.value) {
            Ok(d) if d >= min && d <= max => Some(d),
            Ok(_) => {
                self.p.error(
                    "config::duration",
                    raw.referenced,
                    format!(
                        "{what} `{}` is out of range ({} to {})",
                        raw.value,
                        humantime::format_duration(min),
                        humantime::format_duration(max)
                    ),
                    "out of range",
                );
                None
            }
            Err(e) => {
                self.p
                    .error(
                        "config::duration",
                        raw.referenced,
                        format!("{what} `{}` is not a duration: {e}", raw.value),
                        "not a duration",
                    )
                    .hint("write a number with a unit, e.g. 500ms, 2s, 12h");
                None
            }
        }
    }

    fn pool(
        &mut self,
        raw: &RawPool,
        subnet: Ipv4Net,
        appliance: Option<Ipv4Addr>,
        gateway: Option<Ipv4Addr>,
    ) -> Option<Pool> {
        let start = self.host_in_v4_subnet(&raw.start, subnet, "pool start");
        let end = self.host_in_v4_subnet(&raw.end, subnet, "pool end");
        let (start, end) = (start?, end?);
        if start > end {
            self.p
                .error(
                    "config::pool",
                    raw.end.referenced,
                    format!("pool ends ({end}) before it starts ({start})"),
                    "before the start",
                )
                .also(raw.start.referenced, "start");
            return None;
        }
        let pool = Pool { start, end };
        for (ip, what) in [(appliance, "appliance address"), (gateway, "gateway")] {
            if let Some(ip) = ip.filter(|ip| pool.contains(*ip)) {
                self.p
                    .error(
                        "config::pool",
                        raw.start.referenced,
                        format!("dynamic pool {start}-{end} contains the {what} {ip}"),
                        "pool starts here",
                    )
                    .also(raw.end.referenced, "and ends here")
                    .hint(format!("keep the pool clear of the {what}"));
                return None;
            }
        }
        Some(pool)
    }

    fn nodes(
        &mut self,
        raw: &Spanned<Vec<RawNode>>,
        space: &AddressSpace,
        legacy_etcd: bool,
    ) -> Vec<Node> {
        let mut names: HashMap<String, Location> = HashMap::new();
        let mut macs: HashMap<MacAddr, Location> = HashMap::new();
        let mut ipv4s: HashMap<Ipv4Addr, Location> = HashMap::new();
        let mut ipv6s: HashMap<Ipv6Addr, Location> = HashMap::new();
        let mut first_bootstrap: Option<Location> = None;
        let mut masters: Vec<Location> = Vec::new();
        let mut nodes = Vec::new();

        for n in &raw.value {
            let name = self.node_name(&n.name, legacy_etcd);
            if let Some(name) = &name
                && let Some(first) = first_use(&mut names, name.clone(), n.name.referenced)
            {
                self.p
                    .error(
                        "config::duplicate-name",
                        n.name.referenced,
                        format!("node name `{name}` is used twice"),
                        "second use",
                    )
                    .also(first, "first use");
            }
            let role = self.role(&n.role);
            match role {
                Some(Role::Bootstrap) => match first_bootstrap {
                    None => first_bootstrap = Some(n.role.referenced),
                    Some(first) => {
                        self.p
                            .error(
                                "config::bootstrap",
                                n.role.referenced,
                                "more than one bootstrap node",
                                "second bootstrap node",
                            )
                            .also(first, "first bootstrap node")
                            .hint("a cluster bootstraps from exactly one node; make this one a master or worker");
                    }
                },
                Some(Role::Master) => masters.push(n.role.referenced),
                _ => {}
            }
            let mac = self.mac(&n.mac);
            if let Some(mac) = mac
                && let Some(first) = first_use(&mut macs, mac, n.mac.referenced)
            {
                self.p
                    .error(
                        "config::duplicate-mac",
                        n.mac.referenced,
                        format!("MAC address {mac} is used twice"),
                        "second use",
                    )
                    .also(first, "first use")
                    .hint("every node needs its own network card address for its DHCP reservation");
            }
            let ipv4 = self.node_ipv4(&n.ip, space);
            if let Some(ip) = ipv4
                && let Some(first) = first_use(&mut ipv4s, ip, n.ip.referenced)
            {
                self.p
                    .error(
                        "config::duplicate-ip",
                        n.ip.referenced,
                        format!("IP address {ip} is used twice"),
                        "second use",
                    )
                    .also(first, "first use");
            }
            let ipv6 = n.ipv6.as_ref().map(|raw| {
                let ip = self.node_ipv6(raw, space);
                if let Some(ip) = ip
                    && let Some(first) = first_use(&mut ipv6s, ip, raw.referenced)
                {
                    self.p
                        .error(
                            "config::duplicate-ip",
                            raw.referenced,
                            format!("IPv6 address {ip} is used twice"),
                            "second use",
                        )
                        .also(first, "first use");
                }
                ip
            });
            let install_dev = n.install_dev.as_ref().map(|d| self.install_dev(d));
            let kernel_args = self.kernel_args(&n.kernel_args);
            if let (
                Some(name),
                Some(role),
                Some(mac),
                Some(ipv4),
                Some(ipv6),
                Some(install_dev),
                Some(kernel_args),
            ) = (
                name,
                role,
                mac,
                ipv4,
                ipv6.map_or(Some(None), |ip| ip.map(Some)),
                install_dev.map_or(Some(None), |d| d.map(Some)),
                kernel_args,
            ) {
                nodes.push(Node {
                    name,
                    role,
                    mac,
                    ipv4,
                    ipv6,
                    install_dev,
                    kernel_args,
                });
            }
        }

        match masters.len() {
            0 => {
                self.p
                    .error(
                        "config::no-master",
                        raw.referenced,
                        "the cluster has no master node",
                        "no node here has role master",
                    )
                    .hint("add at least one node with `role: master` (three for a highly available control plane)");
            }
            2 => {
                self.p
                    .warning(
                        "config::two-masters",
                        masters[1],
                        "two masters give etcd no fault tolerance",
                        "second master",
                    )
                    .also(masters[0], "first master")
                    .hint("etcd needs a majority: with two members, losing either stops the cluster; use one or three");
            }
            _ => {}
        }
        nodes
    }

    fn node_name(&mut self, raw: &Text, legacy_etcd: bool) -> Option<String> {
        let name = self.host_label(raw, "node name")?;
        let etcd = legacy_etcd
            && name
                .strip_prefix("etcd-")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if RESERVED_NAMES.contains(&name.as_str()) || etcd {
            self.p
                .error(
                    "config::reserved-name",
                    raw.referenced,
                    format!("node name `{name}` is a name okd-appliance publishes itself"),
                    "reserved name",
                )
                .hint("api, api-int, apps, ns1 (and etcd-N with legacy_etcd) are taken; choose another name");
            return None;
        }
        Some(name)
    }

    fn role(&mut self, raw: &Text) -> Option<Role> {
        match parse_role(&raw.value) {
            Some(role) => Some(role),
            None => {
                let other = &raw.value;
                self.p
                    .error(
                        "config::role",
                        raw.referenced,
                        format!("unknown role `{other}`"),
                        "unknown role",
                    )
                    .hint("a node is a bootstrap, master or worker");
                None
            }
        }
    }

    fn mac(&mut self, raw: &Text) -> Option<MacAddr> {
        let mac = match raw.value.parse::<MacAddr>() {
            Ok(mac) => mac,
            Err(e) => {
                self.p
                    .error(
                        "config::mac",
                        raw.referenced,
                        format!("`{}` is {e}", raw.value),
                        "not a MAC address",
                    )
                    .hint("write it as 52:54:00:00:00:02 (quote it in YAML)");
                return None;
            }
        };
        if mac.is_group() || mac.is_zero() {
            self.p
                .error(
                    "config::mac",
                    raw.referenced,
                    format!("{mac} is not a unicast MAC address"),
                    "multicast, broadcast or zero",
                )
                .hint("a network card's address has the lowest bit of its first octet clear");
            return None;
        }
        Some(mac)
    }

    fn node_ipv4(&mut self, raw: &Text, space: &AddressSpace) -> Option<Ipv4Addr> {
        let Some(subnet) = space.subnet else {
            // The subnet itself is broken: only the address's syntax can be checked.
            return self.ipv4(raw, "node address");
        };
        let ip = self.host_in_v4_subnet(raw, subnet, "node address")?;
        let taken = if Some(ip) == space.appliance {
            Some("the appliance address")
        } else if Some(ip) == space.gateway {
            Some("the gateway")
        } else {
            None
        };
        if let Some(what) = taken {
            self.p.error(
                "config::reserved-address",
                raw.referenced,
                format!("node address {ip} is {what}"),
                what,
            );
            return None;
        }
        if let Some(pool) = space.pool.filter(|p| p.contains(ip)) {
            self.p
                .error(
                    "config::pool",
                    raw.referenced,
                    format!(
                        "node address {ip} lies inside the dynamic pool {}-{}",
                        pool.start, pool.end
                    ),
                    "inside the pool",
                )
                .hint("move the reservation out of network.dhcp_pool, or shrink the pool");
            return None;
        }
        Some(ip)
    }

    fn node_ipv6(&mut self, raw: &Text, space: &AddressSpace) -> Option<Ipv6Addr> {
        let ip = self.ipv6(raw, "node IPv6 address")?;
        let v6 = match &space.v6 {
            V6Space::Valid(v6) => v6,
            // network.ipv6 has its own error; one per node would only repeat it.
            V6Space::Invalid => return Some(ip),
            V6Space::Absent => {
                self.p
                    .error(
                        "config::no-ipv6",
                        raw.referenced,
                        "node has an IPv6 address but the network has no IPv6 subnet",
                        "IPv6 address",
                    )
                    .hint("add network.ipv6 with its subnet and the appliance's IPv6 address");
                return None;
            }
        };
        if !v6.subnet.contains(&ip) || ip == v6.subnet.network() {
            self.p.error(
                "config::outside-subnet",
                raw.referenced,
                format!("node IPv6 address {ip} is outside the subnet {}", v6.subnet),
                "outside the subnet",
            );
            return None;
        }
        if ip == v6.appliance || Some(ip) == v6.gateway {
            self.p.error(
                "config::reserved-address",
                raw.referenced,
                format!("node IPv6 address {ip} belongs to the appliance or the gateway"),
                "taken",
            );
            return None;
        }
        Some(ip)
    }

    fn install_dev(&mut self, raw: &Text) -> Option<String> {
        let dev = &raw.value;
        if dev.starts_with("/dev/") && dev.len() > 5 && !dev.contains(char::is_whitespace) {
            return Some(dev.clone());
        }
        self.p
            .error(
                "config::install-dev",
                raw.referenced,
                format!("install disk `{dev}` is not a device path"),
                "expected /dev/...",
            )
            .hint(
                "name the disk CoreOS installs to, e.g. /dev/sda, /dev/vda or /dev/disk/by-id/...",
            );
        None
    }

    fn kernel_args(&mut self, raw: &[Text]) -> Option<Vec<String>> {
        let mut ok = true;
        for arg in raw {
            let key = arg.value.split('=').next().unwrap_or_default();
            if arg.value.is_empty()
                || arg
                    .value
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control())
            {
                self.p
                    .error(
                        "config::kernel-arg",
                        arg.referenced,
                        format!(
                            "kernel argument `{}` is empty or contains white space",
                            arg.value.escape_debug()
                        ),
                        "one argument expected",
                    )
                    .hint("give each argument as its own list item");
                ok = false;
            } else if MANAGED_KERNEL_ARGS.contains(&key) {
                self.p
                    .error(
                        "config::kernel-arg",
                        arg.referenced,
                        format!("`{key}` is set by okd-appliance for every node"),
                        "managed argument",
                    )
                    .hint("set install_dev on the node or under install; ignition and rootfs URLs are derived");
                ok = false;
            }
        }
        ok.then(|| raw.iter().map(|a| a.value.clone()).collect())
    }

    fn listen(
        &mut self,
        raw: &RawListen,
        raw_net: &RawNetwork,
        net: Option<&Network>,
    ) -> Option<Listen> {
        let defaults = |port: u16| -> Option<Vec<SocketAddr>> {
            let net = net?;
            let mut v = vec![SocketAddr::new(IpAddr::V4(net.v4.appliance), port)];
            if let Some(v6) = &net.v6 {
                v.push(SocketAddr::new(IpAddr::V6(v6.appliance), port));
            }
            Some(v)
        };
        // DHCP answers broadcasts, so it must be bound to the cluster NIC: without
        // network.interface it stays off unless listen.dhcp says otherwise.
        let dhcp_default = Some(if raw_net.interface.is_some() {
            vec![SocketAddr::from(([0, 0, 0, 0], 67))]
        } else {
            Vec::new()
        });
        let list = |v: &mut Self,
                    raw: &Option<Vec<Text>>,
                    default: Option<Vec<SocketAddr>>,
                    service: &'static str| {
            let Some(items) = raw else {
                return (default, Vec::new());
            };
            let mut addrs = Vec::new();
            let mut spans = Vec::new();
            for t in items {
                match t.value.parse::<SocketAddr>() {
                    Ok(a) => {
                        addrs.push(a);
                        spans.push(t.referenced);
                    }
                    Err(_) => {
                        v.p.error(
                            "config::listen",
                            t.referenced,
                            format!(
                                "{service} listen address `{}` is not an address with a port",
                                t.value
                            ),
                            "expected address:port",
                        )
                        .hint("write e.g. 127.0.0.1:5353 or [::1]:5353; port 0 picks a free port");
                    }
                }
            }
            (Some(addrs), spans)
        };
        let dns = list(self, &raw.dns, defaults(53), "dns");
        let dhcp = list(self, &raw.dhcp, dhcp_default, "dhcp");
        // PXE firmware fetches iPXE from the server that answered DHCP: TFTP follows DHCP.
        let tftp_default = if raw_net.interface.is_some() {
            defaults(69).map(|v| v[..1].to_vec())
        } else {
            Some(Vec::new())
        };
        let tftp = list(self, &raw.tftp, tftp_default, "tftp");
        let http = list(self, &raw.http, defaults(8080), "http");
        let api = list(self, &raw.api, defaults(6443), "api");
        let machine_config = list(self, &raw.machine_config, defaults(22623), "machine_config");
        let ingress_https = list(self, &raw.ingress_https, defaults(443), "ingress_https");
        let ingress_http = list(self, &raw.ingress_http, defaults(80), "ingress_http");
        // Recorded errors fail the load; what parsed is still returned so the checks that use
        // it (forwarding loops) run too.
        // Two services on one port of one address (or of the wildcard address) can't both bind;
        // say which two before trying.
        let tcp = [
            ("dns", &dns),
            ("http", &http),
            ("api", &api),
            ("machine_config", &machine_config),
            ("ingress_https", &ingress_https),
            ("ingress_http", &ingress_http),
        ];
        let udp = [("dns", &dns), ("dhcp", &dhcp), ("tftp", &tftp)];
        for services in [&tcp[..], &udp[..]] {
            let mut seen: Vec<(&str, SocketAddr, Option<Location>)> = Vec::new();
            for (service, (addrs, spans)) in services {
                for (i, addr) in addrs.iter().flatten().enumerate() {
                    let at = spans.get(i).copied();
                    if addr.port() != 0 {
                        if let Some((other, other_addr, other_at)) =
                            seen.iter().find(|(_, o, _)| overlaps(*o, *addr)).copied()
                            && let Some(where_) = at.or(other_at)
                        {
                            self.p
                                .error(
                                    "config::listen",
                                    where_,
                                    format!("{service} on {addr} and {other} on {other_addr} can't both listen"),
                                    "port already taken",
                                )
                                .hint("give each service its own port (a wildcard address takes the port on every address)");
                        }
                        seen.push((service, *addr, at));
                    }
                }
            }
        }
        Some(Listen {
            dns: dns.0?,
            dhcp: dhcp.0?,
            tftp: tftp.0?,
            http: http.0?,
            api: api.0?,
            machine_config: machine_config.0?,
            ingress_https: ingress_https.0?,
            ingress_http: ingress_http.0?,
        })
    }

    fn forwarding_loop(&mut self, raw: &RawNetwork, net: Option<&Network>, listen: &Listen) {
        let mut own: Vec<IpAddr> = Vec::new();
        if let Some(net) = net {
            own.push(IpAddr::V4(net.v4.appliance));
            own.extend(net.v6.as_ref().map(|v6| IpAddr::V6(v6.appliance)));
        }
        for raw in &raw.upstream_dns {
            let Some(addr) = parse_upstream(&raw.value) else {
                continue;
            };
            let local = addr.ip().is_loopback() || own.contains(&addr.ip());
            let to_itself = listen.dns.iter().any(|l| {
                l.port() == addr.port()
                    && (l.ip() == addr.ip() || (l.ip().is_unspecified() && local))
            });
            if to_itself {
                self.p
                    .error(
                        "config::forwarding-loop",
                        raw.referenced,
                        format!("upstream resolver {addr} is the appliance's own DNS listener"),
                        "forwards to itself",
                    )
                    .hint("name the resolvers the appliance should forward other names to");
            }
        }
    }

    fn install(
        &mut self,
        raw: &Spanned<RawInstall>,
        dir: &Path,
        net: Option<&Network>,
        listen: Option<&Listen>,
        roles: &[Role],
        files: &dyn InstallFiles,
    ) -> Option<Install> {
        let r = &raw.value;
        let ignition_dir = dir.join(&r.ignition_dir.value);
        let artifacts_dir = dir.join(&r.artifacts_dir.value);
        self.ignition_files(&r.ignition_dir, &ignition_dir, roles, files);
        let install_dev = match &r.install_dev {
            None => Some(DEFAULT_INSTALL_DEV.to_owned()),
            Some(d) => self.install_dev(d),
        };
        let kernel_args = self.kernel_args(&r.kernel_args);
        let base_url = match (&r.base_url, net, listen) {
            (Some(u), _, _) => {
                let url = u.value.trim_end_matches('/');
                let rest = url
                    .strip_prefix("http://")
                    .or_else(|| url.strip_prefix("https://"));
                if rest.is_some_and(|h| !h.is_empty() && !h.contains(char::is_whitespace)) {
                    Some(url.to_owned())
                } else {
                    self.p
                        .error(
                            "config::base-url",
                            u.referenced,
                            format!("base URL `{}` is not an http:// or https:// URL", u.value),
                            "not a URL",
                        )
                        .hint("e.g. http://10.0.0.1:8080");
                    None
                }
            }
            (None, Some(net), Some(listen)) => Some(default_base_url(net, listen)),
            // Derived from parts that failed; their errors are reported.
            (None, _, _) => None,
        };
        let artifact = |v: &mut Self, raw: &Option<Text>, default: &str| -> Option<String> {
            let Some(t) = raw else {
                return Some(default.to_owned());
            };
            let name = &t.value;
            if name.is_empty() || name == "." || name == ".." || name.contains('/') {
                v.p.error(
                    "config::artifact",
                    t.referenced,
                    format!("artifact `{name}` is not a plain file name"),
                    "expected a file name inside artifacts_dir",
                );
                return None;
            }
            Some(name.clone())
        };
        let ipxe_dir = r
            .ipxe_dir
            .as_ref()
            .map_or_else(|| PathBuf::from(DEFAULT_IPXE_DIR), |d| dir.join(&d.value));
        let kernel = artifact(self, &r.artifacts.kernel, "kernel");
        let initramfs = artifact(self, &r.artifacts.initramfs, "initramfs.img");
        let rootfs = artifact(self, &r.artifacts.rootfs, "rootfs.img");
        let iso = artifact(self, &r.artifacts.iso, "live.iso");
        Some(Install {
            ignition_dir,
            artifacts_dir,
            install_dev: install_dev?,
            kernel_args: kernel_args?,
            base_url: base_url?,
            ipxe_dir,
            artifacts: Artifacts {
                kernel: kernel?,
                initramfs: initramfs?,
                rootfs: rootfs?,
                iso: iso?,
            },
        })
    }

    /// The role ignition files must exist. Only bootstrap.ign is checked for age, and only
    /// while a bootstrap node is listed: it carries the certificates that expire 24 hours after
    /// `openshift-install` wrote them. master.ign and worker.ign only point at the machine
    /// config server and stay valid (workers added months later still use worker.ign).
    fn ignition_files(&mut self, raw: &Text, dir: &Path, roles: &[Role], files: &dyn InstallFiles) {
        let create = format!(
            "run `openshift-install create ignition-configs --dir {}`",
            raw.value
        );
        if let Err(e) = files.age(dir) {
            self.p
                .error(
                    "config::ignition",
                    raw.referenced,
                    format!(
                        "ignition directory {} can't be read: {}",
                        dir.display(),
                        io_reason(&e)
                    ),
                    "ignition_dir",
                )
                .hint(create);
            return;
        }
        for role in Role::ALL {
            if !roles.contains(&role) {
                continue;
            }
            let file = role.ignition_file();
            match files.age(&dir.join(file)) {
                Err(e) => {
                    self.p
                        .error(
                            "config::ignition",
                            raw.referenced,
                            format!(
                                "{file} for the {role} nodes can't be read: {}",
                                io_reason(&e)
                            ),
                            format!("no usable {file} here"),
                        )
                        .hint(create.clone());
                }
                Ok(age) if role == Role::Bootstrap && age > IGNITION_MAX_AGE => {
                    self.p
                        .error(
                            "config::ignition-expired",
                            raw.referenced,
                            format!(
                                "{file} was written {} ago: its certificates expire 24 hours after creation",
                                hours(age)
                            ),
                            "expired ignition configs",
                        )
                        .hint(format!("{create} again in a fresh directory, or remove the bootstrap node once bootstrap is done"));
                }
                Ok(age) if role == Role::Bootstrap && age > IGNITION_WARN_AGE => {
                    self.p
                        .warning(
                            "config::ignition-aging",
                            raw.referenced,
                            format!(
                                "{file} was written {} ago: its certificates expire 24 hours after creation",
                                hours(age)
                            ),
                            "ignition configs aging",
                        )
                        .hint("finish the bootstrap soon, or create the ignition configs again");
                }
                Ok(_) => {}
            }
        }
    }

    fn dns(
        &mut self,
        raw: &RawDns,
        cluster: &Cluster,
        net: &Network,
        nodes: &[Node],
    ) -> Option<Dns> {
        let domain = cluster.domain();
        let ttl = match &raw.ttl {
            None => DEFAULT_TTL,
            Some(t) => self.ttl(t).unwrap_or(DEFAULT_TTL),
        };
        let mut ok = true;
        let mut nets = |v: &mut Self, raw: &[Text], what: &str| -> Vec<IpNet> {
            raw.iter()
                .filter_map(|t| {
                    let parsed = t
                        .value
                        .parse::<IpNet>()
                        .or_else(|_| t.value.parse::<IpAddr>().map(IpNet::from));
                    match parsed {
                        Ok(n) => Some(n.trunc()),
                        Err(_) => {
                            ok = false;
                            v.p.error(
                                "config::network",
                                t.referenced,
                                format!("{what} entry `{}` is not a network", t.value),
                                "expected an address or CIDR network",
                            );
                            None
                        }
                    }
                })
                .collect()
        };
        let recursion_allowed = match &raw.recursion_allowed {
            Some(list) => nets(self, list, "recursion_allowed"),
            None => {
                let mut v = vec![IpNet::V4(net.v4.subnet)];
                if let Some(v6) = &net.v6 {
                    v.push(IpNet::V6(v6.subnet));
                }
                v.push("127.0.0.0/8".parse().expect("literal"));
                v.push("::1/128".parse().expect("literal"));
                v
            }
        };
        if let Some(list) = &raw.recursion_allowed {
            for t in list {
                // The recorded error fails the load.
                if t.value.parse::<IpNet>().is_ok_and(|n| n.prefix_len() == 0) {
                    self.p
                        .error(
                            "config::open-resolver",
                            t.referenced,
                            "recursion for everybody makes the appliance an open resolver",
                            "the whole address space",
                        )
                        .hint("list the networks of your clients; open resolvers are used for reflection attacks");
                }
            }
        }
        let axfr_allowed = nets(self, &raw.axfr_allowed, "axfr_allowed");
        let legacy_etcd = raw.legacy_etcd.as_ref().is_some_and(|b| b.value);

        let mut taken: HashMap<String, &str> = HashMap::new();
        for name in RESERVED_NAMES.iter().filter(|n| **n != "apps") {
            taken.insert(format!("{name}.{domain}."), "published by okd-appliance");
        }
        // The ingress wildcard: another record there would mix in addresses that are not the
        // load balancer's, and a CNAME could not stand beside its A record at all.
        taken.insert(
            format!("*.apps.{domain}."),
            "the ingress wildcard okd-appliance publishes",
        );
        for node in nodes {
            taken.insert(format!("{}.{domain}.", node.name), "a node's name");
        }
        if legacy_etcd {
            taken.insert(
                format!("_etcd-server-ssl._tcp.{domain}."),
                "published by okd-appliance",
            );
        }
        let mut extra_names: HashMap<String, (bool, Location)> = HashMap::new();
        let mut records = Vec::new();
        for r in &raw.records {
            let Some(name) = self.record_name(&r.name, &domain) else {
                ok = false;
                continue;
            };
            let etcd = legacy_etcd
                && name
                    .strip_suffix(&format!(".{domain}."))
                    .and_then(|l| l.strip_prefix("etcd-"))
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
            if let Some(what) = taken
                .get(&name)
                .copied()
                .or(etcd.then_some("published by okd-appliance"))
            {
                self.p
                    .error(
                        "config::record-clash",
                        r.name.referenced,
                        format!("`{name}` is {what}"),
                        "name already in the zone",
                    )
                    .hint(
                        "extra records may add new names only; the derived ones follow the nodes",
                    );
                ok = false;
                continue;
            }
            let Some(data) = self.record_data(r, &domain) else {
                ok = false;
                continue;
            };
            let is_cname = matches!(data, RecordData::Cname(_));
            let apex = name == format!("{domain}.");
            if is_cname && apex {
                self.p.error(
                    "config::record-clash",
                    r.name.referenced,
                    "a CNAME can't stand at the zone apex",
                    "apex",
                );
                ok = false;
                continue;
            }
            match extra_names.entry(name.clone()) {
                Entry::Vacant(e) => {
                    e.insert((is_cname, r.name.referenced));
                }
                Entry::Occupied(e) => {
                    let (other_cname, first) = *e.get();
                    if is_cname || other_cname {
                        self.p
                            .error(
                                "config::record-clash",
                                r.name.referenced,
                                format!("`{name}` has a CNAME and other records"),
                                "second record",
                            )
                            .also(first, "first record")
                            .hint("a CNAME must be the only record at its name (RFC 1034 section 3.6.2)");
                        ok = false;
                        continue;
                    }
                }
            }
            records.push(ExtraRecord {
                name,
                ttl: r.ttl.as_ref().and_then(|t| self.ttl(t)),
                data,
            });
        }
        let rrl = raw.rate_limit.as_ref();
        let slip = match rrl.and_then(|r| r.slip.as_ref()) {
            None => DEFAULT_RRL_SLIP,
            Some(v) if v.value <= 10 => v.value,
            Some(v) => {
                self.p
                    .error("config::rate-limit", v.referenced, "slip must be from 0 to 10", "out of range")
                    .hint("2 (every other limited answer truncated) is the usual value; 0 drops them all");
                ok = false;
                0
            }
        };
        let rate_limit = RateLimit {
            responses_per_second: rrl
                .and_then(|r| r.responses_per_second.as_ref())
                .map_or(DEFAULT_RRL_RATE, |v| v.value),
            slip,
        };
        ok.then_some(Dns {
            ttl,
            records,
            recursion_allowed,
            axfr_allowed,
            legacy_etcd,
            rate_limit,
        })
    }

    /// A TTL within the 31 bits RFC 2181 section 8 allows.
    fn ttl(&mut self, raw: &Spanned<u32>) -> Option<u32> {
        if raw.value <= 0x7fff_ffff {
            return Some(raw.value);
        }
        self.p
            .error(
                "config::ttl",
                raw.referenced,
                format!("TTL {} is too large", raw.value),
                "over 2^31 - 1",
            )
            .hint("TTLs are seconds from 0 to 2147483647 (RFC 2181); 300 is usual");
        None
    }

    /// An absolute lowercase name inside the cluster zone; relative names are relative to it.
    fn record_name(&mut self, raw: &Text, domain: &str) -> Option<String> {
        let s = raw.value.to_ascii_lowercase();
        let name = if s == "@" {
            format!("{domain}.")
        } else if s.ends_with('.') {
            s
        } else {
            format!("{s}.{domain}.")
        };
        let bare = name.trim_end_matches('.');
        let body = bare.strip_prefix("*.").unwrap_or(bare);
        if !is_domain_name(body) {
            self.p.error(
                "config::record",
                raw.referenced,
                format!("record name `{}` is not a domain name", raw.value),
                "not a domain name",
            );
            return None;
        }
        if !(bare == domain || bare.ends_with(&format!(".{domain}"))) {
            self.p
                .error(
                    "config::record",
                    raw.referenced,
                    format!("`{}` is outside the cluster zone {domain}", raw.value),
                    "outside the zone",
                )
                .hint("okd-appliance is authoritative for the cluster zone only; write names relative to it");
            return None;
        }
        Some(name)
    }

    fn record_data(&mut self, r: &RawRecord, domain: &str) -> Option<RecordData> {
        let value = r.value.value.trim();
        let target = |s: &str| -> Option<String> {
            let s = s.to_ascii_lowercase();
            let abs = if s.ends_with('.') {
                s
            } else {
                format!("{s}.{domain}.")
            };
            is_domain_name(abs.trim_end_matches('.')).then_some(abs)
        };
        let fields: Vec<&str> = value.split_whitespace().collect();
        let data = match r.kind.value.to_ascii_uppercase().as_str() {
            "A" => value.parse().ok().map(RecordData::A),
            "AAAA" => value.parse().ok().map(RecordData::Aaaa),
            "CNAME" => target(value).map(RecordData::Cname),
            "TXT" => (!value.is_empty() && value.len() <= 255)
                .then(|| RecordData::Txt(vec![value.to_owned()])),
            "MX" => match fields.as_slice() {
                [pref, host] => {
                    pref.parse()
                        .ok()
                        .zip(target(host))
                        .map(|(preference, exchange)| RecordData::Mx {
                            preference,
                            exchange,
                        })
                }
                _ => None,
            },
            "SRV" => match fields.as_slice() {
                [prio, weight, port, host] => {
                    match (prio.parse(), weight.parse(), port.parse(), target(host)) {
                        (Ok(priority), Ok(weight), Ok(port), Some(target)) => {
                            Some(RecordData::Srv {
                                priority,
                                weight,
                                port,
                                target,
                            })
                        }
                        _ => None,
                    }
                }
                _ => None,
            },
            other => {
                self.p
                    .error(
                        "config::record",
                        r.kind.referenced,
                        format!("record type `{other}` is not supported"),
                        "unsupported type",
                    )
                    .hint("extra records may be A, AAAA, CNAME, TXT, MX or SRV");
                return None;
            }
        };
        if data.is_none() {
            let shape = match r.kind.value.to_ascii_uppercase().as_str() {
                "A" => "an IPv4 address",
                "AAAA" => "an IPv6 address",
                "CNAME" => "a domain name",
                "TXT" => "text of 1 to 255 characters",
                "MX" => "`preference host`",
                _ => "`priority weight port target`",
            };
            self.p.error(
                "config::record",
                r.value.referenced,
                format!(
                    "`{}` is not a valid {} record value: expected {shape}",
                    r.value.value, r.kind.value
                ),
                "bad value",
            );
        }
        data
    }

    fn lb(&mut self, raw: &RawLb, dir: &Path) -> Option<Lb> {
        let balance = match raw.balance.as_ref().map(|b| b.value.as_str()) {
            None | Some("roundrobin") => Some(Balance::RoundRobin),
            Some("leastconn") => Some(Balance::LeastConnections),
            Some(other) => {
                let at = raw
                    .balance
                    .as_ref()
                    .map(|b| b.referenced)
                    .expect("matched Some");
                self.p
                    .error(
                        "config::lb",
                        at,
                        format!("unknown balance algorithm `{other}`"),
                        "unknown",
                    )
                    .hint("use roundrobin or leastconn");
                None
            }
        };
        let h = &raw.health;
        let ms = Duration::from_millis;
        let interval = match &h.interval {
            None => Some(Duration::from_secs(1)),
            Some(t) => self.duration(
                t,
                "health check interval",
                ms(100),
                Duration::from_secs(3600),
            ),
        };
        let timeout = match &h.timeout {
            None => Some(Duration::from_secs(1)),
            Some(t) => self.duration(t, "health check timeout", ms(10), Duration::from_secs(60)),
        };
        let count = |v: &mut Self, raw: &Option<Spanned<u32>>, what: &str| -> Option<u32> {
            match raw {
                None => Some(2),
                Some(n) if (1..=100).contains(&n.value) => Some(n.value),
                Some(n) => {
                    v.p.error(
                        "config::lb",
                        n.referenced,
                        format!("health check {what} must be from 1 to 100"),
                        "out of range",
                    );
                    None
                }
            }
        };
        let rise = count(self, &h.rise, "rise");
        let fall = count(self, &h.fall, "fall");
        let ingress_check = self.one_of(
            h.ingress_check.as_ref(),
            "ingress check",
            &[("http", IngressCheck::Http), ("tcp", IngressCheck::Tcp)],
            "use http (GET /healthz/ready on port 1936) or tcp",
        );
        let control_plane_check = self.one_of(
            h.control_plane_check.as_ref(),
            "control plane check",
            &[
                ("https", ControlPlaneCheck::Https),
                ("tcp", ControlPlaneCheck::Tcp),
            ],
            "use https (GET /readyz on 6443 and /healthz on 22623) or tcp",
        );
        let check_ca = match &h.ca_file {
            None => Some(None),
            Some(f) if f.value.trim().is_empty() => {
                self.p
                    .error("config::lb", f.referenced, "ca_file is empty", "empty");
                None
            }
            Some(f) => Some(Some(dir.join(&f.value))),
        };
        if let (Some(i), Some(t), Some(at)) = (interval, timeout, h.timeout.as_ref())
            && t > i
        {
            self.p
                .warning(
                    "config::lb",
                    at.referenced,
                    "health check timeout is longer than the interval",
                    "timeout",
                )
                .hint("a check then overlaps the next one; make the timeout at most the interval");
        }
        let drain_timeout = match &raw.drain_timeout {
            None => Some(DEFAULT_DRAIN_TIMEOUT),
            Some(t) => self.duration(
                t,
                "drain timeout",
                Duration::from_secs(1),
                Duration::from_secs(24 * 3600),
            ),
        };
        Some(Lb {
            balance: balance?,
            drain_timeout: drain_timeout?,
            health: HealthSettings {
                interval: interval?,
                timeout: timeout?,
                rise: rise?,
                fall: fall?,
                ingress_check: ingress_check?,
                control_plane_check: control_plane_check?,
            },
            check_ca: check_ca?,
        })
    }

    /// `raw` as one of `choices` (the first is the default when absent), or an error at `raw`.
    fn one_of<T: Copy>(
        &mut self,
        raw: Option<&Text>,
        what: &str,
        choices: &[(&str, T)],
        hint: &str,
    ) -> Option<T> {
        let Some(raw) = raw else {
            return Some(choices[0].1);
        };
        if let Some((_, v)) = choices.iter().find(|(name, _)| *name == raw.value) {
            return Some(*v);
        }
        self.p
            .error(
                "config::lb",
                raw.referenced,
                format!("unknown {what} `{}`", raw.value),
                "unknown",
            )
            .hint(hint.to_owned());
        None
    }

    fn run_as(&mut self, raw: &RawRunAs) -> Option<RunAs> {
        let valid = |s: &str| {
            !s.is_empty() && !s.contains(|c: char| c.is_whitespace() || c == ':' || c == '/')
        };
        if !valid(&raw.user.value) {
            self.p.error(
                "config::run-as",
                raw.user.referenced,
                "not a user name",
                "user",
            );
            return None;
        }
        if let Some(g) = raw.group.as_ref().filter(|g| !valid(&g.value)) {
            self.p
                .error("config::run-as", g.referenced, "not a group name", "group");
            return None;
        }
        Some(RunAs {
            user: raw.user.value.clone(),
            group: raw.group.as_ref().map(|g| g.value.clone()),
        })
    }
}

/// Records the first place a key was seen; returns it when this is a second sighting.
fn first_use<K: std::hash::Hash + Eq>(
    seen: &mut HashMap<K, Location>,
    key: K,
    at: Location,
) -> Option<Location> {
    match seen.entry(key) {
        Entry::Occupied(e) => Some(*e.get()),
        Entry::Vacant(e) => {
            e.insert(at);
            None
        }
    }
}

/// `192.0.2.53`, `192.0.2.53:5353`, `2001:db8::53` or `[2001:db8::53]:53`.
fn parse_upstream(s: &str) -> Option<SocketAddr> {
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .or_else(|_| s.parse::<SocketAddr>())
        .ok()
}

fn parse_role(s: &str) -> Option<Role> {
    match s {
        "bootstrap" => Some(Role::Bootstrap),
        "master" => Some(Role::Master),
        "worker" => Some(Role::Worker),
        _ => None,
    }
}

/// Whether two listeners would fight over a port: same port and family, and the same address
/// or a wildcard on either side.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.is_ipv4() == b.is_ipv4()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

fn first_host(net: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.network()) + 1)
}

fn last_host(net: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.broadcast()) - 1)
}

fn hours(age: Duration) -> String {
    format!("{} h", age.as_secs() / 3600)
}

fn io_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "it does not exist".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => e.to_string(),
    }
}

/// `http://<appliance IPv4>[:port]` from the first HTTP listener's port.
fn default_base_url(net: &Network, listen: &Listen) -> String {
    let port = listen.http.first().map_or(8080, SocketAddr::port);
    if port == 80 {
        format!("http://{}", net.v4.appliance)
    } else {
        format!("http://{}:{port}", net.v4.appliance)
    }
}
