//! keepalived's configuration for each host of a pair: one VRRP instance holding the virtual
//! addresses (a host file's: every cluster's, each on its cluster's interface), unicast between the two hosts, a check script that asks the local appliance
//! (`okd-appliance ha check`: DNS answering at the host's own address, and on the active host
//! every load-balancer and boot-server listener accepting), and notify scripts that tell the
//! appliance whether it is the active host.

use std::fmt::Write as _;
use std::path::Path;

use super::Rendered;
use crate::plan::Plan;

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
    let lines = |v6: bool| -> String {
        ha.addresses
            .iter()
            .filter(|a| a.ip.is_ipv6() == v6)
            .map(|a| format!("        {}/{} dev {}\n", a.ip, a.prefix, a.interface))
            .collect()
    };
    let (v4, v6) = (lines(false), lines(true));
    for (i, host) in ha.hosts.iter().enumerate() {
        let peer = ha.hosts[1 - i];
        let mut t = String::new();
        let _ = write!(
            t,
            "# keepalived.conf for {host}, rendered by okd-appliance: install as\n\
             # /etc/keepalived/keepalived.conf on that host only (mode 0600: it holds the VRRP password).\n\
             global_defs {{\n    router_id okd-appliance-{host}\n    script_user root\n    enable_script_security\n}}\n\n\
             vrrp_script okd_appliance {{\n    script \"{check}\"\n    interval 1\n    timeout 2\n    fall 1\n    rise 2\n}}\n\n\
             vrrp_instance okd_appliance {{\n    state BACKUP\n    interface {iface}\n    virtual_router_id {id}\n    priority {prio}\n    advert_int 1\n    unicast_src_ip {host}\n    unicast_peer {{\n        {peer}\n    }}\n    authentication {{\n        auth_type PASS\n        auth_pass {auth}\n    }}\n    virtual_ipaddress {{\n{v4}    }}\n",
            iface = ha.interface,
            id = ha.router_id,
            prio = ha.priority(i),
        );
        if !v6.is_empty() {
            let _ = writeln!(
                t,
                "    # VRRPv2 carries IPv4 only: the IPv6 addresses move with the instance.\n    virtual_ipaddress_excluded {{\n{v6}    }}"
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
