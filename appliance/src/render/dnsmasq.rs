//! The dnsmasq configuration that serves the same DNS and DHCP as the plan, as closely as
//! dnsmasq can: it has no zone apex records of its own and its `address=` also answers for the
//! wildcard's parent name, which the comments in the output point out.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use crate::plan::Plan;
use crate::records::RecordData;

pub(super) fn render(plan: &Plan) -> String {
    let mut o = String::new();
    let domain = &plan.cluster_domain;
    let _ = writeln!(
        o,
        "# dnsmasq equivalent of the okd-appliance plan for {domain}"
    );
    let _ = writeln!(o, "\n# DNS");
    let _ = writeln!(o, "no-resolv\nno-hosts\nbind-interfaces\ndomain-needed");
    if let Some(port) = plan.listen.dns.first().map(SocketAddr::port) {
        let _ = writeln!(o, "port={port}");
        let mut seen = Vec::new();
        for addr in &plan.listen.dns {
            if !seen.contains(&addr.ip()) {
                seen.push(addr.ip());
                let _ = writeln!(o, "listen-address={}", addr.ip());
            }
        }
    } else {
        let _ = writeln!(o, "port=0");
    }
    // dnsmasq answers its own records with TTL 0 unless told otherwise.
    let ttl = plan.zones[0].records.first().map_or(0, |r| r.ttl);
    let _ = writeln!(o, "local-ttl={ttl}");
    for upstream in &plan.resolver.upstreams {
        let _ = writeln!(o, "server={}#{}", upstream.ip(), upstream.port());
    }
    for zone in &plan.zones {
        // Answer these zones from local data only; never forward them.
        let _ = writeln!(o, "local=/{}/", zone.origin.trim_end_matches('.'));
    }
    let forward = &plan.zones[0];
    let mut hosts: Vec<(String, Vec<IpAddr>)> = Vec::new();
    for r in &forward.records {
        let name = r.name.trim_end_matches('.').to_owned();
        let ip = match &r.data {
            RecordData::A(ip) => IpAddr::V4(*ip),
            RecordData::Aaaa(ip) => IpAddr::V6(*ip),
            RecordData::Cname(target) => {
                let _ = writeln!(o, "cname={name},{}", target.trim_end_matches('.'));
                continue;
            }
            RecordData::Txt(texts) => {
                let quoted: Vec<String> = texts
                    .iter()
                    .map(|t| format!("\"{}\"", t.replace('\\', "\\\\").replace('"', "\\\"")))
                    .collect();
                let _ = writeln!(o, "txt-record={name},{}", quoted.join(","));
                continue;
            }
            RecordData::Mx {
                preference,
                exchange,
            } => {
                let _ = writeln!(
                    o,
                    "mx-host={name},{},{preference}",
                    exchange.trim_end_matches('.')
                );
                continue;
            }
            RecordData::Srv {
                priority,
                weight,
                port,
                target,
            } => {
                let _ = writeln!(
                    o,
                    "srv-host={name},{},{port},{priority},{weight}",
                    target.trim_end_matches('.')
                );
                continue;
            }
            RecordData::Soa(_) | RecordData::Ns(_) | RecordData::Ptr(_) => continue,
        };
        match hosts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, ips)) => ips.push(ip),
            None => hosts.push((name, vec![ip])),
        }
    }
    // host-record also publishes PTRs: only for the names the plan's reverse zones point at.
    let mut with_ptr: Vec<String> = vec![format!("api.{domain}"), format!("api-int.{domain}")];
    with_ptr.extend(
        plan.dhcp
            .reservations
            .iter()
            .map(|r| format!("{}.{domain}", r.host_name)),
    );
    for (name, ips) in &hosts {
        let list: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
        if let Some(parent) = name.strip_prefix("*.") {
            let _ = writeln!(o, "# dnsmasq's address= also answers for {parent} itself");
            for ip in ips {
                let _ = writeln!(o, "address=/{parent}/{ip}");
            }
        } else if with_ptr.contains(name) {
            let _ = writeln!(o, "host-record={name},{}", list.join(","));
        } else {
            // No PTR in the plan; dnsmasq's address= also answers for names below this one.
            for ip in ips {
                let _ = writeln!(o, "address=/{name}/{ip}");
            }
        }
    }

    if plan.listen.dhcp.is_empty() {
        return o;
    }
    let d = &plan.dhcp;
    let _ = writeln!(o, "\n# DHCP");
    if let Some(interface) = &plan.interface {
        let _ = writeln!(o, "interface={interface}");
    }
    let server_port = plan.listen.dhcp.first().map_or(67, SocketAddr::port);
    if server_port != 67 {
        let _ = writeln!(
            o,
            "dhcp-alternate-port={server_port},{}",
            server_port.saturating_add(1)
        );
    }
    let lease = super::short_duration(d.lease_time);
    let mask = d.subnet.netmask();
    match d.pool {
        Some(pool) => {
            let _ = writeln!(o, "dhcp-range={},{},{mask},{lease}", pool.start, pool.end);
        }
        None => {
            let _ = writeln!(o, "dhcp-range={},static,{mask},{lease}", d.subnet.network());
        }
    }
    let _ = writeln!(o, "dhcp-authoritative");
    if let Some(router) = d.router {
        let _ = writeln!(o, "dhcp-option=option:router,{router}");
    }
    let dns: Vec<String> = d.dns_servers.iter().map(ToString::to_string).collect();
    let _ = writeln!(o, "dhcp-option=option:dns-server,{}", dns.join(","));
    let _ = writeln!(o, "dhcp-option=option:domain-name,{}", d.domain_name);
    let _ = writeln!(
        o,
        "dhcp-option=option:domain-search,{}",
        d.domain_search.join(",")
    );
    if !d.ntp_servers.is_empty() {
        let ntp: Vec<String> = d.ntp_servers.iter().map(ToString::to_string).collect();
        let _ = writeln!(o, "dhcp-option=option:ntp-server,{}", ntp.join(","));
    }
    if let Some(mtu) = d.mtu {
        let _ = writeln!(o, "dhcp-option=option:mtu,{mtu}");
    }
    let _ = writeln!(o, "dhcp-userclass=set:ipxe,iPXE");
    if !plan.listen.tftp.is_empty() {
        // PXE firmware that is not iPXE yet chainloads it over TFTP, as the appliance does.
        let _ = writeln!(
            o,
            "enable-tftp\ntftp-root={}",
            plan.files.ipxe_dir.display()
        );
        let _ = writeln!(
            o,
            "dhcp-match=set:efi,option:client-arch,7\ndhcp-match=set:efi,option:client-arch,9"
        );
        let _ = writeln!(
            o,
            "dhcp-boot=tag:!ipxe,tag:efi,snponly.efi\ndhcp-boot=tag:!ipxe,tag:!efi,undionly.kpxe"
        );
    }
    for r in &d.reservations {
        let _ = writeln!(
            o,
            "dhcp-host={},set:node-{},{},{},{lease}",
            r.mac, r.host_name, r.ip, r.host_name
        );
        let _ = writeln!(
            o,
            "dhcp-boot=tag:ipxe,tag:node-{},{}",
            r.host_name, r.ipxe_script_url
        );
    }
    o
}
