//! Dropping root once the sockets are bound and the services have opened their files, after
//! handing the state directory to the account the appliance runs as (it keeps writing leases,
//! install markers and the admin socket there).

use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Group, Uid, User, setgid, setgroups, setuid};

use crate::config::RunAs;

#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("run_as user `{0}` does not exist")]
    NoSuchUser(String),
    #[error("run_as group `{0}` does not exist")]
    NoSuchGroup(String),
    #[error("run_as needs the appliance to start as root")]
    NotRoot,
    #[error("can't switch to {what}")]
    Switch {
        what: &'static str,
        #[source]
        source: nix::Error,
    },
    #[error("can't look up `{name}`")]
    Lookup {
        name: String,
        #[source]
        source: nix::Error,
    },
    #[error("can't hand {} to the run_as account", path.display())]
    HandOver {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The account `run_as` names.
#[derive(Debug, Clone, Copy)]
pub struct Account {
    pub uid: Uid,
    pub gid: Gid,
}

/// Looks up the configured user and group; only root can switch to them.
pub fn lookup(run_as: &RunAs) -> Result<Account, PrivilegeError> {
    if !Uid::effective().is_root() {
        return Err(PrivilegeError::NotRoot);
    }
    let lookup = |source| PrivilegeError::Lookup {
        name: run_as.user.clone(),
        source,
    };
    let user = User::from_name(&run_as.user)
        .map_err(lookup)?
        .ok_or_else(|| PrivilegeError::NoSuchUser(run_as.user.clone()))?;
    let gid = match &run_as.group {
        None => user.gid,
        Some(name) => {
            Group::from_name(name)
                .map_err(|source| PrivilegeError::Lookup {
                    name: name.clone(),
                    source,
                })?
                .ok_or_else(|| PrivilegeError::NoSuchGroup(name.clone()))?
                .gid
        }
    };
    Ok(Account { uid: user.uid, gid })
}

/// Gives `dir` and everything in it to `account` (symbolic links themselves, never what they
/// point at), so the appliance can still create and rename files there once it is not root.
///
/// The walk holds each directory open and works relative to it (`openat` with `O_NOFOLLOW`,
/// `fchownat` without following links): a directory swapped for a symbolic link while the walk
/// runs is not followed, so only what is really under `dir` changes owner. Validation keeps
/// `state_dir` off directories the appliance does not own alone.
pub fn hand_over(dir: &Path, account: Account) -> Result<(), PrivilegeError> {
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;
    let failed = |path: &Path| {
        let path = path.to_owned();
        move |e: nix::Error| PrivilegeError::HandOver {
            path,
            source: e.into(),
        }
    };
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let top = nix::dir::Dir::open(dir, flags, Mode::empty()).map_err(failed(dir))?;
    hand_over_at(top, dir, account)
}

fn hand_over_at(
    mut here: nix::dir::Dir,
    path: &Path,
    account: Account,
) -> Result<(), PrivilegeError> {
    use nix::dir::Type;
    use nix::fcntl::{AtFlags, OFlag};
    use nix::sys::stat::Mode;
    use std::os::unix::ffi::OsStrExt as _;
    let failed = |path: &Path| {
        let path = path.to_owned();
        move |e: nix::Error| PrivilegeError::HandOver {
            path,
            source: e.into(),
        }
    };
    let (uid, gid) = (Some(account.uid), Some(account.gid));
    nix::unistd::fchown(&here, uid, gid).map_err(failed(path))?;
    let mut entries = Vec::new();
    for entry in here.iter() {
        let entry = entry.map_err(failed(path))?;
        let name = entry.file_name().to_owned();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        entries.push((name, entry.file_type()));
    }
    for (name, kind) in entries {
        let child = path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let dir = match kind {
            Some(Type::Directory) | None => {
                let flags =
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                match nix::dir::Dir::openat(&here, name.as_c_str(), flags, Mode::empty()) {
                    Ok(d) => Some(d),
                    // Not a directory (any more): owned as the entry it is now, not followed.
                    Err(nix::Error::ENOTDIR | nix::Error::ELOOP) => None,
                    Err(e) => return Err(failed(&child)(e)),
                }
            }
            Some(_) => None,
        };
        match dir {
            Some(d) => hand_over_at(d, &child, account)?,
            None => nix::unistd::fchownat(
                &here,
                name.as_c_str(),
                uid,
                gid,
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(failed(&child))?,
        }
    }
    Ok(())
}

/// Switches to `account` for good (supplementary groups cleared).
pub fn drop_to(account: Account) -> Result<(), PrivilegeError> {
    let Account { uid, gid } = account;
    // Order matters: groups and gid while still root, the uid last.
    setgroups(&[gid]).map_err(|source| PrivilegeError::Switch {
        what: "supplementary groups",
        source,
    })?;
    setgid(gid).map_err(|source| PrivilegeError::Switch {
        what: "group",
        source,
    })?;
    setuid(uid).map_err(|source| PrivilegeError::Switch {
        what: "user",
        source,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    #[test]
    fn the_hand_over_changes_only_what_is_under_the_directory() {
        if !Uid::effective().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "the hand-over test needs root (chown), and CI runs as root"
            );
            eprintln!("SKIPPED the_hand_over_changes_only_what_is_under_the_directory: needs root");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let (state, outside) = (root.path().join("state"), root.path().join("outside"));
        for d in [state.join("installed"), outside.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(state.join("installed/mst0"), "x").unwrap();
        std::fs::write(outside.join("secret"), "y").unwrap();
        std::os::unix::fs::symlink(&outside, state.join("link-to-dir")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), state.join("link-to-file")).unwrap();
        let nobody = Account {
            uid: Uid::from_raw(65534),
            gid: Gid::from_raw(65534),
        };
        hand_over(&state, nobody).unwrap();
        let owner = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
        for p in [
            state.clone(),
            state.join("installed"),
            state.join("installed/mst0"),
            state.join("link-to-dir"),
            state.join("link-to-file"),
        ] {
            assert_eq!(owner(&p), 65534, "{}", p.display());
        }
        for p in [outside.clone(), outside.join("secret")] {
            assert_eq!(owner(&p), 0, "followed a link to {}", p.display());
        }
        // A state directory that is itself a link is refused, not followed.
        let linked = root.path().join("linked-state");
        std::os::unix::fs::symlink(&outside, &linked).unwrap();
        assert!(hand_over(&linked, nobody).is_err());
        assert_eq!(owner(&outside), 0);
    }
}
