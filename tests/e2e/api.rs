//! The HTTP API and the status page.
//!
//! On TCP the API takes TLS and a bearer token: requests without one or with a wrong one get
//! 401 and change nothing (a drain asked that way is not made); with it, status, actions and
//! the event stream work; the local socket needs no token. The status page is loaded in
//! headless Chromium (Debian's) driven over the DevTools protocol (tests/e2e/cdp.py): a node's
//! phase change, its timeline bar and what it waits for next reach the page over the event
//! stream without a reload, and so does a backend drained through the API; an undrain from the
//! page is done only once confirmed, and a cancelled drain not at all; `status` says where the
//! page and the sockets are. A screenshot is written to
//! target/e2e-artifacts/status-page.png (its path is printed; docs/status-page.png is one).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use harness::{Netns, Topology, require_root, require_tools, wait_until};

use crate::dns_support::{start_appliance, write_config};

const TOKEN: &str = "api-t0ken-5f3a9c1e7d2b4806";
const API: &str = "https://10.99.0.1:9443";

fn setup(dir: &Path) -> PathBuf {
    crate::support::self_signed(dir, "api", "IP:10.99.0.1");
    std::fs::write(dir.join("api-token"), format!("{TOKEN}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    for f in ["api-token", "api.key"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let config = write_config(
        dir,
        r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.99.0.0/24, appliance_ip: 10.99.0.1 }
nodes:
  - { name: mst0, role: master, mac: "52:54:00:00:00:11", ip: 10.99.0.11 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
lb: { health: { interval: 200ms, timeout: 200ms, rise: 1, fall: 1, control_plane_check: tcp } }
api: { listen: "10.99.0.1:9443", cert_file: api.pem, key_file: api.key, token_file: api-token }
listen:
  dns: []
  dhcp: []
  tftp: []
  http: ["10.99.0.1:8080"]
  api: ["10.99.0.1:6443"]
  machine_config: []
  ingress_https: []
  ingress_http: []
"#,
    );
    // A master alone is a single-node cluster: its installer's ignition is this one.
    std::fs::write(
        dir.join("install_dir/bootstrap-in-place-for-live-iso.ign"),
        br#"{"ignition":{"version":"3.2.0"}}"#,
    )
    .unwrap();
    config
}

/// `curl -sk` from `ns`: (HTTP status, body).
fn curl(ns: &Netns, args: &[&str]) -> (String, String) {
    let out = ns
        .exec(["curl", "-sk", "--max-time", "5", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_owned(), body.to_owned())
}

fn lb_status(state: &Path) -> String {
    let out = Command::new(harness::appliance_bin().unwrap())
        .args(["lb", "status", "--state-dir"])
        .arg(state)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_api_takes_tls_and_a_token_and_the_status_page_follows_the_journal_live() {
    if !require_root() || !require_tools(&["curl", "openssl", "chromium"]) {
        return;
    }
    let topo = Topology::new("api").unwrap();
    let client = topo.add_node("cli", "10.99.0.99/24", None).unwrap();
    let node = topo.add_node("mst0", "10.99.0.11/24", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path());
    let state_dir = dir.path().join("state");
    let mut app = start_appliance(topo.services(), &config);
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let drain = format!("{API}/api/v1/nodes/mst0/drain");

    // Without the token, or with a wrong one: 401, and nothing changes.
    for auth in [
        vec![],
        vec!["-H", "Authorization: Bearer not-the-token"],
        vec!["-H", "Authorization: Basic YWRtaW46YWRtaW4="],
    ] {
        let status_url = format!("{API}/api/v1/status");
        let mut get = auth.clone();
        get.push(status_url.as_str());
        let (code, body) = curl(&client, &get);
        assert_eq!(code, "401", "{auth:?}");
        // It says where the token is and how to send it.
        let token_file = dir.path().join("api-token");
        assert!(
            body.contains(&format!("first line of {}", token_file.display()))
                && body.contains("Authorization: Bearer TOKEN")
                && body.contains("/?token=TOKEN"),
            "{body}"
        );
        let mut post = auth.clone();
        post.extend(["-X", "POST", drain.as_str()]);
        assert_eq!(curl(&client, &post).0, "401", "{auth:?}");
    }
    let wrong_query = format!("{API}/metrics?token=wrong");
    assert_eq!(curl(&client, &[&wrong_query]).0, "401");
    // The right token in a URL counts only for the page's first GET, which swaps it for a
    // cookie: nowhere else.
    for elsewhere in ["metrics", "api/v1/status", "api/v1/events"] {
        let url = format!("{API}/{elsewhere}?token={TOKEN}");
        assert_eq!(curl(&client, &[&url]).0, "401", "{url}");
    }
    let headers = dir.path().join("page-headers");
    let (code, _) = curl(
        &client,
        &[
            "-D",
            headers.to_str().unwrap(),
            &format!("{API}/?token={TOKEN}"),
        ],
    );
    assert_eq!(code, "303");
    let head = std::fs::read_to_string(&headers)
        .unwrap()
        .to_ascii_lowercase();
    assert!(head.contains("location: /\r\n"), "{head}");
    assert!(
        head.contains("set-cookie: okd_appliance_token=")
            && head.contains("; secure; httponly; samesite=strict"),
        "{head}"
    );
    let cookie = format!("Cookie: okd_appliance_token={TOKEN}");
    assert_eq!(
        curl(&client, &["-H", &cookie, &format!("{API}/api/v1/status")]).0,
        "200"
    );
    assert_eq!(
        curl(
            &client,
            &[
                "-H",
                "Cookie: okd_appliance_token=wrong",
                &format!("{API}/api/v1/status")
            ]
        )
        .0,
        "401"
    );
    assert!(
        !lb_status(&state_dir).contains("draining"),
        "{}",
        lb_status(&state_dir)
    );

    // With it.
    let (code, body) = curl(&client, &["-H", &bearer, &format!("{API}/api/v1/status")]);
    assert_eq!(code, "200", "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["nodes"][0]["name"], "mst0", "{status}");
    let (code, body) = curl(&client, &["-H", &bearer, "-X", "POST", &drain]);
    assert_eq!(code, "200", "{body}");
    assert!(lb_status(&state_dir).contains("api mst0 10.99.0.11:6443 draining"));
    let (code, _) = curl(
        &client,
        &[
            "-H",
            &bearer,
            "-X",
            "POST",
            &format!("{API}/api/v1/nodes/mst0/undrain"),
        ],
    );
    assert_eq!(code, "200");
    let (code, body) = curl(
        &client,
        &[
            "-H",
            &bearer,
            "-X",
            "POST",
            &format!("{API}/api/v1/nodes/nobody/reinstall"),
        ],
    );
    assert_eq!(code, "404", "{body}");
    // The local socket: its owner needs no token.
    let local = Command::new("curl")
        .args(["-sf", "--unix-socket"])
        .arg(state_dir.join("api.sock"))
        .arg("http://appliance/api/v1/status")
        .output()
        .unwrap();
    assert!(local.status.success());
    // The event stream: the history first.
    let out = client
        .exec([
            "curl",
            "-skN",
            // The stream never ends: curl stops it, after the history (and a busy machine's
            // TLS handshake) has had time to arrive.
            "--max-time",
            "4",
            "-H",
            &bearer,
            &format!("{API}/api/v1/events"),
        ])
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout);
    assert!(
        events.contains("data: {") && events.contains("drain requested"),
        "{events}"
    );

    // The page in Chromium, live.
    let cdp = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/cdp.py");
    let profile = dir.path().join("chromium");
    let _chromium = client
        .spawn(
            "chromium",
            [
                "chromium",
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--ignore-certificate-errors",
                "--remote-debugging-port=9339",
                "--window-size=1280,1000",
                &format!("--user-data-dir={}", profile.display()),
                &format!("{API}/?token={TOKEN}"),
            ],
        )
        .unwrap();
    let evaluate = |expr: &str| -> Option<String> {
        let out = client
            .exec([
                "/usr/bin/python3",
                cdp.to_str().unwrap(),
                "9339",
                "evaluate",
                expr,
            ])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let screenshot = |name: &str| -> PathBuf {
        let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/e2e-artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        let shot = artifacts.join(name);
        let out = client
            .exec([
                "/usr/bin/python3",
                cdp.to_str().unwrap(),
                "9339",
                "screenshot",
                shot.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("status page screenshot: {}", shot.display());
        shot
    };
    let phase = "document.querySelector('td.phase[data-node=\"mst0\"]').textContent";
    // Loaded, and following the stream (the appliance counts the page among its streams).
    assert!(
        wait_until(Duration::from_secs(20), || {
            evaluate(phase).as_deref() == Some("\"defined\"")
                && crate::support::scrape(&client, "http://10.99.0.1:8080/metrics")
                    .get("okd_appliance_api_event_streams{}")
                    .is_some_and(|n| *n >= 1.0)
        }),
        "the page never loaded and followed the stream: {:?}\n{}",
        evaluate(phase),
        app.log_tails()
    );
    let before = evaluate("document.body.dataset.events").unwrap();
    // The node fetches its script: its phase changes, and the page shows it without a reload.
    let (code, _) = curl(
        &node,
        &["http://10.99.0.1:8080/boot/52-54-00-00-00-11.ipxe"],
    );
    assert_eq!(code, "200");
    assert!(
        wait_until(Duration::from_secs(10), || evaluate(phase).as_deref()
            == Some("\"script\"")),
        "the phase change never reached the page: {:?}",
        evaluate(phase)
    );
    let after = evaluate("document.body.dataset.events").unwrap();
    assert_ne!(before, after, "the update came over the stream");
    let listed = evaluate("document.getElementById('events').textContent").unwrap();
    assert!(listed.contains("mst0: phase script"), "{listed}");

    // The timeline and the node's next step follow too.
    let bar = "document.querySelector('#timeline-svg rect.bar[data-node=\"mst0\"][data-phase=\"script\"]') !== null";
    let waiting = "document.querySelector('td.waiting[data-node=\"mst0\"]').textContent";
    assert!(
        wait_until(Duration::from_secs(10), || evaluate(bar).as_deref()
            == Some("true")
            && evaluate(waiting).as_deref()
                == Some("\"waiting for its kernel and initramfs fetch\"")),
        "the timeline or the node's next step never reached the page: {:?} {:?}",
        evaluate("document.getElementById('timeline').innerHTML"),
        evaluate(waiting)
    );

    // A backend drained through the API shows drained on the page, without a reload (the
    // marker set in this page survives).
    let state = "document.querySelector('tr[data-backend=\"api/mst0\"] td.state').textContent";
    assert_eq!(
        evaluate("window.notReloaded = 'yes'").as_deref(),
        Some("\"yes\"")
    );
    assert_eq!(
        evaluate(state).as_deref(),
        Some("\"down\""),
        "nothing listens on mst0"
    );
    let (code, body) = curl(&client, &["-H", &bearer, "-X", "POST", &drain]);
    assert_eq!(code, "200", "{body}");
    assert!(
        wait_until(Duration::from_secs(10), || evaluate(state).as_deref()
            == Some("\"draining\"")),
        "the drain never reached the page: {:?}",
        evaluate(state)
    );
    assert_eq!(evaluate("window.notReloaded").as_deref(), Some("\"yes\""));
    let since =
        "document.querySelector('tr[data-backend=\"api/mst0\"] td:nth-child(5)').textContent";
    assert!(
        evaluate(since).is_some_and(|s| s.contains(" ago)")),
        "{:?}",
        evaluate(since)
    );
    let check = "document.querySelector('tr[data-backend=\"api/mst0\"] td.check').textContent";
    assert!(
        evaluate(check).is_some_and(|c| c.contains("failed in ")),
        "the last check (nothing listens): {:?}",
        evaluate(check)
    );

    // An action from the page: asked for, confirmed, then done (with the page's action token;
    // the cookie alone is not enough, see above).
    let undrain = "document.querySelector('tr[data-backend=\"api/mst0\"] button[data-action=\"undrain\"]').click(); document.getElementById('confirm').hidden";
    assert_eq!(
        evaluate(undrain).as_deref(),
        Some("false"),
        "the confirmation shows"
    );
    let question = evaluate("document.getElementById('confirm-text').textContent").unwrap();
    assert!(
        question.contains("Put mst0 back into rotation"),
        "{question}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        lb_status(&state_dir).contains("draining"),
        "nothing is done before it is confirmed"
    );
    screenshot("status-page-confirm.png");
    evaluate("document.getElementById('confirm-yes').click()").unwrap();
    let result = "document.getElementById('result').textContent";
    assert!(
        wait_until(Duration::from_secs(10), || evaluate(result)
            .is_some_and(|r| r.contains("mst0 back in rotation"))),
        "the confirmed undrain: {:?}",
        evaluate(result)
    );
    assert!(
        !lb_status(&state_dir).contains("draining"),
        "{}",
        lb_status(&state_dir)
    );
    assert!(
        wait_until(Duration::from_secs(10), || evaluate(state).as_deref()
            == Some("\"down\"")),
        "the undrain never reached the page: {:?}",
        evaluate(state)
    );
    // Cancelled: nothing happens.
    evaluate("document.querySelector('tr[data-backend=\"api/mst0\"] button[data-action=\"drain\"]').click(); document.getElementById('confirm-no').click()").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(!lb_status(&state_dir).contains("draining"));
    assert_eq!(
        evaluate("document.getElementById('confirm').hidden").as_deref(),
        Some("true")
    );

    // `status` says where the page and the sockets are.
    let out = Command::new(harness::appliance_bin().unwrap())
        .args(["status", "--state-dir"])
        .arg(&state_dir)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("status page and API: https://10.99.0.1:9443/ (TLS and the token)")
            && shown.contains(&format!(
                "admin socket: {}",
                state_dir.join("admin.sock").display()
            )),
        "{shown}"
    );
    let logged = format!("{}{}", app.stdout(), app.stderr());
    assert!(
        logged.contains("API and status page at https://10.99.0.1:9443/")
            && logged.contains("admin socket at "),
        "{logged}"
    );

    // The rest of the install, for the screenshot's timeline.
    std::thread::sleep(Duration::from_secs(3));
    let (code, _) = curl(&node, &["http://10.99.0.1:8080/ignition/mst0.ign"]);
    assert_eq!(code, "200");
    assert!(
        wait_until(Duration::from_secs(10), || evaluate(phase).as_deref()
            == Some("\"ignition\"")),
        "{:?}",
        evaluate(phase)
    );
    std::thread::sleep(Duration::from_secs(4));
    let shot = screenshot("status-page.png");
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);

    // A restart. The page says at once that the appliance is gone, loads again by itself once
    // it is back, and lists the events from before below the restart's line; a drain made
    // before the restart holds after it.
    let connection = "document.body.dataset.connection";
    assert_eq!(evaluate(connection).as_deref(), Some("\"live\""));
    let (code, body) = curl(&client, &["-H", &bearer, "-X", "POST", &drain]);
    assert_eq!(code, "200", "{body}");
    std::thread::sleep(Duration::from_millis(500));
    app.stop().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || evaluate(connection).as_deref()
            == Some("\"lost\"")),
        "the page never said it lost the appliance: {:?}",
        evaluate(connection)
    );
    let said = evaluate("document.getElementById('connection').textContent").unwrap();
    assert!(said.contains("disconnected since "), "{said}");
    evaluate("window.beforeRestart = 'yes'").unwrap();
    let app = start_appliance(topo.services(), &config);
    assert!(
        wait_until(Duration::from_secs(20), || {
            evaluate("typeof window.beforeRestart").as_deref() == Some("\"undefined\"")
                && evaluate(connection).as_deref() == Some("\"live\"")
        }),
        "the page never came back: {:?}\n{}",
        evaluate(connection),
        app.log_tails()
    );
    let listed = "document.getElementById('events').textContent";
    assert!(
        wait_until(Duration::from_secs(10), || evaluate(listed).is_some_and(
            |l| {
                l.contains("the appliance started; the events below are from before")
                    && l.contains("mst0: phase script")
            }
        )),
        "{:?}",
        evaluate(listed)
    );
    assert!(
        lb_status(&state_dir).contains("draining"),
        "the drain from before the restart: {}",
        lb_status(&state_dir)
    );
    assert!(
        app.stderr()
            .contains("mst0 drained again, as it was before this start"),
        "{}",
        app.log_tails()
    );
}

/// After `cluster up` installed a cluster (tests/e2e/orchestration.rs): the status page, as the
/// API's local socket serves it, draws each node's phases as bars and each of the `cluster`
/// phases as a line across; bst was never started, so it has none. Its picture goes to
/// target/e2e-artifacts/status-page-install.png when Chromium is there (run in `ns`: no
/// network; docs/status-page-install.png is one).
pub fn the_page_draws_the_install(state: &Path, ns: &Netns, dir: &Path, cluster: &[&str]) {
    let page = Command::new("curl")
        .args(["-sf", "--max-time", "5", "--unix-socket"])
        .arg(state.join("api.sock"))
        .arg("http://appliance/")
        .output()
        .unwrap();
    assert!(page.status.success(), "{page:?}");
    let page = String::from_utf8(page.stdout).unwrap();
    for phase in cluster {
        assert!(
            page.contains(&format!("<line class=\"milestone\" data-phase=\"{phase}\"")),
            "no milestone {phase} in {page}"
        );
    }
    for (node, phase) in [("mst0", "ready"), ("wrk0", "joined"), ("wrk0", "ignition")] {
        assert!(
            page.contains(&format!(
                "<rect class=\"bar p-{phase}\" data-node=\"{node}\" data-phase=\"{phase}\""
            )),
            "no {phase} bar for {node} in {page}"
        );
    }
    assert!(
        !page.contains("data-node=\"bst\" data-phase="),
        "bst was never started: no bar"
    );
    if harness::which("chromium").is_none() {
        return;
    }
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/e2e-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let html = artifacts.join("status-page-install.html");
    std::fs::write(&html, &page).unwrap();
    let shot = artifacts.join("status-page-install.png");
    let _ = std::fs::remove_file(&shot);
    let out = ns
        .exec([
            "chromium",
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,900",
            &format!("--user-data-dir={}", dir.join("chromium").display()),
            &format!("--screenshot={}", shot.display()),
            &format!("file://{}", html.display()),
        ])
        .output()
        .unwrap();
    assert!(
        std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("status page screenshot: {}", shot.display());
}
