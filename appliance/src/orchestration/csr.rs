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
mod tests {
    use super::*;
    use crate::vocabulary::Role;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

    fn nodes() -> Vec<KnownNode> {
        vec![
            KnownNode {
                name: "worker-0".into(),
                role: Role::Worker,
                addresses: vec!["10.0.0.5".parse().unwrap()],
            },
            KnownNode {
                name: "master-0".into(),
                role: Role::Master,
                addresses: vec!["10.0.0.2".parse().unwrap(), "fd00::2".parse().unwrap()],
            },
            KnownNode {
                name: "bootstrap".into(),
                role: Role::Bootstrap,
                addresses: vec!["10.0.0.9".parse().unwrap()],
            },
        ]
    }

    /// When every node fetched its ignition (the install attempt), and when the requests are
    /// judged.
    const T0: u64 = 1_700_000_000;
    const NOW: u64 = T0 + 1_200;

    fn installed(names: &[&str]) -> HashMap<String, u64> {
        names.iter().map(|n| ((*n).to_owned(), T0)).collect()
    }

    /// A PEM request as a kubelet makes it.
    fn pem(org: &[&str], cn: &str, sans: Vec<SanType>) -> Vec<u8> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        for o in org {
            dn.push(DnType::OrganizationName, *o);
        }
        dn.push(DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.subject_alt_names = sans;
        let key = KeyPair::generate().unwrap();
        params
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap()
            .into_bytes()
    }

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[derive(Clone)]
    struct Case {
        signer: &'static str,
        username: String,
        groups: Vec<String>,
        usages: Vec<String>,
        pem: Vec<u8>,
        created: Option<u64>,
    }

    fn client(name: &str) -> Case {
        Case {
            signer: CLIENT_SIGNER,
            username: NODE_BOOTSTRAPPER.into(),
            groups: strings(&BOOTSTRAPPER_GROUPS),
            usages: strings(&["digital signature", "client auth"]),
            pem: pem(&["system:nodes"], &format!("system:node:{name}"), vec![]),
            // Ten minutes after the ignition fetch: the installed kubelet's first request.
            created: Some(T0 + 600),
        }
    }

    fn serving(name: &str, sans: Vec<SanType>) -> Case {
        Case {
            signer: SERVING_SIGNER,
            username: format!("system:node:{name}"),
            groups: strings(&NODE_GROUPS),
            usages: strings(&["digital signature", "key encipherment", "server auth"]),
            pem: pem(&["system:nodes"], &format!("system:node:{name}"), sans),
            created: Some(T0 + 900),
        }
    }

    impl Case {
        fn request(&self) -> Request<'_> {
            Request {
                signer: self.signer,
                username: &self.username,
                groups: &self.groups,
                usages: &self.usages,
                pem: &self.pem,
                created: self.created,
            }
        }
    }

    /// What [`Facts`] refer to.
    struct World {
        nodes: Vec<KnownNode>,
        registered: HashSet<String>,
        installs: HashMap<String, u64>,
        approved_clients: HashMap<String, u64>,
    }

    impl World {
        /// Every node installed from here at `T0`; `registered` have a Node object.
        fn new(registered: &[&str]) -> World {
            World {
                nodes: nodes(),
                registered: registered.iter().map(|s| (*s).to_owned()).collect(),
                installs: installed(&["worker-0", "master-0", "bootstrap"]),
                approved_clients: HashMap::new(),
            }
        }

        fn facts(&self) -> Facts<'_> {
            Facts {
                nodes: &self.nodes,
                domain: "okd.lab.example.com",
                registered: &self.registered,
                installs: &self.installs,
                approved_clients: &self.approved_clients,
                now: NOW,
            }
        }

        /// The decisions on a listing of `(name, state, request)`, by name.
        fn judge(
            &self,
            listing: &[(&str, State, &Case)],
        ) -> Vec<(String, Result<Approval, String>)> {
            let listed: Vec<Listed<'_>> = listing
                .iter()
                .map(|(name, state, case)| Listed {
                    name,
                    state: *state,
                    request: case.request(),
                })
                .collect();
            judge(&listed, &self.facts())
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v))
                .collect()
        }
    }

    fn check(case: &Case, registered: &[&str]) -> Result<Approval, String> {
        decide(&case.request(), &World::new(registered).facts())
    }

    fn approved(node: &str, kind: Kind) -> Result<Approval, String> {
        Ok(Approval {
            node: node.into(),
            kind,
        })
    }

    #[track_caller]
    fn pending(verdict: &Result<Approval, String>, word: &str) {
        match verdict {
            Ok(a) => panic!("approved as {a:?}, expected pending for {word:?}"),
            Err(why) => assert!(why.contains(word), "{why}"),
        }
    }

    fn ip(s: &str) -> SanType {
        SanType::IpAddress(s.parse().unwrap())
    }

    fn dns(s: &str) -> SanType {
        SanType::DnsName(s.try_into().unwrap())
    }

    #[test]
    fn a_known_nodes_kubelet_is_approved() {
        assert_eq!(
            check(&client("worker-0"), &["master-0"]),
            Ok(Approval {
                node: "worker-0".into(),
                kind: Kind::Client
            })
        );
        let with_key_encipherment = Case {
            usages: strings(&["digital signature", "key encipherment", "client auth"]),
            ..client("worker-0")
        };
        assert!(check(&with_key_encipherment, &[]).is_ok());
        let serving = serving(
            "master-0",
            vec![
                dns("master-0"),
                dns("master-0.okd.lab.example.com"),
                ip("10.0.0.2"),
                ip("fd00::2"),
            ],
        );
        assert_eq!(
            check(&serving, &["master-0"]),
            Ok(Approval {
                node: "master-0".into(),
                kind: Kind::Serving
            })
        );
    }

    /// Each case: what is wrong, the request, and a word the refusal must contain.
    #[test]
    fn everything_else_is_refused_with_its_reason() {
        let cases: Vec<(&str, Case, &[&str], &str)> = vec![
            (
                "unknown name",
                client("intruder"),
                &[],
                "not a node of the config",
            ),
            (
                "client for a registered node",
                client("worker-0"),
                &["worker-0"],
                "has a Node object",
            ),
            (
                "client with a SAN",
                Case {
                    pem: pem(
                        &["system:nodes"],
                        "system:node:worker-0",
                        vec![dns("worker-0")],
                    ),
                    ..client("worker-0")
                },
                &[],
                "subject alternative names",
            ),
            (
                "client from the wrong user",
                Case {
                    username: "system:serviceaccount:default:builder".into(),
                    ..client("worker-0")
                },
                &[],
                "not the node-bootstrapper",
            ),
            (
                "client with an extra group",
                Case {
                    groups: strings(&[
                        "system:serviceaccounts",
                        "system:serviceaccounts:openshift-machine-config-operator",
                        "system:authenticated",
                        "system:masters",
                    ]),
                    ..client("worker-0")
                },
                &[],
                "groups",
            ),
            (
                "client with server auth",
                Case {
                    usages: strings(&["digital signature", "client auth", "server auth"]),
                    ..client("worker-0")
                },
                &[],
                "usages",
            ),
            (
                "client without digital signature",
                Case {
                    usages: strings(&["client auth"]),
                    ..client("worker-0")
                },
                &[],
                "usages",
            ),
            (
                "wrong organization",
                Case {
                    pem: pem(&["system:masters"], "system:node:worker-0", vec![]),
                    ..client("worker-0")
                },
                &[],
                "organization",
            ),
            (
                "no organization",
                Case {
                    pem: pem(&[], "system:node:worker-0", vec![]),
                    ..client("worker-0")
                },
                &[],
                "0 organizations",
            ),
            (
                "not a node CN",
                Case {
                    pem: pem(&["system:nodes"], "worker-0", vec![]),
                    ..client("worker-0")
                },
                &[],
                "not system:node:",
            ),
            (
                "another signer",
                Case {
                    signer: "kubernetes.io/kube-apiserver-client",
                    ..client("worker-0")
                },
                &[],
                "not a kubelet's",
            ),
            (
                "not PEM",
                Case {
                    pem: b"hello".to_vec(),
                    ..client("worker-0")
                },
                &[],
                "not PEM",
            ),
            (
                "serving with an extra SAN",
                serving("master-0", vec![dns("master-0"), dns("api.example.com")]),
                &["master-0"],
                "api.example.com",
            ),
            (
                "serving with another node's address",
                serving("master-0", vec![dns("master-0"), ip("10.0.0.5")]),
                &["master-0"],
                "10.0.0.5",
            ),
            (
                "serving without SANs",
                serving("master-0", vec![]),
                &["master-0"],
                "without subject alternative names",
            ),
            (
                "serving before the Node exists",
                serving("master-0", vec![dns("master-0")]),
                &[],
                "no Node object",
            ),
            (
                "serving asked by another node",
                Case {
                    username: "system:node:worker-0".into(),
                    ..serving("master-0", vec![dns("master-0")])
                },
                &["master-0"],
                "asked for by system:node:worker-0",
            ),
            (
                "serving with client auth",
                Case {
                    usages: strings(&["digital signature", "server auth", "client auth"]),
                    ..serving("master-0", vec![dns("master-0")])
                },
                &["master-0"],
                "usages",
            ),
        ];
        for (what, case, registered, word) in cases {
            match check(&case, registered) {
                Ok(a) => panic!("{what}: approved as {a:?}"),
                Err(why) => assert!(why.contains(word), "{what}: {why}"),
            }
        }
    }

    #[test]
    fn a_request_whose_signature_does_not_verify_is_refused() {
        let case = client("worker-0");
        let (_, pem) = x509_parser::pem::parse_x509_pem(&case.pem).unwrap();
        let mut der = pem.contents.clone();
        // The last byte is in the signature.
        *der.last_mut().unwrap() ^= 1;
        let tampered = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64_lines(&der)
        );
        let why = check(
            &Case {
                pem: tampered.into_bytes(),
                ..case
            },
            &[],
        )
        .unwrap_err();
        assert!(why.contains("signature"), "{why}");
    }

    /// The ordinary case, through the whole listing: the worker's first client request and the
    /// master's serving request are approved, oldest first; the rest stays pending.
    #[test]
    fn a_listing_approves_the_installed_kubelets_requests() {
        let world = World::new(&["master-0"]);
        let worker = client("worker-0");
        let master = serving("master-0", vec![dns("master-0"), ip("10.0.0.2")]);
        let intruder = client("intruder");
        let verdicts = world.judge(&[
            ("csr-serving", State::Pending, &master),
            ("csr-client", State::Pending, &worker),
            ("csr-intruder", State::Pending, &intruder),
            ("csr-denied", State::Decided, &worker),
        ]);
        let names: Vec<&str> = verdicts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["csr-client", "csr-intruder", "csr-serving"]);
        assert_eq!(verdicts[0].1, approved("worker-0", Kind::Client));
        pending(&verdicts[1].1, "not a node of the config");
        assert_eq!(verdicts[2].1, approved("master-0", Kind::Serving));
    }

    #[test]
    fn the_bootstrap_node_is_never_approved() {
        // Installed from here, no Node object (it never registers): everything else holds.
        pending(&check(&client("bootstrap"), &[]), "bootstrap node");
        let world = World::new(&[]);
        let request = client("bootstrap");
        let verdicts = world.judge(&[("csr-bootstrap", State::Pending, &request)]);
        pending(&verdicts[0].1, "bootstrap node");
        // Nor a serving certificate, should a Node of its name appear.
        let serving = serving("bootstrap", vec![dns("bootstrap"), ip("10.0.0.9")]);
        pending(&check(&serving, &["bootstrap"]), "bootstrap node");
    }

    #[test]
    fn one_client_certificate_per_node_per_install_attempt() {
        let first = client("worker-0");
        let second = Case {
            created: Some(T0 + 700),
            ..client("worker-0")
        };
        // Both pending at once: the older is approved, the other stays pending.
        let world = World::new(&[]);
        let verdicts = world.judge(&[
            ("csr-b", State::Pending, &second),
            ("csr-a", State::Pending, &first),
        ]);
        assert_eq!(
            verdicts[0],
            ("csr-a".into(), approved("worker-0", Kind::Client))
        );
        pending(
            &verdicts[1].1,
            "approved already in its current install attempt (csr-a)",
        );
        // The first one approved (by anyone) and still listed.
        let verdicts = world.judge(&[
            ("csr-a", State::Approved, &first),
            ("csr-b", State::Pending, &second),
        ]);
        pending(&verdicts[0].1, "approved already");
        // Approved by this appliance, no longer listed (garbage-collected).
        let mut world = World::new(&[]);
        world.approved_clients.insert("worker-0".into(), T0);
        pending(
            &world.judge(&[("csr-b", State::Pending, &second)])[0].1,
            "approved already",
        );
        // A reinstall is a new attempt: what was approved in the previous one does not count.
        let mut world = World::new(&[]);
        world.approved_clients.insert("worker-0".into(), T0 - 5_000);
        let earlier = Case {
            created: Some(T0 - 4_000),
            ..client("worker-0")
        };
        let verdicts = world.judge(&[
            ("csr-old", State::Approved, &earlier),
            ("csr-b", State::Pending, &second),
        ]);
        assert_eq!(verdicts[0].1, approved("worker-0", Kind::Client));
        // One per node: another node's request is not held by it.
        let master = client("master-0");
        let verdicts = World::new(&[]).judge(&[
            ("csr-a", State::Approved, &first),
            ("csr-m", State::Pending, &master),
        ]);
        assert_eq!(verdicts[0].1, approved("master-0", Kind::Client));
    }

    #[test]
    fn a_node_that_never_installed_from_here_stays_pending() {
        let mut world = World::new(&[]);
        world.installs.remove("worker-0");
        pending(
            &decide(&client("worker-0").request(), &world.facts()),
            "has not fetched its ignition from this appliance",
        );
        let request = client("worker-0");
        pending(
            &world.judge(&[("csr-a", State::Pending, &request)])[0].1,
            "has not fetched its ignition",
        );
    }

    #[test]
    fn install_attempts_come_from_the_appliances_own_record() {
        use crate::journal::EventKind;
        let from: std::net::SocketAddr = "10.0.0.5:40000".parse().unwrap();
        let mut p = Progress::default();
        p.apply("worker-0", &EventKind::ScriptFetched { from }, 10);
        // Joined and Ready are the API's word, not an install served here.
        p.reach("master-0", NodePhase::Joined, 15);
        p.reach("master-0", NodePhase::Ready, 16);
        assert!(install_attempts(&p).is_empty());
        p.apply("worker-0", &EventKind::IgnitionFetched { from }, 20);
        p.apply(
            "worker-0",
            &EventKind::Installed {
                from,
                file: "worker.ign",
            },
            30,
        );
        assert_eq!(install_attempts(&p), installed_at(&[("worker-0", 20)]));
        // A retried install is a new attempt; a reinstall request, none until the next fetch.
        p.apply("worker-0", &EventKind::InstallRetried, 40);
        assert_eq!(install_attempts(&p), installed_at(&[("worker-0", 40)]));
        p.apply("worker-0", &EventKind::ReinstallRequested, 50);
        assert!(install_attempts(&p).is_empty());
        p.apply("worker-0", &EventKind::IgnitionFetched { from }, 60);
        assert_eq!(install_attempts(&p), installed_at(&[("worker-0", 60)]));
        // Rebuilt from the install markers: installed, without the ignition step.
        let mut rebuilt = Progress::default();
        rebuilt.reach("worker-0", NodePhase::Installed, 70);
        assert_eq!(
            install_attempts(&rebuilt),
            installed_at(&[("worker-0", 70)])
        );
    }

    fn installed_at(at: &[(&str, u64)]) -> HashMap<String, u64> {
        at.iter().map(|(n, t)| ((*n).to_owned(), *t)).collect()
    }

    /// Strictly between 10 s before and 2 h after the ignition fetch (upstream `inTimeSpan`).
    #[test]
    fn a_client_request_outside_the_window_stays_pending() {
        for (created, fine) in [
            (Some(T0 - 10), false),
            (Some(T0 - 9), true),
            (Some(T0 + 2 * 3600 - 1), true),
            (Some(T0 + 2 * 3600), false),
            (Some(T0 - 86_400), false),
            (None, false),
        ] {
            let case = Case {
                created,
                ..client("worker-0")
            };
            let verdict = World::new(&[]).judge(&[("csr-a", State::Pending, &case)]);
            if fine {
                assert_eq!(
                    verdict[0].1,
                    approved("worker-0", Kind::Client),
                    "{created:?}"
                );
            } else {
                let word = if created.is_some() {
                    "fetched its ignition (2023-11-14T22:13:20Z)"
                } else {
                    "no creation time"
                };
                pending(&verdict[0].1, word);
            }
        }
    }

    /// More recent pending node requests than the nodes + 100: nothing is approved (upstream
    /// `reconcileLimits`), however good a request.
    #[test]
    fn over_the_pending_cap_nothing_is_approved() {
        let good = client("worker-0");
        let flood = Case {
            created: Some(NOW - 60),
            ..client("intruder")
        };
        let names: Vec<String> = (0..200).map(|i| format!("csr-flood-{i:03}")).collect();
        let listing = |n: usize, flood: &Case| {
            let mut l: Vec<(String, State, Case)> = names[..n]
                .iter()
                .map(|name| (name.clone(), State::Pending, flood.clone()))
                .collect();
            l.push(("csr-good".into(), State::Pending, good.clone()));
            l
        };
        let judge = |listing: &[(String, State, Case)]| {
            let refs: Vec<(&str, State, &Case)> = listing
                .iter()
                .map(|(n, s, c)| (n.as_str(), *s, c))
                .collect();
            World::new(&[]).judge(&refs)
        };
        let good_verdict = |v: &[(String, Result<Approval, String>)]| {
            v.iter().find(|(n, _)| n == "csr-good").unwrap().1.clone()
        };
        // Three configured nodes: the cap is 103. 102 + the good one: approved.
        let at_cap = judge(&listing(102, &flood));
        assert_eq!(good_verdict(&at_cap), approved("worker-0", Kind::Client));
        // 103 + the good one: over the cap, all pending with the reason.
        let over = judge(&listing(103, &flood));
        assert_eq!(over.len(), 104);
        for (name, verdict) in &over {
            match verdict {
                Ok(a) => panic!("{name} approved as {a:?} over the cap"),
                Err(why) => assert!(why.contains("too many recent pending"), "{why}"),
            }
        }
        // Requests older than an hour are not counted.
        let old = Case {
            created: Some(NOW - 3_600),
            ..client("intruder")
        };
        assert_eq!(
            good_verdict(&judge(&listing(200, &old))),
            approved("worker-0", Kind::Client)
        );
    }

    fn base64_lines(der: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(der)
    }
}
