//! keepalived's check of a pair's host (`okd-appliance ha check`, through the admin socket):
//! not only "is the process alive" but "does it answer": DNS at the host's own address, and on
//! the active host every load-balancer and boot-server listener accepting connections, each
//! probe bounded to 1 s. A listener on an address this host does not have now is skipped and
//! named: after a reload that added a cluster, its address arrives only once keepalived's file
//! is rendered again, and failing the check meanwhile would move every other cluster for
//! nothing. Active with none of its listeners' addresses still fails.
//!
//! Architecture invariant: probes only, each bounded by `PROBE_TIMEOUT`; blocking, so the
//! caller runs it on the blocking pool.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use super::status::Listener;
use crate::sockets::Service;

/// The services whose listeners the active host must have accepting.
const PROBED: [Service; 5] = [
    Service::KubeApi,
    Service::MachineConfig,
    Service::IngressHttps,
    Service::IngressHttp,
    Service::Http,
];

/// How long each probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What keepalived's check asks: does DNS answer `name` at this host's own address, and, on
/// the active host, do the load balancer's and the boot server's listeners (every cluster's,
/// and the shared frontend's router) accept connections? `listeners` are the process's
/// sockets as they are now (they follow reloads); `local` the addresses this host has now.
///
/// A listener on an address this host does not have is not probed but counted: after a reload
/// that added a cluster, its address arrives only once keepalived's file is rendered again,
/// and failing the check meanwhile would move every other cluster's address for nothing.
pub fn check(
    listeners: &[Listener],
    local: &[IpAddr],
    name: &str,
    host: Ipv4Addr,
    active: bool,
) -> Result<String, String> {
    let dns_port = listeners
        .iter()
        .find(|l| {
            l.service == Service::Dns.name() && l.proto == "udp" && l.addr.ip() == IpAddr::V4(host)
        })
        .map(|l| l.addr.port())
        .ok_or_else(|| format!("no DNS listener on this host's address {host}"))?;
    dns_probe(SocketAddr::new(host.into(), dns_port), name)?;
    let (mut accepted, mut absent) = (0, Vec::new());
    if active {
        let probed = listeners
            .iter()
            .filter(|l| l.proto == "tcp" && PROBED.iter().any(|s| s.name() == l.service));
        for l in probed {
            let target = if l.addr.ip().is_unspecified() {
                SocketAddr::new(host.into(), l.addr.port())
            } else if local.contains(&l.addr.ip()) {
                l.addr
            } else {
                absent.push(l.addr.ip());
                continue;
            };
            TcpStream::connect_timeout(&target, PROBE_TIMEOUT)
                .map_err(|e| format!("{target} does not accept connections: {e}"))?;
            accepted += 1;
        }
    }
    // Active with none of its addresses (removed under keepalived): not serving anyone.
    if accepted == 0 && !absent.is_empty() {
        return Err(format!(
            "this host is active and has none of its listeners' addresses ({} and more)",
            absent[0]
        ));
    }
    let mut line =
        format!("dns answers {name} at {host}:{dns_port}; {accepted} listeners accept connections");
    absent.sort();
    absent.dedup();
    if !absent.is_empty() {
        let list: Vec<String> = absent.iter().map(ToString::to_string).collect();
        line.push_str(&format!(
            "; not on this host, so not probed: {} (render keepalived again?)",
            list.join(", ")
        ));
    }
    Ok(line)
}

/// One A query; an answer with NOERROR and at least one record passes.
fn dns_probe(server: SocketAddr, name: &str) -> Result<(), String> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|s| s.set_read_timeout(Some(PROBE_TIMEOUT)).map(|()| s))
        .map_err(|e| format!("can't open a probe socket: {e}"))?;
    let id: u16 = rand::random();
    let mut query = Vec::with_capacity(64);
    query.extend_from_slice(&id.to_be_bytes());
    // Flags 0 (a plain query), one question, no other records.
    query.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    query.extend(crate::dns::wire::name_to_wire(name));
    query.extend_from_slice(&[0, 1, 0, 1]); // A, IN
    socket
        .send_to(&query, server)
        .map_err(|e| format!("dns probe to {server}: {e}"))?;
    let mut reply = [0u8; 512];
    let n = socket
        .recv(&mut reply)
        .map_err(|e| format!("dns at {server} did not answer {name}: {e}"))?;
    let ok = n >= 12
        && reply[..2] == id.to_be_bytes()
        && reply[2] & 0x80 != 0
        && reply[3] & 0x0f == 0
        && u16::from_be_bytes([reply[6], reply[7]]) > 0;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "dns at {server} answered {name} without an address"
        ))
    }
}
