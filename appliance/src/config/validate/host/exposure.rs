//! What a host file's boot servers must never expose: each cluster's `artifacts_dir` is served
//! to any address under `/artifacts/`, so it may hold none of the host's own secrets and state
//! (the host file's `state_dir`, its `api` key and token, its pair's secret) and none of another
//! cluster's ignition directory. Each cluster file alone passed the same rule against what it
//! names itself (`validate/exposure.rs`); these are what only the host file knows. Without this
//! rule `check` said ok and `/artifacts/` handed the API token to any address (issue 39).

use std::path::PathBuf;

use super::super::super::diagnostic::{Problem, Severity};
use super::super::exposure::real;
use super::Listed;

/// What the host file itself names: its state directory and its secret files, each with what
/// it is.
pub(in crate::config) struct HostSecrets {
    pub state_dir: PathBuf,
    pub files: Vec<(&'static str, PathBuf)>,
}

impl HostSecrets {
    pub(in crate::config) fn new(
        state_dir: &std::path::Path,
        api: Option<&crate::config::Api>,
        ha: Option<&crate::config::Ha>,
    ) -> HostSecrets {
        let mut files = Vec::new();
        if let Some(api) = api {
            files.push(("the host file's API key", api.key_file.clone()));
            files.push(("the host file's API token", api.token_file.clone()));
        }
        if let Some(ha) = ha {
            files.push(("the host file's pair secret", ha.secret_file.clone()));
        }
        HostSecrets {
            state_dir: state_dir.to_owned(),
            files,
        }
    }
}

/// Every cluster whose `artifacts_dir` would serve what `host` names or another cluster's
/// ignition files, reported in that cluster's file.
pub(in crate::config) fn exposure(
    host: &HostSecrets,
    members: &[Listed],
    out: &mut Vec<(Option<usize>, Problem)>,
) {
    let state = real(&host.state_dir);
    for (i, m) in members.iter().enumerate() {
        let artifacts = real(&m.config.install.artifacts_dir);
        let written = &m.raw.install.value.artifacts_dir;
        let mut refuse = |what: String, how: &str| {
            let mut p = Problem::new(
                &m.src,
                Severity::Error,
                "host::artifacts-dir",
                written.referenced,
                format!(
                    "artifacts_dir `{}` {how} {what}; everything under artifacts_dir is served to any address",
                    written.value
                ),
                "overlaps",
            );
            p.hint("give the CoreOS artifacts a directory of their own, apart from the host's state and secrets and every cluster's ignition files");
            out.push((Some(i), p));
        };
        if state.starts_with(&artifacts) {
            refuse("the host file's state directory".to_owned(), "holds");
        } else if artifacts.starts_with(&state) {
            refuse("the host file's state directory".to_owned(), "is inside");
        }
        for (what, file) in &host.files {
            if real(file).starts_with(&artifacts) {
                refuse((*what).to_owned(), "holds");
            }
        }
        for other in members.iter().filter(|o| o.id != m.id) {
            let ignition = real(&other.config.install.ignition_dir);
            if ignition.starts_with(&artifacts) {
                refuse(
                    format!("cluster {}'s ignition directory", other.id),
                    "holds",
                );
            } else if artifacts.starts_with(&ignition) {
                refuse(
                    format!("cluster {}'s ignition directory", other.id),
                    "is inside",
                );
            }
        }
    }
}
