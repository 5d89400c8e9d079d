//! Connections to the upstream: dialled (TCP, then TLS for an https upstream), kept alive between
//! requests and reused, newest first.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::Uri;
use http_body_util::Full;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use replay_core::tls::Tls;
use replay_core::{CoreError, TlsOptions};

/// A connection's request side.
pub(crate) type Sender = SendRequest<Full<Bytes>>;

/// Idle connections kept for reuse at most (more are closed).
const IDLE_MAX: usize = 4096;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Where requests go, and the connections kept open to it.
pub(crate) struct Upstream {
    /// The base URL's path with no trailing `/`; a request goes to it + its path and query.
    base_path: String,
    host: String,
    port: u16,
    /// `Host` sent upstream.
    pub authority: Authority,
    tls: Option<Tls>,
    connect_timeout: Duration,
    idle: Mutex<Vec<Sender>>,
    /// Connections opened (kept alive and reused, so few).
    pub dials: AtomicU64,
}

/// Why no connection could be had.
pub(crate) enum DialError {
    Timeout,
    Failed(String),
}

impl Upstream {
    pub(crate) fn new(
        url: &str,
        options: &TlsOptions,
        connect_timeout: Duration,
    ) -> Result<Arc<Upstream>, CoreError> {
        let bad = |message: &str| CoreError::Url {
            url: url.to_string(),
            message: message.to_string(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let https = match uri.scheme() {
            Some(s) if *s == Scheme::HTTPS => true,
            Some(s) if *s == Scheme::HTTP => false,
            _ => return Err(bad("the upstream must be an http:// or https:// URL")),
        };
        if uri.query().is_some() {
            return Err(bad("the upstream URL may not have a query"));
        }
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| bad("no host in the URL"))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            Some(Tls::new(url, &host, options)?)
        } else {
            None
        };
        let base_path = uri.path().trim_end_matches('/').to_string();
        Ok(Arc::new(Upstream {
            base_path,
            host,
            port,
            authority,
            tls,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
            dials: AtomicU64::new(0),
        }))
    }

    /// The request target (origin form, as HTTP/1.1 servers expect) for a request's path and
    /// query.
    pub(crate) fn uri(&self, path_and_query: &str) -> Result<Uri, http::uri::InvalidUri> {
        format!("{}{}", self.base_path, path_and_query).parse()
    }

    /// An idle connection that is still open, else a new one. (A connection put back the moment
    /// its answer was read may not have said it is ready again yet: it is waited for, not
    /// thrown away.)
    pub(crate) async fn connection(&self) -> Result<(Sender, bool), DialError> {
        loop {
            let idle = self.idle.lock().expect("idle").pop();
            match idle {
                Some(mut s) if !s.is_closed() => {
                    if s.ready().await.is_ok() {
                        return Ok((s, true));
                    }
                }
                Some(_) => continue,
                None => break,
            }
        }
        self.dials.fetch_add(1, Ordering::Relaxed);
        Ok((self.dial().await?, false))
    }

    /// A connection whose answer was read to its end goes back for reuse.
    pub(crate) fn put_back(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().expect("idle");
        if idle.len() < IDLE_MAX {
            idle.push(sender);
        }
    }

    /// A new connection: TCP (no delay), TLS for https, then HTTP/1.1, within the connect
    /// timeout.
    pub(crate) async fn dial(&self) -> Result<Sender, DialError> {
        let opened = tokio::time::timeout(self.connect_timeout, async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(|e| DialError::Failed(format!("cannot connect: {e}")))?;
            let _ = tcp.set_nodelay(true);
            let io: Box<dyn Io> = match &self.tls {
                None => Box::new(tcp),
                Some(tls) => Box::new(
                    tls.connector
                        .connect(tls.name.clone(), tcp)
                        .await
                        .map_err(|e| DialError::Failed(format!("TLS handshake failed: {e}")))?,
                ),
            };
            let (sender, conn) = http1::handshake(TokioIo::new(io))
                .await
                .map_err(|e| DialError::Failed(format!("HTTP handshake failed: {e}")))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok::<_, DialError>(sender)
        })
        .await;
        match opened {
            Ok(r) => r,
            Err(_) => Err(DialError::Timeout),
        }
    }
}
