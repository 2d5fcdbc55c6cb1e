//! Backend health as a pure state machine: `rise` consecutive successes bring a backend up,
//! `fall` consecutive failures take it down (HAProxy's and pingora's model). A new backend
//! starts down and must earn its way in, so a node that is still booting never gets traffic.
//!
//! Architecture invariant: no I/O and no clock; the checker feeds results in and reads the
//! transitions out.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    up: bool,
    /// Consecutive results that disagree with the current state.
    streak: u32,
    rise: u32,
    fall: u32,
}

/// What one result changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    None,
    WentUp,
    WentDown,
}

impl Health {
    pub fn new(rise: u32, fall: u32) -> Health {
        Health {
            up: false,
            streak: 0,
            rise: rise.max(1),
            fall: fall.max(1),
        }
    }

    pub fn is_up(&self) -> bool {
        self.up
    }

    pub fn observe(&mut self, success: bool) -> Transition {
        if success == self.up {
            self.streak = 0;
            return Transition::None;
        }
        self.streak += 1;
        let needed = if self.up { self.fall } else { self.rise };
        if self.streak < needed {
            return Transition::None;
        }
        self.up = success;
        self.streak = 0;
        if success {
            Transition::WentUp
        } else {
            Transition::WentDown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rise_and_fall_need_consecutive_results() {
        let mut h = Health::new(2, 3);
        assert!(!h.is_up(), "starts down");
        assert_eq!(h.observe(true), Transition::None);
        assert_eq!(
            h.observe(false),
            Transition::None,
            "a failure resets the rise streak"
        );
        assert_eq!(h.observe(true), Transition::None);
        assert_eq!(h.observe(true), Transition::WentUp);
        assert_eq!(h.observe(false), Transition::None);
        assert_eq!(h.observe(false), Transition::None);
        assert_eq!(
            h.observe(true),
            Transition::None,
            "a success resets the fall streak"
        );
        for _ in 0..2 {
            assert_eq!(h.observe(false), Transition::None);
        }
        assert_eq!(h.observe(false), Transition::WentDown);
        assert!(!h.is_up());
    }

    #[test]
    fn rise_one_fall_one_follows_every_result() {
        let mut h = Health::new(1, 1);
        assert_eq!(h.observe(true), Transition::WentUp);
        assert_eq!(h.observe(false), Transition::WentDown);
        assert_eq!(h.observe(false), Transition::None);
    }
}
