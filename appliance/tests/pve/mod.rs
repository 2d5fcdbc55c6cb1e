//! A test double of a Proxmox VE cluster's REST API (two nodes, `pve1` and `pve2`, one API
//! endpoint), for the control module's tests.
//!
//! It serves HTTPS on 127.0.0.1 with a certificate from a test CA made here, checks the API
//! token of every request, and validates every request against the official schema
//! (`schema.rs`), and its own answers against the schema's `returns`: a violation is recorded
//! (a bad request is answered 400 as Proxmox would), and
//! [`PveDouble::assert_clean`] (also run on drop) fails the test for it. Permissions are
//! evaluated as Proxmox does (`access.rs`: roles, ACL propagation, privilege-separated tokens,
//! compound checks), with the messages Proxmox gives, bare ones included. It keeps VMs, tasks
//! and ISO volumes, answers with Proxmox's shapes (UPIDs, task status with `exitstatus`,
//! `{"data": ...}` envelopes, error messages in body and reason phrase), and injects the
//! failure modes users of Proxmox automation meet: lock timeouts, missing privileges, `nextid`
//! races, tasks that never end, a guest that ignores ACPI, failed creates, transient errors
//! while a task is polled, and requests that are never answered.
//!
//! A Rust double rather than a Python one: it runs inside `cargo test` with nothing to install
//! in CI, and tests inject faults and read VM state directly.
//!
//! Every behaviour cites the upstream file it follows (proxmox/<repository> and path; read at
//! qemu-server e6352be, pve-manager 14a22df, pve-storage 0c56bad, pve-access-control 5ccd07d,
//! pve-http-server 5c9e4ea, pve-cluster 7091d92, pve-guest-common 4a8f6cb, pve-common f665029).
//!
//! Time is counted in requests: every authenticated request moves every running task one
//! step, and a task stops after `task_polls` steps (so a client that polls sees it end, and so
//! does one that only lists VMs).
//!
//! Why Rust and not Python: it runs in `cargo test` with no interpreter or package to
//! install in CI, in the test's own process, so a test injects faults and inspects VM state
//! directly (no IPC), and the schema check is the same code for every test.

// Two test crates include this module; each uses part of it.
#![allow(dead_code)]

pub mod access;
pub mod schema;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

pub use access::Access;

pub const NODE: &str = "pve1";
/// The cluster's second node, where HA or a migration may move a VM.
pub const NODE2: &str = "pve2";
pub const TOKEN_ID: &str = "okd@pve!appliance";
pub const SECRET: &str = "4f0c1e7a-6b55-4a53-9d0e-2f1b8c3a9e71";

/// The double's default set-up: the user, a privilege-separated token, and both granted
/// Administrator on `/` (tests narrow it with `withheld` or start from [`Access::builtin`]).
pub const ADMIN_SETUP: &str = "\
pveum user add okd@pve
pveum user token add okd@pve appliance
pveum acl modify / --users okd@pve --tokens 'okd@pve!appliance' --roles Administrator
";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    /// The node whose `qemu-server/` holds the config (pve-cluster: a VM ID is on one node).
    pub node: String,
    pub config: BTreeMap<String, String>,
    /// Changes written to a running VM that don't hotplug (qemu-server `QemuServer.pm`
    /// `vmconfig_hotplug_pending`: `boot` among them), applied at its next cold start.
    pub pending: BTreeMap<String, String>,
    pub running: bool,
    /// Running, but paused (`qmpstatus: paused`); its status is still `running`.
    pub paused: bool,
    /// The guest ignores ACPI power buttons: shutdown times out.
    pub ignores_acpi: bool,
    /// Managed by HA (`hastate` in `/cluster/resources`).
    pub ha: bool,
    /// ... but with the HA state `ignored`: listed with that `hastate`, and not HA-managed
    /// (pve-ha-manager `src/PVE/HA/Config.pm` `vm_is_ha_managed`: "ignored service behave as
    /// if they were not managed by HA"), so power calls act directly.
    pub ha_ignored: bool,
}

impl Vm {
    /// The `name` of its config; empty for a create's placeholder.
    pub fn name(&self) -> &str {
        self.config.get("name").map_or("", String::as_str)
    }

    /// What VM lists show: the name, or `VM <id>` without one (qemu-server `QemuServer.pm`
    /// `vmstatus`).
    fn listed_name(&self, vmid: u32) -> String {
        match self.config.get("name") {
            Some(n) => n.clone(),
            None => format!("VM {vmid}"),
        }
    }

    fn lock(&self) -> Option<&str> {
        self.config.get("lock").map(String::as_str)
    }
}

/// What happens when a task stops.
#[derive(Debug, Clone)]
enum Effect {
    None,
    /// qemu-server `API2/Qemu.pm` `create_vm`: the worker writes the whole config (without
    /// the `lock: create` of the placeholder).
    Created {
        vmid: u32,
        config: BTreeMap<String, String>,
        /// ... and at its very end adds the VM to its pool (`add_vm_to_pool`, after
        /// `write_config`): until then a grant on the pool alone does not reach the VM.
        pool: Option<String>,
    },
    /// ... or, when it fails, unlinks the config (`unlink($conffile)`): nothing is left.
    CreateFailed {
        vmid: u32,
    },
    /// An HA request (`hastart`, `hastop`): the task only asks ha-manager; the VM's state
    /// changes when the HA stack acts on it, [`HA_LAG`] steps after the task.
    Ha {
        vmid: u32,
        running: bool,
    },
    Power {
        vmid: u32,
        running: bool,
    },
    /// A backup (or another task holding the config lock) ends.
    Unlock {
        vmid: u32,
    },
    /// pve-common `Tools.pm` `download_file_from_url`: wget writes a temporary file, renamed
    /// to the volume when the download (and its checks) succeeded.
    Downloaded {
        volume: String,
    },
}

/// Steps between an HA request's task and the state change it asked for.
pub const HA_LAG: u32 = 3;

#[derive(Debug, Clone)]
struct Task {
    upid: String,
    node: String,
    /// Steps until it stops.
    left: u32,
    hang: bool,
    exitstatus: String,
    starttime: u64,
    pid: u32,
    kind: String,
    id: String,
    effect: Effect,
}

/// A transient failure of one task-status request.
#[derive(Debug, Clone)]
pub enum PollFault {
    /// An error status as pveproxy relays it (595/596 from a failed proxy connection to the
    /// task's node: pve-http-server `APIServer/AnyEvent.pm` `proxy_request`, AnyEvent::HTTP's
    /// 59x codes).
    Status(u16, &'static str),
    /// The connection closes without an answer, as when pveproxy reloads and its old workers
    /// end their connections.
    Reset,
    /// No answer at all (the client's request timeout).
    Stall,
}

/// Failures to inject; counters count down as they fire.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// The next N creates fail in their task with `can't lock file ... got timeout`.
    pub lock_timeouts_on_create: u32,
    /// The next N config updates are refused with `can't lock file ... got timeout`.
    pub lock_timeouts_on_put: u32,
    /// The next N creates are refused with a cluster-filesystem lock timeout (pve-cluster
    /// `Cluster.pm` `cfs_lock`: `cfs-lock '...' error: got lock request timeout`).
    pub cfs_lock_timeouts: u32,
    /// Privileges the token lacks, whatever its ACLs.
    pub withheld: BTreeSet<String>,
    /// The next N `nextid` answers are taken by another client before the create.
    pub nextid_races: u32,
    /// Tasks of these types never stop (`qmcreate`, `qmstart`, `download`...).
    pub hang_tasks: BTreeSet<String>,
    /// Requests are read and never answered.
    pub stall: bool,
    /// Creates fail in their task (the storage is full); the config is unlinked.
    pub create_fails: bool,
    /// The next task-status requests fail this way, one each.
    pub poll_failures: VecDeque<PollFault>,
    /// How long a 401 is delayed (pve-http-server `APIServer/AnyEvent.pm`: "always delay
    /// unauthorized calls by 3 seconds").
    pub unauthorized_delay: Duration,
    /// Requests whose path ends so are done at once but answered this much later (a busy
    /// node).
    pub slow: BTreeMap<String, Duration>,
    /// The node's system CA store doesn't hold the CA of the appliance's https `base_url`:
    /// wget in `download-url` fails its TLS check.
    pub untrusted_https: bool,
    /// `/cluster/resources` has no status data for the VMs yet (pvestatd's next round):
    /// no `name`, status `unknown` (pve-manager `PVE/API2Tools.pm` `extract_vm_stats`).
    pub no_status_data: bool,
}

#[derive(Debug)]
pub struct State {
    pub vms: BTreeMap<u32, Vm>,
    /// ISO volumes (`local:iso/x.iso`); the ISO storage is as if shared by the nodes.
    pub isos: BTreeSet<String>,
    pub access: Access,
    pub faults: Faults,
    pub violations: Vec<String>,
    /// `METHOD /path` of every request, in order.
    pub requests: Vec<String>,
    /// Parameters of every request, in order.
    pub params: Vec<BTreeMap<String, String>>,
    /// Downloads asked for: (url, volume).
    pub downloads: Vec<(String, String)>,
    /// Steps a task runs before it stops.
    pub task_polls: u32,
    /// `GET /version`: (version, release, repoid).
    pub version: (String, String, String),
    /// The cluster's nodes.
    pub nodes: BTreeSet<String>,
    /// Nodes that are down: pveproxy can't relay to them (595).
    pub offline: BTreeSet<String>,
    /// SDN VNets (`/etc/pve/sdn/vnets.cfg`): VNet name -> its zone. A bridge that isn't one is
    /// in the zone `localnetwork` (pve-guest-common `check_vnet_access`).
    pub vnets: BTreeMap<String, String>,
    tasks: BTreeMap<String, Task>,
    /// Effects due in so many steps.
    later: Vec<(u32, Effect)>,
    next_pid: u32,
}

impl Default for State {
    fn default() -> State {
        let mut access = Access::builtin();
        access
            .pveum_script(ADMIN_SETUP)
            .expect("the default set-up");
        State {
            vms: BTreeMap::new(),
            isos: BTreeSet::new(),
            access,
            faults: Faults {
                unauthorized_delay: Duration::from_secs(3),
                ..Faults::default()
            },
            violations: Vec::new(),
            requests: Vec::new(),
            params: Vec::new(),
            downloads: Vec::new(),
            task_polls: 0,
            version: version_of("8.2"),
            nodes: BTreeSet::from([NODE.to_owned(), NODE2.to_owned()]),
            offline: BTreeSet::new(),
            vnets: BTreeMap::new(),
            tasks: BTreeMap::new(),
            later: Vec::new(),
            next_pid: 0x1000,
        }
    }
}

/// `GET /version` of a release, as pve-manager `PVE/API2.pm` `version` answers it: the
/// package version (`7.4-17` before 8.0, `8.2.4` since), the `x.y` release, the short git
/// revision (8 hex digits before 8.0, 16 since).
pub fn version_of(release: &str) -> (String, String, String) {
    let (version, repoid) = match release {
        "7.4" => ("7.4-17", "513c62be"),
        "8.0" => ("8.0.4", "d258a813cfa6b390"),
        "8.1" => ("8.1.10", "4b06efb5db453f29"),
        "8.2" => ("8.2.4", "faa83925c9641325"),
        "8.4" => ("8.4.1", "2a5fa54a8503f96d"),
        "9.0" => ("9.0.3", "025864202ebb6109"),
        "9.1" => ("9.1.2", "9d436f37a0ac4172"),
        other => panic!("the double has no version for release {other}"),
    };
    (version.into(), release.into(), repoid.into())
}

pub struct PveDouble {
    pub url: String,
    pub addr: SocketAddr,
    /// A directory for the test's files; the CA certificate is `ca.pem` in it.
    pub dir: tempfile::TempDir,
    pub ca_file: PathBuf,
    /// SHA-256 of the server certificate.
    pub fingerprint: [u8; 32],
    pub state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the double does with a request.
enum Answer {
    Reply(Reply, Option<Value>),
    /// A 401, after pveproxy's delay.
    Delayed(Reply, Duration),
    /// Close the connection without an answer.
    Reset,
    /// Never answer.
    Stall,
}

impl PveDouble {
    pub fn start() -> PveDouble {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(
            rcgen::DnType::CommonName,
            "Proxmox Virtual Environment test CA",
        );
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, NODE);
        let cert = params.signed_by(&key, &ca).unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let digest = ring::digest::digest(&ring::digest::SHA256, cert.der());
        let fingerprint: [u8; 32] = digest.as_ref().try_into().unwrap();

        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let schema = Arc::new(schema::Schema::load());
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let shared = Arc::clone(&state);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
                loop {
                    let (tcp, _) = tokio::select! {
                        _ = &mut stop_rx => return,
                        accepted = listener.accept() => match accepted {
                            Ok(a) => a,
                            Err(_) => continue,
                        },
                    };
                    let (acceptor, state, schema) =
                        (acceptor.clone(), Arc::clone(&shared), Arc::clone(&schema));
                    tokio::spawn(async move {
                        // A client that refuses the certificate ends here; that's its test.
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = hyper::service::service_fn(move |req| {
                            let (state, schema) = (Arc::clone(&state), Arc::clone(&schema));
                            async move { handle(req, &state, &schema).await }
                        });
                        // An error from the service (a `Reset`) closes the connection.
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            });
        });
        PveDouble {
            url: format!("https://{addr}"),
            addr,
            dir,
            ca_file,
            fingerprint,
            state,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Fails the test when any request broke the schema.
    pub fn assert_clean(&self) {
        let violations = self.with(|s| s.violations.clone());
        assert!(
            violations.is_empty(),
            "requests the Proxmox VE API schema rejects:\n{}",
            violations.join("\n")
        );
    }

    /// Starts over with no users, tokens or ACLs, then runs `pveum` lines.
    pub fn set_up_access(&self, script: &str) -> Result<(), String> {
        self.with(|s| {
            s.access = Access::builtin();
            s.access.pveum_script(script)
        })
    }

    /// Runs `pveum` lines on top of what is there.
    pub fn pveum(&self, script: &str) -> Result<(), String> {
        self.with(|s| s.access.pveum_script(script))
    }

    /// What `GET /version` answers: `7.4`, `8.1`, `8.2`, `9.0`...
    pub fn set_release(&self, release: &str) {
        self.with(|s| s.version = version_of(release));
    }

    /// A VM somebody else made (or an earlier run), straight into the state, on `pve1`.
    pub fn add_vm(&self, vmid: u32, name: &str, mac: &str, running: bool) {
        self.with(|s| {
            let mut config = BTreeMap::new();
            config.insert("name".into(), name.into());
            config.insert("net0".into(), format!("virtio={mac},bridge=vmbr1"));
            config.insert("cores".into(), "4".into());
            config.insert("memory".into(), "16384".into());
            config.insert("boot".into(), "order=net0;scsi0".into());
            config.insert(
                "scsi0".into(),
                format!("local-lvm:vm-{vmid}-disk-0,iothread=1,size=120G"),
            );
            s.vms.insert(
                vmid,
                Vm {
                    node: NODE.into(),
                    config,
                    pending: BTreeMap::new(),
                    running,
                    paused: false,
                    ignores_acpi: false,
                    ha: false,
                    ha_ignored: false,
                },
            );
        });
    }

    /// HA recovery or a migration: the VM's config moves to `node` (pve-cluster: a VM's
    /// config lives under the node that runs it, `nodes/<node>/qemu-server/<vmid>.conf`).
    pub fn move_vm(&self, vmid: u32, node: &str) {
        self.with(|s| s.vms.get_mut(&vmid).expect("the VM").node = node.into());
    }

    /// A task (a backup: `vzdump`) holds the VM's config lock for `steps` steps
    /// (pve-guest-common `AbstractConfig.pm` `check_lock`: `VM is locked (backup)`).
    pub fn lock_for(&self, vmid: u32, lock: &str, steps: u32) {
        self.with(|s| {
            s.vms
                .get_mut(&vmid)
                .expect("the VM")
                .config
                .insert("lock".into(), lock.into());
            s.later.push((steps, Effect::Unlock { vmid }));
        });
    }

    /// Lets hanging tasks of this type end (they stop on the following steps).
    pub fn release(&self, kind: &str) {
        self.with(|s| {
            s.faults.hang_tasks.remove(kind);
            for t in s.tasks.values_mut().filter(|t| t.kind == kind) {
                t.hang = false;
            }
        });
    }
}

impl Drop for PveDouble {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if !std::thread::panicking() {
            self.assert_clean();
        }
    }
}

type Reply = Response<Full<Bytes>>;

fn ok(data: Value) -> Reply {
    let mut envelope = serde_json::Map::new();
    envelope.insert("data".into(), data);
    let mut r = Response::new(Full::new(Bytes::from(Value::Object(envelope).to_string())));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json;charset=UTF-8"),
    );
    r
}

/// Proxmox's error: the message in the reason phrase and in the body.
fn error(status: u16, message: &str) -> Reply {
    error_with(status, message, None)
}

fn error_with(status: u16, message: &str, errors: Option<Value>) -> Reply {
    let mut body = json!({ "data": null, "message": format!("{message}\n") });
    if let Some(errors) = errors {
        body["errors"] = errors;
    }
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(message.as_bytes().to_vec()) {
        r.extensions_mut().insert(reason);
    }
    r
}

/// pve-common `PVE/Exception.pm` `raise_param_exc`: 400 with per-parameter errors.
fn param_error(param: &str, message: &str) -> Reply {
    error_with(
        400,
        "Parameter verification failed.",
        Some(json!({ param: message })),
    )
}

async fn handle(
    req: Request<Incoming>,
    state: &Mutex<State>,
    schema: &schema::Schema,
) -> Result<Reply, std::io::Error> {
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let auth = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if state.lock().unwrap().faults.stall {
        std::future::pending::<()>().await;
    }
    let answer = answer(
        state,
        schema,
        &method,
        &path,
        &query,
        auth.as_deref(),
        &content_type,
        &body,
    );
    let slow = {
        let s = state.lock().unwrap();
        s.faults
            .slow
            .iter()
            .find(|(suffix, _)| path.ends_with(suffix.as_str()))
            .map(|(_, d)| *d)
    };
    if let Some(delay) = slow {
        tokio::time::sleep(delay).await;
    }
    let (reply, returns) = match answer {
        Answer::Reply(reply, returns) => (reply, returns),
        Answer::Delayed(reply, delay) => {
            tokio::time::sleep(delay).await;
            return Ok(reply);
        }
        Answer::Reset => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "pveproxy reloads",
            ));
        }
        Answer::Stall => std::future::pending().await,
    };
    let Some(returns) = returns else {
        return Ok(reply);
    };
    // The double's own answers must have the shapes the schema promises.
    let (parts, body) = reply.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if parts.status == StatusCode::OK {
        let data = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("data").cloned())
            .unwrap_or(Value::Null);
        let problems = schema::check_return(&returns, &data, "data");
        if !problems.is_empty() {
            state.lock().unwrap().violations.extend(
                problems.into_iter().map(|p| {
                    format!("the double answered {method} {path} against the schema: {p}")
                }),
            );
        }
    }
    Ok(Response::from_parts(parts, Full::new(body)))
}

/// Everything but the final body check, with the state locked.
#[allow(clippy::too_many_arguments)]
fn answer(
    state: &Mutex<State>,
    schema: &schema::Schema,
    method: &str,
    path: &str,
    query: &str,
    auth: Option<&str>,
    content_type: &str,
    body: &Bytes,
) -> Answer {
    let method = method.to_owned();
    let mut s = state.lock().unwrap();
    s.requests.push(format!("{method} {path}"));
    // pve-access-control `AccessControl.pm` `verify_token`: the token must exist and its
    // secret match; pve-http-server `AnyEvent.pm` delays the 401.
    let token_ok = auth
        .and_then(|a| a.strip_prefix("PVEAPIToken="))
        .and_then(|a| a.split_once('='))
        .is_some_and(|(id, secret)| {
            id == TOKEN_ID && secret == SECRET && s.access.tokens.contains_key(id)
        });
    if !token_ok {
        return Answer::Delayed(
            error(401, "authentication failure"),
            s.faults.unauthorized_delay,
        );
    }
    s.tick();
    let Some(rest) = path.strip_prefix("/api2/json") else {
        s.violations
            .push(format!("{method} {path}: not under /api2/json"));
        return Answer::Reply(error(404, "not found"), None);
    };
    let segments: Vec<String> = rest
        .split('/')
        .filter(|p| !p.is_empty())
        .map(|p| {
            percent_encoding::percent_decode_str(p)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let Some(matched) = schema.route(&segments) else {
        s.violations
            .push(format!("{method} {path}: no such path in the schema"));
        return Answer::Reply(
            error(501, &format!("Method '{method} {rest}' not implemented")),
            None,
        );
    };
    let mut params = matched.path_params.clone();
    let mut form_params = Vec::new();
    match method.as_str() {
        "GET" | "DELETE" => {
            if !body.is_empty() {
                s.violations
                    .push(format!("{method} {path}: a body on {method}"));
            }
            form_params.extend(url::form_urlencoded::parse(query.as_bytes()).into_owned());
        }
        _ => {
            if !query.is_empty() {
                s.violations.push(format!(
                    "{method} {path}: parameters in the query of a {method}"
                ));
            }
            if !body.is_empty() && !content_type.starts_with("application/x-www-form-urlencoded") {
                s.violations
                    .push(format!("{method} {path}: body of type {content_type:?}"));
            }
            form_params.extend(url::form_urlencoded::parse(body).into_owned());
        }
    }
    for (k, v) in form_params {
        if params.insert(k.clone(), v).is_some() {
            s.violations
                .push(format!("{method} {path}: parameter {k} given twice"));
        }
    }
    s.params.push(params.clone());
    let violations = schema::check(&matched, &method, &params, true);
    if !violations.is_empty() {
        let errors: serde_json::Map<String, Value> = violations
            .iter()
            .map(|v| ("request".to_owned(), Value::String(v.clone())))
            .collect();
        s.violations.extend(violations);
        return Answer::Reply(
            error_with(
                400,
                "Parameter verification failed.",
                Some(Value::Object(errors)),
            ),
            None,
        );
    }
    // pve-manager `PVE/HTTPServer.pm`: `check_api2_permissions` runs on the node that got the
    // request, before it is proxied to `{node}`.
    if let Some(check) = matched
        .info
        .get(method.as_str())
        .and_then(|i| i.get("permissions"))
        .and_then(|p| p.get("check"))
    {
        let denied = s.checker().exec(check, &params, false).err();
        if let Some(message) = denied {
            return Answer::Reply(error(403, &message), None);
        }
    }
    // A task-status request may meet a transient failure on its way.
    if matched.template == "/nodes/{node}/tasks/{upid}/status"
        && let Some(fault) = s.faults.poll_failures.pop_front()
    {
        return match fault {
            PollFault::Status(code, message) => Answer::Reply(error(code, message), None),
            PollFault::Reset => Answer::Reset,
            PollFault::Stall => Answer::Stall,
        };
    }
    let returns = matched
        .info
        .get(method.as_str())
        .and_then(|i| i.get("returns"))
        .cloned()
        .unwrap_or(Value::Null);
    Answer::Reply(
        route(&mut s, &matched.template, &method, &params),
        Some(returns),
    )
}

fn lock_message(vmid: u32) -> String {
    format!("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout")
}

/// qemu-server `PVE/QemuServer/Drive.pm` `$NEW_DISK_RE`: `[STORAGE:]SIZE` (GiB) allocates a
/// new volume.
fn new_disk(volume: &str) -> Option<(Option<&str>, f64)> {
    let re = regex::Regex::new(r"^(([^/:\s]+):)?(\d+(\.\d+)?)$").expect("pattern");
    let c = re.captures(volume)?;
    Some((
        c.get(2).map(|m| m.as_str()),
        c.get(3)?.as_str().parse().ok()?,
    ))
}

/// The first element of a drive's property string: its volume (`file=` optional).
fn drive_volume(value: &str) -> &str {
    let first = value.split(',').next().unwrap_or("");
    first.strip_prefix("file=").unwrap_or(first)
}

fn drive_is_cdrom(value: &str) -> bool {
    value.split(',').any(|p| p == "media=cdrom")
}

/// qemu-server `PVE/QemuServer/Drive.pm` `is_valid_drivename`.
fn is_drive(key: &str) -> bool {
    regex::Regex::new(
        r"^(ide[0-3]|sata[0-5]|scsi([0-9]|[1-2][0-9]|30)|virtio([0-9]|1[0-5])|efidisk0|tpmstate0)$",
    )
    .expect("pattern")
    .is_match(key)
}

impl State {
    fn checker(&self) -> access::Checker<'_> {
        access::Checker {
            access: &self.access,
            who: TOKEN_ID,
            withheld: &self.faults.withheld,
        }
    }

    /// One step of time: running tasks move on; one that stops has its effect.
    fn tick(&mut self) {
        let mut stopped = Vec::new();
        for (left, effect) in &mut self.later {
            *left -= 1;
            if *left == 0 {
                stopped.push(effect.clone());
            }
        }
        self.later.retain(|(left, _)| *left > 0);
        for t in self.tasks.values_mut() {
            if !t.hang && t.left > 0 {
                t.left -= 1;
                if t.left == 0 {
                    stopped.push(t.effect.clone());
                }
            }
        }
        for effect in stopped {
            self.apply(effect);
        }
    }

    fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::None => {}
            Effect::Created { vmid, config, pool } => {
                if let Some(vm) = self.vms.get_mut(&vmid) {
                    vm.config = config;
                    // pve-access-control `AccessControl.pm` `add_vm_to_pool`: only into a
                    // pool that still exists.
                    if let Some(members) = pool.and_then(|p| self.access.pools.get_mut(&p)) {
                        members.insert(vmid);
                    }
                }
            }
            Effect::CreateFailed { vmid } => {
                self.vms.remove(&vmid);
            }
            Effect::Downloaded { volume } => {
                self.isos.insert(volume);
            }
            Effect::Ha { vmid, running } => {
                self.later.push((HA_LAG, Effect::Power { vmid, running }));
            }
            Effect::Power { vmid, running } => {
                if let Some(vm) = self.vms.get_mut(&vmid) {
                    vm.running = running;
                    vm.paused = false;
                }
            }
            Effect::Unlock { vmid } => {
                if let Some(vm) = self.vms.get_mut(&vmid) {
                    vm.config.remove("lock");
                }
            }
        }
    }

    /// A task on `node` (pve-common `PVE/RESTEnvironment.pm` `fork_worker`: the UPID names
    /// the node, the worker type, its ID and the user, here the token).
    fn task(
        &mut self,
        node: &str,
        kind: &str,
        id: &str,
        exitstatus: &str,
        effect: Effect,
    ) -> String {
        self.next_pid += 1;
        let starttime = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let upid = format!(
            "UPID:{node}:{:08X}:{:08X}:{starttime:08X}:{kind}:{id}:{TOKEN_ID}:",
            self.next_pid,
            self.next_pid * 7
        );
        let hang = self.faults.hang_tasks.contains(kind);
        let left = self.task_polls;
        if left == 0 && !hang {
            self.apply(effect.clone());
        }
        self.tasks.insert(
            upid.clone(),
            Task {
                upid: upid.clone(),
                node: node.to_owned(),
                left,
                hang,
                exitstatus: exitstatus.to_owned(),
                starttime,
                pid: self.next_pid,
                kind: kind.to_owned(),
                id: id.to_owned(),
                effect,
            },
        );
        upid
    }

    fn may_audit(&self, vmid: u32) -> bool {
        self.checker().has(&format!("/vms/{vmid}"), "VM.Audit")
    }

    /// `GET /cluster/resources?type=vm` (pve-manager `PVE/API2/Cluster.pm` `resources`,
    /// `PVE/API2Tools.pm` `extract_vm_stats`): every node's VMs the token may audit, with
    /// their node, status, name and config lock; `hastate` for HA-managed ones.
    fn resources(&self) -> Value {
        Value::Array(
            self.vms
                .iter()
                .filter(|(vmid, _)| self.may_audit(**vmid))
                .map(|(vmid, vm)| {
                    let mut entry = json!({
                        "id": format!("qemu/{vmid}"),
                        "type": "qemu",
                        "vmid": vmid,
                        "node": vm.node,
                        "name": vm.listed_name(*vmid),
                        "status": if vm.running { "running" } else { "stopped" },
                        "template": 0,
                        "maxcpu": vm.config.get("cores").and_then(|c| c.parse::<u64>().ok()).unwrap_or(1),
                        "maxmem": 16u64 << 30,
                        "uptime": if vm.running { 42 } else { 0 },
                    });
                                        if let Some(lock) = vm.lock() {
                        entry["lock"] = Value::String(lock.to_owned());
                    }
                    if self.faults.no_status_data {
                        let fields = entry.as_object_mut().expect("an object");
                        fields.remove("name");
                        fields.insert("status".into(), "unknown".into());
                    }
                    if vm.ha {
                        let state = if vm.ha_ignored { "ignored" } else if vm.running { "started" } else { "stopped" };
                        entry["hastate"] = Value::String(state.into());
                    }
                    entry
                })
                .collect(),
        )
    }

    /// `GET /nodes/{node}/qemu` (qemu-server `API2/Qemu.pm` `vmlist`): the node's VMs the
    /// token may audit.
    fn vm_list(&self, node: &str) -> Value {
        Value::Array(
            self.vms
                .iter()
                .filter(|(vmid, vm)| vm.node == node && self.may_audit(**vmid))
                .map(|(vmid, vm)| {
                    let mut entry = json!({
                        "vmid": vmid,
                        "name": vm.listed_name(*vmid),
                        "status": if vm.running { "running" } else { "stopped" },
                        "cpus": vm.config.get("cores").and_then(|c| c.parse::<u64>().ok()).unwrap_or(1),
                        "maxmem": 16u64 << 30,
                        "uptime": if vm.running { 42 } else { 0 },
                    });
                    if let Some(lock) = vm.lock() {
                        entry["lock"] = Value::String(lock.to_owned());
                    }
                    entry
                })
                .collect(),
        )
    }

    /// qemu-server `API2/Qemu.pm` `$check_storage_access` over the drives of `p`: a new disk
    /// needs Datastore.AllocateSpace on its storage; an existing volume (an ISO) is checked by
    /// pve-storage `PVE/Storage.pm` `check_volume_access`: Datastore.Allocate on its storage,
    /// or, for ISOs, Datastore.AllocateSpace or Datastore.Audit.
    fn check_storage_access(&self, p: &BTreeMap<String, String>) -> Result<(), String> {
        let c = self.checker();
        for (key, value) in p.iter().filter(|(k, _)| is_drive(k)) {
            let volume = drive_volume(value);
            if volume == "none" || volume.is_empty() {
                continue;
            }
            if !drive_is_cdrom(value)
                && let Some((storage, _)) = new_disk(volume)
            {
                let Some(storage) = storage else {
                    return Err(format!(
                        "{key}: no storage ID specified (and no default storage)"
                    ));
                };
                c.check(&format!("/storage/{storage}"), &["Datastore.AllocateSpace"])?;
                continue;
            }
            let Some((storage, _)) = volume.split_once(':') else {
                return Err("Only root can pass arbitrary filesystem paths.".into());
            };
            let path = format!("/storage/{storage}");
            if c.check(&path, &["Datastore.Allocate"]).is_ok() {
                continue;
            }
            c.check_any(&path, &["Datastore.AllocateSpace", "Datastore.Audit"])?;
        }
        Ok(())
    }

    /// qemu-server `API2/Qemu.pm` `$check_vm_modify_config_perm`: each option's privilege on
    /// `/vms/{vmid}` (drives are checked elsewhere; `boot` is a disk option).
    /// Through `check_vm_perm`: with a pool (a create's), the privilege on `/pool/{pool}`
    /// suffices, else `/vms/{vmid}`'s is needed (pve-access-control `RPCEnvironment.pm`).
    fn check_modify_config(
        &self,
        vmid: u32,
        pool: Option<&str>,
        keys: &[&String],
    ) -> Result<(), String> {
        let c = self.checker();
        let path = format!("/vms/{vmid}");
        for key in keys {
            let key = key.as_str();
            if is_drive(key) || key == "cdrom" || key == "digest" || key == "delete" {
                continue;
            }
            let privilege = match key {
                "cores" | "cpu" | "cpulimit" | "cpuunits" | "numa" | "smp" | "sockets"
                | "vcpus" => "VM.Config.CPU",
                "memory" | "balloon" | "shares" => "VM.Config.Memory",
                "acpi" | "hotplug" | "kvm" | "machine" | "scsihw" | "smbios1" | "tablet"
                | "vga" | "watchdog" => "VM.Config.HWType",
                "agent" | "autostart" | "bios" | "description" | "keyboard" | "localtime"
                | "name" | "onboot" | "ostype" | "protection" | "reboot" | "startdate" | "tdf"
                | "template" => "VM.Config.Options",
                "boot" | "bootdisk" | "vmstatestorage" => "VM.Config.Disk",
                k if k.starts_with("net") => "VM.Config.Network",
                other => return Err(format!("only root can set '{other}' config")),
            };
            if let Some(pool) = pool
                && c.check(&format!("/pool/{pool}"), &[privilege]).is_ok()
            {
                continue;
            }
            c.check(&path, &[privilege])?;
        }
        Ok(())
    }

    /// qemu-server `QemuServer.pm` `check_bridge_access` -> pve-guest-common
    /// `PVE/GuestHelpers.pm` `check_vnet_access` (4a8f6cb): SDN.Use on
    /// `/sdn/zones/ZONE/BRIDGE`, or on `.../TAG` with a VLAN tag (which an ACL on the bridge
    /// propagates to). ZONE is the VNet's zone when the bridge is an SDN VNet, else
    /// `localnetwork`.
    fn check_bridge_access(&self, p: &BTreeMap<String, String>) -> Result<(), String> {
        for (_, net) in p.iter().filter(|(k, _)| k.starts_with("net")) {
            let field = |name: &str| {
                net.split(',')
                    .find_map(|part| part.strip_prefix(&format!("{name}=")))
            };
            let Some(bridge) = field("bridge") else {
                continue;
            };
            let zone = self
                .vnets
                .get(bridge)
                .map_or("localnetwork", String::as_str);
            let path = match field("tag") {
                Some(tag) => format!("/sdn/zones/{zone}/{bridge}/{tag}"),
                None => format!("/sdn/zones/{zone}/{bridge}"),
            };
            self.checker().check(&path, &["SDN.Use"])?;
        }
        Ok(())
    }

    /// The VM `vmid` on `node`, or qemu-server's error for a config that isn't there.
    fn vm_on(&self, node: &str, vmid: u32) -> Result<&Vm, Box<Reply>> {
        match self.vms.get(&vmid) {
            Some(vm) if vm.node == node => Ok(vm),
            _ => Err(Box::new(error(
                500,
                &format!(
                    "Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
                ),
            ))),
        }
    }

    fn create(&mut self, node: &str, vmid: u32, p: &BTreeMap<String, String>) -> Reply {
        // qemu-server `API2/Qemu.pm` `create_vm`, in its order (at e6352be).
        let c = self.checker();
        let pool = p.get("pool");
        // `$rpcenv->check_pool_exist($pool)`: `raise_perm_exc("pool '$pool' does not exist")`.
        if let Some(pool) = pool
            && !self.access.pools.contains_key(pool)
        {
            return error(
                403,
                &format!("Permission check failed (pool '{pool}' does not exist)"),
            );
        }
        let allowed = c.check(&format!("/vms/{vmid}"), &["VM.Allocate"]).is_ok()
            || pool.is_some_and(|pool| c.check(&format!("/pool/{pool}"), &["VM.Allocate"]).is_ok());
        if !allowed {
            // `raise_perm_exc()`: no path, no privilege.
            return error(403, "Permission check failed");
        }
        let keys: Vec<&String> = p
            .keys()
            .filter(|k| !matches!(k.as_str(), "node" | "vmid" | "pool" | "storage" | "start"))
            .collect();
        if let Err(e) = self
            .check_storage_access(p)
            .and_then(|()| self.check_modify_config(vmid, pool.map(String::as_str), &keys))
            .and_then(|()| self.check_bridge_access(p))
        {
            return if e.starts_with("Permission check failed") {
                error(403, &e)
            } else {
                error(500, &e)
            };
        }
        // `$check_drive_param`, before the fork: an ISO needs `media=cdrom`.
        for key in keys.iter().filter(|k| is_drive(k)) {
            let value = &p[key.as_str()];
            if drive_volume(value).contains(":iso/") && !drive_is_cdrom(value) {
                return param_error(key, "explicit 'media=cdrom' is required for iso images");
            }
        }
        // pve-cluster `Cluster.pm` `cfs_lock`, around writing the config.
        if self.faults.cfs_lock_timeouts > 0 {
            self.faults.cfs_lock_timeouts -= 1;
            return error(
                500,
                &format!("cfs-lock 'file-qemu-server_{vmid}_conf' error: got lock request timeout"),
            );
        }
        // pve-guest-common `AbstractConfig.pm` `create_and_lock_config` with pve-cluster
        // `Cluster.pm` `check_vmid_unused`: a placeholder holding `lock: create`.
        if let Some(other) = self.vms.get(&vmid) {
            return error(
                500,
                &format!(
                    "unable to create VM {vmid} - VM {vmid} already exists on node '{}'",
                    other.node
                ),
            );
        }
        self.vms.insert(
            vmid,
            Vm {
                node: node.to_owned(),
                config: BTreeMap::from([("lock".to_owned(), "create".to_owned())]),
                pending: BTreeMap::new(),
                running: false,
                paused: false,
                ignores_acpi: false,
                ha: false,
                ha_ignored: false,
            },
        );
        let id = vmid.to_string();
        if self.faults.lock_timeouts_on_create > 0 {
            self.faults.lock_timeouts_on_create -= 1;
            // The worker's `lock_config_full($vmid, 1, ...)` times out.
            return ok(Value::String(self.task(
                node,
                "qmcreate",
                &id,
                &lock_message(vmid),
                Effect::CreateFailed { vmid },
            )));
        }
        // From here on it is the `qmcreate` worker: an error is the task's exit status,
        // `"$emsg $err"` (`unable to create VM N - ...`), and the placeholder is unlinked.
        // `create_disks`: an existing volume (not `STORAGE:SIZE`) must be there
        // (`volume_size_info`: "volume $volid does not exist").
        let missing = keys.iter().filter(|k| is_drive(k)).find_map(|key| {
            let volume = drive_volume(&p[key.as_str()]);
            let there = volume == "none"
                || new_disk(volume).is_some()
                || self.isos.contains(volume)
                || self
                    .vms
                    .values()
                    .any(|vm| vm.config.values().any(|v| drive_volume(v) == volume));
            (!there).then(|| volume.to_owned())
        });
        if let Some(volume) = missing {
            return ok(Value::String(self.task(
                node,
                "qmcreate",
                &id,
                &format!("unable to create VM {vmid} - volume {volume} does not exist"),
                Effect::CreateFailed { vmid },
            )));
        }
        if self.faults.create_fails {
            return ok(Value::String(self.task(
                node,
                "qmcreate",
                &id,
                &format!("unable to create VM {vmid} - lvcreate 'pve/vm-{vmid}-disk-0' error:   Volume group \"pve\" has insufficient free space"),
                Effect::CreateFailed { vmid },
            )));
        }
        // `create_disks`: a new volume per `STORAGE:SIZE`, the drive's other options kept.
        let mut config = BTreeMap::new();
        for (k, v) in p {
            if matches!(k.as_str(), "node" | "vmid" | "pool" | "storage" | "start") {
                continue;
            }
            let v = match new_disk(drive_volume(v)) {
                Some((Some(storage), size)) if is_drive(k) && !drive_is_cdrom(v) => {
                    let mut d = format!("{storage}:vm-{vmid}-disk-0");
                    for opt in v.split(',').skip(1) {
                        d.push(',');
                        d.push_str(opt);
                    }
                    d.push_str(&format!(",size={size}G"));
                    d
                }
                _ => v.clone(),
            };
            config.insert(k.clone(), v);
        }
        config.insert(
            "smbios1".into(),
            format!("uuid=00000000-0000-4000-8000-{vmid:012}"),
        );
        config.insert(
            "vmgenid".into(),
            format!("00000000-0000-4000-8000-{vmid:012}"),
        );
        ok(Value::String(self.task(
            node,
            "qmcreate",
            &id,
            "OK",
            Effect::Created {
                vmid,
                config,
                pool: pool.cloned(),
            },
        )))
    }

    /// qemu-server `API2/Qemu.pm` `update_vm_api` (PUT: synchronous).
    fn update(&mut self, node: &str, vmid: u32, p: &BTreeMap<String, String>) -> Reply {
        let keys: Vec<&String> = p.keys().filter(|k| *k != "node" && *k != "vmid").collect();
        if let Err(e) = self
            .check_modify_config(vmid, None, &keys)
            .and_then(|()| self.check_storage_access(p))
            .and_then(|()| self.check_bridge_access(p))
        {
            return error(403, &e);
        }
        if self.faults.lock_timeouts_on_put > 0 {
            self.faults.lock_timeouts_on_put -= 1;
            return error(500, &lock_message(vmid));
        }
        let vm = match self.vm_on(node, vmid) {
            Ok(vm) => vm,
            Err(reply) => return *reply,
        };
        // pve-guest-common `AbstractConfig.pm` `check_lock`.
        if let Some(lock) = vm.lock() {
            return error(500, &format!("VM is locked ({lock})"));
        }
        // `$check_drive_perms`: a CD-ROM needs VM.Config.CDROM, other drives VM.Config.Disk.
        for key in keys.iter().filter(|k| is_drive(k)) {
            let privilege = if drive_is_cdrom(&p[key.as_str()]) {
                "VM.Config.CDROM"
            } else {
                "VM.Config.Disk"
            };
            if let Err(e) = self.checker().check(&format!("/vms/{vmid}"), &[privilege]) {
                return error(403, &e);
            }
        }
        for key in keys.iter().filter(|k| is_drive(k)) {
            let volume = drive_volume(&p[key.as_str()]);
            if volume != "none" && !self.isos.contains(volume) {
                return error(500, &format!("volume '{volume}' does not exist"));
            }
        }
        let vm = self.vms.get_mut(&vmid).expect("checked");
        for key in keys {
            let value = p[key.as_str()].clone();
            // `vmconfig_hotplug_pending`: on a running VM only the fast-plug options and
            // drives (a CD change) apply now; the rest waits for a cold start.
            let hot = is_drive(key) || matches!(key.as_str(), "name" | "description" | "onboot");
            if vm.running && !hot {
                vm.pending.insert(key.clone(), value);
            } else {
                vm.config.insert(key.clone(), value);
            }
        }
        ok(Value::Null)
    }

    /// The `status/*` actions (qemu-server `API2/Qemu.pm` `vm_start`, `vm_stop`,
    /// `vm_shutdown`, `vm_reset`, `vm_resume`).
    fn power(
        &mut self,
        node: &str,
        vmid: u32,
        action: &str,
        p: &BTreeMap<String, String>,
    ) -> Reply {
        let vm = match self.vm_on(node, vmid) {
            Ok(vm) => vm,
            Err(reply) => return *reply,
        };
        if let Some(lock) = vm.lock() {
            return error(500, &format!("VM is locked ({lock})"));
        }
        if vm.ha && !vm.ha_ignored && matches!(action, "start" | "stop" | "shutdown") {
            // `vm_start` / `vm_stop` / `vm_shutdown` of an HA-managed VM only ask
            // ha-manager (`hastart`, `hastop`); `overrule-shutdown` is refused for them.
            if action == "stop" && p.get("overrule-shutdown").map(String::as_str) == Some("1") {
                return param_error("overrule-shutdown", "Not applicable for HA resources.");
            }
            let running = action == "start";
            let kind = if running { "hastart" } else { "hastop" };
            let upid = self.task(
                node,
                kind,
                &vmid.to_string(),
                "OK",
                Effect::Ha { vmid, running },
            );
            return ok(Value::String(upid));
        }
        let vm = self.vms.get_mut(&vmid).expect("checked");
        let (kind, exit) = match action {
            "start" => {
                if vm.running {
                    return error(500, &format!("VM {vmid} already running"));
                }
                // `vm_start`: pending changes are applied at a cold start.
                let pending = std::mem::take(&mut vm.pending);
                vm.config.extend(pending);
                vm.running = true;
                vm.paused = false;
                ("qmstart", "OK".to_owned())
            }
            "shutdown" => {
                if !vm.running {
                    return error(500, &format!("VM {vmid} not running"));
                }
                // "sending a graceful shutdown command to paused VMs runs into timeouts".
                if vm.paused && p.get("forceStop").map(String::as_str) != Some("1") {
                    return error(500, "VM is paused - cannot shutdown");
                }
                if vm.ignores_acpi && !vm.paused {
                    (
                        "qmshutdown",
                        "VM quit/powerdown failed - got timeout".to_owned(),
                    )
                } else {
                    vm.running = false;
                    vm.paused = false;
                    ("qmshutdown", "OK".to_owned())
                }
            }
            "stop" => {
                vm.running = false;
                vm.paused = false;
                ("qmstop", "OK".to_owned())
            }
            "reset" => {
                if !vm.running {
                    return error(500, &format!("VM {vmid} not running"));
                }
                ("qmreset", "OK".to_owned())
            }
            "resume" => {
                if !vm.running {
                    return error(500, &format!("VM {vmid} not running"));
                }
                vm.paused = false;
                ("qmresume", "OK".to_owned())
            }
            other => return error(501, &format!("the double does not do {other}")),
        };
        let upid = self.task(node, kind, &vmid.to_string(), &exit, Effect::None);
        ok(Value::String(upid))
    }
}

fn route(s: &mut State, template: &str, method: &str, p: &BTreeMap<String, String>) -> Reply {
    let vmid: u32 = p.get("vmid").and_then(|v| v.parse().ok()).unwrap_or(0);
    let node = p.get("node").cloned().unwrap_or_default();
    // pve-cluster `Cluster.pm` `remote_node_ip` via pve-common `Network.pm`: a node that is
    // not in the cluster can't be resolved.
    if p.contains_key("node") && !s.nodes.contains(&node) {
        return error(
            500,
            &format!(
                "hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"
            ),
        );
    }
    // pve-http-server `APIServer/AnyEvent.pm` `proxy_request`: AnyEvent::HTTP's 595 when the
    // node the call is for can't be connected to.
    if s.offline.contains(&node) {
        return error(595, "No route to host");
    }
    match (method, template) {
        ("GET", "/version") => {
            let (version, release, repoid) = s.version.clone();
            ok(json!({"version": version, "release": release, "repoid": repoid}))
        }
        ("GET", "/cluster/resources") => match p.get("type").map(String::as_str) {
            Some("vm") => ok(s.resources()),
            other => error(
                501,
                &format!("the double lists only type=vm, not {other:?}"),
            ),
        },
        ("GET", "/cluster/nextid") => {
            // pve-manager `PVE/API2/Cluster.pm` `nextid` (any user): with `vmid`, that ID if
            // no guest of the cluster holds it, whoever may see that guest, else a parameter
            // error; the placeholder of a running create holds its ID.
            if let Some(id) = p.get("vmid") {
                let id: u32 = id.parse().unwrap_or(0);
                if s.vms.contains_key(&id) {
                    return error_with(
                        400,
                        "Parameter verification failed.",
                        Some(json!({"vmid": format!("VM {id} already exists")})),
                    );
                }
                return ok(Value::String(id.to_string()));
            }
            let id = (100..).find(|id| !s.vms.contains_key(id)).unwrap();
            if s.faults.nextid_races > 0 {
                s.faults.nextid_races -= 1;
                // Another client creates a VM with this ID before our create arrives.
                s.vms.insert(
                    id,
                    Vm {
                        node: NODE.into(),
                        config: BTreeMap::from([("name".into(), format!("someone-else-{id}"))]),
                        pending: BTreeMap::new(),
                        running: false,
                        paused: false,
                        ignores_acpi: false,
                        ha: false,
                        ha_ignored: false,
                    },
                );
            }
            // Proxmox sends the ID as a string.
            ok(Value::String(id.to_string()))
        }
        ("GET", "/nodes/{node}/qemu") => ok(s.vm_list(&node)),
        ("POST", "/nodes/{node}/qemu") => s.create(&node, vmid, p),
        ("GET", "/nodes/{node}/qemu/{vmid}/config") => match s.vm_on(&node, vmid) {
            Err(reply) => *reply,
            Ok(vm) => {
                // pve-guest-common `AbstractConfig.pm` `load_current_config`: pending values
                // applied unless `current=1`.
                let mut values = vm.config.clone();
                if p.get("current").map(String::as_str) != Some("1") {
                    values.extend(vm.pending.clone());
                }
                let mut cfg = serde_json::Map::new();
                for (k, v) in &values {
                    // Proxmox sends numbers as numbers here, except memory.
                    let value = match k.as_str() {
                        "cores" | "sockets" => v
                            .parse::<u64>()
                            .map(Value::from)
                            .unwrap_or(Value::String(v.clone())),
                        _ => Value::String(v.clone()),
                    };
                    cfg.insert(k.clone(), value);
                }
                cfg.insert(
                    "digest".into(),
                    Value::String(format!("{:040x}", values.len() as u32 + vmid)),
                );
                ok(Value::Object(cfg))
            }
        },
        ("PUT", "/nodes/{node}/qemu/{vmid}/config") => s.update(&node, vmid, p),
        ("GET", "/nodes/{node}/qemu/{vmid}/status/current") => match s.vm_on(&node, vmid) {
            Err(reply) => *reply,
            Ok(vm) => {
                let mut status = json!({
                    "vmid": vmid, "name": vm.listed_name(vmid),
                    "status": if vm.running { "running" } else { "stopped" },
                    // qemu-server `QemuServer.pm` `vmstatus`: QEMU's own state, `paused`
                    // for a paused guest whose status is still `running`.
                    "qmpstatus": match (vm.running, vm.paused) {
                        (true, true) => "paused",
                        (true, false) => "running",
                        _ => "stopped",
                    },
                    "ha": { "managed": u8::from(vm.ha && !vm.ha_ignored) },
                });
                if let Some(lock) = vm.lock() {
                    status["lock"] = Value::String(lock.to_owned());
                }
                ok(status)
            }
        },
        ("POST", t) if t.starts_with("/nodes/{node}/qemu/{vmid}/status/") => {
            let action = t.rsplit('/').next().unwrap().to_owned();
            s.power(&node, vmid, &action, p)
        }
        ("DELETE", "/nodes/{node}/qemu/{vmid}") => {
            // qemu-server `API2/Qemu.pm` `destroy_vm`.
            let vm = match s.vm_on(&node, vmid) {
                Ok(vm) => vm,
                Err(reply) => return *reply,
            };
            if let Some(lock) = vm.lock() {
                return error(500, &format!("VM is locked ({lock})"));
            }
            if vm.running {
                return error(500, &format!("VM {vmid} is running - destroy failed"));
            }
            s.vms.remove(&vmid);
            // `PVE::AccessControl::remove_vm_access`: its ACLs and its pool membership go.
            for members in s.access.pools.values_mut() {
                members.remove(&vmid);
            }
            let upid = s.task(&node, "qmdestroy", &vmid.to_string(), "OK", Effect::None);
            ok(Value::String(upid))
        }
        ("GET", "/nodes/{node}/storage/{storage}/content") => {
            // pve-storage `API2/Storage/Content.pm` `index`: the schema's any-of check ran;
            // each volume is filtered through `check_volume_access`.
            let storage = &p["storage"];
            let prefix = format!("{storage}:");
            ok(Value::Array(
                s.isos
                    .iter()
                    .filter(|v| v.starts_with(&prefix))
                    .map(|v| json!({"volid": v, "content": "iso", "format": "iso", "size": 123_731_968, "ctime": 1_714_000_000}))
                    .collect(),
            ))
        }
        ("POST", "/nodes/{node}/storage/{storage}/download-url") => {
            // pve-storage `API2/Storage/Status.pm` `download_url` (its and/or check ran).
            let volume = format!("{}:iso/{}", p["storage"], p["filename"]);
            if !p["filename"].ends_with(".iso") && !p["filename"].ends_with(".img") {
                return param_error("filename", "wrong file extension");
            }
            if s.isos.contains(&volume) {
                return error(
                    500,
                    &format!("refusing to override existing file '{}'", p["filename"]),
                );
            }
            s.downloads.push((p["url"].clone(), volume.clone()));
            // The worker runs `wget URL` (`--no-check-certificate` only with
            // `verify-certificates=0`) against the node's system CA store; run_command's
            // `errmsg => "download failed"` reports wget's exit code, 5 for "SSL verification
            // failure" (wget(1), EXIT STATUS).
            let untrusted = p["url"].starts_with("https://")
                && s.faults.untrusted_https
                && p.get("verify-certificates").is_none_or(|v| v != "0");
            let upid = if untrusted {
                s.task(
                    &node,
                    "download",
                    &p["filename"],
                    "download failed: exit code 5",
                    Effect::None,
                )
            } else {
                s.task(
                    &node,
                    "download",
                    &p["filename"],
                    "OK",
                    Effect::Downloaded { volume },
                )
            };
            ok(Value::String(upid))
        }
        ("DELETE", "/nodes/{node}/storage/{storage}/content/{volume}") => {
            // pve-storage `API2/Storage/Content.pm` `delete`: Datastore.Allocate on the
            // storage (for anything but a backup).
            let volume = p["volume"].clone();
            let storage = volume.split(':').next().unwrap_or(&p["storage"]).to_owned();
            if let Err(e) = s
                .checker()
                .check(&format!("/storage/{storage}"), &["Datastore.Allocate"])
            {
                return error(403, &e);
            }
            if !s.isos.remove(&volume) {
                return error(500, &format!("volume '{volume}' does not exist"));
            }
            let upid = s.task(&node, "imgdel", &storage, "OK", Effect::None);
            ok(Value::String(upid))
        }
        ("GET", "/nodes/{node}/tasks/{upid}/status") => {
            // pve-manager `PVE/API2/Tasks.pm` `read_task_status`: the task's own node, its
            // owner (or Sys.Audit on the node).
            let Some(task) = s.tasks.get(&p["upid"]) else {
                return param_error("upid", "no such task");
            };
            if task.node != node {
                return param_error("upid", "no such task");
            }
            let stopped = !task.hang && task.left == 0;
            let mut status = json!({
                "upid": task.upid, "node": task.node, "pid": task.pid, "pstart": task.pid * 7,
                "starttime": task.starttime, "type": task.kind, "id": task.id, "user": TOKEN_ID,
                "status": if stopped { "stopped" } else { "running" },
            });
            if stopped {
                status["exitstatus"] = Value::String(task.exitstatus.clone());
            }
            ok(status)
        }
        _ => {
            s.violations.push(format!(
                "{method} {template}: valid, but the double does not implement it"
            ));
            error(501, "not implemented by the test double")
        }
    }
}
