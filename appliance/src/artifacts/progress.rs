//! Download progress: on a terminal, one line on stderr rewritten at most once a second; on
//! anything else nothing until the file is done (the caller prints one line per file), so logs
//! and CI output hold no carriage-return noise.
//!
//! A plain line rather than a progress-bar crate: none (indicatif and its kin) is available to
//! this build.

use std::io::Write as _;
use std::time::{Duration, Instant};

const MIB: f64 = 1024.0 * 1024.0;
const EVERY: Duration = Duration::from_secs(1);

/// `12.5 MiB`.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

/// `3.2 MiB/s` for `bytes` moved in `elapsed` (a zero duration counts as a millisecond).
pub fn rate(bytes: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(0.001);
    format!("{:.1} MiB/s", bytes as f64 / MIB / secs)
}

/// One progress line: `rootfs.img: 120.5 MiB / 812.0 MiB (14%), 25.3 MiB/s`. `done` and `total`
/// count the whole file; `moved` is what this run transferred in `elapsed` (a resumed download
/// starts with bytes it did not move).
pub fn line(name: &str, done: u64, total: Option<u64>, moved: u64, elapsed: Duration) -> String {
    let of = match total {
        Some(t) if t > 0 => format!(
            " / {} ({}%)",
            mib(t),
            (u128::from(done.min(t)) * 100 / u128::from(t))
        ),
        _ => String::new(),
    };
    format!("{name}: {}{of}, {}", mib(done), rate(moved, elapsed))
}

/// The progress of one file.
#[derive(Debug)]
pub struct Progress {
    name: String,
    terminal: bool,
    started: Instant,
    shown: Option<Instant>,
    done: u64,
    moved: u64,
    total: Option<u64>,
}

impl Progress {
    /// `done` bytes are already held before this run moves any.
    pub fn new(name: &str, terminal: bool, done: u64, total: Option<u64>) -> Progress {
        Progress {
            name: name.to_owned(),
            terminal,
            started: Instant::now(),
            shown: None,
            done,
            moved: 0,
            total,
        }
    }

    pub fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        self.moved += bytes;
        if self.terminal && self.shown.is_none_or(|t| t.elapsed() >= EVERY) {
            self.shown = Some(Instant::now());
            let text = line(
                &self.name,
                self.done,
                self.total,
                self.moved,
                self.started.elapsed(),
            );
            // \x1b[K clears what a longer previous line left behind.
            eprint!("\r{text}\x1b[K");
            let _ = std::io::stderr().flush();
        }
    }

    /// Bytes moved by this run and how long it took.
    pub fn moved(&self) -> (u64, Duration) {
        (self.moved, self.started.elapsed())
    }

    /// Clears the progress line, so the caller's result line starts clean.
    pub fn finish(&self) {
        if self.terminal && self.shown.is_some() {
            eprint!("\r\x1b[K");
            let _ = std::io::stderr().flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_done_total_percent_and_rate() {
        let l = line(
            "rootfs.img",
            120 * 1024 * 1024,
            Some(800 * 1024 * 1024),
            60 * 1024 * 1024,
            Duration::from_secs(2),
        );
        assert_eq!(l, "rootfs.img: 120.0 MiB / 800.0 MiB (15%), 30.0 MiB/s");
    }

    #[test]
    fn an_unknown_total_leaves_out_the_share() {
        let l = line("k", 512 * 1024, None, 512 * 1024, Duration::from_secs(1));
        assert_eq!(l, "k: 0.5 MiB, 0.5 MiB/s");
        let l = line("k", 0, Some(0), 0, Duration::ZERO);
        assert_eq!(l, "k: 0.0 MiB, 0.0 MiB/s");
    }

    #[test]
    fn rates_survive_a_zero_duration_and_huge_sizes() {
        assert_eq!(rate(1024 * 1024, Duration::ZERO), "1000.0 MiB/s");
        let l = line("k", u64::MAX, Some(u64::MAX), 1, Duration::from_secs(1));
        assert!(l.contains("(100%)"), "{l}");
    }

    #[test]
    fn counters_start_from_what_is_held() {
        let mut p = Progress::new("k", false, 100, Some(300));
        p.advance(50);
        assert_eq!(p.done, 150);
        assert_eq!(p.moved().0, 50);
        assert!(p.shown.is_none(), "nothing is drawn off a terminal");
    }
}
