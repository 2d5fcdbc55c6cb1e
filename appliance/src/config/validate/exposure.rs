//! What the boot server must never expose: `install.artifacts_dir` is served to any address
//! under `/artifacts/`, so it may not overlap the ignition directory (the cluster's CA keys in
//! `.openshift_install_state.json`, the admin kubeconfig in `auth/`), the config's own
//! directory, the state directory, the kubeconfig or any secret file the config names; and
//! `state_dir`, which the `run_as` hand-over gives to the service account recursively, must be
//! the appliance's own (not `/`, `/var/lib`, ...).

use super::*;

/// Directories that are never the appliance's alone: handing one to the service account, or
/// serving it, would take in the whole system's.
const SHARED_DIRS: [&str; 12] = [
    "/", "/etc", "/home", "/opt", "/root", "/run", "/srv", "/tmp", "/usr", "/var", "/var/lib",
    "/var/tmp",
];

/// A path as the kernel would walk it: absolute, `..` and `.` resolved, symlinks followed as
/// far as the path exists (a missing tail is kept as written).
pub(in crate::config) fn real(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut lexical = PathBuf::new();
    for c in absolute.components() {
        match c {
            std::path::Component::ParentDir => {
                lexical.pop();
            }
            std::path::Component::CurDir => {}
            c => lexical.push(c),
        }
    }
    // The longest existing prefix, canonicalized, with the rest appended.
    let mut head = lexical.clone();
    let mut tail = Vec::new();
    loop {
        if let Ok(canonical) = head.canonicalize() {
            return tail.iter().rev().fold(canonical, |p, c| p.join(c));
        }
        match (head.file_name().map(ToOwned::to_owned), head.parent()) {
            (Some(name), Some(parent)) => {
                tail.push(name);
                head = parent.to_owned();
            }
            _ => return lexical,
        }
    }
}

impl Validator<'_> {
    pub(super) fn exposure(&mut self, raw: &RawConfig, config: &Config, dir: &Path) {
        let artifacts = real(&config.install.artifacts_dir);
        let written = &raw.install.value.artifacts_dir;
        let refuse = |v: &mut Self, what: &str, how: &str| {
            v.p.error(
                "config::artifacts-dir",
                written.referenced,
                format!(
                    "artifacts_dir `{}` {how} {what}; everything under artifacts_dir is served to any address",
                    written.value
                ),
                "overlaps",
            )
            .hint("give the CoreOS artifacts a directory of their own, e.g. ./artifacts beside okd.yml");
        };
        // Directories that may not be inside it, nor hold it.
        for (what, d) in [
            ("the ignition directory", &config.install.ignition_dir),
            ("the state directory", &config.state_dir),
        ] {
            let d = real(d);
            if d.starts_with(&artifacts) {
                refuse(self, what, "holds");
            } else if artifacts.starts_with(&d) {
                refuse(self, what, "is inside");
            }
        }
        // The config's own directory may hold it (./artifacts), not be it or be inside it.
        if real(dir).starts_with(&artifacts) {
            refuse(self, "the config's own directory", "holds");
        }
        for (what, file) in secret_files(config) {
            if real(&file).starts_with(&artifacts) {
                refuse(self, &what, "holds");
            }
        }
        if let Some(s) = &raw.state_dir {
            let state = real(&config.state_dir);
            if SHARED_DIRS.iter().any(|d| state == Path::new(d)) {
                self.p
                    .error(
                        "config::state-dir",
                        s.referenced,
                        format!(
                            "state_dir `{}` is not the appliance's alone: the run_as hand-over would give it to the service account",
                            s.value
                        ),
                        "shared",
                    )
                    .hint("use a directory of its own, e.g. /var/lib/okd-appliance");
            }
        }
    }
}

/// Every file the config names that holds a secret, with what it is.
pub fn secret_files(config: &Config) -> Vec<(String, PathBuf)> {
    use crate::config::{Provider, SecretSource};
    let mut out = vec![(
        "the admin kubeconfig".to_owned(),
        config.orchestration.kubeconfig.clone(),
    )];
    if let Some(api) = &config.api {
        out.push(("the API key".into(), api.key_file.clone()));
        out.push(("the API token".into(), api.token_file.clone()));
    }
    if let Some(ha) = &config.ha {
        out.push(("the pair's secret".into(), ha.secret_file.clone()));
    }
    if let Some(f) = &config.install_config.pull_secret_file {
        out.push(("the pull secret".into(), f.clone()));
    }
    if let Provider::Proxmox(px) = &config.control.provider
        && let SecretSource::File(f) = &px.token_secret
    {
        out.push(("the Proxmox token secret".into(), f.clone()));
    }
    for m in &config.control.machines {
        if let Some(bmc) = &m.bmc
            && let SecretSource::File(f) = &bmc.password
        {
            out.push((format!("the BMC password of {}", m.node), f.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_paths_resolve_dots_and_missing_tails() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        std::fs::create_dir(base.join("install_dir")).unwrap();
        assert_eq!(
            real(&base.join("install_dir/../artifacts/./x")),
            base.join("artifacts/x")
        );
        std::os::unix::fs::symlink(base.join("install_dir"), base.join("link")).unwrap();
        assert_eq!(real(&base.join("link/auth")), base.join("install_dir/auth"));
    }
}
