//! Response rate limiting (RRL), as BIND and Knot do it: identical answers to one client network
//! are counted per second; past the limit they are dropped, except every `slip`-th, which goes
//! out truncated so a real client retries over TCP (which can't be spoofed) while a reflection
//! attack gains nothing.
//!
//! Architecture invariant: a fixed-size table, no allocation and no clock of its own: the caller
//! passes the time, so tests step it.

use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;

use super::authority::Outcome;

const BUCKETS: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// Send a truncated, empty reply instead.
    Slip,
    Drop,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    key: u64,
    second: u32,
    count: u32,
    limited: u32,
}

#[derive(Debug)]
pub struct RateLimiter {
    rate: u32,
    slip: u32,
    table: Box<[Bucket]>,
    hasher: std::collections::hash_map::RandomState,
}

impl RateLimiter {
    /// `rate` identical answers per second per client network; 0 disables limiting.
    pub fn new(rate: u32, slip: u32) -> Self {
        RateLimiter {
            rate,
            slip,
            table: vec![Bucket::default(); if rate == 0 { 0 } else { BUCKETS }].into_boxed_slice(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    /// The rate and slip this limiter was made with: a reload that keeps them keeps the table.
    pub fn limits(&self) -> (u32, u32) {
        (self.rate, self.slip)
    }

    /// Counts one answer of kind `outcome` for `qname` (lowercase wire form) to `client` at
    /// second `now`. NXDOMAIN answers count per zone-independent class, not per name, so random
    /// names can't spread an attack over many buckets.
    pub fn check(&mut self, client: IpAddr, outcome: Outcome, qname: &[u8], now: u32) -> Verdict {
        if self.rate == 0 {
            return Verdict::Send;
        }
        let mut h = self.hasher.build_hasher();
        match client {
            IpAddr::V4(ip) => h.write(&ip.octets()[..3]),
            IpAddr::V6(ip) => h.write(&ip.octets()[..7]),
        }
        h.write_u8(outcome as u8);
        if outcome != Outcome::NxDomain {
            h.write(qname);
        }
        let key = h.finish();
        let bucket = &mut self.table[(key as usize) % BUCKETS];
        if bucket.key != key || bucket.second != now {
            // A new second or another key taking the slot: start counting afresh.
            *bucket = Bucket {
                key,
                second: now,
                count: 0,
                limited: bucket.limited * u32::from(bucket.key == key),
            };
        }
        bucket.count = bucket.count.saturating_add(1);
        if bucket.count <= self.rate {
            return Verdict::Send;
        }
        bucket.limited = bucket.limited.wrapping_add(1);
        if self.slip != 0 && bucket.limited.is_multiple_of(self.slip) {
            Verdict::Slip
        } else {
            Verdict::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_per_client_network_and_slips_every_other() {
        let mut rrl = RateLimiter::new(5, 2);
        let attacker: IpAddr = "198.51.100.7".parse().unwrap();
        let neighbour: IpAddr = "198.51.100.200".parse().unwrap();
        let other: IpAddr = "203.0.113.9".parse().unwrap();
        let name = b"\x03api\x03okd\x04test\x00";
        let verdicts: Vec<Verdict> = (0..9)
            .map(|_| rrl.check(attacker, Outcome::Answered, name, 100))
            .collect();
        assert_eq!(&verdicts[..5], &[Verdict::Send; 5]);
        assert_eq!(
            &verdicts[5..],
            &[Verdict::Drop, Verdict::Slip, Verdict::Drop, Verdict::Slip]
        );
        // The same /24 shares the budget; another network does not.
        assert_ne!(
            rrl.check(neighbour, Outcome::Answered, name, 100),
            Verdict::Send
        );
        assert_eq!(
            rrl.check(other, Outcome::Answered, name, 100),
            Verdict::Send
        );
        // A new second refills it.
        assert_eq!(
            rrl.check(attacker, Outcome::Answered, name, 101),
            Verdict::Send
        );
    }

    #[test]
    fn random_names_share_one_nxdomain_budget() {
        let mut rrl = RateLimiter::new(3, 0);
        let client: IpAddr = "2001:db8::1".parse().unwrap();
        let sent = (0..10u8)
            .filter(|i| rrl.check(client, Outcome::NxDomain, &[1, b'a' + i, 0], 7) == Verdict::Send)
            .count();
        assert_eq!(sent, 3);
    }

    #[test]
    fn zero_rate_is_off() {
        let mut rrl = RateLimiter::new(0, 2);
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(
            (0..1000).all(|_| rrl.check(client, Outcome::Answered, b"\x00", 1) == Verdict::Send)
        );
    }
}
