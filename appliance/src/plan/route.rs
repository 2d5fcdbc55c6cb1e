//! The boot server's URL grammar, written once: the URLs the plan hands out (kernel arguments,
//! iPXE scripts, ignition merge sources, ISO links) are formatted here, and the paths the boot
//! server answers are parsed here ([`Route::parse`]), so what is handed out and what is
//! answered can't drift apart. A test formats every kind and parses it back. The boot server's
//! request counters take their label from the same parse ([`Family`]).
//!
//! Architecture invariant: pure; no other module writes or matches one of these paths.

use crate::vocabulary::{MacAddr, RoleConfig};

const SCRIPTS: &str = "/boot/";
const SCRIPT_SUFFIX: &str = ".ipxe";
const ROLE_IGNITION: &str = "/ignition/roles/";
const IGNITION: &str = "/ignition/";
const IGNITION_SUFFIX: &str = ".ign";
const ISOS: &str = "/iso/";
const ISO_SUFFIX: &str = ".iso";
/// Where the artifacts are, for the fast way's check of a raw request target.
pub const ARTIFACTS: &str = "/artifacts/";

/// A request path of the boot server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    Healthz,
    Metrics,
    /// `/boot/<name>.ipxe`: a node's iPXE script (by its hyphenated MAC, or its name).
    Script(&'a str),
    /// `/ignition/roles/<file>`: a role's config, the merge source of its nodes' ignition.
    RoleIgnition(&'a str),
    /// `/ignition/<node>.ign`: a node's own ignition.
    Ignition(&'a str),
    /// `/iso/<node>.iso`: a node's live ISO.
    Iso(&'a str),
    /// `/artifacts/<rest>`: a CoreOS artifact.
    Artifact(&'a str),
    /// Under one of the prefixes above without its suffix: answered as not found (or, for
    /// ignition, refused on a standby like the rest of it). Every path under the role prefix
    /// is a role's name, so none is malformed.
    Malformed(Family),
    /// Anything else: an iPXE binary by its name, or nothing.
    Other(&'a str),
}

/// What a path's prefix says it is about, for the request counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Script,
    Ignition,
    Iso,
}

impl<'a> Route<'a> {
    pub fn parse(path: &'a str) -> Route<'a> {
        let within = |prefix: &str, suffix: &str, family: Family| {
            let rest = path.strip_prefix(prefix)?;
            Some(rest.strip_suffix(suffix).ok_or(family))
        };
        if path == "/healthz" {
            return Route::Healthz;
        }
        if path == "/metrics" {
            return Route::Metrics;
        }
        if let Some(rest) = path.strip_prefix(ARTIFACTS) {
            return Route::Artifact(rest);
        }
        if let Some(file) = path.strip_prefix(ROLE_IGNITION) {
            return Route::RoleIgnition(file);
        }
        let found = within(SCRIPTS, SCRIPT_SUFFIX, Family::Script)
            .map(|r| r.map(Route::Script))
            .or_else(|| {
                within(IGNITION, IGNITION_SUFFIX, Family::Ignition).map(|r| r.map(Route::Ignition))
            })
            .or_else(|| within(ISOS, ISO_SUFFIX, Family::Iso).map(|r| r.map(Route::Iso)));
        match found {
            Some(Ok(route)) => route,
            Some(Err(family)) => Route::Malformed(family),
            None => Route::Other(path),
        }
    }

    /// Whether the active host of a pair alone answers it (ignition and role configs).
    pub fn is_ignition(self) -> bool {
        matches!(
            self,
            Route::Ignition(_) | Route::RoleIgnition(_) | Route::Malformed(Family::Ignition)
        )
    }

    /// The request counters' label: a fixed set, never a node's name.
    pub fn label(self) -> &'static str {
        match self {
            Route::Script(_) | Route::Malformed(Family::Script) => "script",
            Route::RoleIgnition(_) => "role-ignition",
            Route::Ignition(_) | Route::Malformed(Family::Ignition) => "ignition",
            Route::Iso(_) | Route::Malformed(Family::Iso) => "iso",
            Route::Artifact(_) => "artifacts",
            Route::Metrics => "metrics",
            Route::Healthz => "healthz",
            Route::Other(p)
                if p.ends_with(".efi") || p.ends_with(".kpxe") || p.ends_with(".pxe") =>
            {
                "ipxe"
            }
            Route::Other(_) => "other",
        }
    }
}

/// A node's own ignition config.
pub fn ignition_url(base_url: &str, node: &str) -> String {
    format!("{base_url}{IGNITION}{node}{IGNITION_SUFFIX}")
}

/// A role's ignition config, which a node's own config merges.
pub fn role_ignition_url(base_url: &str, config: RoleConfig) -> String {
    format!("{base_url}{ROLE_IGNITION}{}", config.file())
}

/// A node's own live ISO.
pub fn iso_url(base_url: &str, node: &str) -> String {
    format!("{base_url}{ISOS}{node}{ISO_SUFFIX}")
}

/// A node's iPXE script, keyed by its MAC address.
pub fn script_url(base_url: &str, mac: MacAddr) -> String {
    script_url_of(base_url, &mac.hyphenated())
}

/// The script URL with `key` in the MAC's place (iPXE's `${netX/mac:hexhyp}` for a machine
/// the appliance does not know yet).
pub fn script_url_of(base_url: &str, key: &str) -> String {
    format!("{base_url}{SCRIPTS}{key}{SCRIPT_SUFFIX}")
}

/// An iPXE binary by the name DHCP hands out (UEFI HTTP boot).
pub fn ipxe_url(base_url: &str, name: &str) -> String {
    format!("{base_url}/{name}")
}

/// An artifact of `install.artifacts_dir`.
pub fn artifact_url(base_url: &str, name: &str) -> String {
    format!("{base_url}{ARTIFACTS}{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "http://10.0.0.1:8080";

    fn path(url: &str) -> &str {
        url.strip_prefix(BASE).unwrap()
    }

    #[test]
    fn every_url_handed_out_parses_back_to_its_route() {
        let mac: MacAddr = "52:54:00:00:00:02".parse().unwrap();
        assert_eq!(
            Route::parse(path(&script_url(BASE, mac))),
            Route::Script("52-54-00-00-00-02")
        );
        assert_eq!(
            Route::parse(path(&ignition_url(BASE, "master-0"))),
            Route::Ignition("master-0")
        );
        for config in RoleConfig::ALL {
            assert_eq!(
                Route::parse(path(&role_ignition_url(BASE, config))),
                Route::RoleIgnition(config.file())
            );
        }
        assert_eq!(
            Route::parse(path(&iso_url(BASE, "worker-0"))),
            Route::Iso("worker-0")
        );
        assert_eq!(
            Route::parse(path(&artifact_url(BASE, "rootfs.img"))),
            Route::Artifact("rootfs.img")
        );
        let url = ipxe_url(BASE, "snponly.efi");
        let ipxe = Route::parse(path(&url));
        assert_eq!((ipxe, ipxe.label()), (Route::Other("/snponly.efi"), "ipxe"));
    }

    #[test]
    fn a_path_is_counted_under_its_family_and_ignition_paths_are_the_active_host_s() {
        for (p, label, ignition) in [
            ("/boot/x", "script", false),
            ("/ignition/x", "ignition", true),
            ("/ignition/roles/", "role-ignition", true),
            ("/iso/x.img", "iso", false),
            ("/artifacts/", "artifacts", false),
            ("/snponly.efi", "ipxe", false),
            ("/undionly.kpxe", "ipxe", false),
            ("/", "other", false),
            ("/healthz", "healthz", false),
            ("/metrics", "metrics", false),
        ] {
            let route = Route::parse(p);
            assert_eq!(
                (route.label(), route.is_ignition()),
                (label, ignition),
                "{p}"
            );
        }
        assert_eq!(Route::parse("/boot/x"), Route::Malformed(Family::Script));
        assert_eq!(Route::parse("/ignition/roles/"), Route::RoleIgnition(""));
        assert_eq!(
            Route::parse("/ignition/roles/master.ign"),
            Route::RoleIgnition("master.ign")
        );
    }
}
