//! Prometheus metrics (prometheus-client), served at `/metrics` by the boot server.
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

/// What is read at scrape time, attached once the appliance has it.
pub trait Sources: Send + Sync + std::fmt::Debug {
    /// Each backend: frontend, node, address, up, draining, active and total connections,
    /// bytes to the backend and to the client.
    fn backends(&self) -> Vec<BackendSample>;
    /// Each node's install phase.
    fn phases(&self) -> Vec<(String, &'static str)>;
}

#[derive(Debug, Clone)]
pub struct BackendSample {
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

    /// Attaches what is read at scrape time (once; later calls are ignored).
    pub fn attach(&self, sources: Box<dyn Sources>) {
        let _ = self.sources.set(sources);
    }

    /// The exposition text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!("metrics: {e}");
        }
        out
    }
}

#[derive(Debug)]
struct Sampled(Arc<OnceLock<Box<dyn Sources>>>);

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    frontend: String,
    backend: String,
    addr: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    node: String,
    phase: String,
}

impl Collector for Sampled {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some(sources) = self.0.get() else {
            return Ok(());
        };
        let backends = sources.backends();
        let labels = |b: &BackendSample| BackendLabels {
            frontend: b.frontend.into(),
            backend: b.node.clone(),
            addr: b.addr.clone(),
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
                let l = labels(b);
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
                let l = labels(b);
                ConstCounter::new(pick(b)).encode(family.encode_family(&l)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "install_phase",
            "1 for each node's current install phase",
            None,
            MetricType::Gauge,
        )?;
        for (node, phase) in sources.phases() {
            let l = PhaseLabels {
                node,
                phase: phase.into(),
            };
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
        let text = m.encode();
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
}
