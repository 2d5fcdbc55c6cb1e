//! The HTTP boot server: iPXE scripts, ignition configs and CoreOS artifacts.
//!
//! Architecture invariant: `files` (range and conditional rules, path resolution) and `content`
//! (scripts, ignition) are pure; `install_state` is the only state, a marker file per installed
//! node. The socket layer (hyper) that will serve them and decide who may fetch what by the
//! peer's address is not in this build yet.

pub mod content;
pub mod files;
pub mod install_state;
