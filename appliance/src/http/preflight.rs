//! What the boot server will be asked for, checked before a node asks: every artifact the
//! nodes' iPXE scripts name under `/artifacts/` (kernel, initramfs, rootfs), the base live ISO
//! when a node installs from its ISO, and the iPXE binaries when TFTP is on. A file that is
//! missing, empty or not a regular file is a boot that stops at a 404 on a console nobody
//! watches. `check --install` reports these as errors, `check` and `serve` (at start and on
//! reload) as warnings.
//!
//! Architecture invariant: reads file metadata only (no content), never changes anything.

use std::path::{Path, PathBuf};

use crate::plan::Plan;
use crate::plan::machines::InstallMedium;

/// One file the nodes will ask for that can't be served, with who asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub path: PathBuf,
    pub why: String,
    /// The nodes whose boot needs it (empty: every network boot).
    pub needed_by: Vec<String>,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.path.display(), self.why)?;
        if !self.needed_by.is_empty() {
            write!(f, " (needed by {})", self.needed_by.join(", "))?;
        }
        Ok(())
    }
}

/// Every file the plan's boots will fetch from this server that can't be served now.
pub fn missing(plan: &Plan) -> Vec<Missing> {
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
    wanted
        .into_iter()
        .filter_map(|(path, mut needed_by)| {
            let why = unusable(&path)?;
            // Every node: say so once rather than list them all.
            if needed_by.len() == plan.boot.len() && plan.boot.len() > 1 {
                needed_by.clear();
            }
            Some(Missing {
                path,
                why,
                needed_by,
            })
        })
        .collect()
}

/// Why `path` can't be served, or `None` when it can (a non-empty regular file, after links).
fn unusable(path: &Path) -> Option<String> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("does not exist".into()),
        Err(e) => Some(format!("can't be read: {e}")),
        Ok(m) if !m.is_file() => Some("is not a regular file".into()),
        Ok(m) if m.len() == 0 => Some("is empty".into()),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
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
            first[0].to_string().ends_with("kernel does not exist"),
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
}
