//! The metrics' encodings, labels and the per-cluster filter.

use super::*;

#[test]
fn answers_are_counted_by_rcode_and_type() {
    let m = Metrics::new();
    m.dns_answer(3, 28);
    m.dns_answer(3, 28);
    m.dns_answer(0, 99);
    m.dhcp_message(1, None);
    m.dhcp_message(42, None);
    m.http_request(None, "ignition", 403, 10);
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

#[test]
fn a_hosts_dhcp_messages_carry_the_cluster_that_answers_them() {
    let m = Metrics::new();
    let ci: Arc<str> = Arc::from("ci");
    m.dhcp_message(1, Some(&ci));
    m.dhcp_message(3, Some(&ci));
    let text = m.encode(Format::OpenMetrics);
    for line in [
        "okd_appliance_dhcp_messages_total{type=\"discover\",cluster=\"ci\"} 1",
        "okd_appliance_dhcp_messages_total{type=\"request\",cluster=\"ci\"} 1",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
    // Another cluster's boot server does not show them.
    let (_, okd) = m.exposition_of(Some("application/openmetrics-text"), "okd");
    assert!(!okd.contains("cluster=\"ci\""), "{okd}");
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
    // Each cluster's boot server counts its requests under its own label.
    for c in ["okd", "test"] {
        m.http_request(Some(&Arc::from(c)), "script", 200, 5);
    }
    for accept in [None, Some("application/openmetrics-text; version=1.0.0")] {
        let (_, all) = m.exposition(accept);
        assert!(all.contains("test-master-0") && all.contains("okd2-master-0"));
        assert!(
            all.contains(
                "okd_appliance_http_requests_total{route=\"script\",status=\"200\",cluster=\"test\"} 1"
            ),
            "{all}"
        );
        let (_, okd) = m.exposition_of(accept, "okd");
        assert!(
            okd.contains(
                "okd_appliance_http_requests_total{route=\"script\",status=\"200\",cluster=\"okd\"} 1"
            ),
            "{okd}"
        );
        assert!(!okd.contains("cluster=\"test\""), "{okd}");
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
    m.http_request(None, "ignition", 200, 10);
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
