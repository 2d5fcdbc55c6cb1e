//! The Proxmox VE provider against the API test double (`pve/`): every request it sends is
//! checked against the official schema, and each known failure mode gives its own error.

mod pve;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use okd_appliance::config::{self, Provider as ProviderConfig};
use okd_appliance::control::proxmox::{Pace, ProxmoxProvider};
use okd_appliance::control::{
    self, Action, ControlError, FailureKind, MachineStatus, NodeReport, Outcome, Power,
};
use okd_appliance::journal::{EventKind, Journal};
use okd_appliance::plan::Plan;
use okd_appliance::plan::machines::{BootDevice, ControlPlan, MachineSpec};
use pve::PveDouble;

const MASTER: &str = "master-0.okd.lab.example.com";

/// How the config trusts the double's certificate.
enum Trust<'a> {
    Ca(&'a Path),
    Fingerprint(String),
}

/// The cluster config: a PXE master with VM ID 9002 and an ISO worker with the next free ID.
fn config_text(d: &PveDouble, trust: &Trust<'_>) -> String {
    let trust = match trust {
        Trust::Ca(path) => format!("ca_file: {}", path.display()),
        Trust::Fingerprint(f) => format!("fingerprint: \"{f}\""),
    };
    format!(
        r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }}
nodes:
  - {{ name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2, machine: {{ vmid: 9002 }} }}
  - {{ name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.0.0.5, machine: {{ install: iso }} }}
install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
control:
  provider: proxmox
  proxmox:
    url: {url}
    node: {node}
    token_id: "{token}"
    token_secret_file: token
    {trust}
    storage: local-lvm
    iso_storage: local
    bridge: vmbr1
"#,
        url = d.url,
        node = pve::NODE,
        token = pve::TOKEN_ID,
    )
}

fn write_secret(dir: &Path, secret: &str) {
    let path = dir.join("token");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn plan(d: &PveDouble, trust: &Trust<'_>) -> ControlPlan {
    let text = config_text(d, trust);
    let loaded = config::parse(&text, "okd.yml", d.dir.path(), config::InstallCheck::Skip)
        .unwrap_or_else(|e| panic!("{}", e.render(config::RenderStyle::Plain)));
    let mut control = Plan::derive(&loaded.config, 1).control;
    // The creates' records in the test's own directory, shared by every provider of a test
    // as by the runs of one host.
    control.state_dir = d.dir.path().join("state");
    control
}

/// The volume of a node's ISO in the double's ISO storage, as the plan names it (the name
/// carries a digest of the ISO's kernel arguments).
fn iso_volume(plan: &ControlPlan, node: &str) -> String {
    match &plan.machine(node).expect("a node of the plan").install {
        okd_appliance::plan::machines::InstallMedium::Iso { file_name, .. } => {
            format!("local:iso/{file_name}")
        }
        other => panic!("{node} installs by {other:?}"),
    }
}

struct Setup {
    double: PveDouble,
    plan: ControlPlan,
    provider: Arc<ProxmoxProvider>,
    journal: Journal,
}

/// How many create requests the double got.
fn creates(t: &Setup) -> usize {
    t.double.with(|s| {
        s.requests
            .iter()
            .filter(|r| *r == "POST /api2/json/nodes/pve1/qemu")
            .count()
    })
}

fn quick() -> Pace {
    Pace {
        poll: Duration::from_millis(10),
        backoff: Duration::from_millis(20),
        attempts: 4,
    }
}

/// The double, a plan trusting its CA, and a provider with short waits.
fn setup() -> Setup {
    let double = PveDouble::start();
    double.with(|s| s.task_polls = 2);
    write_secret(double.dir.path(), pve::SECRET);
    let mut plan = plan(&double, &Trust::Ca(&double.ca_file));
    plan.timeouts.request = Duration::from_secs(2);
    plan.timeouts.task = Duration::from_secs(5);
    plan.timeouts.shutdown = Duration::from_secs(1);
    let provider = Arc::new(provider(&plan).with_pace(quick()));
    Setup {
        double,
        plan,
        provider,
        journal: Journal::new(),
    }
}

fn provider(plan: &ControlPlan) -> ProxmoxProvider {
    let ProviderConfig::Proxmox(px) = &plan.provider else {
        panic!("not proxmox")
    };
    ProxmoxProvider::new(px, plan.timeouts, &plan.state_dir).unwrap()
}

impl Setup {
    async fn run(&self, action: Action) -> Vec<NodeReport> {
        control::run(
            &self.provider,
            &self.plan.machines,
            action,
            &self.plan.timeouts,
            &self.journal,
        )
        .await
    }

    async fn one(&self, node: &str, action: Action) -> Result<Outcome, ControlError> {
        let m: Vec<MachineSpec> = self
            .plan
            .machines
            .iter()
            .filter(|m| m.node == node)
            .cloned()
            .collect();
        control::run(
            &self.provider,
            &m,
            action,
            &self.plan.timeouts,
            &self.journal,
        )
        .await
        .remove(0)
        .result
    }

    /// Requests that change something (anything but GET), since `mark`.
    fn changes_since(&self, mark: usize) -> Vec<String> {
        self.double.with(|s| {
            s.requests[mark..]
                .iter()
                .filter(|r| !r.starts_with("GET "))
                .cloned()
                .collect()
        })
    }

    fn mark(&self) -> usize {
        self.double.with(|s| s.requests.len())
    }
}

fn changed(reports: &[NodeReport]) -> bool {
    reports
        .iter()
        .all(|r| matches!(r.result, Ok(Outcome::Changed(_))))
}

fn unchanged(reports: &[NodeReport]) -> bool {
    reports
        .iter()
        .all(|r| matches!(r.result, Ok(Outcome::Unchanged(_))))
}

fn show(reports: &[NodeReport]) -> String {
    reports
        .iter()
        .map(|r| format!("{}: {:?}", r.node, r.result))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn create_start_stop_destroy_are_idempotent() {
    let t = setup();
    let worker_iso = iso_volume(&t.plan, "worker-0");
    let created = t.run(Action::Ensure).await;
    assert!(changed(&created), "{}", show(&created));
    t.double.with(|s| {
        let master = &s.vms[&9002];
        assert_eq!(master.name(), MASTER);
        assert_eq!(
            master.config["net0"],
            "virtio=52:54:00:00:00:02,bridge=vmbr1"
        );
        assert_eq!(master.config["boot"], "order=net0;scsi0");
        assert_eq!(master.config["cores"], "4");
        assert_eq!(master.config["memory"], "16384");
        assert!(master.config["scsi0"].starts_with("local-lvm:vm-9002-disk-0"));
        // One IO thread per disk, with virtio-scsi-single (as Proxmox's wizard makes them:
        // pve-manager `www/manager6/qemu/HDEdit.js`).
        assert!(
            master.config["scsi0"].contains(",iothread=1"),
            "{}",
            master.config["scsi0"]
        );
        assert_eq!(master.config["scsihw"], "virtio-scsi-single");
        assert!(!master.config.contains_key("ide2"));
        assert!(!master.config.contains_key("args"));
        // The worker took the next free ID; its ISO was fetched from the appliance first.
        let worker = &s.vms[&100];
        assert_eq!(worker.config["boot"], "order=scsi0;ide2");
        assert_eq!(worker.config["ide2"], format!("{worker_iso},media=cdrom"));
        assert_eq!(worker.config["memory"], "8192");
        assert_eq!(
            s.downloads,
            [(
                "http://10.0.0.1:8080/iso/worker-0.iso".to_owned(),
                worker_iso.clone()
            )]
        );
    });

    let mark = t.mark();
    let again = t.run(Action::Ensure).await;
    assert!(unchanged(&again), "{}", show(&again));
    assert_eq!(t.changes_since(mark), Vec::<String>::new());

    assert!(changed(&t.run(Action::PowerOn).await));
    assert!(t.double.with(|s| s.vms.values().all(|vm| vm.running)));
    let mark = t.mark();
    assert!(unchanged(&t.run(Action::PowerOn).await));
    assert_eq!(t.changes_since(mark), Vec::<String>::new());

    let list = t.run(Action::Status).await;
    for r in &list {
        let Ok(Outcome::Status(MachineStatus::Present { power, drift, .. })) = &r.result else {
            panic!("{}", show(&list))
        };
        assert_eq!(*power, Power::On);
        assert!(drift.is_empty(), "{drift:?}");
    }

    let stopped = t.run(Action::PowerOff).await;
    assert!(changed(&stopped), "{}", show(&stopped));
    assert!(stopped.iter().all(|r| {
        r.result
            .as_ref()
            .unwrap()
            .to_string()
            .starts_with("shut down")
    }));
    assert!(t.double.with(|s| s.vms.values().all(|vm| !vm.running)));
    assert!(unchanged(&t.run(Action::PowerOff).await));

    assert!(changed(&t.run(Action::Destroy).await));
    t.double.with(|s| {
        assert!(s.vms.is_empty(), "{:?}", s.vms.keys());
        assert!(s.isos.is_empty(), "{:?}", s.isos);
    });
    let mark = t.mark();
    assert!(unchanged(&t.run(Action::Destroy).await));
    assert_eq!(t.changes_since(mark), Vec::<String>::new());

    // Every action of every node is in the journal.
    let events: Vec<String> = t
        .journal
        .recent()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Machine { .. }))
        .map(ToString::to_string)
        .collect();
    assert_eq!(events.len(), 2 * 9, "{events:#?}");
    assert!(
        events[0].starts_with("master-0: create: created vm 9002 on pve1"),
        "{}",
        events[0]
    );
    t.double.assert_clean();
}

#[tokio::test]
async fn destroy_stops_a_running_vm_first_and_removes_its_disks() {
    let t = setup();
    t.one("master-0", Action::Ensure).await.unwrap();
    t.one("master-0", Action::PowerOn).await.unwrap();
    let done = t.one("master-0", Action::Destroy).await.unwrap();
    assert!(done.to_string().contains("destroyed vm 9002"), "{done}");
    let deleted = t.double.with(|s| {
        let i = s
            .requests
            .iter()
            .position(|r| r.starts_with("DELETE"))
            .unwrap();
        (s.params[i].clone(), s.requests[i - 1..].to_vec())
    });
    assert_eq!(deleted.0["purge"], "1");
    assert_eq!(deleted.0["destroy-unreferenced-disks"], "1");
}

#[tokio::test]
async fn media_and_boot_device() {
    let t = setup();
    t.run(Action::Ensure).await;
    let ejected = t.one("worker-0", Action::EjectMedia).await.unwrap();
    assert!(matches!(ejected, Outcome::Changed(_)), "{ejected}");
    assert_eq!(
        t.double.with(|s| s.vms[&100].config["ide2"].clone()),
        "none,media=cdrom"
    );
    assert!(matches!(
        t.one("worker-0", Action::EjectMedia).await.unwrap(),
        Outcome::Unchanged(_)
    ));
    let refused = t.one("worker-0", Action::BootOnce(BootDevice::Cdrom)).await;
    assert!(
        matches!(refused, Err(ControlError::Failed(_))),
        "{refused:?}"
    );
    assert!(matches!(
        t.one("worker-0", Action::InsertMedia).await.unwrap(),
        Outcome::Changed(_)
    ));
    assert!(matches!(
        t.one("worker-0", Action::InsertMedia).await.unwrap(),
        Outcome::Unchanged(_)
    ));
    let boot = t
        .one("worker-0", Action::BootOnce(BootDevice::Cdrom))
        .await
        .unwrap();
    assert!(boot.to_string().contains("order=ide2;scsi0"), "{boot}");
    assert_eq!(
        t.double.with(|s| s.vms[&100].config["boot"].clone()),
        "order=ide2;scsi0"
    );
    let pxe = t.one("master-0", Action::InsertMedia).await.unwrap_err();
    assert!(pxe.to_string().contains("install: pxe"), "{pxe}");
    t.one("master-0", Action::PowerOn).await.unwrap();
    assert!(matches!(
        t.one("master-0", Action::Reset).await.unwrap(),
        Outcome::Changed(_)
    ));
    let not_running = t.one("worker-0", Action::Reset).await.unwrap_err();
    assert!(
        not_running.to_string().contains("not running"),
        "{not_running}"
    );
}

#[tokio::test]
async fn lock_timeouts_are_retried_with_backoff() {
    let t = setup();
    let worker_iso = iso_volume(&t.plan, "worker-0");
    t.double.with(|s| {
        s.faults.lock_timeouts_on_create = 2;
        s.faults.lock_timeouts_on_put = 1;
    });
    t.one("master-0", Action::Ensure).await.unwrap();
    let creates = t.double.with(|s| {
        s.requests
            .iter()
            .filter(|r| *r == "POST /api2/json/nodes/pve1/qemu")
            .count()
    });
    assert_eq!(creates, 3);
    // A config change meets a lock too, and gets through on its second attempt.
    t.one("master-0", Action::BootOnce(BootDevice::Disk))
        .await
        .unwrap();

    t.double.with(|s| s.faults.lock_timeouts_on_create = 100);
    let err = t.one("worker-0", Action::Ensure).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("can't lock file"), "{msg}");
    assert!(msg.contains("no VM was left behind"), "{msg}");
    assert!(
        msg.contains(&format!("the ISO {worker_iso} stays")),
        "{msg}"
    );
    assert_eq!(err.kind(), FailureKind::Action);
}

#[tokio::test]
async fn a_nextid_race_takes_the_next_free_id() {
    let t = setup();
    t.double.with(|s| s.faults.nextid_races = 1);
    let done = t.one("worker-0", Action::Ensure).await.unwrap();
    assert!(done.to_string().contains("created vm 101"), "{done}");
    t.double.with(|s| {
        assert_eq!(s.vms[&100].name(), "someone-else-100");
        assert_eq!(s.vms[&101].name(), "worker-0.okd.lab.example.com");
    });
}

#[tokio::test]
async fn a_missing_privilege_is_named_with_its_path() {
    // (withheld, node, action, the privilege named, on this path). VM.Allocate and
    // download-url's `or(Sys.Audit+Sys.Modify on /, Sys.AccessNetwork on the node)` come back
    // as a bare "Permission check failed": the provider names them from what the call needs.
    for (withheld, node, action, privilege, path) in [
        (
            &["VM.Allocate"][..],
            "master-0",
            Action::Ensure,
            "VM.Allocate",
            "/vms/9002",
        ),
        (
            &["SDN.Use"],
            "master-0",
            Action::Ensure,
            "SDN.Use",
            "/sdn/zones/localnetwork/vmbr1",
        ),
        (
            &["Datastore.AllocateSpace"],
            "master-0",
            Action::Ensure,
            "Datastore.AllocateSpace",
            "/storage/local-lvm",
        ),
        (
            &["VM.Config.Disk"],
            "master-0",
            Action::Ensure,
            "VM.Config.Disk",
            "/vms/9002",
        ),
        (
            &["Datastore.AllocateTemplate"],
            "worker-0",
            Action::Ensure,
            "Datastore.AllocateTemplate",
            "/storage/local",
        ),
        (
            &["Sys.AccessNetwork", "Sys.Modify"],
            "worker-0",
            Action::Ensure,
            "Sys.AccessNetwork",
            "/nodes/pve1",
        ),
        (
            &["VM.PowerMgmt"],
            "master-0",
            Action::PowerOn,
            "VM.PowerMgmt",
            "/vms/9002",
        ),
        (
            &["VM.Config.Disk"],
            "master-0",
            Action::BootOnce(BootDevice::Disk),
            "VM.Config.Disk",
            "/vms/9002",
        ),
        (
            &["VM.Config.CDROM"],
            "worker-0",
            Action::EjectMedia,
            "VM.Config.CDROM",
            "/vms/100",
        ),
    ] {
        let t = setup();
        if action != Action::Ensure {
            t.one(node, Action::Ensure).await.unwrap();
            if matches!(action, Action::BootOnce(_)) {
                // Already first: make the change real.
                t.one(node, Action::BootOnce(BootDevice::Network))
                    .await
                    .unwrap();
            }
        }
        t.double.with(|s| {
            s.faults.withheld = withheld.iter().map(|p| (*p).to_owned()).collect();
        });
        let err = t.one(node, action).await.unwrap_err();
        let ControlError::Privilege {
            privilege: p,
            path: at,
            ..
        } = &err
        else {
            panic!("{privilege}: {err:?}")
        };
        assert_eq!((p.as_str(), at.as_str()), (privilege, path));
        let msg = err.to_string();
        assert!(msg.contains("pveum acl modify"), "{msg}");
        assert_eq!(err.kind(), FailureKind::Action);
        if privilege == "Sys.AccessNetwork" {
            assert!(
                msg.contains("only the built-in Administrator role holds Sys.AccessNetwork (PVEAdmin does not)")
                    && msg.contains("Sys.Audit and Sys.Modify on /"),
                "{msg}"
            );
        }
        // Nothing was created by a refused request.
        if action == Action::Ensure {
            assert!(t.double.with(|s| s.vms.is_empty()), "{privilege}");
        }
    }
}

#[tokio::test]
async fn a_vm_with_another_mac_is_an_error_and_stays_as_it_is() {
    let t = setup();
    t.double.add_vm(9002, MASTER, "52:54:00:00:00:99", false);
    let before = t.double.with(|s| s.vms.clone());
    let mark = t.mark();
    for action in [Action::Ensure, Action::PowerOn, Action::Destroy] {
        let err = t.one("master-0", action).await.unwrap_err();
        assert_eq!(err.kind(), FailureKind::Conflict, "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("52:54:00:00:00:99") && msg.contains("52:54:00:00:00:02"),
            "{msg}"
        );
    }
    assert_eq!(t.changes_since(mark), Vec::<String>::new());
    assert_eq!(t.double.with(|s| s.vms.clone()), before);
    let Outcome::Status(MachineStatus::Present { drift, .. }) =
        t.one("master-0", Action::Status).await.unwrap()
    else {
        panic!("absent")
    };
    assert!(drift[0].contains("52:54:00:00:00:99"), "{drift:?}");
}

#[tokio::test]
async fn a_vm_id_held_by_another_vm_is_an_error() {
    let t = setup();
    t.double
        .add_vm(9002, "build-runner", "52:54:00:aa:00:01", true);
    let err = t.one("master-0", Action::Ensure).await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Conflict);
    assert!(
        err.to_string().contains("belongs to VM `build-runner`"),
        "{err}"
    );
    assert!(t.double.with(|s| s.vms.len() == 1));
}

#[tokio::test]
async fn a_wrong_token_is_a_clear_401_without_the_secret() {
    let t = setup();
    write_secret(t.double.dir.path(), "00000000-wrong-secret");
    let provider = Arc::new(provider(&t.plan).with_pace(quick()));
    let reports = control::run(
        &provider,
        &t.plan.machines,
        Action::Ensure,
        &t.plan.timeouts,
        &t.journal,
    )
    .await;
    for r in &reports {
        let err = r.result.as_ref().unwrap_err();
        assert_eq!(err.kind(), FailureKind::Connection);
        let msg = err.to_string();
        assert!(
            msg.contains("refused the API token okd@pve!appliance (401"),
            "{msg}"
        );
        assert!(!msg.contains("wrong-secret"), "{msg}");
    }
    // The journal has the failures, and no secret either.
    let journal = format!("{:?}", t.journal.recent());
    assert!(journal.contains("401") && !journal.contains("wrong-secret"));
}

#[tokio::test]
async fn tls_with_another_ca_or_fingerprint_is_refused() {
    let t = setup();
    // The right fingerprint works without any CA.
    let hex = |d: &[u8]| {
        d.iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let pinned = plan(&t.double, &Trust::Fingerprint(hex(&t.double.fingerprint)));
    let p = provider(&pinned);
    assert_eq!(p.version().await.unwrap(), "Proxmox VE 8.2.4");

    let mut wrong = t.double.fingerprint;
    wrong[0] ^= 0xff;
    let refused = provider(&plan(&t.double, &Trust::Fingerprint(hex(&wrong))));
    let err = refused.version().await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Connection);
    assert!(matches!(err, ControlError::Tls { .. }), "{err:?}");
    assert!(err.to_string().contains("but the config pins"), "{err}");

    let other = PveDouble::start();
    let foreign = provider(&plan(&t.double, &Trust::Ca(&other.ca_file)));
    let err = foreign.version().await.unwrap_err();
    assert!(matches!(err, ControlError::Tls { .. }), "{err:?}");
    assert!(
        err.to_string().contains("invalid peer certificate"),
        "{err}"
    );
    // Nothing reached the API without trust.
    assert!(t.double.with(|s| s.requests.len() == 1));
}

#[tokio::test]
async fn a_create_still_running_is_found_and_never_made_twice() {
    // Proxmox writes a placeholder config holding only `lock: create` (listed as `VM <id>`)
    // until the create task ends; a create that outlives the task timeout is still going.
    let mut t = setup();
    t.plan.timeouts.task = Duration::from_secs(1);
    t.provider = Arc::new(provider(&t.plan).with_pace(quick()));
    t.double.with(|s| {
        s.faults.hang_tasks.insert("qmcreate".into());
    });
    // The worker has no configured VM ID: any create still running may be its own, so it
    // goes first here; the master's configured ID is the only one its reruns wait for.
    for (node, vmid) in [("worker-0", 100), ("master-0", 9002)] {
        let started = Instant::now();
        let err = t.one(node, Action::Ensure).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(err.kind(), FailureKind::Timeout, "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("UPID:pve1:") && msg.contains("still running after 1s"),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("vm {vmid} on pve1 is still being created")),
            "{msg}"
        );
        assert!(!msg.contains("no VM was left behind"), "{msg}");
        assert_eq!(
            t.double.with(|s| s.vms[&vmid].config.get("lock").cloned()),
            Some("create".to_owned())
        );
    }
    assert_eq!(creates(&t), 2);
    // A rerun while they are still going waits for them, and creates nothing.
    for node in ["master-0", "worker-0"] {
        let err = t.one(node, Action::Ensure).await.unwrap_err();
        assert_eq!(err.kind(), FailureKind::Timeout, "{err}");
        assert!(err.to_string().contains("is still being created"), "{err}");
    }
    let Outcome::Status(MachineStatus::Present { id, power, .. }) =
        t.one("master-0", Action::Status).await.unwrap()
    else {
        panic!("absent")
    };
    assert_eq!(id, "vm 9002 on pve1");
    assert_eq!(power, Power::Other("being created (lock: create)".into()));
    let err = t.one("master-0", Action::Destroy).await.unwrap_err();
    assert!(err.to_string().contains("nothing was destroyed"), "{err}");
    assert_eq!(creates(&t), 2);
    // Once they end, a rerun finds both.
    t.double.release("qmcreate");
    let again = t.run(Action::Ensure).await;
    assert!(unchanged(&again), "{}", show(&again));
    assert_eq!(creates(&t), 2);
    assert_eq!(t.double.with(|s| s.vms.len()), 2);
}

#[tokio::test]
async fn an_api_that_never_answers_hits_the_request_timeout() {
    // A request timeout under 5 s is taken as 5 s (pveproxy delays a 401 by 3 s); both
    // machines wait for the one version request.
    let mut t = setup();
    t.plan.timeouts.request = Duration::from_secs(1);
    t.provider = Arc::new(provider(&t.plan).with_pace(quick()));
    t.double.with(|s| s.faults.stall = true);
    let started = Instant::now();
    let reports = t.run(Action::PowerOn).await;
    assert!(
        started.elapsed() >= Duration::from_secs(5) && started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    for r in &reports {
        let err = r.result.as_ref().unwrap_err();
        assert_eq!(err.kind(), FailureKind::Timeout);
        assert!(
            err.to_string()
                .contains("no answer from https://127.0.0.1:"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_guest_that_ignores_acpi_is_forced_off() {
    let t = setup();
    t.one("master-0", Action::Ensure).await.unwrap();
    t.one("master-0", Action::PowerOn).await.unwrap();
    t.double
        .with(|s| s.vms.get_mut(&9002).unwrap().ignores_acpi = true);
    let done = t.one("master-0", Action::PowerOff).await.unwrap();
    assert!(
        done.to_string()
            .contains("did not shut down within 1s: forced off"),
        "{done}"
    );
    t.double.with(|s| {
        assert!(!s.vms[&9002].running);
        let stop = s
            .requests
            .iter()
            .position(|r| r.ends_with("/status/stop"))
            .unwrap();
        assert_eq!(s.params[stop]["overrule-shutdown"], "1");
    });
}

#[tokio::test]
async fn a_create_that_fails_in_its_task_says_nothing_was_left_behind() {
    // qemu-server's create worker unlinks the config when it fails: no VM stays.
    let t = setup();
    t.double.with(|s| s.faults.create_fails = true);
    let err = t.one("master-0", Action::Ensure).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("insufficient free space"), "{msg}");
    assert!(msg.contains("no VM was left behind"), "{msg}");
    assert!(t.double.with(|s| s.vms.is_empty()));
    t.double.with(|s| s.faults.create_fails = false);
    t.one("master-0", Action::Ensure).await.unwrap();
}

#[tokio::test]
async fn starting_a_machine_that_was_never_created_says_so() {
    let t = setup();
    let err = t.one("master-0", Action::PowerOn).await.unwrap_err();
    assert!(matches!(err, ControlError::Absent(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("okd-appliance nodes create master-0"),
        "{err}"
    );
    assert!(matches!(
        t.one("master-0", Action::Status).await.unwrap(),
        Outcome::Status(MachineStatus::Absent)
    ));
}

/// Every action of both install paths, in a lifecycle order; the first failure ends it.
async fn lifecycle(t: &Setup) -> Result<(), (String, ControlError)> {
    let steps: [(&str, Action); 13] = [
        ("master-0", Action::Ensure),
        ("worker-0", Action::Ensure),
        ("master-0", Action::Status),
        ("master-0", Action::PowerOn),
        ("worker-0", Action::PowerOn),
        ("master-0", Action::BootOnce(BootDevice::Disk)),
        ("worker-0", Action::EjectMedia),
        ("worker-0", Action::InsertMedia),
        ("master-0", Action::Reset),
        ("master-0", Action::PowerOff),
        ("worker-0", Action::PowerOff),
        ("master-0", Action::Destroy),
        ("worker-0", Action::Destroy),
    ];
    for (node, action) in steps {
        if let Err(e) = t.one(node, action).await {
            return Err((format!("{node} {}", action.name()), e));
        }
    }
    Ok(())
}

/// The `pveum ...` commands quoted (in backticks) in a message.
fn pveum_lines(message: &str) -> Vec<String> {
    message
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| quoted.starts_with("pveum "))
        .map(str::to_owned)
        .collect()
}

/// Runs the lifecycle, granting what each privilege error's hint says, until it goes
/// through; a hint that doesn't fix its error fails the test. Returns the hints applied.
async fn follow_the_hints(t: &Setup) -> Vec<String> {
    let mut applied = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..20 {
        let Err((step, err)) = lifecycle(t).await else {
            return applied;
        };
        let ControlError::Privilege { .. } = &err else {
            panic!("{step}: not a privilege error: {err}")
        };
        let message = err.to_string();
        assert!(
            !seen.contains(&message),
            "{step}: the hint did not grant what it said:\n{message}\nafter {applied:#?}"
        );
        seen.push(message.clone());
        let lines = pveum_lines(&message);
        assert!(!lines.is_empty(), "{step}: no pveum line in {message}");
        for line in lines {
            t.double
                .pveum(&line)
                .unwrap_or_else(|e| panic!("{step}: `{line}` fails: {e}"));
            applied.push(line);
        }
    }
    panic!("the hints never got the lifecycle through: {applied:#?}")
}

#[tokio::test]
async fn the_privilege_hints_work_for_a_privilege_separated_token() {
    // A fresh user with a privilege-separated token (pveum's default): the token gets the
    // intersection of its own ACLs and its user's, so a hint must grant both.
    let t = setup();
    t.double
        .set_up_access(
            "pveum user add okd@pve
             pveum user token add okd@pve appliance",
        )
        .unwrap();
    let applied = follow_the_hints(&t).await;
    // From nothing: VM.Allocate (a bare 403, named from the call) first, Sys.AccessNetwork
    // (download-url's bare `or`) with its own role.
    assert!(
        applied[0].starts_with("pveum acl modify /vms --users okd@pve"),
        "{applied:#?}"
    );
    assert!(
        applied
            .contains(&"pveum role add OKDSysAccessNetwork --privs Sys.AccessNetwork".to_owned()),
        "{applied:#?}"
    );
    for line in &applied {
        assert!(
            line.contains("--users okd@pve") && line.contains("--tokens 'okd@pve!appliance'")
                || line.starts_with("pveum role add")
                || line.starts_with("pveum role modify"),
            "{line}"
        );
    }
    // On a second run the role exists: its `add` is refused, its `modify` still sets it.
    assert!(
        t.double
            .pveum("pveum role add OKDSysAccessNetwork --privs Sys.AccessNetwork")
            .unwrap_err()
            .contains("already exists")
    );
    t.double
        .pveum("pveum role modify OKDSysAccessNetwork --privs Sys.AccessNetwork")
        .unwrap();
}

/// The `pveum` lines of the README's Proxmox section, in order.
fn readme_pveum() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Machines on Proxmox VE"))
        .expect("the README's Proxmox section");
    section
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("pveum "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_readme_grants_are_enough_for_both_paths_and_each_is_needed() {
    let lines = readme_pveum();
    assert!(
        lines.iter().any(|l| l.starts_with("pveum user token add")),
        "{lines:#?}"
    );
    let t = setup();
    t.double.set_up_access(&lines.join("\n")).unwrap();
    if let Err((step, e)) = lifecycle(&t).await {
        panic!("{step} fails with the README's grants: {e}");
    }
    // Every grant is needed: without it something fails, with the privilege named on the
    // grant's path; the ISO storage's and the node's only on the ISO path.
    for (i, line) in lines.iter().enumerate() {
        let Some(granted) = line.strip_prefix("pveum acl modify ") else {
            continue;
        };
        let granted = granted.split(' ').next().unwrap();
        let t = setup();
        let without: Vec<&str> = lines
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, l)| l.as_str())
            .collect();
        t.double.set_up_access(&without.join("\n")).unwrap();
        let err = lifecycle(&t).await.err();
        assert!(err.is_some(), "nothing needs `{line}`");
        let (step, err) = err.unwrap();
        let ControlError::Privilege { path, .. } = &err else {
            panic!("without `{line}`, {step}: {err}")
        };
        assert!(path.starts_with(granted), "without `{line}`, {step}: {err}");
        if granted == "/storage/local" || granted.starts_with("/nodes/") {
            assert!(step.starts_with("worker-0"), "without `{line}`: {step}");
        }
    }
}

#[tokio::test]
async fn the_iso_path_names_its_storage_privileges_and_destroys_nothing_it_cant_finish() {
    let t = setup();
    let worker_iso = iso_volume(&t.plan, "worker-0");
    let withhold = |privs: &[&str]| {
        t.double.with(|s| {
            s.faults.withheld = privs.iter().map(|p| (*p).to_owned()).collect();
        });
    };
    // Listing the ISO storage needs Datastore.Audit or Datastore.AllocateSpace.
    withhold(&["Datastore.Audit", "Datastore.AllocateSpace"]);
    let err = t.one("worker-0", Action::Ensure).await.unwrap_err();
    let ControlError::Privilege {
        privilege, path, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(path, "/storage/local");
    assert_eq!(privilege, "Datastore.Audit|Datastore.AllocateSpace");
    assert!(
        err.to_string().contains("--roles PVEDatastoreUser"),
        "{err}"
    );
    withhold(&[]);
    t.one("worker-0", Action::Ensure).await.unwrap();
    // Without the listing, destroy stops before it destroys anything.
    withhold(&["Datastore.Audit", "Datastore.AllocateSpace"]);
    let err = t.one("worker-0", Action::Destroy).await.unwrap_err();
    assert!(matches!(err, ControlError::Privilege { .. }), "{err:?}");
    assert!(t.double.with(|s| s.vms.contains_key(&100)));
    // Deleting the ISO needs Datastore.Allocate: the VM goes, the ISO stays, and says so.
    withhold(&["Datastore.Allocate"]);
    let err = t.one("worker-0", Action::Destroy).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("destroyed vm 100"), "{msg}");
    assert!(
        msg.contains(&format!("{worker_iso} stays"))
            && msg.contains("lacks Datastore.Allocate on /storage/local"),
        "{msg}"
    );
    assert!(t.double.with(|s| s.vms.is_empty() && s.isos.len() == 1));
    withhold(&[]);
    let done = t.one("worker-0", Action::Destroy).await.unwrap();
    assert!(
        done.to_string().contains("no VM; removed local:iso/"),
        "{done}"
    );
}

#[tokio::test]
async fn proxmox_before_8_2_is_refused_and_the_version_is_asked_once_per_batch() {
    for release in ["7.4", "8.0", "8.1"] {
        let t = setup();
        t.double.set_release(release);
        let reports = t.run(Action::Ensure).await;
        for r in &reports {
            let err = r.result.as_ref().unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("(release {release})"))
                    && msg.contains("needs Proxmox VE 8.2 or later"),
                "{msg}"
            );
        }
        // Nothing but the version was asked, once.
        let requests = t.double.with(|s| s.requests.clone());
        assert_eq!(requests, ["GET /api2/json/version"], "{release}");
    }
    for release in ["8.2", "8.4", "9.0", "9.1"] {
        let t = setup();
        t.double.set_release(release);
        if let Err((step, e)) = lifecycle(&t).await {
            panic!("{release}: {step}: {e}");
        }
        let asked = t.double.with(|s| {
            s.requests
                .iter()
                .filter(|r| r.ends_with("/version"))
                .count()
        });
        assert_eq!(asked, 1, "{release}");
    }
}

#[tokio::test]
async fn transient_errors_while_a_task_is_polled_do_not_end_the_wait() {
    use pve::PollFault;
    let mut t = setup();
    // The stalled poll takes the request timeout (5 s at least).
    t.plan.timeouts.task = Duration::from_secs(20);
    t.provider = Arc::new(provider(&t.plan).with_pace(quick()));
    // pveproxy relaying a node it can't reach (595), a TLS failure on the way (596), a
    // reload that closes the connection, a poll that gets no answer (the request timeout):
    // the task goes on in Proxmox, and so does the wait.
    t.double.with(|s| {
        s.faults.poll_failures = [
            PollFault::Status(595, "Connection refused"),
            PollFault::Reset,
            PollFault::Status(596, "Connection reset by peer"),
            PollFault::Stall,
            PollFault::Status(503, "Service Unavailable"),
        ]
        .into();
    });
    let done = t.one("master-0", Action::Ensure).await.unwrap();
    assert!(done.to_string().starts_with("created vm 9002"), "{done}");
    assert!(t.double.with(|s| s.faults.poll_failures.is_empty()));
    // Past the task's deadline the wait ends, naming the last error.
    t.plan.timeouts.task = Duration::from_secs(1);
    t.provider = Arc::new(provider(&t.plan).with_pace(quick()));
    t.double.with(|s| {
        s.faults.poll_failures =
            std::iter::repeat_n(PollFault::Status(595, "No route to host"), 500).collect();
    });
    let err = t.one("master-0", Action::PowerOn).await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Timeout, "{err}");
    assert!(err.to_string().contains("No route to host"), "{err}");
}

#[tokio::test]
async fn a_vm_another_node_holds_is_found_and_acted_on_there() {
    let t = setup();
    t.one("master-0", Action::Ensure).await.unwrap();
    // A migration (or HA recovery after pve1 failed) moved it to pve2.
    t.double.move_vm(9002, pve::NODE2);
    let mark = t.mark();
    let again = t.one("master-0", Action::Ensure).await.unwrap();
    assert_eq!(
        again,
        Outcome::Unchanged("vm 9002 on pve2 exists".into()),
        "{again}"
    );
    assert_eq!(t.changes_since(mark), Vec::<String>::new());
    let started = t.one("master-0", Action::PowerOn).await.unwrap();
    assert_eq!(started.to_string(), "started vm 9002 on pve2");
    assert!(t.double.with(|s| s.vms[&9002].running));
    let Outcome::Status(MachineStatus::Present { id, power, .. }) =
        t.one("master-0", Action::Status).await.unwrap()
    else {
        panic!("absent")
    };
    assert_eq!((id.as_str(), power), ("vm 9002 on pve2", Power::On));
    // Under HA, power requests go through ha-manager (no overrule-shutdown there), and the
    // state changes a little after their task: the provider waits for it.
    t.double.with(|s| s.vms.get_mut(&9002).unwrap().ha = true);
    let stopped = t.one("master-0", Action::PowerOff).await.unwrap();
    assert!(stopped.to_string().contains("vm 9002 on pve2"), "{stopped}");
    assert!(t.double.with(|s| !s.vms[&9002].running));
    t.one("master-0", Action::PowerOn).await.unwrap();
    assert!(t.double.with(|s| s.vms[&9002].running));
    let destroyed = t.one("master-0", Action::Destroy).await.unwrap();
    assert!(
        destroyed.to_string().contains("destroyed vm 9002 on pve2"),
        "{destroyed}"
    );
    assert!(t.double.with(|s| s.vms.is_empty()));
    t.double.with(|s| {
        let on_pve2 = s
            .requests
            .iter()
            .filter(|r| !r.starts_with("GET") && r.contains("/nodes/pve2/qemu/9002"))
            .count();
        assert!(on_pve2 >= 5, "{:#?}", s.requests);
        assert!(
            !s.requests
                .iter()
                .any(|r| !r.starts_with("GET") && r.contains("/nodes/pve1/qemu/9002"))
        );
    });
}

#[tokio::test]
async fn locks_other_tasks_hold_are_waited_out() {
    let t = setup();
    // A cluster-filesystem lock (pve-cluster `cfs_lock`) times out twice.
    t.double.with(|s| s.faults.cfs_lock_timeouts = 2);
    t.one("master-0", Action::Ensure).await.unwrap();
    // A backup holds the VM's config lock for a while.
    t.double.lock_for(9002, "backup", 4);
    let started = t.one("master-0", Action::PowerOn).await.unwrap();
    assert_eq!(started.to_string(), "started vm 9002 on pve1");
}

#[tokio::test]
async fn a_request_timeout_is_never_shorter_than_the_401_delay() {
    // pveproxy answers a refused token after 3 s: a shorter request timeout would turn the
    // 401 into "no answer".
    let mut t = setup();
    t.plan.timeouts.request = Duration::from_secs(1);
    write_secret(t.double.dir.path(), "00000000-wrong-secret");
    t.provider = Arc::new(provider(&t.plan).with_pace(quick()));
    let err = t.one("master-0", Action::Status).await.unwrap_err();
    assert!(matches!(err, ControlError::Credentials(_)), "{err:?}");
}

#[tokio::test]
async fn a_node_pveproxy_cannot_reach_is_a_connection_error() {
    let t = setup();
    t.one("master-0", Action::Ensure).await.unwrap();
    t.double.move_vm(9002, pve::NODE2);
    t.double.with(|s| s.offline.insert(pve::NODE2.into()));
    let err = t.one("master-0", Action::PowerOn).await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Connection, "{err}");
    assert!(err.to_string().contains("595 No route to host"), "{err}");
}

#[tokio::test]
async fn a_paused_vm_is_resumed_and_stopped_not_shut_down() {
    let t = setup();
    t.one("master-0", Action::Ensure).await.unwrap();
    t.one("master-0", Action::PowerOn).await.unwrap();
    t.double
        .with(|s| s.vms.get_mut(&9002).unwrap().paused = true);
    let Outcome::Status(MachineStatus::Present { power, .. }) =
        t.one("master-0", Action::Status).await.unwrap()
    else {
        panic!("absent")
    };
    assert_eq!(power, Power::Other("paused".into()));
    let resumed = t.one("master-0", Action::PowerOn).await.unwrap();
    assert_eq!(
        resumed.to_string(),
        "resumed vm 9002 on pve1 (it was paused)"
    );
    assert!(t.double.with(|s| !s.vms[&9002].paused));
    // A paused guest can't take an ACPI shutdown (qemu-server refuses it): stopped at once.
    t.double
        .with(|s| s.vms.get_mut(&9002).unwrap().paused = true);
    let mark = t.mark();
    let stopped = t.one("master-0", Action::PowerOff).await.unwrap();
    assert_eq!(
        stopped.to_string(),
        "vm 9002 on pve1 was paused: stopped (a paused guest can't shut down)"
    );
    assert!(t.double.with(|s| !s.vms[&9002].running));
    assert!(
        !t.changes_since(mark)
            .iter()
            .any(|r| r.ends_with("/status/shutdown"))
    );
}

#[tokio::test]
async fn a_slow_shutdown_request_is_not_taken_for_a_guest_ignoring_acpi() {
    let t = setup();
    t.one("master-0", Action::Ensure).await.unwrap();
    t.one("master-0", Action::PowerOn).await.unwrap();
    // The node does the shutdown but answers after the request timeout (at least 5 s).
    t.double.with(|s| {
        s.faults
            .slow
            .insert("/status/shutdown".into(), Duration::from_secs(6));
    });
    let done = t.one("master-0", Action::PowerOff).await.unwrap();
    assert_eq!(done.to_string(), "shut down vm 9002 on pve1");
    assert!(
        !t.double
            .with(|s| s.requests.iter().any(|r| r.ends_with("/status/stop")))
    );
}

#[tokio::test]
async fn a_boot_order_change_on_a_running_vm_waits_for_a_cold_start() {
    let t = setup();
    t.one("master-0", Action::Ensure).await.unwrap();
    t.one("master-0", Action::PowerOn).await.unwrap();
    let changed = t
        .one("master-0", Action::BootOnce(BootDevice::Disk))
        .await
        .unwrap();
    assert!(
        changed
            .to_string()
            .contains("pending until the VM is stopped and started"),
        "{changed}"
    );
    t.double.with(|s| {
        let vm = &s.vms[&9002];
        assert_eq!(vm.pending["boot"], "order=scsi0;net0");
        assert_eq!(vm.config["boot"], "order=net0;scsi0");
    });
    t.one("master-0", Action::PowerOff).await.unwrap();
    t.one("master-0", Action::PowerOn).await.unwrap();
    assert_eq!(
        t.double.with(|s| s.vms[&9002].config["boot"].clone()),
        "order=scsi0;net0"
    );
}

#[tokio::test]
async fn a_vm_not_yet_in_the_status_data_is_found_by_its_config() {
    let t = setup();
    t.one("master-0", Action::Ensure).await.unwrap();
    t.one("master-0", Action::PowerOn).await.unwrap();
    // Right after a create (or a node's restart) `/cluster/resources` has no name and an
    // `unknown` status: the config and the node's own status say.
    t.double.with(|s| s.faults.no_status_data = true);
    let again = t.one("master-0", Action::Ensure).await.unwrap();
    assert_eq!(again, Outcome::Unchanged("vm 9002 on pve1 exists".into()));
    let running = t.one("master-0", Action::PowerOn).await.unwrap();
    assert_eq!(
        running,
        Outcome::Unchanged("vm 9002 on pve1 is running".into())
    );
    assert!(matches!(
        t.one("master-0", Action::PowerOff).await.unwrap(),
        Outcome::Changed(_)
    ));
}

/// A node's ISO carries its kernel arguments: after they change (another install disk, say),
/// the ISO in Proxmox's storage is another file, fetched anew and inserted, and the outdated
/// one is removed; destroy removes every ISO of the VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_iso_made_with_other_kernel_arguments_is_replaced() {
    let mut t = setup();
    let old_iso = iso_volume(&t.plan, "worker-0");
    assert!(t.run(Action::Ensure).await.iter().all(|r| r.result.is_ok()));
    assert!(t.double.with(|s| s.isos.contains(&old_iso)));
    // The same config with another install disk for the worker.
    let text = config_text(&t.double, &Trust::Ca(&t.double.ca_file)).replace(
        "machine: { install: iso } }",
        "install_dev: /dev/sdb, machine: { install: iso } }",
    );
    let loaded = config::parse(
        &text,
        "okd.yml",
        t.double.dir.path(),
        config::InstallCheck::Skip,
    )
    .unwrap_or_else(|e| panic!("{}", e.render(config::RenderStyle::Plain)));
    let mut plan = Plan::derive(&loaded.config, 1).control;
    plan.timeouts = t.plan.timeouts;
    t.plan = plan;
    let new_iso = iso_volume(&t.plan, "worker-0");
    assert_ne!(new_iso, old_iso);
    let inserted = t.one("worker-0", Action::InsertMedia).await.unwrap();
    assert!(matches!(inserted, Outcome::Changed(_)), "{inserted}");
    t.double.with(|s| {
        assert!(s.isos.contains(&new_iso), "{:?}", s.isos);
        assert!(
            !s.isos.contains(&old_iso),
            "the outdated ISO stays: {:?}",
            s.isos
        );
        assert_eq!(s.vms[&100].config["ide2"], format!("{new_iso},media=cdrom"));
    });
    let destroyed = t.one("worker-0", Action::Destroy).await.unwrap();
    assert!(
        destroyed
            .to_string()
            .contains(&format!("removed {new_iso}")),
        "{destroyed}"
    );
    assert!(t.double.with(|s| s.isos.is_empty()));
}

/// Grants on the pool `okd` alone (pve-manager's pools, pve-access-control's pool roles) and
/// `pool: okd` in the config; `pool add` runs unless `pool_exists` is false.
fn pool_only(t: &mut Setup, pool_exists: bool) {
    let mut script = String::from(
        "pveum user add okd@pve\n\
         pveum user token add okd@pve appliance\n",
    );
    if pool_exists {
        script.push_str("pveum pool add okd\n");
    }
    for (path, role) in [
        ("/pool/okd", "PVEVMAdmin"),
        ("/storage/local-lvm", "PVEDatastoreUser"),
        // Destroy looks for the VM's ISOs.
        ("/storage/local", "PVEDatastoreUser"),
        ("/sdn/zones/localnetwork/vmbr1", "PVESDNUser"),
    ] {
        script.push_str(&format!(
            "pveum acl modify {path} --users okd@pve --tokens 'okd@pve!appliance' --roles {role}\n"
        ));
    }
    t.double.set_up_access(&script).unwrap();
    let ProviderConfig::Proxmox(px) = &mut t.plan.provider else {
        panic!("not proxmox")
    };
    px.pool = Some("okd".into());
    t.provider = Arc::new(provider(&t.plan).with_pace(quick()));
}

/// A create of `node` a pool-only token can't see outlives the task timeout: the error
/// doesn't claim nothing was left, a rerun while it runs waits on it, and the rerun after it
/// ended finds the VM and makes none. Returns the VM's ID.
async fn a_hidden_create_is_followed(t: &Setup, node: &str) -> u32 {
    t.double.with(|s| {
        s.faults.hang_tasks.insert("qmcreate".into());
    });
    let err = t.one(node, Action::Ensure).await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Timeout, "{err}");
    let msg = err.to_string();
    assert!(!msg.contains("no VM was left behind"), "{msg}");
    // The token can't see it; Proxmox holds it.
    let vmid = t
        .double
        .with(|s| *s.vms.keys().next().expect("the placeholder"));
    assert!(
        msg.contains(&format!(
            "vm {vmid} may still be being created out of this token's sight"
        )),
        "{msg}"
    );
    let again = t.one(node, Action::Ensure).await.unwrap_err();
    assert_eq!(again.kind(), FailureKind::Timeout, "{again}");
    assert!(
        again
            .to_string()
            .contains("is still being created by an earlier run"),
        "{again}"
    );
    assert_eq!(creates(t), 1);
    // Once it ends, the rerun follows it, finds the VM (now in the pool) and makes none.
    t.double.release("qmcreate");
    let done = t.one(node, Action::Ensure).await.unwrap();
    assert!(matches!(done, Outcome::Unchanged(_)), "{done:?}");
    assert_eq!(creates(t), 1);
    assert_eq!(
        t.double.with(|s| (
            s.vms.keys().copied().collect::<Vec<_>>(),
            s.vms[&vmid].name().to_owned(),
            s.access.pool_of(vmid).map(str::to_owned)
        )),
        (
            vec![vmid],
            format!("{node}.okd.lab.example.com"),
            Some("okd".to_owned())
        )
    );
    vmid
}

#[tokio::test]
async fn a_create_a_pool_only_grant_cant_see_yet_is_followed_to_its_end_not_made_twice() {
    // qemu-server adds a VM to its pool at the end of the create task, so a token granted on
    // the pool alone doesn't see the create's placeholder; one that outlives the task timeout
    // is followed by the next run from the create's record.
    let mut t = setup();
    t.plan.timeouts.task = Duration::from_secs(1);
    pool_only(&mut t, true);
    assert_eq!(a_hidden_create_is_followed(&t, "master-0").await, 9002);
    // The pool's grant covers the rest of the VM's life.
    t.one("master-0", Action::PowerOn).await.unwrap();
    t.one("master-0", Action::PowerOff).await.unwrap();
    t.one("master-0", Action::Destroy).await.unwrap();
    assert_eq!(
        t.double.with(|s| s.access.pool_of(9002).map(str::to_owned)),
        None
    );
}

#[tokio::test]
async fn a_hidden_create_of_a_node_without_a_vmid_is_followed_by_its_recorded_id() {
    // As above, for a node whose VM ID comes from `nextid`: the record keeps the ID the first
    // run was given, so the rerun follows that create instead of taking another free ID (the
    // hidden placeholder holds one out of this token's sight).
    let mut t = setup();
    t.plan.timeouts.task = Duration::from_secs(1);
    pool_only(&mut t, true);
    // Already downloaded: a pool-only token may not download.
    let iso = iso_volume(&t.plan, "worker-0");
    t.double.with(|s| s.isos.insert(iso));
    a_hidden_create_is_followed(&t, "worker-0").await;
}

#[tokio::test]
async fn a_pool_that_does_not_exist_is_named_with_the_command_that_makes_it() {
    let mut t = setup();
    pool_only(&mut t, false);
    let err = t.one("master-0", Action::Ensure).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("pool 'okd' does not exist"), "{msg}");
    assert!(msg.contains("`pveum pool add okd`"), "{msg}");
    assert!(msg.contains("no VM was left behind"), "{msg}");
    assert!(t.double.with(|s| s.vms.is_empty()));
}

#[tokio::test]
async fn an_ha_resource_in_state_ignored_is_powered_directly() {
    // pve-ha-manager's `vm_is_ha_managed` says no for `ignored`: qemu-server's stop acts at
    // once (no ha-manager request), and `overrule-shutdown` applies to it as to any VM.
    let t = setup();
    t.double.add_vm(
        9002,
        "master-0.okd.lab.example.com",
        "52:54:00:00:00:02",
        true,
    );
    t.double.with(|s| {
        let vm = s.vms.get_mut(&9002).unwrap();
        vm.ha = true;
        vm.ha_ignored = true;
        // The shutdown times out, so the stop follows.
        vm.ignores_acpi = true;
    });
    t.one("master-0", Action::PowerOff).await.unwrap();
    assert!(t.double.with(|s| !s.vms[&9002].running));
    let stop = t.double.with(|s| {
        s.requests
            .iter()
            .zip(&s.params)
            .find(|(r, _)| r.ends_with("/qemu/9002/status/stop"))
            .map(|(_, p)| p.clone())
    });
    assert_eq!(
        stop.and_then(|p| p.get("overrule-shutdown").cloned()),
        Some("1".to_owned())
    );
}

#[tokio::test]
async fn a_create_lock_no_task_holds_is_waited_for_and_said_how_to_clear() {
    // A create cut off by a crash (the worker killed between `create_and_lock_config` and
    // `write_config`) leaves a placeholder with `lock: create` that no task will ever end.
    let mut t = setup();
    t.plan.timeouts.task = Duration::from_millis(300);
    t.provider = Arc::new(provider(&t.plan).with_pace(quick()));
    t.double.with(|s| {
        s.vms.insert(
            9002,
            pve::Vm {
                node: pve::NODE.into(),
                config: std::collections::BTreeMap::from([("lock".into(), "create".into())]),
                pending: std::collections::BTreeMap::new(),
                running: false,
                paused: false,
                ignores_acpi: false,
                ha: false,
                ha_ignored: false,
            },
        );
    });
    let err = t.one("master-0", Action::Ensure).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("vm 9002 on pve1 is still being created"),
        "{msg}"
    );
    assert!(
        msg.contains("`qm unlock 9002` then `qm destroy 9002`"),
        "{msg}"
    );
    assert_eq!(creates(&t), 0);
}

/// Grants for a create on `/vms` and the storages, and SDN.Use on `sdn` alone; the config's
/// NIC on `bridge` with `vlan`.
fn network_grants(t: &mut Setup, sdn: &str, bridge: &str, vlan: Option<u16>) {
    let mut script = String::from(
        "pveum user add okd@pve\n\
         pveum user token add okd@pve appliance\n",
    );
    for (path, role) in [
        ("/vms", "PVEVMAdmin"),
        ("/storage/local-lvm", "PVEDatastoreUser"),
        ("/storage/local", "PVEDatastoreUser"),
        (sdn, "PVESDNUser"),
    ] {
        script.push_str(&format!(
            "pveum acl modify {path} --users okd@pve --tokens 'okd@pve!appliance' --roles {role}\n"
        ));
    }
    t.double.set_up_access(&script).unwrap();
    let ProviderConfig::Proxmox(px) = &mut t.plan.provider else {
        panic!("not proxmox")
    };
    px.bridge = bridge.into();
    px.vlan = vlan;
    t.provider = Arc::new(provider(&t.plan).with_pace(quick()));
}

#[tokio::test]
async fn a_nic_is_checked_on_its_vnets_zone_and_its_vlan() {
    // pve-guest-common `check_vnet_access`: SDN.Use on `/sdn/zones/ZONE/BRIDGE`, ZONE the
    // VNet's zone when the bridge is an SDN VNet (else `localnetwork`), and with a VLAN tag
    // on `.../TAG`, which an ACL on the bridge propagates to (pveum's `--propagate` is 1).
    // (bridge, vlan, the grant that is not enough, where it is needed, net0 once granted)
    for (bridge, vlan, wrong, needed, net0) in [
        (
            "okdnet",
            None,
            "/sdn/zones/localnetwork/okdnet",
            "/sdn/zones/okdzone/okdnet",
            "virtio=52:54:00:00:00:02,bridge=okdnet",
        ),
        (
            "vmbr1",
            Some(20),
            "/sdn/zones/localnetwork/vmbr2",
            "/sdn/zones/localnetwork/vmbr1/20",
            "virtio=52:54:00:00:00:02,bridge=vmbr1,tag=20",
        ),
    ] {
        let mut t = setup();
        t.double
            .with(|s| s.vnets.insert("okdnet".into(), "okdzone".into()));
        network_grants(&mut t, wrong, bridge, vlan);
        let err = t.one("master-0", Action::Ensure).await.unwrap_err();
        let ControlError::Privilege {
            privilege, path, ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!((privilege.as_str(), path.as_str()), ("SDN.Use", needed));
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("pveum acl modify {needed} ")),
            "{msg}"
        );
        assert!(t.double.with(|s| s.vms.is_empty()));

        let mut t = setup();
        t.double
            .with(|s| s.vnets.insert("okdnet".into(), "okdzone".into()));
        // The bridge's ACL covers its VLANs.
        let granted = needed.trim_end_matches("/20");
        network_grants(&mut t, granted, bridge, vlan);
        t.one("master-0", Action::Ensure).await.unwrap();
        assert_eq!(t.double.with(|s| s.vms[&9002].config["net0"].clone()), net0);
    }
}

#[tokio::test]
async fn an_https_iso_url_the_node_cant_verify_says_where_the_ca_goes() {
    // pve-storage `download_url` hands the URL to wget, which checks it against the Proxmox
    // node's own CA store; the appliance can't pass a CA, so the error says where it goes.
    let mut t = setup();
    for m in &mut t.plan.machines {
        if let okd_appliance::plan::machines::InstallMedium::Iso { url, .. } = &mut m.install {
            *url = url.replacen("http://", "https://", 1);
        }
    }
    t.double.with(|s| s.faults.untrusted_https = true);
    let err = t.one("worker-0", Action::Ensure).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("download failed: exit code 5"), "{msg}");
    assert!(
        msg.contains("could not verify the certificate of install.base_url")
            && msg.contains("update-ca-certificates"),
        "{msg}"
    );
    assert_eq!(err.kind(), FailureKind::Action);
    // The failed download left no volume behind, and no VM was made.
    assert!(t.double.with(|s| s.isos.is_empty() && s.vms.is_empty()));
    // With the CA in the node's store, the same run goes through.
    t.double.with(|s| s.faults.untrusted_https = false);
    t.one("worker-0", Action::Ensure).await.unwrap();
    assert!(
        t.double
            .with(|s| s.downloads.iter().all(|(u, _)| u.starts_with("https://")))
    );
}
