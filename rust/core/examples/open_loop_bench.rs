//! Drive a server open-loop at a constant rate and print send-lag percentiles and outcomes.
//!
//! `cargo run --release -p replay-core --example open_loop_bench -- URL RATE N [WORKERS]`
//! e.g. against `sse-bench-server --port 8000`: `... -- http://127.0.0.1:8000 5000 50000 1`.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use replay_core::{
    arrival_offsets, run, Arrivals, ErrorKind, PlannedRequest, RunConfig, RunControl,
};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 3 {
        eprintln!("usage: open_loop_bench URL RATE N [WORKERS]");
        std::process::exit(2);
    }
    let rate: f64 = a[1].parse().expect("RATE is a number");
    let n: usize = a[2].parse().expect("N is an integer");
    let workers: usize = a
        .get(3)
        .map(|w| w.parse().expect("WORKERS is an integer"))
        .unwrap_or(1);
    let offsets =
        arrival_offsets(&Arrivals::Constant, n, Some(rate), None, &[], 0).expect("schedule");
    let body = Bytes::from_static(
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#,
    );
    let reqs = offsets
        .iter()
        .map(|&o| PlannedRequest {
            path: "/v1/chat/completions".into(),
            body: body.clone(),
            offset_ns: o,
            after: None,
            joins: Vec::new(),
            headers: Vec::new(),
        })
        .collect();
    let config = RunConfig {
        base_url: a[0].clone(),
        worker_threads: workers,
        ..RunConfig::default()
    };
    let started = Instant::now();
    let r = run(&config, reqs, Arc::new(RunControl::default())).expect("run");
    let wall_s = started.elapsed().as_secs_f64();
    let mut lag: Vec<i64> = (0..n)
        .filter(|&i| r.sent_ns[i] >= 0)
        .map(|i| r.sent_ns[i] - r.intended_ns[i])
        .collect();
    lag.sort_unstable();
    let pct = |p: f64| lag[((lag.len() - 1) as f64 * p).round() as usize] as f64 / 1e3;
    let mut ttfb: Vec<i64> = (0..n)
        .filter(|&i| r.first_byte_ns[i] >= 0)
        .map(|i| r.first_byte_ns[i] - r.sent_ns[i])
        .collect();
    ttfb.sort_unstable();
    println!("requests {n} at {rate} req/s, {workers} worker(s), wall {wall_s:.2} s");
    println!(
        "send lag us: p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(0.999),
        pct(1.0)
    );
    if !ttfb.is_empty() {
        println!(
            "ttfb us: p50 {:.1} p99 {:.1}",
            ttfb[ttfb.len() / 2] as f64 / 1e3,
            ttfb[(ttfb.len() - 1) * 99 / 100] as f64 / 1e3
        );
    }
    println!("chunks recorded {}", r.chunk_us.len());
    for k in ErrorKind::ALL {
        let c = r.error_kind.iter().filter(|&&e| e == k as u8).count();
        if c > 0 {
            let example = r
                .error_kind
                .iter()
                .position(|&e| e == k as u8)
                .map(|i| r.error_detail[i].as_str())
                .unwrap_or("");
            println!("{:>16}: {c} {example}", k.name());
        }
    }
}
