//! Reverse zones for a subnet of any prefix length.
//!
//! Zone cuts fall on octet boundaries for IPv4 (RFC 1035 section 3.5) and nibble boundaries for
//! IPv6 (RFC 3596 section 2.5). A subnet that is not aligned is split into the zones just below
//! it (a /20 becomes sixteen /24 zones); a subnet longer than /24 (IPv4) or /124 (IPv6) is served
//! from its enclosing zone. RFC 2317 classless delegation needs the parent zone's cooperation;
//! the appliance is its nodes' own resolver, so it answers from the enclosing zone instead, for
//! the subnet's own addresses only (`Zone::covers`). The names of the zone's other addresses
//! belong to whoever has the rest of it, so DNS treats them as outside its zones: forwarded, or
//! refused to a client that may not recurse, never NXDOMAIN with authority
//! (`dns::tests::a_subnet_narrower_than_its_zone_answers_only_for_its_addresses`).

use std::net::{IpAddr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// The longest zone prefix: a /24 zone names the last octet, a /124 zone the last nibble.
const V4_MAX_ZONE: u8 = 24;
const V6_MAX_ZONE: u8 = 124;

/// The networks whose reverse zones together cover `subnet`, each on a label boundary.
pub fn zone_networks(subnet: IpNet) -> Vec<IpNet> {
    match subnet {
        IpNet::V4(net) => {
            let zone_len = round_up(net.prefix_len(), 8).min(V4_MAX_ZONE);
            if zone_len <= net.prefix_len() {
                let zone = Ipv4Net::new(net.network(), zone_len)
                    .expect("valid prefix")
                    .trunc();
                return vec![IpNet::V4(zone)];
            }
            net.subnets(zone_len)
                .expect("longer prefix")
                .map(IpNet::V4)
                .collect()
        }
        IpNet::V6(net) => {
            let zone_len = round_up(net.prefix_len(), 4).min(V6_MAX_ZONE);
            if zone_len <= net.prefix_len() {
                let zone = Ipv6Net::new(net.network(), zone_len)
                    .expect("valid prefix")
                    .trunc();
                return vec![IpNet::V6(zone)];
            }
            net.subnets(zone_len)
                .expect("longer prefix")
                .map(IpNet::V6)
                .collect()
        }
    }
}

fn round_up(n: u8, step: u8) -> u8 {
    n.div_ceil(step) * step
}

/// The reverse zone origin of a network on a label boundary, e.g. `0.0.10.in-addr.arpa.`.
pub fn zone_origin(zone: IpNet) -> String {
    match zone {
        IpNet::V4(net) => {
            let octets = usize::from(net.prefix_len() / 8);
            let mut labels: Vec<String> = net.network().octets()[..octets]
                .iter()
                .map(u8::to_string)
                .collect();
            labels.reverse();
            labels.push("in-addr.arpa.".to_owned());
            labels.join(".")
        }
        IpNet::V6(net) => {
            let nibbles = usize::from(net.prefix_len() / 4);
            let mut labels: Vec<String> = v6_nibbles(net.network())[..nibbles]
                .iter()
                .map(|n| format!("{n:x}"))
                .collect();
            labels.reverse();
            labels.push("ip6.arpa.".to_owned());
            labels.join(".")
        }
    }
}

/// The PTR owner name of an address, e.g. `5.0.0.10.in-addr.arpa.`.
pub fn ptr_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => {
            let [a, b, c, d] = ip.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa.")
        }
        IpAddr::V6(ip) => {
            let mut out = String::with_capacity(73);
            for n in v6_nibbles(ip).iter().rev() {
                out.push_str(&format!("{n:x}."));
            }
            out.push_str("ip6.arpa.");
            out
        }
    }
}

fn v6_nibbles(ip: Ipv6Addr) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, byte) in ip.octets().iter().enumerate() {
        out[2 * i] = byte >> 4;
        out[2 * i + 1] = byte & 0xf;
    }
    out
}

/// Whether the zone for `zone` holds the PTR record of `ip`.
pub fn zone_contains(zone: IpNet, ip: IpAddr) -> bool {
    zone.contains(&ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(subnet: &str) -> Vec<String> {
        zone_networks(subnet.parse().unwrap())
            .into_iter()
            .map(zone_origin)
            .collect()
    }

    #[test]
    fn ipv4_zone_cuts() {
        assert_eq!(origins("10.0.0.0/24"), ["0.0.10.in-addr.arpa."]);
        assert_eq!(origins("10.0.0.0/16"), ["0.10.in-addr.arpa."]);
        assert_eq!(origins("10.0.0.0/8"), ["10.in-addr.arpa."]);
        // A /26 is answered from its enclosing /24.
        assert_eq!(origins("192.168.7.64/26"), ["7.168.192.in-addr.arpa."]);
        let z20 = origins("10.1.16.0/20");
        assert_eq!(z20.len(), 16);
        assert_eq!(z20[0], "16.1.10.in-addr.arpa.");
        assert_eq!(z20[15], "31.1.10.in-addr.arpa.");
        assert_eq!(
            origins("10.0.0.0/23"),
            ["0.0.10.in-addr.arpa.", "1.0.10.in-addr.arpa."]
        );
    }

    #[test]
    fn ipv6_zone_cuts() {
        assert_eq!(
            origins("fd00:10::/64"),
            ["0.0.0.0.0.0.0.0.0.1.0.0.0.0.d.f.ip6.arpa."]
        );
        let z = origins("fd00:10::/62");
        assert_eq!(z.len(), 4);
        assert_eq!(z[3], "3.0.0.0.0.0.0.0.0.1.0.0.0.0.d.f.ip6.arpa.");
        assert_eq!(
            origins("2001:db8::/48"),
            ["0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa."]
        );
    }

    #[test]
    fn ptr_names() {
        assert_eq!(
            ptr_name("10.0.0.5".parse().unwrap()),
            "5.0.0.10.in-addr.arpa."
        );
        assert_eq!(
            ptr_name("2001:db8::1".parse().unwrap()),
            "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa."
        );
    }

    #[test]
    fn every_address_of_a_split_subnet_has_exactly_one_zone() {
        let subnet: IpNet = "10.1.16.0/20".parse().unwrap();
        let zones = zone_networks(subnet);
        for ip in subnet.hosts() {
            let holders = zones.iter().filter(|z| zone_contains(**z, ip)).count();
            assert_eq!(holders, 1, "{ip}");
            let origin = zones
                .iter()
                .find(|z| zone_contains(**z, ip))
                .map(|z| zone_origin(*z))
                .unwrap();
            assert!(
                ptr_name(ip).ends_with(&format!(".{origin}")),
                "{ip} in {origin}"
            );
        }
    }
}
