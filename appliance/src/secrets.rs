//! Every secret the appliance reads, read one way: from a regular file that only its owner can
//! read or write (or, for provider credentials, an environment variable; the kubeconfig may be
//! read by its group, as `openshift-install` writes it). A looser file is refused with an error
//! that names it and the `chmod` to run; nothing is read from it.
//!
//! The secrets: provider credentials (Proxmox token, BMC passwords), the API token and the API
//! TLS key, the pair's secret, the admin kubeconfig the orchestration uses (and `check` reads
//! its API server from), and the pull secret of the install-config.
//!
//! The pair's secret keys two things that must not share a key: replication (an HMAC over each
//! TLS session) and VRRP, whose PASS authentication sends its 8-character password in
//! cleartext every second. [`PairKeys`] derives an independent key for each with HKDF
//! (RFC 5869), so what VRRP shows the network reveals nothing of the replication key.
//!
//! Architecture invariant: a leaf (it imports nothing of the crate). A [`Secret`] never prints: no `Display`, a redacted
//! `Debug`, and errors name the file or variable, never the content. The mode is checked on the
//! open file, so a file swapped between the check and the read can't slip through.

use std::fmt;
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// Longer than any token or password; a larger file is not a credential file.
const MAX_LINE_SECRET: u64 = 4096;
/// Larger than any kubeconfig or PEM key `openshift-install` or openssl write.
const MAX_FILE_SECRET: u64 = 1 << 20;
/// The pair's secret: long enough to be a key, not a password.
pub const MIN_PAIR_SECRET: usize = 32;

/// A one-line credential.
pub struct Secret(String);

impl Secret {
    /// The credential itself, for the one place that uses it.
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
    #[error("the secret file {path} is larger than {max} bytes: it is not a secret file")]
    TooLarge { path: String, max: u64 },
    #[error("the environment variable {0} is not set")]
    EnvMissing(String),
    #[error("the environment variable {0} is not valid UTF-8")]
    EnvNotUnicode(String),
    #[error("the secret from {0} is empty")]
    Empty(String),
    #[error(
        "the pair's secret in {path} is {len} characters long; it needs at least {MIN_PAIR_SECRET} (e.g. openssl rand -hex 32 > {path})"
    )]
    PairSecretTooShort { path: String, len: usize },
}

/// The whole content of an owner-only secret file (a PEM key).
pub fn read_file(path: &Path) -> Result<Vec<u8>, SecretError> {
    read_checked(path, MAX_FILE_SECRET, OWNER_ONLY)
}

/// The admin kubeconfig: owner-only as the other secrets, except that its group may read it.
/// `openshift-install` writes every asset 0640 in a 0750 directory (openshift/installer,
/// pkg/asset/asset.go, `PersistToFile`), and the installer's own group is no stranger; anyone
/// else, or a group that can change it, is refused.
pub fn read_kubeconfig(path: &Path) -> Result<Vec<u8>, SecretError> {
    read_checked(path, MAX_FILE_SECRET, 0o027)
}

/// Permission bits that make a secret file loose: any for group or others.
const OWNER_ONLY: u32 = 0o077;

/// The first line of an owner-only secret file, trimmed; never empty.
pub fn read_line(path: &Path) -> Result<Secret, SecretError> {
    let bytes = read_checked(path, MAX_LINE_SECRET, OWNER_ONLY)?;
    first_line(
        &String::from_utf8_lossy(&bytes),
        &path.display().to_string(),
    )
}

/// A credential from the environment variable `name` (its first line, trimmed).
pub fn read_env(name: &str) -> Result<Secret, SecretError> {
    match std::env::var(name) {
        Ok(v) => first_line(&v, &format!("environment variable {name}")),
        Err(std::env::VarError::NotPresent) => Err(SecretError::EnvMissing(name.to_owned())),
        Err(std::env::VarError::NotUnicode(_)) => Err(SecretError::EnvNotUnicode(name.to_owned())),
    }
}

fn first_line(text: &str, source: &str) -> Result<Secret, SecretError> {
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Err(SecretError::Empty(source.to_owned()));
    }
    Ok(Secret(line.to_owned()))
}

/// Reads at most `max` bytes of `path` after checking, on the open file, that it is a regular
/// file with none of the `loose` permission bits. A file larger than `max` is refused.
fn read_checked(path: &Path, max: u64, loose: u32) -> Result<Vec<u8>, SecretError> {
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
    if mode & loose != 0 {
        return Err(SecretError::TooOpen { path: shown, mode });
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > max {
        return Err(SecretError::TooLarge { path: shown, max });
    }
    Ok(bytes)
}

/// The two keys of a pair, each derived from its secret on its own.
pub struct PairKeys {
    /// Keys the HMAC that proves each end of a replication session holds the secret.
    pub replication: [u8; 32],
    /// keepalived's `auth_pass`: 8 characters (all VRRP PASS carries), sent in cleartext.
    pub vrrp_password: String,
}

impl fmt::Debug for PairKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PairKeys(redacted)")
    }
}

impl PairKeys {
    /// Reads the pair's secret file (owner-only, at least [`MIN_PAIR_SECRET`] characters) and
    /// derives the keys: the one rule `check`, `serve` and `render` apply.
    pub fn read(path: &Path) -> Result<PairKeys, SecretError> {
        let secret = read_line(path)?;
        let len = secret.expose().chars().count();
        if len < MIN_PAIR_SECRET {
            return Err(SecretError::PairSecretTooShort {
                path: path.display().to_string(),
                len,
            });
        }
        Ok(PairKeys::derive(secret.expose().as_bytes()))
    }

    /// HKDF-SHA256 (RFC 5869): one extraction, one expansion per use, each with its own label.
    fn derive(secret: &[u8]) -> PairKeys {
        use ring::hkdf;
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"okd-appliance pair").extract(secret);
        let expand = |label: &[u8]| {
            let mut out = [0u8; 32];
            prk.expand(&[label], hkdf::HKDF_SHA256)
                .and_then(|okm| okm.fill(&mut out))
                .expect("32 bytes is a valid HKDF-SHA256 output length");
            out
        };
        let vrrp = expand(b"vrrp auth_pass");
        PairKeys {
            replication: expand(b"replication hmac"),
            vrrp_password: data_encoding::HEXLOWER.encode(&vrrp[..4]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, text: &str, mode: u32) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn files_must_be_owner_only_and_secrets_never_print() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(
            dir.path(),
            "token",
            "  5e1f-secret-value  \nsecond line\n",
            0o644,
        );
        let err = read_line(&path).unwrap_err();
        assert!(
            matches!(err, SecretError::TooOpen { mode: 0o644, .. }),
            "{err}"
        );
        assert!(!err.to_string().contains("5e1f"));
        assert!(
            err.to_string()
                .ends_with(&format!("chmod 600 {}", path.display())),
            "{err}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let secret = read_line(&path).unwrap();
        assert_eq!(secret.expose(), "5e1f-secret-value");
        assert_eq!(format!("{secret:?}"), "Secret(redacted)");
        std::fs::write(&path, "\n").unwrap();
        assert!(matches!(read_line(&path), Err(SecretError::Empty(_))));
        assert_eq!(
            read_env("OKD_APPLIANCE_TEST_NO_SUCH_VARIABLE")
                .unwrap_err()
                .to_string(),
            "the environment variable OKD_APPLIANCE_TEST_NO_SUCH_VARIABLE is not set"
        );
    }

    #[test]
    fn whole_files_follow_the_same_rule() {
        let dir = tempfile::tempdir().unwrap();
        let loose = file(dir.path(), "kubeconfig", "apiVersion: v1\n", 0o640);
        assert!(matches!(
            read_file(&loose),
            Err(SecretError::TooOpen { mode: 0o640, .. })
        ));
        let tight = file(
            dir.path(),
            "key.pem",
            "-----BEGIN PRIVATE KEY-----\n",
            0o400,
        );
        assert_eq!(read_file(&tight).unwrap(), b"-----BEGIN PRIVATE KEY-----\n");
        assert!(matches!(
            read_file(dir.path()),
            Err(SecretError::Unreadable { .. })
        ));
        // The kubeconfig as openshift-install writes it (0640) is read; one others can read, or
        // its group change, is not.
        assert!(read_kubeconfig(&loose).is_ok());
        for mode in [0o644, 0o660] {
            std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(matches!(
                read_kubeconfig(&loose),
                Err(SecretError::TooOpen { .. })
            ));
        }
    }

    #[test]
    fn the_pair_secret_needs_32_characters_and_keys_vrrp_apart_from_replication() {
        let dir = tempfile::tempdir().unwrap();
        let short = file(dir.path(), "short", "pair-secret-0123\n", 0o600);
        let err = PairKeys::read(&short).unwrap_err();
        assert!(
            matches!(err, SecretError::PairSecretTooShort { len: 16, .. }),
            "{err}"
        );
        let secret = "0123456789abcdef0123456789abcdef";
        let good = file(dir.path(), "good", &format!("{secret}\n"), 0o600);
        let keys = PairKeys::read(&good).unwrap();
        assert_eq!(keys.vrrp_password.len(), 8);
        // The cleartext VRRP password is neither a piece of the secret nor of the other key.
        assert!(!secret.contains(&keys.vrrp_password));
        assert!(
            !data_encoding::HEXLOWER
                .encode(&keys.replication)
                .contains(&keys.vrrp_password)
        );
        assert_ne!(&keys.replication[..], secret.as_bytes());
        // Deterministic: both hosts of a pair derive the same keys from the same file.
        let again = PairKeys::read(&good).unwrap();
        assert_eq!(again.replication, keys.replication);
        assert_eq!(again.vrrp_password, keys.vrrp_password);
        let loose = file(dir.path(), "loose", &format!("{secret}\n"), 0o644);
        assert!(matches!(
            PairKeys::read(&loose),
            Err(SecretError::TooOpen { .. })
        ));
    }
}
