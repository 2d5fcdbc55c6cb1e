//! Which read requests get a transfer. A TFTP request costs the sender one datagram and can be
//! spoofed, while a transfer holds a slot until its client answers or the retries run out; so
//! a flood must not be able to keep real clients (PXE firmware) out:
//!
//! - at most `per_client` transfers per client address, and a request repeated from the same
//!   address and port while its transfer runs is a retransmission, not a new transfer;
//! - when every slot is taken, the oldest transfer whose client has never acknowledged a
//!   packet gives way to the new request (a spoofed request's "client" never acknowledges);
//! - only when every slot holds a client that answered is a request turned away.
//!
//! Architecture invariant: no I/O and no clock; order is the order of admission. A transfer's
//! slot is freed when its [`Ticket`] is dropped, or at once when it is evicted (its task then
//! sees [`Ticket::evicted`] and stops).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// The transfer table shared by one listener's tasks.
#[derive(Debug)]
pub struct Admission {
    max: usize,
    per_client: usize,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    slots: HashMap<u64, Slot>,
    /// Admission order: a higher id was admitted later.
    next_id: u64,
}

#[derive(Debug)]
struct Slot {
    client: SocketAddr,
    /// The client acknowledged at least one packet: it is real.
    answered: bool,
    evict: CancellationToken,
}

/// What became of a read request.
#[derive(Debug)]
pub enum Admit {
    /// A slot for the transfer; dropping the ticket frees it.
    Start(Ticket),
    /// The same client address and port has a transfer running: this is its retransmission.
    Duplicate,
    /// The client address has `per_client` transfers running.
    ClientLimit,
    /// Every slot holds a client that answered.
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
    pub fn new(max: usize, per_client: usize) -> Arc<Admission> {
        Arc::new(Admission {
            max,
            per_client,
            table: Mutex::new(Table::default()),
        })
    }

    /// Decides a read request from `client`.
    pub fn admit(self: &Arc<Self>, client: SocketAddr) -> Admit {
        let mut guard = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let table = &mut *guard;
        if table.slots.values().any(|s| s.client == client) {
            return Admit::Duplicate;
        }
        let same_address = table
            .slots
            .values()
            .filter(|s| s.client.ip() == client.ip())
            .count();
        if same_address >= self.per_client {
            return Admit::ClientLimit;
        }
        if table.slots.len() >= self.max {
            // The oldest (lowest id) transfer nobody has answered gives way.
            let victim = table
                .slots
                .iter()
                .filter(|(_, s)| !s.answered)
                .map(|(&id, _)| id)
                .min();
            let Some(victim) = victim else {
                return Admit::Busy;
            };
            if let Some(slot) = table.slots.remove(&victim) {
                slot.evict.cancel();
            }
        }
        table.next_id += 1;
        let id = table.next_id;
        let evict = CancellationToken::new();
        table.slots.insert(
            id,
            Slot {
                client,
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
        table.slots.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(host: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, host], port))
    }

    fn start(a: &Arc<Admission>, client: SocketAddr) -> Ticket {
        match a.admit(client) {
            Admit::Start(t) => t,
            other => panic!("{client} not admitted: {other:?}"),
        }
    }

    #[test]
    fn one_address_gets_at_most_its_share_and_retransmissions_are_not_new_transfers() {
        let a = Admission::new(8, 2);
        let _first = start(&a, addr(1, 1000));
        assert!(matches!(a.admit(addr(1, 1000)), Admit::Duplicate));
        let second = start(&a, addr(1, 1001));
        assert!(matches!(a.admit(addr(1, 1002)), Admit::ClientLimit));
        // Other addresses are unaffected.
        let _other = start(&a, addr(2, 1000));
        // A finished transfer frees its place.
        drop(second);
        let _third = start(&a, addr(1, 1002));
        assert_eq!(a.active(), 3);
    }

    #[test]
    fn when_full_the_oldest_unanswered_transfer_gives_way() {
        let a = Admission::new(3, 3);
        let real = start(&a, addr(1, 1));
        real.answered();
        let spoofed_old = start(&a, addr(2, 1));
        let spoofed_new = start(&a, addr(2, 2));
        let newcomer = start(&a, addr(3, 1));
        assert!(spoofed_old.evicted().is_cancelled(), "oldest unanswered");
        assert!(!spoofed_new.evicted().is_cancelled());
        assert!(!real.evicted().is_cancelled(), "an answered transfer stays");
        assert_eq!(a.active(), 3);
        // The evicted ticket's drop does not free someone else's slot.
        drop(spoofed_old);
        assert_eq!(a.active(), 3);
        newcomer.answered();
        spoofed_new.answered();
        // Every slot holds a client that answered.
        assert!(matches!(a.admit(addr(4, 1)), Admit::Busy));
        drop(real);
        let _ = start(&a, addr(4, 1));
    }
}
