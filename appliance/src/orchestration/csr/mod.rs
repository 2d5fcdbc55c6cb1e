//! Which certificate signing requests the appliance approves: a kubelet's, for a node of the
//! config that this appliance installed, and nothing else.
//!
//! The rules are the cluster-machine-approver's (github.com/openshift/cluster-machine-approver,
//! `pkg/controller/csr_check.go` and `controller.go` at a9edd695aca5), with the config's node
//! list standing in for its Machine objects and this appliance's install record
//! ([`super::phases`]) for a Machine's creation:
//!
//! - **client** (a new node's first kubelet certificate): signer
//!   `kubernetes.io/kube-apiserver-client-kubelet`, asked by the node-bootstrapper service
//!   account with exactly its three groups; subject `O=system:nodes`,
//!   `CN=system:node:<name>` where `<name>` is a configured node that has no Node object yet
//!   (`authorizeNodeClientCSR`: "node %s already exists, cannot approve"); no subject
//!   alternative names; usages digital signature and client auth (key encipherment allowed).
//!   Besides, the node fetched its ignition from this appliance in its current install attempt
//!   (see [`install_attempts`]), the request was made within 10 s before to 2 h after that
//!   fetch (`authorizeNodeClientCSR`'s `inTimeSpan` around the Machine's creation, with
//!   `maxMachineClockSkew` and `maxMachineDelta`), and no other client certificate of the node
//!   was approved in that attempt (upstream's "no Node yet" and "no NodeRef" say the same once
//!   the kubelet registered; the count also holds before it did).
//! - **serving** (the kubelet's server certificate, once its Node exists): signer
//!   `kubernetes.io/kubelet-serving`, asked by `system:node:<name>` itself with groups
//!   `system:nodes` and `system:authenticated`; the same subject; usages digital signature and
//!   server auth (key encipherment allowed); every subject alternative name the node's own
//!   (its name, its name in the cluster domain, its configured addresses), at least one.
//! - never for the bootstrap node (the config's node of role bootstrap): it never registers, so
//!   "no Node yet" would hold for it for ever, and nothing in the cluster needs its kubelet.
//! - nothing at all while more recent pending node requests exist than the nodes (configured or
//!   Node objects, whichever are more) + 100 (`getMaxPending`, `reconcileLimits`: "Ignoring all
//!   CSRs as too many recent pending CSRs seen"; recent: made within the last hour,
//!   `recentlyPendingNodeCSRs` with `maxPendingDelta`).
//!
//! Every request's signature is checked, so the subject and names are the requester's. What is
//! not approved is left pending, never denied: an administrator may still approve it.
//!
//! Times are seconds since the epoch: a request's `creationTimestamp` (the API server's clock)
//! against the phase record (this appliance's clock), as upstream compares the API server's
//! timestamps with its own clock; `maxMachineClockSkew` is the allowance for the difference.
//!
//! Architecture invariant: pure. [`judge`] reads the listed requests and the facts they are
//! judged by and returns each pending request's decision with its reason ([`decide`] for one
//! request); approving and journaling are the caller's.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer as _;
use x509_parser::x509::X509Name;

use super::phases::{NodePhase, Progress};
use crate::plan::orchestration::KnownNode;
use crate::vocabulary::Role;

pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
pub const NODE_BOOTSTRAPPER: &str =
    "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
const BOOTSTRAPPER_GROUPS: [&str; 3] = [
    "system:serviceaccounts",
    "system:serviceaccounts:openshift-machine-config-operator",
    "system:authenticated",
];
const NODE_GROUPS: [&str; 2] = ["system:nodes", "system:authenticated"];
const NODE_PREFIX: &str = "system:node:";

/// Upstream `maxPendingDelta`: a pending request counts toward the cap for an hour.
pub const MAX_PENDING_DELTA: u64 = 60 * 60;
/// Upstream `maxMachineClockSkew`: a client request may be this much older than the install.
pub const MAX_MACHINE_CLOCK_SKEW: u64 = 10;
/// Upstream `maxMachineDelta`: a client request made later than this after the install is not
/// the installed kubelet's first one.
pub const MAX_MACHINE_DELTA: u64 = 2 * 60 * 60;
/// Upstream `maxDiffBetweenPendingCSRsAndMachinesCount`: the pending cap above the node count.
pub const MAX_DIFF_PENDING: usize = 100;

/// A request as the API shows it: who asked, for what, the PEM it carries, and when it was
/// made (`metadata.creationTimestamp`, seconds since the epoch; `None` if absent).
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub signer: &'a str,
    pub username: &'a str,
    pub groups: &'a [String],
    pub usages: &'a [String],
    pub pem: &'a [u8],
    pub created: Option<u64>,
}

/// Where a listed request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No condition yet: to be judged.
    Pending,
    /// Approved, by this appliance or anyone.
    Approved,
    /// Denied or failed: someone else's decision, left alone.
    Decided,
}

/// A request of the listing, by name.
#[derive(Debug, Clone)]
pub struct Listed<'a> {
    pub name: &'a str,
    pub state: State,
    pub request: Request<'a>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Client,
    Serving,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Client => "client",
            Kind::Serving => "serving",
        }
    }
}

/// What the cluster and the install look like when the requests are judged.
#[derive(Debug)]
pub struct Facts<'a> {
    pub nodes: &'a [KnownNode],
    /// `<cluster>.<base_domain>`: a serving certificate may name the node in it.
    pub domain: &'a str,
    /// Nodes with a Node object.
    pub registered: &'a HashSet<String>,
    /// Each node's current install attempt, as [`install_attempts`] reads the phase record.
    pub installs: &'a HashMap<String, u64>,
    /// The client certificates this appliance approved (node -> the install attempt it was
    /// approved in), for when the API no longer lists the request (approved requests are
    /// garbage-collected after an hour).
    pub approved_clients: &'a HashMap<String, u64>,
    /// Now, seconds since the epoch.
    pub now: u64,
}

/// Approve: for which node, as which kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub node: String,
    pub kind: Kind,
}

/// Each node's current install attempt as this appliance served it: when the node, from its
/// own address, fetched its ignition (`NodePhase::Ignition`, the live installer's fetch:
/// http/server.rs serves a node's ignition only to its address and only from the active
/// host). That phase is this appliance's analogue of upstream's Machine creation: it proves
/// the appliance served that node's install, it comes before the installed kubelet exists,
/// and it is where an attempt starts: a reinstall request takes the node back to powered-on
/// and a destroyed machine to defined (no attempt until the next fetch), and a retried install
/// records the fetch again (a new attempt, its own count of client certificates).
///
/// `NodePhase::Installed` (the installed system fetched its role config from the appliance)
/// counts where the record has no ignition step: a record rebuilt from the install markers
/// (`Phases::load`), whose time is then the rebuild's, later than the fetch, which only
/// narrows the window. Joined and Ready come from the cluster's API, not from an install
/// served here, and never count.
pub fn install_attempts(progress: &Progress) -> HashMap<String, u64> {
    progress
        .nodes
        .iter()
        .filter_map(|(node, steps)| {
            steps
                .iter()
                .find(|s| matches!(s.phase, NodePhase::Ignition | NodePhase::Installed))
                .map(|s| (node.clone(), s.at))
        })
        .collect()
}

/// Decides every pending request of a listing: each one's approval or the reason it stays
/// pending, oldest first (the order to approve them in). Beyond [`decide`]'s rules, those
/// that need the whole listing: the pending cap, and one client certificate per node per
/// install attempt (counting the approved requests still listed and `facts.approved_clients`).
pub fn judge<'a>(
    listed: &[Listed<'a>],
    facts: &Facts<'_>,
) -> Vec<(&'a str, Result<Approval, String>)> {
    let mut pending: Vec<&Listed<'a>> = listed
        .iter()
        .filter(|l| l.state == State::Pending)
        .collect();
    pending.sort_by_key(|l| (l.request.created.unwrap_or(u64::MAX), l.name));
    // Upstream getMaxPending, reconcileLimits and recentlyPendingNodeCSRs.
    let cap = facts.nodes.len().max(facts.registered.len()) + MAX_DIFF_PENDING;
    let recent = pending
        .iter()
        .filter(|l| is_node_request(&l.request) && recently_made(l.request.created, facts.now))
        .count();
    if recent > cap {
        let why = format!(
            "too many recent pending node certificate requests (more than {cap}: the nodes + \
             {MAX_DIFF_PENDING}, made in the last hour); none is approved until there are fewer"
        );
        return pending
            .into_iter()
            .map(|l| (l.name, Err(why.clone())))
            .collect();
    }
    // The client certificates already approved in each node's current attempt, and by which
    // request.
    let mut issued: HashMap<String, String> = HashMap::new();
    for (node, attempt) in facts.approved_clients {
        if facts.installs.get(node) == Some(attempt) {
            issued.insert(node.clone(), "an earlier request".into());
        }
    }
    for l in listed
        .iter()
        .filter(|l| l.state == State::Approved && l.request.signer == CLIENT_SIGNER)
    {
        let Ok(der) = der(l.request.pem) else {
            continue;
        };
        let Ok(csr) = parse(&der) else {
            continue;
        };
        let Ok(node) = node_name(&csr.certification_request_info.subject) else {
            continue;
        };
        if let (Some(&attempt), Some(created)) = (facts.installs.get(node), l.request.created)
            && in_attempt(created, attempt)
        {
            issued.insert(node.to_owned(), l.name.to_owned());
        }
    }
    pending
        .into_iter()
        .map(|l| {
            let verdict = decide(&l.request, facts).and_then(|a| {
                if a.kind != Kind::Client {
                    return Ok(a);
                }
                if let Some(earlier) = issued.get(&a.node) {
                    return Err(format!(
                        "a client certificate of {} was approved already in its current install \
                         attempt ({earlier}); a reinstall starts a new one",
                        a.node
                    ));
                }
                issued.insert(a.node.clone(), l.name.to_owned());
                Ok(a)
            });
            (l.name, verdict)
        })
        .collect()
}

/// Approves `req`, or says why not: the rules that need no more than the request.
pub fn decide(req: &Request<'_>, facts: &Facts<'_>) -> Result<Approval, String> {
    let kind = match req.signer {
        CLIENT_SIGNER => Kind::Client,
        SERVING_SIGNER => Kind::Serving,
        other => return Err(format!("signer {other} is not a kubelet's")),
    };
    let der = der(req.pem)?;
    let csr = parse(&der)?;
    csr.verify_signature()
        .map_err(|e| format!("the request's signature does not verify: {e}"))?;
    let subject = &csr.certification_request_info.subject;
    let name = node_name(subject)?;
    let Some(node) = facts.nodes.iter().find(|n| n.name == name) else {
        return Err(format!("{name} is not a node of the config"));
    };
    if node.role == Role::Bootstrap {
        return Err(format!(
            "{name} is the bootstrap node: it never registers, its certificates are never approved"
        ));
    }
    let mut sans = Vec::new();
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            sans.extend(san.general_names.iter().cloned());
        }
    }
    match kind {
        Kind::Client => {
            if req.username != NODE_BOOTSTRAPPER {
                return Err(format!(
                    "a client certificate asked for by {}, not the node-bootstrapper",
                    req.username
                ));
            }
            same_set(req.groups, &BOOTSTRAPPER_GROUPS, "groups")?;
            if facts.registered.contains(name) {
                return Err(format!(
                    "{name} has a Node object already: its kubelet renews its own certificate"
                ));
            }
            if !sans.is_empty() {
                return Err("a client certificate request with subject alternative names".into());
            }
            usages(req.usages, "client auth")?;
            let Some(&attempt) = facts.installs.get(name) else {
                return Err(format!(
                    "{name} has not fetched its ignition from this appliance in this install \
                     attempt: no install here vouches for its kubelet"
                ));
            };
            let Some(created) = req.created else {
                return Err("the request has no creation time".into());
            };
            if !in_attempt(created, attempt) {
                return Err(format!(
                    "made at {}, not between {MAX_MACHINE_CLOCK_SKEW} s before and {} h after \
                     {name} fetched its ignition ({})",
                    rfc3339(created),
                    MAX_MACHINE_DELTA / 3600,
                    rfc3339(attempt)
                ));
            }
        }
        Kind::Serving => {
            let expected = format!("{NODE_PREFIX}{name}");
            if req.username != expected {
                return Err(format!(
                    "a serving certificate for {name} asked for by {}",
                    req.username
                ));
            }
            same_set(req.groups, &NODE_GROUPS, "groups")?;
            if !facts.registered.contains(name) {
                return Err(format!("{name} has no Node object yet"));
            }
            usages(req.usages, "server auth")?;
            serving_names(&sans, node, facts.domain)?;
        }
    }
    Ok(Approval {
        node: name.to_owned(),
        kind,
    })
}

/// The DER of a PEM request.
fn der(pem: &[u8]) -> Result<Vec<u8>, String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|e| format!("the request is not PEM: {e}"))?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err(format!("the PEM holds a {}, not a request", pem.label));
    }
    Ok(pem.contents)
}

fn parse(der: &[u8]) -> Result<X509CertificationRequest<'_>, String> {
    X509CertificationRequest::from_der(der)
        .map(|(_, csr)| csr)
        .map_err(|e| format!("the request does not parse: {e}"))
}

/// What upstream's cap counts (`pendingNodeCertFilter`): serving requests with the
/// system:nodes group, client requests from the node-bootstrapper.
fn is_node_request(req: &Request<'_>) -> bool {
    match req.signer {
        SERVING_SIGNER => req.groups.iter().any(|g| g == "system:nodes"),
        CLIENT_SIGNER => req.username == NODE_BOOTSTRAPPER,
        _ => false,
    }
}

/// Made within the last hour (upstream `recentlyPendingNodeCSRs`: strictly between now -
/// `maxPendingDelta` and now + `maxMachineClockSkew`).
fn recently_made(created: Option<u64>, now: u64) -> bool {
    created.is_some_and(|c| {
        c > now.saturating_sub(MAX_PENDING_DELTA) && c < now + MAX_MACHINE_CLOCK_SKEW
    })
}

/// Made in the install attempt that started at `attempt`: strictly between `attempt` -
/// `maxMachineClockSkew` and `attempt` + `maxMachineDelta` (upstream `authorizeNodeClientCSR`
/// with `inTimeSpan`, the Machine's creation time being `attempt`).
fn in_attempt(created: u64, attempt: u64) -> bool {
    created > attempt.saturating_sub(MAX_MACHINE_CLOCK_SKEW)
        && created < attempt + MAX_MACHINE_DELTA
}

fn rfc3339(secs: u64) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// `O=system:nodes` and `CN=system:node:<name>`, each exactly once, and nothing else that
/// names the holder.
fn node_name<'a>(subject: &'a X509Name<'_>) -> Result<&'a str, String> {
    let orgs: Vec<_> = subject.iter_organization().collect();
    let cns: Vec<_> = subject.iter_common_name().collect();
    let [org] = orgs.as_slice() else {
        return Err(format!(
            "the subject has {} organizations, not exactly system:nodes",
            orgs.len()
        ));
    };
    if org.as_str().ok() != Some("system:nodes") {
        return Err("the subject's organization is not system:nodes".into());
    }
    let [cn] = cns.as_slice() else {
        return Err(format!("the subject has {} common names", cns.len()));
    };
    let cn = cn
        .as_str()
        .map_err(|_| "the common name is not a string".to_owned())?;
    cn.strip_prefix(NODE_PREFIX)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("common name {cn} is not system:node:<name>"))
}

fn same_set(got: &[String], want: &[&str], what: &str) -> Result<(), String> {
    let got_set: HashSet<&str> = got.iter().map(String::as_str).collect();
    let want_set: HashSet<&str> = want.iter().copied().collect();
    if got_set == want_set && got.len() == want.len() {
        Ok(())
    } else {
        Err(format!(
            "{what} [{}], expected [{}]",
            got.join(", "),
            want.join(", ")
        ))
    }
}

/// Digital signature and `auth`, and key encipherment at most besides.
fn usages(got: &[String], auth: &str) -> Result<(), String> {
    let set: HashSet<&str> = got.iter().map(String::as_str).collect();
    let allowed = ["digital signature", "key encipherment", auth];
    let fine = set.contains("digital signature")
        && set.contains(auth)
        && set.iter().all(|u| allowed.contains(u))
        && set.len() == got.len();
    if fine {
        Ok(())
    } else {
        Err(format!(
            "usages [{}], expected digital signature and {auth} (key encipherment allowed)",
            got.join(", ")
        ))
    }
}

fn serving_names(sans: &[GeneralName<'_>], node: &KnownNode, domain: &str) -> Result<(), String> {
    if sans.is_empty() {
        return Err("a serving certificate request without subject alternative names".into());
    }
    let fqdn = format!("{}.{domain}", node.name);
    for san in sans {
        match san {
            GeneralName::DNSName(dns) if *dns == node.name || dns.eq_ignore_ascii_case(&fqdn) => {}
            GeneralName::IPAddress(bytes) => {
                let ip = match bytes.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(*bytes).expect("4 bytes")),
                    16 => IpAddr::from(<[u8; 16]>::try_from(*bytes).expect("16 bytes")),
                    _ => return Err("a malformed IP address name".into()),
                };
                if !node.addresses.contains(&ip) {
                    return Err(format!("address {ip} is not {}'s", node.name));
                }
            }
            GeneralName::DNSName(dns) => {
                return Err(format!("name {dns} is not {}'s", node.name));
            }
            other => return Err(format!("a name of another kind ({other:?})")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
