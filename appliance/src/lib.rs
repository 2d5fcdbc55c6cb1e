//! okd-appliance: DNS, DHCP, the load balancer and the boot files of a user-provisioned
//! OKD/OpenShift 4 cluster, derived from one YAML file and served by one process.
//!
//! The data flows one way: config file -> validated [`config::Config`] -> derived
//! [`plan::Plan`] -> services. See docs/architecture.md for the map.

pub mod artifacts;
pub mod budget;
pub mod config;
pub mod control;
pub mod dhcp;
pub mod digest;
pub mod dns;
pub mod durable;
pub mod faults;
pub mod fetched;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod ha;
pub mod host_network;
pub mod http;
pub mod idle;
pub mod install_config;
pub mod install_state;
pub mod installer;
pub mod isolate;
pub mod journal;
pub mod lb;
pub mod liveiso;
pub mod metrics;
pub mod openshift_install;
pub mod operator;
pub mod orchestration;
pub mod per_address;
pub mod plan;
pub mod records;
pub mod render;
pub mod replication;
pub mod secrets;
pub mod service;
pub mod sockets;
pub mod supervisor;
pub mod terminal;
pub mod tftp;
pub mod tls_trust;
pub mod vocabulary;
