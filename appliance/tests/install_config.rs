//! `render --format install-config`: what it writes for every shipped config is an
//! InstallConfig by openshift-install's own schema (its CRD, `tests/contracts/`), the pull
//! secret comes back out of the YAML byte for byte, a single node installs in place, and the
//! command reads its files by the rules every secret has.

mod install_inputs;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use okd_appliance::config::{self, InstallCheck, RenderStyle};
use okd_appliance::install_config::{Inputs, render};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn load_text(text: &str, dir: &Path) -> config::Config {
    config::parse(text, "okd.yml", dir, InstallCheck::Skip)
        .unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)))
        .config
}

fn shipped_configs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("config"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    files
}

/// The InstallConfig CRD's `openAPIV3Schema` as a JSON schema (draft 4, which OpenAPI 3.0's
/// schema objects follow), made as strict as openshift-install itself:
/// - every object with `properties` refuses other keys (`additionalProperties: false`):
///   openshift-install reads install-config.yaml with `yaml.UnmarshalStrict` and
///   `DisallowUnknownFields` (`pkg/asset/installconfig/installconfigbase.go`), where a CRD
///   would only prune them;
/// - `nullable: true` becomes a type that also takes null;
/// - the Kubernetes extensions go: `x-kubernetes-validations` are CEL rules (no evaluator
///   here), the list-type and int-or-string markers change nothing a JSON schema checks
///   (int-or-string fields carry their own `anyOf`);
/// - `networking.serviceNetwork` takes two entries: the CRD's `maxItems: 1` (a kubebuilder
///   marker in `pkg/types/installconfig.go`) is older than dual stack, for which the installer's
///   validation requires exactly one service network per family
///   (`validateNetworkingIPVersion` in `pkg/types/validation/installconfig.go`, same commit).
fn installer_schema() -> Value {
    let text = std::fs::read_to_string(
        repo().join("tests/contracts/install.openshift.io_installconfigs.yaml"),
    )
    .unwrap();
    let crd: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(crd["spec"]["names"]["kind"], "InstallConfig");
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1")
        .expect("the v1 version");
    let mut schema = version["schema"]["openAPIV3Schema"].clone();
    strict(&mut schema);
    let service = &mut schema["properties"]["networking"]["properties"]["serviceNetwork"];
    assert_eq!(service["maxItems"], 1, "the CRD changed: review this test");
    service["maxItems"] = json!(2);
    schema
}

fn strict(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    obj.retain(|k, _| {
        !k.starts_with("x-kubernetes-") || k == "x-kubernetes-preserve-unknown-fields"
    });
    if obj.remove("x-kubernetes-preserve-unknown-fields").is_none()
        && obj.contains_key("properties")
        && !obj.contains_key("additionalProperties")
    {
        obj.insert("additionalProperties".into(), json!(false));
    }
    if obj.remove("nullable") == Some(json!(true))
        && let Some(Value::String(t)) = obj.get("type").cloned()
    {
        obj.insert("type".into(), json!([t, "null"]));
    }
    for key in ["properties", "patternProperties", "definitions"] {
        if let Some(Value::Object(children)) = obj.get_mut(key) {
            for child in children.values_mut() {
                strict(child);
            }
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = obj.get_mut(key) {
            strict(child);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(children)) = obj.get_mut(key) {
            for child in children {
                strict(child);
            }
        }
    }
}

fn validator() -> jsonschema::Validator {
    jsonschema::draft4::new(&installer_schema()).expect("the converted CRD schema compiles")
}

fn problems(validator: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    validator
        .iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn as_json(yaml: &str) -> Value {
    serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

#[test]
fn every_shipped_config_renders_an_install_config_the_installer_schema_accepts() {
    let validator = validator();
    for path in shipped_configs() {
        let text = std::fs::read_to_string(&path).unwrap();
        let config = load_text(&text, path.parent().unwrap());
        let yaml = render(&config, &install_inputs::inputs(&config)).unwrap();
        let doc = as_json(&yaml);
        let found = problems(&validator, &doc);
        assert!(
            found.is_empty(),
            "{}:\n{}\n{yaml}",
            path.display(),
            found.join("\n")
        );
        // What the schema leaves open: the values come from the config.
        assert_eq!(doc["metadata"]["name"], config.cluster.name.as_str());
        assert_eq!(doc["baseDomain"], config.cluster.base_domain.as_str());
        assert_eq!(doc["platform"], json!({"none": {}}));
        assert_eq!(doc["networking"]["networkType"], "OVNKubernetes");
        let masters = config
            .nodes
            .iter()
            .filter(|n| n.role == config::Role::Master)
            .count();
        assert_eq!(doc["controlPlane"]["replicas"], masters);
        assert_eq!(doc["compute"][0]["name"], "worker");
        assert_eq!(doc["compute"][0]["replicas"], 0);
        let families = 1 + usize::from(config.network.v6.is_some());
        for list in ["machineNetwork", "clusterNetwork", "serviceNetwork"] {
            assert_eq!(
                doc["networking"][list].as_array().unwrap().len(),
                families,
                "{}: {list}",
                path.display()
            );
        }
        assert_eq!(doc["pullSecret"], install_inputs::PULL_SECRET);
    }
}

/// The conversion above must not make a schema that takes anything: each of these breaks one
/// rule of the CRD and is refused.
#[test]
fn the_converted_schema_refuses_what_the_installer_refuses() {
    let validator = validator();
    let config = load_text(
        &std::fs::read_to_string(repo().join("config/lab.yml")).unwrap(),
        &repo().join("config"),
    );
    let good = as_json(&render(&config, &install_inputs::inputs(&config)).unwrap());
    assert!(problems(&validator, &good).is_empty());
    type Mutation = fn(&mut Value);
    let cases: [(&str, Mutation); 7] = [
        ("an unknown top-level key", |d| {
            d["pullSecrets"] = json!("x");
        }),
        ("an unknown key in a pool", |d| {
            d["controlPlane"]["replica"] = json!(3);
        }),
        ("replicas as a string", |d| {
            d["controlPlane"]["replicas"] = json!("3");
        }),
        ("no pull secret", |d| {
            d.as_object_mut().unwrap().remove("pullSecret");
        }),
        ("an unknown hyperthreading mode", |d| {
            d["compute"][0]["hyperthreading"] = json!("On");
        }),
        ("a mirror without a source", |d| {
            d["imageDigestSources"][0]
                .as_object_mut()
                .unwrap()
                .remove("source");
        }),
        ("three service networks", |d| {
            d["networking"]["serviceNetwork"] =
                json!(["172.30.0.0/16", "fd02::/112", "172.31.0.0/16"]);
        }),
    ];
    for (what, mutate) in cases {
        let mut doc = good.clone();
        mutate(&mut doc);
        assert!(!problems(&validator, &doc).is_empty(), "{what} passed");
    }
}

/// The pull secret is JSON inside YAML: whatever its characters, reading the YAML back gives
/// exactly the JSON of the file.
#[test]
fn the_pull_secret_comes_back_out_of_the_yaml_unchanged() {
    let config = load_text(
        &std::fs::read_to_string(repo().join("config/lab.yml")).unwrap(),
        &repo().join("config"),
    );
    let secrets = [
        install_inputs::PULL_SECRET.to_owned(),
        // As console.redhat.com hands it out: one line, several registries, an email.
        r#"{"auths":{"cloud.openshift.com":{"auth":"b3BlbnNoaWZ0LXJlbGVhc2UtZGV2K29jbV9hY2Nlc3NfMTIzOjQ1Ng==","email":"user@example.com"},"quay.io":{"auth":"cXVheTpzZWNyZXQ=","email":"user@example.com"}}}"#.to_owned(),
        // Pretty-printed, with what YAML gives meaning to: quotes, `: `, ` #`, backslashes,
        // tabs, non-ASCII, a leading `'` and a `---` line.
        "{\n  \"auths\": {\n    \"registry.example.com:5000\": {\n      \"auth\": \"dXNlcjpwYXNzOiAjIHdpdGggc3BhY2Vz\",\n      \"note\": \"it's a \\\"quoted\\\" value: with # and \\\\ and \\t tab and ünïcödé\"\n    }\n  },\n  \"x\": \"---\"\n}".to_owned(),
    ];
    for secret in secrets {
        let inputs = Inputs {
            pull_secret: secret.clone(),
            ssh_key: None,
            trust_bundle: None,
        };
        let yaml = render(&config, &inputs).unwrap();
        let doc = as_json(&yaml);
        assert_eq!(doc["pullSecret"].as_str(), Some(secret.as_str()), "{yaml}");
        let back: Value = serde_json::from_str(doc["pullSecret"].as_str().unwrap()).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(&secret).unwrap());
    }
}

const SINGLE_NODE: &str = r#"version: 1
cluster: { name: sno, base_domain: lab.example.com }
network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }
nodes:
  - { name: node-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2, install_dev: /dev/nvme0n1 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts, install_dev: /dev/vda }
install_config: { pull_secret_file: ./pull-secret.json }
"#;

#[test]
fn one_master_without_a_bootstrap_installs_in_place_on_its_disk() {
    let dir = tempfile::tempdir().unwrap();
    let config = load_text(SINGLE_NODE, dir.path());
    let doc = as_json(&render(&config, &install_inputs::inputs(&config)).unwrap());
    assert!(problems(&validator(), &doc).is_empty());
    assert_eq!(
        doc["bootstrapInPlace"],
        json!({"installationDisk": "/dev/nvme0n1"})
    );
    assert_eq!(doc["controlPlane"]["replicas"], 1);
    // The install disk of the install section when the node names none.
    let config = load_text(
        &SINGLE_NODE.replace(", install_dev: /dev/nvme0n1", ""),
        dir.path(),
    );
    let doc = as_json(&render(&config, &install_inputs::inputs(&config)).unwrap());
    assert_eq!(doc["bootstrapInPlace"]["installationDisk"], "/dev/vda");
    // With a bootstrap node, or three masters, the ordinary install.
    let with_bootstrap = SINGLE_NODE.replace(
        "nodes:\n",
        "nodes:\n  - { name: bootstrap, role: bootstrap, mac: \"52:54:00:00:00:07\", ip: 10.0.0.7 }\n",
    );
    let config = load_text(&with_bootstrap, dir.path());
    let doc = as_json(&render(&config, &install_inputs::inputs(&config)).unwrap());
    assert!(doc.get("bootstrapInPlace").is_none(), "{doc}");
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_okd-appliance"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn write_mode(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The command: the pull secret only from an owner-only file (the `chmod` to run otherwise),
/// the SSH key never a private one, the output owner-only, and nothing without the section.
#[test]
fn the_command_reads_its_files_as_secrets_and_writes_an_owner_only_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("okd.yml");
    std::fs::write(
        &config,
        SINGLE_NODE.replace(
            "install_config: { pull_secret_file: ./pull-secret.json }",
            "install_config:\n  pull_secret_file: ./pull-secret.json\n  ssh_key_file: ./key.pub\n  additional_trust_bundle_file: ./ca.pem\n",
        ),
    )
    .unwrap();
    let secret = dir.path().join("pull-secret.json");
    write_mode(
        &secret,
        &format!("{}\n", install_inputs::PULL_SECRET),
        0o644,
    );
    write_mode(&dir.path().join("key.pub"), install_inputs::SSH_KEY, 0o644);
    write_mode(&dir.path().join("ca.pem"), install_inputs::CA, 0o644);
    let file = config.to_str().unwrap();

    let refused = run(&["render", "--format", "install-config", file]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("chmod 600 {}", secret.display())),
        "{said}"
    );
    assert!(refused.stdout.is_empty());

    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = run(&["render", "--format", "install-config", file]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = as_json(&String::from_utf8(out.stdout).unwrap());
    // The file's trailing newline is not part of the secret.
    assert_eq!(doc["pullSecret"], install_inputs::PULL_SECRET);
    assert_eq!(doc["sshKey"], install_inputs::SSH_KEY);
    assert_eq!(doc["additionalTrustBundle"], install_inputs::CA);

    let outdir = dir.path().join("install_dir");
    let out = run(&[
        "render",
        "--format",
        "install-config",
        "-o",
        outdir.to_str().unwrap(),
        file,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = outdir.join("install-config.yaml");
    let mode = std::fs::metadata(&written).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // A private key where the public one belongs, a bundle that is no certificate, a pull
    // secret that is no JSON: refused, naming the file, never printing the content.
    for (name, content, expected) in [
        (
            "key.pub",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----\n",
            "private key",
        ),
        ("ca.pem", "not a certificate", "not a CA bundle"),
        (
            "pull-secret.json",
            "{\"auths\": {\"quay.io\": {}}}",
            "neither `auth` nor `credsStore`",
        ),
        ("pull-secret.json", "auths: sekrit", "not JSON"),
    ] {
        let path = dir.path().join(name);
        let before = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, content).unwrap();
        let out = run(&["render", "--format", "install-config", file]);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {said}");
        assert!(
            said.contains(expected) && said.contains(name),
            "{name}: {said}"
        );
        assert!(
            !said.contains("sekrit") && !said.contains("b3BlbnNzaC1rZXk"),
            "{said}"
        );
        std::fs::write(&path, before).unwrap();
    }

    // No section: nothing to render, and the error says what to add.
    std::fs::write(
        &config,
        SINGLE_NODE.replace(
            "install_config: { pull_secret_file: ./pull-secret.json }\n",
            "",
        ),
    )
    .unwrap();
    let out = run(&["render", "--format", "install-config", file]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no install_config section"));

    // `check --secret-files` lists the pull secret for provisioning.
    std::fs::write(&config, SINGLE_NODE).unwrap();
    let out = run(&["check", "--secret-files", file]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.lines().any(|l| l.ends_with("/pull-secret.json")),
        "{listed}"
    );
}
