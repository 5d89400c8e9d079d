//! sse-bench-server: a small, fast OpenAI-like streaming server for replayer benchmarks.
//!
//! POST on any path streams `--chunks` SSE token events, a usage event and `data: [DONE]`
//! (HTTP/1.1 keep-alive, chunked). GET /health answers 200. The request body is read and
//! discarded. With `--port 0` the first stdout line, `listening on HOST:PORT`, names the port.

mod args;
mod stream;

use std::convert::Infallible;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use stream::{Script, SseBody};

type Reply = Response<Either<SseBody, Full<Bytes>>>;

fn plain(status: StatusCode, text: &'static str) -> Reply {
    let mut r = Response::new(Either::Right(Full::new(Bytes::from_static(
        text.as_bytes(),
    ))));
    *r.status_mut() = status;
    r
}

async fn handle(req: Request<Incoming>, script: Arc<Script>) -> Result<Reply, Infallible> {
    if req.method() == Method::GET {
        return Ok(if req.uri().path() == "/health" {
            plain(StatusCode::OK, "ok\n")
        } else {
            plain(StatusCode::NOT_FOUND, "not found\n")
        });
    }
    if req.method() != Method::POST {
        return Ok(plain(StatusCode::METHOD_NOT_ALLOWED, "POST only\n"));
    }
    let mut body = req.into_body();
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            return Ok(plain(StatusCode::BAD_REQUEST, "bad request body\n"));
        }
    }
    let mut r = Response::new(Either::Left(SseBody::new(script)));
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    Ok(r)
}

async fn serve(listener: TcpListener, script: Arc<Script>) {
    loop {
        let (sock, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: report, back off, keep serving.
                eprintln!("sse-bench-server: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let script = script.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(req, script.clone()));
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(sock), service)
                .await;
        });
    }
}

fn main() {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(args::ArgsError::Help) => {
            println!("{}", args::USAGE);
            return;
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let runtime = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    };
    let runtime = runtime.unwrap_or_else(|e| {
        eprintln!("sse-bench-server: cannot start runtime: {e}");
        std::process::exit(1);
    });
    let script = Arc::new(Script::new(
        args.chunks,
        Duration::from_micros(args.chunk_delay_us),
        args.prompt_tokens,
    ));
    runtime.block_on(async move {
        let listener = match TcpListener::bind((args.host.as_str(), args.port)).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "sse-bench-server: cannot listen on {}:{}: {e}",
                    args.host, args.port
                );
                std::process::exit(1);
            }
        };
        let addr = listener.local_addr().expect("bound socket has an address");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {addr}");
        let _ = out.flush();
        drop(out);
        serve(listener, script).await;
    });
}
