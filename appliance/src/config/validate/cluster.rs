//! The `cluster` section: the cluster name and base domain, and the label rules names share.

use super::*;

impl Validator<'_> {
    pub(super) fn cluster(&mut self, raw: &RawCluster, legacy_etcd: bool) -> Option<Cluster> {
        let name = self.cluster_name(&raw.name);
        let base = raw
            .base_domain
            .value
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let base = if is_host_domain(&base) {
            Some(base)
        } else {
            self.p
                .error(
                    "config::domain",
                    raw.base_domain.referenced,
                    format!("base domain `{}` is not a domain name", raw.base_domain.value),
                    "not a domain name",
                )
                .hint("use labels of letters, digits and hyphens separated by dots, e.g. lab.example.com");
            None
        };
        let (name, base_domain) = (name?, base?);
        // The longest fixed name the plan derives; node names are checked with the nodes.
        let longest = if legacy_etcd {
            "_etcd-server-ssl._tcp."
        } else {
            "api-int."
        };
        if longest.len() + name.len() + 1 + base_domain.len() > 253 {
            self.p.error(
                "config::domain",
                raw.base_domain.referenced,
                format!(
                    "cluster domain too long: {longest}<name>.<base_domain> exceeds 253 characters"
                ),
                "too long",
            );
            return None;
        }
        Some(Cluster { name, base_domain })
    }

    /// `metadata.name` as openshift-install takes it on platform none (openshift/installer
    /// `pkg/types/validation/installconfig.go` at 006d4573, line 108: `validate.ClusterName`;
    /// `pkg/validate/validate.go`, `ClusterName`: at most 63 - 9 = 54 characters, then a
    /// lowercase RFC 1123 subdomain, so `rv.dot` is a name; `OnPremClusterName`, which refuses
    /// the dot, is baremetal's, vSphere's and OpenStack's, not none's).
    fn cluster_name(&mut self, raw: &Text) -> Option<String> {
        const MAX: usize = 63 - 9;
        let s = &raw.value;
        if s.len() > MAX {
            self.p
                .error(
                    "config::name",
                    raw.referenced,
                    format!(
                        "cluster name `{s}` is {} characters: openshift-install takes at most {MAX}",
                        s.len()
                    ),
                    "too long",
                )
                .hint("the installer appends up to 9 characters to it in names limited to 63");
            return None;
        }
        if !s.is_empty() && s.split('.').all(is_host_label) {
            return Some(s.clone());
        }
        let problem = self.p.error(
            "config::name",
            raw.referenced,
            format!("cluster name `{s}` is not a lowercase RFC 1123 subdomain"),
            "not a subdomain",
        );
        let lower = s.to_ascii_lowercase();
        if !lower.is_empty() && lower.split('.').all(is_host_label) {
            problem.hint(format!(
                "openshift-install takes lowercase names only: `{lower}`"
            ));
        } else {
            problem.hint("use labels of lowercase letters, digits and hyphens, separated by dots, each starting and ending with a letter or digit (openshift-install's rule)");
        }
        None
    }

    pub(super) fn host_label(&mut self, raw: &Text, what: &str) -> Option<String> {
        let s = &raw.value;
        if is_host_label(s) {
            return Some(s.clone());
        }
        let problem = self.p.error(
            "config::name",
            raw.referenced,
            format!("{what} `{s}` is not a DNS label"),
            "not a DNS label",
        );
        if is_host_label(&s.to_ascii_lowercase()) {
            problem.hint(format!(
                "host names must be lowercase (Kubernetes node names are): `{}`",
                s.to_ascii_lowercase()
            ));
        } else {
            problem.hint("use 1 to 63 lowercase letters, digits and hyphens, not starting or ending with a hyphen");
        }
        None
    }
}
