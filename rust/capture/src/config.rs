//! What the capture proxy runs with.

use std::time::Duration;

use replay_core::{CoreError, TlsOptions};

/// The proxy's settings (`replay capture`'s flags; the Python side holds their defaults).
#[derive(Debug, Clone)]
pub struct CaptureConfig {
    /// `HOST:PORT` to listen on (port 0: any free port).
    pub listen: String,
    /// The upstream's base URL, `http://` or `https://`; a request goes to it + its path and query.
    pub upstream: String,
    /// How the upstream's certificate is checked (https upstreams).
    pub upstream_tls: TlsOptions,
    /// Serve TLS with this certificate chain and key (PEM files); both or neither.
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    /// Opening a connection to the upstream (TCP and TLS) may take this long: then 502.
    pub connect_timeout: Duration,
    /// The upstream's headers, and each later read of its body, may take this long (zero: no
    /// limit): 504 before the headers, a cut connection after.
    pub read_timeout: Duration,
    /// GET on this path is answered by the proxy (its metrics), never forwarded.
    pub metrics_path: String,
    /// The request header whose value is the session id.
    pub session_header: String,
    /// Finished exchanges that may wait for the recorder; past that they are dropped and counted.
    pub queue_size: usize,
    /// ... and the bytes they may hold (bodies and answers); past that likewise.
    pub backlog_bytes: usize,
    /// Request bodies larger than this are refused (413).
    pub max_body_bytes: usize,
    /// The proxy runtime's worker threads (0: one per CPU).
    pub threads: usize,
    /// On stop, requests in flight may take this long to end.
    pub grace: Duration,
}

impl CaptureConfig {
    /// A config for `upstream`, listening on `listen`, with the defaults below.
    pub fn new(listen: &str, upstream: &str) -> CaptureConfig {
        CaptureConfig {
            listen: listen.to_string(),
            upstream: upstream.to_string(),
            upstream_tls: TlsOptions::default(),
            tls_cert: None,
            tls_key: None,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(600),
            metrics_path: "/metrics".into(),
            session_header: "X-Session-Id".into(),
            queue_size: 10_000,
            backlog_bytes: 256 << 20,
            max_body_bytes: 1 << 30,
            threads: 0,
            grace: Duration::from_secs(60),
        }
    }

    pub(crate) fn check(&self) -> Result<(), CoreError> {
        if self.queue_size == 0 {
            return Err(CoreError::config("queue_size", "must be at least 1"));
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            let missing = if self.tls_cert.is_none() {
                "tls_cert"
            } else {
                "tls_key"
            };
            return Err(CoreError::config(
                missing,
                "TLS needs both a certificate (--tls-cert) and its key (--tls-key)",
            ));
        }
        if !self.metrics_path.starts_with('/') {
            return Err(CoreError::config(
                "metrics_path",
                format!("must start with /, got {:?}", self.metrics_path),
            ));
        }
        Ok(())
    }
}
