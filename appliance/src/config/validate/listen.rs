//! The `listen` section: each service's addresses, defaults from the appliance address, and
//! listeners that would fight over a port.

use super::*;

impl Validator<'_> {
    pub(super) fn listen(
        &mut self,
        raw: &RawListen,
        raw_net: &RawNetwork,
        net: Option<&Network>,
        direct_single_node: bool,
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
        // Linux gives a broadcast to no UDP socket bound to one address.
        for (addr, at) in dhcp.0.iter().flatten().zip(&dhcp.1) {
            if !matches!(addr, SocketAddr::V4(v4) if !v4.ip().is_unspecified()) {
                continue;
            }
            let (problem, hint) = match &raw_net.interface {
                Some(iface) => (self.p.warning(
                    "config::listen",
                    *at,
                    format!(
                        "dhcp listens on 0.0.0.0:{} on {} instead of {addr}: a socket bound to one address never sees a client's broadcast DISCOVER",
                        addr.port(),
                        iface.value
                    ),
                    "one address",
                ), "leave listen.dhcp out: 0.0.0.0:67 on network.interface is the default"),
                None => (self.p.warning(
                    "config::listen",
                    *at,
                    format!(
                        "a DHCP socket bound to {addr} hears only relayed (unicast) requests: clients on the segment broadcast"
                    ),
                    "one address",
                ), "set network.interface to the cluster NIC, and leave listen.dhcp out"),
            };
            problem.hint(hint);
        }
        // PXE firmware fetches iPXE from the server that answered DHCP: TFTP follows DHCP.
        let tftp_default = if raw_net.interface.is_some() {
            defaults(69).map(|v| v[..1].to_vec())
        } else {
            Some(Vec::new())
        };
        let tftp = list(self, &raw.tftp, tftp_default, "tftp");
        let http = list(self, &raw.http, defaults(8080), "http");
        // A single-node cluster whose names point at the node itself sends nothing through
        // the load balancer: its listeners are off unless named.
        let balanced = |port: u16| {
            if direct_single_node {
                Some(Vec::new())
            } else {
                defaults(port)
            }
        };
        let api = list(self, &raw.api, balanced(6443), "api");
        let machine_config = list(self, &raw.machine_config, balanced(22623), "machine_config");
        let ingress_https = list(self, &raw.ingress_https, balanced(443), "ingress_https");
        let ingress_http = list(self, &raw.ingress_http, balanced(80), "ingress_http");
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
}

/// Whether two listeners would fight over a port: same port and family, and the same address
/// or a wildcard on either side.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.is_ipv4() == b.is_ipv4()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}
