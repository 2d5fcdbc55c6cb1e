//! The `network` section: subnet, gateway, appliance address, IPv6, the dynamic pool, upstream
//! resolvers (and a forwarding loop back to the appliance itself).

use super::*;

impl Validator<'_> {
    pub(super) fn network(&mut self, raw: &RawNetwork) -> (Option<Network>, AddressSpace) {
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

    pub(super) fn ipv4_subnet(&mut self, raw: &Text) -> Option<Ipv4Net> {
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

    pub(super) fn ipv4(&mut self, raw: &Text, what: &str) -> Option<Ipv4Addr> {
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

    pub(super) fn ipv6(&mut self, raw: &Text, what: &str) -> Option<Ipv6Addr> {
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
    pub(super) fn host_in_v4_subnet(
        &mut self,
        raw: &Text,
        subnet: Ipv4Net,
        what: &str,
    ) -> Option<Ipv4Addr> {
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

    pub(super) fn ipv6_network(&mut self, raw: &RawIpv6) -> Option<Ipv6Network> {
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

    pub(super) fn upstream(&mut self, raw: &Text) -> Option<SocketAddr> {
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

    pub(super) fn pool(
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

    pub(super) fn forwarding_loop(
        &mut self,
        raw: &RawNetwork,
        net: Option<&Network>,
        listen: &Listen,
    ) {
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
}

/// `192.0.2.53`, `192.0.2.53:5353`, `2001:db8::53` or `[2001:db8::53]:53`.
fn parse_upstream(s: &str) -> Option<SocketAddr> {
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .or_else(|_| s.parse::<SocketAddr>())
        .ok()
}

fn first_host(net: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.network()) + 1)
}

fn last_host(net: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.broadcast()) - 1)
}
