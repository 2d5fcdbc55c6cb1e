//! A host file: the clusters one services host serves (issue 26, docs/design/several-clusters.md).
//!
//! ```yaml
//! version: 1
//! clusters:
//!   - okd.yml                          # id: the cluster's name
//!   - { file: test/okd.yml, id: test } # an explicit id
//! ```
//!
//! A file with a top-level `clusters:` key is a host file; any other file is a cluster file, in
//! today's schema. Each cluster file is validated alone, by the rules and with the output it has
//! alone. Then the clusters are compared with each other (`validate::host`): every conflict is
//! reported once, in the later file, with the earlier file's line drawn under it.
//!
//! `serve` runs every cluster of a host file in one process (`supervisor/layout.rs`); with a
//! `shared_frontend`, [`routed`] points each cluster's names and frontends at the host's router.
//! `check` and `render` take every cluster of it. The commands that act on one cluster
//! (`node kargs`, `artifacts`, `installer fetch`, `ignition create`, `nodes` and the operator
//! commands) read a host file too and take `--cluster ID` when it lists several (the CLI's
//! `one_cluster`). Only [`super::load`] refuses a host file, by name and before reading what it
//! lists ([`super::LoadError::HostFile`]); [`super::load_any`] reads either kind.
//!
//! Architecture invariant: as for a cluster file, nothing past this module sees YAML.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use miette::NamedSource;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_saphyr::{Location, Spanned};

use super::diagnostic::{Problems, RenderStyle, Severity, Source};
use super::raw::{RawRunAs, RawShared, Text};
use super::validate::host::Listed;
use super::{Config, InstallCheck, LoadError, RunAs};
use crate::records::is_host_label;

/// A host file that loaded: every cluster file valid, no conflict between them.
#[derive(Debug)]
pub struct Host {
    pub clusters: Vec<Member>,
    /// Where the host keeps its state: the lease journals at the top, each cluster's install
    /// state under `clusters/<id>/`.
    pub state_dir: PathBuf,
    /// The account the services run as once their sockets are bound.
    pub run_as: Option<RunAs>,
    /// One address for every cluster's frontends, routed by name; `None`: each cluster's
    /// frontends on its own address.
    pub shared_frontend: Option<SharedFrontend>,
    /// The HTTP API and status page on TCP (every cluster's plan carries it too).
    pub api: Option<super::Api>,
    /// A pair of appliances serving every cluster (every cluster's config carries it too):
    /// one VRRP instance moves every cluster's `appliance_ip` and the shared frontend.
    pub ha: Option<super::Ha>,
    /// Warnings, file by file (the host file first).
    pub warnings: HostProblems,
}

/// `shared_frontend`: the address every cluster's api, api-int and `*.apps` resolve to. The
/// host's router passes a connection to 6443, 22623 or 443 by its TLS ClientHello's server
/// name, and one to 80 by its `Host`, to the cluster whose name it is (docs/architecture.md,
/// "The cluster dimension").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedFrontend {
    pub v4: Ipv4Addr,
    /// Needed when a routed cluster is dual-stack (its AAAA records point here).
    pub v6: Option<Ipv6Addr>,
    /// The cluster a connection goes to when its name is no cluster's (or it names none);
    /// `None`: such a connection is reset.
    pub default_cluster: Option<String>,
}

impl SharedFrontend {
    pub fn addresses(&self) -> Vec<IpAddr> {
        std::iter::once(IpAddr::V4(self.v4))
            .chain(self.v6.map(IpAddr::V6))
            .collect()
    }
}

/// One cluster of a host.
#[derive(Debug)]
pub struct Member {
    /// What `--cluster` will name it by: the entry's `id`, or the cluster's name.
    pub id: String,
    /// Where the file is read from.
    pub path: PathBuf,
    /// The file as diagnostics name it: next to the host file's name.
    pub name: String,
    pub config: Config,
}

/// What was found in a host file and the cluster files it lists, file by file, the host file
/// first.
#[derive(Debug)]
pub struct HostProblems {
    host: Problems,
    /// The host file's entries, read or not.
    entries: usize,
    clusters: Vec<Found>,
}

/// A listed cluster file: loaded (with what the comparison found in it), or not.
#[derive(Debug)]
enum Found {
    Loaded(Problems),
    Failed(LoadError),
}

impl HostProblems {
    pub fn count(&self, severity: Severity) -> usize {
        let failed = |e: &LoadError| match severity {
            Severity::Error => e.error_count(),
            Severity::Warning => e.warning_count(),
        };
        self.host.count(severity)
            + self
                .clusters
                .iter()
                .map(|f| match f {
                    Found::Loaded(p) => p.count(severity),
                    Found::Failed(e) => failed(e),
                })
                .sum::<usize>()
    }

    pub fn has_errors(&self) -> bool {
        self.count(Severity::Error) > 0
    }

    /// The problems of every file that was read: the host file's, then each cluster file's.
    pub fn problems(&self) -> impl Iterator<Item = &Problems> {
        std::iter::once(&self.host).chain(self.clusters.iter().filter_map(|f| match f {
            Found::Loaded(p) => Some(p),
            Found::Failed(_) => None,
        }))
    }

    /// Every file's problems as miette draws them, each file with its summary line, then one
    /// line for the whole host.
    pub fn render(&self, style: RenderStyle) -> String {
        let mut out = self.render_files(style);
        out.push_str(&self.summary());
        out.push('\n');
        out
    }

    /// [`HostProblems::render`] without the host's line: each file's problems, a cluster file's
    /// with its summary line.
    pub fn render_files(&self, style: RenderStyle) -> String {
        // The host file's own problems without a summary line: the last line is the host's.
        let mut out = self.host.render_each(style);
        for found in &self.clusters {
            match found {
                Found::Loaded(p) if p.is_empty() => {}
                Found::Loaded(p) => out.push_str(&p.render(style)),
                Found::Failed(e) => out.push_str(&e.render(style)),
            }
        }
        out
    }

    /// One line for commands other than `check`, which lists them; empty without warnings.
    pub fn warnings_line(&self) -> String {
        super::diagnostic::warnings_line(self.host.file_name(), self.count(Severity::Warning))
    }

    /// `host.yml: 2 cluster files, 3 errors, 1 warning`.
    pub fn summary(&self) -> String {
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        format!(
            "{}: {}, {}, {}",
            self.host.file_name(),
            plural(self.entries, "cluster file"),
            plural(self.count(Severity::Error), "error"),
            plural(self.count(Severity::Warning), "warning")
        )
    }
}

impl fmt::Display for HostProblems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

/// The top of a host file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    version: Spanned<u32>,
    /// `None`: `clusters:` with nothing after it.
    clusters: Spanned<Option<Vec<Spanned<Entry>>>>,
    /// The host's keys, stated here once (a cluster file in a host may not state them).
    #[serde(default)]
    state_dir: Option<Text>,
    #[serde(default)]
    run_as: Option<RawRunAs>,
    #[serde(default)]
    shared_frontend: Option<Spanned<RawShared>>,
    /// The HTTP API and status page on TCP, for every cluster.
    #[serde(default)]
    api: Option<Spanned<super::raw::RawApi>>,
    /// A pair of appliances serving every cluster.
    #[serde(default)]
    ha: Option<Spanned<super::raw::RawHa>>,
}

/// One entry of `clusters:`: a path, or `{ file, id }`.
#[derive(Debug)]
enum Entry {
    Path(String),
    Explicit { file: Text, id: Option<Text> },
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntryVisitor;
        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = Entry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a cluster file's path, or { file: PATH, id: ID }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Entry, E> {
                Ok(Entry::Path(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
                let (mut file, mut id) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "file" if file.is_none() => file = Some(map.next_value::<Text>()?),
                        "id" if id.is_none() => id = Some(map.next_value::<Text>()?),
                        "file" | "id" => return Err(de::Error::duplicate_field("file or id")),
                        other => return Err(de::Error::unknown_field(other, &["file", "id"])),
                    }
                }
                let file = file.ok_or_else(|| de::Error::missing_field("file"))?;
                Ok(Entry::Explicit { file, id })
            }
        }
        d.deserialize_any(EntryVisitor)
    }
}

/// Whether `text` is a host file: a mapping with a `clusters` key. Anything else (a cluster
/// file, or no YAML mapping at all) is left to the cluster file's parser and its errors.
pub fn is_host_file(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(default)]
        clusters: Option<de::IgnoredAny>,
    }
    // A top-level `clusters:` line decides even when the YAML is broken, so that the host
    // file's parser reports its error, not the cluster file's ("unknown key clusters"). A file
    // without the word (every cluster file) is not parsed a second time.
    let top_level_line = || {
        text.lines().any(|l| {
            l.strip_prefix("clusters")
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
    };
    text.contains("clusters")
        && (top_level_line()
            || serde_saphyr::from_str::<Probe>(text).is_ok_and(|p| p.clusters.is_some()))
}

/// Loads the host file `text` (read from `name`, in `dir`) and every cluster file it lists.
pub(super) fn parse(
    text: &str,
    name: &str,
    dir: &Path,
    files: InstallCheck<'_>,
) -> Result<Host, LoadError> {
    let host_src: Source = Arc::new(NamedSource::new(name, text.to_owned()));
    let mut host = Problems::new(Arc::clone(&host_src));
    let raw: RawHost = serde_saphyr::from_str(text)
        .map_err(|e| LoadError::Syntax(super::SyntaxError::new(&e, text, name, host.clone())))?;
    if raw.version.value != 1 {
        host.error(
            "host::version",
            raw.version.referenced,
            format!("unsupported host file version {}", raw.version.value),
            "only version 1 exists",
        );
    }
    let entries = raw.clusters.value.as_deref().unwrap_or_default();
    if entries.is_empty() {
        host.error(
            "host::no-clusters",
            raw.clusters.referenced,
            "a host file lists at least one cluster file",
            "empty",
        );
    }
    let state_dir = match &raw.state_dir {
        None => PathBuf::from(super::validate::DEFAULT_STATE_DIR),
        Some(s) => super::validate::state_dir(&mut host, dir, s),
    };
    let run_as = raw
        .run_as
        .as_ref()
        .and_then(|r| super::validate::run_as(&mut host, r));
    let api = match &raw.api {
        None => Some(None),
        Some(a) => super::validate::host_api(&mut host, a, dir, files).map(Some),
    };
    // `None` only with an error reported, which fails the load below.
    let api = api.flatten();
    let shared = raw
        .shared_frontend
        .as_ref()
        .and_then(|s| shared_frontend(&mut host, &s.value));
    let ha = raw
        .ha
        .as_ref()
        .and_then(|h| super::validate::host_ha(&mut host, h, dir, files));
    let mut members = Vec::new();
    let mut clusters = Vec::new();
    // Each file once: a file listed twice would clash with itself in every rule.
    let mut listed: Vec<(PathBuf, Location)> = Vec::new();
    for entry in entries {
        let (file, id) = match &entry.value {
            Entry::Path(p) => (
                Spanned::new(p.clone(), entry.referenced, entry.defined),
                None,
            ),
            Entry::Explicit { file, id } => (file.clone(), id.clone()),
        };
        if let Some(id) = &id
            && !is_host_label(&id.value)
        {
            host.error(
                "host::id",
                id.referenced,
                format!("cluster id {:?} is not a host label", id.value),
                "lowercase letters, digits and '-', at most 63",
            );
        }
        let path = dir.join(&file.value);
        // Named as the host file is: next to it.
        let shown = Path::new(name)
            .parent()
            .map_or_else(|| PathBuf::from(&file.value), |p| p.join(&file.value));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                host.error(
                    "host::cluster-file",
                    file.referenced,
                    format!("can't read {}: {e}", shown.display()),
                    "this cluster file",
                );
                continue;
            }
        };
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if let Some((_, first)) = listed.iter().find(|(p, _)| *p == real) {
            host.error(
                "host::listed-twice",
                file.referenced,
                format!("{} is listed twice", shown.display()),
                "second time",
            )
            .also(*first, "first time");
            continue;
        }
        listed.push((real, file.referenced));
        if is_host_file(&text) {
            host.error(
                "host::cluster-file",
                file.referenced,
                format!("{} is a host file, not a cluster file", shown.display()),
                "lists clusters itself",
            )
            .hint("a host file lists cluster files; list that host file's clusters here");
            continue;
        }
        let cluster_dir = path.parent().unwrap_or(dir);
        match super::parse_cluster(&text, &shown.display().to_string(), cluster_dir, files) {
            Ok((loaded, located)) => {
                let entry_id = id;
                let id = match &entry_id {
                    Some(id) => id.value.clone(),
                    None => loaded.config.cluster.name.clone(),
                };
                members.push(Listed {
                    id,
                    name: shown.display().to_string(),
                    at: entry_id.as_ref().map_or(file.referenced, |i| i.referenced),
                    slot: clusters.len(),
                    src: Arc::clone(loaded.warnings.source()),
                    path,
                    raw: located,
                    config: loaded.config,
                });
                clusters.push(Found::Loaded(loaded.warnings));
            }
            Err(e) => clusters.push(Found::Failed(e)),
        }
    }
    let mut found = super::validate::host::conflicts(&host_src, &members);
    super::validate::host::exposure(
        &super::validate::host::HostSecrets::new(&state_dir, api.as_ref(), ha.as_ref()),
        &members,
        &mut found,
    );
    if let (Some(shared), Some(raw)) = (&shared, &raw.shared_frontend) {
        found.extend(super::validate::host::shared(
            &host_src,
            (shared, &raw.value),
            &members,
        ));
    }
    if let Some(raw) = &raw.ha {
        // The hosts as written (what is wrong with them alone is the pair's own error).
        let listed = &raw.value.hosts.value;
        let hosts: Vec<Ipv4Addr> = listed.iter().filter_map(|h| h.value.parse().ok()).collect();
        let at: Vec<Location> = listed.iter().map(|h| h.referenced).collect();
        if let Ok(hosts) = <[Ipv4Addr; 2]>::try_from(hosts)
            && hosts[0] != hosts[1]
        {
            found.extend(super::validate::host::pair(
                &host_src,
                (&hosts, raw.referenced, &at),
                &members,
                shared.as_ref(),
            ));
        }
    }
    for (member, mut problem) in found {
        // A problem in a cluster file also points at that file's entry in the host file.
        if let Some(m) = member.map(|m| &members[m]) {
            problem.related_at(
                &host_src,
                m.at,
                format!("cluster {} is listed in the host file", m.id),
                "listed here",
            );
        }
        match member.map(|m| &mut clusters[members[m].slot]) {
            Some(Found::Loaded(problems)) => problems.push(problem),
            _ => host.push(problem),
        }
    }
    let problems = HostProblems {
        host,
        entries: entries.len(),
        clusters,
    };
    if problems.has_errors() {
        return Err(LoadError::Host(problems));
    }
    Ok(Host {
        state_dir,
        run_as,
        clusters: members
            .into_iter()
            .map(|m| Member {
                id: m.id,
                path: m.path,
                name: m.name,
                config: {
                    let mut config = match &shared {
                        Some(s) => routed(m.config, s),
                        None => m.config,
                    };
                    // The host's API serves every cluster: each plan carries it, as a
                    // cluster file's does.
                    config.api.clone_from(&api);
                    // So does the pair.
                    config.ha.clone_from(&ha);
                    config
                },
            })
            .collect(),
        shared_frontend: shared,
        api,
        ha,
        warnings: problems,
    })
}

/// `shared_frontend` as the host file says it; its problems in `host`.
fn shared_frontend(host: &mut Problems, raw: &RawShared) -> Option<SharedFrontend> {
    let v4 = raw.address.value.parse::<Ipv4Addr>();
    if v4.is_err() {
        host.error(
            "host::shared-frontend",
            raw.address.referenced,
            format!("`{}` is not an IPv4 address", raw.address.value),
            "expected an IPv4 address",
        )
        .hint("an IPv6 address goes under shared_frontend.address_v6");
    }
    let v6 = match &raw.address_v6 {
        None => Ok(None),
        Some(t) => t.value.parse::<Ipv6Addr>().map(Some).map_err(|_| {
            host.error(
                "host::shared-frontend",
                t.referenced,
                format!("`{}` is not an IPv6 address", t.value),
                "expected an IPv6 address",
            );
        }),
    };
    Some(SharedFrontend {
        v4: v4.ok()?,
        v6: v6.ok()?,
        default_cluster: raw.default_cluster.as_ref().map(|t| t.value.clone()),
    })
}

/// `config` as a cluster of a host with a shared frontend: its names resolve to the shared
/// addresses and its frontends are the host's router's, so it listens on none of its own. A
/// single-node cluster whose names point at its node keeps them (it has no frontends).
pub fn routed(mut config: Config, shared: &SharedFrontend) -> Config {
    if config.direct_single_node().is_some() {
        return config;
    }
    // A cluster without IPv6 gets no AAAA records for its names.
    let v6 = config.network.v6.is_some();
    config.lb.shared = Some(
        shared
            .addresses()
            .into_iter()
            .filter(|ip| ip.is_ipv4() || v6)
            .collect(),
    );
    let l = &mut config.listen;
    for frontends in [
        &mut l.api,
        &mut l.machine_config,
        &mut l.ingress_https,
        &mut l.ingress_http,
    ] {
        frontends.clear();
    }
    config
}
