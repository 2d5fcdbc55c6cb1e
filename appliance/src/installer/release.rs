//! An OKD release's openshift-install, fetched as the release publishes it.
//!
//! A release's client tools are what `oc adm release extract --tools` writes (openshift/oc
//! 9dbf8107, `pkg/cli/admin/release/extract_tools.go`): per platform a tarball named
//! `openshift-install-linux-<release>.tar.gz` (`openshift-install-linux-arm64-<release>.tar.gz`
//! on arm64) that holds `README.md` and the `openshift-install` binary (mode 0755), and
//! `sha256sum.txt`, one line `<sha256 in hex>  <file name>` per file, sorted. OKD publishes them
//! as the assets of a GitHub release of okd-project/okd whose tag is the release name, so a
//! file is at `https://github.com/okd-project/okd/releases/download/<release>/<file>` (the
//! mirror `install.openshift_install.mirror` can replace, with the same layout).
//!
//! `installer fetch` reads `sha256sum.txt`, downloads the tarball as `artifacts fetch` does a
//! CoreOS file (continued from its `.part`, deleted when its SHA-256 is not the published one),
//! takes the binary out of it and records both digests beside it, so a second run that finds
//! the same binary downloads nothing.

use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use url::Url;

use crate::artifacts::store::{self, Partial};
use crate::digest::Sha256;

/// The binary's name, in the tarball and in the release's directory.
pub const BINARY: &str = "openshift-install";
/// The release's checksum file.
pub const SUMS: &str = "sha256sum.txt";
/// What `fetch` verified, in `sha256sum` format: the tarball's line, then the binary's.
const RECORD: &str = "verified.sha256";
/// Larger than any release's checksum file (a few lines).
const SUMS_LIMIT: usize = 64 << 10;
/// Larger than any openshift-install binary (about 700 MiB in 4.19).
const BINARY_LIMIT: u64 = 4 << 30;

/// Where a release's installer is kept: `openshift-install/<release>/` beside the config (not
/// in the state directory: that belongs to the service's account, which must not be able to
/// replace a program the operator runs).
pub fn dir(config_dir: &Path, version: &str) -> PathBuf {
    config_dir.join("openshift-install").join(version)
}

/// The tarball of `version` for the CPU `arch` (Rust's name: `x86_64`, `aarch64`).
pub fn tarball_name(version: &str, arch: &str) -> Result<String, String> {
    match arch {
        "x86_64" => Ok(format!("openshift-install-linux-{version}.tar.gz")),
        "aarch64" => Ok(format!("openshift-install-linux-arm64-{version}.tar.gz")),
        other => Err(format!(
            "releases publish openshift-install for Linux on x86_64 and aarch64, not {other}"
        )),
    }
}

/// The SHA-256 `sums` (a `sha256sum.txt`) gives `name`.
pub fn published(sums: &str, name: &str) -> Result<Sha256, String> {
    for line in sums.lines() {
        // `sha256sum` writes two spaces, or ` *` for a binary-mode digest.
        let Some((hex, file)) = line.split_once(' ') else {
            continue;
        };
        let file = file.strip_prefix([' ', '*']).unwrap_or(file);
        if file == name {
            return Sha256::from_hex(hex)
                .ok_or_else(|| format!("its digest for {name} is not a SHA-256: `{hex}`"));
        }
    }
    Err(format!("it lists no {name}"))
}

/// Takes the `openshift-install` entry of the gzip'd tarball at `tarball` out into `dest`
/// (through `<dest>.part`, mode 0755, synced and renamed); returns its SHA-256.
pub fn extract(tarball: &Path, dest: &Path) -> anyhow::Result<Sha256> {
    let file = File::open(tarball).with_context(|| format!("can't read {}", tarball.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let what = || {
        format!(
            "{} is not a tarball of openshift-install",
            tarball.display()
        )
    };
    for entry in archive.entries().with_context(what)? {
        let entry = entry.with_context(what)?;
        let path = entry.path().with_context(what)?;
        let name = path.strip_prefix("./").unwrap_or(&path);
        if name != Path::new(BINARY) || !entry.header().entry_type().is_file() {
            continue;
        }
        anyhow::ensure!(
            entry.size() <= BINARY_LIMIT,
            "{}'s {BINARY} is {} bytes: larger than any installer",
            tarball.display(),
            entry.size()
        );
        let mut part = Partial::create(&store::part_path(dest))?;
        let mut reader = entry.take(BINARY_LIMIT);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = reader.read(&mut buf).with_context(what)?;
            if n == 0 {
                break;
            }
            part.write(&buf[..n])?;
        }
        part.flush()?;
        let digest = part.digest();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(part.path(), std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("can't make {} executable", part.path().display()))?;
        part.commit(dest)?;
        return Ok(digest);
    }
    bail!("{}: it holds no {BINARY}", what())
}

/// What `fetch` did.
#[derive(Debug)]
pub struct Fetched {
    pub binary: PathBuf,
    /// One line per step, for the operator.
    pub lines: Vec<String>,
}

/// Puts release `version`'s installer (from `mirror`, one directory per release) beside the
/// config in `config_dir`, verified against the release's `sha256sum.txt`; the CPU is `arch`.
pub async fn fetch(
    version: &str,
    mirror: &str,
    config_dir: &Path,
    arch: &str,
) -> anyhow::Result<Fetched> {
    let tarball = tarball_name(version, arch).map_err(anyhow::Error::msg)?;
    let base = format!("{}/{version}/", mirror.trim_end_matches('/'));
    let base = Url::parse(&base).with_context(|| format!("`{base}` is not a URL"))?;
    let sums_url = base.join(SUMS)?;
    let fetcher = crate::artifacts::Fetcher::default();
    let sums = fetcher
        .get_small(&sums_url, SUMS_LIMIT)
        .await
        .with_context(|| format!("release {version}'s checksums"))?;
    let sums = String::from_utf8_lossy(&sums);
    let expected = published(&sums, &tarball).map_err(|e| anyhow::anyhow!("{sums_url}: {e}"))?;
    let dir = dir(config_dir, version);
    std::fs::create_dir_all(&dir).with_context(|| format!("can't create {}", dir.display()))?;
    let binary = dir.join(BINARY);
    let record = dir.join(RECORD);
    if let Some(line) = up_to_date(&record, &binary, &tarball, expected).await? {
        return Ok(Fetched {
            binary,
            lines: vec![line],
        });
    }
    let tarball_path = dir.join(&tarball);
    let url = base.join(&tarball)?;
    let mut lines = vec![
        fetcher
            .fetch_checked(&tarball, &url, expected, &tarball_path)
            .await?,
    ];
    let digest = tokio::task::spawn_blocking({
        let (from, to) = (tarball_path.clone(), binary.clone());
        move || extract(&from, &to)
    })
    .await??;
    store::write_file(
        &record,
        format!("{expected}  {tarball}\n{digest}  {BINARY}\n").as_bytes(),
    )?;
    // The binary is what is kept: the tarball would double the space for nothing.
    store::remove_if_present(&tarball_path)?;
    lines.push(format!(
        "{}: taken out of {tarball} (sha256 {digest}); release {version}'s tarball verified against {sums_url}",
        binary.display()
    ));
    Ok(Fetched { binary, lines })
}

/// The line saying the binary in place is the one an earlier fetch verified from the tarball
/// the release still publishes, or `None` when it must be fetched.
async fn up_to_date(
    record: &Path,
    binary: &Path,
    tarball: &str,
    expected: Sha256,
) -> anyhow::Result<Option<String>> {
    let Ok(text) = std::fs::read_to_string(record) else {
        return Ok(None);
    };
    let (Ok(from), Ok(kept)) = (published(&text, tarball), published(&text, BINARY)) else {
        return Ok(None);
    };
    if from != expected {
        return Ok(None);
    }
    let path = binary.to_owned();
    let actual = tokio::task::spawn_blocking(move || store::hash_file(&path)).await??;
    Ok((actual == Some(kept)).then(|| {
        format!(
            "{}: already in place (sha256 {kept}, from the tarball the release publishes)",
            binary.display()
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMS: &str = "\
1111111111111111111111111111111111111111111111111111111111111111  openshift-client-linux-4.19.0-okd-scos.1.tar.gz
2222222222222222222222222222222222222222222222222222222222222222  openshift-install-linux-4.19.0-okd-scos.1.tar.gz
3333333333333333333333333333333333333333333333333333333333333333 *release.txt
";

    #[test]
    fn the_tarball_is_named_after_the_release_and_the_cpu() {
        assert_eq!(
            tarball_name("4.19.0-okd-scos.1", "x86_64").unwrap(),
            "openshift-install-linux-4.19.0-okd-scos.1.tar.gz"
        );
        assert_eq!(
            tarball_name("4.19.0-okd-scos.1", "aarch64").unwrap(),
            "openshift-install-linux-arm64-4.19.0-okd-scos.1.tar.gz"
        );
        assert!(tarball_name("4.19.0", "riscv64").is_err());
    }

    #[test]
    fn the_published_digest_is_the_line_of_that_file_only() {
        let name = "openshift-install-linux-4.19.0-okd-scos.1.tar.gz";
        assert_eq!(published(SUMS, name).unwrap().to_string(), "2".repeat(64));
        assert_eq!(
            published(SUMS, "release.txt").unwrap().to_string(),
            "3".repeat(64)
        );
        // A prefix of a listed name is not that name.
        let e = published(SUMS, "openshift-install-linux-4.19.0-okd-scos.1.tar").unwrap_err();
        assert!(e.contains("lists no"), "{e}");
        let e = published("zz  openshift-install\n", BINARY).unwrap_err();
        assert!(e.contains("not a SHA-256"), "{e}");
    }

    #[test]
    fn the_binary_is_taken_out_of_the_tarball_executable_and_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let tarball = dir.path().join("t.tar.gz");
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            File::create(&tarball).unwrap(),
            flate2::Compression::fast(),
        ));
        for (name, body) in [
            ("README.md", &b"# OpenShift Install\n"[..]),
            (BINARY, b"#!/bin/sh\n"),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(body.len() as u64);
            header.set_mode(0o755);
            header.set_cksum();
            builder.append_data(&mut header, name, body).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap();
        let dest = dir.path().join(BINARY);
        let digest = extract(&tarball, &dest).unwrap();
        assert_eq!(digest, Sha256::of(b"#!/bin/sh\n"));
        assert_eq!(std::fs::read(&dest).unwrap(), b"#!/bin/sh\n");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
            0o755
        );
        // A tarball without the binary says so and writes nothing.
        std::fs::write(dir.path().join("empty.tar.gz"), b"not gzip").unwrap();
        let other = dir.path().join("other");
        assert!(extract(&dir.path().join("empty.tar.gz"), &other).is_err());
        assert!(!other.exists());
    }
}
