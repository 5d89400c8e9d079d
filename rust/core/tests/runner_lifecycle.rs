//! A run's life around its requests: the warm-up before t0, the drain after the last send and
//! the cut-off at its end, causal sessions, and the runner's own thread statistics.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use replay_core::{run, ErrorKind, Gate, RunConfig, RunControl};

#[test]
fn warm_connections_are_opened_before_t0_and_carry_the_first_requests() {
    let server = common::start();
    // Four requests at t0, each held 2 s: four connections in flight at once.
    let reqs: Vec<_> = (0..4)
        .map(|i| common::planned("/slow?chunks=1", i, 0))
        .collect();
    let cfg = RunConfig {
        warm_connections: 4,
        ..common::config(server.url())
    };
    let r = run(&cfg, reqs, Arc::new(RunControl::default())).unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0), "{:?}", r.error_detail);
    assert_eq!((r.stats.warm_wanted, r.stats.warm_opened), (4, 4));
    assert_eq!(r.stats.warm_detail, "");
    assert!(r.stats.warmup_ns > 0);
    // No connection was opened after the warm-up: the requests went out on the warm ones.
    assert_eq!(server.accepted.load(Ordering::SeqCst), 4);
    let arrivals = server.arrivals.lock().unwrap();
    let probes = arrivals.iter().filter(|a| a.path == "/v1/models").count();
    assert_eq!(
        probes, 4,
        "each warm connection answered one GET /v1/models"
    );
    let first_post = arrivals
        .iter()
        .position(|a| a.path != "/v1/models")
        .unwrap();
    assert_eq!(first_post, 4, "every probe came before the first request");
    // A request written by the dispatcher on a warm connection had its connection at once.
    assert!(
        r.conn_ns.iter().all(|&c| (0..1_000_000_000).contains(&c)),
        "{:?}",
        r.conn_ns
    );
}

#[test]
fn warm_connections_are_kept_open_across_a_quiet_spell() {
    // The second request is due 4.5 s after the first: longer than the pool keeps an idle
    // connection (4 s). The warm-keeper replaces the warm connection while it idles, so the
    // request finds one open instead of connecting on its own path.
    let server = common::start();
    let reqs = vec![
        common::planned("/sse?chunks=1", 0, 0),
        common::planned("/sse?chunks=1", 1, 4_500_000_000),
    ];
    let cfg = RunConfig {
        warm_connections: 1,
        ..common::config(server.url())
    };
    let r = run(&cfg, reqs, Arc::new(RunControl::default())).unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0), "{:?}", r.error_detail);
    let arrivals = server.arrivals.lock().unwrap();
    let second = arrivals
        .iter()
        .find(|a| a.path != "/v1/models" && common::index_of(&a.body) == 1)
        .unwrap();
    let accepted_at = server.accepted_at.lock().unwrap();
    assert!(
        accepted_at.len() >= 2,
        "the expiring connection was replaced"
    );
    // Every connection was open well before the request came: the replacement was opened about
    // 3 s into the run (1.5 s before the request); a connect on the request's own path would be
    // accepted just before it arrives.
    assert!(
        accepted_at
            .iter()
            .all(|&t| t + Duration::from_millis(500) < second.at),
        "a connection was opened for the request itself"
    );
}

#[test]
fn warm_up_stops_where_the_server_stops_answering_and_the_drain_cuts_off() {
    let addr = common::start_silent();
    let reqs: Vec<_> = (0..3)
        .map(|i| common::planned("/v1/chat/completions", i, i as i64 * 10_000_000))
        .collect();
    let cfg = RunConfig {
        warm_connections: 8,
        drain_ns: 300_000_000,
        ..common::config(format!("http://{addr}"))
    };
    let started = Instant::now();
    let control = Arc::new(RunControl::default());
    let r = run(&cfg, reqs, control.clone()).unwrap();
    let took = started.elapsed();
    assert_eq!(r.stats.warm_opened, 0);
    assert!(
        r.stats.warm_detail.contains("no answer within 500 ms"),
        "{}",
        r.stats.warm_detail
    );
    assert!(r.cut_off && !r.cancelled);
    for i in 0..3 {
        assert_eq!(ErrorKind::from_u8(r.error_kind[i]), Some(ErrorKind::CutOff));
        assert_eq!(r.error_detail[i], "still open when the drain ended");
        assert!(
            r.sent_ns[i] >= 0,
            "they were sent, the server just never answered"
        );
        assert!(
            r.end_ns[i] >= 320_000_000,
            "cut off at the end of the drain: {}",
            r.end_ns[i]
        );
    }
    assert_eq!(control.errors.load(Ordering::Relaxed), 3);
    // 0.5 s warm-up probe + 20 ms of sends + 0.3 s drain, not the 10 s request timeout.
    assert!(took < Duration::from_secs(5), "run took {took:?}");
}

#[test]
fn causal_turns_wait_for_the_previous_turn_while_other_requests_keep_their_schedule() {
    let server = common::start();
    // Session A: turn 0 is held 2 s by the server; turn 1 is scheduled at 50 ms but follows
    // turn 0 after a 100 ms think time. Request 2 is another session's first turn at 100 ms.
    let mut reqs = vec![
        common::planned("/slow?chunks=2", 0, 0),
        common::planned("/sse?chunks=2", 1, 50_000_000),
        common::planned("/sse?chunks=2", 2, 100_000_000),
    ];
    reqs[1].after = Some(Gate::after(0, 100_000_000));
    let before = Instant::now();
    let r = run(
        &common::config(server.url()),
        reqs,
        Arc::new(RunControl::default()),
    )
    .unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0), "{:?}", r.error_detail);
    assert_eq!(
        r.release_ns[1],
        r.end_ns[0] + 100_000_000,
        "due at the end of turn 0 + think"
    );
    assert!(r.sent_ns[1] >= r.release_ns[1]);
    assert_eq!(
        r.release_ns[2], r.intended_ns[2],
        "an open request is due at its own time"
    );
    assert!(
        r.sent_ns[2] < r.end_ns[0],
        "request 2 did not wait for session A"
    );
    let arrivals = server.arrivals.lock().unwrap();
    let order: Vec<usize> = arrivals
        .iter()
        .filter(|a| a.path != "/v1/models")
        .map(|a| common::index_of(&a.body))
        .collect();
    assert_eq!(order, vec![0, 2, 1], "the server saw turn 1 last");
    let turn1 = arrivals.iter().find(|a| a.body == "{\"i\":1}").unwrap();
    assert!(
        (turn1.at - before).as_nanos() as i64 >= 2_000_000_000,
        "turn 1 after turn 0's 2 s"
    );
}

#[test]
fn the_runner_counts_its_threads_context_switches() {
    if replay_core::threads::current_thread().is_none() {
        return; // counts are Linux-only
    }
    let server = common::start();
    let reqs: Vec<_> = (0..20)
        .map(|i| common::planned("/sse?chunks=3", i, i as i64 * 5_000_000))
        .collect();
    let r = run(
        &common::config(server.url()),
        reqs,
        Arc::new(RunControl::default()),
    )
    .unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0));
    // The dispatcher sleeps between sends and the worker waits for responses: both switch.
    assert!(r.stats.dispatcher.voluntary > 0, "{:?}", r.stats);
    assert!(r.stats.workers.voluntary > 0, "{:?}", r.stats);
}

#[test]
fn bodies_are_taken_from_the_source_only_as_requests_come_due() {
    use replay_core::{run_streamed, Schedule};
    use std::sync::Mutex;

    let server = common::start();
    let n = 5;
    let schedule = Schedule {
        paths: vec!["/sse?chunks=1".into()],
        path_index: vec![0; n],
        offsets_ns: (0..n as i64).map(|i| i * 60_000_000).collect(),
        after: Vec::new(),
        joins: Vec::new(),
        head_lines: Default::default(),
        route: Default::default(),
    };
    let t0_guess = Instant::now();
    let pulls = Arc::new(Mutex::new(Vec::new()));
    let p2 = pulls.clone();
    // Three bodies for five requests: the source ends early.
    let source = (0..3).map(move |i| {
        p2.lock()
            .unwrap()
            .push(t0_guess.elapsed().as_nanos() as i64);
        Bytes::from(format!("{{\"i\":{i}}}"))
    });
    let r = run_streamed(
        &common::config(server.url()),
        schedule,
        source,
        Arc::new(RunControl::default()),
        None,
    )
    .unwrap();
    let pulls = pulls.lock().unwrap();
    assert_eq!(pulls.len(), 3);
    // Body k is taken right after request k-1 went out, not all up front.
    for k in 1..3 {
        assert!(
            pulls[k] >= (k as i64 - 1) * 60_000_000,
            "body {k} taken at {} ns",
            pulls[k]
        );
    }
    assert!(
        r.error_kind[..3].iter().all(|&k| k == 0),
        "{:?}",
        r.error_detail
    );
    for i in 3..5 {
        assert_eq!(ErrorKind::from_u8(r.error_kind[i]), Some(ErrorKind::Other));
        assert_eq!(
            r.error_detail[i],
            "not sent: the request source ended early"
        );
        assert_eq!(r.sent_ns[i], -1);
    }
}

#[test]
fn records_are_handed_to_the_sink_in_request_order_as_the_run_goes() {
    use replay_core::{run_streamed, Records, Schedule, HAND_OVER_EVERY};

    let server = common::start();
    // 16 requests over 1.5 s, three of them slow (held 2 s): rows behind a slow one wait for it.
    let n = 16;
    let slow = [2usize, 9, 10];
    let paths = vec!["/sse?chunks=3".to_string(), "/slow?chunks=1".to_string()];
    let schedule = Schedule {
        path_index: (0..n).map(|i| u8::from(slow.contains(&i))).collect(),
        paths,
        offsets_ns: (0..n as i64).map(|i| i * 100_000_000).collect(),
        after: Vec::new(),
        joins: Vec::new(),
        head_lines: Default::default(),
        route: Default::default(),
    };
    let bodies = (0..n).map(|i| Bytes::from(format!("{{\"i\":{i}}}")));
    let t0_guess = Instant::now();
    let mut batches: Vec<(Duration, Records)> = Vec::new();
    let mut sink = |b: Records| batches.push((t0_guess.elapsed(), b));
    let rest = run_streamed(
        &common::config(server.url()),
        schedule,
        bodies,
        Arc::new(RunControl::default()),
        Some(&mut sink),
    )
    .unwrap();
    let ended = t0_guess.elapsed();
    assert!(
        batches.len() >= 2,
        "{} batches for a run of {ended:?}",
        batches.len()
    );
    // The first batch (requests 0 and 1, before the first slow one) came long before the end.
    assert_eq!((batches[0].1.first, batches[0].1.len()), (0, 2));
    assert!(
        batches[0].0 + HAND_OVER_EVERY < ended,
        "{:?} vs {ended:?}",
        batches[0].0
    );
    let mut all = Records::default();
    for (_, b) in batches {
        assert_eq!(b.chunk_offsets.len(), b.len() + 1);
        all.append(b);
    }
    all.append(rest);
    assert_eq!(all.len(), n);
    assert!(
        all.error_kind.iter().all(|&k| k == 0),
        "{:?}",
        all.error_detail
    );
    assert_eq!(
        all.intended_ns,
        (0..n as i64).map(|i| i * 100_000_000).collect::<Vec<_>>()
    );
    for i in 0..n {
        let chunks = all.chunk_offsets[i + 1] - all.chunk_offsets[i];
        let want = if slow.contains(&i) { 1 } else { 3 };
        assert_eq!((i, chunks), (i, want));
    }
}

#[test]
fn an_idle_connection_the_server_closed_is_not_reused() {
    use replay_core::conn::Dialer;

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dialer = Dialer {
        addrs: vec![addr],
        timeout: None,
        tls: None,
    };
    let mut conn = rt.block_on(dialer.dial()).unwrap();
    let (server_side, _) = listener.accept().unwrap();
    // Asked from a plain thread, as the dispatcher asks, with no runtime polling the socket.
    assert!(conn.looks_alive(), "an open idle connection");
    drop(server_side);
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !conn.looks_alive(),
        "the server closed it: its FIN is seen without the runtime"
    );
}
