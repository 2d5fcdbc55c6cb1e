//! CoreOS stream metadata (the `stable.json` of Fedora CoreOS, the stream JSON of CentOS Stream
//! CoreOS): which PXE files and metal image a release has for an architecture, where they are
//! and their SHA-256.
//!
//! Pure: text in, a [`Selection`] out. Every key the appliance needs is optional in the types
//! and checked by [`select`], so a missing one is reported by its full path
//! (`architectures.x86_64.artifacts.metal.formats.pxe.rootfs.sha256`) rather than as a serde
//! error about an anonymous struct. Keys the appliance does not use are ignored: the format grows.

use std::collections::BTreeMap;

use anyhow::{Context as _, anyhow, bail};
use percent_encoding::percent_decode_str;
use serde::Deserialize;
use url::Url;

use crate::digest::Sha256;

/// The stream metadata as written; only the keys the appliance reads.
#[derive(Debug, Deserialize)]
pub struct Stream {
    stream: Option<String>,
    architectures: Option<BTreeMap<String, Arch>>,
}

#[derive(Debug, Deserialize)]
struct Arch {
    artifacts: Option<BTreeMap<String, Platform>>,
}

#[derive(Debug, Deserialize)]
struct Platform {
    release: Option<String>,
    /// Format (`pxe`, `raw.xz`, ...) to its files (`kernel`, `disk`, ...).
    formats: Option<BTreeMap<String, BTreeMap<String, File>>>,
}

#[derive(Debug, Deserialize)]
struct File {
    location: Option<String>,
    signature: Option<String>,
    sha256: Option<String>,
}

/// Which artifact a file is; the config names the PXE ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Kernel,
    Initramfs,
    Rootfs,
    /// The compressed disk image (`raw.xz`), for installs that do not use the live rootfs.
    Metal,
    /// The live ISO, the base of the per-node ISOs.
    Iso,
}

/// The files fetched besides the PXE kernel, initramfs and rootfs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Also {
    pub metal: bool,
    pub iso: bool,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Kernel => "kernel",
            Kind::Initramfs => "initramfs",
            Kind::Rootfs => "rootfs",
            Kind::Metal => "metal image",
            Kind::Iso => "live ISO",
        }
    }

    /// Where the file is in a platform's `formats`.
    fn key(self) -> (&'static str, &'static str) {
        match self {
            Kind::Kernel => ("pxe", "kernel"),
            Kind::Initramfs => ("pxe", "initramfs"),
            Kind::Rootfs => ("pxe", "rootfs"),
            Kind::Metal => ("raw.xz", "disk"),
            Kind::Iso => ("iso", "disk"),
        }
    }
}

/// One file of a release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub kind: Kind,
    pub location: Url,
    /// The last segment of `location`, percent-decoded: the file's name on the mirror, which is
    /// what an operator who downloaded it by hand has.
    pub upstream_name: String,
    pub sha256: Sha256,
    /// The detached OpenPGP signature, when the stream lists one.
    pub signature: Option<Url>,
}

/// The files to fetch for one architecture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub stream: String,
    pub release: String,
    pub arch: String,
    pub files: Vec<Wanted>,
}

/// Parses stream metadata JSON; `source` names it in errors.
pub fn parse(text: &[u8], source: &str) -> anyhow::Result<Stream> {
    serde_json::from_slice(text)
        .with_context(|| format!("{source} is not CoreOS stream metadata JSON"))
}

/// The PXE kernel, initramfs and rootfs of `arch`, and the metal image and live ISO as `also`
/// says. Relative locations are resolved against `base` (the stream's own URL) when there is
/// one.
pub fn select(
    stream: &Stream,
    arch: &str,
    also: Also,
    base: Option<&Url>,
) -> anyhow::Result<Selection> {
    let arches = stream.architectures.as_ref().ok_or_else(|| {
        anyhow!("the stream metadata has no `architectures` (is this a CoreOS stream JSON?)")
    })?;
    let Some(a) = arches.get(arch) else {
        let known: Vec<&str> = arches.keys().map(String::as_str).collect();
        bail!(
            "the stream has no architecture `{arch}` (it has: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        );
    };
    let at = format!("architectures.{arch}.artifacts");
    let platform = a
        .artifacts
        .as_ref()
        .ok_or_else(|| missing(&at))?
        .get("metal")
        .ok_or_else(|| missing(&format!("{at}.metal")))?;
    let at = format!("{at}.metal");
    let release = platform
        .release
        .clone()
        .ok_or_else(|| missing(&format!("{at}.release")))?;
    let formats = platform
        .formats
        .as_ref()
        .ok_or_else(|| missing(&format!("{at}.formats")))?;
    let mut kinds = vec![Kind::Kernel, Kind::Initramfs, Kind::Rootfs];
    if also.metal {
        kinds.push(Kind::Metal);
    }
    if also.iso {
        kinds.push(Kind::Iso);
    }
    let files = kinds
        .into_iter()
        .map(|kind| wanted(formats, kind, &format!("{at}.formats"), base))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Selection {
        stream: stream
            .stream
            .clone()
            .unwrap_or_else(|| "(unnamed)".to_owned()),
        release,
        arch: arch.to_owned(),
        files,
    })
}

fn missing(path: &str) -> anyhow::Error {
    anyhow!("the stream metadata has no `{path}`")
}

fn wanted(
    formats: &BTreeMap<String, BTreeMap<String, File>>,
    kind: Kind,
    at: &str,
    base: Option<&Url>,
) -> anyhow::Result<Wanted> {
    let (format, name) = kind.key();
    let at = format!("{at}.{format}");
    let file = formats
        .get(format)
        .ok_or_else(|| missing(&at))?
        .get(name)
        .ok_or_else(|| missing(&format!("{at}.{name}")))?;
    let at = format!("{at}.{name}");
    let location = file
        .location
        .as_deref()
        .ok_or_else(|| missing(&format!("{at}.location")))?;
    let sha = file
        .sha256
        .as_deref()
        .ok_or_else(|| missing(&format!("{at}.sha256")))?;
    let sha256 = Sha256::from_hex(sha)
        .ok_or_else(|| anyhow!("`{at}.sha256` is not 64 hex digits: `{sha}`"))?;
    let location = resolve(location, base).with_context(|| format!("`{at}.location`"))?;
    let upstream_name = file_name(&location).with_context(|| format!("`{at}.location`"))?;
    let signature = file
        .signature
        .as_deref()
        .map(|s| resolve(s, base).with_context(|| format!("`{at}.signature`")))
        .transpose()?;
    Ok(Wanted {
        kind,
        location,
        upstream_name,
        sha256,
        signature,
    })
}

fn resolve(location: &str, base: Option<&Url>) -> anyhow::Result<Url> {
    let url = match base {
        Some(b) => b.join(location),
        None => Url::parse(location),
    }
    .with_context(|| format!("`{location}` is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        bail!("`{url}` is not an http:// or https:// URL");
    }
    Ok(url)
}

/// The last path segment, decoded; it must be a plain file name, because it may become one.
fn file_name(url: &Url) -> anyhow::Result<String> {
    let last = url
        .path_segments()
        .and_then(|mut s| s.next_back())
        .unwrap_or_default();
    let name = percent_decode_str(last)
        .decode_utf8()
        .map_err(|_| anyhow!("`{url}` ends in a name that is not UTF-8"))?;
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        bail!("`{url}` does not end in a file name");
    }
    Ok(name.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA_K: &str = "1111111111111111111111111111111111111111111111111111111111111111";

    fn file(location: &str, sha: &str) -> serde_json::Value {
        serde_json::json!({ "location": location, "signature": format!("{location}.sig"), "sha256": sha })
    }

    fn sample() -> serde_json::Value {
        let base = "https://builds.example/prod/40.1/x86_64";
        serde_json::json!({
            "stream": "stable",
            "metadata": { "last-modified": "2026-01-01T00:00:00Z" },
            "architectures": {
                "x86_64": { "artifacts": { "metal": {
                    "release": "40.1",
                    "formats": {
                        "pxe": {
                            "kernel": file(&format!("{base}/fcos-40.1-live-kernel-x86_64"), SHA_K),
                            "initramfs": file(&format!("{base}/fcos-40.1-live-initramfs.x86_64.img"), &"2".repeat(64)),
                            "rootfs": file(&format!("{base}/fcos-40.1-live-rootfs.x86_64.img"), &"3".repeat(64)),
                        },
                        "raw.xz": { "disk": {
                            "location": format!("{base}/fcos-40.1-metal.x86_64.raw.xz"),
                            "sha256": "4".repeat(64),
                            "uncompressed-sha256": "5".repeat(64),
                        } },
                        "iso": { "disk": file(&format!("{base}/fcos.iso"), &"6".repeat(64)) },
                    },
                } } },
                "aarch64": { "artifacts": { "metal": { "release": "40.1", "formats": {} } } },
            },
        })
    }

    fn select_json(v: &serde_json::Value, arch: &str, metal: bool) -> anyhow::Result<Selection> {
        let stream = parse(v.to_string().as_bytes(), "test.json")?;
        select(&stream, arch, Also { metal, iso: false }, None)
    }

    fn err(v: &serde_json::Value, arch: &str, metal: bool) -> String {
        format!("{:#}", select_json(v, arch, metal).unwrap_err())
    }

    #[test]
    fn picks_the_pxe_files_of_the_arch_with_their_digests_and_names() {
        let s = select_json(&sample(), "x86_64", false).unwrap();
        assert_eq!(
            (s.stream.as_str(), s.release.as_str(), s.arch.as_str()),
            ("stable", "40.1", "x86_64")
        );
        let kinds: Vec<Kind> = s.files.iter().map(|w| w.kind).collect();
        assert_eq!(kinds, [Kind::Kernel, Kind::Initramfs, Kind::Rootfs]);
        let k = &s.files[0];
        assert_eq!(
            k.location.as_str(),
            "https://builds.example/prod/40.1/x86_64/fcos-40.1-live-kernel-x86_64"
        );
        assert_eq!(k.upstream_name, "fcos-40.1-live-kernel-x86_64");
        assert_eq!(k.sha256, Sha256::from_hex(SHA_K).unwrap());
        assert_eq!(s.files[2].upstream_name, "fcos-40.1-live-rootfs.x86_64.img");
    }

    #[test]
    fn iso_adds_the_live_iso() {
        let stream = parse(sample().to_string().as_bytes(), "test.json").unwrap();
        let also = Also {
            metal: false,
            iso: true,
        };
        let s = select(&stream, "x86_64", also, None).unwrap();
        let kinds: Vec<Kind> = s.files.iter().map(|w| w.kind).collect();
        assert_eq!(
            kinds,
            [Kind::Kernel, Kind::Initramfs, Kind::Rootfs, Kind::Iso]
        );
        let iso = &s.files[3];
        assert_eq!(iso.upstream_name, "fcos.iso");
        assert_eq!(iso.sha256, Sha256::from_hex(&"6".repeat(64)).unwrap());
        let mut v = sample();
        v["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]
            .as_object_mut()
            .unwrap()
            .remove("iso");
        let stream = parse(v.to_string().as_bytes(), "test.json").unwrap();
        let e = format!("{:#}", select(&stream, "x86_64", also, None).unwrap_err());
        assert!(
            e.contains("no `architectures.x86_64.artifacts.metal.formats.iso`"),
            "{e}"
        );
    }

    #[test]
    fn metal_adds_the_raw_xz_disk_checked_by_its_compressed_digest() {
        let s = select_json(&sample(), "x86_64", true).unwrap();
        let m = s.files.last().unwrap();
        assert_eq!(m.kind, Kind::Metal);
        assert_eq!(m.upstream_name, "fcos-40.1-metal.x86_64.raw.xz");
        // The file as downloaded is compressed: `sha256`, not `uncompressed-sha256`.
        assert_eq!(m.sha256, Sha256::from_hex(&"4".repeat(64)).unwrap());
    }

    #[test]
    fn a_missing_arch_names_the_ones_there_are() {
        let e = err(&sample(), "s390x", false);
        assert!(e.contains("no architecture `s390x`"), "{e}");
        assert!(e.contains("it has: aarch64, x86_64"), "{e}");
    }

    #[test]
    fn a_missing_key_is_named_by_its_full_path() {
        let e = err(&sample(), "aarch64", false);
        assert!(
            e.contains("no `architectures.aarch64.artifacts.metal.formats.pxe`"),
            "{e}"
        );

        let mut v = sample();
        v["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]["rootfs"]
            .as_object_mut()
            .unwrap()
            .remove("sha256");
        let e = err(&v, "x86_64", false);
        assert!(
            e.contains("no `architectures.x86_64.artifacts.metal.formats.pxe.rootfs.sha256`"),
            "{e}"
        );

        let mut v = sample();
        v["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]
            .as_object_mut()
            .unwrap()
            .remove("raw.xz");
        assert!(select_json(&v, "x86_64", false).is_ok());
        let e = err(&v, "x86_64", true);
        assert!(
            e.contains("no `architectures.x86_64.artifacts.metal.formats.raw.xz`"),
            "{e}"
        );

        let e = err(&serde_json::json!({ "stream": "stable" }), "x86_64", false);
        assert!(e.contains("no `architectures`"), "{e}");
        let e = err(
            &serde_json::json!({ "architectures": { "x86_64": {} } }),
            "x86_64",
            false,
        );
        assert!(e.contains("no `architectures.x86_64.artifacts`"), "{e}");
    }

    #[test]
    fn a_bad_digest_or_location_is_refused_with_its_path() {
        let mut v = sample();
        v["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]["kernel"]["sha256"] =
            "abc".into();
        let e = err(&v, "x86_64", false);
        assert!(
            e.contains("`architectures.x86_64.artifacts.metal.formats.pxe.kernel.sha256` is not 64 hex digits"),
            "{e}"
        );

        let pxe = "/architectures/x86_64/artifacts/metal/formats/pxe";
        for (location, why) in [
            ("not a url", "is not a URL"),
            ("ftp://mirror/kernel", "is not an http:// or https:// URL"),
            ("https://mirror/dir/", "does not end in a file name"),
            ("https://mirror/dir/a%2Fb", "does not end in a file name"),
        ] {
            let mut v = sample();
            *v.pointer_mut(&format!("{pxe}/kernel/location")).unwrap() = location.into();
            let e = err(&v, "x86_64", false);
            assert!(e.contains("pxe.kernel.location"), "{location}: {e}");
            assert!(e.contains(why), "{location}: {e}");
        }
    }

    #[test]
    fn relative_locations_resolve_against_the_stream_url() {
        let mut v = sample();
        v["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]["kernel"]["location"] =
            "builds/k%20one".into();
        let stream = parse(v.to_string().as_bytes(), "test.json").unwrap();
        let base = Url::parse("http://127.0.0.1:8000/streams/stable.json").unwrap();
        let s = select(&stream, "x86_64", Also::default(), Some(&base)).unwrap();
        assert_eq!(
            s.files[0].location.as_str(),
            "http://127.0.0.1:8000/streams/builds/k%20one"
        );
        assert_eq!(s.files[0].upstream_name, "k one");
        // Without a base (a stream read from a file) a relative location is an error.
        assert!(select(&stream, "x86_64", Also::default(), None).is_err());
    }

    #[test]
    fn malformed_json_is_an_error_naming_the_source() {
        let e = format!(
            "{:#}",
            parse(b"{\"architectures\": [", "stable.json").unwrap_err()
        );
        assert!(
            e.contains("stable.json is not CoreOS stream metadata JSON"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            parse(b"{\"architectures\": 3}", "s.json").unwrap_err()
        );
        assert!(e.contains("invalid type"), "{e}");
    }
}
