//! Download progress: on a terminal, an indicatif bar on stderr (bytes, total, rate, time left),
//! also under `NO_COLOR` (it has no colour); on anything else nothing until the file is done
//! (the caller prints one line per file), so logs and CI output hold no carriage-return noise
//! (`crate::terminal`). Also the size and rate formatting of those
//! result lines.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

const MIB: f64 = 1024.0 * 1024.0;

/// `12.5 MiB`.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

/// `3.2 MiB/s` for `bytes` moved in `elapsed` (a zero duration counts as a millisecond).
pub fn rate(bytes: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(0.001);
    format!("{:.1} MiB/s", bytes as f64 / MIB / secs)
}

/// The bar with a known size: bytes, share, rate and time left, then a bar as wide as the
/// terminal leaves room for (a fixed width wraps on narrow terminals).
const SIZED: &str = "{msg}: {binary_bytes}/{binary_total_bytes} ({percent}%), \
                     {binary_bytes_per_sec}, {eta} left [{wide_bar}]";
/// Without a size (no Content-Length): a spinner with bytes and rate.
const UNSIZED: &str = "{msg}: {spinner} {binary_bytes}, {binary_bytes_per_sec}";

fn style(total_known: bool) -> ProgressStyle {
    ProgressStyle::with_template(if total_known { SIZED } else { UNSIZED })
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

/// The progress of one file.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    moved: u64,
}

impl Progress {
    /// `done` bytes are already held before this run moves any (a resumed download); the bar
    /// starts there, and its rate counts only what this run moves.
    pub fn new(name: &str, done: u64, total: Option<u64>) -> Progress {
        let target = crate::terminal::stderr_progress().unwrap_or_else(ProgressDrawTarget::hidden);
        Progress::drawn_to(target, name, done, total)
    }

    fn drawn_to(target: ProgressDrawTarget, name: &str, done: u64, total: Option<u64>) -> Progress {
        let bar = ProgressBar::with_draw_target(total, target)
            .with_style(style(total.is_some()))
            .with_message(name.to_owned());
        bar.set_position(done);
        bar.reset_eta();
        Progress {
            bar,
            started: Instant::now(),
            moved: 0,
        }
    }

    pub fn advance(&mut self, bytes: u64) {
        self.moved += bytes;
        self.bar.inc(bytes);
    }

    /// Bytes moved by this run and how long it took.
    pub fn moved(&self) -> (u64, Duration) {
        (self.moved, self.started.elapsed())
    }

    /// Removes the bar, so the caller's result line starts clean.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// Where the bar stands: the whole file's bytes held so far.
    #[cfg(test)]
    fn position(&self) -> u64 {
        self.bar.position()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_rates_for_the_result_lines() {
        assert_eq!(mib(120 * 1024 * 1024), "120.0 MiB");
        assert_eq!(rate(60 * 1024 * 1024, Duration::from_secs(2)), "30.0 MiB/s");
    }

    #[test]
    fn rates_survive_a_zero_duration_and_huge_sizes() {
        assert_eq!(rate(1024 * 1024, Duration::ZERO), "1000.0 MiB/s");
        assert!(mib(u64::MAX).ends_with(" MiB"));
    }

    #[test]
    fn counters_start_from_what_is_held() {
        let mut p = Progress::drawn_to(ProgressDrawTarget::hidden(), "k", 100, Some(300));
        p.advance(50);
        assert_eq!(p.position(), 150);
        assert_eq!(p.moved().0, 50);
        p.finish();
        let mut unknown = Progress::drawn_to(ProgressDrawTarget::hidden(), "k", 0, None);
        unknown.advance(7);
        assert_eq!(unknown.position(), 7);
    }

    #[test]
    fn both_templates_parse() {
        for template in [SIZED, UNSIZED] {
            assert!(ProgressStyle::with_template(template).is_ok(), "{template}");
        }
    }
}
