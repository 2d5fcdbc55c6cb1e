//! The `install_config` section: what `render --format install-config` writes beyond what the
//! rest of the file says (the pull secret and SSH key files, the pod and service networks, the
//! proxy, a trust bundle, release-image mirrors). The network rules are openshift-install's own
//! (openshift/installer `pkg/types/validation/installconfig.go` at 6bc5c21f:
//! `validateNetworking`, `validateNetworkingIPVersion`, `validateClusterNetwork`,
//! `validateNetworkNotOverlapDefaultOVNSubnets`, `validateProxy`, `validateNamedRepository`),
//! so what renders is what the installer accepts. The files are only named here: the render reads
//! them (the pull secret through `secrets.rs`, owner-only).

use super::*;

/// The installer's defaults (openshift/installer `pkg/types/defaults/installconfig.go`) and,
/// for IPv6, the pod and service networks its dual-stack documentation uses.
const DEFAULT_CLUSTER_NETWORK_V4: (&str, u8) = ("10.128.0.0/14", 23);
const DEFAULT_SERVICE_NETWORK_V4: &str = "172.30.0.0/16";
const DEFAULT_CLUSTER_NETWORK_V6: (&str, u8) = ("fd01::/48", 64);
const DEFAULT_SERVICE_NETWORK_V6: &str = "fd02::/112";

/// OVN-Kubernetes' internal subnets that no network of the cluster may overlap
/// (openshift/installer `pkg/validate/validate.go` at 6bc5c21f: join, transit, masquerade).
const OVN_SUBNETS: [(&str, &str); 6] = [
    ("100.64.0.0/16", "OVN-Kubernetes' join subnet"),
    ("100.88.0.0/16", "OVN-Kubernetes' transit subnet"),
    ("169.254.0.0/17", "OVN-Kubernetes' masquerade subnet"),
    ("fd98::/64", "OVN-Kubernetes' join subnet"),
    ("fd97::/64", "OVN-Kubernetes' transit subnet"),
    ("fd69::/112", "OVN-Kubernetes' masquerade subnet"),
];

fn net(s: &str) -> IpNet {
    s.parse().expect("a constant network")
}

/// A network of the cluster, with where it was written (or `None` for a default).
struct Placed {
    net: IpNet,
    what: String,
    at: Option<Location>,
}

impl Validator<'_> {
    pub(super) fn install_config(
        &mut self,
        raw: Option<&Spanned<RawInstallConfig>>,
        dir: &Path,
        network: Option<&Network>,
        raw_network: &RawNetwork,
    ) -> Option<InstallConfig> {
        let path = |v: &mut Self, t: &Text, key: &str| {
            if t.value.trim().is_empty() {
                v.p.error(
                    "config::install-config",
                    t.referenced,
                    format!("install_config.{key} is empty"),
                    "empty",
                );
                None
            } else {
                Some(resolve(dir, &t.value))
            }
        };
        let Some(raw) = raw else {
            // No section: the installer's defaults, nothing named (there is nothing to render).
            return network.map(|n| InstallConfig {
                pull_secret_file: None,
                ssh_key_file: None,
                cluster_network: default_cluster_network(n),
                service_network: default_service_network(n),
                proxy: None,
                additional_trust_bundle_file: None,
                additional_trust_bundle_policy: None,
                image_digest_sources: Vec::new(),
            });
        };
        let r = &raw.value;
        let pull_secret_file = path(self, &r.pull_secret_file, "pull_secret_file");
        let ssh_key_file = match &r.ssh_key_file {
            None => Some(None),
            Some(t) => path(self, t, "ssh_key_file").map(Some),
        };
        let bundle = match &r.additional_trust_bundle_file {
            None => Some(None),
            Some(t) => path(self, t, "additional_trust_bundle_file").map(Some),
        };
        let policy = match &r.additional_trust_bundle_policy {
            None => Some(None),
            Some(t) => self
                .one_of(
                    "config::install-config",
                    Some(t),
                    "additional_trust_bundle_policy",
                    &[
                        ("Proxyonly", TrustBundlePolicy::ProxyOnly),
                        ("Always", TrustBundlePolicy::Always),
                    ],
                    "use Proxyonly (the installer's default: the cluster-wide proxy trusts the bundle only when a proxy is set) or Always",
                )
                .map(Some),
        };
        let proxy = match &r.proxy {
            None => Some(None),
            Some(p) => self.proxy(p).map(Some),
        };
        let sources: Vec<Option<ImageDigestSource>> = r
            .image_digest_sources
            .iter()
            .map(|s| self.image_digest_source(s))
            .collect();
        let networks =
            network.and_then(|n| self.pod_and_service_networks(r, n, raw_network, raw.referenced));
        let (cluster_network, service_network) = networks?;
        Some(InstallConfig {
            pull_secret_file: Some(pull_secret_file?),
            ssh_key_file: ssh_key_file?,
            cluster_network,
            service_network,
            proxy: proxy?,
            additional_trust_bundle_file: bundle?,
            additional_trust_bundle_policy: policy?,
            image_digest_sources: sources.into_iter().collect::<Option<Vec<_>>>()?,
        })
    }

    /// The pod and service networks, written or default, checked as the installer checks them.
    fn pod_and_service_networks(
        &mut self,
        r: &RawInstallConfig,
        n: &Network,
        raw_network: &RawNetwork,
        section: Location,
    ) -> Option<(Vec<ClusterNetwork>, Vec<IpNet>)> {
        let dual = n.v6.is_some();
        let mut ok = true;
        let cluster = match &r.cluster_network {
            None => default_cluster_network(n),
            Some(list) => {
                let mut out = Vec::new();
                for entry in &list.value {
                    match self.cluster_network_entry(entry) {
                        Some(c) => out.push((c, entry.cidr.referenced)),
                        None => ok = false,
                    }
                }
                if ok {
                    ok &= self.families(
                        out.iter().map(|(c, _)| c.cidr),
                        dual,
                        list.referenced,
                        "install_config.cluster_network",
                        false,
                    );
                    // openshift-install: one host prefix for every IPv4 pod network.
                    let v4: Vec<_> = out
                        .iter()
                        .filter(|(c, _)| matches!(c.cidr, IpNet::V4(_)))
                        .collect();
                    if let Some(((first, first_at), rest)) = v4.split_first() {
                        for (c, at) in rest {
                            if c.host_prefix != first.host_prefix {
                                self.p
                                    .error(
                                        "config::install-config",
                                        *at,
                                        format!(
                                            "host prefix /{} differs from the first IPv4 pod network's /{}",
                                            c.host_prefix, first.host_prefix
                                        ),
                                        "another host prefix",
                                    )
                                    .also(*first_at, "the first IPv4 pod network")
                                    .hint("openshift-install wants one host prefix for all IPv4 pod networks");
                                ok = false;
                            }
                        }
                    }
                }
                out.into_iter().map(|(c, _)| c).collect()
            }
        };
        let service = match &r.service_network {
            None => default_service_network(n),
            Some(list) => {
                let mut out = Vec::new();
                let mut parsed = true;
                for t in &list.value {
                    match self.cidr(t, "service network") {
                        Some(net) if self.service_network_size(net, t.referenced) => out.push(net),
                        _ => parsed = false,
                    }
                }
                ok &= parsed;
                if parsed {
                    ok &= self.families(
                        out.iter().copied(),
                        dual,
                        list.referenced,
                        "install_config.service_network",
                        true,
                    );
                }
                out
            }
        };
        if !ok {
            return None;
        }
        // No two of the cluster's networks may overlap, nor OVN-Kubernetes' own subnets.
        let spans = |list: &Option<Spanned<Vec<Text>>>, i: usize| {
            list.as_ref().map(|l| l.value[i].referenced)
        };
        let mut placed = vec![Placed {
            net: IpNet::V4(n.v4.subnet),
            what: format!("the machine network {} (network.subnet)", n.v4.subnet),
            at: Some(raw_network.subnet.referenced),
        }];
        if let (Some(v6), Some(raw6)) = (&n.v6, &raw_network.ipv6) {
            placed.push(Placed {
                net: IpNet::V6(v6.subnet),
                what: format!("the machine network {} (network.ipv6.subnet)", v6.subnet),
                at: Some(raw6.subnet.referenced),
            });
        }
        for (i, c) in cluster.iter().enumerate() {
            placed.push(Placed {
                net: c.cidr,
                what: match r.cluster_network {
                    Some(_) => format!("the pod network {}", c.cidr),
                    None => format!("the default pod network {}", c.cidr),
                },
                at: r
                    .cluster_network
                    .as_ref()
                    .map(|l| l.value[i].cidr.referenced),
            });
        }
        for (i, s) in service.iter().enumerate() {
            placed.push(Placed {
                net: *s,
                what: match r.service_network {
                    Some(_) => format!("the service network {s}"),
                    None => format!("the default service network {s}"),
                },
                at: spans(&r.service_network, i),
            });
        }
        for (i, a) in placed.iter().enumerate() {
            for b in &placed[..i] {
                if overlap(a.net, b.net) {
                    self.overlapping(a, &b.what, b.at, section);
                    ok = false;
                }
            }
            for (ovn, what) in OVN_SUBNETS {
                if overlap(a.net, net(ovn)) {
                    self.overlapping(a, &format!("{what} {ovn}"), None, section);
                    ok = false;
                }
            }
        }
        ok.then_some((cluster, service))
    }

    /// A service network no wider than openshift-install takes: IPv4 /12, IPv6 /108
    /// (openshift/installer `pkg/types/validation/installconfig.go` at 006d4573,
    /// `validateServiceNetwork`, lines 563-588; `pkg/validate/validate.go`,
    /// `ServiceSubnetCIDR`: `maskLen < 12` and `maskLen < 108` refused).
    fn service_network_size(&mut self, net: IpNet, at: Location) -> bool {
        let (min, family, advice) = match net {
            IpNet::V4(_) => (12, "IPv4", "/16 is recommended, e.g. 172.30.0.0/16"),
            IpNet::V6(_) => (108, "IPv6", "/112 is recommended, e.g. fd02::/112"),
        };
        if net.prefix_len() >= min {
            return true;
        }
        self.p
            .error(
                "config::install-config",
                at,
                format!(
                    "service network {net} is wider than openshift-install takes: an {family} service network must be /{min} or longer"
                ),
                "too wide",
            )
            .hint(advice);
        false
    }

    /// Reports `a` overlapping `other`: at `a`'s own place, else at `other`'s, else (two
    /// defaults) at the `install_config` section.
    fn overlapping(
        &mut self,
        a: &Placed,
        other: &str,
        other_at: Option<Location>,
        section: Location,
    ) {
        let at = a.at.or(other_at).unwrap_or(section);
        let problem = self.p.error(
            "config::install-config",
            at,
            format!(
                "{} overlaps {other}: openshift-install refuses overlapping networks",
                a.what
            ),
            "overlaps",
        );
        if let (Some(_), Some(o)) = (a.at, other_at) {
            problem.also(o, "overlapped");
        }
        problem.hint(
            "choose pod and service networks (install_config.cluster_network, service_network) outside the machine network, each other and 100.64.0.0/16, 100.88.0.0/16, 169.254.0.0/17 (fd98::/64, fd97::/64, fd69::/112)",
        );
    }

    /// Each family of the machine network has a network here (exactly one when `one_each`),
    /// no other family does, and IPv4 comes first.
    fn families(
        &mut self,
        nets: impl Iterator<Item = IpNet>,
        dual: bool,
        at: Location,
        key: &str,
        one_each: bool,
    ) -> bool {
        let nets: Vec<IpNet> = nets.collect();
        let v4 = nets.iter().filter(|n| matches!(n, IpNet::V4(_))).count();
        let v6 = nets.len() - v4;
        let (message, hint) = if v4 == 0 {
            (
                format!("{key} has no IPv4 network"),
                "the machine network is IPv4 (network.subnet): list an IPv4 network",
            )
        } else if v6 > 0 && !dual {
            (
                format!("{key} has an IPv6 network but the machine network is IPv4 only"),
                "add network.ipv6 for a dual-stack cluster, or list IPv4 networks only",
            )
        } else if dual && v6 == 0 {
            (
                format!("{key} has no IPv6 network but the cluster is dual-stack"),
                "a dual-stack cluster needs a network of each family (e.g. fd01::/48 for pods, fd02::/112 for services)",
            )
        } else if one_each && (v4 > 1 || v6 > 1) {
            (
                format!("{key} has more than one network of a family"),
                "openshift-install takes one service network per address family",
            )
        } else if dual && matches!(nets.first(), Some(IpNet::V6(_))) {
            (
                format!("{key} lists IPv6 first"),
                "openshift-install wants the IPv4 networks listed before the IPv6 ones on this platform",
            )
        } else {
            return true;
        };
        self.p
            .error("config::install-config", at, message, "this list")
            .hint(hint);
        false
    }

    fn cluster_network_entry(&mut self, raw: &RawClusterNetwork) -> Option<ClusterNetwork> {
        let cidr = self.cidr(&raw.cidr, "pod network")?;
        let (default, max) = match cidr {
            IpNet::V4(_) => (DEFAULT_CLUSTER_NETWORK_V4.1, 32),
            IpNet::V6(_) => (DEFAULT_CLUSTER_NETWORK_V6.1, 128),
        };
        let Some(hp) = &raw.host_prefix else {
            if let IpNet::V6(n) = cidr
                && n.prefix_len() > 64
            {
                self.p
                    .error(
                        "config::install-config",
                        raw.cidr.referenced,
                        format!("pod network {cidr} is smaller than the /64 each node takes"),
                        "too small",
                    )
                    .hint("use a /48 such as fd01::/48");
                return None;
            }
            // The installer's own default is for its default network only: an entry without
            // hostPrefix is 0 to it and refused (`pkg/types/defaults/installconfig.go`,
            // `SetInstallConfigDefaults`; `validateClusterNetwork`: "must not be larger size
            // than CIDR"). The 23 written here must fit the network it is for.
            if cidr.prefix_len() > default {
                self.p
                    .error(
                        "config::install-config",
                        raw.cidr.referenced,
                        format!(
                            "pod network {cidr} is smaller than the /{default} block each node takes by default"
                        ),
                        "too small for /23",
                    )
                    .hint(format!(
                        "give host_prefix (from /{} to /32: each node gets a block of that size), or use a larger network such as 10.128.0.0/14",
                        cidr.prefix_len()
                    ));
                return None;
            }
            return Some(ClusterNetwork {
                cidr,
                host_prefix: default,
            });
        };
        let value = hp.value;
        let problem = if value > max || value < u32::from(cidr.prefix_len()) {
            Some(format!(
                "host prefix /{value} does not fit pod network {cidr} (from /{} to /{max})",
                cidr.prefix_len()
            ))
        } else if matches!(cidr, IpNet::V6(_)) && value != 64 {
            Some(format!(
                "host prefix /{value} for an IPv6 pod network: openshift-install takes only /64"
            ))
        } else {
            None
        };
        if let Some(message) = problem {
            self.p
                .error("config::install-config", hp.referenced, message, "host prefix")
                .hint("each node gets a block of this prefix length from the pod network: 23 for IPv4 (510 pods a node), 64 for IPv6");
            return None;
        }
        Some(ClusterNetwork {
            cidr,
            host_prefix: u8::try_from(value).expect("at most 128"),
        })
    }

    /// A network in CIDR form with no host bits, of either family.
    fn cidr(&mut self, raw: &Text, what: &str) -> Option<IpNet> {
        let Ok(n) = raw.value.parse::<IpNet>() else {
            self.p
                .error(
                    "config::install-config",
                    raw.referenced,
                    format!("{what} `{}` is not a network in CIDR form", raw.value),
                    "not a network",
                )
                .hint(
                    "write the network address and prefix length, e.g. 10.128.0.0/14 or fd01::/48",
                );
            return None;
        };
        if n.addr() != n.network() {
            self.p
                .error(
                    "config::install-config",
                    raw.referenced,
                    format!("{what} `{n}` has host bits set"),
                    "host bits set",
                )
                .hint(format!("did you mean {}?", n.trunc()));
            return None;
        }
        Some(n)
    }

    fn proxy(&mut self, raw: &Spanned<RawProxy>) -> Option<Proxy> {
        let r = &raw.value;
        let mut ok = true;
        if r.http_proxy.is_none() && r.https_proxy.is_none() {
            self.p
                .error(
                    "config::install-config",
                    raw.referenced,
                    "a proxy with neither http_proxy nor https_proxy",
                    "proxy",
                )
                .hint("e.g. http_proxy: http://proxy.example.com:3128");
            ok = false;
        }
        let mut url = |v: &mut Self, t: &Option<Text>, key: &str, schemes: &[&str]| {
            let t = t.as_ref()?;
            let parsed = url::Url::parse(&t.value).ok();
            let good = parsed.as_ref().is_some_and(|u| {
                schemes.contains(&u.scheme()) && u.host_str().is_some_and(|h| !h.is_empty())
            });
            if !good {
                v.p.error(
                    "config::install-config",
                    t.referenced,
                    format!(
                        "proxy.{key} `{}` is not a {} URL of a host",
                        t.value,
                        schemes.join(" or ")
                    ),
                    "not a proxy URL",
                )
                .hint("e.g. http://proxy.example.com:3128 (credentials may go in the URL: http://user:password@proxy:3128)");
                ok = false;
                return None;
            }
            Some(t.value.clone())
        };
        let http_proxy = url(self, &r.http_proxy, "http_proxy", &["http"]);
        let https_proxy = url(self, &r.https_proxy, "https_proxy", &["http", "https"]);
        let mut no_proxy = Vec::new();
        for t in &r.no_proxy {
            let v = t.value.trim();
            if no_proxy_entry(v) {
                no_proxy.push(v.to_owned());
            } else {
                self.p
                    .error(
                        "config::install-config",
                        t.referenced,
                        format!("no_proxy entry `{}` is not a domain, an address or a network", t.value),
                        "not a no_proxy entry",
                    )
                    .hint("one per list item: a domain (.example.com for its subdomains), an IP address, a CIDR, or `*` alone");
                ok = false;
            }
        }
        if no_proxy.len() > 1 && no_proxy.iter().any(|e| e == "*") {
            self.p
                .error(
                    "config::install-config",
                    raw.referenced,
                    "no_proxy has `*` beside other entries",
                    "no_proxy",
                )
                .hint("`*` (no proxy for anything) stands alone");
            ok = false;
        }
        ok.then_some(Proxy {
            http_proxy,
            https_proxy,
            no_proxy,
        })
    }

    fn image_digest_source(
        &mut self,
        raw: &Spanned<RawImageDigestSource>,
    ) -> Option<ImageDigestSource> {
        let r = &raw.value;
        let mut ok = true;
        let repository = |v: &mut Self, t: &Text, what: &str| {
            if is_repository(&t.value) {
                return true;
            }
            v.p.error(
                "config::install-config",
                t.referenced,
                format!("{what} `{}` is not a repository", t.value),
                "not a repository",
            )
            .hint("a registry host with an optional port and path, without a tag or digest, e.g. quay.io/openshift/okd or mirror.example.com:5000/okd");
            false
        };
        ok &= repository(self, &r.source, "image source");
        for m in &r.mirrors.value {
            ok &= repository(self, m, "mirror");
        }
        if r.mirrors.value.is_empty() {
            self.p
                .error(
                    "config::install-config",
                    r.mirrors.referenced,
                    "an image source without mirrors",
                    "no mirrors",
                )
                .hint("list the repositories that hold copies of the source's images");
            ok = false;
        }
        ok.then(|| ImageDigestSource {
            source: r.source.value.clone(),
            mirrors: r.mirrors.value.iter().map(|m| m.value.clone()).collect(),
        })
    }
}

fn default_cluster_network(n: &Network) -> Vec<ClusterNetwork> {
    let mut out = vec![ClusterNetwork {
        cidr: net(DEFAULT_CLUSTER_NETWORK_V4.0),
        host_prefix: DEFAULT_CLUSTER_NETWORK_V4.1,
    }];
    if n.v6.is_some() {
        out.push(ClusterNetwork {
            cidr: net(DEFAULT_CLUSTER_NETWORK_V6.0),
            host_prefix: DEFAULT_CLUSTER_NETWORK_V6.1,
        });
    }
    out
}

fn default_service_network(n: &Network) -> Vec<IpNet> {
    let mut out = vec![net(DEFAULT_SERVICE_NETWORK_V4)];
    if n.v6.is_some() {
        out.push(net(DEFAULT_SERVICE_NETWORK_V6));
    }
    out
}

fn overlap(a: IpNet, b: IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// A `noProxy` element as openshift-install accepts one: a domain (a leading dot for its
/// subdomains), an IP address, a CIDR, or `*` (alone; checked by the caller).
fn no_proxy_entry(v: &str) -> bool {
    v == "*"
        || v.parse::<IpAddr>().is_ok()
        || v.parse::<IpNet>().is_ok()
        || is_domain_name(v.strip_prefix('.').unwrap_or(v))
}

/// A repository without tag or digest: `host[:port][/path]`, lowercase path components of the
/// distribution reference grammar (letters, digits and `._-` separators).
fn is_repository(s: &str) -> bool {
    let mut parts = s.split('/');
    let host = parts.next().unwrap_or("");
    let (name, port) = match host.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (host, None),
    };
    let host_ok = is_domain_name(name) || name.parse::<Ipv4Addr>().is_ok() || name == "localhost";
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    let path_ok = parts.all(|c| {
        !c.is_empty()
            && c.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
            && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && c.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
    });
    host_ok && port_ok && path_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_are_hosts_with_paths_and_no_tag() {
        for good in [
            "quay.io/openshift/okd",
            "quay.io/openshift/okd-content",
            "mirror.example.com:5000/okd",
            "registry.local",
            "10.0.0.1:5000/a/b_c",
        ] {
            assert!(is_repository(good), "{good}");
        }
        for bad in [
            "",
            "quay.io/okd:4.15",
            "quay.io/okd@sha256:00",
            "https://quay.io/okd",
            "quay.io//okd",
            "quay.io/OKD",
            "quay.io:0/okd",
            "quay.io/okd/",
            "quay .io/okd",
        ] {
            assert!(!is_repository(bad), "{bad}");
        }
    }

    #[test]
    fn no_proxy_takes_domains_addresses_and_networks() {
        for good in [
            "*",
            ".example.com",
            "example.com",
            "10.0.0.1",
            "10.0.0.0/8",
            "fd00::/8",
        ] {
            assert!(no_proxy_entry(good), "{good}");
        }
        for bad in ["*.example.com", "a b", "http://example.com", ""] {
            assert!(!no_proxy_entry(bad), "{bad}");
        }
    }

    #[test]
    fn overlap_is_either_way() {
        assert!(overlap(net("10.0.0.0/8"), net("10.1.0.0/16")));
        assert!(overlap(net("10.1.0.0/16"), net("10.0.0.0/8")));
        assert!(!overlap(net("10.0.0.0/16"), net("10.1.0.0/16")));
        assert!(!overlap(net("10.0.0.0/8"), net("fd00::/8")));
    }
}
