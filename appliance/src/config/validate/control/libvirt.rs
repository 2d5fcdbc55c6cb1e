//! Validation of `control.libvirt`: the connection URI, the cluster network (a libvirt network
//! or a host bridge), the storage pool, firmware and domain type.

use serde_saphyr::Location;

use crate::config::control::{DomainType, Firmware, Libvirt, LibvirtNet};
use crate::config::raw::{RawLibvirt, Text};

use super::{ControlValidator, is_bridge};

impl ControlValidator<'_, '_> {
    pub(super) fn libvirt(&mut self, raw: &RawLibvirt, at: Location) -> Option<Libvirt> {
        let uri = match &raw.uri {
            None => Some("qemu:///system".to_owned()),
            Some(u) => {
                match url::Url::parse(&u.value) {
                    Ok(parsed)
                        if parsed.scheme().starts_with("qemu")
                            || parsed.scheme().starts_with("test") =>
                    {
                        Some(u.value.clone())
                    }
                    _ => {
                        self.p
                        .error(
                            "config::control",
                            u.referenced,
                            format!("`{}` is not a libvirt URI", u.value),
                            "not a libvirt URI",
                        )
                        .hint("e.g. qemu:///system, or qemu+ssh://root@kvm1/system for a remote host");
                        None
                    }
                }
            }
        };
        let attach = match (&raw.network, &raw.bridge) {
            (Some(n), None) => self
                .name(
                    n,
                    "libvirt network",
                    is_bridge,
                    "a libvirt network name, e.g. default",
                )
                .map(LibvirtNet::Network),
            (None, Some(b)) => self
                .name(
                    b,
                    "bridge",
                    is_bridge,
                    "the host bridge of the cluster network, e.g. br0",
                )
                .map(LibvirtNet::Bridge),
            (Some(n), Some(b)) => {
                self.p
                    .error(
                        "config::control",
                        b.referenced,
                        "both network and bridge are set",
                        "second attachment",
                    )
                    .also(n.referenced, "first attachment")
                    .hint("the NICs join a libvirt network or a host bridge: keep one");
                None
            }
            (None, None) => {
                self.p
                    .error(
                        "config::control",
                        at,
                        "libvirt needs the cluster network: `network` or `bridge`",
                        "no network",
                    )
                    .hint("network: <a libvirt network> or bridge: <a host bridge>, on the cluster subnet");
                None
            }
        };
        let pool = match &raw.pool {
            None => Some("default".to_owned()),
            Some(p) => self.name(
                p,
                "storage pool",
                is_bridge,
                "a libvirt storage pool, e.g. default",
            ),
        };
        let firmware = self.choice(
            raw.firmware.as_ref(),
            "firmware",
            &[("bios", Firmware::Bios), ("uefi", Firmware::Uefi)],
        );
        let domain_type = self.choice(
            raw.domain_type.as_ref(),
            "domain type",
            &[("kvm", DomainType::Kvm), ("qemu", DomainType::Qemu)],
        );
        Some(Libvirt {
            uri: uri?,
            attach: attach?,
            pool: pool?,
            firmware: firmware?,
            domain_type: domain_type?,
        })
    }

    /// One of `choices` (the first is the default).
    fn choice<T: Copy>(
        &mut self,
        raw: Option<&Text>,
        what: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let Some(raw) = raw else {
            return Some(choices[0].1);
        };
        if let Some((_, v)) = choices.iter().find(|(n, _)| *n == raw.value) {
            return Some(*v);
        }
        let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
        self.p
            .error(
                "config::control",
                raw.referenced,
                format!("unknown {what} `{}`", raw.value),
                "unknown",
            )
            .hint(format!("use {}", names.join(" or ")));
        None
    }
}
