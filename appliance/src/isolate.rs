//! A fault stays where it happened: a panic while one packet, request or connection is handled
//! ends that packet or connection and nothing else.
//!
//! Every wire path runs the code that handles one input inside [`packet`] (a datagram: DHCP,
//! DNS over UDP, TFTP) or [`connection`] (an accepted connection's task: DNS over TCP, the boot
//! server, the load balancer, the API, replication). A panic there is caught, counted in
//! `/metrics` (`okd_appliance_panics_total{service}`, process-wide counters read at scrape
//! time) and logged at most once per
//! [`LOG_EVERY`] per service, with how many were not logged since; the listener goes on with
//! its next input. The process-wide panic hook ([`install_hook`]) keeps Rust's default report
//! (a line on stderr per panic) for panics outside these paths, and records the message and
//! place of an isolated one for that rate-limited log line instead, so a flood of bad packets
//! is not a flood of stderr.
//!
//! A panic is still a bug: the first one-packet crash (issue 39, a DHCP `hlen` longer than
//! `chaddr`) is also fixed at its cause, and the wire-facing modules deny clippy's
//! `indexing_slicing` so the compiler points at every unchecked slice there.
//!
//! Architecture invariant: a leaf (std and tracing only); it knows no protocol.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

/// The wire paths whose panics are counted apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wire {
    Dhcp,
    Dns,
    Tftp,
    Http,
    Lb,
    Api,
    Replication,
}

impl Wire {
    pub const ALL: [Wire; 7] = [
        Wire::Dhcp,
        Wire::Dns,
        Wire::Tftp,
        Wire::Http,
        Wire::Lb,
        Wire::Api,
        Wire::Replication,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Wire::Dhcp => "dhcp",
            Wire::Dns => "dns",
            Wire::Tftp => "tftp",
            Wire::Http => "http",
            Wire::Lb => "lb",
            Wire::Api => "api",
            Wire::Replication => "replication",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// At most one log line per wire path in this long.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

thread_local! {
    /// Set while this thread runs isolated code: the hook records instead of printing.
    static ISOLATED: Cell<bool> = const { Cell::new(false) };
    /// What the hook recorded of the last isolated panic on this thread.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the process's panic hook (once, at start): isolated panics are recorded for
/// [`packet`] and [`connection`] to log, rate-limited; every other panic is reported as Rust
/// reports it by default.
pub fn install_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if ISOLATED.with(Cell::get) {
                let place = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let text = format!("{}{place}", message(info.payload()));
                LAST.with(|last| *last.borrow_mut() = Some(text));
            } else {
                default(info);
            }
        }));
    });
}

/// The text a panic was raised with, or a placeholder.
pub fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// Runs `f` with this thread marked isolated, restoring the mark after (isolated code may
/// nest: a packet handled inside a connection's task).
fn marked<T>(f: impl FnOnce() -> T) -> T {
    let before = ISOLATED.with(|i| i.replace(true));
    let out = f();
    ISOLATED.with(|i| i.set(before));
    out
}

/// Handles one input (a datagram) with `f`: its result, or `None` when it panicked (counted
/// and logged, rate-limited).
pub fn packet<T>(wire: Wire, f: impl FnOnce() -> T) -> Option<T> {
    match marked(|| std::panic::catch_unwind(AssertUnwindSafe(f))) {
        Ok(out) => Some(out),
        Err(payload) => {
            caught(wire, payload.as_ref());
            None
        }
    }
}

/// Runs one connection's task: its output, or `None` when it panicked (counted and logged,
/// rate-limited). The connection's resources are dropped with the future, as on any end.
pub async fn connection<F: Future>(wire: Wire, task: F) -> Option<F::Output> {
    // Pinned in this future's own state: no allocation per connection (the load balancer's
    // accept path runs this for every connection).
    let mut task = std::pin::pin!(task);
    let polled = std::future::poll_fn(|cx| {
        match marked(|| std::panic::catch_unwind(AssertUnwindSafe(|| task.as_mut().poll(cx)))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(payload)),
        }
    });
    match polled.await {
        Ok(out) => Some(out),
        Err(payload) => {
            caught(wire, payload.as_ref());
            None
        }
    }
}

/// Panics caught so far on each wire path, since the process started.
static PANICS: [AtomicU64; Wire::ALL.len()] = [const { AtomicU64::new(0) }; Wire::ALL.len()];

/// How many panics were caught on `wire` since the process started (`/metrics` reads it).
pub fn panics(wire: Wire) -> u64 {
    PANICS[wire.index()].load(Ordering::Relaxed)
}

/// One caught panic: counted, and logged unless another of `wire` was within [`LOG_EVERY`].
fn caught(wire: Wire, payload: &(dyn Any + Send)) {
    PANICS[wire.index()].fetch_add(1, Ordering::Relaxed);
    let what = LAST
        .with(|last| last.borrow_mut().take())
        .unwrap_or_else(|| message(payload).to_owned());
    if let Some(unlogged) = LOGS.admit(wire, Instant::now()) {
        let since = if unlogged > 0 {
            format!(" ({unlogged} more since the last one logged)")
        } else {
            String::new()
        };
        tracing::error!(
            "{}: a panic while handling one input, which was dropped (the service goes on): {what}{since}",
            wire.name()
        );
    }
}

/// One rate-limited log line: at most one per [`LOG_EVERY`], saying how many were not logged
/// since. The panic logs use one per wire path; a path that would log once per stranger's input
/// (a failed replication handshake) uses its own.
#[derive(Debug)]
pub struct LogGate {
    last: Mutex<Option<Instant>>,
    unlogged: AtomicU64,
}

impl LogGate {
    pub const fn new() -> LogGate {
        LogGate {
            last: Mutex::new(None),
            unlogged: AtomicU64::new(0),
        }
    }

    /// `Some(not logged since)` when a line may be logged now; else counts it as not logged.
    pub fn admit(&self, now: Instant) -> Option<u64> {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|at| now.saturating_duration_since(at) < LOG_EVERY) {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(now);
        Some(self.unlogged.swap(0, Ordering::Relaxed))
    }
}

impl Default for LogGate {
    fn default() -> Self {
        LogGate::new()
    }
}

/// The panic logs' gates, one per wire path.
struct LogGates([LogGate; Wire::ALL.len()]);

static LOGS: LogGates = LogGates([const { LogGate::new() }; Wire::ALL.len()]);

impl LogGates {
    fn admit(&self, wire: Wire, now: Instant) -> Option<u64> {
        self.0[wire.index()].admit(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_one_packet_is_counted_and_the_next_is_handled() {
        install_hook();
        // Counters are the process's: other tests may count on other wire paths.
        let before = panics(Wire::Replication);
        let out: Option<u32> = packet(Wire::Replication, || panic!("a bad packet"));
        assert_eq!(out, None);
        assert_eq!(packet(Wire::Replication, || 7), Some(7));
        assert_eq!(panics(Wire::Replication), before + 1);
        // The hook's record was taken by the log line: nothing left behind.
        assert!(LAST.with(|l| l.borrow().is_none()));
        assert!(!ISOLATED.with(Cell::get));
    }

    #[tokio::test]
    async fn a_panic_in_one_connection_ends_it_alone() {
        install_hook();
        let before = panics(Wire::Api);
        let bad = connection(Wire::Api, async {
            tokio::task::yield_now().await;
            panic!("a bad connection");
        });
        assert_eq!(bad.await, None::<()>);
        let good = connection(Wire::Api, async {
            tokio::task::yield_now().await;
            3
        });
        assert_eq!(good.await, Some(3));
        assert_eq!(panics(Wire::Api), before + 1);
    }

    #[test]
    fn one_line_per_interval_says_how_many_went_unlogged() {
        let gates = LogGates([const { LogGate::new() }; Wire::ALL.len()]);
        let t0 = Instant::now();
        assert_eq!(gates.admit(Wire::Dns, t0), Some(0));
        assert_eq!(gates.admit(Wire::Dns, t0 + Duration::from_secs(1)), None);
        assert_eq!(gates.admit(Wire::Dns, t0 + Duration::from_secs(2)), None);
        // Another wire path has its own gate.
        assert_eq!(
            gates.admit(Wire::Tftp, t0 + Duration::from_secs(2)),
            Some(0)
        );
        assert_eq!(gates.admit(Wire::Dns, t0 + LOG_EVERY), Some(2));
    }
}
