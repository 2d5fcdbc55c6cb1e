//! What the files in the ignition directory say, against the config: openshift-install's
//! output carries the cluster it was made for, and a node booted from files of another cluster
//! (or of an earlier try with another name, domain or network) never joins. Read with
//! `crate::openshift_install`; every mismatch points at the ignition directory and at the
//! config's value it contradicts.
//!
//! - master.ign / worker.ign: the merge source is this cluster's machine config server for
//!   that role, and its CA is a CA certificate valid now, the very root CA bootstrap.ign
//!   carries (`/opt/openshift/tls/root-ca.crt`, which signs the machine config server's
//!   certificate): a pointer ignition of another openshift-install run of the same cluster,
//!   or a leaf certificate given as the CA, fails the nodes' TLS to it;
//! - bootstrap.ign: the cluster domain of its DNS config (its age is `install.rs`' rule);
//! - `auth/kubeconfig`: the API server is `https://api.<cluster domain>:6443`;
//! - `.openshift_install_state.json`: the install config's name, base domain, machine
//!   networks and control-plane replicas.
//!
//! Files that are not there are not compared (`install.rs` reports the missing role files),
//! and neither is an Ignition config that is not openshift-install's (no merge source, no DNS
//! config: a hand-written one). Mismatches are warnings for `serve` and `check`, errors for
//! `check --install`, as the other ignition findings.

use super::super::diagnostic::Problem;
use super::*;
use crate::openshift_install::{self as oi, Pointer};

/// Larger than any ignition file or state file openshift-install writes (bootstrap.ign is a few
/// MiB; the state file holds it and the other assets).
const MAX_INSTALL_FILE: u64 = 256 << 20;

/// The places in the config a finding points at.
struct Spans {
    dir: Location,
    name: Location,
    base_domain: Location,
    subnet: Location,
    nodes: Location,
}

impl Validator<'_> {
    pub(super) fn ignition_contents(
        &mut self,
        raw: &RawConfig,
        config: &Config,
        check: InstallCheck<'_>,
    ) {
        let Some((files, severity)) = check.ignition() else {
            return;
        };
        let dir = &config.install.ignition_dir;
        if files.age(dir).is_err() {
            return; // Reported by `ignition_files`.
        }
        let spans = Spans {
            dir: raw.install.value.ignition_dir.referenced,
            name: raw.cluster.name.referenced,
            base_domain: raw.cluster.base_domain.referenced,
            subnet: raw.network.subnet.referenced,
            nodes: raw.nodes.referenced,
        };
        let mut c = Compare {
            p: &mut *self.p,
            files,
            severity,
            spans: &spans,
            config,
            kubeconfig_required: severity == Severity::Error && driven(raw, config),
            root_ca: None,
        };
        let single = config.single_node().is_some();
        // The pointer ignitions' CA is compared with the root CA of the bootstrap config (read
        // again below for its domain; a config that can't be read is reported there).
        let bootstrap = RoleConfig::Bootstrap.file();
        if config.nodes_with_role(Role::Bootstrap).next().is_some()
            && let Ok(bytes) = files.read(&dir.join(bootstrap), MAX_INSTALL_FILE)
        {
            c.root_ca = oi::bootstrap_root_ca(&bytes).ok().flatten();
        }
        for role in Role::ALL {
            if config.nodes_with_role(role).next().is_none() {
                continue;
            }
            let kind = RoleConfig::of(role, single);
            let file = kind.file();
            let Ok(bytes) = files.read(&dir.join(file), MAX_INSTALL_FILE) else {
                continue; // Reported by `ignition_files`.
            };
            // The single node's live config is a bootstrap config (with the install-to-disk
            // step added): it names the cluster the same way.
            match kind {
                RoleConfig::Bootstrap | RoleConfig::SingleNode => c.bootstrap(file, &bytes),
                RoleConfig::Master | RoleConfig::Worker => c.pointer(role, &bytes),
            }
        }
        c.kubeconfig(&dir.join(oi::KUBECONFIG));
        c.state(&dir.join(oi::STATE_FILE));
    }
}

impl Validator<'_> {
    /// Before an install (`check --install`) driven by `cluster up`, the admin kubeconfig it
    /// reads (`orchestration.kubeconfig`, by default `<ignition_dir>/auth/kubeconfig`) must be
    /// there and readable under the secret files' rule: without it `cluster up` refuses to
    /// start. The install is driven when the appliance makes the machines (a provider) or the
    /// config has an `orchestration` section. `serve` and `check` don't ask for it: the
    /// services never read it.
    pub(super) fn install_kubeconfig(
        &mut self,
        raw: &RawConfig,
        config: &Config,
        check: InstallCheck<'_>,
    ) {
        let Some((files, Severity::Error)) = check.ignition() else {
            return;
        };
        if !driven(raw, config) {
            return;
        }
        let kubeconfig = raw
            .orchestration
            .as_ref()
            .and_then(|o| o.kubeconfig.as_ref());
        if kubeconfig.is_none() && files.age(&config.install.ignition_dir).is_err() {
            return; // The missing directory is reported, with the command that makes it.
        }
        let Err(e) = files.kubeconfig(&config.orchestration.kubeconfig) else {
            return;
        };
        let (at, label) = match kubeconfig {
            Some(k) => (k.referenced, "orchestration.kubeconfig"),
            None => (
                raw.install.value.ignition_dir.referenced,
                "ignition_dir (its auth/kubeconfig)",
            ),
        };
        self.p
            .error(
                "config::kubeconfig",
                at,
                format!("`cluster up` reads the admin kubeconfig: {e}"),
                label,
            )
            .hint(
                "`openshift-install create ignition-configs` writes it as auth/kubeconfig beside \
                 the ignition files; orchestration.kubeconfig names another place",
            );
    }
}

/// Whether `cluster up` drives the install: the appliance makes the machines (a provider), or
/// the config has an `orchestration` section.
fn driven(raw: &RawConfig, config: &Config) -> bool {
    raw.orchestration.is_some() || !matches!(config.control.provider, crate::config::Provider::None)
}

struct Compare<'a> {
    p: &'a mut Problems,
    files: &'a dyn InstallFiles,
    severity: Severity,
    spans: &'a Spans,
    config: &'a Config,
    /// `install_kubeconfig` reports an unreadable kubeconfig `cluster up` reads, as an error.
    kubeconfig_required: bool,
    /// The root CA bootstrap.ign carries, when it is there and says one.
    root_ca: Option<Vec<oi::Certificate>>,
}

impl Compare<'_> {
    fn domain(&self) -> String {
        self.config.cluster.domain()
    }

    fn create_hint(&self) -> String {
        // Rendered into the ignition directory itself, where openshift-install then writes
        // them: both commands run as written.
        if self.config.install.installer.is_some() {
            return format!(
                "make them from this config: `okd-appliance ignition create {}`",
                self.p.file_name()
            );
        }
        let dir = self.config.install.ignition_dir.display();
        format!(
            "make them from this config: `okd-appliance render --format install-config -o {dir} {}`, then `openshift-install create ignition-configs --dir {dir}`",
            self.p.file_name()
        )
    }

    /// A finding about `what` (a file of the ignition directory), pointing at the directory.
    fn report(&mut self, message: String, label: &str) -> &mut Problem {
        self.p.report(
            self.severity,
            "config::ignition-mismatch",
            self.spans.dir,
            message,
            label.to_owned(),
        )
    }

    /// Made for another cluster domain: points at the config's name and base domain too.
    fn other_cluster(&mut self, message: String, file: &str) {
        let hint = self.create_hint();
        let (name, base) = (self.spans.name, self.spans.base_domain);
        self.report(message, &format!("{file} here"))
            .also(name, "this cluster's name")
            .also(base, "and base domain")
            .hint(hint);
    }

    /// A file that openshift-install would not have written: it can't be compared.
    fn unreadable(&mut self, file: &str, why: &str) {
        let hint = self.create_hint();
        self.p
            .report(
                self.severity,
                "config::ignition-content",
                self.spans.dir,
                format!("{file} can't be checked: {why}"),
                format!("{file} here"),
            )
            .hint(hint);
    }

    fn pointer(&mut self, role: Role, bytes: &[u8]) {
        let file = RoleConfig::of(role, false).file();
        let pointer = match oi::pointer_ignition(bytes) {
            Err(e) => return self.unreadable(file, &e),
            // Not a pointer ignition (a hand-written config): nothing to compare.
            Ok(None) => return,
            Ok(Some(p)) => p,
        };
        let Pointer {
            merge_source,
            ca_sources,
        } = pointer;
        let expected = format!("https://api-int.{}:22623/config/{role}", self.domain());
        if !merge_source.eq_ignore_ascii_case(&expected) {
            let other_role = Role::ALL
                .into_iter()
                .find(|r| *r != role && merge_source.ends_with(&format!(":22623/config/{r}")));
            let same_host = merge_source
                .to_ascii_lowercase()
                .starts_with(&format!("https://api-int.{}:22623/", self.domain()));
            if let (Some(other), true) = (other_role, same_host) {
                let hint = self.create_hint();
                self.report(
                    format!(
                        "{file} asks the machine config server for the {other} config ({merge_source}): its nodes would come up as {other}s"
                    ),
                    &format!("{file} here"),
                )
                .hint(format!("{file} may have been overwritten with another role's file; {hint}"));
            } else {
                self.other_cluster(
                    format!(
                        "{file} was made for another cluster: it merges {merge_source}, this cluster's machine config server is {expected}"
                    ),
                    file,
                );
            }
        }
        if ca_sources.is_empty() {
            let hint = self.create_hint();
            self.report(
                format!(
                    "{file} names no CA (ignition.security.tls.certificateAuthorities): Ignition can't trust the machine config server at {expected}"
                ),
                &format!("{file} here"),
            )
            .hint(hint);
            return;
        }
        let mut all = Vec::new();
        for source in &ca_sources {
            match oi::decode_data_url(source).and_then(|pem| oi::pem_certificates(&pem)) {
                Err(e) => self.unreadable(file, &format!("its CA bundle: {e}")),
                Ok(certs) => {
                    all.extend(certs.iter().cloned());
                    let now = self.files.now();
                    for why in certs.iter().filter_map(|c| c.invalid_at(now)) {
                        let hint = self.create_hint();
                        self.report(
                        format!("{file}'s CA for the machine config server: {why}"),
                        &format!("{file} here"),
                    )
                    .hint(format!(
                        "the cluster's root CA is valid for 10 years: check this host's clock, or {hint}"
                    ));
                    }
                }
            }
        }
        if !all.is_empty() {
            self.trusted(file, &all);
        }
    }

    /// `file`'s CA certificates for the machine config server: each a CA, and the root CA of
    /// bootstrap.ign when that is known. Says which file trusts which CA.
    fn trusted(&mut self, file: &str, certs: &[oi::Certificate]) {
        let short = |c: &oi::Certificate| format!("{} (SHA-256 {}...)", c.subject, &c.sha256[..16]);
        for cert in certs.iter().filter(|c| !c.is_ca) {
            let hint = self.create_hint();
            self.report(
                format!(
                    "{file} trusts {} for the machine config server, which is not a CA certificate: Ignition would refuse the server's certificate",
                    short(cert)
                ),
                &format!("{file} here"),
            )
            .hint(format!("a leaf certificate may have been put in place of the cluster's root CA; {hint}"));
        }
        let Some(root) = &self.root_ca else { return };
        if certs
            .iter()
            .any(|c| root.iter().any(|r| r.sha256 == c.sha256))
        {
            return;
        }
        let theirs: Vec<String> = certs.iter().map(short).collect();
        let ours: Vec<String> = root.iter().map(short).collect();
        let hint = self.create_hint();
        self.report(
            format!(
                "{file} trusts {} for the machine config server, but bootstrap.ign's root CA ({}) is {}: the files come from two openshift-install runs, and the nodes would fail TLS to the machine config server",
                theirs.join(", "),
                oi::ROOT_CA,
                ours.join(", ")
            ),
            &format!("{file} here"),
        )
        .hint(format!("use the ignition files of one run; {hint}"));
    }

    fn bootstrap(&mut self, file: &str, bytes: &[u8]) {
        match oi::bootstrap_cluster_domain(bytes) {
            Err(e) => self.unreadable(file, &e),
            Ok(None) => {}
            Ok(Some(domain)) if domain == self.domain() => {}
            Ok(Some(domain)) => self.other_cluster(
                format!(
                    "{file} was made for the cluster domain {domain} (its {}), this cluster's is {}",
                    oi::DNS_MANIFEST,
                    self.domain()
                ),
                file,
            ),
        }
    }

    fn kubeconfig(&mut self, path: &Path) {
        if self.files.age(path).is_err() {
            return; // Optional: `cluster up` says so when it needs it.
        }
        let file = oi::KUBECONFIG;
        let read = self.files.kubeconfig(path);
        if read.is_err() && self.kubeconfig_required && path == self.config.orchestration.kubeconfig
        {
            return; // `install_kubeconfig` refuses it, with the reason.
        }
        let servers = match read.and_then(|bytes| oi::kubeconfig_servers(&bytes)) {
            Ok(s) => s,
            Err(e) => {
                // Not a mismatch; `cluster up` refuses it with the same reason.
                self.p.warning(
                    "config::ignition-content",
                    self.spans.dir,
                    format!("{file} can't be checked: {e}"),
                    format!("{file} here"),
                );
                return;
            }
        };
        let expected = format!("https://api.{}:6443", self.domain());
        if let Some(server) = servers
            .iter()
            .find(|s| !s.trim_end_matches('/').eq_ignore_ascii_case(&expected))
        {
            self.other_cluster(
                format!(
                    "{file} was made for another cluster: its API server is {server}, this cluster's is {expected}"
                ),
                file,
            );
        }
    }

    fn state(&mut self, path: &Path) {
        if self.files.age(path).is_err() {
            return;
        }
        let file = oi::STATE_FILE;
        let state = match self.files.read(path, MAX_INSTALL_FILE) {
            Err(e) => return self.unreadable(file, &e.to_string()),
            Ok(bytes) => oi::state_install_config(&bytes),
        };
        let ic = match state {
            Err(e) => return self.unreadable(file, &e),
            Ok(None) => return,
            Ok(Some(ic)) => ic,
        };
        let asset = oi::INSTALL_CONFIG_ASSET;
        let hint = self.create_hint();
        let cluster = &self.config.cluster;
        if let Some(name) = ic.name.as_deref().filter(|n| *n != cluster.name) {
            let at = self.spans.name;
            self.report(
                format!(
                    "the ignition was made for the cluster name {name} ({file}, {asset}), this config's is {}",
                    cluster.name
                ),
                &format!("{file} here"),
            )
            .also(at, "this cluster's name")
            .hint(hint.clone());
        }
        if let Some(base) = ic
            .base_domain
            .as_deref()
            .filter(|b| b.trim_end_matches('.').to_ascii_lowercase() != cluster.base_domain)
        {
            let at = self.spans.base_domain;
            self.report(
                format!(
                    "the ignition was made for the base domain {base} ({file}, {asset}), this config's is {}",
                    cluster.base_domain
                ),
                &format!("{file} here"),
            )
            .also(at, "this cluster's base domain")
            .hint(hint.clone());
        }
        let mut ours: Vec<IpNet> = vec![IpNet::V4(self.config.network.v4.subnet)];
        ours.extend(
            self.config
                .network
                .v6
                .as_ref()
                .map(|v6| IpNet::V6(v6.subnet)),
        );
        let theirs: Option<Vec<IpNet>> = ic
            .machine_networks
            .iter()
            .map(|c| c.parse::<IpNet>().ok().map(|n| n.trunc()))
            .collect();
        let same = theirs
            .as_ref()
            .is_some_and(|t| t.len() == ours.len() && ours.iter().all(|o| t.contains(o)));
        if !ic.machine_networks.is_empty() && !same {
            let at = self.spans.subnet;
            let ours: Vec<String> = ours.iter().map(ToString::to_string).collect();
            self.report(
                format!(
                    "the ignition was made for the machine network {} ({file}, {asset}), this config's is {}",
                    ic.machine_networks.join(", "),
                    ours.join(", ")
                ),
                &format!("{file} here"),
            )
            .also(at, "this cluster's network")
            .hint(format!(
                "openshift-install's machine network is where the nodes' addresses are: {hint}"
            ));
        }
        let masters = self.config.nodes_with_role(Role::Master).count();
        if let Some(replicas) = ic
            .control_plane_replicas
            .filter(|r| usize::try_from(*r).ok() != Some(masters))
        {
            let at = self.spans.nodes;
            self.report(
                format!(
                    "the ignition was made for {replicas} control-plane replicas ({file}, {asset}), this config lists {masters} master{}",
                    if masters == 1 { "" } else { "s" }
                ),
                &format!("{file} here"),
            )
            .also(at, "these nodes")
            .hint(format!(
                "etcd waits for as many masters as the install config's controlPlane.replicas: list them all, or {hint}"
            ));
        }
    }
}
