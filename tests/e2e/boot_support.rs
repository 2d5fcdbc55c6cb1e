//! The boot lab: a services namespace with a bridge, the real `okd-appliance` serving DHCP,
//! TFTP and HTTP on it, Debian's kernel and the test initramfs as the CoreOS artifacts, and
//! tap devices for qemu VMs (harness::vm). Shared by the boot-chain tests.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use harness::initramfs::{BootResult, InitramfsBuilder, Kernel, Outcome, TestInitramfs};
use harness::vm::{Firmware, Vm, VmSpec};
use harness::{Process, Tap, Topology, require_path, require_root, require_tools, wait_until};

use crate::dns_support::{start_appliance_env, write_config};

/// A master that installs to /dev/vda (the VM's virtio disk).
pub const MST0_MAC: &str = "52:54:00:00:00:11";
pub const MST0_IP: &str = "10.99.0.11";
/// mst0's IPv6 address in [`BootLab::dual_stack_config`], and the network's IPv6 gateway there
/// (no machine has it: the node only needs it in its route).
pub const MST0_IP6: &str = "fd99::11";
pub const GATEWAY6: &str = "fd99::fe";
/// The appliance's HTTP listener at its IPv6 address (the bridge's, [`harness::Topology`]).
pub const HTTP6: &str = "[fd99::1]:8080";
/// A worker whose configured install device does not exist in the VM (a wrong `install_dev`).
pub const WRK0_MAC: &str = "52:54:00:00:00:21";
pub const WRK0_IP: &str = "10.99.0.21";
/// A MAC no node has.
pub const STRANGER_MAC: &str = "52:54:00:00:00:99";
/// Size of the VMs' disks.
pub const DISK: u64 = 16 << 20;
/// One boot under TCG: firmware and iPXE (~18 s BIOS, ~22 s UEFI to the first HTTP fetch),
/// kernel and initrd downloads, the kernel up to /init (~4 s) and the installer's steps: 25 to
/// 60 s on an idle machine; the bound leaves room for a loaded one.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(150);

/// At most this many VMs run at once: each TCG guest keeps a core busy, and the machine has two.
const VM_SLOTS: usize = 2;

/// A place among the [`VM_SLOTS`] running VMs, held for the life of one VM test.
pub struct VmSlot(());

impl Drop for VmSlot {
    fn drop(&mut self) {
        let (count, freed) = &SLOTS;
        *count.lock().unwrap_or_else(PoisonError::into_inner) -= 1;
        freed.notify_one();
    }
}

static SLOTS: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// Waits for a VM slot. (A lone mutex would let one VM test hold a test thread idle while
/// another boots; with two test threads the rest of the suite would then stand still.)
pub fn vm_slot() -> VmSlot {
    let (count, freed) = &SLOTS;
    let mut taken = count.lock().unwrap_or_else(PoisonError::into_inner);
    while *taken >= VM_SLOTS {
        taken = freed.wait(taken).unwrap_or_else(PoisonError::into_inner);
    }
    *taken += 1;
    VmSlot(())
}

/// Root, qemu, and the firmware files `specs` use; false (after a loud skip) when missing.
pub fn prerequisites(specs: &[&VmSpec]) -> bool {
    if !require_root() || !require_tools(&["qemu-system-x86_64", "busybox", "ldd"]) {
        return false;
    }
    if !require_path("/dev/net/tun") || !require_path("/usr/lib/ipxe/snponly.efi") {
        return false;
    }
    if let Err(e) = Kernel::find() {
        return harness::skip_or_fail("a Debian kernel (linux-image-amd64)", &format!("{e:#}"));
    }
    // A UEFI VM's disk holds an EFI System Partition made with GRUB and mtools.
    if specs.iter().any(|s| s.firmware == Firmware::Uefi)
        && !require_tools(&harness::efidisk::TOOLS)
    {
        return false;
    }
    specs
        .iter()
        .flat_map(|s| s.required_files())
        .all(require_path)
}

/// The appliance with its config, install directory and artifacts in a temporary directory.
pub struct BootLab {
    // Fields drop in order: the appliance stops before its namespace goes.
    pub app: Process,
    pub topo: Topology,
    dir: tempfile::TempDir,
    _image: TestInitramfs,
}

impl BootLab {
    /// Starts the appliance in a fresh services namespace (`prefix`) with the test initramfs
    /// built by `builder` as the CoreOS initramfs, and the lab's config (a master and a worker).
    pub fn start(prefix: &str, builder: &InitramfsBuilder) -> BootLab {
        BootLab::start_with(prefix, builder, |_| (Self::default_config(), Vec::new()))
    }

    /// [`BootLab::start`] with the config text and the appliance's extra environment that
    /// `setup` returns; it runs once the namespace exists, before the appliance starts (to start
    /// what the appliance will talk to).
    pub fn start_with(
        prefix: &str,
        builder: &InitramfsBuilder,
        setup: impl FnOnce(&Topology) -> (String, Vec<(String, std::ffi::OsString)>),
    ) -> BootLab {
        let topo = Topology::new(prefix).expect("topology");
        let dir = tempfile::tempdir().expect("tempdir");
        let image = builder.build().expect("test initramfs");
        let artifacts = dir.path().join("artifacts");
        image
            .install_as(&artifacts, "kernel", "initramfs.img")
            .expect("artifacts");
        std::fs::write(artifacts.join("rootfs.img"), vec![0x5a; 1 << 20]).expect("rootfs");
        let (text, env) = setup(&topo);
        let config = write_config(dir.path(), &text);
        let app = start_appliance_env(topo.services(), &config, &env);
        BootLab {
            topo,
            app,
            dir,
            _image: image,
        }
    }

    /// [`BootLab::start`] for a host file (`okd-appliance serve HOST.yml`, several clusters):
    /// the bridge at `bridge4` only (no IPv6), the artifacts in `DIR/artifacts` as for
    /// [`BootLab::start`], and `setup(topology, DIR)` adds what the clusters need to the
    /// namespace (their other appliance addresses), writes the host file and its cluster files
    /// into `DIR` (the host's `state_dir` should be `DIR/state`, [`BootLab::state_dir`]), and
    /// returns the host file's path.
    pub(crate) fn start_host(
        prefix: &str,
        builder: &InitramfsBuilder,
        bridge4: &str,
        setup: impl FnOnce(&Topology, &std::path::Path) -> std::path::PathBuf,
    ) -> BootLab {
        let topo = Topology::with_addrs(prefix, bridge4, None).expect("topology");
        let dir = tempfile::tempdir().expect("tempdir");
        let image = builder.build().expect("test initramfs");
        let artifacts = dir.path().join("artifacts");
        image
            .install_as(&artifacts, "kernel", "initramfs.img")
            .expect("artifacts");
        std::fs::write(artifacts.join("rootfs.img"), vec![0x5a; 1 << 20]).expect("rootfs");
        let host = setup(&topo, dir.path());
        let app = start_appliance_env(topo.services(), &host, &[]);
        BootLab {
            topo,
            app,
            dir,
            _image: image,
        }
    }

    fn default_config() -> String {
        format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network:
  interface: br0
  subnet: 10.99.0.0/24
  appliance_ip: 10.99.0.1
  # Machines the config does not list get an address too, and with it the unknown-node script.
  dhcp_pool: {{ start: 10.99.0.100, end: 10.99.0.149 }}
nodes:
  - {{ name: mst0, role: master, mac: "{MST0_MAC}", ip: {MST0_IP} }}
  - {{ name: wrk0, role: worker, mac: "{WRK0_MAC}", ip: {WRK0_IP}, install_dev: /dev/sdz }}
install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  install_dev: /dev/vda
  kernel_args: ["console=ttyS0"]
listen: {{ dns: [], api: [], machine_config: [], ingress_https: [], ingress_http: [] }}
"#
        )
    }

    /// [`BootLab::start`]'s config with `network.ipv6` (the bridge's fd99::/64) and mst0 at
    /// [`MST0_IP6`]: a dual-stack node.
    pub fn dual_stack_config() -> String {
        let config = Self::default_config();
        let mst0 = format!("ip: {MST0_IP} }}");
        assert!(config.contains(&mst0) && config.contains("  appliance_ip: 10.99.0.1\n"));
        config
            .replace(
                "  appliance_ip: 10.99.0.1\n",
                &format!(
                    "  appliance_ip: 10.99.0.1\n  ipv6: {{ subnet: \"fd99::/64\", gateway: \"{GATEWAY6}\", \
                     appliance_ip: \"fd99::1\" }}\n"
                ),
            )
            .replace(&mst0, &format!("ip: {MST0_IP}, ipv6: \"{MST0_IP6}\" }}"))
    }

    /// The directory of the config, `install_dir/`, `artifacts/` and `state/`.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// A tap on the services bridge for one VM.
    pub fn tap(&self, name: &str) -> Tap {
        self.topo.add_tap(name).expect("tap")
    }

    /// Starts a VM on `tap` in the services namespace.
    pub fn vm(&self, spec: &VmSpec) -> Vm {
        Vm::start(self.topo.services(), spec).expect("qemu starts")
    }

    pub fn state_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("state")
    }

    /// What the appliance logged (its journal lines included).
    pub fn log(&self) -> String {
        self.app.stderr()
    }

    /// Waits (bounded) until the appliance's log has `text`.
    pub fn wait_log(&self, text: &str, timeout: Duration) -> bool {
        wait_until(timeout, || self.log().contains(text))
    }

    /// Asserts that the log has `text`, showing the log otherwise.
    pub fn assert_log(&self, text: &str) {
        assert!(
            self.wait_log(text, Duration::from_secs(2)),
            "the appliance's log lacks {text:?}\n{}",
            self.app.log_tails()
        );
    }
}

/// The `ip=` arguments mst0 gets in [`BootLab::dual_stack_config`], as `node kargs` prints them.
pub fn mst0_ip_args() -> String {
    let mac = MST0_MAC.replace(':', "-");
    format!("ip=[{MST0_IP6}]::[{GATEWAY6}]:64:mst0:{mac}:none ip={mac}:dhcp")
}

/// Asserts that the test initramfs read mst0's `ip=` arguments of
/// [`BootLab::dual_stack_config`] as NetworkManager would: both name its NIC, IPv6 static with
/// the gateway, IPv4 left to DHCP (the result's `ip` says what DHCP gave).
pub fn assert_dual_stack(result: &BootResult) {
    assert_eq!(result.get("ip_args"), Some("2"), "{result}");
    assert_eq!(result.get("ip4_method"), Some("auto"), "{result}");
    assert_eq!(result.get("ip6_method"), Some("manual"), "{result}");
    assert_eq!(
        result.get("ip6"),
        Some(format!("{MST0_IP6}/64").as_str()),
        "{result}"
    );
    assert_eq!(result.get("ip6_gw"), Some(GATEWAY6), "{result}");
    assert_eq!(result.get("ip_host"), Some("mst0"), "{result}");
    assert_eq!(result.get("ip"), Some(MST0_IP), "IPv4 by DHCP: {result}");
}

/// The kernel command line the test initramfs printed on `vm`'s console (its first boot's).
pub fn kernel_cmdline(vm: &Vm) -> String {
    let serial = vm.serial();
    serial
        .lines()
        .find_map(|l| l.split("okd-e2e: kernel command line: ").nth(1))
        .unwrap_or_else(|| panic!("no command line on the console\n{}", vm.console_tail()))
        .trim_end()
        .to_owned()
}

/// Asserts a full install of `node` at `ip` by the VM whose MAC is `mac`.
pub fn assert_installed(result: &BootResult, node: &str, ip: &str, mac: &str) {
    assert_eq!(result.outcome, Outcome::Installed, "{result}");
    assert_eq!(result.get("mac"), Some(mac), "{result}");
    assert_eq!(result.get("ip"), Some(ip), "{result}");
    assert_eq!(
        result.get("hostname"),
        Some(node),
        "DHCP host name: {result}"
    );
    assert_eq!(result.get("ignition"), Some("200"), "{result}");
    assert_eq!(result.get("ignition_host"), Some(node), "{result}");
    assert_eq!(result.get("rootfs"), Some("200"), "{result}");
    assert_eq!(result.get("rootfs_length"), Some("1048576"), "{result}");
    assert_eq!(result.get("role"), Some("200"), "{result}");
    assert_eq!(result.get("disk"), Some("/dev/vda"), "{result}");
}
