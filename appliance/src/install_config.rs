//! `okd-appliance render --format install-config`: the `install-config.yaml` openshift-install
//! takes for this cluster, so that the ignition it makes matches what the appliance serves.
//!
//! From the config: `metadata.name` and `baseDomain` (`cluster`), the machine network
//! (`network.subnet`, and `network.ipv6.subnet` first after it for a dual-stack cluster), the
//! control plane's replicas (the masters), `platform: none` (user-provisioned: the appliance
//! is the load balancer and DNS), the compute pool `worker` with `replicas: 0` (workers are
//! user-provisioned: the installer makes no machines for them), and the rest from the
//! `install_config` section: the pod and service networks (the installer's defaults when not
//! given), proxy, trust bundle and release-image mirrors. A single node (one master, no
//! bootstrap) installs with bootstrap in place: `bootstrapInPlace.installationDisk` is its
//! install disk. The pull secret, SSH key and trust bundle are read from the files the config
//! names ([`Inputs::read`]; the pull secret through `crate::secrets`, owner-only); the pull
//! secret's JSON goes in unchanged. A single node is the config's rule
//! (`Config::single_node`), the one the boot path uses. The YAML is written by serde-saphyr's
//! serializer, and the CLI writes the file owner-only.
//!
//! Field names and defaults are openshift-install's (openshift/installer at 6bc5c21f,
//! `pkg/types/installconfig.go`, `pkg/types/defaults/installconfig.go`); the output is checked
//! against its InstallConfig CRD (`tests/contracts/install.openshift.io_installconfigs.yaml`)
//! by `appliance/tests/install_config.rs`.
//!
//! Architecture invariant: reads the config (not the plan: none of this is served) and, in
//! [`Inputs::read`] only, the three files; [`render`] is pure.

use std::path::Path;

use serde::Serialize;

use crate::config::{Config, InstallConfig, Role, TrustBundlePolicy};

pub mod single_node;

/// The file name openshift-install reads from its install directory.
pub const FILE_NAME: &str = "install-config.yaml";

/// The architecture openshift-install gives a machine pool that names none
/// (`pkg/types/defaults/machinepools.go`: `version.DefaultArch()`, amd64 for its x86_64 builds).
const ARCHITECTURE: &str = "amd64";

/// The contents of the files the `install_config` section names.
#[derive(Clone, PartialEq, Eq)]
pub struct Inputs {
    /// The pull secret's JSON, as in its file (surrounding white space trimmed).
    pub pull_secret: String,
    /// One public key a line.
    pub ssh_key: Option<String>,
    /// PEM certificates.
    pub trust_bundle: Option<String>,
}

impl std::fmt::Debug for Inputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inputs")
            .field("pull_secret", &"redacted")
            .field("ssh_key", &self.ssh_key)
            .field("trust_bundle", &self.trust_bundle)
            .finish()
    }
}

impl Inputs {
    /// Reads the files the config's `install_config` section names: the pull secret through
    /// `secrets.rs` (an owner-only file, as every secret), the SSH key and the trust bundle
    /// as they are (public). Each is checked: JSON with `auths`, public keys (never a private
    /// one), PEM certificates.
    pub fn read(config: &Config) -> Result<Inputs, String> {
        let ic = &config.install_config;
        let Some(pull_secret_file) = &ic.pull_secret_file else {
            return Err(
                "the config has no install_config section: name the pull secret there \
                 (install_config: { pull_secret_file: ./pull-secret.json })"
                    .to_owned(),
            );
        };
        let bytes = crate::secrets::read_file(pull_secret_file)
            .map_err(|e| format!("install_config.pull_secret_file: {e}"))?;
        let pull_secret = String::from_utf8(bytes)
            .map_err(|_| format!("{}: not UTF-8 text", pull_secret_file.display()))?;
        let ssh_key = ic
            .ssh_key_file
            .as_deref()
            .map(|p| read_public(p, "install_config.ssh_key_file"))
            .transpose()?;
        let trust_bundle = ic
            .additional_trust_bundle_file
            .as_deref()
            .map(|p| read_public(p, "install_config.additional_trust_bundle_file"))
            .transpose()?;
        let inputs = Inputs {
            pull_secret: pull_secret.trim().to_owned(),
            ssh_key,
            trust_bundle,
        };
        inputs.check().map_err(|e| {
            let file = match e.0 {
                Which::PullSecret => pull_secret_file,
                Which::SshKey => ic.ssh_key_file.as_ref().expect("checked only when read"),
                Which::TrustBundle => ic
                    .additional_trust_bundle_file
                    .as_ref()
                    .expect("checked only when read"),
            };
            format!("{}: {}", file.display(), e.1)
        })?;
        Ok(inputs)
    }

    /// What is wrong with the contents, and in which of them.
    fn check(&self) -> Result<(), (Which, String)> {
        check_pull_secret(&self.pull_secret).map_err(|e| (Which::PullSecret, e))?;
        if let Some(k) = &self.ssh_key {
            check_ssh_key(k).map_err(|e| (Which::SshKey, e))?;
        }
        if let Some(b) = &self.trust_bundle {
            crate::openshift_install::pem_certificates(b.as_bytes())
                .map_err(|e| (Which::TrustBundle, format!("not a CA bundle: {e}")))?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
enum Which {
    PullSecret,
    SshKey,
    TrustBundle,
}

/// A public file (an SSH public key, CA certificates), at most 1 MiB, trimmed.
fn read_public(path: &Path, key: &str) -> Result<String, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| format!("{key}: {}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(1 << 20)
        .read_to_string(&mut text)
        .map_err(|e| format!("{key}: {}: {e}", path.display()))?;
    Ok(text.trim().to_owned())
}

/// A pull secret as openshift-install accepts one (`ImagePullSecret` in `pkg/validate/validate.go`):
/// JSON with a non-empty `auths` object, each registry with an `auth` or a `credsStore`. The
/// messages never quote the secret.
fn check_pull_secret(text: &str) -> Result<(), String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "the pull secret is not JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    let Some(auths) = value.get("auths").and_then(serde_json::Value::as_object) else {
        return Err("the pull secret has no `auths` object (expected {\"auths\": {...}})".into());
    };
    if auths.is_empty() {
        return Err("the pull secret's `auths` is empty".into());
    }
    for (registry, auth) in auths {
        if auth.get("auth").is_none() && auth.get("credsStore").is_none() {
            return Err(format!(
                "the pull secret's entry for {registry} has neither `auth` nor `credsStore`"
            ));
        }
    }
    Ok(())
}

/// One OpenSSH public key a line (`type base64 [comment]`), each parsed as openshift-install
/// parses it: `ValidateInstallConfig` splits `sshKey` at newlines and gives every non-empty
/// line to `validate.SSHPublicKey`, x/crypto/ssh's `ParseAuthorizedKey` (openshift/installer
/// `pkg/types/validation/installconfig.go` at 006d4573, lines 85-96; `pkg/validate/validate.go`,
/// `SSHPublicKey`), so a comment line or a blob that is no key (`ssh-ed25519 AAAA`) is refused
/// as the installer refuses it ("ssh: no key found"). A private key is refused too, so it can't
/// end up in a file that is copied around.
fn check_ssh_key(text: &str) -> Result<(), String> {
    if text.contains("PRIVATE KEY") {
        return Err("this is a private key: name the public one (the .pub file)".into());
    }
    let mut keys = 0;
    for (n, line) in text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())) {
        if line.is_empty() {
            continue;
        }
        if line.starts_with('#') {
            return Err(format!(
                "line {n} is a comment: openshift-install takes every line of sshKey as a key (\"ssh: no key found\"); remove it"
            ));
        }
        if let Err(e) = ssh_key::PublicKey::from_openssh(line) {
            return Err(format!(
                "line {n} is not an SSH public key openshift-install can parse ({e}; it says \"ssh: no key found\"): expected `ssh-ed25519 AAAA... comment`, as ssh-keygen writes the .pub file"
            ));
        }
        keys += 1;
    }
    if keys == 0 {
        return Err("it holds no SSH public key".into());
    }
    Ok(())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Document<'a> {
    api_version: &'static str,
    base_domain: &'a str,
    metadata: Metadata<'a>,
    compute: [MachinePool; 1],
    control_plane: MachinePool,
    networking: Networking,
    platform: Platform,
    #[serde(skip_serializing_if = "Option::is_none")]
    bootstrap_in_place: Option<BootstrapInPlace<'a>>,
    pull_secret: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ssh_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    proxy: Option<ProxyDoc<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    additional_trust_bundle: Option<serde_saphyr::LitStr<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    additional_trust_bundle_policy: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    image_digest_sources: Vec<DigestSource<'a>>,
}

#[derive(Serialize)]
struct Metadata<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct MachinePool {
    name: &'static str,
    architecture: &'static str,
    hyperthreading: &'static str,
    replicas: usize,
    platform: Empty,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Networking {
    network_type: &'static str,
    machine_network: Vec<Cidr>,
    cluster_network: Vec<ClusterNetworkDoc>,
    service_network: Vec<String>,
}

#[derive(Serialize)]
struct Cidr {
    cidr: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterNetworkDoc {
    cidr: String,
    host_prefix: u8,
}

#[derive(Serialize)]
struct Platform {
    none: Empty,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BootstrapInPlace<'a> {
    installation_disk: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ProxyDoc<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    http_proxy: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    https_proxy: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    no_proxy: Option<String>,
}

#[derive(Serialize)]
struct DigestSource<'a> {
    source: &'a str,
    mirrors: &'a [String],
}

/// The single node's install disk when the config describes a single-node cluster (its only
/// node a master, which bootstraps itself: openshift-install's bootstrap-in-place).
fn single_node_disk(config: &Config) -> Option<&str> {
    config.single_node().map(|master| {
        master
            .install_dev
            .as_deref()
            .unwrap_or(&config.install.install_dev)
    })
}

/// The install-config.yaml text for `config` with the files' contents `inputs`.
pub fn render(config: &Config, inputs: &Inputs) -> Result<String, String> {
    let ic: &InstallConfig = &config.install_config;
    let mut machine_network = vec![Cidr {
        cidr: config.network.v4.subnet.to_string(),
    }];
    if let Some(v6) = &config.network.v6 {
        machine_network.push(Cidr {
            cidr: v6.subnet.to_string(),
        });
    }
    let pool = |name, replicas| MachinePool {
        name,
        architecture: ARCHITECTURE,
        hyperthreading: "Enabled",
        replicas,
        platform: Empty {},
    };
    let doc = Document {
        api_version: "v1",
        base_domain: &config.cluster.base_domain,
        metadata: Metadata {
            name: &config.cluster.name,
        },
        compute: [pool("worker", 0)],
        control_plane: pool("master", config.nodes_with_role(Role::Master).count()),
        networking: Networking {
            network_type: "OVNKubernetes",
            machine_network,
            cluster_network: ic
                .cluster_network
                .iter()
                .map(|c| ClusterNetworkDoc {
                    cidr: c.cidr.to_string(),
                    host_prefix: c.host_prefix,
                })
                .collect(),
            service_network: ic.service_network.iter().map(ToString::to_string).collect(),
        },
        platform: Platform { none: Empty {} },
        bootstrap_in_place: single_node_disk(config)
            .map(|installation_disk| BootstrapInPlace { installation_disk }),
        pull_secret: &inputs.pull_secret,
        ssh_key: inputs.ssh_key.as_deref(),
        proxy: ic.proxy.as_ref().map(|p| ProxyDoc {
            http_proxy: p.http_proxy.as_deref(),
            https_proxy: p.https_proxy.as_deref(),
            no_proxy: (!p.no_proxy.is_empty()).then(|| p.no_proxy.join(",")),
        }),
        additional_trust_bundle: inputs.trust_bundle.as_deref().map(serde_saphyr::LitStr),
        additional_trust_bundle_policy: ic.additional_trust_bundle_policy.map(|p| match p {
            TrustBundlePolicy::ProxyOnly => "Proxyonly",
            TrustBundlePolicy::Always => "Always",
        }),
        image_digest_sources: ic
            .image_digest_sources
            .iter()
            .map(|s| DigestSource {
                source: &s.source,
                mirrors: &s.mirrors,
            })
            .collect(),
    };
    let options = serde_saphyr::ser_options! {
        // Long values (the pull secret) stay on one line as plain or quoted scalars: a folded
        // block would be read back with its line breaks as spaces by some readers.
        prefer_block_scalars: false,
        // Numbers and booleans in strings are quoted for every YAML reader (openshift-install's
        // is go-yaml, YAML 1.1 in part).
        yaml_12: false,
    };
    let body = serde_saphyr::to_string_with_options(&doc, options)
        .map_err(|e| format!("can't write the install-config: {e}"))?;
    Ok(format!(
        "# install-config.yaml for openshift-install, written by `okd-appliance render --format\n\
         # install-config` from the cluster config. openshift-install consumes it (its `create`\n\
         # commands delete it): keep a copy.\n{body}"
    ))
}
