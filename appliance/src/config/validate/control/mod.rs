//! Validation of the `control:` section and of each node's `machine:` settings.
//!
//! Architecture invariant: like the rest of validation, this reads the file system only through
//! [`InstallFiles`], and of a credential file only its metadata (that it exists, is a regular
//! file and is readable by its owner alone): a secret's content is never read while validating,
//! so it can't end up in a diagnostic.
//!
//! This file holds the entry, the rules every provider shares (the section's provider and
//! timeouts, each node's machine sizes and install path, credentials and TLS trust); each
//! provider's own settings are checked in its file: `proxmox.rs`, `libvirt.rs`, `redfish.rs`.

mod libvirt;
mod proxmox;
mod redfish;

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::time::Duration;

use bytesize::ByteSize;
use serde_saphyr::Location;

use super::super::control::*;
use super::super::diagnostic::{Problems, Severity};
use super::super::model::{Node, Role};
use super::super::raw::{RawConfig, RawControl, RawMachine, Text};
use super::InstallFiles;
use redfish::Redfish;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// Validates `raw.control` and the nodes' `machine:` settings. `nodes` are the nodes that passed
/// validation: a node with its own mistakes gets no machine, its errors already fail the load.
pub(super) fn control(
    raw: &RawConfig,
    nodes: &[Node],
    dir: &Path,
    files: Option<(&dyn InstallFiles, Severity)>,
    p: &mut Problems,
) -> Option<Control> {
    let mut v = ControlValidator { p, dir, files };
    v.control(raw, nodes)
}

/// An owner-only secret file, checked as the control credentials are (the HA secret too).
pub(super) fn secret_file(
    raw: &Text,
    dir: &Path,
    files: Option<(&dyn InstallFiles, Severity)>,
    p: &mut Problems,
) -> Option<std::path::PathBuf> {
    ControlValidator { p, dir, files }.secret_file(raw)
}

struct ControlValidator<'a, 'p> {
    p: &'p mut Problems,
    dir: &'a Path,
    /// How credential and CA files are checked (`None`: not looked at, as `render` loads).
    files: Option<(&'a dyn InstallFiles, Severity)>,
}

impl ControlValidator<'_, '_> {
    fn control(&mut self, raw: &RawConfig, nodes: &[Node]) -> Option<Control> {
        let section = raw.control.as_ref();
        let provider = match section {
            None => Some(Provider::None),
            Some(c) => self.provider(&c.value),
        };
        let default_install = match section.and_then(|c| c.value.install.as_ref()) {
            None => Some(InstallPath::Pxe),
            Some(t) => self.install_path(t),
        };
        let timeouts = match section {
            None => Some(ControlTimeouts::default()),
            Some(c) => self.timeouts(&c.value),
        };
        let redfish = match (&provider, section) {
            (Some(Provider::Redfish), Some(c)) => Some(Redfish {
                defaults: c.value.redfish.as_ref().map(|d| &d.value),
            }),
            _ => None,
        };
        let machines = self.machines(
            raw,
            nodes,
            default_install.unwrap_or(InstallPath::Pxe),
            redfish.as_ref(),
        );
        if matches!(provider, Some(Provider::None)) {
            for n in &raw.nodes.value {
                if let Some(m) = &n.machine {
                    self.p
                        .warning(
                            "config::control",
                            m.referenced,
                            "machine settings without a control provider are not used",
                            "ignored",
                        )
                        .hint("set control.provider (e.g. proxmox) or remove `machine:`");
                }
            }
        }
        Some(Control {
            provider: provider?,
            machines: machines?,
            timeouts: timeouts?,
        })
    }

    fn provider(&mut self, raw: &RawControl) -> Option<Provider> {
        let name = raw.provider.value.as_str();
        let provider = match name {
            "none" => Some(Provider::None),
            "proxmox" => match &raw.proxmox {
                Some(px) => self.proxmox(&px.value).map(Provider::Proxmox),
                None => {
                    self.p
                        .error(
                            "config::control",
                            raw.provider.referenced,
                            "provider proxmox needs a `proxmox:` section",
                            "proxmox without settings",
                        )
                        .hint("add control.proxmox with url, node, token_id, token_secret_file, ca_file or fingerprint, storage and bridge");
                    None
                }
            },
            "redfish" => {
                if let Some(url) = raw.redfish.as_ref().and_then(|d| d.value.url.as_ref()) {
                    self.p
                        .error(
                            "config::control",
                            url.referenced,
                            "a BMC URL in control.redfish",
                            "belongs to one node",
                        )
                        .hint("each node names its own BMC in `machine: { bmc: { url: ... } }`; control.redfish holds the defaults (username, password_file, ca_file...)");
                    return None;
                }
                Some(Provider::Redfish)
            }
            "libvirt" => match &raw.libvirt {
                Some(lv) => self
                    .libvirt(&lv.value, lv.referenced)
                    .map(Provider::Libvirt),
                None => {
                    self.p
                        .error(
                            "config::control",
                            raw.provider.referenced,
                            "provider libvirt needs a `libvirt:` section",
                            "libvirt without settings",
                        )
                        .hint("add control.libvirt with network (or bridge), and uri and pool unless qemu:///system and default");
                    None
                }
            },
            other => {
                self.p
                    .error(
                        "config::control",
                        raw.provider.referenced,
                        format!("unknown control provider `{other}`"),
                        "unknown",
                    )
                    .hint("use none, proxmox, libvirt or redfish");
                None
            }
        };
        if let Some(lv) = &raw.libvirt
            && name != "libvirt"
        {
            self.p
                .error(
                    "config::control",
                    lv.referenced,
                    format!("libvirt settings, but the provider is `{name}`"),
                    "not used",
                )
                .also(raw.provider.referenced, "provider")
                .hint("set `provider: libvirt` or remove the libvirt section");
            return None;
        }
        if let Some(rf) = &raw.redfish
            && name != "redfish"
        {
            self.p
                .error(
                    "config::control",
                    rf.referenced,
                    format!("redfish settings, but the provider is `{name}`"),
                    "not used",
                )
                .also(raw.provider.referenced, "provider")
                .hint("set `provider: redfish` or remove the redfish section");
            return None;
        }
        if let Some(px) = &raw.proxmox
            && name != "proxmox"
        {
            self.p
                .error(
                    "config::control",
                    px.referenced,
                    format!("proxmox settings, but the provider is `{name}`"),
                    "not used",
                )
                .also(raw.provider.referenced, "provider")
                .hint("set `provider: proxmox` or remove the proxmox section");
            return None;
        }
        provider
    }

    fn name(
        &mut self,
        raw: &Text,
        what: &str,
        valid: fn(&str) -> bool,
        hint: &str,
    ) -> Option<String> {
        if valid(&raw.value) {
            return Some(raw.value.clone());
        }
        self.p
            .error(
                "config::control",
                raw.referenced,
                format!("`{}` is not a valid {what}", raw.value),
                "invalid",
            )
            .hint(hint.to_owned());
        None
    }

    /// Exactly one of `<what>_file` and `<what>_env`.
    fn secret(
        &mut self,
        file: Option<&Text>,
        env: Option<&Text>,
        owner: Location,
        what: &str,
    ) -> Option<SecretSource> {
        match (file, env) {
            (Some(f), Some(e)) => {
                self.p
                    .error(
                        "config::secret",
                        e.referenced,
                        format!("both {what}_file and {what}_env are set"),
                        "second source",
                    )
                    .also(f.referenced, "first source")
                    .hint("keep one of them");
                None
            }
            (None, None) => {
                self.p
                    .error(
                        "config::secret",
                        owner,
                        format!("no {what}_file or {what}_env"),
                        "credential without a secret",
                    )
                    .hint(format!(
                        "name a file readable only by its owner ({what}_file) or an environment variable ({what}_env); secrets never go into this file"
                    ));
                None
            }
            (Some(f), None) => self.secret_file(f).map(SecretSource::File),
            (None, Some(e)) => {
                if is_env_name(&e.value) {
                    Some(SecretSource::Env(e.value.clone()))
                } else {
                    self.p
                        .error(
                            "config::secret",
                            e.referenced,
                            format!("`{}` is not an environment variable name", e.value),
                            "not a variable name",
                        )
                        .hint("letters, digits and underscores, not starting with a digit, e.g. PVE_TOKEN_SECRET");
                    None
                }
            }
        }
    }

    /// A file that exists and that only its owner can read or write.
    fn secret_file(&mut self, raw: &Text) -> Option<std::path::PathBuf> {
        if raw.value.trim().is_empty() {
            self.p.error(
                "config::secret",
                raw.referenced,
                "the secret file name is empty",
                "empty",
            );
            return None;
        }
        let path = self.dir.join(&raw.value);
        let Some((files, severity)) = self.files else {
            return Some(path);
        };
        // As a warning (`serve`), the path stays: the provider reports the problem when used.
        let keep = severity == Severity::Warning;
        match files.mode(&path) {
            Ok(mode) if mode & 0o077 == 0 => Some(path),
            Ok(mode) => {
                self.p
                    .report(
                        severity,
                        "config::secret",
                        raw.referenced,
                        format!(
                            "{} is readable or writable by its group or others (mode {:04o})",
                            path.display(),
                            mode & 0o7777
                        ),
                        "too open",
                    )
                    .hint(format!("chmod 600 {}", path.display()));
                keep.then_some(path)
            }
            Err(e) => {
                self.p
                    .report(
                        severity,
                        "config::secret",
                        raw.referenced,
                        format!("can't use {}: {}", path.display(), io_reason(&e)),
                        "secret file",
                    )
                    .hint("create it with the secret on one line, owned by the account okd-appliance runs as, mode 0600");
                keep.then_some(path)
            }
        }
    }

    fn trust(
        &mut self,
        ca_file: Option<&Text>,
        fingerprint: Option<&Text>,
        url: Location,
    ) -> Option<TlsTrust> {
        match (ca_file, fingerprint) {
            (Some(c), Some(f)) => {
                self.p
                    .error(
                        "config::tls",
                        f.referenced,
                        "both ca_file and fingerprint are set",
                        "second way to trust",
                    )
                    .also(c.referenced, "first way to trust")
                    .hint("keep the one that matches how the certificate was made: ca_file for a certificate from a CA, fingerprint for Proxmox's self-signed one");
                None
            }
            (None, None) => {
                self.p
                    .error(
                        "config::tls",
                        url,
                        "no way to verify the provider's TLS certificate",
                        "needs ca_file or fingerprint",
                    )
                    .hint("set ca_file (the PEM CA, /etc/pve/pve-root-ca.pem on the Proxmox node) or fingerprint (`pvenode cert info` prints the SHA-256 one); the certificate is never left unchecked");
                None
            }
            (Some(c), None) => {
                if c.value.trim().is_empty() {
                    self.p
                        .error("config::tls", c.referenced, "ca_file is empty", "empty");
                    return None;
                }
                let path = self.dir.join(&c.value);
                let Some((files, severity)) = self.files else {
                    return Some(TlsTrust::CaFile(path));
                };
                match files.mode(&path) {
                    Ok(_) => Some(TlsTrust::CaFile(path)),
                    Err(e) => {
                        self.p.report(
                            severity,
                            "config::tls",
                            c.referenced,
                            format!("can't use {}: {}", path.display(), io_reason(&e)),
                            "CA file",
                        );
                        (severity == Severity::Warning).then_some(TlsTrust::CaFile(path))
                    }
                }
            }
            (None, Some(f)) => match parse_fingerprint(&f.value) {
                Ok(digest) => Some(TlsTrust::Fingerprint(digest)),
                Err(len) => {
                    let problem = self.p.error(
                        "config::tls",
                        f.referenced,
                        "fingerprint is not a SHA-256 digest",
                        "not 32 hex octets",
                    );
                    if len == Some(20) {
                        problem.hint("this is a SHA-1 fingerprint; use the SHA-256 one (`pvenode cert info`, or `openssl x509 -noout -fingerprint -sha256`)");
                    } else {
                        problem.hint("32 hex octets, with or without colons, as `pvenode cert info` prints it");
                    }
                    None
                }
            },
        }
    }

    fn install_path(&mut self, raw: &Text) -> Option<InstallPath> {
        match raw.value.as_str() {
            "pxe" => Some(InstallPath::Pxe),
            "iso" => Some(InstallPath::Iso),
            other => {
                self.p
                    .error(
                        "config::control",
                        raw.referenced,
                        format!("unknown install path `{other}`"),
                        "unknown",
                    )
                    .hint("use pxe (network boot through the appliance) or iso (the node's live ISO as a CD-ROM)");
                None
            }
        }
    }

    fn timeouts(&mut self, raw: &RawControl) -> Option<ControlTimeouts> {
        let d = ControlTimeouts::default();
        let secs = Duration::from_secs;
        let t = &raw.timeouts;
        let request = self.duration(
            t.request.as_ref(),
            d.request,
            "request timeout",
            secs(1),
            secs(600),
        );
        let task = self.duration(
            t.task.as_ref(),
            d.task,
            "task timeout",
            secs(10),
            secs(24 * 3600),
        );
        let shutdown = self.duration(
            t.shutdown.as_ref(),
            d.shutdown,
            "shutdown timeout",
            secs(1),
            secs(3600),
        );
        Some(ControlTimeouts {
            request: request?,
            task: task?,
            shutdown: shutdown?,
        })
    }

    fn duration(
        &mut self,
        raw: Option<&Text>,
        default: Duration,
        what: &str,
        min: Duration,
        max: Duration,
    ) -> Option<Duration> {
        let Some(raw) = raw else {
            return Some(default);
        };
        super::duration(self.p, raw, what, min, max)
    }

    fn machines(
        &mut self,
        raw: &RawConfig,
        nodes: &[Node],
        default_install: InstallPath,
        redfish: Option<&Redfish<'_>>,
    ) -> Option<Vec<MachineSettings>> {
        let mut ok = true;
        let mut vmids: HashMap<u32, Location> = HashMap::new();
        let mut machines = Vec::new();
        for raw_node in &raw.nodes.value {
            let node = nodes.iter().find(|n| n.name == raw_node.name.value);
            let settings = match &raw_node.machine {
                None => node.map(|n| defaults(n, default_install)),
                Some(m) => self.machine(&m.value, node, default_install),
            };
            let bmc = match redfish {
                None => {
                    if let Some(b) = raw_node.machine.as_ref().and_then(|m| m.value.bmc.as_ref()) {
                        self.p
                            .warning(
                                "config::control",
                                b.referenced,
                                "a BMC without provider redfish is not used",
                                "ignored",
                            )
                            .hint("set control.provider: redfish, or remove `bmc:`");
                    }
                    Some(None)
                }
                Some(rf) => self.bmc(raw_node, rf).map(Some),
            };
            let settings = match (settings, bmc) {
                (Some(s), Some(bmc)) => Some(MachineSettings { bmc, ..s }),
                (Some(_), None) => {
                    ok = false;
                    None
                }
                (None, _) => None,
            };
            if let Some(vmid) = raw_node
                .machine
                .as_ref()
                .and_then(|m| m.value.vmid.as_ref())
                && let Some(first) = vmids.insert(vmid.value, vmid.referenced)
            {
                self.p
                    .error(
                        "config::control",
                        vmid.referenced,
                        format!("VM ID {} is given to two nodes", vmid.value),
                        "second use",
                    )
                    .also(first, "first use");
                ok = false;
            }
            match (settings, node) {
                (Some(s), _) => machines.push(s),
                // The node's own errors are reported already.
                (None, None) => {}
                (None, Some(_)) => ok = false,
            }
        }
        ok.then_some(machines)
    }

    fn machine(
        &mut self,
        raw: &RawMachine,
        node: Option<&Node>,
        default_install: InstallPath,
    ) -> Option<MachineSettings> {
        let min = node.map(|n| Minimum::of(n.role));
        let role = node.map_or(Role::Worker, |n| n.role);
        let cores = match &raw.cores {
            None => min.map(|m| m.cores),
            Some(c) if (1..=512).contains(&c.value) => {
                if let Some(m) = min.filter(|m| c.value < m.cores) {
                    self.below_minimum(c.referenced, role, &format!("{} vCPUs", m.cores));
                }
                Some(c.value)
            }
            Some(c) => {
                self.p.error(
                    "config::machine",
                    c.referenced,
                    format!("{} cores is out of range (1 to 512)", c.value),
                    "out of range",
                );
                None
            }
        };
        let memory_mib = match &raw.memory {
            None => min.map(|m| m.memory_mib),
            Some(t) => self.size(t, "memory", GIB).map(|bytes| {
                let mib = bytes.div_ceil(MIB);
                if let Some(m) = min.filter(|m| mib < m.memory_mib) {
                    self.below_minimum(
                        t.referenced,
                        role,
                        &format!("{} GiB of memory", m.memory_mib / 1024),
                    );
                }
                mib
            }),
        };
        let disk_gib = match &raw.disk {
            None => min.map(|m| m.disk_gib),
            Some(t) => self.size(t, "disk", 10 * GIB).map(|bytes| {
                let gib = bytes.div_ceil(GIB);
                if let Some(m) = min.filter(|m| gib < m.disk_gib) {
                    self.below_minimum(t.referenced, role, &format!("{} GiB of disk", m.disk_gib));
                }
                gib
            }),
        };
        let install = match &raw.install {
            None => Some(default_install),
            Some(t) => self.install_path(t),
        };
        let vmid = match &raw.vmid {
            None => Some(None),
            Some(v) if (100..=999_999_999).contains(&v.value) => Some(Some(v.value)),
            Some(v) => {
                self.p
                    .error(
                        "config::machine",
                        v.referenced,
                        format!("VM ID {} is out of range (100 to 999999999)", v.value),
                        "out of range",
                    )
                    .hint("Proxmox reserves IDs below 100");
                None
            }
        };
        Some(MachineSettings {
            node: node?.name.clone(),
            cores: cores?,
            memory_mib: memory_mib?,
            disk_gib: disk_gib?,
            install: install?,
            vmid: vmid?,
            bmc: None,
        })
    }

    fn below_minimum(&mut self, at: Location, role: Role, minimum: &str) {
        self.p
            .warning(
                "config::machine",
                at,
                format!("below OpenShift's documented minimum for a {role} node ({minimum})"),
                "below the minimum",
            )
            .hint("the install may fail or the node may not become ready; fine for a test cluster");
    }

    /// A size with a unit, at least `least` bytes.
    fn size(&mut self, raw: &Text, what: &str, least: u64) -> Option<u64> {
        let s = raw.value.trim();
        let has_unit = s.chars().any(|c| c.is_ascii_alphabetic());
        match s.parse::<ByteSize>() {
            Ok(size) if has_unit && size.as_u64() >= least => Some(size.as_u64()),
            Ok(_) if has_unit => {
                self.p.error(
                    "config::machine",
                    raw.referenced,
                    format!(
                        "{what} size {} is too small (at least {})",
                        raw.value,
                        ByteSize(least).display().iec()
                    ),
                    "too small",
                );
                None
            }
            _ => {
                self.p
                    .error(
                        "config::machine",
                        raw.referenced,
                        format!("{what} size `{}` is not a size with a unit", raw.value),
                        "not a size",
                    )
                    .hint("write a number and a unit, e.g. 16GiB, 16384MiB or 120GB");
                None
            }
        }
    }
}

/// Every default filled in: the role's documented minimum.
fn defaults(node: &Node, install: InstallPath) -> MachineSettings {
    let min = Minimum::of(node.role);
    MachineSettings {
        node: node.name.clone(),
        cores: min.cores,
        memory_mib: min.memory_mib,
        disk_gib: min.disk_gib,
        install,
        vmid: None,
        bmc: None,
    }
}

/// The stat a secret file needs: its permission bits, its content unread.
pub(super) fn file_mode(path: &Path) -> io::Result<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a regular file",
        ));
    }
    Ok(meta.permissions().mode())
}

fn io_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "it does not exist".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => e.to_string(),
    }
}

/// A Linux interface name (15 bytes at most), as Proxmox's `pve-bridge-id` accepts it.
fn is_bridge(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// 32 hex octets, colons optional. On failure, the number of octets found when the text was
/// otherwise well formed (20 tells a SHA-1 fingerprint).
fn parse_fingerprint(s: &str) -> Result<[u8; 32], Option<usize>> {
    let hex: String = s.chars().filter(|c| *c != ':').collect();
    let bytes = data_encoding::HEXLOWER_PERMISSIVE
        .decode(hex.as_bytes())
        .map_err(|_| None)?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| Some(bytes.len()))
}

#[cfg(test)]
mod tests;
