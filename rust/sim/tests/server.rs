//! The server end to end over real sockets, driven by our own client (replay-core): OpenAI
//! shapes, usage and cached tokens, errors, /tokenize, /metrics, and real-time step pacing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use bytes::Bytes;
use replay_core::{run, PlannedRequest, Records, RunConfig, RunControl};
use replay_sim::fixture::tiny_vocab;
use replay_sim::{serve_with, EngineConfig, ServerHandle};
use serde_json::{json, Value};

fn start(json: Value) -> ServerHandle {
    let config = EngineConfig::from_json(&json.to_string()).unwrap();
    serve_with(config.resolve().unwrap(), Arc::new(tiny_vocab())).unwrap()
}

fn send(server: &ServerHandle, reqs: Vec<(&str, Value)>) -> Records {
    let planned = reqs
        .into_iter()
        .map(|(path, body)| PlannedRequest {
            path: path.into(),
            body: Bytes::from(body.to_string()),
            offset_ns: 0,
            after: None,
            joins: Vec::new(),
            headers: Vec::new(),
        })
        .collect();
    let config = RunConfig {
        base_url: server.url(),
        ..RunConfig::default()
    };
    run(&config, planned, Arc::new(RunControl::default())).unwrap()
}

/// A raw HTTP/1.1 exchange (Connection: close): (status, body).
fn http(server: &ServerHandle, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn chat(content: &str, max_tokens: u32) -> Value {
    json!({"model": "sim", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
           "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}})
}

#[test]
fn streams_carry_tokens_usage_and_cached_tokens() {
    let server = start(json!({"profile": "instant", "block_size": 16}));
    let long = "the cat sat on the mat and looked at the door for a long while ".repeat(8);
    let first = send(&server, vec![("/v1/chat/completions", chat(&long, 30))]);
    assert_eq!(first.error_kind[0], 0, "{:?}", first.error_detail);
    assert_eq!(
        (first.completion_tokens[0], first.output_chunks[0]),
        (30, 30)
    );
    assert_eq!(first.cached_tokens[0], 0);
    let prompt_tokens = first.prompt_tokens[0];
    let again = send(
        &server,
        (0..20)
            .map(|_| ("/v1/chat/completions", chat(&long, 30)))
            .collect(),
    );
    for i in 0..20 {
        assert_eq!(again.error_kind[i], 0);
        assert_eq!(again.completion_tokens[i], 30);
        assert_eq!(again.prompt_tokens[i], prompt_tokens);
        assert_eq!(
            again.cached_tokens[i],
            (prompt_tokens - 1) / 16 * 16,
            "request {i}"
        );
    }
    let metrics = server.metrics_text();
    assert!(metrics.contains("vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"sim\"}"));
    assert!(!metrics.contains("vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"sim\"} 0.0"));
}

#[test]
fn whole_answers_completions_and_token_prompts() {
    let server = start(json!({"profile": "instant"}));
    let body = json!({"prompt": "the cat", "max_tokens": 5, "ignore_eos": true});
    let (status, text) = http(&server, "POST", "/v1/completions", &body.to_string());
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let ids = tiny_vocab().encode("the cat");
    let body = json!({"prompt": ids, "max_tokens": 5, "ignore_eos": true});
    let (_, text2) = http(&server, "POST", "/v1/completions", &body.to_string());
    let v2: Value = serde_json::from_str(&text2).unwrap();
    assert_eq!(
        v2["choices"][0]["text"], v["choices"][0]["text"],
        "same ids, same answer"
    );
    let (status, text) = http(&server, "POST", "/tokenize", r#"{"prompt":"the cat"}"#);
    assert_eq!(status, 200);
    let t: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(t["tokens"], json!(ids));
    assert_eq!(t["count"], ids.len());
    assert_eq!(t["max_model_len"], 131072);
    let (status, text) = http(&server, "GET", "/v1/models", "");
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["data"][0]["id"],
        "sim"
    );
    assert_eq!(http(&server, "GET", "/health", "").0, 200);
    assert_eq!(http(&server, "GET", "/nope", "").0, 404);
}

#[test]
fn errors_look_like_vllm() {
    let server = start(json!({"profile": "instant", "max_model_len": 64}));
    let cases = [
        ("{bad", 400, "JSON"),
        (
            r#"{"model":"other","messages":[{"role":"user","content":"x"}]}"#,
            404,
            "does not exist",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1000}"#,
            400,
            "maximum context length",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"priority":3}"#,
            400,
            "Priority scheduling",
        ),
    ];
    for (body, status, word) in cases {
        let (got, text) = http(&server, "POST", "/v1/chat/completions", body);
        assert_eq!(got, status, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], status);
        assert!(
            v["error"]["message"].as_str().unwrap().contains(word),
            "{text}"
        );
    }
    let long = "the ".repeat(100);
    let (got, _) = http(
        &server,
        "POST",
        "/v1/completions",
        &json!({"prompt": long}).to_string(),
    );
    assert_eq!(got, 400);
}

#[test]
fn stop_strings_and_eos_end_with_stop() {
    let server = start(json!({"profile": "instant", "seed": 1}));
    let base = json!({"prompt": "the cat sat", "max_tokens": 40, "ignore_eos": true});
    let (_, text) = http(&server, "POST", "/v1/completions", &base.to_string());
    let full: Value = serde_json::from_str(&text).unwrap();
    let full_text = full["choices"][0]["text"].as_str().unwrap().to_string();
    let cut = full_text.len() / 2;
    let start = (cut..full_text.len())
        .find(|&i| full_text.is_char_boundary(i))
        .unwrap();
    let stop: String = full_text[start..].chars().take(3).collect();
    let mut req = base.clone();
    req["stop"] = json!([stop]);
    let (_, text) = http(&server, "POST", "/v1/completions", &req.to_string());
    let v: Value = serde_json::from_str(&text).unwrap();
    let stopped = v["choices"][0]["text"].as_str().unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(full_text.starts_with(stopped) && !stopped.contains(&stop) && stopped.len() <= start);
    // without ignore_eos a long budget ends by EOS
    let (_, text) = http(
        &server,
        "POST",
        "/v1/completions",
        r#"{"prompt":"the cat sat","max_tokens":200000}"#,
    );
    assert!(text.contains("maximum context length"));
    let (_, text) = http(
        &server,
        "POST",
        "/v1/completions",
        r#"{"prompt":"the cat sat","max_tokens":8000}"#,
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() < 8000);
}

#[test]
fn chat_answers_hold_no_chat_markers_and_keep_their_token_counts() {
    // the tiny tokenizer spells the ChatML markers in plain bytes, as GPT-2 does, and a
    // repetitive conversation makes the generator copy from its prompt often
    let server = start(json!({"profile": "instant"}));
    let turn = "the cat sat on the mat and looked at the door for a long while";
    let messages: Vec<Value> = (0..8)
        .flat_map(|_| {
            [
                json!({"role": "user", "content": turn}),
                json!({"role": "assistant", "content": turn}),
            ]
        })
        .collect();
    for seed in 0..10 {
        let body = json!({"model": "sim", "messages": messages, "max_tokens": 400, "ignore_eos": true,
                          "seed": seed});
        let (status, text) = http(&server, "POST", "/v1/chat/completions", &body.to_string());
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let content = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 400);
        for marker in ["<|", "|>", "im_start|", "im_end|"] {
            assert!(
                !content.contains(marker),
                "seed {seed}: {marker:?} in {content:?}"
            );
        }
    }
}

#[test]
fn steps_take_the_modelled_time() {
    // one decoding stream on a100/llama-3-8b: ~11.8 ms per step (weights over bandwidth +
    // overhead), played at half speed
    let server = start(json!({"profile": "a100-80g/llama-3-8b", "time_scale": 0.5}));
    let r = send(&server, vec![("/v1/chat/completions", chat("the cat", 60))]);
    assert_eq!(r.error_kind[0], 0);
    let t: Vec<i64> = r.chunk_us.iter().map(|&us| us as i64 * 1000).collect();
    let mean_itl_ms = (t[t.len() - 1] - t[1]) as f64 / (t.len() - 2) as f64 / 1e6;
    // a busy machine can only make steps late, never early
    assert!(
        (0.85 * 5.9..1.4 * 5.9).contains(&mean_itl_ms),
        "mean ITL {mean_itl_ms} ms"
    );
}

#[test]
fn the_front_end_admits_one_request_at_a_time() {
    // steps take no time, so a request's TTFT is its time in the front end: 40 ms each, served
    // one after the other, so two requests sent together start 40 and 80 ms after sending
    let path = std::env::temp_dir().join(format!("front-end-{}.json", std::process::id()));
    std::fs::write(&path, r#"{"base": "instant", "request_overhead_ms": 40}"#).unwrap();
    let server = start(json!({"profile": path.to_str().unwrap()}));
    let r = send(
        &server,
        vec![
            ("/v1/chat/completions", chat("the cat", 4)),
            ("/v1/chat/completions", chat("the dog", 4)),
        ],
    );
    std::fs::remove_file(&path).unwrap();
    assert_eq!(r.error_kind, vec![0, 0]);
    let mut ttft: Vec<i64> = (0..2).map(|i| r.first_token_ns[i] - r.sent_ns[i]).collect();
    ttft.sort();
    // a busy machine can only make the front end late, never early
    assert!(ttft[0] >= 40_000_000, "first TTFT {} ns", ttft[0]);
    // one at a time: the later first token comes two whole 40 ms admissions after the earlier
    // send (lateness only adds); admitted together, both would come ~40 ms after sending
    let sent = *r.sent_ns.iter().min().unwrap();
    let last = *r.first_token_ns.iter().max().unwrap();
    assert!(
        last - sent >= 79_000_000,
        "last first token {} ns after the first send (TTFTs {ttft:?} ns): not one at a time",
        last - sent
    );
}

#[test]
fn a_closed_loop_run_keeps_its_users_in_flight_and_no_more() {
    // 12 requests due at once, 8 output tokens each at ~5.9 ms a step (a100 / llama-3-8b played
    // at half speed): with 3 users, never more than 3 in flight, and every request after the
    // first 3 released at the end that made room for it
    let server = start(json!({"profile": "a100-80g/llama-3-8b", "time_scale": 0.5}));
    let planned = (0..12)
        .map(|i| PlannedRequest {
            path: "/v1/chat/completions".into(),
            body: Bytes::from(chat(&format!("request {i}"), 8).to_string()),
            offset_ns: 0,
            after: None,
            joins: Vec::new(),
            headers: Vec::new(),
        })
        .collect();
    let config = RunConfig {
        base_url: server.url(),
        max_in_flight: 3,
        ..RunConfig::default()
    };
    let r = run(&config, planned, Arc::new(RunControl::default())).unwrap();
    assert_eq!(r.error_kind, vec![0; 12], "{:?}", r.error_detail);
    // in flight just after each send: sends so far less the requests ended by then
    let mut ends = r.end_ns.clone();
    ends.sort();
    for i in 0..12 {
        let started = r.sent_ns.iter().filter(|&&s| s <= r.sent_ns[i]).count();
        let ended = ends.iter().filter(|&&e| e <= r.sent_ns[i]).count();
        assert!(
            started - ended <= 3,
            "request {i}: {started} sent, {ended} ended"
        );
    }
    let mut released: Vec<i64> = r.release_ns.clone();
    released.sort();
    assert_eq!(&released[..3], &[0, 0, 0]);
    for rel in &released[3..] {
        assert!(r.end_ns.contains(rel), "released at {rel}, not at an end");
    }
}

/// GET /sim/requests: the finished requests' modelled times, oldest first.
fn modelled(server: &ServerHandle) -> Vec<Value> {
    let (status, body) = http(server, "GET", "/sim/requests", "");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["requests"].as_array().unwrap().clone()
}

#[test]
fn modelled_times_do_not_depend_on_the_wall_clock() {
    // the same two requests, one after the other, played at half speed, at 1/20 and unslept
    // (time_scale 0): their modelled TTFT, decode time and E2E are the cost model's, to the
    // nanosecond, while the wall time they took differs twentyfold or more
    let mut runs = Vec::new();
    for scale in [0.5, 0.025, 0.0] {
        let server = start(json!({"profile": "a100-80g/llama-3-8b", "time_scale": scale}));
        for content in ["the cat", "the dog sat on the mat"] {
            let r = send(&server, vec![("/v1/chat/completions", chat(content, 24))]);
            assert_eq!(r.error_kind[0], 0);
        }
        let reqs = modelled(&server);
        assert_eq!(reqs.len(), 2);
        let times: Vec<(f64, f64, f64, f64)> = reqs
            .iter()
            .map(|r| {
                let at = |k: &str| r[k].as_f64().unwrap();
                assert_eq!(r["completion_tokens"], 24);
                assert_eq!(r["steps"], 24);
                assert_eq!(r["finish"], "length");
                (
                    at("scheduled_s") - at("arrived_s"),
                    at("first_token_s") - at("arrived_s"),
                    at("finished_s") - at("first_token_s"),
                    at("finished_s") - at("arrived_s"),
                )
            })
            .collect();
        runs.push(times);
    }
    for (i, req) in runs[0].iter().enumerate() {
        let (queue, ttft, decode, e2e) = *req;
        // alone on the engine: scheduled on arrival, 23 decode steps of ~11.8 ms each
        assert!(queue.abs() < 1e-9, "queued {queue} s");
        assert!(
            (0.2..0.4).contains(&decode) && ttft > 0.0,
            "decode {decode} s"
        );
        for other in &runs[1..] {
            let (q, t, d, e) = other[i];
            assert!(q.abs() < 1e-9, "queued {q} s");
            for (a, b) in [(ttft, t), (decode, d), (e2e, e)] {
                assert!((a - b).abs() < 1e-9 * a.max(1e-3), "{a} vs {b}");
            }
        }
    }
}

#[test]
fn a_150k_agent_context_is_served_and_its_cached_prefix_is_cheap() {
    // An agent's next turn: the 150k-token history it sent last time (cached) plus 2k new
    // tokens. On the 256k profile both are served; the second's modelled TTFT pays for 2k new
    // tokens attending to 152k, not for recomputing 150k.
    let vocab = tiny_vocab();
    let cycle = |text: &str, n: usize| -> Vec<u32> {
        vocab.encode(text).into_iter().cycle().take(n).collect()
    };
    let history = cycle(" the cat sat on the mat and the dog ran", 150_000);
    let mut next = history.clone();
    next.extend(cycle(" a tool said ok", 2000));
    let server = start(json!({"profile": "h100-80g/qwen3-4b-2507", "time_scale": 0.0}));
    for prompt in [&history, &next] {
        let body = json!({"prompt": prompt, "max_tokens": 4, "ignore_eos": true});
        let (status, text) = http(&server, "POST", "/v1/completions", &body.to_string());
        assert_eq!(status, 200, "{}", &text[..text.len().min(300)]);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    }
    let reqs = modelled(&server);
    let ttft = |r: &Value| r["first_token_s"].as_f64().unwrap() - r["arrived_s"].as_f64().unwrap();
    assert_eq!(reqs[0]["cached_tokens"], 0);
    assert_eq!(reqs[1]["cached_tokens"], 150_000);
    // cold: 150k tokens in 19 chunks of 8192, ~16 s modelled; warm: one step, ~0.4 s
    assert!(
        ttft(&reqs[1]) < ttft(&reqs[0]) / 20.0,
        "{} s vs {} s",
        ttft(&reqs[1]),
        ttft(&reqs[0])
    );
    // the default profile (128k) refuses the same history, as vLLM would
    let default = start(json!({"time_scale": 0.0}));
    let body = json!({"prompt": history, "max_tokens": 4});
    let (status, text) = http(&default, "POST", "/v1/completions", &body.to_string());
    assert_eq!(status, 400);
    assert!(text.contains("maximum context length"), "{text}");
}

#[test]
fn a_replay_header_gets_the_recorded_calls_in_streams_and_whole_answers() {
    use replay_sim::tools::CALL_OVERHEAD_TOKENS;

    let server = start(json!({"profile": "instant"}));
    let tools = json!([
        {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
        {"type": "function", "function": {"name": "grep", "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}, "n": {"type": "integer"}}, "required": ["pattern"]}}},
    ]);
    // a replay's request: ignore_eos and a max_tokens below the calls' tokens
    let mut body = chat("find the bug", 20);
    body["tools"] = tools.clone();
    let sizes = [60usize, 45, 50];
    // streamed, through our own client with the header per request
    let planned = [Some("60,45,50"), Some(""), None]
        .into_iter()
        .map(|h| PlannedRequest {
            path: "/v1/chat/completions".into(),
            body: Bytes::from(body.to_string()),
            headers: h
                .map(|v| vec![("x-replay-tool-calls".to_string(), v.to_string())])
                .unwrap_or_default(),
            ..PlannedRequest::default()
        })
        .collect();
    let config = RunConfig {
        base_url: server.url(),
        ..RunConfig::default()
    };
    let recs = run(&config, planned, Arc::new(RunControl::default())).unwrap();
    assert_eq!(recs.status, [200, 200, 200], "{:?}", recs.error_detail);
    // a recorded text answer and no header: 20 tokens of text (the calls: below)
    assert_eq!(recs.completion_tokens[1..], [20, 20]);
    // whole: the calls themselves, each with arguments of its recorded size
    body["stream"] = json!(false);
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    let text = body.to_string();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nx-replay-tool-calls: 60,45,50\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let answer: Value = serde_json::from_str(out.split_once("\r\n\r\n").unwrap().1).unwrap();
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{answer}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    let v = tiny_vocab();
    let got: Vec<usize> = calls
        .iter()
        .map(|c| v.encode(c["function"]["arguments"].as_str().unwrap()).len())
        .collect();
    // each of its recorded size (this test vocabulary merges a few words: within one token)
    assert_eq!(got.len(), sizes.len());
    assert!(
        got.iter().zip(sizes).all(|(g, s)| g.abs_diff(s) <= 1),
        "{got:?}"
    );
    // the calls whole, past max_tokens, streamed as whole
    let want = got.iter().sum::<usize>() + sizes.len() * CALL_OVERHEAD_TOKENS;
    assert_eq!(answer["usage"]["completion_tokens"], want);
    assert_eq!(recs.completion_tokens[0], want as i64);
    // a bad header is a 400 that names it
    let (status, err) = {
        let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        write!(
            s,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-replay-tool-calls: many\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        (out[9..12].to_string(), out)
    };
    assert_eq!(status, "400");
    assert!(err.contains("x-replay-tool-calls"), "{err}");
}

#[test]
fn a_replay_header_with_an_exact_length_gets_text_then_the_calls_of_that_length() {
    use replay_sim::tools::CALL_OVERHEAD_TOKENS;

    let server = start(json!({"profile": "instant"}));
    let tools = json!([
        {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    ]);
    // a replay's request: ignore_eos and a max_tokens the calls fit in
    let mut body = chat("find the bug", 300);
    body["tools"] = tools;
    let planned = [Some("40,25"), Some("400"), None]
        .into_iter()
        .map(|h| PlannedRequest {
            path: "/v1/chat/completions".into(),
            body: Bytes::from(body.to_string()),
            headers: h
                .map(|v| vec![("x-replay-tool-calls".to_string(), v.to_string())])
                .unwrap_or_default(),
            ..PlannedRequest::default()
        })
        .collect();
    let config = RunConfig {
        base_url: server.url(),
        ..RunConfig::default()
    };
    let recs = run(&config, planned, Arc::new(RunControl::default())).unwrap();
    assert_eq!(recs.status, [200, 200, 200], "{:?}", recs.error_detail);
    // the calls fit: exactly max_tokens; they do not: the calls whole, past it
    assert_eq!(recs.completion_tokens[0], 300);
    assert!(
        recs.completion_tokens[1] > 400,
        "{:?}",
        recs.completion_tokens
    );
    assert_eq!(recs.completion_tokens[2], 300);
    // whole, chat: the content string, then the calls
    let whole = |path: &str, body: &Value| {
        let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        let text = body.to_string();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nx-replay-tool-calls: 40,25\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        serde_json::from_str::<Value>(out.split_once("\r\n\r\n").unwrap().1).unwrap()
    };
    body["stream"] = json!(false);
    let answer = whole("/v1/chat/completions", &body);
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{answer}");
    assert_eq!(answer["usage"]["completion_tokens"], 300);
    let v = tiny_vocab();
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    let args: usize = calls
        .iter()
        .map(|c| v.encode(c["function"]["arguments"].as_str().unwrap()).len())
        .sum();
    let content = choice["message"]["content"].as_str().unwrap();
    assert_eq!(calls.len(), 2);
    // the text is what the calls leave (its retokenized length within a few tokens)
    let text = 300 - args - 2 * CALL_OVERHEAD_TOKENS;
    assert!(
        v.encode(content).len().abs_diff(text) <= 3,
        "{text}: {content}"
    );
    // Responses: the message item, then the function calls
    let responses = json!({"model": "sim", "input": "find the bug", "max_output_tokens": 300,
                           "ignore_eos": true, "tools": [{"type": "function", "name": "read"}]});
    let answer = whole("/v1/responses", &responses);
    let kinds: Vec<&str> = answer["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["message", "function_call", "function_call"],
        "{answer}"
    );
    assert!(!answer["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .is_empty());
    assert_eq!(answer["usage"]["output_tokens"], 300);
}
