//! The HTTP boot server: iPXE scripts, ignition configs and CoreOS artifacts.
//!
//! Architecture invariant: `files` (range and conditional rules, path resolution) and `content`
//! (scripts, ignition) are pure; `install_state` is the only state, a marker file per installed
//! node (`iso` keeps a cache of the parsed base ISO, rebuilt whenever the file or plan changes). `server` is the socket layer (hyper): it routes, decides who may fetch what by the
//! peer's address, and streams files (`sendfile`: file bodies go to the socket through sendfile(2)).
//! `iso` serves the per-node live ISOs: the base ISO through sendfile with the kernel-argument
//! areas replaced from memory.

pub mod content;
pub mod files;
pub mod install_state;
pub mod iso;
pub mod sendfile;
pub mod server;
