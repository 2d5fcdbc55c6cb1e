//! Per-node live ISOs: the operator's CoreOS live ISO with one node's kernel arguments in its
//! kernel-argument embed areas, as `coreos-installer iso kargs modify --append` writes them,
//! described as a patch over the base image so that it can be streamed without a copy.
//!
//! [`BaseIso::read`] parses the base image once (ISO 9660 lookup in [`iso9660`], the embed
//! areas in [`embed`]) and checks it carries no embedded ignition. [`BaseIso::node_image`]
//! makes a node's [`NodeImage`]: the few hundred bytes that differ, and [`NodeImage::pieces`]
//! says, for any byte range, which parts come from the base file and which from those bytes.
//! `testimage` builds small images in memory for the unit tests and the `live_iso` fuzz target;
//! it is compiled only for tests and with the `fuzzing` feature, so the product carries none of
//! it. A node's image is the base file plus one patch per embed area (each at most 2048 bytes).
//!
//! Architecture invariant: no network, no plan. The arguments come from the caller (the plan's
//! `iso_kernel_args`), the bytes from the file; nothing here writes to the base ISO.

pub mod embed;
pub mod iso9660;
#[doc(hidden)]
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod testimage;

use std::fs::File;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use bytes::Bytes;

use crate::digest::Sha256;
pub use embed::{AreaSource, EmbedError, KargsAreas, KargsTooLong};
pub use iso9660::Iso9660Error;

#[derive(Debug, thiserror::Error)]
pub enum LiveIsoError {
    #[error("can't read {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Iso9660(#[from] Iso9660Error),
    #[error("{0}")]
    Embed(#[from] EmbedError),
}

/// What identifies one version of the base file: a replaced or rewritten file differs in at
/// least one of these (a rename changes the inode, a rewrite the size or modification time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i128,
}

impl FileIdentity {
    pub fn of(meta: &std::fs::Metadata) -> FileIdentity {
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// A parsed base ISO.
#[derive(Debug, Clone)]
pub struct BaseIso {
    pub identity: FileIdentity,
    pub kargs: KargsAreas,
    /// The file of the (empty) ignition embed area.
    pub ignition_file: String,
}

impl BaseIso {
    /// Opens and parses the base ISO at `path`.
    pub fn load(path: &Path) -> Result<(File, BaseIso), LiveIsoError> {
        let open = |source| LiveIsoError::Open {
            path: path.display().to_string(),
            source,
        };
        let file = File::open(path).map_err(open)?;
        let base = BaseIso::read(&file).map_err(|e| match e {
            LiveIsoError::Open { source, .. } => open(source),
            other => other,
        })?;
        Ok((file, base))
    }

    /// Parses the open base ISO `file` (its identity is taken from the file itself, so it is
    /// the identity of the bytes read).
    pub fn read(file: &File) -> Result<BaseIso, LiveIsoError> {
        let meta = file.metadata().map_err(|source| LiveIsoError::Open {
            path: "the base ISO".to_owned(),
            source,
        })?;
        let vol = iso9660::Volume::open(file)?;
        let kargs = KargsAreas::read(file, &vol)?;
        let ignition_file = embed::check_no_ignition(file, &vol)?;
        Ok(BaseIso {
            identity: FileIdentity::of(&meta),
            kargs,
            ignition_file,
        })
    }

    pub fn len(&self) -> u64 {
        self.identity.len
    }

    pub fn is_empty(&self) -> bool {
        self.identity.len == 0
    }

    /// The image of a node whose arguments are `args`: the base ISO's current arguments with
    /// `args` appended, in every area.
    pub fn node_image(&self, args: &[String]) -> Result<NodeImage, KargsTooLong> {
        let kargs = self.kargs.appended(args);
        let patches = self
            .kargs
            .areas
            .iter()
            .map(|area| {
                Ok(Patch {
                    offset: area.offset,
                    bytes: Bytes::from(self.kargs.area_bytes(area, &kargs)?),
                })
            })
            .collect::<Result<Vec<_>, KargsTooLong>>()?;
        let id = self.identity;
        // Strong: the bytes are a function of the base file's version and the arguments.
        let digest = Sha256::of(kargs.as_bytes()).to_string();
        let etag = format!(
            "\"iso-{:x}-{:x}-{:x}-{}\"",
            id.len,
            id.mtime_ns,
            id.ino,
            &digest[..16]
        );
        Ok(NodeImage {
            len: id.len,
            kargs,
            patches,
            etag,
        })
    }
}

/// Bytes that replace the base image's at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub offset: u64,
    pub bytes: Bytes,
}

/// One node's ISO: the base image with `patches` (sorted, not overlapping, inside the image).
#[derive(Debug, Clone)]
pub struct NodeImage {
    pub len: u64,
    /// What `coreos-installer iso kargs show` prints for this image.
    pub kargs: String,
    pub patches: Vec<Patch>,
    /// A strong validator for this node's image of this version of the base file.
    pub etag: String,
}

/// A part of a response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Bytes of the base file, unchanged.
    Base { offset: u64, len: u64 },
    /// Replaced bytes.
    Patch(Bytes),
}

impl NodeImage {
    /// The pieces of the image's bytes `start..start + len`, in order; empty pieces are left out.
    pub fn pieces(&self, start: u64, len: u64) -> Vec<Piece> {
        let end = start.saturating_add(len).min(self.len);
        let mut pieces = Vec::new();
        let mut pos = start;
        for patch in &self.patches {
            let patch_end = patch.offset + patch.bytes.len() as u64;
            if patch_end <= pos {
                continue;
            }
            if patch.offset >= end || pos >= end {
                break;
            }
            if patch.offset > pos {
                pieces.push(Piece::Base {
                    offset: pos,
                    len: patch.offset - pos,
                });
                pos = patch.offset;
            }
            let upto = patch_end.min(end);
            // Both bounds are within the patch, whose length is a usize.
            let from = (pos - patch.offset) as usize;
            let to = (upto - patch.offset) as usize;
            pieces.push(Piece::Patch(patch.bytes.slice(from..to)));
            pos = upto;
        }
        if pos < end {
            pieces.push(Piece::Base {
                offset: pos,
                len: end - pos,
            });
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(len: u64, patches: &[(u64, &[u8])]) -> NodeImage {
        NodeImage {
            len,
            kargs: String::new(),
            patches: patches
                .iter()
                .map(|&(offset, b)| Patch {
                    offset,
                    bytes: Bytes::copy_from_slice(b),
                })
                .collect(),
            etag: String::new(),
        }
    }

    /// Applies `pieces` to `base`: what a client receives.
    fn assemble(base: &[u8], pieces: &[Piece]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Base { offset, len } => {
                    assert!(*len > 0, "empty base piece");
                    out.extend_from_slice(&base[*offset as usize..(*offset + *len) as usize]);
                }
                Piece::Patch(b) => {
                    assert!(!b.is_empty(), "empty patch piece");
                    out.extend_from_slice(b);
                }
            }
        }
        out
    }

    #[test]
    fn every_range_equals_the_same_range_of_a_patched_copy() {
        let base: Vec<u8> = (0..200u32).map(|i| (i * 7 % 251) as u8).collect();
        let patches: [(u64, &[u8]); 3] = [(0, b"AB"), (50, b"patch!"), (190, b"0123456789")];
        let img = image(200, &patches);
        let mut patched = base.clone();
        for (at, b) in patches {
            patched[at as usize..at as usize + b.len()].copy_from_slice(b);
        }
        for start in 0..=200u64 {
            for len in 0..=(200 - start) {
                let got = assemble(&base, &img.pieces(start, len));
                assert_eq!(
                    got,
                    &patched[start as usize..(start + len) as usize],
                    "{start}+{len}"
                );
            }
        }
        // Past the end is cut at the end.
        assert_eq!(assemble(&base, &img.pieces(195, 100)), &patched[195..]);
        // Base pieces lie between the patches, never over them.
        assert_eq!(
            img.pieces(0, 200)[..3],
            [
                Piece::Patch(Bytes::from_static(b"AB")),
                Piece::Base { offset: 2, len: 48 },
                Piece::Patch(Bytes::from_static(b"patch!")),
            ]
        );
    }
}
