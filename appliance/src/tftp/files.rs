//! Boot files as transfers read them. Every request looks at its file again (a reload may move
//! `install.ipxe_dir`, an operator may replace a file) but reads it only when it is new or
//! changed (length or modification time); transfers of the same file share one copy. So a
//! flood of read requests costs a `stat` per request, never a read of the whole file. Which
//! names may be asked for is the plan's business (`plan::BootFiles::ipxe_binary`: the iPXE
//! binaries, which may be symbolic links, as Debian's `ipxe.efi` is).
//!
//! Every call here blocks on the file system: the server runs them on tokio's blocking pool.

use std::collections::HashMap;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::packet::code;

/// Boot files are small; a bigger file is a configuration mistake, not something to stream.
pub const MAX_FILE: u64 = 64 * 1024 * 1024;
/// All cached files together; past it the cache starts over (boot directories hold a few
/// files of about a megabyte).
const MAX_CACHED: u64 = 4 * MAX_FILE;

/// The files read so far, by resolved path.
#[derive(Debug, Default)]
pub struct BootFiles {
    cache: Mutex<HashMap<PathBuf, Cached>>,
}

#[derive(Debug)]
struct Cached {
    len: u64,
    modified: Option<SystemTime>,
    data: Arc<[u8]>,
}

/// What a request gets.
#[derive(Debug)]
pub enum Loaded {
    File(Arc<[u8]>),
    /// An error to send back: (TFTP error code, message).
    Refused(u16, &'static str),
}

impl BootFiles {
    /// The file at `path`, or why not (`None`: a name that is not a boot file).
    pub fn load(&self, path: Option<&Path>) -> io::Result<Loaded> {
        let Some(path) = path else {
            return Ok(Loaded::Refused(
                code::ACCESS,
                "only the iPXE boot files are served",
            ));
        };
        // Followed if it is a symbolic link: the name is one of the boot files.
        let meta = match std::fs::metadata(path) {
            Ok(m) if m.is_file() => m,
            _ => return Ok(Loaded::Refused(code::NOT_FOUND, "file not found")),
        };
        if meta.len() > MAX_FILE {
            return Ok(Loaded::Refused(code::UNDEFINED, "file too large for TFTP"));
        }
        let modified = meta.modified().ok();
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = cache.get(path)
                && c.len == meta.len()
                && c.modified == modified
            {
                return Ok(Loaded::File(Arc::clone(&c.data)));
            }
        }
        // Length and time from the handle the bytes come from, so they describe what was read
        // (a file replaced between the `stat` above and here is read again next time).
        let mut file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        let mut data = Vec::with_capacity(usize::try_from(meta.len().min(MAX_FILE)).unwrap_or(0));
        file.by_ref().take(MAX_FILE + 1).read_to_end(&mut data)?;
        if data.len() as u64 > MAX_FILE {
            return Ok(Loaded::Refused(code::UNDEFINED, "file too large for TFTP"));
        }
        let data: Arc<[u8]> = data.into();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let held: u64 = cache.values().map(|c| c.len).sum();
        if held + meta.len() > MAX_CACHED {
            cache.clear();
        }
        cache.insert(
            path.to_owned(),
            Cached {
                len: meta.len(),
                modified: meta.modified().ok(),
                data: Arc::clone(&data),
            },
        );
        Ok(Loaded::File(data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_once_and_again_when_they_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipxe.efi");
        std::fs::write(&path, b"first").unwrap();
        let files = BootFiles::default();
        let Loaded::File(a) = files.load(Some(&path)).unwrap() else {
            panic!("refused")
        };
        let Loaded::File(b) = files.load(Some(&path)).unwrap() else {
            panic!("refused")
        };
        assert_eq!(&*a, b"first");
        assert!(Arc::ptr_eq(&a, &b), "one copy shared");
        std::fs::write(&path, b"second, longer").unwrap();
        let Loaded::File(c) = files.load(Some(&path)).unwrap() else {
            panic!("refused")
        };
        assert_eq!(&*c, b"second, longer");
        // A symbolic link to the file (Debian's ipxe.efi is one) is followed.
        let link = dir.path().join("link.efi");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(files.load(Some(&link)).unwrap(), Loaded::File(_)));
        assert!(matches!(
            files.load(None).unwrap(),
            Loaded::Refused(code::ACCESS, _)
        ));
        assert!(matches!(
            files.load(Some(&dir.path().join("missing"))).unwrap(),
            Loaded::Refused(code::NOT_FOUND, _)
        ));
        assert!(matches!(
            files.load(Some(dir.path())).unwrap(),
            Loaded::Refused(code::NOT_FOUND, _)
        ));
    }
}
