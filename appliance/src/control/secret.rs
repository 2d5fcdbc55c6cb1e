//! Credentials, read when an action needs them from where the config says: a file readable by
//! its owner only, or an environment variable.
//!
//! Architecture invariant: a [`Secret`] never prints. It has no `Display`, its `Debug` is
//! redacted, and errors name the file or variable, never the content.

use std::fmt;
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;

use crate::plan::machines::SecretSource;

/// Longer than any token or password; a larger file is not a credential file.
const MAX_SECRET: u64 = 4096;

pub struct Secret(String);

impl Secret {
    /// The credential itself, for the one header that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("can't read the secret file {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error(
        "the secret file {path} is readable or writable by its group or others (mode {mode:04o}): chmod 600 {path}"
    )]
    TooOpen { path: String, mode: u32 },
    #[error("the environment variable {0} is not set")]
    EnvMissing(String),
    #[error("the environment variable {0} is not valid UTF-8")]
    EnvNotUnicode(String),
    #[error("the secret from {0} is empty")]
    Empty(String),
}

/// Reads the secret. The mode is checked on the open file, so a file swapped between the
/// check and the read can't slip through.
pub fn read(source: &SecretSource) -> Result<Secret, SecretError> {
    let text = match source {
        SecretSource::File(path) => {
            let shown = path.display().to_string();
            let unreadable = |e: std::io::Error| SecretError::Unreadable {
                path: shown.clone(),
                reason: e.to_string(),
            };
            let file = std::fs::File::open(path).map_err(unreadable)?;
            let meta = file.metadata().map_err(unreadable)?;
            if !meta.is_file() {
                return Err(SecretError::Unreadable {
                    path: shown,
                    reason: "not a regular file".into(),
                });
            }
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(SecretError::TooOpen { path: shown, mode });
            }
            let mut text = String::new();
            file.take(MAX_SECRET)
                .read_to_string(&mut text)
                .map_err(unreadable)?;
            text
        }
        SecretSource::Env(name) => match std::env::var(name) {
            Ok(v) => v,
            Err(std::env::VarError::NotPresent) => {
                return Err(SecretError::EnvMissing(name.clone()));
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(SecretError::EnvNotUnicode(name.clone()));
            }
        },
    };
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Err(SecretError::Empty(source.to_string()));
    }
    Ok(Secret(line.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_must_be_owner_only_and_secrets_never_print() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "  5e1f-secret-value  \nsecond line\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let source = SecretSource::File(path.clone());
        let err = read(&source).unwrap_err();
        assert!(
            matches!(err, SecretError::TooOpen { mode: 0o644, .. }),
            "{err}"
        );
        assert!(!err.to_string().contains("5e1f"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let secret = read(&source).unwrap();
        assert_eq!(secret.expose(), "5e1f-secret-value");
        assert_eq!(format!("{secret:?}"), "Secret(redacted)");
        std::fs::write(&path, "\n").unwrap();
        assert!(matches!(read(&source), Err(SecretError::Empty(_))));
        let missing = SecretSource::Env("OKD_APPLIANCE_TEST_NO_SUCH_VARIABLE".into());
        assert_eq!(
            read(&missing).unwrap_err().to_string(),
            "the environment variable OKD_APPLIANCE_TEST_NO_SUCH_VARIABLE is not set"
        );
    }
}
