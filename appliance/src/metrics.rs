//! Prometheus metrics (prometheus-client), served at `/metrics` by the boot server and the API:
//! in the Prometheus text format 0.0.4 by default, in OpenMetrics 1.0.0 when `Accept` asks,
//! chosen as Prometheus' Go client chooses (by quality; never 406). The text format is made
//! from prometheus-client's OpenMetrics line by line (a counter family is named `_total` as its
//! samples are; `# EOF`, `# UNIT`, exemplars and `_created` samples go).
//! `appliance/tests/metrics.rs` checks the text with `promtool check metrics` and the
//! OpenMetrics with the official Python client's parser.
//!
//! Counted where they happen: DNS answers by rcode and type, forwarder cache hits and misses,
//! the upstream latency; DHCP messages by type, leases in use, free pool addresses; HTTP
//! requests by route and status, bytes sent. Read at scrape time from what already keeps them:
//! the load balancer's per-backend counters and health, and each node's install phase.
//!
//! Also the panics `crate::isolate` caught, per wire path (`okd_appliance_panics_total{service}`).
//!
//! Architecture invariant: the services import it, and it imports only the leaf `isolate`
//! (for those panic counters), nothing of theirs. The DNS answer path stays free of
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

/// A boot server request's labels: its route, its status, and on a host of several clusters the
/// cluster whose boot server answered (a cluster file's series carry no `cluster` label).
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub struct HttpLabels {
    pub route: &'static str,
    pub status: u16,
    pub cluster: Option<Arc<str>>,
}

impl EncodeLabelSet for HttpLabels {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel as _;
        ("route", self.route).encode(encoder.encode_label())?;
        ("status", self.status).encode(encoder.encode_label())?;
        if let Some(cluster) = &self.cluster {
            ("cluster", &**cluster).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// A DHCP message received, by type, and on a host of several clusters the cluster that
/// answers its client.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct DhcpLabels {
    r#type: &'static str,
    cluster: Option<Arc<str>>,
}

impl EncodeLabelSet for DhcpLabels {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel as _;
        ("type", self.r#type).encode(encoder.encode_label())?;
        if let Some(cluster) = &self.cluster {
            ("cluster", &**cluster).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// A connection the shared frontend's router passed to a cluster.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoutedLabels {
    port: u16,
    cluster: Arc<str>,
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
    /// A cluster file's series, made at start (no lookup per message).
    dhcp_messages: Vec<Counter>,
    /// Every series, a host's clusters' among them.
    dhcp_by_cluster: Family<DhcpLabels, Counter>,
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
        let messages = Family::<DhcpLabels, Counter>::default();
        let dhcp_messages = DHCP_TYPES
            .iter()
            .map(|t| {
                messages
                    .get_or_create(&DhcpLabels {
                        r#type: t,
                        cluster: None,
                    })
                    .clone()
            })
            .collect();
        registry.register(
            "dhcp_messages",
            "DHCP messages received, by type (and on a host of several clusters, the cluster that answers the client)",
            messages.clone(),
        );
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
            dhcp_by_cluster: messages,
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
    /// Counts one DHCP message of type `kind` whose client `cluster` answers (a host's; `None`
    /// for a cluster file's): no allocation once its series exists.
    pub fn dhcp_message(&self, kind: u8, cluster: Option<&Arc<str>>) {
        let i = usize::from(kind).wrapping_sub(1).min(DHCP_TYPES.len() - 1);
        match cluster {
            None => {
                self.dhcp_messages[i].inc();
            }
            Some(cluster) => {
                let labels = DhcpLabels {
                    r#type: DHCP_TYPES[i],
                    cluster: Some(Arc::clone(cluster)),
                };
                self.dhcp_by_cluster.get_or_create(&labels).inc();
            }
        }
    }

    /// Counts one boot server request of `cluster` (a host's; `None` for a cluster file's): no
    /// allocation once its series exists.
    pub fn http_request(
        &self,
        cluster: Option<&Arc<str>>,
        route: &'static str,
        status: u16,
        bytes: u64,
    ) {
        let labels = HttpLabels {
            route,
            status,
            cluster: cluster.cloned(),
        };
        self.http_requests.get_or_create(&labels).inc();
        self.http_bytes.inc_by(bytes);
    }

    /// Counts a connection to the shared frontend's `port` passed to `cluster`.
    pub fn lb_routed(&self, port: u16, cluster: &Arc<str>) {
        self.lb_routed
            .get_or_create(&RoutedLabels {
                port,
                cluster: Arc::clone(cluster),
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
        {
            let mut family = encoder.encode_descriptor(
                "panics",
                "Panics caught while one packet, request or connection was handled (that input was dropped; the service went on)",
                None,
                MetricType::Counter,
            )?;
            for wire in crate::isolate::Wire::ALL {
                let l = [("service", wire.name())];
                ConstCounter::new(crate::isolate::panics(wire))
                    .encode(family.encode_family(&l)?)?;
            }
        }
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
mod tests;
