//! Reading an OpenAI request body into what the engine needs.
//!
//! Owns `ApiRequest`, `Api`, `Prompt` and `ApiError`. Honoured fields: `model`, `messages`
//! (chat) or `prompt` (completions: a string or a list of token ids, or a one-element list of
//! either), the Responses API's `instructions` and `input` (a string, or message items whose
//! content is a string or text parts, function calls and their outputs: rendered as chat
//! messages, `instructions` as the system message) and `max_output_tokens`, embeddings' `input`
//! (as completions' `prompt`) and `encoding_format`, `max_tokens` (chat also
//! `max_completion_tokens`), `stream`,
//! `stream_options.include_usage`, `ignore_eos`, `min_tokens`, `stop` (a string or a list),
//! `priority`, `seed` and `n` (must be 1), and for chat and the Responses API `tools`,
//! `tool_choice` and `parallel_tool_calls` (`tools::ToolRequest`). Sampling fields such as
//! `temperature` are accepted and ignored. Anything malformed is a 400 `ApiError` naming the
//! field, as vLLM answers; a broken agent history is the OpenAI API's 400 (`history`).

use serde_json::{Map, Value};

use crate::history::{check_chat, check_responses};
use crate::tools::ToolRequest;

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Chat,
    Completions,
    Responses,
    Embeddings,
}

/// The prompt as sent: text to tokenize, or token ids.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

/// A request the engine can serve (the prompt still to be tokenized).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiRequest {
    pub api: Api,
    pub model: Option<String>,
    pub prompt: Prompt,
    pub max_tokens: Option<u32>,
    pub min_tokens: u32,
    pub ignore_eos: bool,
    pub stop: Vec<String>,
    pub priority: i64,
    pub seed: Option<u64>,
    pub stream: bool,
    pub include_usage: bool,
    /// Embeddings: `encoding_format: "base64"` (the openai SDK's default), else floats.
    pub base64: bool,
    /// The tools offered and what the request allows (none for completions and embeddings).
    pub tools: ToolRequest,
}

/// An HTTP error answer: status, OpenAI error `type`, one-line message, the field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub message: String,
    pub param: Option<String>,
}

impl ApiError {
    /// A 400 as vLLM answers it (type `BadRequestError`).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            kind: "BadRequestError",
            message: message.into(),
            param: None,
        }
    }

    /// A 400 as the OpenAI API answers a bad field (type `invalid_request_error`, `param` naming
    /// the field, e.g. `messages.[3].tool_call_id`).
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            message: message.into(),
            param: Some(param.into()),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 404,
            kind: "NotFoundError",
            message: message.into(),
            param: None,
        }
    }
}

fn int_field(obj: &Map<String, Value>, key: &str) -> Result<Option<i64>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| ApiError::bad_request(format!("'{key}' must be an integer, got {v}"))),
    }
}

fn bool_field(obj: &Map<String, Value>, key: &str) -> Result<bool, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::bad_request(format!(
            "'{key}' must be a boolean, got {v}"
        ))),
    }
}

fn token_ids(list: &[Value]) -> Option<Vec<u32>> {
    list.iter()
        .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
        .collect()
}

fn completion_prompt(v: Option<&Value>, field: &str) -> Result<Prompt, ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "'{field}' must be a string, a list of token ids, or a one-element list of either"
        ))
    };
    match v {
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(items)) if items.len() == 1 && !items[0].is_number() => match &items[0] {
            Value::String(s) => Ok(Prompt::Text(s.clone())),
            Value::Array(ids) => token_ids(ids).map(Prompt::Ids).ok_or_else(bad),
            _ => Err(bad()),
        },
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
            token_ids(items).map(Prompt::Ids).ok_or_else(bad)
        }
        Some(Value::Array(_)) => Err(ApiError::bad_request(format!(
            "batched '{field}' lists are not supported by the simulated engine; send one per request"
        ))),
        None => Err(ApiError::bad_request(format!("'{field}' is required"))),
        Some(_) => Err(bad()),
    }
}

/// A Responses API request as chat messages: `instructions` as the system message, then each
/// `input` item (a string input is one user message; a `function_call` an assistant message
/// with that tool call, its `function_call_output` a tool message answering it).
fn responses_messages(obj: &Map<String, Value>) -> Result<Vec<Value>, ApiError> {
    let mut messages = Vec::new();
    match obj.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            messages.push(serde_json::json!({"role": "system", "content": s}))
        }
        Some(_) => return Err(ApiError::bad_request("'instructions' must be a string")),
    }
    let items = match obj.get("input") {
        Some(Value::String(s)) => {
            messages.push(serde_json::json!({"role": "user", "content": s}));
            return Ok(messages);
        }
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => {
            return Err(ApiError::bad_request(
                "'input' must be a string or a non-empty list of items",
            ))
        }
    };
    check_responses(items)?;
    for (i, item) in items.iter().enumerate() {
        let text = |key: &str| {
            item.get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let message = match item.get("type").and_then(Value::as_str) {
            Some("function_call") => serde_json::json!({"role": "assistant", "content": null,
                "tool_calls": [{"id": text("call_id"), "type": "function",
                    "function": {"name": text("name"), "arguments": text("arguments")}}]}),
            Some("function_call_output") => {
                serde_json::json!({"role": "tool", "tool_call_id": text("call_id"), "content": text("output")})
            }
            Some("message") | None => {
                let role = item.get("role").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::bad_request(format!("input[{i}].role must be a string"))
                })?;
                let content = match item.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => {
                        let mut joined = String::new();
                        for (j, part) in parts.iter().enumerate() {
                            let kind = part.get("type").and_then(Value::as_str);
                            match (kind, part.get("text")) {
                                (
                                    Some("input_text" | "output_text" | "text") | None,
                                    Some(Value::String(t)),
                                ) => joined.push_str(t),
                                _ => {
                                    return Err(ApiError::bad_request(format!(
                                        "input[{i}].content[{j}]: only text parts are supported"
                                    )))
                                }
                            }
                        }
                        joined
                    }
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "input[{i}].content must be a string or a list of parts"
                        )))
                    }
                };
                serde_json::json!({"role": role, "content": content})
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "input[{i}]: items of type '{other}' are not supported by the simulated engine"
                )))
            }
        };
        messages.push(message);
    }
    Ok(messages)
}

/// Parse a request body for `api`; `render_chat` turns `messages` and the request's `tools`
/// into prompt text.
pub fn parse_request(
    api: Api,
    body: &[u8],
    render_chat: impl Fn(&[Value], &[Value]) -> Result<String, String>,
) -> Result<ApiRequest, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::bad_request("request body must be a JSON object"));
    };
    let model = match obj.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "'model' must be a string, got {v}"
            )))
        }
    };
    let tools = match api {
        Api::Chat | Api::Responses => ToolRequest::parse(&obj)?,
        Api::Completions | Api::Embeddings => ToolRequest::default(),
    };
    let tool_defs = match obj.get("tools") {
        Some(Value::Array(defs)) => defs.as_slice(),
        _ => &[],
    };
    let prompt = match api {
        Api::Chat => match obj.get("messages") {
            Some(Value::Array(msgs)) if !msgs.is_empty() => {
                let text = render_chat(msgs, tool_defs).map_err(ApiError::bad_request)?;
                check_chat(msgs)?;
                Prompt::Text(text)
            }
            _ => return Err(ApiError::bad_request("'messages' must be a non-empty list")),
        },
        Api::Completions => completion_prompt(obj.get("prompt"), "prompt")?,
        Api::Responses => {
            let msgs = responses_messages(&obj)?;
            Prompt::Text(render_chat(&msgs, tool_defs).map_err(ApiError::bad_request)?)
        }
        Api::Embeddings => completion_prompt(obj.get("input"), "input")?,
    };
    let mut max_tokens = match api {
        Api::Responses => int_field(&obj, "max_output_tokens")?,
        // an embedding decodes nothing: the engine runs its prompt and one step (server.rs)
        Api::Embeddings => None,
        Api::Chat | Api::Completions => int_field(&obj, "max_tokens")?,
    };
    if api == Api::Chat {
        max_tokens = max_tokens.or(int_field(&obj, "max_completion_tokens")?);
    }
    let max_tokens = match max_tokens {
        Some(n) if n < 1 => {
            return Err(ApiError::bad_request(format!(
                "max_tokens must be at least 1, got {n}."
            )))
        }
        Some(n) => Some(n.min(u32::MAX as i64) as u32),
        None => None,
    };
    let min_tokens = int_field(&obj, "min_tokens")?.unwrap_or(0);
    if min_tokens < 0 || max_tokens.is_some_and(|m| min_tokens > m as i64) {
        return Err(ApiError::bad_request(format!(
            "min_tokens must be in [0, max_tokens], got {min_tokens}"
        )));
    }
    if let Some(n) = int_field(&obj, "n")? {
        if n != 1 {
            return Err(ApiError::bad_request(format!(
                "n must be 1 on the simulated engine, got {n}"
            )));
        }
    }
    let stop = match obj.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::bad_request("'stop' must be a string or a list of strings"))?,
        Some(_) => {
            return Err(ApiError::bad_request(
                "'stop' must be a string or a list of strings",
            ))
        }
    };
    let include_usage = match obj.get("stream_options") {
        Some(Value::Object(o)) => bool_field(o, "include_usage")?,
        _ => false,
    };
    let base64 = match obj.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "'encoding_format' must be \"float\" or \"base64\", got {v}"
            )))
        }
    };
    Ok(ApiRequest {
        api,
        model,
        prompt,
        max_tokens,
        min_tokens: min_tokens.min(u32::MAX as i64) as u32,
        ignore_eos: bool_field(&obj, "ignore_eos")?,
        stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
        priority: int_field(&obj, "priority")?.unwrap_or(0),
        seed: int_field(&obj, "seed")?.map(|s| s as u64),
        stream: api != Api::Embeddings && bool_field(&obj, "stream")?,
        include_usage,
        base64,
        tools,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: &str) -> Result<ApiRequest, ApiError> {
        parse_request(Api::Chat, body.as_bytes(), |m, _| {
            Ok(format!("{} messages", m.len()))
        })
    }

    fn comp(body: &str) -> Result<ApiRequest, ApiError> {
        parse_request(Api::Completions, body.as_bytes(), |_, _| unreachable!())
    }

    #[test]
    fn chat_fields() {
        let r = chat(
            r#"{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":7,
            "stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,"stop":["x",""],
            "priority":-2,"seed":9,"temperature":0.7}"#,
        )
        .unwrap();
        assert_eq!(r.prompt, Prompt::Text("1 messages".into()));
        assert_eq!(
            (r.max_tokens, r.stream, r.include_usage, r.ignore_eos),
            (Some(7), true, true, true)
        );
        assert_eq!(
            (r.stop, r.priority, r.seed, r.model.as_deref()),
            (vec!["x".to_string()], -2, Some(9), Some("sim"))
        );
    }

    #[test]
    fn completion_prompts() {
        assert_eq!(
            comp(r#"{"prompt":"a b"}"#).unwrap().prompt,
            Prompt::Text("a b".into())
        );
        assert_eq!(
            comp(r#"{"prompt":[1,2,3]}"#).unwrap().prompt,
            Prompt::Ids(vec![1, 2, 3])
        );
        assert_eq!(
            comp(r#"{"prompt":[[4,5]]}"#).unwrap().prompt,
            Prompt::Ids(vec![4, 5])
        );
        assert_eq!(
            comp(r#"{"prompt":["one"]}"#).unwrap().prompt,
            Prompt::Text("one".into())
        );
        assert!(comp(r#"{"prompt":["a","b"]}"#)
            .unwrap_err()
            .message
            .contains("batched"));
        assert!(comp(r#"{"prompt":[-1]}"#).is_err());
        assert!(comp(r#"{}"#).is_err());
    }

    fn responses(body: &str) -> Result<ApiRequest, ApiError> {
        parse_request(Api::Responses, body.as_bytes(), |m, _| {
            Ok(m.iter()
                .map(|x| {
                    let calls = x.get("tool_calls").map(|c| c.to_string());
                    format!(
                        "{}:{}",
                        x["role"].as_str().unwrap(),
                        x["content"].as_str().or(calls.as_deref()).unwrap()
                    )
                })
                .collect::<Vec<_>>()
                .join("|"))
        })
    }

    #[test]
    fn responses_requests_are_chat_messages() {
        let r = responses(r#"{"model":"sim","instructions":"be brief","input":"hi","max_output_tokens":9,"stream":true}"#).unwrap();
        assert_eq!(r.prompt, Prompt::Text("system:be brief|user:hi".into()));
        assert_eq!((r.max_tokens, r.stream), (Some(9), true));
        let items = r#"{"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
            {"type":"function_call","name":"f","arguments":"{}","call_id":"c"},{"type":"function_call_output","call_id":"c","output":"42"},
            {"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}],"max_tokens":3}"#;
        let r = responses(items).unwrap();
        assert_eq!(
            r.prompt,
            Prompt::Text(
                r#"user:ab|assistant:[{"function":{"arguments":"{}","name":"f"},"id":"c","type":"function"}]|tool:42|assistant:ok"#
                    .into()
            )
        );
        assert_eq!(
            r.max_tokens, None,
            "max_tokens is not the Responses API's field"
        );
        for (body, word) in [
            (r#"{"input":[]}"#, "input"),
            (r#"{"input":3}"#, "input"),
            (r#"{"input":[{"content":"x"}]}"#, "role"),
            (
                r#"{"input":[{"role":"user","content":[{"type":"input_image"}]}]}"#,
                "text parts",
            ),
            (
                r#"{"input":[{"type":"web_search_call"}]}"#,
                "web_search_call",
            ),
            (r#"{"input":"x","instructions":1}"#, "instructions"),
        ] {
            assert!(
                responses(body).unwrap_err().message.contains(word),
                "{body}"
            );
        }
    }

    #[test]
    fn embeddings_inputs_and_formats() {
        let e = |b: &str| parse_request(Api::Embeddings, b.as_bytes(), |_, _| unreachable!());
        let r = e(r#"{"input":"hello","encoding_format":"base64","stream":true}"#).unwrap();
        assert_eq!(
            (r.prompt, r.base64, r.stream),
            (Prompt::Text("hello".into()), true, false)
        );
        assert_eq!(
            e(r#"{"input":[[7,8]]}"#).unwrap().prompt,
            Prompt::Ids(vec![7, 8])
        );
        assert!(
            !e(r#"{"input":["x"],"encoding_format":"float"}"#)
                .unwrap()
                .base64
        );
        assert!(e(r#"{"input":["x","y"]}"#)
            .unwrap_err()
            .message
            .contains("batched 'input'"));
        assert!(e(r#"{"input":"x","encoding_format":"int8"}"#)
            .unwrap_err()
            .message
            .contains("encoding_format"));
        assert!(e(r#"{}"#)
            .unwrap_err()
            .message
            .contains("'input' is required"));
    }

    #[test]
    fn errors_are_400_naming_the_field() {
        for (body, word) in [
            ("{not json", "JSON"),
            ("[1]", "object"),
            (r#"{"messages":[]}"#, "messages"),
            (
                r#"{"messages":[{"role":"u"}],"max_tokens":0}"#,
                "max_tokens",
            ),
            (
                r#"{"messages":[{"role":"u"}],"max_tokens":"5"}"#,
                "max_tokens",
            ),
            (r#"{"messages":[{"role":"u"}],"n":2}"#, "n must be 1"),
            (r#"{"messages":[{"role":"u"}],"stop":3}"#, "stop"),
            (r#"{"messages":[{"role":"u"}],"stream":"yes"}"#, "stream"),
            (
                r#"{"messages":[{"role":"u"}],"max_tokens":5,"min_tokens":6}"#,
                "min_tokens",
            ),
        ] {
            let e = chat(body).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e.message.contains(word), "{body}: {}", e.message);
        }
    }
}
