//! The local admin socket (`<state_dir>/admin.sock`, owner-only): one request line, a reply,
//! then the connection closes. It is how `okd-appliance lb drain NODE` (and later the control
//! module) reach a running appliance.
//!
//! Requests: `lb drain NODE`, `lb undrain NODE`, `lb status`, `node reinstall NODE`, `reload`,
//! `journal`, `status` (JSON), `cluster up`, `cluster status` (JSON), `cluster scale WORKERS`,
//! `cluster down`, `ha status`, `ha set active|standby`, `ha health`.
//! Replies start with
//! `ok` or `error: REASON`, followed by data lines.
//!
//! Architecture invariant: a thin front for calls other modules expose (`lb::drain`, the
//! pools' counters, the journal); it holds no state of its own.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::install_state;
use crate::journal::{EventKind, Journal};
use crate::lb::SharedPools;
use crate::lb::pool::Pools;
use crate::orchestration::Orchestrator;
use crate::plan::{self, Plan};
use crate::service::{Context, Running};

pub const SOCKET_NAME: &str = "admin.sock";
/// A request line longer than this is refused.
const MAX_REQUEST: usize = 1024;

pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET_NAME)
}

/// Binds the admin socket, replacing a stale one, readable and writable by its owner only.
pub fn bind(state_dir: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    std::fs::create_dir_all(state_dir)?;
    let path = socket_path(state_dir);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
        // A socket someone answers on belongs to another running appliance: leave it alone.
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is in use by another okd-appliance", path.display()),
            ));
        }
        std::fs::remove_file(&path)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// `reload`, passed on to the supervisor, which re-reads the config and answers on `reply`:
/// `Ok` with what it did, `Err` with why the previous plan stays.
#[derive(Debug)]
pub struct ReloadRequest {
    pub reply: oneshot::Sender<Result<String, String>>,
}

/// What the admin socket and the HTTP API reach.
pub fn parts(
    ctx: &Context,
    pools: SharedPools,
    reloads: mpsc::Sender<ReloadRequest>,
    orchestration: Result<Orchestrator, String>,
    ha_host: Option<std::net::Ipv4Addr>,
    fixed: crate::status::Fixed,
) -> Parts {
    Parts {
        plan: ctx.plan.clone(),
        pools,
        reloads,
        journal: ctx.journal.clone(),
        orchestration: Arc::new(orchestration),
        active: ctx.active.clone(),
        ha_host,
        fixed: Arc::new(fixed),
        metrics: Arc::clone(&ctx.metrics),
        shutdown: ctx.shutdown.clone(),
    }
}

/// Answers requests on `listener` (from [`bind`]) until the appliance stops; `reload` requests
/// go to the supervisor.
pub fn start(listener: std::os::unix::net::UnixListener, parts: Parts) -> anyhow::Result<Running> {
    let listener = UnixListener::from_std(listener).context("adopting the admin socket")?;
    let token = parts.shutdown.clone();
    Ok(Box::pin(serve(listener, parts, token)))
}

/// What a session (of the admin socket or the HTTP API) may reach.
#[derive(Clone)]
pub struct Parts {
    pub plan: plan::Handle,
    pub pools: SharedPools,
    reloads: mpsc::Sender<ReloadRequest>,
    pub journal: Journal,
    orchestration: Arc<Result<Orchestrator, String>>,
    active: crate::ha::Activity,
    /// This host's own address, in a pair.
    ha_host: Option<std::net::Ipv4Addr>,
    fixed: Arc<crate::status::Fixed>,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts").finish_non_exhaustive()
    }
}

async fn serve(
    listener: UnixListener,
    parts: Parts,
    token: CancellationToken,
) -> anyhow::Result<()> {
    loop {
        let stream = tokio::select! {
            () = token.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!("admin accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let parts = parts.clone();
        tokio::spawn(async move {
            // `cluster down` waits for the provider to destroy every machine.
            let limit = if parts.orchestration.is_ok() {
                Duration::from_secs(600)
            } else {
                Duration::from_secs(5)
            };
            if let Err(e) = tokio::time::timeout(limit, session(stream, &parts)).await {
                tracing::debug!("admin session: {e}");
            }
        });
    }
}

impl Parts {
    /// Why a state change (a drain, a reinstall) can't be made here: on the standby of a pair it
    /// would act on this host only and be overwritten by the active host's next update.
    pub fn standby_refusal(&self) -> Option<String> {
        if !self.active.paired() || self.active.is_active() {
            return None;
        }
        let plan = self.plan.load();
        let active = plan
            .ha
            .as_ref()
            .zip(self.active.host())
            .map(|(ha, me)| ha.hosts[1 - me.min(1)].to_string())
            .unwrap_or_else(|| "the other host".into());
        Some(format!(
            "this host is the standby of its pair: drains and reinstalls are made on the active host ({active}), which replicates them here"
        ))
    }
}

async fn session(stream: UnixStream, parts: &Parts) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read).take_line(&mut line).await?;
    let words = line.split_whitespace().collect::<Vec<_>>();
    let changes_state = matches!(
        words.as_slice(),
        ["node", "reinstall", _] | ["lb", "drain" | "undrain", _]
    );
    let refused = changes_state.then(|| parts.standby_refusal()).flatten();
    let reply = match (refused, words.as_slice()) {
        (Some(why), _) => format!("error: {why}\n"),
        (None, ["node", "reinstall", node]) => {
            reinstall(node, &parts.plan.load_full(), &parts.journal).await
        }
        (None, ["reload"]) => reload(&parts.reloads).await,
        (None, ["ha", rest @ ..]) => ha(parts, rest).await,
        (None, ["status"]) => match serde_json::to_string(&whole_status(parts)) {
            Ok(json) => format!("ok\n{json}\n"),
            Err(e) => format!("error: {e}\n"),
        },
        (None, ["cluster", rest @ ..]) => match parts.orchestration.as_ref() {
            Ok(o) => cluster(o, rest).await,
            Err(why) => format!("error: the install orchestration is unavailable: {why}\n"),
        },
        _ => execute(line.trim(), &parts.pools, &parts.journal),
    };
    write.write_all(reply.as_bytes()).await?;
    write.shutdown().await
}

trait TakeLine {
    async fn take_line(&mut self, line: &mut String) -> std::io::Result<()>;
}

impl<R: tokio::io::AsyncRead + Unpin> TakeLine for BufReader<R> {
    async fn take_line(&mut self, line: &mut String) -> std::io::Result<()> {
        let mut limited = tokio::io::AsyncReadExt::take(self, MAX_REQUEST as u64);
        limited.read_line(line).await.map(|_| ())
    }
}

/// One request to its reply text. Runs inside the tokio runtime: a drain starts its watchers
/// there.
pub fn execute(request: &str, pools: &ArcSwap<Pools>, journal: &Journal) -> String {
    let words: Vec<&str> = request.split_whitespace().collect();
    match words.as_slice() {
        ["lb", "drain", node] => {
            let pools = pools.load();
            match crate::lb::drain::drain(&pools, node, journal) {
                0 => format!("error: no backend is named {node} in a pool that has a listener\n"),
                n => {
                    let timeout = humantime::format_duration(pools.drain_timeout);
                    tracing::info!("admin: drain {node} ({n} backends, timeout {timeout})");
                    format!(
                        "ok: {node} drained in {n} pools; connections still open after {timeout} will be closed\n"
                    )
                }
            }
        }
        ["lb", "undrain", node] => match crate::lb::drain::undrain(&pools.load(), node, journal) {
            0 => format!("error: no backend is named {node} in a pool that has a listener\n"),
            n => {
                tracing::info!("admin: undrain {node} ({n} backends)");
                format!("ok: {node} back in rotation in {n} pools\n")
            }
        },
        ["lb", "status"] => status(&pools.load()),
        ["journal"] => {
            let mut out = String::from("ok\n");
            for e in journal.recent() {
                let _ = writeln!(out, "{} {e}", httpdate::fmt_http_date(e.at));
            }
            out
        }
        _ => "error: unknown request (lb drain NODE | lb undrain NODE | lb status | \
              node reinstall NODE | reload | journal)\n"
            .to_owned(),
    }
}

/// The whole status, now.
pub fn status_of(
    fixed: &crate::status::Fixed,
    plan: &Plan,
    journal: &Journal,
    pools: &Pools,
    orchestration: Option<&Orchestrator>,
    active: &crate::ha::Activity,
    ha_host: Option<std::net::Ipv4Addr>,
) -> crate::status::Status {
    let ha = ha_host.map(|host| {
        let r = active.replication();
        crate::status::HaStatus {
            host: host.to_string(),
            active: active.is_active(),
            replication_connected: r.connected,
            replication_updates: r.updates,
            last_update: r.last_update.and_then(|t| {
                t.duration_since(std::time::SystemTime::UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_secs())
            }),
        }
    });
    let progress = orchestration.map(Orchestrator::progress);
    crate::status::collect(
        fixed,
        plan,
        &journal.recent(),
        pools,
        progress.as_ref(),
        ha,
        std::time::SystemTime::now(),
    )
}

pub fn whole_status(parts: &Parts) -> crate::status::Status {
    status_of(
        &parts.fixed,
        &parts.plan.load(),
        &parts.journal,
        &parts.pools.load(),
        parts.orchestration.as_ref().as_ref().ok(),
        &parts.active,
        parts.ha_host,
    )
}

/// `ha status | ha set active|standby | ha health`: the pair, for keepalived and people.
async fn ha(parts: &Parts, words: &[&str]) -> String {
    let Some(host) = parts.ha_host else {
        return "error: this appliance is not one of a pair (no ha section)\n".to_owned();
    };
    let role = |active: bool| if active { "active" } else { "standby" };
    match words {
        ["status"] => {
            let r = parts.active.replication();
            let direction = if parts.active.is_active() {
                "sending to the peer"
            } else {
                "receiving from the peer"
            };
            let link = if r.connected {
                "connected"
            } else {
                "not connected"
            };
            let last = r.last_update.map_or_else(
                || "no update yet".to_owned(),
                |t| {
                    let ago = t.elapsed().unwrap_or_default();
                    format!(
                        "last update {} ago",
                        humantime::format_duration(Duration::from_millis(
                            u64::try_from(ago.as_millis()).unwrap_or(u64::MAX)
                        ))
                    )
                },
            );
            let mut out = format!(
                "ok: {} (host {host})\nreplication: {direction}, {link}, {} updates, {last}\n",
                role(parts.active.is_active()),
                r.updates
            );
            if let Some(e) = r.last_error.filter(|_| !r.connected) {
                let _ = writeln!(out, "replication error: {e}");
            }
            out
        }
        ["set", state @ ("active" | "standby")] => {
            let active = *state == "active";
            if parts.active.set(active) {
                tracing::info!("high availability: this host is now {}", role(active));
                parts.journal.publish(None, EventKind::HaRole { active });
            }
            format!("ok: {}\n", role(active))
        }
        ["health"] => {
            let (plan, active) = (parts.plan.load_full(), parts.active.is_active());
            // Blocking probes, bounded by their timeouts.
            let probed =
                tokio::task::spawn_blocking(move || crate::health::check(&plan, host, active))
                    .await;
            match probed {
                Ok(Ok(line)) => format!("ok: {} host {host}: {line}\n", role(active)),
                Ok(Err(why)) => format!("error: {why}\n"),
                Err(e) => format!("error: the health check failed: {e}\n"),
            }
        }
        _ => "error: unknown request (ha status | ha set active|standby | ha health)\n".to_owned(),
    }
}

/// `cluster ...`: the install orchestration.
async fn cluster(o: &Orchestrator, words: &[&str]) -> String {
    match words {
        ["up"] => match o.up().await {
            Ok(line) => format!("ok: {line}\n"),
            Err(why) => format!("error: {why}\n"),
        },
        ["status"] => match serde_json::to_string(&o.status()) {
            Ok(json) => format!("ok\n{json}\n"),
            Err(e) => format!("error: {e}\n"),
        },
        ["scale", n] => match n.parse::<usize>() {
            Ok(n) => match o.scale(n).await {
                Ok(line) => format!("ok: {line}\n"),
                Err(why) => format!("error: {why}\n"),
            },
            Err(_) => format!("error: {n} is not a number of workers\n"),
        },
        ["down"] => match o.down().await {
            Ok(line) => format!("ok: {line}\n"),
            Err(why) => format!("error: {why}\n"),
        },
        _ => "error: unknown request (cluster up | cluster status | cluster scale WORKERS | cluster down)\n"
            .to_owned(),
    }
}

/// Asks the supervisor to reload and waits for its outcome.
async fn reload(reloads: &mpsc::Sender<ReloadRequest>) -> String {
    let (reply, outcome) = oneshot::channel();
    if reloads.send(ReloadRequest { reply }).await.is_err() {
        return "error: the appliance is stopping\n".to_owned();
    }
    match outcome.await {
        Ok(Ok(line)) => format!("ok: {line}\n"),
        Ok(Err(line)) => format!("error: {line}\n"),
        Err(_) => "error: the appliance is stopping\n".to_owned(),
    }
}

/// Forgets that `node` installed, so its next iPXE script installs it again. The marker files
/// are removed on the blocking pool.
pub async fn reinstall(node: &str, plan: &Plan, journal: &Journal) -> String {
    if !plan.boot.iter().any(|b| b.node == node) {
        return format!("error: no node is named {node}\n");
    }
    let (state_dir, name) = (plan.state_dir.clone(), node.to_owned());
    let reset = tokio::task::spawn_blocking(move || install_state::reset(&state_dir, &name))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    match reset {
        Ok(was_installed) => {
            journal.publish(Some(node.to_owned()), EventKind::ReinstallRequested);
            if was_installed {
                format!("ok: {node} will install again at its next network boot\n")
            } else {
                format!("ok: {node} was not marked installed; its next network boot installs it\n")
            }
        }
        Err(e) => format!("error: can't reset {node}: {e}\n"),
    }
}

/// Every backend: its state, connections open now (`active`, which a drain waits for), the time
/// left before its drain timeout closes them, and its counters.
fn status(pools: &Pools) -> String {
    let mut out = String::from("ok\n");
    for pool in &pools.frontends {
        for b in &pool.backends {
            let state = b.state(pool.served);
            let _ = write!(
                out,
                "{} {} {} {state} active={} connections={} bytes_in={} bytes_out={}",
                pool.kind.name(),
                b.name,
                b.addr,
                b.active(),
                b.connections.load(Ordering::Relaxed),
                b.bytes_to_backend.load(Ordering::Relaxed),
                b.bytes_to_client.load(Ordering::Relaxed),
            );
            if let Some(left) = b.drain_closes_in() {
                let _ = write!(out, " closing_in={}s", left.as_secs());
            }
            out.push('\n');
        }
    }
    out
}

/// The client side, for the CLI: sends `request`, returns the reply.
pub fn call(state_dir: &Path, request: &str) -> std::io::Result<String> {
    call_waiting(state_dir, request, Duration::from_secs(10))
}

/// [`call`] for a request that takes long (`cluster down` waits for every machine).
pub fn call_waiting(state_dir: &Path, request: &str, limit: Duration) -> std::io::Result<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::os::unix::net::UnixStream::connect(socket_path(state_dir))?;
    stream.set_read_timeout(Some(limit))?;
    stream.write_all(format!("{request}\n").as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Backend, Frontend, FrontendKind, HealthCheck, LbPlan, Probe};
    use crate::vocabulary::{Balance, Role};

    fn pools() -> ArcSwap<Pools> {
        let check = HealthCheck {
            probe: Probe::Tcp,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            rise: 1,
            fall: 1,
        };
        let backends = vec![
            Backend {
                name: "bootstrap".into(),
                role: Role::Bootstrap,
                addr: "10.0.0.7:6443".parse().unwrap(),
            },
            Backend {
                name: "master-0".into(),
                role: Role::Master,
                addr: "10.0.0.2:6443".parse().unwrap(),
            },
        ];
        let plan = LbPlan {
            balance: Balance::RoundRobin,
            check_ca: None,
            drain_timeout: Duration::from_secs(300),
            frontends: vec![
                Frontend {
                    kind: FrontendKind::Api,
                    listen: vec!["10.0.0.1:6443".parse().unwrap()],
                    backends: backends.clone(),
                    check: check.clone(),
                },
                Frontend {
                    kind: FrontendKind::MachineConfig,
                    listen: vec!["10.0.0.1:22623".parse().unwrap()],
                    backends: backends.clone(),
                    check: check.clone(),
                },
                // Turned off (`listen: { ingress_https: [] }`): never drained, never "down".
                Frontend {
                    kind: FrontendKind::IngressHttps,
                    listen: vec![],
                    backends,
                    check,
                },
            ],
        };
        ArcSwap::from_pointee(Pools::from_plan(&plan, None))
    }

    #[tokio::test(start_paused = true)]
    async fn drain_status_and_errors() {
        let (pools, journal) = (pools(), Journal::new());
        let api_bootstrap = Arc::clone(&pools.load().frontends[0].backends[0]);
        api_bootstrap.set_up(true);
        let _open = api_bootstrap.claim().expect("up and in rotation");
        assert_eq!(
            execute("lb drain bootstrap", &pools, &journal),
            "ok: bootstrap drained in 2 pools; connections still open after 5m will be closed\n"
        );
        let status = execute("lb status", &pools, &journal);
        assert!(
            status.contains(
                "api bootstrap 10.0.0.7:6443 draining active=1 connections=0 bytes_in=0 bytes_out=0 closing_in=300s\n"
            ),
            "{status}"
        );
        assert!(
            status.contains("machine-config master-0 10.0.0.2:6443 down active=0 "),
            "{status}"
        );
        assert!(
            status.contains("ingress-https bootstrap 10.0.0.7:6443 off active=0 "),
            "{status}"
        );
        assert!(
            !status.contains("ingress-https master-0 10.0.0.2:6443 down"),
            "{status}"
        );
        // The machine-config backend had no connection: drained at once, nothing left to close.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let status = execute("lb status", &pools, &journal);
        assert!(
            status.contains(
                "\nmachine-config bootstrap 10.0.0.7:6443 draining active=0 connections=0 bytes_in=0 bytes_out=0\n"
            ),
            "{status}"
        );
        assert!(status.contains("closing_in=299s\n"), "{status}");
        assert!(execute("lb drain nobody", &pools, &journal).starts_with("error: no backend"));
        assert!(execute("lb undrain nobody", &pools, &journal).starts_with("error: no backend"));
        assert!(execute("rm -rf /", &pools, &journal).starts_with("error: unknown request"));
        assert_eq!(
            execute("lb undrain bootstrap", &pools, &journal),
            "ok: bootstrap back in rotation in 2 pools\n"
        );
        assert!(!execute("lb status", &pools, &journal).contains("closing_in"));
    }

    #[tokio::test]
    async fn reinstall_forgets_the_install_and_journals_it() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "version: 1\ncluster: {{ name: okd, base_domain: lab.example.com }}\n\
             network: {{ subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }}\n\
             nodes:\n  - {{ name: master-0, role: master, mac: \"52:54:00:00:00:02\", ip: 10.0.0.2 }}\n\
             install: {{ ignition_dir: ./i, artifacts_dir: ./a }}\nstate_dir: {}\n",
            dir.path().display()
        );
        let loaded = crate::config::parse(
            &text,
            "t.yml",
            Path::new("."),
            crate::config::InstallCheck::Skip,
        )
        .unwrap_or_else(|e| panic!("{}", e.render(crate::config::RenderStyle::Plain)));
        let plan = Plan::derive(&loaded.config, 1);
        let journal = Journal::new();
        install_state::record_role_config_fetched(dir.path(), "master-0", "now").unwrap();
        assert_eq!(
            reinstall("master-0", &plan, &journal).await,
            "ok: master-0 will install again at its next network boot\n"
        );
        assert_eq!(
            install_state::phase(dir.path(), "master-0"),
            install_state::InstallPhase::NotInstalled
        );
        assert_eq!(
            reinstall("master-0", &plan, &journal).await,
            "ok: master-0 was not marked installed; its next network boot installs it\n"
        );
        assert_eq!(
            reinstall("nobody", &plan, &journal).await,
            "error: no node is named nobody\n"
        );
        let asked: Vec<String> = journal.recent().iter().map(ToString::to_string).collect();
        assert_eq!(
            asked,
            [
                "master-0: reinstall requested",
                "master-0: reinstall requested"
            ]
        );
        // A state directory that can't be changed is an error, not a panic.
        let plan = Plan {
            state_dir: dir.path().join("not-a-directory"),
            ..plan
        };
        std::fs::write(&plan.state_dir, b"").unwrap();
        let reply = reinstall("master-0", &plan, &journal).await;
        assert!(
            reply.starts_with("error: can't reset master-0: "),
            "{reply}"
        );
    }
}
