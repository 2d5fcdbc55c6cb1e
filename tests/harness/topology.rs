//! `Topology`: one "services" namespace with a bridge carrying the appliance's addresses, and
//! "node" namespaces joined to that bridge by veth pairs (plus tap devices for VMs).
//!
//! ```text
//!   services ns:  br0 (10.99.0.1/24, fd99::1/64) ── port NODE-NS-NAME ── veth ── eth0 : node ns
//!                     └── tap (qemu)
//! ```
//!
//! Nothing here is routed anywhere: the namespaces have no default route and no link to the
//! host's interfaces.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Deref;

use anyhow::{Context as _, Result, bail};

use crate::link::{Bridge, Tap, Veth};
use crate::netns::Netns;

/// The bridge's name inside the services namespace.
pub const BRIDGE_NAME: &str = "br0";
/// The node side's interface name inside every node namespace.
pub const NODE_IFACE: &str = "eth0";
/// Default bridge IPv4 address.
pub const DEFAULT_BRIDGE4: &str = "10.99.0.1/24";
/// Default bridge IPv6 address.
pub const DEFAULT_BRIDGE6: &str = "fd99::1/64";

/// Parses the address part of `ADDR/LEN`.
fn cidr_addr(cidr: &str) -> Result<IpAddr> {
    let (addr, len) = cidr
        .split_once('/')
        .with_context(|| format!("{cidr:?} is not ADDR/PREFIXLEN"))?;
    len.parse::<u8>()
        .with_context(|| format!("bad prefix length in {cidr:?}"))?;
    addr.parse()
        .with_context(|| format!("bad address in {cidr:?}"))
}

fn parse_cidr4(cidr: &str) -> Result<Ipv4Addr> {
    match cidr_addr(cidr)? {
        IpAddr::V4(a) => Ok(a),
        IpAddr::V6(_) => bail!("{cidr:?} is not an IPv4 CIDR"),
    }
}

fn parse_cidr6(cidr: &str) -> Result<Ipv6Addr> {
    match cidr_addr(cidr)? {
        IpAddr::V6(a) => Ok(a),
        IpAddr::V4(_) => bail!("{cidr:?} is not an IPv6 CIDR"),
    }
}

/// The services namespace and its bridge. Drop order: taps, bridge, then the namespace (once
/// every [`Node`] is gone too, since nodes keep it alive through their veth).
#[derive(Debug)]
pub struct Topology {
    bridge: Bridge,
    services: Netns,
    addr4: Ipv4Addr,
    addr6: Option<Ipv6Addr>,
}

impl Topology {
    /// A services namespace named `PREFIX-PID-N` with bridge `br0` at 10.99.0.1/24 and
    /// fd99::1/64.
    pub fn new(prefix: &str) -> Result<Topology> {
        Topology::with_addrs(prefix, DEFAULT_BRIDGE4, Some(DEFAULT_BRIDGE6))
    }

    /// Like [`Topology::new`] with the bridge's addresses given (`"10.98.0.1/24"`,
    /// `Some("fd98::1/64")`).
    pub fn with_addrs(prefix: &str, bridge4: &str, bridge6: Option<&str>) -> Result<Topology> {
        let addr4 = parse_cidr4(bridge4)?;
        let addr6 = bridge6.map(parse_cidr6).transpose()?;
        let services = Netns::new(prefix)?;
        let bridge = Bridge::create(&services, BRIDGE_NAME)?;
        bridge.add_addr(bridge4)?;
        if let Some(c6) = bridge6 {
            bridge.add_addr(c6)?;
        }
        Ok(Topology {
            bridge,
            services,
            addr4,
            addr6,
        })
    }

    /// The services namespace (run the appliance here).
    #[must_use]
    pub fn services(&self) -> &Netns {
        &self.services
    }

    /// The bridge in the services namespace.
    #[must_use]
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }

    /// The bridge's IPv4 address.
    #[must_use]
    pub fn addr4(&self) -> Ipv4Addr {
        self.addr4
    }

    /// The bridge's IPv6 address, if it has one.
    #[must_use]
    pub fn addr6(&self) -> Option<Ipv6Addr> {
        self.addr6
    }

    /// A node namespace (`NAME-PID-N`, NAME up to 4 characters) whose `eth0` is joined to the
    /// bridge and carries `cidr4` and optionally `cidr6`.
    pub fn add_node(&self, name: &str, cidr4: &str, cidr6: Option<&str>) -> Result<Node> {
        let addr4 = parse_cidr4(cidr4)?;
        let addr6 = cidr6.map(parse_cidr6).transpose()?;
        let node = self.add_bare_node(name)?;
        node.add_addr(NODE_IFACE, cidr4)?;
        if let Some(c6) = cidr6 {
            node.add_addr(NODE_IFACE, c6)?;
        }
        Ok(Node {
            addr4: Some(addr4),
            addr6,
            ..node
        })
    }

    /// A node namespace joined to the bridge with no address on `eth0` (for DHCP clients).
    pub fn add_bare_node(&self, name: &str) -> Result<Node> {
        let ns = Netns::new(name)?;
        // The services-side port reuses the node namespace's unique name (<= 15 characters).
        let port = ns.name().to_owned();
        let veth = Veth::create(&ns, NODE_IFACE, &self.services, &port)?;
        self.bridge.attach(&port)?;
        Ok(Node {
            veth,
            ns,
            addr4: None,
            addr6: None,
        })
    }

    /// A tap device `name` in the services namespace, a port of the bridge.
    pub fn add_tap(&self, name: &str) -> Result<Tap> {
        Tap::create_on(&self.bridge, name)
    }
}

/// A node namespace joined to the topology's bridge. Derefs to its [`Netns`].
#[derive(Debug)]
pub struct Node {
    veth: Veth,
    ns: Netns,
    addr4: Option<Ipv4Addr>,
    addr6: Option<Ipv6Addr>,
}

impl Node {
    /// The node's namespace.
    #[must_use]
    pub fn netns(&self) -> &Netns {
        &self.ns
    }

    /// The node's interface (`eth0`).
    #[must_use]
    pub fn iface(&self) -> &str {
        self.veth.a_if()
    }

    /// The bridge port for this node in the services namespace.
    #[must_use]
    pub fn port(&self) -> &str {
        self.veth.b_if()
    }

    /// The node's IPv4 address (`None` for a bare node).
    #[must_use]
    pub fn addr4(&self) -> Option<Ipv4Addr> {
        self.addr4
    }

    /// The node's IPv6 address, if it was given one.
    #[must_use]
    pub fn addr6(&self) -> Option<Ipv6Addr> {
        self.addr6
    }

    /// The MAC address of the node's `eth0` (`aa:bb:cc:dd:ee:ff`).
    pub fn mac(&self) -> Result<String> {
        let out = self.ns.ip(["-o", "link", "show", "dev", self.iface()])?;
        out.split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .map(str::to_owned)
            .with_context(|| format!("no link/ether in {out:?}"))
    }

    /// Sets the MAC address of `eth0` (for DHCP reservations).
    pub fn set_mac(&self, mac: &str) -> Result<()> {
        self.ns
            .ip(["link", "set", "dev", self.iface(), "address", mac])
            .map(drop)
    }
}

impl Deref for Node {
    type Target = Netns;

    fn deref(&self) -> &Netns {
        &self.ns
    }
}
