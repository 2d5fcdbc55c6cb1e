//! Why the install orchestration refused a request (`cluster up|scale|down`) or its run ended:
//! typed, so the operator wing and the journal say each in its own words and a caller can tell
//! a request to fix from a machine that failed.

/// Why `up`, `scale` or `down` was refused, or why a run of `up` ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// Nothing is started without the API's credentials.
    #[error(
        "the admin kubeconfig can't be used ({0}): `openshift-install create ignition-configs` writes auth/kubeconfig in the install directory (or set orchestration.kubeconfig); no machine was touched"
    )]
    Kubeconfig(String),
    #[error(
        "the config has {configured} worker{}: add nodes with role worker to scale to {wanted}",
        if *configured == 1 { "" } else { "s" }
    )]
    TooFewWorkers { configured: usize, wanted: usize },
    #[error("control.provider is none: okd-appliance made no machines, so it destroys none")]
    NoProvider,
    /// The machines' provider can't be made from the plan (its settings or secret).
    #[error("{0}")]
    Provider(String),
    /// A machine action failed: `create of master-0 through proxmox at ...: ...`.
    #[error("{action} of {node}{}: {error}", through.as_ref().map(|p| format!(" through {p}")).unwrap_or_default())]
    Machine {
        action: &'static str,
        node: String,
        through: Option<String>,
        error: String,
    },
    /// `down`: the machines that could not be destroyed, each with why.
    #[error("{}", .0.iter().map(|(node, why)| format!("{node}: {why}")).collect::<Vec<_>>().join("; "))]
    NotDestroyed(Vec<(String, String)>),
    /// The install's rules ended the run (`decide::Decision::Fail`: a timeout, a node that
    /// can't join).
    #[error("{0}")]
    Decided(String),
    /// A blocking task of the orchestration did not finish (it panicked, or the runtime is
    /// stopping).
    #[error("{0}")]
    Task(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_says_what_to_do() {
        assert_eq!(
            RunError::TooFewWorkers {
                configured: 1,
                wanted: 3
            }
            .to_string(),
            "the config has 1 worker: add nodes with role worker to scale to 3"
        );
        assert_eq!(
            RunError::Machine {
                action: "create",
                node: "master-0".into(),
                through: Some("proxmox at https://pve1:8006".into()),
                error: "refused".into()
            }
            .to_string(),
            "create of master-0 through proxmox at https://pve1:8006: refused"
        );
        assert_eq!(
            RunError::NotDestroyed(vec![("a".into(), "x".into()), ("b".into(), "y".into())])
                .to_string(),
            "a: x; b: y"
        );
    }
}
