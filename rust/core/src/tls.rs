//! https: the TLS side of a run's connections (rustls with the ring provider), set up once before
//! t0. The server's certificate is checked against the system's root certificates, or against the
//! certificates of `--ca-cert FILE` alone (as curl's `--cacert` replaces its bundle), or not at all
//! (`--insecure`). The host of the base URL is the name checked and sent as SNI (an IP address is
//! checked against the certificate's IP addresses and sends no SNI, as RFC 6066 says). The
//! handshake is part of opening a connection (`conn::Dialer`), so connections warmed up before t0
//! carry no handshake into any request's send lag.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring, verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;

use crate::error::CoreError;

/// How the server's certificate is checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// Trust only the certificates in this PEM file (a private CA, a self-signed server).
    pub ca_cert: Option<String>,
    /// Accept any certificate (the connection is still encrypted).
    pub insecure: bool,
}

/// A ready client side of TLS for one host.
#[derive(Clone)]
pub struct Tls {
    pub connector: TlsConnector,
    pub name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tls({:?})", self.name)
    }
}

impl Tls {
    /// The TLS setup for `host` under `options`. Errors name the flag (`ca_cert`) or the URL.
    pub fn new(url: &str, host: &str, options: &TlsOptions) -> Result<Tls, CoreError> {
        let provider = Arc::new(ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| CoreError::config("tls", e.to_string()))?;
        let config = if options.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        } else {
            builder
                .with_root_certificates(roots(options.ca_cert.as_deref())?)
                .with_no_client_auth()
        };
        let name = ServerName::try_from(host.to_string()).map_err(|e| CoreError::Url {
            url: url.to_string(),
            message: format!("host {host:?} is not a valid TLS server name: {e}"),
        })?;
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            name,
        })
    }
}

/// The certificates trusted: those of `ca_cert`, else the system's.
fn roots(ca_cert: Option<&str>) -> Result<RootCertStore, CoreError> {
    let mut store = RootCertStore::empty();
    match ca_cert {
        Some(path) => {
            let bad = |message: String| CoreError::config("ca_cert", format!("{path}: {message}"));
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(pem_error(e)))?
                .collect::<Result<_, _>>()
                .map_err(|e| bad(pem_error(e)))?;
            if certs.is_empty() {
                return Err(bad("no PEM certificate in the file".into()));
            }
            for cert in certs {
                store
                    .add(cert)
                    .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(CoreError::config(
                    "ca_cert",
                    "no system root certificate found (install ca-certificates, or name a CA with --ca-cert FILE)",
                ));
            }
        }
    }
    Ok(store)
}

/// What a failed handshake says, in words where rustls's own are cryptic.
pub(crate) fn tls_failure(e: &std::io::Error) -> String {
    let text = e.to_string();
    if text.contains("CaUsedAsEndEntity") {
        return "the server's own certificate is a CA certificate (as `openssl req -x509` makes by \
                default), which is refused as a server's: serve one signed by that CA"
            .into();
    }
    text
}

fn pem_error(e: rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => format!("cannot read: {io}"),
        other => format!("not a PEM file: {other:?}"),
    }
}

/// `--insecure`: every certificate is accepted; the handshake's signatures are still checked,
/// so the session is encrypted with whoever holds the key.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

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
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
