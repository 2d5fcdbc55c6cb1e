//! `Vm`: a qemu (TCG) machine on a tap device of a test topology, booting from the network
//! (or a CD-ROM), with its serial console in a file the test polls against a deadline.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use harness::vm::{Firmware, Vm, VmSpec};
//! # let topo = harness::Topology::new("doc")?;
//! let tap = topo.add_tap("tap0")?;
//! let mut vm = Vm::start(
//!     topo.services(),
//!     &VmSpec::new(Firmware::Bios, "52:54:00:00:00:11", tap.name()).with_disk(64 << 20),
//! )?;
//! vm.wait_for_serial("okd-e2e-result:", Duration::from_secs(90))?;
//! # Ok(()) }
//! ```
//!
//! The recipes that work with Debian 12's packages: BIOS is SeaBIOS with the iPXE ROM of
//! ipxe-qemu on a `virtio-net-pci,disable-legacy=on` NIC (Debian's virtio ROM only matches the
//! modern device id); UEFI is OVMF on q35 (`OVMF_CODE_4M.fd` read-only and a private copy of
//! `OVMF_VARS_4M.fd`, so reboots keep their variables), with `efi-virtio.rom` or, with
//! [`NicRom::Firmware`], no ROM (`romfile=`) so OVMF's own PXE and HTTP boot drive the NIC.
//! `graphics=off` makes SeaBIOS copy its text console (and iPXE's) to the serial port.
//! The machine reboots in place (no `-no-reboot`): a guest reboot is the next boot of the same
//! VM, with the same disk and NVRAM. Dropping the `Vm` kills qemu by PID (see
//! [`crate::Process`]); set `OKD_E2E_KEEP_LOGS=1` to keep the serial log.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::initramfs::{BootResult, results};
use crate::netns::Netns;
use crate::process::Process;

/// The iPXE ROM of ipxe-qemu for virtio-net under BIOS.
pub const BIOS_VIRTIO_ROM: &str = "/usr/lib/ipxe/qemu/pxe-virtio.rom";
/// The iPXE ROM of ipxe-qemu for virtio-net under UEFI.
pub const EFI_VIRTIO_ROM: &str = "/usr/lib/ipxe/qemu/efi-virtio.rom";
/// OVMF's code (read-only) and variable store template (copied per VM).
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

/// Which firmware the machine has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Firmware {
    /// SeaBIOS on the default i440fx machine.
    Bios,
    /// OVMF on q35.
    Uefi,
}

/// What drives the NIC before an operating system does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicRom {
    /// ipxe-qemu's iPXE ROM for the firmware (`pxe-virtio.rom` or `efi-virtio.rom`).
    Ipxe,
    /// No option ROM (`romfile=`): the firmware's own network stack (OVMF's PXE and HTTP boot),
    /// as on a machine without iPXE.
    Firmware,
}

/// Which network boot OVMF tries first when the NIC has no iPXE ROM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UefiNetBoot {
    /// OVMF's order: PXE over IPv4 first.
    Pxe,
    /// PXE switched off through fw_cfg (`opt/org.tianocore/IPv4PXESupport=n` and IPv6), so the
    /// first network boot option is HTTP boot over IPv4.
    Http,
}

/// What to boot first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootFrom {
    Network,
    Cdrom,
    /// The disk, then the CD-ROM (the order for an ISO install: a blank disk is skipped, an
    /// installed one boots), no network boot.
    DiskThenCdrom,
}

/// How to build the qemu command line.
#[derive(Clone, Debug)]
pub struct VmSpec {
    pub firmware: Firmware,
    pub rom: NicRom,
    pub uefi_net_boot: UefiNetBoot,
    /// `52:54:00:..`.
    pub mac: String,
    /// A tap in the namespace qemu runs in (usually a port of the services bridge).
    pub tap: String,
    /// A raw virtio-blk disk of this many bytes, created blank in the VM's directory.
    pub disk_size: Option<u64>,
    /// An ISO attached as a CD-ROM.
    pub cdrom: Option<PathBuf>,
    pub boot: BootFrom,
    pub memory_mib: u32,
    /// Appended to the command line as given.
    pub extra_args: Vec<String>,
}

impl VmSpec {
    /// Network boot through the iPXE ROM, 256 MiB, no disk.
    #[must_use]
    pub fn new(firmware: Firmware, mac: &str, tap: &str) -> VmSpec {
        VmSpec {
            firmware,
            rom: NicRom::Ipxe,
            uefi_net_boot: UefiNetBoot::Pxe,
            mac: mac.to_owned(),
            tap: tap.to_owned(),
            disk_size: None,
            cdrom: None,
            boot: BootFrom::Network,
            memory_mib: 256,
            extra_args: Vec::new(),
        }
    }

    /// Adds a blank raw disk of `bytes` (see [`Vm::disk`]).
    #[must_use]
    pub fn with_disk(mut self, bytes: u64) -> VmSpec {
        self.disk_size = Some(bytes);
        self
    }

    /// Drives the NIC with `rom`.
    #[must_use]
    pub fn with_rom(mut self, rom: NicRom) -> VmSpec {
        self.rom = rom;
        self
    }

    /// Which network boot OVMF tries first (meaningful with [`NicRom::Firmware`]).
    #[must_use]
    pub fn with_uefi_net_boot(mut self, boot: UefiNetBoot) -> VmSpec {
        self.uefi_net_boot = boot;
        self
    }

    /// Attaches `iso` as a CD-ROM and boots from it.
    #[must_use]
    pub fn with_cdrom(mut self, iso: &Path) -> VmSpec {
        self.cdrom = Some(iso.to_owned());
        self.boot = BootFrom::Cdrom;
        self
    }

    /// Boots from `boot` first.
    #[must_use]
    pub fn with_boot(mut self, boot: BootFrom) -> VmSpec {
        self.boot = boot;
        self
    }

    /// The files this spec needs (for `require_path`): qemu's ROM and OVMF's images.
    #[must_use]
    pub fn required_files(&self) -> Vec<&'static str> {
        let mut files = Vec::new();
        match (self.firmware, self.rom) {
            (Firmware::Bios, NicRom::Ipxe) => files.push(BIOS_VIRTIO_ROM),
            (Firmware::Uefi, NicRom::Ipxe) => files.push(EFI_VIRTIO_ROM),
            (_, NicRom::Firmware) => {}
        }
        if self.firmware == Firmware::Uefi {
            files.extend([OVMF_CODE, OVMF_VARS]);
        }
        files
    }

    /// The qemu arguments, with the VM's files in `dir`.
    fn args(&self, dir: &Path) -> Vec<String> {
        let mut a: Vec<String> = [
            "-accel",
            "tcg",
            "-display",
            "none",
            "-monitor",
            "none",
            "-nodefaults",
            "-no-user-config",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let serial = dir.join("serial.log");
        a.extend(["-serial".into(), format!("file:{}", serial.display())]);
        a.extend(["-m".into(), self.memory_mib.to_string()]);
        match self.firmware {
            Firmware::Bios => a.extend(["-machine".into(), "pc,graphics=off".into()]),
            Firmware::Uefi => {
                a.extend(["-machine".into(), "q35,graphics=off".into()]);
                a.extend([
                    "-drive".into(),
                    format!("if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}"),
                    "-drive".into(),
                    format!(
                        "if=pflash,format=raw,unit=1,file={}",
                        dir.join("OVMF_VARS.fd").display()
                    ),
                ]);
                if self.rom == NicRom::Firmware && self.uefi_net_boot == UefiNetBoot::Http {
                    for family in ["IPv4PXESupport", "IPv6PXESupport"] {
                        a.extend([
                            "-fw_cfg".into(),
                            format!("name=opt/org.tianocore/{family},string=n"),
                        ]);
                    }
                }
            }
        }
        let romfile = match (self.firmware, self.rom) {
            (Firmware::Bios, NicRom::Ipxe) => BIOS_VIRTIO_ROM,
            (Firmware::Uefi, NicRom::Ipxe) => EFI_VIRTIO_ROM,
            (_, NicRom::Firmware) => "",
        };
        let net_boot = if self.boot == BootFrom::Network {
            ",bootindex=1"
        } else {
            ""
        };
        a.extend([
            "-netdev".into(),
            format!("tap,id=n0,ifname={},script=no,downscript=no", self.tap),
            "-device".into(),
            format!(
                "virtio-net-pci,disable-legacy=on,netdev=n0,mac={},romfile={romfile}{net_boot}",
                self.mac
            ),
        ]);
        if self.disk_size.is_some() {
            let disk_boot = if self.boot == BootFrom::DiskThenCdrom {
                0
            } else {
                2
            };
            a.extend([
                "-drive".into(),
                format!(
                    "if=none,id=disk0,format=raw,file={}",
                    dir.join("disk.raw").display()
                ),
                "-device".into(),
                format!("virtio-blk-pci,drive=disk0,bootindex={disk_boot}"),
            ]);
        }
        if let Some(iso) = &self.cdrom {
            let cd_boot = match self.boot {
                BootFrom::Cdrom => ",bootindex=0",
                BootFrom::DiskThenCdrom => ",bootindex=1",
                BootFrom::Network => "",
            };
            a.extend([
                "-drive".into(),
                format!(
                    "if=none,id=cd0,media=cdrom,readonly=on,format=raw,file={}",
                    iso.display()
                ),
            ]);
            let bus = match self.firmware {
                // q35's AHCI controller; the pc machine's IDE.
                Firmware::Uefi => "ide-cd,bus=ide.0",
                Firmware::Bios => "ide-cd,bus=ide.1",
            };
            a.extend(["-device".into(), format!("{bus},drive=cd0{cd_boot}")]);
        }
        a.extend(self.extra_args.iter().cloned());
        a
    }
}

/// A running VM. Drop kills qemu (by PID, through [`Process`]) and removes its files.
#[derive(Debug)]
pub struct Vm {
    process: Process,
    serial: PathBuf,
    disk: Option<PathBuf>,
    started: Instant,
    // Last: the files must outlive qemu.
    dir: Option<tempfile::TempDir>,
}

impl Vm {
    /// Starts qemu in `ns` (the namespace holding `spec.tap`).
    pub fn start(ns: &Netns, spec: &VmSpec) -> Result<Vm> {
        let dir = tempfile::Builder::new()
            .prefix("okd-e2e-vm-")
            .tempdir()
            .context("can't create the VM directory")?;
        if spec.firmware == Firmware::Uefi {
            std::fs::copy(OVMF_VARS, dir.path().join("OVMF_VARS.fd"))
                .with_context(|| format!("can't copy {OVMF_VARS} (Debian: apt install ovmf)"))?;
        }
        let disk = match spec.disk_size {
            Some(size) => {
                let path = dir.path().join("disk.raw");
                crate::initramfs::blank_disk(&path, size)?;
                // What makes the disk bootable on UEFI once an install writes its sector 0.
                if spec.firmware == Firmware::Uefi {
                    crate::efidisk::place_esp(&path)?;
                }
                Some(path)
            }
            None => None,
        };
        let serial = dir.path().join("serial.log");
        std::fs::write(&serial, b"").context("can't create the serial log")?;
        let mut argv = vec!["qemu-system-x86_64".to_owned()];
        argv.extend(spec.args(dir.path()));
        let process = ns
            .spawn(&format!("qemu-{}", spec.mac.replace(':', "")), &argv)?
            .with_grace(Duration::from_secs(2));
        Ok(Vm {
            process,
            serial,
            disk,
            started: Instant::now(),
            dir: Some(dir),
        })
    }

    /// The raw disk image, if the spec asked for one (readable while the VM runs).
    #[must_use]
    pub fn disk(&self) -> Option<&Path> {
        self.disk.as_deref()
    }

    /// Path of the serial console's log.
    #[must_use]
    pub fn serial_path(&self) -> &Path {
        &self.serial
    }

    /// Everything the serial console printed so far (lossy UTF-8, escape sequences kept).
    #[must_use]
    pub fn serial(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.serial).unwrap_or_default()).into_owned()
    }

    /// Time since qemu started.
    #[must_use]
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// True while qemu runs.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// The result lines of the test initramfs printed so far, one per boot.
    #[must_use]
    pub fn results(&self) -> Vec<BootResult> {
        results(&self.serial())
    }

    /// Waits until the serial console has printed `needle` at least `count` times. Fails at
    /// the deadline or as soon as qemu exits, with the end of the console in the message.
    pub fn wait_for_serial_count(
        &mut self,
        needle: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let text = self.serial();
            if text.matches(needle).count() >= count {
                return Ok(());
            }
            if !self.process.is_running() {
                bail!(
                    "qemu exited before the console printed {needle:?} x{count}\n{}\n{}",
                    self.console_tail(),
                    self.process.log_tails()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "the console did not print {needle:?} x{count} within {timeout:?}\n{}",
                    self.console_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until the serial console has printed `needle` (see [`Vm::wait_for_serial_count`]).
    pub fn wait_for_serial(&mut self, needle: &str, timeout: Duration) -> Result<()> {
        self.wait_for_serial_count(needle, 1, timeout)
    }

    /// Waits for the `n`-th result line (1-based) and returns it.
    pub fn wait_for_result(&mut self, n: usize, timeout: Duration) -> Result<BootResult> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.results().into_iter().nth(n - 1) {
                return Ok(r);
            }
            if !self.process.is_running() || Instant::now() >= deadline {
                bail!(
                    "no result line #{n} within {timeout:?} (qemu {})\n{}",
                    if self.process.is_running() {
                        "running"
                    } else {
                        "exited"
                    },
                    self.console_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits at most `timeout` for qemu to exit (the guest powered off); true if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<bool> {
        Ok(self.process.wait_timeout(timeout)?.is_some())
    }

    /// The last 60 lines of the console, control characters made visible, for messages.
    #[must_use]
    pub fn console_tail(&self) -> String {
        let text = self.serial().replace('\r', "\n");
        let lines: Vec<String> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.escape_debug().to_string())
            .collect();
        format!(
            "---- serial console ({}), last 60 lines ----\n{}\n---- end of console ----",
            self.serial.display(),
            lines[lines.len().saturating_sub(60)..].join("\n")
        )
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.console_tail());
        }
        // qemu first (Process's Drop does it; stop now so the files are not in use).
        let _ = self.process.stop();
        if std::env::var_os("OKD_E2E_KEEP_LOGS").is_some_and(|v| v == "1")
            && let Some(dir) = self.dir.take()
        {
            eprintln!("harness: kept VM files in {}", dir.keep().display());
        }
    }
}
