//! Turns the raw YAML tree into a [`Config`], reporting every problem at once. One file per
//! section of the YAML holds that section's rules (`network.rs`, `nodes.rs`, `install.rs`,
//! `listen.rs`, `dns.rs`, `lb.rs`, `cluster.rs`, `install_config.rs`; `ignition.rs` compares the
//! ignition directory's content with the validated config); `control/` checks the `control:`
//! section and each node's `machine:`, each provider in its own file. `defaults.rs` holds the
//! defaults, but for those kept beside their rules: the health check's interval, timeout, rise
//! and fall (`lb.rs`), the install config's pod and service networks (`install_config.rs`) and
//! Proxmox's ISO storage (`control/proxmox.rs`). This file walks the sections in order and
//! checks what spans them (a node address against the network's pool, listeners against the
//! upstreams).
//!
//! Architecture invariant: validation reads the file system only through [`InstallFiles`] (the
//! ignition files' presence, age and content, the clock) and writes nothing, so a bad config can never touch on-disk
//! state and tests can pin the clock.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde_saphyr::{Location, Spanned};

use super::diagnostic::{Problems, Severity};
use super::model::*;
use super::raw::*;
use crate::records::{RecordData, is_domain_name, is_host_domain, is_host_label};
pub(super) use defaults::DEFAULT_STATE_DIR;
use defaults::*;
pub use exposure::secret_files;

mod api;
mod cluster;
mod control;
mod defaults;
mod dns;
pub(in crate::config) mod exposure;
mod ha;
pub(super) mod host;
mod ignition;
mod install;
mod install_config;
mod lb;
mod listen;
mod network;
mod nodes;
mod orchestration;

/// Ignition configs embed certificates that expire 24 hours after `openshift-install` wrote them.
pub const IGNITION_MAX_AGE: Duration = crate::vocabulary::IGNITION_LIFETIME;
/// Past this age an install still works but is running out of time.
pub const IGNITION_WARN_AGE: Duration = Duration::from_secs(12 * 3600);

/// Names the plan publishes itself; a node may not take one.
const RESERVED_NAMES: [&str; 4] = ["api", "api-int", "apps", "ns1"];
/// Kernel arguments the boot plan sets per node.
const MANAGED_KERNEL_ARGS: [&str; 3] = [
    "coreos.inst.ignition_url",
    "coreos.live.rootfs_url",
    "coreos.inst.install_dev",
];

/// What validation needs to know about the install files.
pub trait InstallFiles {
    /// How long ago `path` was last written.
    fn age(&self, path: &Path) -> io::Result<Duration>;
    /// The permission bits of a regular file (credential and CA files); its content unread.
    fn mode(&self, path: &Path) -> io::Result<u32>;
    /// Whether the pair's secret file is usable, by the rule `serve` and `render` apply.
    fn pair_secret(&self, path: &Path) -> Result<(), String>;
    /// Up to `max` bytes of a file openshift-install wrote (an ignition file, its state file);
    /// a larger file is an error.
    fn read(&self, path: &Path, max: u64) -> io::Result<Vec<u8>>;
    /// The admin kubeconfig's content, read by the rule every secret has (`secrets.rs`).
    fn kubeconfig(&self, path: &Path) -> Result<Vec<u8>, String>;
    /// The instant certificates are checked at.
    fn now(&self) -> SystemTime;
}

/// The real file system, read at one instant.
#[derive(Debug, Clone, Copy)]
pub struct RealFiles {
    pub now: SystemTime,
}

impl InstallFiles for RealFiles {
    fn age(&self, path: &Path) -> io::Result<Duration> {
        let modified = std::fs::metadata(path)?.modified()?;
        // A file from the future (clock skew) counts as brand new.
        Ok(self.now.duration_since(modified).unwrap_or_default())
    }

    fn mode(&self, path: &Path) -> io::Result<u32> {
        control::file_mode(path)
    }

    fn pair_secret(&self, path: &Path) -> Result<(), String> {
        crate::secrets::PairKeys::read(path)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn read(&self, path: &Path, max: u64) -> io::Result<Vec<u8>> {
        use std::io::Read as _;
        let mut bytes = Vec::new();
        std::fs::File::open(path)?
            .take(max + 1)
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(io::Error::other(format!("it is larger than {max} bytes")));
        }
        Ok(bytes)
    }

    fn kubeconfig(&self, path: &Path) -> Result<Vec<u8>, String> {
        crate::secrets::read_kubeconfig(path).map_err(|e| e.to_string())
    }

    fn now(&self) -> SystemTime {
        self.now
    }
}

/// Whether, and how strictly, validation looks at the files a config names beyond itself: the
/// ignition files (`install.ignition_dir`) and the control module's credential and CA files.
///
/// They matter for installing nodes and driving machines only. A services host restarted on
/// day 2, a week after the install (its bootstrap.ign long expired, or the install directory
/// deleted with its secrets), must still serve the cluster's DNS, DHCP and load balancer: so
/// `serve` and `check` only warn, and the HTTP service refuses the ignition fetches it can't
/// honour.
#[derive(Clone, Copy)]
pub enum InstallCheck<'a> {
    /// Don't look (render, artifacts, fixtures: they are about the config, not a machine).
    Skip,
    /// Problems with those files are warnings (`serve`, `check`).
    Warn(&'a dyn InstallFiles),
    /// Problems with those files are errors (`check --install`, before an install).
    Require(&'a dyn InstallFiles),
    /// Credential and CA files are required, ignition files not looked at (`nodes`: machines
    /// are made before or after `openshift-install create ignition-configs`).
    Machines(&'a dyn InstallFiles),
}

impl<'a> InstallCheck<'a> {
    /// How the ignition files are checked, if at all.
    fn ignition(self) -> Option<(&'a dyn InstallFiles, Severity)> {
        match self {
            InstallCheck::Skip | InstallCheck::Machines(_) => None,
            InstallCheck::Warn(f) => Some((f, Severity::Warning)),
            InstallCheck::Require(f) => Some((f, Severity::Error)),
        }
    }

    /// How the control module's credential and CA files are checked, if at all.
    fn credentials(self) -> Option<(&'a dyn InstallFiles, Severity)> {
        match self {
            InstallCheck::Skip => None,
            InstallCheck::Warn(f) => Some((f, Severity::Warning)),
            InstallCheck::Require(f) | InstallCheck::Machines(f) => Some((f, Severity::Error)),
        }
    }
}

impl std::fmt::Debug for InstallCheck<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InstallCheck::Skip => "Skip",
            InstallCheck::Warn(_) => "Warn",
            InstallCheck::Require(_) => "Require",
            InstallCheck::Machines(_) => "Machines",
        })
    }
}

/// Validates `raw`, read from a file in `config_dir`. Returns the config when `problems` holds
/// no error afterwards (warnings may remain).
pub fn validate(
    raw: &RawConfig,
    config_dir: &Path,
    files: InstallCheck<'_>,
    problems: &mut Problems,
) -> Option<Config> {
    let mut v = Validator { p: problems };
    let config = v.config(raw, config_dir, files);
    if config.is_none() && !v.p.has_errors() {
        // Every path that gives up reports why; this catches one that forgot to.
        v.p.error(
            "config::internal",
            raw.version.referenced,
            "the config was refused without a reason: this is a bug in okd-appliance",
            "while reading this file",
        );
    }
    if v.p.has_errors() { None } else { config }
}

/// What node addresses are checked against. Parts that failed validation are absent, so a
/// mistake in the network section does not hide the nodes' own mistakes.
#[derive(Debug)]
struct AddressSpace {
    subnet: Option<Ipv4Net>,
    gateway: Option<Ipv4Addr>,
    appliance: Option<Ipv4Addr>,
    pool: Option<Pool>,
    v6: V6Space,
}

#[derive(Debug, Clone)]
enum V6Space {
    Absent,
    /// Configured but invalid (its error is reported).
    Invalid,
    Valid(Ipv6Network),
}

struct Validator<'a> {
    p: &'a mut Problems,
}

impl Validator<'_> {
    fn config(&mut self, raw: &RawConfig, dir: &Path, files: InstallCheck<'_>) -> Option<Config> {
        if raw.version.value != 1 {
            self.p
                .error(
                    "config::version",
                    raw.version.referenced,
                    format!("unsupported config version {}", raw.version.value),
                    "this version",
                )
                .hint("this okd-appliance reads `version: 1`");
        }
        let legacy_etcd = raw.dns.legacy_etcd.as_ref().is_some_and(|b| b.value);
        let cluster = self.cluster(&raw.cluster, legacy_etcd);
        let (network, space) = self.network(&raw.network);
        let nodes = self.nodes(&raw.nodes, &space, legacy_etcd);
        if let Some(c) = &cluster {
            self.node_name_lengths(&raw.nodes, &c.domain());
        }
        // The roles as written, so a node with another mistake still asks for its ignition file.
        let roles: Vec<Role> = raw
            .nodes
            .value
            .iter()
            .filter_map(|n| nodes::parse_role(&n.role.value))
            .collect();
        // A single-node cluster reached directly needs no load balancer listeners by default.
        let direct = single_node_of(roles.iter().copied())
            && raw.lb.single_node.as_ref().map(|t| t.value.as_str()) != Some("proxied");
        let listen = self.listen(&raw.listen, &raw.network, network.as_ref(), direct);
        let install = self.install(
            &raw.install,
            dir,
            network.as_ref(),
            listen.as_ref(),
            &roles,
            files,
        );
        let dns = match (&cluster, &network) {
            (Some(c), Some(n)) => self.dns(&raw.dns, c, n, &nodes),
            _ => None,
        };
        if let Some(l) = &listen {
            self.forwarding_loop(&raw.network, network.as_ref(), l);
        }
        let lb = self.lb(&raw.lb, dir);
        let control = control::control(raw, &nodes, dir, files.credentials(), self.p);
        let no_section = RawOrchestration::default();
        let orchestration = self.orchestration(
            raw.orchestration.as_ref().unwrap_or(&no_section),
            dir,
            &raw.install.value,
        );
        let api = match &raw.api {
            None => Some(None),
            Some(a) => self.api(a, dir, files.credentials()).map(Some),
        };
        let ha = match &raw.ha {
            None => Some(None),
            Some(h) => self
                .ha(h, network.as_ref(), &nodes, dir, files.credentials())
                .map(Some),
        };
        let install_config = self.install_config(
            raw.install_config.as_ref(),
            dir,
            network.as_ref(),
            &raw.network,
        );
        let run_as = raw.run_as.as_ref().and_then(|r| self.run_as(r));
        let state_dir = match &raw.state_dir {
            None => PathBuf::from(DEFAULT_STATE_DIR),
            Some(s) => state_dir(self.p, dir, s),
        };
        let config = Config {
            cluster: cluster?,
            network: network?,
            nodes,
            install: install?,
            dns: dns?,
            lb: lb?,
            listen: listen?,
            run_as: if raw.run_as.is_some() {
                Some(run_as?)
            } else {
                None
            },
            state_dir,
            control: control?,
            orchestration: orchestration?,
            ha: ha?,
            api: api?,
            install_config: install_config?,
        };
        self.exposure(raw, &config, dir);
        self.own_ip_args(raw, &config);
        self.ignition_contents(raw, &config, files);
        self.install_kubeconfig(raw, &config, files);
        Some(config)
    }

    fn duration(
        &mut self,
        raw: &Text,
        what: &str,
        min: Duration,
        max: Duration,
    ) -> Option<Duration> {
        duration(self.p, raw, what, min, max)
    }

    /// `raw` as one of `choices` (the first is the default when absent), or an error at `raw`.
    fn one_of<T: Copy>(
        &mut self,
        code: &'static str,
        raw: Option<&Text>,
        what: &str,
        choices: &[(&str, T)],
        hint: &str,
    ) -> Option<T> {
        let Some(raw) = raw else {
            return Some(choices[0].1);
        };
        if let Some((_, v)) = choices.iter().find(|(name, _)| *name == raw.value) {
            return Some(*v);
        }
        self.p
            .error(
                code,
                raw.referenced,
                format!("unknown {what} `{}`", raw.value),
                "unknown",
            )
            .hint(hint.to_owned());
        None
    }

    fn run_as(&mut self, raw: &RawRunAs) -> Option<RunAs> {
        run_as(self.p, raw)
    }
}

/// A host file's `api`, checked as a cluster file's.
pub(in crate::config) fn host_api(
    p: &mut Problems,
    raw: &Spanned<RawApi>,
    dir: &Path,
    files: InstallCheck<'_>,
) -> Option<Api> {
    Validator { p }.api(raw, dir, files.credentials())
}

/// A host file's `ha`: the pair's own rules (two hosts, the router ID, the secret); what it
/// needs of the clusters is `host::pair`.
pub(in crate::config) fn host_ha(
    p: &mut Problems,
    raw: &Spanned<RawHa>,
    dir: &Path,
    files: InstallCheck<'_>,
) -> Option<Ha> {
    Validator { p }.ha(raw, None, &[], dir, files.credentials())
}

/// `state_dir`, relative to `dir`; an empty one is an error.
pub(in crate::config) fn state_dir(p: &mut Problems, dir: &Path, raw: &Text) -> PathBuf {
    if raw.value.trim().is_empty() {
        p.error(
            "config::state-dir",
            raw.referenced,
            "state_dir is empty",
            "here",
        );
        return PathBuf::new();
    }
    resolve(dir, &raw.value)
}

/// `run_as`, if its names can be account names.
pub(in crate::config) fn run_as(p: &mut Problems, raw: &RawRunAs) -> Option<RunAs> {
    let valid =
        |s: &str| !s.is_empty() && !s.contains(|c: char| c.is_whitespace() || c == ':' || c == '/');
    if !valid(&raw.user.value) {
        p.error(
            "config::run-as",
            raw.user.referenced,
            "not a user name",
            "user",
        );
        return None;
    }
    if let Some(g) = raw.group.as_ref().filter(|g| !valid(&g.value)) {
        p.error("config::run-as", g.referenced, "not a group name", "group");
        return None;
    }
    Some(RunAs {
        user: raw.user.value.clone(),
        group: raw.group.as_ref().map(|g| g.value.clone()),
    })
}

/// Records the first place a key was seen; returns it when this is a second sighting.
fn first_use<K: std::hash::Hash + Eq>(
    seen: &mut HashMap<K, Location>,
    key: K,
    at: Location,
) -> Option<Location> {
    match seen.entry(key) {
        Entry::Occupied(e) => Some(*e.get()),
        Entry::Vacant(e) => {
            e.insert(at);
            None
        }
    }
}

/// A path from the config, relative to the config file's folder, without `.` components
/// (`./state` next to `./okd.yml` is `./state`, not `././state`).
fn resolve(dir: &Path, value: &str) -> PathBuf {
    dir.join(value).components().collect()
}

/// `raw` as a duration (`500ms`, `2s`, `12h`) between `min` and `max`, or an error at `raw`.
fn duration(
    p: &mut Problems,
    raw: &Text,
    what: &str,
    min: Duration,
    max: Duration,
) -> Option<Duration> {
    match humantime::parse_duration(&raw.value) {
        Ok(d) if d >= min && d <= max => Some(d),
        Ok(_) => {
            p.error(
                "config::duration",
                raw.referenced,
                format!(
                    "{what} `{}` is out of range ({} to {})",
                    raw.value,
                    humantime::format_duration(min),
                    humantime::format_duration(max)
                ),
                "out of range",
            );
            None
        }
        Err(e) => {
            p.error(
                "config::duration",
                raw.referenced,
                format!("{what} `{}` is not a duration: {e}", raw.value),
                "not a duration",
            )
            .hint("write a number with a unit, e.g. 500ms, 2s, 15m, 12h");
            None
        }
    }
}
