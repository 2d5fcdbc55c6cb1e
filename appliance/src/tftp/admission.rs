//! Which read requests get a transfer. A TFTP request costs the sender one datagram and can be
//! spoofed, while a transfer holds a slot until its client answers or the retries run out; so
//! a flood must not be able to keep real clients (PXE firmware) out:
//!
//! - at most `per_client` transfers per client address; a request repeated byte for byte from
//!   the same address and port while its transfer runs is a retransmission, not a new
//!   transfer, while a different one from there replaces the running transfer (PXE firmware
//!   asks for the size, aborts with an ERROR and asks again from the same port, and its new
//!   request may overtake that ERROR);
//! - when every slot is taken, a transfer whose client has never acknowledged anything gives
//!   way to the new request if its address holds at least two transfers more than the
//!   newcomer's (so twenty flooding addresses can't starve a twenty-first), or if it has waited
//!   for its first acknowledgement longer than `patience` (a real client answers within a
//!   round trip). The most crowded address loses first, then the oldest transfer;
//! - a transfer whose client answered is never evicted: when those fill every slot, the
//!   request is turned away.
//!
//! Architecture invariant: no I/O and no clock of its own (the caller passes the time). A
//! transfer's slot is freed when its [`Ticket`] is dropped, or at once when it is evicted (its
//! task then sees [`Ticket::evicted`] and stops).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// The transfer table shared by one listener's tasks.
#[derive(Debug)]
pub struct Admission {
    max: usize,
    per_client: usize,
    patience: Duration,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    slots: HashMap<u64, Slot>,
    /// Transfers per client address and port, and per address: every request is checked
    /// against them, so under a flood they must not cost a walk over the slots.
    by_client: HashMap<SocketAddr, u64>,
    per_address: HashMap<IpAddr, usize>,
    /// Admission order: a higher id was admitted later.
    next_id: u64,
}

impl Table {
    fn held_by(&self, ip: IpAddr) -> usize {
        self.per_address.get(&ip).copied().unwrap_or(0)
    }

    fn remove(&mut self, id: u64) -> Option<Slot> {
        let slot = self.slots.remove(&id)?;
        self.by_client.remove(&slot.client);
        if let Some(n) = self.per_address.get_mut(&slot.client.ip()) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&slot.client.ip());
            }
        }
        Some(slot)
    }
}

#[derive(Debug)]
struct Slot {
    client: SocketAddr,
    /// The request as received, to tell a retransmission from a new request.
    request: Box<[u8]>,
    admitted: Instant,
    /// The client acknowledged at least one packet: it is real.
    answered: bool,
    evict: CancellationToken,
}

/// What became of a read request.
#[derive(Debug)]
pub enum Admit {
    /// A slot for the transfer; dropping the ticket frees it.
    Start(Ticket),
    /// The same client address and port has a transfer running for this very request: this is
    /// its retransmission.
    Duplicate,
    /// The client address has `per_client` transfers running.
    ClientLimit,
    /// Every slot is taken by a transfer that may not be evicted for this request.
    Busy,
}

/// One admitted transfer's hold on its slot.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    id: u64,
    evict: CancellationToken,
}

impl Admission {
    /// `max` transfers, `per_client` of them per client address; an unanswered transfer may be
    /// evicted by anyone after `patience`.
    pub fn new(max: usize, per_client: usize, patience: Duration) -> Arc<Admission> {
        Arc::new(Admission {
            max,
            per_client,
            patience,
            table: Mutex::new(Table::default()),
        })
    }

    /// Decides the read request `request` from `client` arriving at `now`.
    pub fn admit(self: &Arc<Self>, client: SocketAddr, request: &[u8], now: Instant) -> Admit {
        let mut guard = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let table = &mut *guard;
        if let Some(&running) = table.by_client.get(&client) {
            if table
                .slots
                .get(&running)
                .is_some_and(|s| *s.request == *request)
            {
                return Admit::Duplicate;
            }
            // The client moved on: its old transfer is of no use to it any more.
            if let Some(slot) = table.remove(running) {
                slot.evict.cancel();
            }
        }
        let mine = table.held_by(client.ip());
        if mine >= self.per_client {
            return Admit::ClientLimit;
        }
        if table.slots.len() >= self.max {
            let victim = table
                .slots
                .iter()
                .filter(|(_, s)| !s.answered)
                .map(|(&id, s)| (table.held_by(s.client.ip()), id, s.admitted))
                .filter(|&(crowd, _, admitted)| {
                    crowd >= mine + 2 || now.saturating_duration_since(admitted) >= self.patience
                })
                // The most crowded address first, then the oldest transfer.
                .max_by_key(|&(crowd, id, _)| (crowd, std::cmp::Reverse(id)));
            let Some((_, victim, _)) = victim else {
                return Admit::Busy;
            };
            if let Some(slot) = table.remove(victim) {
                slot.evict.cancel();
            }
        }
        table.next_id += 1;
        let id = table.next_id;
        table.by_client.insert(client, id);
        *table.per_address.entry(client.ip()).or_default() += 1;
        let evict = CancellationToken::new();
        table.slots.insert(
            id,
            Slot {
                client,
                request: request.into(),
                admitted: now,
                answered: false,
                evict: evict.clone(),
            },
        );
        Admit::Start(Ticket {
            admission: Arc::clone(self),
            id,
            evict,
        })
    }

    /// Transfers holding a slot.
    pub fn active(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slots
            .len()
    }
}

impl Ticket {
    /// The client acknowledged a packet: from now on the transfer is never evicted.
    pub fn answered(&self) {
        let mut table = self
            .admission
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = table.slots.get_mut(&self.id) {
            slot.answered = true;
        }
    }

    /// Cancelled when the transfer lost its slot to a newer request.
    pub fn evicted(&self) -> &CancellationToken {
        &self.evict
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut table = self
            .admission
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        table.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATIENCE: Duration = Duration::from_secs(1);

    fn addr(host: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, host], port))
    }

    const RRQ: &[u8] = b"\x00\x01undionly.kpxe\x00octet\x00";

    fn start(a: &Arc<Admission>, client: SocketAddr, now: Instant) -> Ticket {
        match a.admit(client, RRQ, now) {
            Admit::Start(t) => t,
            other => panic!("{client} not admitted: {other:?}"),
        }
    }

    #[test]
    fn one_address_gets_at_most_its_share_and_retransmissions_are_not_new_transfers() {
        let a = Admission::new(8, 2, PATIENCE);
        let now = Instant::now();
        let _first = start(&a, addr(1, 1000), now);
        assert!(matches!(a.admit(addr(1, 1000), RRQ, now), Admit::Duplicate));
        let second = start(&a, addr(1, 1001), now);
        assert!(matches!(
            a.admit(addr(1, 1002), RRQ, now),
            Admit::ClientLimit
        ));
        // Other addresses are unaffected.
        let _other = start(&a, addr(2, 1000), now);
        // A finished transfer frees its place.
        drop(second);
        let _third = start(&a, addr(1, 1002), now);
        assert_eq!(a.active(), 3);
    }

    #[test]
    fn a_different_request_from_the_same_port_replaces_the_running_transfer() {
        let a = Admission::new(8, 2, PATIENCE);
        let now = Instant::now();
        // The size probe, then the real request with a block size.
        let probe = start(&a, addr(1, 1000), now);
        let real = b"\x00\x01undionly.kpxe\x00octet\x00blksize\x001432\x00";
        let Admit::Start(transfer) = a.admit(addr(1, 1000), real, now) else {
            panic!("the new request is not admitted")
        };
        assert!(probe.evicted().is_cancelled());
        assert_eq!(a.active(), 1);
        assert!(matches!(
            a.admit(addr(1, 1000), real, now),
            Admit::Duplicate
        ));
        drop(probe);
        assert_eq!(a.active(), 1);
        drop(transfer);
        assert_eq!(a.active(), 0);
    }

    #[test]
    fn a_crowded_address_gives_way_to_a_new_one_but_not_to_itself() {
        let a = Admission::new(4, 4, PATIENCE);
        let now = Instant::now();
        let flood: Vec<Ticket> = (0..4).map(|p| start(&a, addr(9, p), now)).collect();
        // Nobody flooding from address 9 gets a fifth slot, nor evicts its own.
        assert!(matches!(a.admit(addr(9, 99), RRQ, now), Admit::ClientLimit));
        // A newcomer with no transfer evicts the flood's oldest at once.
        let real = start(&a, addr(1, 1), now);
        assert!(flood[0].evicted().is_cancelled());
        assert!(flood[1..].iter().all(|t| !t.evicted().is_cancelled()));
        // An address with 3 can't evict one with 1 (the real client's, young and unanswered)
        // nor one with 3 (itself crowded): nobody is ahead by two.
        assert!(matches!(a.admit(addr(9, 50), RRQ, now), Admit::Busy));
        assert!(!real.evicted().is_cancelled());
    }

    #[test]
    fn unanswered_transfers_give_way_to_anyone_after_the_patience_but_answered_ones_never() {
        let a = Admission::new(3, 3, PATIENCE);
        let t0 = Instant::now();
        let real = start(&a, addr(1, 1), t0);
        real.answered();
        let old = start(&a, addr(2, 1), t0);
        let young = start(&a, addr(3, 1), t0 + Duration::from_millis(900));
        // At 0.95 s nothing is past its patience and nobody is crowded.
        assert!(matches!(
            a.admit(addr(4, 1), RRQ, t0 + Duration::from_millis(950)),
            Admit::Busy
        ));
        let later = t0 + Duration::from_millis(1100);
        let newcomer = start(&a, addr(4, 1), later);
        assert!(old.evicted().is_cancelled(), "past its patience");
        assert!(!young.evicted().is_cancelled());
        assert!(!real.evicted().is_cancelled(), "an answered transfer stays");
        // The evicted ticket's drop does not free someone else's slot.
        drop(old);
        assert_eq!(a.active(), 3);
        newcomer.answered();
        young.answered();
        assert!(matches!(
            a.admit(addr(5, 1), RRQ, later + Duration::from_secs(60)),
            Admit::Busy
        ));
        drop(real);
        let _ = start(&a, addr(5, 1), later);
    }
}
