//! The status page (`GET /` on the HTTP API): one server-rendered HTML page with the cluster,
//! each node's install timeline, the load balancer's backends and the recent events, kept live
//! by a few lines of script on the API's event stream (no framework, no other request).
//!
//! Architecture invariant: renders a [`Status`]; reads nothing itself.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::status::Status;

/// Text for HTML (the values are validated names and addresses; escaped all the same).
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn clock(at: Option<u64>) -> String {
    at.map_or_else(
        || "".to_owned(),
        |t| {
            humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(t))
                .to_string()
                .get(11..19)
                .unwrap_or_default()
                .to_owned()
        },
    )
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left}\
th{background:#f4f4f4}.up,.ready,.installed{color:#087f23}.down{color:#b00020}.draining{color:#a86400}\
ol#events{font-family:ui-monospace,monospace;font-size:12px;max-height:24em;overflow:auto}";

/// Updates the page from the event stream: each event is listed, a node's phase change lands in
/// its row. On TCP the token travels in the page's cookie (an EventSource can't set headers).
const SCRIPT: &str = r#"
const list = document.getElementById('events');
const stream = new EventSource('/api/v1/events');
let seen = 0;
stream.onmessage = (m) => {
  const e = JSON.parse(m.data);
  const item = document.createElement('li');
  item.textContent = new Date(e.at * 1000).toISOString().slice(11, 19) + ' ' + e.text;
  list.prepend(item);
  while (list.children.length > 100) list.lastChild.remove();
  if (e.node && e.phase) {
    const cell = document.querySelector('td.phase[data-node="' + CSS.escape(e.node) + '"]');
    if (cell) { cell.textContent = e.phase; cell.className = 'phase ' + e.phase; }
  }
  document.body.dataset.events = ++seen;
};
"#;

pub fn render(s: &Status, now: SystemTime) -> String {
    let a = &s.appliance;
    let mut h = String::with_capacity(16 * 1024);
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>okd-appliance</title>\
         <style>{STYLE}</style></head><body data-events=\"0\"><h1>okd-appliance</h1>\
         <p>version {} &middot; up {} &middot; plan {} &middot; cluster <b id=\"cluster\">{}</b>",
        esc(&a.version),
        humantime::format_duration(Duration::from_secs(a.uptime_secs)),
        a.plan_serial,
        esc(a.cluster_phase.as_deref().unwrap_or("not started")),
    );
    if let Some(ha) = &a.ha {
        let _ = write!(
            h,
            " &middot; pair: {} is <b>{}</b>, replication {}",
            esc(&ha.host),
            if ha.active { "active" } else { "standby" },
            if ha.replication_connected {
                "connected"
            } else {
                "not connected"
            }
        );
    }
    let _ = write!(
        h,
        " &middot; page rendered {}</p><h2>Nodes</h2><table><tr><th>node</th><th>role</th>\
         <th>address</th><th>phase</th><th>dhcp</th><th>script</th><th>kernel</th><th>ignition</th>\
         <th>installed</th></tr>",
        clock(
            now.duration_since(SystemTime::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs())
        )
    );
    for n in &s.nodes {
        let _ = write!(
            h,
            "<tr id=\"node-{name}\"><td>{name}</td><td>{role}</td><td>{ip}</td>\
             <td class=\"phase {phase}\" data-node=\"{name}\">{phase}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            clock(n.dhcp),
            clock(n.script),
            clock(n.kernel),
            clock(n.ignition),
            clock(n.installed),
            name = esc(&n.name),
            role = esc(&n.role),
            ip = esc(&n.ip),
            phase = esc(&n.phase),
        );
    }
    h.push_str(
        "</table><h2>Load balancer</h2><table><tr><th>frontend</th><th>backend</th>\
                <th>address</th><th>state</th><th>active</th><th>connections</th></tr>",
    );
    for b in s.backends.iter().filter(|b| b.state != "off") {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{state}\">{state}</td><td>{}</td><td>{}</td></tr>",
            esc(&b.frontend),
            esc(&b.node),
            b.addr,
            b.active,
            b.connections,
            state = esc(&b.state),
        );
    }
    let _ = write!(
        h,
        "</table><h2>Events</h2><ol id=\"events\" reversed></ol><script>{SCRIPT}</script></body></html>"
    );
    h
}
