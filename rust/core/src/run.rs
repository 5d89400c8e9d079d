//! The public entry point of the runner: `RunConfig`, `PlannedRequest`, `RunControl` and `run`.
//!
//! `run` validates everything up front, starts a tokio multi-thread runtime, warms up (the
//! runtime's threads are up, keep-alive connections to the target are opened and each answers
//! one `GET /v1/models`), then takes t0 and lets the calling thread act as the dispatcher (see
//! `dispatch.rs`) while request tasks (see `exchange.rs`) run on the runtime. After the last
//! scheduled send it waits at most `drain_ns` for requests still open, cuts off the rest, and
//! gathers one record per request into `Records`.
//!
//! A fleet (`RunConfig::more_urls`): each replica has its own dialer, encoder and pool, gets its
//! share of the warm connections, and each request's replica is picked by the `route::Router` in
//! the dispatcher as it is sent, from the requests open per replica at that instant. One target
//! has no router and no counters: replica 0 always.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::answers::{Answers, SendBody};
use tokio::sync::{watch, Semaphore};

use crate::client::{build_headers, resolve, BaseUrl, Encoder, POOL_IDLE_TIMEOUT};
use crate::config::{RunConfig, RunControl};
use crate::conn::Dialer;
use crate::dispatch::{
    dispatch, Dispatched, Ends, Scheduled, CANCEL_POLL, FIFO_SPIN_WINDOW, SPIN_WINDOW,
};
use crate::error::CoreError;
use crate::exchange::launch;
use crate::plan::{validate, PlannedRequest, Schedule};
use crate::pool::Pool;
use crate::record::{ErrorKind, Recorder, Records, RequestRecord, RunStats};
use crate::route::Router;
use crate::shared::{Shared, Target, CANCELLED, CUT_OFF};
use crate::threads;
use crate::tls::Tls;
use crate::warmup::{keep_warm, warm_up};

/// After a stop (cancel or end of drain), how long to wait for in-flight tasks to hand in their
/// records.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A wait of the dispatcher for a request's body this long or longer is counted
/// (`RunStats::body_waits`).
const BODY_WAIT_COUNTED_NS: u64 = 1_000_000;

fn non_zero(ns: u64) -> Option<Duration> {
    (ns > 0).then(|| Duration::from_nanos(ns))
}

/// Raise the soft open-files limit to the hard limit (best effort; thousands of streams need
/// thousands of sockets).
pub fn raise_nofile_limit() -> Option<u64> {
    rlimit::increase_nofile_limit(u64::MAX).ok()
}

/// Sleep until the wall clock reads `target_ns` (ns since the Unix epoch), the last
/// millisecond spinning so that t0 lands within microseconds of it; a cancel ends the wait.
fn wait_until_unix(target_ns: u64, cancel: &AtomicBool) {
    loop {
        let left = target_ns as i64 - unix_now_ns();
        if left <= 0 || cancel.load(Ordering::Relaxed) {
            return;
        }
        if left > 2_000_000 {
            std::thread::sleep(Duration::from_nanos(
                (left as u64 - 1_000_000).min(50_000_000),
            ));
        } else {
            std::hint::spin_loop();
        }
    }
}

fn unix_now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Replay `requests` open-loop against `config.base_url` and return one record per request
/// (`run_streamed` with the bodies already in memory and every record kept to the end).
pub fn run(
    config: &RunConfig,
    requests: Vec<PlannedRequest>,
    control: Arc<RunControl>,
) -> Result<Records, CoreError> {
    let (schedule, bodies) = Schedule::of(requests)?;
    run_streamed(config, schedule, bodies, control, None)
}

/// Where a run hands its records over as it goes: called with consecutive batches, in request
/// order, on a thread of the run's own (so it should be quick: e.g. send them down a channel).
pub type Sink<'a> = &'a mut (dyn FnMut(Records) + Send);

/// How often finished records are handed to the sink.
pub const HAND_OVER_EVERY: Duration = Duration::from_millis(500);
/// How often the records thread drains what the request tasks handed in: it wakes this often
/// rather than once per record, to stay out of the dispatcher's way.
const COLLECT_POLL: Duration = Duration::from_millis(5);

/// The records thread: takes the request tasks' records into `recorder` until `collecting` is
/// cleared (or every sender is gone), reports how many are in after each drain, and hands the
/// ready rows to `sink` every `HAND_OVER_EVERY`.
fn collect(
    records: mpsc::Receiver<RequestRecord>,
    mut recorder: Recorder,
    mut sink: Option<Sink<'_>>,
    counts: mpsc::Sender<usize>,
    collecting: &AtomicBool,
) -> Recorder {
    let mut handed_over = Instant::now();
    loop {
        let last_round = !collecting.load(Ordering::Acquire);
        let mut gone = false;
        let before = recorder.received();
        loop {
            match records.try_recv() {
                Ok(rec) => {
                    recorder.insert(rec);
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    gone = true;
                    break;
                }
            }
        }
        if recorder.received() != before {
            let _ = counts.send(recorder.received());
        }
        if last_round || gone {
            return recorder;
        }
        if let Some(sink) = sink.as_mut() {
            if handed_over.elapsed() >= HAND_OVER_EVERY {
                handed_over = Instant::now();
                if let Some(batch) = recorder.take_ready() {
                    sink(batch);
                }
            }
        }
        std::thread::sleep(COLLECT_POLL);
    }
}

/// After the last send: wait until every dispatched request handed in its record, stopping the
/// request tasks when the run is cancelled or the drain ends (then at most `STOP_GRACE` more).
/// Returns (cancelled, cut off).
fn wait_for_records(
    dispatched: &Dispatched,
    counts: &mpsc::Receiver<usize>,
    control: &RunControl,
    stop_tx: &watch::Sender<u8>,
    drain_end: Option<Instant>,
) -> (bool, bool) {
    let mut stopped_at: Option<Instant> = None;
    let mut cancelled = dispatched.cancelled;
    let mut cut_off = dispatched.stopped;
    let stop = |value: u8, at: &mut Option<Instant>| {
        let _ = stop_tx.send(value);
        at.get_or_insert_with(Instant::now);
    };
    if cancelled {
        stop(CANCELLED, &mut stopped_at);
    } else if cut_off {
        stop(CUT_OFF, &mut stopped_at);
    }
    let mut received = 0;
    while received < dispatched.count {
        match counts.recv_timeout(CANCEL_POLL) {
            Ok(c) => received = counts.try_iter().last().unwrap_or(c),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if stopped_at.is_none() {
            if control.cancel.load(Ordering::Relaxed) {
                cancelled = true;
                stop(CANCELLED, &mut stopped_at);
            } else if drain_end.is_some_and(|d| Instant::now() >= d) {
                cut_off = true;
                stop(CUT_OFF, &mut stopped_at);
            }
        }
        if stopped_at.is_some_and(|t| t.elapsed() > STOP_GRACE) {
            break;
        }
    }
    (cancelled, cut_off)
}

/// Replay the `schedule` open-loop against `config.base_url`, taking each request's body from
/// `bodies` (in request order) only when it is due, so that a source that reads them a window
/// ahead keeps memory bounded. With a `sink`, finished records are handed to it in request order
/// as the run goes (see `Sink`), and the records returned are the rest (their `first` says where
/// they start); without one, every request's record is returned.
///
/// Blocks the calling thread (which becomes the dispatcher) until every request finished, the
/// drain ended (then `cut_off` is true), or `control.cancel` was set and in-flight requests were
/// aborted (then `cancelled` is true). Faults of single requests never stop the run; only
/// invalid configuration or a runtime that cannot start return `Err`.
/// If `bodies` ends before the schedule does, the requests left are not sent (`Other`, "not
/// sent: the request source ended early").
pub fn run_streamed<B: Into<SendBody>>(
    config: &RunConfig,
    schedule: Schedule,
    bodies: impl IntoIterator<Item = B>,
    control: Arc<RunControl>,
    sink: Option<Sink<'_>>,
) -> Result<Records, CoreError> {
    validate(config, &schedule)?;
    let headers = build_headers(&config.headers)?;
    // replica 0 is base_url; a fleet's others follow
    let mut bases = Vec::with_capacity(1 + config.more_urls.len());
    let mut targets = Vec::with_capacity(bases.capacity());
    for url in std::iter::once(&config.base_url).chain(&config.more_urls) {
        let base = BaseUrl::parse(url)?;
        let encoder = Encoder::new(&base, &headers, schedule.paths.iter().map(String::as_str))?;
        let dialer = Dialer {
            addrs: resolve(&base)?,
            timeout: non_zero(config.connect_timeout_ns),
            tls: match base.is_https() {
                true => Some(Tls::new(base.as_str(), base.host(), &config.tls)?),
                false => None,
            },
        };
        targets.push(Target {
            dialer,
            encoder,
            pool: Pool::new(POOL_IDLE_TIMEOUT, config.max_connections),
        });
        bases.push(base);
    }
    let replicas = targets.len();
    raise_nofile_limit();

    let workers = Arc::new(threads::Workers::default());
    let registry = workers.clone();
    let io_cpus = config.cpus.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads)
        .thread_name("replay-worker")
        .on_thread_start(move || {
            // validate() checked that the caller may use these CPUs
            let _ = threads::pin_current_thread(&io_cpus);
            registry.register_current()
        })
        .enable_all()
        .build()
        .map_err(|e| CoreError::Runtime {
            message: format!("cannot start tokio runtime: {e}"),
        })?;
    let n = schedule.len();
    let intended: Vec<i64> = schedule.offsets_ns.clone();
    let causal = schedule.after.iter().any(Option::is_some);
    let capped = config.max_in_flight > 0;
    let (records_tx, records_rx) = mpsc::channel();
    let (ends_tx, ends_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = watch::channel(0u8);
    let warm_start = Instant::now();
    // how many gated requests wait for each request (a request no other follows closes its
    // session: closed loop, its end frees its user)
    let mut followers = vec![0u32; if causal { n } else { 0 }];
    for g in schedule.after.iter().flatten() {
        followers[g.parent] += 1;
        for &j in &schedule.joins[g.joins.0..g.joins.1] {
            followers[j] += 1;
        }
    }
    let followed: Vec<bool> = followers.iter().map(|&k| k > 0).collect();
    let mut shared = Shared {
        targets,
        in_flight: match replicas {
            1 => Vec::new(),
            _ => (0..replicas).map(|_| AtomicU32::new(0)).collect(),
        },
        t0: warm_start,
        timeout: non_zero(config.timeout_ns),
        stall: non_zero(config.stall_timeout_ns),
        permits: Arc::new(Semaphore::new(
            config.max_connections.min(Semaphore::MAX_PERMITS),
        )),
        control: control.clone(),
        stop_rx,
        records_tx,
        ends_tx: (causal || capped).then_some(ends_tx),
        keep_chunks: config.keep_chunks,
        resent: AtomicU64::new(0),
        answers: (causal && config.resend_answers).then(|| Answers::new(followed.clone())),
    };
    let wanted = config.warm_connections.min(config.max_connections);
    // a fleet warms its share on each replica
    let wanted_each = wanted.div_ceil(replicas);
    let warmed = runtime.block_on(async {
        // Every worker runs a task once before t0.
        let tasks: Vec<_> = (0..config.worker_threads)
            .map(|_| tokio::spawn(tokio::task::yield_now()))
            .collect();
        for t in tasks {
            let _ = t.await;
        }
        let mut warmed = Vec::with_capacity(replicas);
        for (target, base) in shared.targets.iter().zip(&bases) {
            if target.dialer.tls.is_some() {
                // A certificate the run cannot trust fails it here, before t0, rather than every
                // request; a server that does not answer yet fails requests as over http.
                match target.dialer.dial().await {
                    Ok(conn) => target.pool.put(conn),
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                        return Err(CoreError::Url {
                            url: base.as_str().to_string(),
                            message: format!(
                                "{e} (--ca-cert FILE trusts a private CA, --insecure skips the check)"
                            ),
                        })
                    }
                    Err(_) => {}
                }
            }
            let want = wanted_each.min(wanted.saturating_sub(wanted_each * warmed.len()));
            warmed.push(warm_up(target, base, &headers, want).await);
        }
        Ok(warmed)
    })?;
    let warm_opened: usize = warmed.iter().map(|w| w.0).sum();
    let warm_detail = match replicas {
        1 => warmed[0].1.clone(),
        _ => warmed
            .iter()
            .zip(&bases)
            .filter(|(w, _)| !w.1.is_empty())
            .map(|(w, base)| format!("{}: {}", base.as_str(), w.1))
            .collect::<Vec<_>>()
            .join("; "),
    };
    // The first body is in hand before t0 (a source that reads ahead has its first window).
    let mut bodies = bodies.into_iter().map(Into::into).peekable();
    bodies.peek();
    let dispatcher = threads::current_thread();
    let dispatcher_before = threads::switches(&dispatcher);
    let priority = threads::raise_priority();

    if config.start_at_unix_ns > 0 {
        wait_until_unix(config.start_at_unix_ns, &control.cancel);
    }
    let t0 = Instant::now();
    let start_unix_ns = unix_now_ns();
    shared.t0 = t0;
    let shared = Arc::new(shared);
    let handle = runtime.handle().clone();
    let slots = config.max_connections.min(Semaphore::MAX_PERMITS);
    for (replica, &(opened, _)) in warmed.iter().enumerate() {
        if opened > 0 {
            runtime.spawn(keep_warm(shared.clone(), replica, opened, slots));
        }
    }
    // a fleet: each request's replica is picked as it is sent, from the open requests then
    let mut router = (replicas > 1).then(|| Router::new(config.route, replicas));
    let mut loads = vec![0u32; if replicas > 1 { replicas } else { 0 }];
    let last_offset = intended.last().copied().unwrap_or(0);
    // closed loop: the last send is not known in advance, so the drain starts when it is made
    let stop_at_ns = (config.drain_ns > 0 && !capped)
        .then(|| last_offset.saturating_add(config.drain_ns as i64));
    // How long the dispatcher waited for a body that was not there yet (a source reading ahead
    // that fell behind): each wait of 1 ms or more is counted.
    let (mut body_waits, mut body_wait_max_ns) = (0u64, 0u64);
    let timed_bodies = std::iter::from_fn(|| {
        let asked = Instant::now();
        let body = bodies.next();
        let waited = asked.elapsed().as_nanos() as u64;
        if waited >= BODY_WAIT_COUNTED_NS {
            body_waits += 1;
            body_wait_max_ns = body_wait_max_ns.max(waited);
        }
        body
    });
    let items = timed_bodies
        .enumerate()
        .take(n)
        .map(|(index, body)| Scheduled {
            index,
            offset_ns: schedule.offsets_ns[index],
            gate: schedule.after.get(index).copied().flatten(),
            closes: !followed.get(index).copied().unwrap_or(false),
            payload: (schedule.path_index[index], body),
        });
    let spin = if priority == "fifo" || priority == "slice" {
        FIFO_SPIN_WINDOW
    } else {
        SPIN_WINDOW
    };
    let drain_end = stop_at_ns.map(|s| t0 + Duration::from_nanos(s.max(0) as u64));
    let (counts_tx, counts_rx) = mpsc::channel();
    let collecting = AtomicBool::new(true);
    let (dispatched, dispatcher_switches, recorder, stopped) = std::thread::scope(|scope| {
        let collector = std::thread::Builder::new()
            .name("replay-records".into())
            .spawn_scoped(scope, || {
                collect(
                    records_rx,
                    Recorder::new(intended),
                    sink,
                    counts_tx,
                    &collecting,
                )
            })
            .expect("cannot start the records thread");
        let dispatched = dispatch(
            t0,
            spin,
            items,
            (causal || capped).then_some(Ends {
                rx: &ends_rx,
                gated: causal,
                cap: capped.then_some(config.max_in_flight),
                joins: &schedule.joins,
                followers: &followers,
            }),
            stop_at_ns,
            &control.cancel,
            |index, release_ns, (path, body)| {
                let bytes = match &shared.answers {
                    Some(answers) if !body.answers_at.is_empty() => {
                        // the earlier turns whose answers the body resends: parent first
                        let mut chain = Vec::with_capacity(body.answers_at.len());
                        let mut at = index;
                        while chain.len() < body.answers_at.len() {
                            match schedule.after.get(at).copied().flatten() {
                                Some(g) => {
                                    chain.push(g.parent);
                                    at = g.parent;
                                }
                                None => break,
                            }
                        }
                        answers.body_for(index, &chain, body)
                    }
                    _ => body.bytes,
                };
                let replica = match router.as_mut() {
                    None => 0,
                    Some(router) => {
                        for (load, open) in loads.iter_mut().zip(&shared.in_flight) {
                            *load = open.load(Ordering::Relaxed);
                        }
                        router.pick(
                            schedule.route.session(index),
                            schedule.route.blocks(index),
                            &loads,
                        )
                    }
                };
                launch(
                    &shared,
                    &handle,
                    index,
                    replica,
                    release_ns,
                    &schedule.paths[path as usize],
                    schedule.head_lines.get(index),
                    bytes,
                )
            },
        );
        threads::restore_priority(priority);
        let dispatcher_switches = threads::since(threads::switches(&dispatcher), dispatcher_before);
        let drain_end = drain_end.or_else(|| {
            (capped && config.drain_ns > 0)
                .then(|| Instant::now() + Duration::from_nanos(config.drain_ns))
        });
        let stopped = wait_for_records(&dispatched, &counts_rx, &control, &stop_tx, drain_end);
        collecting.store(false, Ordering::Release);
        let recorder = collector.join().expect("the records thread panicked");
        (dispatched, dispatcher_switches, recorder, stopped)
    });
    let (cancelled, cut_off) = stopped;
    let worker_switches = workers.total();
    let resent = shared.resent.load(Ordering::Relaxed);
    let (answers_resent, answers_recorded) = shared.answers.as_ref().map_or((0, 0), |a| {
        (
            a.resent.load(Ordering::Relaxed),
            a.recorded.load(Ordering::Relaxed),
        )
    });
    drop(shared);
    runtime.shutdown_timeout(Duration::from_millis(200));
    let missing = if cancelled {
        (ErrorKind::Cancelled, "not sent: run cancelled")
    } else if cut_off {
        (ErrorKind::CutOff, "not sent: the drain ended")
    } else if dispatched.count < n {
        (ErrorKind::Other, "not sent: the request source ended early")
    } else {
        (
            ErrorKind::Other,
            "no record for this request (internal error)",
        )
    };
    let mut records = recorder.finish(start_unix_ns, missing);
    records.cancelled = cancelled;
    records.cut_off = cut_off && !cancelled;
    records.stats = RunStats {
        warmup_ns: (t0 - warm_start).as_nanos() as i64,
        warm_wanted: wanted,
        warm_opened,
        warm_detail,
        dispatcher: dispatcher_switches,
        dispatcher_priority: priority,
        workers: worker_switches,
        resent,
        body_waits,
        body_wait_max_ns,
        answers_resent,
        answers_recorded,
    };
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::Gate;
    use bytes::Bytes;

    fn req(offset_ns: i64) -> PlannedRequest {
        PlannedRequest {
            path: "/v1/chat/completions".into(),
            body: Bytes::from_static(b"{}"),
            offset_ns,
            after: None,
            joins: Vec::new(),
            headers: Vec::new(),
        }
    }

    fn err_of(config: &RunConfig, requests: Vec<PlannedRequest>) -> CoreError {
        run(config, requests, Arc::new(RunControl::default())).unwrap_err()
    }

    #[test]
    fn rejects_bad_config() {
        let ok = RunConfig::default();
        let e = err_of(
            &RunConfig {
                base_url: "https://h:1".into(),
                ..ok.clone()
            },
            vec![req(0)],
        );
        assert!(
            matches!(e, CoreError::Url { ref url, .. } if url == "https://h:1"),
            "{e}"
        );
        let e = err_of(
            &RunConfig {
                worker_threads: 0,
                ..ok.clone()
            },
            vec![req(0)],
        );
        assert!(
            matches!(
                e,
                CoreError::Config {
                    field: "worker_threads",
                    ..
                }
            ),
            "{e}"
        );
        let e = err_of(
            &RunConfig {
                max_connections: 0,
                ..ok.clone()
            },
            vec![req(0)],
        );
        assert!(
            matches!(
                e,
                CoreError::Config {
                    field: "max_connections",
                    ..
                }
            ),
            "{e}"
        );
        let e = err_of(&ok, vec![req(5), req(4)]);
        assert!(
            matches!(
                e,
                CoreError::Config {
                    field: "offset_ns",
                    ..
                }
            ),
            "{e}"
        );
        let mut gated = vec![req(0), req(1)];
        gated[0].after = Some(Gate::after(1, 0));
        let e = err_of(&ok, gated);
        assert!(matches!(e, CoreError::Config { field: "after", .. }), "{e}");
        // a join must name earlier requests, each once
        let mut joined = vec![req(0), req(0), req(0)];
        joined[1].after = Some(Gate::after(0, 0));
        joined[1].joins = vec![2];
        let e = err_of(&ok, joined.clone());
        assert!(matches!(e, CoreError::Config { field: "joins", .. }), "{e}");
        joined[1].joins = vec![0];
        let e = err_of(&ok, joined);
        assert!(matches!(e, CoreError::Config { field: "joins", .. }), "{e}");
        // closed loop: a session is a chain, so no request is followed by two
        let mut forked = vec![req(0), req(0), req(0)];
        for r in &mut forked[1..] {
            r.after = Some(Gate::after(0, 0));
        }
        let closed = RunConfig {
            max_in_flight: 1,
            ..ok.clone()
        };
        let e = err_of(&closed, forked);
        assert!(
            matches!(e, CoreError::Config { field: "after", ref message } if message.contains("two requests")),
            "{e}"
        );
        let e = err_of(&ok, vec![req(-1)]);
        assert!(
            matches!(
                e,
                CoreError::Config {
                    field: "offset_ns",
                    ..
                }
            ),
            "{e}"
        );
        let e = err_of(
            &RunConfig {
                headers: vec![("a b".into(), "x".into())],
                ..ok
            },
            vec![req(0)],
        );
        assert!(
            matches!(
                e,
                CoreError::Config {
                    field: "headers",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn empty_run_returns_empty_records() {
        let r = run(
            &RunConfig::default(),
            Vec::new(),
            Arc::new(RunControl::default()),
        )
        .unwrap();
        assert!(r.is_empty() && !r.cancelled && r.start_unix_ns > 0);
    }

    #[test]
    fn t0_waits_for_the_start_instant() {
        let at = unix_now_ns() as u64 + 200_000_000;
        let config = RunConfig {
            start_at_unix_ns: at,
            ..RunConfig::default()
        };
        let r = run(&config, Vec::new(), Arc::new(RunControl::default())).unwrap();
        assert!(r.start_unix_ns as u64 >= at, "{} < {at}", r.start_unix_ns);
        assert!(
            r.start_unix_ns as u64 - at < 100_000_000,
            "t0 {} ns late",
            r.start_unix_ns as u64 - at
        );
    }
}
