//! One request's life inside the runtime: wait for a connection slot, stamp `sent`, send, stamp
//! headers and every body frame as it is read, interpret the body, and hand the finished
//! `RequestRecord` back to the run. Every outcome (ok, fault, deadline, cancel) yields a record.
//!
//! The deadline and the cancel signal race the exchange future; the exchange writes its stamps
//! into state that outlives the future, so a timed-out or cancelled request keeps what it saw.

use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderMap, CONTENT_TYPE};
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::sync::{watch, Semaphore};

use crate::client::{classify_body_error, classify_request_error, HttpClient};
use crate::openai::{parse_openai_event, parse_openai_response, OpenAiEvent, Usage};
use crate::record::{ErrorKind, RequestRecord};
use crate::run::RunControl;
use crate::sse::{SseError, SseParser, DEFAULT_MAX_EVENT_BYTES};

/// Most of an error response body kept for its detail line.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Everything request tasks share for the length of a run.
pub(crate) struct Shared {
    pub client: HttpClient,
    pub headers: HeaderMap,
    pub t0: Instant,
    pub timeout: Option<Duration>,
    pub stall: Option<Duration>,
    pub permits: Arc<Semaphore>,
    pub control: Arc<RunControl>,
    pub cancel_rx: watch::Receiver<bool>,
    pub records_tx: Sender<RequestRecord>,
}

impl Shared {
    fn now_ns(&self) -> i64 {
        self.t0.elapsed().as_nanos() as i64
    }
}

/// What the exchange has seen so far (kept when its future is dropped).
struct State {
    rec: RequestRecord,
    /// When `[DONE]` (or a complete JSON body) was read; -1 before.
    done_ns: i64,
}

impl State {
    fn apply_usage(&mut self, u: Usage) {
        self.rec.prompt_tokens = u.prompt_tokens;
        self.rec.completion_tokens = u.completion_tokens;
        self.rec.cached_tokens = u.cached_tokens.unwrap_or(-1);
    }

    /// A fault after the response was logically complete does not make it a failure.
    fn end_with(&mut self, kind: ErrorKind, detail: &str, t_ns: i64) {
        if self.done_ns >= 0 {
            self.rec.end_ns = self.done_ns;
        } else {
            self.rec.fail(kind, detail);
            self.rec.end_ns = t_ns;
        }
    }
}

enum Interrupt {
    Cancelled,
    Deadline,
}

async fn cancelled(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn deadline(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending::<()>().await,
    }
}

/// The task spawned for request `index`.
pub(crate) async fn request_task(shared: Arc<Shared>, index: usize, uri: Uri, body: Bytes) {
    let mut cancel_rx = shared.cancel_rx.clone();
    let mut st = State {
        rec: RequestRecord::new(index),
        done_ns: -1,
    };
    let permit = tokio::select! {
        biased;
        _ = cancelled(&mut cancel_rx) => None,
        p = shared.permits.clone().acquire_owned() => p.ok(),
    };
    let Some(_permit) = permit else {
        st.rec.fail(ErrorKind::Cancelled, "not sent: run cancelled");
        let _ = shared.records_tx.send(st.rec);
        return;
    };
    st.rec.sent_ns = shared.now_ns();
    shared.control.sent.fetch_add(1, Ordering::Relaxed);
    let due = shared.timeout.map(|d| tokio::time::Instant::now() + d);
    let interrupt = {
        let exchange = exchange(&shared, &mut st, uri, body);
        tokio::select! {
            biased;
            _ = cancelled(&mut cancel_rx) => Some(Interrupt::Cancelled),
            _ = deadline(due) => Some(Interrupt::Deadline),
            _ = exchange => None,
        }
    };
    let t = shared.now_ns();
    match interrupt {
        Some(Interrupt::Cancelled) => st.end_with(ErrorKind::Cancelled, "cancelled in flight", t),
        Some(Interrupt::Deadline) => {
            let ms = shared.timeout.unwrap_or_default().as_millis();
            st.end_with(
                ErrorKind::Timeout,
                &format!("no complete response within {ms} ms"),
                t,
            );
        }
        None => {}
    }
    shared.control.completed.fetch_add(1, Ordering::Relaxed);
    if st.rec.error_kind != ErrorKind::None {
        shared.control.errors.fetch_add(1, Ordering::Relaxed);
    }
    let _ = shared.records_tx.send(st.rec);
}

async fn exchange(shared: &Shared, st: &mut State, uri: Uri, body: Bytes) {
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = uri;
    *req.headers_mut() = shared.headers.clone();
    let resp = match shared.client.request(req).await {
        Ok(r) => r,
        Err(e) => {
            let (kind, detail) = classify_request_error(&e);
            let t = shared.now_ns();
            st.end_with(kind, &detail, t);
            return;
        }
    };
    st.rec.first_byte_ns = shared.now_ns();
    let status = resp.status();
    st.rec.status = status.as_u16();
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut body = resp.into_body();
    if status.as_u16() >= 400 {
        read_error_body(shared, st, &mut body).await;
    } else if !status.is_success() {
        let t = shared.now_ns();
        st.end_with(
            ErrorKind::Other,
            &format!("unexpected HTTP status {}", status.as_u16()),
            t,
        );
    } else {
        let mode = if content_type.contains("event-stream") {
            Mode::Sse
        } else if content_type.contains("json") {
            Mode::Json
        } else {
            Mode::Unknown
        };
        read_body(shared, st, &mut body, mode).await;
    }
}

enum Frame {
    Data(Bytes),
    End,
    Failed(ErrorKind, String),
}

/// Next data frame (trailers are skipped), or end, or why reading failed (stall included).
async fn next_frame(shared: &Shared, body: &mut Incoming) -> Frame {
    loop {
        let read = match shared.stall {
            Some(d) => match tokio::time::timeout(d, body.frame()).await {
                Ok(r) => r,
                Err(_) => {
                    return Frame::Failed(
                        ErrorKind::Stall,
                        format!("no bytes for {} ms", d.as_millis()),
                    )
                }
            },
            None => body.frame().await,
        };
        match read {
            None => return Frame::End,
            Some(Err(e)) => {
                let (kind, detail) = classify_body_error(&e);
                return Frame::Failed(kind, detail);
            }
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    return Frame::Data(data);
                }
            }
        }
    }
}

async fn read_error_body(shared: &Shared, st: &mut State, body: &mut Incoming) {
    let mut buf = Vec::new();
    while buf.len() < ERROR_BODY_LIMIT {
        match next_frame(shared, body).await {
            Frame::Data(d) => {
                buf.extend_from_slice(&d[..d.len().min(ERROR_BODY_LIMIT - buf.len())])
            }
            Frame::End | Frame::Failed(..) => break,
        }
    }
    let code = st.rec.status;
    let kind = if code >= 500 {
        ErrorKind::Http5xx
    } else {
        ErrorKind::Http4xx
    };
    let text = String::from_utf8_lossy(&buf);
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let detail = if first.is_empty() {
        format!("HTTP {code}")
    } else {
        format!("HTTP {code}: {first}")
    };
    st.rec.fail(kind, &detail);
    st.rec.end_ns = shared.now_ns();
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Sse,
    Json,
    /// No telling content type: decided from the first bytes.
    Unknown,
}

fn sniff(data: &[u8]) -> Mode {
    let trimmed = data.trim_ascii_start();
    if trimmed.is_empty() {
        Mode::Unknown
    } else if trimmed.starts_with(b"data:")
        || trimmed.starts_with(b":")
        || trimmed.starts_with(b"event:")
    {
        Mode::Sse
    } else {
        Mode::Json
    }
}

async fn read_body(shared: &Shared, st: &mut State, body: &mut Incoming, mut mode: Mode) {
    let mut parser = SseParser::new();
    let mut json: Vec<u8> = Vec::new();
    let mut failure: Option<(ErrorKind, String)> = None;
    loop {
        match next_frame(shared, body).await {
            Frame::Data(data) => {
                let t = shared.now_ns();
                if mode == Mode::Unknown {
                    mode = sniff(&data);
                }
                match mode {
                    Mode::Sse => {
                        let fed = parser.feed(&data, |ev| on_event(st, ev, t, &mut failure));
                        if let Err(e) = fed {
                            failure.get_or_insert((ErrorKind::MalformedSse, e.to_string()));
                        }
                    }
                    Mode::Json | Mode::Unknown => {
                        if json.len() + data.len() > DEFAULT_MAX_EVENT_BYTES {
                            failure = Some((
                                ErrorKind::MalformedSse,
                                "JSON response larger than 16 MiB".into(),
                            ));
                        } else {
                            json.extend_from_slice(&data);
                        }
                    }
                }
                if let Some((kind, detail)) = failure.take() {
                    st.end_with(kind, &detail, t);
                    return;
                }
            }
            Frame::Failed(kind, detail) => {
                let t = shared.now_ns();
                st.end_with(kind, &detail, t);
                return;
            }
            Frame::End => break,
        }
    }
    let t = shared.now_ns();
    match mode {
        Mode::Sse => {
            let fin = parser.finish(|ev| on_event(st, ev, t, &mut failure));
            if let Err(e) = fin {
                failure.get_or_insert((ErrorKind::MalformedSse, e.to_string()));
            }
            if let Some((kind, detail)) = failure {
                st.end_with(kind, &detail, t);
            } else if st.done_ns < 0 {
                st.end_with(ErrorKind::Reset, "stream closed before [DONE]", t);
            } else {
                st.rec.end_ns = t;
            }
        }
        Mode::Json | Mode::Unknown => match parse_openai_response(&json) {
            Ok((has_content, usage)) => {
                if has_content {
                    st.rec.token_chunk(t);
                }
                if let Some(u) = usage {
                    st.apply_usage(u);
                }
                st.done_ns = t;
                st.rec.end_ns = t;
            }
            Err(e) => {
                let kind = if matches!(e, SseError::ServerError { .. }) {
                    ErrorKind::Other
                } else {
                    ErrorKind::MalformedSse
                };
                st.end_with(kind, &format!("JSON response: {e}"), t);
            }
        },
    }
}

/// Handle one SSE event read at `t` (ignored after `[DONE]` or after a failure).
fn on_event(st: &mut State, data: &[u8], t: i64, failure: &mut Option<(ErrorKind, String)>) {
    if st.done_ns >= 0 || failure.is_some() {
        return;
    }
    match parse_openai_event(data) {
        Ok(OpenAiEvent::Done) => st.done_ns = t,
        Ok(OpenAiEvent::Chunk { has_token, usage }) => {
            if has_token {
                st.rec.token_chunk(t);
            }
            if let Some(u) = usage {
                st.apply_usage(u);
            }
        }
        Err(e @ SseError::ServerError { .. }) => *failure = Some((ErrorKind::Other, e.to_string())),
        Err(e) => *failure = Some((ErrorKind::MalformedSse, e.to_string())),
    }
}
