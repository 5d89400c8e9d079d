//! The HTTP front: hyper routes of the OpenAI-compatible API, tokenization and metrics.
//!
//! Owns `AppState`, `SseBody` and the accept loop. Routes: POST /v1/chat/completions,
//! /v1/completions and /v1/responses (streamed as SSE or whole JSON), POST /v1/embeddings (the
//! prompt runs through the engine like a request of one output token, answered with a vector
//! made from its ids), GET /v1/models, GET /health, GET /metrics,
//! POST /tokenize and /detokenize, POST /reset_prefix_cache, GET /version. A generation request is read, validated against
//! the served model and `max_model_len` (errors are vLLM's 400/404 JSON), tokenized here and
//! handed to the engine; a streamed answer's headers go out at once and its body is whatever the
//! engine writes into the request's channel.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::engine::{Sink, Submission};
use crate::fleet::Fleet;
use crate::render::{completion_json, embeddings_json, error_json, request_id, StreamFormat};
use crate::request::{parse_request, Api, ApiError, ApiRequest, Prompt};
use crate::sequence::SeqParams;
use crate::template::render_chat;
use crate::tools::{
    parse_replay_tool_calls, text_before_calls, CallTurn, ToolPolicy, REPLAY_TOOL_CALLS_HEADER,
};
use crate::vocab::Vocab;

/// Largest request body accepted.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// What every request handler shares.
pub struct AppState {
    pub model: String,
    pub max_model_len: u32,
    pub priority_enabled: bool,
    /// The engine's seed (a request's own `seed` replaces it) and tool-call policy.
    pub seed: u64,
    pub tool_policy: ToolPolicy,
    pub vocab: Arc<Vocab>,
    /// The engine, or the replicas and their router (`fleet`).
    pub fleet: Arc<Fleet>,
    pub next_id: AtomicU64,
    pub created: u64,
}

/// A streamed answer: the bytes the engine sends, one frame per step.
pub struct SseBody {
    rx: mpsc::UnboundedReceiver<Bytes>,
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

type Reply = Response<Either<SseBody, Full<Bytes>>>;

fn reply(status: u16, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut r = Response::new(Either::Right(Full::new(body.into())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json_reply(status: u16, v: &Value) -> Reply {
    reply(
        status,
        "application/json",
        serde_json::to_vec(v).expect("json"),
    )
}

fn error_reply(e: &ApiError) -> Reply {
    reply(e.status, "application/json", error_json(e))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    match Limited::new(req.into_body(), BODY_LIMIT).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(ApiError::bad_request(format!(
            "cannot read the request body: {e}"
        ))),
    }
}

/// Token ids of a request's prompt, checked against the vocabulary and `max_model_len`.
fn prompt_ids(state: &AppState, r: &ApiRequest) -> Result<(Vec<u32>, u32), ApiError> {
    let ids = match &r.prompt {
        Prompt::Text(t) => state.vocab.encode(t),
        Prompt::Ids(ids) => {
            if let Some(bad) = ids.iter().find(|&&i| i as usize >= state.vocab.size()) {
                return Err(ApiError::bad_request(format!(
                    "Token id {bad} is out of vocabulary"
                )));
            }
            ids.clone()
        }
    };
    if ids.is_empty() {
        return Err(ApiError::bad_request("The decoder prompt cannot be empty"));
    }
    let (n, max_len) = (ids.len() as u64, state.max_model_len as u64);
    if n >= max_len {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_len} tokens. However, your request has {n} input tokens. \
             Please reduce the length of the input messages."
        )));
    }
    let max_tokens = r.max_tokens.map_or(max_len - n, u64::from);
    if n + max_tokens > max_len {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_len} tokens. However, you requested {} tokens \
             ({n} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion.",
            n + max_tokens
        )));
    }
    Ok((ids, max_tokens as u32))
}

async fn generate(
    api: Api,
    req: Request<Incoming>,
    state: Arc<AppState>,
) -> Result<Reply, ApiError> {
    let arrived = Instant::now();
    let session = state.fleet.session(req.headers());
    let follow = req
        .headers()
        .get(REPLAY_TOOL_CALLS_HEADER)
        .map(|v| parse_replay_tool_calls(v.as_bytes()))
        .transpose()?;
    let body = read_body(req).await?;
    let mut r = parse_request(api, &body, |m, tools| render_chat(m, tools, true))?;
    if api == Api::Embeddings {
        // a forward pass over the prompt: scheduled and costed as a request of one token
        r.max_tokens = Some(1);
        r.min_tokens = 0;
        r.ignore_eos = true;
    }
    if let Some(m) = r.model.as_deref().filter(|m| *m != state.model) {
        return Err(ApiError::not_found(format!(
            "The model `{m}` does not exist."
        )));
    }
    if r.priority != 0 && !state.priority_enabled {
        return Err(ApiError::bad_request(format!(
            "Got priority {} but Priority scheduling is not enabled.",
            r.priority
        )));
    }
    let (prompt, max_tokens) = prompt_ids(&state, &r)?;
    let embedded = (api == Api::Embeddings).then(|| prompt.clone());
    let seed = r.seed.unwrap_or(state.seed);
    let calls = match &follow {
        Some(sizes) => ToolPolicy::follow(&r.tools, sizes, seed, &prompt, &state.vocab),
        None => (state.tool_policy).plan(
            &r.tools,
            seed,
            &prompt,
            max_tokens,
            r.ignore_eos,
            &state.vocab,
        ),
    };
    let mut params = SeqParams {
        max_tokens,
        min_tokens: r.min_tokens.min(max_tokens),
        ignore_eos: r.ignore_eos,
        priority: r.priority,
    };
    let calls = calls.map(|calls| {
        // a tool answer is exactly its calls' tokens, cut at max_tokens (finish "length"); a
        // replayed one at the context's room instead: the recorded output length counted the
        // live answer under the live model's accounting, which need not be this engine's. A
        // replayed one asking for an exact length (ignore_eos and max_tokens, as replays send)
        // is that long: text content of what the calls leave of max_tokens, then the calls.
        let text = match (&follow, r.ignore_eos, r.max_tokens) {
            (Some(_), true, Some(_)) => text_before_calls(max_tokens, &calls),
            _ => 0,
        };
        let turn = CallTurn::with_text(text, calls);
        let cap = match follow {
            Some(_) => state.max_model_len.saturating_sub(prompt.len() as u32),
            None => max_tokens,
        };
        params.max_tokens = cap.min(turn.tokens().min(u32::MAX as usize) as u32);
        params.min_tokens = 0;
        params.ignore_eos = true;
        turn
    });
    let id = request_id(api, state.next_id.fetch_add(1, Ordering::Relaxed));
    let created = unix_now();
    let routed = state.fleet.route(session, &prompt);
    let unavailable = || ApiError {
        status: 503,
        kind: "ServiceUnavailableError",
        message: "the engine is shutting down".into(),
        param: None,
    };
    if r.stream {
        let (tx, rx) = mpsc::unbounded_channel();
        let format = StreamFormat::new(api, &id, created, &state.model, r.include_usage);
        let sub = Submission {
            prompt,
            params,
            seed: r.seed,
            stop: r.stop,
            calls,
            sink: Sink::Stream { tx, format },
            arrived,
            submitted: Instant::now(),
            hashes: routed.hashes,
        };
        if !state.fleet.submit(routed.replica, sub) {
            return Err(unavailable());
        }
        let mut resp = Response::new(Either::Left(SseBody { rx }));
        resp.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        resp.headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        Ok(state.fleet.mark(resp, routed.replica))
    } else {
        let (tx, rx) = oneshot::channel();
        let sub = Submission {
            prompt,
            params,
            seed: r.seed,
            stop: r.stop,
            calls,
            sink: Sink::Whole { tx },
            arrived,
            submitted: Instant::now(),
            hashes: routed.hashes,
        };
        if !state.fleet.submit(routed.replica, sub) {
            return Err(unavailable());
        }
        let answer = rx.await.map_err(|_| unavailable())?;
        if let Some(ids) = embedded {
            let usage = crate::render::Usage {
                completion_tokens: 0,
                ..answer.usage
            };
            let resp = reply(
                200,
                "application/json",
                embeddings_json(&state.model, &ids, r.base64, usage),
            );
            return Ok(state.fleet.mark(resp, routed.replica));
        }
        let body = completion_json(
            api,
            &id,
            created,
            &state.model,
            &answer.text,
            &answer.calls,
            answer.finish.as_str(),
            answer.usage,
        );
        Ok(state
            .fleet
            .mark(reply(200, "application/json", body), routed.replica))
    }
}

async fn tokenize(req: Request<Incoming>, state: Arc<AppState>) -> Result<Reply, ApiError> {
    let body = read_body(req).await?;
    let v: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("request body is not valid JSON: {e}")))?;
    let text = match (v.get("prompt"), v.get("messages")) {
        (Some(Value::String(p)), _) => p.clone(),
        (_, Some(Value::Array(msgs))) => {
            let add = v
                .get("add_generation_prompt")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            let tools = v
                .get("tools")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            render_chat(msgs, tools, add).map_err(ApiError::bad_request)?
        }
        _ => {
            return Err(ApiError::bad_request(
                "send {\"prompt\": str} or {\"messages\": [...]}",
            ))
        }
    };
    let tokens = state.vocab.encode(&text);
    Ok(json_reply(
        200,
        &json!({"count": tokens.len(), "max_model_len": state.max_model_len, "tokens": tokens, "token_strs": null}),
    ))
}

async fn detokenize(req: Request<Incoming>, state: Arc<AppState>) -> Result<Reply, ApiError> {
    let body = read_body(req).await?;
    let v: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("request body is not valid JSON: {e}")))?;
    let ids: Option<Vec<u32>> = v.get("tokens").and_then(Value::as_array).and_then(|a| {
        a.iter()
            .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect()
    });
    let ids = ids.ok_or_else(|| ApiError::bad_request("send {\"tokens\": [int, ...]}"))?;
    Ok(json_reply(
        200,
        &json!({"prompt": state.vocab.decode(&ids)}),
    ))
}

fn models(state: &AppState) -> Reply {
    json_reply(
        200,
        &json!({"object": "list", "data": [{
            "id": state.model, "object": "model", "created": state.created, "owned_by": "replay-sim",
            "root": state.model, "parent": null, "max_model_len": state.max_model_len, "permission": [],
        }]}),
    )
}

async fn handle(req: Request<Incoming>, state: Arc<AppState>) -> Result<Reply, Infallible> {
    let path = req.uri().path().to_string();
    let result = match (req.method(), path.as_str()) {
        (&Method::POST, "/v1/chat/completions") => generate(Api::Chat, req, state).await,
        (&Method::POST, "/v1/completions") => generate(Api::Completions, req, state).await,
        (&Method::POST, "/v1/responses") => generate(Api::Responses, req, state).await,
        (&Method::POST, "/v1/embeddings") => generate(Api::Embeddings, req, state).await,
        (&Method::POST, "/tokenize") => tokenize(req, state).await,
        (&Method::POST, "/detokenize") => detokenize(req, state).await,
        (&Method::GET, "/health") | (&Method::GET, "/ping") => {
            Ok(reply(200, "application/json", Bytes::new()))
        }
        (&Method::GET, "/v1/models") => Ok(models(&state)),
        (&Method::POST, "/reset_prefix_cache") => {
            state.fleet.reset_prefix_caches();
            Ok(reply(200, "application/json", Bytes::new()))
        }
        (&Method::GET, "/metrics") => {
            let text = state.fleet.metrics_text();
            Ok(reply(200, "text/plain; version=0.0.4; charset=utf-8", text))
        }
        (&Method::GET, "/sim/requests") => {
            let text = state.fleet.modelled_json();
            Ok(reply(200, "application/json", Bytes::from(text)))
        }
        (&Method::GET, "/version") => Ok(json_reply(
            200,
            &json!({"version": concat!("replay-sim ", env!("CARGO_PKG_VERSION"))}),
        )),
        (
            _,
            "/v1/chat/completions"
            | "/v1/completions"
            | "/v1/responses"
            | "/v1/embeddings"
            | "/tokenize"
            | "/detokenize"
            | "/health"
            | "/v1/models"
            | "/metrics"
            | "/sim/requests"
            | "/reset_prefix_cache",
        ) => Ok(json_reply(405, &json!({"detail": "Method Not Allowed"}))),
        _ => Ok(json_reply(404, &json!({"detail": "Not Found"}))),
    };
    Ok(result.unwrap_or_else(|e| error_reply(&e)))
}

/// Serve connections until `shutdown` fires.
pub async fn accept_loop(
    listener: TcpListener,
    state: Arc<AppState>,
    mut shutdown: oneshot::Receiver<()>,
) {
    loop {
        let sock = tokio::select! {
            r = listener.accept() => r,
            _ = &mut shutdown => return,
        };
        let sock = match sock {
            Ok((s, _)) => s,
            Err(e) => {
                // out of file descriptors and the like: report, back off, keep serving
                eprintln!("replay-sim: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(req, Arc::clone(&state)));
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(sock), service)
                .await;
        });
    }
}
