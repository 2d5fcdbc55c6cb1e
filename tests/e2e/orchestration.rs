//! `okd-appliance cluster up` against a Kubernetes API double (kube_double.py: kube-apiserver's
//! rules where a client could depend on them, each with its upstream source: openshift-install's
//! PKI and YAML kubeconfig (RSA PKCS#1 keys, separate serving and client CAs, 403 for a request
//! without a client certificate), objects with uid/resourceVersion/creationTimestamp, lists
//! without per-item apiVersion/kind, selectors, paging, watches and 410 Expired, the `/approval`
//! subresource's rules (the stored spec kept, timestamps filled, 409 for a stale
//! resourceVersion, the 422 rules), generated CSR names and a signer; kubelets that file real
//! PEM certificate requests), reached the way the nodes reach the API: through the appliance's
//! own API frontend, whose health check asks the double's /readyz (what it answers where the
//! orchestration does not look is checked in orchestration_api.rs). The first approval meets a
//! concurrent write and must be read again and retried.
//!
//! The master and the worker fetch their ignition from the appliance (their phase moves to
//! ignition: the install attempt a client certificate is approved in); the appliance is killed
//! with SIGKILL mid-install and started again, and resumes the unfinished `up` by itself; the
//! double then reports bootstrap complete; the appliance drains the bootstrap node from the
//! load balancer, brings the worker in by approving its client and then its serving certificate
//! request (and nothing else: an unknown name, an extra SAN, the wrong user, the wrong usages,
//! the bootstrap node and the worker's second client request are refused and journaled), waits
//! for Ready nodes, the ClusterVersion and settled operators (none listed yet, one not
//! Available, one Available but Degraded: none of these settled), and reports the cluster
//! installed; the status page draws every node's phases and the cluster's as lines across
//! (`api::the_page_draws_the_install`). `provider: none`: the machines are someone else's to
//! power (the control providers have their own tests).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use harness::{Process, Topology, appliance_bin, require_root, require_tools, wait_until};

use crate::dns_support::{start_appliance, write_config};

const DOMAIN: &str = "okd.lab.example.com";

pub(crate) fn config(dir: &Path) -> PathBuf {
    write_config(
        dir,
        r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }
nodes:
  - { name: bst,  role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.99.0.7 }
  - { name: mst0, role: master,    mac: "52:54:00:00:00:11", ip: 10.99.0.11 }
  - { name: wrk0, role: worker,    mac: "52:54:00:00:00:21", ip: 10.99.0.21 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
lb:
  health: { interval: 200ms, timeout: 200ms, rise: 1, fall: 2 }
  drain_timeout: 2s
orchestration: { poll: 200ms, settle: 1s }
listen:
  dns: []
  dhcp: []
  tftp: []
  http: ["10.99.0.1:8080"]
  api: ["10.99.0.1:6443"]
  machine_config: []
  ingress_https: []
  ingress_http: []
"#,
    )
}

pub(crate) fn cli(state: &Path, args: &[&str]) -> Output {
    std::process::Command::new(appliance_bin().unwrap())
        .arg("cluster")
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap()
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(crate) fn status(state: &Path) -> serde_json::Value {
    let out = cli(state, &["status", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

pub(crate) fn node_phase(status: &serde_json::Value, node: &str) -> String {
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .map(|n| n["phase"].as_str().unwrap().to_owned())
        .unwrap()
}

fn kill9(p: &mut Process) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(p.pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(p.wait_timeout(Duration::from_secs(5)).unwrap().is_some());
}

/// The names the double's API server generated for its certificate requests (`generateName:
/// csr-`, as kubelets ask), by what the test calls them.
fn csr_names(auth: &Path) -> std::collections::HashMap<String, String> {
    serde_json::from_slice(&std::fs::read(auth.join("csr-names")).unwrap()).unwrap()
}

/// Which of `node`'s two client requests was approved (per `approvals`), and the other.
fn approved_client(
    names: &std::collections::HashMap<String, String>,
    approvals: &str,
    node: &str,
) -> (String, String) {
    let first = &names[&format!("client-{node}")];
    let again = &names[&format!("client-{node}-again")];
    let approved = |n: &str| approvals.lines().any(|l| l.split(' ').next() == Some(n));
    match (approved(first), approved(again)) {
        (true, false) => (first.clone(), again.clone()),
        (false, true) => (again.clone(), first.clone()),
        other => panic!("{node}'s client requests approved: {other:?}\n{approvals}"),
    }
}

/// The double on `master` (10.99.0.11:6443) for the cluster of [`config`], its state in `auth`,
/// once it listens: its PKI and the admin kubeconfig are written by then.
pub(crate) fn spawn_double(master: &harness::Node, auth: &Path) -> Process {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/kube_double.py");
    let double = master
        .spawn(
            "kube-double",
            [
                "python3",
                script.to_str().unwrap(),
                auth.to_str().unwrap(),
                "10.99.0.11",
                "6443",
                DOMAIN,
                "mst0",
                "wrk0=10.99.0.21",
                "bst",
            ],
        )
        .unwrap();
    master
        .wait_tcp("10.99.0.11:6443".parse().unwrap(), Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", double.log_tails()));
    assert!(auth.join("kubeconfig").exists());
    double
}

/// Changes `orchestration.settle` in the config and reloads it.
fn set_settle(config: &Path, state: &Path, from: &str, to: &str) {
    let yaml = std::fs::read_to_string(config).unwrap();
    let changed = yaml.replace(&format!("settle: {from}"), &format!("settle: {to}"));
    assert_ne!(yaml, changed, "settle: {from} in\n{yaml}");
    std::fs::write(config, changed).unwrap();
    let out = std::process::Command::new(appliance_bin().unwrap())
        .args(["reload", "--state-dir"])
        .arg(state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// `t` as the appliance's log stamps its lines (UTC, microseconds: tracing-subscriber's
/// default timer), so the two compare as strings.
fn utc(t: std::time::SystemTime) -> String {
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap();
    let out = std::process::Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("@{}.{:06}", since.as_secs(), since.subsec_micros()),
            "+%Y-%m-%dT%H:%M:%S.%6NZ",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The inverse of [`utc`].
fn parse_utc(stamp: &str) -> std::time::SystemTime {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", stamp, "+%s.%6N"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let secs: f64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::time::UNIX_EPOCH + Duration::from_secs_f64(secs)
}

/// `cluster status` says it waits for something containing `what` within `timeout`.
pub(crate) fn waits_for(state: &Path, what: &str, timeout: Duration) -> bool {
    wait_until(timeout, || {
        status(state)["waiting_for"]
            .as_str()
            .is_some_and(|w| w.contains(what))
    })
}

/// For twice the settle period (1 s) and more, the run is never installed nor settling, and
/// it still waits for `what` at the end: a run that took the operators for settled would have
/// installed the cluster by then.
fn never_settles(state: &Path, what: &str) {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let s = status(state);
        let waiting = s["waiting_for"].as_str().unwrap_or_default();
        assert!(
            s["cluster"] != "installed" && !waiting.contains("settled for"),
            "{s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        waits_for(state, what, Duration::from_secs(5)),
        "{}",
        status(state)
    );
}

#[test]
fn cluster_up_takes_a_cluster_from_bootstrap_to_installed_and_resumes_after_a_crash() {
    if !require_root() || !require_tools(&["python3", "curl"]) {
        return;
    }
    let topo = Topology::new("orc").unwrap();
    let master = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let worker = topo.add_node("wrk0", "10.99.0.21/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let state = dir.path().join("state");
    // The double writes its PKI and the admin kubeconfig where openshift-install puts it.
    let auth = dir.path().join("install_dir/auth");
    std::fs::create_dir_all(&auth).unwrap();
    // The master joined during bootstrap; the worker's kubelet is up.
    std::fs::write(auth.join("masters-joined"), b"").unwrap();
    std::fs::write(auth.join("kubelets"), b"").unwrap();
    let mut double = spawn_double(&master, &auth);

    let mut appliance = start_appliance(topo.services(), &config);
    let before = status(&state);
    assert!(before["cluster"].is_null(), "{before}");
    assert_eq!(node_phase(&before, "mst0"), "defined");

    // The master's and the worker's installers fetch their ignition.
    for (node, name) in [(&master, "mst0"), (&worker, "wrk0")] {
        let fetched = node
            .netns()
            .exec([
                "curl",
                "-sf",
                "--max-time",
                "5",
                "-o",
                "/dev/null",
                &format!("http://10.99.0.1:8080/ignition/{name}.ign"),
            ])
            .status()
            .unwrap();
        assert!(fetched.success(), "{name}");
    }

    let out = cli(&state, &["up"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("started: cluster phase bootstrapping"),
        "{}",
        text(&out)
    );
    // The API answers through the appliance's frontend; bootstrap is not complete yet.
    assert!(
        wait_until(Duration::from_secs(20), || {
            let s = status(&state);
            node_phase(&s, "mst0") == "ready"
                && s["waiting_for"]
                    .as_str()
                    .is_some_and(|w| w.contains("bootstrap complete"))
        }),
        "{}\n{}\n{}",
        status(&state),
        appliance.log_tails(),
        double.log_tails()
    );
    let s = status(&state);
    let mst0 = s["nodes"][1]["steps"].as_array().unwrap();
    let phases: Vec<&str> = mst0.iter().map(|p| p["phase"].as_str().unwrap()).collect();
    assert_eq!(phases, ["ignition", "joined", "ready"], "{s}");

    // The worker's certificates are approved before the crash (wrk0 Ready follows its serving
    // certificate): a SIGKILL between an approval and its journal line would lose the line the
    // test looks for below.
    assert!(
        wait_until(Duration::from_secs(20), || node_phase(
            &status(&state),
            "wrk0"
        ) == "ready"),
        "{}\n{}",
        status(&state),
        appliance.log_tails()
    );
    // A crash in the middle of the install: the record survives, `up` resumes by itself. The
    // first run's log is read once it is dead, whole.
    kill9(&mut appliance);
    let first_log = appliance.stderr();
    let mut appliance = start_appliance(topo.services(), &config);
    assert!(
        wait_until(Duration::from_secs(5), || status(&state)["running"] == true),
        "{}",
        status(&state)
    );
    let s = status(&state);
    assert_eq!(s["cluster"], "bootstrapping", "{s}");
    assert_eq!(node_phase(&s, "mst0"), "ready");
    let again = cli(&state, &["up"]);
    assert!(
        text(&again).contains("already running: cluster phase bootstrapping"),
        "{}",
        text(&again)
    );

    // Bootstrap complete, but etcd still counts its bootstrap member (the condition is absent
    // until it is removed): the bootstrap stays, in the pools and running.
    std::fs::write(auth.join("bootstrap-complete"), b"").unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || status(&state)["waiting_for"]
            .as_str()
            .is_some_and(|w| w.contains("etcd to remove its bootstrap member"))),
        "{}",
        status(&state)
    );
    std::thread::sleep(Duration::from_secs(1));
    let s = status(&state);
    assert_eq!(s["cluster"], "bootstrapping", "{s}");
    std::fs::write(auth.join("etcd-bootstrap-removed"), b"").unwrap();
    // The ClusterVersion still progressing: waited for, by name.
    assert!(
        wait_until(Duration::from_secs(10), || status(&state)["waiting_for"]
            .as_str()
            .is_some_and(|w| w.contains("ClusterVersion version"))),
        "{}",
        status(&state)
    );
    // The nodes Ready and the ClusterVersion done, but no ClusterOperator listed yet: not
    // settled, the operators are not there.
    let logs = || format!("{}\n{}", status(&state), appliance.log_tails());
    let no_operators = "cluster operators to settle: no ClusterOperator exists yet";
    assert!(
        waits_for(&state, no_operators, Duration::from_secs(30)),
        "{}",
        logs()
    );
    assert_eq!(node_phase(&status(&state), "wrk0"), "ready");
    never_settles(&state, no_operators);
    // An operator not Available (though not Progressing) is not settled.
    std::fs::write(auth.join("operators-listed"), b"").unwrap();
    let unavailable = "cluster operators to settle: ingress (not Available)";
    assert!(
        waits_for(&state, unavailable, Duration::from_secs(10)),
        "{}",
        logs()
    );
    never_settles(&state, unavailable);
    // Nor is one Available and not Progressing but Degraded: named alone.
    std::fs::write(auth.join("ingress-degraded"), b"").unwrap();
    let degraded = "cluster operators to settle: ingress (Degraded)";
    assert!(
        waits_for(&state, degraded, Duration::from_secs(10)),
        "{}",
        logs()
    );
    never_settles(&state, degraded);

    // The API stalls (its host unreachable): said within moments, not at the request's 20 s
    // timeout with the last reason shown meanwhile.
    std::fs::write(auth.join("api-stalled"), b"").unwrap();
    assert!(
        waits_for(
            &state,
            "the cluster API: no answer for",
            Duration::from_secs(6)
        ),
        "{}",
        logs()
    );
    // kube-apiserver stops (a static-pod rollout): the held request ends unanswered, and the
    // API's error is said; it comes back, and the run waits where it was.
    std::fs::write(auth.join("api-down"), b"").unwrap();
    std::fs::remove_file(auth.join("api-stalled")).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let s = status(&state);
            let w = s["waiting_for"].as_str().unwrap_or_default();
            w.starts_with("the cluster API: ") && !w.contains("no answer for")
        }),
        "{}",
        logs()
    );
    std::fs::remove_file(auth.join("api-down")).unwrap();
    assert!(
        waits_for(&state, degraded, Duration::from_secs(10)),
        "{}",
        logs()
    );

    // The operators settle, and the API goes down within the settle period (4 s now, so the
    // outage fits in it): what they did while it could not be asked is unknown, so the period
    // starts over once it answers again, as if it had never begun.
    set_settle(&config, &state, "1s", "4s");
    std::fs::write(auth.join("operators-settled"), b"").unwrap();
    assert!(
        waits_for(
            &state,
            "cluster operators settled for",
            Duration::from_secs(10)
        ),
        "{}",
        logs()
    );
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(auth.join("api-down"), b"").unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || status(&state)["waiting_for"]
            .as_str()
            .is_some_and(|w| w.starts_with("the cluster API: "))),
        "{}",
        logs()
    );
    let returned = utc(std::time::SystemTime::now());
    std::fs::remove_file(auth.join("api-down")).unwrap();
    let waited = cli(
        &state,
        &["wait", "--for", "install-complete", "--timeout", "60s"],
    );
    assert!(
        waited.status.success(),
        "{}\n{}\n{}",
        text(&waited),
        appliance.log_tails(),
        double.log_tails()
    );

    let s = status(&state);
    assert_eq!(s["cluster"], "installed", "{s}");
    let installed = appliance
        .stderr()
        .lines()
        .find(|l| l.contains("cluster phase installed"))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no installed line in\n{}", appliance.stderr()));
    let settle_after_return = utc(parse_utc(&returned) + Duration::from_secs(4));
    assert!(
        installed >= settle_after_return,
        "installed at {installed}, before the settle period (4 s) after the API returned at {returned}"
    );
    set_settle(&config, &state, "4s", "1s");
    assert_eq!(s["running"], false, "{s}");
    assert_eq!(s["up_requested"], false, "{s}");
    let cluster: Vec<&str> = s["cluster_steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        cluster,
        [
            "bootstrapping",
            "bootstrap-complete",
            "bootstrap-removed",
            "workers-joining",
            "installed"
        ]
    );
    assert_eq!(node_phase(&s, "wrk0"), "ready", "{s}");
    assert_eq!(node_phase(&s, "mst0"), "ready", "{s}");
    assert_eq!(node_phase(&s, "bst"), "defined", "{s}");

    // The bootstrap node left the load balancer.
    let lb_status = || {
        let out = std::process::Command::new(appliance_bin().unwrap())
            .args(["lb", "status", "--state-dir"])
            .arg(&state)
            .output()
            .unwrap();
        text(&out)
    };
    let lb = lb_status();
    assert!(lb.contains("api bst 10.99.0.7:6443 draining"), "{lb}");
    // mst0 is up; a check that a busy machine made miss its 200 ms twice would take it out for
    // a moment, so it is waited for rather than read once.
    assert!(
        wait_until(Duration::from_secs(5), || lb_status()
            .contains("api mst0 10.99.0.11:6443 up")),
        "{}",
        lb_status()
    );

    crate::api::the_page_draws_the_install(&state, worker.netns(), dir.path(), &cluster);

    // Exactly the worker's two requests were approved, each through /approval: one of its two
    // client requests (which one is the order of the names the API server generated) and its
    // serving request; the other client request stays pending.
    let names = csr_names(&auth);
    let approvals = std::fs::read_to_string(auth.join("approvals")).unwrap();
    let (client, other) = approved_client(&names, &approvals, "wrk0");
    assert_eq!(
        approvals,
        format!(
            "{client} kubernetes.io/kube-apiserver-client-kubelet\n\
             {} kubernetes.io/kubelet-serving\n",
            names["serving-wrk0"]
        )
    );
    assert!(
        !auth.join("violations").exists(),
        "{}",
        std::fs::read_to_string(auth.join("violations")).unwrap()
    );
    let log = first_log + &appliance.stderr();
    for refused in [
        format!(
            "certificate request {} not approved: intruder is not a node of the config",
            names["intruder"]
        ),
        format!(
            "certificate request {} not approved: name api.okd.lab.example.com is not wrk0's",
            names["extra-san"]
        ),
        format!(
            "certificate request {} not approved: a client certificate asked for by system:serviceaccount:default:builder",
            names["wrong-user"]
        ),
        format!(
            "certificate request {} not approved: usages [digital signature, client auth, server auth]",
            names["wrong-usages"]
        ),
        format!(
            "certificate request {} not approved: bst is the bootstrap node",
            names["client-bst"]
        ),
        format!(
            "certificate request {other} not approved: a client certificate of wrk0 was approved already in its current install attempt ({client})"
        ),
        format!("wrk0: client certificate request {client} approved"),
        format!(
            "wrk0: serving certificate request {} approved",
            names["serving-wrk0"]
        ),
        "cluster phase installed".to_owned(),
    ] {
        assert!(log.contains(&refused), "no {refused:?} in\n{log}");
    }
    crate::orchestration_api::the_double_answers_as_kube_apiserver_does(
        &master, &auth, &names, &client,
    );
    // Every write was an approval, answered as sent but the first: that one met a concurrent
    // write (409 for its stale resourceVersion) and was read again and retried.
    let writes: Vec<String> = double
        .stderr()
        .lines()
        .filter(|l| l.starts_with("system:admin ") && !l.starts_with("system:admin GET "))
        .map(|l| l.split(' ').skip(1).collect::<Vec<_>>().join(" "))
        .collect();
    let put = |name: &str, code: u16| {
        format!(
            "PUT /apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/approval? {code}"
        )
    };
    assert_eq!(
        writes,
        [
            put(&client, 409),
            put(&client, 200),
            put(&names["serving-wrk0"], 200)
        ],
        "{}",
        double.log_tails()
    );
    crate::orchestration_api::approval_follows_the_subresource_rules(
        &master,
        &auth,
        &names["intruder"],
    );

    // The same, as metrics and as `status` (the counters began with the restart: the script
    // fetched here is counted).
    let script = master
        .netns()
        .exec([
            "curl",
            "-sf",
            "-o",
            "/dev/null",
            "http://10.99.0.1:8080/boot/52-54-00-00-00-11.ipxe",
        ])
        .status()
        .unwrap();
    assert!(script.success());
    let m = crate::support::scrape(&master, "http://10.99.0.1:8080/metrics");
    for (sample, want) in [
        (
            "okd_appliance_install_phase{node=\"wrk0\",phase=\"ready\"}",
            1.0,
        ),
        (
            "okd_appliance_install_phase{node=\"mst0\",phase=\"ready\"}",
            1.0,
        ),
        (
            "okd_appliance_lb_backend_draining{addr=\"10.99.0.7:6443\",backend=\"bst\",frontend=\"api\"}",
            1.0,
        ),
        (
            "okd_appliance_lb_backend_up{addr=\"10.99.0.11:6443\",backend=\"mst0\",frontend=\"api\"}",
            1.0,
        ),
        (
            "okd_appliance_http_requests_total{route=\"script\",status=\"200\"}",
            1.0,
        ),
    ] {
        assert_eq!(m.get(sample), Some(&want), "{sample} in {m:#?}");
    }
    assert!(
        m["okd_appliance_lb_health_check_seconds_count{}"] >= 1.0,
        "health checks are timed"
    );
    assert!(
        m["okd_appliance_http_response_bytes_total{}"] > 0.0,
        "the script's bytes are counted"
    );
    assert!(
        m["okd_appliance_lb_backend_received_bytes_total{addr=\"10.99.0.11:6443\",backend=\"mst0\",frontend=\"api\"}"]
            > 1000.0,
        "the orchestration's API calls went through the balancer"
    );
    let st = std::process::Command::new(appliance_bin().unwrap())
        .args(["status", "--json", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["appliance"]["cluster_phase"], "installed", "{st}");
    let wrk0 = st["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "wrk0")
        .unwrap();
    assert_eq!(wrk0["phase"], "ready", "{st}");
    let mst0 = st["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "mst0")
        .unwrap();
    assert!(mst0["ignition"].as_u64().is_some(), "{st}");
    let table = std::process::Command::new(appliance_bin().unwrap())
        .args(["status", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("draining") && table.contains("wrk0"),
        "{table}"
    );
    assert!(
        !table.contains('\u{1b}'),
        "no colour off a terminal: {table}"
    );

    // The table for people.
    let table = text(&cli(&state, &["status"]));
    assert!(table.starts_with("cluster: installed (idle)\n"), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with("wrk0")
            && l.contains("ignition 20")
            && l.contains("joined +")
            && l.contains("ready +")),
        "{table}"
    );

    // Scaling: to more workers than the config has is refused; to the one it has changes
    // nothing (it is Ready); to none leaves it running and says so.
    let scale = cli(&state, &["scale", "--workers", "5"]);
    assert_eq!(scale.status.code(), Some(1));
    assert!(
        text(&scale).contains("the config has 1 worker:"),
        "{}",
        text(&scale)
    );
    let scale = cli(&state, &["scale", "--workers", "0"]);
    assert!(scale.status.success(), "{}", text(&scale));
    assert!(text(&scale).contains("left running"), "{}", text(&scale));
    let scale = cli(&state, &["scale", "--workers", "1"]);
    assert!(scale.status.success(), "{}", text(&scale));
    assert!(
        wait_until(Duration::from_secs(10), || status(&state)["running"]
            == false),
        "{}",
        status(&state)
    );
    let s = status(&state);
    assert_eq!(
        (&s["cluster"], &s["workers_wanted"]),
        (&"installed".into(), &1.into()),
        "{s}"
    );

    // Nothing to destroy with provider none, and it says so.
    let down = cli(&state, &["down"]);
    assert_eq!(down.status.code(), Some(2), "{}", text(&down));
    let down = cli(&state, &["down", "--yes"]);
    assert_eq!(down.status.code(), Some(1));
    assert!(
        text(&down).contains("control.provider is none"),
        "{}",
        text(&down)
    );
    double.assert_running().unwrap();
    appliance.assert_running().unwrap();
}

/// The whole install with machines: libvirt domains that `cluster up` creates and starts boot
/// from the appliance (DHCP, iPXE script, Debian's kernel with the test initramfs, ignition);
/// once the master installed and the API double reports bootstrap complete, the bootstrap
/// domain and its disk are destroyed, the worker's domain is created and boots, its kubelet's
/// requests are approved, and the cluster is installed. `cluster down` removes the rest.
#[test]
fn cluster_up_drives_libvirt_machines_through_a_whole_install() {
    use crate::boot_support::{BOOT_TIMEOUT, BootLab, MST0_IP, MST0_MAC, WRK0_IP, WRK0_MAC};
    use crate::libvirt::{Libvirtd, two_vm_slots};
    use harness::initramfs::{InitramfsBuilder, Kernel};
    use harness::vm::{Firmware, VmSpec};

    let spec = VmSpec::new(Firmware::Bios, MST0_MAC, "unused");
    if !crate::boot_support::prerequisites(&[&spec])
        || !require_tools(&[
            "libvirtd", "virtlogd", "virsh", "nsenter", "unshare", "curl",
        ])
    {
        return;
    }
    let _slots = two_vm_slots();
    let kube = tempfile::tempdir().unwrap();
    let mut libvirtd = None;
    let mut api = None;
    let lab = BootLab::start_with(
        "orvm",
        &InitramfsBuilder::new(&Kernel::find().unwrap()),
        |topo| {
            let node = topo.add_node("api", "10.99.0.50/24", None).unwrap();
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/kube_double.py");
            let double = node
                .spawn(
                    "kube-double",
                    [
                        "python3",
                        script.to_str().unwrap(),
                        kube.path().to_str().unwrap(),
                        "10.99.0.50",
                        "6443",
                        DOMAIN,
                        "mst0",
                        &format!("wrk0={WRK0_IP}"),
                        "bst",
                    ],
                )
                .unwrap();
            node.wait_tcp("10.99.0.50:6443".parse().unwrap(), Duration::from_secs(20))
                .unwrap_or_else(|e| panic!("{e:#}\n{}", double.log_tails()));
            api = Some((node, double));
            let lv = Libvirtd::start(topo.services());
            let env = vec![("OKD_VIRSH".to_owned(), lv.virsh_path().into())];
            libvirtd = Some(lv);
            let machine = "machine: { cores: 1, memory: 1GiB, disk: 10GiB }";
            let config = format!(
                r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ interface: br0, subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }}
nodes:
  - {{ name: bst,  role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.99.0.7, {machine} }}
  - {{ name: mst0, role: master,    mac: "{MST0_MAC}", ip: {MST0_IP}, {machine} }}
  - {{ name: wrk0, role: worker,    mac: "{WRK0_MAC}", ip: {WRK0_IP}, {machine} }}
install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  install_dev: /dev/vda
  kernel_args: ["console=ttyS0"]
control:
  provider: libvirt
  libvirt: {{ uri: "qemu:///system", bridge: br0, pool: okd, domain_type: qemu }}
  timeouts: {{ request: 60s, task: 60s, shutdown: 5s }}
orchestration:
  kubeconfig: {}
  api_url: "https://10.99.0.50:6443"
  poll: 500ms
  settle: 1s
listen: {{ dns: [], api: [], machine_config: [], ingress_https: [], ingress_http: [] }}
"#,
                kube.path().join("kubeconfig").display()
            );
            (config, env)
        },
    );
    // Dropped before the lab's namespaces go.
    let lv = libvirtd.take().unwrap();
    let (_api_node, double) = api.take().unwrap();
    let state = lab.state_dir();
    let domains = || lv.virsh(&["list", "--all", "--name"]);

    let up = cli(&state, &["up"]);
    assert!(up.status.success(), "{}", text(&up));
    for line in ["bst: ignition fetched by 10.99.0.7:", "mst0: installed"] {
        assert!(
            lab.wait_log(line, BOOT_TIMEOUT),
            "no {line:?}\n{}\n{}\n{}",
            status(&state),
            lab.app.log_tails(),
            domains()
        );
    }
    let s = status(&state);
    assert_eq!(s["cluster"], "bootstrapping", "{s}");
    assert_eq!(
        node_phase(&s, "wrk0"),
        "defined",
        "the worker waits for bootstrap: {s}"
    );
    assert!(domains().contains("bst"), "{}", domains());

    // Bootstrap is complete: the masters joined, etcd let go of the bootstrap member. This
    // cluster's etcd operator predates EtcdBootstrapMemberRemoved: it says the member is gone
    // only by EtcdRunningInCluster's reason, which the orchestration must read.
    for done in [
        "etcd-operator-before-2023",
        "masters-joined",
        "operators-listed",
        "bootstrap-complete",
        "etcd-bootstrap-removed",
        "operators-settled",
    ] {
        std::fs::write(kube.path().join(done), b"").unwrap();
    }
    assert!(
        lab.wait_log(
            &format!("wrk0: ignition fetched by {WRK0_IP}:"),
            BOOT_TIMEOUT
        ),
        "the worker never booted\n{}\n{}\n{}",
        status(&state),
        lab.app.log_tails(),
        domains()
    );
    assert!(
        !domains().contains("bst"),
        "bootstrap not destroyed: {}",
        domains()
    );
    lab.assert_log("bst: destroy: ");
    lab.assert_log("BootstrapAlreadyRemoved");

    // The worker's kubelet starts and asks for its certificates.
    std::fs::write(kube.path().join("kubelets"), b"").unwrap();
    let waited = cli(
        &state,
        &["wait", "--for", "install-complete", "--timeout", "120s"],
    );
    assert!(
        waited.status.success(),
        "{}\n{}\n{}",
        text(&waited),
        lab.app.log_tails(),
        double.log_tails()
    );
    let s = status(&state);
    assert_eq!(s["cluster"], "installed", "{s}");
    assert_eq!(node_phase(&s, "bst"), "defined", "destroyed: {s}");
    let wrk0: Vec<&str> = s["nodes"][2]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        wrk0[..6],
        [
            "created",
            "powered-on",
            "dhcp",
            "script",
            "kernel-initrd",
            "ignition"
        ],
        "{s}"
    );
    assert_eq!(wrk0.last(), Some(&"ready"), "{s}");
    let names = csr_names(kube.path());
    let approvals = std::fs::read_to_string(kube.path().join("approvals")).unwrap();
    let (client, _) = approved_client(&names, &approvals, "wrk0");
    assert_eq!(
        approvals,
        format!(
            "{client} kubernetes.io/kube-apiserver-client-kubelet\n\
             {} kubernetes.io/kubelet-serving\n",
            names["serving-wrk0"]
        )
    );

    let down = cli(&state, &["down", "--yes"]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(domains().trim().is_empty(), "{}", domains());
    let s = status(&state);
    assert!(s["cluster"].is_null(), "{s}");
    drop(lv);
}
