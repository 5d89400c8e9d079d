//! The bytes of OpenAI-shaped answers: SSE chunks, whole responses, usage and errors.
//!
//! Owns `StreamFormat` (one per streamed request: its chunk prefix is rendered once, so a token
//! chunk costs one buffer append of prefix + escaped text + fixed suffix), `Usage`,
//! `completion_json` and `error_json`. Shapes follow vLLM's OpenAI server: chat chunks carry
//! `delta.content` (the first one announces `role: assistant`), completion chunks `text`; the end
//! is a chunk with an empty delta and `finish_reason`, then with `stream_options.include_usage` a
//! `{"choices":[],"usage":{...}}` chunk, then `data: [DONE]`.

use serde_json::{json, Value};

use crate::request::{Api, ApiError};

/// Token counts of one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub cached_tokens: u32,
}

impl Usage {
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
    let v =
        json!({"error": {"message": e.message, "type": e.kind, "param": null, "code": e.status}});
    serde_json::to_vec(&v).expect("json")
}

/// Id prefix and object names per API.
fn names(api: Api) -> (&'static str, &'static str, &'static str) {
    match api {
        Api::Chat => ("chatcmpl-", "chat.completion", "chat.completion.chunk"),
        Api::Completions => ("cmpl-", "text_completion", "text_completion"),
    }
}

/// A request id like vLLM's (`chatcmpl-<hex>`).
pub fn request_id(api: Api, n: u64) -> String {
    let m = crate::kv::mix;
    format!("{}{:016x}{:016x}", names(api).0, m(n), m(!n))
}

/// A whole (non-streamed) answer.
pub fn completion_json(
    api: Api,
    id: &str,
    created: u64,
    model: &str,
    text: &str,
    finish: &str,
    usage: Usage,
) -> Vec<u8> {
    let (_, object, _) = names(api);
    let choice = match api {
        Api::Chat => json!({
            "index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": null, "finish_reason": finish, "stop_reason": null,
        }),
        Api::Completions => json!({
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
    /// `data: {"id":..,"object":..,"created":..,"model":..,"choices":[`
    head: Vec<u8>,
    pub include_usage: bool,
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
        }
    }

    /// Chat only: the first chunk, `delta: {role: assistant, content: ""}`.
    pub fn role(&self, out: &mut Vec<u8>) {
        if self.api == Api::Chat {
            out.extend_from_slice(&self.head);
            out.extend_from_slice(
                b"{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
            );
        }
    }

    /// A chunk carrying `text`.
    pub fn token(&self, out: &mut Vec<u8>, text: &str) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(match self.api {
            Api::Chat => b"{\"index\":0,\"delta\":{\"content\":".as_slice(),
            Api::Completions => b"{\"index\":0,\"text\":".as_slice(),
        });
        serde_json::to_writer(&mut *out, text).expect("json");
        out.extend_from_slice(match self.api {
            Api::Chat => b"},\"logprobs\":null,\"finish_reason\":null}]}\n\n".as_slice(),
            Api::Completions => b",\"logprobs\":null,\"finish_reason\":null}]}\n\n".as_slice(),
        });
    }

    /// The closing chunks: finish reason, usage (if asked for), `[DONE]`.
    pub fn finish(&self, out: &mut Vec<u8>, reason: &str, usage: Usage) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(match self.api {
            Api::Chat => {
                b"{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"".as_slice()
            }
            Api::Completions => {
                b"{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"".as_slice()
            }
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
        f.role(&mut out);
        f.token(&mut out, "a \"quoted\"\nline");
        let usage = Usage {
            prompt_tokens: 5,
            completion_tokens: 2,
            cached_tokens: 4,
        };
        f.finish(&mut out, "length", usage);
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

    #[test]
    fn completion_stream_and_whole_answers() {
        let f = StreamFormat::new(Api::Completions, "cmpl-1", 7, "sim", false);
        let mut out = Vec::new();
        f.role(&mut out);
        f.token(&mut out, "x");
        f.finish(&mut out, "stop", Usage::default());
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
}
