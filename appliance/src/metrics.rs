//! Prometheus metrics (prometheus-client), served at `/metrics` by the boot server and the API:
//! in the Prometheus text format 0.0.4 by default, in OpenMetrics 1.0.0 when `Accept` asks.
//!
//! Counted where they happen: DNS answers by rcode and type, forwarder cache hits and misses,
//! the upstream latency; DHCP messages by type, leases in use, free pool addresses; HTTP
//! requests by route and status, bytes sent. Read at scrape time from what already keeps them:
//! the load balancer's per-backend counters and health, and each node's install phase.
//!
//! Architecture invariant: a leaf the services import. The DNS answer path stays free of
//! allocations and locks: its counters are resolved once, at start, into a table indexed by
//! rcode and type, and counting is one atomic add.

use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The query types counted by name; the rest is `other`.
const QTYPES: [(u16, &str); 9] = [
    (1, "A"),
    (28, "AAAA"),
    (12, "PTR"),
    (33, "SRV"),
    (6, "SOA"),
    (2, "NS"),
    (16, "TXT"),
    (255, "ANY"),
    (252, "AXFR"),
];
const RCODES: [&str; 6] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED",
];
const DHCP_TYPES: [&str; 9] = [
    "discover", "offer", "request", "decline", "ack", "nak", "release", "inform", "other",
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DnsLabels {
    rcode: String,
    qtype: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    r#type: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub route: &'static str,
    pub status: u16,
}

/// A connection the shared frontend's router passed to a cluster.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoutedLabels {
    port: u16,
    cluster: String,
}

/// A connection the shared frontend's router passed to no cluster, and why.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnroutedLabels {
    port: u16,
    reason: &'static str,
}

/// What is read at scrape time, attached once the appliance has it.
pub trait Sources: Send + Sync + std::fmt::Debug {
    /// Each backend: frontend, node, address, up, draining, active and total connections,
    /// bytes to the backend and to the client.
    fn backends(&self) -> Vec<BackendSample>;
    /// Each node's install phase.
    fn phases(&self) -> Vec<PhaseSample>;
}

#[derive(Debug, Clone)]
pub struct BackendSample {
    /// The cluster, on a host of several (its series get a `cluster` label); `None` alone.
    pub cluster: Option<String>,
    pub frontend: &'static str,
    pub node: String,
    pub addr: String,
    pub up: bool,
    pub draining: bool,
    pub active: u64,
    pub connections: u64,
    pub bytes_to_backend: u64,
    pub bytes_to_client: u64,
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    dns_answers: Vec<Counter>,
    pub dns_cache_hits: Counter,
    pub dns_cache_misses: Counter,
    pub dns_upstream_seconds: Histogram,
    dhcp_messages: Vec<Counter>,
    pub dhcp_leases: Gauge,
    pub dhcp_pool_free: Gauge,
    http_requests: Family<HttpLabels, Counter>,
    pub http_bytes: Counter,
    /// How long each load-balancer health check took (to its verdict or its timeout).
    pub lb_check_seconds: Histogram,
    /// Status pages (and other clients) following the event stream now.
    pub api_event_streams: Gauge,
    lb_routed: Family<RoutedLabels, Counter>,
    lb_unrouted: Family<UnroutedLabels, Counter>,
    sources: Arc<OnceLock<Box<dyn Sources>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("okd_appliance");
        let answers = Family::<DnsLabels, Counter>::default();
        let mut dns_answers = Vec::with_capacity((RCODES.len() + 1) * (QTYPES.len() + 1));
        for rcode in RCODES.iter().copied().chain(["other"]) {
            for qtype in QTYPES.iter().map(|(_, n)| *n).chain(["other"]) {
                let labels = DnsLabels {
                    rcode: rcode.into(),
                    qtype: qtype.into(),
                };
                dns_answers.push(answers.get_or_create(&labels).clone());
            }
        }
        registry.register(
            "dns_answers",
            "DNS answers sent, by rcode and query type",
            answers,
        );
        let dns_cache_hits = Counter::default();
        let dns_cache_misses = Counter::default();
        registry.register(
            "dns_forward_cache_hits",
            "Forwarded queries answered from the cache",
            dns_cache_hits.clone(),
        );
        registry.register(
            "dns_forward_cache_misses",
            "Forwarded queries asked upstream",
            dns_cache_misses.clone(),
        );
        let dns_upstream_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        registry.register(
            "dns_upstream_seconds",
            "Time to an upstream resolver's answer (or the forwarder's failure)",
            dns_upstream_seconds.clone(),
        );
        let messages = Family::<TypeLabel, Counter>::default();
        let dhcp_messages = DHCP_TYPES
            .iter()
            .map(|t| {
                messages
                    .get_or_create(&TypeLabel {
                        r#type: (*t).into(),
                    })
                    .clone()
            })
            .collect();
        registry.register("dhcp_messages", "DHCP messages received, by type", messages);
        let dhcp_leases = Gauge::default();
        let dhcp_pool_free = Gauge::default();
        registry.register("dhcp_leases", "Live dynamic leases", dhcp_leases.clone());
        registry.register(
            "dhcp_pool_free",
            "Pool addresses without a live lease",
            dhcp_pool_free.clone(),
        );
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "http_requests",
            "Boot server requests, by route and status",
            http_requests.clone(),
        );
        let http_bytes = Counter::default();
        registry.register(
            "http_response_bytes",
            "Bytes of the boot server's response bodies (as announced)",
            http_bytes.clone(),
        );
        let lb_check_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        registry.register(
            "lb_health_check_seconds",
            "Load-balancer health checks, time to their verdict (or their timeout)",
            lb_check_seconds.clone(),
        );
        let api_event_streams = Gauge::default();
        registry.register(
            "api_event_streams",
            "Clients following the API's event stream",
            api_event_streams.clone(),
        );
        let lb_routed = Family::<RoutedLabels, Counter>::default();
        registry.register(
            "lb_routed",
            "Connections to the shared frontend passed to a cluster by the name they asked for",
            lb_routed.clone(),
        );
        let lb_unrouted = Family::<UnroutedLabels, Counter>::default();
        registry.register(
            "lb_unrouted",
            "Connections to the shared frontend reset: no name, no cluster's name, not the port's protocol, or nothing in time",
            lb_unrouted.clone(),
        );
        let sources: Arc<OnceLock<Box<dyn Sources>>> = Arc::default();
        registry.register_collector(Box::new(Sampled(Arc::clone(&sources))));
        Metrics {
            registry,
            dns_answers,
            dns_cache_hits,
            dns_cache_misses,
            dns_upstream_seconds,
            dhcp_messages,
            dhcp_leases,
            dhcp_pool_free,
            http_requests,
            http_bytes,
            lb_check_seconds,
            api_event_streams,
            lb_routed,
            lb_unrouted,
            sources,
        }
    }

    /// Counts one DNS answer with `rcode` to a question of `qtype`. No allocation, no lock.
    pub fn dns_answer(&self, rcode: u8, qtype: u16) {
        let rcode = usize::from(rcode & 0x0f).min(RCODES.len());
        let t = QTYPES
            .iter()
            .position(|(code, _)| *code == qtype)
            .unwrap_or(QTYPES.len());
        self.dns_answers[rcode * (QTYPES.len() + 1) + t].inc();
    }

    /// Counts one DHCP message of `kind` (1 DISCOVER .. 8 INFORM, RFC 2132).
    pub fn dhcp_message(&self, kind: u8) {
        let i = usize::from(kind).wrapping_sub(1).min(DHCP_TYPES.len() - 1);
        self.dhcp_messages[i].inc();
    }

    pub fn http_request(&self, route: &'static str, status: u16, bytes: u64) {
        self.http_requests
            .get_or_create(&HttpLabels { route, status })
            .inc();
        self.http_bytes.inc_by(bytes);
    }

    /// Counts a connection to the shared frontend's `port` passed to `cluster`.
    pub fn lb_routed(&self, port: u16, cluster: &str) {
        self.lb_routed
            .get_or_create(&RoutedLabels {
                port,
                cluster: cluster.to_owned(),
            })
            .inc();
    }

    /// Counts a connection to the shared frontend's `port` reset for `reason`.
    pub fn lb_unrouted(&self, port: u16, reason: &'static str) {
        self.lb_unrouted
            .get_or_create(&UnroutedLabels { port, reason })
            .inc();
    }

    /// Attaches what is read at scrape time (once; later calls are ignored).
    pub fn attach(&self, sources: Box<dyn Sources>) {
        let _ = self.sources.set(sources);
    }

    /// The exposition in `format`.
    pub fn encode(&self, format: Format) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!("metrics: {e}");
        }
        match format {
            Format::OpenMetrics | Format::OpenMetrics001 => out,
            Format::Text => openmetrics_to_text(&out),
        }
    }

    /// The content type and body `GET /metrics` answers a request with this `Accept` header.
    pub fn exposition(&self, accept: Option<&str>) -> (&'static str, String) {
        let format = Format::negotiate(accept);
        (format.content_type(), self.encode(format))
    }

    /// [`Metrics::exposition`] as cluster `cluster`'s boot server answers it on a host of
    /// several: the host's series and `cluster`'s own, never another cluster's (its node names,
    /// addresses and phases are not this cluster's nodes' business).
    pub fn exposition_of(&self, accept: Option<&str>, cluster: &str) -> (&'static str, String) {
        let (content_type, body) = self.exposition(accept);
        let own = format!("cluster=\"{cluster}\"");
        let mut out = String::with_capacity(body.len());
        for line in body.split_inclusive('\n') {
            let sample = !line.starts_with('#');
            if sample && line.contains("cluster=\"") && !line.contains(&own) {
                continue;
            }
            out.push_str(line);
        }
        (content_type, out)
    }
}

/// The exposition formats `/metrics` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4: what a client gets unless it asks for OpenMetrics.
    Text,
    /// OpenMetrics 1.0.0, what prometheus-client writes.
    OpenMetrics,
    /// OpenMetrics as Prometheus 2.5 to 2.4x ask for it (`version=0.0.1`): the same text, which
    /// the 1.0.0 release did not change, under the version asked for.
    OpenMetrics001,
}

impl Format {
    /// The format an `Accept` header asks for, as Prometheus' own Go client chooses (its
    /// `expfmt.Negotiate`): the media ranges by quality, the first that is OpenMetrics (version
    /// 1.0.0, 0.0.1 or none) or `text/plain` (version 0.0.4 or none); the text format when none
    /// is (`*/*`, protobuf only, no header): never 406.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let mut ranges: Vec<(f32, Option<Format>)> = accept
            .split(',')
            .map(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or("").to_ascii_lowercase();
                let (mut version, mut q) = (None, 1.0f32);
                for param in parts {
                    let Some((key, value)) = param.split_once('=') else {
                        continue;
                    };
                    let value = value.trim().trim_matches('"');
                    match key.trim().to_ascii_lowercase().as_str() {
                        "version" => version = Some(value.to_owned()),
                        "q" => q = value.parse().unwrap_or(0.0),
                        _ => {}
                    }
                }
                let format = match (media.as_str(), version.as_deref()) {
                    ("application/openmetrics-text", None | Some("1.0.0")) => {
                        Some(Format::OpenMetrics)
                    }
                    ("application/openmetrics-text", Some("0.0.1")) => Some(Format::OpenMetrics001),
                    ("text/plain", None | Some("0.0.4")) => Some(Format::Text),
                    _ => None,
                };
                (q, format)
            })
            .collect();
        // Stable: of equal quality, the one listed first.
        ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
        ranges
            .into_iter()
            .filter(|(q, _)| *q > 0.0)
            .find_map(|(_, format)| format)
            .unwrap_or(Format::Text)
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::OpenMetrics001 => "application/openmetrics-text; version=0.0.1; charset=utf-8",
        }
    }
}

/// The Prometheus text format 0.0.4 of an OpenMetrics text exposition, line by line: a counter
/// family `x` is named by its samples, `x_total` (its `_created` samples have no place in the
/// text format and are left out), an info family `x` becomes the gauge `x_info`, `unknown` (and
/// the types the text format lacks) `untyped`; `# UNIT` and `# EOF` go, exemplars are cut from
/// the samples, timestamps turn from seconds into milliseconds, and HELP text loses the `\"`
/// escape the text format doesn't have.
fn openmetrics_to_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<(&str, &str)> = None;
    // The family being written: its OpenMetrics name and type.
    let mut family: Option<(&str, &str)> = None;
    let flush_help = |out: &mut String, help: &mut Option<(&str, &str)>| {
        if let Some((name, text)) = help.take() {
            out.push_str(&format!("# HELP {name} {}\n", unescape_help(text)));
        }
    };
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, &mut help);
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (text_name, text_kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_owned(), kind),
                _ => (name.to_owned(), "untyped"),
            };
            match help.take() {
                Some((help_name, text)) if help_name == name => {
                    out.push_str(&format!("# HELP {text_name} {}\n", unescape_help(text)));
                }
                other => {
                    help = other;
                    flush_help(&mut out, &mut help);
                }
            }
            out.push_str(&format!("# TYPE {text_name} {text_kind}\n"));
            family = Some((name, kind));
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            // `# UNIT`, `# EOF`.
            continue;
        }
        flush_help(&mut out, &mut help);
        let (series, rest) = split_series(line);
        let name = series.split('{').next().unwrap_or(series);
        if let Some((family, "counter" | "histogram" | "summary")) = family
            && name.strip_prefix(family) == Some("_created")
        {
            continue;
        }
        // The value, then a timestamp, then ` # ` and an exemplar.
        let mut fields = rest.split_whitespace().take_while(|f| *f != "#");
        let value = fields.next().unwrap_or("");
        out.push_str(series);
        out.push(' ');
        out.push_str(value);
        if let Some(ts) = fields.next() {
            match ts.parse::<f64>() {
                Ok(seconds) => out.push_str(&format!(" {}", (seconds * 1000.0).round() as i64)),
                Err(_) => {
                    out.push(' ');
                    out.push_str(ts);
                }
            }
        }
        out.push('\n');
    }
    out
}

/// A sample line as its series (`name` or `name{labels}`) and what follows.
fn split_series(line: &str) -> (&str, &str) {
    let Some(open) = line.find(['{', ' ']) else {
        return (line, "");
    };
    if line.as_bytes()[open] == b' ' {
        return (&line[..open], &line[open..]);
    }
    // The closing brace outside a quoted label value.
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in line[open..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return line.split_at(open + i + 1),
            _ => {}
        }
    }
    (line, "")
}

/// OpenMetrics HELP text as the text format writes it: `\"` is a plain `"` there (`\\` and `\n`
/// are the same in both).
fn unescape_help(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push('"'),
            Some(next) => {
                out.push('\\');
                out.push(next);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A node's install phase, sampled at scrape time.
#[derive(Debug, Clone)]
pub struct PhaseSample {
    /// As [`BackendSample::cluster`].
    pub cluster: Option<String>,
    pub node: String,
    pub phase: &'static str,
}

#[derive(Debug)]
struct Sampled(Arc<OnceLock<Box<dyn Sources>>>);

/// A sampled series' labels: `cluster` first when there is one.
fn labels(
    cluster: Option<&String>,
    rest: [(&'static str, String); 2],
) -> Vec<(&'static str, String)> {
    cluster
        .map(|c| ("cluster", c.clone()))
        .into_iter()
        .chain(rest)
        .collect()
}

impl Collector for Sampled {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some(sources) = self.0.get() else {
            return Ok(());
        };
        let backends = sources.backends();
        let backend_labels = |b: &BackendSample| {
            let mut l = labels(
                b.cluster.as_ref(),
                [("frontend", b.frontend.into()), ("backend", b.node.clone())],
            );
            l.push(("addr", b.addr.clone()));
            l
        };
        type Pick = fn(&BackendSample) -> u64;
        let gauges: [(&str, &str, Pick); 3] = [
            (
                "lb_backend_up",
                "1 when the backend passes its health checks",
                |b| u64::from(b.up),
            ),
            (
                "lb_backend_draining",
                "1 while the backend is drained",
                |b| u64::from(b.draining),
            ),
            (
                "lb_backend_active_connections",
                "Connections open now",
                |b| b.active,
            ),
        ];
        for (name, help, pick) in gauges {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for b in &backends {
                let l = backend_labels(b);
                let value = i64::try_from(pick(b)).unwrap_or(i64::MAX);
                ConstGauge::new(value).encode(family.encode_family(&l)?)?;
            }
        }
        let counters: [(&str, &str, Pick); 3] = [
            (
                "lb_backend_connections",
                "Connections made to the backend",
                |b| b.connections,
            ),
            ("lb_backend_sent_bytes", "Bytes sent to the backend", |b| {
                b.bytes_to_backend
            }),
            (
                "lb_backend_received_bytes",
                "Bytes from the backend to clients",
                |b| b.bytes_to_client,
            ),
        ];
        for (name, help, pick) in counters {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for b in &backends {
                let l = backend_labels(b);
                ConstCounter::new(pick(b)).encode(family.encode_family(&l)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "install_phase",
            "1 for each node's current install phase",
            None,
            MetricType::Gauge,
        )?;
        for p in sources.phases() {
            let l = labels(
                p.cluster.as_ref(),
                [("node", p.node), ("phase", p.phase.into())],
            );
            ConstGauge::new(1i64).encode(family.encode_family(&l)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_counted_by_rcode_and_type() {
        let m = Metrics::new();
        m.dns_answer(3, 28);
        m.dns_answer(3, 28);
        m.dns_answer(0, 99);
        m.dhcp_message(1);
        m.dhcp_message(42);
        m.http_request("ignition", 403, 10);
        let text = m.encode(Format::OpenMetrics);
        for line in [
            "okd_appliance_dns_answers_total{rcode=\"NXDOMAIN\",qtype=\"AAAA\"} 2",
            "okd_appliance_dns_answers_total{rcode=\"NOERROR\",qtype=\"A\"} 0",
            "okd_appliance_dns_answers_total{rcode=\"NOERROR\",qtype=\"other\"} 1",
            "okd_appliance_dhcp_messages_total{type=\"discover\"} 1",
            "okd_appliance_dhcp_messages_total{type=\"other\"} 1",
            "okd_appliance_http_requests_total{route=\"ignition\",status=\"403\"} 1",
            "okd_appliance_http_response_bytes_total 10",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }

    /// What Prometheus 2.42 (the one in Debian 12) sends.
    const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    /// What Prometheus 3 sends.
    const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

    #[test]
    fn the_format_is_negotiated_as_prometheus_clients_do() {
        for (accept, format) in [
            (None, Format::Text),
            (Some(""), Format::Text),
            (Some("*/*"), Format::Text),
            (Some("text/plain"), Format::Text),
            (Some("text/plain; version=0.0.4"), Format::Text),
            (Some(PROMETHEUS_2), Format::OpenMetrics),
            (Some(PROMETHEUS_3), Format::OpenMetrics),
            // Prometheus 2.5 to 2.4x.
            (
                Some(
                    "application/openmetrics-text; version=0.0.1,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                Format::OpenMetrics001,
            ),
            (Some("application/openmetrics-text"), Format::OpenMetrics),
            (
                Some("Application/OpenMetrics-Text; Version=\"1.0.0\""),
                Format::OpenMetrics,
            ),
            // By quality, not by order; equal qualities in order.
            (
                Some("application/openmetrics-text;q=0.2, text/plain;q=0.5"),
                Format::Text,
            ),
            (
                Some("text/plain;q=0.5, application/openmetrics-text;q=0.5"),
                Format::Text,
            ),
            (
                Some("text/plain;q=0.4, application/openmetrics-text;q=0.5"),
                Format::OpenMetrics,
            ),
            // Refused, unknown or unspoken formats are passed over.
            (Some("application/openmetrics-text;q=0"), Format::Text),
            (
                Some("application/openmetrics-text;version=2.0.0"),
                Format::Text,
            ),
            (
                Some(
                    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,application/openmetrics-text;q=0.3",
                ),
                Format::OpenMetrics,
            ),
            (Some("text/html, application/json"), Format::Text),
        ] {
            assert_eq!(Format::negotiate(accept), format, "{accept:?}");
        }
    }

    #[test]
    fn openmetrics_becomes_the_text_format() {
        let om = "\
# HELP app_requests Requests, \\\"quoted\\\" and a \\\\ backslash\\nsecond line
# TYPE app_requests counter
app_requests_total{route=\"a b} # c\",code=\"200\"} 3 # {trace_id=\"x\"} 1.0 1700000000.5
app_requests_created{route=\"a b} # c\",code=\"200\"} 1700000000.0
# HELP app_latency_seconds Latency
# TYPE app_latency_seconds histogram
# UNIT app_latency_seconds seconds
app_latency_seconds_sum 1.5
app_latency_seconds_count 2
app_latency_seconds_bucket{le=\"0.5\"} 1
app_latency_seconds_bucket{le=\"+Inf\"} 2 1700000000.25
# HELP app_build Build
# TYPE app_build info
app_build_info{version=\"1\"} 1
# HELP app_mystery Who knows
# TYPE app_mystery unknown
app_mystery NaN
# HELP app_up Up
# TYPE app_up gauge
# EOF
";
        let text = "\
# HELP app_requests_total Requests, \"quoted\" and a \\\\ backslash\\nsecond line
# TYPE app_requests_total counter
app_requests_total{route=\"a b} # c\",code=\"200\"} 3
# HELP app_latency_seconds Latency
# TYPE app_latency_seconds histogram
app_latency_seconds_sum 1.5
app_latency_seconds_count 2
app_latency_seconds_bucket{le=\"0.5\"} 1
app_latency_seconds_bucket{le=\"+Inf\"} 2 1700000000250
# HELP app_build_info Build
# TYPE app_build_info gauge
app_build_info{version=\"1\"} 1
# HELP app_mystery Who knows
# TYPE app_mystery untyped
app_mystery NaN
# HELP app_up Up
# TYPE app_up gauge
";
        assert_eq!(openmetrics_to_text(om), text);
    }

    #[test]
    fn a_clusters_boot_server_shows_no_other_clusters_series() {
        #[derive(Debug)]
        struct Two;
        impl Sources for Two {
            fn backends(&self) -> Vec<BackendSample> {
                Vec::new()
            }
            fn phases(&self) -> Vec<PhaseSample> {
                ["okd", "test", "okd2"]
                    .into_iter()
                    .map(|c| PhaseSample {
                        cluster: Some(c.into()),
                        node: format!("{c}-master-0"),
                        phase: "ready",
                    })
                    .collect()
            }
        }
        let m = Metrics::new();
        m.dns_answer(0, 1);
        m.attach(Box::new(Two));
        for accept in [None, Some("application/openmetrics-text; version=1.0.0")] {
            let (_, all) = m.exposition(accept);
            assert!(all.contains("test-master-0") && all.contains("okd2-master-0"));
            let (_, okd) = m.exposition_of(accept, "okd");
            assert!(okd.contains("node=\"okd-master-0\""), "{okd}");
            assert!(!okd.contains("test-master-0"), "{okd}");
            assert!(
                !okd.contains("okd2-master-0"),
                "a prefix is not the cluster: {okd}"
            );
            // The host's series and every family's description stay.
            assert!(okd.contains("dns_answers"), "{okd}");
            assert!(
                okd.contains("# TYPE okd_appliance_install_phase gauge"),
                "{okd}"
            );
        }
    }

    #[derive(Debug)]
    struct Fixed;

    impl Sources for Fixed {
        fn backends(&self) -> Vec<BackendSample> {
            vec![BackendSample {
                cluster: None,
                frontend: "api",
                node: "master-0".into(),
                addr: "10.0.0.2:6443".into(),
                up: true,
                draining: false,
                active: 2,
                connections: 7,
                bytes_to_backend: 100,
                bytes_to_client: 200,
            }]
        }

        fn phases(&self) -> Vec<PhaseSample> {
            vec![PhaseSample {
                cluster: None,
                node: "master-0".into(),
                phase: "installing",
            }]
        }
    }

    fn sampled() -> Metrics {
        let m = Metrics::new();
        m.dns_answer(0, 1);
        m.dns_upstream_seconds.observe(0.003);
        m.http_request("ignition", 200, 10);
        m.attach(Box::new(Fixed));
        m
    }

    /// The rules of each format that the appliance's own families meet, checked here for every
    /// family (promtool and the official OpenMetrics parser check them in `tests/metrics.rs`).
    #[test]
    fn every_family_follows_its_formats_naming_rules() {
        let m = sampled();
        let om = m.encode(Format::OpenMetrics);
        assert!(om.ends_with("\n# EOF\n"), "{om}");
        let text = m.encode(Format::Text);
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        for (exposition, total_in_type) in [(&om, false), (&text, true)] {
            let mut family: Option<(String, String)> = None;
            let mut help: Option<String> = None;
            let mut counters = 0;
            for line in exposition.lines().filter(|l| *l != "# EOF") {
                if let Some(rest) = line.strip_prefix("# HELP ") {
                    help = Some(rest.split(' ').next().unwrap().to_owned());
                } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                    let (name, kind) = rest.split_once(' ').unwrap();
                    assert_eq!(help.take().as_deref(), Some(name), "HELP before {line}");
                    if kind == "counter" {
                        counters += 1;
                        assert_eq!(name.ends_with("_total"), total_in_type, "{line}");
                    }
                    family = Some((name.to_owned(), kind.to_owned()));
                } else {
                    let (name, kind) = family.clone().expect("a TYPE before samples");
                    let sample = line.split(['{', ' ']).next().unwrap();
                    let allowed: Vec<String> = match (kind.as_str(), total_in_type) {
                        ("counter", false) => vec![format!("{name}_total")],
                        ("histogram", _) => ["_bucket", "_sum", "_count"]
                            .iter()
                            .map(|s| format!("{name}{s}"))
                            .collect(),
                        _ => vec![name.clone()],
                    };
                    assert!(
                        allowed.iter().any(|a| a == sample),
                        "{line} in {name} {kind}"
                    );
                }
            }
            assert!(counters >= 8, "{exposition}");
        }
        for line in [
            "okd_appliance_lb_backend_connections_total{frontend=\"api\",backend=\"master-0\",addr=\"10.0.0.2:6443\"} 7",
            "okd_appliance_install_phase{node=\"master-0\",phase=\"installing\"} 1",
            "okd_appliance_dns_upstream_seconds_count 1",
            "# TYPE okd_appliance_dns_answers_total counter",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }
}
