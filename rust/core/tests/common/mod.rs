//! A small hand-written HTTP/1.1 test server for the runner tests: keep-alive, chunked SSE
//! responses, and one fault per path. It records when each request head arrived.
//!
//! Paths: `/sse` (N chunks, usage, [DONE]; N from `?chunks=`), `/slow` (2 s before headers),
//! `/status500`, `/status404`, `/malformed`, `/close_early` (no response), `/close_mid`, `/stall_mid`, `/slow_headers`,
//! `/json`, `/error_event`, `/no_done`, `/spaced` (20 ms between chunks), `/queued` (headers at
//! once, then 600 ms before the first of 3 tokens, as a request waiting in an engine's queue),
//! `GET /v1/models` (a small JSON list), `/then_drop_next` (a full stream, then the next request
//! on that connection is read and the connection closed without an answer: llama.cpp's server
//! closes after every stream, and this is its race with a client's next request, made certain).
//! It counts the connections it accepted, and notes when.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use replay_core::{PlannedRequest, RunConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::rustls;

/// A patient config for timing tests: 10 s per request, 5 s stall, 1 s connect.
pub fn config(url: String) -> RunConfig {
    RunConfig {
        base_url: url,
        timeout_ns: 10_000_000_000,
        stall_timeout_ns: 5_000_000_000,
        connect_timeout_ns: 1_000_000_000,
        ..RunConfig::default()
    }
}

/// Request `i` to `path` at `offset_ns`, with body `{"i":i}` (so the server can tell them apart).
pub fn planned(path: &str, i: usize, offset_ns: i64) -> PlannedRequest {
    PlannedRequest {
        path: path.into(),
        body: Bytes::from(format!("{{\"i\":{i}}}")),
        offset_ns,
        after: None,
        joins: Vec::new(),
        headers: Vec::new(),
    }
}

pub const PROMPT_TOKENS: i64 = 11;
pub const CACHED_TOKENS: i64 = 4;

#[derive(Debug, Clone)]
pub struct Arrival {
    pub path: String,
    pub body: String,
    pub at: Instant,
}

pub struct TestServer {
    pub addr: SocketAddr,
    /// Serving https (`start_tls`): the PEM of its self-signed certificate.
    pub cert_pem: Option<String>,
    pub arrivals: Arc<Mutex<Vec<Arrival>>>,
    pub accepted: Arc<AtomicUsize>,
    pub accepted_at: Arc<Mutex<Vec<Instant>>>,
}

impl TestServer {
    /// http://127.0.0.1:PORT, or https://localhost:PORT (the name its certificate holds).
    pub fn url(&self) -> String {
        match self.cert_pem {
            None => format!("http://{}", self.addr),
            Some(_) => format!("https://localhost:{}", self.addr.port()),
        }
    }
}

/// Start the server on 127.0.0.1:0 on its own thread and runtime.
pub fn start() -> TestServer {
    serve(None)
}

/// The same server over TLS 1.3 (with session tickets, as nginx and most servers send them),
/// its certificate self-signed for the name `localhost` only.
pub fn start_tls() -> TestServer {
    start_tls_as(rcgen::IsCa::NoCa)
}

/// `start_tls` with the certificate's CA flag set as given.
pub fn start_tls_as(is_ca: rcgen::IsCa) -> TestServer {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.is_ca = is_ca;
    let cert = params.self_signed(&key).unwrap();
    let der = rustls::pki_types::CertificateDer::from(cert.der().to_vec());
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der], key_der)
        .unwrap();
    serve(Some((
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        cert.pem(),
    )))
}

fn serve(tls: Option<(tokio_rustls::TlsAcceptor, String)>) -> TestServer {
    let (acceptor, cert_pem) = match tls {
        Some((a, pem)) => (Some(a), Some(pem)),
        None => (None, None),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let arr = arrivals.clone();
    let accepted = Arc::new(AtomicUsize::new(0));
    let acc = accepted.clone();
    let accepted_at = Arc::new(Mutex::new(Vec::new()));
    let acc_at = accepted_at.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (sock, _) = listener.accept().await.unwrap();
                acc.fetch_add(1, Ordering::SeqCst);
                acc_at.lock().unwrap().push(Instant::now());
                sock.set_nodelay(true).unwrap();
                match &acceptor {
                    None => {
                        tokio::spawn(serve_conn(sock, arr.clone()));
                    }
                    Some(acceptor) => {
                        let (acceptor, arr) = (acceptor.clone(), arr.clone());
                        tokio::spawn(async move {
                            if let Ok(tls) = acceptor.accept(sock).await {
                                serve_conn(tls, arr).await;
                            }
                        });
                    }
                }
            }
        });
    });
    TestServer {
        addr: rx.recv().unwrap(),
        cert_pem,
        arrivals,
        accepted,
        accepted_at,
    }
}

/// The request index `i` in a body made by `planned`.
pub fn index_of(body: &str) -> usize {
    body.trim_start_matches("{\"i\":")
        .trim_end_matches('}')
        .parse()
        .unwrap()
}

/// A server that accepts connections and reads them but never answers; returns its address.
pub fn start_silent() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for sock in listener.incoming().flatten() {
            held.push(sock); // kept open, never read or answered
        }
    });
    addr
}

/// An address where nothing listens (bound, then released).
pub fn refused_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn serve_conn<S: AsyncRead + AsyncWrite + Unpin>(
    mut sock: S,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut tmp = [0u8; 8192];
    let mut drop_next = false;
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            match sock.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(k) => buf.extend_from_slice(&tmp[..k]),
            }
        };
        let at = Instant::now();
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        while buf.len() < head_end + len {
            match sock.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(k) => buf.extend_from_slice(&tmp[..k]),
            }
        }
        let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).to_string();
        buf.drain(..head_end + len);
        arrivals.lock().unwrap().push(Arrival {
            path: path.clone(),
            body,
            at,
        });
        if drop_next {
            return;
        }
        drop_next = path == "/then_drop_next";
        if !respond(&mut sock, &path).await {
            return;
        }
    }
}

fn token_event() -> String {
    "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}]}\n\n"
        .to_string()
}

fn usage_event(n: usize) -> String {
    format!(
        "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{PROMPT_TOKENS},\"completion_tokens\":{n},\"prompt_tokens_details\":{{\"cached_tokens\":{CACHED_TOKENS}}}}}}}\n\n"
    )
}

async fn write_chunk<S: AsyncWrite + Unpin>(sock: &mut S, data: &str) -> bool {
    let frame = format!("{:x}\r\n{data}\r\n", data.len());
    sock.write_all(frame.as_bytes()).await.is_ok()
}

async fn sse_head<S: AsyncWrite + Unpin>(sock: &mut S) -> bool {
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    sock.write_all(head.as_bytes()).await.is_ok()
}

async fn full_sse<S: AsyncWrite + Unpin>(sock: &mut S, n: usize, gap: Duration) -> bool {
    if !sse_head(sock).await {
        return false;
    }
    // A role-only first chunk carries no token.
    if !write_chunk(
        sock,
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n",
    )
    .await
    {
        return false;
    }
    for _ in 0..n {
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        if !write_chunk(sock, &token_event()).await {
            return false;
        }
    }
    write_chunk(sock, &usage_event(n)).await
        && write_chunk(sock, "data: [DONE]\n\n").await
        && sock.write_all(b"0\r\n\r\n").await.is_ok()
}

async fn plain<S: AsyncWrite + Unpin>(sock: &mut S, status: &str, ctype: &str, body: &str) -> bool {
    let resp = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(resp.as_bytes()).await.is_ok()
}

/// Answer one request; false closes the connection.
async fn respond<S: AsyncWrite + Unpin>(sock: &mut S, path: &str) -> bool {
    let (route, query) = path.split_once('?').unwrap_or((path, ""));
    let chunks: usize = query
        .strip_prefix("chunks=")
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    match route {
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(2)).await;
            full_sse(sock, chunks, Duration::ZERO).await
        }
        "/spaced" => full_sse(sock, chunks, Duration::from_millis(20)).await,
        "/queued" => {
            if !sse_head(sock).await {
                return false;
            }
            write_chunk(
                sock,
                "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n",
            )
            .await;
            tokio::time::sleep(Duration::from_millis(600)).await;
            for _ in 0..3 {
                write_chunk(sock, &token_event()).await;
            }
            write_chunk(sock, &usage_event(3)).await
                && write_chunk(sock, "data: [DONE]\n\n").await
                && sock.write_all(b"0\r\n\r\n").await.is_ok()
        }
        "/v1/models" => {
            plain(
                sock,
                "200 OK",
                "application/json",
                "{\"data\":[{\"id\":\"test\"}]}",
            )
            .await
        }
        "/status500" => {
            plain(
                sock,
                "500 Internal Server Error",
                "text/plain",
                "\nupstream exploded\nsecond line",
            )
            .await
        }
        "/status404" => {
            plain(
                sock,
                "404 Not Found",
                "application/json",
                "{\"error\":\"no such model\"}",
            )
            .await
        }
        "/json" => {
            let body = format!(
                "{{\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"hello\"}}}}],\"usage\":{{\"prompt_tokens\":{PROMPT_TOKENS},\"completion_tokens\":7}}}}"
            );
            plain(sock, "200 OK", "application/json", &body).await
        }
        "/malformed" => {
            sse_head(sock).await;
            write_chunk(sock, &token_event()).await;
            write_chunk(sock, "data: {not json\n\n").await;
            write_chunk(sock, "data: [DONE]\n\n").await;
            sock.write_all(b"0\r\n\r\n").await.is_ok()
        }
        "/error_event" => {
            sse_head(sock).await;
            write_chunk(sock, &token_event()).await;
            write_chunk(
                sock,
                "data: {\"error\":{\"message\":\"engine died\",\"code\":500}}\n\n",
            )
            .await;
            sock.write_all(b"0\r\n\r\n").await.is_ok()
        }
        "/no_done" => {
            sse_head(sock).await;
            write_chunk(sock, &token_event()).await;
            write_chunk(sock, &usage_event(1)).await;
            sock.write_all(b"0\r\n\r\n").await.is_ok()
        }
        "/close_early" => false,
        "/close_mid" => {
            sse_head(sock).await;
            write_chunk(sock, &token_event()).await;
            write_chunk(sock, &token_event()).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            false
        }
        "/stall_mid" => {
            sse_head(sock).await;
            write_chunk(sock, &token_event()).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            false
        }
        "/slow_headers" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            false
        }
        _ => full_sse(sock, chunks, Duration::ZERO).await,
    }
}
