//! Trust for a provider's HTTPS API: a CA file (the certificate must chain to it and name the
//! host) or a pinned SHA-256 fingerprint of the certificate itself (Proxmox's self-signed
//! default, as `pvenode cert info` prints it). Only a BMC may be trusted blindly, and only with
//! `insecure: true` written in its config; even then the handshake must be signed by the key of
//! the certificate it presents.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::config::TlsTrust;

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("can't read the CA file {path}: {reason}")]
    CaFile { path: String, reason: String },
    #[error("the CA file {0} holds no PEM certificate")]
    NoCertificate(String),
    #[error("TLS setup: {0}")]
    Setup(#[from] rustls::Error),
}

/// A rustls client configuration that trusts exactly what the config says.
pub fn client_config(trust: &TlsTrust) -> Result<ClientConfig, TrustError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?;
    Ok(match trust {
        TlsTrust::CaFile(path) => builder
            .with_root_certificates(roots(path)?)
            .with_no_client_auth(),
        TlsTrust::Fingerprint(digest) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedFingerprint {
                digest: *digest,
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth(),
    })
}

/// Any certificate (a BMC with `insecure: true`): the handshake signatures are still checked.
pub fn client_config_insecure() -> Result<ClientConfig, TrustError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?;
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate {
            algorithms: provider.signature_verification_algorithms,
        }))
        .with_no_client_auth())
}

fn roots(path: &Path) -> Result<RootCertStore, TrustError> {
    let shown = path.display().to_string();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| TrustError::CaFile {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TrustError::NoCertificate(shown));
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert)?;
    }
    Ok(roots)
}

/// `AA:BB:...`, the way Proxmox prints fingerprints.
pub fn colon_hex(digest: &[u8]) -> String {
    digest
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Accepts the one certificate whose SHA-256 digest is pinned, whatever its issuer, names or
/// dates (a self-signed Proxmox certificate has no CA to chain to), and still checks that the
/// handshake was signed with that certificate's key.
#[derive(Debug)]
struct PinnedFingerprint {
    digest: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedFingerprint {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let seen = ring::digest::digest(&ring::digest::SHA256, end_entity.as_ref());
        if seen.as_ref() == self.digest {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "the server's certificate has SHA-256 fingerprint {}, but the config pins {}",
                colon_hex(seen.as_ref()),
                colon_hex(&self.digest)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Accepts any certificate; the handshake must still be signed with its key.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
