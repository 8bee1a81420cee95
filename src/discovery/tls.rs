//! `https://` for every client of a registry (feature `client-tls`): rustls on the `ring`
//! provider, certificates checked against the system's roots (and any a caller adds) by the
//! platform verifier reqwest itself would use.
//!
//! Invariants: a certificate is always verified (no switch turns it off here); the system's
//! roots are read at the first TLS handshake, not when a client is built, so a client of a
//! plain `http://` loopback registry costs nothing more and works on a machine without a CA
//! store.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use rustls_platform_verifier::Verifier;

/// `builder` speaking TLS through rustls, trusting the system's roots and `extra_roots`.
pub fn with_tls(
    builder: reqwest::ClientBuilder,
    extra_roots: Vec<CertificateDer<'static>>,
) -> reqwest::ClientBuilder {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Lazy {
        extra_roots,
        algorithms: provider.signature_verification_algorithms,
        provider: Arc::clone(&provider),
        verifier: OnceLock::new(),
    };
    // The `ring` provider carries suites for TLS 1.2 and 1.3, the safe defaults: this cannot
    // fail.
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports TLS 1.2 and 1.3");
    let mut config = config
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    builder.tls_backend_preconfigured(config)
}

/// The platform verifier, made at the first handshake that needs it.
struct Lazy {
    extra_roots: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
    algorithms: WebPkiSupportedAlgorithms,
    verifier: OnceLock<Result<Verifier, rustls::Error>>,
}

impl std::fmt::Debug for Lazy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lazy")
            .field("extra_roots", &self.extra_roots.len())
            .finish_non_exhaustive()
    }
}

impl Lazy {
    fn verifier(&self) -> Result<&Verifier, rustls::Error> {
        let made = self.verifier.get_or_init(|| {
            Verifier::new_with_extra_roots(self.extra_roots.clone(), Arc::clone(&self.provider))
        });
        made.as_ref().map_err(Clone::clone)
    }
}

impl ServerCertVerifier for Lazy {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verifier()?.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
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
