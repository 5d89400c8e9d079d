//! The one change the proxy makes to traffic.
//!
//! The recorder needs an answer's usage (its cached tokens above all), which a streamed answer
//! carries only when the request set `stream_options.include_usage`. A streamed chat /
//! completions request without it is sent with it, and the usage-only chunk that brings
//! (`choices` empty, `usage` set) is taken out of what the client receives, which then gets
//! whole SSE events (an event cut across two reads goes out when its end arrives).

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::Value;

/// What a recorded request's body asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// `"stream": true`.
    pub stream: bool,
    /// The body to send when `include_usage` had to be added (then the usage chunk is the
    /// proxy's to take out); None: send the body as it came.
    pub with_usage: Option<Bytes>,
}

#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    stream: Option<Value>,
    #[serde(default)]
    stream_options: Option<Value>,
}

/// Read `body` for `stream` and (with `add_usage`: a chat or completions request)
/// `include_usage`.
pub fn asked(body: &Bytes, add_usage: bool) -> Asked {
    let plain = Asked {
        stream: false,
        with_usage: None,
    };
    if memchr(body, b"\"stream\"").is_none() {
        return plain;
    }
    let Ok(probe) = serde_json::from_slice::<Probe>(body) else {
        return plain;
    };
    if probe.stream != Some(Value::Bool(true)) {
        return plain;
    }
    if !add_usage {
        return Asked {
            stream: true,
            with_usage: None,
        };
    }
    let included = probe
        .stream_options
        .as_ref()
        .and_then(|o| o.get("include_usage"))
        .is_some_and(|v| *v == Value::Bool(true));
    let with_usage = if included {
        None
    } else if probe.stream_options.is_none() {
        Some(inserted(body))
    } else {
        rewritten(body)
    };
    Asked {
        stream: true,
        with_usage,
    }
}

/// `body` with `"stream_options":{"include_usage":true}` added as its last member (the body is
/// an object with at least `stream` in it): everything else is sent byte for byte.
fn inserted(body: &Bytes) -> Bytes {
    let end = body
        .iter()
        .rposition(|&b| b == b'}')
        .expect("a JSON object ends with }");
    let mut out = BytesMut::with_capacity(body.len() + 40);
    out.extend_from_slice(&body[..end]);
    out.extend_from_slice(br#","stream_options":{"include_usage":true}"#);
    out.extend_from_slice(&body[end..]);
    out.freeze()
}

/// `body` with `include_usage: true` set in the `stream_options` it has (kept if an object,
/// replaced if not), written anew.
fn rewritten(body: &Bytes) -> Option<Bytes> {
    let mut obj: serde_json::Map<String, Value> = serde_json::from_slice(body).ok()?;
    let mut opts = match obj.remove("stream_options") {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    opts.insert("include_usage".into(), Value::Bool(true));
    obj.insert("stream_options".into(), Value::Object(opts));
    serde_json::to_vec(&obj).ok().map(Bytes::from)
}

fn memchr(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Takes the usage-only events out of an SSE stream read by read.
#[derive(Debug, Default)]
pub struct UsageFilter {
    pending: BytesMut,
}

impl UsageFilter {
    /// The whole events of what has come so far, less the usage-only ones; an unfinished event
    /// waits for its end.
    pub fn push(&mut self, data: &[u8]) -> Bytes {
        self.pending.extend_from_slice(data);
        let mut out = BytesMut::new();
        let mut at = 0;
        while let Some((end, sep)) = event_end(&self.pending[at..]) {
            let event = &self.pending[at..at + end + sep];
            if !usage_only(event) {
                out.extend_from_slice(event);
            }
            at += end + sep;
        }
        let _ = self.pending.split_to(at);
        out.freeze()
    }

    /// What is left when the stream ends (an event with no end, sent as it is).
    pub fn finish(&mut self) -> Bytes {
        self.pending.split().freeze()
    }
}

/// Where the first event of `data` ends: the offset of its blank line and that line's length
/// (`\n\n`, `\r\n\r\n`, `\n\r\n` or `\r\n\n`).
fn event_end(data: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < data.len() {
        if data[i] == b'\n' {
            let rest = &data[i + 1..];
            if rest.first() == Some(&b'\n') {
                let start = if i > 0 && data[i - 1] == b'\r' {
                    i - 1
                } else {
                    i
                };
                return Some((start, i + 2 - start));
            }
            if rest.starts_with(b"\r\n") {
                let start = if i > 0 && data[i - 1] == b'\r' {
                    i - 1
                } else {
                    i
                };
                return Some((start, i + 3 - start));
            }
        }
        i += 1;
    }
    None
}

/// An event whose data is `{"choices": [], "usage": {...}, ...}`: the chunk `include_usage` adds.
fn usage_only(event: &[u8]) -> bool {
    if memchr(event, b"\"usage\"").is_none() {
        return false;
    }
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(data) = line.strip_prefix(b"data:") {
            return match serde_json::from_slice::<Value>(data) {
                Ok(Value::Object(obj)) => {
                    obj.get("choices") == Some(&Value::Array(vec![]))
                        && obj.get("usage").is_some_and(Value::is_object)
                }
                _ => false,
            };
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    #[test]
    fn a_streamed_request_without_usage_gets_it_as_its_last_member() {
        let got = asked(
            &b(r#"{"model":"m","stream":true,"messages":[{"content":"}"}]} "#),
            true,
        );
        assert!(got.stream);
        let sent = got.with_usage.unwrap();
        assert_eq!(
            &sent[..],
            br#"{"model":"m","stream":true,"messages":[{"content":"}"}],"stream_options":{"include_usage":true}} "#
        );
        let v: Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], Value::Bool(true));
    }

    #[test]
    fn stream_options_without_usage_are_kept_and_usage_set() {
        let got = asked(
            &b(r#"{"stream":true,"stream_options":{"continuous_usage_stats":false}}"#),
            true,
        );
        let v: Value = serde_json::from_slice(&got.with_usage.unwrap()).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], Value::Bool(true));
        assert_eq!(
            v["stream_options"]["continuous_usage_stats"],
            Value::Bool(false)
        );
        let got = asked(&b(r#"{"stream":true,"stream_options":null}"#), true);
        let v: Value = serde_json::from_slice(&got.with_usage.unwrap()).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], Value::Bool(true));
    }

    #[test]
    fn a_responses_api_stream_is_sent_as_it_came() {
        let got = asked(&b(r#"{"model":"m","stream":true,"input":"hi"}"#), false);
        assert!(got.stream && got.with_usage.is_none());
    }

    #[test]
    fn requests_that_asked_or_do_not_stream_pass_as_they_are() {
        for body in [
            r#"{"stream":true,"stream_options":{"include_usage":true}}"#,
            r#"{"stream":false}"#,
            r#"{"stream":"true"}"#,
            r#"{"messages":[]}"#,
            r#"{"stream":true"#,
            r#"["stream",true]"#,
        ] {
            let got = asked(&b(body), true);
            assert!(got.with_usage.is_none(), "{body}");
            assert_eq!(got.stream, body.starts_with(r#"{"stream":true,"#), "{body}");
        }
    }

    #[test]
    fn the_usage_only_event_is_taken_out_whatever_the_reads() {
        let raw = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":null}\r\n\r\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"completion_tokens\":1}}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\n",
            "data: [DONE]\n\n"
        )
        .as_bytes();
        let want = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":null}\r\n\r\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"completion_tokens\":1}}\n\n",
            "data: [DONE]\n\n"
        )
        .as_bytes();
        for cut in 0..raw.len() {
            let mut f = UsageFilter::default();
            let mut out = f.push(&raw[..cut]).to_vec();
            out.extend_from_slice(&f.push(&raw[cut..]));
            out.extend_from_slice(&f.finish());
            assert_eq!(out, want, "cut at {cut}");
        }
    }

    #[test]
    fn an_unfinished_event_is_sent_when_the_stream_ends() {
        let mut f = UsageFilter::default();
        assert_eq!(&f.push(b"data: {}\n\ndata: x")[..], b"data: {}\n\n");
        assert_eq!(&f.finish()[..], b"data: x");
    }
}
