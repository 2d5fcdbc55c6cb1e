//! Golden-file comparison for the test binaries that pin derived output (`fixtures.rs`,
//! `machines.rs`): a difference fails with the first differing lines; `UPDATE_GOLDEN=1`
//! rewrites the file instead, which a run with `CI` set refuses.

use std::path::Path;

/// Compares `actual` with the golden file, or rewrites it when UPDATE_GOLDEN is set.
pub fn check_golden(golden: &Path, actual: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        // CI compares; only a developer, reviewing the diff, may rewrite.
        assert!(
            std::env::var_os("CI").is_none(),
            "UPDATE_GOLDEN is refused when CI is set"
        );
        std::fs::write(golden, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(golden)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 creates it)", golden.display()));
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the golden file at line {}:\n--- expected\n{}\n--- actual\n{}\n(UPDATE_GOLDEN=1 rewrites it)",
            golden.display(),
            first + 1,
            expected
                .lines()
                .skip(first)
                .take(5)
                .collect::<Vec<_>>()
                .join("\n"),
            actual
                .lines()
                .skip(first)
                .take(5)
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
}
