//! The orchestration and the cluster API's side of it: the double's claims where the
//! orchestration does not reach them (checked after the install of
//! `orchestration::cluster_up_takes_a_cluster_from_bootstrap_to_installed_and_resumes_after_a_crash`),
//! and a kubeconfig corrected in place while every API call fails on TLS, read again by the
//! running `cluster up` without a reload or a restart.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use harness::{Topology, require_root, require_tools};

use crate::dns_support::start_appliance;
use crate::orchestration::{cli, config, spawn_double, status, text, waits_for};

/// `curl ARGS` to the double as the orchestration reaches it (its CA bundle, `api-int` by SNI),
/// with the admin kubeconfig's client certificate or without one: the HTTP code and the body.
fn curl_api(
    node: &harness::Node,
    auth: &Path,
    anonymous: bool,
    args: &[&str],
    path: &str,
) -> (u16, String) {
    let tls = auth.join("tls");
    let file = |f: &str| tls.join(f).to_str().unwrap().to_owned();
    let mut argv: Vec<String> = [
        "curl",
        "-s",
        "--max-time",
        "5",
        "--resolve",
        "api-int.okd.lab.example.com:6443:10.99.0.11",
        "--cacert",
        &file("kube-apiserver-complete-server-ca-bundle.crt"),
        "-w",
        "\n%{http_code}",
    ]
    .map(str::to_owned)
    .to_vec();
    if !anonymous {
        argv.extend([
            "--cert".to_owned(),
            file("admin-kubeconfig-client.crt"),
            "--key".to_owned(),
            file("admin-kubeconfig-client.key"),
        ]);
    }
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    argv.push(format!("https://api-int.okd.lab.example.com:6443{path}"));
    let out = node.netns().exec(&argv).output().unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    (code.parse().unwrap_or(0), body.to_owned())
}

/// A GET of `path`, as [`curl_api`].
fn kube(node: &harness::Node, auth: &Path, anonymous: bool, path: &str) -> (u16, String) {
    curl_api(node, auth, anonymous, &[], path)
}

/// The double's claims, checked where the orchestration does not reach them: what it answered
/// the orchestration with must be what kube-apiserver answers (see kube_double.py for sources).
pub(crate) fn the_double_answers_as_kube_apiserver_does(
    node: &harness::Node,
    auth: &Path,
    names: &std::collections::HashMap<String, String>,
    client: &str,
) {
    let json = |(code, body): (u16, String)| -> (u16, serde_json::Value) {
        let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {code} {body}"));
        (code, v)
    };
    // No client certificate: system:anonymous, denied by RBAC (403, not 401).
    let (code, denied) = json(kube(node, auth, true, "/api/v1/nodes"));
    assert_eq!(
        (code, &denied["reason"]),
        (403, &"Forbidden".into()),
        "{denied}"
    );
    assert!(
        denied["message"].as_str().unwrap().contains(
            r#"User "system:anonymous" cannot list resource "nodes" in API group "" at the cluster scope"#
        ),
        "{denied}"
    );
    assert_eq!(kube(node, auth, true, "/readyz"), (200, "ok".to_owned()));
    // Lists: no apiVersion/kind in the items, every object's metadata, pages by limit and
    // continue from one snapshot.
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let (code, page) = json(kube(node, auth, false, &format!("{csrs}?limit=3")));
    assert_eq!(code, 200, "{page}");
    let rv = page["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = page["metadata"]["continue"].as_str().unwrap().to_owned();
    assert_eq!(
        page["metadata"]["remainingItemCount"],
        names.len() - 3,
        "{page}"
    );
    let (code, rest) = json(kube(
        node,
        auth,
        false,
        &format!("{csrs}?limit=100&continue={token}"),
    ));
    assert_eq!(code, 200, "{rest}");
    assert_eq!(rest["metadata"]["resourceVersion"], rv.as_str(), "{rest}");
    let mut listed: Vec<&str> = Vec::new();
    for item in page["items"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest["items"].as_array().unwrap())
    {
        assert!(
            item.get("apiVersion").is_none() && item.get("kind").is_none(),
            "{item}"
        );
        for field in ["uid", "resourceVersion", "creationTimestamp"] {
            assert!(item["metadata"][field].is_string(), "{field}: {item}");
        }
        listed.push(item["metadata"]["name"].as_str().unwrap());
    }
    listed.sort_unstable();
    let mut all: Vec<&str> = names.values().map(String::as_str).collect();
    all.sort_unstable();
    assert_eq!(listed, all);
    // Selectors: the request's signer, and a field label CSRs do not have (400).
    let (_, serving) = json(kube(
        node,
        auth,
        false,
        &format!("{csrs}?fieldSelector=spec.signerName%3Dkubernetes.io%2Fkubelet-serving"),
    ));
    assert_eq!(serving["items"].as_array().unwrap().len(), 2, "{serving}");
    assert_eq!(
        kube(
            node,
            auth,
            false,
            &format!("{csrs}?fieldSelector=spec.username%3Dx")
        )
        .0,
        400
    );
    // A watch from a resourceVersion older than the history: one ERROR event, 410 Expired.
    let (code, gone) = json(kube(
        node,
        auth,
        false,
        &format!("{csrs}?watch=true&resourceVersion=1"),
    ));
    assert_eq!(
        (
            code,
            &gone["type"],
            &gone["object"]["code"],
            &gone["object"]["reason"]
        ),
        (200, &"ERROR".into(), &410.into(), &"Expired".into()),
        "{gone}"
    );
    // The approval as the API stored it: the timestamps filled, and signed.
    let (_, approved) = json(kube(node, auth, false, &format!("{csrs}/{client}")));
    let condition = &approved["status"]["conditions"][0];
    assert_eq!(
        (&condition["type"], &condition["status"]),
        (&"Approved".into(), &"True".into()),
        "{approved}"
    );
    for field in ["lastUpdateTime", "lastTransitionTime"] {
        assert!(condition[field].is_string(), "{field}: {approved}");
    }
    assert!(
        approved["status"]["certificate"]
            .as_str()
            .is_some_and(|c| c.starts_with("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t")),
        "issued: {approved}"
    );
}

/// `PUT .../approval` to the double with the admin client certificate: the code and the body.
fn put_approval(node: &harness::Node, auth: &Path, name: &str, body: &str) -> (u16, String) {
    curl_api(
        node,
        auth,
        false,
        &[
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ],
        &format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/approval"),
    )
}

/// The `/approval` subresource's rules, on a request the orchestration refused (run after the
/// install, so these writes come after the orchestration's): the name must be the URL's (400);
/// Approved and Denied together, Approved not True, a type twice are 422 Invalid and change
/// nothing; without a resourceVersion the update is unconditional, only the conditions are
/// taken (the spec sent is ignored) and their timestamps are filled.
pub(crate) fn approval_follows_the_subresource_rules(
    node: &harness::Node,
    auth: &Path,
    name: &str,
) {
    let body = |name: &str, conditions: serde_json::Value| {
        serde_json::json!({
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"username": "system:admin", "request": "", "signerName": "x/y"},
            "status": {"conditions": conditions},
        })
        .to_string()
    };
    let cond = |t: &str, s: &str| serde_json::json!({"type": t, "status": s, "reason": "Test"});
    let (code, said) = put_approval(node, auth, name, &body("another", serde_json::json!([])));
    assert_eq!(code, 400, "{said}");
    assert!(
        said.contains("does not match the name on the URL"),
        "{said}"
    );
    for (conditions, why) in [
        (
            serde_json::json!([cond("Approved", "True"), cond("Denied", "True")]),
            "mutually exclusive",
        ),
        (
            serde_json::json!([cond("Approved", "False")]),
            "Unsupported value",
        ),
        (
            serde_json::json!([cond("Denied", "True"), cond("Denied", "True")]),
            "Duplicate value",
        ),
    ] {
        let (code, said) = put_approval(node, auth, name, &body(name, conditions));
        assert_eq!(code, 422, "{said}");
        assert!(
            said.contains("\"Invalid\"") && said.contains(why),
            "{why}: {said}"
        );
    }
    let csr = format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}");
    let (_, before) = kube(node, auth, false, &csr);
    let before: serde_json::Value = serde_json::from_str(&before).unwrap();
    assert!(
        before["status"]["conditions"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "refused writes changed nothing: {before}"
    );
    let (code, said) = put_approval(
        node,
        auth,
        name,
        &body(name, serde_json::json!([cond("Denied", "True")])),
    );
    assert_eq!(code, 200, "{said}");
    let stored: serde_json::Value = serde_json::from_str(&said).unwrap();
    assert_eq!(
        stored["spec"], before["spec"],
        "the spec sent is ignored: {stored}"
    );
    let denied = &stored["status"]["conditions"][0];
    assert_eq!(denied["type"], "Denied", "{stored}");
    for field in ["lastUpdateTime", "lastTransitionTime"] {
        assert!(denied[field].is_string(), "{field}: {stored}");
    }
}

/// `cluster up` starts with a kubeconfig whose certificate-authority-data is another CA than the
/// one that signed the API's serving certificate (the double's client CA), so every API call
/// fails in the TLS handshake and `cluster status` says so. The file is then overwritten in
/// place with the kubeconfig openshift-install wrote (same path and inode, mode 0600): the
/// running `up`, neither reloaded nor restarted, reads it again and reaches the API.
#[test]
fn cluster_up_reads_a_kubeconfig_corrected_in_place_while_the_api_fails_on_tls() {
    if !require_root() || !require_tools(&["python3", "curl", "openssl"]) {
        return;
    }
    let topo = Topology::new("ork").unwrap();
    let master = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let state = dir.path().join("state");
    let auth = dir.path().join("install_dir/auth");
    std::fs::create_dir_all(&auth).unwrap();
    std::fs::write(auth.join("masters-joined"), b"").unwrap();
    let mut double = spawn_double(&master, &auth);

    // The kubeconfig as openshift-install wrote it, and the same with the client CA's bundle
    // (admin-kubeconfig-signer and the kubelets' signer) as the CA to trust for the server.
    let kubeconfig = auth.join("kubeconfig");
    let right = std::fs::read_to_string(&kubeconfig).unwrap();
    let other_ca = std::process::Command::new("openssl")
        .args(["base64", "-A", "-in"])
        .arg(auth.join("tls/client-ca.crt"))
        .output()
        .unwrap();
    assert!(other_ca.status.success(), "{}", text(&other_ca));
    let wrong: String = right
        .lines()
        .map(|l| match l.split_once("certificate-authority-data: ") {
            Some((indent, _)) => format!(
                "{indent}certificate-authority-data: {}\n",
                String::from_utf8_lossy(&other_ca.stdout)
            ),
            None => format!("{l}\n"),
        })
        .collect();
    assert_ne!(wrong, right);
    std::fs::remove_file(&kubeconfig).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&kubeconfig)
        .and_then(|mut f| std::io::Write::write_all(&mut f, wrong.as_bytes()))
        .unwrap();
    let inode = std::fs::metadata(&kubeconfig).unwrap().ino();

    let mut appliance = start_appliance(topo.services(), &config);
    let out = cli(&state, &["up"]);
    assert!(out.status.success(), "{}", text(&out));
    let logs = || {
        format!(
            "{}\n{}\n{}",
            status(&state),
            appliance.log_tails(),
            double.log_tails()
        )
    };
    // The server's certificate is not the trusted CA's: the reason says so, and no request
    // reached the API (the load balancer's anonymous health checks do).
    assert!(
        waits_for(
            &state,
            "invalid peer certificate: UnknownIssuer",
            Duration::from_secs(20)
        ),
        "{}",
        logs()
    );
    let s = status(&state);
    assert_eq!(s["cluster"], "bootstrapping", "{s}");
    assert!(
        s["waiting_for"]
            .as_str()
            .unwrap()
            .starts_with("the cluster API: "),
        "{s}"
    );
    let admin = || {
        double
            .stderr()
            .lines()
            .filter(|l| l.starts_with("system:admin "))
            .count()
    };
    assert_eq!(admin(), 0, "{}", logs());

    // Corrected in place: the same file, still the owner's alone.
    std::fs::write(&kubeconfig, &right).unwrap();
    let meta = std::fs::metadata(&kubeconfig).unwrap();
    assert_eq!(
        (meta.ino(), meta.permissions().mode() & 0o777),
        (inode, 0o600)
    );
    // The same run goes on: it reaches the API, whose answer is what it waits for now.
    assert!(
        waits_for(
            &state,
            "bootstrap complete (kube-system/bootstrap)",
            Duration::from_secs(20)
        ),
        "{}",
        logs()
    );
    assert!(admin() > 0, "{}", logs());
    assert!(
        appliance.stderr().contains(&format!(
            "{} changed: reading it again",
            kubeconfig.display()
        )),
        "{}",
        logs()
    );
    let again = cli(&state, &["up"]);
    assert!(
        text(&again).contains("already running: cluster phase bootstrapping"),
        "{}",
        text(&again)
    );
    appliance.assert_running().unwrap();
    double.assert_running().unwrap();
}
