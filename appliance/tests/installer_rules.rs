//! `check` applies openshift-install's own install-config rules: a table of cases, each with the
//! installer's verdict and where the installer decides it (openshift/installer at 006d4573;
//! `pkg/validate/validate.go` as its validation calls it). A case the installer accepts must
//! load; one it refuses must be refused here, at `check` time, not when `openshift-install
//! create manifests` runs.

mod install_inputs;

use std::path::Path;

use okd_appliance::config::{self, InstallCheck, RenderStyle};
use okd_appliance::install_config::Inputs;

/// The installer's verdict on a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accepts,
    /// Refuses; our message says this.
    Refuses(&'static str),
}
use Verdict::{Accepts, Refuses};

fn config(name: &str, install_config: &str) -> String {
    format!(
        r#"version: 1
cluster: {{ name: {name}, base_domain: lab.example.com }}
network: {{ subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }}
nodes:
  - {{ name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }}
  - {{ name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.0.0.5 }}
install: {{ ignition_dir: ./i, artifacts_dir: ./a }}
install_config:
  pull_secret_file: ./pull-secret.json
{install_config}"#
    )
}

fn judged(yaml: &str, verdict: Verdict, case: &str) {
    let loaded = config::parse(yaml, "okd.yml", Path::new("/tmp"), InstallCheck::Skip);
    match (loaded, verdict) {
        (Ok(_), Accepts) => {}
        (Err(e), Refuses(said)) => {
            let text = e.render(RenderStyle::Plain);
            assert!(text.contains(said), "{case}: expected {said:?} in\n{text}");
        }
        (Ok(_), Refuses(said)) => panic!("{case}: the installer refuses it ({said}); loaded"),
        (Err(e), Accepts) => panic!(
            "{case}: the installer accepts it; refused:\n{}",
            e.render(RenderStyle::Plain)
        ),
    }
}

#[test]
fn cluster_names_as_the_installer_takes_them_on_platform_none() {
    // `ValidateInstallConfig` line 108: `validate.ClusterName` on platform none; `ClusterName`:
    // at most 63 - 9 = 54 characters, then a lowercase RFC 1123 subdomain.
    let fifty_four = "a".repeat(54);
    let fifty_five = "a".repeat(55);
    for (name, verdict) in [
        ("okd", Accepts),
        ("rv.dot", Accepts),
        ("1-cluster", Accepts),
        (fifty_four.as_str(), Accepts),
        (
            fifty_five.as_str(),
            Refuses("openshift-install takes at most 54"),
        ),
        ("bad-name-", Refuses("not a lowercase RFC 1123 subdomain")),
        ("a..b", Refuses("not a lowercase RFC 1123 subdomain")),
        ("Okd", Refuses("takes lowercase names only: `okd`")),
    ] {
        judged(&config(name, ""), verdict, name);
    }
}

#[test]
fn networks_as_the_installer_takes_them() {
    for (case, install_config, verdict) in [
        // `validateServiceNetwork` (installconfig.go lines 563-588), `ServiceSubnetCIDR`:
        // IPv4 /12 or longer, IPv6 /108 or longer.
        (
            "service /16",
            "  service_network: [172.30.0.0/16]\n",
            Accepts,
        ),
        (
            "service /12",
            "  service_network: [172.16.0.0/12]\n",
            Accepts,
        ),
        (
            "service /8",
            "  service_network: [172.0.0.0/8]\n",
            Refuses("an IPv4 service network must be /12 or longer"),
        ),
        (
            "service /11",
            "  service_network: [172.0.0.0/11]\n",
            Refuses("an IPv4 service network must be /12 or longer"),
        ),
        // `validateClusterNetwork` (lines 590-640): hostPrefix may not be shorter than the
        // network; `SetInstallConfigDefaults` gives 23 only to its own default network, so an
        // entry without it is 0 to the installer ("must not be larger size than CIDR").
        (
            "pod /14, default host prefix",
            "  cluster_network: [{ cidr: 10.128.0.0/14 }]\n",
            Accepts,
        ),
        (
            "pod /24, default host prefix",
            "  cluster_network: [{ cidr: 10.128.0.0/24 }]\n",
            Refuses("smaller than the /23 block each node takes by default"),
        ),
        (
            "pod /24, host prefix 26",
            "  cluster_network: [{ cidr: 10.128.0.0/24, host_prefix: 26 }]\n",
            Accepts,
        ),
        (
            "pod /14, host prefix 12",
            "  cluster_network: [{ cidr: 10.128.0.0/14, host_prefix: 12 }]\n",
            Refuses("does not fit pod network"),
        ),
        // `validateNetworkingIPVersion` line 453: one service network on a single stack.
        (
            "two IPv4 service networks",
            "  service_network: [172.30.0.0/16, 172.31.0.0/16]\n",
            Refuses("more than one network of a family"),
        ),
        // `validateServiceNetwork` lines 577-579: not over the machine network.
        (
            "service over the machine network",
            "  service_network: [10.0.0.0/16]\n",
            Refuses("openshift-install refuses overlapping networks"),
        ),
    ] {
        judged(&config("okd", install_config), verdict, case);
    }
}

#[test]
fn ipv6_service_networks_as_the_installer_takes_them() {
    let dual = |service: &str| {
        config("okd", &format!("  service_network: [172.30.0.0/16, {service}]\n")).replace(
            "appliance_ip: 10.0.0.1 }",
            "appliance_ip: 10.0.0.1, ipv6: { subnet: \"fd00:10::/64\", appliance_ip: \"fd00:10::1\" } }",
        )
    };
    for (service, verdict) in [
        ("\"fd02::/112\"", Accepts),
        ("\"fd02::/108\"", Accepts),
        (
            "\"fd02::/107\"",
            Refuses("an IPv6 service network must be /108 or longer"),
        ),
        (
            "\"fd02::/64\"",
            Refuses("an IPv6 service network must be /108 or longer"),
        ),
    ] {
        judged(&dual(service), verdict, service);
    }
}

/// `ValidateInstallConfig` lines 85-96: each non-empty line of sshKey through
/// `validate.SSHPublicKey` (x/crypto/ssh `ParseAuthorizedKey`).
#[test]
fn ssh_keys_as_the_installer_parses_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pull-secret.json"),
        install_inputs::PULL_SECRET,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        dir.path().join("pull-secret.json"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let yaml = config("okd", "  ssh_key_file: ./key.pub\n");
    let loaded = config::parse(&yaml, "okd.yml", dir.path(), InstallCheck::Skip)
        .unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)))
        .config;
    for (key, verdict) in [
        (install_inputs::SSH_KEY, Accepts),
        (
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZha2Uga2V5IGZvciBva2QtYXBwbGlhbmNlIHRlc3Qh",
            Accepts,
        ),
        (
            "ssh-ed25519 AAAA x",
            Refuses("line 1 is not an SSH public key"),
        ),
        ("bad-ssh-key", Refuses("line 1 is not an SSH public key")),
        (
            "# my key\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZha2Uga2V5IGZvciBva2QtYXBwbGlhbmNlIHRlc3Qh",
            Refuses("line 1 is a comment"),
        ),
    ] {
        std::fs::write(dir.path().join("key.pub"), key).unwrap();
        match (Inputs::read(&loaded), verdict) {
            (Ok(_), Accepts) => {}
            (Err(e), Refuses(said)) => assert!(e.contains(said), "{key}: {e}"),
            (other, _) => panic!("{key}: the installer's verdict is {verdict:?}, got {other:?}"),
        }
    }
}

#[test]
fn one_master_with_workers_is_warned_of_for_what_the_appliance_does_not_what_the_installer_refuses()
{
    // `create single-node-ignition-config` takes compute replicas beside one control plane
    // replica: `verifyBootstrapInPlace` (pkg/asset/ignition/bootstrap/bootstrapinplace.go)
    // checks only `controlPlane.replicas == 1` and `bootstrapInPlace.installationDisk`. The
    // refusal of compute replicas is the agent-based installer's (pkg/asset/agent/
    // installconfig.go). What stops this config is the appliance's own rendering: one master
    // beside workers is an ordinary install, and it has no bootstrap node.
    let loaded = config::parse(
        &config("okd", ""),
        "okd.yml",
        Path::new("/tmp"),
        InstallCheck::Skip,
    )
    .unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)));
    let warning = loaded
        .warnings
        .iter()
        .find(|p| p.code() == "config::single-master-with-workers")
        .expect("one master beside a worker with no bootstrap node is warned of");
    assert!(warning.message().contains("no bootstrap node"));
    let text = loaded.warnings.render(RenderStyle::Plain);
    assert!(
        !text.contains("refuses compute replicas"),
        "openshift-install's bootstrap-in-place does not refuse compute replicas:\n{text}"
    );
    assert!(
        text.contains("add a `role: bootstrap` node"),
        "the hint says what installs it:\n{text}"
    );
}
