//! Links inside test namespaces: a `Bridge`, `Veth` pairs between two namespaces, and `Tap`
//! devices (for qemu). Each guard deletes its link on drop and keeps its namespaces alive until
//! then; deleting a namespace would also delete its links, but cleanup here is explicit.

use std::io::Write as _;

use anyhow::Result;

use crate::netns::Netns;

fn warn_on_err(what: &str, r: Result<String>) {
    if let Err(e) = r {
        let _ = writeln!(std::io::stderr(), "harness: cannot delete {what}: {e:#}");
    }
}

/// A Linux bridge inside a namespace, up, multicast snooping off (so IPv6 neighbour discovery
/// never depends on an MLD querier), STP off.
#[derive(Debug)]
pub struct Bridge {
    ns: Netns,
    name: String,
}

impl Bridge {
    /// Creates bridge `name` in `ns` and sets it up.
    pub fn create(ns: &Netns, name: &str) -> Result<Bridge> {
        ns.ip([
            "link",
            "add",
            name,
            "type",
            "bridge",
            "stp_state",
            "0",
            "mcast_snooping",
            "0",
        ])?;
        // A bridge takes the lowest MAC of its ports unless given one, so removing a port would
        // change it under the neighbours' ARP caches and cut them off for seconds.
        ns.ip(["link", "set", name, "address", "02:00:00:00:00:fe"])?;
        let bridge = Bridge {
            ns: ns.clone(),
            name: name.to_owned(),
        };
        ns.link_up(name)?;
        Ok(bridge)
    }

    /// Adds an address (IPv4 or IPv6 CIDR) to the bridge.
    pub fn add_addr(&self, cidr: &str) -> Result<()> {
        self.ns.add_addr(&self.name, cidr)
    }

    /// Makes `ifname` (a link in the bridge's namespace) a port of the bridge and sets it up.
    pub fn attach(&self, ifname: &str) -> Result<()> {
        self.ns
            .ip(["link", "set", ifname, "master", &self.name, "up"])
            .map(drop)
    }

    /// The bridge's interface name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace holding the bridge.
    #[must_use]
    pub fn netns(&self) -> &Netns {
        &self.ns
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if self.ns.has_link(&self.name) {
            warn_on_err(
                &format!("bridge {} in {}", self.name, self.ns.name()),
                self.ns.ip(["link", "del", &self.name]),
            );
        }
    }
}

/// A veth pair: end `a_if` in namespace `a`, end `b_if` in namespace `b`, both up. Deleting
/// either end deletes the pair.
#[derive(Debug)]
pub struct Veth {
    a: Netns,
    a_if: String,
    b: Netns,
    b_if: String,
}

impl Veth {
    /// Creates the pair (`ip -n A link add A_IF type veth peer name B_IF netns B`) and sets both
    /// ends up.
    pub fn create(a: &Netns, a_if: &str, b: &Netns, b_if: &str) -> Result<Veth> {
        a.ip([
            "link",
            "add",
            a_if,
            "type",
            "veth",
            "peer",
            "name",
            b_if,
            "netns",
            b.name(),
        ])?;
        let veth = Veth {
            a: a.clone(),
            a_if: a_if.to_owned(),
            b: b.clone(),
            b_if: b_if.to_owned(),
        };
        a.link_up(a_if)?;
        b.link_up(b_if)?;
        Ok(veth)
    }

    /// Namespace of end A.
    #[must_use]
    pub fn a(&self) -> &Netns {
        &self.a
    }

    /// Interface name of end A.
    #[must_use]
    pub fn a_if(&self) -> &str {
        &self.a_if
    }

    /// Namespace of end B.
    #[must_use]
    pub fn b(&self) -> &Netns {
        &self.b
    }

    /// Interface name of end B.
    #[must_use]
    pub fn b_if(&self) -> &str {
        &self.b_if
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        if self.a.has_link(&self.a_if) {
            warn_on_err(
                &format!("veth {} in {}", self.a_if, self.a.name()),
                self.a.ip(["link", "del", &self.a_if]),
            );
        }
    }
}

/// A persistent tap device inside a namespace (`ip tuntap add dev NAME mode tap`), up, for
/// `qemu -netdev tap,ifname=NAME,script=no,downscript=no` run in the same namespace.
#[derive(Debug)]
pub struct Tap {
    ns: Netns,
    name: String,
}

impl Tap {
    /// Creates tap `name` in `ns` and sets it up (it has no carrier until qemu opens it).
    pub fn create(ns: &Netns, name: &str) -> Result<Tap> {
        ns.ip(["tuntap", "add", "dev", name, "mode", "tap"])?;
        let tap = Tap {
            ns: ns.clone(),
            name: name.to_owned(),
        };
        ns.link_up(name)?;
        Ok(tap)
    }

    /// Creates tap `name` in the bridge's namespace as a port of `bridge`.
    pub fn create_on(bridge: &Bridge, name: &str) -> Result<Tap> {
        let tap = Tap::create(bridge.netns(), name)?;
        bridge.attach(name)?;
        Ok(tap)
    }

    /// The tap's interface name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace holding the tap.
    #[must_use]
    pub fn netns(&self) -> &Netns {
        &self.ns
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        if self.ns.has_link(&self.name) {
            warn_on_err(
                &format!("tap {} in {}", self.name, self.ns.name()),
                self.ns
                    .ip(["tuntap", "del", "dev", &self.name, "mode", "tap"]),
            );
        }
    }
}
