//! What to send for a GET or HEAD of a file: the whole file, one range, "not modified", or
//! "range not satisfiable" (RFC 9110 sections 13 and 14), decided from the request headers and
//! the file's size and modification time. Pure, so every rule has a test; apart from it, finding
//! and opening a file under its root without letting a request out of it.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::header::HeaderValue;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

/// What is known of a file before reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    pub len: u64,
    pub modified: SystemTime,
}

impl FileMeta {
    /// A strong validator from size and modification time (nanoseconds, so a rewrite within
    /// the same second still changes it).
    pub fn etag(&self) -> String {
        let since = self.modified.duration_since(UNIX_EPOCH).unwrap_or_default();
        format!("\"{:x}-{:x}\"", self.len, since.as_nanos())
    }

    pub fn last_modified(&self) -> String {
        httpdate::fmt_http_date(self.modified)
    }

    /// [`FileMeta::etag`] and [`FileMeta::last_modified`] as header values.
    pub fn validators(&self) -> Validators {
        let value = |s: String| {
            // Quoted hex digits and an HTTP date: visible ASCII, never refused.
            HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
        };
        Validators {
            etag: value(self.etag()),
            last_modified: value(self.last_modified()),
        }
    }
}

/// A file's `ETag` and `Last-Modified`, made once per cached file (a clone shares the bytes).
#[derive(Debug, Clone)]
pub struct Validators {
    pub etag: HeaderValue,
    pub last_modified: HeaderValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Full,
    /// Inclusive byte range.
    Partial {
        start: u64,
        end: u64,
    },
    NotModified,
    RangeNotSatisfiable,
}

/// The request headers that decide what is sent, as text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Conditions<'a> {
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    pub range: Option<&'a str>,
    pub if_range: Option<&'a str>,
}

pub fn decide(headers: &Conditions<'_>, meta: FileMeta) -> Decision {
    decide_for(headers, &meta.etag(), Some(meta.modified), meta.len)
}

/// [`decide`] for a representation with entity tag `etag`, `len` bytes long, and a
/// modification time only when it has one: without, If-Modified-Since is ignored and an
/// If-Range date never matches (RFC 9110 sections 13.1.3 and 13.1.5).
pub fn decide_for(
    headers: &Conditions<'_>,
    etag: &str,
    modified: Option<SystemTime>,
    len: u64,
) -> Decision {
    // If-None-Match wins over If-Modified-Since (RFC 9110 section 13.2.2).
    if let Some(inm) = headers.if_none_match {
        if etag_matches(inm, etag) {
            return Decision::NotModified;
        }
    } else if let Some(since) = headers.if_modified_since.and_then(|s| httpdate::parse_http_date(s).ok())
        && let Some(modified) = modified
        // HTTP dates have whole seconds.
        && truncate_to_seconds(modified) <= since
    {
        return Decision::NotModified;
    }
    let Some(range) = headers.range else {
        return Decision::Full;
    };
    // A range is only honoured for the representation the client already has.
    if let Some(if_range) = headers.if_range {
        let same = if if_range.starts_with('"') {
            if_range == etag
        } else {
            modified.is_some_and(|m| {
                httpdate::parse_http_date(if_range).is_ok_and(|d| d == truncate_to_seconds(m))
            })
        };
        if !same {
            return Decision::Full;
        }
    }
    parse_range(range, len)
}

fn truncate_to_seconds(t: SystemTime) -> SystemTime {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// Weak comparison over a list (`"a", W/"b"`) or `*`.
fn etag_matches(header: &str, etag: &str) -> bool {
    header
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == etag)
}

/// One `bytes=` range; anything else (several ranges, other units, bad syntax) means the whole
/// file, which RFC 9110 section 14.2 allows.
fn parse_range(header: &str, len: u64) -> Decision {
    let Some(spec) = header.strip_prefix("bytes=") else {
        return Decision::Full;
    };
    if spec.contains(',') {
        return Decision::Full;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Decision::Full;
    };
    let (start, end) = match (first.trim(), last.trim()) {
        ("", "") => return Decision::Full,
        ("", suffix) => {
            let Ok(n) = suffix.parse::<u64>() else {
                return Decision::Full;
            };
            if n == 0 || len == 0 {
                return Decision::RangeNotSatisfiable;
            }
            (len.saturating_sub(n), len - 1)
        }
        (start, "") => {
            let Ok(start) = start.parse::<u64>() else {
                return Decision::Full;
            };
            (start, len.saturating_sub(1))
        }
        (start, end) => {
            let (Ok(start), Ok(end)) = (start.parse::<u64>(), end.parse::<u64>()) else {
                return Decision::Full;
            };
            if end < start {
                return Decision::Full;
            }
            (start, end.min(len.saturating_sub(1)))
        }
    };
    if start >= len {
        return Decision::RangeNotSatisfiable;
    }
    Decision::Partial { start, end }
}

/// `rest` percent-decoded as a relative path of plain names (no `..`, no root, no `\\` or NUL),
/// or `None`. Decoding happens first, so `%2e%2e` is `..` and refused like it. Every name is
/// written once: an empty one (`a//b`, a trailing `/`) names no file, and `Path` would drop it,
/// so `kernel/` would be served as `kernel` from the open-file cache and be 404 from the disk.
pub fn relative_path(rest: &str) -> Option<PathBuf> {
    let decoded = percent_encoding::percent_decode_str(rest)
        .decode_utf8()
        .ok()?;
    if decoded.is_empty() || decoded.contains(['\\', '\0']) || decoded.split('/').any(str::is_empty)
    {
        return None;
    }
    let relative = PathBuf::from(decoded.as_ref());
    relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then_some(relative)
}

/// Whether URL path `rest` may name an artifact at all, whatever the directory holds: never a
/// dot-file or anything under a dot-directory (`.openshift_install_state.json` holds the
/// cluster's CA keys), an ignition file, or anything under `auth/` (the admin kubeconfig).
/// Validation keeps the ignition directory out of `artifacts_dir`; this holds even if a file
/// is copied or linked there.
pub fn is_artifact_path(rest: &str) -> bool {
    artifact_relative(rest).is_some()
}

/// The relative path ([`relative_path`]) URL path `rest` names when it may name an artifact
/// ([`is_artifact_path`]), or `None`.
pub fn artifact_relative(rest: &str) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    // Names are UTF-8 here (`relative_path`); compared without a lowercase copy each.
    relative_path(rest).filter(|p| {
        p.components().all(|c| {
            let name = c.as_os_str().as_bytes();
            let ign = name.len() >= 4 && name[name.len() - 4..].eq_ignore_ascii_case(b".ign");
            !(name.starts_with(b".") || name.eq_ignore_ascii_case(b"auth") || ign)
        })
    })
}

/// The real path of the file `relative` names under `root`, or `None` if it is missing, not a
/// regular file, or reached through a symlink that leads out of `root`: [`open_beneath`]'s
/// fallback.
fn resolve_relative(root: &Path, relative: &Path) -> Option<PathBuf> {
    let real = root.join(relative).canonicalize().ok()?;
    let real_root = root.canonicalize().ok()?;
    (real.starts_with(&real_root) && real.is_file()).then_some(real)
}

/// An opened file and its metadata.
pub type Opened = io::Result<(File, Metadata)>;

/// Bodies up to this size are read into memory ([`read_range`]) and go out with the response
/// head in one `writev`, as nginx sends small files when it is fastest (`sendfile off`); larger
/// ones go with sendfile(2). A sendfile body is a second write, so a second packet per response
/// with all of the kernel's TCP/IP and veth work: docs/performance.md (`## HTTP boot server:
/// small files`) has the measurement.
pub const SMALL_BODY: u64 = 16 * 1024;

/// `len` bytes of `file` from `start`, with one `pread` (for bodies up to [`SMALL_BODY`]); an
/// error if the file is shorter now than its metadata said.
pub fn read_range(file: &File, start: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0; usize::try_from(len).map_err(io::Error::other)?];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, start)?;
    Ok(buf)
}

/// The file under `root` that URL path `rest` (already stripped of its route prefix) names,
/// opened: the path (for the log) and the opened file, or `None` for a 404 (the reason does
/// not leak). A symlink that leads out of `root` is refused. On the fast path a single `openat2(RESOLVE_BENEATH)` lets the
/// kernel refuse an escape while it walks the path, instead of two `canonicalize` calls that
/// read every component of both paths per request. Whatever the fast path cannot decide (an
/// absolute symlink, a kernel or seccomp filter without `openat2`) goes the canonicalize way
/// (`resolve_relative`).
/// Opened with `O_NONBLOCK`, so a FIFO planted in `root` can't stall the caller: it is not a
/// regular file and so a 404.
pub fn open_beneath(root: &Path, rest: &str) -> Option<(PathBuf, Opened)> {
    open_relative(root, &relative_path(rest)?)
}

/// [`open_beneath`] for a path already decoded and checked by [`relative_path`].
pub fn open_relative(root: &Path, relative: &Path) -> Option<(PathBuf, Opened)> {
    use nix::errno::Errno;
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
    let fast = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .and_then(|dir| {
        let how = OpenHow::new()
            .flags(flags)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        nix::fcntl::openat2(&dir, relative, how)
    });
    let path = root.join(relative);
    let file = match fast {
        Ok(fd) => File::from(fd),
        Err(Errno::ENOENT | Errno::ENOTDIR) => return None,
        // Refusals and what the fast path can't do: decided by `resolve`.
        Err(
            Errno::EXDEV
            | Errno::ELOOP
            | Errno::ENOSYS
            | Errno::EPERM
            | Errno::EINVAL
            | Errno::E2BIG
            | Errno::EAGAIN,
        ) => {
            let real = resolve_relative(root, relative)?;
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(OFlag::O_NOCTTY.bits() | OFlag::O_NONBLOCK.bits())
                .open(&real);
            return regular(real, opened);
        }
        Err(e) => return Some((path, Err(e.into()))),
    };
    regular(path, Ok(file))
}

/// `opened` with its metadata, or `None` when it is not a regular file.
fn regular(path: PathBuf, opened: io::Result<File>) -> Option<(PathBuf, Opened)> {
    let with_meta = opened.and_then(|f| {
        let m = f.metadata()?;
        Ok((f, m))
    });
    match with_meta {
        Ok((_, m)) if !m.is_file() => None,
        other => Some((path, other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback's rules on their own, for the URL path `rest`.
    fn resolve(root: &Path, rest: &str) -> Option<PathBuf> {
        resolve_relative(root, &relative_path(rest)?)
    }

    fn meta() -> FileMeta {
        FileMeta {
            len: 1000,
            modified: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        }
    }

    const IF_NONE_MATCH: u8 = 0;
    const IF_MODIFIED_SINCE: u8 = 1;
    const RANGE: u8 = 2;
    const IF_RANGE: u8 = 3;

    fn with<'a>(pairs: &[(u8, &'a str)]) -> Conditions<'a> {
        let mut c = Conditions::default();
        for &(k, v) in pairs {
            match k {
                IF_NONE_MATCH => c.if_none_match = Some(v),
                IF_MODIFIED_SINCE => c.if_modified_since = Some(v),
                RANGE => c.range = Some(v),
                _ => c.if_range = Some(v),
            }
        }
        c
    }

    #[test]
    fn ranges() {
        let d = |r: &str| decide(&with(&[(RANGE, r)]), meta());
        assert_eq!(d("bytes=0-99"), Decision::Partial { start: 0, end: 99 });
        assert_eq!(
            d("bytes=900-"),
            Decision::Partial {
                start: 900,
                end: 999
            }
        );
        assert_eq!(
            d("bytes=-100"),
            Decision::Partial {
                start: 900,
                end: 999
            }
        );
        assert_eq!(d("bytes=-5000"), Decision::Partial { start: 0, end: 999 });
        assert_eq!(
            d("bytes=990-5000"),
            Decision::Partial {
                start: 990,
                end: 999
            }
        );
        assert_eq!(d("bytes=1000-"), Decision::RangeNotSatisfiable);
        assert_eq!(d("bytes=-0"), Decision::RangeNotSatisfiable);
        assert_eq!(d("bytes=0-1,5-6"), Decision::Full);
        assert_eq!(d("bytes=5-1"), Decision::Full);
        assert_eq!(d("items=0-1"), Decision::Full);
        assert_eq!(d("bytes=x-1"), Decision::Full);
    }

    #[test]
    fn conditionals() {
        let m = meta();
        assert_eq!(
            decide(&with(&[(IF_NONE_MATCH, &m.etag())]), m),
            Decision::NotModified
        );
        assert_eq!(
            decide(
                &with(&[(IF_NONE_MATCH, &format!("\"x\", W/{}", m.etag()))]),
                m
            ),
            Decision::NotModified
        );
        assert_eq!(
            decide(&with(&[(IF_NONE_MATCH, "\"other\"")]), m),
            Decision::Full
        );
        assert_eq!(
            decide(&with(&[(IF_MODIFIED_SINCE, &m.last_modified())]), m),
            Decision::NotModified
        );
        let earlier = httpdate::fmt_http_date(m.modified - Duration::from_secs(10));
        assert_eq!(
            decide(&with(&[(IF_MODIFIED_SINCE, &earlier)]), m),
            Decision::Full
        );
        // If-None-Match that fails overrides a matching If-Modified-Since.
        assert_eq!(
            decide(
                &with(&[
                    (IF_NONE_MATCH, "\"other\""),
                    (IF_MODIFIED_SINCE, &m.last_modified())
                ]),
                m
            ),
            Decision::Full
        );
        // If-Range with a stale validator: the whole new file instead of a piece of it.
        assert_eq!(
            decide(&with(&[(RANGE, "bytes=0-9"), (IF_RANGE, "\"stale\"")]), m),
            Decision::Full
        );
        assert_eq!(
            decide(&with(&[(RANGE, "bytes=0-9"), (IF_RANGE, &m.etag())]), m),
            Decision::Partial { start: 0, end: 9 }
        );
    }

    #[test]
    fn without_a_modification_time_only_the_entity_tag_validates() {
        let etag = "\"iso-1\"";
        let date = "Tue, 14 Nov 2023 22:13:20 GMT";
        let d = |c: &Conditions<'_>| decide_for(c, etag, None, 1000);
        assert_eq!(d(&with(&[(IF_MODIFIED_SINCE, date)])), Decision::Full);
        assert_eq!(d(&with(&[(IF_NONE_MATCH, etag)])), Decision::NotModified);
        assert_eq!(
            d(&with(&[(RANGE, "bytes=0-9"), (IF_RANGE, date)])),
            Decision::Full
        );
        assert_eq!(
            d(&with(&[(RANGE, "bytes=0-9"), (IF_RANGE, etag)])),
            Decision::Partial { start: 0, end: 9 }
        );
        // With the time, the same date validates (the file path's behaviour).
        let modified = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            decide_for(
                &with(&[(IF_MODIFIED_SINCE, date)]),
                etag,
                Some(modified),
                1000
            ),
            Decision::NotModified
        );
    }

    #[test]
    fn traversal_is_refused_however_it_is_spelt() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("artifacts");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("kernel"), "k").unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("link")).unwrap();
        assert!(resolve(&root, "kernel").is_some());
        assert!(resolve(&root, "kern%65l").is_some());
        for bad in [
            "../secret",
            "%2e%2e/secret",
            "%2E%2E%2Fsecret",
            "..%2fsecret",
            "link",
            "..\\secret",
            "%00",
            "",
            "/etc/passwd",
            "%2Fetc%2Fpasswd",
            "%252e%252e/secret",
        ] {
            assert!(resolve(&root, bad).is_none(), "{bad}");
            assert!(open_beneath(&root, bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn no_dot_file_ignition_or_auth_file_is_an_artifact() {
        for bad in [
            ".openshift_install_state.json",
            "install_dir/.openshift_install_state.json",
            "%2Eopenshift_install_state.json",
            "master.ign",
            "install_dir/bootstrap.IGN",
            "auth/kubeconfig",
            "install_dir/auth/kubeadmin-password",
            ".hidden/kernel",
        ] {
            assert!(!is_artifact_path(bad), "{bad}");
        }
        for good in [
            "kernel",
            "fcos/rootfs.img",
            "live.iso",
            "ignition-notes.txt",
        ] {
            assert!(is_artifact_path(good), "{good}");
        }
    }

    /// A file is named one way: `kernel/` and `fcos//rootfs.img` name nothing, so they are 404
    /// whether or not `kernel` is in the open-file cache.
    #[test]
    fn a_name_written_with_an_empty_segment_names_no_file() {
        for bad in [
            "kernel/",
            "fcos//rootfs.img",
            "fcos/rootfs.img/",
            "/kernel",
            "kernel%2F",
        ] {
            assert!(relative_path(bad).is_none(), "{bad}");
            assert!(!is_artifact_path(bad), "{bad}");
        }
        assert!(relative_path("fcos/rootfs.img").is_some());
    }

    /// `open_beneath` serves what `resolve` serves (symlinks that stay inside the root, an
    /// absolute one included, which `openat2` itself refuses) and refuses the rest, a FIFO
    /// without blocking.
    #[test]
    fn open_beneath_opens_what_resolve_allows() {
        use std::io::Read as _;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("artifacts");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/kernel"), "k").unwrap();
        std::os::unix::fs::symlink("sub/kernel", root.join("relative")).unwrap();
        std::os::unix::fs::symlink(root.join("sub/kernel"), root.join("absolute")).unwrap();
        std::os::unix::fs::symlink("../../artifacts/sub/kernel", root.join("sub/around")).unwrap();
        nix::unistd::mkfifo(&root.join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        for good in [
            "sub/kernel",
            "sub%2fkernel",
            "relative",
            "absolute",
            "sub/around",
        ] {
            let (path, opened) = open_beneath(&root, good).unwrap_or_else(|| panic!("{good}"));
            let (mut f, meta) = opened.unwrap();
            assert_eq!(meta.len(), 1, "{good}");
            let mut text = String::new();
            f.read_to_string(&mut text).unwrap();
            assert_eq!(text, "k", "{good}");
            assert!(path.starts_with(&root), "{good}: {}", path.display());
        }
        for refused in ["sub", "fifo", "missing", "sub/missing", "sub/kernel/x"] {
            assert!(open_beneath(&root, refused).is_none(), "{refused}");
        }
    }
}
