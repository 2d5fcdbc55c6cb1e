//! Validation of each node's `machine.bmc` for the Redfish provider: its own settings over the
//! `control.redfish` defaults (URL, user name, password, TLS trust).

use crate::config::control::{Bmc, BmcTrust};
use crate::config::raw::{RawBmc, RawNode, Text};

use super::ControlValidator;

/// The defaults every node's BMC starts from.
pub(super) struct Redfish<'a> {
    pub(super) defaults: Option<&'a RawBmc>,
}

impl ControlValidator<'_, '_> {
    /// The node's BMC: its own settings over the `control.redfish` defaults.
    pub(super) fn bmc(&mut self, node: &RawNode, rf: &Redfish<'_>) -> Option<Bmc> {
        let own = node.machine.as_ref().and_then(|m| m.value.bmc.as_ref());
        let empty = RawBmc::default();
        let defaults = rf.defaults.unwrap_or(&empty);
        let Some((own, at)) = own.map(|b| (&b.value, b.referenced)) else {
            self.p
                .error(
                    "config::control",
                    node.name.referenced,
                    format!("node {} has no BMC", node.name.value),
                    "no machine.bmc",
                )
                .hint("add `machine: { bmc: { url: https://<bmc address> } }` to the node");
            return None;
        };
        let Some(url_text) = &own.url else {
            self.p.error(
                "config::control",
                at,
                "the node's BMC has no url",
                "bmc without url",
            );
            return None;
        };
        let url = self.bmc_url(url_text);
        let username = match own.username.as_ref().or(defaults.username.as_ref()) {
            Some(u) if !u.value.trim().is_empty() && !u.value.contains(':') => {
                Some(u.value.clone())
            }
            Some(u) => {
                self.p.error(
                    "config::secret",
                    u.referenced,
                    "not a BMC user name",
                    "user name",
                );
                None
            }
            None => {
                self.p
                    .error(
                        "config::secret",
                        at,
                        "the node's BMC has no username",
                        "no username",
                    )
                    .hint("set `username:` here or in control.redfish");
                None
            }
        };
        let password = if own.password_file.is_some() || own.password_env.is_some() {
            self.secret(
                own.password_file.as_ref(),
                own.password_env.as_ref(),
                at,
                "password",
            )
        } else {
            self.secret(
                defaults.password_file.as_ref(),
                defaults.password_env.as_ref(),
                at,
                "password",
            )
        };
        let sets_trust = |b: &RawBmc| {
            b.ca_file.is_some()
                || b.fingerprint.is_some()
                || b.insecure.as_ref().is_some_and(|i| i.value)
        };
        let level = if sets_trust(own) { own } else { defaults };
        let trust = match level.insecure.as_ref().filter(|i| i.value) {
            Some(insecure) if level.ca_file.is_some() || level.fingerprint.is_some() => {
                self.p
                    .error(
                        "config::tls",
                        insecure.referenced,
                        "insecure: true beside a CA file or fingerprint",
                        "contradicts the other",
                    )
                    .hint("keep the CA file or fingerprint, and drop `insecure`");
                None
            }
            Some(insecure) => {
                // Said at every load (`check`, `serve`, `nodes`): a choice to revisit.
                self.p
                    .warning(
                        "config::tls",
                        insecure.referenced,
                        format!(
                            "the BMC of {} is used without checking its certificate: anyone on the path can pose as it and read its password",
                            node.name.value
                        ),
                        "insecure: true",
                    )
                    .hint("give its CA file or its certificate's fingerprint instead");
                Some(BmcTrust::Insecure)
            }
            None => self
                .trust(
                    level.ca_file.as_ref(),
                    level.fingerprint.as_ref(),
                    url_text.referenced,
                )
                .map(BmcTrust::Verify),
        };
        Some(Bmc {
            url: url?,
            username: username?,
            password: password?,
            trust: trust?,
        })
    }

    /// `https://host[:port]`, optionally with the path of one system.
    fn bmc_url(&mut self, raw: &Text) -> Option<String> {
        let parsed = match url::Url::parse(&raw.value) {
            Ok(u) if u.scheme() == "https" && u.host_str().is_some_and(|h| !h.is_empty()) => u,
            _ => {
                self.p
                    .error(
                        "config::control",
                        raw.referenced,
                        format!("`{}` is not an https URL", raw.value),
                        "not https",
                    )
                    .hint("e.g. https://10.1.0.5 (Redfish runs over TLS; BMC credentials never go in clear text)");
                return None;
            }
        };
        let path = parsed.path().trim_end_matches('/');
        if !(path.is_empty() || path.starts_with("/redfish/v1/Systems/"))
            || parsed.query().is_some()
            || !parsed.username().is_empty()
        {
            self.p
                .error(
                    "config::control",
                    raw.referenced,
                    "a BMC URL is the BMC's address, or the URL of one system",
                    "unexpected path",
                )
                .hint("e.g. https://10.1.0.5 or https://10.1.0.5/redfish/v1/Systems/1");
            return None;
        }
        Some(parsed.as_str().trim_end_matches('/').to_owned())
    }
}
