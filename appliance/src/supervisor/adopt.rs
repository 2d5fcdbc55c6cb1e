//! A host file's first start over a state directory one cluster file used: that cluster's
//! install state (its nodes' install markers, its install phases, its DHCP leases) lies at the
//! top, where a host keeps none (docs/design/several-clusters.md, §1.3). Ignored, it would send
//! installed nodes back to their installer at their next network boot.
//!
//! A host of one cluster takes it over: each entry is renamed durably into `clusters/<id>/`
//! (the leases into the segment's `dhcp/<interface>/`). A host of several can't know whose it
//! is: `serve` refuses to start, changes nothing, and says what to move where.

use std::path::{Path, PathBuf};

use crate::plan::views::{cluster_state_dir, segment_state_dir};

/// What a cluster file's appliance left at the top of `state_dir` and a host keeps elsewhere:
/// the non-empty marker directories, the phase record, the lease journal.
fn found(state_dir: &Path) -> Vec<PathBuf> {
    let non_empty = |p: &Path| std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_some());
    let mut out: Vec<PathBuf> = crate::install_state::DIRECTORIES
        .iter()
        .map(|d| state_dir.join(d))
        .filter(|p| non_empty(p))
        .collect();
    for file in [
        crate::orchestration::phases::FILE_NAME,
        crate::dhcp::leases::FILE_NAME,
    ] {
        let path = state_dir.join(file);
        if path.is_file() {
            out.push(path);
        }
    }
    out
}

/// Moves a single cluster's state at the top of `state_dir` into the host's places for it:
/// `clusters` are the host's cluster ids, `segments` its DHCP interfaces. `Ok` with what was
/// moved (nothing when there is nothing to adopt); `Err` says why not, with nothing moved.
pub(super) fn single_cluster_state(
    state_dir: &Path,
    clusters: &[&str],
    segments: &[Option<&str>],
) -> Result<Vec<(PathBuf, PathBuf)>, String> {
    let found = found(state_dir);
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = found
        .iter()
        .filter_map(|p| Some(p.file_name()?.to_string_lossy().into_owned()))
        .collect();
    let [id] = clusters else {
        return Err(format!(
            "{} holds one cluster's install state ({}), and this host file lists {} clusters: \
             move it into `clusters/<id>/` of the cluster it belongs to (the lease journal into \
             `dhcp/<interface>/`), then start again; nothing was changed",
            state_dir.display(),
            names.join(", "),
            clusters.len()
        ));
    };
    let leases_to = match segments {
        [segment] => Some(segment_state_dir(state_dir, *segment)),
        _ => None,
    };
    let mut moves = Vec::new();
    for from in found {
        let name = from.file_name().map(PathBuf::from).unwrap_or_default();
        let dir = if name == Path::new(crate::dhcp::leases::FILE_NAME) {
            match &leases_to {
                Some(dir) => dir.clone(),
                // No DHCP segment (or several): the leases are nobody's to take over.
                None => continue,
            }
        } else {
            cluster_state_dir(state_dir, id)
        };
        let to = dir.join(&name);
        let taken = to.is_file() || std::fs::read_dir(&to).is_ok_and(|mut d| d.next().is_some());
        if taken {
            return Err(format!(
                "both {} and {} hold install state: keep one (nothing was changed)",
                from.display(),
                to.display()
            ));
        }
        moves.push((from, to));
    }
    for (from, to) in &moves {
        let dir = to.parent().expect("a path in a directory");
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        // An empty directory the host already made for it goes first.
        if to.is_dir() {
            let _ = std::fs::remove_dir(to);
        }
        crate::durable::rename(from, to)
            .map_err(|e| format!("moving {} to {}: {e}", from.display(), to.display()))?;
    }
    Ok(moves)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster file's state directory: one installed node, its phases and leases.
    fn single(dir: &Path) {
        crate::install_state::prepare(dir).unwrap();
        std::fs::write(dir.join("installed/master-0"), "x").unwrap();
        std::fs::write(dir.join("install-phases.json"), "{}").unwrap();
        std::fs::write(dir.join("dhcp-leases"), "").unwrap();
    }

    #[test]
    fn a_host_of_one_takes_its_clusters_state_over() {
        let dir = tempfile::tempdir().unwrap();
        single(dir.path());
        let moved = single_cluster_state(dir.path(), &["okd"], &[Some("ens19")]).unwrap();
        assert_eq!(moved.len(), 3, "{moved:?}");
        let okd = dir.path().join("clusters/okd");
        assert!(okd.join("installed/master-0").is_file());
        assert!(okd.join("install-phases.json").is_file());
        assert!(dir.path().join("dhcp/ens19/dhcp-leases").is_file());
        assert!(!dir.path().join("installed/master-0").exists());
        // Once moved, there is nothing more to adopt (the empty marker directories stay).
        assert!(
            single_cluster_state(dir.path(), &["okd"], &[Some("ens19")])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_host_of_several_refuses_and_moves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        single(dir.path());
        let err = single_cluster_state(dir.path(), &["okd", "test"], &[Some("ens19")]).unwrap_err();
        assert!(
            err.contains("installed, install-phases.json, dhcp-leases"),
            "{err}"
        );
        assert!(err.contains("lists 2 clusters"), "{err}");
        assert!(dir.path().join("installed/master-0").is_file());
        assert!(!dir.path().join("clusters").exists());
    }

    #[test]
    fn state_in_both_places_is_refused_and_a_fresh_directory_is_nothing_to_adopt() {
        let dir = tempfile::tempdir().unwrap();
        single(dir.path());
        let okd = dir.path().join("clusters/okd/installed");
        std::fs::create_dir_all(&okd).unwrap();
        std::fs::write(okd.join("master-1"), "x").unwrap();
        let err = single_cluster_state(dir.path(), &["okd"], &[Some("ens19")]).unwrap_err();
        assert!(err.contains("hold install state"), "{err}");
        assert!(
            dir.path().join("installed/master-0").is_file(),
            "nothing moved"
        );

        let fresh = tempfile::tempdir().unwrap();
        crate::install_state::prepare(fresh.path()).unwrap();
        assert!(
            single_cluster_state(fresh.path(), &["a", "b"], &[])
                .unwrap()
                .is_empty()
        );
    }
}
