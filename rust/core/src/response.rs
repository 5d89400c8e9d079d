//! Reading one answer: the head, then the body as SSE events or one JSON object (or an error
//! body), stamping the first byte and every token-bearing chunk as it is read, into `State`.

use bytes::Bytes;

use crate::answers::text_of;
use crate::client::classify_http_error;
use crate::conn::{Body, Conn};
use crate::openai::{parse_openai_event, parse_openai_response, OpenAiEvent, Usage};
use crate::record::{ErrorKind, RequestRecord};
use crate::shared::Shared;
use crate::sse::{SseError, SseParser, DEFAULT_MAX_EVENT_BYTES};

/// Most of an error response body kept for its detail line.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// What the exchange has seen so far (kept when its future is dropped).
pub(crate) struct State {
    pub rec: RequestRecord,
    /// When `[DONE]` (or a complete JSON body) was read; -1 before.
    pub done_ns: i64,
    /// The answer's text as it streams, when a later request resends it (`answers`).
    pub answer: Option<String>,
}

impl State {
    pub fn new(rec: RequestRecord) -> State {
        State {
            rec,
            done_ns: -1,
            answer: None,
        }
    }

    fn apply_usage(&mut self, u: Usage) {
        self.rec.prompt_tokens = u.prompt_tokens;
        self.rec.completion_tokens = u.completion_tokens;
        self.rec.cached_tokens = u.cached_tokens.unwrap_or(-1);
    }

    /// A fault after the response was logically complete does not make it a failure.
    pub fn end_with(&mut self, kind: ErrorKind, detail: &str, t_ns: i64) {
        if self.done_ns >= 0 {
            self.rec.end_ns = self.done_ns;
        } else {
            self.rec.fail(kind, detail);
            self.rec.end_ns = t_ns;
        }
    }
}

/// Read the response on `conn`. Returns true when the connection can carry another request.
pub(crate) async fn exchange(shared: &Shared, st: &mut State, conn: &mut Conn) -> bool {
    let head = match conn.read_head().await {
        Ok(h) => h,
        Err(e) => {
            let (kind, detail) = classify_http_error(&e);
            st.end_with(kind, &detail, shared.now_ns());
            return false;
        }
    };
    st.rec.first_byte_ns = shared.now_ns();
    st.rec.status = head.status;
    let mut body = Body::new(&head);
    if head.status >= 400 {
        read_error_body(shared, st, conn, &mut body).await;
    } else if !(200..300).contains(&head.status) {
        let t = shared.now_ns();
        st.end_with(
            ErrorKind::Other,
            &format!("unexpected HTTP status {}", head.status),
            t,
        );
        return false;
    } else {
        let mode = if head.content_type.contains("event-stream") {
            Mode::Sse
        } else if head.content_type.contains("json") {
            Mode::Json
        } else {
            Mode::Unknown
        };
        if !read_body(shared, st, conn, &mut body, mode).await {
            return false;
        }
    }
    head.keep_alive && body.is_done() && conn.is_clean()
}

enum Frame {
    Data(Bytes),
    End,
    Failed(ErrorKind, String),
}

/// Next piece of body data, or end, or why reading failed. The stall timeout applies only
/// once the first token has arrived: before it the request may be waiting in the engine's
/// queue, which the whole-request deadline governs.
async fn next_frame(shared: &Shared, st: &State, conn: &mut Conn, body: &mut Body) -> Frame {
    let read = conn.next_data(body);
    let result = match shared.stall.filter(|_| st.rec.first_token_ns >= 0) {
        Some(d) => match tokio::time::timeout(d, read).await {
            Ok(r) => r,
            Err(_) => {
                return Frame::Failed(
                    ErrorKind::Stall,
                    format!("no bytes for {} ms", d.as_millis()),
                )
            }
        },
        None => read.await,
    };
    match result {
        Ok(Some(d)) => Frame::Data(d),
        Ok(None) => Frame::End,
        Err(e) => {
            let (kind, detail) = classify_http_error(&e);
            Frame::Failed(kind, detail)
        }
    }
}

async fn read_error_body(shared: &Shared, st: &mut State, conn: &mut Conn, body: &mut Body) {
    let mut buf = Vec::new();
    while buf.len() < ERROR_BODY_LIMIT {
        match next_frame(shared, st, conn, body).await {
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

/// Read a 2xx body; true when it was read to its end without a failure.
async fn read_body(
    shared: &Shared,
    st: &mut State,
    conn: &mut Conn,
    body: &mut Body,
    mut mode: Mode,
) -> bool {
    let mut parser = SseParser::new();
    let mut json: Vec<u8> = Vec::new();
    let mut failure: Option<(ErrorKind, String)> = None;
    loop {
        match next_frame(shared, st, conn, body).await {
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
                    return false;
                }
            }
            Frame::Failed(kind, detail) => {
                let t = shared.now_ns();
                st.end_with(kind, &detail, t);
                return false;
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
                st.end_with(
                    ErrorKind::Reset,
                    "stream closed before [DONE] (or response.completed)",
                    t,
                );
            } else {
                st.rec.end_ns = t;
            }
        }
        Mode::Json | Mode::Unknown => match parse_openai_response(&json) {
            Ok((has_content, usage)) => {
                if has_content {
                    st.rec.token_chunk(t);
                    if let Some(answer) = st.answer.as_mut() {
                        answer.push_str(&text_of(&json));
                    }
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
    true
}

/// Handle one SSE event read at `t` (ignored after `[DONE]` or after a failure).
fn on_event(st: &mut State, data: &[u8], t: i64, failure: &mut Option<(ErrorKind, String)>) {
    if st.done_ns >= 0 || failure.is_some() {
        return;
    }
    match parse_openai_event(data) {
        Ok(OpenAiEvent::Done) => st.done_ns = t,
        Ok(OpenAiEvent::End { usage }) => {
            if let Some(u) = usage {
                st.apply_usage(u);
            }
            st.done_ns = t;
        }
        Ok(OpenAiEvent::Chunk { has_token, usage }) => {
            if has_token {
                st.rec.token_chunk(t);
                if let Some(answer) = st.answer.as_mut() {
                    answer.push_str(&text_of(data));
                }
            }
            if let Some(u) = usage {
                st.apply_usage(u);
            }
        }
        Err(e @ SseError::ServerError { .. }) => *failure = Some((ErrorKind::Other, e.to_string())),
        Err(e) => *failure = Some((ErrorKind::MalformedSse, e.to_string())),
    }
}
