//! TLS client trust, one implementation for every client of the appliance (the load balancer's
//! HTTPS probes, the control module's provider APIs, and replication's client, which takes any
//! certificate because the pair's key proof authenticates the peer): a CA file the certificate
//! must chain to, a pinned SHA-256 fingerprint of the certificate itself, or (HAProxy's
//! `verify none`) any certificate. Whatever the trust, the handshake must be signed with the
//! key of the certificate presented, so the peer holds that key.
//!
//! Architecture invariant: a leaf (rustls with the ring provider; nothing of the crate).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// What a client accepts as the server's certificate.
#[derive(Debug, Clone, Copy)]
pub enum Trust<'a> {
    /// Certificates that chain to one in this PEM file and name the server.
    CaFile(&'a Path),
    /// The one certificate with this SHA-256 digest, whatever its issuer, names or dates (a
    /// self-signed Proxmox certificate has no CA to chain to).
    Fingerprint([u8; 32]),
    /// Any certificate: the handshake signatures are still checked.
    AnyCertificate,
}

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("can't read the CA file {path}: {reason}")]
    CaFile { path: String, reason: String },
    #[error("the CA file {0} holds no PEM certificate")]
    NoCertificate(String),
    #[error("TLS setup: {0}")]
    Setup(#[from] rustls::Error),
}

/// A rustls client configuration (ring, safe default protocol versions) that trusts `trust`.
pub fn client_config(trust: Trust<'_>) -> Result<ClientConfig, TrustError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let builder =
        ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions()?;
    Ok(match trust {
        Trust::CaFile(path) => builder
            .with_root_certificates(roots(path)?)
            .with_no_client_auth(),
        Trust::Fingerprint(digest) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Verifier {
                accept: Accept::Pinned(digest),
                algorithms,
            }))
            .with_no_client_auth(),
        Trust::AnyCertificate => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Verifier {
                accept: Accept::Any,
                algorithms,
            }))
            .with_no_client_auth(),
    })
}

/// The certificates of a PEM file, as trust anchors.
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

/// `AA:BB:...`, the way Proxmox and OpenSSL print fingerprints.
pub fn colon_hex(digest: &[u8]) -> String {
    digest
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Which certificates [`Verifier`] accepts without a CA.
#[derive(Debug)]
enum Accept {
    /// Any certificate.
    Any,
    /// The one certificate with this SHA-256 digest.
    Pinned([u8; 32]),
}

/// Accepts the certificates `accept` says, and checks the handshake signatures against the
/// certificate presented, whichever it is.
#[derive(Debug)]
struct Verifier {
    accept: Accept,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Accept::Pinned(digest) = &self.accept else {
            return Ok(ServerCertVerified::assertion());
        };
        let seen = ring::digest::digest(&ring::digest::SHA256, end_entity.as_ref());
        if seen.as_ref() == digest {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "the server's certificate has SHA-256 fingerprint {}, but the config pins {}",
                colon_hex(seen.as_ref()),
                colon_hex(digest)
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
