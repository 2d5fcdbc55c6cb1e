//! How many connections each client address holds at once, up to a limit, so that one host
//! can't take every slot from the rest of the rack. The boot server counts its connections
//! with it and the shared frontend's router the connections still naming their server.
//!
//! Architecture invariant: no I/O; a slot is given back when its [`Held`] is dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The addresses' counts, shared by the tasks of one service.
#[derive(Debug, Clone)]
pub struct PerAddress {
    limit: usize,
    table: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One connection of an address, counted until dropped.
#[derive(Debug)]
pub struct Held {
    table: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl PerAddress {
    /// At most `limit` connections per address.
    pub fn new(limit: usize) -> PerAddress {
        PerAddress {
            limit,
            table: Arc::default(),
        }
    }

    /// Counts a new connection from `ip` (IPv4-mapped IPv6 addresses as IPv4), or `None` when
    /// it holds the limit already.
    pub fn admit(&self, ip: IpAddr) -> Option<Held> {
        let ip = ip.to_canonical();
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let n = table.entry(ip).or_default();
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(Held {
            table: Arc::clone(&self.table),
            ip,
        })
    }

    /// The limit per address.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = table.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                table.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_holds_at_most_its_share_of_connections() {
        let table = PerAddress::new(32);
        let (a, b) = (
            "10.0.0.5".parse::<IpAddr>().unwrap(),
            "10.0.0.6".parse().unwrap(),
        );
        let mut held: Vec<Held> = (0..32).map(|_| table.admit(a).unwrap()).collect();
        assert!(table.admit(a).is_none());
        // The same address written as IPv4-mapped IPv6 is the same address.
        assert!(table.admit("::ffff:10.0.0.5".parse().unwrap()).is_none());
        let other = table.admit(b).expect("another address is not affected");
        held.pop();
        let again = table.admit(a).expect("a slot came back");
        drop((held, other, again));
        assert!(table.table.lock().unwrap().is_empty());
    }
}
