//! OpenAI-style interpretation of SSE event data and of non-streaming JSON responses.
//!
//! Owns `OpenAiEvent`, `Usage`, `parse_openai_event` and `parse_openai_response`. Only the
//! fields that matter for timing are read: whether a chunk carries output (content, reasoning,
//! completion text or tool calls) and the `usage` block. Everything else is skipped by serde
//! without being built, and text is only checked for emptiness (no copy, no per-chunk Vec).
//!
//! Three shapes: chat / completions chunks (`choices`, then `data: [DONE]`); the Responses API's
//! typed events (`type`: `response.*.delta` carries output in `delta`; `response.completed` or
//! `response.incomplete`, the end of the stream, carries `response.usage` with `input_tokens` /
//! `output_tokens` / `input_tokens_details.cached_tokens`; `response.failed` and `error` are
//! server errors); and whole JSON answers, which may be a Responses object (`output` items) or
//! embeddings (`data`, usage only, no output).

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::sse::SseError;

/// Token counts reported by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// `usage.prompt_tokens` (-1 if the usage block lacks it).
    pub prompt_tokens: i64,
    /// `usage.completion_tokens` (-1 if the usage block lacks it).
    pub completion_tokens: i64,
    /// `usage.prompt_tokens_details.cached_tokens`, when reported.
    pub cached_tokens: Option<i64>,
}

/// One parsed streaming event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenAiEvent {
    /// `data: [DONE]`: the stream is logically complete.
    Done,
    /// The Responses API's last event (`response.completed` / `response.incomplete`): the
    /// stream is complete, with the answer's usage.
    End { usage: Option<Usage> },
    /// A completion chunk (or a Responses API event that is not the end).
    Chunk {
        /// Some choice carries output: non-empty `delta.content`, `delta.reasoning_content`,
        /// `delta.reasoning` or `text`, or non-empty `delta.tool_calls`.
        has_token: bool,
        /// The chunk's `usage`, if present and not null.
        usage: Option<Usage>,
    },
}

/// Interpret one event's data. `[DONE]` → `Done`; `{"error": ...}` → `SseError::ServerError`;
/// anything that is not a JSON object of the expected shape → `SseError::Malformed`.
pub fn parse_openai_event(data: &[u8]) -> Result<OpenAiEvent, SseError> {
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        return Ok(OpenAiEvent::Done);
    }
    let msg: ChunkMsg = serde_json::from_slice(trimmed).map_err(|e| malformed(&e, data))?;
    if let Some(err) = msg.error {
        return Err(SseError::ServerError {
            message: error_message(&err),
        });
    }
    match msg.kind.as_deref() {
        None => Ok(OpenAiEvent::Chunk {
            has_token: msg.choices.0,
            usage: msg.usage.map(Usage::from),
        }),
        Some("response.completed" | "response.incomplete") => Ok(OpenAiEvent::End {
            usage: msg.response.and_then(|r| r.usage).map(Usage::from),
        }),
        Some("response.failed") => Err(SseError::ServerError {
            message: msg
                .response
                .and_then(|r| r.error)
                .map_or_else(|| "response.failed".into(), |e| error_message(&e)),
        }),
        Some("error") => Err(SseError::ServerError {
            message: msg.message.unwrap_or_else(|| "error event".into()),
        }),
        Some(kind) => Ok(OpenAiEvent::Chunk {
            has_token: kind.ends_with(".delta") && msg.delta.0,
            usage: None,
        }),
    }
}

/// Interpret a non-streaming response body: (`choices[*].message.content` / `text` /
/// `tool_calls` non-empty, usage).
pub fn parse_openai_response(body: &[u8]) -> Result<(bool, Option<Usage>), SseError> {
    let msg: ResponseMsg = serde_json::from_slice(body).map_err(|e| malformed(&e, body))?;
    if let Some(err) = msg.error {
        return Err(SseError::ServerError {
            message: error_message(&err),
        });
    }
    let output = msg.output.as_ref().is_some_and(has_output_item);
    Ok((msg.choices.0 || output, msg.usage.map(Usage::from)))
}

/// A Responses API `output` list carries output: an item's content part with non-empty `text`
/// (a message, reasoning), or a function call's non-empty `arguments`.
fn has_output_item(output: &serde_json::Value) -> bool {
    let non_empty =
        |v: Option<&serde_json::Value>| v.and_then(|t| t.as_str()).is_some_and(|t| !t.is_empty());
    output.as_array().is_some_and(|items| {
        items.iter().any(|item| {
            non_empty(item.get("arguments"))
                || item
                    .get("content")
                    .and_then(|c| c.as_array())
                    .is_some_and(|parts| parts.iter().any(|p| non_empty(p.get("text"))))
        })
    })
}

fn malformed(e: &serde_json::Error, data: &[u8]) -> SseError {
    let head: String = String::from_utf8_lossy(&data[..data.len().min(80)])
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    SseError::Malformed {
        message: format!("{e} in {head:?}"),
    }
}

fn error_message(err: &serde_json::Value) -> String {
    let text = match err {
        serde_json::Value::Object(map) => match map.get("message") {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => err.to_string(),
        },
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(200)
        .collect()
}

#[derive(Deserialize)]
struct ChunkMsg {
    #[serde(default)]
    choices: AnyChoice<DeltaChoice>,
    #[serde(default)]
    usage: Option<UsageMsg>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    /// A Responses API event's type (chat and completions chunks have none).
    #[serde(default, rename = "type")]
    kind: Option<String>,
    /// A Responses API delta event's text.
    #[serde(default)]
    delta: NonEmpty,
    /// The response a `response.completed` / `response.failed` event carries.
    #[serde(default)]
    response: Option<EventResponse>,
    /// An `error` event's message.
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct EventResponse {
    #[serde(default)]
    usage: Option<UsageMsg>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ResponseMsg {
    #[serde(default)]
    choices: AnyChoice<MessageChoice>,
    /// A Responses API object's output items.
    #[serde(default)]
    output: Option<serde_json::Value>,
    #[serde(default)]
    usage: Option<UsageMsg>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// Chat and completions name the counts `prompt_tokens` / `completion_tokens`; the Responses API
/// `input_tokens` / `output_tokens` (and `input_tokens_details`).
#[derive(Deserialize)]
struct UsageMsg {
    #[serde(default, alias = "input_tokens")]
    prompt_tokens: Option<i64>,
    #[serde(default, alias = "output_tokens")]
    completion_tokens: Option<i64>,
    #[serde(default, alias = "input_tokens_details")]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<i64>,
}

impl From<UsageMsg> for Usage {
    fn from(u: UsageMsg) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens.unwrap_or(-1),
            completion_tokens: u.completion_tokens.unwrap_or(-1),
            cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
        }
    }
}

/// A streaming choice: output is in `delta` (chat) or `text` (completions).
#[derive(Deserialize)]
struct DeltaChoice {
    #[serde(default)]
    delta: Option<Output>,
    #[serde(default)]
    text: NonEmpty,
}

/// A non-streaming choice: output is in `message` (chat) or `text` (completions).
#[derive(Deserialize)]
struct MessageChoice {
    #[serde(default)]
    message: Option<Output>,
    #[serde(default)]
    text: NonEmpty,
}

#[derive(Deserialize)]
struct Output {
    #[serde(default)]
    content: NonEmpty,
    #[serde(default)]
    reasoning_content: NonEmpty,
    #[serde(default)]
    reasoning: NonEmpty,
    #[serde(default)]
    tool_calls: NonEmpty,
}

trait HasOutput {
    fn has_output(&self) -> bool;
}

impl HasOutput for DeltaChoice {
    fn has_output(&self) -> bool {
        self.text.0 || self.delta.as_ref().is_some_and(Output::any)
    }
}

impl HasOutput for MessageChoice {
    fn has_output(&self) -> bool {
        self.text.0 || self.message.as_ref().is_some_and(Output::any)
    }
}

impl Output {
    fn any(&self) -> bool {
        self.content.0 || self.reasoning_content.0 || self.reasoning.0 || self.tool_calls.0
    }
}

/// `choices` reduced while parsing to "does any choice carry output" (no Vec is built).
struct AnyChoice<T>(bool, std::marker::PhantomData<T>);

impl<T> Default for AnyChoice<T> {
    fn default() -> Self {
        AnyChoice(false, std::marker::PhantomData)
    }
}

impl<'de, T: Deserialize<'de> + HasOutput> Deserialize<'de> for AnyChoice<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + HasOutput> Visitor<'de> for V<T> {
            type Value = AnyChoice<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of choices or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(AnyChoice::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(AnyChoice::default())
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
                d.deserialize_any(self)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut any = false;
                while let Some(choice) = seq.next_element::<T>()? {
                    any |= choice.has_output();
                }
                Ok(AnyChoice(any, std::marker::PhantomData))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// Any JSON value reduced to "is it non-empty": strings, lists and objects must have content;
/// null is empty; numbers and booleans count as present. Strings are not copied.
#[derive(Default)]
struct NonEmpty(bool);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NonEmpty;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<NonEmpty, E> {
                Ok(NonEmpty(!s.is_empty()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_none<E: de::Error>(self) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<NonEmpty, D2::Error> {
                d.deserialize_any(self)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<NonEmpty, E> {
                Ok(NonEmpty(true))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<NonEmpty, E> {
                Ok(NonEmpty(true))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<NonEmpty, E> {
                Ok(NonEmpty(true))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<NonEmpty, E> {
                Ok(NonEmpty(true))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NonEmpty, A::Error> {
                let any = seq.next_element::<IgnoredAny>()?.is_some();
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(NonEmpty(any))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NonEmpty, A::Error> {
                let any = map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some();
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(NonEmpty(any))
            }
        }
        d.deserialize_any(V)
    }
}
