//! The HTTP boot server: iPXE scripts, ignition configs and CoreOS artifacts.
//!
//! Architecture invariant: `files` (range and conditional rules, path resolution) and `content`
//! (scripts, ignition) are pure; `install_state` is the only state, marker files for each node's
//! install phase (ignition fetched by the installer; role config fetched by the installed system). `server` is the socket layer (hyper): it routes, decides who may fetch what by the
//! peer's address, and streams files (`sendfile`: file bodies go to the socket through sendfile(2)).

pub mod content;
pub mod files;
pub mod install_state;
pub mod sendfile;
pub mod server;
