//! The HAProxy configuration with the same frontends, pools and health checks as the plan
//! (`mode tcp`, as OpenShift's user-provisioned install documents it).

use std::fmt::Write as _;
use std::net::SocketAddr;

use super::short_duration;
use crate::plan::{Plan, Probe};
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

/// One HAProxy for several clusters (a host file's): each cluster's frontends and backends,
/// named `<id>-<frontend>`, on the cluster's own addresses (distinct on a checked host).
pub fn render_host(clusters: &[(&str, &Plan)]) -> String {
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
    for (id, plan) in clusters {
        let _ = writeln!(o, "\n# cluster {id}: {}", plan.cluster_domain);
        proxies(&mut o, plan, &format!("{id}-"));
    }
    o
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
    for f in &plan.lb.frontends {
        if f.listen.is_empty() {
            continue;
        }
        let name = format!("{prefix}{}", f.kind.name());
        let _ = writeln!(o, "\nfrontend {name}");
        for addr in &f.listen {
            let _ = writeln!(o, "    bind {}", bind_addr(*addr));
        }
        let _ = writeln!(o, "    default_backend {name}");
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
