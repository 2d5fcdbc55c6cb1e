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
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;

/// A connector for the checks: verifying against `ca` (a PEM file) when given.
pub fn connector(ca: Option<&Path>) -> anyhow::Result<TlsConnector> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let config = match ca {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .with_context(|| format!("reading CA certificates from {}", path.display()))?;
            anyhow::ensure!(
                !certs.is_empty(),
                "{} holds no PEM certificate",
                path.display()
            );
            for cert in certs {
                roots
                    .add(cert)
                    .with_context(|| format!("a CA certificate in {}", path.display()))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SignaturesOnly {
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth(),
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Accepts any server certificate but still checks the handshake signatures against it, so
/// the peer holds the certificate's key (HAProxy's `verify none`).
#[derive(Debug)]
struct SignaturesOnly {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for SignaturesOnly {
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
