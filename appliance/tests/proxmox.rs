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
    Plan::derive(&loaded.config, 1).control
}

struct Setup {
    double: PveDouble,
    plan: ControlPlan,
    provider: Arc<ProxmoxProvider>,
    journal: Journal,
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
    ProxmoxProvider::new(px, plan.timeouts).unwrap()
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
    let created = t.run(Action::Ensure).await;
    assert!(changed(&created), "{}", show(&created));
    t.double.with(|s| {
        let master = &s.vms[&9002];
        assert_eq!(master.name, MASTER);
        assert_eq!(
            master.config["net0"],
            "virtio=52:54:00:00:00:02,bridge=vmbr1"
        );
        assert_eq!(master.config["boot"], "order=net0;scsi0");
        assert_eq!(master.config["cores"], "4");
        assert_eq!(master.config["memory"], "16384");
        assert!(master.config["scsi0"].starts_with("local-lvm:vm-9002-disk-0"));
        assert!(!master.config.contains_key("ide2"));
        assert!(!master.config.contains_key("args"));
        // The worker took the next free ID; its ISO was fetched from the appliance first.
        let worker = &s.vms[&100];
        assert_eq!(worker.config["boot"], "order=scsi0;ide2");
        assert_eq!(
            worker.config["ide2"],
            "local:iso/worker-0.okd.lab.example.com.iso,media=cdrom"
        );
        assert_eq!(worker.config["memory"], "8192");
        assert_eq!(
            s.downloads,
            [(
                "http://10.0.0.1:8080/iso/worker-0.iso".to_owned(),
                "local:iso/worker-0.okd.lab.example.com.iso".to_owned()
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
        msg.contains("the ISO local:iso/worker-0.okd.lab.example.com.iso stays"),
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
        assert_eq!(s.vms[&100].name, "someone-else-100");
        assert_eq!(s.vms[&101].name, "worker-0.okd.lab.example.com");
    });
}

#[tokio::test]
async fn a_missing_privilege_is_named_with_its_path() {
    for (privilege, node, path) in [
        ("VM.Allocate", "master-0", "/vms/9002"),
        ("SDN.Use", "master-0", "/sdn/zones/localnetwork/vmbr1"),
        ("Datastore.AllocateSpace", "master-0", "/storage/local-lvm"),
        ("Datastore.AllocateTemplate", "worker-0", "/storage/local"),
        ("VM.PowerMgmt", "master-0", "/vms/9002"),
    ] {
        let t = setup();
        if privilege == "VM.PowerMgmt" {
            t.one(node, Action::Ensure).await.unwrap();
        }
        t.double.with(|s| {
            s.faults.withheld.insert(privilege.into());
        });
        let action = if privilege == "VM.PowerMgmt" {
            Action::PowerOn
        } else {
            Action::Ensure
        };
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
        assert!(err.to_string().contains("pveum acl modify"), "{err}");
        assert_eq!(err.kind(), FailureKind::Action);
        // Nothing was created by a refused request.
        assert!(t.double.with(|s| s.vms.is_empty()) || privilege == "VM.PowerMgmt");
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
async fn a_task_that_never_ends_hits_the_task_timeout_and_says_what_is_left() {
    let mut t = setup();
    t.plan.timeouts.task = Duration::from_secs(1);
    t.provider = Arc::new(provider(&t.plan).with_pace(quick()));
    t.double.with(|s| {
        s.faults.hang_tasks.insert("qmcreate".into());
    });
    let started = Instant::now();
    let err = t.one("master-0", Action::Ensure).await.unwrap_err();
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
    assert!(msg.contains("vm 9002 on pve1 was left behind"), "{msg}");
    assert!(msg.contains("nodes destroy master-0 --yes"), "{msg}");
}

#[tokio::test]
async fn an_api_that_never_answers_hits_the_request_timeout() {
    let mut t = setup();
    t.plan.timeouts.request = Duration::from_secs(1);
    t.provider = Arc::new(provider(&t.plan).with_pace(quick()));
    t.double.with(|s| s.faults.stall = true);
    let started = Instant::now();
    let reports = t.run(Action::PowerOn).await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
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
async fn a_create_that_fails_halfway_says_what_was_left_behind() {
    let t = setup();
    t.double.with(|s| s.faults.create_leaves_vm = true);
    let err = t.one("master-0", Action::Ensure).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("storage 'local-lvm' is full"), "{msg}");
    assert!(msg.contains("vm 9002 on pve1 was left behind"), "{msg}");
    // The leftover can be destroyed (it has the node's MAC).
    t.double.with(|s| s.faults.create_leaves_vm = false);
    t.one("master-0", Action::Destroy).await.unwrap();
    assert!(t.double.with(|s| s.vms.is_empty()));
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
