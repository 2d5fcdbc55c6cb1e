//! Validation of `control.proxmox`: the Proxmox VE API's address, node, API token, TLS trust,
//! storages, bridge, VLAN and pool, each name as Proxmox's own formats accept it.

use crate::config::control::Proxmox;
use crate::config::raw::{RawProxmox, Text};

use super::{ControlValidator, is_bridge};

const DEFAULT_ISO_STORAGE: &str = "local";

impl ControlValidator<'_, '_> {
    pub(super) fn proxmox(&mut self, raw: &RawProxmox) -> Option<Proxmox> {
        let url = self.https_url(&raw.url);
        let node = self.name(
            &raw.node,
            "Proxmox node name",
            is_pve_node,
            "the node's host name as Proxmox shows it, e.g. pve1",
        );
        let token_id = self.token_id(&raw.token_id);
        let token_secret = self.secret(
            raw.token_secret_file.as_ref(),
            raw.token_secret_env.as_ref(),
            raw.token_id.referenced,
            "token_secret",
        );
        let trust = self.trust(
            raw.ca_file.as_ref(),
            raw.fingerprint.as_ref(),
            raw.url.referenced,
        );
        let storage = self.name(
            &raw.storage,
            "storage",
            is_pve_storage_id,
            "a Proxmox storage ID, e.g. local-lvm",
        );
        let iso_storage = match &raw.iso_storage {
            None => Some(DEFAULT_ISO_STORAGE.to_owned()),
            Some(s) => self.name(
                s,
                "ISO storage",
                is_pve_storage_id,
                "a Proxmox storage ID with content type iso, e.g. local",
            ),
        };
        let bridge = self.name(
            &raw.bridge,
            "bridge",
            is_bridge,
            "the bridge of the cluster network, e.g. vmbr1",
        );
        let vlan = match &raw.vlan {
            None => Some(None),
            Some(v) if (1..=4094).contains(&v.value) => u16::try_from(v.value).ok().map(Some),
            Some(v) => {
                self.p.error(
                    "config::control",
                    v.referenced,
                    format!("VLAN tag {} is out of range (1 to 4094)", v.value),
                    "out of range",
                );
                None
            }
        };
        let pool = match &raw.pool {
            None => Some(None),
            Some(s) => self
                .name(
                    s,
                    "resource pool",
                    is_pve_pool_id,
                    "a Proxmox pool ID: letters, digits, `.`, `-`, `_`, up to three levels as `team/okd`",
                )
                .map(Some),
        };
        Some(Proxmox {
            url: url?,
            node: node?,
            token_id: token_id?,
            token_secret: token_secret?,
            trust: trust?,
            storage: storage?,
            iso_storage: iso_storage?,
            bridge: bridge?,
            vlan: vlan?,
            pool: pool?,
        })
    }

    /// `https://host[:port]` with nothing after it; the API path is the client's business.
    fn https_url(&mut self, raw: &Text) -> Option<String> {
        let parsed = match url::Url::parse(&raw.value) {
            Ok(u) => u,
            Err(e) => {
                self.p
                    .error(
                        "config::control",
                        raw.referenced,
                        format!("`{}` is not a URL: {e}", raw.value),
                        "not a URL",
                    )
                    .hint("write the API's address, e.g. https://pve1.lab.example.com:8006");
                return None;
            }
        };
        if parsed.scheme() != "https" {
            self.p
                .error(
                    "config::control",
                    raw.referenced,
                    "the provider URL must use https",
                    "not https",
                )
                .hint("the API token would cross the network in clear text; Proxmox listens with TLS on port 8006");
            return None;
        }
        let Some(host) = parsed.host_str().filter(|h| !h.is_empty()) else {
            self.p.error(
                "config::control",
                raw.referenced,
                "the provider URL has no host",
                "no host",
            );
            return None;
        };
        if !matches!(parsed.path(), "" | "/")
            || parsed.query().is_some()
            || parsed.fragment().is_some()
            || !parsed.username().is_empty()
            || parsed.password().is_some()
        {
            self.p
                .error(
                    "config::control",
                    raw.referenced,
                    "the provider URL must be only scheme, host and port",
                    "has more than that",
                )
                .hint("e.g. https://pve1.lab.example.com:8006 (the API path /api2/json is added; credentials go in token_secret_file)");
            return None;
        }
        Some(match parsed.port() {
            Some(port) => format!("https://{host}:{port}"),
            None => format!("https://{host}"),
        })
    }

    /// `USER@REALM!TOKENID`. The value is never repeated in the message: an operator who
    /// pasted `...=SECRET` here would otherwise see the secret in every log of the error.
    fn token_id(&mut self, raw: &Text) -> Option<String> {
        if is_token_id(&raw.value) {
            return Some(raw.value.clone());
        }
        let problem = self.p.error(
            "config::control",
            raw.referenced,
            "token_id is not of the form USER@REALM!TOKENID",
            "not a token ID",
        );
        if raw.value.contains('=') {
            problem.hint("the part after `=` is the secret: put it in the file named by token_secret_file (mode 0600) and keep only USER@REALM!TOKENID here");
        } else {
            problem.hint("e.g. okd@pve!appliance, as `pveum user token list okd@pve` shows it");
        }
        None
    }
}

/// Proxmox's `pve-node` format: a host name label, upper case allowed.
fn is_pve_node(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Proxmox's `pve-storage-id` format.
fn is_pve_storage_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_alphabetic()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Proxmox's `pve-poolid` format (pve-access-control `src/PVE/AccessControl.pm`
/// `verify_poolname` at 5ccd07d): `[A-Za-z0-9.-_]+` per level, up to three levels joined by
/// `/` (nesting since libpve-access-control 8.0.7, PVE 8.1: e7224f6; a nested ID names no
/// pool on older releases, and Proxmox says so at the create). No length limit.
fn is_pve_pool_id(s: &str) -> bool {
    let levels: Vec<&str> = s.split('/').collect();
    levels.len() <= 3
        && levels.iter().all(|level| {
            !level.is_empty()
                && level
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
        })
}

/// `USER@REALM!TOKENID` as Proxmox spells API token IDs.
fn is_token_id(s: &str) -> bool {
    let Some((userid, token)) = s.split_once('!') else {
        return false;
    };
    let Some((user, realm)) = userid.rsplit_once('@') else {
        return false;
    };
    let ident = |t: &str| {
        t.len() >= 2
            && t.starts_with(|c: char| c.is_ascii_alphabetic())
            && t.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    };
    !user.is_empty()
        && user.len() <= 60
        && !user.contains(|c: char| c.is_whitespace() || matches!(c, ':' | '/' | '!' | '='))
        && ident(realm)
        && ident(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_ids_as_proxmox_takes_them() {
        for (id, ok) in [
            ("okd", true),
            ("okd.prod", true),
            ("team/okd", true),
            ("a/b/c", true),
            ("a/b/c/d", false),
            ("a//b", false),
            ("/okd", false),
            ("okd/", false),
            ("ok d", false),
            ("", false),
        ] {
            assert_eq!(is_pve_pool_id(id), ok, "{id}");
        }
    }

    #[test]
    fn token_ids_follow_proxmox_spelling() {
        for good in ["okd@pve!appliance", "root@pam!ci-1", "a.b@ldap.corp!t_1"] {
            assert!(is_token_id(good), "{good}");
        }
        for bad in [
            "okd@pve",
            "okd!appliance",
            "@pve!x1",
            "okd@pve!appliance=3f0c-secret",
            "okd@p!x1",
            "okd@pve!1x",
        ] {
            assert!(!is_token_id(bad), "{bad}");
        }
    }
}
