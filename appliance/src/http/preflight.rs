//! What the boot server will be asked for, checked before a node asks: every artifact the
//! nodes' iPXE scripts name under `/artifacts/` (kernel, initramfs, rootfs), the base live ISO
//! when a node installs from its ISO, and the iPXE binaries when TFTP is on. A file that is
//! missing, empty or not a regular file is a boot that stops at a 404 on a console nobody
//! watches; one whose size is not what `artifacts fetch` verified there (`crate::fetched`) was
//! changed since, and the nodes would boot something else. `check --install` reports these as
//! errors (and hashes the recorded files too), `check` and `serve` (at start and on reload) as
//! warnings.
//!
//! Architecture invariant: reads file metadata and the fetch's record only (no file's
//! content), never changes anything.

use std::path::PathBuf;

use crate::fetched::Record;
use crate::plan::Plan;
use crate::plan::machines::InstallMedium;

/// One file the nodes will ask for that can't be served as it should, with who asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub path: PathBuf,
    pub why: String,
    /// The nodes whose boot needs it (empty: every network boot).
    pub needed_by: Vec<String>,
    pub finding: Finding,
}

/// What is wrong with a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    /// Not there, or not a file that can be served: the node gets 404.
    Unservable,
    /// Not the file `artifacts fetch` verified there: the node boots something else.
    Changed,
    /// The fetch's record can't be read: the files are not compared with it.
    Record,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.finding == Finding::Record {
            return write!(f, "{}: the artifacts are not compared with it", self.why);
        }
        write!(f, "{} {}", self.path.display(), self.why)?;
        if !self.needed_by.is_empty() {
            write!(f, " (needed by {})", self.needed_by.join(", "))?;
        }
        f.write_str(match self.finding {
            Finding::Unservable => ": a node that asks for it gets 404",
            Finding::Changed => ": the nodes would boot another file than the one verified",
            Finding::Record => "",
        })
    }
}

/// Every file the plan's boots will fetch from this server, with the nodes that need it (empty:
/// every network boot).
pub fn wanted(plan: &Plan) -> Vec<(PathBuf, Vec<String>)> {
    let mut wanted: Vec<(PathBuf, Vec<String>)> = Vec::new();
    let mut want =
        |path: PathBuf, node: Option<&str>| match wanted.iter_mut().find(|(p, _)| *p == path) {
            Some((_, nodes)) => nodes.extend(node.map(str::to_owned)),
            None => wanted.push((path, node.map(str::to_owned).into_iter().collect())),
        };
    let served = format!("{}/artifacts/", plan.files.base_url);
    for b in &plan.boot {
        let network = plan
            .control
            .machine(&b.node)
            .is_none_or(|m| matches!(m.install, InstallMedium::Network));
        let urls: &[&str] = if network {
            &[&b.kernel_url, &b.initramfs_url, &b.rootfs_url]
        } else {
            // The live ISO carries its kernel and initramfs; the rootfs comes over HTTP.
            &[&b.rootfs_url]
        };
        for url in urls {
            if let Some(rest) = url.strip_prefix(&served) {
                want(plan.files.artifacts_dir.join(rest), Some(&b.node));
            }
        }
        if !network {
            want(plan.files.base_iso.clone(), Some(&b.node));
        }
    }
    if !plan.listen.tftp.is_empty() {
        for name in [
            crate::plan::boot::BIOS_BOOT_FILE,
            crate::plan::boot::UEFI_BOOT_FILE,
        ] {
            if let Some(path) = plan.files.ipxe_binary(name) {
                want(path, None);
            }
        }
    }
    for (_, needed_by) in &mut wanted {
        // Every node: say so once rather than list them all.
        if needed_by.len() == plan.boot.len() && plan.boot.len() > 1 {
            needed_by.clear();
        }
    }
    wanted
}

/// What puts the files `found` (and changed ones, `changed`) in place, as commands that run as
/// written for `config` (the file as typed, with `--cluster ID` for a host file's cluster):
/// `artifacts fetch` for the CoreOS artifacts (with
/// `--iso` when the live ISO is one of them), a package for the iPXE binaries. `check` and the
/// start-up log give them after the files they concern.
pub fn hints(config: &str, plan: &Plan, found: &[Missing], changed: bool) -> Vec<String> {
    let files = &plan.files;
    let unservable = || found.iter().filter(|m| m.finding != Finding::Record);
    let iso = unservable().any(|m| m.path == files.base_iso);
    let artifacts = changed
        || unservable()
            .any(|m| m.path != files.base_iso && m.path.starts_with(&files.artifacts_dir));
    let ipxe = unservable().any(|m| m.path.starts_with(&files.ipxe_dir));
    let mut hints = Vec::new();
    if artifacts || iso {
        hints.push(format!(
            "`okd-appliance artifacts fetch {} --stream {}{}` puts the CoreOS artifacts in place, verified (or give --stream the release's own: `openshift-install coreos print-stream-json`)",
            config,
            super::iso::STREAM_HINT,
            if iso { " --iso" } else { "" }
        ));
    }
    if ipxe {
        hints.push(format!(
            "the iPXE binaries come with Debian's ipxe package (`apt-get install ipxe`, into /usr/lib/ipxe), or point install.ipxe_dir (now {}) at a directory holding them",
            files.ipxe_dir.display()
        ));
    }
    hints
}

/// Every file the plan's boots will fetch from this server that can't be served now, or is
/// not the size `artifacts fetch` verified there.
pub fn missing(plan: &Plan) -> Vec<Missing> {
    let dir = &plan.files.artifacts_dir;
    let mut found = Vec::new();
    let record = match Record::read(dir) {
        Ok(r) => r,
        Err(why) => {
            found.push(Missing {
                path: crate::fetched::path(dir),
                why,
                needed_by: Vec::new(),
                finding: Finding::Record,
            });
            None
        }
    };
    for (path, needed_by) in wanted(plan) {
        let finding = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some((Finding::Unservable, "does not exist".to_owned()))
            }
            Err(e) => Some((Finding::Unservable, format!("can't be read: {e}"))),
            Ok(m) if !m.is_file() => {
                Some((Finding::Unservable, "is not a regular file".to_owned()))
            }
            Ok(m) if m.len() == 0 => Some((Finding::Unservable, "is empty".to_owned())),
            Ok(m) => record
                .as_ref()
                .and_then(|r| r.entry(dir, &path))
                .filter(|e| e.size != m.len())
                .map(|e| {
                    (
                        Finding::Changed,
                        format!(
                            "is {} bytes, but the file of {} `artifacts fetch` verified there was {} bytes",
                            m.len(),
                            e.release_text(),
                            e.size
                        ),
                    )
                }),
        };
        if let Some((finding, why)) = finding {
            found.push(Missing {
                path,
                why,
                needed_by,
                finding,
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn plan(dir: &Path, extra: &str) -> Plan {
        let text = format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }}
nodes:
  - {{ name: m0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }}
  - {{ name: m1, role: master, mac: "52:54:00:00:00:03", ip: 10.0.0.3 }}
  - {{ name: m2, role: master, mac: "52:54:00:00:00:04", ip: 10.0.0.4 }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
listen: {{ tftp: [] }}
{extra}"#
        );
        let loaded = crate::config::parse(&text, "t.yml", dir, crate::config::InstallCheck::Skip)
            .unwrap_or_else(|e| panic!("{e:?}"));
        Plan::derive(&loaded.config, 1)
    }

    #[test]
    fn every_artifact_a_script_names_must_be_there() {
        let dir = tempfile::tempdir().unwrap();
        let p = plan(dir.path(), "");
        let first = missing(&p);
        let names: Vec<String> = first
            .iter()
            .map(|m| m.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["kernel", "initramfs.img", "rootfs.img"]);
        assert!(first.iter().all(|m| m.needed_by.is_empty()));
        assert!(
            first[0]
                .to_string()
                .ends_with("kernel does not exist: a node that asks for it gets 404"),
            "{}",
            first[0]
        );
        let artifacts = dir.path().join("artifacts");
        std::fs::create_dir_all(artifacts.join("rootfs.img")).unwrap();
        std::fs::write(artifacts.join("kernel"), b"k").unwrap();
        std::fs::write(artifacts.join("initramfs.img"), b"").unwrap();
        let whys: Vec<String> = missing(&p).iter().map(|m| m.why.clone()).collect();
        assert_eq!(whys, ["is empty", "is not a regular file"]);
        std::fs::write(artifacts.join("initramfs.img"), b"i").unwrap();
        std::fs::remove_dir(artifacts.join("rootfs.img")).unwrap();
        std::fs::write(artifacts.join("rootfs.img"), b"r").unwrap();
        assert_eq!(missing(&p), []);
    }

    /// A file whose size is not what `artifacts fetch` recorded was changed since; a record
    /// that can't be read is said once and compares nothing.
    #[test]
    fn a_file_of_another_size_than_fetched_is_found_from_its_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let p = plan(dir.path(), "");
        let artifacts = dir.path().join("artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        for name in ["kernel", "initramfs.img", "rootfs.img"] {
            std::fs::write(artifacts.join(name), b"12345").unwrap();
        }
        let entry = |size| crate::fetched::Entry {
            release: "40.1".into(),
            stream: "stable".into(),
            arch: "x86_64".into(),
            size,
            sha256: "00".repeat(32),
        };
        let mut record = Record::default();
        record.files.insert("kernel".into(), entry(5));
        record.files.insert("rootfs.img".into(), entry(7));
        record.write(&artifacts).unwrap();
        let found = missing(&p);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].finding, Finding::Changed);
        assert!(found[0].path.ends_with("rootfs.img"));
        assert_eq!(
            found[0].to_string(),
            format!(
                "{} is 5 bytes, but the file of CoreOS 40.1 (stable, x86_64) `artifacts fetch` \
                 verified there was 7 bytes: the nodes would boot another file than the one verified",
                artifacts.join("rootfs.img").display()
            )
        );
        std::fs::write(crate::fetched::path(&artifacts), "not json").unwrap();
        let found = missing(&p);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].finding, Finding::Record);
        assert!(
            found[0]
                .to_string()
                .ends_with(": the artifacts are not compared with it"),
            "{}",
            found[0]
        );
    }
}
