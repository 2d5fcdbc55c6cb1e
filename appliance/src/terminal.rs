//! Where a command's progress line goes: stderr, when it is a terminal that can redraw a line
//! (`TERM` set and not `dumb`), and nowhere otherwise, so logs and CI output hold no
//! carriage-return noise.
//!
//! Not indicatif's `ProgressDrawTarget::stderr()`: that also hides every bar under `NO_COLOR`,
//! which asks for no colour, not for no progress; these lines have no colour.

use std::io::IsTerminal as _;

use indicatif::ProgressDrawTarget;

/// The draw target for a progress line on stderr, when stderr is a terminal that redraws.
#[must_use]
pub fn stderr_progress() -> Option<ProgressDrawTarget> {
    redraws(
        std::env::var("TERM").ok().as_deref(),
        std::io::stderr().is_terminal(),
    )
    .then(|| ProgressDrawTarget::term_like_with_hz(Box::new(console::Term::buffered_stderr()), 20))
}

/// A terminal redraws a line when `TERM` names one that can (`dumb` can't).
fn redraws(term: Option<&str>, is_terminal: bool) -> bool {
    is_terminal && term.is_some_and(|t| !t.is_empty() && t != "dumb")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_terminal_that_redraws_gets_a_progress_line() {
        assert!(redraws(Some("xterm-256color"), true));
        assert!(!redraws(Some("xterm-256color"), false));
        assert!(!redraws(Some("dumb"), true));
        assert!(!redraws(Some(""), true));
        assert!(!redraws(None, true));
    }
}
