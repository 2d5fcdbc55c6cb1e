//! The HAProxy configuration with the same frontends, pools and health checks as the plan
//! (`mode tcp`, as OpenShift's user-provisioned install documents it).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use super::short_duration;
use crate::plan::{FrontendKind, Plan, Probe, Sharing};
use crate::vocabulary::Balance;

pub(super) fn render(plan: &Plan) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# HAProxy equivalent of the okd-appliance plan for {}",
        plan.cluster_domain
    );
    defaults(&mut o, plan);
    proxies(&mut o, plan, "");
    o
}

/// A host file's shared frontend: its addresses and its default cluster's id.
#[derive(Debug)]
pub struct Shared<'a> {
    pub addresses: &'a [IpAddr],
    pub default_cluster: Option<&'a str>,
}

/// One HAProxy for several clusters (a host file's): each cluster's frontends and backends,
/// named `<id>-<frontend>`, on the cluster's own addresses (distinct on a checked host). With a
/// shared frontend, its frontends instead (`shared-<frontend>`), which route each connection
/// to a cluster's backend as the appliance's router does: by the ClientHello's server name on
/// 6443, 22623 and 443 (`req_ssl_sni`), by `Host` on 80.
pub fn render_host(clusters: &[(&str, &Plan)], shared: Option<&Shared<'_>>) -> String {
    let mut o = String::new();
    let ids: Vec<&str> = clusters.iter().map(|(id, _)| *id).collect();
    let _ = writeln!(
        o,
        "# HAProxy equivalent of the okd-appliance plans of clusters {}",
        ids.join(", ")
    );
    if let Some((_, first)) = clusters.first() {
        defaults(&mut o, first);
    }
    if let Some(shared) = shared {
        shared_frontends(&mut o, clusters, shared);
    }
    for (id, plan) in clusters {
        let _ = writeln!(o, "\n# cluster {id}: {}", plan.cluster_domain);
        proxies(&mut o, plan, &format!("{id}-"));
    }
    o
}

/// The shared frontend's four frontends, each routing to the routed clusters' backends.
fn shared_frontends(o: &mut String, clusters: &[(&str, &Plan)], shared: &Shared<'_>) {
    let routed: Vec<&(&str, &Plan)> = clusters
        .iter()
        .filter(|(_, p)| p.lb.sharing == Sharing::Routed)
        .collect();
    for kind in [
        FrontendKind::Api,
        FrontendKind::MachineConfig,
        FrontendKind::IngressHttps,
        FrontendKind::IngressHttp,
    ] {
        let _ = writeln!(o, "\nfrontend shared-{}", kind.name());
        for ip in shared.addresses {
            let addr = SocketAddr::new(*ip, kind.backend_port());
            let _ = writeln!(o, "    bind {}", bind_addr(addr));
        }
        let _ = writeln!(o, "    tcp-request inspect-delay 5s");
        let (fetch, accept) = match kind {
            FrontendKind::IngressHttp => ("req.hdr(host),field(1,:)", "HTTP"),
            _ => ("req_ssl_sni", "{ req_ssl_hello_type 1 }"),
        };
        let _ = writeln!(o, "    tcp-request content accept if {accept}");
        for (id, plan) in &routed {
            let d = &plan.cluster_domain;
            let names = match kind {
                FrontendKind::Api | FrontendKind::MachineConfig => {
                    format!("-i api.{d} api-int.{d}")
                }
                FrontendKind::IngressHttps | FrontendKind::IngressHttp => {
                    format!("-m end -i .apps.{d}")
                }
            };
            let _ = writeln!(
                o,
                "    use_backend {id}-{} if {{ {fetch} {names} }}",
                kind.name()
            );
        }
        if let Some(id) = shared.default_cluster
            && routed.iter().any(|(r, _)| *r == id)
        {
            let _ = writeln!(o, "    default_backend {id}-{}", kind.name());
        }
    }
}

fn defaults(o: &mut String, plan: &Plan) {
    let timeout = plan
        .lb
        .frontends
        .first()
        .map_or("1s".to_owned(), |f| short_duration(f.check.timeout));
    let _ = writeln!(
        o,
        "global\n    maxconn 20000\n\ndefaults\n    mode tcp\n    # Kernel splicing between the sockets, and a refused connect retried on another\n    # server: how HAProxy's expert users run a TCP balancer (the appliance does both).\n    option splice-auto\n    option redispatch\n    retries 3\n    timeout connect 5s\n    timeout client 1h\n    timeout server 1h\n    timeout check {timeout}"
    );
}

/// `plan`'s frontends and backends, their names prefixed with `prefix`; each backend sets its
/// own check timeout (one HAProxy may hold clusters with different ones).
fn proxies(o: &mut String, plan: &Plan, prefix: &str) {
    let balance = match plan.lb.balance {
        Balance::RoundRobin => "roundrobin",
        Balance::LeastConnections => "leastconn",
    };
    let routed = plan.lb.sharing == Sharing::Routed;
    for f in &plan.lb.frontends {
        if f.listen.is_empty() && !routed {
            continue;
        }
        let name = format!("{prefix}{}", f.kind.name());
        // A routed cluster's frontend is the shared one's.
        if !routed {
            let _ = writeln!(o, "\nfrontend {name}");
            for addr in &f.listen {
                let _ = writeln!(o, "    bind {}", bind_addr(*addr));
            }
            let _ = writeln!(o, "    default_backend {name}");
        }
        let _ = writeln!(o, "\nbackend {name}\n    balance {balance}");
        if !prefix.is_empty() {
            let _ = writeln!(o, "    timeout check {}", short_duration(f.check.timeout));
        }
        let c = &f.check;
        let timers = format!(
            "inter {} fall {} rise {}",
            short_duration(c.interval),
            c.fall,
            c.rise
        );
        let server_opts = match &c.probe {
            Probe::Https {
                port,
                path,
                server_name,
            } => {
                let _ = writeln!(
                    o,
                    "    option httpchk GET {path}\n    http-check expect status 200"
                );
                let verify = plan.lb.check_ca.as_ref().map_or_else(
                    || "verify none".to_owned(),
                    |ca| {
                        format!(
                            "verify required ca-file {} verifyhost {server_name}",
                            ca.display()
                        )
                    },
                );
                format!("check check-ssl check-sni {server_name} {verify} port {port} {timers}")
            }
            Probe::Http { port, path } => {
                let _ = writeln!(
                    o,
                    "    option httpchk GET {path}\n    http-check expect status 200"
                );
                format!("check port {port} {timers}")
            }
            Probe::Tcp => format!("check {timers}"),
        };
        for b in &f.backends {
            let _ = writeln!(o, "    server {} {} {server_opts}", b.name, b.addr);
        }
    }
}

fn bind_addr(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => a.to_string(),
        // HAProxy reads an IPv6 address up to its last colon; the family prefix makes it explicit.
        SocketAddr::V6(a) => format!("ipv6@{}:{}", a.ip(), a.port()),
    }
}
