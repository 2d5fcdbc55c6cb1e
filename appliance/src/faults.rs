//! The appliance's faults: a service that failed and is started again, a listener whose address
//! is missing, a state file that can't be written. The supervisor and the services record them
//! here; `status`, `status --json` (`appliance.faults`) and the page read them
//! (`operator::status`).
//!
//! A state file that can't be written (a full or read-only state disk) is an `unwritable` fault
//! of what owns it: a segment's `lease journal PATH`, a cluster's `install markers` or `install
//! phases`. What depends on it is not done (no ACK for an unsynced lease; a 503 with
//! `Retry-After` for a fetch whose marker can't be written; the leases' and markers' errors are
//! logged at most once per 10 s), and the next write that succeeds clears it, without a
//! restart.
//!
//! Architecture invariant: no I/O; a fault is cleared by whoever recorded it, when it is over.

use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// One service's fault: what failed, what it is doing about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceFault {
    /// `dns`, `dhcp`, `http`, `lb`, ... or `dns/udp 10.96.0.1:53` for a listener not bound.
    pub service: String,
    /// Whose it is: `cluster okd`, `segment ens19`, or nothing for the appliance's own.
    #[serde(default)]
    pub scope: Option<String>,
    pub state: FaultState,
    /// How many times it was started again.
    pub restarts: u32,
    /// The last error.
    pub error: String,
    /// When the last error happened (seconds since the epoch).
    pub at: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultState {
    /// Failed; started again after a backoff.
    Restarting,
    /// Started again after a failure: serving.
    Serving,
    /// Failed and can't be started again: down until the appliance restarts.
    Down,
    /// A listener whose address could not be bound: tried again every few seconds.
    NotBound,
    /// A state file could not be written (a full or read-only disk): what depends on it is not
    /// acted upon, and it is written again at the next change.
    Unwritable,
}

impl FaultState {
    pub fn name(self) -> &'static str {
        match self {
            FaultState::Restarting => "restarting",
            FaultState::Serving => "serving again",
            FaultState::Down => "down",
            FaultState::NotBound => "not bound",
            FaultState::Unwritable => "can't be written",
        }
    }
}

/// The faults the supervisor and the services record and status reads (shared, cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<std::sync::Mutex<Vec<ServiceFault>>>);

impl Faults {
    /// Records `state` for `service` of `scope`: a new fault, or the same one's next step (a
    /// restart counts when a failed service serves again).
    pub fn record(
        &self,
        service: &str,
        scope: Option<&str>,
        state: FaultState,
        error: Option<&str>,
    ) {
        let mut faults = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = secs(SystemTime::now());
        let i = match faults
            .iter()
            .position(|f| f.service == service && f.scope.as_deref() == scope)
        {
            Some(i) => i,
            None => {
                faults.push(ServiceFault {
                    service: service.to_owned(),
                    scope: scope.map(str::to_owned),
                    state,
                    restarts: 0,
                    error: String::new(),
                    at: now,
                });
                faults.len() - 1
            }
        };
        let fault = &mut faults[i];
        if state == FaultState::Serving && fault.state == FaultState::Restarting {
            fault.restarts += 1;
        }
        fault.state = state;
        if let Some(error) = error {
            fault.error = error.to_owned();
            fault.at = now;
        }
    }

    /// Forgets `service` of `scope` (a listener bound at last).
    pub fn clear(&self, service: &str, scope: Option<&str>) {
        let mut faults = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        faults.retain(|f| !(f.service == service && f.scope.as_deref() == scope));
    }

    pub fn list(&self) -> Vec<ServiceFault> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
