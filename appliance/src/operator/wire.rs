//! The admin socket's wire, written once for both of its ends: the CLI encodes a [`Request`]
//! and decodes the [`Reply`]; the socket decodes the request and encodes the reply, with the
//! same types (as mini-redis's client and server share `Frame`). Nothing else spells a
//! request line or reads a reply's first words.
//!
//! A request is one line, `[@ID ]REQUEST` ([`Addressed`]): `lb drain NODE`, `lb undrain NODE`,
//! `lb status`, `node reinstall NODE`, `reload`, `journal`, `status` (JSON), `clusters` (the
//! ids served, one a line), `cluster up|status|down`, `cluster scale WORKERS`, `ha
//! status|health`, `ha set active|standby`, `machine NODE ACTION ok|failed TEXT` (what
//! `okd-appliance nodes` did to a node's machine: the control module's own journal event, so a
//! VM started from the command line moves the node's phase to powered-on, and nothing is said
//! when no appliance runs) and `ignition ok|failed TEXT` (what `ignition create` did).
//! The node operations ([`NodeOp`]: drain, undrain, reinstall) are one type for this socket and
//! the API's `POST /api/v1/nodes/NODE/OP`.
//!
//! A reply is `ok[: LINE]` and data lines, or `error[(KIND)]: REASON` with KIND `usage` (a
//! request, node or cluster the appliance does not know, or no cluster named where several
//! are served) or `timeout` (no answer in time); no KIND is a refusal or failure of the
//! operation itself. The kind is the exit code's, never the reason's words.

use std::fmt;

use super::OpError;

/// A request line: the cluster it names (`@ID`), if any, and the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addressed {
    pub cluster: Option<String>,
    pub request: Request,
}

/// One request of the admin socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// An operation on one node's backends or install, which the API takes too.
    Node {
        op: NodeOp,
        node: String,
    },
    LbStatus,
    Reload,
    Journal,
    Status,
    /// The host's own question: which clusters it serves.
    Clusters,
    Cluster(ClusterRequest),
    Ha(HaRequest),
    /// `okd-appliance nodes` acted on a node's machine: `action` is the control module's name
    /// for it, `result` the line it printed (one line: [`Request::machine`] makes it so).
    Machine {
        node: String,
        action: &'static str,
        result: Result<String, String>,
    },
    /// `okd-appliance ignition create` (or `cluster up`) made the ignition set, or failed to:
    /// the line it printed (one line, as [`Request::ignition`] makes it).
    Ignition {
        result: Result<String, String>,
    },
}

/// What the admin socket and the API (`POST /api/v1/nodes/NODE/OP`) both do to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeOp {
    /// Out of the load balancer's pools (`lb drain NODE`).
    Drain,
    /// Back into them (`lb undrain NODE`).
    Undrain,
    /// Its install forgotten, so it installs again (`node reinstall NODE`).
    Reinstall,
}

impl NodeOp {
    pub const ALL: [NodeOp; 3] = [NodeOp::Drain, NodeOp::Undrain, NodeOp::Reinstall];

    /// Its name in the API's path.
    pub fn name(self) -> &'static str {
        match self {
            NodeOp::Drain => "drain",
            NodeOp::Undrain => "undrain",
            NodeOp::Reinstall => "reinstall",
        }
    }

    pub fn named(name: &str) -> Option<NodeOp> {
        NodeOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The words before the node on the admin socket.
    fn words(self) -> &'static str {
        match self {
            NodeOp::Drain => "lb drain",
            NodeOp::Undrain => "lb undrain",
            NodeOp::Reinstall => "node reinstall",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterRequest {
    Up,
    Status,
    Scale(usize),
    Down,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaRequest {
    Status,
    Set { active: bool },
    Health,
}

/// What an error reply says about whose it is to fix; the CLI's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The asker named something the appliance does not know (exit 2, usage).
    Usage,
    /// The operation was refused or failed (exit 1).
    Failed,
    /// No answer in time (exit 1).
    Timeout,
}

impl ErrorKind {
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::Usage => 2,
            ErrorKind::Failed | ErrorKind::Timeout => 1,
        }
    }

    fn tag(self) -> &'static str {
        match self {
            ErrorKind::Usage => "(usage)",
            ErrorKind::Failed => "",
            ErrorKind::Timeout => "(timeout)",
        }
    }
}

impl From<&OpError> for ErrorKind {
    fn from(e: &OpError) -> Self {
        match e {
            OpError::NoBackend(_)
            | OpError::NoNode(_)
            | OpError::NoCluster { .. }
            | OpError::WhichCluster(_) => ErrorKind::Usage,
            OpError::Standby(_)
            | OpError::NotPaired
            | OpError::NoOrchestration(_)
            | OpError::Refused(_)
            | OpError::Stopping
            | OpError::Failed(_) => ErrorKind::Failed,
        }
    }
}

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Done: the summary on the `ok` line, if any, and the data lines after it.
    Ok {
        line: Option<String>,
        body: String,
    },
    Error {
        kind: ErrorKind,
        reason: String,
    },
}

impl Reply {
    /// `ok: LINE`.
    pub fn line(line: impl fmt::Display) -> Reply {
        Reply::Ok {
            line: Some(line.to_string()),
            body: String::new(),
        }
    }

    /// `ok` and data lines.
    pub fn body(body: String) -> Reply {
        Reply::Ok { line: None, body }
    }

    pub fn error(kind: ErrorKind, reason: impl fmt::Display) -> Reply {
        Reply::Error {
            kind,
            reason: reason.to_string(),
        }
    }

    /// An operation's outcome: `ok: DONE`, or its error with the error's kind.
    pub fn of<T: fmt::Display>(outcome: Result<T, OpError>) -> Reply {
        match outcome {
            Ok(done) => Reply::line(done),
            Err(e) => Reply::error(ErrorKind::from(&e), e),
        }
    }

    /// The reply as it is sent.
    pub fn encode(&self) -> String {
        match self {
            Reply::Ok { line: None, body } => format!("ok\n{body}"),
            Reply::Ok {
                line: Some(line),
                body,
            } => format!("ok: {line}\n{body}"),
            Reply::Error { kind, reason } => format!("error{}: {reason}\n", kind.tag()),
        }
    }

    /// A reply as it was received; anything else is an error of kind `Failed` quoting it.
    pub fn decode(text: &str) -> Reply {
        let (first, body) = text.split_once('\n').unwrap_or((text, ""));
        if first == "ok" {
            return Reply::body(body.to_owned());
        }
        if let Some(line) = first.strip_prefix("ok: ") {
            return Reply::Ok {
                line: Some(line.to_owned()),
                body: body.to_owned(),
            };
        }
        for kind in [ErrorKind::Usage, ErrorKind::Timeout, ErrorKind::Failed] {
            if let Some(reason) = text
                .strip_prefix("error")
                .and_then(|rest| rest.strip_prefix(kind.tag()))
                .and_then(|rest| rest.strip_prefix(": "))
            {
                return Reply::error(kind, reason.trim_end());
            }
        }
        Reply::error(
            ErrorKind::Failed,
            format!("the appliance answered {:?}", text.trim_end()),
        )
    }

    /// What the CLI prints: an `ok` reply as it was sent, an error as `error: REASON`.
    pub fn text(&self) -> String {
        match self {
            Reply::Ok { .. } => self.encode(),
            Reply::Error { reason, .. } => format!("error: {reason}\n"),
        }
    }
}

impl Request {
    pub fn node(op: NodeOp, node: &str) -> Request {
        Request::Node {
            op,
            node: node.to_owned(),
        }
    }

    /// `machine NODE ACTION ok|failed TEXT`, the text made one line of single spaces (as the
    /// line carries it) and cut to `room` bytes.
    pub fn machine(
        node: &str,
        action: &'static str,
        result: Result<String, String>,
        room: usize,
    ) -> Request {
        Request::Machine {
            node: node.to_owned(),
            action,
            result: one_line(result, room),
        }
    }

    /// `ignition ok|failed TEXT`, the text on one line and cut to `room` bytes.
    pub fn ignition(result: Result<String, String>, room: usize) -> Request {
        Request::Ignition {
            result: one_line(result, room),
        }
    }

    /// The operation the HTTP API's `method` on `path` (its segments after `/api/v1/`, a
    /// cluster's prefix taken off) asks for: `GET status`, `POST nodes/NODE/OP`. `None`: no
    /// operation (the API's own routes: the page, the event stream, the metrics).
    pub fn from_api(method: &str, path: &[&str]) -> Option<Request> {
        match (method, path) {
            ("GET", ["status"]) => Some(Request::Status),
            ("POST", ["nodes", node, op]) => NodeOp::named(op).map(|op| Request::node(op, node)),
            _ => None,
        }
    }

    /// The request on `line` (without its `@ID`), or the error reply's reason (the requests
    /// there are).
    pub fn parse(line: &str) -> Result<Request, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        Ok(match words.as_slice() {
            [first, second, node]
                if let Some(op) = NodeOp::ALL
                    .into_iter()
                    .find(|op| op.words() == format!("{first} {second}")) =>
            {
                Request::Node {
                    op,
                    node: (*node).to_owned(),
                }
            }
            ["lb", "status"] => Request::LbStatus,
            ["reload"] => Request::Reload,
            ["journal"] => Request::Journal,
            ["status"] => Request::Status,
            ["clusters"] => Request::Clusters,
            ["cluster", rest @ ..] => Request::Cluster(match rest {
                ["up"] => ClusterRequest::Up,
                ["status"] => ClusterRequest::Status,
                ["scale", n] => ClusterRequest::Scale(
                    n.parse()
                        .map_err(|_| format!("{n} is not a number of workers"))?,
                ),
                ["down"] => ClusterRequest::Down,
                _ => {
                    return Err("unknown request (cluster up | cluster status | cluster scale WORKERS | cluster down)".into());
                }
            }),
            ["machine", node, action, outcome, text @ ..] => {
                let Some(action) = super::machine_action(action) else {
                    return Err(format!(
                        "{action} is not a machine action (create | start | stop | reset | destroy)"
                    ));
                };
                let text = text.join(" ");
                Request::Machine {
                    node: (*node).to_owned(),
                    action,
                    result: match *outcome {
                        "ok" => Ok(text),
                        "failed" => Err(text),
                        other => return Err(format!("{other} is not ok or failed")),
                    },
                }
            }
            ["ignition", outcome, text @ ..] => {
                let text = text.join(" ");
                Request::Ignition {
                    result: match *outcome {
                        "ok" => Ok(text),
                        "failed" => Err(text),
                        other => return Err(format!("{other} is not ok or failed")),
                    },
                }
            }
            ["ha", rest @ ..] => Request::Ha(match rest {
                ["status"] => HaRequest::Status,
                ["set", "active"] => HaRequest::Set { active: true },
                ["set", "standby"] => HaRequest::Set { active: false },
                ["health"] => HaRequest::Health,
                _ => {
                    return Err(
                        "unknown request (ha status | ha set active|standby | ha health)".into(),
                    );
                }
            }),
            _ => {
                return Err(
                    "unknown request (lb drain NODE | lb undrain NODE | lb status | \
                            node reinstall NODE | reload | journal | status | clusters | \
                            machine NODE ACTION ok|failed TEXT)"
                        .into(),
                );
            }
        })
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Request::Node { op, node } => write!(f, "{} {node}", op.words()),
            Request::LbStatus => f.write_str("lb status"),
            Request::Reload => f.write_str("reload"),
            Request::Journal => f.write_str("journal"),
            Request::Status => f.write_str("status"),
            Request::Clusters => f.write_str("clusters"),
            Request::Cluster(ClusterRequest::Up) => f.write_str("cluster up"),
            Request::Cluster(ClusterRequest::Status) => f.write_str("cluster status"),
            Request::Cluster(ClusterRequest::Scale(n)) => write!(f, "cluster scale {n}"),
            Request::Cluster(ClusterRequest::Down) => f.write_str("cluster down"),
            Request::Ha(HaRequest::Status) => f.write_str("ha status"),
            Request::Ha(HaRequest::Set { active: true }) => f.write_str("ha set active"),
            Request::Ha(HaRequest::Set { active: false }) => f.write_str("ha set standby"),
            Request::Ha(HaRequest::Health) => f.write_str("ha health"),
            Request::Machine {
                node,
                action,
                result,
            } => match result {
                Ok(text) => write!(f, "machine {node} {action} ok {text}"),
                Err(text) => write!(f, "machine {node} {action} failed {text}"),
            },
            Request::Ignition { result } => match result {
                Ok(text) => write!(f, "ignition ok {text}"),
                Err(text) => write!(f, "ignition failed {text}"),
            },
        }
    }
}

/// `result`'s text on one line (whitespace runs made one space), cut to `room` bytes at a
/// character boundary: what fits a request line.
fn one_line(result: Result<String, String>, room: usize) -> Result<String, String> {
    let fit = |t: String| {
        let mut t = t.split_whitespace().collect::<Vec<_>>().join(" ");
        if t.len() > room {
            let cut = (0..=room).rev().find(|&i| t.is_char_boundary(i));
            t.truncate(cut.unwrap_or(0));
            t.truncate(t.trim_end().len());
        }
        t
    };
    result.map(fit).map_err(fit)
}

impl Addressed {
    pub fn new(cluster: Option<&str>, request: Request) -> Addressed {
        Addressed {
            cluster: cluster.map(str::to_owned),
            request,
        }
    }

    /// `[@ID ]REQUEST`: the cluster named first, as `okd-appliance --cluster ID` sends it.
    /// An unknown request is the reason's, with the cluster that was named (if any).
    pub fn parse(line: &str) -> Result<Addressed, (Option<String>, String)> {
        let line = line.trim_start();
        let (cluster, request) = match line.strip_prefix('@') {
            Some(rest) => {
                let (id, request) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                (Some(id.to_owned()), request)
            }
            None => (None, line),
        };
        match Request::parse(request) {
            Ok(request) => Ok(Addressed { cluster, request }),
            Err(why) => Err((cluster, why)),
        }
    }
}

impl fmt::Display for Addressed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cluster {
            Some(id) => write!(f, "@{id} {}", self.request),
            None => write!(f, "{}", self.request),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_request() -> Vec<Request> {
        let mut all: Vec<Request> = NodeOp::ALL
            .into_iter()
            .map(|op| Request::Node {
                op,
                node: "master-0".into(),
            })
            .collect();
        all.extend([
            Request::LbStatus,
            Request::Reload,
            Request::Journal,
            Request::Status,
            Request::Clusters,
            Request::Cluster(ClusterRequest::Up),
            Request::Cluster(ClusterRequest::Status),
            Request::Cluster(ClusterRequest::Scale(3)),
            Request::Cluster(ClusterRequest::Down),
            Request::Ha(HaRequest::Status),
            Request::Ha(HaRequest::Set { active: true }),
            Request::Ha(HaRequest::Set { active: false }),
            Request::Ha(HaRequest::Health),
        ]);
        for op in NodeOp::ALL {
            assert_eq!(NodeOp::named(op.name()), Some(op));
        }
        for name in ["create", "start", "stop", "reset", "destroy"] {
            let action = super::super::machine_action(name).expect("a machine action");
            all.push(Request::machine(
                "worker-0",
                action,
                Ok("created vm 101\n  on pve1".into()),
                900,
            ));
            all.push(Request::machine(
                "worker-0",
                action,
                Err("proxmox   answered 500".into()),
                900,
            ));
            all.push(Request::ignition(
                Ok("made install_dir\nfrom okd.yml".into()),
                900,
            ));
            all.push(Request::ignition(Err("step 2/6 failed".into()), 900));
        }
        all
    }

    #[test]
    fn the_api_asks_for_the_same_operations() {
        assert_eq!(Request::from_api("GET", &["status"]), Some(Request::Status));
        assert_eq!(
            Request::from_api("POST", &["nodes", "master-0", "reinstall"]),
            Some(Request::node(NodeOp::Reinstall, "master-0"))
        );
        // Wrong method, unknown action, or one of the API's own routes: no operation.
        for (method, path) in [
            ("POST", &["status"][..]),
            ("GET", &["nodes", "master-0", "drain"]),
            ("POST", &["nodes", "master-0", "explode"]),
            ("GET", &["events"]),
        ] {
            assert_eq!(Request::from_api(method, path), None, "{method} {path:?}");
        }
    }

    #[test]
    fn every_request_reads_back_as_it_was_written() {
        for request in every_request() {
            for cluster in [None, Some("okd")] {
                let line = Addressed::new(cluster, request.clone()).to_string();
                assert!(!line.contains('\n'), "{line}");
                assert_eq!(
                    Addressed::parse(&line),
                    Ok(Addressed::new(cluster, request.clone())),
                    "{line}"
                );
            }
        }
    }

    #[test]
    fn a_machine_result_is_one_line_within_its_room() {
        let Request::Machine {
            result: Err(text), ..
        } = Request::machine("w", "create", Err("é".repeat(10) + "\nmore"), 5)
        else {
            panic!()
        };
        assert_eq!(text, "éé");
    }

    #[test]
    fn every_reply_reads_back_and_its_kind_is_the_exit_code() {
        for reply in [
            Reply::line("drained master-0"),
            Reply::body("{\"a\":1}\n".into()),
            Reply::Ok {
                line: Some("active (host a)".into()),
                body: "replication: connected\n".into(),
            },
            Reply::error(ErrorKind::Usage, "no node is named nobody"),
            Reply::error(ErrorKind::Failed, "no answer from the orchestration: no"),
            Reply::error(ErrorKind::Timeout, "no answer within 10s"),
        ] {
            assert_eq!(Reply::decode(&reply.encode()), reply, "{reply:?}");
        }
        // The words don't decide: a timeout that says "no ..." is not a usage error.
        let timeout = Reply::decode("error(timeout): no answer within 10m\n");
        assert!(matches!(
            timeout,
            Reply::Error {
                kind: ErrorKind::Timeout,
                ..
            }
        ));
        assert_eq!(timeout.text(), "error: no answer within 10m\n");
        assert_eq!(
            Reply::decode("what\n"),
            Reply::error(ErrorKind::Failed, "the appliance answered \"what\"")
        );
        assert_eq!(ErrorKind::from(&OpError::NoNode("x".into())).exit_code(), 2);
        assert_eq!(ErrorKind::from(&OpError::Stopping).exit_code(), 1);
    }
}
