//! Partial start: a listener whose address can't be bound (a cluster's `appliance_ip` not on
//! the host yet, a port another process holds) is reported and tried again, while everything
//! that did bind serves (issue 39: one missing address of a host file's second cluster kept
//! every cluster down).
//!
//! At start, `serve` binds each listener on its own ([`sockets::bind_each`]); it stops only
//! when none could be bound. Each one that could not is an [`Unbound`], in the status's faults
//! (`not bound`, with the reason), tried again every [`RETRY_EVERY`]. A service starts on it
//! once its group is complete: DNS, TFTP, DHCP and the boot server per socket (a second
//! instance of the service beside the one that started, as a reload adds DNS for a new
//! cluster's address), the load balancer of an instance only with all its frontends (its
//! health checks start with it, once). A cluster removed by a reload meanwhile takes its
//! unbound listeners with it.
//!
//! Architecture invariant: knows the layout's instances and the shape of a task, no protocol.

use std::time::Duration;

use super::instance::{Role, Task};
use super::layout::{Layout, listener};
use crate::operator::status::{FaultState, Faults};
use crate::sockets::{self, BoundSocket, ListenerSpec, Service};

/// How often a listener that could not be bound is tried again.
pub const RETRY_EVERY: Duration = Duration::from_secs(5);

/// A listener of `role` not serving yet: `socket` once bound (the load balancer's frontends
/// wait for each other).
pub(super) struct Unbound {
    pub role: Role,
    pub spec: ListenerSpec,
    pub socket: Option<BoundSocket>,
}

impl Unbound {
    /// How status names it: `http/tcp 10.96.0.1:8080`.
    pub fn label(&self) -> String {
        format!(
            "{}/{} {}",
            self.spec.service.name(),
            self.spec.proto,
            self.spec.addr
        )
    }

    fn group(&self) -> (Role, Option<Service>) {
        group(&self.role, self.spec.service)
    }
}

/// The services that start together: the load balancer's frontends as one (`None`).
fn group(role: &Role, service: Service) -> (Role, Option<Service>) {
    let lb = matches!(
        service,
        Service::KubeApi | Service::MachineConfig | Service::IngressHttps | Service::IngressHttp
    );
    (role.clone(), (!lb).then_some(service))
}

/// Splits the start's bind results: the bound sockets with their owners, and the listeners to
/// try again (an instance's bound load-balancer sockets wait with its unbound ones). Each
/// failure is logged and recorded in `faults`.
pub(super) fn split(
    layout: &Layout,
    results: Vec<(usize, ListenerSpec, Result<BoundSocket, sockets::BindError>)>,
    faults: &Faults,
) -> (Vec<(usize, BoundSocket)>, Vec<Unbound>) {
    let mut bound = Vec::new();
    let mut unbound = Vec::new();
    for (owner, spec, result) in results {
        let role = layout.instances[owner].role.clone();
        match result {
            Ok(socket) => bound.push((owner, socket)),
            Err(e) => {
                let u = Unbound {
                    role,
                    spec,
                    socket: None,
                };
                tracing::error!(
                    "{}{} not bound: {} (tried again every {RETRY_EVERY:?}; the rest serves)",
                    u.label(),
                    scope_text(&u.role),
                    e.reason
                );
                faults.record(
                    &u.label(),
                    u.role.scope().as_deref(),
                    FaultState::NotBound,
                    Some(&e.reason),
                );
                unbound.push(u);
            }
        }
    }
    let waiting: Vec<(Role, Option<Service>)> = unbound.iter().map(Unbound::group).collect();
    let (keep, wait): (Vec<_>, Vec<_>) = bound.into_iter().partition(|(owner, socket)| {
        let g = group(&layout.instances[*owner].role, socket.spec.service);
        !(g.1.is_none() && waiting.contains(&g))
    });
    for (owner, socket) in wait {
        unbound.push(Unbound {
            role: layout.instances[owner].role.clone(),
            spec: socket.spec.clone(),
            socket: Some(socket),
        });
    }
    (keep, unbound)
}

fn scope_text(role: &Role) -> String {
    role.scope().map(|s| format!(" of {s}")).unwrap_or_default()
}

impl Layout {
    /// Tries the unbound listeners again; starts the services of each group now complete and
    /// returns their tasks to spawn.
    pub(super) fn retry_unbound(
        &mut self,
        unbound: &mut Vec<Unbound>,
        faults: &Faults,
    ) -> Vec<Task> {
        // A removed cluster's listeners go with it.
        unbound.retain(|u| {
            let kept = self.instances.iter().any(|i| i.role == u.role);
            if !kept {
                faults.clear(&u.label(), u.role.scope().as_deref());
            }
            kept
        });
        for u in unbound.iter_mut().filter(|u| u.socket.is_none()) {
            if let Some(Ok(socket)) = sockets::bind_each(std::slice::from_ref(&u.spec)).pop() {
                tracing::info!("{}{} bound at last", u.label(), scope_text(&u.role));
                u.socket = Some(socket);
            }
        }
        let mut groups: Vec<(Role, Option<Service>)> = unbound.iter().map(Unbound::group).collect();
        groups.dedup();
        let mut tasks = Vec::new();
        for group in groups {
            let complete = unbound
                .iter()
                .filter(|u| u.group() == group)
                .all(|u| u.socket.is_some());
            if !complete {
                continue;
            }
            let members: Vec<Unbound> = unbound.extract_if(.., |u| u.group() == group).collect();
            let (Some(started), Some(instance)) = (
                self.started.as_ref(),
                self.instances.iter().find(|i| i.role == group.0),
            ) else {
                continue;
            };
            let ctx = instance.context(&started.base);
            let labels: Vec<String> = members.iter().map(Unbound::label).collect();
            let sockets: Vec<BoundSocket> = members.into_iter().filter_map(|u| u.socket).collect();
            let shown: Vec<_> = sockets.iter().map(|s| listener(s, &group.0)).collect();
            match instance.start_listeners(
                sockets,
                &ctx,
                &started.wing,
                instance.pools.as_ref(),
                false,
            ) {
                Ok(started_tasks) => {
                    for label in &labels {
                        faults.clear(label, group.0.scope().as_deref());
                    }
                    for l in shown {
                        self.listeners.push((group.0.clone(), l));
                    }
                    tasks.extend(started_tasks);
                }
                Err(e) => {
                    tracing::error!("{}: {e:#}", labels.join(", "));
                    for label in &labels {
                        faults.record(
                            label,
                            group.0.scope().as_deref(),
                            FaultState::Down,
                            Some(&format!("{e:#}")),
                        );
                    }
                }
            }
        }
        self.show_listening();
        tasks
    }
}
