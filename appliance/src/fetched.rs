//! The record `okd-appliance artifacts fetch|import` keeps beside the files it put in place,
//! `<artifacts_dir>/.okd-appliance-artifacts.json` (a dot file: the boot server never serves
//! one): for each file, by its name in the directory, the CoreOS release, stream and
//! architecture it is from, its size, and the SHA-256 the stream metadata gave and the file
//! was checked against.
//!
//! What reads it: `check --install` hashes each recorded file the nodes will fetch and compares
//! (`cli/check.rs`); `check` and `serve` compare sizes only, from the file's metadata
//! (`http::preflight`). A file copied over by hand, cut short or replaced by another release's
//! is then found before a node boots it.
//!
//! Architecture invariant: a leaf (serde and `crate::durable`); blocking `std::fs`.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The record's name in the artifacts directory.
pub const RECORD_NAME: &str = ".okd-appliance-artifacts.json";

/// Larger than any record (a few hundred bytes a file): anything bigger is not one.
const MAX_RECORD: u64 = 1 << 20;

/// What `artifacts fetch|import` verified and put in place, by file name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub files: BTreeMap<String, Entry>,
}

/// One file as it was put in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The CoreOS release (`42.20250901.3.0`).
    pub release: String,
    /// The stream (`stable`).
    pub stream: String,
    pub arch: String,
    pub size: u64,
    /// 64 lowercase hex digits.
    pub sha256: String,
}

impl Entry {
    /// `CoreOS 42.20250901.3.0 (stable, x86_64)`.
    #[must_use]
    pub fn release_text(&self) -> String {
        format!("CoreOS {} ({}, {})", self.release, self.stream, self.arch)
    }
}

/// Where the record of `artifacts_dir` is.
#[must_use]
pub fn path(artifacts_dir: &Path) -> PathBuf {
    artifacts_dir.join(RECORD_NAME)
}

impl Record {
    /// The record of `artifacts_dir`: `Ok(None)` when there is none (files put there by other
    /// means), an error when it can't be read or is not a record.
    pub fn read(artifacts_dir: &Path) -> Result<Option<Record>, String> {
        let path = path(artifacts_dir);
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("can't read {}: {e}", path.display())),
        };
        let mut text = Vec::new();
        file.take(MAX_RECORD + 1)
            .read_to_end(&mut text)
            .map_err(|e| format!("can't read {}: {e}", path.display()))?;
        if text.len() as u64 > MAX_RECORD {
            return Err(format!(
                "{} is larger than {MAX_RECORD} bytes: not a record of `artifacts fetch`",
                path.display()
            ));
        }
        serde_json::from_slice(&text).map(Some).map_err(|e| {
            format!(
                "{} is not a record of `artifacts fetch`: {e}",
                path.display()
            )
        })
    }

    /// Writes the record into `artifacts_dir`, durably (a crash leaves the old one or this).
    pub fn write(&self, artifacts_dir: &Path) -> std::io::Result<()> {
        let mut text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        text.push(b'\n');
        crate::durable::write(&path(artifacts_dir), &text)
    }

    /// The entry of the file at `file` (a path in the artifacts directory `dir`).
    #[must_use]
    pub fn entry(&self, dir: &Path, file: &Path) -> Option<&Entry> {
        let name = file.strip_prefix(dir).ok()?.to_str()?;
        self.files.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(size: u64) -> Entry {
        Entry {
            release: "42.20250901.3.0".into(),
            stream: "stable".into(),
            arch: "x86_64".into(),
            size,
            sha256: "ab".repeat(32),
        }
    }

    #[test]
    fn a_record_reads_back_and_finds_files_by_their_name_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Record::read(dir.path()), Ok(None));
        let mut record = Record::default();
        record.files.insert("kernel".into(), entry(7));
        record.write(dir.path()).unwrap();
        let back = Record::read(dir.path()).unwrap().unwrap();
        assert_eq!(back, record);
        assert_eq!(
            back.entry(dir.path(), &dir.path().join("kernel")),
            Some(&entry(7))
        );
        assert_eq!(back.entry(dir.path(), &dir.path().join("rootfs.img")), None);
        assert_eq!(back.entry(dir.path(), Path::new("/elsewhere/kernel")), None);
        assert_eq!(
            entry(7).release_text(),
            "CoreOS 42.20250901.3.0 (stable, x86_64)"
        );
    }

    #[test]
    fn what_is_not_a_record_says_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), "{\"files\": 3}").unwrap();
        let e = Record::read(dir.path()).unwrap_err();
        assert!(e.contains("is not a record of `artifacts fetch`"), "{e}");
        std::fs::write(path(dir.path()), vec![b' '; (MAX_RECORD + 1) as usize]).unwrap();
        let e = Record::read(dir.path()).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
    }
}
