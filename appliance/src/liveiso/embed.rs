//! The embed areas of a CoreOS live ISO, read as coreos-installer's `src/live/embed.rs` reads
//! them, so the appliance writes the same bytes `coreos-installer iso kargs modify` would.
//!
//! - Kernel arguments: `coreos/kargs.json` (ISO 9660 name `COREOS/KARGS.JSO`) names the files
//!   holding an area (`files[].path`, looked up upper-cased), the area's `offset` in each file,
//!   its `size` (at most 2048) and per file the `pad` (default `#`) and `end` (default newline)
//!   characters. An area holds the arguments, `end`, then `pad` up to `size`; every area must
//!   hold the same arguments. Images from before kargs.json carry instead a `coreKarg` header
//!   at byte 32672 of the system area: the area length, the offset of the default arguments
//!   and up to six area offsets (little-endian u64 each).
//! - Ignition: `coreos/igninfo.json` names the file (and optionally offset and length) of the
//!   area `coreos-installer iso ignition embed` fills; older images use all of
//!   `images/ignition.img`. The appliance never writes it and refuses a base ISO where it is
//!   not empty: the per-node ISOs are served to any address, so they must carry no secret.
//!
//! Pure apart from the [`Image`] it reads through.

use serde::Deserialize;

use super::iso9660::{Image, Iso9660Error, Volume};

const KARGS_INFO: &str = "COREOS/KARGS.JSO";
const IGNITION_INFO: &str = "COREOS/IGNINFO.JSO";
const IGNITION_DEFAULT: &str = "IMAGES/IGNITION.IMG";
/// An area larger than this is refused (coreos-installer's limit).
pub const MAX_AREA: usize = 2048;
/// The `coreKarg` header: 72 bytes ending 24 bytes before the end of the 32 KiB system area.
const LEGACY_HEADER_AT: u64 = 32768 - 24 - 72;
const LEGACY_MAGIC: &[u8] = b"coreKarg";
const LEGACY_MAX_AREAS: usize = 6;
/// The JSON files are a few hundred bytes.
const INFO_LIMIT: u32 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error(transparent)]
    Iso9660(#[from] Iso9660Error),
    #[error(
        "no kernel-argument embed area: neither coreos/kargs.json nor a coreKarg header at byte \
         32672 (not a CoreOS live ISO, or one too old for `coreos-installer iso kargs`)"
    )]
    NoKargsArea,
    #[error("coreos/kargs.json: {0}")]
    KargsJson(#[source] serde_json::Error),
    #[error("coreos/igninfo.json: {0}")]
    IgnitionJson(#[source] serde_json::Error),
    #[error("kernel-argument area of {0} bytes: larger than {MAX_AREA}")]
    AreaTooLarge(u64),
    #[error("the default kernel arguments ({len} bytes) do not fit the {size}-byte area")]
    DefaultTooLong { len: usize, size: usize },
    #[error("coreos/kargs.json lists no file with an area")]
    NoAreas,
    #[error("the kernel-argument area at byte {offset} ({file}) ends past the image's end")]
    AreaOutside { offset: u64, file: String },
    #[error("the kernel-argument areas at bytes {first} and {second} overlap")]
    AreasOverlap { first: u64, second: u64 },
    #[error(
        "the kernel-argument areas differ: `{first}` at byte {first_at}, `{other}` at byte \
         {other_at} (reset the base ISO with `coreos-installer iso kargs reset`)"
    )]
    AreasDiffer {
        first: String,
        first_at: u64,
        other: String,
        other_at: u64,
    },
    #[error("the kernel-argument area at byte {0} is not UTF-8")]
    NotUtf8(u64),
    #[error("coreos/kargs.json: `{what}` of {file} is `{found}`, not an ASCII character")]
    NotAscii {
        what: &'static str,
        file: String,
        found: char,
    },
    #[error("can't read the {what} at byte {offset}: {source}")]
    Read {
        what: &'static str,
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "no ignition embed area (coreos/igninfo.json or images/ignition.img): not a CoreOS live \
         ISO, and without it the image can't be shown to carry no ignition config"
    )]
    NoIgnitionArea,
    #[error("the ignition embed area in {file} ends past the image's end")]
    IgnitionOutside { file: String },
    #[error(
        "the base ISO carries an embedded ignition config or network settings (in {file}); the \
         per-node ISOs are served to any address and must carry no secret: remove it with \
         `coreos-installer iso reset` (or use the ISO as downloaded)"
    )]
    IgnitionEmbedded { file: String },
}

/// Where the kernel-argument areas were described.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AreaSource {
    KargsJson,
    LegacyHeader,
}

/// One copy of the kernel-argument area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Area {
    /// Byte offset in the image.
    pub offset: u64,
    /// The file it lies in (`kargs.json`'s path), for messages; `None` from the legacy header.
    pub file: Option<String>,
    pub pad: u8,
    pub end: u8,
}

/// The kernel-argument areas of an image and what they hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KargsAreas {
    pub source: AreaSource,
    /// Bytes per area.
    pub size: usize,
    /// The arguments the image was built with (`coreos-installer iso kargs reset` restores them).
    pub default: String,
    /// Sorted by offset, not overlapping, each inside the image.
    pub areas: Vec<Area>,
    /// What every area holds now: the arguments `coreos-installer iso kargs show` prints.
    pub current: String,
}

/// The kernel arguments do not fit the area.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the kernel arguments are {len} bytes, and the ISO's area holds {max} (with its end \
     character): `{kargs}`"
)]
pub struct KargsTooLong {
    pub len: usize,
    pub max: usize,
    pub kargs: String,
}

#[derive(Deserialize)]
struct KargsInfo {
    default: String,
    files: Vec<KargsFile>,
    size: u64,
}

#[derive(Deserialize)]
struct KargsFile {
    path: String,
    offset: u64,
    pad: Option<char>,
    end: Option<char>,
}

#[derive(Deserialize)]
struct IgnitionInfo {
    file: String,
    offset: Option<u64>,
    length: Option<u64>,
}

impl KargsAreas {
    /// Finds the areas through `coreos/kargs.json`, or else the legacy header, as
    /// coreos-installer does.
    pub fn read(image: &(impl Image + ?Sized), vol: &Volume) -> Result<KargsAreas, EmbedError> {
        match vol.read_file(image, KARGS_INFO, INFO_LIMIT) {
            Ok(json) => Self::from_json(image, vol, &json),
            Err(Iso9660Error::NotFound { .. }) => Self::from_legacy_header(image),
            Err(e) => Err(e.into()),
        }
    }

    fn from_json(
        image: &(impl Image + ?Sized),
        vol: &Volume,
        json: &[u8],
    ) -> Result<KargsAreas, EmbedError> {
        let info: KargsInfo = serde_json::from_slice(json).map_err(EmbedError::KargsJson)?;
        let size = checked_size(info.size)?;
        if info.default.len() > size {
            return Err(EmbedError::DefaultTooLong {
                len: info.default.len(),
                size,
            });
        }
        let mut areas = Vec::new();
        for f in info.files {
            let extent = vol.find_file(image, &f.path)?;
            let ascii = |what, c: Option<char>, default: u8| match c {
                None => Ok(default),
                Some(c) if c.is_ascii() => Ok(c as u8),
                Some(found) => Err(EmbedError::NotAscii {
                    what,
                    file: f.path.clone(),
                    found,
                }),
            };
            areas.push(Area {
                offset: extent.offset().saturating_add(f.offset),
                pad: ascii("pad", f.pad, b'#')?,
                end: ascii("end", f.end, b'\n')?,
                file: Some(f.path),
            });
        }
        Self::build(image, AreaSource::KargsJson, size, info.default, areas)
    }

    fn from_legacy_header(image: &(impl Image + ?Sized)) -> Result<KargsAreas, EmbedError> {
        let mut header = [0u8; 72];
        if image.read_exact_at(&mut header, LEGACY_HEADER_AT).is_err()
            || &header[..8] != LEGACY_MAGIC
        {
            return Err(EmbedError::NoKargsArea);
        }
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&header[8 + i * 8..16 + i * 8]);
            u64::from_le_bytes(b)
        };
        let size = checked_size(u64_at(0))?;
        let default_at = u64_at(1);
        let default = read_area(image, default_at, size, "default kernel arguments")?;
        let default = parse(&default, default_at, b'#', b'\n')?;
        let areas = (0..LEGACY_MAX_AREAS)
            .map(|i| u64_at(2 + i))
            .take_while(|&offset| offset != 0)
            .map(|offset| Area {
                offset,
                file: None,
                pad: b'#',
                end: b'\n',
            })
            .collect();
        Self::build(image, AreaSource::LegacyHeader, size, default, areas)
    }

    fn build(
        image: &(impl Image + ?Sized),
        source: AreaSource,
        size: usize,
        default: String,
        mut areas: Vec<Area>,
    ) -> Result<KargsAreas, EmbedError> {
        if areas.is_empty() {
            return Err(EmbedError::NoAreas);
        }
        areas.sort_by_key(|a| a.offset);
        for pair in areas.windows(2) {
            if pair[0].offset.saturating_add(size as u64) > pair[1].offset {
                return Err(EmbedError::AreasOverlap {
                    first: pair[0].offset,
                    second: pair[1].offset,
                });
            }
        }
        let mut current: Option<(String, u64)> = None;
        for area in &areas {
            let bytes = read_area(image, area.offset, size, "kernel-argument area").map_err(
                |e| match e {
                    EmbedError::Read { source, .. }
                        if source.kind() == std::io::ErrorKind::UnexpectedEof =>
                    {
                        EmbedError::AreaOutside {
                            offset: area.offset,
                            file: area.file.clone().unwrap_or_else(|| "legacy header".into()),
                        }
                    }
                    other => other,
                },
            )?;
            let args = parse(&bytes, area.offset, area.pad, area.end)?;
            match &current {
                None => current = Some((args, area.offset)),
                Some((first, first_at)) if *first != args => {
                    return Err(EmbedError::AreasDiffer {
                        first: first.clone(),
                        first_at: *first_at,
                        other: args,
                        other_at: area.offset,
                    });
                }
                Some(_) => {}
            }
        }
        let current = current.map(|(c, _)| c).unwrap_or_default();
        Ok(KargsAreas {
            source,
            size,
            default,
            areas,
            current,
        })
    }

    /// The arguments `coreos-installer iso kargs modify --append A --append B ...` leaves in
    /// the areas: the current ones, then each argument, single spaces between.
    pub fn appended(&self, args: &[String]) -> String {
        let mut line = format!(" {} ", self.current);
        for arg in args {
            line.push_str(arg.trim());
            line.push(' ');
        }
        line.trim().to_owned()
    }

    /// The bytes of `area` holding `kargs`: the arguments, the end character, then padding.
    pub fn area_bytes(&self, area: &Area, kargs: &str) -> Result<Vec<u8>, KargsTooLong> {
        let kargs = kargs.trim();
        // One byte of the area is the end character.
        if kargs.len() >= self.size {
            return Err(KargsTooLong {
                len: kargs.len(),
                max: self.size - 1,
                kargs: kargs.to_owned(),
            });
        }
        let mut bytes = vec![area.pad; self.size];
        bytes[..kargs.len()].copy_from_slice(kargs.as_bytes());
        bytes[kargs.len()] = area.end;
        Ok(bytes)
    }
}

fn checked_size(size: u64) -> Result<usize, EmbedError> {
    match usize::try_from(size) {
        Ok(s) if s <= MAX_AREA && s > 0 => Ok(s),
        _ => Err(EmbedError::AreaTooLarge(size)),
    }
}

fn read_area(
    image: &(impl Image + ?Sized),
    offset: u64,
    size: usize,
    what: &'static str,
) -> Result<Vec<u8>, EmbedError> {
    let mut bytes = vec![0u8; size];
    image
        .read_exact_at(&mut bytes, offset)
        .map_err(|source| EmbedError::Read {
            what,
            offset,
            source,
        })?;
    Ok(bytes)
}

/// The arguments an area holds: padding and the end character stripped, then white space.
fn parse(bytes: &[u8], offset: u64, pad: u8, end: u8) -> Result<String, EmbedError> {
    let text = std::str::from_utf8(bytes).map_err(|_| EmbedError::NotUtf8(offset))?;
    Ok(text
        .trim_end_matches(char::from(pad))
        .trim_end_matches(char::from(end))
        .trim()
        .to_owned())
}

/// Checks that the ignition embed area is empty (all zero), which is how CoreOS ships it.
/// Returns the file the area is in.
pub fn check_no_ignition(
    image: &(impl Image + ?Sized),
    vol: &Volume,
) -> Result<String, EmbedError> {
    let (file, offset, length) = match vol.read_file(image, IGNITION_INFO, INFO_LIMIT) {
        Ok(json) => {
            let info: IgnitionInfo =
                serde_json::from_slice(&json).map_err(EmbedError::IgnitionJson)?;
            (info.file, info.offset, info.length)
        }
        Err(Iso9660Error::NotFound { .. }) => (IGNITION_DEFAULT.to_owned(), None, None),
        Err(e) => return Err(e.into()),
    };
    let extent = match vol.find_file(image, &file) {
        Ok(e) => e,
        Err(Iso9660Error::NotFound { .. }) => return Err(EmbedError::NoIgnitionArea),
        Err(e) => return Err(e.into()),
    };
    let offset_in_file = offset.unwrap_or(0);
    let length = length.unwrap_or_else(|| u64::from(extent.len).saturating_sub(offset_in_file));
    let start = extent.offset().saturating_add(offset_in_file);
    let image_len = image.size().map_err(|source| EmbedError::Read {
        what: "image size",
        offset: 0,
        source,
    })?;
    if start.saturating_add(length) > image_len {
        return Err(EmbedError::IgnitionOutside { file });
    }
    let mut chunk = vec![0u8; 64 * 1024];
    let mut at = start;
    while at < start + length {
        let n =
            usize::try_from((start + length - at).min(chunk.len() as u64)).unwrap_or(chunk.len());
        image
            .read_exact_at(&mut chunk[..n], at)
            .map_err(|source| EmbedError::Read {
                what: "ignition embed area",
                offset: at,
                source,
            })?;
        if chunk[..n].iter().any(|&b| b != 0) {
            return Err(EmbedError::IgnitionEmbedded { file });
        }
        at += n as u64;
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::super::testimage::{Node, image};
    use super::*;

    const SIZE: usize = 64;

    /// `prefix`, then an area of `SIZE` bytes holding `kargs`, then `suffix`.
    fn cfg(prefix: &str, kargs: &str, pad: u8, suffix: &str) -> Vec<u8> {
        let mut v = prefix.as_bytes().to_vec();
        v.extend_from_slice(kargs.as_bytes());
        v.push(b'\n');
        v.resize(prefix.len() + SIZE, pad);
        v.extend_from_slice(suffix.as_bytes());
        v
    }

    fn kargs_json(grub_pad: Option<char>) -> Vec<u8> {
        let mut grub = serde_json::json!({ "path": "EFI/fedora/grub.cfg", "offset": 6 });
        if let Some(p) = grub_pad {
            grub["pad"] = serde_json::json!(p);
        }
        serde_json::json!({
            "default": "console=ttyS0",
            "files": [ { "path": "isolinux/isolinux.cfg", "offset": 7 }, grub ],
            "size": SIZE,
        })
        .to_string()
        .into_bytes()
    }

    fn live_iso(json: Vec<u8>, grub_kargs: &str, grub_pad: u8, ignition: Vec<u8>) -> Vec<u8> {
        image(vec![
            Node::Dir("COREOS", vec![Node::File("KARGS.JSO;1", json)]),
            Node::Dir(
                "EFI",
                vec![Node::Dir(
                    "FEDORA",
                    vec![Node::File(
                        "GRUB.CFG;1",
                        cfg("linux ", grub_kargs, grub_pad, "\ninitrd x\n"),
                    )],
                )],
            ),
            Node::Dir("IMAGES", vec![Node::File("IGNITION.IMG;1", ignition)]),
            Node::Dir(
                "ISOLINUX",
                vec![Node::File(
                    "ISOLINUX.CFG;1",
                    cfg("append ", "console=ttyS0", b'#', "\n"),
                )],
            ),
        ])
    }

    fn read(img: &[u8]) -> Result<KargsAreas, EmbedError> {
        let vol = Volume::open(img).unwrap();
        KargsAreas::read(img, &vol)
    }

    #[test]
    fn areas_come_from_kargs_json_in_file_order_of_the_image() {
        let img = live_iso(kargs_json(None), "console=ttyS0", b'#', vec![0; 4096]);
        let k = read(&img).unwrap();
        assert_eq!(k.source, AreaSource::KargsJson);
        assert_eq!(k.size, SIZE);
        assert_eq!(k.current, "console=ttyS0");
        assert_eq!(k.default, "console=ttyS0");
        assert_eq!(k.areas.len(), 2);
        for a in &k.areas {
            let at = a.offset as usize;
            assert_eq!(&img[at..at + 14], b"console=ttyS0\n", "{a:?}");
        }
        assert!(k.areas[0].offset < k.areas[1].offset);
        let vol = Volume::open(img.as_slice()).unwrap();
        assert_eq!(
            check_no_ignition(img.as_slice(), &vol).unwrap(),
            "IMAGES/IGNITION.IMG"
        );
    }

    #[test]
    fn appending_and_formatting_match_coreos_installer() {
        let img = live_iso(kargs_json(Some(' ')), "console=ttyS0", b' ', vec![0; 10]);
        let k = read(&img).unwrap();
        let args = ["a=1".to_owned(), " b ".to_owned()];
        assert_eq!(k.appended(&args), "console=ttyS0 a=1 b");
        let grub = k
            .areas
            .iter()
            .find(|a| a.file.as_deref() == Some("EFI/fedora/grub.cfg"))
            .unwrap();
        assert_eq!(grub.pad, b' ');
        let bytes = k.area_bytes(grub, " x y ").unwrap();
        assert_eq!(&bytes[..4], b"x y\n");
        assert!(bytes[4..].iter().all(|&b| b == b' '));
        assert_eq!(bytes.len(), SIZE);
        // SIZE - 1 bytes of arguments leave exactly the end character: fits; one more does not.
        assert!(k.area_bytes(grub, &"x".repeat(SIZE - 1)).is_ok());
        let err = k.area_bytes(grub, &"x".repeat(SIZE)).unwrap_err();
        assert_eq!((err.len, err.max), (SIZE, SIZE - 1));
        // Nothing current: the arguments alone.
        let empty = KargsAreas {
            current: String::new(),
            ..k
        };
        assert_eq!(empty.appended(&args), "a=1 b");
    }

    #[test]
    fn images_coreos_installer_refuses_are_refused() {
        // Areas that disagree.
        let img = live_iso(kargs_json(None), "console=tty0", b'#', vec![0; 10]);
        assert!(matches!(read(&img), Err(EmbedError::AreasDiffer { .. })));
        // No kargs.json and no legacy header.
        let img = image(vec![Node::File("README.;1", b"hi".to_vec())]);
        let err = read(&img).unwrap_err();
        assert!(matches!(err, EmbedError::NoKargsArea), "{err}");
        // An area larger than 2048.
        let json = String::from_utf8(kargs_json(None))
            .unwrap()
            .replace("\"size\":64", "\"size\":4096");
        let img = live_iso(json.into_bytes(), "console=ttyS0", b'#', vec![0; 10]);
        assert!(matches!(read(&img), Err(EmbedError::AreaTooLarge(4096))));
        // A file kargs.json names that is not there.
        let json = String::from_utf8(kargs_json(None))
            .unwrap()
            .replace("EFI/fedora", "EFI/centos");
        let img = live_iso(json.into_bytes(), "console=ttyS0", b'#', vec![0; 10]);
        let err = read(&img).unwrap_err().to_string();
        assert!(err.contains("EFI/centos/grub.cfg: no such file"), "{err}");
        // Not JSON.
        let img = live_iso(b"{".to_vec(), "console=ttyS0", b'#', vec![0; 10]);
        assert!(matches!(read(&img), Err(EmbedError::KargsJson(_))));
        // An area past the end of the image.
        let json = String::from_utf8(kargs_json(None))
            .unwrap()
            .replace("\"offset\":7", "\"offset\":99999999");
        let img = live_iso(json.into_bytes(), "console=ttyS0", b'#', vec![0; 10]);
        let err = read(&img).unwrap_err();
        assert!(matches!(err, EmbedError::AreaOutside { .. }), "{err}");
    }

    #[test]
    fn an_embedded_ignition_config_is_refused() {
        let mut ign = vec![0u8; 100_000];
        ign[99_000] = 0x1f;
        let img = live_iso(kargs_json(None), "console=ttyS0", b'#', ign);
        let vol = Volume::open(img.as_slice()).unwrap();
        let err = check_no_ignition(img.as_slice(), &vol).unwrap_err();
        assert!(matches!(err, EmbedError::IgnitionEmbedded { .. }), "{err}");
        // igninfo.json names the area: only that part counts.
        let mut ign = vec![0u8; 8192];
        ign[10] = 1;
        let igninfo = br#"{"file":"images/ignition.img","offset":4096,"length":4096}"#;
        let img = image(vec![
            Node::Dir(
                "COREOS",
                vec![Node::File("IGNINFO.JSO;1", igninfo.to_vec())],
            ),
            Node::Dir("IMAGES", vec![Node::File("IGNITION.IMG;1", ign)]),
        ]);
        let vol = Volume::open(img.as_slice()).unwrap();
        assert_eq!(
            check_no_ignition(img.as_slice(), &vol).unwrap(),
            "images/ignition.img"
        );
        // Without any ignition area there is nothing to show the image is clean.
        let img = image(vec![Node::File("README.;1", b"hi".to_vec())]);
        let vol = Volume::open(img.as_slice()).unwrap();
        assert!(matches!(
            check_no_ignition(img.as_slice(), &vol),
            Err(EmbedError::NoIgnitionArea)
        ));
    }

    #[test]
    fn the_legacy_header_in_the_system_area_is_read_when_there_is_no_kargs_json() {
        let mut img = image(vec![Node::File(
            "ISOLINUX.CFG;1",
            cfg("append ", "quiet", b'#', "\n"),
        )]);
        let cfg_at = Volume::open(img.as_slice())
            .unwrap()
            .find_file(img.as_slice(), "isolinux.cfg")
            .unwrap()
            .offset()
            + 7;
        // The default arguments in a spare area of the system area, sector 2.
        let default_at = 4096u64;
        img[4096..4096 + SIZE].copy_from_slice(&cfg("", "quiet", b'#', ""));
        let mut header = LEGACY_MAGIC.to_vec();
        for v in [SIZE as u64, default_at, cfg_at, 0] {
            header.extend_from_slice(&v.to_le_bytes());
        }
        let at = LEGACY_HEADER_AT as usize;
        img[at..at + header.len()].copy_from_slice(&header);
        let k = read(&img).unwrap();
        assert_eq!(k.source, AreaSource::LegacyHeader);
        assert_eq!(k.default, "quiet");
        assert_eq!(k.current, "quiet");
        assert_eq!(k.areas.len(), 1);
        assert_eq!(k.areas[0].offset, cfg_at);
    }
}
