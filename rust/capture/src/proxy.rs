//! The proxy: listener (plain or TLS), request handler, and the queue of finished exchanges.
//!
//! Every request goes to the upstream + its path and query, with the client's headers less the
//! hop-by-hop ones (`Host` is the upstream's); the upstream's status, headers and body come back
//! as they are, passed on a read at a time as they arrive (bytes as sent: no decompression). The
//! one change is [`crate::usage`]'s. Faults: the upstream unreachable or reset before its headers
//! gives 502, no connection or no headers within the timeouts 504 (a JSON `error` body, `type`
//! `proxy_error`); a failure or silence mid-body cuts the client's connection, as the upstream's
//! was cut. A client that goes away closes the upstream request. GET on the metrics path is
//! answered by the caller's [`MetricsFn`].
//!
//! A POST to a recorded endpoint ([`crate::api_of_path`]) becomes an [`Exchange`], put on the
//! queue when the request ends. The queue is the recorder's backlog: bounded in exchanges and in
//! bytes, and never waited on. An exchange that finds it full is dropped and counted
//! (`dropped_queue_full`, `dropped_backlog`), and so are the later requests of its session (by
//! the session header; `dropped_session_shed`), so that what is recorded holds whole sessions.
//! Requests to other endpoints pass through and are counted (`unrecorded`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use replay_core::CoreError;

use crate::backlog::{Recording, Shared};
use crate::body::{Passing, ProxyBody};
use crate::config::CaptureConfig;
use crate::exchange::{api_of_path, usage_on_request, Exchange, Outcome};
use crate::upstream::{DialError, Upstream};
use crate::usage;

/// Renders the proxy's metrics (Prometheus text) for GET on the metrics path; called on a
/// blocking thread, never on the request path of other requests.
pub type MetricsFn = Arc<dyn Fn() -> Vec<u8> + Send + Sync>;

/// The proxy's own counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests received (the metrics path's excepted).
    pub requests: u64,
    /// Requests passed through without a record (not a POST to a recorded endpoint).
    pub unrecorded: u64,
    /// Recorded requests by outcome, in the order of [`crate::OUTCOMES`].
    pub outcomes: [u64; 4],
    /// Exchanges put on the queue.
    pub queued: u64,
    /// Exchanges dropped because the queue held its most exchanges.
    pub dropped_queue_full: u64,
    /// Exchanges dropped because the queue held its most bytes.
    pub dropped_backlog: u64,
    /// Exchanges dropped because an earlier request of their session was.
    pub dropped_session_shed: u64,
    /// Connections opened to the upstream.
    pub upstream_connections: u64,
}

/// A TLS handshake from a client may take this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

// hop-by-hop headers (RFC 9110 7.6.1), and those the proxy sets itself
const HOP: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

fn hop(name: &HeaderName) -> bool {
    HOP.contains(&name.as_str())
}

struct State {
    upstream: Arc<Upstream>,
    shared: Arc<Shared>,
    metrics: MetricsFn,
    metrics_path: String,
    session_header: HeaderName,
    read_timeout: Option<Duration>,
    max_body_bytes: usize,
}

/// A running capture proxy.
pub struct Proxy {
    /// The runtime and the accept loop's task, until stopped.
    running: Mutex<Option<(tokio::runtime::Runtime, tokio::task::JoinHandle<()>)>>,
    addr: SocketAddr,
    scheme: &'static str,
    stop_accepting: watch::Sender<bool>,
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
}

impl Proxy {
    /// Listen and serve on a runtime of its own; errors name the field, the file or the address.
    pub fn start(cfg: &CaptureConfig, metrics: MetricsFn) -> Result<Proxy, CoreError> {
        cfg.check()?;
        let acceptor = match (&cfg.tls_cert, &cfg.tls_key) {
            (Some(cert), Some(key)) => Some(acceptor(cert, key)?),
            _ => None,
        };
        let session_header = HeaderName::from_bytes(cfg.session_header.as_bytes())
            .map_err(|e| CoreError::config("session_header", e.to_string()))?;
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.enable_all().thread_name("capture-io");
        if cfg.threads > 0 {
            builder.worker_threads(cfg.threads);
        }
        let runtime = builder.build().map_err(|e| CoreError::Runtime {
            message: format!("cannot start the proxy's runtime: {e}"),
        })?;
        let upstream = {
            let _guard = runtime.enter();
            Upstream::new(&cfg.upstream, &cfg.upstream_tls, cfg.connect_timeout)?
        };
        let listener = runtime
            .block_on(TcpListener::bind(cfg.listen.as_str()))
            .map_err(|e| CoreError::Url {
                url: cfg.listen.clone(),
                message: format!("cannot listen there: {e}"),
            })?;
        let addr = listener.local_addr().map_err(|e| CoreError::Runtime {
            message: e.to_string(),
        })?;
        let shared = Arc::new(Shared::new(cfg.queue_size, cfg.backlog_bytes));
        let state = Arc::new(State {
            upstream: Arc::clone(&upstream),
            shared: Arc::clone(&shared),
            metrics,
            metrics_path: cfg.metrics_path.clone(),
            session_header,
            read_timeout: (!cfg.read_timeout.is_zero()).then_some(cfg.read_timeout),
            max_body_bytes: cfg.max_body_bytes,
        });
        let (stop_accepting, stop_rx) = watch::channel(false);
        let scheme = if acceptor.is_some() { "https" } else { "http" };
        let served = runtime.spawn(serve(listener, acceptor, state, stop_rx, cfg.grace));
        Ok(Proxy {
            running: Mutex::new(Some((runtime, served))),
            addr,
            scheme,
            stop_accepting,
            shared,
            upstream,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://HOST:PORT` (https with TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Wait up to `timeout` until a finished exchange is there to take; false if none came.
    pub fn wait(&self, timeout: Duration) -> bool {
        self.shared.wait(timeout)
    }

    /// Up to `max` of the finished exchanges waiting, oldest first, without waiting.
    pub fn take(&self, max: usize) -> Vec<Exchange> {
        self.shared.take(max)
    }

    pub fn counters(&self) -> Counters {
        let s = &self.shared;
        Counters {
            requests: s.requests.load(Ordering::Relaxed),
            unrecorded: s.unrecorded.load(Ordering::Relaxed),
            outcomes: std::array::from_fn(|i| s.outcomes[i].load(Ordering::Relaxed)),
            queued: s.queued.load(Ordering::Relaxed),
            dropped_queue_full: s.dropped[0].load(Ordering::Relaxed),
            dropped_backlog: s.dropped[1].load(Ordering::Relaxed),
            dropped_session_shed: s.dropped[2].load(Ordering::Relaxed),
            upstream_connections: self.upstream.dials.load(Ordering::Relaxed),
        }
    }

    /// Stop listening, let requests in flight end (up to the config's grace), and stop the
    /// runtime. Exchanges not yet taken stay to be taken. Idempotent.
    pub fn stop(&self) {
        let Some((runtime, served)) = self.running.lock().expect("running").take() else {
            return;
        };
        let _ = self.stop_accepting.send(true);
        let _ = runtime.block_on(served);
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

fn acceptor(cert: &str, key: &str) -> Result<TlsAcceptor, CoreError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| CoreError::config("tls_cert", format!("{cert}: {}", pem_error(e))))?;
    if certs.is_empty() {
        return Err(CoreError::config(
            "tls_cert",
            format!("{cert}: no PEM certificate in the file"),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| CoreError::config("tls_key", format!("{key}: {}", pem_error(e))))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CoreError::config("tls_cert", e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            CoreError::config("tls_key", format!("does not go with the certificate: {e}"))
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn pem_error(e: rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => format!("cannot read: {io}"),
        rustls::pki_types::pem::Error::NoItemsFound => {
            "no PEM item of that kind in the file".into()
        }
        other => format!("not a PEM file: {other:?}"),
    }
}

/// Accept until told to stop, then wait (up to `grace`) for the connections' requests to end.
async fn serve(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.changed() => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // out of file descriptors and the like: say so, back off, go on
                eprintln!("capture: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let state = Arc::clone(&state);
        let watcher = graceful.watcher();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(req, Arc::clone(&state)));
            match acceptor {
                None => {
                    let conn = http1::Builder::new().serve_connection(TokioIo::new(tcp), service);
                    let _ = watcher.watch(conn).await;
                }
                Some(acceptor) => {
                    let Ok(Ok(tls)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                    else {
                        return; // a failed handshake: nothing was asked
                    };
                    let conn = http1::Builder::new().serve_connection(TokioIo::new(tls), service);
                    let _ = watcher.watch(conn).await;
                }
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
}

fn answer(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::whole(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type).expect("content type"),
    );
    r
}

/// The proxy's own error answer (nothing came from the upstream).
fn failed(
    rec: &mut Recording,
    status: StatusCode,
    outcome: Outcome,
    why: &str,
) -> Response<ProxyBody> {
    rec.finish(outcome);
    let body = serde_json::json!({
        "error": {"message": format!("capture proxy: {why}"), "type": "proxy_error", "code": status.as_u16()}
    });
    answer(status, "application/json", body.to_string())
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
) -> Result<Response<ProxyBody>, Infallible> {
    if req.method() == Method::GET && req.uri().path() == state.metrics_path {
        let render = Arc::clone(&state.metrics);
        let text = tokio::task::spawn_blocking(move || render())
            .await
            .unwrap_or_default();
        return Ok(answer(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            text,
        ));
    }
    let start = std::time::Instant::now();
    let arrival_unix_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    let shared = &state.shared;
    shared.requests.fetch_add(1, Ordering::Relaxed);
    let api = if req.method() == Method::POST {
        api_of_path(req.uri().path())
    } else {
        None
    };
    if api.is_none() {
        shared.unrecorded.fetch_add(1, Ordering::Relaxed);
    }
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, state.max_body_bytes).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            let why = format!("request body over {} bytes", state.max_body_bytes);
            return Ok(answer(StatusCode::PAYLOAD_TOO_LARGE, "text/plain", why));
        }
        // the client went away while sending its body: there is no request to answer or record
        Err(_) => {
            return Ok(answer(
                StatusCode::BAD_REQUEST,
                "text/plain",
                "incomplete request body",
            ))
        }
    };
    let asked = match api {
        Some(api) => usage::asked(&body, usage_on_request(api)),
        None => usage::Asked {
            stream: false,
            with_usage: None,
        },
    };
    let send = asked.with_usage.clone().unwrap_or_else(|| body.clone());
    let ex = api.map(|api| Exchange {
        api,
        arrival_unix_us,
        session: parts
            .headers
            .get(&state.session_header)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body,
        stream: asked.stream,
        status: None,
        ttfb_us: None,
        end_us: 0,
        outcome: Outcome::Completed,
        chunks: Vec::new(),
        content_encoding: None,
    });
    let mut rec = Recording::new(ex, start, Arc::clone(shared));

    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = state.upstream.uri(path) else {
        return Ok(failed(
            &mut rec,
            StatusCode::BAD_GATEWAY,
            Outcome::UpstreamError,
            "bad request path",
        ));
    };
    let mut headers = http::HeaderMap::with_capacity(parts.headers.len() + 1);
    for (k, v) in &parts.headers {
        if !hop(k) {
            headers.append(k.clone(), v.clone());
        }
    }
    headers.insert(
        header::HOST,
        HeaderValue::from_str(state.upstream.authority.as_str()).expect("authority"),
    );
    // A kept-alive connection the upstream closed meanwhile refuses the request before it is
    // written: it is sent again on a new connection (never one that was written).
    let answered = loop {
        let (mut sender, reused) = match state.upstream.connection().await {
            Ok(c) => c,
            Err(DialError::Timeout) => {
                return Ok(failed(
                    &mut rec,
                    StatusCode::GATEWAY_TIMEOUT,
                    Outcome::Timeout,
                    "upstream connect timed out",
                ));
            }
            Err(DialError::Failed(why)) => {
                return Ok(failed(
                    &mut rec,
                    StatusCode::BAD_GATEWAY,
                    Outcome::UpstreamError,
                    &format!("upstream: {why}"),
                ));
            }
        };
        let mut up = Request::new(Full::new(send.clone()));
        *up.method_mut() = parts.method.clone();
        *up.uri_mut() = uri.clone();
        *up.headers_mut() = headers.clone();
        let sent = sender.try_send_request(up);
        let got = match state.read_timeout {
            Some(d) => match tokio::time::timeout(d, sent).await {
                Ok(r) => r,
                Err(_) => {
                    return Ok(failed(
                        &mut rec,
                        StatusCode::GATEWAY_TIMEOUT,
                        Outcome::Timeout,
                        "upstream timed out",
                    ));
                }
            },
            None => sent.await,
        };
        match got {
            Ok(resp) => break (resp, sender),
            Err(mut e) => match e.take_message() {
                Some(_) if reused => continue,
                _ => {
                    let why = format!("upstream: {}", e.error());
                    return Ok(failed(
                        &mut rec,
                        StatusCode::BAD_GATEWAY,
                        Outcome::UpstreamError,
                        &why,
                    ));
                }
            },
        }
    };
    let (resp, sender) = answered;
    let status = resp.status();
    let content_encoding = resp
        .headers()
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    rec.answered(status, content_encoding);
    // only an event stream has a usage chunk to take out (an error answer passes as it is)
    let strip = asked.with_usage.is_some()
        && resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
    let (head, incoming) = resp.into_parts();
    let mut out = Response::new(ProxyBody::Whole(None));
    *out.status_mut() = head.status;
    for (k, v) in &head.headers {
        if !hop(k) {
            out.headers_mut().append(k.clone(), v.clone());
        }
    }
    if !strip {
        if let Some(len) = head.headers.get(header::CONTENT_LENGTH) {
            out.headers_mut()
                .insert(header::CONTENT_LENGTH, len.clone());
        }
    }
    *out.body_mut() = ProxyBody::Passed(Box::new(Passing::new(
        incoming,
        rec,
        strip,
        state.read_timeout,
        (sender, Arc::clone(&state.upstream)),
    )));
    Ok(out)
}
