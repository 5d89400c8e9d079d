//! The proxy end to end on loopback: a small upstream (hyper) that streams an answer with a usage
//! chunk, the proxy in front of it, and a client speaking HTTP/1.1 over a plain socket.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use replay_capture::{CaptureConfig, Outcome, Proxy};

const EVENTS: &str = concat!(
    "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n",
    "data: [DONE]\n\n"
);

/// An upstream on its own runtime thread: every request gets `EVENTS` as an event stream, and
/// the request body it got is echoed in the `x-got` header (its length).
fn upstream() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (sock, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let service = service_fn(|req: Request<hyper::body::Incoming>| async move {
                        use http_body_util::BodyExt;
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let asked_usage = body.windows(13).any(|w| w == b"include_usage");
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .header("content-type", "text/event-stream")
                                .header("x-asked-usage", asked_usage.to_string())
                                .body(Full::new(Bytes::from_static(EVENTS.as_bytes())))
                                .unwrap(),
                        )
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(sock), service)
                        .await;
                });
            }
        });
    });
    rx.recv().unwrap()
}

fn post(proxy: SocketAddr, path: &str, body: &str) -> String {
    post_in(proxy, path, body, "s1")
}

fn post_in(proxy: SocketAddr, path: &str, body: &str, session: &str) -> String {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Session-Id: {session}\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn start(upstream: SocketAddr, queue_size: usize) -> Proxy {
    start_with(upstream, queue_size, 1 << 20)
}

fn start_with(upstream: SocketAddr, queue_size: usize, backlog_bytes: usize) -> Proxy {
    let mut cfg = CaptureConfig::new("127.0.0.1:0", &format!("http://{upstream}"));
    cfg.queue_size = queue_size;
    cfg.backlog_bytes = backlog_bytes;
    cfg.threads = 1;
    Proxy::start(&cfg, Arc::new(|| b"proxy_metrics 1\n".to_vec())).unwrap()
}

#[test]
fn a_streamed_chat_is_recorded_whole_and_the_client_gets_no_usage_chunk_it_did_not_ask_for() {
    let proxy = start(upstream(), 16);
    let answer = post(
        proxy.local_addr(),
        "/v1/chat/completions",
        r#"{"model":"m","stream":true}"#,
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("x-asked-usage: true"),
        "the proxy asks for usage: {answer}"
    );
    assert!(
        answer.contains("data: [DONE]") && answer.contains("\"hi\""),
        "{answer}"
    );
    assert!(
        !answer.contains("prompt_tokens"),
        "the usage chunk is taken out: {answer}"
    );
    assert!(proxy.wait(Duration::from_secs(5)));
    let ex = proxy.take(10).pop().unwrap();
    assert_eq!(
        (ex.api, ex.stream, ex.status, ex.outcome),
        ("chat", true, Some(200), Outcome::Completed)
    );
    assert_eq!(ex.session.as_deref(), Some("s1"));
    assert_eq!(
        &ex.body[..],
        br#"{"model":"m","stream":true}"#,
        "the body as the client sent it"
    );
    let got: Vec<u8> = ex.chunks.iter().flat_map(|(_, d)| d.to_vec()).collect();
    assert_eq!(
        got,
        EVENTS.as_bytes(),
        "the recorder gets the upstream's bytes, usage included"
    );
    assert!(ex.ttfb_us.unwrap() <= ex.end_us);

    // other endpoints pass through, counted, not recorded; GET on the metrics path is the proxy's
    let other = post(proxy.local_addr(), "/v1/models/x", r#"{"input":"x"}"#);
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    let mut s = TcpStream::connect(proxy.local_addr()).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut metrics = String::new();
    s.read_to_string(&mut metrics).unwrap();
    assert!(metrics.ends_with("proxy_metrics 1\n"), "{metrics}");
    proxy.stop();
    let c = proxy.counters();
    assert_eq!(
        (c.requests, c.unrecorded, c.queued, c.dropped_queue_full),
        (2, 1, 1, 0)
    );
    assert_eq!(c.outcomes, [1, 0, 0, 0]);
    assert!(proxy.take(10).is_empty());
}

#[test]
fn a_full_queue_drops_and_counts_and_the_clients_never_notice() {
    let proxy = start(upstream(), 2);
    for i in 0..5 {
        // each its own session: no drop here sheds another
        let answer = post_in(
            proxy.local_addr(),
            "/v1/completions",
            &format!(r#"{{"prompt":"p{i}"}}"#),
            &format!("s{i}"),
        );
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.contains("prompt_tokens"),
            "{answer}"
        );
    }
    proxy.stop();
    let c = proxy.counters();
    assert_eq!((c.queued, c.dropped_queue_full), (2, 3));
    let kept: Vec<_> = proxy.take(10).into_iter().map(|e| e.body).collect();
    assert_eq!(
        kept,
        vec![
            Bytes::from_static(br#"{"prompt":"p0"}"#),
            Bytes::from_static(br#"{"prompt":"p1"}"#)
        ]
    );
}

#[test]
fn an_upstream_that_is_not_there_is_a_502_recorded_as_an_upstream_error() {
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = start(free, 4);
    let answer = post(proxy.local_addr(), "/v1/chat/completions", "{}");
    assert!(
        answer.starts_with("HTTP/1.1 502") && answer.contains("proxy_error"),
        "{answer}"
    );
    proxy.stop();
    let ex = proxy.take(1).pop().unwrap();
    assert_eq!((ex.status, ex.outcome), (None, Outcome::UpstreamError));
}

#[test]
fn bad_settings_name_their_field() {
    let mut cfg = CaptureConfig::new("127.0.0.1:0", "ftp://x");
    let err = Proxy::start(&cfg, Arc::new(Vec::new)).err().unwrap();
    assert!(err.to_string().contains("http:// or https://"), "{err}");
    cfg.upstream = "http://127.0.0.1:9".into();
    cfg.tls_cert = Some("/nonexistent.pem".into());
    let err = Proxy::start(&cfg, Arc::new(Vec::new)).err().unwrap();
    assert!(err.to_string().contains("tls_key"), "{err}");
    cfg.tls_key = Some("/nonexistent.key".into());
    let err = Proxy::start(&cfg, Arc::new(Vec::new)).err().unwrap();
    assert!(
        err.to_string().contains("tls_cert") && err.to_string().contains("cannot read"),
        "{err}"
    );
}

#[test]
fn once_a_request_is_dropped_the_rest_of_its_session_is_too_so_sessions_stay_whole() {
    let proxy = start(upstream(), 1);
    let send = |session: &str, turn: u32| {
        let body = format!(r#"{{"prompt":"{session} turn {turn}"}}"#);
        assert!(
            post_in(proxy.local_addr(), "/v1/completions", &body, session)
                .starts_with("HTTP/1.1 200")
        );
    };
    send("a", 1); // queued
    send("b", 1); // the queue is full: dropped, and b is shed
    assert_eq!(proxy.take(10).len(), 1);
    send("b", 2); // room again, but b lost its first turn: shed
    send("a", 2); // queued
    proxy.stop();
    let c = proxy.counters();
    assert_eq!(
        (c.queued, c.dropped_queue_full, c.dropped_session_shed),
        (2, 1, 1)
    );
    let kept: Vec<_> = proxy.take(10).into_iter().map(|e| e.body).collect();
    assert_eq!(kept, vec![Bytes::from_static(br#"{"prompt":"a turn 2"}"#)]);
}

#[test]
fn the_backlog_is_bounded_in_bytes_too() {
    // room for one exchange of these (a body and its answer, about 500 bytes) but not two
    let proxy = start_with(upstream(), 100, 700);
    for i in 0..3 {
        let body = format!(r#"{{"prompt":"p{i}"}}"#);
        assert!(post_in(
            proxy.local_addr(),
            "/v1/completions",
            &body,
            &format!("s{i}")
        )
        .starts_with("HTTP/1.1 200"));
    }
    proxy.stop();
    let c = proxy.counters();
    assert_eq!(
        (c.queued, c.dropped_queue_full, c.dropped_backlog),
        (1, 0, 2)
    );
}
