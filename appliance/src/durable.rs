//! Small files that must survive a power cut: written to a temporary file, synced, renamed over
//! the old one, and the directory synced (so the rename itself is on disk); removals sync the
//! directory too. A crash leaves the old file or the new one, never a piece, and once a call
//! returns its effect holds after a power loss (the lease journal's rule, for files written
//! whole).
//!
//! Architecture invariant: a leaf; plain blocking `std::fs` (callers on the async runtime run
//! these on its blocking pool).

use std::fs::File;
use std::io::{self, Write as _};
use std::path::Path;

/// Makes `path` hold exactly `bytes`, durably.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent(path)?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let written = File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// Removes `path` durably; returns whether it was there.
pub fn remove(path: &Path) -> io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(parent(path)?).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Renames `from` to `to` (a file or a directory, on one file system) durably: both
/// directories are synced.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::rename(from, to)?;
    sync_dir(parent(to)?)?;
    sync_dir(parent(from)?)
}

fn parent(path: &Path) -> io::Result<&Path> {
    match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Ok(Path::new(".")),
        Some(p) => Ok(p),
        None => Err(io::Error::new(io::ErrorKind::InvalidInput, "no directory")),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_whole_and_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("installed");
        write(&path, b"one\n").unwrap();
        write(&path, b"two\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["installed"]);
        assert!(remove(&path).unwrap());
        assert!(!remove(&path).unwrap());
        assert!(write(&dir.path().join("missing/x"), b"").is_err());
    }
}
