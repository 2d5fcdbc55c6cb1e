//! The local admin socket (`<state_dir>/admin.sock`, owner-only): one request line, a reply,
//! then the connection closes. It is how the CLI's `lb`, `node`, `reload`, `status`, `ha` and
//! `cluster` commands reach a running appliance, and how `nodes` tells it each machine action.
//! It is bound by [`bind`] at the supervisor's request.
//!
//! The requests and replies, and their grammar, are [`super::wire`]'s: a request may name its
//! cluster first, `@ID REQUEST`, and must when the appliance serves several (a host file).
//!
//! Architecture invariant: a front and nothing else. A line is decoded into a [`Request`]
//! once, the one dispatcher ([`perform`], shared with the HTTP API) does it on the
//! [`Operator`], and its typed outcome is encoded as a [`Reply`]; the wing holds no state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use super::perform::perform;
use super::wire::{Addressed, ErrorKind, Reply, Request};
use super::{Clusters, OpError, Operator};
use crate::journal::Journal;
use crate::plan::Plan;
use crate::service::Running;

pub const SOCKET_NAME: &str = "admin.sock";
/// A request line longer than this is refused.
const MAX_REQUEST: usize = 1024;

pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET_NAME)
}

/// Binds the admin socket, replacing a stale one, readable and writable by its owner only.
pub fn bind(state_dir: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    crate::sockets::bind_unix_owner_only(
        &socket_path(state_dir),
        crate::sockets::StaleSocket::ReplaceUnlessAnswered,
    )
}

/// Answers requests on `listener` (from [`bind`]) until the appliance stops; `reload` requests
/// go to the supervisor.
pub fn start(
    listener: std::os::unix::net::UnixListener,
    parts: Clusters,
) -> anyhow::Result<Running> {
    let listener = UnixListener::from_std(listener).context("adopting the admin socket")?;
    let token = parts.shutdown().clone();
    Ok(Box::pin(serve(listener, parts, token)))
}

async fn serve(
    listener: UnixListener,
    parts: Clusters,
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
            if let Err(e) = session(stream, &parts).await {
                tracing::debug!("admin session: {e}");
            }
        });
    }
}

/// How long a client has to send its request line.
const REQUEST_TIME: Duration = Duration::from_secs(5);

async fn session(stream: UnixStream, clusters: &Clusters) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    tokio::time::timeout(REQUEST_TIME, BufReader::new(read).take_line(&mut line)).await??;
    let reply = match Addressed::parse(&line) {
        Ok(Addressed { cluster, request }) => {
            match clusters_operator(clusters, cluster.as_deref(), &request) {
                Ok(op) => {
                    // `cluster down` waits for the provider to destroy every machine.
                    let limit = if op.orchestration().is_ok() {
                        Duration::from_secs(600)
                    } else {
                        REQUEST_TIME
                    };
                    match tokio::time::timeout(limit, perform(clusters, &op, request)).await {
                        Ok(outcome) => Reply::from(outcome),
                        Err(_) => Reply::error(
                            ErrorKind::Timeout,
                            format!("no answer within {}", humantime::format_duration(limit)),
                        ),
                    }
                }
                Err(e) => Reply::of::<String>(Err(e)),
            }
        }
        Err((_, usage)) => Reply::error(ErrorKind::Usage, usage),
    };
    let reply = reply.encode();
    write.write_all(reply.as_bytes()).await?;
    write.shutdown().await
}

/// Who answers `request`: the host's operator for what is the host's (reload, the pair), else
/// the named cluster's, or the only one's.
fn clusters_operator(
    clusters: &Clusters,
    cluster: Option<&str>,
    request: &Request,
) -> Result<Operator, OpError> {
    match (request, cluster) {
        (Request::Reload | Request::Ha(_) | Request::Clusters, None) => Ok(clusters.host()),
        _ => clusters.pick(cluster),
    }
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

/// [`super::reinstall`] as the socket replies.
pub async fn reinstall(node: &str, plan: &Plan, journal: &Journal) -> Reply {
    Reply::of(super::reinstall(node, plan, journal).await)
}

/// The client side, for the CLI: sends `request`, returns the reply.
pub fn call(state_dir: &Path, request: &Addressed) -> std::io::Result<Reply> {
    call_waiting(state_dir, request, Duration::from_secs(10))
}

/// [`call`] for a request that takes long (`cluster down` waits for every machine).
pub fn call_waiting(
    state_dir: &Path,
    request: &Addressed,
    limit: Duration,
) -> std::io::Result<Reply> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::os::unix::net::UnixStream::connect(socket_path(state_dir))?;
    stream.set_read_timeout(Some(limit))?;
    stream.write_all(format!("{request}\n").as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(Reply::decode(&reply))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::lb::pool::Pools;
    use crate::operator::perform::{journal_lines, lb_status};
    use crate::operator::wire::NodeOp;

    #[test]
    fn a_request_may_name_its_cluster_first() {
        let drain = Request::node(NodeOp::Drain, "master-0");
        assert_eq!(
            Addressed::parse("@test lb drain master-0\n"),
            Ok(Addressed::new(Some("test"), drain))
        );
        assert_eq!(
            Addressed::parse("  @okd status"),
            Ok(Addressed::new(Some("okd"), Request::Status))
        );
        // An id alone is a request with no words: the parser's usage error, for that cluster.
        let Err((id, _)) = Addressed::parse("@okd") else {
            panic!("an id alone is a request")
        };
        assert_eq!(id.as_deref(), Some("okd"));
    }
    use crate::install_state;
    use arc_swap::ArcSwap;

    /// A load-balancer or journal request on bare pools (no pair, no orchestration) to its
    /// reply text, through the same functions [`perform`] calls for it (not `perform` itself,
    /// which needs a whole `Operator`). Inside the tokio runtime: a drain starts its watchers
    /// there.
    fn execute(request: &str, pools: &ArcSwap<Pools>, journal: &Journal) -> String {
        let reply = match Request::parse(request) {
            Ok(Request::Node {
                op: NodeOp::Drain,
                node,
            }) => Reply::of(super::super::drain(&pools.load(), &node, journal)),
            Ok(Request::Node {
                op: NodeOp::Undrain,
                node,
            }) => Reply::of(super::super::undrain(&pools.load(), &node, journal)),
            Ok(Request::LbStatus) => Reply::body(lb_status(&pools.load())),
            Ok(Request::Journal) => Reply::body(journal_lines(journal)),
            Ok(other) => panic!("not a load-balancer request: {other:?}"),
            Err(usage) => Reply::error(ErrorKind::Usage, usage),
        };
        reply.text()
    }
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
            sharing: crate::plan::Sharing::Own,
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
        let api_bootstrap = Arc::clone(&pools.load().pools()[0].backends[0]);
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
        let role = install_state::Observation::RoleConfig {
            from: "10.0.0.2:1".parse().unwrap(),
            file: "master.ign",
            by_installed_system: true,
        };
        let now = std::time::SystemTime::now();
        assert!(
            install_state::step(dir.path(), "master-0", role, now)
                .recorded
                .unwrap()
        );
        assert_eq!(
            reinstall("master-0", &plan, &journal).await.text(),
            "ok: master-0 will install again at its next network boot\n"
        );
        assert_eq!(
            install_state::load(dir.path(), "master-0"),
            install_state::NodeState::NotInstalled
        );
        assert_eq!(
            reinstall("master-0", &plan, &journal).await.text(),
            "ok: master-0 was not marked installed; its next network boot installs it\n"
        );
        assert_eq!(
            reinstall("nobody", &plan, &journal).await.text(),
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
        let reply = reinstall("master-0", &plan, &journal).await.text();
        assert!(
            reply.starts_with("error: can't reset master-0: "),
            "{reply}"
        );
    }

    /// What `okd-appliance nodes` did to a machine reaches the journal as the control module's
    /// own event; a node or action it does not know is refused with the reason.
    #[test]
    fn a_machine_action_of_the_nodes_command_is_journalled() {
        let request = Request::parse("machine master-0 start ok started vm 9002 on pve1").unwrap();
        assert_eq!(
            request,
            Request::Machine {
                node: "master-0".into(),
                action: "start",
                result: Ok("started vm 9002 on pve1".into()),
            }
        );
        assert_eq!(
            Request::parse("machine master-0 create failed can't reach https://pve1:8006"),
            Ok(Request::Machine {
                node: "master-0".into(),
                action: "create",
                result: Err("can't reach https://pve1:8006".into()),
            })
        );
        assert!(
            Request::parse("machine master-0 status ok running")
                .unwrap_err()
                .contains("status is not a machine action")
        );
        assert!(
            Request::parse("machine master-0 start maybe x")
                .unwrap_err()
                .contains("maybe is not ok or failed")
        );
        let loaded = crate::config::parse(
            "version: 1\ncluster: { name: okd, base_domain: lab.example.com }\n\
             network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }\n\
             nodes:\n  - { name: master-0, role: master, mac: \"52:54:00:00:00:02\", ip: 10.0.0.2 }\n\
             install: { ignition_dir: ./i, artifacts_dir: ./a }\n",
            "t.yml",
            Path::new("."),
            crate::config::InstallCheck::Skip,
        )
        .unwrap();
        let plan = Plan::derive(&loaded.config, 1);
        let journal = Journal::new();
        let Request::Machine {
            node,
            action,
            result,
        } = request
        else {
            unreachable!()
        };
        assert_eq!(
            Reply::of(super::super::record_machine(
                &plan, &journal, &node, action, result
            ))
            .text(),
            "ok: master-0: start recorded\n"
        );
        assert_eq!(
            Reply::of(super::super::record_machine(
                &plan,
                &journal,
                "nobody",
                "start",
                Ok(String::new())
            ))
            .text(),
            "error: no node is named nobody\n"
        );
        let recent: Vec<String> = journal.recent().iter().map(ToString::to_string).collect();
        assert_eq!(recent, ["master-0: start: started vm 9002 on pve1"]);
    }
}
