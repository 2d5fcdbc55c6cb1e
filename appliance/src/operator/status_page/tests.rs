//! The status page's rendering from given statuses: the timeline's geometry, the backend rows,
//! the live parts and the escaping of every value.

use std::time::{Duration, SystemTime};

use super::*;
use crate::operator::status::{
    Appliance, BackendStatus, CheckStatus, Endpoints, NodeStatus, PhaseAt, Status,
};

const T0: u64 = 1_800_000_000;

fn at(phase: &str, t: u64) -> PhaseAt {
    PhaseAt {
        phase: phase.to_owned(),
        at: T0 + t,
    }
}

fn node(name: &str, role: &str, steps: Vec<PhaseAt>) -> NodeStatus {
    NodeStatus {
        name: name.to_owned(),
        role: role.to_owned(),
        mac: "52:54:00:00:00:11".to_owned(),
        ip: "10.0.0.11".to_owned(),
        phase: steps
            .last()
            .map_or("defined", |s| s.phase.as_str())
            .to_owned(),
        dhcp: None,
        script: None,
        kernel: None,
        ignition: None,
        installed: None,
        steps,
        waiting_for: Some("its ignition fetch".to_owned()),
        problem: None,
    }
}

fn backend(node: &str, state: &str, check: Option<CheckStatus>) -> BackendStatus {
    BackendStatus {
        frontend: "api".to_owned(),
        node: node.to_owned(),
        addr: "10.0.0.11:6443".parse().unwrap(),
        state: state.to_owned(),
        since: Some(T0 + 100),
        check,
        active: 3,
        connections: 42,
        bytes_to_backend: 1536,
        bytes_to_client: 5 * 1024 * 1024,
    }
}

fn status(nodes: Vec<NodeStatus>, backends: Vec<BackendStatus>, cluster: Vec<PhaseAt>) -> Status {
    Status {
        appliance: Appliance {
            version: "1.0".to_owned(),
            started: T0,
            uptime_secs: 300,
            plan_serial: 7,
            listeners: vec![],
            ha: None,
            cluster_phase: cluster.last().map(|s| s.phase.clone()),
            cluster_steps: cluster,
            cluster_waiting: Some("bootstrap complete (kube-system/bootstrap)".to_owned()),
            endpoints: Some(Endpoints {
                admin_socket: "/var/lib/okd/admin.sock".to_owned(),
                api_socket: "/var/lib/okd/api.sock".to_owned(),
                api_url: Some("https://10.0.0.1:9443/".to_owned()),
            }),
            faults: vec![],
        },
        nodes,
        backends,
    }
}

/// The attribute `name="..."` of each element of `tag` in `svg` whose start tag contains `with`.
fn attrs(svg: &str, tag: &str, with: &str, name: &str) -> Vec<u64> {
    svg.split(&format!("<{tag} "))
        .skip(1)
        .map(|e| &e[..e.find('>').unwrap()])
        .filter(|e| e.contains(with))
        .map(|e| {
            let v = e.split(&format!(" {name}=\"")).nth(1).unwrap();
            v[..v.find('"').unwrap()].parse().unwrap()
        })
        .collect()
}

#[test]
fn the_timeline_draws_each_phase_as_a_bar_from_its_time_to_the_next_and_milestones_across() {
    let s = status(
        vec![
            node(
                "bst",
                "bootstrap",
                vec![at("created", 0), at("powered-on", 10), at("dhcp", 40)],
            ),
            node(
                "mst0",
                "master",
                vec![at("dhcp", 100), at("ignition", 300), at("ready", 900)],
            ),
            node("wrk0", "worker", vec![]),
        ],
        vec![],
        vec![at("bootstrapping", 0), at("bootstrap-complete", 600)],
    );
    let now = T0 + 1000;
    let svg = timeline::svg(&s, now);
    // Three rows, as many bars as steps, none for the node without any.
    assert_eq!(svg.matches("<rect ").count(), 6, "{svg}");
    assert!(!svg.contains("data-node=\"wrk0\""), "{svg}");
    assert!(svg.contains(">wrk0 <tspan"), "the row is labelled: {svg}");
    let xs = attrs(&svg, "rect", "data-node=\"mst0\"", "x");
    let widths = attrs(&svg, "rect", "data-node=\"mst0\"", "width");
    // 1000 s across 830 px: 0.83 px a second from the first step.
    assert_eq!(xs, vec![150 + 83, 150 + 249, 150 + 747], "{svg}");
    assert_eq!(
        widths[..2],
        [249 - 83, 747 - 249],
        "each bar ends where the next phase begins"
    );
    assert_eq!(widths[2], 2, "ready is the end: a mark, not a bar to now");
    // The bootstrap's current phase runs on to now.
    let bst_last = attrs(&svg, "rect", "data-phase=\"dhcp\" x=\"183\"", "width");
    assert_eq!(bst_last, vec![980 - 183], "{svg}");
    assert!(
        svg.contains("mst0: ignition at 08:05:00, took 10m 0s"),
        "{svg}"
    );
    assert!(
        svg.contains("bst: dhcp at 08:00:40, for 16m 0s so far"),
        "{svg}"
    );
    // Each cluster phase is a line at its time.
    let lines = attrs(&svg, "line", "class=\"milestone\"", "x1");
    assert_eq!(lines, vec![150, 150 + 498], "{svg}");
    assert!(svg.contains(">bootstrap-complete 08:10:00</text>"), "{svg}");
    // Far apart: both labels on the first line.
    assert_eq!(
        attrs(&svg, "text", "class=\"milestone\"", "y"),
        vec![12, 12]
    );
}

#[test]
fn milestone_labels_close_in_time_take_separate_lines_and_stay_inside() {
    let s = status(
        vec![node("mst0", "master", vec![at("dhcp", 0)])],
        vec![],
        vec![
            at("bootstrapping", 0),
            at("bootstrap-complete", 3),
            at("bootstrap-removed", 5),
            at("installed", 400),
            at("workers-joining", 1000),
        ],
    );
    let svg = timeline::svg(&s, T0 + 1000);
    let ys = attrs(&svg, "text", "class=\"milestone\"", "y");
    assert_eq!(ys, vec![12, 26, 40, 12, 12], "{svg}");
    // Three lines of labels push the rows down.
    assert_eq!(
        attrs(&svg, "rect", "mst0", "y"),
        vec![3 * 14 + 8 + 5],
        "{svg}"
    );
    // The last one ends at its line, at the right edge.
    assert!(
        svg.contains("text-anchor=\"end\">workers-joining 08:16:40</text>"),
        "{svg}"
    );
}

#[test]
fn an_empty_timeline_says_so_and_a_short_one_is_a_minute_wide() {
    let s = status(vec![node("mst0", "master", vec![])], vec![], vec![]);
    let svg = timeline::svg(&s, T0);
    assert!(svg.contains("no node has started its install yet"), "{svg}");
    assert_eq!(svg.matches("<rect ").count(), 0);
    let s = status(
        vec![node("mst0", "master", vec![at("dhcp", 0)])],
        vec![],
        vec![],
    );
    let svg = timeline::svg(&s, T0 + 6);
    assert!(!svg.contains("no node has started"), "{svg}");
    // 6 s of a minute: a tenth of 830 px.
    assert_eq!(attrs(&svg, "rect", "mst0", "width"), vec![83], "{svg}");
}

#[test]
fn names_and_reasons_are_escaped_everywhere() {
    let evil = "<img src=x onerror=alert(1)>\"'&";
    let mut n = node(evil, evil, vec![at(evil, 0)]);
    n.waiting_for = Some(evil.to_owned());
    n.problem = Some(evil.to_owned());
    let mut s = status(vec![n], vec![backend(evil, "up", None)], vec![at(evil, 5)]);
    s.appliance.cluster_waiting = Some(evil.to_owned());
    let page = render(
        &s,
        SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 10),
        Some(evil),
        PageOf::ONLY,
    );
    assert!(!page.contains("<img"), "{page}");
    assert!(!page.contains("\"'&<"), "{page}");
    assert!(
        page.contains("&lt;img src=x onerror=alert(1)&gt;&quot;&#x27;&amp;"),
        "{page}"
    );
}

#[test]
fn a_backend_row_shows_state_since_check_connections_bytes_and_its_action() {
    let now = T0 + 130;
    let up = backend(
        "mst0",
        "up",
        Some(CheckStatus {
            passed: true,
            latency_us: 1250,
            at: T0 + 128,
        }),
    );
    let drained = backend(
        "mst1",
        "draining",
        Some(CheckStatus {
            passed: false,
            latency_us: 200_000,
            at: T0 + 129,
        }),
    );
    let off = backend("mst2", "off", None);
    let html = backends(&[up, drained, off], now);
    let rows: Vec<&str> = html.split("<tr data-backend=").skip(1).collect();
    assert_eq!(
        rows.len(),
        2,
        "a frontend without a listener is left out: {html}"
    );
    assert!(rows[0].starts_with("\"api/mst0\""), "{html}");
    assert!(
        rows[0].contains("<td class=\"state up\">up</td><td>08:01:40 (30s ago)</td>"),
        "{}",
        rows[0]
    );
    assert!(
        rows[0].contains("<span class=\"passed\">passed</span> in 1.2 ms, 2s ago"),
        "{}",
        rows[0]
    );
    assert!(
        rows[0].contains(
            "<td class=\"num\">3</td><td class=\"num\">42</td><td class=\"num\">1.5 KiB</td><td class=\"num\">5.0 MiB</td>"
        ),
        "{}",
        rows[0]
    );
    assert!(rows[0].contains("data-action=\"drain\" data-node=\"mst0\""));
    assert!(rows[1].contains("<td class=\"state draining\">draining</td>"));
    assert!(rows[1].contains("<span class=\"failed\">failed</span> in 200.0 ms, 1s ago"));
    assert!(
        rows[1].contains("data-action=\"undrain\" data-node=\"mst1\""),
        "a drained backend offers undrain: {}",
        rows[1]
    );
    assert!(!rows[1].contains("data-action=\"drain\""), "{}", rows[1]);
    assert_eq!(
        backends(&[backend("x", "off", None)], now),
        "<p>No frontend listens.</p>"
    );
}

#[test]
fn the_page_carries_its_parts_the_cluster_reason_and_the_action_token() {
    let s = status(
        vec![node("mst0", "master", vec![at("kernel-initrd", 0)])],
        vec![backend("mst0", "up", None)],
        vec![at("bootstrapping", 0)],
    );
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 75);
    let page = render(&s, now, Some("abc123"), PageOf::ONLY);
    assert!(page.contains("data-action=\"abc123\""));
    for (id, html) in fragments(&s, now) {
        assert!(
            page.contains(&format!("<div id=\"{id}\">{html}</div>")),
            "the page starts as the stream's parts: {id}"
        );
    }
    assert!(
        page.contains("cluster <b id=\"cluster\">bootstrapping</b> for 1m 15s"),
        "{page}"
    );
    assert!(
        page.contains("waiting for bootstrap complete (kube-system/bootstrap)"),
        "{page}"
    );
    assert!(
        page.contains("<td class=\"waiting\" data-node=\"mst0\">its ignition fetch</td>"),
        "{page}"
    );
    assert!(page.contains("API: https://10.0.0.1:9443/ and local socket /var/lib/okd/api.sock &middot; admin socket: /var/lib/okd/admin.sock"));
    assert!(page.contains("data-action=\"reinstall\" data-node=\"mst0\""));
    // The stream the script follows asks for the page's parts; nothing is fetched from elsewhere.
    assert!(page.contains("data-api=\"/api/v1\""));
    assert!(page.contains("new EventSource(api + '/events?page')"));
    assert!(
        !page.contains("http://") && !page.contains("src="),
        "no external asset"
    );
    let local = render(&s, now, None, PageOf::ONLY);
    assert!(local.contains("data-action=\"\""));
    // One cluster of several: its page follows and acts on its own API paths.
    let of = PageOf {
        api: "/api/v1/clusters/test",
        cluster: Some("test"),
    };
    let one = render(&s, now, None, of);
    assert!(one.contains("data-api=\"/api/v1/clusters/test\""), "{one}");
    assert!(one.contains("<title>okd-appliance: cluster test</title>"));
    assert!(one.contains("<a href=\"/\">every cluster</a>"));
}

#[test]
fn several_clusters_get_a_section_each_linking_to_their_page() {
    let okd = status(
        vec![node("mst0", "master", vec![at("ignition", 0)])],
        vec![backend("mst0", "up", None), backend("bst", "down", None)],
        vec![at("bootstrapping", 0)],
    );
    let test = status(
        vec![node("mst0", "master", vec![at("ready", 0)])],
        vec![],
        vec![],
    );
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 75);
    let page = index(&[("okd".into(), okd), ("test".into(), test)], now);
    assert!(
        page.contains("<h1>okd-appliance: 2 clusters</h1>"),
        "{page}"
    );
    for id in ["okd", "test"] {
        assert!(
            page.contains(&format!(
                "<section id=\"cluster-{id}\"><h2><a href=\"/clusters/{id}/\">cluster {id}</a></h2>"
            )),
            "{page}"
        );
    }
    assert!(page.contains("load balancer: 1 of 2 backends up"), "{page}");
    assert!(
        page.contains("<td class=\"phase ready\">ready</td>"),
        "{page}"
    );
    // No actions here: they are on each cluster's page, with its script.
    assert!(!page.contains("<button"), "{page}");
}

#[test]
fn durations_read_as_on_a_console() {
    assert_eq!(short(0), "0s");
    assert_eq!(short(59), "59s");
    assert_eq!(short(61), "1m 1s");
    assert_eq!(short(3600 * 2 + 120), "2h 2m");
    assert_eq!(bytes(0), "0 B");
    assert_eq!(bytes(1023), "1023 B");
    assert_eq!(bytes(1024 * 1024 * 3 / 2), "1.5 MiB");
}
