//! A plan summary for the operator: what is published, reserved, balanced and booted.

use std::fmt::Write as _;

use super::short_duration;
use crate::plan::{Plan, Probe};
use crate::vocabulary::Balance;

pub(super) fn render(plan: &Plan) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "cluster {}", plan.cluster_domain);

    let _ = writeln!(o, "\nlisteners");
    let l = &plan.listen;
    for (service, addrs) in [
        ("dns (udp+tcp)", &l.dns),
        ("dhcp (udp)", &l.dhcp),
        ("tftp (udp)", &l.tftp),
        ("http", &l.http),
        ("api", &l.api),
        ("machine-config", &l.machine_config),
        ("ingress-https", &l.ingress_https),
        ("ingress-http", &l.ingress_http),
    ] {
        let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        let shown = if list.is_empty() {
            "off".to_owned()
        } else {
            list.join(", ")
        };
        let _ = writeln!(o, "  {service:<16} {shown}");
    }

    let _ = writeln!(o, "\ndns");
    let upstreams: Vec<String> = plan
        .resolver
        .upstreams
        .iter()
        .map(ToString::to_string)
        .collect();
    let allowed: Vec<String> = plan
        .resolver
        .recursion_allowed
        .iter()
        .map(ToString::to_string)
        .collect();
    let _ = writeln!(
        o,
        "  forwards other names to {} for {}",
        if upstreams.is_empty() {
            "nobody (REFUSED)".to_owned()
        } else {
            upstreams.join(", ")
        },
        allowed.join(", ")
    );
    let rrl = plan.resolver.rate_limit;
    if rrl.responses_per_second == 0 {
        let _ = writeln!(o, "  response rate limiting off");
    } else {
        let _ = writeln!(
            o,
            "  response rate limiting: {} identical answers/s per client network (slip {}) for other clients",
            rrl.responses_per_second, rrl.slip
        );
    }
    for zone in &plan.zones {
        let _ = writeln!(o, "  zone {} (serial {})", zone.origin, zone.soa().serial);
        let width = zone.records.iter().map(|r| r.name.len()).max().unwrap_or(0);
        for r in &zone.records {
            let _ = writeln!(
                o,
                "    {:width$} {:>5} {:<5} {}",
                r.name,
                r.ttl,
                r.data.type_name(),
                r.data
            );
        }
    }

    let d = &plan.dhcp;
    // The listen section says whether DHCP runs; this one what it serves (or would).
    let _ = if plan.listen.dhcp.is_empty() {
        writeln!(o, "\ndhcp off (listen.dhcp is empty); what it would serve:")
    } else {
        writeln!(
            o,
            "\ndhcp on {}",
            plan.interface.as_deref().unwrap_or("(no interface set)")
        )
    };
    let _ = writeln!(
        o,
        "  subnet {} router {} dns {} domain {} lease {} (renew {}, rebind {})",
        d.subnet,
        d.router.map_or("none".to_owned(), |r| r.to_string()),
        d.dns_servers
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        d.domain_name,
        humantime::format_duration(d.lease_time),
        humantime::format_duration(d.renewal_time),
        humantime::format_duration(d.rebinding_time),
    );
    if !d.ntp_servers.is_empty() {
        let ntp: Vec<String> = d.ntp_servers.iter().map(ToString::to_string).collect();
        let _ = writeln!(o, "  ntp {}", ntp.join(", "));
    }
    if let Some(mtu) = d.mtu {
        let _ = writeln!(o, "  mtu {mtu}");
    }
    let _ = writeln!(o, "  search {}", d.domain_search.join(" "));
    match d.pool {
        Some(p) => {
            let _ = writeln!(o, "  pool {}-{}", p.start, p.end);
        }
        None => {
            let _ = writeln!(o, "  no pool: unknown clients get no answer");
        }
    }
    for r in &d.reservations {
        let _ = writeln!(
            o,
            "  {}  {:<15} {:<12} {}",
            r.mac, r.ip, r.host_name, r.ipxe_script_url
        );
    }

    let balance = match plan.lb.balance {
        Balance::RoundRobin => "round robin",
        Balance::LeastConnections => "least connections",
    };
    let _ = writeln!(
        o,
        "\nload balancer ({balance}, drain timeout {})",
        short_duration(plan.lb.drain_timeout)
    );
    for f in &plan.lb.frontends {
        let c = &f.check;
        let probe = match &c.probe {
            Probe::Https { port, path, .. } => format!("https GET {path} on port {port}"),
            Probe::Http { port, path } => format!("http GET {path} on port {port}"),
            Probe::Tcp => "tcp connect".to_owned(),
        };
        let listen: Vec<String> = f.listen.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            o,
            "  {} on {}: check {probe} every {}, timeout {}, rise {}, fall {}",
            f.kind.name(),
            if listen.is_empty() {
                "(off)".to_owned()
            } else {
                listen.join(", ")
            },
            short_duration(c.interval),
            short_duration(c.timeout),
            c.rise,
            c.fall
        );
        for b in &f.backends {
            let _ = writeln!(o, "    {:<12} {:<10} {}", b.name, b.role.as_str(), b.addr);
        }
    }

    let _ = writeln!(o, "\nboot");
    for b in &plan.boot {
        let _ = writeln!(
            o,
            "  {} ({}, {}) installs to {}",
            b.node, b.role, b.mac, b.install_dev
        );
        let _ = writeln!(o, "    kernel    {}", b.kernel_url);
        let _ = writeln!(o, "    initramfs {}", b.initramfs_url);
        let _ = writeln!(o, "    ignition  {}", b.ignition_url);
        let _ = writeln!(o, "    args      {}", b.kernel_args.join(" "));
        let _ = writeln!(o, "    iso       {}", b.iso_url);
        let _ = writeln!(o, "    iso args  {}", b.iso_kernel_args.join(" "));
    }
    o
}
