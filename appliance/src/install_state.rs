//! Which nodes have installed: a marker file per node in `<state_dir>/installed/`, written when
//! the node fetches its ignition config. A node with a marker boots from its disk instead of
//! reinstalling (no PXE loop); `okd-appliance node reinstall NAME` removes the marker.
//!
//! Architecture invariant: files only; the HTTP service reads a marker per script request (one
//! `stat`), so the CLI can change it while `serve` runs without any admin channel.

use std::io;
use std::path::{Path, PathBuf};

fn marker(state_dir: &Path, node: &str) -> PathBuf {
    state_dir.join("installed").join(node)
}

/// Creates the markers' directory (at start, while the appliance may still be root, so that
/// the directory is there to hand over to the `run_as` account).
pub fn prepare(state_dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(state_dir.join("installed"))
}

pub fn is_installed(state_dir: &Path, node: &str) -> bool {
    marker(state_dir, node).exists()
}

pub fn mark_installed(state_dir: &Path, node: &str, when: &str) -> io::Result<()> {
    let path = marker(state_dir, node);
    std::fs::create_dir_all(path.parent().expect("marker has a parent"))?;
    std::fs::write(&path, format!("ignition fetched {when}\n"))
}

/// Returns whether there was a marker to remove.
pub fn reset(state_dir: &Path, node: &str) -> io::Result<bool> {
    match std::fs::remove_file(marker(state_dir, node)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_come_and_go() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_installed(dir.path(), "master-0"));
        mark_installed(dir.path(), "master-0", "now").unwrap();
        assert!(is_installed(dir.path(), "master-0"));
        assert!(reset(dir.path(), "master-0").unwrap());
        assert!(!reset(dir.path(), "master-0").unwrap());
        assert!(!is_installed(dir.path(), "master-0"));
    }
}
