//! The TLS client side of the HTTPS health checks (`/readyz` on 6443, `/healthz` on 22623).
//!
//! OpenShift's nodes serve certificates from the cluster's own CAs, which the services host
//! does not have before the install, so by default the checks do what OpenShift's documented
//! HAProxy configuration does (`check-ssl verify none`): the handshake must complete and its
//! signatures must be valid for the certificate presented, but the certificate itself is not
//! checked. With `lb.health.ca_file` the certificate must chain to that CA and name
//! `api-int.<cluster domain>`, the name sent as SNI either way.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_rustls::TlsConnector;

use crate::tls_trust::{self as trust, Trust};

/// A connector for the checks: verifying against `ca` (a PEM file) when given, otherwise any
/// certificate whose key signs the handshake (`verify none`).
pub fn connector(ca: Option<&Path>) -> anyhow::Result<TlsConnector> {
    let config = trust::client_config(ca.map_or(Trust::AnyCertificate, Trust::CaFile))
        .context("the TLS client of the health checks")?;
    Ok(TlsConnector::from(Arc::new(config)))
}
