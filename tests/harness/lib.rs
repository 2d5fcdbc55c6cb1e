//! Test harness for okd-appliance's end-to-end tests: network namespaces, bridges, veth pairs and
//! tap devices created by the test itself, processes run inside them, and bounded waits.
//!
//! Every resource is a guard that removes what it created on `Drop`, also when the test panics.
//! Network rules: traffic only goes to loopback or to namespaces created here; nothing in this
//! crate touches the host's interfaces or routes (all `ip` calls run with `-n NAMESPACE` or
//! `ip netns exec NAMESPACE`).
//!
//! Privileged tests start with [`require_root`] (and [`require_tool`] for third-party clients):
//! they skip loudly outside CI and fail when `CI=true`.
//!
//! Boot-chain tests build a busybox initramfs for Debian's kernel ([`initramfs`]) and boot it
//! in qemu VMs on tap devices of a topology ([`vm`]).

pub mod appliance;
mod cmd;
pub mod efidisk;
pub mod initramfs;
pub mod link;
pub mod liveiso;
pub mod netns;
pub mod prereq;
pub mod process;
pub mod topology;
pub mod vm;
pub mod wait;

pub use appliance::{appliance_bin, repo_root, write_install_dir};
pub use link::{Bridge, Tap, Veth};
pub use netns::{Netns, list_netns, netns_exists};
pub use prereq::{
    Outcome, in_ci, outcome, require_path, require_root, require_tool, require_tools, skip_or_fail,
    which,
};
pub use process::Process;
pub use topology::{Node, Topology};
pub use wait::{pid_alive, wait_for, wait_until};
