//! `okd-appliance artifacts fetch|import`: puts a CoreOS release's live PXE files (and, if asked,
//! its metal disk image and its live ISO) into `install.artifacts_dir` under the names the config gives them, so
//! `serve` publishes them, each checked against the SHA-256 in the stream metadata first.
//!
//! Pure parts: [`stream`] (the metadata and which files it names), [`rules`] (redirects and
//! what a response means for a partial file), the digests of `crate::digest`, the armor decoding
//! and gpgv status reading of [`signature`], and the formatting in `progress`. I/O:
//! `client` (HTTP GETs on reqwest, through the environment's proxies, trusting the platform's
//! CAs), [`store`] (`.part` files, atomic rename), and this file, which runs one artifact after
//! the other and reports each.
//!
//! With `--key`, each file's detached OpenPGP signature (the stream's `signature` URL, or
//! `<name>.sig` beside an imported file) is checked too, by gpgv ([`signature`]), before the
//! file is put in place, and is kept beside it as `<dest>.sig` (coreos-installer fetches
//! `<image_url>.sig`). Without `--key` the SHA-256 from the stream metadata is all there is,
//! so integrity is that of the stream's transport (HTTPS, or the operator's own file). With
//! `--key`, a file already in place with the right SHA-256 is checked against its kept
//! `<dest>.sig` too, and removed if that fails: nothing unverified stays published.
//!
//! Each file put in place (or found up to date) is written into the record beside the files
//! (`crate::fetched`). The config is loaded without checking the ignition files: artifacts are
//! usually fetched before `openshift-install create ignition-configs`, whose output expires in
//! 24 hours. The metal image has no configured name: it keeps its upstream name, and the
//! command prints the `coreos.inst.image_url=` kernel argument that uses it. Not done: two
//! concurrent runs on the same directory are not locked against each other.

mod client;
mod progress;
pub mod rules;
pub mod signature;
pub mod store;
pub mod stream;

use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use url::Url;

use self::client::{Client, Response};
use self::progress::Progress;
use self::rules::Answer;
use self::signature::{Keyring, SIGNATURE_LIMIT};
use self::store::Partial;
pub use self::stream::{Kind, Selection, Wanted};
use crate::config::Install;
use crate::digest::Sha256;

/// The largest stream metadata accepted; Fedora CoreOS's is about 30 KiB.
const STREAM_LIMIT: usize = 16 * 1024 * 1024;

/// Where the stream metadata is: `--stream URL|FILE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamSource {
    Url(Url),
    File(PathBuf),
}

impl StreamSource {
    /// An `http://` or `https://` URL, or else a file path; other schemes are refused rather
    /// than taken for a relative path.
    pub fn parse(arg: &str) -> anyhow::Result<StreamSource> {
        let Some((scheme, _)) = arg.split_once("://") else {
            return Ok(StreamSource::File(PathBuf::from(arg)));
        };
        if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
            bail!("`{arg}`: the stream must be an http:// or https:// URL or a file");
        }
        let url = Url::parse(arg).with_context(|| format!("`{arg}` is not a URL"))?;
        anyhow::ensure!(url.host().is_some(), "`{arg}` has no host");
        Ok(StreamSource::Url(url))
    }
}

/// What to get.
#[derive(Debug, Clone)]
pub struct Options {
    pub stream: StreamSource,
    /// The CoreOS architecture name (`x86_64`, `aarch64`, ...).
    pub arch: String,
    /// Also the metal disk image.
    pub metal: bool,
    /// Also the live ISO (the base of the per-node ISOs).
    pub iso: bool,
    /// The OpenPGP key file to check the detached signatures with.
    pub key: Option<PathBuf>,
}

/// The name `wanted` has in the artifacts directory: the configured one for the PXE files
/// and the live ISO (what `serve` publishes), the upstream one for the metal image (the config
/// names none).
pub fn dest_name<'a>(install: &'a Install, wanted: &'a Wanted) -> &'a str {
    match wanted.kind {
        Kind::Kernel => &install.artifacts.kernel,
        Kind::Initramfs => &install.artifacts.initramfs,
        Kind::Rootfs => &install.artifacts.rootfs,
        Kind::Iso => &install.artifacts.iso,
        Kind::Metal => &wanted.upstream_name,
    }
}

/// How one artifact ended.
#[derive(Debug)]
enum Outcome {
    UpToDate,
    Fetched {
        size: u64,
        /// Bytes a previous run had left in the `.part` file and this run kept.
        resumed: u64,
        moved: u64,
        elapsed: Duration,
    },
    Imported {
        from: PathBuf,
        size: u64,
    },
}

impl Outcome {
    /// One line for the operator; `signed_by` is the fingerprint of a verified signature.
    fn describe(&self, wanted: &Wanted, dest: &Path, signed_by: Option<&str>) -> String {
        let verified = match signed_by {
            Some(fpr) => format!("sha256 and OpenPGP signature by {fpr} verified"),
            None => "sha256 verified".to_owned(),
        };
        self.line(wanted.kind.label(), dest, &verified)
    }

    /// The line of [`Outcome::describe`] for the file `label` names.
    fn line(&self, label: &str, dest: &Path, verified: &str) -> String {
        let dest = dest.display();
        match self {
            Outcome::UpToDate => format!("{label}: {dest} is already up to date ({verified})"),
            Outcome::Fetched {
                size,
                resumed,
                moved,
                elapsed,
            } => {
                let resumed = if *resumed > 0 {
                    format!(", resumed after {}", progress::mib(*resumed))
                } else {
                    String::new()
                };
                format!(
                    "{label}: fetched {dest} ({}{resumed}, {} in {:.1} s, {}), {verified}",
                    progress::mib(*size),
                    progress::mib(*moved),
                    elapsed.as_secs_f64(),
                    progress::rate(*moved, *elapsed),
                )
            }
            Outcome::Imported { from, size } => format!(
                "{label}: imported {} as {dest} ({}), {verified}",
                from.display(),
                progress::mib(*size)
            ),
        }
    }
}

/// Downloads every file of the selection that is not already in place and verified. Each file
/// is tried even when an earlier one failed; the error then counts the failures.
pub async fn fetch(install: &Install, options: &Options) -> anyhow::Result<()> {
    let keyring = options.key.as_deref().map(Keyring::load).transpose()?;
    let client = Client::new();
    let selection = read_selection(&client, options).await?;
    prepare(install, &selection)?;
    let signing = keyring.as_ref().map(|keyring| Signing {
        keyring,
        from: Signatures::Remote(&client),
    });
    let mut record = Recorder::open(install, &selection);
    let mut failed = 0;
    for wanted in &selection.files {
        let dest = install.artifacts_dir.join(dest_name(install, wanted));
        match fetch_one(&client, wanted, &dest, signing.as_ref()).await {
            Ok((outcome, signed_by)) => {
                println!("{}", outcome.describe(wanted, &dest, signed_by.as_deref()));
                record.put(wanted, &dest)?;
            }
            Err(e) => {
                eprintln!("error: {}: {e:#}", wanted.kind.label());
                record.failed(&dest);
                failed += 1;
            }
        }
    }
    record.save()?;
    conclude(install, &selection, failed, signing.is_some())
}

/// Copies the selection's files from `from`, where they have their upstream names, verifying
/// each on the way in.
pub async fn import(install: &Install, options: &Options, from: &Path) -> anyhow::Result<()> {
    let keyring = options.key.as_deref().map(Keyring::load).transpose()?;
    let client = Client::new();
    let selection = read_selection(&client, options).await?;
    anyhow::ensure!(from.is_dir(), "{} is not a directory", from.display());
    prepare(install, &selection)?;
    let signing = keyring.as_ref().map(|keyring| Signing {
        keyring,
        from: Signatures::Dir(from),
    });
    let mut record = Recorder::open(install, &selection);
    let mut failed = 0;
    for wanted in &selection.files {
        let dest = install.artifacts_dir.join(dest_name(install, wanted));
        match import_one(wanted, from, &dest, signing.as_ref()).await {
            Ok((outcome, signed_by)) => {
                println!("{}", outcome.describe(wanted, &dest, signed_by.as_deref()));
                record.put(wanted, &dest)?;
            }
            Err(e) => {
                eprintln!("error: {}: {e:#}", wanted.kind.label());
                record.failed(&dest);
                failed += 1;
            }
        }
    }
    record.save()?;
    conclude(install, &selection, failed, signing.is_some())
}

/// Downloads through one client (one read of the trust store, one connection pool), for
/// other commands than `artifacts fetch`: what `okd-appliance installer fetch` gets the
/// installer with.
#[derive(Debug)]
pub struct Fetcher {
    client: Client,
}

impl Default for Fetcher {
    fn default() -> Self {
        Fetcher {
            client: Client::new(),
        }
    }
}

impl Fetcher {
    /// One file whose SHA-256 is known, put at `dest` as an artifact is: continued from its
    /// `.part`, skipped when already in place with that digest, deleted (and nothing put in
    /// place) when it does not match. `label` names it in the line returned.
    pub async fn fetch_checked(
        &self,
        label: &str,
        url: &Url,
        sha256: Sha256,
        dest: &Path,
    ) -> anyhow::Result<String> {
        let name = dest.display();
        if store::hash_file(dest)? == Some(sha256) {
            return Ok(Outcome::UpToDate.line(label, dest, "sha256 verified"));
        }
        let mut part = Partial::resume(&store::part_path(dest))?;
        let opened = open(&self.client, url, sha256, &mut part).await?;
        // After `open`: a server that ignores the range starts the file over.
        let resumed = part.len();
        let (moved, elapsed) = match opened {
            None => (0, Duration::ZERO),
            Some((response, total)) => transfer(response, total, &mut part, url, dest).await?,
        };
        let actual = part.digest();
        if actual != sha256 {
            part.discard()?;
            bail!(
                "sha256 mismatch for {name} (from {url}): expected {sha256}, got {actual}; the file \
                 was deleted and nothing was put in place"
            );
        }
        let size = part.len();
        part.commit(dest)?;
        let outcome = Outcome::Fetched {
            size,
            resumed,
            moved,
            elapsed,
        };
        Ok(outcome.line(label, dest, "sha256 verified"))
    }

    /// The body of `url` (a 200 of at most `limit` bytes), through the environment's proxies.
    pub async fn get_small(&self, url: &Url, limit: usize) -> anyhow::Result<Vec<u8>> {
        self.client.get_bytes(url, limit).await
    }
}

/// The record beside the files (`crate::fetched`): what earlier runs put in place, with what
/// this run verified added. A record that can't be read is replaced (it only ever describes
/// files this command checked).
struct Recorder<'a> {
    dir: &'a Path,
    selection: &'a Selection,
    record: crate::fetched::Record,
    changed: bool,
}

impl<'a> Recorder<'a> {
    fn open(install: &'a Install, selection: &'a Selection) -> Recorder<'a> {
        let dir = install.artifacts_dir.as_path();
        let record = crate::fetched::Record::read(dir)
            .unwrap_or_else(|e| {
                eprintln!("warning: {e}: writing a new one");
                None
            })
            .unwrap_or_default();
        Recorder {
            dir,
            selection,
            record,
            changed: false,
        }
    }

    /// `wanted` is verified and in place at `dest`.
    fn put(&mut self, wanted: &Wanted, dest: &Path) -> anyhow::Result<()> {
        let size = std::fs::metadata(dest)
            .with_context(|| format!("can't read {}", dest.display()))?
            .len();
        let name = self.name(dest);
        let entry = crate::fetched::Entry {
            release: self.selection.release.clone(),
            stream: self.selection.stream.clone(),
            arch: self.selection.arch.clone(),
            size,
            sha256: wanted.sha256.to_string(),
        };
        self.changed |= self.record.files.insert(name, entry.clone()) != Some(entry);
        Ok(())
    }

    /// `dest` failed: when what was there is gone (removed as unverified), so is its entry.
    fn failed(&mut self, dest: &Path) {
        if !dest.exists() {
            let name = self.name(dest);
            self.changed |= self.record.files.remove(&name).is_some();
        }
    }

    fn name(&self, dest: &Path) -> String {
        dest.strip_prefix(self.dir)
            .unwrap_or(dest)
            .to_string_lossy()
            .into_owned()
    }

    /// Writes the record when this run changed it; an empty one is removed.
    fn save(&self) -> anyhow::Result<()> {
        if !self.changed {
            return Ok(());
        }
        if self.record.files.is_empty() {
            let path = crate::fetched::path(self.dir);
            return crate::durable::remove(&path)
                .map(drop)
                .with_context(|| format!("can't remove {}", path.display()));
        }
        self.record
            .write(self.dir)
            .with_context(|| format!("can't write {}", crate::fetched::path(self.dir).display()))
    }
}

/// Reads the stream metadata and picks the files of the requested architecture.
async fn read_selection(client: &Client, options: &Options) -> anyhow::Result<Selection> {
    let (text, name, base) = match &options.stream {
        StreamSource::Url(url) => (
            client.get_bytes(url, STREAM_LIMIT).await?,
            url.to_string(),
            Some(url),
        ),
        StreamSource::File(path) => (
            read_limited(path, STREAM_LIMIT, "stream metadata")?,
            path.display().to_string(),
            None,
        ),
    };
    let stream = stream::parse(&text, &name)?;
    let also = stream::Also {
        metal: options.metal,
        iso: options.iso,
    };
    stream::select(&stream, &options.arch, also, base).with_context(|| format!("in {name}"))
}

/// The file at `path`, refused when it is larger than `limit` and so can't be `what`.
fn read_limited(path: &Path, limit: usize, what: &str) -> anyhow::Result<Vec<u8>> {
    let file = File::open(path).with_context(|| format!("can't read {}", path.display()))?;
    let mut text = Vec::new();
    file.take(limit as u64 + 1)
        .read_to_end(&mut text)
        .with_context(|| format!("can't read {}", path.display()))?;
    anyhow::ensure!(
        text.len() <= limit,
        "{} is larger than {limit} bytes: not {what}",
        path.display()
    );
    Ok(text)
}

/// Creates the artifacts directory and says what is about to happen.
fn prepare(install: &Install, selection: &Selection) -> anyhow::Result<()> {
    let dir = &install.artifacts_dir;
    std::fs::create_dir_all(dir).with_context(|| format!("can't create {}", dir.display()))?;
    println!(
        "CoreOS {} ({} stream), {}: {} files into {}",
        selection.release,
        selection.stream,
        selection.arch,
        selection.files.len(),
        dir.display()
    );
    Ok(())
}

/// The result of the whole run, with the one step left to the operator for the metal image.
/// `signed`: the signatures were checked and kept beside the files.
fn conclude(
    install: &Install,
    selection: &Selection,
    failed: usize,
    signed: bool,
) -> anyhow::Result<()> {
    if failed > 0 {
        bail!(
            "{failed} of {} artifacts failed; a file whose digest did not match was deleted, an \
             interrupted download was kept as .part and the next run continues it",
            selection.files.len()
        );
    }
    if let Some(metal) = selection.files.iter().find(|w| w.kind == Kind::Metal) {
        println!(
            "to install from the metal image rather than the live rootfs, add \
             coreos.inst.image_url={}/artifacts/{} to install.kernel_args",
            install.base_url, metal.upstream_name
        );
        if !signed {
            // coreos-installer refuses an image without `<image_url>.sig` unless told not to.
            println!(
                "coreos-installer checks the image's signature at <image_url>.sig: run this \
                 command with --key to check and keep it, or also add coreos.inst.insecure"
            );
        }
    }
    Ok(())
}

async fn fetch_one(
    client: &Client,
    wanted: &Wanted,
    dest: &Path,
    signing: Option<&Signing<'_>>,
) -> anyhow::Result<(Outcome, Option<String>)> {
    if store::hash_file(dest)? == Some(wanted.sha256) {
        let signed_by = match signing {
            Some(s) => Some(s.check_in_place(wanted, dest).await?),
            None => None,
        };
        return Ok((Outcome::UpToDate, signed_by));
    }
    let mut part = Partial::resume(&store::part_path(dest))?;
    let (url, sha256) = (&wanted.location, wanted.sha256);
    let opened = open(client, url, sha256, &mut part).await?;
    let resumed = part.len();
    let (moved, elapsed) = match opened {
        // The partial file was complete already: only its rename was missing.
        None => (0, Duration::ZERO),
        Some((response, total)) => transfer(response, total, &mut part, url, dest).await?,
    };
    let size = part.len();
    let signed_by = commit_verified(part, wanted, dest, wanted.location.as_str(), signing).await?;
    let outcome = Outcome::Fetched {
        size,
        resumed,
        moved,
        elapsed,
    };
    Ok((outcome, signed_by))
}

/// Writes the body of `response` into `part`; returns the bytes moved and how long it took. A
/// transfer that breaks off leaves `part` in place for the next run.
async fn transfer(
    mut response: Response,
    total: Option<u64>,
    part: &mut Partial,
    url: &Url,
    dest: &Path,
) -> anyhow::Result<(u64, Duration)> {
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    let mut progress = Progress::new(&name, part.len(), total);
    let received = receive(&mut response, part, &mut progress).await;
    progress.finish();
    let kept = || {
        format!(
            "{} kept in {} for the next run to continue",
            progress::mib(part.len()),
            store::part_path(dest).display()
        )
    };
    if let Err(e) = received {
        let short = match total {
            Some(total) if part.len() < total => format!(
                "the transfer broke off {} bytes before the end of the body: ",
                total - part.len()
            ),
            _ => String::new(),
        };
        bail!("GET {url}: {short}{e:#}; {}", kept());
    }
    if let Some(total) = total
        && part.len() < total
    {
        bail!(
            "GET {url}: the body ended after {} of {total} bytes; {}",
            part.len(),
            kept()
        );
    }
    Ok(progress.moved())
}

/// The response that continues (or restarts) `part`, with the file's full size when the server
/// says; `None` when the partial file is complete already.
async fn open(
    client: &Client,
    url: &Url,
    sha256: Sha256,
    part: &mut Partial,
) -> anyhow::Result<Option<(Response, Option<u64>)>> {
    let held = part.len();
    let response = client.get(url, held).await?;
    let answer = rules::interpret(
        response.status(),
        response.header(hyper::header::CONTENT_RANGE),
        held,
    )
    .with_context(|| format!("GET {url}"))?;
    let total = match answer {
        Answer::Continues { total } => {
            total.or_else(|| response.content_length().map(|n| n + held))
        }
        Answer::Whole => {
            part.restart()?;
            response.content_length()
        }
        Answer::Unsatisfiable if part.digest() == sha256 => return Ok(None),
        Answer::Unsatisfiable | Answer::WrongRange => {
            drop(response);
            part.restart()?;
            let response = client.get(url, 0).await?;
            rules::interpret(response.status(), None, 0).with_context(|| format!("GET {url}"))?;
            let total = response.content_length();
            return Ok(Some((response, total)));
        }
    };
    Ok(Some((response, total)))
}

async fn receive(
    response: &mut Response,
    part: &mut Partial,
    progress: &mut Progress,
) -> anyhow::Result<()> {
    while let Some(chunk) = response.next_chunk().await? {
        part.write(&chunk)?;
        progress.advance(chunk.len() as u64);
    }
    Ok(())
}

/// Renames `part` to `dest` if its digest is the stream's (and, with `signing`, its signature
/// verifies; the signature is then kept as `<dest>.sig`); otherwise deletes it, because a file
/// with the wrong content must never be served or continued. `source` names where it came
/// from. Returns the signer's fingerprint.
async fn commit_verified(
    mut part: Partial,
    wanted: &Wanted,
    dest: &Path,
    source: &str,
    signing: Option<&Signing<'_>>,
) -> anyhow::Result<Option<String>> {
    let (expected, actual) = (wanted.sha256, part.digest());
    if actual != expected {
        part.discard()?;
        bail!(
            "sha256 mismatch for {} (from {source}): expected {expected}, got {actual}; the file \
             was deleted and nothing was put in place",
            dest.display()
        );
    }
    let sig_dest = store::sig_path(dest);
    let Some(signing) = signing else {
        part.commit(dest)?;
        // A signature left from the file this one replaces would not match it.
        return store::remove_if_present(&sig_dest).map(|()| None);
    };
    let checked = async {
        let sig = signing.signature(wanted).await?;
        part.flush()?;
        let fingerprint = signing.keyring.verify(&sig, part.path())?;
        Ok::<_, anyhow::Error>((sig, fingerprint))
    };
    match checked.await {
        Ok((sig, fingerprint)) => {
            part.commit(dest)?;
            store::write_file(&sig_dest, &sig)?;
            Ok(Some(fingerprint))
        }
        Err(e) => {
            part.discard()?;
            Err(e.context(format!(
                "{} was deleted and nothing was put in place",
                part_name(dest)
            )))
        }
    }
}

fn part_name(dest: &Path) -> String {
    store::part_path(dest).display().to_string()
}

/// Where detached signatures come from.
enum Signatures<'a> {
    /// The stream's `signature` URLs.
    Remote(&'a Client),
    /// `<upstream name>.sig` files in the directory an import reads.
    Dir(&'a Path),
}

/// `--key`: the keyring and where the signatures are.
struct Signing<'a> {
    keyring: &'a Keyring,
    from: Signatures<'a>,
}

impl Signing<'_> {
    async fn signature(&self, wanted: &Wanted) -> anyhow::Result<Vec<u8>> {
        match &self.from {
            Signatures::Remote(client) => {
                let url = wanted.signature.as_ref().ok_or_else(|| {
                    anyhow::anyhow!("the stream lists no signature for it, and --key wants one")
                })?;
                client.get_bytes(url, SIGNATURE_LIMIT).await
            }
            Signatures::Dir(dir) => {
                let path = dir.join(format!("{}.sig", wanted.upstream_name));
                let from = wanted
                    .signature
                    .as_ref()
                    .map(|u| format!("; download it from {u}"))
                    .unwrap_or_default();
                read_signature(&path)
                    .with_context(|| format!("--key needs the signature beside the file{from}"))
            }
        }
    }

    /// Checks the file already in place at `dest` against its kept `<dest>.sig`, or else the
    /// signature from the source, which is then kept. A file that fails is removed: with `--key`
    /// nothing unverified stays published.
    async fn check_in_place(&self, wanted: &Wanted, dest: &Path) -> anyhow::Result<String> {
        let sig_dest = store::sig_path(dest);
        let kept = match read_signature(&sig_dest) {
            Ok(sig) => Some(sig),
            Err(_) if !sig_dest.exists() => None,
            Err(e) => return Err(e),
        };
        let sig = match &kept {
            Some(sig) => sig.clone(),
            None => self.signature(wanted).await?,
        };
        match self.keyring.verify(&sig, dest) {
            Ok(fingerprint) => {
                if kept.is_none() {
                    store::write_file(&sig_dest, &sig)?;
                }
                Ok(fingerprint)
            }
            Err(e) => {
                store::remove_if_present(dest)?;
                store::remove_if_present(&sig_dest)?;
                Err(e.context(format!(
                    "{} was in place with the right sha256 and has been removed; run again to \
                     fetch it anew",
                    dest.display()
                )))
            }
        }
    }
}

/// A detached signature file, refused when it is too large to be one.
fn read_signature(path: &Path) -> anyhow::Result<Vec<u8>> {
    read_limited(path, SIGNATURE_LIMIT, "a detached signature")
}

async fn import_one(
    wanted: &Wanted,
    from: &Path,
    dest: &Path,
    signing: Option<&Signing<'_>>,
) -> anyhow::Result<(Outcome, Option<String>)> {
    if store::hash_file(dest)? == Some(wanted.sha256) {
        let signed_by = match signing {
            Some(s) => Some(s.check_in_place(wanted, dest).await?),
            None => None,
        };
        return Ok((Outcome::UpToDate, signed_by));
    }
    let source = from.join(&wanted.upstream_name);
    let file = File::open(&source).with_context(|| {
        format!(
            "can't read {} (the stream's {} is {}; download it from {})",
            source.display(),
            wanted.kind.label(),
            wanted.upstream_name,
            wanted.location
        )
    })?;
    let mut part = Partial::create(&store::part_path(dest))?;
    part.write_from(file, |_| {})
        .with_context(|| format!("copying {} to {}", source.display(), dest.display()))?;
    let size = part.len();
    let from = source.display().to_string();
    let signed_by = commit_verified(part, wanted, dest, &from, signing).await?;
    Ok((Outcome::Imported { from: source, size }, signed_by))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_a_url_or_a_file() {
        assert_eq!(
            StreamSource::parse("https://builds.example/streams/stable.json").unwrap(),
            StreamSource::Url(Url::parse("https://builds.example/streams/stable.json").unwrap())
        );
        assert!(matches!(
            StreamSource::parse("HTTP://127.0.0.1:8000/s.json").unwrap(),
            StreamSource::Url(_)
        ));
        assert_eq!(
            StreamSource::parse("./stable.json").unwrap(),
            StreamSource::File(PathBuf::from("./stable.json"))
        );
        for bad in ["ftp://mirror/stable.json", "file:///tmp/s.json", "http://"] {
            assert!(StreamSource::parse(bad).is_err(), "{bad}");
        }
    }
}
