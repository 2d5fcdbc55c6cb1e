//! A UEFI VM's install disk: what a CoreOS install makes bootable on UEFI firmware, cut down to
//! what the boot-chain tests need to see which way a machine booted.
//!
//! The disk starts with an EFI System Partition's FAT file system at [`ESP_START_LBA`] holding
//! `\EFI\BOOT\BOOTX64.EFI` (the removable-media path every UEFI boot manager tries on a disk:
//! UEFI 2.10 section 3.5.1.1), a GRUB image made by Debian's `grub-mkstandalone` whose
//! embedded config prints sector [`BANNER_LBA`] of the first disk on the console (OVMF copies
//! the console to the serial port) and then waits. Sector 0 stays blank, so the partition is
//! found only once the test initramfs "installs" the disk: it writes sector 0 with the BIOS
//! boot code, an MBR partition entry of type 0xEF for the ESP (EDK2's PartitionDxe reads MBR
//! partition tables as well as GPT) and the banner in sector [`BANNER_LBA`]. So a blank disk
//! is not bootable on either firmware, and an installed one prints
//! `okd-e2e: booted from disk of NODE` on both.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context as _, Result, bail};

/// Where the ESP starts (1 MiB, as partitioning tools align it).
pub const ESP_START_LBA: u64 = 2048;
/// The ESP's size in sectors (8 MiB).
pub const ESP_SECTORS: u64 = 16384;
/// The sector the installed disk's banner is written to (and the EFI loader prints).
pub const BANNER_LBA: u64 = 2;

/// The tools [`esp_image`] runs (for `require_tool`).
pub const TOOLS: [&str; 4] = ["grub-mkstandalone", "mkfs.vfat", "mmd", "mcopy"];

/// The loader's config: the banner sector, then a wait (the test reads the console and stops
/// the VM; a loader that returned would send the firmware on to its next boot option).
const GRUB_CFG: &str = "cat (hd0)2+1\nsleep 3600\n";

/// The ESP image, made once per test process.
pub fn esp_image() -> Result<&'static Path> {
    static IMAGE: OnceLock<Result<(tempfile::TempDir, PathBuf), String>> = OnceLock::new();
    match IMAGE.get_or_init(|| build().map_err(|e| format!("{e:#}"))) {
        Ok((_, path)) => Ok(path),
        Err(e) => bail!("{e}"),
    }
}

fn build() -> Result<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-esp-")
        .tempdir()
        .context("can't create a temporary directory")?;
    let cfg = dir.path().join("grub.cfg");
    std::fs::write(&cfg, GRUB_CFG).context("can't write grub.cfg")?;
    let loader = dir.path().join("BOOTX64.EFI");
    run(Command::new("grub-mkstandalone")
        .args(["-O", "x86_64-efi", "--install-modules=cat sleep normal"])
        .args(["--locales=", "--themes=", "--fonts="])
        .arg("-o")
        .arg(&loader)
        .arg(format!("boot/grub/grub.cfg={}", cfg.display())))?;
    let image = dir.path().join("esp.img");
    let kib = ESP_SECTORS / 2;
    run(Command::new("mkfs.vfat")
        .args(["-F", "12", "-n", "ESP", "-C"])
        .arg(&image)
        .arg(kib.to_string()))?;
    run(Command::new("mmd")
        .arg("-i")
        .arg(&image)
        .args(["::/EFI", "::/EFI/BOOT"]))?;
    run(Command::new("mcopy")
        .arg("-i")
        .arg(&image)
        .arg(&loader)
        .arg("::/EFI/BOOT/BOOTX64.EFI"))?;
    Ok((dir, image))
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("can't run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Writes the ESP into the (blank) raw disk image at `disk`.
pub fn place_esp(disk: &Path) -> Result<()> {
    use std::io::{Seek as _, SeekFrom, Write as _};
    let image = std::fs::read(esp_image()?).context("can't read the ESP image")?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(disk)
        .with_context(|| format!("can't open {}", disk.display()))?;
    f.seek(SeekFrom::Start(ESP_START_LBA * 512))?;
    f.write_all(&image)
        .with_context(|| format!("can't write the ESP to {}", disk.display()))?;
    Ok(())
}
