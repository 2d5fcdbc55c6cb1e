//! `/iso/<node>.iso`: the operator's CoreOS live ISO with the node's kernel arguments in its
//! embed areas, streamed from the base file with only those areas replaced: no per-node copy on
//! disk, Range and conditional requests as for any file (BMCs read virtual media in ranges).
//!
//! The base ISO is parsed once per version of the file and plan, not per request: [`IsoCache`]
//! keeps the parsed base and every node's patches, keyed by the file's identity (device, inode,
//! size, modification time, taken from the descriptor the response is then sent from) and the
//! plan's ISO arguments. A request costs an `open` and an `fstat`. Requests during a parse wait
//! for it (one parse at a time). A watcher task compares the plan pointer and `stat`s the base
//! file every 5 s and parses a new version at once, so a bad ISO or a node whose arguments no
//! longer fit is logged when it appears, not at the first request.
//!
//! Every response is computed from (range, patches), so HEAD, `Range` (206, 416),
//! `If-None-Match`/`If-Range` and `Content-Length` behave as for a file: BMCs and qemu's curl
//! driver read virtual media in ranges of a few hundred KiB. The ETag is per node and per base
//! file version (the base's size, modification time in ns and inode, and a digest of the
//! node's arguments); there is no Last-Modified, since the image changes with the plan as well
//! as with the file. An unusable base ISO is answered 500 with the reason (no embed area, areas
//! that differ or overlap or run past the image, a node whose arguments do not fit its area);
//! no base ISO, or an unknown node, 404. Reads are journaled once a minute per node and reader
//! address: a boot is hundreds of range requests.
//!
//! Architecture invariant: the arguments come from the plan (`BootParams::iso_kernel_args`);
//! this module only embeds them. The unchanged parts of the image go out with sendfile(2)
//! through the connection's [`Segments`]; the replaced areas (a few KiB) from memory. The ISO
//! carries no secret: no ignition is embedded (a base ISO that has one is refused), so it is
//! served to any address, and the node fetches its ignition from its own address.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::files::{self, Decision};
use super::response::{self, Body, empty, text};
use super::sendfile::{FileBody, Segments};
use crate::journal::{EventKind, Journal};
use crate::liveiso::{BaseIso, FileIdentity, KargsTooLong, NodeImage, Piece};
use crate::plan::{self, Plan};
use tokio_util::sync::CancellationToken;

/// How often [`IsoCache::watch`] looks for a new plan or base file.
const WATCH_EVERY: Duration = Duration::from_secs(5);

/// A reader of a node's ISO is journaled at most this often: a BMC or hypervisor reads the
/// image in hundreds of ranges, and the journal wants "who read it", not each range.
const JOURNAL_EVERY: Duration = Duration::from_secs(60);

/// The parsed base ISO and node images, for the plan and file they were made from.
#[derive(Debug, Default)]
pub struct IsoCache {
    current: tokio::sync::Mutex<Option<Arc<Loaded>>>,
    /// When each (node, reader address) was last journaled, for the last minute: a handful of
    /// entries, searched without allocating (every range request looks).
    journaled: std::sync::Mutex<Vec<(String, IpAddr, Instant)>>,
}

#[derive(Debug)]
struct Loaded {
    path: PathBuf,
    identity: FileIdentity,
    /// Node name and ISO arguments, in plan order: what the images were made for.
    inputs: Vec<(String, Vec<String>)>,
    images: Result<Images, String>,
}

#[derive(Debug)]
struct Images {
    base: BaseIso,
    nodes: HashMap<String, Result<NodeImage, KargsTooLong>>,
}

fn inputs_match(inputs: &[(String, Vec<String>)], plan: &Plan) -> bool {
    inputs.len() == plan.boot.len()
        && inputs
            .iter()
            .zip(&plan.boot)
            .all(|((node, args), b)| *node == b.node && *args == b.iso_kernel_args)
}

impl IsoCache {
    /// Whether a read of `node`'s ISO by `ip` at `now` is journaled.
    fn journal_due(&self, node: &str, ip: IpAddr, now: Instant) -> bool {
        let mut seen = self
            .journaled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let fresh = |at: &Instant| now.duration_since(*at) < JOURNAL_EVERY;
        if seen
            .iter()
            .any(|(n, i, at)| n == node && *i == ip && fresh(at))
        {
            return false;
        }
        seen.retain(|(_, _, at)| fresh(at));
        seen.push((node.to_owned(), ip, now));
        true
    }

    /// Parses the base ISO at start and again whenever the plan or the file changes, so a
    /// problem with it is logged when it appears rather than at the first request for an ISO.
    /// Costs a pointer comparison and a `stat` every few seconds; ends with `token`.
    pub async fn watch(&self, plan: plan::Handle, token: CancellationToken) {
        let mut seen: Option<(Arc<Plan>, Option<FileIdentity>)> = None;
        loop {
            let current = plan.load_full();
            let identity = tokio::fs::metadata(&current.files.base_iso)
                .await
                .ok()
                .map(|m| FileIdentity::of(&m));
            let changed = seen
                .as_ref()
                .is_none_or(|(p, id)| !Arc::ptr_eq(p, &current) || *id != identity);
            if changed {
                self.preload(&current).await;
                seen = Some((current, identity));
            }
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(WATCH_EVERY) => {}
            }
        }
    }

    /// Parses the plan's base ISO now (if it is not parsed already), logging the outcome.
    pub async fn preload(&self, plan: &Plan) {
        let path = &plan.files.base_iso;
        match open(path).await {
            Ok((file, identity)) => {
                self.loaded(plan, file, identity).await;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => tracing::info!(
                "no live ISO at {}: /iso/<node>.iso answers 404 until `okd-appliance artifacts \
                 fetch CONFIG --stream {STREAM_HINT} --iso` puts one there",
                path.display()
            ),
            Err(e) => tracing::error!("per-node ISOs: can't open {}: {e}", path.display()),
        }
    }

    /// The images for `plan` and this version of the base file, parsed now if they are not
    /// already (one parse at a time; concurrent requests wait for it).
    async fn loaded(&self, plan: &Plan, file: Arc<File>, identity: FileIdentity) -> Arc<Loaded> {
        let path = &plan.files.base_iso;
        let mut current = self.current.lock().await;
        if let Some(l) = current.as_ref()
            && l.identity == identity
            && l.path == *path
            && inputs_match(&l.inputs, plan)
        {
            return Arc::clone(l);
        }
        let inputs: Vec<(String, Vec<String>)> = plan
            .boot
            .iter()
            .map(|b| (b.node.clone(), b.iso_kernel_args.clone()))
            .collect();
        let for_parse = inputs.clone();
        let parsed = tokio::task::spawn_blocking(move || parse(&file, &for_parse))
            .await
            .unwrap_or_else(|e| Err(format!("parsing the base ISO failed: {e}")));
        log_outcome(path, &parsed);
        let loaded = Arc::new(Loaded {
            path: path.clone(),
            identity,
            inputs,
            images: parsed,
        });
        *current = Some(Arc::clone(&loaded));
        loaded
    }
}

fn parse(file: &File, inputs: &[(String, Vec<String>)]) -> Result<Images, String> {
    let base = BaseIso::read(file).map_err(|e| e.to_string())?;
    let nodes = inputs
        .iter()
        .map(|(node, args)| (node.clone(), base.node_image(args)))
        .collect();
    Ok(Images { base, nodes })
}

fn log_outcome(path: &Path, parsed: &Result<Images, String>) {
    match parsed {
        Err(e) => tracing::error!(
            "per-node ISOs: {} can't be used: {e}; /iso/<node>.iso answers 500",
            path.display()
        ),
        Ok(images) => {
            let k = &images.base.kargs;
            tracing::info!(
                "per-node ISOs from {}: {} kernel-argument area(s) of {} bytes, base arguments `{}`",
                path.display(),
                k.areas.len(),
                k.size,
                k.current
            );
            let mut failed: Vec<_> = images
                .nodes
                .iter()
                .filter_map(|(node, r)| r.as_ref().err().map(|e| (node, e)))
                .collect();
            failed.sort_by_key(|(node, _)| *node);
            for (node, e) in failed {
                tracing::error!("per-node ISO of {node}: {e}");
            }
        }
    }
}

/// The stream the hints to `artifacts fetch` name (here and in `check`): Fedora CoreOS's stable
/// stream, as the README's set-up (a release's own comes from `openshift-install coreos
/// print-stream-json`).
pub const STREAM_HINT: &str = "https://builds.coreos.fedoraproject.org/streams/stable.json";

/// What `okd-appliance check` says about the per-node ISOs of a plan.
#[derive(Debug)]
pub enum IsoCheck {
    /// No base ISO: the ISO install path is not in use (or not yet).
    Absent(PathBuf),
    /// Every node's ISO can be made; a one-line summary.
    Ready(String),
    /// What keeps the base ISO or some nodes' ISOs from being served.
    Problems(Vec<String>),
}

/// Parses the plan's base ISO, if there is one, and makes every node's image, as `serve` will.
pub fn check(plan: &Plan) -> IsoCheck {
    let path = &plan.files.base_iso;
    if !path.exists() {
        return IsoCheck::Absent(path.clone());
    }
    let base = match BaseIso::load(path) {
        Ok((_, base)) => base,
        Err(e) => {
            return IsoCheck::Problems(vec![format!("{}: {e}", path.display())]);
        }
    };
    let problems: Vec<String> = plan
        .boot
        .iter()
        .filter_map(|b| {
            let e = base.node_image(&b.iso_kernel_args).err()?;
            Some(format!("{}: the ISO of {}: {e}", path.display(), b.node))
        })
        .collect();
    if !problems.is_empty() {
        return IsoCheck::Problems(problems);
    }
    let longest = plan
        .boot
        .iter()
        .map(|b| base.kargs.appended(&b.iso_kernel_args).len())
        .max()
        .unwrap_or(0);
    IsoCheck::Ready(format!(
        "{}: live ISO ok: {} kernel-argument area(s), the longest node line takes {longest} of {} bytes",
        path.display(),
        base.kargs.areas.len(),
        base.kargs.size - 1
    ))
}

/// Opens the base ISO; its identity comes from the descriptor that will be read.
async fn open(path: &Path) -> io::Result<(Arc<File>, FileIdentity)> {
    let file = tokio::fs::File::open(path).await?;
    let meta = file.metadata().await?;
    Ok((Arc::new(file.into_std().await), FileIdentity::of(&meta)))
}

/// Answers a GET or HEAD of `/iso/<name>.iso`.
/// `boots`: the reader is the machine that boots the node from it (see the server's
/// `boots_from_iso`); only such a read moves the node's install phase.
#[allow(clippy::too_many_arguments)] // reason: the request's context, passed through as is
pub async fn respond(
    req: &Request<Incoming>,
    name: &str,
    peer: SocketAddr,
    boots: bool,
    plan: &Plan,
    cache: &IsoCache,
    journal: &Journal,
    segments: &Segments,
) -> Response<Body> {
    if !plan.boot.iter().any(|b| b.node == name) {
        return text(StatusCode::NOT_FOUND, "no such node\n");
    }
    let path = &plan.files.base_iso;
    let (file, identity) = match open(path).await {
        Ok(x) => x,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            tracing::warn!("http: /iso/{name}.iso: no live ISO at {}", path.display());
            return text(
                StatusCode::NOT_FOUND,
                &format!(
                    "no live ISO on this appliance: run okd-appliance artifacts fetch CONFIG \
                     --stream {STREAM_HINT} --iso on it\n"
                ),
            );
        }
        Err(e) => {
            tracing::error!("http: /iso/{name}.iso: {}: {e}", path.display());
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "can't read the live ISO\n",
            );
        }
    };
    let loaded = cache.loaded(plan, Arc::clone(&file), identity).await;
    let images = match &loaded.images {
        Ok(images) => images,
        Err(e) => {
            tracing::warn!("http: /iso/{name}.iso: the base ISO can't be used: {e}");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("the base live ISO can't be used: {e}\n"),
            );
        }
    };
    let image = match images.nodes.get(name) {
        Some(Ok(image)) => image,
        Some(Err(e)) => {
            tracing::warn!("http: /iso/{name}.iso: {e}");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("{name}'s ISO can't be made: {e}\n"),
            );
        }
        None => return text(StatusCode::NOT_FOUND, "no such node\n"),
    };
    // No Last-Modified: the image changes with the plan as well as with the file.
    let conditions = response::conditions(req.headers());
    let decision = files::decide_for(&conditions, &image.etag, None, image.len);
    let (status, start, len) = response::sending(decision, image.len);
    let get = req.method() == Method::GET;
    if get && len > 0 && cache.journal_due(name, peer.ip(), Instant::now()) {
        journal.publish(
            Some(name.to_owned()),
            EventKind::IsoFetched { from: peer, boots },
        );
    }
    let body = if !get || len == 0 {
        empty()
    } else {
        OverlayBody::new(file, image.pieces(start, len), segments.clone()).boxed()
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&image.etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response::range_headers(h, decision, image.len, len, "application/x-iso9660-image");
    if matches!(decision, Decision::Full | Decision::Partial { .. })
        && let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}.iso\""))
    {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    r
}

/// A response body made of base-file ranges (sent with sendfile(2)) and replaced bytes.
#[derive(Debug)]
struct OverlayBody {
    file: Arc<File>,
    pieces: VecDeque<Piece>,
    current: Option<FileBody>,
    segments: Segments,
    remaining: u64,
}

impl OverlayBody {
    fn new(file: Arc<File>, pieces: Vec<Piece>, segments: Segments) -> OverlayBody {
        let remaining = pieces
            .iter()
            .map(|p| match p {
                Piece::Base { len, .. } => *len,
                Piece::Patch(b) => b.len() as u64,
            })
            .sum();
        OverlayBody {
            file,
            pieces: pieces.into(),
            current: None,
            segments,
            remaining,
        }
    }
}

impl hyper::body::Body for OverlayBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        loop {
            if let Some(body) = self.current.as_mut() {
                match Pin::new(body).poll_frame(cx) {
                    Poll::Ready(None) => self.current = None,
                    Poll::Ready(Some(Ok(frame))) => {
                        let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                        self.remaining = self.remaining.saturating_sub(n);
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    other => return other,
                }
            }
            match self.pieces.pop_front() {
                None => return Poll::Ready(None),
                Some(Piece::Patch(bytes)) => {
                    self.remaining = self.remaining.saturating_sub(bytes.len() as u64);
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                Some(Piece::Base { offset, len }) => {
                    let file = Arc::clone(&self.file);
                    self.current = Some(self.segments.shared_body(file, offset, len));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_of_a_node_iso_is_journaled_once_a_minute() {
        let cache = IsoCache::default();
        let (bmc, other) = (IpAddr::from([10, 0, 0, 250]), IpAddr::from([10, 0, 0, 251]));
        let t = Instant::now();
        assert!(cache.journal_due("master-0", bmc, t));
        assert!(!cache.journal_due("master-0", bmc, t + Duration::from_secs(59)));
        assert!(cache.journal_due("master-1", bmc, t + Duration::from_secs(1)));
        assert!(cache.journal_due("master-0", other, t + Duration::from_secs(1)));
        assert!(cache.journal_due("master-0", bmc, t + Duration::from_secs(61)));
    }
}
