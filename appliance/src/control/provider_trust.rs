//! Trust for a provider's HTTPS API: a CA file (the certificate must chain to it and name the
//! host) or a pinned SHA-256 fingerprint of the certificate itself (Proxmox's self-signed
//! default, as `pvenode cert info` prints it). Only a BMC may be trusted blindly, and only with
//! `insecure: true` written in its config; even then the handshake must be signed by the key of
//! the certificate it presents. The verifiers are the crate's shared ones (`crate::tls_trust`).

use rustls::ClientConfig;

use crate::plan::machines::TlsTrust;
pub use crate::tls_trust::TrustError;
use crate::tls_trust::{self as trust, Trust};

/// A rustls client configuration that trusts exactly what the config says.
pub fn client_config(config: &TlsTrust) -> Result<ClientConfig, TrustError> {
    trust::client_config(match config {
        TlsTrust::CaFile(path) => Trust::CaFile(path),
        TlsTrust::Fingerprint(digest) => Trust::Fingerprint(*digest),
    })
}

/// Any certificate (a BMC with `insecure: true`): the handshake signatures are still checked.
pub fn client_config_insecure() -> Result<ClientConfig, TrustError> {
    trust::client_config(Trust::AnyCertificate)
}
