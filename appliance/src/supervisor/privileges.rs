//! Dropping root once the sockets are bound.

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
}

/// Switches to the configured user and group for good (supplementary groups cleared).
pub fn drop_to(run_as: &RunAs) -> Result<(Uid, Gid), PrivilegeError> {
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
    // Order matters: groups and gid while still root, the uid last.
    setgroups(&[gid]).map_err(|source| PrivilegeError::Switch {
        what: "supplementary groups",
        source,
    })?;
    setgid(gid).map_err(|source| PrivilegeError::Switch {
        what: "group",
        source,
    })?;
    setuid(user.uid).map_err(|source| PrivilegeError::Switch {
        what: "user",
        source,
    })?;
    Ok((user.uid, gid))
}
