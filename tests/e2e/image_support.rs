//! Helpers for the services VM image test (image.rs): the VM's serial console, driven as an
//! operator would (log in as root, type commands), a seed disk made with mkfs.vfat and mcopy,
//! and the qemu command line.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::{Netns, Process, wait_until};

pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";
/// The file system label the image copies its config from (images/rootfs/usr/lib/okd-appliance/prepare).
pub const SEED_LABEL: &str = "OKDSEED";

/// Runs a program to completion; panics with its output when it fails.
#[track_caller]
pub fn run_checked(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A vfat image labelled [`SEED_LABEL`] holding everything in `content` (files and folders).
pub fn seed_disk(content: &Path, image: &Path) {
    // 8 MiB: room for a config and an install directory's ignition files.
    run_checked(
        Command::new("mkfs.vfat")
            .args(["-n", SEED_LABEL, "-C"])
            .arg(image)
            .arg("8192"),
    );
    let mut entries: Vec<PathBuf> = std::fs::read_dir(content)
        .expect("seed content")
        .map(|e| e.expect("seed entry").path())
        .collect();
    entries.sort();
    run_checked(
        Command::new("mcopy")
            .arg("-s")
            .arg("-i")
            .arg(image)
            .args(&entries)
            .arg("::/"),
    );
}

/// The qemu command line: q35, OVMF, TCG, the image (through a copy-on-write overlay) as the
/// boot disk, the seed disk, one virtio NIC on `tap` at PCI slot 5 (so the guest names it
/// `enp0s5`), and the serial port on a Unix socket (`serial.sock`, logged to `serial.log`).
pub fn qemu_argv(dir: &Path, overlay: &Path, seed: &Path, tap: &str, mac: &str) -> Vec<String> {
    let p = |p: &Path| p.to_str().expect("UTF-8 path").to_owned();
    [
        "qemu-system-x86_64",
        "-accel",
        "tcg",
        "-machine",
        "q35",
        "-m",
        "1024",
        "-smp",
        "1",
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
        "-drive",
        &format!("if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}"),
        "-drive",
        &format!(
            "if=pflash,format=raw,unit=1,file={}",
            p(&dir.join("vars.fd"))
        ),
        "-drive",
        &format!("file={},format=qcow2,if=none,id=root", p(overlay)),
        "-device",
        "virtio-blk-pci,drive=root,bootindex=0",
        "-drive",
        &format!("file={},format=raw,if=none,id=seed,readonly=on", p(seed)),
        "-device",
        "virtio-blk-pci,drive=seed",
        "-netdev",
        &format!("tap,id=n0,ifname={tap},script=no,downscript=no"),
        // No option ROM: the VM boots from its disk, never from the network.
        "-device",
        &format!("virtio-net-pci,netdev=n0,mac={mac},addr=0x5,romfile="),
        "-chardev",
        &format!(
            "socket,id=ser0,path={},server=on,wait=off,logfile={}",
            p(&dir.join("serial.sock")),
            p(&dir.join("serial.log"))
        ),
        "-serial",
        "chardev:ser0",
        "-pidfile",
        &p(&dir.join("qemu.pid")),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Starts qemu in `ns` (a guarded process: stopped by PID on drop).
pub fn start_vm(ns: &Netns, argv: &[String]) -> Process {
    ns.spawn("qemu", argv)
        .expect("spawn qemu")
        .with_grace(Duration::from_secs(10))
}

/// What a command typed at the console printed (stdout and stderr) and its exit status.
#[derive(Debug, Clone)]
pub struct Typed {
    pub output: String,
    pub status: i32,
}

/// The VM's serial console: everything the guest writes is collected by a reader thread;
/// commands are typed as text. Prints the console's tail when the test fails.
#[derive(Debug)]
pub struct Console {
    stream: UnixStream,
    seen: Arc<Mutex<Vec<u8>>>,
    /// Commands typed so far: their markers are numbered.
    typed: u32,
    log: PathBuf,
}

impl Console {
    /// Connects to qemu's serial socket (it appears shortly after qemu starts).
    pub fn connect(socket: &Path, log: &Path) -> Console {
        let mut stream = None;
        wait_until(Duration::from_secs(30), || {
            stream = UnixStream::connect(socket).ok();
            stream.is_some()
        });
        let stream = stream.unwrap_or_else(|| panic!("no serial console at {}", socket.display()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = stream.try_clone().expect("clone the console socket");
        let sink = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            // Ends when qemu closes the socket or the console is dropped (shutdown).
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                // Without carriage returns: positions are byte offsets into what is kept.
                sink.lock()
                    .expect("console buffer")
                    .extend(buf[..n].iter().filter(|b| **b != b'\r'));
            }
        });
        Console {
            stream,
            seen,
            typed: 0,
            log: log.to_owned(),
        }
    }

    /// The console's output between two positions, as text.
    fn slice(&self, from: usize, to: usize) -> String {
        let seen = self.seen.lock().expect("console buffer");
        String::from_utf8_lossy(&seen[from.min(seen.len())..to.min(seen.len())]).into_owned()
    }

    /// How much the console has printed so far (a position for [`Console::wait_for`]).
    pub fn mark(&self) -> usize {
        self.seen.lock().expect("console buffer").len()
    }

    /// Waits until `needle` appears after position `from`; returns the position after it.
    pub fn wait_for(&self, from: usize, needle: &str, timeout: Duration) -> Option<usize> {
        let needle = needle.as_bytes();
        let mut at = None;
        wait_until(timeout, || {
            let seen = self.seen.lock().expect("console buffer");
            at = seen
                .get(from..)
                .and_then(|t| t.windows(needle.len()).position(|w| w == needle))
                .map(|i| from + i + needle.len());
            at.is_some()
        });
        at
    }

    /// Types `text` (a newline is not added).
    pub fn send(&mut self, text: &str) {
        self.stream
            .write_all(text.as_bytes())
            .expect("write to the serial console");
    }

    /// Logs in as root (the image's root has no password) and makes the shell quiet and plain:
    /// no echo, no colours, no pager. Bounded by `timeout` in all.
    pub fn login(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no login prompt\n{}", self.tail());
            let from = self.mark();
            self.send("\n");
            if self
                .wait_for(from, "login: ", left.min(Duration::from_secs(30)))
                .is_none()
            {
                continue;
            }
            let from = self.mark();
            self.send("root\n");
            if self
                .wait_for(from, "root@okd-services:", Duration::from_secs(60))
                .is_some()
            {
                break;
            }
        }
        self.send(
            "stty -echo; export TERM=dumb SYSTEMD_PAGER= SYSTEMD_COLORS=0 PS1='$ '; \
             unset PROMPT_COMMAND\n",
        );
        let out = self.type_command("echo logged-in as $(id -un)", Duration::from_secs(60));
        assert_eq!(out.output.trim(), "logged-in as root", "{out:?}");
    }

    /// Types `command` at the shell and returns what it printed and its exit status. The
    /// output is framed by numbered markers the command line itself does not contain (`%s`
    /// splits them), so neither echo nor earlier output can be mistaken for it.
    pub fn type_command(&mut self, command: &str, timeout: Duration) -> Typed {
        self.typed += 1;
        let n = self.typed;
        let from = self.mark();
        self.send(&format!(
            "printf 'OKD%sBEGIN-{n}\\n' ''; {{ {command}\n}} 2>&1; printf 'OKD%sEND-{n}-%d\\n' '' $?\n"
        ));
        let begin = format!("OKDBEGIN-{n}\n");
        let end = format!("OKDEND-{n}-");
        let Some(start) = self.wait_for(from, &begin, timeout) else {
            panic!(
                "`{command}` did not start within {timeout:?}\n{}",
                self.tail()
            );
        };
        let Some(after_end) = self.wait_for(start, &end, timeout) else {
            panic!(
                "`{command}` did not finish within {timeout:?}\n{}",
                self.tail()
            );
        };
        let Some(status_end) = self.wait_for(after_end, "\n", Duration::from_secs(10)) else {
            panic!("`{command}`: no exit status\n{}", self.tail());
        };
        let output = self.slice(start, after_end - end.len());
        let status = self
            .slice(after_end, status_end - 1)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("`{command}`: bad exit status\n{}", self.tail()));
        Typed { output, status }
    }

    /// Types `command` and requires exit status 0; returns its output.
    #[track_caller]
    pub fn ok(&mut self, command: &str, timeout: Duration) -> String {
        let typed = self.type_command(command, timeout);
        assert_eq!(
            typed.status, 0,
            "`{command}` exited {}:\n{}",
            typed.status, typed.output
        );
        typed.output
    }

    /// The last lines the console printed (from qemu's log, which also has what came before
    /// the test connected).
    pub fn tail(&self) -> String {
        let text = std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).replace('\r', ""))
            .unwrap_or_else(|_| self.slice(0, usize::MAX));
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "---- serial console ({}), last 60 lines ----\n{}\n---- end of console ----",
            self.log.display(),
            lines[lines.len().saturating_sub(60)..].join("\n")
        )
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.tail());
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
