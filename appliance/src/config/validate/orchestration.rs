//! The `orchestration` section: where `okd-appliance cluster up` finds the cluster's API and its
//! admin kubeconfig, what becomes of the bootstrap machine, how often the cluster is asked.

use super::*;

impl Validator<'_> {
    pub(super) fn orchestration(
        &mut self,
        raw: &RawOrchestration,
        dir: &Path,
        install: &RawInstall,
    ) -> Option<Orchestration> {
        // `openshift-install create ignition-configs` writes auth/kubeconfig beside the
        // ignition files.
        let kubeconfig = match &raw.kubeconfig {
            Some(k) if k.value.trim().is_empty() => {
                self.p.error(
                    "config::orchestration",
                    k.referenced,
                    "kubeconfig is empty",
                    "here",
                );
                None
            }
            Some(k) => Some(resolve(dir, &k.value)),
            None => Some(resolve(dir, &install.ignition_dir.value).join("auth/kubeconfig")),
        };
        let api_url = match &raw.api_url {
            None => Some(None),
            Some(u) => {
                let url = u.value.trim_end_matches('/');
                let host = url.strip_prefix("https://");
                if host.is_some_and(|h| !h.is_empty() && !h.contains(['/', ' '])) {
                    Some(Some(url.to_owned()))
                } else {
                    self.p
                        .error(
                            "config::orchestration",
                            u.referenced,
                            format!("api_url `{}` is not an https:// URL of a host", u.value),
                            "not an API URL",
                        )
                        .hint("e.g. https://10.0.0.1:6443 (the API server, or a balancer in front of it)");
                    None
                }
            }
        };
        let bootstrap_after_complete = self.one_of(
            "config::orchestration",
            raw.bootstrap_after_complete.as_ref(),
            "bootstrap_after_complete",
            &[
                ("destroy", AfterBootstrap::Destroy),
                ("poweroff", AfterBootstrap::PowerOff),
                ("keep", AfterBootstrap::Keep),
            ],
            "use destroy (the default), poweroff or keep",
        );
        let secs = Duration::from_secs;
        let poll = match &raw.poll {
            None => Some(DEFAULT_ORCHESTRATION_POLL),
            Some(p) => self.duration(
                p,
                "orchestration.poll",
                Duration::from_millis(100),
                secs(300),
            ),
        };
        let settle = match &raw.settle {
            None => Some(DEFAULT_OPERATORS_SETTLE),
            Some(s) => self.duration(s, "orchestration.settle", Duration::ZERO, secs(3600)),
        };
        let mut timeout = |t: &Option<Text>, key: &str, default: Duration| match t {
            None => Some(default),
            Some(t) => self.duration(t, key, secs(60), secs(7 * 24 * 3600)),
        };
        let bootstrap_timeout = timeout(
            &raw.bootstrap_timeout,
            "orchestration.bootstrap_timeout",
            DEFAULT_BOOTSTRAP_TIMEOUT,
        );
        let install_timeout = timeout(
            &raw.install_timeout,
            "orchestration.install_timeout",
            DEFAULT_INSTALL_TIMEOUT,
        );
        Some(Orchestration {
            kubeconfig: kubeconfig?,
            api_url: api_url?,
            bootstrap_after_complete: bootstrap_after_complete?,
            poll: poll?,
            settle: settle?,
            bootstrap_timeout: bootstrap_timeout?,
            install_timeout: install_timeout?,
        })
    }
}
