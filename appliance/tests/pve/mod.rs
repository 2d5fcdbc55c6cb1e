//! A test double of one Proxmox VE node's REST API, for the control module's tests.
//!
//! It serves HTTPS on 127.0.0.1 with a certificate from a test CA made here, checks the API
//! token of every request, and validates every request against the official schema
//! (`schema.rs`), and its own answers against the schema's `returns`: a violation is recorded
//! (a bad request is answered 400 as Proxmox would), and
//! [`PveDouble::assert_clean`] (also run on drop) fails the test for it. It keeps VMs, tasks
//! and ISO volumes, answers with Proxmox's shapes (UPIDs, task status with `exitstatus`,
//! `{"data": ...}` envelopes, error messages in body and reason phrase), and injects the
//! failure modes users of Proxmox automation meet: lock timeouts, missing privileges, `nextid`
//! races, tasks that never end, a guest that ignores ACPI, a create that leaves a VM behind,
//! and requests that are never answered.
//!
//! Why Rust and not Python: it runs in `cargo test` with no interpreter or package to
//! install in CI, in the test's own process, so a test injects faults and inspects VM state
//! directly (no IPC), and the schema check is the same code for every test.

// Two test crates include this module; each uses part of it.
#![allow(dead_code)]

pub mod schema;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

pub const NODE: &str = "pve1";
pub const TOKEN_ID: &str = "okd@pve!appliance";
pub const SECRET: &str = "4f0c1e7a-6b55-4a53-9d0e-2f1b8c3a9e71";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    pub name: String,
    pub config: BTreeMap<String, String>,
    pub running: bool,
    /// The guest ignores ACPI power buttons: shutdown times out.
    pub ignores_acpi: bool,
}

#[derive(Debug, Clone)]
struct Task {
    upid: String,
    polls_left: u32,
    hang: bool,
    exitstatus: String,
    starttime: u64,
    pid: u32,
    kind: String,
    id: String,
}

/// Failures to inject; counters count down as they fire.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// The next N creates fail in their task with `can't lock file ... got timeout`.
    pub lock_timeouts_on_create: u32,
    /// The next N config updates are refused with `can't lock file ... got timeout`.
    pub lock_timeouts_on_put: u32,
    /// Privileges the token lacks.
    pub withheld: BTreeSet<String>,
    /// The next N `nextid` answers are taken by another client before the create.
    pub nextid_races: u32,
    /// Tasks of these types never stop (`qmcreate`, `qmstart`, `download`...).
    pub hang_tasks: BTreeSet<String>,
    /// Requests are read and never answered.
    pub stall: bool,
    /// Creates fail after the VM's config was written (the VM stays).
    pub create_leaves_vm: bool,
}

#[derive(Debug, Default)]
pub struct State {
    pub vms: BTreeMap<u32, Vm>,
    pub isos: BTreeSet<String>,
    pub faults: Faults,
    pub violations: Vec<String>,
    /// `METHOD /path` of every request, in order.
    pub requests: Vec<String>,
    /// Parameters of every request, in order.
    pub params: Vec<BTreeMap<String, String>>,
    /// Downloads asked for: (url, volume).
    pub downloads: Vec<(String, String)>,
    /// Status queries a task answers `running` before it stops.
    pub task_polls: u32,
    tasks: BTreeMap<String, Task>,
    next_pid: u32,
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
        let state = Arc::new(Mutex::new(State {
            next_pid: 0x1000,
            ..State::default()
        }));
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
                            async move {
                                Ok::<_, std::convert::Infallible>(
                                    handle(req, &state, &schema).await,
                                )
                            }
                        });
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

    /// A VM somebody else made (or an earlier run), straight into the state.
    pub fn add_vm(&self, vmid: u32, name: &str, mac: &str, running: bool) {
        self.with(|s| {
            let mut config = BTreeMap::new();
            config.insert("name".into(), name.into());
            config.insert("digest".into(), format!("{vmid:040x}"));
            config.insert("net0".into(), format!("virtio={mac},bridge=vmbr1"));
            config.insert("cores".into(), "4".into());
            config.insert("memory".into(), "16384".into());
            config.insert("boot".into(), "order=net0;scsi0".into());
            config.insert(
                "scsi0".into(),
                format!("local-lvm:vm-{vmid}-disk-0,size=120G"),
            );
            s.vms.insert(
                vmid,
                Vm {
                    name: name.into(),
                    config,
                    running,
                    ignores_acpi: false,
                },
            );
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

async fn handle(req: Request<Incoming>, state: &Mutex<State>, schema: &schema::Schema) -> Reply {
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
    let (reply, returns) = answer(
        state,
        schema,
        &method,
        &path,
        &query,
        auth.as_deref(),
        &content_type,
        &body,
    );
    let Some(returns) = returns else {
        return reply;
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
    Response::from_parts(parts, Full::new(body))
}

/// Everything but the final body check, with the state locked: the reply, and the `returns`
/// schema of the endpoint when the request reached it.
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
) -> (Reply, Option<Value>) {
    let method = method.to_owned();
    let mut s = state.lock().unwrap();
    s.requests.push(format!("{method} {path}"));
    if auth != Some(&format!("PVEAPIToken={TOKEN_ID}={SECRET}")) {
        return (error(401, "authentication failure"), None);
    }
    let Some(rest) = path.strip_prefix("/api2/json") else {
        s.violations
            .push(format!("{method} {path}: not under /api2/json"));
        return (error(404, "not found"), None);
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
        return (
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
        return (
            error_with(
                400,
                "Parameter verification failed.",
                Some(Value::Object(errors)),
            ),
            None,
        );
    }
    if let Some((priv_path, privilege)) = withheld(&s, &matched, &method, &params) {
        return (
            error(
                403,
                &format!("Permission check failed ({priv_path}, {privilege})"),
            ),
            None,
        );
    }
    let returns = matched
        .info
        .get(method.as_str())
        .and_then(|i| i.get("returns"))
        .cloned()
        .unwrap_or(Value::Null);
    (
        route(&mut s, &matched.template, &method, &params),
        Some(returns),
    )
}

/// The first privilege this request needs that the token lacks, with its ACL path.
fn withheld(
    s: &State,
    matched: &schema::Matched,
    method: &str,
    p: &BTreeMap<String, String>,
) -> Option<(String, String)> {
    let sub = |path: &str| {
        let mut out = path.to_owned();
        for (k, v) in p {
            out = out.replace(&format!("{{{k}}}"), v);
        }
        out
    };
    let mut needed: Vec<(String, String)> = Vec::new();
    match (method, matched.template.as_str()) {
        // Only described in the schema: the create checks these, in this order.
        ("POST", "/nodes/{node}/qemu") => {
            needed.push((sub("/vms/{vmid}"), "VM.Allocate".into()));
            for key in ["scsi0", "ide2"] {
                if let Some(storage) = p.get(key).and_then(|v| v.split(':').next()) {
                    needed.push((
                        format!("/storage/{storage}"),
                        "Datastore.AllocateSpace".into(),
                    ));
                }
            }
            if let Some(bridge) = p.get("net0").and_then(|n| {
                n.split(',')
                    .find_map(|part| part.strip_prefix("bridge="))
                    .map(str::to_owned)
            }) {
                needed.push((
                    format!("/sdn/zones/localnetwork/{bridge}"),
                    "SDN.Use".into(),
                ));
            }
        }
        ("PUT" | "POST", "/nodes/{node}/qemu/{vmid}/config") => {
            for (key, privilege) in [("ide2", "VM.Config.CDROM"), ("boot", "VM.Config.Options")] {
                if p.contains_key(key) {
                    needed.push((sub("/vms/{vmid}"), privilege.into()));
                }
            }
        }
        _ => {
            let check = matched.info.get(method)?.get("permissions")?.get("check")?;
            // ["perm", PATH, [PRIVS], ("any", 1)?] or ["and", [...], ...]: the first perm.
            let perm = if check.get(0)?.as_str() == Some("perm") {
                check
            } else {
                check
                    .as_array()?
                    .iter()
                    .find(|c| c.get(0).and_then(Value::as_str) == Some("perm"))?
            };
            let path = sub(perm.get(1)?.as_str()?);
            let privs: Vec<String> = perm
                .get(2)?
                .as_array()?
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            let any = perm.get(3).and_then(Value::as_str) == Some("any");
            if any {
                if privs.iter().all(|pr| s.faults.withheld.contains(pr)) {
                    return Some((path, privs[0].clone()));
                }
                return None;
            }
            needed.extend(privs.into_iter().map(|pr| (path.clone(), pr)));
        }
    }
    needed
        .into_iter()
        .find(|(_, privilege)| s.faults.withheld.contains(privilege))
}

impl State {
    /// A task: stopped after `polls` status queries (never, for a hanging type).
    fn task(&mut self, kind: &str, id: &str, exitstatus: &str) -> String {
        let polls = self.task_polls;
        self.next_pid += 1;
        let starttime = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let upid = format!(
            "UPID:{NODE}:{:08X}:{:08X}:{starttime:08X}:{kind}:{id}:{TOKEN_ID}:",
            self.next_pid,
            self.next_pid * 7
        );
        let hang = self.faults.hang_tasks.contains(kind);
        self.tasks.insert(
            upid.clone(),
            Task {
                upid: upid.clone(),
                polls_left: polls,
                hang,
                exitstatus: exitstatus.to_owned(),
                starttime,
                pid: self.next_pid,
                kind: kind.to_owned(),
                id: id.to_owned(),
            },
        );
        upid
    }

    fn vm_list(&self) -> Value {
        Value::Array(
            self.vms
                .iter()
                .map(|(vmid, vm)| {
                    json!({
                        "vmid": vmid,
                        "name": vm.name,
                        "status": if vm.running { "running" } else { "stopped" },
                        "cpus": vm.config.get("cores").and_then(|c| c.parse::<u64>().ok()).unwrap_or(1),
                        "maxmem": 16u64 << 30,
                        "uptime": if vm.running { 42 } else { 0 },
                    })
                })
                .collect(),
        )
    }
}

fn lock_message(vmid: &str) -> String {
    format!("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout")
}

fn route(s: &mut State, template: &str, method: &str, p: &BTreeMap<String, String>) -> Reply {
    let vmid: u32 = p.get("vmid").and_then(|v| v.parse().ok()).unwrap_or(0);
    let vm_missing = || {
        error(
            500,
            &format!("Configuration file 'nodes/{NODE}/qemu-server/{vmid}.conf' does not exist"),
        )
    };
    if p.get("node").is_some_and(|n| n != NODE) {
        return error(595, &format!("no such node '{}'", p["node"]));
    }
    match (method, template) {
        ("GET", "/version") => {
            ok(json!({"version": "8.2.4", "release": "8.2", "repoid": "faa83925c9641325"}))
        }
        ("GET", "/cluster/nextid") => {
            let id = (100..).find(|id| !s.vms.contains_key(id)).unwrap();
            if s.faults.nextid_races > 0 {
                s.faults.nextid_races -= 1;
                // Another client creates a VM with this ID before our create arrives.
                s.vms.insert(
                    id,
                    Vm {
                        name: format!("someone-else-{id}"),
                        config: BTreeMap::from([
                            ("name".into(), format!("someone-else-{id}")),
                            ("digest".into(), format!("{id:040x}")),
                        ]),
                        running: false,
                        ignores_acpi: false,
                    },
                );
            }
            // Proxmox sends the ID as a string.
            ok(Value::String(id.to_string()))
        }
        ("GET", "/nodes/{node}/qemu") => ok(s.vm_list()),
        ("POST", "/nodes/{node}/qemu") => {
            if s.vms.contains_key(&vmid) {
                return error(500, &format!("VM {vmid} already exists on node '{NODE}'"));
            }
            if s.faults.lock_timeouts_on_create > 0 {
                s.faults.lock_timeouts_on_create -= 1;
                let upid = s.task(
                    "qmcreate",
                    &vmid.to_string(),
                    &lock_message(&vmid.to_string()),
                );
                return ok(Value::String(upid));
            }
            if let Some(iso) = p.get("ide2").and_then(|v| v.split(',').next())
                && iso != "none"
                && !s.isos.contains(iso)
            {
                let upid = s.task(
                    "qmcreate",
                    &vmid.to_string(),
                    &format!("volume '{iso}' does not exist"),
                );
                return ok(Value::String(upid));
            }
            let mut config = BTreeMap::new();
            for (k, v) in p {
                if k == "node" || k == "vmid" {
                    continue;
                }
                let v = if k == "scsi0" {
                    let (storage, size) = v.split_once(':').unwrap();
                    format!("{storage}:vm-{vmid}-disk-0,iothread=1,size={size}G")
                } else {
                    v.clone()
                };
                config.insert(k.clone(), v);
            }
            config.insert("digest".into(), format!("{vmid:040x}"));
            s.vms.insert(
                vmid,
                Vm {
                    name: p.get("name").cloned().unwrap_or_default(),
                    config,
                    running: false,
                    ignores_acpi: false,
                },
            );
            let exit = if s.faults.create_leaves_vm {
                format!("unable to create VM {vmid} - storage 'local-lvm' is full")
            } else {
                "OK".to_owned()
            };
            let upid = s.task("qmcreate", &vmid.to_string(), &exit);
            ok(Value::String(upid))
        }
        ("GET", "/nodes/{node}/qemu/{vmid}/config") => match s.vms.get(&vmid) {
            None => vm_missing(),
            Some(vm) => {
                let mut cfg = serde_json::Map::new();
                for (k, v) in &vm.config {
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
                ok(Value::Object(cfg))
            }
        },
        ("PUT", "/nodes/{node}/qemu/{vmid}/config") => {
            if s.faults.lock_timeouts_on_put > 0 {
                s.faults.lock_timeouts_on_put -= 1;
                return error(500, &lock_message(&vmid.to_string()));
            }
            let isos = s.isos.clone();
            let Some(vm) = s.vms.get_mut(&vmid) else {
                return vm_missing();
            };
            for (k, v) in p {
                if k == "node" || k == "vmid" {
                    continue;
                }
                if k == "ide2"
                    && let Some(iso) = v.split(',').next()
                    && iso != "none"
                    && !isos.contains(iso)
                {
                    return error(500, &format!("volume '{iso}' does not exist"));
                }
                vm.config.insert(k.clone(), v.clone());
            }
            ok(Value::Null)
        }
        ("GET", "/nodes/{node}/qemu/{vmid}/status/current") => match s.vms.get(&vmid) {
            None => vm_missing(),
            Some(vm) => ok(json!({
                "vmid": vmid, "name": vm.name,
                "status": if vm.running { "running" } else { "stopped" },
                "qmpstatus": if vm.running { "running" } else { "stopped" },
            })),
        },
        ("POST", t) if t.starts_with("/nodes/{node}/qemu/{vmid}/status/") => {
            let Some(vm) = s.vms.get_mut(&vmid) else {
                return vm_missing();
            };
            let id = vmid.to_string();
            let (kind, exit) = match t.rsplit('/').next().unwrap() {
                "start" => {
                    if vm.running {
                        return error(500, &format!("VM {vmid} already running"));
                    }
                    vm.running = true;
                    ("qmstart", "OK".to_owned())
                }
                "shutdown" => {
                    if vm.ignores_acpi {
                        (
                            "qmshutdown",
                            "VM quit/powerdown failed - got timeout".to_owned(),
                        )
                    } else {
                        vm.running = false;
                        ("qmshutdown", "OK".to_owned())
                    }
                }
                "stop" => {
                    vm.running = false;
                    ("qmstop", "OK".to_owned())
                }
                "reset" => {
                    if !vm.running {
                        return error(500, &format!("VM {vmid} not running"));
                    }
                    ("qmreset", "OK".to_owned())
                }
                other => return error(501, &format!("the double does not do {other}")),
            };
            let upid = s.task(kind, &id, &exit);
            ok(Value::String(upid))
        }
        ("DELETE", "/nodes/{node}/qemu/{vmid}") => match s.vms.get(&vmid) {
            None => vm_missing(),
            Some(vm) if vm.running => error(500, &format!("VM {vmid} is running - destroy failed")),
            Some(_) => {
                s.vms.remove(&vmid);
                let upid = s.task("qmdestroy", &vmid.to_string(), "OK");
                ok(Value::String(upid))
            }
        },
        ("GET", "/nodes/{node}/storage/{storage}/content") => {
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
            let volume = format!("{}:iso/{}", p["storage"], p["filename"]);
            if !p["filename"].ends_with(".iso") {
                return error(500, "wrong file extension");
            }
            if s.isos.contains(&volume) {
                return error(
                    500,
                    &format!("refusing to override existing file '{}'", p["filename"]),
                );
            }
            s.downloads.push((p["url"].clone(), volume.clone()));
            s.isos.insert(volume);
            let upid = s.task("download", &p["filename"], "OK");
            ok(Value::String(upid))
        }
        ("DELETE", "/nodes/{node}/storage/{storage}/content/{volume}") => {
            if !s.isos.remove(&p["volume"]) {
                return error(500, &format!("volume '{}' does not exist", p["volume"]));
            }
            let upid = s.task("imgdel", &p["volume"], "OK");
            ok(Value::String(upid))
        }
        ("GET", "/nodes/{node}/tasks/{upid}/status") => {
            let Some(task) = s.tasks.get_mut(&p["upid"]) else {
                return error(500, &format!("no such task '{}'", p["upid"]));
            };
            let stopped = !task.hang && task.polls_left == 0;
            if !task.hang && task.polls_left > 0 {
                task.polls_left -= 1;
            }
            let mut status = json!({
                "upid": task.upid, "node": NODE, "pid": task.pid, "pstart": task.pid * 7,
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
