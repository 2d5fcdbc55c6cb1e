//! The status page (`GET /` on the HTTP API): one server-rendered HTML page with the cluster
//! (its phase and what it waits for), an install timeline (server-side SVG: one row per node,
//! its phases as bars over time, the cluster's milestones as lines across), each node's phase
//! and what it waits for, the load balancer's backends (state, last check, connections, bytes)
//! with their actions, and the recent events.
//!
//! Live without a reload and without another request: the page follows the API's event stream
//! with `?page`, which carries, besides each journal event, a `page` event with the page's
//! parts rendered again here whenever they changed ([`fragments`]); a few lines of inline script
//! swap them in. Actions (drain, undrain, reinstall) ask for confirmation on the page and post
//! with the page's action token in a header ([`ACTION_HEADER`]): a cookie alone never acts.
//! No external asset: the page works offline on the cluster network.
//!
//! Architecture invariant: renders a [`Status`]; reads nothing itself. Every value put into
//! the HTML or SVG is escaped (`esc`): names and reasons come from the config and the network.

mod timeline;

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::status::{BackendStatus, NodeStatus, Status};

/// The header a page's action carries its action token in (see `api.rs`).
pub const ACTION_HEADER: &str = "x-okd-appliance-action";

/// Text for HTML and SVG, in content and in quoted attributes (`&`, `<`, `>`, `"` and `'`
/// escaped).
pub(crate) fn esc(s: &str) -> String {
    html_escape::encode_quoted_attribute(s).into_owned()
}

/// `HH:MM:SS` (UTC) of a time in seconds since the epoch.
pub(crate) fn clock(at: u64) -> String {
    humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(at))
        .to_string()
        .get(11..19)
        .unwrap_or_default()
        .to_owned()
}

fn clock_opt(at: Option<u64>) -> String {
    at.map(clock).unwrap_or_default()
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `1h 2m`, `3m 4s`, `5s`: a duration as people read it on a console.
pub(crate) fn short(d: u64) -> String {
    match d {
        0..60 => format!("{d}s"),
        60..3600 => format!("{}m {}s", d / 60, d % 60),
        _ => format!("{}h {}m", d / 3600, d % 3600 / 60),
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left}\
th{background:#f4f4f4}.up,.ready,.installed,.passed{color:#087f23}.down,.failed{color:#b00020}.draining{color:#a86400}\
.waiting{color:#555;font-style:italic}.problem{color:#a00;font-style:normal}.num{text-align:right;font-variant-numeric:tabular-nums}\
button{font:inherit;padding:.1em .6em;cursor:pointer}\
#confirm{position:sticky;top:0;background:#fff8e1;border:1px solid #a86400;padding:.6em 1em;margin:.5em 0}\
#result{font-family:ui-monospace,monospace}\
svg text{font:11px system-ui,sans-serif;fill:#222}svg .axis{stroke:#bbb}svg .milestone{stroke:#6a1b9a;stroke-dasharray:4 3}\
svg text.milestone{fill:#6a1b9a;stroke:none}svg .now{stroke:#b00020;stroke-dasharray:2 2}\
.p-created{fill:#cfd8dc;background:#cfd8dc}.p-powered-on{fill:#90a4ae;background:#90a4ae}\
.p-dhcp{fill:#81d4fa;background:#81d4fa}.p-script{fill:#4fc3f7;background:#4fc3f7}\
.p-kernel-initrd{fill:#0288d1;background:#0288d1}.p-ignition{fill:#ffb74d;background:#ffb74d}\
.p-installed{fill:#aed581;background:#aed581}.p-joined{fill:#66bb6a;background:#66bb6a}\
.p-ready{fill:#2e7d32;background:#2e7d32}.legend span{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 1em;vertical-align:middle}\
ol#events{font-family:ui-monospace,monospace;font-size:12px;max-height:24em;overflow:auto}\
ol#events .earlier{color:#777}ol#events .restarted{color:#6a1b9a;font-weight:bold}";

/// Follows the stream: each journal event is listed (and a node's phase lands in its row at
/// once); each `page` event replaces the parts it carries. Actions: a button names its
/// action, node and confirmation text; nothing is posted before "yes". On TCP the stream's
/// token travels in the page's cookie (an EventSource can't set headers); an action also
/// carries the page's action token in a header, which no other site can read or set.
const SCRIPT: &str = r#"
const list = document.getElementById('events');
// The cluster's API: `/api/v1`, or `/api/v1/clusters/ID` on an appliance serving several.
const api = document.body.dataset.api;
const stream = new EventSource(api + '/events?page');
let seen = 0, updates = 0, pending = null;
// The connection, shown: live, or lost since when. Back after a loss, the page loads again
// (the appliance may have restarted: a new action token, and what happened meanwhile).
const conn = document.getElementById('connection');
let lost = null;
const show = (state, text) => {
  conn.textContent = text; conn.className = state === 'live' ? 'up' : 'down';
  document.body.dataset.connection = state;
};
const back = () => fetch(api + '/status', { credentials: 'same-origin' })
  .then((r) => { if (r.ok) location.reload(); else setTimeout(back, 3000); })
  .catch(() => setTimeout(back, 3000));
stream.onopen = () => {
  if (lost) { location.reload(); return; }
  show('live', 'live: following the appliance');
};
stream.onerror = () => {
  if (!lost) lost = new Date();
  show('lost', 'disconnected since ' + lost.toISOString().slice(11, 19) +
    ': the appliance does not answer; what is shown may be out of date (retrying)');
  // A stream that gave up is not retried by the browser: ask until the appliance answers.
  if (stream.readyState === EventSource.CLOSED) { stream.close(); setTimeout(back, 3000); }
};
stream.onmessage = (m) => {
  const e = JSON.parse(m.data);
  const item = document.createElement('li');
  item.textContent = new Date(e.at * 1000).toISOString().slice(11, 19) + ' ' + e.text;
  if (e.earlier) item.className = 'earlier';
  list.prepend(item);
  while (list.children.length > 100) list.lastChild.remove();
  if (e.node && e.phase) {
    const cell = document.querySelector('td.phase[data-node="' + CSS.escape(e.node) + '"]');
    if (cell) { cell.textContent = e.phase; cell.className = 'phase ' + e.phase; }
  }
  document.body.dataset.events = ++seen;
};
// Where this run of the appliance began: the events below it came before (kept on disk).
stream.addEventListener('restarted', (m) => {
  const item = document.createElement('li');
  item.className = 'restarted';
  item.textContent = new Date(JSON.parse(m.data).at * 1000).toISOString().slice(11, 19) +
    ' the appliance started; the events below are from before';
  list.prepend(item);
});
stream.addEventListener('page', (m) => {
  const parts = JSON.parse(m.data);
  for (const id in parts) {
    const el = document.getElementById(id);
    if (el) el.innerHTML = parts[id];
  }
  document.body.dataset.updates = ++updates;
});
const confirmBox = document.getElementById('confirm');
const result = document.getElementById('result');
document.addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-action]');
  if (!b) return;
  pending = { action: b.dataset.action, node: b.dataset.node };
  document.getElementById('confirm-text').textContent = b.dataset.confirm;
  confirmBox.hidden = false;
  document.getElementById('confirm-yes').focus();
});
document.getElementById('confirm-no').onclick = () => { pending = null; confirmBox.hidden = true; };
document.getElementById('confirm-yes').onclick = async () => {
  const p = pending;
  pending = null;
  confirmBox.hidden = true;
  if (!p) return;
  const headers = {};
  if (document.body.dataset.action) headers['X-Okd-Appliance-Action'] = document.body.dataset.action;
  try {
    const r = await fetch(api + '/nodes/' + encodeURIComponent(p.node) + '/' + p.action,
      { method: 'POST', headers, credentials: 'same-origin' });
    let text = (r.ok ? '' : 'refused (' + r.status + '): ') + (await r.text()).trim();
    // The action token is made at the appliance's start: a page older than that must reload.
    if (r.status === 401) text += ' (reload the page: the appliance restarted since it was loaded)';
    result.textContent = text;
  } catch (e) {
    result.textContent = 'failed: ' + e;
  }
  result.dataset.done = p.action + ' ' + p.node;
};
"#;

/// Where a cluster's page is and what it is called: `/api/v1` and no name for the only
/// cluster; `/api/v1/clusters/ID` and the id on an appliance serving several.
#[derive(Debug, Clone, Copy)]
pub struct PageOf<'a> {
    pub api: &'a str,
    pub cluster: Option<&'a str>,
}

impl PageOf<'_> {
    /// The only cluster's page, at `/`.
    pub const ONLY: PageOf<'static> = PageOf {
        api: "/api/v1",
        cluster: None,
    };
}

/// The whole page at `now`; `action_token`: what the page's actions carry (none on the local
/// socket, which needs none).
pub fn render(s: &Status, now: SystemTime, action_token: Option<&str>, of: PageOf<'_>) -> String {
    let mut h = String::with_capacity(32 * 1024);
    let title = match of.cluster {
        Some(id) => format!("okd-appliance: cluster {}", esc(id)),
        None => "okd-appliance".to_owned(),
    };
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title>\
         <style>{STYLE}</style></head><body data-events=\"0\" data-updates=\"0\" data-action=\"{}\" \
         data-api=\"{}\"><h1>{title}</h1>",
        esc(action_token.unwrap_or_default()),
        esc(of.api)
    );
    if of.cluster.is_some() {
        h.push_str("<p><a href=\"/\">every cluster</a></p>");
    }
    let parts = fragments(s, now);
    let part = |id: &str| {
        parts
            .iter()
            .find(|(k, _)| *k == id)
            .map_or("", |(_, v)| v.as_str())
    };
    let _ = write!(
        h,
        "<p id=\"connection\" class=\"waiting\">connecting</p><div id=\"summary\">{}</div>\
         <div id=\"confirm\" hidden><span id=\"confirm-text\"></span> \
         <button id=\"confirm-yes\">yes</button> <button id=\"confirm-no\">cancel</button></div>\
         <p id=\"result\"></p>\
         <h2>Install timeline</h2><div id=\"timeline\">{}</div>{}\
         <h2>Nodes</h2><div id=\"nodes\">{}</div>\
         <h2>Load balancer</h2><div id=\"backends\">{}</div>\
         <h2>Events</h2><ol id=\"events\" reversed></ol><script>{SCRIPT}</script></body></html>",
        part("summary"),
        part("timeline"),
        timeline::legend(),
        part("nodes"),
        part("backends"),
    );
    h
}

/// The page of an appliance serving several clusters: one section per cluster (its summary,
/// each node's phase, its backends' states), each linking to the cluster's own page, which
/// follows the install live and has the actions. It reloads itself every 10 s.
pub fn index(clusters: &[(String, Status)], now: SystemTime) -> String {
    let mut h = String::with_capacity(32 * 1024);
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>okd-appliance</title>\
         <meta http-equiv=\"refresh\" content=\"10\"><style>{STYLE}</style></head><body>\
         <h1>okd-appliance: {} clusters</h1>",
        clusters.len()
    );
    let at = secs(now);
    for (id, s) in clusters {
        let id = esc(id);
        let _ = write!(
            h,
            "<section id=\"cluster-{id}\"><h2><a href=\"/clusters/{id}/\">cluster {id}</a></h2>\
             {}<table><tr><th>node</th><th>role</th><th>address</th><th>phase</th></tr>",
            summary(s, at),
        );
        for n in &s.nodes {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"phase {}\">{}</td></tr>",
                esc(&n.name),
                esc(&n.role),
                esc(&n.ip),
                esc(&n.phase),
                esc(&n.phase)
            );
        }
        let up = s.backends.iter().filter(|b| b.state == "up").count();
        let _ = write!(
            h,
            "</table><p>load balancer: {up} of {} backends up</p></section>",
            s.backends.len()
        );
    }
    h.push_str("</body></html>");
    h
}

/// The page's live parts by element id, as the page shows them at `now`: what the stream's
/// `page` event carries.
pub fn fragments(s: &Status, now: SystemTime) -> Vec<(&'static str, String)> {
    let now = secs(now);
    vec![
        ("summary", summary(s, now)),
        ("timeline", timeline::svg(s, now)),
        ("nodes", nodes(&s.nodes, now)),
        ("backends", backends(&s.backends, now)),
    ]
}

fn summary(s: &Status, now: u64) -> String {
    let a = &s.appliance;
    let mut h = String::new();
    let _ = write!(
        h,
        "<p>version {} &middot; up {} &middot; plan {} &middot; cluster <b id=\"cluster\">{}</b>",
        esc(&a.version),
        short(a.uptime_secs),
        a.plan_serial,
        esc(a.cluster_phase.as_deref().unwrap_or("not started")),
    );
    if let Some(since) = a.cluster_steps.last().map(|s| s.at) {
        let _ = write!(h, " for {}", short(now.saturating_sub(since)));
    }
    if let Some(why) = &a.cluster_waiting {
        let _ = write!(
            h,
            ", <span class=\"waiting\" id=\"cluster-waiting\">waiting for {}</span>",
            esc(why)
        );
    }
    if let Some(ha) = &a.ha {
        let _ = write!(
            h,
            " &middot; pair: {} is <b>{}</b>, replication {}",
            esc(&ha.host),
            if ha.active { "active" } else { "standby" },
            if ha.replication_connected {
                "connected".to_owned()
            } else if ha.replication_waiting.is_empty() {
                "not connected".to_owned()
            } else {
                format!(
                    "not connected for {}",
                    esc(&ha.replication_waiting.join(", "))
                )
            }
        );
    }
    let _ = write!(
        h,
        " &middot; updated <span id=\"updated\">{}</span></p>",
        clock(now)
    );
    if let Some(e) = &a.endpoints {
        let _ = write!(
            h,
            "<p class=\"waiting\">API: {}local socket {} &middot; admin socket: {}</p>",
            e.api_url
                .as_deref()
                .map(|u| format!("{} and ", esc(u)))
                .unwrap_or_default(),
            esc(&e.api_socket),
            esc(&e.admin_socket),
        );
    }
    if !a.faults.is_empty() {
        h.push_str("<ul class=\"faults\" id=\"faults\">");
        for f in &a.faults {
            let _ = write!(
                h,
                "<li>{}</li>",
                esc(&crate::operator::status::fault_line(f, now))
            );
        }
        h.push_str("</ul>");
    }
    h
}

fn button(action: &str, node: &str, confirm: &str) -> String {
    format!(
        "<button data-action=\"{action}\" data-node=\"{}\" data-confirm=\"{}\">{action}</button>",
        esc(node),
        esc(confirm)
    )
}

/// The nodes' table: phase and for how long, what each waits for, when each step happened,
/// and the reinstall action.
fn nodes(nodes: &[NodeStatus], now: u64) -> String {
    let mut h = String::from(
        "<table><tr><th>node</th><th>role</th><th>address</th><th>phase</th><th>for</th>\
         <th>waiting for</th><th>dhcp</th><th>script</th><th>kernel</th><th>ignition</th>\
         <th>installed</th><th></th></tr>",
    );
    for n in nodes {
        let name = esc(&n.name);
        let problem = n
            .problem
            .as_deref()
            .map(|p| format!("<div class=\"problem\">{}</div>", esc(p)))
            .unwrap_or_default();
        let _ = write!(
            h,
            "<tr id=\"node-{name}\"><td>{name}</td><td>{}</td><td>{}</td>\
             <td class=\"phase {phase}\" data-node=\"{name}\">{phase}</td><td class=\"num\">{}</td>\
             <td class=\"waiting\" data-node=\"{name}\">{}{problem}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&n.role),
            esc(&n.ip),
            n.steps
                .last()
                .map(|s| short(now.saturating_sub(s.at)))
                .unwrap_or_default(),
            esc(n.waiting_for.as_deref().unwrap_or_default()),
            clock_opt(n.dhcp),
            clock_opt(n.script),
            clock_opt(n.kernel),
            clock_opt(n.ignition),
            clock_opt(n.installed),
            button(
                "reinstall",
                &n.name,
                &format!(
                    "Reinstall {}? Its install markers are removed: its next network boot installs it again, over its disk.",
                    n.name
                )
            ),
            phase = esc(&n.phase),
        );
    }
    h.push_str("</table>");
    h
}

/// The backends' table (frontends without a listener left out): state and since when, the last
/// health check, connections and bytes, and drain or undrain.
fn backends(backends: &[BackendStatus], now: u64) -> String {
    let served: Vec<&BackendStatus> = backends.iter().filter(|b| b.state != "off").collect();
    if served.is_empty() {
        return "<p>No frontend listens.</p>".to_owned();
    }
    let mut h = String::from(
        "<table><tr><th>frontend</th><th>backend</th><th>address</th><th>state</th><th>since</th>\
         <th>last check</th><th>open</th><th>total</th><th>to backend</th><th>to client</th><th></th></tr>",
    );
    for b in served {
        let check = match &b.check {
            None => "not yet".to_owned(),
            Some(c) => format!(
                "<span class=\"{0}\">{0}</span> in {1:.1} ms, {2} ago",
                if c.passed { "passed" } else { "failed" },
                c.latency_us as f64 / 1000.0,
                short(now.saturating_sub(c.at))
            ),
        };
        let action = if b.state == "draining" {
            button(
                "undrain",
                &b.node,
                &format!("Put {} back into rotation in every pool?", b.node),
            )
        } else {
            button(
                "drain",
                &b.node,
                &format!(
                    "Drain {} in every pool? New connections go to the other backends; open ones are closed at the drain timeout.",
                    b.node
                ),
            )
        };
        let _ = write!(
            h,
            "<tr data-backend=\"{frontend}/{node}\"><td>{frontend}</td><td>{node}</td><td>{}</td>\
             <td class=\"state {state}\">{state}</td><td>{}</td><td class=\"check\">{check}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td>{action}</td></tr>",
            esc(&b.addr.to_string()),
            b.since
                .map(|t| format!("{} ({} ago)", clock(t), short(now.saturating_sub(t))))
                .unwrap_or_default(),
            b.active,
            b.connections,
            bytes(b.bytes_to_backend),
            bytes(b.bytes_to_client),
            frontend = esc(&b.frontend),
            node = esc(&b.node),
            state = esc(&b.state),
        );
    }
    h.push_str("</table>");
    h
}

#[cfg(test)]
mod tests;
