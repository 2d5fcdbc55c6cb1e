//! The values a config gets for what it leaves out, so a reader looking for "what happens if I
//! don't set X" opens one file. Not quite every default is here: the health check's interval,
//! timeout, rise and fall are set in `lb.rs`, the install config's pod and service networks in
//! `install_config.rs` and Proxmox's ISO storage in `control/proxmox.rs`, beside their rules.

use std::time::Duration;

pub(in crate::config) const DEFAULT_STATE_DIR: &str = "/var/lib/okd-appliance";
pub(super) const DEFAULT_INSTALL_DEV: &str = "/dev/sda";
/// Debian's `ipxe` package puts undionly.kpxe and snponly.efi here.
pub(super) const DEFAULT_IPXE_DIR: &str = "/usr/lib/ipxe";
pub(super) const DEFAULT_TTL: u32 = 300;
/// Generous: a node or a resolver never gets near it; a reflection attack does.
pub(super) const DEFAULT_RRL_RATE: u32 = 50;
pub(super) const DEFAULT_RRL_SLIP: u32 = 2;
pub(super) const DEFAULT_LEASE_TIME: Duration = Duration::from_secs(3600);
/// Ample for requests in flight to finish; the long-lived ones (API watches, up to an hour) are
/// cut sooner, which their clients handle by reconnecting, now to another backend.
pub(super) const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(300);
/// How often `cluster up` asks the cluster how far it is.
pub(super) const DEFAULT_ORCHESTRATION_POLL: Duration = Duration::from_secs(5);
/// `openshift-install wait-for install-complete` waits for operators to stop progressing; 30 s
/// without one progressing is what the issue of record asks.
pub(super) const DEFAULT_OPERATORS_SETTLE: Duration = Duration::from_secs(30);

/// openshift-install's own limits, waited in turn (openshift/installer): for bootstrap
/// complete, 20 minutes for the Kubernetes API and 30 for bootstrapping
/// (`wait-for bootstrap-complete`: "Waiting up to 20m0s ... for the Kubernetes API",
/// "Waiting up to 30m0s ... for bootstrapping to complete"); for install complete, 40 minutes
/// for the cluster to initialize and 30 for the operators to be stable
/// (cmd/openshift-install/command/waitfor.go at 06d42916: `waitForInitializedCluster`
/// `timeout := 40 * time.Minute`, `waitForStableOperators` `stabilityCheckDuration := 30 *
/// time.Minute`).
pub(super) const DEFAULT_BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs((20 + 30) * 60);
pub(super) const DEFAULT_INSTALL_TIMEOUT: Duration = Duration::from_secs((40 + 30) * 60);

/// keepalived's own default virtual router ID in its sample configs.
pub const DEFAULT_VRRP_ROUTER_ID: u8 = 51;
