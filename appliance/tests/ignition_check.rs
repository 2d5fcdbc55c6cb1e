//! `check` (and `serve`, as warnings) compares openshift-install's output with the config: the
//! files here have the shape openshift-install writes (openshift/installer 6bc5c21f: the
//! pointer ignition of `pkg/asset/ignition/machine/node.go`, bootstrap.ign's storage files of
//! `pkg/asset/ignition/bootstrap/common.go`, the admin kubeconfig, the state file's
//! `*installconfig.InstallConfig`), made for this config or, one field at a time, for another;
//! every mismatch is one problem pointing at the config, and matching files give none.

use std::path::Path;
use std::time::SystemTime;

use okd_appliance::config::{self, InstallCheck, LoadError, RealFiles, RenderStyle, Severity};
use serde_json::json;

const CONFIG: &str = r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }
nodes:
  - { name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.0.0.7 }
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
  - { name: master-1, role: master, mac: "52:54:00:00:00:03", ip: 10.0.0.3 }
  - { name: master-2, role: master, mac: "52:54:00:00:00:04", ip: 10.0.0.4 }
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.0.0.5 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
"#;

/// What openshift-install was told: the cluster the files are made for.
#[derive(Clone)]
struct Made {
    name: &'static str,
    base_domain: &'static str,
    machine_network: &'static str,
    masters: u32,
    /// The root CA in the pointer ignitions.
    ca_pem: String,
}

impl Made {
    fn matching() -> Made {
        Made {
            name: "okd",
            base_domain: "lab.example.com",
            machine_network: "10.0.0.0/24",
            masters: 3,
            ca_pem: root_ca(2025, 2035),
        }
    }

    fn domain(&self) -> String {
        format!("{}.{}", self.name, self.base_domain)
    }
}

/// A self-signed CA like openshift-install's root CA (`pkg/asset/tls/root.go`: CN root-ca,
/// OU openshift, ten years), valid from the first of January of one year to that of another.
fn root_ca(valid_from: i32, valid_until: i32) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "root-ca");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationalUnitName, "openshift");
    params.not_before = rcgen::date_time_ymd(valid_from, 1, 1);
    params.not_after = rcgen::date_time_ymd(valid_until, 1, 1);
    params.self_signed(&key).unwrap().pem()
}

/// `c` with master.ign's CA replaced by `pem` (the other files unchanged).
fn master_ca(name: &str, c: String, pem: &str) -> String {
    if name != "master.ign" {
        return c;
    }
    let mut v: serde_json::Value = serde_json::from_str(&c).unwrap();
    v["ignition"]["security"]["tls"]["certificateAuthorities"][0]["source"] =
        json!(data_url(pem.as_bytes()));
    v.to_string()
}

/// A server certificate (not a CA), as the machine config server's own.
fn leaf_cert() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["api-int.okd.lab.example.com".to_owned()]).unwrap();
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "api-int.okd.lab.example.com");
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2035, 1, 1);
    params.self_signed(&key).unwrap().pem()
}

/// `dataurl.EncodeBytes` of a text: how openshift-install embeds every file.
fn data_url(bytes: &[u8]) -> String {
    format!(
        "data:text/plain;charset=utf-8;base64,{}",
        data_encoding::BASE64.encode(bytes)
    )
}

/// master.ign or worker.ign as `pointerIgnitionConfig` writes it for platform none.
fn pointer(made: &Made, role: &str) -> String {
    json!({
        "ignition": {
            "config": {"merge": [{"source": format!("https://api-int.{}:22623/config/{role}", made.domain())}]},
            "security": {"tls": {"certificateAuthorities": [{"source": data_url(made.ca_pem.as_bytes())}]}},
            "version": "3.2.0"
        }
    })
    .to_string()
}

/// A storage file of bootstrap.ign (`ignition.FileFromBytes`).
fn storage_file(path: &str, mode: u32, contents: &str) -> serde_json::Value {
    json!({
        "overwrite": true,
        "path": path,
        "user": {"name": "root"},
        "contents": {"source": data_url(contents.as_bytes())},
        "mode": mode
    })
}

/// bootstrap.ign with a few of the files openshift-install puts there: the DNS and
/// infrastructure configs (`pkg/asset/manifests/dns.go`, `infrastructure.go`, marshalled by
/// sigs.k8s.io/yaml), the root CA, a unit and the core user's key.
fn bootstrap(made: &Made) -> String {
    let domain = made.domain();
    let dns = format!(
        "apiVersion: config.openshift.io/v1\nkind: DNS\nmetadata:\n  creationTimestamp: null\n  name: cluster\nspec:\n  baseDomain: {domain}\n  platform:\n    aws: null\n    type: \"\"\nstatus: {{}}\n"
    );
    let infrastructure = format!(
        "apiVersion: config.openshift.io/v1\nkind: Infrastructure\nmetadata:\n  creationTimestamp: null\n  name: cluster\nspec:\n  cloudConfig:\n    name: \"\"\n  platformSpec:\n    type: None\nstatus:\n  apiServerInternalURI: https://api-int.{domain}:6443\n  apiServerURL: https://api.{domain}:6443\n  controlPlaneTopology: HighlyAvailable\n  cpuPartitioning: None\n  etcdDiscoveryDomain: \"\"\n  infrastructureName: {}-x7k2p\n  infrastructureTopology: HighlyAvailable\n  platform: None\n  platformStatus:\n    type: None\n",
        made.name
    );
    json!({
        "ignition": {"version": "3.2.0"},
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZha2U= core"]}]},
        "storage": {"files": [
            storage_file("/usr/local/bin/bootkube.sh", 365, "#!/usr/bin/env bash\nset -euo pipefail\n"),
            storage_file("/opt/openshift/manifests/cluster-infrastructure-02-config.yml", 420, &infrastructure),
            storage_file(okd_appliance::openshift_install::DNS_MANIFEST, 420, &dns),
            storage_file("/opt/openshift/tls/root-ca.crt", 420, &made.ca_pem),
        ]},
        "systemd": {"units": [{"contents": "[Unit]\nDescription=Bootstrap a Kubernetes cluster\n", "enabled": true, "name": "bootkube.service"}]}
    })
    .to_string()
}

/// `auth/kubeconfig` as `pkg/asset/kubeconfig/admin.go` writes it.
fn kubeconfig(made: &Made) -> String {
    format!(
        "clusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://api.{}:6443\n  name: {}\ncontexts:\n- context:\n    cluster: {}\n    user: admin\n  name: admin\ncurrent-context: admin\npreferences: {{}}\nusers:\n- name: admin\n  user:\n    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n",
        data_encoding::BASE64.encode(made.ca_pem.as_bytes()),
        made.domain(),
        made.name,
        made.name
    )
}

/// `.openshift_install_state.json`: assets by Go type name, the install config among them.
fn state(made: &Made) -> String {
    json!({
        "*installconfig.ClusterID": {"UUID": "6f1a", "InfraID": format!("{}-x7k2p", made.name)},
        "*installconfig.InstallConfig": {
            "config": {
                "metadata": {"name": made.name, "creationTimestamp": null},
                "baseDomain": made.base_domain,
                "compute": [{"name": "worker", "replicas": 0, "architecture": "amd64", "hyperthreading": "Enabled", "platform": {}}],
                "controlPlane": {"name": "master", "replicas": made.masters, "architecture": "amd64", "hyperthreading": "Enabled", "platform": {}},
                "networking": {
                    "clusterNetwork": [{"cidr": "10.128.0.0/14", "hostPrefix": 23}],
                    "machineNetwork": [{"cidr": made.machine_network}],
                    "networkType": "OVNKubernetes",
                    "serviceNetwork": ["172.30.0.0/16"]
                },
                "platform": {"none": {}},
                "pullSecret": "{\"auths\":{\"example.com\":{\"auth\":\"c2VjcmV0\"}}}",
                "publish": "External"
            },
            "file": {"Filename": "install-config.yaml", "Data": "YXBpVmVyc2lvbjogdjEK"}
        },
        "*bootstrap.Bootstrap": {"File": {"Filename": "bootstrap.ign", "Data": "e30="}}
    })
    .to_string()
}

/// Writes the install directory openshift-install would for `made`, each file passed through
/// `edit` (file name, content) first.
fn install_dir(dir: &Path, made: &Made, edit: impl Fn(&str, String) -> String) {
    let install = dir.join("install_dir");
    std::fs::create_dir_all(install.join("auth")).unwrap();
    let files = [
        ("bootstrap.ign", bootstrap(made)),
        ("master.ign", pointer(made, "master")),
        ("worker.ign", pointer(made, "worker")),
        ("auth/kubeconfig", kubeconfig(made)),
        (".openshift_install_state.json", state(made)),
    ];
    for (name, content) in files {
        let path = install.join(name);
        std::fs::write(&path, edit(name, content)).unwrap();
        // openshift-install writes its files 0640 (`pkg/asset/asset.go`, `PersistToFile`).
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o640))
            .unwrap();
    }
}

fn files() -> RealFiles {
    RealFiles {
        now: SystemTime::now(),
    }
}

/// As `check --install` loads: the problems as rendered (lines wrapped) followed by their
/// messages one a line, or "" when it passed without any.
fn check_install(dir: &Path) -> String {
    check_install_of(CONFIG, dir)
}

/// [`CONFIG`] for an install `cluster up` drives.
fn driven() -> String {
    format!("{CONFIG}orchestration: {{ settle: 30s }}\n")
}

fn check_install_of(config: &str, dir: &Path) -> String {
    let f = files();
    let problems = match config::parse(config, "okd.yml", dir, InstallCheck::Require(&f)) {
        Ok(loaded) => loaded.warnings,
        Err(LoadError::Invalid(p)) => p,
        Err(e) => panic!("{}", e.render(RenderStyle::Plain)),
    };
    if problems.is_empty() {
        return String::new();
    }
    let messages: Vec<&str> = problems.iter().map(|p| p.message()).collect();
    format!(
        "{}\n{}\n",
        problems.render(RenderStyle::Plain),
        messages.join("\n")
    )
}

#[test]
fn files_made_for_this_config_raise_nothing() {
    let dir = tempfile::tempdir().unwrap();
    install_dir(dir.path(), &Made::matching(), |_, c| c);
    let f = files();
    let loaded = config::parse(CONFIG, "okd.yml", dir.path(), InstallCheck::Require(&f))
        .unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)));
    assert!(
        loaded.warnings.is_empty(),
        "{}",
        loaded.warnings.render(RenderStyle::Plain)
    );
}

/// Each case changes one thing; exactly one problem comes out, labelled at the ignition
/// directory and, where a value of the config is contradicted, at that value too.
#[test]
fn each_mismatch_is_one_located_problem_with_a_hint() {
    let good = Made::matching();
    /// What, made for what, the one file put in place (all when `None`), an edit of the files.
    type Case = (
        &'static str,
        Made,
        Option<&'static str>,
        fn(&str, String) -> String,
        &'static [&'static str],
    );
    let keep: fn(&str, String) -> String = |_, c| c;
    let other_domain = Made {
        base_domain: "other.example.com",
        ..good.clone()
    };
    let cases: Vec<Case> = vec![
        (
            "master.ign of another cluster",
            other_domain.clone(),
            Some("master.ign"),
            keep,
            &[
                "master.ign was made for another cluster: it merges https://api-int.okd.other.example.com:22623/config/master, this cluster's machine config server is https://api-int.okd.lab.example.com:22623/config/master",
                "master.ign here",
                "this cluster's name",
                "and base domain",
                "openshift-install create ignition-configs",
            ],
        ),
        (
            "worker.ign pointing at the master config",
            good.clone(),
            None,
            |name, c| {
                if name == "worker.ign" {
                    c.replace("/config/worker", "/config/master")
                } else {
                    c
                }
            },
            &[
                "worker.ign asks the machine config server for the master config",
                "would come up as masters",
            ],
        ),
        (
            "an expired CA",
            Made {
                ca_pem: root_ca(2014, 2024),
                ..good.clone()
            },
            None,
            keep,
            // Both pointer ignitions carry it.
            &[
                "master.ign's CA for the machine config server: CN=root-ca",
                "expired at 2024-01-01",
                "worker.ign's CA",
            ],
        ),
        (
            "a CA not valid yet (the host's clock behind)",
            Made {
                ca_pem: root_ca(2090, 2100),
                ..good.clone()
            },
            None,
            keep,
            &[
                "master.ign's CA for the machine config server: CN=root-ca",
                "is not valid before 2090-01-01",
                "check this host's clock",
            ],
        ),
        (
            "a pointer ignition of another openshift-install run (another root CA)",
            good.clone(),
            None,
            |name, c| master_ca(name, c, &root_ca(2025, 2035)),
            &[
                "master.ign trusts CN=root-ca, OU=openshift (SHA-256 ",
                "but bootstrap.ign's root CA (/opt/openshift/tls/root-ca.crt) is CN=root-ca",
                "the files come from two openshift-install runs",
            ],
        ),
        (
            "a leaf certificate given as the CA",
            good.clone(),
            None,
            |name, c| master_ca(name, c, &leaf_cert()),
            &[
                "master.ign trusts CN=api-int.okd.lab.example.com",
                "which is not a CA certificate",
                "a leaf certificate may have been put in place of the cluster's root CA",
            ],
        ),
        (
            "an expired second CA beside a good one",
            good.clone(),
            None,
            |name, c| {
                if name == "master.ign" {
                    let mut v: serde_json::Value = serde_json::from_str(&c).unwrap();
                    v["ignition"]["security"]["tls"]["certificateAuthorities"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"source": data_url(root_ca(2014, 2024).as_bytes())}));
                    v.to_string()
                } else {
                    c
                }
            },
            &[
                "master.ign's CA for the machine config server: CN=root-ca",
                "expired at 2024-01-01",
            ],
        ),
        (
            "a CA that is not a certificate",
            good.clone(),
            None,
            |name, c| {
                if name == "master.ign" {
                    let mut v: serde_json::Value = serde_json::from_str(&c).unwrap();
                    v["ignition"]["security"]["tls"]["certificateAuthorities"][0]["source"] =
                        json!("data:text/plain;charset=utf-8;base64,bm90IGEgY2VydGlmaWNhdGU=");
                    v.to_string()
                } else {
                    c
                }
            },
            &["master.ign can't be checked: its CA bundle: it holds no PEM certificate"],
        ),
        (
            "a pointer without a CA",
            good.clone(),
            None,
            |name, c| {
                if name == "worker.ign" {
                    let mut v: serde_json::Value = serde_json::from_str(&c).unwrap();
                    v["ignition"].as_object_mut().unwrap().remove("security");
                    v.to_string()
                } else {
                    c
                }
            },
            &["worker.ign names no CA"],
        ),
        (
            "master.ign that is not JSON",
            good.clone(),
            None,
            |name, c| {
                if name == "master.ign" {
                    c[..c.len() / 2].to_owned()
                } else {
                    c
                }
            },
            &["master.ign can't be checked: it is not an Ignition config (JSON)"],
        ),
        (
            "bootstrap.ign of another cluster",
            other_domain.clone(),
            Some("bootstrap.ign"),
            keep,
            &[
                "bootstrap.ign was made for the cluster domain okd.other.example.com (its /opt/openshift/manifests/cluster-dns-02-config.yml), this cluster's is okd.lab.example.com",
                "this cluster's name",
            ],
        ),
        (
            "a kubeconfig of another cluster",
            other_domain.clone(),
            Some("auth/kubeconfig"),
            keep,
            &[
                "auth/kubeconfig was made for another cluster: its API server is https://api.okd.other.example.com:6443, this cluster's is https://api.okd.lab.example.com:6443",
            ],
        ),
        (
            "a state file of another name",
            Made {
                name: "ocp",
                ..good.clone()
            },
            Some(".openshift_install_state.json"),
            keep,
            &[
                "the ignition was made for the cluster name ocp (.openshift_install_state.json, *installconfig.InstallConfig), this config's is okd",
                "this cluster's name",
            ],
        ),
        (
            "a state file of another base domain",
            other_domain.clone(),
            Some(".openshift_install_state.json"),
            keep,
            &[
                "the ignition was made for the base domain other.example.com",
                "this cluster's base domain",
            ],
        ),
        (
            "a state file of another machine network",
            Made {
                machine_network: "10.0.0.0/16",
                ..good.clone()
            },
            Some(".openshift_install_state.json"),
            keep,
            &[
                "the ignition was made for the machine network 10.0.0.0/16",
                "this config's is 10.0.0.0/24",
                "this cluster's network",
            ],
        ),
        (
            "a state file of five masters",
            Made {
                masters: 5,
                ..good.clone()
            },
            Some(".openshift_install_state.json"),
            keep,
            &[
                "the ignition was made for 5 control-plane replicas",
                "this config lists 3 masters",
                "these nodes",
            ],
        ),
    ];
    for (what, made, only, edit, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        match only {
            // The other files as made for this config, the one under test as `made`.
            Some(file) => {
                install_dir(dir.path(), &good, keep);
                let mismatched = tempfile::tempdir().unwrap();
                install_dir(mismatched.path(), &made, keep);
                std::fs::copy(
                    mismatched.path().join("install_dir").join(file),
                    dir.path().join("install_dir").join(file),
                )
                .unwrap();
            }
            None => install_dir(dir.path(), &made, edit),
        }
        let out = check_install(dir.path());
        for e in expected {
            assert!(out.contains(e), "{what}: expected {e:?} in\n{out}");
        }
        let count = out.matches("config::ignition").count();
        // A CA made bad for both pointer ignitions is reported in each.
        let both = [
            "an expired CA",
            "a CA not valid yet (the host's clock behind)",
            // Not a CA, and not bootstrap.ign's root CA either.
            "a leaf certificate given as the CA",
        ];
        let expected_count = if both.contains(&what) { 2 } else { 1 };
        assert_eq!(count, expected_count, "{what}:\n{out}");
        assert!(out.contains("help: "), "{what}: no hint\n{out}");
        assert!(
            out.contains(&format!("okd.yml: {expected_count} error")),
            "{what}:\n{out}"
        );
    }
}

/// For `serve` and a plain `check` the same findings are warnings: the config loads.
#[test]
fn for_serving_a_mismatch_only_warns() {
    let dir = tempfile::tempdir().unwrap();
    let other = Made {
        name: "ocp",
        ..Made::matching()
    };
    install_dir(dir.path(), &other, |_, c| c);
    let f = files();
    let loaded = config::parse(CONFIG, "okd.yml", dir.path(), InstallCheck::Warn(&f))
        .unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)));
    let warnings: Vec<_> = loaded.warnings.iter().collect();
    // bootstrap.ign, master.ign, worker.ign, the kubeconfig and the state's name.
    assert_eq!(
        warnings.len(),
        5,
        "{}",
        loaded.warnings.render(RenderStyle::Plain)
    );
    assert!(warnings.iter().all(|w| w.severity() == Severity::Warning));
    assert!(
        warnings
            .iter()
            .all(|w| w.code() == "config::ignition-mismatch")
    );
}

/// Ignition configs openshift-install did not write (a test's `{}`, a hand-written config
/// without a merge source or DNS config) are not compared; a kubeconfig anyone can read is not
/// read, and said so.
#[test]
fn files_that_are_not_openshift_installs_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    install_dir(dir.path(), &Made::matching(), |name, c| match name {
        "master.ign" | "worker.ign" => "{}".to_owned(),
        "bootstrap.ign" => r#"{"ignition":{"version":"3.2.0"}}"#.to_owned(),
        _ => c,
    });
    assert_eq!(check_install(dir.path()), "");

    let kubeconfig = dir.path().join("install_dir/auth/kubeconfig");
    std::fs::set_permissions(
        &kubeconfig,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let f = files();
    let loaded = config::parse(CONFIG, "okd.yml", dir.path(), InstallCheck::Warn(&f)).unwrap();
    let out = loaded.warnings.render(RenderStyle::Plain);
    assert!(
        out.contains("auth/kubeconfig can't be checked") && out.contains("chmod"),
        "{out}"
    );
    assert_eq!(loaded.warnings.count(Severity::Warning), 1, "{out}");
    // Before an install `cluster up` drives it is an error: `cluster up` would refuse it.
    let out = check_install_of(&driven(), dir.path());
    assert!(
        out.contains("`cluster up` reads the admin kubeconfig") && out.contains("chmod"),
        "{out}"
    );
    assert!(!out.contains("can't be checked"), "said once:\n{out}");
    assert!(out.contains("okd.yml: 1 error, 0 warnings"), "{out}");
}

/// `check --install` asks for the admin kubeconfig `cluster up` will read when it drives the
/// install; `check` and `serve` don't (the services never read it).
#[test]
fn an_install_needs_the_kubeconfig_cluster_up_reads() {
    let dir = tempfile::tempdir().unwrap();
    install_dir(dir.path(), &Made::matching(), |_, c| c);
    std::fs::remove_file(dir.path().join("install_dir/auth/kubeconfig")).unwrap();
    // Nobody drives the install from here: no provider, no orchestration section.
    assert_eq!(check_install(dir.path()), "");
    let out = check_install_of(&driven(), dir.path());
    assert!(
        out.contains("`cluster up` reads the admin kubeconfig")
            && out.contains("install_dir/auth/kubeconfig")
            && out.contains("No such file")
            && out.contains("ignition_dir (its auth/kubeconfig)")
            && out.contains("help: `openshift-install create ignition-configs` writes it"),
        "{out}"
    );
    assert!(out.contains("okd.yml: 1 error, 0 warnings"), "{out}");
    let f = files();
    let loaded = config::parse(&driven(), "okd.yml", dir.path(), InstallCheck::Warn(&f)).unwrap();
    assert!(
        loaded.warnings.is_empty(),
        "{}",
        loaded.warnings.render(RenderStyle::Plain)
    );
}
