//! The `ha` section: two appliances sharing `network.appliance_ip` (and the IPv6 one) as a
//! virtual address that keepalived moves between them.

use super::*;

impl Validator<'_> {
    pub(super) fn ha(
        &mut self,
        raw: &Spanned<RawHa>,
        network: Option<&Network>,
        nodes: &[Node],
        dir: &Path,
        files: Option<(&dyn InstallFiles, Severity)>,
    ) -> Option<Ha> {
        let ha = &raw.value;
        let mut hosts = Vec::new();
        for h in &ha.hosts.value {
            let Some(ip) = self.ipv4(h, "ha host") else {
                continue;
            };
            if let Some(net) = network {
                if !net.v4.subnet.contains(&ip) {
                    self.p.error(
                        "config::ha",
                        h.referenced,
                        format!("ha host {ip} is outside the subnet {}", net.v4.subnet),
                        "not on the cluster network",
                    );
                    continue;
                }
                if ip == net.v4.appliance {
                    self.p
                        .error(
                            "config::ha",
                            h.referenced,
                            format!("ha host {ip} is network.appliance_ip, the virtual address"),
                            "the virtual address",
                        )
                        .hint("list the two hosts' own addresses; appliance_ip moves between them");
                    continue;
                }
            }
            if let Some(n) = nodes.iter().find(|n| n.ipv4 == ip) {
                self.p.error(
                    "config::ha",
                    h.referenced,
                    format!("ha host {ip} is the address of node {}", n.name),
                    "a node's address",
                );
                continue;
            }
            if hosts.contains(&ip) {
                self.p.error(
                    "config::ha",
                    h.referenced,
                    format!("ha host {ip} is listed twice"),
                    "twice",
                );
                continue;
            }
            hosts.push(ip);
        }
        if ha.hosts.value.len() != 2 {
            self.p
                .error(
                    "config::ha",
                    ha.hosts.referenced,
                    format!("ha.hosts lists {} hosts", ha.hosts.value.len()),
                    "exactly two",
                )
                .hint("the two services hosts' own addresses, the preferred one first");
        }
        if network.is_some_and(|n| n.interface.is_none()) {
            self.p
                .error(
                    "config::ha",
                    raw.referenced,
                    "ha needs network.interface: VRRP runs on it and the virtual address is added to it",
                    "here",
                )
                .hint("set network.interface to the cluster-side NIC (the same name on both hosts)");
        }
        let router_id = match &ha.router_id {
            None => Some(DEFAULT_VRRP_ROUTER_ID),
            Some(r) => match u8::try_from(r.value) {
                Ok(id) if id >= 1 => Some(id),
                _ => {
                    self.p.error(
                        "config::ha",
                        r.referenced,
                        format!("router_id {} is not a VRRP router ID (1 to 255)", r.value),
                        "out of range",
                    );
                    None
                }
            },
        };
        // One rule for `check`, `serve` and `render`: `secrets::PairKeys::read`. `serve` refuses
        // to start without a usable secret, so here a problem is an error too.
        let files = files.map(|(f, _)| (f, Severity::Error));
        let secret_file = control::secret_file(&ha.secret_file, dir, files, self.p);
        if let (Some(path), Some((files, _))) = (&secret_file, files)
            && let Err(e) = files.pair_secret(path)
        {
            self.p
                .error("config::ha", ha.secret_file.referenced, e, "not usable")
                .hint("openssl rand -hex 32 > FILE; chmod 600 FILE (the same file on both hosts)");
        }
        let hosts: [Ipv4Addr; 2] = hosts.try_into().ok()?;
        Some(Ha {
            hosts,
            router_id: router_id?,
            secret_file: secret_file?,
        })
    }
}
