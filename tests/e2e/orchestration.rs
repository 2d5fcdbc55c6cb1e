//! `okd-appliance cluster up` against a Kubernetes API double (kube_double.py: the real JSON
//! shapes over HTTPS, a client-certificate kubeconfig, kubelets that file real PEM certificate
//! requests), reached the way the nodes reach the API: through the appliance's own API
//! frontend, whose health check asks the double's /readyz.
//!
//! The master and the worker fetch their ignition from the appliance (their phase moves to
//! ignition: the install attempt a client certificate is approved in); the appliance is killed
//! with SIGKILL mid-install and started again, and resumes the unfinished `up` by itself; the
//! double then reports bootstrap complete; the appliance drains the bootstrap node from the
//! load balancer, brings the worker in by approving its client and then its serving certificate
//! request (and nothing else: an unknown name, an extra SAN, the wrong user, the wrong usages,
//! the bootstrap node and the worker's second client request are refused and journaled), waits
//! for Ready nodes, the ClusterVersion and settled operators, and reports the cluster
//! installed. `provider: none`: the machines are someone else's to power (the control
//! providers have their own tests).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use harness::{Process, Topology, appliance_bin, require_root, require_tools, wait_until};

use crate::dns_support::{start_appliance, write_config};

const DOMAIN: &str = "okd.lab.example.com";

fn config(dir: &Path) -> PathBuf {
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

fn cli(state: &Path, args: &[&str]) -> Output {
    std::process::Command::new(appliance_bin().unwrap())
        .arg("cluster")
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn status(state: &Path) -> serde_json::Value {
    let out = cli(state, &["status", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

fn node_phase(status: &serde_json::Value, node: &str) -> String {
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
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/kube_double.py");
    let mut double = master
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

    // A crash in the middle of the install: the record survives, `up` resumes by itself.
    let first_log = appliance.stderr();
    kill9(&mut appliance);
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
    // An operator not Available (though not Progressing) is not settled.
    assert!(
        wait_until(Duration::from_secs(30), || status(&state)["waiting_for"]
            .as_str()
            .is_some_and(|w| w.contains("ingress (not Available)"))),
        "{}\n{}",
        status(&state),
        appliance.log_tails()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_ne!(status(&state)["cluster"], "installed");
    std::fs::write(auth.join("operators-settled"), b"").unwrap();
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
    let lb = std::process::Command::new(appliance_bin().unwrap())
        .args(["lb", "status", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let lb = text(&lb);
    assert!(lb.contains("api bst 10.99.0.7:6443 draining"), "{lb}");
    assert!(lb.contains("api mst0 10.99.0.11:6443 up"), "{lb}");

    // Exactly the worker's two requests were approved, each through /approval.
    let approvals = std::fs::read_to_string(auth.join("approvals")).unwrap();
    assert_eq!(
        approvals,
        "csr-client-wrk0 kubernetes.io/kube-apiserver-client-kubelet\n\
         csr-serving-wrk0 kubernetes.io/kubelet-serving\n"
    );
    assert!(
        !auth.join("violations").exists(),
        "{}",
        std::fs::read_to_string(auth.join("violations")).unwrap()
    );
    let log = first_log + &appliance.stderr();
    for refused in [
        "certificate request csr-intruder not approved: intruder is not a node of the config",
        "certificate request csr-extra-san not approved: name api.okd.lab.example.com is not wrk0's",
        "certificate request csr-wrong-user not approved: a client certificate asked for by system:serviceaccount:default:builder",
        "certificate request csr-wrong-usages not approved: usages [digital signature, client auth, server auth]",
        "certificate request csr-client-bst not approved: bst is the bootstrap node",
        "certificate request csr-client-wrk0-again not approved: a client certificate of wrk0 was approved already in its current install attempt (csr-client-wrk0)",
        "wrk0: client certificate request csr-client-wrk0 approved",
        "wrk0: serving certificate request csr-serving-wrk0 approved",
        "cluster phase installed",
    ] {
        assert!(log.contains(refused), "no {refused:?} in\n{log}");
    }

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

    // Bootstrap is complete: the masters joined, etcd let go of the bootstrap member.
    for done in [
        "masters-joined",
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
    let approvals = std::fs::read_to_string(kube.path().join("approvals")).unwrap();
    assert_eq!(
        approvals,
        "csr-client-wrk0 kubernetes.io/kube-apiserver-client-kubelet\n\
         csr-serving-wrk0 kubernetes.io/kubelet-serving\n"
    );

    let down = cli(&state, &["down", "--yes"]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(domains().trim().is_empty(), "{}", domains());
    let s = status(&state);
    assert!(s["cluster"].is_null(), "{s}");
    drop(lv);
}
