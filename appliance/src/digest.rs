//! SHA-256 digests as the stream metadata writes them (64 hex digits) and as files hash to:
//! what `artifacts` checks a download against and `liveiso` names a base image's version by.
//!
//! A leaf: it imports nothing of the crate, so the boot path (`liveiso`, `http`) does not
//! reach a CLI command's module for it. ring's digest is used because it is already compiled
//! in as rustls's crypto provider.

use std::fmt;

use ring::digest;

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sha256([u8; 32]);

impl Sha256 {
    /// Parses 64 hex digits (either case); anything else is `None`.
    pub fn from_hex(text: &str) -> Option<Sha256> {
        if text.len() != 64 {
            return None;
        }
        let bytes = data_encoding::HEXLOWER_PERMISSIVE
            .decode(text.as_bytes())
            .ok()?;
        Some(Sha256(bytes.try_into().ok()?))
    }

    /// The digest of `data` in one piece.
    pub fn of(data: &[u8]) -> Sha256 {
        let mut h = Hasher::new();
        h.update(data);
        h.finish()
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&data_encoding::HEXLOWER.encode(&self.0))
    }
}

impl fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256({self})")
    }
}

/// An incremental SHA-256. Cloning it lets a caller look at the digest so far and go on.
#[derive(Clone)]
pub struct Hasher(digest::Context);

impl fmt::Debug for Hasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hasher")
    }
}

impl Default for Hasher {
    fn default() -> Self {
        Hasher::new()
    }
}

impl Hasher {
    pub fn new() -> Hasher {
        Hasher(digest::Context::new(&digest::SHA256))
    }

    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    pub fn finish(self) -> Sha256 {
        let d = self.0.finish();
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        Sha256(out)
    }

    /// The digest of everything so far, without ending the hash.
    pub fn peek(&self) -> Sha256 {
        self.clone().finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        assert_eq!(
            Sha256::of(b"").to_string(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            Sha256::of(b"abc").to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn incremental_equals_one_piece_and_peek_does_not_end_it() {
        let mut h = Hasher::new();
        h.update(b"a");
        assert_eq!(h.peek(), Sha256::of(b"a"));
        h.update(b"bc");
        assert_eq!(h.finish(), Sha256::of(b"abc"));
    }

    #[test]
    fn hex_round_trips_in_either_case_and_rejects_the_rest() {
        let lower = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(Sha256::from_hex(lower), Some(Sha256::of(b"abc")));
        assert_eq!(
            Sha256::from_hex(&lower.to_uppercase()),
            Some(Sha256::of(b"abc"))
        );
        assert_eq!(Sha256::from_hex(&lower[1..]), None);
        assert_eq!(Sha256::from_hex(&format!("{lower}0")), None);
        assert_eq!(Sha256::from_hex(&lower.replace('b', "g")), None);
        assert_eq!(Sha256::from_hex(""), None);
        // Multi-byte characters must not slip through a byte-length check.
        assert_eq!(Sha256::from_hex(&"é".repeat(32)), None);
    }
}
