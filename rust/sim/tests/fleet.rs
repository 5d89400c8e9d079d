//! The embedded engine as a fleet (`--replicas N --router POLICY`) over real sockets: which
//! replica serves each request under each routing policy, the prefix cache that routing fills,
//! and /metrics with every replica's series beside the fleet's totals.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use replay_sim::fixture::tiny_vocab;
use replay_sim::fleet::REPLICA_HEADER;
use replay_sim::{serve_with, EngineConfig, ServerHandle};
use serde_json::{json, Value};

fn start(json: Value) -> ServerHandle {
    let config = EngineConfig::from_json(&json.to_string()).unwrap();
    serve_with(config.resolve().unwrap(), Arc::new(tiny_vocab())).unwrap()
}

/// One request, sent whole (Connection: close) with extra header lines: (status, headers, body).
fn http(
    server: &ServerHandle,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// A completion of `prompt` (10 tokens out) with an optional session: (replica, cached tokens).
fn complete(server: &ServerHandle, prompt: &str, session: Option<&str>) -> (usize, u64) {
    let header = session.map_or(String::new(), |s| format!("x-session-id: {s}\r\n"));
    let body = json!({"prompt": prompt, "max_tokens": 10, "ignore_eos": true}).to_string();
    let (status, head, text) = http(server, "POST", "/v1/completions", &header, &body);
    assert_eq!(status, 200, "{text}");
    let replica = head
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{REPLICA_HEADER}: ")))
        .unwrap_or_else(|| panic!("no {REPLICA_HEADER} in {head}"))
        .trim()
        .parse()
        .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    (replica, cached)
}

/// A long shared "system prompt" then a session's own turns.
fn history(session: usize, turns: usize) -> String {
    let mut p = "you are a careful agent that reads the file and answers the question. ".repeat(6);
    for t in 0..turns {
        p += &format!("session {session} turn {t}: what is in the file at line {t}? ");
    }
    p
}

fn fleet(router: &str, replicas: u32) -> ServerHandle {
    start(json!({"profile": "instant", "block_size": 16, "replicas": replicas, "router": router}))
}

#[test]
fn one_engine_has_no_router_and_names_no_replica() {
    let server = start(json!({"profile": "instant"}));
    let body = json!({"prompt": "the cat", "max_tokens": 3}).to_string();
    let (status, head, _) = http(
        &server,
        "POST",
        "/v1/completions",
        "x-session-id: a\r\n",
        &body,
    );
    assert_eq!(status, 200);
    assert!(!head.contains(REPLICA_HEADER), "{head}");
    assert!(!server.metrics_text().contains("replica="));
}

#[test]
fn round_robin_spreads_requests_evenly() {
    let server = fleet("round-robin", 4);
    let mut count = [0; 4];
    for i in 0..12 {
        // one session throughout: round robin ignores it
        count[complete(&server, &history(i, 1), Some("same")).0] += 1;
    }
    assert_eq!(count, [3, 3, 3, 3]);
}

#[test]
fn session_routing_keeps_each_session_on_one_replica() {
    let server = fleet("session", 4);
    let mut seen: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut cached_later = 0;
    for turn in 1..=4 {
        for s in 0..6 {
            let (replica, cached) =
                complete(&server, &history(s, turn), Some(&format!("sess-{s}")));
            seen.entry(s).or_default().push(replica);
            if turn > 1 {
                cached_later += (cached > 0) as usize;
            }
        }
    }
    for (s, replicas) in &seen {
        assert!(
            replicas.iter().all(|r| *r == replicas[0]),
            "session {s} moved: {replicas:?}"
        );
    }
    // the 6 sessions do not all share one replica, and every later turn hit its history
    let distinct: std::collections::HashSet<usize> = seen.values().map(|r| r[0]).collect();
    assert!(distinct.len() > 1, "{seen:?}");
    assert_eq!(cached_later, 18);
}

#[test]
fn prefix_routing_sends_a_prompt_to_the_replica_holding_its_prefix() {
    let server = fleet("prefix", 4);
    // no session header: only the prompts' blocks guide the router
    let first: Vec<usize> = (0..4)
        .map(|s| complete(&server, &history(s, 1), None).0)
        .collect();
    for s in 0..4 {
        let (replica, cached) = complete(&server, &history(s, 3), None);
        assert_eq!(replica, first[s], "session {s}: {first:?}");
        // its first turn's prompt (the shared preamble and turn 0) is in that replica's cache
        assert!(cached >= 16 * 8, "session {s}: {cached} cached tokens");
    }
    // round robin, by contrast, sends the same follow-ups where the history is not
    let rr = fleet("round-robin", 4);
    let first: Vec<usize> = (0..5)
        .map(|s| complete(&rr, &history(s, 1), None).0)
        .collect();
    for s in 0..4 {
        let (replica, _) = complete(&rr, &history(s, 3), None);
        assert_ne!(replica, first[s], "session {s}: {first:?}");
    }
}

/// The value of the sample `name{labels}` in a Prometheus text.
fn sample(text: &str, name: &str, labels: &str) -> f64 {
    let key = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .unwrap_or_else(|| panic!("no {key} in\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn metrics_show_each_replica_and_the_fleet_totals() {
    let server = fleet("round-robin", 3);
    for i in 0..5 {
        complete(&server, &history(i, 2), None);
    }
    let (status, _, text) = http(&server, "GET", "/metrics", "", "");
    assert_eq!(status, 200);
    let base = "engine=\"0\",model_name=\"sim\"";
    let total = sample(&text, "vllm:prompt_tokens_total", base);
    let per: Vec<f64> = (0..3)
        .map(|r| {
            sample(
                &text,
                "vllm:prompt_tokens_total",
                &format!("{base},replica=\"{r}\""),
            )
        })
        .collect();
    assert!(per.iter().all(|&p| p > 0.0), "{per:?}");
    assert_eq!(total, per.iter().sum::<f64>());
    let done = |labels: &str| {
        sample(
            &text,
            "vllm:request_success_total",
            &format!("engine=\"0\",finished_reason=\"length\",model_name=\"sim\"{labels}"),
        )
    };
    assert_eq!(done(""), 5.0);
    assert_eq!(
        (
            done(",replica=\"0\""),
            done(",replica=\"1\""),
            done(",replica=\"2\"")
        ),
        (2.0, 2.0, 1.0)
    );
    let ttft = |labels: &str| {
        sample(
            &text,
            "vllm:time_to_first_token_seconds_count",
            &format!("{base}{labels}"),
        )
    };
    assert_eq!(ttft(""), 5.0);
    assert_eq!(ttft(",replica=\"2\""), 1.0);
    // each family is declared once, its totals and replicas together
    assert_eq!(
        text.matches("# TYPE vllm:prompt_tokens_total counter")
            .count(),
        1
    );
    // the modelled requests name their replica
    let (_, _, body) = http(&server, "GET", "/sim/requests", "", "");
    let v: Value = serde_json::from_str(&body).unwrap();
    let replicas: Vec<u64> = v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["replica"].as_u64().unwrap())
        .collect();
    assert_eq!(replicas.len(), 5);
    assert_eq!(replicas.iter().filter(|&&r| r == 0).count(), 2);
}

#[test]
fn a_bad_router_names_the_flag() {
    let e = EngineConfig::from_json(r#"{"replicas":2,"router":"random"}"#)
        .unwrap()
        .resolve()
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--router:"), "{e}");
}
