//! One descriptor budget for the whole process: its `RLIMIT_NOFILE`, less a reserve for what
//! is not a client's (journals, leases, markers, the admin socket, the listening sockets, health
//! checks), less what bounded outgoing work holds (DNS forwards, TFTP transfers), divided among
//! the TCP listeners so that their caps can't add up past it (issue 39).
//!
//! The division ([`divide`]) is pure: each listener asks for its connection cap ([`Kind`]), in
//! descriptors (a balanced connection holds two sockets, and HAProxy's rule of one splice pipe
//! per four connections, `tune.maxpipes`, gives it half a descriptor more); when the asks don't
//! fit, the descriptors are water-filled (max-min fair): a listener that asks for less than an
//! equal share gets all of it, the rest is split evenly among the larger ones. No address may
//! hold more than half of a listener's connections (and less where its kind says so).
//!
//! At run time each listener admits a connection through its [`Gate`]: its address's share, the
//! listener's cap, then the process's pool of descriptors, which every gate and every splice
//! pipe draws from; the pool keeps the sum bounded even after a reload added listeners whose
//! shares were divided again (running listeners keep theirs).
//!
//! The numbers: the reserve is 512 descriptors plus one per listening socket, at most half the
//! limit; the fixed asks taken off the top are each DNS server's 512 forwards in flight and
//! each TFTP listener's 64 transfers; the TCP listeners (the load balancer's frontends and the
//! router, the boot server, DNS over TCP, the API, replication) share the rest. A fixed ask is
//! held to its share too: past it, a forwarded query gets SERVFAIL at once and a TFTP request
//! silence. `serve` logs the division at start (a warning when caps are cut), and `check`
//! prints it for the unit's `LimitNOFILE` ([`UNIT_LIMIT`], about five clusters' caps in full),
//! with a warning and a hint when the listeners don't fit (`supervisor/descriptors.rs`).
//!
//! Architecture invariant: no I/O; everything held is given back when its [`Ticket`] (or pipe
//! permit) is dropped.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::per_address::{Held, PerAddress};

/// The unit's `LimitNOFILE` (systemd/okd-appliance.service, a unit test reads it): what `check`
/// divides.
pub const UNIT_LIMIT: u64 = 1_048_576;
/// Descriptors kept for what is not a client's, beyond one per listening socket.
const RESERVE: usize = 512;
/// Quarter descriptors (the unit [`divide`] counts in) per descriptor.
const QUARTERS: usize = 4;

/// What a listener (or a bounded outgoing task) serves, for its cap and its cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A load-balancer frontend: two sockets a connection, and its share of splice pipes.
    Lb,
    /// The boot server: the socket and the file it sends.
    Http,
    /// DNS over TCP: the socket and the upstream one of a forwarded query.
    DnsTcp,
    /// The HTTP API and status page: the socket and a file or event stream.
    Api,
    /// The pair's replication: the socket.
    Replication,
    /// A DNS server's forwarded queries in flight (one socket each).
    Forwards,
    /// A TFTP listener's transfers (a socket and the file each).
    Transfers,
}

impl Kind {
    /// The cap it asks for.
    pub const fn wanted(self) -> usize {
        match self {
            Kind::Lb => 20_000,
            Kind::Http => 512,
            Kind::DnsTcp | Kind::Api | Kind::Replication => 256,
            Kind::Forwards => 512,
            Kind::Transfers => 64,
        }
    }

    /// What one connection's address may hold at most (before the half-of-the-cap rule): a
    /// booting node opens a few connections to the boot server, iPXE and curl a handful; the
    /// pair's peer one per cluster and segment (so half of 256 is its most); the load
    /// balancer's clients may be behind one NAT.
    const fn per_address(self) -> usize {
        match self {
            Kind::Http | Kind::DnsTcp | Kind::Api => 32,
            Kind::Lb | Kind::Replication | Kind::Forwards | Kind::Transfers => usize::MAX,
        }
    }

    /// Quarter descriptors one connection costs in the division.
    const fn cost(self) -> usize {
        match self {
            Kind::Lb => 10,
            Kind::Http | Kind::DnsTcp | Kind::Api | Kind::Transfers => 8,
            Kind::Replication | Kind::Forwards => 4,
        }
    }

    /// Descriptors one connection takes from the pool when admitted (a balanced connection's
    /// pipes are taken when it splices: [`Budget::pipe`]).
    const fn held(self) -> u32 {
        match self {
            Kind::Replication | Kind::Forwards => 1,
            _ => 2,
        }
    }

    /// Its cap is a fixed one, taken off the top: bounded outgoing work, not a listener.
    const fn fixed(self) -> bool {
        matches!(self, Kind::Forwards | Kind::Transfers)
    }

    pub const fn name(self) -> &'static str {
        match self {
            Kind::Lb => "lb",
            Kind::Http => "http",
            Kind::DnsTcp => "dns/tcp",
            Kind::Api => "api",
            Kind::Replication => "replication",
            Kind::Forwards => "dns forwards",
            Kind::Transfers => "tftp transfers",
        }
    }
}

/// One listener's ask: what it serves, where, and for which cluster (in a host file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    pub kind: Kind,
    pub addr: SocketAddr,
    pub cluster: Option<String>,
}

/// What one listener got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub demand: Demand,
    /// Connections at once.
    pub connections: usize,
    /// Of them, one address's.
    pub per_address: usize,
}

impl Share {
    /// Whether it got all it asked for.
    pub fn whole(&self) -> bool {
        self.connections >= self.demand.kind.wanted()
    }
}

/// The process's descriptors and how they are divided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Division {
    pub limit: u64,
    /// Kept for what is not a client's.
    pub reserve: usize,
    /// Divided: `limit - reserve`.
    pub available: usize,
    /// In the order of the demands.
    pub shares: Vec<Share>,
}

impl Division {
    /// The shares cut below what they asked for.
    pub fn cut(&self) -> impl Iterator<Item = &Share> {
        self.shares.iter().filter(|s| !s.whole())
    }

    /// One line per kind and cluster: "lb (cluster a): 4 listeners, 20000 connections each".
    pub fn lines(&self) -> Vec<String> {
        let mut groups: Vec<(Kind, Option<&str>, Vec<&Share>)> = Vec::new();
        for s in &self.shares {
            let key = (s.demand.kind, s.demand.cluster.as_deref());
            match groups.iter_mut().find(|(k, c, _)| (*k, *c) == key) {
                Some((_, _, v)) => v.push(s),
                None => groups.push((key.0, key.1, vec![s])),
            }
        }
        groups
            .into_iter()
            .map(|(kind, cluster, shares)| {
                let of = cluster
                    .map(|c| format!(" (cluster {c})"))
                    .unwrap_or_default();
                let low = shares.iter().map(|s| s.connections).min().unwrap_or(0);
                let high = shares.iter().map(|s| s.connections).max().unwrap_or(0);
                let each = if low == high {
                    format!("{low}")
                } else {
                    format!("{low} to {high}")
                };
                let per = shares.iter().map(|s| s.per_address).min().unwrap_or(0);
                let address = if per < low && !kind.fixed() {
                    format!(", {per} per address")
                } else {
                    String::new()
                };
                let cut = if shares.iter().all(|s| s.whole()) {
                    String::new()
                } else {
                    format!(" (cut from {})", kind.wanted())
                };
                let n = shares.len();
                format!(
                    "{}{of}: {n} {}, {each}{cut} at once each{address}",
                    kind.name(),
                    if kind.fixed() {
                        if n == 1 { "server" } else { "servers" }
                    } else if n == 1 {
                        "listener"
                    } else {
                        "listeners"
                    },
                )
            })
            .collect()
    }
}

/// Divides `limit` descriptors among `demands`, `listening` sockets (TCP and UDP) being held
/// already; see the module's documentation.
pub fn divide(limit: u64, listening: usize, demands: Vec<Demand>) -> Division {
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    // A tiny limit (a test's, a shell's) still leaves half for clients.
    let reserve = (RESERVE + listening).min(limit_usize / 2);
    let available = limit_usize - reserve;
    // The fixed asks come off the top, each at most an equal part of what there is.
    let fixed = demands.iter().filter(|d| d.kind.fixed()).count();
    let mut quarters = available.saturating_mul(QUARTERS);
    let mut granted: Vec<usize> = vec![0; demands.len()];
    for (i, d) in demands.iter().enumerate().filter(|(_, d)| d.kind.fixed()) {
        let ask = d.kind.wanted() * d.kind.cost();
        let most = available * QUARTERS / (2 * fixed.max(1));
        granted[i] = ask.min(most);
    }
    quarters -= granted.iter().sum::<usize>();
    // Water-filling among the listeners: the smallest asks first.
    let mut order: Vec<usize> = (0..demands.len())
        .filter(|&i| !demands[i].kind.fixed())
        .collect();
    order.sort_by_key(|&i| demands[i].kind.wanted() * demands[i].kind.cost());
    let mut left = order.len();
    for i in order {
        let ask = demands[i].kind.wanted() * demands[i].kind.cost();
        let level = quarters / left;
        granted[i] = ask.min(level);
        quarters -= granted[i];
        left -= 1;
    }
    let shares = demands
        .into_iter()
        .zip(granted)
        .map(|(demand, quarters)| {
            let connections = quarters / demand.kind.cost();
            let per_address = demand.kind.per_address().min(connections.div_ceil(2));
            Share {
                demand,
                connections,
                per_address,
            }
        })
        .collect();
    Division {
        limit,
        reserve,
        available,
        shares,
    }
}

/// The process's budget at run time: the pool every gate draws from, and the listeners'
/// shares as last divided.
#[derive(Debug, Clone)]
pub struct Budget {
    pool: Arc<Semaphore>,
    shares: Arc<Mutex<HashMap<(Kind, SocketAddr), Share>>>,
}

impl Budget {
    /// The budget of `division`.
    pub fn new(division: &Division) -> Budget {
        let budget = Budget {
            pool: Arc::new(Semaphore::new(
                division.available.min(Semaphore::MAX_PERMITS),
            )),
            shares: Arc::default(),
        };
        budget.extend(division);
        budget
    }

    /// A budget as large as the unit's limit, for what runs outside `serve` (tests, fuzzing):
    /// every listener gets what it asks for.
    pub fn unbounded() -> Budget {
        Budget::new(&divide(UNIT_LIMIT * 16, 0, Vec::new()))
    }

    /// Takes the shares of `division` for the listeners it names (a reload's division of the
    /// new set: the listeners it starts get their share of it; running ones keep their gates).
    pub fn extend(&self, division: &Division) {
        let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        for s in &division.shares {
            shares.insert((s.demand.kind, s.demand.addr), s.clone());
        }
    }

    /// The gate of the `kind` listener on `addr`: its share, or what the kind asks for where
    /// the division did not name it (a listener started by a test).
    pub fn gate(&self, kind: Kind, addr: SocketAddr) -> Gate {
        let shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        let (connections, per_address) = match shares.get(&(kind, addr)) {
            Some(s) => (s.connections, s.per_address),
            None => (kind.wanted(), kind.per_address().min(kind.wanted() / 2)),
        };
        Gate {
            kind,
            connections,
            slots: Arc::new(Semaphore::new(connections)),
            per_address: PerAddress::new(per_address),
            pool: Arc::clone(&self.pool),
        }
    }

    /// The two descriptors of a splice pipe, when the pool has them (else the connection copies).
    pub fn pipe(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.pool).try_acquire_many_owned(2).ok()
    }

    /// Descriptors left in the pool.
    pub fn free(&self) -> usize {
        self.pool.available_permits()
    }
}

/// One listener's admission: its address share, its cap, the process's pool.
#[derive(Debug, Clone)]
pub struct Gate {
    kind: Kind,
    connections: usize,
    slots: Arc<Semaphore>,
    per_address: PerAddress,
    pool: Arc<Semaphore>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its address holds its share already.
    Address(usize),
    /// The listener holds its cap.
    Listener(usize),
    /// The process's descriptors are all held.
    Process,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Address(n) => write!(f, "its address holds {n} connections already"),
            Refused::Listener(n) => write!(f, "{n} connections open"),
            Refused::Process => f.write_str("the process's descriptor budget is spent"),
        }
    }
}

/// A place under a listener's cap, before its address and the pool are asked.
#[derive(Debug)]
pub struct Slot {
    slot: OwnedSemaphorePermit,
    gate: Gate,
}

/// An admitted connection's hold on its listener's cap, its address's share and its
/// descriptors, all given back when dropped.
#[derive(Debug)]
pub struct Ticket {
    _slot: OwnedSemaphorePermit,
    /// None for bounded outgoing work, which no client address holds.
    _address: Option<Held>,
    _descriptors: OwnedSemaphorePermit,
}

impl Gate {
    /// Admits a connection from `peer`, or says why not.
    pub fn admit(&self, peer: IpAddr) -> Result<Ticket, Refused> {
        let slot = Arc::clone(&self.slots)
            .try_acquire_owned()
            .map_err(|_| Refused::Listener(self.connections))?;
        self.complete(slot, peer)
    }

    /// Waits for a place under the cap (the boot server lets clients wait in the listen
    /// backlog past its cap, rather than cutting them off).
    pub async fn slot(&self) -> Slot {
        let slot = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .unwrap_or_else(|_| unreachable!("a gate's semaphore is never closed"));
        Slot {
            slot,
            gate: self.clone(),
        }
    }

    fn complete(&self, slot: OwnedSemaphorePermit, peer: IpAddr) -> Result<Ticket, Refused> {
        let address = self
            .per_address
            .admit(peer)
            .ok_or(Refused::Address(self.per_address.limit()))?;
        let descriptors = self.descriptors()?;
        Ok(Ticket {
            _slot: slot,
            _address: Some(address),
            _descriptors: descriptors,
        })
    }

    /// Takes one unit of bounded outgoing work (a forwarded query): a place under the cap and
    /// its descriptors from the pool, no address's share.
    pub fn take(&self) -> Result<Ticket, Refused> {
        let slot = Arc::clone(&self.slots)
            .try_acquire_owned()
            .map_err(|_| Refused::Listener(self.connections))?;
        Ok(Ticket {
            _slot: slot,
            _address: None,
            _descriptors: self.descriptors()?,
        })
    }

    /// The descriptors of one unit of work whose cap is kept elsewhere (a TFTP transfer, whose
    /// admission table holds [`Gate::connections`] slots and may evict from them): drawn from
    /// the process's pool only.
    pub fn descriptors(&self) -> Result<OwnedSemaphorePermit, Refused> {
        Arc::clone(&self.pool)
            .try_acquire_many_owned(self.kind.held())
            .map_err(|_| Refused::Process)
    }

    /// Its cap.
    pub fn connections(&self) -> usize {
        self.connections
    }

    /// Its share per address.
    pub fn per_address(&self) -> usize {
        self.per_address.limit()
    }
}

impl Slot {
    /// Admits the connection accepted in this slot from `peer`, or says why not.
    pub fn admit(self, peer: IpAddr) -> Result<Ticket, Refused> {
        let Slot { slot, gate } = self;
        gate.complete(slot, peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(kind: Kind, port: u16, cluster: &str) -> Demand {
        Demand {
            kind,
            addr: SocketAddr::from(([10, 0, 0, 1], port)),
            cluster: Some(cluster.to_owned()),
        }
    }

    fn cluster(name: &str, at: u16) -> Vec<Demand> {
        vec![
            demand(Kind::DnsTcp, at, name),
            demand(Kind::Http, at + 1, name),
            demand(Kind::Lb, at + 2, name),
            demand(Kind::Lb, at + 3, name),
            demand(Kind::Lb, at + 4, name),
            demand(Kind::Lb, at + 5, name),
            demand(Kind::Forwards, at + 6, name),
            demand(Kind::Transfers, at + 7, name),
        ]
    }

    /// Descriptors the division's shares can hold at once, in quarters.
    fn held(d: &Division) -> usize {
        d.shares
            .iter()
            .map(|s| s.connections * s.demand.kind.cost())
            .sum()
    }

    #[test]
    fn the_unit_limit_is_the_units() {
        let unit = include_str!("../../systemd/okd-appliance.service");
        let set: Vec<&str> = unit
            .lines()
            .filter_map(|l| l.strip_prefix("LimitNOFILE="))
            .collect();
        assert_eq!(set, [UNIT_LIMIT.to_string()]);
    }

    #[test]
    fn one_cluster_under_the_unit_limit_gets_every_cap() {
        let d = divide(UNIT_LIMIT, 12, cluster("a", 1000));
        assert_eq!(d.cut().count(), 0, "{:?}", d.lines());
        assert!(held(&d) <= d.available * QUARTERS);
        let lb = d.shares.iter().find(|s| s.demand.kind == Kind::Lb).unwrap();
        assert_eq!((lb.connections, lb.per_address), (20_000, 10_000));
        let http = d
            .shares
            .iter()
            .find(|s| s.demand.kind == Kind::Http)
            .unwrap();
        assert_eq!((http.connections, http.per_address), (512, 32));
    }

    #[test]
    fn two_clusters_are_cut_evenly_and_never_past_the_limit() {
        // 8 frontends of 20,000 at 2.5 descriptors: 400,000 > 262,144 (the unit's earlier limit).
        let mut demands = cluster("a", 1000);
        demands.extend(cluster("b", 2000));
        demands.push(Demand {
            kind: Kind::Api,
            addr: SocketAddr::from(([10, 0, 0, 1], 8443)),
            cluster: None,
        });
        let d = divide(262_144, 30, demands.clone());
        assert!(held(&d) <= d.available * QUARTERS, "{:?}", d.lines());
        let lbs: Vec<usize> = d
            .cut()
            .inspect(|s| assert_eq!(s.demand.kind, Kind::Lb))
            .map(|s| s.connections)
            .collect();
        assert_eq!(lbs.len(), 8);
        // Evenly, and nearly all of what is left after the small asks.
        assert!(lbs.iter().all(|&n| n == lbs[0]));
        assert!(lbs[0] > 12_000 && lbs[0] < 20_000, "{}", lbs[0]);
        assert_eq!(
            d.shares.iter().filter(|s| s.whole()).count(),
            d.shares.len() - 8
        );
        assert!(d.lines().iter().any(|l| l.contains("(cut from 20000)")));
        // Under today's unit, two clusters fit.
        assert_eq!(divide(UNIT_LIMIT, 30, demands).cut().count(), 0);
    }

    #[test]
    fn a_tiny_limit_keeps_half_and_no_share_passes_it() {
        let mut demands = cluster("a", 1000);
        demands.extend(cluster("b", 2000));
        let d = divide(1024, 30, demands);
        assert_eq!((d.reserve, d.available), (512, 512));
        assert!(held(&d) <= d.available * QUARTERS);
        // Everyone still gets something, and one address at most half of it.
        for s in &d.shares {
            assert!(s.connections > 0, "{s:?}");
            assert!(s.per_address <= s.connections.div_ceil(2), "{s:?}");
        }
    }

    #[tokio::test]
    async fn a_gate_refuses_past_the_address_share_the_cap_and_the_pool() {
        let addr = SocketAddr::from(([10, 0, 0, 1], 80));
        let d = divide(
            1024 + 512,
            0,
            vec![Demand {
                kind: Kind::Http,
                addr,
                cluster: None,
            }],
        );
        let budget = Budget::new(&d);
        let gate = budget.gate(Kind::Http, addr);
        assert_eq!((gate.connections(), gate.per_address()), (512, 32));
        let one = IpAddr::from([192, 0, 2, 1]);
        let mine: Vec<Ticket> = (0..32).map(|_| gate.admit(one).unwrap()).collect();
        assert_eq!(gate.admit(one).unwrap_err(), Refused::Address(32));
        // Another address still gets in; a dropped ticket gives its place back.
        let other = gate.admit(IpAddr::from([192, 0, 2, 2])).unwrap();
        drop(mine);
        assert!(gate.admit(one).is_ok());
        // The pool: what the pipes took is not there for connections.
        drop(other);
        let pipes: Vec<_> = std::iter::from_fn(|| budget.pipe()).collect();
        assert_eq!(pipes.len(), 1024 / 2);
        assert_eq!(gate.admit(one).unwrap_err(), Refused::Process);
        drop(pipes);
        assert!(gate.admit(one).is_ok());
        // The cap, whatever the addresses.
        let all: Vec<Ticket> = (0..512u32)
            .filter_map(|i| {
                gate.admit(IpAddr::from((0x0a00_0000 + i).to_be_bytes()))
                    .ok()
            })
            .collect();
        assert_eq!(all.len(), 512);
        assert_eq!(
            gate.admit(IpAddr::from([192, 0, 2, 9])).unwrap_err(),
            Refused::Listener(512)
        );
        // A slot waited for is admitted the same way.
        drop(all);
        assert!(gate.slot().await.admit(one).is_ok());
    }

    #[test]
    fn the_fixed_asks_are_held_to_their_share_and_the_pool() {
        // Under a tiny limit, each DNS server's forwards and each TFTP listener's transfers are
        // cut, and their gates hold them to it.
        let mut demands = cluster("a", 1000);
        demands.extend(cluster("b", 2000));
        let d = divide(1024, 30, demands);
        let budget = Budget::new(&d);
        let share = |kind| {
            d.shares
                .iter()
                .find(|s| s.demand.kind == kind)
                .unwrap()
                .clone()
        };
        let (forwards, transfers) = (share(Kind::Forwards), share(Kind::Transfers));
        assert!(!forwards.whole() && !transfers.whole(), "{:?}", d.lines());
        let gate = budget.gate(Kind::Forwards, forwards.demand.addr);
        assert_eq!(gate.connections(), forwards.connections);
        let held: Vec<Ticket> = std::iter::from_fn(|| gate.take().ok()).collect();
        assert_eq!(held.len(), forwards.connections);
        assert_eq!(
            gate.take().unwrap_err(),
            Refused::Listener(forwards.connections)
        );
        drop(held);
        // A transfer's descriptors come from the pool, which the forwards' took from as well.
        let tftp = budget.gate(Kind::Transfers, transfers.demand.addr);
        assert_eq!(tftp.connections(), transfers.connections);
        let before = budget.free();
        let one = tftp.descriptors().unwrap();
        assert_eq!(budget.free(), before - 2);
        let rest: Vec<_> = std::iter::from_fn(|| tftp.descriptors().ok()).collect();
        assert_eq!(gate.take().unwrap_err(), Refused::Process);
        drop((one, rest));
        assert!(gate.take().is_ok());
    }
}
