//! keepalived's configuration for each host of a pair: one VRRP instance holding the virtual
//! addresses (a host file's: every cluster's, each on its cluster's interface), unicast
//! between the two hosts, a check script that asks the local appliance
//! (`okd-appliance ha check`: DNS answering at the host's own address, and on the active host
//! every load-balancer and boot-server listener accepting), and notify scripts that tell the
//! appliance whether it is the active host. The file holds the VRRP password (PASS
//! authentication, 8 characters derived from the pair's secret by `secrets::PairKeys`), so it is
//! written 0600; the hooks name the binary and the state directory by absolute paths. Up to 20
//! IPv4 addresses are advertised on VRRP's interface, the rest move unadvertised
//! (`virtual_ipaddress_excluded`), and every other address's interface is tracked with weight
//! -60 (150 - 60 < 100: a cluster link down on the preferred host moves everything to its peer;
//! down on both, the order stays).

use std::fmt::Write as _;
use std::path::Path;

use super::Rendered;
use crate::plan::Plan;
use crate::plan::ha::VirtualAddress;

/// The IPv4 addresses a VRRPv2 advert carries at most.
const ADVERTISED: usize = 20;
/// What a cluster interface that is down takes off a host's VRRP priority: more than the
/// preferred host's lead (150 against 100), less than it when both hosts lose that link.
const TRACK_WEIGHT: u8 = 60;

/// `binary` and `state_dir` as the scripts will name them (absolute); `auth` the VRRP password
/// (8 characters, all VRRP's PASS authentication carries; derived from the pair's secret apart
/// from the replication key, since VRRP sends it in cleartext: `secrets::PairKeys`).
pub fn render(
    plan: &Plan,
    binary: &Path,
    state_dir: &Path,
    auth: &str,
) -> Result<Vec<Rendered>, String> {
    let ha = plan
        .ha
        .as_ref()
        .ok_or("the config has no ha section: keepalived is for a pair of appliances")?;
    let cli = |action: &str| {
        format!(
            "{} ha {action} --state-dir {}",
            binary.display(),
            state_dir.display()
        )
    };
    let check = cli("check");
    let (active, standby) = (cli("notify active"), cli("notify standby"));
    let auth: String = auth.chars().take(8).collect();
    let mut files = Vec::new();
    // VRRPv2 adverts carry up to 20 IPv4 addresses: those on VRRP's interface go there, every
    // other address moves with the instance unadvertised (keepalived treats both the same).
    let (mut advertised, mut excluded): (Vec<&VirtualAddress>, Vec<&VirtualAddress>) =
        (Vec::new(), Vec::new());
    for a in &ha.addresses {
        if a.ip.is_ipv4() && a.interface == ha.interface && advertised.len() < ADVERTISED {
            advertised.push(a);
        } else {
            excluded.push(a);
        }
    }
    let lines = |of: &[&VirtualAddress]| -> String {
        of.iter()
            .map(|a| format!("        {}/{} dev {}\n", a.ip, a.prefix, a.interface))
            .collect()
    };
    let (advertised_lines, excluded_lines) = (lines(&advertised), lines(&excluded));
    let only_v6 = excluded.iter().all(|a| a.ip.is_ipv6());
    // Every other interface the addresses are on: its link down on one host lowers that host's
    // priority below the peer's (150 - 60 < 100), so the addresses move to the host that has
    // every link; down on both, the preferred host keeps them.
    let mut tracked: Vec<&str> = Vec::new();
    for a in &ha.addresses {
        if a.interface != ha.interface && !tracked.contains(&a.interface.as_str()) {
            tracked.push(&a.interface);
        }
    }
    for (i, host) in ha.hosts.iter().enumerate() {
        let peer = ha.hosts[1 - i];
        let mut t = String::new();
        let _ = write!(
            t,
            "# keepalived.conf for {host}, rendered by okd-appliance: install as\n\
             # /etc/keepalived/keepalived.conf on that host only (mode 0600: it holds the VRRP password).\n\
             global_defs {{\n    router_id okd-appliance-{host}\n    script_user root\n    enable_script_security\n}}\n\n\
             vrrp_script okd_appliance {{\n    script \"{check}\"\n    interval 1\n    timeout 2\n    fall 1\n    rise 2\n}}\n\n\
             vrrp_instance okd_appliance {{\n    state BACKUP\n    interface {iface}\n    virtual_router_id {id}\n    priority {prio}\n    advert_int 1\n    unicast_src_ip {host}\n    unicast_peer {{\n        {peer}\n    }}\n    authentication {{\n        auth_type PASS\n        auth_pass {auth}\n    }}\n    virtual_ipaddress {{\n{advertised_lines}    }}\n",
            iface = ha.interface,
            id = ha.router_id,
            prio = ha.priority(i),
        );
        if !excluded_lines.is_empty() {
            let why = if only_v6 {
                "VRRPv2 carries IPv4 only: the IPv6 addresses move with the instance."
            } else {
                "Not in the adverts (VRRPv2 carries IPv4 on its interface, 20 at most): these move with the instance all the same."
            };
            let _ = writeln!(
                t,
                "    # {why}\n    virtual_ipaddress_excluded {{\n{excluded_lines}    }}"
            );
        }
        if !tracked.is_empty() {
            let each: String = tracked
                .iter()
                .map(|i| format!("        {i} weight -{TRACK_WEIGHT}\n"))
                .collect();
            let _ = writeln!(
                t,
                "    # A cluster interface down here lowers this host below its peer.\n    track_interface {{\n{each}    }}"
            );
        }
        let _ = write!(
            t,
            "    track_script {{\n        okd_appliance\n    }}\n    notify_master \"{active}\"\n    notify_backup \"{standby}\"\n    notify_fault \"{standby}\"\n    notify_stop \"{standby}\"\n}}\n"
        );
        files.push(Rendered {
            file_name: format!("keepalived-{host}.conf"),
            text: t,
        });
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config;

    /// A pair's plan whose virtual addresses are `addresses` (`ip/prefix dev interface`).
    fn plan(addresses: &[String]) -> Plan {
        let text = "version: 1\ncluster: { name: okd, base_domain: lab.example.com }\n\
                    network: { interface: ens19, subnet: 10.0.0.0/24, appliance_ip: 10.0.0.10 }\n\
                    nodes:\n  - { name: master-0, role: master, mac: \"52:54:00:00:00:02\", ip: 10.0.0.2 }\n\
                    install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }\n\
                    ha: { hosts: [10.0.0.3, 10.0.0.4], secret_file: ha-secret }\n";
        let loaded = config::parse(text, "okd.yml", Path::new("."), config::InstallCheck::Skip)
            .unwrap_or_else(|e| panic!("{}", e.render(config::RenderStyle::Plain)));
        let mut plan = Plan::derive(&loaded.config, 1);
        let ha = plan.ha.as_mut().unwrap();
        ha.addresses = addresses
            .iter()
            .map(|a| {
                let (net, interface) = a.split_once(" dev ").unwrap();
                let (ip, prefix) = net.split_once('/').unwrap();
                VirtualAddress {
                    ip: ip.parse().unwrap(),
                    prefix: prefix.parse().unwrap(),
                    interface: interface.into(),
                }
            })
            .collect();
        plan
    }

    fn block<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        let Some(start) = text.find(&format!("    {name} {{\n")) else {
            return Vec::new();
        };
        text[start..]
            .lines()
            .skip(1)
            .take_while(|l| *l != "    }")
            .map(str::trim)
            .collect()
    }

    #[test]
    fn addresses_off_vrrps_interface_move_unadvertised_and_their_links_are_tracked() {
        // 21 addresses on VRRP's interface, one on a VLAN, one IPv6.
        let mut addresses: Vec<String> = (1..=21)
            .map(|i| format!("10.0.0.{i}/24 dev ens19"))
            .collect();
        addresses.push("10.0.20.1/24 dev ens19.20".into());
        addresses.push("fd00::1/64 dev ens19".into());
        let files = render(
            &plan(&addresses),
            Path::new("/bin/okd-appliance"),
            Path::new("/var/lib/okd-appliance"),
            "password",
        )
        .unwrap();
        let text = &files[0].text;
        let advertised = block(text, "virtual_ipaddress");
        assert_eq!(advertised.len(), ADVERTISED, "{text}");
        assert_eq!(advertised[0], "10.0.0.1/24 dev ens19");
        assert_eq!(
            block(text, "virtual_ipaddress_excluded"),
            [
                "10.0.0.21/24 dev ens19",
                "10.0.20.1/24 dev ens19.20",
                "fd00::1/64 dev ens19"
            ]
        );
        assert_eq!(block(text, "track_interface"), ["ens19.20 weight -60"]);
        // A cluster file's pair: one address, nothing tracked, no exclusion.
        let files = render(
            &plan(&["10.0.0.10/24 dev ens19".into()]),
            Path::new("/bin/okd-appliance"),
            Path::new("/var/lib/okd-appliance"),
            "password",
        )
        .unwrap();
        let text = &files[1].text;
        assert_eq!(block(text, "virtual_ipaddress"), ["10.0.0.10/24 dev ens19"]);
        assert!(
            block(text, "virtual_ipaddress_excluded").is_empty(),
            "{text}"
        );
        assert!(block(text, "track_interface").is_empty(), "{text}");
        // Losing one tracked link takes the preferred host below the other; both losing it
        // leaves the order as it was.
        let ha = plan(&[]).ha.unwrap();
        let (first, second) = (ha.priority(0), ha.priority(1));
        assert!(first - TRACK_WEIGHT < second && first - TRACK_WEIGHT > second - TRACK_WEIGHT);
    }
}
