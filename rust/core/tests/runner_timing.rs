//! Open-loop timing against the in-test server: send lag on a quiet server, and requests still
//! leaving on schedule while every response is held back for 2 s.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use replay_core::{run, ErrorKind, RunControl};

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Server-side arrival offsets (ns after `before`) indexed by request index.
fn arrival_offsets(server: &common::TestServer, before: Instant, n: usize) -> Vec<i64> {
    let mut out = vec![-1i64; n];
    for a in server.arrivals.lock().unwrap().iter() {
        out[common::index_of(&a.body)] = (a.at - before).as_nanos() as i64;
    }
    out
}

#[test]
fn send_lag_is_small_on_a_quiet_server() {
    let server = common::start();
    let n = 200;
    let reqs: Vec<_> = (0..n)
        .map(|i| common::planned("/v1/chat/completions?chunks=5", i, i as i64 * 5_000_000))
        .collect();
    let before = Instant::now();
    let r = run(
        &common::config(server.url()),
        reqs,
        Arc::new(RunControl::default()),
    )
    .unwrap();
    assert!(r.error_kind.iter().all(|&k| k == ErrorKind::None as u8));
    let mut lag: Vec<i64> = (0..n).map(|i| r.sent_ns[i] - r.intended_ns[i]).collect();
    assert!(lag.iter().all(|&l| l >= 0), "sent before due");
    lag.sort();
    let (p50, p99, max) = (percentile(&lag, 0.5), percentile(&lag, 0.99), lag[n - 1]);
    eprintln!("send lag over {n} requests at 200 req/s: p50 {p50} ns, p99 {p99} ns, max {max} ns");
    // Server-side: never before the intended time.
    let arrived = arrival_offsets(&server, before, n);
    for (i, &at) in arrived.iter().enumerate() {
        assert!(
            at >= r.intended_ns[i],
            "request {i} arrived before it was due"
        );
    }
    // The p99 bound is only asserted on request (REPLAY_STRICT_TIMING=1): on a shared VM a bare
    // OS thread sleeping to absolute deadlines is itself descheduled for 5-25 ms now and then,
    // so a p99 bound would test the host, not the runner. The median is robust to that.
    assert!(
        p50 < 5_000_000,
        "send lag p50 {p50} ns (p99 {p99}, max {max})"
    );
    if std::env::var_os("REPLAY_STRICT_TIMING").is_some() {
        assert!(
            p99 < 5_000_000,
            "send lag p99 {p99} ns (p50 {p50}, max {max})"
        );
    }
}

#[test]
fn requests_leave_on_schedule_while_responses_stall() {
    let server = common::start();
    // 20 requests over ~1 s; the server holds every response for 2 s, so all are in flight at
    // once. An open-loop sender must not wait for earlier responses.
    let n = 20;
    let reqs: Vec<_> = (0..n)
        .map(|i| common::planned("/slow", i, i as i64 * 50_000_000))
        .collect();
    let before = Instant::now();
    let r = run(
        &common::config(server.url()),
        reqs,
        Arc::new(RunControl::default()),
    )
    .unwrap();
    let total = before.elapsed();
    let arrived = arrival_offsets(&server, before, n);
    let mut worst_ns = 0;
    for (i, &at) in arrived.iter().enumerate() {
        assert_eq!(r.error_kind[i], 0, "{}", r.error_detail[i]);
        let late = at - r.intended_ns[i];
        assert!(late >= 0, "request {i} arrived early");
        worst_ns = worst_ns.max(late);
        assert!(
            r.first_byte_ns[i] - r.sent_ns[i] >= 1_900_000_000,
            "server held it 2 s"
        );
    }
    eprintln!("stalled server: worst arrival lateness {worst_ns} ns, run took {total:?}");
    // Serialization behind the stalled responses would make this ~2 s; allow host jitter.
    assert!(
        worst_ns < 250_000_000,
        "arrivals fell behind the schedule by {worst_ns} ns"
    );
    assert!(
        total < Duration::from_millis(4500),
        "responses overlapped, total {total:?}"
    );
}
