//! End-to-end tests of okd-appliance in network namespaces. Each module is one area; tests that
//! need root or third-party tools call `harness::require_root()` / `require_tool()` first (loud
//! skip outside CI, failure with `CI=true`).

mod api;
mod boot;
mod boot_clusters;
mod boot_support;
mod clusters;
mod clusters_reload;
mod clusters_shared;
mod day2;
mod descriptors;
mod dhcp;
mod dhcp_support;
mod dns;
mod dns_differential;
mod dns_support;
mod ha;
mod ha_clusters;
mod hardening;
mod harness_selftest;
mod hostile;
mod hostile_inputs;
mod http;
mod image;
mod image_support;
mod installer;
mod iso_boot;
mod lb;
mod lb_support;
mod lb_tls;
mod libvirt;
mod networkd;
mod nm_kargs;
mod orchestration;
mod orchestration_api;
mod orchestration_clusters;
mod partial_start;
mod preflight;
mod redfish;
mod reload;
mod render_peers;
mod state_disk;
mod support;
mod systemd_unit;
mod tftp;
