//! The open-file cache of `/artifacts/`: small files (up to [`files::SMALL_BODY`]) kept open
//! with their metadata and content between requests, so that a repeated request costs no file
//! system call instead of a path walk, `openat2`, `statx`, a read and two `close`
//! (docs/performance.md, `## HTTP boot server: small files`).
//!
//! It sits after the access decision and never widens it: the caller checks the URL path
//! ([`files::artifact_relative`]), an entry is only ever made from what
//! [`files::open_relative`] opened for the same root and the same decoded path, and only for a
//! regular file reached without any symlink beneath the root.
//!
//! Invalidation is by inotify, and is read before every lookup (one non-blocking `read` of the
//! inotify descriptor per request): a change whose system call returned before the request is
//! looked up is never served from the cache, where nginx's `open_file_cache_valid` serves a
//! replaced file for up to its validity. What is watched:
//! - every cached file's inode (written, truncated, its attributes changed, through any of its
//!   names): that entry goes;
//! - every directory from the root down to a cached file, for a change of any of its names
//!   (created, deleted, renamed in or out, written, attributes): the entries under that name
//!   go;
//! - every directory looked up on the way to the root, symlinks of the configured path
//!   followed one by one (the root's chain), for a change of the names on that way: everything
//!   goes, as it does when the root or a directory on its way is itself moved, deleted or
//!   unmounted, when the kernel's event queue overflows, and for an event this cache can't
//!   place (a directory under the root that moves or goes takes the entries under it).
//!
//! Watches are in place before the file is checked again (without symlinks, by device, inode,
//! size, mtime and ctime) and entered, so a change that raced with the first open either fails that check or
//! leaves an event that the next lookup reads. The file is read whole at its first hit, one
//! byte more than its cached length: a file shorter or longer than that (changed in place
//! between the last event read and the read) is dropped and the request goes the uncached way,
//! before anything is sent. Then its content is served from memory (at most [`ENTRIES`] times
//! [`files::SMALL_BODY`] bytes) for `CONTENT_VALID` and read again with the same check: any
//! change made through this kernel is an event, read before the next lookup, so most hits cost
//! the one `read` of the inotify queue and no file system call; the time bound is for changes
//! inotify never reports (another host writing to a network file system). The check against the
//! entry's metadata at its entering compares size, mtime and ctime as well as the inode, so a
//! write between the first `statx` and the watches is not entered either (unless it keeps the
//! length and falls in the same tick of the file system's clock). Not seen: writes
//! through a shared memory mapping (inotify reports none) and a file system mounted over a
//! directory on the way (nor does nginx's cache see either); a change inotify does not report
//! is seen within `CONTENT_VALID` only when it changes the file's length.
//!
//! Bounded: at most [`ENTRIES`] files; a new one beyond that evicts the least recently used.
//! Watches are bounded by [`WATCHES`]: beyond it everything is dropped and the cache starts
//! over. A file the cache can't hold (reached through a symlink) is told apart first, with
//! `openat2` alone: it evicts nothing and adds no watch. Without inotify (no instance left, a
//! seccomp filter) or `openat2`, nothing is cached and every request takes the uncached way;
//! without `openat2`, caching is not tried again.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::inotify::{AddWatchFlags as W, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use nix::sys::stat::Mode;

use super::files::{self, FileMeta, Opened, Validators};

/// Files kept open at most.
pub const ENTRIES: usize = 128;
/// Watches at most before the cache starts over (files, the directories above them, the
/// root's chain).
pub const WATCHES: usize = 4 * ENTRIES;
/// Reads of the inotify queue per lookup at most (4 KiB each) before the cache gives up on
/// the backlog and starts over.
const DRAIN_READS: usize = 64;
/// How long a file's content read at a hit is served from memory before the next hit reads it
/// again (with the length check). inotify reports every change made through this kernel at
/// once; this bounds what it never reports: a change made by another host to a network file
/// system (NFS, virtiofs, 9p, FUSE), which before holding content was caught at the next hit when
/// it changed the length.
const CONTENT_VALID: std::time::Duration = std::time::Duration::from_secs(1);
/// Symlinks followed on the way to the root at most (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// What a lookup found.
#[derive(Debug)]
pub enum Found {
    /// From the cache: the whole file, read just now, its metadata and validators.
    Cached {
        meta: FileMeta,
        validators: Validators,
        body: Bytes,
    },
    /// Not from the cache: what [`files::open_relative`] returned (path for the log, file).
    Opened(PathBuf, Opened),
}

/// The cache; one per listener.
#[derive(Debug)]
pub struct OpenCache {
    inner: Mutex<Inner>,
}

impl Default for OpenCache {
    fn default() -> Self {
        Self::with_capacity(ENTRIES)
    }
}

impl OpenCache {
    /// A cache of at most `cap` files.
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                cap,
                notify: None,
                root: None,
                real_root: None,
                entries: HashMap::new(),
                watches: HashMap::new(),
                tick: 0,
                no_openat2: false,
            }),
        }
    }

    /// The file `relative` (checked by [`files::artifact_relative`]) names under `root`, from
    /// the cache when it holds it unchanged, else opened by [`files::open_relative`] (and
    /// entered when it may be); `None` for a 404, as [`files::open_relative`].
    pub fn open(&self, root: &Path, relative: &Path) -> Option<Found> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.drain();
        inner.lookup(root, relative)
    }

    /// Like [`OpenCache::open`] when the cache holds the file unchanged; `None` otherwise,
    /// without opening anything (the caller takes the ordinary way, which does).
    pub fn cached(&self, root: &Path, relative: &Path) -> Option<Found> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.drain();
        inner.hit(root, relative)
    }
}

/// What one inotify watch stands for (one inode can be several of these).
#[derive(Debug, Default)]
struct Watched {
    /// Names looked up in this directory on the way to the root.
    chain: Vec<OsString>,
    /// The directories under the root (relative; empty for the root itself) this inode is.
    dirs: Vec<PathBuf>,
    /// The cache keys whose file this inode is.
    files: Vec<PathBuf>,
}

impl Watched {
    fn is_empty(&self) -> bool {
        self.chain.is_empty() && self.dirs.is_empty() && self.files.is_empty()
    }
}

#[derive(Debug)]
struct Entry {
    file: File,
    meta: FileMeta,
    validators: Validators,
    /// Its content and when it was read (at a hit, with the length check below); served from
    /// memory for [`CONTENT_VALID`], or until an event drops the entry.
    body: Option<(Bytes, std::time::Instant)>,
    /// The file's own watch.
    wd: WatchDescriptor,
    /// When it was last used (`Inner::tick`), for eviction.
    used: u64,
}

#[derive(Debug)]
struct Inner {
    cap: usize,
    notify: Option<Inotify>,
    /// The configured root the entries are under.
    root: Option<PathBuf>,
    /// Its real path, while its chain is watched.
    real_root: Option<PathBuf>,
    /// By relative path.
    entries: HashMap<PathBuf, Entry>,
    watches: HashMap<WatchDescriptor, Watched>,
    tick: u64,
    /// `openat2` is missing or filtered: nothing is cached (nor tried again).
    no_openat2: bool,
}

/// Adds to the events an inode is already watched for (nix has no name for it).
const MASK_ADD: W = W::from_bits_retain(nix::libc::IN_MASK_ADD);
/// The directories on the way to the root: a change of one of the names looked up.
const CHAIN_MASK: W = W::IN_ATTRIB
    .union(W::IN_MOVED_FROM)
    .union(W::IN_MOVED_TO)
    .union(W::IN_CREATE)
    .union(W::IN_DELETE)
    .union(W::IN_DELETE_SELF)
    .union(W::IN_MOVE_SELF)
    .union(W::IN_ONLYDIR)
    .union(W::IN_DONT_FOLLOW)
    .union(MASK_ADD);
/// The root and the directories under it: a change of any name in them.
const DIR_MASK: W = CHAIN_MASK.union(W::IN_MODIFY).union(W::IN_CLOSE_WRITE);
/// A cached file: its content or attributes, through any of its names.
const FILE_MASK: W = W::IN_MODIFY
    .union(W::IN_ATTRIB)
    .union(W::IN_CLOSE_WRITE)
    .union(W::IN_DELETE_SELF)
    .union(W::IN_MOVE_SELF)
    .union(W::IN_DONT_FOLLOW)
    .union(MASK_ADD);
/// Events that say the watched inode itself went away or moved.
const SELF_EVENTS: W = W::IN_DELETE_SELF
    .union(W::IN_MOVE_SELF)
    .union(W::IN_IGNORED)
    .union(W::IN_UNMOUNT);

impl Inner {
    /// Reads every queued event and drops what they touch.
    fn drain(&mut self) {
        for _ in 0..DRAIN_READS {
            let Some(notify) = &self.notify else { return };
            match notify.read_events() {
                Ok(events) => {
                    for event in events {
                        if !self.apply(&event) {
                            // Started over: the rest of the queue went with the instance.
                            return;
                        }
                    }
                }
                Err(Errno::EAGAIN) => return,
                Err(Errno::EINTR) => {}
                Err(e) => {
                    tracing::debug!("http open-file cache: reading inotify: {e}");
                    break;
                }
            }
        }
        self.reset();
    }

    /// Drops what `event` touches; `false` when that was everything (the instance is gone).
    fn apply(&mut self, event: &InotifyEvent) -> bool {
        if event.mask.contains(W::IN_Q_OVERFLOW) {
            self.reset();
            return false;
        }
        let Some(watched) = self.watches.get(&event.wd) else {
            // The last event of a watch this cache removed; anything else can't be placed.
            if event.mask.contains(W::IN_IGNORED) {
                return true;
            }
            self.reset();
            return false;
        };
        let gone = event.mask.intersects(SELF_EVENTS);
        let on_chain = !watched.chain.is_empty()
            && (gone
                || match &event.name {
                    Some(name) => watched.chain.contains(name),
                    None => true,
                });
        // The root itself moved, deleted or unmounted.
        let root_gone = gone && watched.dirs.iter().any(|d| d.as_os_str().is_empty());
        if on_chain || root_gone {
            self.reset();
            return false;
        }
        let mut drop: Vec<PathBuf> = watched.files.clone();
        for dir in &watched.dirs {
            // A directory that went: everything under it. Its parent's watch reports the
            // name's change too.
            let under = match &event.name {
                Some(name) if !gone => dir.join(name),
                _ => dir.clone(),
            };
            drop.extend(
                self.entries
                    .keys()
                    .filter(|k| k.starts_with(&under))
                    .cloned(),
            );
        }
        for key in drop {
            self.forget(&key);
        }
        if event.mask.contains(W::IN_IGNORED) {
            self.watches.remove(&event.wd);
        } else if gone && let Some(watched) = self.watches.get_mut(&event.wd) {
            // A directory moved elsewhere no longer stands for its old place.
            watched.dirs.clear();
            if watched.is_empty()
                && let Some(notify) = &self.notify
            {
                let _ = notify.rm_watch(event.wd);
            }
        }
        true
    }

    /// Drops everything: entries, watches (with the inotify instance) and the root's chain.
    fn reset(&mut self) {
        self.entries.clear();
        self.watches.clear();
        self.real_root = None;
        self.notify = None;
    }

    /// Drops the entry `key`, and its file's watch when nothing else needs it. The watch
    /// stays known, standing for nothing, until its `IN_IGNORED` is read: events already
    /// queued for it are not unplaceable.
    fn forget(&mut self, key: &Path) {
        let Some(entry) = self.entries.remove(key) else {
            return;
        };
        if let Some(watched) = self.watches.get_mut(&entry.wd) {
            watched.files.retain(|k| k != key);
            if watched.is_empty()
                && let Some(notify) = &self.notify
            {
                let _ = notify.rm_watch(entry.wd);
            }
        }
    }

    /// The entry for `relative` under `root`, if there is one and its file reads as entered.
    fn hit(&mut self, root: &Path, relative: &Path) -> Option<Found> {
        if self.root.as_deref() != Some(root) {
            self.reset();
            self.root = Some(root.to_owned());
        }
        self.tick += 1;
        let entry = self.entries.get_mut(relative)?;
        entry.used = self.tick;
        if let Some((body, read)) = &entry.body
            && read.elapsed() < CONTENT_VALID
        {
            return Some(Found::Cached {
                meta: entry.meta,
                validators: entry.validators.clone(),
                body: body.clone(),
            });
        }
        let len = usize::try_from(entry.meta.len).unwrap_or(usize::MAX);
        // One byte more than the cached length: a file that grew is seen too.
        let mut buf = vec![0; len.saturating_add(1)];
        match entry.file.read_at(&mut buf, 0) {
            Ok(n) if n == len => {
                buf.truncate(len);
                let body = Bytes::from(buf);
                entry.body = Some((body.clone(), std::time::Instant::now()));
                Some(Found::Cached {
                    meta: entry.meta,
                    validators: entry.validators.clone(),
                    body,
                })
            }
            _ => {
                self.forget(relative);
                None
            }
        }
    }

    fn lookup(&mut self, root: &Path, relative: &Path) -> Option<Found> {
        if let Some(found) = self.hit(root, relative) {
            return Some(found);
        }
        let found = files::open_relative(root, relative);
        if let Some((_, Ok((file, meta)))) = &found
            && meta.len() <= files::SMALL_BODY
            && let Err(e) = self.enter(root, relative, file, meta)
        {
            tracing::debug!(
                "http open-file cache: {} not cached: {e}",
                relative.display()
            );
        }
        found.map(|(path, opened)| Found::Opened(path, opened))
    }

    /// Enters `file` (opened as `relative` under `root`, with `meta`), once the watches that
    /// report its change are in place and the path still leads to it without a symlink.
    fn enter(
        &mut self,
        root: &Path,
        relative: &Path,
        file: &File,
        meta: &Metadata,
    ) -> io::Result<()> {
        if self.cap == 0 || self.no_openat2 {
            return Err(io::Error::other("caching is off"));
        }
        // A file this cache can't hold (reached through a symlink beneath the root) is told
        // apart before any watch is added or any entry evicted for it.
        match same_inode(root, relative, meta) {
            Err(e @ (Errno::ENOSYS | Errno::EPERM)) => {
                self.no_openat2 = true;
                return Err(e.into());
            }
            other => other?,
        }
        if self.watches.len() >= WATCHES {
            self.reset();
        }
        if self.notify.is_none() {
            self.notify = Some(Inotify::init(
                InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK,
            )?);
        }
        let real_root = match &self.real_root {
            Some(r) => r.clone(),
            None => {
                let r = self.watch_chain(root)?;
                self.real_root = Some(r.clone());
                r
            }
        };
        let mut dir = PathBuf::new();
        for c in relative.parent().into_iter().flat_map(Path::components) {
            dir.push(c);
            let d = dir.clone();
            self.watch(&real_root.join(&dir), DIR_MASK, |w| {
                push_new(&mut w.dirs, d);
            })?;
        }
        let key = relative.to_owned();
        let wd = self.watch(&real_root.join(relative), FILE_MASK, |w| {
            push_new(&mut w.files, key);
        })?;
        // The path leads to the same inode, now that a change would be reported.
        same_inode(&real_root, relative, meta)?;
        if self.entries.len() >= self.cap {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            if let Some(key) = oldest {
                self.forget(&key);
            }
        }
        let meta = FileMeta {
            len: meta.len(),
            modified: meta.modified()?,
        };
        let entry = Entry {
            file: file.try_clone()?,
            meta,
            validators: meta.validators(),
            body: None,
            wd,
            used: self.tick,
        };
        self.entries.insert(relative.to_owned(), entry);
        Ok(())
    }

    /// Adds (or extends) a watch on `path`, recording what it stands for with `role`.
    fn watch(
        &mut self,
        path: &Path,
        mask: W,
        role: impl FnOnce(&mut Watched),
    ) -> io::Result<WatchDescriptor> {
        let notify = self
            .notify
            .as_ref()
            .ok_or_else(|| io::Error::other("no inotify instance"))?;
        let wd = notify.add_watch(path, mask)?;
        role(self.watches.entry(wd).or_default());
        Ok(wd)
    }

    /// Walks `root` as the kernel would, one name at a time, symlinks followed, watching each
    /// directory before looking a name up in it; the real path of the root, watched too.
    fn watch_chain(&mut self, root: &Path) -> io::Result<PathBuf> {
        let absolute = if root.is_absolute() {
            root.to_owned()
        } else {
            std::env::current_dir()?.join(root)
        };
        // Names still to look up, the next one last.
        let mut todo: Vec<OsString> = Vec::new();
        push_components(&mut todo, &absolute);
        let mut cur = PathBuf::from("/");
        let mut links = 0;
        while let Some(name) = todo.pop() {
            if name == ".." {
                // `cur` has no symlink in it: its parent is its parent.
                cur.pop();
                continue;
            }
            let n = name.clone();
            self.watch(&cur, CHAIN_MASK, |w| push_new(&mut w.chain, n))?;
            let next = cur.join(&name);
            let meta = std::fs::symlink_metadata(&next)?;
            if meta.file_type().is_symlink() {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Errno::ELOOP.into());
                }
                let target = std::fs::read_link(&next)?;
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                push_components(&mut todo, &target);
            } else if meta.is_dir() {
                cur = next;
            } else {
                return Err(Errno::ENOTDIR.into());
            }
        }
        self.watch(&cur, DIR_MASK, |w| push_new(&mut w.dirs, PathBuf::new()))?;
        Ok(cur)
    }
}

/// Whether `relative` leads from `root`, without any symlink beneath it, to the inode of `meta`,
/// unchanged (`ESTALE` when it leads to another one or the file changed since).
fn same_inode(root: &Path, relative: &Path, meta: &Metadata) -> Result<(), Errno> {
    let dir = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
    let now = nix::sys::stat::fstat(nix::fcntl::openat2(&dir, relative, how)?)?;
    // The same inode, not changed since `meta` was read: a write between that `statx` and the
    // watches (which no event reports) moves its size, mtime or ctime.
    let same = (now.st_dev, now.st_ino) == (meta.dev(), meta.ino())
        && u64::try_from(now.st_size).ok() == Some(meta.size())
        && (now.st_mtime, now.st_mtime_nsec) == (meta.mtime(), meta.mtime_nsec())
        && (now.st_ctime, now.st_ctime_nsec) == (meta.ctime(), meta.ctime_nsec());
    if same { Ok(()) } else { Err(Errno::ESTALE) }
}

/// `path`'s names pushed onto `todo` so that the first is popped first (`..` kept, `.` and the
/// root dropped).
fn push_components(todo: &mut Vec<OsString>, path: &Path) {
    let names: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    todo.extend(names.into_iter().rev());
}

fn push_new<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

#[cfg(test)]
mod tests;
