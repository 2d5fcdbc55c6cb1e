//! keepalived's check of a pair's host (`okd-appliance ha check`, through the admin socket):
//! not only "is the process alive" but "does it answer": DNS at the host's own address, and on
//! the active host every load-balancer and boot-server listener accepting connections.
//!
//! Architecture invariant: probes only, each bounded by [`PROBE_TIMEOUT`]; blocking, so the
//! caller runs it on the blocking pool.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use crate::plan::Plan;

/// How long each probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What keepalived's check asks: does DNS answer at this host's own address, and, on the
/// active host, do the load balancer's and the boot server's listeners accept connections?
pub fn check(plan: &Plan, host: Ipv4Addr, active: bool) -> Result<String, String> {
    let dns_port = plan
        .listen
        .dns
        .iter()
        .find(|a| a.ip() == IpAddr::V4(host))
        .map(|a| a.port())
        .ok_or_else(|| format!("no DNS listener on this host's address {host}"))?;
    let name = plan.orchestration.api_server_name.clone();
    dns_probe(SocketAddr::new(host.into(), dns_port), &name)?;
    let mut accepted = 0;
    if active {
        let l = &plan.listen;
        for addr in l
            .api
            .iter()
            .chain(&l.machine_config)
            .chain(&l.ingress_https)
            .chain(&l.ingress_http)
            .chain(&l.http)
        {
            let target = if addr.ip().is_unspecified() {
                SocketAddr::new(host.into(), addr.port())
            } else {
                *addr
            };
            TcpStream::connect_timeout(&target, PROBE_TIMEOUT)
                .map_err(|e| format!("{target} does not accept connections: {e}"))?;
            accepted += 1;
        }
    }
    Ok(format!(
        "dns answers {name} at {host}:{dns_port}; {accepted} listeners accept connections"
    ))
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
