//! The `install` section: ignition and artifact directories, the ignition files' presence and
//! age, the boot base URL.

use super::*;

impl Validator<'_> {
    pub(super) fn install(
        &mut self,
        raw: &Spanned<RawInstall>,
        dir: &Path,
        net: Option<&Network>,
        listen: Option<&Listen>,
        roles: &[Role],
        files: InstallCheck<'_>,
    ) -> Option<Install> {
        let r = &raw.value;
        let ignition_dir = resolve(dir, &r.ignition_dir.value);
        let artifacts_dir = resolve(dir, &r.artifacts_dir.value);
        let driven = r.openshift_install.is_some();
        self.ignition_files(&r.ignition_dir, &ignition_dir, roles, files, driven);
        let install_dev = match &r.install_dev {
            None => Some(DEFAULT_INSTALL_DEV.to_owned()),
            Some(d) => self.install_dev(d),
        };
        let kernel_args = self.kernel_args(&r.kernel_args);
        let base_url = match (&r.base_url, net, listen) {
            (Some(u), _, _) => {
                let url = u.value.trim_end_matches('/');
                let rest = url
                    .strip_prefix("http://")
                    .or_else(|| url.strip_prefix("https://"));
                if rest.is_some_and(|h| !h.is_empty() && !h.contains(char::is_whitespace)) {
                    Some(url.to_owned())
                } else {
                    self.p
                        .error(
                            "config::base-url",
                            u.referenced,
                            format!("base URL `{}` is not an http:// or https:// URL", u.value),
                            "not a URL",
                        )
                        .hint("e.g. http://10.0.0.1:8080");
                    None
                }
            }
            (None, Some(net), Some(listen)) => Some(default_base_url(net, listen)),
            // Derived from parts that failed; their errors are reported.
            (None, _, _) => None,
        };
        let artifact = |v: &mut Self, raw: &Option<Text>, default: &str| -> Option<String> {
            let Some(t) = raw else {
                return Some(default.to_owned());
            };
            let name = &t.value;
            if name.is_empty() || name == "." || name == ".." || name.contains('/') {
                v.p.error(
                    "config::artifact",
                    t.referenced,
                    format!("artifact `{name}` is not a plain file name"),
                    "expected a file name inside artifacts_dir",
                );
                return None;
            }
            Some(name.clone())
        };
        let ipxe_dir = r.ipxe_dir.as_ref().map_or_else(
            || PathBuf::from(DEFAULT_IPXE_DIR),
            |d| resolve(dir, &d.value),
        );
        let kernel = artifact(self, &r.artifacts.kernel, "kernel");
        let initramfs = artifact(self, &r.artifacts.initramfs, "initramfs.img");
        let rootfs = artifact(self, &r.artifacts.rootfs, "rootfs.img");
        let iso = artifact(self, &r.artifacts.iso, "live.iso");
        let installer = match &r.openshift_install {
            None => Some(None),
            Some(i) => self.installer(i, dir).map(Some),
        };
        let manifests_dir = r.manifests_dir.as_ref().map(|d| resolve(dir, &d.value));
        Some(Install {
            installer: installer?,
            manifests_dir,
            ignition_dir,
            artifacts_dir,
            install_dev: install_dev?,
            kernel_args: kernel_args?,
            base_url: base_url?,
            ipxe_dir,
            artifacts: Artifacts {
                kernel: kernel?,
                initramfs: initramfs?,
                rootfs: rootfs?,
                iso: iso?,
            },
        })
    }

    /// `install.openshift_install`: a path (relative to the config's folder), or a release by
    /// its tag, which names a directory of the state directory and of the mirror's URL, so it
    /// is one path segment.
    fn installer(&mut self, raw: &Spanned<RawInstaller>, dir: &Path) -> Option<Installer> {
        match &raw.value {
            RawInstaller::Path(p) if p.trim().is_empty() => {
                self.p.error(
                    "config::installer",
                    raw.referenced,
                    "openshift_install is empty".to_owned(),
                    "a path, or { release: VERSION }",
                );
                None
            }
            RawInstaller::Path(p) => Some(Installer::Path(resolve(dir, p))),
            RawInstaller::Release(r) => {
                let version = r.release.trim();
                let segment = !version.is_empty()
                    && version.len() <= 128
                    && !version.starts_with('.')
                    && version
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'));
                if !segment {
                    self.p
                        .error(
                            "config::installer",
                            raw.referenced,
                            format!("release `{version}` is not a release tag"),
                            "letters, digits, `.`, `-`, `_` and `+`",
                        )
                        .hint("the tag of the release page, e.g. 4.19.0-okd-scos.1");
                    return None;
                }
                let mirror = r
                    .mirror
                    .as_deref()
                    .unwrap_or(Installer::OKD_RELEASES)
                    .trim_end_matches('/');
                let parsed = url::Url::parse(mirror);
                if !parsed.is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host()) {
                    self.p
                        .error(
                            "config::installer",
                            raw.referenced,
                            format!("mirror `{mirror}` is not an http:// or https:// URL"),
                            "not a URL",
                        )
                        .hint(format!(
                            "OKD publishes its releases at {}",
                            Installer::OKD_RELEASES
                        ));
                    return None;
                }
                Some(Installer::Release {
                    version: version.to_owned(),
                    mirror: mirror.to_owned(),
                })
            }
        }
    }

    /// The role ignition files must exist. Only bootstrap.ign is checked for age, and only
    /// while a bootstrap node is listed: it carries the certificates that expire 24 hours after
    /// `openshift-install` wrote them. master.ign and worker.ign only point at the machine
    /// config server and stay valid (workers added months later still use worker.ign).
    /// Warnings or errors as `check` asks (see [`InstallCheck`]).
    pub(super) fn ignition_files(
        &mut self,
        raw: &Text,
        dir: &Path,
        roles: &[Role],
        check: InstallCheck<'_>,
        installer: bool,
    ) {
        let Some((files, severity)) = check.ignition() else {
            return;
        };
        let single = single_node_of(roles.iter().copied());
        // Two commands that run as written: the install-config into the directory, then the
        // installer there (it reads install-config.yaml and writes the ignition files beside);
        // with an installer configured, the one command that runs both.
        let create = if installer {
            format!(
                "make them: `okd-appliance ignition create {}`",
                self.p.file_name()
            )
        } else {
            format!(
                "make them: `okd-appliance render --format install-config -o {dir} {file}`, then `openshift-install {} --dir {dir}`",
                if single {
                    "create single-node-ignition-config"
                } else {
                    "create ignition-configs"
                },
                dir = dir.display(),
                file = self.p.file_name(),
            )
        };
        if let Err(e) = files.age(dir) {
            self.p
                .report(
                    severity,
                    "config::ignition",
                    raw.referenced,
                    format!(
                        "ignition directory {} can't be read: {}",
                        dir.display(),
                        io_reason(&e)
                    ),
                    "ignition_dir",
                )
                .hint(create);
            return;
        }
        for role in Role::ALL {
            if !roles.contains(&role) {
                continue;
            }
            let config = RoleConfig::of(role, single);
            let file = config.file();
            let expires = config.lifetime().is_some();
            match files.age(&dir.join(file)) {
                Err(e) => {
                    self.p
                        .report(
                            severity,
                            "config::ignition",
                            raw.referenced,
                            format!(
                                "{file} for the {role} nodes can't be read: {}",
                                io_reason(&e)
                            ),
                            format!("no usable {file} here"),
                        )
                        .hint(create.clone());
                }
                Ok(age) if expires && age > IGNITION_MAX_AGE => {
                    self.p
                        .report(
                            severity,
                            "config::ignition-expired",
                            raw.referenced,
                            format!(
                                "{file} was written {} ago: its certificates expire 24 hours after creation",
                                hours(age)
                            ),
                            "expired ignition configs",
                        )
                        .hint(format!("{create} again in a fresh directory, or remove the bootstrap node once bootstrap is done"));
                }
                Ok(age) if expires && age > IGNITION_WARN_AGE => {
                    self.p
                        .warning(
                            "config::ignition-aging",
                            raw.referenced,
                            format!(
                                "{file} was written {} ago: its certificates expire 24 hours after creation",
                                hours(age)
                            ),
                            "ignition configs aging",
                        )
                        .hint("finish the bootstrap soon, or create the ignition configs again");
                }
                Ok(_) => {}
            }
        }
    }
}

fn hours(age: Duration) -> String {
    format!("{} h", age.as_secs() / 3600)
}

fn io_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "it does not exist".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => e.to_string(),
    }
}

/// `http://<appliance IPv4>[:port]` from the first HTTP listener's port.
fn default_base_url(net: &Network, listen: &Listen) -> String {
    let port = listen.http.first().map_or(8080, SocketAddr::port);
    if port == 80 {
        format!("http://{}", net.v4.appliance)
    } else {
        format!("http://{}:{port}", net.v4.appliance)
    }
}
