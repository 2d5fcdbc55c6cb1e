//! A small ISO with the structure of a CoreOS live ISO, for the per-node ISO tests: ISOLINUX
//! for BIOS and GRUB EFI (El Torito `images/efiboot.img`) for UEFI, both booting
//! `images/pxeboot/vmlinuz` with `images/pxeboot/initrd.img` and the (empty) ignition embed
//! area `images/ignition.img`, and the kernel-argument embed areas that `coreos/kargs.json`
//! describes in `isolinux/isolinux.cfg` and `EFI/fedora/grub.cfg`: the default arguments, a
//! newline, then `#` padding up to the area's size, as the CoreOS image build lays them out.
//! `coreos/igninfo.json` names the ignition area, so coreos-installer accepts the image too.
//!
//! Tools: `xorriso`, `grub-mkimage` (grub-efi-amd64-bin), `mkfs.vfat` (dosfstools), `mmd` and
//! `mcopy` (mtools), and ISOLINUX's files (isolinux, syslinux-common); [`TOOLS`] and [`FILES`]
//! list them for `require_tools`/`require_path`. Nothing needs root or a loop device.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail, ensure};

/// Executables the builder runs.
pub const TOOLS: &[&str] = &["xorriso", "grub-mkimage", "mkfs.vfat", "mmd", "mcopy"];
/// Files the builder copies from Debian's packages.
pub const FILES: &[&str] = &[ISOLINUX_BIN, LDLINUX, ISOHDPFX, GRUB_EFI_MODULES];

const ISOLINUX_BIN: &str = "/usr/lib/ISOLINUX/isolinux.bin";
const LDLINUX: &str = "/usr/lib/syslinux/modules/bios/ldlinux.c32";
const ISOHDPFX: &str = "/usr/lib/ISOLINUX/isohdpfx.bin";
const GRUB_EFI_MODULES: &str = "/usr/lib/grub/x86_64-efi";

/// The paths of the two configs with an area, as `kargs.json` names them (upper-cased, they are
/// the ISO 9660 names).
pub const ISOLINUX_CFG: &str = "isolinux/isolinux.cfg";
pub const GRUB_CFG: &str = "EFI/fedora/grub.cfg";

/// What to build.
#[derive(Debug, Clone)]
pub struct LiveIsoBuilder {
    kernel: PathBuf,
    initramfs: PathBuf,
    default_kargs: String,
    area_size: usize,
    kargs_json: bool,
    ignition: Vec<u8>,
}

impl LiveIsoBuilder {
    /// An image booting `kernel` with `initramfs`, with CoreOS's defaults: a 1139-byte area
    /// (Fedora CoreOS's), an empty 64 KiB ignition area, the arguments below.
    pub fn new(kernel: &Path, initramfs: &Path) -> LiveIsoBuilder {
        LiveIsoBuilder {
            kernel: kernel.to_owned(),
            initramfs: initramfs.to_owned(),
            default_kargs: "console=ttyS0,115200n8 coreos.liveiso=okd-e2e ignition.firstboot \
                            ignition.platform.id=metal"
                .to_owned(),
            area_size: 1139,
            kargs_json: true,
            ignition: vec![0; 64 * 1024],
        }
    }

    /// The arguments the image boots with until they are modified.
    #[must_use]
    pub fn default_kargs(mut self, kargs: &str) -> LiveIsoBuilder {
        kargs.clone_into(&mut self.default_kargs);
        self
    }

    #[must_use]
    pub fn area_size(mut self, size: usize) -> LiveIsoBuilder {
        self.area_size = size;
        self
    }

    /// Leaves out `coreos/kargs.json`: an image without a kernel-argument area, as a plain
    /// distribution ISO is.
    #[must_use]
    pub fn without_kargs_json(mut self) -> LiveIsoBuilder {
        self.kargs_json = false;
        self
    }

    /// The ignition embed area's content (all zero unless set: nothing embedded).
    #[must_use]
    pub fn ignition_area(mut self, bytes: Vec<u8>) -> LiveIsoBuilder {
        self.ignition = bytes;
        self
    }

    /// The area as the image build writes it: arguments, newline, `#` up to the size.
    fn area(&self) -> Result<String> {
        ensure!(
            self.default_kargs.len() < self.area_size,
            "default arguments longer than the area"
        );
        let mut area = format!("{}\n", self.default_kargs);
        area.push_str(&"#".repeat(self.area_size - area.len()));
        Ok(area)
    }

    /// Builds the image at `out`; `work` holds the tree and intermediate files.
    pub fn build(&self, work: &Path, out: &Path) -> Result<()> {
        let root = work.join("iso-root");
        if root.exists() {
            std::fs::remove_dir_all(&root)?;
        }
        let area = self.area()?;
        let mkdir = |p: &str| std::fs::create_dir_all(root.join(p));
        for dir in ["isolinux", "images/pxeboot", "EFI/fedora", "coreos"] {
            mkdir(dir)?;
        }
        let copy = |from: &Path, to: &str| {
            std::fs::copy(from, root.join(to))
                .with_context(|| format!("copying {} to {to}", from.display()))
        };
        copy(Path::new(ISOLINUX_BIN), "isolinux/isolinux.bin")?;
        copy(Path::new(LDLINUX), "isolinux/ldlinux.c32")?;
        copy(&self.kernel, "images/pxeboot/vmlinuz")?;
        copy(&self.initramfs, "images/pxeboot/initrd.img")?;
        std::fs::write(root.join("images/ignition.img"), &self.ignition)?;

        let isolinux_head = "serial 0 115200\ndefault linux\nprompt 0\ntimeout 0\nlabel linux\n  \
             kernel /images/pxeboot/vmlinuz\n  \
             append initrd=/images/pxeboot/initrd.img,/images/ignition.img ";
        std::fs::write(root.join(ISOLINUX_CFG), format!("{isolinux_head}{area}\n"))?;
        let grub_head = "set timeout=0\nserial --unit=0 --speed=115200\n\
             terminal_input serial console\nterminal_output serial console\n\
             menuentry 'CoreOS (Live)' {\n  linux /images/pxeboot/vmlinuz ";
        std::fs::write(
            root.join(GRUB_CFG),
            format!(
                "{grub_head}{area}\n  initrd /images/pxeboot/initrd.img /images/ignition.img\n}}\n"
            ),
        )?;
        if self.kargs_json {
            let json = serde_json::json!({
                "default": self.default_kargs,
                "files": [
                    { "path": GRUB_CFG, "offset": grub_head.len() },
                    { "path": ISOLINUX_CFG, "offset": isolinux_head.len() },
                ],
                "size": self.area_size,
            });
            std::fs::write(root.join("coreos/kargs.json"), json.to_string())?;
        }
        std::fs::write(
            root.join("coreos/igninfo.json"),
            "{\"file\": \"images/ignition.img\"}\n",
        )?;
        self.efiboot(work, &root.join("images/efiboot.img"))?;

        run(Command::new("xorriso").args([
            "-as",
            "mkisofs",
            "-quiet",
            "-o",
            path_str(out)?,
            "-R",
            "-J",
            "-V",
            "OKD-E2E-LIVE",
            "-isohybrid-mbr",
            ISOHDPFX,
            "-b",
            "isolinux/isolinux.bin",
            "-c",
            "isolinux/boot.cat",
            "-no-emul-boot",
            "-boot-load-size",
            "4",
            "-boot-info-table",
            "-eltorito-alt-boot",
            "-e",
            "images/efiboot.img",
            "-no-emul-boot",
            "-isohybrid-gpt-basdat",
            path_str(&root)?,
        ]))
    }

    /// The El Torito EFI image: GRUB with an early config that finds the ISO by a file on it
    /// and reads `EFI/fedora/grub.cfg` from there, as CoreOS's efiboot.img does.
    fn efiboot(&self, work: &Path, out: &Path) -> Result<()> {
        let early = work.join("grub-early.cfg");
        std::fs::write(
            &early,
            "search --no-floppy --file --set=root /coreos/igninfo.json\n\
             set prefix=($root)/EFI/fedora\n\
             configfile ($root)/EFI/fedora/grub.cfg\n",
        )?;
        let grub = work.join("BOOTX64.EFI");
        run(Command::new("grub-mkimage").args([
            "-O",
            "x86_64-efi",
            "-d",
            GRUB_EFI_MODULES,
            "-p",
            "/EFI/fedora",
            "-c",
            path_str(&early)?,
            "-o",
            path_str(&grub)?,
            "iso9660",
            "part_gpt",
            "part_msdos",
            "fat",
            "normal",
            "linux",
            "configfile",
            "search",
            "search_fs_file",
            "echo",
            "serial",
            "terminal",
            "test",
        ]))?;
        let size_kib = std::fs::metadata(&grub)?.len() / 1024 + 512;
        if out.exists() {
            std::fs::remove_file(out)?;
        }
        run(Command::new("mkfs.vfat")
            .args(["-C", path_str(out)?])
            .arg(size_kib.to_string()))?;
        run(Command::new("mmd").args(["-i", path_str(out)?, "::/EFI", "::/EFI/BOOT"]))?;
        run(Command::new("mcopy").args([
            "-i",
            path_str(out)?,
            path_str(&grub)?,
            "::/EFI/BOOT/BOOTX64.EFI",
        ]))
    }
}

/// The offset of the kernel-argument area in the image file at `iso`, found by its content:
/// every occurrence of the default arguments followed by a newline and `#` padding.
pub fn area_offsets(iso: &[u8], default_kargs: &str) -> Vec<usize> {
    let needle = format!("{default_kargs}\n#");
    iso.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle.as_bytes())
        .map(|(i, _)| i)
        .collect()
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
