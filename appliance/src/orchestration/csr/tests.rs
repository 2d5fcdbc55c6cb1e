//! The certificate-approval rules, request by request and over whole listings, against the
//! cluster-machine-approver's behaviour they follow.

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
    fn judge(&self, listing: &[(&str, State, &Case)]) -> Vec<(String, Result<Approval, String>)> {
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
