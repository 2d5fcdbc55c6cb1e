//! The boot lab: a services namespace with a bridge, the real `okd-appliance` serving DHCP,
//! TFTP and HTTP on it, Debian's kernel and the test initramfs as the CoreOS artifacts, and
//! tap devices for qemu VMs (harness::vm). Shared by the boot-chain tests.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use harness::initramfs::{BootResult, InitramfsBuilder, Kernel, Outcome, TestInitramfs};
use harness::vm::{Vm, VmSpec};
use harness::{Process, Tap, Topology, require_path, require_root, require_tools, wait_until};

use crate::dns_support::{start_appliance, write_config};

/// A master that installs to /dev/vda (the VM's virtio disk).
pub const MST0_MAC: &str = "52:54:00:00:00:11";
pub const MST0_IP: &str = "10.99.0.11";
/// A worker whose configured install device does not exist in the VM (a wrong `install_dev`).
pub const WRK0_MAC: &str = "52:54:00:00:00:21";
pub const WRK0_IP: &str = "10.99.0.21";
/// Size of the VMs' disks.
pub const DISK: u64 = 16 << 20;
/// One boot under TCG: firmware and iPXE (~18 s BIOS, ~22 s UEFI to the first HTTP fetch),
/// kernel and initrd downloads, the kernel up to /init (~4 s) and the installer's steps.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// VM tests run one at a time: two TCG guests on a two-core machine (with builds beside them)
/// would make every boot's time unpredictable.
pub fn vm_slot() -> MutexGuard<'static, ()> {
    static SLOT: Mutex<()> = Mutex::new(());
    SLOT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Root, qemu, and the firmware files `specs` use; false (after a loud skip) when missing.
pub fn prerequisites(specs: &[&VmSpec]) -> bool {
    if !require_root() || !require_tools(&["qemu-system-x86_64", "busybox", "ldd"]) {
        return false;
    }
    if !require_path("/dev/net/tun") || !require_path("/usr/lib/ipxe/ipxe.efi") {
        return false;
    }
    if let Err(e) = Kernel::find() {
        return harness::skip_or_fail("a Debian kernel (linux-image-amd64)", &format!("{e:#}"));
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
    _dir: tempfile::TempDir,
    _image: TestInitramfs,
}

impl BootLab {
    /// Starts the appliance in a fresh services namespace (`prefix`) with the test initramfs
    /// built by `builder` as the CoreOS initramfs. `extra_nodes` are more node lines for the
    /// config (`  - { ... }`).
    pub fn start(prefix: &str, builder: &InitramfsBuilder) -> BootLab {
        let topo = Topology::new(prefix).expect("topology");
        let dir = tempfile::tempdir().expect("tempdir");
        let image = builder.build().expect("test initramfs");
        let artifacts = dir.path().join("artifacts");
        image
            .install_as(&artifacts, "kernel", "initramfs.img")
            .expect("artifacts");
        std::fs::write(artifacts.join("rootfs.img"), vec![0x5a; 1 << 20]).expect("rootfs");
        let config = write_config(
            dir.path(),
            &format!(
                r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network:
  interface: br0
  subnet: 10.99.0.0/24
  appliance_ip: 10.99.0.1
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
            ),
        );
        let app = start_appliance(topo.services(), &config);
        BootLab {
            topo,
            app,
            _dir: dir,
            _image: image,
        }
    }

    /// The directory of the config, `install_dir/`, `artifacts/` and `state/`.
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// A tap on the services bridge for one VM.
    pub fn tap(&self, name: &str) -> Tap {
        self.topo.add_tap(name).expect("tap")
    }

    /// Starts a VM on `tap` in the services namespace.
    pub fn vm(&self, spec: &VmSpec) -> Vm {
        Vm::start(self.topo.services(), spec).expect("qemu starts")
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
