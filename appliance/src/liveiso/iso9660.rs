//! Finding a file in an ISO 9660 image by its plain ISO 9660 name, the way coreos-installer
//! does: the primary volume descriptor's root directory, one directory record after the other,
//! names compared without their `;1` version and trailing `.`, Rock Ridge and Joliet ignored.
//!
//! The CoreOS tools name embed files in upper case 8.3 form (`COREOS/KARGS.JSO`), and the
//! paths in `kargs.json` are looked up upper-cased, so matching coreos-installer's reading of
//! the plain names is what makes the appliance find exactly the bytes `coreos-installer iso
//! kargs modify` would write.
//!
//! Why not a crate: `iso9660` 0.1 calls itself incomplete and has seen no release since 2023,
//! its maintained fork `cdfs` brings FUSE and clap as hard dependencies, and `hadris-iso` is a
//! 3.0 release candidate of five crates. What is needed here is two record layouts (ECMA-119
//! 8.4 and 9.1), read with every length checked.
//!
//! Pure apart from the [`Image`] it reads through; every offset and length read from the image
//! is checked before use, so a damaged image is an error, never a panic or an endless loop.

use std::io;

/// Logical sector size; ISO 9660 allows others, CoreOS images and every hybrid ISO use this.
pub const SECTOR: u64 = 2048;
/// The system area (sectors 0-15) precedes the volume descriptors.
const FIRST_DESCRIPTOR: u64 = 16;
/// A volume descriptor set is a handful of sectors; more than this is not an ISO 9660 image.
const MAX_DESCRIPTORS: u64 = 64;
/// Directories of a live ISO are a few sectors; refuse to read an absurd one into memory.
const MAX_DIRECTORY: u32 = 16 * 1024 * 1024;
/// Path components walked at most (ISO 9660 allows a depth of 8).
const MAX_DEPTH: usize = 16;

/// Random-access reads of an image: a file, or bytes in memory in tests.
pub trait Image {
    fn size(&self) -> io::Result<u64>;
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl Image for std::fs::File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

impl Image for [u8] {
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| eof())?;
        let end = start.checked_add(buf.len()).ok_or_else(eof)?;
        let src = self.get(start..end).ok_or_else(eof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

fn eof() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "read past the end of the image",
    )
}

#[derive(Debug, thiserror::Error)]
pub enum Iso9660Error {
    #[error("can't read {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("not an ISO 9660 image: no volume descriptor at sector 16")]
    NotIso9660,
    #[error("no primary volume descriptor (ISO 9660 images have one)")]
    NoPrimary,
    #[error("logical block size {0}: only 2048 is supported")]
    BlockSize(u16),
    #[error("the image is incomplete: its volume is {volume} bytes, the file {file}")]
    Incomplete { volume: u64, file: u64 },
    #[error("corrupt directory {dir}: {why}")]
    Corrupt { dir: String, why: &'static str },
    #[error("{path}: no such file in the ISO 9660 tree (looked for `{missing}`)")]
    NotFound { path: String, missing: String },
    #[error("{path}: `{component}` is a file, not a directory")]
    NotADirectory { path: String, component: String },
    #[error("{path} is a directory, not a file")]
    IsADirectory { path: String },
    #[error("{path}: more than {MAX_DEPTH} path components")]
    TooDeep { path: String },
}

/// A file or directory as its directory record describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Logical block address of its first sector.
    pub lba: u32,
    /// Data length in bytes.
    pub len: u32,
    pub is_dir: bool,
}

impl Extent {
    /// Byte offset of the extent in the image.
    pub fn offset(&self) -> u64 {
        u64::from(self.lba) * SECTOR
    }
}

/// An opened ISO 9660 image: its root directory and size.
#[derive(Debug, Clone, Copy)]
pub struct Volume {
    pub root: Extent,
    /// Volume space size in bytes.
    pub size: u64,
}

impl Volume {
    /// Reads the volume descriptors and checks the image holds the whole volume.
    pub fn open(image: &(impl Image + ?Sized)) -> Result<Volume, Iso9660Error> {
        let file_len = image.size().map_err(|source| Iso9660Error::Read {
            what: "the image's size".to_owned(),
            source,
        })?;
        let mut sector = [0u8; SECTOR as usize];
        for n in 0..MAX_DESCRIPTORS {
            let at = (FIRST_DESCRIPTOR + n) * SECTOR;
            if at + SECTOR > file_len {
                break;
            }
            image
                .read_exact_at(&mut sector, at)
                .map_err(|source| Iso9660Error::Read {
                    what: format!("volume descriptor {n}"),
                    source,
                })?;
            if &sector[1..6] != b"CD001" || sector[6] != 1 {
                if n == 0 {
                    return Err(Iso9660Error::NotIso9660);
                }
                break;
            }
            match sector[0] {
                1 => return primary(&sector, file_len),
                255 => break,
                _ => {}
            }
        }
        if file_len < (FIRST_DESCRIPTOR + 1) * SECTOR {
            return Err(Iso9660Error::NotIso9660);
        }
        Err(Iso9660Error::NoPrimary)
    }

    /// The file at `path` (`/`-separated, case-insensitive, as in `kargs.json`).
    pub fn find_file(
        &self,
        image: &(impl Image + ?Sized),
        path: &str,
    ) -> Result<Extent, Iso9660Error> {
        let upper = path.to_ascii_uppercase();
        let components: Vec<&str> = upper
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        if components.len() > MAX_DEPTH {
            return Err(Iso9660Error::TooDeep {
                path: path.to_owned(),
            });
        }
        let mut current = self.root;
        let mut walked = String::new();
        for (i, name) in components.iter().enumerate() {
            if !current.is_dir {
                return Err(Iso9660Error::NotADirectory {
                    path: path.to_owned(),
                    component: walked,
                });
            }
            let dir_name = if walked.is_empty() { "/" } else { &walked };
            let found = lookup(image, current, dir_name, name)?;
            if !walked.is_empty() {
                walked.push('/');
            }
            walked.push_str(name);
            current = found.ok_or_else(|| Iso9660Error::NotFound {
                path: path.to_owned(),
                missing: walked.clone(),
            })?;
            if i + 1 < components.len() && !current.is_dir {
                return Err(Iso9660Error::NotADirectory {
                    path: path.to_owned(),
                    component: walked,
                });
            }
        }
        if current.is_dir {
            return Err(Iso9660Error::IsADirectory {
                path: path.to_owned(),
            });
        }
        Ok(current)
    }

    /// The whole content of the file at `path`, at most `limit` bytes (larger is an error).
    pub fn read_file(
        &self,
        image: &(impl Image + ?Sized),
        path: &str,
        limit: u32,
    ) -> Result<Vec<u8>, Iso9660Error> {
        let extent = self.find_file(image, path)?;
        if extent.len > limit {
            return Err(Iso9660Error::Read {
                what: path.to_owned(),
                source: io::Error::other(format!(
                    "{} bytes, more than the {limit} expected",
                    extent.len
                )),
            });
        }
        let mut data = vec![0u8; extent.len as usize];
        image
            .read_exact_at(&mut data, extent.offset())
            .map_err(|source| Iso9660Error::Read {
                what: path.to_owned(),
                source,
            })?;
        Ok(data)
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The primary volume descriptor (ECMA-119 8.4): block size at 128, volume space size at 80,
/// the root directory's record at 156.
fn primary(sector: &[u8], file_len: u64) -> Result<Volume, Iso9660Error> {
    let block = le16(sector, 128);
    if u64::from(block) != SECTOR {
        return Err(Iso9660Error::BlockSize(block));
    }
    let size = u64::from(le32(sector, 80)) * SECTOR;
    if size > file_len {
        return Err(Iso9660Error::Incomplete {
            volume: size,
            file: file_len,
        });
    }
    let root = &sector[156..156 + 34];
    let corrupt = |why| Iso9660Error::Corrupt {
        dir: "/".to_owned(),
        why,
    };
    if root[0] < 34 || root[25] & 2 == 0 {
        return Err(corrupt("the root directory record is not a directory"));
    }
    Ok(Volume {
        root: Extent {
            lba: le32(root, 2),
            len: le32(root, 10),
            is_dir: true,
        },
        size,
    })
}

/// The record named `name` in directory `dir` (ECMA-119 9.1), if any. Records do not cross
/// sector boundaries: a zero length byte means "continue at the next sector".
fn lookup(
    image: &(impl Image + ?Sized),
    dir: Extent,
    dir_name: &str,
    name: &str,
) -> Result<Option<Extent>, Iso9660Error> {
    let corrupt = |why| Iso9660Error::Corrupt {
        dir: dir_name.to_owned(),
        why,
    };
    if dir.len > MAX_DIRECTORY {
        return Err(corrupt("larger than 16 MiB"));
    }
    let mut data = vec![0u8; dir.len as usize];
    image
        .read_exact_at(&mut data, dir.offset())
        .map_err(|source| Iso9660Error::Read {
            what: format!("directory {dir_name}"),
            source,
        })?;
    let mut pos = 0usize;
    while pos < data.len() {
        let len = usize::from(data[pos]);
        if len == 0 {
            // Padding to the end of the sector.
            pos = (pos / SECTOR as usize + 1) * SECTOR as usize;
            continue;
        }
        let record = data
            .get(pos..pos + len)
            .ok_or_else(|| corrupt("a record runs past the end of the directory"))?;
        if len < 34 {
            return Err(corrupt("a record shorter than 34 bytes"));
        }
        let name_len = usize::from(record[32]);
        let raw = record
            .get(33..33 + name_len)
            .ok_or_else(|| corrupt("a name runs past its record"))?;
        if plain_name(raw) == name.as_bytes() {
            return Ok(Some(Extent {
                lba: le32(record, 2),
                len: le32(record, 10),
                is_dir: record[25] & 2 != 0,
            }));
        }
        pos += len;
    }
    Ok(None)
}

/// A file identifier without its `;1` version and a trailing `.` (a file without extension),
/// as coreos-installer compares them. `.` and `..` (0x00, 0x01) match no name.
fn plain_name(raw: &[u8]) -> &[u8] {
    let name = raw.strip_suffix(b";1").unwrap_or(raw);
    name.strip_suffix(b".").unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::super::testimage::{Node, image};
    use super::*;

    fn sample() -> Vec<u8> {
        image(vec![
            Node::Dir(
                "COREOS",
                vec![Node::File("KARGS.JSO;1", b"{\"size\":1}".to_vec())],
            ),
            Node::Dir(
                "EFI",
                vec![Node::Dir(
                    "FEDORA",
                    vec![Node::File("GRUB.CFG;1", b"linux".to_vec())],
                )],
            ),
            Node::File("VMLINUZ.;1", vec![7; 5000]),
        ])
    }

    #[test]
    fn files_are_found_by_their_plain_names_whatever_the_case() {
        let img = sample();
        let vol = Volume::open(img.as_slice()).unwrap();
        assert_eq!(
            vol.read_file(img.as_slice(), "coreos/kargs.jso", 100)
                .unwrap(),
            b"{\"size\":1}"
        );
        assert_eq!(
            vol.read_file(img.as_slice(), "/EFI/fedora/grub.cfg", 100)
                .unwrap(),
            b"linux"
        );
        // A name without extension is recorded as `VMLINUZ.;1`.
        let k = vol.find_file(img.as_slice(), "vmlinuz").unwrap();
        assert_eq!(k.len, 5000);
        assert_eq!(k.offset() % SECTOR, 0);
        // The long name is not the ISO 9660 name: like coreos-installer, not found.
        assert!(matches!(
            vol.find_file(img.as_slice(), "coreos/kargs.json"),
            Err(Iso9660Error::NotFound { missing, .. }) if missing == "COREOS/KARGS.JSON"
        ));
    }

    #[test]
    fn wrong_kinds_and_missing_parts_are_named() {
        let img = sample();
        let vol = Volume::open(img.as_slice()).unwrap();
        let err = vol.find_file(img.as_slice(), "nope/grub.cfg").unwrap_err();
        assert_eq!(
            err.to_string(),
            "nope/grub.cfg: no such file in the ISO 9660 tree (looked for `NOPE`)"
        );
        let err = vol.find_file(img.as_slice(), "vmlinuz/x").unwrap_err();
        assert!(matches!(err, Iso9660Error::NotADirectory { .. }), "{err}");
        let err = vol.find_file(img.as_slice(), "efi/fedora").unwrap_err();
        assert!(matches!(err, Iso9660Error::IsADirectory { .. }), "{err}");
        let err = vol.find_file(img.as_slice(), "").unwrap_err();
        assert!(matches!(err, Iso9660Error::IsADirectory { .. }), "{err}");
    }

    #[test]
    fn damaged_images_are_errors_not_panics() {
        let img = sample();
        assert!(matches!(
            Volume::open(&img[..10 * SECTOR as usize]),
            Err(Iso9660Error::NotIso9660)
        ));
        assert!(matches!(
            Volume::open(&vec![0u8; 40 * SECTOR as usize][..]),
            Err(Iso9660Error::NotIso9660)
        ));
        // Truncated: the volume is larger than the file.
        assert!(matches!(
            Volume::open(&img[..img.len() - SECTOR as usize]),
            Err(Iso9660Error::Incomplete { .. })
        ));
        // Every single byte of the descriptors and the root directory flipped: never a panic.
        let root = Volume::open(img.as_slice()).unwrap().root.offset() as usize;
        for at in (16 * SECTOR as usize..17 * SECTOR as usize).chain(root..root + 200) {
            for value in [0u8, 1, 0x21, 0xff] {
                let mut bad = img.clone();
                bad[at] = value;
                if let Ok(vol) = Volume::open(bad.as_slice()) {
                    let _ = vol.read_file(bad.as_slice(), "efi/fedora/grub.cfg", 1 << 20);
                    let _ = vol.find_file(bad.as_slice(), "coreos/kargs.jso");
                }
            }
        }
        // A root directory 100 bytes long whose third record ends at byte 108.
        let mut bad = img.clone();
        let pvd = 16 * SECTOR as usize;
        bad[pvd + 156 + 10..pvd + 156 + 14].copy_from_slice(&100u32.to_le_bytes());
        let vol = Volume::open(bad.as_slice()).unwrap();
        let err = vol.find_file(bad.as_slice(), "vmlinuz").unwrap_err();
        assert_eq!(
            err.to_string(),
            "corrupt directory /: a record runs past the end of the directory"
        );
    }
}
