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
pub fn hand_over(dir: &Path, account: Account) -> Result<(), PrivilegeError> {
    let failed = |path: &Path| {
        let path = path.to_owned();
        move |source| PrivilegeError::HandOver { path, source }
    };
    let (uid, gid) = (Some(account.uid.as_raw()), Some(account.gid.as_raw()));
    std::os::unix::fs::lchown(dir, uid, gid).map_err(failed(dir))?;
    for entry in std::fs::read_dir(dir).map_err(failed(dir))? {
        let entry = entry.map_err(failed(dir))?;
        let path = entry.path();
        if entry.file_type().map_err(failed(&path))?.is_dir() {
            hand_over(&path, account)?;
        } else {
            std::os::unix::fs::lchown(&path, uid, gid).map_err(failed(&path))?;
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
