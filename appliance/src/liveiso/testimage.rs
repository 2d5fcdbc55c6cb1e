//! Small ISO 9660 images built in memory: a primary volume descriptor and directories, each
//! directory and file on its own sectors. For the unit tests and the `live_iso` fuzz target,
//! which mutates [`coreos_template`]; not a general ISO writer (a directory must fit one
//! sector, and a too-large one panics).

use super::iso9660::SECTOR;

/// A file or directory to place in a test image.
#[derive(Debug, Clone)]
pub enum Node {
    File(&'static str, Vec<u8>),
    Dir(&'static str, Vec<Node>),
}

fn record(name: &[u8], lba: u32, len: u32, dir: bool) -> Vec<u8> {
    let mut r = vec![0u8; 33];
    r[2..6].copy_from_slice(&lba.to_le_bytes());
    r[6..10].copy_from_slice(&lba.to_be_bytes());
    r[10..14].copy_from_slice(&len.to_le_bytes());
    r[14..18].copy_from_slice(&len.to_be_bytes());
    r[25] = if dir { 2 } else { 0 };
    r[32] = name.len() as u8;
    r.extend_from_slice(name);
    if r.len() % 2 == 1 {
        r.push(0);
    }
    r[0] = r.len() as u8;
    r
}

/// Lays out `tree` after the descriptors; returns the image. Each directory and file
/// starts on its own sector; directories fill one sector, records never cross it.
pub fn image(tree: Vec<Node>) -> Vec<u8> {
    let mut img = vec![0u8; 19 * SECTOR as usize];
    let root_lba = place_dir(&mut img, tree);
    let pvd = 16 * SECTOR as usize;
    img[pvd] = 1;
    img[pvd + 1..pvd + 6].copy_from_slice(b"CD001");
    img[pvd + 6] = 1;
    img[pvd + 128..pvd + 130].copy_from_slice(&2048u16.to_le_bytes());
    let root = record(&[0], root_lba, SECTOR as u32, true);
    img[pvd + 156..pvd + 156 + root.len()].copy_from_slice(&root);
    let term = 17 * SECTOR as usize;
    img[term] = 255;
    img[term + 1..term + 6].copy_from_slice(b"CD001");
    img[term + 6] = 1;
    let sectors = (img.len() as u64 / SECTOR) as u32;
    img[pvd + 80..pvd + 84].copy_from_slice(&sectors.to_le_bytes());
    img
}

fn alloc(img: &mut Vec<u8>, len: usize) -> u32 {
    let lba = (img.len() / SECTOR as usize) as u32;
    let sectors = len.div_ceil(SECTOR as usize).max(1);
    img.resize(img.len() + sectors * SECTOR as usize, 0);
    lba
}

fn place_dir(img: &mut Vec<u8>, children: Vec<Node>) -> u32 {
    let lba = alloc(img, SECTOR as usize);
    let mut records = record(&[0], lba, SECTOR as u32, true);
    records.extend(record(&[1], lba, SECTOR as u32, true));
    for child in children {
        let r = match child {
            Node::File(name, data) => {
                let at = alloc(img, data.len());
                let start = at as usize * SECTOR as usize;
                img[start..start + data.len()].copy_from_slice(&data);
                record(name.as_bytes(), at, data.len() as u32, false)
            }
            Node::Dir(name, kids) => {
                let at = place_dir(img, kids);
                record(name.as_bytes(), at, SECTOR as u32, true)
            }
        };
        records.extend(r);
    }
    assert!(records.len() <= SECTOR as usize, "test directory too big");
    let start = lba as usize * SECTOR as usize;
    img[start..start + records.len()].copy_from_slice(&records);
    lba
}

/// A CoreOS-like image: `coreos/kargs.json` naming 64-byte areas in `isolinux/isolinux.cfg`
/// and `EFI/fedora/grub.cfg`, and an empty ignition area named by `coreos/igninfo.json`.
pub fn coreos_template() -> Vec<u8> {
    let area = |prefix: &str, suffix: &str| {
        let mut v = prefix.as_bytes().to_vec();
        v.extend_from_slice(b"console=ttyS0\n");
        v.resize(prefix.len() + 64, b'#');
        v.extend_from_slice(suffix.as_bytes());
        v
    };
    let kargs = br##"{"default":"console=ttyS0","files":[{"path":"isolinux/isolinux.cfg","offset":7},{"path":"EFI/fedora/grub.cfg","offset":6,"pad":"#","end":"\n"}],"size":64}"##;
    image(vec![
        Node::Dir(
            "COREOS",
            vec![
                Node::File(
                    "IGNINFO.JSO;1",
                    br#"{"file":"images/ignition.img"}"#.to_vec(),
                ),
                Node::File("KARGS.JSO;1", kargs.to_vec()),
            ],
        ),
        Node::Dir(
            "EFI",
            vec![Node::Dir(
                "FEDORA",
                vec![Node::File("GRUB.CFG;1", area("linux ", "\ninitrd x\n"))],
            )],
        ),
        Node::Dir("IMAGES", vec![Node::File("IGNITION.IMG;1", vec![0; 4096])]),
        Node::Dir(
            "ISOLINUX",
            vec![Node::File("ISOLINUX.CFG;1", area("append ", "\n"))],
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::embed::{KargsAreas, check_no_ignition};
    use super::super::iso9660::Volume;
    use super::*;

    #[test]
    fn the_fuzz_template_is_a_live_iso_the_appliance_accepts() {
        let img = coreos_template();
        let vol = Volume::open(img.as_slice()).unwrap();
        let k = KargsAreas::read(img.as_slice(), &vol).unwrap();
        assert_eq!((k.areas.len(), k.size), (2, 64));
        assert_eq!(k.current, "console=ttyS0");
        check_no_ignition(img.as_slice(), &vol).unwrap();
    }
}
