//! openshift-install's files, read back: the facts `check` compares with the config, taken from
//! the files `openshift-install create ignition-configs` writes (all references are to
//! openshift/installer at commit 6bc5c21f5f6def628767042fbe9cce030fb5e9c3):
//!
//! - master.ign and worker.ign are *pointer* ignitions (`pkg/asset/ignition/machine/node.go`,
//!   `pointerIgnitionConfig`): Ignition 3.2.0 with one merge source,
//!   `https://api-int.<cluster domain>:22623/config/<role>` on platform none, and one CA, the
//!   root CA as a `data:` URL (`dataurl.EncodeBytes`: `data:text/plain;charset=utf-8;base64,...`).
//! - bootstrap.ign carries the cluster's manifests under `/opt/openshift/manifests/`
//!   (`pkg/asset/ignition/bootstrap/common.go`, `addParentFiles`, each file a `data:` URL),
//!   among them `cluster-dns-02-config.yml`, the DNS config whose `spec.baseDomain` is the
//!   cluster domain itself (`pkg/asset/manifests/dns.go`). That one is read: it names the
//!   domain exactly, on every platform, and has since the first 4.x releases.
//! - `auth/kubeconfig` points at `https://api.<cluster domain>:6443`
//!   (`pkg/asset/kubeconfig/admin.go`, `getExtAPIServerURL`).
//! - `.openshift_install_state.json` maps each asset's Go type name to the asset as JSON
//!   (`pkg/asset/store/store.go`); `*installconfig.InstallConfig` holds, under `config`, the
//!   install config the ignition was made from (`pkg/asset/installconfig/installconfigbase.go`,
//!   `AssetBase`).
//!
//! Architecture invariant: a leaf (it imports nothing of the crate) and pure: bytes in, facts
//! out; the time a certificate is checked against is an argument. Nothing of a secret is kept:
//! the parsers only take the fields named here (the state file's pull secret and keys are
//! skipped, not copied).

use std::time::{Duration, SystemTime};

use serde::Deserialize;

/// Where bootstrap.ign keeps the DNS config that names the cluster domain.
pub const DNS_MANIFEST: &str = "/opt/openshift/manifests/cluster-dns-02-config.yml";
/// Where bootstrap.ign keeps the cluster's root CA, which signs the machine config server's
/// certificate (openshift/installer `pkg/asset/ignition/bootstrap/common.go` writes every TLS
/// asset under /opt/openshift/tls; `pkg/asset/tls/root.go`: `RootCA`, `tls/root-ca.crt`).
pub const ROOT_CA: &str = "/opt/openshift/tls/root-ca.crt";
/// The state file openshift-install keeps beside its output.
pub const STATE_FILE: &str = ".openshift_install_state.json";
/// The admin kubeconfig, relative to the install directory.
pub const KUBECONFIG: &str = "auth/kubeconfig";
/// The state key of the install config asset (Go's `reflect.TypeOf(a).String()`).
pub const INSTALL_CONFIG_ASSET: &str = "*installconfig.InstallConfig";

/// A certificate of a PEM bundle, with what `check` tells about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    pub subject: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// Its basic constraints say it is a CA (`cA: TRUE`).
    pub is_ca: bool,
    /// The SHA-256 of its DER, in hex: the same certificate is the same fingerprint.
    pub sha256: String,
}

impl Certificate {
    /// Why the certificate can't be trusted at `now`, if it can't.
    pub fn invalid_at(&self, now: SystemTime) -> Option<String> {
        if now < self.not_before {
            Some(format!(
                "{} is not valid before {}",
                self.subject,
                humantime::format_rfc3339_seconds(self.not_before)
            ))
        } else if now > self.not_after {
            Some(format!(
                "{} expired at {}",
                self.subject,
                humantime::format_rfc3339_seconds(self.not_after)
            ))
        } else {
            None
        }
    }
}

/// Every certificate of a PEM bundle; an error for anything else in it (a key, a block that
/// does not parse) or for a bundle without a certificate.
pub fn pem_certificates(pem: &[u8]) -> Result<Vec<Certificate>, String> {
    let mut out = Vec::new();
    for (i, block) in x509_parser::pem::Pem::iter_from_buffer(pem).enumerate() {
        let block = block.map_err(|e| format!("PEM block {} does not parse: {e}", i + 1))?;
        if block.label != "CERTIFICATE" {
            return Err(format!(
                "PEM block {} is a {}, not a CERTIFICATE",
                i + 1,
                block.label
            ));
        }
        let (_, cert) = x509_parser::parse_x509_certificate(&block.contents)
            .map_err(|e| format!("certificate {} does not parse: {e}", i + 1))?;
        let time = |t: i64| {
            if t >= 0 {
                SystemTime::UNIX_EPOCH + Duration::from_secs(t.unsigned_abs())
            } else {
                SystemTime::UNIX_EPOCH - Duration::from_secs(t.unsigned_abs())
            }
        };
        let is_ca = matches!(cert.basic_constraints(), Ok(Some(bc)) if bc.value.ca);
        let digest = ring::digest::digest(&ring::digest::SHA256, &block.contents);
        out.push(Certificate {
            subject: cert.subject().to_string(),
            not_before: time(cert.validity().not_before.timestamp()),
            not_after: time(cert.validity().not_after.timestamp()),
            is_ca,
            sha256: data_encoding::HEXLOWER.encode(digest.as_ref()),
        });
    }
    if out.is_empty() {
        return Err("it holds no PEM certificate".to_owned());
    }
    Ok(out)
}

/// The bytes of a `data:` URL (RFC 2397): base64 after `;base64,`, percent-encoded otherwise.
pub fn decode_data_url(url: &str) -> Result<Vec<u8>, String> {
    let rest = url
        .strip_prefix("data:")
        .ok_or_else(|| "it is not a data: URL".to_owned())?;
    let (meta, data) = rest
        .split_once(',')
        .ok_or_else(|| "the data: URL has no comma".to_owned())?;
    if meta.ends_with(";base64") {
        let data = data.trim_end_matches('\n');
        data_encoding::BASE64
            .decode(data.as_bytes())
            .or_else(|_| data_encoding::BASE64_NOPAD.decode(data.as_bytes()))
            .map_err(|e| format!("the data: URL's base64 does not decode: {e}"))
    } else {
        Ok(percent_encoding::percent_decode_str(data).collect())
    }
}

/// What a pointer ignition points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    /// `ignition.config.merge[0].source`.
    pub merge_source: String,
    /// Every `ignition.security.tls.certificateAuthorities[].source` (openshift-install writes
    /// one; Ignition trusts each).
    pub ca_sources: Vec<String>,
}

#[derive(Deserialize)]
struct IgnitionDoc {
    #[serde(default)]
    ignition: Option<IgnitionSection>,
    #[serde(default)]
    storage: Option<Storage>,
}

#[derive(Deserialize)]
struct IgnitionSection {
    #[serde(default)]
    config: Option<IgnitionConfig>,
    #[serde(default)]
    security: Option<Security>,
}

#[derive(Deserialize)]
struct IgnitionConfig {
    #[serde(default)]
    merge: Vec<Resource>,
}

#[derive(Deserialize)]
struct Security {
    #[serde(default)]
    tls: Option<Tls>,
}

#[derive(Deserialize)]
struct Tls {
    #[serde(default, rename = "certificateAuthorities")]
    certificate_authorities: Vec<Resource>,
}

#[derive(Deserialize)]
struct Resource {
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    compression: Option<String>,
}

#[derive(Deserialize)]
struct Storage {
    #[serde(default)]
    files: Vec<FileEntry>,
}

#[derive(Deserialize)]
struct FileEntry {
    path: String,
    #[serde(default)]
    contents: Option<Resource>,
}

fn ignition(bytes: &[u8]) -> Result<IgnitionDoc, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("it is not an Ignition config (JSON): {e}"))
}

/// The merge source and CA of a pointer ignition; `Ok(None)` for an Ignition config that
/// merges nothing (not one openshift-install wrote), an error for one that is not JSON.
pub fn pointer_ignition(bytes: &[u8]) -> Result<Option<Pointer>, String> {
    let doc = ignition(bytes)?;
    let Some(section) = doc.ignition else {
        return Ok(None);
    };
    let Some(merge_source) = section
        .config
        .and_then(|c| c.merge.into_iter().next())
        .and_then(|r| r.source)
    else {
        return Ok(None);
    };
    let ca_sources = section
        .security
        .and_then(|s| s.tls)
        .into_iter()
        .flat_map(|t| t.certificate_authorities)
        .filter_map(|r| r.source)
        .collect();
    Ok(Some(Pointer {
        merge_source,
        ca_sources,
    }))
}

#[derive(Deserialize)]
struct DnsManifest {
    #[serde(default)]
    spec: Option<DnsSpec>,
}

#[derive(Deserialize)]
struct DnsSpec {
    #[serde(default, rename = "baseDomain")]
    base_domain: Option<String>,
}

/// The cluster domain bootstrap.ign was made for, from its DNS config ([`DNS_MANIFEST`]);
/// `Ok(None)` when it has no such file (an Ignition config openshift-install did not write).
pub fn bootstrap_cluster_domain(bytes: &[u8]) -> Result<Option<String>, String> {
    let Some(text) = storage_file(bytes, DNS_MANIFEST)? else {
        return Ok(None);
    };
    let text = String::from_utf8(text).map_err(|_| format!("its {DNS_MANIFEST} is not text"))?;
    let manifest: DnsManifest = serde_saphyr::from_str(&text)
        .map_err(|e| format!("its {DNS_MANIFEST} is not YAML: {e}"))?;
    manifest
        .spec
        .and_then(|s| s.base_domain)
        .map(|d| Some(d.trim_end_matches('.').to_ascii_lowercase()))
        .ok_or_else(|| format!("its {DNS_MANIFEST} has no spec.baseDomain"))
}

/// The root CA bootstrap.ign carries ([`ROOT_CA`]), as PEM; `Ok(None)` when it has none.
pub fn bootstrap_root_ca(bytes: &[u8]) -> Result<Option<Vec<Certificate>>, String> {
    match storage_file(bytes, ROOT_CA)? {
        None => Ok(None),
        Some(pem) => pem_certificates(&pem)
            .map(Some)
            .map_err(|e| format!("its {ROOT_CA}: {e}")),
    }
}

/// The contents of the file at `path` in an Ignition config's storage, from its inline data
/// URL; `Ok(None)` when the config has no such file.
fn storage_file(bytes: &[u8], path: &str) -> Result<Option<Vec<u8>>, String> {
    let doc = ignition(bytes)?;
    let Some(file) = doc
        .storage
        .into_iter()
        .flat_map(|s| s.files)
        .find(|f| f.path == path)
    else {
        return Ok(None);
    };
    let contents = file
        .contents
        .ok_or_else(|| format!("its {path} has no contents"))?;
    if let Some(c) = contents.compression.as_deref().filter(|c| !c.is_empty()) {
        return Err(format!("its {path} is compressed ({c})"));
    }
    let source = contents
        .source
        .ok_or_else(|| format!("its {path} has no contents"))?;
    decode_data_url(&source)
        .map(Some)
        .map_err(|e| format!("its {path}: {e}"))
}

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(default)]
    clusters: Vec<NamedCluster>,
}

#[derive(Deserialize)]
struct NamedCluster {
    #[serde(default)]
    cluster: Option<KubeCluster>,
}

#[derive(Deserialize)]
struct KubeCluster {
    #[serde(default)]
    server: Option<String>,
}

/// The API server URLs a kubeconfig names, in order.
pub fn kubeconfig_servers(bytes: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "it is not text".to_owned())?;
    let k: Kubeconfig =
        serde_saphyr::from_str(text).map_err(|e| format!("it is not a kubeconfig: {e}"))?;
    Ok(k.clusters
        .into_iter()
        .filter_map(|c| c.cluster.and_then(|c| c.server))
        .collect())
}

/// What the state file says of the install config the ignition was made from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StateInstallConfig {
    pub name: Option<String>,
    pub base_domain: Option<String>,
    pub machine_networks: Vec<String>,
    pub control_plane_replicas: Option<i64>,
}

#[derive(Deserialize)]
struct State {
    #[serde(default, rename = "*installconfig.InstallConfig")]
    install_config: Option<AssetBase>,
}

#[derive(Deserialize)]
struct AssetBase {
    #[serde(default)]
    config: Option<InstallConfigJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InstallConfigJson {
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    base_domain: Option<String>,
    #[serde(default)]
    networking: Option<Networking>,
    #[serde(default)]
    control_plane: Option<MachinePool>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Networking {
    #[serde(default)]
    machine_network: Vec<MachineNetwork>,
}

#[derive(Deserialize)]
struct MachineNetwork {
    cidr: String,
}

#[derive(Deserialize)]
struct MachinePool {
    #[serde(default)]
    replicas: Option<i64>,
}

/// The install config kept in `.openshift_install_state.json`; `Ok(None)` when the state has
/// none (a state file of a run that never got that far).
pub fn state_install_config(bytes: &[u8]) -> Result<Option<StateInstallConfig>, String> {
    let state: State = serde_json::from_slice(bytes)
        .map_err(|e| format!("it is not openshift-install's state (JSON): {e}"))?;
    let Some(config) = state.install_config.and_then(|a| a.config) else {
        return Ok(None);
    };
    Ok(Some(StateInstallConfig {
        name: config.metadata.and_then(|m| m.name),
        base_domain: config.base_domain,
        machine_networks: config
            .networking
            .map(|n| n.machine_network.into_iter().map(|m| m.cidr).collect())
            .unwrap_or_default(),
        control_plane_replicas: config.control_plane.and_then(|c| c.replicas),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_decode_base64_and_percent_forms() {
        assert_eq!(
            decode_data_url("data:text/plain;charset=utf-8;base64,aGVsbG8=").unwrap(),
            b"hello"
        );
        assert_eq!(decode_data_url("data:,a%20b").unwrap(), b"a b");
        assert!(decode_data_url("https://example.com").is_err());
        assert!(decode_data_url("data:;base64,***").is_err());
    }

    #[test]
    fn an_ignition_without_merge_is_not_a_pointer() {
        assert_eq!(pointer_ignition(b"{}").unwrap(), None);
        assert_eq!(
            pointer_ignition(br#"{"ignition":{"version":"3.2.0"}}"#).unwrap(),
            None
        );
        assert!(pointer_ignition(b"not json").is_err());
    }

    #[test]
    fn the_state_files_install_config_is_found_among_the_assets() {
        let state = br#"{
            "*bootstrap.Bootstrap": {"File": {"Data": "eyJ9"}},
            "*installconfig.InstallConfig": {
                "config": {
                    "metadata": {"name": "okd"},
                    "baseDomain": "lab.example.com",
                    "pullSecret": "{\"auths\":{}}",
                    "networking": {"machineNetwork": [{"cidr": "10.0.0.0/24"}]},
                    "controlPlane": {"name": "master", "replicas": 3}
                },
                "file": {"Filename": "install-config.yaml", "Data": ""}
            }
        }"#;
        let ic = state_install_config(state).unwrap().unwrap();
        assert_eq!(ic.name.as_deref(), Some("okd"));
        assert_eq!(ic.base_domain.as_deref(), Some("lab.example.com"));
        assert_eq!(ic.machine_networks, ["10.0.0.0/24"]);
        assert_eq!(ic.control_plane_replicas, Some(3));
        assert_eq!(state_install_config(b"{}").unwrap(), None);
    }

    #[test]
    fn a_pem_bundle_must_hold_certificates_only() {
        assert!(pem_certificates(b"").is_err());
        let key = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert!(
            pem_certificates(key)
                .unwrap_err()
                .contains("not a CERTIFICATE")
        );
    }
}
