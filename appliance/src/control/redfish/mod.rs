//! The Redfish provider: bare metal (or anything with a BMC) driven through each node's
//! Redfish service.
//!
//! Authentication: a session (`POST` to the service root's `Links.Sessions` with the
//! credentials, then `X-Auth-Token` on every request, and the session deleted when the action is
//! done, since BMCs hold only a few) when the service offers a `SessionService`; HTTP Basic
//! otherwise, or when the BMC offers sessions but can't open one now (all its slots taken).
//!
//! The node's system is found by following the service's links (service root -> `Systems` ->
//! each system's `EthernetInterfaces`) to the one with the node's MAC; a BMC URL that names a
//! system directly is checked the same way. Machines can't be created or destroyed here:
//! `create` checks the system and prepares the install (the node's ISO as virtual media and a
//! one-time boot from CD for the ISO path, a one-time network boot for PXE), `start` powers it
//! on, `stop` asks for a graceful shutdown and forces it off after the shutdown timeout,
//! `destroy` powers it off and ejects the media. Virtual media is found under the system or
//! under its manager (`Links.ManagedBy`), as BMCs differ.
//!
//! Architecture invariant: like every provider, it reads the plan's machine spec and derives
//! nothing; a system that does not carry the node's MAC is never acted on.

mod answers;

use std::time::Duration;

use bytes::Bytes;
use data_encoding::BASE64;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use self::answers::{Collection, ErrorBody, EthernetInterface, Manager, ServiceRoot, VirtualMedia};
use super::https::{self, HttpsClient};
use super::{Action, ControlError, MachineStatus, Outcome, Power, Provider, provider_trust};
use crate::plan::machines::{Bmc, BmcTrust, ControlTimeouts};
use crate::plan::machines::{BootDevice, InstallMedium, MachineSpec};
use crate::vocabulary::MacAddr;

/// How often power state is polled while waiting for it to change.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub poll: Duration,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            poll: Duration::from_secs(1),
        }
    }
}

#[derive(Debug)]
pub struct RedfishProvider {
    timeouts: ControlTimeouts,
    pace: Pace,
}

impl RedfishProvider {
    pub fn new(timeouts: ControlTimeouts) -> Self {
        RedfishProvider {
            timeouts,
            pace: Pace::default(),
        }
    }

    pub fn with_pace(mut self, pace: Pace) -> Self {
        self.pace = pace;
        self
    }

    /// A session with the machine's BMC: its client (logged in), then its system. The
    /// caller logs out ([`System::done`]); a failure here logs out itself.
    async fn system(&self, m: &MachineSpec) -> Result<System, ControlError> {
        let bmc = m
            .bmc
            .as_ref()
            .ok_or_else(|| ControlError::Failed(format!("{} has no BMC in the config", m.node)))?;
        let mut client = BmcClient::new(bmc, self.timeouts.request)?;
        client.login().await?;
        match client.find_system(m.mac).await {
            Ok(path) => Ok(System { client, path }),
            Err(e) => {
                client.logout().await;
                Err(e)
            }
        }
    }

    async fn ensure(&self, m: &MachineSpec, sys: &System) -> Result<Outcome, ControlError> {
        let mut done = Vec::new();
        let device = match &m.install {
            InstallMedium::Iso { url, .. } => {
                if let Outcome::Changed(what) = sys.insert(url).await? {
                    done.push(what);
                }
                BootDevice::Cdrom
            }
            InstallMedium::Network => BootDevice::Network,
        };
        if let Outcome::Changed(what) = sys.boot_once(device).await? {
            done.push(what);
        }
        let found = format!("system {} at {}", sys.path, sys.client.endpoint);
        Ok(if done.is_empty() {
            Outcome::Unchanged(format!("{found} is ready to install"))
        } else {
            Outcome::Changed(format!("{found}: {}", done.join("; ")))
        })
    }

    async fn power_on(&self, sys: &System) -> Result<Outcome, ControlError> {
        if sys.power().await? == Power::On {
            return Ok(Outcome::Unchanged(format!("{} is on", sys.path)));
        }
        sys.reset("On").await?;
        sys.wait_power(Power::On, self.timeouts.task, self.pace.poll)
            .await?;
        Ok(Outcome::Changed(format!("powered on {}", sys.path)))
    }

    async fn power_off(&self, sys: &System) -> Result<Outcome, ControlError> {
        if sys.power().await? == Power::Off {
            return Ok(Outcome::Unchanged(format!("{} is off", sys.path)));
        }
        sys.reset("GracefulShutdown").await?;
        let grace = self.timeouts.shutdown;
        match sys.wait_power(Power::Off, grace, self.pace.poll).await {
            Ok(()) => return Ok(Outcome::Changed(format!("shut down {}", sys.path))),
            Err(ControlError::Timeout(_)) => {}
            Err(e) => return Err(e),
        }
        sys.reset("ForceOff").await?;
        sys.wait_power(Power::Off, self.timeouts.task, self.pace.poll)
            .await?;
        Ok(Outcome::Changed(format!(
            "{} did not shut down within {}: forced off",
            sys.path,
            humantime::format_duration(grace)
        )))
    }

    async fn reset(&self, sys: &System) -> Result<Outcome, ControlError> {
        if sys.power().await? != Power::On {
            return Err(ControlError::Failed(format!(
                "{} is not on: start it instead of resetting it",
                sys.path
            )));
        }
        sys.reset("ForceRestart").await?;
        Ok(Outcome::Changed(format!("reset {}", sys.path)))
    }

    async fn status(&self, sys: &System) -> Result<Outcome, ControlError> {
        let media = sys
            .media()
            .await
            .ok()
            .and_then(|(_, vm)| vm.holds_media().then_some(vm.image).flatten());
        Ok(Outcome::Status(MachineStatus::Present {
            id: format!("system {} at {}", sys.path, sys.client.endpoint),
            power: sys.power().await?,
            media,
            drift: Vec::new(),
        }))
    }

    /// Bare metal is not destroyed: it is powered off and its virtual media ejected.
    async fn destroy(&self, sys: &System) -> Result<Outcome, ControlError> {
        let mut done = Vec::new();
        if sys.power().await? != Power::Off {
            sys.reset("ForceOff").await?;
            sys.wait_power(Power::Off, self.timeouts.task, self.pace.poll)
                .await?;
            done.push("forced off".to_owned());
        }
        if let Outcome::Changed(what) = sys.eject().await? {
            done.push(what);
        }
        Ok(if done.is_empty() {
            Outcome::Unchanged(format!(
                "{} is off without media (bare metal stays)",
                sys.path
            ))
        } else {
            Outcome::Changed(format!(
                "{}: {} (bare metal stays)",
                sys.path,
                done.join(", ")
            ))
        })
    }
}

impl Provider for RedfishProvider {
    fn describe(&self) -> String {
        "redfish BMCs".to_owned()
    }

    async fn act(&self, m: &MachineSpec, action: Action) -> Result<Outcome, ControlError> {
        if let (Action::InsertMedia, InstallMedium::Network) = (action, &m.install) {
            return Err(ControlError::Failed(format!(
                "{} installs over the network (install: pxe): it has no ISO",
                m.node
            )));
        }
        let sys = match self.system(m).await {
            Ok(sys) => sys,
            Err(ControlError::Conflict(why)) if action == Action::Status => {
                return Ok(Outcome::Status(MachineStatus::Present {
                    id: m.bmc.as_ref().map_or_else(String::new, |b| b.url.clone()),
                    power: Power::Other("unknown".into()),
                    media: None,
                    drift: vec![why],
                }));
            }
            Err(e) => return Err(e),
        };
        let result = match action {
            Action::Ensure => self.ensure(m, &sys).await,
            Action::PowerOn => self.power_on(&sys).await,
            Action::PowerOff => self.power_off(&sys).await,
            Action::Reset => self.reset(&sys).await,
            Action::BootOnce(device) => sys.boot_once(device).await,
            Action::InsertMedia => match &m.install {
                InstallMedium::Iso { url, .. } => sys.insert(url).await,
                InstallMedium::Network => unreachable!("refused above"),
            },
            Action::EjectMedia => sys.eject().await,
            Action::Status => self.status(&sys).await,
            Action::Destroy => self.destroy(&sys).await,
        };
        sys.done().await;
        result
    }
}

/// The node's system at its BMC.
struct System {
    client: BmcClient,
    /// `/redfish/v1/Systems/<id>`.
    path: String,
}

impl System {
    /// Ends the session, if there is one.
    async fn done(mut self) {
        self.client.logout().await;
    }

    /// The system resource, as it is now.
    async fn system(&self) -> Result<answers::System, ControlError> {
        self.client.get(&self.path, "a ComputerSystem").await
    }

    async fn power(&self) -> Result<Power, ControlError> {
        let sys = self.system().await?;
        Ok(match sys.power_state.as_deref() {
            Some("On") => Power::On,
            Some("Off") => Power::Off,
            other => Power::Other(other.unwrap_or("unknown").to_owned()),
        })
    }

    /// `ComputerSystem.Reset` with `kind`, at the target the system advertises.
    async fn reset(&self, kind: &str) -> Result<(), ControlError> {
        let sys = self.system().await?;
        let action = sys.actions.and_then(|a| a.reset).ok_or_else(|| {
            ControlError::Failed(format!("{} offers no ComputerSystem.Reset", self.path))
        })?;
        if let Some(allowed) = &action.allowed
            && !allowed.iter().any(|v| v == kind)
        {
            return Err(ControlError::Failed(format!(
                "{} does not allow the reset type {kind} (it allows {})",
                self.path,
                allowed.join(", ")
            )));
        }
        let target = action
            .target
            .unwrap_or_else(|| format!("{}/Actions/ComputerSystem.Reset", self.path));
        self.client
            .send(Method::POST, &target, &json!({ "ResetType": kind }))
            .await
    }

    /// Polls the power state until it is `want`, for at most `limit`.
    async fn wait_power(
        &self,
        want: Power,
        limit: Duration,
        poll: Duration,
    ) -> Result<(), ControlError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let now = self.power().await?;
            if now == want {
                return Ok(());
            }
            if tokio::time::Instant::now() + poll > deadline {
                return Err(ControlError::Timeout(format!(
                    "{} at {} is still {now} after {}, not {want}",
                    self.path,
                    self.client.endpoint,
                    humantime::format_duration(limit)
                )));
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// A one-time boot override (`BootSourceOverrideEnabled: Once`).
    async fn boot_once(&self, device: BootDevice) -> Result<Outcome, ControlError> {
        let target = match device {
            BootDevice::Network => "Pxe",
            BootDevice::Cdrom => "Cd",
            BootDevice::Disk => "Hdd",
        };
        let boot = self.system().await?.boot.unwrap_or_default();
        if let Some(allowed) = &boot.allowed
            && !allowed.iter().any(|v| v == target)
        {
            return Err(ControlError::Failed(format!(
                "{} can't boot once from {target} (it allows {})",
                self.path,
                allowed.join(", ")
            )));
        }
        // Some BMCs (sushy-emulator among them) keep an override as `Continuous` whatever
        // was asked: the next boot is from `target` either way, so that counts as in effect.
        if boot.target.as_deref() == Some(target)
            && matches!(boot.enabled.as_deref(), Some("Once" | "Continuous"))
        {
            return Ok(Outcome::Unchanged(format!(
                "{} boots from {target}",
                self.path
            )));
        }
        self.client
            .send(
                Method::PATCH,
                &self.path,
                &json!({ "Boot": {
                    "BootSourceOverrideTarget": target,
                    "BootSourceOverrideEnabled": "Once",
                }}),
            )
            .await?;
        Ok(Outcome::Changed(format!(
            "{} boots once from {target}",
            self.path
        )))
    }

    /// The CD/DVD virtual media slot: under the system, or under its manager.
    async fn media(&self) -> Result<(String, VirtualMedia), ControlError> {
        let sys = self.system().await?;
        let mut collections = Vec::new();
        if let Some(id) = sys.virtual_media.and_then(|l| l.id) {
            collections.push(id);
        }
        for manager in sys.links.map(|l| l.managed_by).unwrap_or_default() {
            let manager: Manager = self.client.get(&manager, "a Manager").await?;
            if let Some(id) = manager.virtual_media.and_then(|l| l.id) {
                collections.push(id);
            }
        }
        for collection in collections {
            let collection: Collection = self.client.get(&collection, "a collection").await?;
            for member in collection.members {
                let media: VirtualMedia = self.client.get(&member, "a VirtualMedia").await?;
                if media.is_cd() {
                    return Ok((member, media));
                }
            }
        }
        Err(ControlError::Failed(format!(
            "{} at {} has no CD/DVD virtual media",
            self.path, self.client.endpoint
        )))
    }

    async fn insert(&self, url: &str) -> Result<Outcome, ControlError> {
        let (path, media) = self.media().await?;
        let inserted = media.holds_media();
        let image = media.image.as_deref();
        if inserted && image == Some(url) {
            return Ok(Outcome::Unchanged(format!("{path} has {url}")));
        }
        if inserted {
            self.client
                .send(
                    Method::POST,
                    &media.action_target(&path, "EjectMedia"),
                    &json!({}),
                )
                .await?;
        }
        self.client
            .send(
                Method::POST,
                &media.action_target(&path, "InsertMedia"),
                &json!({ "Image": url, "Inserted": true, "WriteProtected": true }),
            )
            .await?;
        Ok(Outcome::Changed(format!("inserted {url} into {path}")))
    }

    async fn eject(&self) -> Result<Outcome, ControlError> {
        let (path, media) = self.media().await?;
        if !media.holds_media() {
            return Ok(Outcome::Unchanged(format!("{path} is empty")));
        }
        self.client
            .send(
                Method::POST,
                &media.action_target(&path, "EjectMedia"),
                &json!({}),
            )
            .await?;
        Ok(Outcome::Changed(format!("ejected the media of {path}")))
    }
}

/// One BMC: its HTTPS client, the Basic credentials, and the JSON calls.
struct BmcClient {
    client: HttpsClient,
    /// `https://host[:port]`.
    endpoint: String,
    /// The system's path when the configured URL names one.
    system: Option<String>,
    username: String,
    password_source: String,
    /// HTTP Basic, until a session is open.
    basic: HeaderValue,
    /// What a session is opened with (`UserName`, `Password`).
    login: Value,
    session: Option<Session>,
    timeout: Duration,
}

/// An open Redfish session: its token, and where to delete it.
struct Session {
    token: HeaderValue,
    location: Option<String>,
}

const X_AUTH_TOKEN: &str = "x-auth-token";

impl BmcClient {
    fn new(bmc: &Bmc, timeout: Duration) -> Result<BmcClient, ControlError> {
        let password = crate::control::credential(&bmc.password)
            .map_err(|e| ControlError::Credentials(e.to_string()))?;
        let login = json!({ "UserName": bmc.username, "Password": password.expose() });
        let mut auth = HeaderValue::from_str(&format!(
            "Basic {}",
            BASE64.encode(format!("{}:{}", bmc.username, password.expose()).as_bytes())
        ))
        .map_err(|_| ControlError::Credentials("the BMC credentials can't be sent".into()))?;
        auth.set_sensitive(true);
        let url = url::Url::parse(&bmc.url)
            .map_err(|e| ControlError::Failed(format!("BMC URL {}: {e}", bmc.url)))?;
        let endpoint = url.origin().ascii_serialization();
        let system = Some(url.path().trim_end_matches('/').to_owned()).filter(|p| !p.is_empty());
        let tls = match &bmc.trust {
            BmcTrust::Verify(trust) => provider_trust::client_config(trust),
            BmcTrust::Insecure => provider_trust::client_config_insecure(),
        }
        .map_err(|e| ControlError::Tls {
            endpoint: endpoint.clone(),
            reason: e.to_string(),
        })?;
        Ok(BmcClient {
            client: https::client(tls, timeout),
            endpoint,
            system,
            username: bmc.username.clone(),
            password_source: bmc.password.to_string(),
            basic: auth,
            login,
            session: None,
            timeout,
        })
    }

    /// One request; a temporary or permanent redirect (307, 308: method and body kept) within
    /// the same service is followed, up to 3 times (sushy-emulator redirects a system named by
    /// its name to its UUID).
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Bytes, ControlError> {
        let mut path = path.to_owned();
        for _ in 0..3 {
            match self.call_once(method.clone(), &path, body).await? {
                Ok(bytes) => return Ok(bytes),
                Err(next) => path = next,
            }
        }
        Err(ControlError::Failed(format!(
            "{method} {path}: the BMC at {} redirects too often",
            self.endpoint
        )))
    }

    /// `Ok(Err(path))`: redirected there.
    async fn call_once(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Result<Bytes, String>, ControlError> {
        let mut request = Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.endpoint))
            .header(ACCEPT, "application/json");
        request = match &self.session {
            Some(session) => request.header(X_AUTH_TOKEN, session.token.clone()),
            None => request.header(AUTHORIZATION, self.basic.clone()),
        };
        let body = match body {
            Some(b) => {
                request = request.header(CONTENT_TYPE, "application/json");
                Bytes::from(b.to_string())
            }
            None => Bytes::new(),
        };
        let request = request
            .body(body)
            .map_err(|e| ControlError::Failed(format!("can't build {method} {path}: {e}")))?;
        let what = format!("{method} {path}");
        let answer =
            https::exchange(&self.client, request, self.timeout, &self.endpoint, &what).await?;
        if answer.status.is_success() {
            return Ok(Ok(answer.body));
        }
        if matches!(
            answer.status,
            StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
        ) && let Some(next) = answer
            .headers
            .get(hyper::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| self.same_service(l))
        {
            return Ok(Err(next));
        }
        let message = redfish_message(&answer.body)
            .or(answer.reason)
            .unwrap_or_else(|| {
                answer
                    .status
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_owned()
            });
        Err(match answer.status {
            StatusCode::UNAUTHORIZED => ControlError::Credentials(format!(
                "the BMC at {} refused the user {} (401 {message}): check the username and the password in {}",
                self.endpoint, self.username, self.password_source
            )),
            status => ControlError::Failed(format!(
                "{what}: the BMC at {} answered {}: {message}",
                self.endpoint,
                status.as_u16()
            )),
        })
    }

    /// A redirect's target as a path, when it stays on this service (a redirect elsewhere is
    /// not followed: the credentials go to this BMC only).
    fn same_service(&self, location: &str) -> Option<String> {
        if location.starts_with('/') {
            return Some(location.to_owned());
        }
        let url = url::Url::parse(location).ok()?;
        (url.origin().ascii_serialization() == self.endpoint).then(|| url.path().to_owned())
    }

    /// Opens a session when the service offers them; stays with Basic otherwise.
    async fn login(&mut self) -> Result<(), ControlError> {
        let root: ServiceRoot = self.get("/redfish/v1/", "a service root").await?;
        let sessions = root.links.and_then(|l| l.sessions).and_then(|s| s.id);
        let (Some(sessions), Some(_)) = (sessions, root.session_service) else {
            return Ok(());
        };
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("{}{sessions}", self.endpoint))
            .header(ACCEPT, "application/json")
            .header(CONTENT_TYPE, "application/json")
            .body(Bytes::from(self.login.to_string()))
            .map_err(|e| ControlError::Failed(format!("can't build the session request: {e}")))?;
        let what = format!("POST {sessions}");
        let answer =
            https::exchange(&self.client, request, self.timeout, &self.endpoint, &what).await?;
        if answer.status == StatusCode::UNAUTHORIZED {
            return Err(ControlError::Credentials(format!(
                "the BMC at {} refused a session for the user {} (401): check the username and the password in {}",
                self.endpoint, self.username, self.password_source
            )));
        }
        let token = answer
            .headers
            .get(X_AUTH_TOKEN)
            .filter(|_| answer.status.is_success());
        let Some(token) = token else {
            tracing::warn!(
                "the BMC at {} offers sessions but did not open one ({}{}): using Basic authentication",
                self.endpoint,
                answer.status.as_u16(),
                redfish_message(&answer.body)
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            );
            return Ok(());
        };
        let mut token = token.clone();
        token.set_sensitive(true);
        // An absolute URL or a path; deleted on the same service.
        let location = answer
            .headers
            .get(hyper::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(|l| match url::Url::parse(l) {
                Ok(u) => u.path().to_owned(),
                Err(_) => l.to_owned(),
            });
        self.session = Some(Session { token, location });
        Ok(())
    }

    /// Deletes the session (BMCs hold only a few); a failure is only logged, as the BMC
    /// expires it anyway.
    async fn logout(&mut self) {
        let Some(session) = self.session.as_ref() else {
            return;
        };
        let Some(location) = session.location.clone() else {
            self.session = None;
            return;
        };
        if let Err(e) = self.call(Method::DELETE, &location, None).await {
            tracing::warn!(
                "can't close the session {location} at {}: {e}",
                self.endpoint
            );
        }
        self.session = None;
    }

    /// A resource read as `T` (`kind` names it for errors: "a ComputerSystem").
    async fn get<T: DeserializeOwned>(&self, path: &str, kind: &str) -> Result<T, ControlError> {
        let body = self.call(Method::GET, path, None).await?;
        let value: Value = serde_json::from_slice(&body).map_err(|e| {
            ControlError::Failed(format!(
                "GET {path}: the BMC at {} did not answer JSON: {e}",
                self.endpoint
            ))
        })?;
        serde_json::from_value(value).map_err(|e| {
            ControlError::Failed(format!(
                "GET {path}: the BMC at {} did not answer with {kind} (a JSON object): {e}",
                self.endpoint
            ))
        })
    }

    /// An action or a change; Redfish answers 200, 202 or 204, with or without a body.
    async fn send(&self, method: Method, path: &str, body: &Value) -> Result<(), ControlError> {
        self.call(method, path, Some(body)).await.map(drop)
    }

    /// The system with the node's MAC, by following the service's links.
    async fn find_system(&self, mac: MacAddr) -> Result<String, ControlError> {
        let candidates = match &self.system {
            Some(path) => vec![path.clone()],
            None => {
                let root: ServiceRoot = self.get("/redfish/v1/", "a service root").await?;
                let systems = root.systems.and_then(|l| l.id).ok_or_else(|| {
                    ControlError::Failed(format!(
                        "the Redfish service at {} lists no Systems",
                        self.endpoint
                    ))
                })?;
                self.get::<Collection>(&systems, "a collection")
                    .await?
                    .members
            }
        };
        let mut seen = Vec::new();
        let mut without_nics = Vec::new();
        for path in &candidates {
            let macs = self.macs(path).await?;
            if macs.contains(&mac) {
                return Ok(path.clone());
            }
            if macs.is_empty() {
                without_nics.push(path.clone());
            }
            seen.extend(macs.iter().map(|m| format!("{m} ({path})")));
        }
        // A BMC that lists no NICs for its only system: that system it is.
        if candidates.len() == 1 && without_nics.len() == 1 {
            return Ok(without_nics.remove(0));
        }
        Err(ControlError::Conflict(format!(
            "no system at {} has the MAC {mac}{}: nothing was changed; check the node's MAC or its BMC URL",
            self.endpoint,
            if seen.is_empty() {
                String::new()
            } else {
                format!(" (it has {})", seen.join(", "))
            }
        )))
    }

    async fn macs(&self, system: &str) -> Result<Vec<MacAddr>, ControlError> {
        let sys: answers::System = self.get(system, "a ComputerSystem").await?;
        let Some(nics) = sys.ethernet_interfaces.and_then(|l| l.id) else {
            return Ok(Vec::new());
        };
        let mut macs = Vec::new();
        let nics: Collection = self.get(&nics, "a collection").await?;
        for nic in nics.members {
            let nic: EthernetInterface = self.get(&nic, "an EthernetInterface").await?;
            for mac in [nic.mac, nic.permanent_mac].into_iter().flatten() {
                if let Ok(mac) = mac.parse() {
                    macs.push(mac);
                }
            }
        }
        Ok(macs)
    }
}

/// A Redfish error body's message: `error.@Message.ExtendedInfo[0].Message` or
/// `error.message`.
fn redfish_message(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<ErrorBody>(body).ok()?.message()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redfish_errors_say_what_the_bmc_said() {
        let body = br#"{"error": {"code": "Base.1.0.GeneralError", "message": "A general error has occurred.", "@Message.ExtendedInfo": [{"Message": "The action ComputerSystem.Reset is not supported."}]}}"#;
        assert_eq!(
            redfish_message(body).as_deref(),
            Some("The action ComputerSystem.Reset is not supported.")
        );
        assert_eq!(
            redfish_message(br#"{"error": {"message": "nope"}}"#).as_deref(),
            Some("nope")
        );
        assert_eq!(redfish_message(b"<html>"), None);
    }
}
