//! `Netns`: a network namespace created for one test (`ip netns add`), with `lo` up, deleted on
//! drop after killing whatever still runs inside it.
//!
//! Names are `PREFIX-PID-N` (PREFIX up to 4 ASCII letters/digits, PID of the test process, N a
//! per-process base-36 counter), at most 15 characters so they can double as interface names.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use nix::sched::{CloneFlags, setns};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::cmd;
use crate::process::Process;
use crate::wait::{pid_alive, wait_until};

/// Longest namespace (and interface) name the kernel accepts for interfaces: IFNAMSIZ - 1.
pub const MAX_NAME_LEN: usize = 15;
/// Longest caller prefix: 4 + "-" + 7-digit PID + "-" + 2 counter digits = 15.
pub const MAX_PREFIX_LEN: usize = 4;

/// Serialises `ip netns add/del`: concurrent first uses race on making /run/netns a mount point.
static NETNS_LOCK: Mutex<()> = Mutex::new(());
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace owned by the test. Cloning shares it: the namespace is deleted when the
/// last clone (including those held by bridges, veths, taps and nodes) is dropped.
#[derive(Clone, Debug)]
pub struct Netns {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: String,
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

/// A fresh unique name `PREFIX-PID-N` (see the module docs).
pub fn unique_name(prefix: &str) -> Result<String> {
    if prefix.is_empty()
        || prefix.len() > MAX_PREFIX_LEN
        || !prefix.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        bail!("namespace prefix {prefix:?} must be 1..={MAX_PREFIX_LEN} ASCII letters or digits");
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = format!("{prefix}-{}-{}", std::process::id(), base36(n));
    if name.len() > MAX_NAME_LEN {
        bail!("namespace name {name} is longer than {MAX_NAME_LEN} characters");
    }
    Ok(name)
}

/// Names of all network namespaces (`ip netns list`).
pub fn list_netns() -> Result<Vec<String>> {
    Ok(cmd::ip(["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// True when a namespace called `name` exists. Errors from `ip` count as "exists" so that a
/// cleanup assertion never passes by accident.
#[must_use]
pub fn netns_exists(name: &str) -> bool {
    list_netns().map_or(true, |names| names.iter().any(|n| n == name))
}

/// PIDs of the processes whose network namespace is `name` (`ip netns pids`).
fn pids_of(name: &str) -> Result<Vec<u32>> {
    Ok(cmd::ip(["netns", "pids", name])?
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// The per-namespace /etc overlay `ip netns exec` applies.
fn etc_dir(name: &str) -> PathBuf {
    PathBuf::from("/etc/netns").join(name)
}

impl Netns {
    /// Creates a namespace named `PREFIX-PID-N` and brings its `lo` up.
    pub fn new(prefix: &str) -> Result<Netns> {
        let name = unique_name(prefix)?;
        {
            let _guard = NETNS_LOCK
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            cmd::ip(["netns", "add", &name])?;
        }
        // `ip netns exec` bind-mounts /etc/netns/NAME/* over /etc: a DHCP client (or its hooks)
        // writing /etc/resolv.conf inside the namespace then writes this private copy, never
        // the host's.
        let etc = etc_dir(&name);
        std::fs::create_dir_all(&etc)?;
        std::fs::write(etc.join("resolv.conf"), "# private to test namespace\n")?;
        let ns = Netns {
            inner: Arc::new(Inner { name }),
        };
        ns.ip(["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name (as in `ip netns list`).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// `/run/netns/NAME`, the bind mount that keeps the namespace alive.
    #[must_use]
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(self.name())
    }

    /// A `Command` running `argv` inside the namespace (`ip netns exec NAME argv...`). The PID of
    /// the spawned child is the program's own: `ip netns exec` execs it.
    pub fn exec<I, S>(&self, argv: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = cmd::ip_command();
        cmd.args(["netns", "exec", self.name()]).args(argv);
        cmd
    }

    /// Runs `ip -n NAME ARGS...` and returns its stdout.
    pub fn ip<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = cmd::ip_command();
        cmd.args(["-n", self.name()]).args(args);
        cmd::run(&mut cmd)
    }

    /// Spawns `argv` inside the namespace as a guarded [`Process`] (killed and reaped on drop).
    pub fn spawn<I, S>(&self, label: &str, argv: I) -> Result<Process>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Process::spawn(label, self.exec(argv))
    }

    /// Runs `f` on a thread that has entered this namespace: sockets it creates belong to the
    /// namespace (and keep working from any thread afterwards). A panic in `f` is re-raised.
    pub fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send,
        F: FnOnce() -> T + Send,
    {
        let file = File::open(self.path())
            .with_context(|| format!("cannot open {}", self.path().display()))?;
        std::thread::scope(|s| {
            let handle = std::thread::Builder::new()
                .name(format!("netns-{}", self.name()))
                .spawn_scoped(s, move || -> Result<T> {
                    setns(&file, CloneFlags::CLONE_NEWNET).context("setns(CLONE_NEWNET)")?;
                    Ok(f())
                })
                .context("cannot spawn a thread")?;
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// PIDs of the processes running inside the namespace.
    pub fn pids(&self) -> Result<Vec<u32>> {
        pids_of(self.name())
    }

    /// Adds an address (`10.99.0.1/24`, `fd99::1/64`) to `ifname`; IPv6 skips duplicate address
    /// detection so the address is usable at once.
    pub fn add_addr(&self, ifname: &str, cidr: &str) -> Result<()> {
        if cidr.contains(':') {
            self.ip(["addr", "add", cidr, "dev", ifname, "nodad"])?;
        } else {
            self.ip(["addr", "add", cidr, "dev", ifname])?;
        }
        Ok(())
    }

    /// Sets `ifname` up.
    pub fn link_up(&self, ifname: &str) -> Result<()> {
        self.ip(["link", "set", ifname, "up"]).map(drop)
    }

    /// True when `ifname` exists in the namespace.
    #[must_use]
    pub fn has_link(&self, ifname: &str) -> bool {
        self.ip(["link", "show", "dev", ifname]).is_ok()
    }

    /// Waits (bounded by `timeout`) until a TCP connection to `addr` from inside the namespace
    /// succeeds.
    pub fn wait_tcp(&self, addr: SocketAddr, timeout: Duration) -> Result<()> {
        let ok = self.run(|| {
            wait_until(timeout, || {
                TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
            })
        })?;
        if !ok {
            bail!(
                "nothing accepted TCP on {addr} in {} within {timeout:?}",
                self.name()
            );
        }
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let me = std::process::id();
        // Kill stragglers by PID (never ourselves), a bounded number of rounds.
        for _ in 0..5 {
            let pids: Vec<u32> = pids_of(&self.name)
                .unwrap_or_default()
                .into_iter()
                .filter(|&p| p != me)
                .collect();
            if pids.is_empty() {
                break;
            }
            for &pid in &pids {
                if let Ok(raw) = i32::try_from(pid) {
                    let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
                }
            }
            wait_until(Duration::from_secs(2), || {
                pids.iter().all(|&p| !pid_alive(p))
            });
        }
        let _ = std::fs::remove_dir_all(etc_dir(&self.name));
        let _guard = NETNS_LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut last = None;
        for _ in 0..5 {
            match cmd::ip(["netns", "del", &self.name]) {
                Ok(_) => return,
                Err(_) if list_netns().is_ok_and(|l| !l.contains(&self.name)) => return,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Some(e) = last {
            let _ = writeln!(
                std::io::stderr(),
                "harness: cannot delete namespace {}: {e:#}",
                self.name
            );
        }
    }
}
