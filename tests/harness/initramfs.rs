//! A tiny busybox initramfs for Debian's real kernel that plays a CoreOS node installing from
//! the appliance, and what it leaves behind: the result line on the serial console and the
//! "installed" marker on the VM's disk.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use harness::initramfs::{InitramfsBuilder, Kernel};
//! let kernel = Kernel::find()?; // /boot/vmlinuz-* with its /lib/modules
//! let image = InitramfsBuilder::new(&kernel).build()?; // a cpio.gz in a temporary directory
//! // Serve kernel.vmlinuz() and image.path() as the CoreOS kernel and initramfs artifacts,
//! // boot a VM (harness::vm), then read its serial console:
//! # let serial = String::new();
//! for result in harness::initramfs::results(&serial) {
//!     println!("{}: {:?}", result.outcome, result.get("ip"));
//! }
//! # Ok(()) }
//! ```
//!
//! What `/init` does (its source is `initramfs/init.sh`, commented step by step): loads the
//! virtio modules, reads the `ip=` arguments that name its NIC as NetworkManager's initramfs
//! merges them (a static IPv6 address and gateway; IPv4 by DHCP unless they disable it; each
//! reported in the result line), takes its IPv4 address by DHCP with busybox `udhcpc` and its
//! own event script (or a static address, [`InitramfsBuilder::static_address`]), GETs
//! `coreos.inst.ignition_url` (through [`InitramfsBuilder::ignition_host`] when set),
//! sends a HEAD to `coreos.live.rootfs_url` (a live ISO boot has none: its rootfs is on the
//! ISO), and, when `coreos.inst.install_dev` exists, GETs
//! the role config the node ignition merges (`ignition.config.merge[].source`, what the
//! installed system's Ignition fetches on its first boot) and writes to that disk a boot
//! sector that prints [`DISK_BOOT_BANNER`] on COM1 plus an [`InstallMarker`] in sector 1.
//! It then prints one [`BootResult`] line (`okd-e2e-result: outcome=... key=value ...`) and
//! reboots; after an error it powers off, so a broken boot never loops. A missing install
//! device ends as [`Outcome::InstallFailed`] after the ignition fetch and before the role
//! config, which is how coreos-installer fails on a wrong `install_dev`.
//!
//! The kernel must get `console=ttyS0` for the lines to reach the serial console.
//!
//! Nothing here needs root: the archive is written by the `cpio` crate (device nodes included)
//! and compressed with `flate2`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use cpio::newc::{Builder as Entry, trailer};

/// Source of `/init`.
const INIT: &str = include_str!("initramfs/init.sh");
/// Source of the udhcpc event script.
const UDHCPC_SCRIPT: &str = include_str!("initramfs/udhcpc.sh");

/// Modules `/init` loads unless built in: the virtio PCI transport, virtio-net and virtio-blk
/// (their dependencies are added from `modules.dep`).
pub const DEFAULT_MODULES: &[&str] = &["virtio_pci", "virtio_net", "virtio_blk"];

/// What a disk boot of an installed VM prints on the serial console, followed by ` of NODE`.
pub const DISK_BOOT_BANNER: &str = "okd-e2e: booted from disk";
/// Prefix of the result line on the serial console.
pub const RESULT_PREFIX: &str = "okd-e2e-result:";
/// Prefix of the marker in sector 1 of the install disk.
pub const MARKER_PREFIX: &str = "okd-e2e-installed:";

/// Where the banner text starts in the boot sector (right after [`boot_code`]).
const BANNER_OFFSET: u16 = 0x16;

/// The MBR partition entry (sector 0, byte 446) the install writes for the EFI System
/// Partition of a UEFI VM's disk ([`crate::efidisk`]): not active, CHS fields unused
/// (0xfe 0xff 0xff, "use the LBA"), type 0xEF, then the first sector and the count.
fn esp_partition_entry() -> [u8; 16] {
    use crate::efidisk::{ESP_SECTORS, ESP_START_LBA};
    let mut entry = [0u8; 16];
    entry[1..4].copy_from_slice(&[0xfe, 0xff, 0xff]);
    entry[4] = 0xef;
    entry[5..8].copy_from_slice(&[0xfe, 0xff, 0xff]);
    let start = u32::try_from(ESP_START_LBA).expect("fits");
    let count = u32::try_from(ESP_SECTORS).expect("fits");
    entry[8..12].copy_from_slice(&start.to_le_bytes());
    entry[12..16].copy_from_slice(&count.to_le_bytes());
    entry
}

/// Real-mode code at 0x7c00: print the NUL-terminated text at 0x7c00 + `BANNER_OFFSET`
/// byte by byte to the first serial port (0x3f8), then halt for good.
fn boot_code() -> Vec<u8> {
    let [lo, hi] = (0x7c00 + BANNER_OFFSET).to_le_bytes();
    let code = vec![
        0xfa, // cli
        0x31, 0xc0, // xor ax, ax
        0x8e, 0xd8, // mov ds, ax
        0xbe, lo, hi, // mov si, banner
        0xba, 0xf8, 0x03, // mov dx, 0x3f8
        0xac, // next: lodsb
        0x84, 0xc0, // test al, al
        0x74, 0x03, // jz halt
        0xee, // out dx, al
        0xeb, 0xf8, // jmp next
        0xf4, // halt: hlt
        0xeb, 0xfd, // jmp halt
    ];
    debug_assert_eq!(code.len(), usize::from(BANNER_OFFSET));
    code
}

/// Debian's kernel for the test VMs and its module tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// `uname -r` of the kernel, e.g. `6.1.0-56-amd64`.
    pub version: String,
    /// `/boot/vmlinuz-VERSION`.
    pub vmlinuz: PathBuf,
    /// `/lib/modules/VERSION`.
    pub modules: PathBuf,
}

impl Kernel {
    /// `$OKD_E2E_KERNEL` (a vmlinuz whose name ends in `-VERSION`), or the newest
    /// `/boot/vmlinuz-*` that has a `/lib/modules/VERSION/modules.dep` (linux-image-amd64).
    pub fn find() -> Result<Kernel> {
        if let Some(path) = std::env::var_os("OKD_E2E_KERNEL") {
            return Kernel::at(Path::new(&path));
        }
        let mut found: Vec<Kernel> = std::fs::read_dir("/boot")
            .context("can't list /boot")?
            .filter_map(|e| Kernel::at(&e.ok()?.path()).ok())
            .collect();
        found.sort_by_key(|k| version_key(&k.version));
        found.pop().context(
            "no /boot/vmlinuz-VERSION with /lib/modules/VERSION/modules.dep \
             (Debian: apt install linux-image-amd64)",
        )
    }

    /// The kernel at `vmlinuz` (named `vmlinuz-VERSION`), with `/lib/modules/VERSION`.
    pub fn at(vmlinuz: &Path) -> Result<Kernel> {
        let name = vmlinuz
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("{} has no file name", vmlinuz.display()))?;
        let version = name
            .strip_prefix("vmlinuz-")
            .with_context(|| format!("{} is not named vmlinuz-VERSION", vmlinuz.display()))?;
        let modules = Path::new("/lib/modules").join(version);
        if !vmlinuz.is_file() {
            bail!("{} is not a file", vmlinuz.display());
        }
        if !modules.join("modules.dep").is_file() {
            bail!("{} has no modules.dep", modules.display());
        }
        Ok(Kernel {
            version: version.to_owned(),
            vmlinuz: vmlinuz.to_owned(),
            modules,
        })
    }
}

/// `6.1.0-56-amd64` -> numbers first, so 6.10 sorts after 6.9.
fn version_key(version: &str) -> Vec<u64> {
    version
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// How `/init` gets its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Network {
    /// DHCP with busybox udhcpc (the reserved address and host name, from the appliance).
    Dhcp,
    /// A fixed address, no DHCP: for a machine that claims another node's MAC but sits at an
    /// address of its own.
    Static { address: Ipv4Addr, prefix_len: u8 },
}

/// Builds a [`TestInitramfs`]. Defaults: DHCP, [`DEFAULT_MODULES`], the busybox in `PATH`.
#[derive(Clone, Debug)]
pub struct InitramfsBuilder {
    kernel: Kernel,
    network: Network,
    modules: Vec<String>,
    busybox: Option<PathBuf>,
    ignition_host: Option<String>,
    first_boot: bool,
}

impl InitramfsBuilder {
    #[must_use]
    pub fn new(kernel: &Kernel) -> InitramfsBuilder {
        InitramfsBuilder {
            kernel: kernel.clone(),
            network: Network::Dhcp,
            modules: DEFAULT_MODULES.iter().map(|m| (*m).to_owned()).collect(),
            busybox: None,
            ignition_host: None,
            first_boot: true,
        }
    }

    /// Write the disk without playing the installed system's first boot: no role config is
    /// fetched (field `role=skipped`), so the appliance sees an installer that fetched the
    /// ignition and a node whose installed system has not reported yet, as between
    /// coreos-installer's reboot and Ignition's fetch on the disk.
    #[must_use]
    pub fn without_first_boot(mut self) -> InitramfsBuilder {
        self.first_boot = false;
        self
    }

    /// Fetch the ignition from `host` (`HOST:PORT`, an IPv6 address in brackets) instead of
    /// the host and port of `coreos.inst.ignition_url`, keeping its path: with the appliance's
    /// IPv6 address, the fetch comes from the node's IPv6 address, which the appliance must
    /// know as the node's.
    #[must_use]
    pub fn ignition_host(mut self, host: &str) -> InitramfsBuilder {
        self.ignition_host = Some(host.to_owned());
        self
    }

    /// Use `address/prefix_len` instead of DHCP.
    #[must_use]
    pub fn static_address(mut self, address: Ipv4Addr, prefix_len: u8) -> InitramfsBuilder {
        self.network = Network::Static {
            address,
            prefix_len,
        };
        self
    }

    /// Also load `module` (a name as `modprobe` takes it, e.g. `ahci`, `sr_mod`) and what it
    /// depends on.
    #[must_use]
    pub fn module(mut self, module: &str) -> InitramfsBuilder {
        self.modules.push(module.to_owned());
        self
    }

    /// Use this busybox binary instead of the one in `PATH`.
    #[must_use]
    pub fn busybox(mut self, path: &Path) -> InitramfsBuilder {
        self.busybox = Some(path.to_owned());
        self
    }

    /// Writes the image (`initramfs.img`, gzip-compressed newc cpio) into a fresh temporary
    /// directory that lives as long as the returned value.
    pub fn build(&self) -> Result<TestInitramfs> {
        let busybox = match &self.busybox {
            Some(p) => p.clone(),
            None => crate::which("busybox")
                .context("busybox not found in PATH (apt install busybox)")?,
        };
        let dir = tempfile::Builder::new()
            .prefix("okd-e2e-initramfs-")
            .tempdir()
            .context("can't create a temporary directory")?;
        let path = dir.path().join("initramfs.img");
        let modules = module_closure(&self.kernel.modules, &self.modules)?;
        let mut archive = Archive::default();
        for d in [
            "bin",
            "dev",
            "etc",
            "etc/okd-e2e",
            "lib",
            "lib/modules",
            "proc",
            "sys",
            "tmp",
            "run",
        ] {
            archive.dir(d);
        }
        // The kernel opens /dev/console for /init before anything is mounted.
        archive.char_device("dev/console", 5, 1);
        archive.file("init", 0o755, INIT.as_bytes().to_vec());
        archive.file("bin/busybox", 0o755, read(&busybox)?);
        archive.symlink("bin/sh", "busybox");
        for lib in shared_libraries(&busybox)? {
            let inside = lib
                .strip_prefix("/")
                .with_context(|| format!("library path {} is not absolute", lib.display()))?;
            archive.file(&inside.to_string_lossy(), 0o755, read(&lib)?);
        }
        archive.file(
            "etc/okd-e2e/udhcpc.sh",
            0o755,
            UDHCPC_SCRIPT.as_bytes().to_vec(),
        );
        archive.file("etc/okd-e2e/bootcode", 0o644, boot_code());
        archive.file(
            "etc/okd-e2e/partition",
            0o644,
            esp_partition_entry().to_vec(),
        );
        archive.file(
            "etc/okd-e2e/config",
            0o644,
            self.config_text()?.into_bytes(),
        );
        let mut list = String::new();
        for module in &modules {
            let name = module
                .file_name()
                .context("module without a file name")?
                .to_string_lossy()
                .into_owned();
            archive.file(
                &format!("lib/modules/{name}"),
                0o644,
                read(&self.kernel.modules.join(module))?,
            );
            list.push_str(&name);
            list.push('\n');
        }
        archive.file("etc/okd-e2e/modules", 0o644, list.into_bytes());
        let file = std::fs::File::create(&path)
            .with_context(|| format!("can't create {}", path.display()))?;
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        archive.write(&mut gz)?;
        gz.finish()
            .and_then(|mut f| f.flush())
            .with_context(|| format!("can't write {}", path.display()))?;
        Ok(TestInitramfs {
            path,
            kernel: self.kernel.clone(),
            modules,
            _dir: dir,
        })
    }

    /// `/etc/okd-e2e/config`, sourced by `/init`.
    fn config_text(&self) -> Result<String> {
        let mut text = format!("BANNER_OFFSET={BANNER_OFFSET}\n");
        if !self.first_boot {
            text.push_str("FIRST_BOOT=no\n");
        }
        if let Some(host) = &self.ignition_host {
            if !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "[]:.-".contains(c))
            {
                bail!("ignition host {host:?} is not HOST:PORT");
            }
            text.push_str(&format!("IGNITION_HOST='{host}'\n"));
        }
        match self.network {
            Network::Dhcp => text.push_str("NETWORK=dhcp\n"),
            Network::Static {
                address,
                prefix_len,
            } => {
                if prefix_len == 0 || prefix_len > 32 {
                    bail!("prefix length {prefix_len} is not 1..=32");
                }
                let mask = Ipv4Addr::from(u32::MAX << (32 - u32::from(prefix_len)));
                text.push_str(&format!(
                    "NETWORK=static\nSTATIC_IP={address}\nSTATIC_MASK={mask}\n"
                ));
            }
        }
        Ok(text)
    }
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("can't read {}", path.display()))
}

/// A built image. The file is removed when this is dropped.
#[derive(Debug)]
pub struct TestInitramfs {
    path: PathBuf,
    kernel: Kernel,
    modules: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

impl TestInitramfs {
    /// The gzip-compressed cpio archive.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The kernel it was built for (boot `kernel().vmlinuz` with it).
    #[must_use]
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The modules `/init` loads, in load order, relative to the kernel's module directory.
    #[must_use]
    pub fn modules(&self) -> &[PathBuf] {
        &self.modules
    }

    /// Copies the kernel and the image into `dir` under the given names (the appliance's
    /// `artifacts_dir`, with the names its config gives the kernel and the initramfs).
    pub fn install_as(&self, dir: &Path, kernel_name: &str, initramfs_name: &str) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("can't create {}", dir.display()))?;
        for (from, name) in [
            (self.kernel.vmlinuz.as_path(), kernel_name),
            (self.path.as_path(), initramfs_name),
        ] {
            std::fs::copy(from, dir.join(name))
                .with_context(|| format!("can't copy {} to {}", from.display(), dir.display()))?;
        }
        Ok(())
    }
}

/// The files (relative to `modules_dir`) of `wanted` and everything they depend on, in an
/// order where dependencies load first. Built-in modules are left out; a module that is
/// neither built in nor in `modules.dep` is an error, as is a compressed module (busybox's
/// insmod here reads plain `.ko` files only).
pub fn module_closure(modules_dir: &Path, wanted: &[String]) -> Result<Vec<PathBuf>> {
    let dep_text = std::fs::read_to_string(modules_dir.join("modules.dep"))
        .with_context(|| format!("can't read {}/modules.dep", modules_dir.display()))?;
    let builtin: BTreeSet<String> = std::fs::read_to_string(modules_dir.join("modules.builtin"))
        .unwrap_or_default()
        .lines()
        .map(module_name)
        .collect();
    let mut deps: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for line in dep_text.lines() {
        let Some((file, rest)) = line.split_once(':') else {
            continue;
        };
        let needs = rest.split_whitespace().map(str::to_owned).collect();
        deps.insert(module_name(file), (file.to_owned(), needs));
    }
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    fn visit(
        file: &str,
        deps: &BTreeMap<String, (String, Vec<String>)>,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<PathBuf>,
    ) {
        if !seen.insert(file.to_owned()) {
            return;
        }
        if let Some((_, needs)) = deps.get(&module_name(file)) {
            for need in needs {
                visit(need, deps, seen, order);
            }
        }
        order.push(PathBuf::from(file));
    }
    for name in wanted {
        let key = name.replace('-', "_");
        if let Some((file, _)) = deps.get(&key) {
            visit(file, &deps, &mut seen, &mut order);
        } else if !builtin.contains(&key) {
            bail!(
                "module {name} is neither in {}/modules.dep nor built in",
                modules_dir.display()
            );
        }
    }
    if let Some(compressed) = order
        .iter()
        .find(|p| p.extension().is_some_and(|e| e != "ko"))
    {
        bail!(
            "{} is compressed; the test initramfs loads plain .ko files",
            compressed.display()
        );
    }
    Ok(order)
}

/// `kernel/drivers/net/virtio_net.ko` -> `virtio_net` (dashes and underscores are one).
fn module_name(file: &str) -> String {
    let base = file.rsplit('/').next().unwrap_or(file);
    let stem = base.split('.').next().unwrap_or(base);
    stem.replace('-', "_")
}

/// The shared libraries `binary` loads (`ldd`), none for a static binary.
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("can't run ldd (Debian: libc-bin)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        if text.contains("not a dynamic executable")
            || String::from_utf8_lossy(&out.stderr).contains("not a dynamic executable")
        {
            return Ok(Vec::new());
        }
        bail!(
            "ldd {} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)".
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/')),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

/// Entries of a newc archive, written in order (directories before what they hold).
#[derive(Default)]
struct Archive {
    entries: Vec<(Entry, Vec<u8>)>,
    dirs: BTreeSet<String>,
}

impl Archive {
    fn dir(&mut self, path: &str) {
        if self.dirs.insert(path.to_owned()) {
            self.entries
                .push((Entry::new(path).mode(0o040_755).nlink(2), Vec::new()));
        }
    }

    fn file(&mut self, path: &str, perm: u32, data: Vec<u8>) {
        // Parents first: the kernel's unpacker does not create missing directories.
        let mut parent = String::new();
        for part in path
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map_or(&[][..], |(_, p)| p)
        {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            self.dir(&parent.clone());
        }
        self.entries
            .push((Entry::new(path).mode(0o100_000 | perm), data));
    }

    fn symlink(&mut self, path: &str, target: &str) {
        self.entries
            .push((Entry::new(path).mode(0o120_777), target.as_bytes().to_vec()));
    }

    fn char_device(&mut self, path: &str, major: u32, minor: u32) {
        self.entries.push((
            Entry::new(path)
                .mode(0o020_600)
                .rdev_major(major)
                .rdev_minor(minor),
            Vec::new(),
        ));
    }

    fn write(self, out: &mut impl std::io::Write) -> Result<()> {
        for (ino, (entry, data)) in self.entries.into_iter().enumerate() {
            let ino = u32::try_from(ino + 1).context("too many archive entries")?;
            let len = u32::try_from(data.len()).context("file too large for newc")?;
            let mut w = entry.ino(ino).write(&mut *out, len);
            w.write_all(&data).context("can't write the archive")?;
            w.finish().context("can't write the archive")?;
        }
        trailer(out).context("can't write the archive")?;
        Ok(())
    }
}

/// How a boot of the test initramfs ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Ignition, rootfs and role config fetched; the disk holds the boot sector and marker.
    Installed,
    /// Ignition fetched, then the install device was missing (a wrong `install_dev`): no role
    /// config fetched, nothing written. The VM reboots.
    InstallFailed,
    /// A step failed (`step`, `detail` and any HTTP status in the fields). The VM powers off.
    Failed,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Installed => "installed",
            Outcome::InstallFailed => "install-failed",
            Outcome::Failed => "failed",
        })
    }
}

/// One `okd-e2e-result:` line: the outcome and the `key=value` fields `/init` recorded
/// (`mac`, `ip`, `hostname`, `dhcp_server` (the DHCP server identifier, with DHCP),
/// `ignition` (HTTP status), `ignition_sha256`, `ignition_host`,
/// `rootfs`, `rootfs_length`, `role`, `role_bytes`, `disk`, `step`, `detail`, `install_dev`;
/// with `ip=` arguments for its NIC `ip_args` (how many), `ip4_method` (`auto` or
/// `disabled`), `ip6_method` (`auto`, `manual` or `disabled`) and `ip_host`, and with a static
/// IPv6 address `ip6` (`ADDR/PREFIX`) and `ip6_gw`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootResult {
    pub outcome: Outcome,
    pub fields: BTreeMap<String, String>,
}

impl BootResult {
    /// A field's value.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// Parses the text after a prefix: `outcome=X key=value ...`. `None` unless the outcome is
    /// known and every word is `key=value`.
    #[must_use]
    pub fn parse(text: &str) -> Option<BootResult> {
        let mut fields = BTreeMap::new();
        for word in text.split_whitespace() {
            let (k, v) = word.split_once('=')?;
            fields.insert(k.to_owned(), v.to_owned());
        }
        let outcome = match fields.remove("outcome")?.as_str() {
            "installed" => Outcome::Installed,
            "install-failed" => Outcome::InstallFailed,
            "failed" => Outcome::Failed,
            _ => return None,
        };
        Some(BootResult { outcome, fields })
    }
}

impl fmt::Display for BootResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "outcome={}", self.outcome)?;
        for (k, v) in &self.fields {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// Every complete result line in a serial console's text, in order (one per boot of the
/// image). A line counts once its end of line is there: the console is read while the guest
/// writes it, and a line cut short would parse as a result with fields missing.
#[must_use]
pub fn results(serial: &str) -> Vec<BootResult> {
    let complete = serial.rfind(['\n', '\r']).map_or("", |end| &serial[..end]);
    complete
        .split(['\n', '\r'])
        .filter_map(|line| line.split_once(RESULT_PREFIX))
        .filter_map(|(_, rest)| BootResult::parse(rest))
        .collect()
}

/// The marker `/init` wrote to sector 1 of the install disk: the fields of the installing
/// boot's result line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallMarker {
    pub fields: BTreeMap<String, String>,
}

impl InstallMarker {
    /// A field's value.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// Reads the marker from a raw disk image; `None` when the disk holds none (a blank or
    /// never-installed disk).
    pub fn read(disk: &Path) -> Result<Option<InstallMarker>> {
        let mut f =
            std::fs::File::open(disk).with_context(|| format!("can't open {}", disk.display()))?;
        let mut sectors = [0u8; 1024];
        let n = std::io::Read::read(&mut f, &mut sectors)
            .with_context(|| format!("can't read {}", disk.display()))?;
        Ok(InstallMarker::parse_sectors(&sectors[..n]))
    }

    /// The marker in the first two sectors, if sector 0 is the test's boot sector and sector 1
    /// starts with [`MARKER_PREFIX`].
    #[must_use]
    pub fn parse_sectors(bytes: &[u8]) -> Option<InstallMarker> {
        if bytes.len() < 1024 || bytes[510..512] != [0x55, 0xaa] || !bytes.starts_with(&boot_code())
        {
            return None;
        }
        let sector = &bytes[512..1024];
        let end = sector
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(sector.len());
        let text = std::str::from_utf8(&sector[..end]).ok()?;
        let rest = text.strip_prefix(MARKER_PREFIX)?;
        let mut fields = BTreeMap::new();
        for word in rest.split_whitespace() {
            let (k, v) = word.split_once('=')?;
            fields.insert(k.to_owned(), v.to_owned());
        }
        Some(InstallMarker { fields })
    }
}

/// Creates a blank (sparse) raw disk image of `size` bytes for a VM.
pub fn blank_disk(path: &Path, size: u64) -> Result<()> {
    let f =
        std::fs::File::create(path).with_context(|| format!("can't create {}", path.display()))?;
    f.set_len(size)
        .with_context(|| format!("can't size {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_parse_between_console_noise() {
        let serial = "iPXE 1.0\r\nokd-e2e: test initramfs started\r\n\x1b[0m\
                      okd-e2e-result: outcome=installed mac=52:54:00:00:00:11 ip=10.99.0.11 \
                      ignition=200\r\nokd-e2e-result: garbage\nokd-e2e-result: outcome=failed \
                      step=ignition ignition=403\n";
        let all = results(serial);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0].outcome, Outcome::Installed);
        assert_eq!(all[0].get("ip"), Some("10.99.0.11"));
        assert_eq!(all[1].outcome, Outcome::Failed);
        assert_eq!(all[1].get("ignition"), Some("403"));
        assert_eq!(BootResult::parse("outcome=maybe"), None);
        assert_eq!(BootResult::parse("ip=1 outcome=installed junk"), None);
    }

    /// The console is read while the guest writes it: a result line without its end of line
    /// yet is not a result, or a cut-short line would pass for one with fields missing.
    #[test]
    fn a_result_line_counts_only_once_it_is_complete() {
        let line = "okd-e2e-result: outcome=installed mac=52:54:00:00:00:11 hostname=mst0";
        let cut = &line[..line.len() - 2];
        assert_eq!(results(cut), vec![]);
        assert_eq!(results(&format!("boot\r\n{cut}")), vec![]);
        let whole = results(&format!("boot\r\n{line}\r\n"));
        assert_eq!(whole.len(), 1);
        assert_eq!(whole[0].get("hostname"), Some("mst0"));
    }

    #[test]
    fn markers_need_the_boot_sector_and_the_prefix() {
        let mut disk = vec![0u8; 1024];
        assert_eq!(InstallMarker::parse_sectors(&disk), None);
        disk[..boot_code().len()].copy_from_slice(&boot_code());
        disk[510] = 0x55;
        disk[511] = 0xaa;
        let marker = b"okd-e2e-installed: mac=52:54:00:00:00:11 role=200\n";
        disk[512..512 + marker.len()].copy_from_slice(marker);
        let m = InstallMarker::parse_sectors(&disk).unwrap();
        assert_eq!(m.get("role"), Some("200"));
        disk[0] = 0;
        assert_eq!(InstallMarker::parse_sectors(&disk), None);
    }

    #[test]
    fn the_boot_code_prints_the_banner_that_follows_it() {
        let code = boot_code();
        assert_eq!(code.len(), usize::from(BANNER_OFFSET));
        // mov si, imm16 points right behind the code.
        assert_eq!(code[5], 0xbe);
        assert_eq!(
            u16::from_le_bytes([code[6], code[7]]),
            0x7c00 + BANNER_OFFSET
        );
    }

    /// `/init`'s reading of `ip=` against NetworkManager's (nmi-cmdline-reader.c): run in the
    /// host's busybox sh with what `okd-appliance` writes and the forms around it.
    #[test]
    fn ip_arguments_are_merged_as_network_manager_does() {
        let Some(busybox) = crate::which("busybox") else {
            assert!(!crate::skip_or_fail("busybox", "not found in PATH"));
            return;
        };
        let function = |name: &str| {
            let start = INIT.find(&format!("\n{name}() {{")).expect(name);
            let end = start + INIT[start..].find("\n}\n").expect("end") + 3;
            INIT[start..end].to_owned()
        };
        let read = |cmdline: &str| {
            let script = format!(
                "fail() {{ echo \"failed: $*\"; exit 0; }}\n{}{}\n\
                 cmdline='{cmdline}'\nread_ip_args eth0 52:54:00:00:00:11\n\
                 echo \"$ip_args $ip4_method $ip6_method $ip6_addr/$ip6_prefix $ip6_gw $ip_host\"\n",
                function("split_ip"),
                function("read_ip_args"),
            );
            let out = Command::new(&busybox)
                .args(["sh", "-c", &script])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
        };
        let v6 = "ip=[fd99::11]::[fd99::fe]:64:mst0:52-54-00-00-00-11:none";
        let v4 = "ip=52-54-00-00-00-11:dhcp";
        assert_eq!(
            read(&format!("console=ttyS0 {v6} {v4}")),
            "2 auto manual fd99::11/64 fd99::fe mst0"
        );
        // The other order: `none` after `dhcp` disables IPv4, as in NetworkManager.
        assert_eq!(
            read(&format!("{v4} {v6}")),
            "2 disabled manual fd99::11/64 fd99::fe mst0"
        );
        assert_eq!(
            read("ip=[fd99::11]:::56:mst0:eth0:none ip=eth0:dhcp"),
            "2 auto manual fd99::11/56  mst0"
        );
        assert_eq!(read("ip=[fd99::11]:::56::eth1:none"), "0 auto auto /");
        assert_eq!(read("quiet"), "0 auto auto /");
        assert_eq!(
            read("ip=eth0:dhcp6"),
            "failed: cmdline ip=eth0:dhcp6: method dhcp6 (not read here)"
        );
        assert!(read("ip=10.0.0.5::10.0.0.1:24:h:eth0:none").starts_with("failed:"));
    }

    #[test]
    fn module_dependencies_load_first() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("modules.dep"),
            "kernel/a/virtio_net.ko: kernel/a/net_failover.ko kernel/a/failover.ko kernel/a/virtio.ko\n\
             kernel/a/net_failover.ko: kernel/a/failover.ko\n\
             kernel/a/failover.ko:\n\
             kernel/a/virtio.ko:\n\
             kernel/a/zipped.ko.xz:\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("modules.builtin"),
            "kernel/b/virtio_blk.ko\n",
        )
        .unwrap();
        let order = module_closure(
            dir.path(),
            &["virtio-net".to_owned(), "virtio_blk".to_owned()],
        )
        .unwrap();
        let pos = |n: &str| order.iter().position(|p| p.ends_with(n)).unwrap();
        assert_eq!(order.len(), 4, "{order:?}");
        assert!(pos("failover.ko") < pos("net_failover.ko"));
        assert!(pos("net_failover.ko") < pos("virtio_net.ko"));
        assert!(pos("virtio.ko") < pos("virtio_net.ko"));
        let err = module_closure(dir.path(), &["nope".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("neither"), "{err}");
        let err = module_closure(dir.path(), &["zipped".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("compressed"), "{err}");
    }

    #[test]
    fn newer_kernels_sort_last() {
        let mut v = vec!["6.10.0-1-amd64", "6.9.0-3-amd64", "6.1.0-56-amd64"];
        v.sort_by_key(|s| version_key(s));
        assert_eq!(v, ["6.1.0-56-amd64", "6.9.0-3-amd64", "6.10.0-1-amd64"]);
    }
}
