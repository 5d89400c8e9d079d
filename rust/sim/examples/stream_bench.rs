//! How many concurrent streams and streamed chunks per second the engine sustains on one core.
//!
//! `cargo run --release -p replay-sim --example stream_bench -- [STREAMS] [TOKENS] [TOKENIZER]`
//! starts the engine in-process (current-thread runtime, "instant" profile so the cost model
//! adds no time), sends STREAMS chat streams at once with our own client (replay-core, one
//! worker thread), and prints chunks/s and the server thread's CPU use.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use replay_core::{run, PlannedRequest, RunConfig, RunControl};
use replay_sim::fixture::tiny_vocab;
use replay_sim::{serve_with, EngineConfig, Vocab};

/// CPU seconds used by the thread named `name` in this process (Linux), if found.
fn thread_cpu_s(name: &str) -> Option<f64> {
    let tick = 100.0; // USER_HZ
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = entry.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim() == name {
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let (utime, stime): (f64, f64) = (fields[11].parse().ok()?, fields[12].parse().ok()?);
            return Some((utime + stime) / tick);
        }
    }
    None
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let streams: usize = a.first().map_or(1000, |s| s.parse().expect("STREAMS"));
    let tokens: u32 = a.get(1).map_or(100, |s| s.parse().expect("TOKENS"));
    let vocab = match a.get(2) {
        Some(path) => Vocab::from_file(path).expect("tokenizer"),
        None => tiny_vocab(),
    };
    let config = EngineConfig {
        profile: "instant".into(),
        max_num_seqs: streams.max(1) as u32,
        max_num_batched_tokens: (streams as u32 * 64).max(8192),
        ..EngineConfig::default()
    };
    let server = serve_with(config.resolve().expect("config"), Arc::new(vocab)).expect("serve");
    let body = format!(
        r#"{{"model":"sim","messages":[{{"role":"user","content":"Tell me a story about the sea."}}],"max_tokens":{tokens},"ignore_eos":true,"stream":true,"stream_options":{{"include_usage":true}}}}"#
    );
    let reqs = (0..streams)
        .map(|_| PlannedRequest {
            path: "/v1/chat/completions".into(),
            body: Bytes::from(body.clone()),
            offset_ns: 0,
            after: None,
            joins: Vec::new(),
            headers: Vec::new(),
        })
        .collect();
    let cfg = RunConfig {
        base_url: server.url(),
        worker_threads: 1,
        ..RunConfig::default()
    };
    let cpu0 = thread_cpu_s("replay-sim").unwrap_or(0.0);
    let t0 = Instant::now();
    let r = run(&cfg, reqs, Arc::new(RunControl::default())).expect("run");
    let wall = t0.elapsed().as_secs_f64();
    let cpu = thread_cpu_s("replay-sim").unwrap_or(f64::NAN) - cpu0;
    let ok = r.error_kind.iter().filter(|&&k| k == 0).count();
    let chunks: i64 = r.output_chunks.iter().filter(|&&c| c > 0).sum();
    let first = r
        .first_token_ns
        .iter()
        .copied()
        .filter(|&t| t >= 0)
        .max()
        .unwrap_or(-1);
    println!("streams {streams} x {tokens} tokens: ok {ok}, chunks {chunks}, wall {wall:.2} s");
    println!(
        "chunks/s {:.0} | server thread CPU {cpu:.2} s ({:.0}% of one core) | all streams open after {:.0} ms",
        chunks as f64 / wall,
        100.0 * cpu / wall,
        first as f64 / 1e6
    );
}
