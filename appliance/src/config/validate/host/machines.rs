//! The machines of a host's clusters: one machine is driven by one cluster.

use serde_saphyr::Location;

use super::super::super::diagnostic::Problem;
use super::Listed;
use super::{FirstUse, node_field, second_use};

/// One machine is driven by one cluster: an explicit Proxmox VM ID in two clusters on one
/// Proxmox (its API's host and port), or one BMC's system in two clusters (a BMC's root URL
/// stands for every system it serves). Machine names can't collide: a VM is named
/// `<node>.<cluster domain>`, and domains are unique on a host.
pub(super) fn machines(members: &[Listed], out: &mut Vec<(Option<usize>, Problem)>) {
    let mut vmids = FirstUse::<String>::new();
    // (member, node, BMC host:port, system path, where)
    let mut bmcs: Vec<(usize, &str, String, Option<String>, Location)> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        for s in &m.config.control.machines {
            let raw = m
                .raw
                .nodes
                .value
                .iter()
                .find(|r| r.name.value.eq_ignore_ascii_case(&s.node))
                .and_then(|r| r.machine.as_ref());
            let node_at = || node_field(m, &s.node, |r| r.name.referenced);
            if let (crate::config::Provider::Proxmox(px), Some(id)) =
                (&m.config.control.provider, s.vmid)
            {
                let at = raw
                    .and_then(|r| r.value.vmid.as_ref())
                    .map_or_else(node_at, |v| v.referenced);
                let key = format!("Proxmox VM {id} at {}", endpoint(&px.url).0);
                let message = format!("{key} is node {}'s here", s.node);
                vmids.check(
                    (key, at),
                    (i, members),
                    "host::machine-collision",
                    |other| format!("{message} and a node's in cluster {}", other.id),
                    MACHINE_HINT,
                    out,
                );
            }
            if let Some(bmc) = &s.bmc {
                let at = raw
                    .and_then(|r| r.value.bmc.as_ref())
                    .map_or_else(node_at, |b| {
                        b.value.url.as_ref().map_or(b.referenced, |u| u.referenced)
                    });
                let (host, system) = endpoint(&bmc.url);
                if let Some(&(j, their_node, _, ref their_system, first)) =
                    bmcs.iter().find(|(j, _, h, sys, _)| {
                        *j != i
                            && *h == host
                            && (sys.is_none() || system.is_none() || *sys == system)
                    })
                {
                    let other = &members[j];
                    let shown = |sys: &Option<String>| {
                        sys.as_deref()
                            .map_or("its service root".to_owned(), |p| format!("system {p}"))
                    };
                    let message = format!(
                        "the BMC at {host} ({}) is node {}'s here, and ({}) node {their_node}'s in cluster {}",
                        shown(&system),
                        s.node,
                        shown(their_system),
                        other.id
                    );
                    out.push((
                        Some(i),
                        second_use(
                            m,
                            other,
                            "host::machine-collision",
                            (at, first),
                            message,
                            MACHINE_HINT,
                        ),
                    ));
                }
                bmcs.push((i, &s.node, host, system, at));
            }
        }
    }
}

const MACHINE_HINT: &str = "two clusters would create, power and reinstall the same machine";

/// A provider URL as compared between clusters: its host and port (the host lowercase, the
/// scheme's default port written out), and its path without a trailing `/` (`None` for the
/// root). Paths are compared as written: Redfish's are case-sensitive.
fn endpoint(url: &str) -> (String, Option<String>) {
    match url::Url::parse(url) {
        Ok(u) => {
            let host = format!(
                "{}:{}",
                u.host_str().unwrap_or_default(),
                u.port_or_known_default().unwrap_or_default()
            );
            let path = u.path().trim_end_matches('/');
            (host, (!path.is_empty()).then(|| path.to_owned()))
        }
        Err(_) => (url.trim_end_matches('/').to_owned(), None),
    }
}
