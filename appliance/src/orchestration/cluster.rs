//! The cluster's API, as the orchestration reads it: the bootstrap ConfigMap, the etcd
//! operator's bootstrap condition, certificate signing requests, Nodes, the ClusterVersion and
//! the ClusterOperators.
//!
//! Credentials and the cluster CA come from the admin kubeconfig `openshift-install` wrote; the
//! address from the plan (the appliance's own API frontend unless configured), with TLS names
//! checked against `api-int.<domain>` when that address is an IP, as the nodes do. The runner
//! (`super`) compares the kubeconfig's content at every poll, so a file corrected in place is
//! read again, and says an observation the API has not answered within 2 s while it waits
//! (`answered`), not only at the request's 20 s timeout.
//!
//! Architecture invariant: reads and one write, the `/approval` subresource of a request
//! [`super::csr`] accepted. Nothing here decides.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};

use crate::plan::orchestration::OrchestrationPlan;

/// Bounds every request: an API that stops answering is retried at the next poll.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("can't use the kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error("the cluster API at {url}: {reason}")]
    Api { url: String, reason: String },
}

/// A condition's status, by type.
pub type Conditions = HashMap<String, String>;

/// Where etcd's bootstrap member stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdBootstrap {
    Removed,
    /// Gone from etcd's members, as the etcd operator of every release says it
    /// (`EtcdRunningInCluster=True`, reason `BootstrapAlreadyRemoved`), without
    /// `EtcdBootstrapMemberRemoved` (an operator from before 2023-01-20 never writes it).
    AlreadyRemoved,
    /// Not yet, and what was seen.
    NotYet(&'static str),
}

/// ClusterVersion `version` as the orchestration reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionState {
    pub conditions: Conditions,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    pub name: String,
    pub ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorState {
    pub name: String,
    pub conditions: Conditions,
    /// When each condition last changed its status (its `lastTransitionTime`, seconds since
    /// the epoch), for those that say.
    pub changed: HashMap<String, u64>,
}

pub struct Cluster {
    client: Client,
    url: String,
    /// What it was made from, so a reload that changes it is noticed ([`Cluster::made_from`]).
    kubeconfig: std::path::PathBuf,
    /// The kubeconfig's content then: a file corrected in place is read again.
    kubeconfig_digest: ring::digest::Digest,
    server_name: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cluster({})", self.url)
    }
}

impl Cluster {
    pub async fn connect(plan: &OrchestrationPlan) -> Result<Cluster, ClusterError> {
        let path = plan.kubeconfig.display().to_string();
        let bad = |reason: String| ClusterError::Kubeconfig {
            path: path.clone(),
            reason,
        };
        // The cluster-admin credential: read as every other secret (owner-only, or refused).
        let text = crate::secrets::read_kubeconfig(&plan.kubeconfig).map_err(|e| match e {
            crate::secrets::SecretError::Unreadable { reason, .. } => bad(reason),
            other => bad(other.to_string()),
        })?;
        let kubeconfig = Kubeconfig::from_yaml(&String::from_utf8_lossy(&text))
            .map_err(|e| bad(e.to_string()))?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| bad(e.to_string()))?;
        if config.accept_invalid_certs {
            return Err(bad(
                "insecure-skip-tls-verify is set: the orchestration approves certificates and needs to know whom it talks to".into(),
            ));
        }
        config.cluster_url = plan.api_url.parse().map_err(|e| ClusterError::Api {
            url: plan.api_url.clone(),
            reason: format!("not a URL: {e}"),
        })?;
        let host = config.cluster_url.host().unwrap_or_default();
        if host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok()
        {
            config.tls_server_name = Some(plan.api_server_name.clone());
        }
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.read_timeout = Some(REQUEST_TIMEOUT);
        config.write_timeout = Some(REQUEST_TIMEOUT);
        let client = Client::try_from(config).map_err(|e| ClusterError::Api {
            url: plan.api_url.clone(),
            reason: e.to_string(),
        })?;
        Ok(Cluster {
            client,
            url: plan.api_url.clone(),
            kubeconfig: plan.kubeconfig.clone(),
            kubeconfig_digest: ring::digest::digest(&ring::digest::SHA256, &text),
            server_name: plan.api_server_name.clone(),
        })
    }

    /// Whether the kubeconfig's content changed since this client was made (an operator
    /// replaced a wrong one in place: `reload` sees the same config, so the file itself is
    /// compared). An unreadable file counts as changed: connecting again says why.
    pub async fn kubeconfig_changed(&self) -> bool {
        match tokio::fs::read(&self.kubeconfig).await {
            Ok(now) => {
                ring::digest::digest(&ring::digest::SHA256, &now).as_ref()
                    != self.kubeconfig_digest.as_ref()
            }
            Err(_) => true,
        }
    }

    /// Whether this client is the one `plan` asks for: a reload may have named another
    /// kubeconfig, API address or API name since it was made.
    pub fn made_from(&self, plan: &OrchestrationPlan) -> bool {
        self.kubeconfig == plan.kubeconfig
            && self.url == plan.api_url
            && self.server_name == plan.api_server_name
    }

    fn api_error(&self, what: &str, e: &kube::Error) -> ClusterError {
        ClusterError::Api {
            url: self.url.clone(),
            reason: format!("{what}: {}", describe(e)),
        }
    }

    /// `kube-system/bootstrap`'s `status` is `complete`, as `openshift-install wait-for
    /// bootstrap-complete` reads it.
    pub async fn bootstrap_complete(&self) -> Result<bool, ClusterError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), "kube-system");
        let cm = api
            .get_opt("bootstrap")
            .await
            .map_err(|e| self.api_error("reading kube-system/bootstrap", &e))?;
        Ok(cm
            .and_then(|cm| cm.data)
            .and_then(|d| d.get("status").cloned())
            .is_some_and(|s| s == "complete"))
    }

    /// Whether etcd removed its bootstrap member: `EtcdBootstrapMemberRemoved=True` on
    /// `etcds.operator.openshift.io/cluster`. The rule is `openshift-install wait-for
    /// bootstrap-complete`'s (openshift/installer, cmd/openshift-install/create.go,
    /// `waitForEtcdBootstrapMemberRemoval`): only True counts; an absent condition, an absent
    /// resource or a read error mean "not yet". The etcd operator never writes False: the
    /// condition is absent until the member is gone (cluster-etcd-operator,
    /// pkg/operator/bootstrapteardown/bootstrap_teardown_controller.go,
    /// `setSuccessfulBootstrapRemovalStatus`). Its first name was misspelt
    /// `EtcdBoostrapMemberRemoved` (cluster-etcd-operator#992, on release-4.12 as bab66d8d7 of
    /// 2023-01-20, after 4.12.0): either counts. An operator without it, and every operator
    /// since, says the member is gone another way: once the member list has no
    /// `etcd-bootstrap`, `removeBootstrap` sets `EtcdRunningInCluster=True` with reason
    /// `BootstrapAlreadyRemoved` (release-4.10 to main): that counts too, and is no guess from a
    /// version number.
    pub async fn etcd_bootstrap_member_removed(&self) -> Result<EtcdBootstrap, ClusterError> {
        let resource = ApiResource {
            group: "operator.openshift.io".into(),
            version: "v1".into(),
            api_version: "operator.openshift.io/v1".into(),
            kind: "Etcd".into(),
            plural: "etcds".into(),
        };
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let etcd = match api.get_opt("cluster").await {
            Ok(e) => e,
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => return Err(self.api_error("reading etcds/cluster", &e)),
        };
        Ok(match etcd {
            None => EtcdBootstrap::NotYet("etcds/cluster does not exist yet"),
            Some(e) => {
                let c = conditions(&e.data);
                let gone = condition(&e.data, "EtcdRunningInCluster")
                    .is_some_and(|(s, r)| s == "True" && r == "BootstrapAlreadyRemoved");
                match c
                    .get("EtcdBootstrapMemberRemoved")
                    .or_else(|| c.get("EtcdBoostrapMemberRemoved"))
                {
                    Some(s) if s == "True" => EtcdBootstrap::Removed,
                    _ if gone => EtcdBootstrap::AlreadyRemoved,
                    Some(_) => EtcdBootstrap::NotYet("EtcdBootstrapMemberRemoved is not True"),
                    None => EtcdBootstrap::NotYet("EtcdBootstrapMemberRemoved is not set yet"),
                }
            }
        })
    }

    pub async fn certificate_requests(
        &self,
    ) -> Result<Vec<CertificateSigningRequest>, ClusterError> {
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| self.api_error("listing certificate signing requests", &e))?;
        Ok(list.items)
    }

    /// Approves through the `/approval` subresource, as `oc adm certificate approve` does:
    /// the request as read, with an `Approved` condition added (its resourceVersion makes a
    /// concurrent change fail instead of being overwritten).
    pub async fn approve(
        &self,
        csr: &CertificateSigningRequest,
        message: &str,
    ) -> Result<(), ClusterError> {
        let name = csr.metadata.name.clone().unwrap_or_default();
        let mut approved = csr.clone();
        let status = approved.status.get_or_insert_with(Default::default);
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: Some("OkdApplianceApprove".into()),
                message: Some(message.into()),
                last_update_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                )),
                last_transition_time: None,
            });
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        api.replace_subresource("approval", &name, &PostParams::default(), &approved)
            .await
            .map_err(|e| self.api_error(&format!("approving {name}"), &e))?;
        Ok(())
    }

    pub async fn nodes(&self) -> Result<Vec<NodeState>, ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| self.api_error("listing nodes", &e))?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|n| {
                let ready = n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                Some(NodeState {
                    name: n.metadata.name?,
                    ready,
                })
            })
            .collect())
    }

    /// ClusterVersion `version`'s conditions, if it exists yet.
    pub async fn cluster_version(&self) -> Result<Option<VersionState>, ClusterError> {
        let api: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &config_resource("ClusterVersion", "clusterversions"),
        );
        let version = api
            .get_opt("version")
            .await
            .map_err(|e| self.api_error("reading clusterversion/version", &e))?;
        Ok(version.map(|v| VersionState {
            conditions: conditions(&v.data),
        }))
    }

    pub async fn operators(&self) -> Result<Vec<OperatorState>, ClusterError> {
        let api: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &config_resource("ClusterOperator", "clusteroperators"),
        );
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| self.api_error("listing clusteroperators", &e))?;
        Ok(list
            .items
            .into_iter()
            .map(|o| OperatorState {
                name: o.metadata.name.clone().unwrap_or_default(),
                conditions: conditions(&o.data),
                changed: transitions(&o.data),
            })
            .collect())
    }
}

fn config_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "config.openshift.io".into(),
        version: "v1".into(),
        api_version: "config.openshift.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// `status.conditions` of an OpenShift resource, type to status.
fn conditions(data: &serde_json::Value) -> Conditions {
    data.pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some((
                c.get("type")?.as_str()?.to_owned(),
                c.get("status")?.as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Each condition's `lastTransitionTime` (RFC 3339, as metav1.Time writes it), in seconds since
/// the epoch; a condition without one (or with one that does not parse) is left out.
fn transitions(data: &serde_json::Value) -> HashMap<String, u64> {
    data.pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let at = humantime::parse_rfc3339(c.get("lastTransitionTime")?.as_str()?).ok()?;
            let secs = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
            Some((c.get("type")?.as_str()?.to_owned(), secs))
        })
        .collect()
}

/// One condition's status and reason.
fn condition<'a>(data: &'a serde_json::Value, kind: &str) -> Option<(&'a str, &'a str)> {
    data.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(|t| t.as_str()) == Some(kind))
        .map(|c| {
            let text = |k: &str| c.get(k).and_then(|v| v.as_str()).unwrap_or_default();
            (text("status"), text("reason"))
        })
}

/// A kube error in one line: the API's own message where there is one.
fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {} ({})", s.code, s.message, s.reason),
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_read_by_type() {
        let data = serde_json::json!({"status": {"conditions": [
            {"type": "Available", "status": "True"},
            {"type": "Failing", "status": "False", "message": "ok"},
            {"status": "True"},
        ]}});
        let c = conditions(&data);
        assert_eq!(c.len(), 2);
        assert_eq!(c["Available"], "True");
        assert!(conditions(&serde_json::json!({})).is_empty());
    }

    #[tokio::test]
    async fn a_client_knows_whether_the_plan_still_asks_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\ncurrent-context: admin\n\
             clusters: [{ name: okd, cluster: { server: \"https://10.0.0.1:6443\" } }]\n\
             users: [{ name: admin, user: { token: not-a-secret } }]\n\
             contexts: [{ name: admin, context: { cluster: okd, user: admin } }]\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        let loose = std::fs::Permissions::from_mode(0o644);
        std::fs::set_permissions(&kubeconfig, loose).unwrap();
        let plan = OrchestrationPlan {
            kubeconfig: kubeconfig.clone(),
            api_url: "https://10.0.0.1:6443".into(),
            api_server_name: "api-int.okd.lab.example.com".into(),
            after_bootstrap: crate::vocabulary::AfterBootstrap::Destroy,
            single_node: false,
            poll: Duration::from_secs(10),
            settle: Duration::from_secs(60),
            bootstrap_timeout: Duration::from_secs(3000),
            install_timeout: Duration::from_secs(4200),
            nodes: Vec::new(),
        };
        // The cluster-admin credential is a secret: a file others can read is refused.
        let refused = Cluster::connect(&plan).await.unwrap_err().to_string();
        assert!(refused.contains("chmod 600"), "{refused}");
        let tight = std::fs::Permissions::from_mode(0o640);
        std::fs::set_permissions(&kubeconfig, tight).unwrap();
        let cluster = Cluster::connect(&plan).await.unwrap();
        assert!(cluster.made_from(&plan));
        // A kubeconfig corrected in place (same path, new content) is noticed.
        assert!(!cluster.kubeconfig_changed().await);
        let text = std::fs::read_to_string(&kubeconfig).unwrap();
        std::fs::write(&kubeconfig, text.replace("not-a-secret", "another-token")).unwrap();
        assert!(cluster.kubeconfig_changed().await);
        std::fs::write(&kubeconfig, &text).unwrap();
        assert!(!cluster.kubeconfig_changed().await);
        // Pacing is read from the plan at each poll: no new client for it.
        let slower = OrchestrationPlan {
            poll: Duration::from_secs(30),
            ..plan.clone()
        };
        assert!(cluster.made_from(&slower));
        let elsewhere = OrchestrationPlan {
            api_url: "https://10.0.0.1:7443".into(),
            ..plan.clone()
        };
        assert!(!cluster.made_from(&elsewhere));
        let other_credentials = OrchestrationPlan {
            kubeconfig: dir.path().join("kubeconfig.new"),
            ..plan.clone()
        };
        assert!(!cluster.made_from(&other_credentials));
        let other_name = OrchestrationPlan {
            api_server_name: "api-int.other.lab.example.com".into(),
            ..plan
        };
        assert!(!cluster.made_from(&other_name));
    }
}
