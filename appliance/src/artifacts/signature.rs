//! Detached OpenPGP signatures (the `.sig` files the stream lists beside every artifact),
//! checked with gpgv(1), the verify-only tool of GnuPG that Debian installs with apt.
//!
//! The operator names the signing key with `--key FILE` (Fedora CoreOS: the `fedora.gpg` of the
//! release, armored or binary). gpgv reads only binary keyrings, so an armored key is decoded
//! here ([`dearmor`], pure) into a temporary keyring. gpgv's machine-readable status lines are
//! interpreted by [`interpret`] (pure): a file counts as signed only when gpgv exits 0 *and*
//! reports a valid signature, and a signature by an expired or revoked key does not count.
//!
//! Why gpgv and not a Rust OpenPGP crate: none can be had for this offline build, and
//! coreos-installer likewise runs gpg for its image signatures.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, anyhow};

/// A signature larger than this is not a detached signature (they are a few hundred bytes).
pub const SIGNATURE_LIMIT: usize = 64 * 1024;

/// The key file named by `--key`, as a binary keyring gpgv can read.
#[derive(Debug)]
pub struct Keyring {
    source: PathBuf,
    keyring: tempfile::NamedTempFile,
}

impl Keyring {
    /// Reads `path` (armored or binary OpenPGP public keys) and checks that gpgv can be run.
    pub fn load(path: &Path) -> anyhow::Result<Keyring> {
        let text = std::fs::read(path)
            .with_context(|| format!("can't read the key file {}", path.display()))?;
        let binary = if is_armored(&text) {
            dearmor(&text)
                .with_context(|| format!("{} is not a valid armored key", path.display()))?
        } else {
            text
        };
        // Every OpenPGP packet starts with a byte whose high bit is set.
        anyhow::ensure!(
            binary.first().is_some_and(|b| b & 0x80 != 0),
            "{} is neither an armored nor a binary OpenPGP key",
            path.display()
        );
        let mut keyring = tempfile::Builder::new()
            .prefix("okd-appliance-keyring")
            .suffix(".gpg")
            .tempfile()
            .context("can't create a temporary keyring")?;
        keyring
            .write_all(&binary)
            .and_then(|()| keyring.flush())
            .context("can't write a temporary keyring")?;
        Command::new("gpgv")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| {
                anyhow!("--key needs gpgv, which can't be run ({e}); on Debian: apt install gpgv")
            })?;
        Ok(Keyring {
            source: path.to_owned(),
            keyring,
        })
    }

    /// Checks `signature` (detached, binary or armored) over the file at `data`; returns the
    /// fingerprint of the key that made it.
    pub fn verify(&self, signature: &[u8], data: &Path) -> anyhow::Result<String> {
        let mut sig = tempfile::Builder::new()
            .prefix("okd-appliance-signature")
            .tempfile()
            .context("can't create a temporary file for the signature")?;
        sig.write_all(signature)
            .and_then(|()| sig.flush())
            .context("can't write the signature to a temporary file")?;
        let out = Command::new("gpgv")
            .arg("--status-fd=1")
            .arg("--keyring")
            .arg(self.keyring.path())
            .arg(sig.path())
            .arg(data)
            .stdin(Stdio::null())
            .output()
            .context("can't run gpgv")?;
        let status = String::from_utf8_lossy(&out.stdout);
        interpret(&status, out.status.success()).map_err(|rejection| {
            let detail = String::from_utf8_lossy(&out.stderr);
            let detail = detail.lines().last().unwrap_or("").trim();
            anyhow!(
                "OpenPGP signature check failed: {} (key file {}; gpgv: {detail})",
                rejection.describe(),
                self.source.display()
            )
        })
    }
}

fn is_armored(text: &[u8]) -> bool {
    text.windows(15).any(|w| w == b"-----BEGIN PGP ")
}

/// The binary packets of every armored block in `text` (RFC 9580 section 6.2), concatenated:
/// a key file may hold several keys, each in its own block. Armor headers are skipped; the
/// optional CRC-24 line is ignored, as RFC 9580 allows (gpgv checks the packets themselves).
pub fn dearmor(text: &[u8]) -> anyhow::Result<Vec<u8>> {
    let text = std::str::from_utf8(text).context("not UTF-8 text")?;
    let mut out = Vec::new();
    let mut lines = text.lines().map(str::trim_end);
    let mut blocks = 0;
    while let Some(line) = lines.next() {
        let Some(kind) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        blocks += 1;
        let end = format!("-----END {kind}-----");
        let mut base64 = String::new();
        let mut in_headers = true;
        let mut ended = false;
        for line in lines.by_ref() {
            if line == end {
                ended = true;
                break;
            }
            if in_headers {
                if line.is_empty() {
                    in_headers = false;
                    continue;
                }
                if line.contains(": ") {
                    continue;
                }
                in_headers = false;
            }
            if line.starts_with('=') && line.len() == 5 {
                continue; // CRC-24
            }
            base64.push_str(line.trim());
        }
        anyhow::ensure!(ended, "block {blocks} ({kind}) has no `{end}` line");
        let packets = data_encoding::BASE64
            .decode(base64.as_bytes())
            .map_err(|e| anyhow!("block {blocks} ({kind}) is not valid base64: {e}"))?;
        out.extend_from_slice(&packets);
    }
    anyhow::ensure!(blocks > 0, "no `-----BEGIN PGP ...-----` block");
    Ok(out)
}

/// Why gpgv did not accept a signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The signature does not match the file.
    Bad {
        key: String,
    },
    /// Made by a key the key file does not hold.
    UnknownKey {
        key: String,
    },
    ExpiredKey {
        key: String,
    },
    RevokedKey {
        key: String,
    },
    ExpiredSignature {
        key: String,
    },
    /// gpgv failed without saying why in its status lines (not a signature, unreadable file).
    Failed,
}

impl Rejection {
    fn describe(&self) -> String {
        match self {
            Rejection::Bad { key } => {
                format!("BAD signature by key {key}: the file is not what was signed")
            }
            Rejection::UnknownKey { key } => {
                format!("signed by key {key}, which the key file does not hold")
            }
            Rejection::ExpiredKey { key } => {
                format!("signed by key {key}, which has expired: get the release's current key")
            }
            Rejection::RevokedKey { key } => format!("signed by key {key}, which was revoked"),
            Rejection::ExpiredSignature { key } => {
                format!("the signature by key {key} has expired")
            }
            Rejection::Failed => "gpgv could not check it".to_owned(),
        }
    }
}

/// Reads gpgv's `--status-fd` lines (GnuPG's doc/DETAILS): the fingerprint of a valid
/// signature, or why there is none. `exit_ok` is whether gpgv exited 0.
pub fn interpret(status: &str, exit_ok: bool) -> Result<String, Rejection> {
    let mut valid = None;
    let mut rejection = None;
    for line in status.lines() {
        let mut words = line.strip_prefix("[GNUPG:] ").unwrap_or("").split(' ');
        let keyword = words.next().unwrap_or("");
        let key = words.next().unwrap_or("?").to_owned();
        let found = match keyword {
            "VALIDSIG" => {
                valid = Some(key);
                continue;
            }
            "BADSIG" => Rejection::Bad { key },
            "NO_PUBKEY" => Rejection::UnknownKey { key },
            "EXPKEYSIG" => Rejection::ExpiredKey { key },
            "REVKEYSIG" => Rejection::RevokedKey { key },
            "EXPSIG" => Rejection::ExpiredSignature { key },
            _ => continue,
        };
        rejection.get_or_insert(found);
    }
    match (rejection, valid) {
        (Some(r), _) => Err(r),
        (None, Some(fingerprint)) if exit_ok => Ok(fingerprint),
        _ => Err(Rejection::Failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn armored_blocks_decode_to_their_packets_with_headers_and_crc_skipped() {
        let text = "junk before\n\
            -----BEGIN PGP PUBLIC KEY BLOCK-----\n\
            Comment: a key\n\
            \n\
            mQIN\n\
            AQID\n\
            =abcd\n\
            -----END PGP PUBLIC KEY BLOCK-----\n\
            -----BEGIN PGP PUBLIC KEY BLOCK-----\r\n\
            \r\n\
            BAUG\r\n\
            -----END PGP PUBLIC KEY BLOCK-----\r\n";
        assert_eq!(
            dearmor(text.as_bytes()).unwrap(),
            [0x99, 0x02, 0x0d, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06]
        );
        // No blank line after BEGIN (some tools omit it when there are no headers).
        let bare = "-----BEGIN PGP SIGNATURE-----\nAQID\n-----END PGP SIGNATURE-----\n";
        assert_eq!(dearmor(bare.as_bytes()).unwrap(), [1, 2, 3]);
    }

    #[test]
    fn broken_armor_is_an_error() {
        assert!(dearmor(b"no block at all").is_err());
        let unterminated = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAQID\n";
        assert!(dearmor(unterminated.as_bytes()).is_err());
        let bad64 =
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nA*ID\n-----END PGP PUBLIC KEY BLOCK-----";
        assert!(dearmor(bad64.as_bytes()).is_err());
    }

    const GOOD: &str = "[GNUPG:] NEWSIG\n\
        [GNUPG:] KEY_CONSIDERED 1BF0C2C97D120670D5104168AD9C9FFF5FA40E80 0\n\
        [GNUPG:] GOODSIG AD9C9FFF5FA40E80 Test Signer <t@example.test>\n\
        [GNUPG:] VALIDSIG 1BF0C2C97D120670D5104168AD9C9FFF5FA40E80 2026-11-22 1795347186 0 4 0 22 8 00 1BF0C2C97D120670D5104168AD9C9FFF5FA40E80\n";

    #[test]
    fn a_valid_signature_needs_validsig_and_exit_zero() {
        assert_eq!(
            interpret(GOOD, true),
            Ok("1BF0C2C97D120670D5104168AD9C9FFF5FA40E80".to_owned())
        );
        assert_eq!(interpret(GOOD, false), Err(Rejection::Failed));
        assert_eq!(interpret("", true), Err(Rejection::Failed));
    }

    #[test]
    fn rejections_are_named() {
        let bad = "[GNUPG:] NEWSIG\n[GNUPG:] BADSIG AD9C9FFF5FA40E80 Test Signer\n";
        assert_eq!(
            interpret(bad, false),
            Err(Rejection::Bad {
                key: "AD9C9FFF5FA40E80".into()
            })
        );
        let unknown = "[GNUPG:] ERRSIG AD9C9FFF5FA40E80 22 8 00 1795347186 9 1BF0\n\
            [GNUPG:] NO_PUBKEY AD9C9FFF5FA40E80\n";
        assert!(matches!(
            interpret(unknown, false),
            Err(Rejection::UnknownKey { .. })
        ));
        // gpgv exits 0 for a good signature by an expired key: it still does not count.
        let expired = GOOD.replace("GOODSIG", "EXPKEYSIG");
        assert!(matches!(
            interpret(&expired, true),
            Err(Rejection::ExpiredKey { .. })
        ));
        let revoked = GOOD.replace("GOODSIG", "REVKEYSIG");
        assert!(matches!(
            interpret(&revoked, true),
            Err(Rejection::RevokedKey { .. })
        ));
    }
}
