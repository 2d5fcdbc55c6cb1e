//! The pipes the relay splices through, kept for reuse: making a pipe and closing it again
//! costs three system calls (one `pipe2`, two `close`) and a kernel allocation per direction of
//! every connection, which shows in connections per second when responses are small. A pipe
//! goes back to the pool only when it is known to be empty (its direction ended at EOF with
//! everything written on); one that may still hold bytes is closed instead. HAProxy keeps its
//! splice pipes the same way (`get_pipe`/`put_pipe`).
//!
//! Each pipe holds its two descriptors of the process's budget (`crate::budget`), idle or not:
//! when the budget has none left, no pipe is made and the connection goes on copying.

use std::os::fd::OwnedFd;
use std::sync::Mutex;

use nix::fcntl::OFlag;
use tokio::sync::OwnedSemaphorePermit;

use crate::budget::Budget;

/// Idle pipes kept at most: two descriptors each, so a burst of connections leaves at most this
/// many times two descriptors open afterwards.
const KEPT: usize = 64;

/// A non-blocking pipe: its read end and its write end.
#[derive(Debug)]
pub struct Pipe {
    pub read: OwnedFd,
    pub write: OwnedFd,
    /// Its descriptors in the budget, given back when it is closed.
    _descriptors: OwnedSemaphorePermit,
}

static IDLE: Mutex<Vec<Pipe>> = Mutex::new(Vec::new());

/// An empty pipe: an idle one, or a new one when none is left, or why there is none.
pub fn take(budget: &Budget) -> Result<Pipe, &'static str> {
    if let Some(pipe) = idle().pop() {
        return Ok(pipe);
    }
    let descriptors = budget
        .pipe()
        .ok_or("the process's descriptor budget is spent")?;
    let (read, write) =
        nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).map_err(|e| e.desc())?;
    Ok(Pipe {
        read,
        write,
        _descriptors: descriptors,
    })
}

/// Gives back a pipe that is empty; past `KEPT` idle pipes it is closed.
pub fn give_back(pipe: Pipe) {
    let mut idle = idle();
    if idle.len() < KEPT {
        idle.push(pipe);
    }
}

fn idle() -> std::sync::MutexGuard<'static, Vec<Pipe>> {
    // A panic while holding the lock leaves the vector itself intact.
    IDLE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_pipe_given_back_is_taken_again_and_the_pool_is_bounded() {
        let budget = Budget::unbounded();
        let pipe = take(&budget).unwrap();
        let fd = pipe.read.as_raw_fd();
        give_back(pipe);
        // Other tests of this process may use the pool too: look for ours among what is idle.
        let mut taken: Vec<Pipe> = std::iter::from_fn(|| idle().pop()).collect();
        assert!(taken.iter().any(|p| p.read.as_raw_fd() == fd));
        taken.extend((0..KEPT + 5).map(|_| take(&budget).unwrap()));
        for pipe in taken {
            give_back(pipe);
        }
        assert!(idle().len() <= KEPT);
    }
}
