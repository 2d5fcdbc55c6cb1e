//! Files in the artifacts directory: a download or copy goes to `<name>.part`, is hashed as it is
//! written, and is renamed over `<name>` only once its digest matches, after an fsync of the
//! file and then of the directory. So `serve` only ever sees a complete, verified artifact, and
//! a crash leaves at most a `.part` that the next run continues from.

use std::fs::{self, File};
use std::io::{self, BufWriter, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::digest::{Hasher, Sha256};

/// Buffer for reading and writing: large files, few syscalls.
const BUF: usize = 1024 * 1024;

/// Where the partial file for `dest` is kept.
pub fn part_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".part");
    dest.with_file_name(name)
}

/// Where the detached signature of `dest` is kept: `<dest>.sig`, the URL coreos-installer
/// looks for beside an image.
pub fn sig_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".sig");
    dest.with_file_name(name)
}

/// Puts `data` in place as `dest` the way a download is: through a `.part` file, synced,
/// renamed.
pub fn write_file(dest: &Path, data: &[u8]) -> anyhow::Result<()> {
    let mut part = Partial::create(&part_path(dest))?;
    part.write(data)?;
    part.commit(dest)
}

pub fn remove_if_present(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("can't remove {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// The digest of the file at `path`, or `None` when there is no such file.
pub fn hash_file(path: &Path) -> anyhow::Result<Option<Sha256>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("can't read {}", path.display())),
    };
    let mut hasher = Hasher::new();
    copy_hashing(file, &mut hasher, &mut io::sink(), |_| {})
        .with_context(|| format!("can't read {}", path.display()))?;
    Ok(Some(hasher.finish()))
}

/// Copies `from` into `to` and `hasher`; `tick` hears of every chunk.
fn copy_hashing(
    mut from: impl io::Read,
    hasher: &mut Hasher,
    to: &mut impl io::Write,
    mut tick: impl FnMut(u64),
) -> io::Result<u64> {
    let mut buf = vec![0u8; BUF];
    let mut total = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n])?;
        total += n as u64;
        tick(n as u64);
    }
}

/// A `.part` file being written, with the digest of everything in it.
#[derive(Debug)]
pub struct Partial {
    path: PathBuf,
    file: BufWriter<File>,
    len: u64,
    hasher: Hasher,
}

impl Partial {
    /// Opens `path` to continue it: what it holds is hashed first, so the digest at the end
    /// covers the whole file, not only what this run wrote.
    pub fn resume(path: &Path) -> anyhow::Result<Partial> {
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("can't open {}", path.display()))?;
        let mut hasher = Hasher::new();
        let len = copy_hashing(&mut file, &mut hasher, &mut io::sink(), |_| {})
            .with_context(|| format!("can't read {}", path.display()))?;
        file.seek(SeekFrom::End(0))
            .with_context(|| format!("can't seek {}", path.display()))?;
        Ok(Partial {
            path: path.to_owned(),
            file: BufWriter::with_capacity(BUF, file),
            len,
            hasher,
        })
    }

    /// Opens `path` empty, dropping whatever it held.
    pub fn create(path: &Path) -> anyhow::Result<Partial> {
        let file = File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .with_context(|| format!("can't create {}", path.display()))?;
        Ok(Partial {
            path: path.to_owned(),
            file: BufWriter::with_capacity(BUF, file),
            len: 0,
            hasher: Hasher::new(),
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes what is buffered through to the file, so another process can read all of it.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.file
            .flush()
            .with_context(|| format!("can't write {}", self.path.display()))
    }

    /// The digest of everything written so far.
    pub fn digest(&self) -> Sha256 {
        self.hasher.peek()
    }

    /// Empties the file to write it again from its first byte.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let context = || format!("can't truncate {}", self.path.display());
        self.file.flush().with_context(context)?;
        let file = self.file.get_mut();
        file.set_len(0).with_context(context)?;
        file.seek(SeekFrom::Start(0)).with_context(context)?;
        self.len = 0;
        self.hasher = Hasher::new();
        Ok(())
    }

    pub fn write(&mut self, data: &[u8]) -> anyhow::Result<()> {
        self.file
            .write_all(data)
            .with_context(|| format!("can't write {}", self.path.display()))?;
        self.hasher.update(data);
        self.len += data.len() as u64;
        Ok(())
    }

    /// Copies all of `from` in; `tick` hears of every chunk.
    pub fn write_from(&mut self, from: impl io::Read, tick: impl FnMut(u64)) -> io::Result<()> {
        let n = copy_hashing(from, &mut self.hasher, &mut self.file, tick)?;
        self.len += n;
        Ok(())
    }

    /// Puts the file in place as `dest`: written through, renamed, the rename made durable.
    pub fn commit(self, dest: &Path) -> anyhow::Result<()> {
        let path = self.path;
        let file = self
            .file
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("can't write {}", path.display()))?;
        file.sync_all()
            .with_context(|| format!("can't sync {}", path.display()))?;
        drop(file);
        fs::rename(&path, dest)
            .with_context(|| format!("can't rename {} to {}", path.display(), dest.display()))?;
        sync_dir(dest)
    }

    /// Deletes the file: it is known to be wrong.
    pub fn discard(self) -> anyhow::Result<()> {
        drop(self.file);
        fs::remove_file(&self.path).with_context(|| format!("can't delete {}", self.path.display()))
    }
}

/// Makes the rename of `file` durable: the directory entry is data of its directory.
fn sync_dir(file: &Path) -> anyhow::Result<()> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("can't sync the directory {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_files_sit_beside_their_destination() {
        assert_eq!(
            part_path(Path::new("/a/rootfs.img")),
            Path::new("/a/rootfs.img.part")
        );
    }

    #[test]
    fn resuming_hashes_what_was_there_so_the_digest_covers_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let part = dir.path().join("k.part");
        fs::write(&part, b"hello ").unwrap();
        let mut p = Partial::resume(&part).unwrap();
        assert_eq!(p.len(), 6);
        p.write(b"world").unwrap();
        assert_eq!(p.digest(), Sha256::of(b"hello world"));
        let dest = dir.path().join("k");
        p.commit(&dest).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"hello world");
        assert!(!part.exists());
        assert_eq!(hash_file(&dest).unwrap(), Some(Sha256::of(b"hello world")));
        assert_eq!(hash_file(&dir.path().join("absent")).unwrap(), None);
    }

    #[test]
    fn restart_and_create_drop_what_was_held() {
        let dir = tempfile::tempdir().unwrap();
        let part = dir.path().join("k.part");
        fs::write(&part, b"stale bytes").unwrap();
        let mut p = Partial::resume(&part).unwrap();
        p.restart().unwrap();
        p.write(b"new").unwrap();
        assert_eq!(p.digest(), Sha256::of(b"new"));
        drop(p);
        assert_eq!(fs::read(&part).unwrap(), b"new");

        let mut p = Partial::create(&part).unwrap();
        assert!(p.is_empty());
        p.write_from(&b"copied"[..], |_| {}).unwrap();
        assert_eq!(p.len(), 6);
        assert_eq!(p.digest(), Sha256::of(b"copied"));
        p.discard().unwrap();
        assert!(!part.exists());
    }
}
