//! The public entry point of the runner: `RunConfig`, `PlannedRequest`, `RunControl` and `run`.
//!
//! `run` validates everything up front, starts a tokio multi-thread runtime, takes t0, lets the
//! calling thread act as the dispatcher (see `dispatch.rs`) while request tasks (see
//! `exchange.rs`) run on the runtime, then gathers one record per request into `Records`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::{watch, Semaphore};

use crate::client::{build_client, build_headers, BaseUrl};
use crate::dispatch::{dispatch_all, CANCEL_POLL};
use crate::error::CoreError;
use crate::exchange::{request_task, Shared};
use crate::record::{Recorder, Records};

/// After cancelling, how long to wait for in-flight tasks to hand in their records.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// How to reach the server and how patient to be. A timeout of 0 means "no limit".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// e.g. "http://127.0.0.1:8000" (http only; a path prefix is allowed).
    pub base_url: String,
    /// Sent with every request (e.g. Authorization); replaces defaults of the same name.
    pub headers: Vec<(String, String)>,
    /// Whole-request deadline from the actual send → `ErrorKind::Timeout`.
    pub timeout_ns: u64,
    /// Longest gap between body reads once headers arrived → `ErrorKind::Stall`.
    pub stall_timeout_ns: u64,
    /// TCP connect deadline → `ErrorKind::Connect`.
    pub connect_timeout_ns: u64,
    /// Upper bound on requests in flight (hence open connections); later ones wait, and their
    /// send lag shows it.
    pub max_connections: usize,
    /// Tokio worker threads.
    pub worker_threads: usize,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            base_url: "http://127.0.0.1:8000".into(),
            headers: Vec::new(),
            timeout_ns: 600_000_000_000,
            stall_timeout_ns: 60_000_000_000,
            connect_timeout_ns: 10_000_000_000,
            max_connections: 20_000,
            worker_threads: 1,
        }
    }
}

/// One request of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRequest {
    /// e.g. "/v1/chat/completions".
    pub path: String,
    /// The JSON body, sent as is.
    pub body: Bytes,
    /// When it is due, ns after t0 (nondecreasing across the schedule).
    pub offset_ns: i64,
}

/// Shared between `run` and its caller: cancel it from any thread, read progress counters.
#[derive(Debug, Default)]
pub struct RunControl {
    /// Set to stop dispatching and abort in-flight requests.
    pub cancel: AtomicBool,
    /// Requests sent (stamped `sent_ns`).
    pub sent: AtomicU64,
    /// Sent requests that finished (ok or not).
    pub completed: AtomicU64,
    /// Finished requests that ended with an error (cancelled in flight included).
    pub errors: AtomicU64,
}

fn non_zero(ns: u64) -> Option<Duration> {
    (ns > 0).then(|| Duration::from_nanos(ns))
}

fn validate(config: &RunConfig, requests: &[PlannedRequest]) -> Result<(), CoreError> {
    if config.worker_threads == 0 {
        return Err(CoreError::config("worker_threads", "must be at least 1"));
    }
    if config.max_connections == 0 {
        return Err(CoreError::config("max_connections", "must be at least 1"));
    }
    if requests.len() > u32::MAX as usize {
        return Err(CoreError::config(
            "requests",
            format!("{} requests is more than 2^32-1", requests.len()),
        ));
    }
    let mut prev = 0i64;
    for (i, r) in requests.iter().enumerate() {
        if r.offset_ns < 0 {
            return Err(CoreError::config(
                "offset_ns",
                format!("request {i} has negative offset {} ns", r.offset_ns),
            ));
        }
        if r.offset_ns < prev {
            return Err(CoreError::config(
                "offset_ns",
                format!(
                    "not nondecreasing: request {i} at {} ns follows {prev} ns",
                    r.offset_ns
                ),
            ));
        }
        prev = r.offset_ns;
    }
    Ok(())
}

/// Raise the soft open-files limit to the hard limit (best effort; thousands of streams need
/// thousands of sockets).
pub fn raise_nofile_limit() -> Option<u64> {
    rlimit::increase_nofile_limit(u64::MAX).ok()
}

fn unix_now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Replay `requests` open-loop against `config.base_url` and return one record per request.
///
/// Blocks the calling thread (which becomes the dispatcher) until every request finished, or
/// until `control.cancel` was set and in-flight requests were aborted (then `cancelled` is true
/// and unsent or aborted requests are recorded as `Cancelled`). Faults of single requests never
/// stop the run; only invalid configuration or a runtime that cannot start return `Err`.
pub fn run(
    config: &RunConfig,
    requests: Vec<PlannedRequest>,
    control: Arc<RunControl>,
) -> Result<Records, CoreError> {
    validate(config, &requests)?;
    let base = BaseUrl::parse(&config.base_url)?;
    let uris = base.join_all(requests.iter().map(|r| r.path.as_str()))?;
    let headers = build_headers(&config.headers)?;
    raise_nofile_limit();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads)
        .thread_name("replay-worker")
        .enable_all()
        .build()
        .map_err(|e| CoreError::Runtime {
            message: format!("cannot start tokio runtime: {e}"),
        })?;
    let client = {
        let _guard = runtime.enter();
        build_client(non_zero(config.connect_timeout_ns), config.max_connections)
    };
    let n = requests.len();
    let intended: Vec<i64> = requests.iter().map(|r| r.offset_ns).collect();
    let (records_tx, records_rx) = mpsc::channel();
    let (cancel_tx, cancel_rx) = watch::channel(false);

    let t0 = Instant::now();
    let start_unix_ns = unix_now_ns();
    let shared = Arc::new(Shared {
        client,
        headers,
        t0,
        timeout: non_zero(config.timeout_ns),
        stall: non_zero(config.stall_timeout_ns),
        permits: Arc::new(Semaphore::new(
            config.max_connections.min(Semaphore::MAX_PERMITS),
        )),
        control: control.clone(),
        cancel_rx,
        records_tx,
    });

    let handle = runtime.handle().clone();
    let items = requests
        .into_iter()
        .zip(uris)
        .enumerate()
        .map(|(i, (r, uri))| (r.offset_ns, (i, uri, r.body)));
    let dispatched = dispatch_all(t0, items, &control.cancel, |(i, uri, body)| {
        handle.spawn(request_task(shared.clone(), i, uri, body));
    });

    let mut recorder = Recorder::new(n);
    let mut cancelled_at: Option<Instant> = None;
    if dispatched.cancelled {
        let _ = cancel_tx.send(true);
        cancelled_at = Some(Instant::now());
    }
    while recorder.received() < dispatched.count {
        match records_rx.recv_timeout(CANCEL_POLL) {
            Ok(rec) => {
                recorder.insert(rec);
                while let Ok(more) = records_rx.try_recv() {
                    recorder.insert(more);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if cancelled_at.is_none() && control.cancel.load(Ordering::Relaxed) {
            let _ = cancel_tx.send(true);
            cancelled_at = Some(Instant::now());
        }
        if cancelled_at.is_some_and(|t| t.elapsed() > CANCEL_GRACE) {
            break;
        }
    }
    drop(shared);
    runtime.shutdown_timeout(Duration::from_millis(200));
    Ok(recorder.finish(intended, start_unix_ns, cancelled_at.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(offset_ns: i64) -> PlannedRequest {
        PlannedRequest {
            path: "/v1/chat/completions".into(),
            body: Bytes::from_static(b"{}"),
            offset_ns,
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
}
