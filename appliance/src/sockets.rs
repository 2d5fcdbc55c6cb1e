//! Binding every listening socket before anything is served: the services' listeners (at
//! start each on its own, [`bind_each`], so what binds serves and the rest is retried; for a
//! cluster a reload adds, all or none, [`bind_all`]), the operator API's and the replication's
//! TCP listeners ([`bind_tcp`], called by the supervisor) and the operator wing's owner-only
//! Unix sockets ([`bind_unix_owner_only`], through `operator::admin::bind` and
//! `operator::api::bind_local`: mode 0600, a stale socket replaced, the socket of another
//! running appliance left alone). Each socket is labelled with the listener it is for.
//!
//! Architecture invariant: this is the only code in the program that binds a listener (the
//! supervisor calls it; `appliance/tests/tidy.rs` checks). Services receive sockets that are
//! already bound, so tests hand them port-0 sockets and privileges can be dropped before the
//! first packet is read. A leaf: it knows addresses, paths and socket options, no protocol.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::net::UnixListener;
use std::path::Path;

use socket2::{Domain, Protocol, Socket, Type};

/// The network services, by what they listen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Dns,
    Dhcp,
    Tftp,
    Http,
    /// The Kubernetes API frontend of the load balancer (6443), not the operator API.
    KubeApi,
    MachineConfig,
    IngressHttps,
    IngressHttp,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::Dns => "dns",
            Service::Dhcp => "dhcp",
            Service::Tftp => "tftp",
            Service::Http => "http",
            Service::KubeApi => "api",
            Service::MachineConfig => "machine-config",
            Service::IngressHttps => "ingress-https",
            Service::IngressHttp => "ingress-http",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Udp,
    Tcp,
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        })
    }
}

/// One socket to bind: for which service, which protocol, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    pub service: Service,
    pub proto: Proto,
    pub addr: SocketAddr,
    /// Bind to this interface only (SO_BINDTODEVICE), as DHCP must.
    pub device: Option<String>,
    /// Bind even when the address is not (yet) on this host (IP_FREEBIND): a pair's standby
    /// holds its listeners on the virtual address ready for the moment it arrives.
    pub freebind: bool,
}

/// A bound socket and the address it really got (port 0 resolved).
#[derive(Debug)]
pub struct BoundSocket {
    pub spec: ListenerSpec,
    pub local_addr: SocketAddr,
    pub socket: Socket,
}

impl BoundSocket {
    /// The socket as a tokio UDP socket (inside a tokio runtime).
    pub fn into_udp(self) -> io::Result<tokio::net::UdpSocket> {
        tokio::net::UdpSocket::from_std(self.socket.into())
    }

    /// Another descriptor of the same socket (`dup`): what a service restarted after a failure
    /// is started on, the socket staying bound all along.
    pub fn try_clone(&self) -> io::Result<BoundSocket> {
        Ok(BoundSocket {
            spec: self.spec.clone(),
            local_addr: self.local_addr,
            socket: self.socket.try_clone()?,
        })
    }

    /// The socket as a tokio TCP listener (inside a tokio runtime).
    pub fn into_tcp(self) -> io::Result<tokio::net::TcpListener> {
        tokio::net::TcpListener::from_std(self.socket.into())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("can't bind {service}/{proto} on {addr}: {reason}")]
pub struct BindError {
    pub service: &'static str,
    pub proto: Proto,
    pub addr: SocketAddr,
    pub reason: String,
}

/// Binds each spec on its own: every socket that could be bound, and why each other could
/// not, in the order of `specs` (`serve` starts what bound and retries the rest).
pub fn bind_each(specs: &[ListenerSpec]) -> Vec<Result<BoundSocket, BindError>> {
    specs
        .iter()
        .map(|spec| {
            bind(spec).map_err(|e| BindError {
                service: spec.service.name(),
                proto: spec.proto,
                addr: spec.addr,
                reason: explain(&e, spec.addr),
            })
        })
        .collect()
}

/// Binds every spec. Either all succeed, or every failure is returned (none is left bound).
pub fn bind_all(specs: &[ListenerSpec]) -> Result<Vec<BoundSocket>, Vec<BindError>> {
    let mut bound = Vec::with_capacity(specs.len());
    let mut failed = Vec::new();
    for spec in specs {
        match bind(spec) {
            Ok(socket) => bound.push(socket),
            Err(e) => failed.push(BindError {
                service: spec.service.name(),
                proto: spec.proto,
                addr: spec.addr,
                reason: explain(&e, spec.addr),
            }),
        }
    }
    if failed.is_empty() {
        Ok(bound)
    } else {
        Err(failed)
    }
}

fn bind(spec: &ListenerSpec) -> io::Result<BoundSocket> {
    let domain = Domain::for_address(spec.addr);
    let socket = match spec.proto {
        Proto::Udp => Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?,
        Proto::Tcp => Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?,
    };
    if spec.addr.is_ipv6() {
        // An IPv6 listener never swallows IPv4: each family is configured on its own.
        socket.set_only_v6(true)?;
    }
    if spec.proto == Proto::Tcp {
        // Restart without waiting for old connections in TIME_WAIT.
        socket.set_reuse_address(true)?;
    }
    if let Some(device) = &spec.device {
        socket.bind_device(Some(device.as_bytes()))?;
    }
    if spec.freebind {
        if spec.addr.is_ipv6() {
            socket.set_freebind_v6(true)?;
        } else {
            socket.set_freebind_v4(true)?;
        }
    }
    socket.set_nonblocking(true)?;
    socket.bind(&spec.addr.into())?;
    if spec.proto == Proto::Tcp {
        socket.listen(1024)?;
    }
    let local_addr = socket
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("bound socket has no IP address"))?;
    Ok(BoundSocket {
        spec: spec.clone(),
        local_addr,
        socket,
    })
}

/// A TCP listener outside the plan's service listeners (the operator API's `api.listen`, the
/// replication's port on this host's address), as `std` binds it (SO_REUSEADDR, blocking:
/// the caller adopts it into tokio). The caller names it in its error.
pub fn bind_tcp(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    std::net::TcpListener::bind(addr)
}

/// What an owner-only Unix socket's path may already hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleSocket {
    /// A socket file is replaced unless a process answers on it (another running appliance:
    /// then the bind fails with `AddrInUse`); the directory is created when missing.
    ReplaceUnlessAnswered,
    /// Whatever file is there is replaced.
    Replace,
}

/// Binds a Unix stream socket at `path`, readable and writable by its owner only (mode 0600),
/// non-blocking (the caller adopts it into tokio).
pub fn bind_unix_owner_only(path: &Path, stale: StaleSocket) -> io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    match stale {
        StaleSocket::ReplaceUnlessAnswered => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                // A socket someone answers on belongs to another running appliance: leave it
                // alone.
                if std::os::unix::net::UnixStream::connect(path).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("{} is in use by another okd-appliance", path.display()),
                    ));
                }
                std::fs::remove_file(path)?;
            }
        }
        StaleSocket::Replace => match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        },
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// The reason with what usually causes it.
fn explain(e: &io::Error, addr: SocketAddr) -> String {
    match e.kind() {
        io::ErrorKind::AddrInUse => format!("{e} (another process listens there)"),
        io::ErrorKind::AddrNotAvailable => {
            format!(
                "{e} (no interface has {}; is the cluster NIC up and addressed?)",
                addr.ip()
            )
        }
        io::ErrorKind::PermissionDenied if addr.port() < 1024 => {
            format!("{e} (ports below 1024 need root or CAP_NET_BIND_SERVICE)")
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(proto: Proto, addr: &str) -> ListenerSpec {
        ListenerSpec {
            freebind: false,
            service: Service::Dns,
            proto,
            addr: addr.parse().unwrap(),
            device: None,
        }
    }

    #[test]
    fn port_zero_resolves_to_a_real_port() {
        let bound = bind_all(&[
            spec(Proto::Udp, "127.0.0.1:0"),
            spec(Proto::Tcp, "127.0.0.1:0"),
        ])
        .unwrap();
        assert!(bound.iter().all(|b| b.local_addr.port() != 0));
    }

    #[test]
    fn every_failure_is_reported_with_its_address() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let errors = bind_all(&[
            spec(Proto::Tcp, &format!("127.0.0.1:{port}")),
            spec(Proto::Udp, "127.0.0.1:0"),
            // TEST-NET-1 is on no interface here.
            spec(Proto::Udp, "192.0.2.1:0"),
        ])
        .unwrap_err();
        assert_eq!(errors.len(), 2);
        assert!(
            errors[0].to_string().contains(&format!("127.0.0.1:{port}")),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].reason.contains("another process"),
            "{}",
            errors[0]
        );
        assert!(errors[1].to_string().contains("192.0.2.1"), "{}", errors[1]);
    }

    #[test]
    fn unix_sockets_are_owner_only_and_a_live_one_is_left_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/admin.sock");
        let live = bind_unix_owner_only(&path, StaleSocket::ReplaceUnlessAnswered).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = bind_unix_owner_only(&path, StaleSocket::ReplaceUnlessAnswered).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse, "{again}");
        // A stale socket (nobody listens) is replaced.
        drop(live);
        bind_unix_owner_only(&path, StaleSocket::ReplaceUnlessAnswered).unwrap();
        let other = dir.path().join("api.sock");
        std::fs::write(&other, "").unwrap();
        bind_unix_owner_only(&other, StaleSocket::Replace).unwrap();
    }
}
