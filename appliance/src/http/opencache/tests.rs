//! The open-file cache against real files and directories (tempdirs).

use super::*;
use std::io::Read as _;

/// What a lookup of `rest` under `root` serves: `Some((cached, content))`, `None` for a 404.
fn get(cache: &OpenCache, root: &Path, rest: &str) -> Option<(bool, Vec<u8>)> {
    let relative = files::artifact_relative(rest)?;
    content(cache.open(root, &relative)?)
}

fn content(found: Found) -> Option<(bool, Vec<u8>)> {
    match found {
        Found::Cached { meta, body, .. } => {
            assert_eq!(meta.len, body.len() as u64, "the cached length");
            Some((true, body.to_vec()))
        }
        Found::Opened(_, opened) => {
            let (mut f, meta) = opened.unwrap();
            let mut v = Vec::new();
            f.read_to_end(&mut v).unwrap();
            assert_eq!(meta.len(), v.len() as u64);
            Some((false, v))
        }
    }
}

fn cached(cache: &OpenCache, root: &Path, rest: &str, what: &str) {
    assert_eq!(
        get(cache, root, rest),
        Some((true, what.into())),
        "{rest}: cached"
    );
}

fn fresh(cache: &OpenCache, root: &Path, rest: &str, what: &str) {
    assert_eq!(
        get(cache, root, rest),
        Some((false, what.into())),
        "{rest}: opened again"
    );
}

fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("artifacts");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("kernel"), "k1").unwrap();
    std::fs::write(root.join("sub/initrd"), "i1").unwrap();
    (dir, root)
}

/// An unchanged file is served from the cache from its second request on, under every
/// spelling of its path; a file too big to be read whole never is.
#[test]
fn an_unchanged_file_is_cached() {
    let (_dir, root) = setup();
    let cache = OpenCache::default();
    fresh(&cache, &root, "kernel", "k1");
    cached(&cache, &root, "kernel", "k1");
    cached(&cache, &root, "kern%65l", "k1");
    fresh(&cache, &root, "sub/initrd", "i1");
    cached(&cache, &root, "sub%2finitrd", "i1");
    let big = "b".repeat(usize::try_from(files::SMALL_BODY).unwrap() + 1);
    std::fs::write(root.join("big"), &big).unwrap();
    fresh(&cache, &root, "big", &big);
    fresh(&cache, &root, "big", &big);
}

#[test]
fn a_file_renamed_over_is_served_new() {
    let (_dir, root) = setup();
    let cache = OpenCache::default();
    fresh(&cache, &root, "kernel", "k1");
    cached(&cache, &root, "kernel", "k1");
    std::fs::write(root.join("kernel.tmp"), "k2").unwrap();
    std::fs::rename(root.join("kernel.tmp"), root.join("kernel")).unwrap();
    fresh(&cache, &root, "kernel", "k2");
    cached(&cache, &root, "kernel", "k2");
    // The same under a directory.
    fresh(&cache, &root, "sub/initrd", "i1");
    std::fs::write(root.join("sub/initrd.tmp"), "i2").unwrap();
    std::fs::rename(root.join("sub/initrd.tmp"), root.join("sub/initrd")).unwrap();
    fresh(&cache, &root, "sub/initrd", "i2");
}

/// Rewritten in place, longer, shorter, or with the same length (only the event tells).
#[test]
fn a_file_rewritten_in_place_is_served_new() {
    let (_dir, root) = setup();
    let cache = OpenCache::default();
    fresh(&cache, &root, "kernel", "k1");
    std::fs::write(root.join("kernel"), "kernel 2").unwrap();
    fresh(&cache, &root, "kernel", "kernel 2");
    cached(&cache, &root, "kernel", "kernel 2");
    std::fs::write(root.join("kernel"), "k").unwrap();
    fresh(&cache, &root, "kernel", "k");
    std::fs::write(root.join("kernel"), "x").unwrap();
    fresh(&cache, &root, "kernel", "x");
    cached(&cache, &root, "kernel", "x");
}

/// A change through another name of the same file (a hard link outside the root).
#[test]
fn a_file_written_through_another_link_is_served_new() {
    let (dir, root) = setup();
    let cache = OpenCache::default();
    fresh(&cache, &root, "kernel", "k1");
    std::fs::hard_link(root.join("kernel"), dir.path().join("elsewhere")).unwrap();
    fresh(&cache, &root, "kernel", "k1");
    cached(&cache, &root, "kernel", "k1");
    std::fs::write(dir.path().join("elsewhere"), "k2").unwrap();
    fresh(&cache, &root, "kernel", "k2");
}

#[test]
fn a_deleted_file_is_not_found() {
    let (_dir, root) = setup();
    let cache = OpenCache::default();
    fresh(&cache, &root, "kernel", "k1");
    cached(&cache, &root, "kernel", "k1");
    std::fs::remove_file(root.join("kernel")).unwrap();
    assert_eq!(get(&cache, &root, "kernel"), None);
    fresh(&cache, &root, "sub/initrd", "i1");
    std::fs::remove_dir_all(root.join("sub")).unwrap();
    assert_eq!(get(&cache, &root, "sub/initrd"), None);
}

/// A file truncated in place after it was entered and before its first hit, the events not
/// read yet: the read at the hit sees the length differ and the request goes the uncached
/// way, with the new length.
#[test]
fn a_read_shorter_than_the_cached_length_goes_uncached() {
    let (_dir, root) = setup();
    let cache = OpenCache::default();
    std::fs::write(root.join("kernel"), "kernel 1").unwrap();
    fresh(&cache, &root, "kernel", "kernel 1");
    // Truncate and look up without reading the events: only the read can tell.
    std::fs::OpenOptions::new()
        .write(true)
        .open(root.join("kernel"))
        .unwrap()
        .set_len(3)
        .unwrap();
    let mut inner = cache.inner.lock().unwrap();
    let found = inner.lookup(&root, Path::new("kernel")).unwrap();
    assert_eq!(content(found), Some((false, "ker".into())));
    // Grown in place, unannounced: the same.
    std::fs::OpenOptions::new()
        .append(true)
        .open(root.join("kernel"))
        .unwrap()
        .set_len(5)
        .unwrap();
    let found = inner.lookup(&root, Path::new("kernel")).unwrap();
    assert_eq!(content(found), Some((false, "ker\0\0".into())));
}

/// After its first hit a file is served from memory: a change is known by its event alone,
/// which every lookup reads first. Without reading the events (a change in the instant
/// between that read and the lookup) the content as read at the first hit is served.
#[test]
fn a_file_served_from_memory_changes_with_its_event() {
    let (_dir, root) = setup();
    let cache = OpenCache::default();
    fresh(&cache, &root, "kernel", "k1");
    cached(&cache, &root, "kernel", "k1");
    std::fs::write(root.join("kernel"), "k2").unwrap();
    {
        let mut inner = cache.inner.lock().unwrap();
        let found = inner.hit(&root, Path::new("kernel")).unwrap();
        assert_eq!(content(found), Some((true, "k1".into())));
    }
    fresh(&cache, &root, "kernel", "k2");
    cached(&cache, &root, "kernel", "k2");
    // A change no event reports (another host's write to a network file system): once the
    // content is older than CONTENT_VALID, the next hit reads the file again, and a length
    // that differs sends it the uncached way.
    std::fs::write(root.join("kernel"), "k-3").unwrap();
    {
        let mut inner = cache.inner.lock().unwrap();
        let found = inner.hit(&root, Path::new("kernel")).unwrap();
        assert_eq!(
            content(found),
            Some((true, "k2".into())),
            "within CONTENT_VALID"
        );
        let entry = inner.entries.get_mut(Path::new("kernel")).unwrap();
        let (_, read) = entry.body.as_mut().unwrap();
        *read = std::time::Instant::now()
            .checked_sub(CONTENT_VALID * 2)
            .unwrap();
        assert!(inner.hit(&root, Path::new("kernel")).is_none());
    }
    fresh(&cache, &root, "kernel", "k-3");
    // `cached` never opens: a file not held is `None`, and the ordinary way enters it.
    let sub = files::artifact_relative("sub/initrd").unwrap();
    assert!(cache.cached(&root, &sub).is_none());
    fresh(&cache, &root, "sub/initrd", "i1");
    assert!(matches!(
        cache.cached(&root, &sub),
        Some(Found::Cached { .. })
    ));
}

/// A write between the open's `statx` and the watches (which no event reports) changes the
/// file's size or times: it is not entered. (A write of the same length within the same
/// tick of the file system's clock as the open can't be told apart.)
#[test]
fn a_file_changed_between_its_open_and_its_watches_is_not_entered() {
    let (_dir, root) = setup();
    let cache = OpenCache::default();
    let relative = Path::new("kernel");
    let (_, opened) = files::open_relative(&root, relative).unwrap();
    let (file, meta) = opened.unwrap();
    std::fs::write(root.join("kernel"), "kernel 2").unwrap();
    let mut inner = cache.inner.lock().unwrap();
    inner.root = Some(root.clone());
    assert!(inner.enter(&root, relative, &file, &meta).is_err());
    assert!(inner.entries.is_empty());
}

/// The root, a directory under it, and the root's parent, each moved away with a new one
/// moved into its place (a restore): never served from the old tree.
#[test]
fn a_directory_replaced_under_its_name_is_served_new() {
    let (dir, root) = setup();
    let cache = OpenCache::default();
    let tree = |at: &Path, k: &str, i: &str| {
        std::fs::create_dir_all(at.join("sub")).unwrap();
        std::fs::write(at.join("kernel"), k).unwrap();
        std::fs::write(at.join("sub/initrd"), i).unwrap();
    };
    fresh(&cache, &root, "kernel", "k1");
    fresh(&cache, &root, "sub/initrd", "i1");
    cached(&cache, &root, "sub/initrd", "i1");
    // A directory under the root.
    tree(&dir.path().join("new"), "-", "i2");
    std::fs::rename(root.join("sub"), dir.path().join("old-sub")).unwrap();
    std::fs::rename(dir.path().join("new/sub"), root.join("sub")).unwrap();
    fresh(&cache, &root, "sub/initrd", "i2");
    cached(&cache, &root, "kernel", "k1");
    // The root itself.
    tree(&dir.path().join("new2"), "k3", "i3");
    std::fs::rename(&root, dir.path().join("old-root")).unwrap();
    std::fs::rename(dir.path().join("new2"), &root).unwrap();
    fresh(&cache, &root, "kernel", "k3");
    fresh(&cache, &root, "sub/initrd", "i3");
    cached(&cache, &root, "kernel", "k3");
    // The root's parent.
    let top = dir.path().join("top");
    let root = top.join("artifacts");
    tree(&root, "k4", "i4");
    fresh(&cache, &root, "kernel", "k4");
    cached(&cache, &root, "kernel", "k4");
    tree(&dir.path().join("top2/artifacts"), "k5", "i5");
    std::fs::rename(&top, dir.path().join("old-top")).unwrap();
    std::fs::rename(dir.path().join("top2"), &top).unwrap();
    fresh(&cache, &root, "kernel", "k5");
}

/// A root reached through a symlink that is switched to another tree (a release switch).
#[test]
fn a_root_behind_a_switched_symlink_is_served_new() {
    let dir = tempfile::tempdir().unwrap();
    for (v, k) in [("v1", "k1"), ("v2", "k2")] {
        std::fs::create_dir(dir.path().join(v)).unwrap();
        std::fs::write(dir.path().join(v).join("kernel"), k).unwrap();
    }
    let root = dir.path().join("current");
    std::os::unix::fs::symlink("v1", &root).unwrap();
    let cache = OpenCache::default();
    fresh(&cache, &root, "kernel", "k1");
    cached(&cache, &root, "kernel", "k1");
    std::os::unix::fs::symlink("v2", dir.path().join("next")).unwrap();
    std::fs::rename(dir.path().join("next"), &root).unwrap();
    fresh(&cache, &root, "kernel", "k2");
    cached(&cache, &root, "kernel", "k2");
}

/// Symlinks: one out of the root is refused every time, a cached file replaced by one is
/// refused at once, and one that stays inside is served but never cached.
#[test]
fn symlinks_are_refused_or_served_uncached_as_before() {
    let (dir, root) = setup();
    std::fs::write(dir.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret"), root.join("out")).unwrap();
    std::os::unix::fs::symlink("../secret", root.join("out2")).unwrap();
    std::os::unix::fs::symlink("sub/initrd", root.join("in")).unwrap();
    let cache = OpenCache::default();
    for _ in 0..2 {
        assert_eq!(get(&cache, &root, "out"), None);
        assert_eq!(get(&cache, &root, "out2"), None);
        assert_eq!(get(&cache, &root, "..%2fsecret"), None);
        fresh(&cache, &root, "in", "i1");
    }
    fresh(&cache, &root, "kernel", "k1");
    cached(&cache, &root, "kernel", "k1");
    std::os::unix::fs::symlink("../secret", root.join("kernel.tmp")).unwrap();
    std::fs::rename(root.join("kernel.tmp"), root.join("kernel")).unwrap();
    assert_eq!(get(&cache, &root, "kernel"), None);
    assert_eq!(get(&cache, &root, "kernel"), None);
}

/// At the cap, a new file evicts the least recently used one; the count of files and of
/// watches stays bounded.
#[test]
fn at_the_cap_the_least_recently_used_file_goes() {
    let (_dir, root) = setup();
    for n in 0..10 {
        std::fs::write(root.join(format!("f{n}")), format!("{n}")).unwrap();
    }
    let cache = OpenCache::with_capacity(2);
    fresh(&cache, &root, "f0", "0");
    fresh(&cache, &root, "f1", "1");
    cached(&cache, &root, "f0", "0");
    // f1 is the least recently used.
    fresh(&cache, &root, "f2", "2");
    cached(&cache, &root, "f0", "0");
    cached(&cache, &root, "f2", "2");
    fresh(&cache, &root, "f1", "1");
    for n in 3..10 {
        let name = format!("f{n}");
        fresh(&cache, &root, &name, &n.to_string());
        cached(&cache, &root, &name, &n.to_string());
    }
    // A file it can't hold (reached through a symlink) evicts nothing and adds no watch.
    std::os::unix::fs::symlink("f8", root.join("link")).unwrap();
    let watches = cache.inner.lock().unwrap().watches.len();
    fresh(&cache, &root, "link", "8");
    fresh(&cache, &root, "link", "8");
    cached(&cache, &root, "f8", "8");
    cached(&cache, &root, "f9", "9");
    assert_eq!(cache.inner.lock().unwrap().watches.len(), watches);
    let mut inner = cache.inner.lock().unwrap();
    inner.drain();
    assert_eq!(inner.entries.len(), 2);
    // The two files, the root and the chain above it.
    let chain = root.ancestors().count();
    assert!(
        inner.watches.len() <= 2 + chain,
        "{} watches",
        inner.watches.len()
    );
}

/// A change of root (a reload with another artifacts directory) serves from the new one.
#[test]
fn another_root_starts_over() {
    let (dir, root) = setup();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("kernel"), "o").unwrap();
    let cache = OpenCache::default();
    fresh(&cache, &root, "kernel", "k1");
    cached(&cache, &root, "kernel", "k1");
    fresh(&cache, &other, "kernel", "o");
    cached(&cache, &other, "kernel", "o");
    fresh(&cache, &root, "kernel", "k1");
}
