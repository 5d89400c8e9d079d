//! Runner behaviour against the in-test server: complete streams, every fault kind, the
//! connection bound, and cancellation. (Timing-sensitive checks live in `runner_timing.rs`.)

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use replay_core::{run, ErrorKind, Records, RunConfig, RunControl};

fn config(url: String) -> RunConfig {
    RunConfig {
        base_url: url,
        headers: vec![("Authorization".into(), "Bearer test".into())],
        timeout_ns: 5_000_000_000,
        stall_timeout_ns: 2_000_000_000,
        connect_timeout_ns: 1_000_000_000,
        max_connections: 1000,
        worker_threads: 1,
        ..RunConfig::default()
    }
}

fn kind(r: &Records, i: usize) -> ErrorKind {
    ErrorKind::from_u8(r.error_kind[i]).unwrap()
}

#[test]
fn streams_complete_with_chunk_counts_and_usage() {
    let server = common::start();
    let n = 60;
    let reqs: Vec<_> = (0..n)
        .map(|i| {
            common::planned(
                &format!("/v1/chat/completions?chunks={}", i % 7),
                i,
                i as i64 * 3_000_000,
            )
        })
        .collect();
    let control = Arc::new(RunControl::default());
    let r = run(&config(server.url()), reqs, control.clone()).unwrap();
    assert_eq!(r.len(), n);
    assert!(!r.cancelled);
    let mut rows = 0;
    for i in 0..n {
        let chunks = (i % 7) as i64;
        assert_eq!(
            kind(&r, i),
            ErrorKind::None,
            "request {i}: {}",
            r.error_detail[i]
        );
        assert_eq!(r.status[i], 200);
        assert_eq!(r.output_chunks[i], chunks);
        assert_eq!(r.completion_tokens[i], chunks);
        assert_eq!(r.prompt_tokens[i], common::PROMPT_TOKENS);
        assert_eq!(r.cached_tokens[i], common::CACHED_TOKENS);
        assert!(r.sent_ns[i] >= r.intended_ns[i]);
        assert!(r.first_byte_ns[i] >= r.sent_ns[i]);
        assert!(r.end_ns[i] >= r.first_byte_ns[i]);
        if chunks > 0 {
            assert!(
                r.first_token_ns[i] >= r.first_byte_ns[i] && r.first_token_ns[i] <= r.end_ns[i]
            );
        } else {
            assert_eq!(r.first_token_ns[i], -1);
        }
        rows += chunks as usize;
    }
    assert_eq!(r.chunk_us.len(), rows);
    assert_eq!(r.chunk_offsets.len(), n + 1);
    for i in 0..n {
        let len = r.chunk_offsets[i + 1] - r.chunk_offsets[i];
        assert_eq!(len as i64, r.output_chunks[i], "request {i}'s chunk times");
    }
    assert_eq!(control.sent.load(Ordering::Relaxed), n as u64);
    assert_eq!(control.completed.load(Ordering::Relaxed), n as u64);
    assert_eq!(control.errors.load(Ordering::Relaxed), 0);
    let arrivals = server.arrivals.lock().unwrap();
    assert_eq!(arrivals.len(), n);
    assert!(arrivals.iter().all(|a| a.body.starts_with("{\"i\":")));
}

#[test]
fn chunk_times_are_stamped_on_arrival() {
    let server = common::start();
    let r = run(
        &config(server.url()),
        vec![common::planned("/spaced?chunks=5", 0, 0)],
        Arc::new(RunControl::default()),
    )
    .unwrap();
    assert_eq!(kind(&r, 0), ErrorKind::None, "{}", r.error_detail[0]);
    assert_eq!(r.chunk_us.len(), 5);
    assert_eq!(r.chunk_us[0], 0, "µs after the first token");
    for w in r.chunk_us.windows(2) {
        assert!(
            w[1] - w[0] >= 15_000,
            "chunks 20 ms apart, got {:?}",
            r.chunk_us
        );
    }
    let last = r.first_token_ns[0] + *r.chunk_us.last().unwrap() as i64 * 1000;
    assert!(last <= r.end_ns[0] && r.end_ns[0] - last < 10_000_000);
}

#[test]
fn non_stream_json_response() {
    let server = common::start();
    let r = run(
        &config(server.url()),
        vec![common::planned("/json", 0, 0)],
        Arc::new(RunControl::default()),
    )
    .unwrap();
    assert_eq!(kind(&r, 0), ErrorKind::None, "{}", r.error_detail[0]);
    assert_eq!(
        (
            r.output_chunks[0],
            r.completion_tokens[0],
            r.prompt_tokens[0],
            r.cached_tokens[0]
        ),
        (1, 7, 11, -1)
    );
    assert_eq!(r.first_token_ns[0], r.end_ns[0]);
}

#[test]
fn every_fault_is_recorded_and_the_run_goes_on() {
    let server = common::start();
    let cases = [
        (
            "/status500",
            ErrorKind::Http5xx,
            "HTTP 500: upstream exploded",
        ),
        ("/status404", ErrorKind::Http4xx, "HTTP 404"),
        ("/malformed", ErrorKind::MalformedSse, "malformed"),
        ("/close_early", ErrorKind::Reset, ""),
        ("/close_mid", ErrorKind::Reset, ""),
        ("/no_done", ErrorKind::Reset, "before [DONE]"),
        ("/stall_mid", ErrorKind::Stall, "no bytes for 300 ms"),
        ("/queued", ErrorKind::None, ""),
        ("/slow_headers", ErrorKind::Timeout, "1000 ms"),
        ("/error_event", ErrorKind::Other, "engine died"),
        ("/sse", ErrorKind::None, ""),
    ];
    let reqs: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| common::planned(c.0, i, i as i64 * 1_000_000))
        .collect();
    let cfg = RunConfig {
        timeout_ns: 1_000_000_000,
        stall_timeout_ns: 300_000_000,
        ..config(server.url())
    };
    let control = Arc::new(RunControl::default());
    let r = run(&cfg, reqs, control.clone()).unwrap();
    for (i, (path, want, detail)) in cases.iter().enumerate() {
        eprintln!(
            "{path:>14}: {:<14} {:?}",
            kind(&r, i).name(),
            r.error_detail[i]
        );
        assert_eq!(kind(&r, i), *want, "{path}: {}", r.error_detail[i]);
        assert!(
            r.error_detail[i].contains(detail),
            "{path}: {:?} lacks {detail:?}",
            r.error_detail[i]
        );
        assert!(r.error_detail[i].len() <= 200 * 4 && !r.error_detail[i].contains('\n'));
        assert!(r.sent_ns[i] >= 0 && r.end_ns[i] >= r.sent_ns[i], "{path}");
    }
    assert_eq!(r.status[0], 500);
    assert_eq!(r.status[1], 404);
    assert_eq!(r.output_chunks[4], 2, "chunks before the reset are kept");
    assert_eq!(r.output_chunks[6], 1, "chunks before the stall are kept");
    assert_eq!(
        r.output_chunks[7], 3,
        "waiting in the queue before the first token is no stall"
    );
    assert_eq!(r.status[8], 0, "no response before the deadline");
    assert_eq!(control.errors.load(Ordering::Relaxed), 9);
    assert_eq!(control.completed.load(Ordering::Relaxed), 11);
}

#[test]
fn a_request_on_a_connection_the_server_closed_unanswered_is_sent_again_on_a_new_one() {
    let server = common::start();
    let cfg = RunConfig {
        max_connections: 1,
        warm_connections: 1,
        ..config(server.url())
    };
    let reqs = vec![
        common::planned("/then_drop_next", 0, 0),
        common::planned("/v1/chat/completions", 1, 200_000_000),
        common::planned("/close_early", 2, 400_000_000),
    ];
    let r = run(&cfg, reqs, Arc::new(RunControl::default())).unwrap();
    // 1 went out on the kept connection, which the server closed on reading it: sent again on a
    // new connection, and answered there.
    assert_eq!(kind(&r, 0), ErrorKind::None, "{}", r.error_detail[0]);
    assert_eq!(kind(&r, 1), ErrorKind::None, "{}", r.error_detail[1]);
    assert_eq!(r.completion_tokens[1], 5);
    // Its send stamp is the first write, so the reconnect is in its time to first byte.
    assert!(r.sent_ns[1] < r.first_byte_ns[1]);
    // 2 went out on the connection 1 was answered on and was closed unanswered: sent again on a
    // new connection, closed unanswered there too: a reset, after two sends.
    assert_eq!(kind(&r, 2), ErrorKind::Reset, "{}", r.error_detail[2]);
    let arrivals = server.arrivals.lock().unwrap().clone();
    let count = |i| {
        arrivals
            .iter()
            .filter(|a| a.path != "/v1/models" && common::index_of(&a.body) == i)
            .count()
    };
    assert_eq!((count(0), count(1), count(2)), (1, 2, 2));
    assert_eq!(r.stats.resent, 2);
}

#[test]
fn a_request_on_a_new_connection_is_not_sent_again() {
    let server = common::start();
    let cfg = RunConfig {
        warm_connections: 0,
        ..config(server.url())
    };
    let r = run(
        &cfg,
        vec![common::planned("/close_early", 0, 0)],
        Arc::new(RunControl::default()),
    )
    .unwrap();
    assert_eq!(kind(&r, 0), ErrorKind::Reset);
    assert_eq!(server.arrivals.lock().unwrap().len(), 1);
    assert_eq!(r.stats.resent, 0);
}

#[test]
fn refused_connections() {
    let url = format!("http://{}", common::refused_addr());
    let reqs: Vec<_> = (0..5)
        .map(|i| common::planned("/v1/chat/completions", i, 0))
        .collect();
    let r = run(&config(url), reqs, Arc::new(RunControl::default())).unwrap();
    for i in 0..5 {
        assert_eq!(
            kind(&r, i),
            ErrorKind::ConnectRefused,
            "{}",
            r.error_detail[i]
        );
        assert_eq!(r.status[i], 0);
        // Never on the wire: no send stamp, but the time spent trying to connect is kept.
        assert_eq!(r.sent_ns[i], -1);
        assert!(r.conn_ns[i] >= 0 && r.end_ns[i] >= r.intended_ns[i] && r.first_byte_ns[i] == -1);
    }
}

#[test]
fn max_connections_makes_later_requests_wait() {
    let server = common::start();
    // Each response takes ~100 ms; with 2 slots the 6 simultaneous requests go in 3 waves.
    let reqs: Vec<_> = (0..6)
        .map(|i| common::planned("/spaced?chunks=5", i, 0))
        .collect();
    let cfg = RunConfig {
        max_connections: 2,
        ..config(server.url())
    };
    let r = run(&cfg, reqs, Arc::new(RunControl::default())).unwrap();
    let mut lags: Vec<i64> = (0..6).map(|i| r.sent_ns[i] - r.intended_ns[i]).collect();
    lags.sort();
    assert!(r.error_kind.iter().all(|&k| k == 0));
    assert!(
        lags[1] < 50_000_000 && lags[2] >= 80_000_000 && lags[4] >= 180_000_000,
        "lags {lags:?}"
    );
}

#[test]
fn cancel_mid_run_returns_partial_records() {
    let server = common::start();
    // 100 requests over 2 s, each answered after 2 s; cancel at 0.5 s.
    let n = 100;
    let reqs: Vec<_> = (0..n)
        .map(|i| common::planned("/slow", i, i as i64 * 20_000_000))
        .collect();
    let control = Arc::new(RunControl::default());
    let c2 = control.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        c2.cancel.store(true, Ordering::Relaxed);
        Instant::now()
    });
    let r = run(&config(server.url()), reqs, control.clone()).unwrap();
    let returned = Instant::now();
    let cancelled_at = canceller.join().unwrap();
    assert!(r.cancelled);
    assert_eq!(r.len(), n);
    let wait = returned - cancelled_at;
    assert!(
        wait < Duration::from_millis(500),
        "run returned {wait:?} after cancel"
    );
    assert!(r
        .error_kind
        .iter()
        .all(|&k| k == ErrorKind::Cancelled as u8));
    let sent = r.sent_ns.iter().filter(|&&s| s >= 0).count();
    assert!((15..=35).contains(&sent), "sent {sent}");
    assert_eq!(control.sent.load(Ordering::Relaxed), sent as u64);
    for i in 0..n {
        if r.sent_ns[i] >= 0 {
            assert_eq!(r.error_detail[i], "cancelled in flight");
            assert!(r.end_ns[i] >= 450_000_000);
        } else {
            assert_eq!(r.error_detail[i], "not sent: run cancelled");
            assert!(r.intended_ns[i] >= 400_000_000);
        }
    }
}
