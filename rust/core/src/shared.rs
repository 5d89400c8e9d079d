//! What a run's request tasks share: each target's connection pool, dialer and encoder
//! (`Target`), the clock, the deadlines, the counters and channels back to the run (`Shared`),
//! and the run's stop signal (`RUNNING`, `CUT_OFF`, `CANCELLED`; `stopped`).

use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Semaphore};

use crate::answers::Answers;
use crate::client::Encoder;
use crate::config::RunControl;
use crate::conn::Dialer;
use crate::pool::Pool;
use crate::record::RequestRecord;

/// The run's stop signal, as seen by request tasks.
pub(crate) const RUNNING: u8 = 0;
pub(crate) const CUT_OFF: u8 = 1;
pub(crate) const CANCELLED: u8 = 2;

/// One target (a replica of a fleet, or the only one): how to reach it, what its requests'
/// heads look like, its idle connections.
pub(crate) struct Target {
    pub dialer: Dialer,
    pub encoder: Encoder,
    pub pool: Pool,
}

/// Everything request tasks share for the length of a run.
pub(crate) struct Shared {
    /// Replica r is `targets[r]` (one: no fleet).
    pub targets: Vec<Target>,
    /// A fleet's requests in flight per replica (empty with one target): counted up when a
    /// request is handed to its replica, down when its record is done.
    pub in_flight: Vec<AtomicU32>,
    pub t0: Instant,
    pub timeout: Option<Duration>,
    pub stall: Option<Duration>,
    /// One permit per request in flight (`max_connections`).
    pub permits: Arc<Semaphore>,
    pub control: Arc<RunControl>,
    pub stop_rx: watch::Receiver<u8>,
    pub records_tx: Sender<RequestRecord>,
    /// Causal runs: each request's (index, end ns) goes to the dispatcher.
    pub ends_tx: Option<Sender<(usize, i64)>>,
    pub keep_chunks: bool,
    /// Requests sent again on a new connection (`exchange_or_resend`).
    pub resent: AtomicU64,
    /// Causal runs that resend the engine's answers: what parents streamed (`answers`).
    pub answers: Option<Answers>,
}

impl Shared {
    pub(crate) fn now_ns(&self) -> i64 {
        self.t0.elapsed().as_nanos() as i64
    }
}

/// Resolves once the run's stop signal is raised, with its value.
pub(crate) async fn stopped(rx: &mut watch::Receiver<u8>) -> u8 {
    let value = rx.wait_for(|s| *s != RUNNING).await.map(|s| *s);
    match value {
        Ok(s) => s,
        Err(_) => std::future::pending::<u8>().await,
    }
}
