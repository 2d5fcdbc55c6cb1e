//! A full state disk loses nothing (issue 39): the host's `state_dir` on a 4 MiB tmpfs that a
//! file then fills. While it is full, a node's ignition fetch is answered 503 (an install step
//! the appliance can't record is not taken: unrecorded, the node would be installed again at
//! every boot), a pool client gets no ACK (its lease can't be made durable), `status` says which
//! state can't be written and why, and DNS and the load balancer serve as before. Once space
//! returns, the same clients succeed without a restart and the faults clear.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{require_root, require_tools, wait_until};

use crate::clusters::{
    TwoSegments, expect_balanced_to, expect_names, expect_own_ignition, get, lease, no_lease,
    okd_on_its_own_segment, test_on_its_own_segment, write_host,
};
use crate::dns_support::start_appliance;

/// A tmpfs mounted at a test's directory, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).expect("mount point");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .expect("mount");
        assert!(out.status.success(), "mount: {out:?}");
        Tmpfs(at.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Writes zeros to `path` until the file system is full (bounded by its size).
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).expect("filler");
    let block = vec![0u8; 64 * 1024];
    for _ in 0..1024 {
        if file
            .write_all(&block)
            .and_then(|()| file.sync_data())
            .is_err()
        {
            return;
        }
    }
    panic!("{} never filled up", path.display());
}

/// `status --json`'s faults, as (service, state, error).
fn faults(state: &Path) -> Vec<(String, String, String)> {
    crate::support::faults(state, "okd")
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
            (s("service"), s("state"), s("error"))
        })
        .collect()
}

#[test]
fn a_full_state_disk_takes_no_step_it_cant_record_and_recovers_by_itself() {
    if !require_root() || !require_tools(&["dig", "busybox", "unshare", "curl", "python3", "mount"])
    {
        return;
    }
    let (okd, test) = (okd_on_its_own_segment(), test_on_its_own_segment());
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-disk-")
        .tempdir()
        .expect("tempdir");
    let state = dir.path().join("state");
    let _tmpfs = Tmpfs::mount(&state, "4m");
    let host = write_host(dir.path(), &[&okd, &test]);
    let lab = TwoSegments::start("dsk", &okd, &test);
    let mut app = start_appliance(lab.topo.services(), &host);
    let m0 = okd.node("master-0");
    crate::clusters::wait_up(&app, &m0);

    let filler = state.join("filler");
    fill(&filler);
    // The install step is not taken: 503, and status says why.
    let url = format!("{}/ignition/{}.ign", okd.http(), m0.name);
    let (code, body) = get(&lab.okd_node, &url);
    assert_eq!(code, "503", "{body}\n{}", app.log_tails());
    assert!(body.contains("can't record"), "{body}");
    let now = faults(&state);
    assert!(
        now.iter()
            .any(|(service, state, error)| service == "install markers"
                && state == "unwritable"
                && error.contains("No space left on device")),
        "{now:?}"
    );
    // A pool client's lease can't be made durable: no ACK.
    no_lease(&lab.seg1, dir.path(), "full", "52:54:00:98:01:77");
    let now = faults(&state);
    assert!(
        now.iter()
            .any(|(service, state, _)| service.starts_with("lease journal ")
                && state == "unwritable"),
        "{now:?}"
    );
    // DNS and the load balancer serve meanwhile.
    expect_names(&lab.okd_node, okd.appliance, &okd);
    expect_balanced_to(&lab.okd_node, okd.appliance, "okd-master-0");

    // Space returns: the same clients succeed, and the faults clear.
    std::fs::remove_file(&filler).expect("remove the filler");
    expect_own_ignition(&lab.okd_node, &okd, &m0);
    let bound = lease(&lab.seg1, dir.path(), "freed", "52:54:00:98:01:77");
    let ip = bound.env.get("ip").map(String::as_str).unwrap_or_default();
    assert!(ip.starts_with("10.98.1.10"), "a pool address: {bound:?}");
    let cleared = wait_until(Duration::from_secs(5), || {
        faults(&state)
            .iter()
            .all(|(_, state, _)| state != "unwritable")
    });
    assert!(cleared, "{:?}", faults(&state));
    app.assert_running()
        .expect("okd-appliance is still running");
}
