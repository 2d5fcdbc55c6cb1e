//! `okd-appliance cluster up` for two clusters of one host file at once (issue 26's step 8,
//! docs/design/several-clusters.md): one `serve HOST.yml` with clusters `okd` (appliance
//! address 10.98.10.1) and `test` (10.98.10.2) on one segment, each with its own Kubernetes API
//! double (kube_double.py: its own PKI, its own admin kubeconfig named by the cluster's
//! `orchestration.kubeconfig`) on its own master, reached through that cluster's own API
//! frontend. The double answers at its master's address and at its bootstrap node's (an address
//! of the master's namespace too), so each cluster's bootstrap backend is up and in rotation, as
//! a bootstrap node serving the API is.
//!
//! Both `up`s are started together (one through `--state-dir`, one through the host file) and
//! run side by side. okd's double then reports bootstrap complete and the rest of its install
//! while test's withholds bootstrap complete: okd moves on through every phase to installed
//! and drains its bootstrap node, while test still waits for bootstrap complete, its phases
//! untouched and its bootstrap backend still up; test's orchestrator meanwhile approves its own
//! worker's certificates in its own double. Then test's double completes its install, and test
//! reaches installed without changing anything of okd's.
//!
//! Each double also files client certificate requests for the other cluster's worker (a kubelet
//! pointed at the wrong cluster): each orchestrator judges only its own cluster's nodes, so it
//! refuses them, and each double's approvals are exactly its own worker's two. Each cluster's
//! status, journal and load balancer name only its own nodes. `provider: none` and no
//! DNS/DHCP/TFTP: orchestration.rs covers one cluster's install in depth.
//!
//! The same scenario runs a second time behind one shared frontend (10.98.10.50): each
//! orchestrator's client sends its cluster's `api-int` name as the TLS server name, the router
//! passes it to that cluster's double, and the double serves the certificate for that name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use harness::{
    Node, Process, Topology, appliance_bin, require_root, require_tools, wait_until,
    write_install_dir,
};

use crate::dns_support::start_appliance;
use crate::orchestration::{node_phase, text};

/// One cluster of the host: its id (its name), addresses and nodes.
#[derive(Debug, Clone, Copy)]
struct Cluster {
    id: &'static str,
    /// The appliance's address for this cluster: its HTTP server and API frontend.
    appliance: &'static str,
    /// The last byte of the MACs, by node (bootstrap, master, worker).
    mac: [u8; 3],
    /// The nodes' addresses (bootstrap, master, worker).
    ip: [&'static str; 3],
}

const OKD: Cluster = Cluster {
    id: "okd",
    appliance: "10.98.10.1",
    mac: [0x07, 0x11, 0x21],
    ip: ["10.98.10.7", "10.98.10.11", "10.98.10.21"],
};

const TEST: Cluster = Cluster {
    id: "test",
    appliance: "10.98.10.2",
    mac: [0x08, 0x12, 0x22],
    ip: ["10.98.10.8", "10.98.10.12", "10.98.10.22"],
};

impl Cluster {
    fn bootstrap(&self) -> String {
        format!("{}-bst", self.id)
    }

    fn master(&self) -> String {
        format!("{}-m0", self.id)
    }

    fn worker(&self) -> String {
        format!("{}-w0", self.id)
    }

    fn names(&self) -> [String; 3] {
        [self.bootstrap(), self.master(), self.worker()]
    }

    fn domain(&self) -> String {
        format!("{}.lab.example.com", self.id)
    }

    /// Where its double keeps its PKI, kubeconfig, flag files and records.
    fn api_dir(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{}-api", self.id))
    }

    /// Writes `DIR/ID.yml` and its ignition directory `DIR/ID-install`: HTTP and the API
    /// frontend on the cluster's own address, nothing else listening; fast health checks and
    /// polls.
    /// Writes `DIR/<id>.yml`; `shared`: behind the host's shared frontend, so without its own
    /// API listener.
    fn write(&self, dir: &Path, shared: bool) {
        write_install_dir(&dir.join(format!("{}-install", self.id))).expect("install dir");
        let nodes: String = self
            .names()
            .iter()
            .zip(["bootstrap", "master", "worker"])
            .zip(self.mac.iter().zip(self.ip))
            .map(|((name, role), (mac, ip))| {
                format!(
                    "  - {{ name: {name}, role: {role}, mac: \"52:54:00:98:0a:{mac:02x}\", ip: {ip} }}\n"
                )
            })
            .collect();
        let text = format!(
            r#"version: 1
cluster: {{ name: {id}, base_domain: lab.example.com }}
network: {{ subnet: 10.98.10.0/24, appliance_ip: {appliance} }}
nodes:
{nodes}install: {{ ignition_dir: ./{id}-install, artifacts_dir: ./artifacts }}
lb:
  health: {{ interval: 200ms, timeout: 200ms, rise: 1, fall: 2 }}
  drain_timeout: 2s
orchestration: {{ kubeconfig: ./{id}-api/kubeconfig, poll: 200ms, settle: 1s }}
listen:
  dns: []
  dhcp: []
  tftp: []
  http: ["{appliance}:8080"]
{api}  machine_config: []
  ingress_https: []
  ingress_http: []
"#,
            id = self.id,
            appliance = self.appliance,
            api = if shared {
                String::new()
            } else {
                format!("  api: [\"{}:6443\"]\n", self.appliance)
            },
        );
        std::fs::write(dir.join(format!("{}.yml", self.id)), text).expect("cluster file");
    }
}

/// Writes both cluster files and `DIR/host.yml` listing them (okd by path, test as
/// `{ file, id }`), the host's state in `DIR/state`; `okd-appliance check` accepts it.
fn write_host(dir: &Path, shared: Option<&str>) -> PathBuf {
    OKD.write(dir, shared.is_some());
    TEST.write(dir, shared.is_some());
    let host = dir.join("host.yml");
    let shared = shared.map_or_else(String::new, |ip| {
        format!("shared_frontend: {{ address: {ip} }}\n")
    });
    std::fs::write(
        &host,
        format!(
            "version: 1\nstate_dir: {}\n{shared}clusters:\n  - okd.yml\n  - {{ file: test.yml, id: test }}\n",
            dir.join("state").display()
        ),
    )
    .expect("host file");
    let out = crate::support::appliance(["check".as_ref(), host.as_os_str()]);
    assert!(
        out.status.success(),
        "check {}: {}",
        host.display(),
        text(&out)
    );
    host
}

/// `okd-appliance ARGS --cluster ID --state-dir STATE`.
fn cli(state: &Path, id: &str, args: &[&str]) -> Output {
    std::process::Command::new(appliance_bin().unwrap())
        .args(args)
        .args(["--cluster", id, "--state-dir"])
        .arg(state)
        .output()
        .unwrap()
}

fn status(state: &Path, c: &Cluster) -> serde_json::Value {
    let out = cli(state, c.id, &["cluster", "status", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

fn lb_status(state: &Path, c: &Cluster) -> String {
    let out = cli(state, c.id, &["lb", "status"]);
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
}

fn node_names(status: &serde_json::Value) -> Vec<String> {
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect()
}

fn cluster_steps(status: &serde_json::Value) -> Vec<String> {
    status["cluster_steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap().to_owned())
        .collect()
}

fn waiting_for(status: &serde_json::Value) -> &str {
    status["waiting_for"].as_str().unwrap_or_default()
}

/// `c` is still bootstrapping, running, and (at its next poll at the latest: a poll that met
/// a conflict on an approval says so until the retry) waits for bootstrap complete.
#[track_caller]
fn still_waits_for_bootstrap(state: &Path, c: &Cluster) {
    let s = status(state, c);
    assert_eq!(cluster_steps(&s), ["bootstrapping"], "{s}");
    assert_eq!(s["running"], true, "{s}");
    assert!(
        wait_until(Duration::from_secs(5), || waiting_for(&status(state, c))
            .contains("bootstrap complete")),
        "{} waits for something else: {}",
        c.id,
        status(state, c)
    );
    let s = status(state, c);
    assert_eq!(cluster_steps(&s), ["bootstrapping"], "{s}");
}

/// Creates the flag files `flags` in `c`'s double's directory.
fn tell(dir: &Path, c: &Cluster, flags: &[&str]) {
    for flag in flags {
        std::fs::write(c.api_dir(dir).join(flag), b"").unwrap();
    }
}

/// The names `c`'s double generated for its certificate requests, by what the test calls them.
fn csr_names(dir: &Path, c: &Cluster) -> HashMap<String, String> {
    let path = c.api_dir(dir).join("csr-names");
    serde_json::from_slice(&std::fs::read(&path).unwrap_or_default()).unwrap_or_default()
}

/// The requests `c`'s double saw approved: one line each, `NAME SIGNER`.
fn approvals(dir: &Path, c: &Cluster) -> String {
    std::fs::read_to_string(c.api_dir(dir).join("approvals")).unwrap_or_default()
}

/// What `c`'s double must see approved once its worker joined: one of the worker's two client
/// requests (which one is the order of the generated names) and its serving request, nothing
/// else. Returns the approved client request's name.
#[track_caller]
fn expect_own_approvals(dir: &Path, c: &Cluster) -> String {
    let names = csr_names(dir, c);
    let approved = approvals(dir, c);
    let w = c.worker();
    let client = [format!("client-{w}"), format!("client-{w}-again")]
        .into_iter()
        .map(|k| names[&k].clone())
        .find(|n| approved.starts_with(&format!("{n} ")))
        .unwrap_or_else(|| {
            panic!(
                "{}: no client request of {w} approved first: {approved}",
                c.id
            )
        });
    assert_eq!(
        approved,
        format!(
            "{client} kubernetes.io/kube-apiserver-client-kubelet\n{} kubernetes.io/kubelet-serving\n",
            names[&format!("serving-{w}")]
        ),
        "{}'s double",
        c.id
    );
    let violations = c.api_dir(dir).join("violations");
    assert!(
        !violations.exists(),
        "{}: {}",
        c.id,
        std::fs::read_to_string(violations).unwrap()
    );
    client
}

/// The lines of cluster `c`'s journal in the appliance's log, after `cluster ID: `.
fn journal(app: &Process, c: &Cluster) -> Vec<String> {
    let tag = format!("cluster {}: ", c.id);
    app.stderr()
        .lines()
        .filter_map(|l| l.split_once(&tag).map(|(_, rest)| rest.to_owned()))
        .collect()
}

/// `c`'s master and worker as namespaces on the segment. The master's namespace also holds the
/// bootstrap node's address: its double answers there too.
struct Machines {
    master: Node,
    worker: Node,
}

fn machines(topo: &Topology, c: &Cluster) -> Machines {
    let prefix = &c.id[..1];
    let master = topo
        .add_node(&format!("{prefix}m0"), &format!("{}/24", c.ip[1]), None)
        .unwrap();
    master.add_addr("eth0", &format!("{}/24", c.ip[0])).unwrap();
    let worker = topo
        .add_node(&format!("{prefix}w0"), &format!("{}/24", c.ip[2]), None)
        .unwrap();
    Machines { master, worker }
}

/// `c`'s double on its master, on every address of the namespace (the master's and the
/// bootstrap node's), once it listens: its PKI and kubeconfig are written by then. Its workers
/// are `c`'s and, a kubelet pointed at the wrong cluster, `other`'s.
fn spawn_double(dir: &Path, m: &Machines, c: &Cluster, other: &Cluster) -> Process {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/kube_double.py");
    let api = c.api_dir(dir);
    std::fs::create_dir_all(&api).unwrap();
    // The master joined during bootstrap.
    tell(dir, c, &["masters-joined"]);
    let workers = format!(
        "{}={},{}={}",
        c.worker(),
        c.ip[2],
        other.worker(),
        other.ip[2]
    );
    let double = m
        .master
        .spawn(
            &format!("kube-double-{}", c.id),
            [
                "python3",
                script.to_str().unwrap(),
                api.to_str().unwrap(),
                "0.0.0.0",
                "6443",
                &c.domain(),
                &c.master(),
                &workers,
                &c.bootstrap(),
            ],
        )
        .unwrap();
    for ip in [c.ip[0], c.ip[1]] {
        m.master
            .wait_tcp(
                format!("{ip}:6443").parse().unwrap(),
                Duration::from_secs(20),
            )
            .unwrap_or_else(|e| panic!("{e:#}\n{}", double.log_tails()));
    }
    assert!(api.join("kubeconfig").exists());
    double
}

/// `node` fetches its ignition from `c`'s HTTP server, from its own address: its install
/// attempt in `c`'s record.
fn fetch_ignition(node: &Node, c: &Cluster, name: &str) {
    let url = format!("http://{}:8080/ignition/{name}.ign", c.appliance);
    let fetched = node
        .netns()
        .exec(["curl", "-sf", "--max-time", "5", "-o", "/dev/null", &url])
        .status()
        .unwrap();
    assert!(fetched.success(), "GET {url}");
}

#[test]
fn cluster_up_runs_for_two_clusters_at_once() {
    two_installs_at_once(None);
}

/// The same through one shared frontend (a host file's `shared_frontend`): each `cluster up`
/// asks the router at the shared address, which its client's server name (its cluster's
/// `api-int` name) routes to its own cluster's double, which picks its serving certificate by
/// that name as kube-apiserver does.
#[test]
fn cluster_up_runs_for_two_clusters_at_once_behind_one_shared_frontend() {
    two_installs_at_once(Some("10.98.10.50"));
}

fn two_installs_at_once(shared: Option<&str>) {
    if !require_root() || !require_tools(&["python3", "curl"]) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-orc-clusters-")
        .tempdir()
        .unwrap();
    let dir = dir.path();
    let host = write_host(dir, shared);
    let state = dir.join("state");
    // One segment carrying both appliance addresses (and the shared frontend's).
    let topo = Topology::with_addrs(
        if shared.is_some() { "orcs" } else { "orcl" },
        "10.98.10.1/24",
        None,
    )
    .unwrap();
    topo.bridge().add_addr("10.98.10.2/24").unwrap();
    if let Some(ip) = shared {
        topo.bridge().add_addr(&format!("{ip}/24")).unwrap();
    }
    let (okd_m, test_m) = (machines(&topo, &OKD), machines(&topo, &TEST));
    let okd_double = spawn_double(dir, &okd_m, &OKD, &TEST);
    let test_double = spawn_double(dir, &test_m, &TEST, &OKD);
    let app = start_appliance(topo.services(), &host);
    let logs = || {
        format!(
            "okd: {}\ntest: {}\n{}\n{}\n{}",
            status(&state, &OKD),
            status(&state, &TEST),
            app.log_tails(),
            okd_double.log_tails(),
            test_double.log_tails()
        )
    };
    // Without --cluster, a cluster command names no cluster: a usage error listing them.
    let out = crate::support::appliance(["cluster".as_ref(), "up".as_ref(), host.as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("serves several clusters (okd, test)"),
        "{}",
        text(&out)
    );
    for c in [&OKD, &TEST] {
        let s = status(&state, c);
        assert!(s["cluster"].is_null(), "{s}");
        assert_eq!(node_names(&s), c.names(), "{s}");
    }

    // Each cluster's master and worker install from their own cluster's appliance.
    for (m, c) in [(&okd_m, &OKD), (&test_m, &TEST)] {
        fetch_ignition(&m.master, c, &c.master());
        fetch_ignition(&m.worker, c, &c.worker());
    }
    // Each fetch is recorded in its own cluster's record (from its journal, as it comes).
    for c in [&OKD, &TEST] {
        let fetched = |s: &serde_json::Value| {
            [c.master(), c.worker()]
                .iter()
                .all(|n| node_phase(s, n) == "ignition")
        };
        assert!(
            wait_until(Duration::from_secs(5), || fetched(&status(&state, c))),
            "{}",
            status(&state, c)
        );
        assert_eq!(node_names(&status(&state, c)), c.names());
    }

    // Both `up`s at once: okd's through its state directory, test's through the host file.
    let host_arg = host.display().to_string();
    let ups: Vec<Output> = std::thread::scope(|s| {
        let okd = s.spawn(|| cli(&state, "okd", &["cluster", "up"]));
        let test = s.spawn(|| {
            std::process::Command::new(appliance_bin().unwrap())
                .args(["cluster", "up", &host_arg, "--cluster", "test"])
                .output()
                .unwrap()
        });
        vec![okd.join().unwrap(), test.join().unwrap()]
    });
    for (c, up) in [&OKD, &TEST].into_iter().zip(&ups) {
        assert!(up.status.success(), "{}: {}", c.id, text(up));
        assert!(
            text(up).contains("started: cluster phase bootstrapping"),
            "{}: {}",
            c.id,
            text(up)
        );
    }
    // Both run, each asks its own double through its own frontend: the master Ready, the
    // bootstrap not complete yet.
    for c in [&OKD, &TEST] {
        assert!(
            wait_until(Duration::from_secs(20), || {
                let s = status(&state, c);
                s["running"] == true
                    && node_phase(&s, &c.master()) == "ready"
                    && waiting_for(&s).contains("bootstrap complete")
            }),
            "{}",
            logs()
        );
    }
    for c in [&OKD, &TEST] {
        let s = status(&state, c);
        assert_eq!(s["running"], true, "{s}");
        assert_eq!(cluster_steps(&s), ["bootstrapping"], "{s}");
    }
    // Each balancer sees its own bootstrap node serve the API (the double answers there too).
    for c in [&OKD, &TEST] {
        let up = format!("api {} {}:6443 up", c.bootstrap(), c.ip[0]);
        assert!(
            wait_until(Duration::from_secs(5), || lb_status(&state, c)
                .contains(&up)),
            "no {up:?} in\n{}",
            lb_status(&state, c)
        );
    }

    // okd's bootstrap completes; etcd still counts its bootstrap member. test's kubelets start
    // (its orchestrator approves its worker during bootstrap), its bootstrap does not complete.
    tell(dir, &OKD, &["bootstrap-complete", "kubelets"]);
    tell(dir, &TEST, &["kubelets"]);
    assert!(
        wait_until(Duration::from_secs(10), || waiting_for(&status(
            &state, &OKD
        ))
        .contains("etcd to remove its bootstrap member")),
        "{}",
        logs()
    );
    // (The phase moves on once etcd let the bootstrap member go: the bootstrap still serves.)
    assert_eq!(cluster_steps(&status(&state, &OKD)), ["bootstrapping"]);
    still_waits_for_bootstrap(&state, &TEST);

    // okd goes the rest of the way to installed.
    tell(
        dir,
        &OKD,
        &[
            "etcd-bootstrap-removed",
            "operators-listed",
            "operators-settled",
        ],
    );
    let waited = cli(
        &state,
        "okd",
        &[
            "cluster",
            "wait",
            "--for",
            "install-complete",
            "--timeout",
            "60s",
        ],
    );
    assert!(waited.status.success(), "{}\n{}", text(&waited), logs());
    let okd_done = status(&state, &OKD);
    assert_eq!(okd_done["cluster"], "installed", "{okd_done}");
    assert_eq!(okd_done["running"], false, "{okd_done}");
    assert_eq!(
        cluster_steps(&okd_done),
        [
            "bootstrapping",
            "bootstrap-complete",
            "bootstrap-removed",
            "workers-joining",
            "installed"
        ],
        "{okd_done}"
    );
    assert_eq!(node_phase(&okd_done, &OKD.worker()), "ready", "{okd_done}");

    // test never moved: still bootstrapping, still asking, while its own worker joined through
    // its own orchestrator's approvals.
    still_waits_for_bootstrap(&state, &TEST);
    assert!(
        wait_until(Duration::from_secs(20), || node_phase(
            &status(&state, &TEST),
            &TEST.worker()
        ) == "ready"),
        "{}",
        logs()
    );
    still_waits_for_bootstrap(&state, &TEST);
    expect_own_approvals(dir, &OKD);
    expect_own_approvals(dir, &TEST);

    // okd's bootstrap left okd's balancer; test's bootstrap backend is still up in test's.
    let okd_lb = lb_status(&state, &OKD);
    let drained = format!("api {} {}:6443 draining", OKD.bootstrap(), OKD.ip[0]);
    assert!(okd_lb.contains(&drained), "{okd_lb}");
    // Up, not draining: a health check a busy machine made miss twice would take it out for a
    // moment, so up is waited for; draining is the orchestration's decision, never transient.
    let test_up = format!("api {} {}:6443 up", TEST.bootstrap(), TEST.ip[0]);
    assert!(
        wait_until(Duration::from_secs(5), || lb_status(&state, &TEST)
            .contains(&test_up)),
        "{}",
        lb_status(&state, &TEST)
    );
    let test_lb = lb_status(&state, &TEST);
    assert!(!test_lb.contains("draining"), "{test_lb}");
    for (lb, other) in [(&okd_lb, &TEST), (&test_lb, &OKD)] {
        for name in other.names() {
            assert!(!lb.contains(&name), "{name} in\n{lb}");
        }
    }

    // Now test's install completes, by itself.
    tell(
        dir,
        &TEST,
        &[
            "bootstrap-complete",
            "etcd-bootstrap-removed",
            "operators-listed",
            "operators-settled",
        ],
    );
    let waited = std::process::Command::new(appliance_bin().unwrap())
        .args(["cluster", "wait", &host_arg, "--cluster", "test"])
        .args(["--for", "install-complete", "--timeout", "60s"])
        .output()
        .unwrap();
    assert!(waited.status.success(), "{}\n{}", text(&waited), logs());
    let test_done = status(&state, &TEST);
    assert_eq!(test_done["cluster"], "installed", "{test_done}");
    assert_eq!(test_done["running"], false, "{test_done}");
    assert_eq!(
        cluster_steps(&test_done),
        cluster_steps(&okd_done),
        "{test_done}"
    );
    let test_lb = lb_status(&state, &TEST);
    let drained = format!("api {} {}:6443 draining", TEST.bootstrap(), TEST.ip[0]);
    assert!(test_lb.contains(&drained), "{test_lb}");
    // okd's record is as it was when it finished: test's install touched nothing of it.
    let okd_now = status(&state, &OKD);
    assert_eq!(okd_now["cluster_steps"], okd_done["cluster_steps"]);
    assert_eq!(okd_now["nodes"], okd_done["nodes"]);
    expect_own_approvals(dir, &OKD);
    expect_own_approvals(dir, &TEST);

    // Each cluster's status, record and journal name only its own nodes. The other cluster's
    // worker's requests in its double were refused by its orchestrator, in its journal.
    for (c, other) in [(&OKD, &TEST), (&TEST, &OKD)] {
        let s = status(&state, c);
        assert_eq!(node_names(&s), c.names(), "{s}");
        for node in [c.master(), c.worker()] {
            assert_eq!(node_phase(&s, &node), "ready", "{s}");
        }
        assert_eq!(node_phase(&s, &c.bootstrap()), "defined", "{s}");
        let record = std::fs::read_to_string(
            state
                .join("clusters")
                .join(c.id)
                .join("install-phases.json"),
        )
        .unwrap_or_else(|e| panic!("{}'s phase record: {e}", c.id));
        for name in other.names() {
            assert!(
                !record.contains(&name),
                "{name} in {}'s record: {record}",
                c.id
            );
        }
        let lines = journal(&app, c);
        for name in other.names() {
            let stray: Vec<&String> = lines
                .iter()
                .filter(|l| l.starts_with(&format!("{name}: ")))
                .collect();
            assert!(stray.is_empty(), "{name} in {}'s journal: {stray:#?}", c.id);
        }
        let names = csr_names(dir, c);
        let (w, client) = (c.worker(), expect_own_approvals(dir, c));
        let again = [
            &names[&format!("client-{w}")],
            &names[&format!("client-{w}-again")],
        ]
        .into_iter()
        .find(|n| **n != client)
        .unwrap();
        for want in [
            format!("{w}: client certificate request {client} approved"),
            format!(
                "{w}: serving certificate request {} approved",
                names[&format!("serving-{w}")]
            ),
            format!(
                "certificate request {again} not approved: a client certificate of {w} was approved already"
            ),
            format!(
                "certificate request {} not approved: {} is not a node of the config",
                names[&format!("client-{}", other.worker())],
                other.worker()
            ),
            format!(
                "certificate request {} not approved: {} is the bootstrap node",
                names[&format!("client-{}", c.bootstrap())],
                c.bootstrap()
            ),
            "cluster phase installed".to_owned(),
        ] {
            assert!(
                lines.iter().any(|l| l.contains(&want)),
                "no {want:?} in {}'s journal:\n{}",
                c.id,
                lines.join("\n")
            );
        }
        // No request name of the other double's appears in this cluster's journal.
        for n in csr_names(dir, other).values() {
            assert!(
                !lines.iter().any(|l| l.contains(n.as_str())),
                "{}'s request {n} in {}'s journal",
                other.id,
                c.id
            );
        }
    }
    // Each orchestration asked its own double through its own cluster's API frontend, as
    // each cluster's own boot server shows it (it shows no other cluster's series).
    for (machines, c, other) in [(&okd_m, &OKD, &TEST), (&test_m, &TEST, &OKD)] {
        let m = crate::support::scrape(
            &machines.master,
            &format!("http://{}:8080/metrics", c.appliance),
        );
        let foreign = format!("cluster=\"{}\"", other.id);
        assert!(
            !m.keys().any(|k| k.contains(&foreign)),
            "{}'s boot server shows {}'s series",
            c.id,
            other.id
        );
        let label = format!("cluster=\"{}\"", c.id);
        let through: Vec<(&String, &f64)> = m
            .iter()
            .filter(|(k, _)| {
                k.starts_with("okd_appliance_lb_backend_received_bytes_total{")
                    && k.contains("frontend=\"api\"")
                    && k.contains(&label)
            })
            .collect();
        for (k, _) in &through {
            assert!(
                c.names()
                    .iter()
                    .any(|n| k.contains(&format!("backend=\"{n}\""))),
                "{k}: another cluster's backend behind {}'s frontend",
                c.id
            );
        }
        let bytes: f64 = through.iter().map(|(_, v)| **v).sum();
        assert!(bytes > 1000.0, "{}: {through:?}\n{m:#?}", c.id);
    }
}
