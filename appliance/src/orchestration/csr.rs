//! Which certificate signing requests the appliance approves: a kubelet's, for a node of the
//! config, and nothing else.
//!
//! The rules are the cluster-machine-approver's, with the config's node list standing in for
//! its Machine objects:
//!
//! - **client** (a new node's first kubelet certificate): signer
//!   `kubernetes.io/kube-apiserver-client-kubelet`, asked by the node-bootstrapper service
//!   account with exactly its three groups; subject `O=system:nodes`,
//!   `CN=system:node:<name>` where `<name>` is a configured node that has no Node object yet;
//!   no subject alternative names; usages digital signature and client auth (key
//!   encipherment allowed).
//! - **serving** (the kubelet's server certificate, once its Node exists): signer
//!   `kubernetes.io/kubelet-serving`, asked by `system:node:<name>` itself with groups
//!   `system:nodes` and `system:authenticated`; the same subject; usages digital signature and
//!   server auth (key encipherment allowed); every subject alternative name the node's own
//!   (its name, its name in the cluster domain, its configured addresses), at least one.
//!
//! Every request's signature is checked, so the subject and names are the requester's.
//!
//! Architecture invariant: pure. [`decide`] reads a request and the facts it is judged by and
//! returns a decision with its reason; approving and journaling are the caller's.

use std::collections::HashSet;
use std::net::IpAddr;

use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer as _;
use x509_parser::x509::X509Name;

use crate::plan::orchestration::KnownNode;

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

/// A request as the API shows it: who asked, for what, and the PEM it carries.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub signer: &'a str,
    pub username: &'a str,
    pub groups: &'a [String],
    pub usages: &'a [String],
    pub pem: &'a [u8],
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

/// What the cluster looks like when the request is judged.
#[derive(Debug)]
pub struct Facts<'a> {
    pub nodes: &'a [KnownNode],
    /// `<cluster>.<base_domain>`: a serving certificate may name the node in it.
    pub domain: &'a str,
    /// Nodes with a Node object.
    pub registered: &'a HashSet<String>,
}

/// Approve: for which node, as which kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub node: String,
    pub kind: Kind,
}

/// Approves `req`, or says why not.
pub fn decide(req: &Request<'_>, facts: &Facts<'_>) -> Result<Approval, String> {
    let kind = match req.signer {
        CLIENT_SIGNER => Kind::Client,
        SERVING_SIGNER => Kind::Serving,
        other => return Err(format!("signer {other} is not a kubelet's")),
    };
    let (_, pem) = x509_parser::pem::parse_x509_pem(req.pem)
        .map_err(|e| format!("the request is not PEM: {e}"))?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err(format!("the PEM holds a {}, not a request", pem.label));
    }
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
            .map_err(|e| format!("the request does not parse: {e}"))?;
    csr.verify_signature()
        .map_err(|e| format!("the request's signature does not verify: {e}"))?;
    let subject = &csr.certification_request_info.subject;
    let name = node_name(subject)?;
    let Some(node) = facts.nodes.iter().find(|n| n.name == name) else {
        return Err(format!("{name} is not a node of the config"));
    };
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
        ]
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

    struct Case {
        signer: &'static str,
        username: String,
        groups: Vec<String>,
        usages: Vec<String>,
        pem: Vec<u8>,
    }

    fn client(name: &str) -> Case {
        Case {
            signer: CLIENT_SIGNER,
            username: NODE_BOOTSTRAPPER.into(),
            groups: strings(&BOOTSTRAPPER_GROUPS),
            usages: strings(&["digital signature", "client auth"]),
            pem: pem(&["system:nodes"], &format!("system:node:{name}"), vec![]),
        }
    }

    fn serving(name: &str, sans: Vec<SanType>) -> Case {
        Case {
            signer: SERVING_SIGNER,
            username: format!("system:node:{name}"),
            groups: strings(&NODE_GROUPS),
            usages: strings(&["digital signature", "key encipherment", "server auth"]),
            pem: pem(&["system:nodes"], &format!("system:node:{name}"), sans),
        }
    }

    fn check(case: &Case, registered: &[&str]) -> Result<Approval, String> {
        let nodes = nodes();
        let registered = registered.iter().map(|s| (*s).to_owned()).collect();
        let facts = Facts {
            nodes: &nodes,
            domain: "okd.lab.example.com",
            registered: &registered,
        };
        decide(
            &Request {
                signer: case.signer,
                username: &case.username,
                groups: &case.groups,
                usages: &case.usages,
                pem: &case.pem,
            },
            &facts,
        )
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

    fn base64_lines(der: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(der)
    }
}
