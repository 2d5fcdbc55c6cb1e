//! The `nodes` list: names, roles, MAC addresses, node addresses inside the subnet and off the
//! addresses the appliance and the pool use, install devices and kernel arguments.

use super::*;

impl Validator<'_> {
    /// Every node's name fits in a domain name once the cluster domain is appended.
    pub(super) fn node_name_lengths(&mut self, raw: &Spanned<Vec<RawNode>>, domain: &str) {
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

    pub(super) fn nodes(
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
            1 if first_bootstrap.is_none()
                && let Some(worker) = nodes.iter().find(|n| n.role == Role::Worker) =>
            {
                // The appliance installs one master alone as a single-node cluster and
                // anything else as an ordinary install, which boots a bootstrap node. It is
                // not openshift-install that refuses this: `create single-node-ignition-config`
                // checks only `controlPlane.replicas == 1` and the installation disk
                // (openshift/installer pkg/asset/ignition/bootstrap/bootstrapinplace.go,
                // `verifyBootstrapInPlace`); the compute-replica refusal is the agent-based
                // installer's (pkg/asset/agent/installconfig.go, "Total number of
                // compute replicas must be 0 when controlPlane.replicas is 1"). Fine for an
                // installed cluster whose bootstrap node was removed.
                let worker_at = raw
                    .value
                    .iter()
                    .find(|n| n.name.value == worker.name)
                    .map_or(raw.referenced, |n| n.role.referenced);
                self.p
                    .warning(
                        "config::single-master-with-workers",
                        worker_at,
                        "one master with workers and no bootstrap node can't be installed",
                        "a worker beside the only master",
                    )
                    .also(masters[0], "the only master")
                    .hint("the appliance installs a single-node cluster only as one master alone (bootstrap-in-place), and anything larger as an ordinary install with a bootstrap node: add a `role: bootstrap` node, or list the master alone and add the workers (booting worker.ign) once it is installed. An installed cluster whose bootstrap node was removed can ignore this");
            }
            _ => {}
        }
        nodes
    }

    /// A dual-stack node gets its IPv6 address from `ip=` arguments the plan adds
    /// (`plan::boot::ipv6_kernel_args`), unless the operator's kernel arguments have an `ip=`
    /// of their own: then the operator's network configuration stands alone, and the node's
    /// IPv6 address is theirs to give. Said once for `install.kernel_args`, once per node for
    /// its own.
    pub(super) fn own_ip_args(&mut self, raw: &RawConfig, config: &Config) {
        let Some(v6) = &config.network.v6 else {
            return;
        };
        let dual: Vec<&Node> = config.nodes.iter().filter(|n| n.ipv6.is_some()).collect();
        let first_ip = |args: &[Text]| args.iter().find(|a| is_ip_arg(&a.value)).cloned();
        let hint = |v6: &Ipv6Network| {
            let gw = v6.gateway.map(|g| format!("[{g}]")).unwrap_or_default();
            format!(
                "give each node its IPv6 address in your own arguments (`ip=[ADDR]::{gw}:{}:NAME:MAC:none`, \
                 then `ip=MAC:dhcp`, MAC hyphenated), or remove yours and okd-appliance adds them",
                v6.subnet.prefix_len()
            )
        };
        if let Some(arg) = first_ip(&raw.install.value.kernel_args) {
            if !dual.is_empty() {
                self.p
                    .warning(
                        "config::ip-arg",
                        arg.referenced,
                        format!(
                            "`{}` in install.kernel_args: okd-appliance adds no `ip=` for any node, \
                             so no node's IPv6 address is set by it",
                            arg.value
                        ),
                        "network set here",
                    )
                    .hint(hint(v6));
            }
            return;
        }
        for node in dual {
            let Some(arg) = raw
                .nodes
                .value
                .iter()
                .find(|r| r.name.value == node.name)
                .and_then(|r| first_ip(&r.kernel_args))
            else {
                continue;
            };
            self.p
                .warning(
                    "config::ip-arg",
                    arg.referenced,
                    format!(
                        "`{}` in the kernel_args of {}: okd-appliance adds no `ip=` for it, so its \
                         IPv6 address {} is not set by okd-appliance",
                        arg.value,
                        node.name,
                        node.ipv6.map(|a| a.to_string()).unwrap_or_default()
                    ),
                    "network set here",
                )
                .hint(hint(v6));
        }
    }

    pub(super) fn node_name(&mut self, raw: &Text, legacy_etcd: bool) -> Option<String> {
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

    pub(super) fn role(&mut self, raw: &Text) -> Option<Role> {
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

    pub(super) fn mac(&mut self, raw: &Text) -> Option<MacAddr> {
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

    pub(super) fn node_ipv4(&mut self, raw: &Text, space: &AddressSpace) -> Option<Ipv4Addr> {
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

    pub(super) fn node_ipv6(&mut self, raw: &Text, space: &AddressSpace) -> Option<Ipv6Addr> {
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

    pub(super) fn install_dev(&mut self, raw: &Text) -> Option<String> {
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

    pub(super) fn kernel_args(&mut self, raw: &[Text]) -> Option<Vec<String>> {
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
}

pub(super) fn parse_role(s: &str) -> Option<Role> {
    match s {
        "bootstrap" => Some(Role::Bootstrap),
        "master" => Some(Role::Master),
        "worker" => Some(Role::Worker),
        _ => None,
    }
}
