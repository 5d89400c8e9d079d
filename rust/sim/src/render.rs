//! The bytes of OpenAI-shaped answers: SSE chunks, whole responses, usage and errors.
//!
//! Owns `StreamFormat` (one per streamed request: its chunk prefix is rendered once, so a token
//! chunk costs one buffer append of prefix + escaped text + fixed suffix), `Usage`,
//! `completion_json` and `error_json`. Shapes follow vLLM's OpenAI server: chat chunks carry
//! `delta.content` (the first one announces `role: assistant`), completion chunks `text`; the end
//! is a chunk with an empty delta and `finish_reason`, then with `stream_options.include_usage` a
//! `{"choices":[],"usage":{...}}` chunk, then `data: [DONE]`. A Responses API stream is typed
//! events (`event:` and `data:` with its `type` and `sequence_number`): `response.created`,
//! `response.output_item.added`, `response.content_part.added`, a `response.output_text.delta`
//! per token, `response.output_text.done`, `response.content_part.done` and
//! `response.output_item.done` with the whole text, then `response.completed` (or
//! `response.incomplete` when `max_output_tokens` cut it) whose response carries the message and
//! the usage; no `[DONE]`. Embeddings answer a vector made from the
//! prompt's token ids (`embeddings_json`).
//!
//! Tool calls (`tools::ToolCall`), as the OpenAI API streams them: in chat, a call's first delta
//! is `{"tool_calls": [{"index", "id", "type": "function", "function": {"name", "arguments": ""}}]}`
//! and its argument text follows in deltas carrying only `index` and `function.arguments`; the
//! finish reason is `tool_calls` and a whole answer's message has `content: null` and the
//! calls. In the Responses API each call is a `function_call` output item: streamed as
//! `response.output_item.added` (arguments empty), `response.function_call_arguments.delta`
//! events, `response.function_call_arguments.done` and `response.output_item.done`, and the
//! closing `response.completed` lists the calls. An answer with text before its calls (a
//! replayed one of an exact length: `tools::text_before_calls`) streams the text first (chat:
//! `delta.content` chunks; Responses: the message item at output index 0, closed before the
//! first call's item, the calls' items after it), and its whole message has the `content`
//! string and the calls.

use std::cell::{Cell, RefCell};

use serde_json::{json, Value};

use crate::request::{Api, ApiError};
use crate::tools::{CallEvent, ToolCall};

/// Token counts of one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub cached_tokens: u32,
}

impl Usage {
    /// The Responses API's names for the same counts.
    pub fn to_responses_json(self) -> Value {
        json!({
            "input_tokens": self.prompt_tokens,
            "input_tokens_details": {"cached_tokens": self.cached_tokens},
            "output_tokens": self.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        })
    }

    pub fn to_json(self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        })
    }
}

/// `{"error": {"message", "type", "param", "code"}}`.
pub fn error_json(e: &ApiError) -> Vec<u8> {
    let v = json!({"error": {"message": e.message, "type": e.kind, "param": e.param, "code": e.status}});
    serde_json::to_vec(&v).expect("json")
}

/// Id prefix and object names per API.
fn names(api: Api) -> (&'static str, &'static str, &'static str) {
    match api {
        Api::Chat => ("chatcmpl-", "chat.completion", "chat.completion.chunk"),
        Api::Completions => ("cmpl-", "text_completion", "text_completion"),
        Api::Responses => ("resp_", "response", "response"),
        Api::Embeddings => ("embd-", "list", "list"),
    }
}

/// A Responses API `function_call` output item.
fn function_call_item(response_id: &str, index: usize, call: &ToolCall, status: &str) -> Value {
    json!({
        "type": "function_call", "id": ToolCall::item_id(response_id, index), "call_id": call.id,
        "name": call.name, "arguments": call.arguments(), "status": status,
    })
}

/// A Responses API object: `status` from the finish reason (`length`: cut by
/// `max_output_tokens`, `incomplete`); its output its message's text as one `output_text` part
/// (none when `text` is None: the response's first event; none when the answer is tool calls
/// and the text is empty), then the tool calls.
fn response_object(
    id: &str,
    created: u64,
    model: &str,
    text: Option<&str>,
    calls: &[ToolCall],
    finish: &str,
    usage: Option<Usage>,
) -> Value {
    let (status, incomplete) = match finish {
        "" => ("in_progress", Value::Null),
        "length" => ("incomplete", json!({"reason": "max_output_tokens"})),
        _ => ("completed", Value::Null),
    };
    let mut output = Vec::new();
    if let Some(t) = text.filter(|t| calls.is_empty() || !t.is_empty()) {
        output.push(json!({
            "type": "message", "id": format!("msg_{id}"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": t, "annotations": []}],
        }));
    }
    let item_status = if status == "incomplete" {
        "incomplete"
    } else {
        "completed"
    };
    for (i, c) in calls.iter().enumerate() {
        output.push(function_call_item(id, i, c, item_status));
    }
    json!({
        "id": id, "object": "response", "created_at": created, "model": model, "status": status,
        "incomplete_details": incomplete, "output": Value::Array(output), "parallel_tool_calls": false,
        "tool_choice": "auto", "tools": [], "error": null,
        "usage": usage.map_or(Value::Null, Usage::to_responses_json),
    })
}

/// An embeddings answer: one vector of `EMBEDDING_DIMS` floats made from the prompt's ids (the
/// same prompt, the same vector; unit length), as floats or base64 of little-endian f32.
pub fn embeddings_json(model: &str, ids: &[u32], base64: bool, usage: Usage) -> Vec<u8> {
    let mut v = [0f32; EMBEDDING_DIMS];
    for (k, &id) in ids.iter().enumerate() {
        let h = crate::kv::mix(((k as u64) << 32) ^ id as u64);
        v[(h as usize) % EMBEDDING_DIMS] += if h >> 63 == 0 { 1.0 } else { -1.0 };
    }
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    let embedding = if base64 {
        let bytes: Vec<u8> = v.iter().flat_map(|x| (x / norm).to_le_bytes()).collect();
        Value::String(base64_encode(&bytes))
    } else {
        json!(v.iter().map(|x| x / norm).collect::<Vec<f32>>())
    };
    let v = json!({
        "object": "list", "model": model,
        "data": [{"object": "embedding", "index": 0, "embedding": embedding}],
        "usage": {"prompt_tokens": usage.prompt_tokens, "total_tokens": usage.prompt_tokens},
    });
    serde_json::to_vec(&v).expect("json")
}

/// Dimensions of the simulated engine's embeddings.
pub const EMBEDDING_DIMS: usize = 64;

fn base64_encode(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A request id like vLLM's (`chatcmpl-<hex>`).
pub fn request_id(api: Api, n: u64) -> String {
    let m = crate::kv::mix;
    format!("{}{:016x}{:016x}", names(api).0, m(n), m(!n))
}

/// A chat answer's `tool_calls`.
fn chat_tool_calls(calls: &[ToolCall]) -> Value {
    calls
        .iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments()}}))
        .collect()
}

/// A whole (non-streamed) answer: `text`, and the tool calls when there are any (a chat
/// message's `content` is then null unless there is text).
#[allow(clippy::too_many_arguments)]
pub fn completion_json(
    api: Api,
    id: &str,
    created: u64,
    model: &str,
    text: &str,
    calls: &[ToolCall],
    finish: &str,
    usage: Usage,
) -> Vec<u8> {
    let (_, object, _) = names(api);
    if api == Api::Responses {
        let v = response_object(id, created, model, Some(text), calls, finish, Some(usage));
        return serde_json::to_vec(&v).expect("json");
    }
    let content = if calls.is_empty() || !text.is_empty() {
        json!(text)
    } else {
        Value::Null
    };
    let choice = match api {
        Api::Chat => json!({
            "index": 0, "message": {"role": "assistant", "content": content, "tool_calls": chat_tool_calls(calls)},
            "logprobs": null, "finish_reason": finish, "stop_reason": null,
        }),
        Api::Completions | Api::Responses | Api::Embeddings => json!({
            "index": 0, "text": text, "logprobs": null, "finish_reason": finish, "stop_reason": null,
        }),
    };
    let v = json!({
        "id": id, "object": object, "created": created, "model": model,
        "choices": [choice], "usage": usage.to_json(),
    });
    serde_json::to_vec(&v).expect("json")
}

/// The pre-rendered pieces of one streamed answer.
#[derive(Debug, Clone)]
pub struct StreamFormat {
    api: Api,
    /// `data: {"id":..,"object":..,"created":..,"model":..,"choices":[` (Responses: the
    /// response's id, created time and model, for its first and last events)
    head: Vec<u8>,
    pub include_usage: bool,
    /// Responses API: the next event's `sequence_number`, and the text streamed so far (its
    /// closing events repeat it whole).
    sequence: Cell<u64>,
    text: RefCell<String>,
    /// Responses API: whether the message item is open (text streams into it), and the output
    /// index of the first call's item (1 after a message, else 0).
    message_open: Cell<bool>,
    first_call: Cell<usize>,
    id: String,
    created: u64,
    model: String,
}

const DONE: &[u8] = b"data: [DONE]\n\n";

impl StreamFormat {
    pub fn new(api: Api, id: &str, created: u64, model: &str, include_usage: bool) -> StreamFormat {
        let (_, _, object) = names(api);
        let mut head = b"data: {\"id\":".to_vec();
        serde_json::to_writer(&mut head, id).expect("json");
        head.extend_from_slice(b",\"object\":\"");
        head.extend_from_slice(object.as_bytes());
        head.extend_from_slice(format!("\",\"created\":{created},\"model\":").as_bytes());
        serde_json::to_writer(&mut head, model).expect("json");
        head.extend_from_slice(b",\"choices\":[");
        StreamFormat {
            api,
            head,
            include_usage,
            sequence: Cell::new(0),
            text: RefCell::new(String::new()),
            message_open: Cell::new(false),
            first_call: Cell::new(0),
            id: id.to_string(),
            created,
            model: model.to_string(),
        }
    }

    /// A Responses API event: `event: TYPE` and its data, `type` and `sequence_number` set.
    fn event(&self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        let n = self.sequence.get();
        self.sequence.set(n + 1);
        data["type"] = json!(kind);
        data["sequence_number"] = json!(n);
        out.extend_from_slice(format!("event: {kind}\ndata: ").as_bytes());
        serde_json::to_writer(&mut *out, &data).expect("json");
        out.extend_from_slice(b"\n\n");
    }

    fn item_id(&self) -> String {
        format!("msg_{}", self.id)
    }

    /// Chat: the first chunk, `delta: {role: assistant, content: ""}`; Responses: the events
    /// that open the response, and when the answer has text (`message`: not only tool calls),
    /// its message and text part.
    pub fn role(&self, out: &mut Vec<u8>, message: bool) {
        if self.api == Api::Responses {
            let response =
                response_object(&self.id, self.created, &self.model, None, &[], "", None);
            self.event(out, "response.created", json!({"response": response}));
            if !message {
                return;
            }
            self.message_open.set(true);
            self.first_call.set(1);
            let item = json!({"type": "message", "id": self.item_id(), "role": "assistant", "status": "in_progress", "content": []});
            self.event(
                out,
                "response.output_item.added",
                json!({"output_index": 0, "item": item}),
            );
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            self.event(
                out,
                "response.content_part.added",
                json!({"item_id": self.item_id(), "output_index": 0, "content_index": 0, "part": part}),
            );
            return;
        }
        if self.api == Api::Chat {
            out.extend_from_slice(&self.head);
            out.extend_from_slice(
                b"{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
            );
        }
    }

    /// A chunk carrying `text`.
    pub fn token(&self, out: &mut Vec<u8>, text: &str) {
        if self.api == Api::Responses {
            self.text.borrow_mut().push_str(text);
            let data = json!({"item_id": self.item_id(), "output_index": 0, "content_index": 0, "delta": text, "logprobs": []});
            self.event(out, "response.output_text.delta", data);
            return;
        }
        out.extend_from_slice(&self.head);
        out.extend_from_slice(match self.api {
            Api::Chat => b"{\"index\":0,\"delta\":{\"content\":".as_slice(),
            _ => b"{\"index\":0,\"text\":".as_slice(),
        });
        serde_json::to_writer(&mut *out, text).expect("json");
        out.extend_from_slice(match self.api {
            Api::Chat => b"},\"logprobs\":null,\"finish_reason\":null}]}\n\n".as_slice(),
            _ => b",\"logprobs\":null,\"finish_reason\":null}]}\n\n".as_slice(),
        });
    }

    /// A chat chunk whose only choice has `delta`.
    fn chat_delta(&self, out: &mut Vec<u8>, delta: Value) {
        out.extend_from_slice(&self.head);
        let choice = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": null});
        serde_json::to_writer(&mut *out, &choice).expect("json");
        out.extend_from_slice(b"]}\n\n");
    }

    /// Responses API: close the message item, if open, with its text (streamed so far).
    fn close_message(&self, out: &mut Vec<u8>) {
        if !self.message_open.replace(false) {
            return;
        }
        let text = self.text.borrow().clone();
        let at = json!({"item_id": self.item_id(), "output_index": 0, "content_index": 0});
        let mut done = at.clone();
        done["text"] = json!(text);
        done["logprobs"] = json!([]);
        self.event(out, "response.output_text.done", done);
        let mut part = at;
        part["part"] = json!({"type": "output_text", "text": text, "annotations": []});
        self.event(out, "response.content_part.done", part);
        let item = json!({
            "type": "message", "id": self.item_id(), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        });
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        );
    }

    /// What a step of a tool answer said (`calls`: the answer's calls, all of them).
    pub fn call_event(&self, out: &mut Vec<u8>, event: &CallEvent, calls: &[ToolCall]) {
        let responses = self.api == Api::Responses;
        let at = |i: usize| i + self.first_call.get();
        match *event {
            CallEvent::Start(i) if responses => {
                self.close_message(out);
                let mut item = function_call_item(&self.id, i, &calls[i], "in_progress");
                item["arguments"] = json!("");
                self.event(
                    out,
                    "response.output_item.added",
                    json!({"output_index": at(i), "item": item}),
                );
            }
            CallEvent::Start(i) => {
                let c = &calls[i];
                let call = json!({"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}});
                self.chat_delta(out, json!({"tool_calls": [call]}));
            }
            CallEvent::Arguments(i, ref text) if responses => {
                let data = json!({"item_id": ToolCall::item_id(&self.id, i), "output_index": at(i), "delta": text});
                self.event(out, "response.function_call_arguments.delta", data);
            }
            CallEvent::Arguments(i, ref text) => {
                let call = json!({"index": i, "function": {"arguments": text}});
                self.chat_delta(out, json!({"tool_calls": [call]}));
            }
            CallEvent::Done(i) if responses => {
                let c = &calls[i];
                let data = json!({"item_id": ToolCall::item_id(&self.id, i), "output_index": at(i), "name": c.name, "arguments": c.arguments()});
                self.event(out, "response.function_call_arguments.done", data);
                let item = function_call_item(&self.id, i, c, "completed");
                self.event(
                    out,
                    "response.output_item.done",
                    json!({"output_index": at(i), "item": item}),
                );
            }
            CallEvent::Done(_) => {}
        }
    }

    /// The closing chunks: finish reason, usage (if asked for), `[DONE]`; Responses: the
    /// response's last event, with its status, usage and the tool calls made (`calls`).
    pub fn finish(&self, out: &mut Vec<u8>, reason: &str, usage: Usage, calls: &[ToolCall]) {
        if self.api == Api::Responses {
            if calls.is_empty() {
                // a text answer's message closes here
                self.message_open.set(true);
            }
            self.close_message(out);
            let text = self.text.take();
            let response = response_object(
                &self.id,
                self.created,
                &self.model,
                Some(&text),
                calls,
                reason,
                Some(usage),
            );
            let kind = if reason == "length" {
                "response.incomplete"
            } else {
                "response.completed"
            };
            self.event(out, kind, json!({"response": response}));
            return;
        }
        out.extend_from_slice(&self.head);
        out.extend_from_slice(match self.api {
            Api::Chat => {
                b"{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"".as_slice()
            }
            _ => b"{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"".as_slice(),
        });
        out.extend_from_slice(reason.as_bytes());
        out.extend_from_slice(b"\",\"stop_reason\":null}]}\n\n");
        if self.include_usage {
            out.extend_from_slice(&self.head);
            out.extend_from_slice(b"],\"usage\":");
            serde_json::to_writer(&mut *out, &usage.to_json()).expect("json");
            out.extend_from_slice(b"}\n\n");
        }
        out.extend_from_slice(DONE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(bytes: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(bytes).unwrap();
        assert!(text.ends_with("\n\n"));
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let data = e.strip_prefix("data: ").unwrap();
                if data == "[DONE]" {
                    Value::Null
                } else {
                    serde_json::from_str(data).unwrap()
                }
            })
            .collect()
    }

    #[test]
    fn chat_stream_shapes() {
        let f = StreamFormat::new(Api::Chat, "chatcmpl-1", 7, "sim", true);
        let mut out = Vec::new();
        f.role(&mut out, true);
        f.token(&mut out, "a \"quoted\"\nline");
        let usage = Usage {
            prompt_tokens: 5,
            completion_tokens: 2,
            cached_tokens: 4,
        };
        f.finish(&mut out, "length", usage, &[]);
        let ev = events(&out);
        assert_eq!(ev.len(), 5);
        assert_eq!(ev[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(
            ev[1]["choices"][0]["delta"]["content"],
            "a \"quoted\"\nline"
        );
        assert_eq!(ev[1]["object"], "chat.completion.chunk");
        assert_eq!(ev[1]["model"], "sim");
        assert_eq!(ev[2]["choices"][0]["finish_reason"], "length");
        assert_eq!(ev[3]["choices"], json!([]));
        assert_eq!(ev[3]["usage"]["total_tokens"], 7);
        assert_eq!(ev[3]["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
        assert_eq!(ev[4], Value::Null);
    }

    fn typed_events(bytes: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(bytes).unwrap();
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (event, data) = e.split_once('\n').unwrap();
                let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(event.strip_prefix("event: ").unwrap(), v["type"]);
                v
            })
            .collect()
    }

    #[test]
    fn responses_stream_shapes() {
        let f = StreamFormat::new(Api::Responses, "resp_1", 7, "sim", false);
        let mut out = Vec::new();
        f.role(&mut out, true);
        f.token(&mut out, "a \"b\"");
        f.token(&mut out, "c");
        let usage = Usage {
            prompt_tokens: 5,
            completion_tokens: 2,
            cached_tokens: 3,
        };
        f.finish(&mut out, "length", usage, &[]);
        let ev = typed_events(&out);
        let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.incomplete"
            ]
        );
        let seq: Vec<u64> = ev
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(seq, (0..9).collect::<Vec<u64>>());
        assert_eq!(ev[3]["delta"], "a \"b\"");
        assert_eq!(ev[5]["text"], "a \"b\"c");
        assert_eq!(ev[6]["part"]["text"], "a \"b\"c");
        assert_eq!(ev[7]["item"]["content"][0]["text"], "a \"b\"c");
        assert_eq!(ev[7]["item"]["id"], ev[1]["item"]["id"]);
        let last = &ev[8]["response"];
        assert_eq!(last["output"], json!([ev[7]["item"]]));
        assert_eq!(
            (last["id"].as_str(), last["status"].as_str()),
            (Some("resp_1"), Some("incomplete"))
        );
        assert_eq!(last["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(last["usage"]["input_tokens"], 5);
        assert_eq!(last["usage"]["input_tokens_details"]["cached_tokens"], 3);
        assert_eq!(last["usage"]["output_tokens"], 2);
        let mut out = Vec::new();
        f.finish(&mut out, "stop", usage, &[]);
        assert_eq!(typed_events(&out)[3]["type"], "response.completed");
        assert!(!String::from_utf8(out).unwrap().contains("[DONE]"));
        let whole: Value = serde_json::from_slice(&completion_json(
            Api::Responses,
            "resp_2",
            1,
            "sim",
            "hi",
            &[],
            "stop",
            usage,
        ))
        .unwrap();
        assert_eq!(
            (whole["object"].as_str(), whole["status"].as_str()),
            (Some("response"), Some("completed"))
        );
        assert_eq!(whole["output"][0]["content"][0]["text"], "hi");
        assert_eq!(whole["usage"]["total_tokens"], 7);
    }

    #[test]
    fn embeddings_are_unit_vectors_of_the_prompt_in_floats_or_base64() {
        let usage = Usage {
            prompt_tokens: 3,
            ..Usage::default()
        };
        let floats: Value =
            serde_json::from_slice(&embeddings_json("sim", &[1, 2, 3], false, usage)).unwrap();
        let v: Vec<f64> = floats["data"][0]["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(v.len(), EMBEDDING_DIMS);
        assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-5);
        assert_eq!(floats["usage"]["prompt_tokens"], 3);
        let other: Value =
            serde_json::from_slice(&embeddings_json("sim", &[1, 2, 4], false, usage)).unwrap();
        assert_ne!(
            floats["data"][0]["embedding"],
            other["data"][0]["embedding"]
        );
        let b64: Value =
            serde_json::from_slice(&embeddings_json("sim", &[1, 2, 3], true, usage)).unwrap();
        let text = b64["data"][0]["embedding"].as_str().unwrap();
        assert_eq!(text.len(), (EMBEDDING_DIMS * 4).div_ceil(3) * 4);
        assert_eq!(base64_encode(b"Man"), "TWFu");
        assert_eq!(base64_encode(b"Ma"), "TWE=");
        assert_eq!(base64_encode(b"M"), "TQ==");
    }

    #[test]
    fn completion_stream_and_whole_answers() {
        let f = StreamFormat::new(Api::Completions, "cmpl-1", 7, "sim", false);
        let mut out = Vec::new();
        f.role(&mut out, true);
        f.token(&mut out, "x");
        f.finish(&mut out, "stop", Usage::default(), &[]);
        let ev = events(&out);
        assert_eq!(ev.len(), 3);
        assert_eq!(ev[0]["choices"][0]["text"], "x");
        assert_eq!(ev[1]["choices"][0]["finish_reason"], "stop");
        let whole: Value = serde_json::from_slice(&completion_json(
            Api::Chat,
            "c",
            1,
            "sim",
            "hi",
            &[],
            "stop",
            Usage::default(),
        ))
        .unwrap();
        assert_eq!(whole["choices"][0]["message"]["content"], "hi");
        assert_eq!(whole["object"], "chat.completion");
        let e: Value = serde_json::from_slice(&error_json(&ApiError::not_found("nope"))).unwrap();
        assert_eq!(
            (e["error"]["code"].as_u64(), e["error"]["type"].as_str()),
            (Some(404), Some("NotFoundError"))
        );
        assert!(request_id(Api::Chat, 3).starts_with("chatcmpl-"));
        assert_ne!(request_id(Api::Chat, 3), request_id(Api::Chat, 4));
    }

    fn two_calls() -> Vec<ToolCall> {
        let call = |id: &str, name: &str, pieces: &[&str]| ToolCall {
            id: id.into(),
            name: name.into(),
            pieces: pieces.iter().map(|p| p.to_string()).collect(),
        };
        vec![
            call("call_a", "read", &["{\"path\"", ": \"x\"}"]),
            call("call_b", "grep", &["{}"]),
        ]
    }

    /// The events of a tool answer streamed token by token, then finished.
    fn stream_calls(api: Api, calls: &[ToolCall]) -> Vec<u8> {
        let f = StreamFormat::new(api, "id_1", 7, "sim", true);
        let mut turn = crate::tools::CallTurn::new(calls.to_vec());
        let mut out = Vec::new();
        f.role(&mut out, false);
        for _ in 0..turn.tokens() {
            for e in turn.advance(1) {
                f.call_event(&mut out, &e, calls);
            }
        }
        let usage = Usage {
            prompt_tokens: 5,
            completion_tokens: turn.tokens() as u32,
            cached_tokens: 0,
        };
        f.finish(&mut out, "tool_calls", usage, calls);
        out
    }

    #[test]
    fn chat_tool_call_stream_and_whole_shapes() {
        let calls = two_calls();
        let ev = events(&stream_calls(Api::Chat, &calls));
        assert_eq!(ev[0]["choices"][0]["delta"]["role"], "assistant");
        let deltas: Vec<&Value> = ev[1..ev.len() - 3]
            .iter()
            .map(|e| &e["choices"][0]["delta"]["tool_calls"][0])
            .collect();
        // per call: a first delta with index, id, type and name, then arguments with the index only
        assert_eq!(
            deltas[0],
            &json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "read", "arguments": ""}})
        );
        assert_eq!(
            deltas[1],
            &json!({"index": 0, "function": {"arguments": "{\"path\""}})
        );
        assert_eq!(
            deltas[2],
            &json!({"index": 0, "function": {"arguments": ": \"x\"}"}})
        );
        assert_eq!(deltas[3]["id"], "call_b");
        assert_eq!(
            (
                deltas[3]["index"].as_u64(),
                deltas[3]["function"]["name"].as_str()
            ),
            (Some(1), Some("grep"))
        );
        assert_eq!(
            deltas[4],
            &json!({"index": 1, "function": {"arguments": "{}"}})
        );
        assert_eq!(deltas.len(), 5);
        let n = ev.len();
        assert_eq!(ev[n - 3]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(ev[n - 2]["usage"]["completion_tokens"], 33);
        assert_eq!(ev[n - 1], Value::Null);
        let whole: Value = serde_json::from_slice(&completion_json(
            Api::Chat,
            "c",
            1,
            "sim",
            "",
            &calls,
            "tool_calls",
            Usage::default(),
        ))
        .unwrap();
        let message = &whole["choices"][0]["message"];
        assert_eq!(message["content"], Value::Null);
        assert_eq!(
            message["tool_calls"][0],
            json!({"id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"x\"}"}})
        );
        assert_eq!(message["tool_calls"][1]["function"]["arguments"], "{}");
        assert_eq!(whole["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn text_then_calls_stream_the_text_first_and_answer_both_whole() {
        let calls = two_calls();
        let usage = Usage {
            prompt_tokens: 5,
            completion_tokens: 9,
            cached_tokens: 0,
        };
        let stream = |api: Api| {
            let f = StreamFormat::new(api, "id_1", 7, "sim", false);
            let mut turn = crate::tools::CallTurn::with_text(2, calls.clone());
            let mut out = Vec::new();
            f.role(&mut out, true);
            for word in ["so ", "look"] {
                assert_eq!(turn.take_text(1), 1);
                f.token(&mut out, word);
            }
            for e in turn.advance(turn.tokens()) {
                f.call_event(&mut out, &e, &calls);
            }
            f.finish(&mut out, "tool_calls", usage, &calls);
            out
        };
        // chat: content deltas, then the calls' deltas
        let ev = events(&stream(Api::Chat));
        let content: Vec<&Value> = ev[1..3]
            .iter()
            .map(|e| &e["choices"][0]["delta"]["content"])
            .collect();
        assert_eq!(content, [&json!("so "), &json!("look")]);
        assert_eq!(
            ev[3]["choices"][0]["delta"]["tool_calls"][0]["id"],
            "call_a"
        );
        // Responses: the message item (index 0) closes before the calls' items (1, 2)
        let ev = typed_events(&stream(Api::Responses));
        let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds[..9],
            [
                "response.created",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
            ]
        );
        assert_eq!(ev[5]["text"], "so look");
        assert_eq!(ev[8]["output_index"], 1);
        let last = &ev[ev.len() - 1];
        assert_eq!(last["type"], "response.completed");
        let output = last["response"]["output"].as_array().unwrap();
        assert_eq!(output.len(), 3);
        assert_eq!(output[0]["content"][0]["text"], "so look");
        assert_eq!(output[2]["call_id"], "call_b");
        // whole: content and the calls
        let whole = |api| {
            let bytes = completion_json(
                api,
                "id_2",
                1,
                "sim",
                "so look",
                &calls,
                "tool_calls",
                usage,
            );
            serde_json::from_slice::<Value>(&bytes).unwrap()
        };
        let message = &whole(Api::Chat)["choices"][0]["message"];
        assert_eq!(message["content"], "so look");
        assert_eq!(message["tool_calls"].as_array().unwrap().len(), 2);
        let output = &whole(Api::Responses)["output"];
        assert_eq!(output[0]["type"], "message");
        assert_eq!(output[1]["type"], "function_call");
    }

    #[test]
    fn responses_function_call_stream_and_whole_shapes() {
        let calls = two_calls();
        let ev = typed_events(&stream_calls(Api::Responses, &calls));
        let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let seq: Vec<u64> = ev
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(seq, (0..11).collect::<Vec<u64>>());
        let added = &ev[1];
        assert_eq!(
            (added["output_index"].as_u64(), &added["item"]),
            (
                Some(0),
                &json!({"type": "function_call", "id": "fc_id_1_0", "call_id": "call_a", "name": "read", "arguments": "", "status": "in_progress"})
            )
        );
        assert_eq!(
            (ev[2]["item_id"].as_str(), ev[2]["delta"].as_str()),
            (Some("fc_id_1_0"), Some("{\"path\""))
        );
        assert_eq!(ev[4]["arguments"], "{\"path\": \"x\"}");
        assert_eq!(
            (
                ev[5]["item"]["status"].as_str(),
                ev[5]["item"]["arguments"].as_str()
            ),
            (Some("completed"), Some("{\"path\": \"x\"}"))
        );
        assert_eq!(
            (
                ev[6]["output_index"].as_u64(),
                ev[6]["item"]["call_id"].as_str()
            ),
            (Some(1), Some("call_b"))
        );
        let done = &ev[10]["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"].as_array().unwrap().len(), 2);
        assert_eq!(done["output"][1]["name"], "grep");
        let whole: Value = serde_json::from_slice(&completion_json(
            Api::Responses,
            "resp_2",
            1,
            "sim",
            "",
            &calls,
            "tool_calls",
            Usage::default(),
        ))
        .unwrap();
        assert_eq!(whole["status"], "completed");
        assert_eq!(
            whole["output"][0],
            json!({"type": "function_call", "id": "fc_2_0", "call_id": "call_a", "name": "read", "arguments": "{\"path\": \"x\"}", "status": "completed"})
        );
    }
}
