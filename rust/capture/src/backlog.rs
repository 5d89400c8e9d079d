//! The backlog: finished exchanges on their way to the recorder, and the record of one request
//! while it runs ([`Recording`]).
//!
//! The queue is bounded in exchanges and in bytes and never waited on: an exchange that finds it
//! full is dropped and counted, and so are the later requests of its session (by the session
//! header), so that what is recorded holds whole sessions.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::exchange::{Exchange, Outcome};

/// Why an exchange was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    Full,
    Backlog,
    Shed,
}

/// Sessions shed remembered at most; past that the memory starts afresh (a session shed before
/// may then be recorded from a later turn on).
const SHED_MAX: usize = 100_000;

/// The proxy's counters and the queue of finished exchanges, shared by its connections.
pub(crate) struct Shared {
    pub(crate) requests: AtomicU64,
    pub(crate) unrecorded: AtomicU64,
    pub(crate) outcomes: [AtomicU64; 4],
    pub(crate) queued: AtomicU64,
    /// Exchanges dropped: the queue full, the byte bound, a session shed.
    pub(crate) dropped: [AtomicU64; 3],
    finished: Finished,
}

impl Shared {
    pub(crate) fn new(capacity: usize, max_bytes: usize) -> Shared {
        Shared {
            requests: AtomicU64::new(0),
            unrecorded: AtomicU64::new(0),
            outcomes: Default::default(),
            queued: AtomicU64::new(0),
            dropped: Default::default(),
            finished: Finished {
                queue: Mutex::new(Backlog::default()),
                arrived: Condvar::new(),
                capacity,
                max_bytes,
            },
        }
    }

    /// Wait up to `timeout` until a finished exchange is there to take; false if none came.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        self.finished.wait(timeout)
    }

    /// Up to `max` of the finished exchanges waiting, oldest first, without waiting.
    pub(crate) fn take(&self, max: usize) -> Vec<Exchange> {
        self.finished.take(max)
    }
}

/// The bounded queue of finished exchanges: pushed without waiting (full: dropped and counted,
/// with the rest of the exchange's session), taken by the recorder's side.
struct Finished {
    queue: Mutex<Backlog>,
    arrived: Condvar,
    capacity: usize,
    max_bytes: usize,
}

#[derive(Default)]
struct Backlog {
    exchanges: VecDeque<(Exchange, usize)>,
    bytes: usize,
    shed: HashSet<String>,
}

/// What an exchange holds in memory, about.
fn size_of(ex: &Exchange) -> usize {
    const PER_CHUNK: usize = 32;
    let chunks: usize = ex.chunks.iter().map(|(_, d)| d.len() + PER_CHUNK).sum();
    256 + ex.body.len() + chunks + ex.session.as_ref().map_or(0, String::len)
}

impl Finished {
    fn push(&self, ex: Exchange) -> Result<(), Refused> {
        let size = size_of(&ex);
        let mut q = self.queue.lock().expect("queue");
        let refused = if ex.session.as_ref().is_some_and(|s| q.shed.contains(s)) {
            Some(Refused::Shed)
        } else if q.exchanges.len() >= self.capacity {
            Some(Refused::Full)
        } else if q.bytes + size > self.max_bytes && !q.exchanges.is_empty() {
            Some(Refused::Backlog)
        } else {
            None
        };
        if let Some(why) = refused {
            if let Some(session) = ex.session {
                if q.shed.len() >= SHED_MAX {
                    q.shed.clear();
                }
                q.shed.insert(session);
            }
            return Err(why);
        }
        q.bytes += size;
        q.exchanges.push_back((ex, size));
        drop(q);
        self.arrived.notify_one();
        Ok(())
    }

    fn wait(&self, timeout: Duration) -> bool {
        let q = self.queue.lock().expect("queue");
        let (q, _) = self
            .arrived
            .wait_timeout_while(q, timeout, |q| q.exchanges.is_empty())
            .expect("queue");
        !q.exchanges.is_empty()
    }

    fn take(&self, max: usize) -> Vec<Exchange> {
        let mut q = self.queue.lock().expect("queue");
        let n = q.exchanges.len().min(max);
        let taken: Vec<(Exchange, usize)> = q.exchanges.drain(..n).collect();
        q.bytes -= taken.iter().map(|(_, size)| size).sum::<usize>();
        taken.into_iter().map(|(ex, _)| ex).collect()
    }
}

/// One request's record on its way: finished once (an outcome given, or found when dropped),
/// then put on the queue if the request is a recorded one.
pub(crate) struct Recording {
    ex: Option<Exchange>,
    start: std::time::Instant,
    shared: Arc<Shared>,
    /// The outcome unless the client goes away first (`upstream_error` for a 5xx answer).
    outcome: Outcome,
    /// The client has the whole answer (every byte, or the `[DONE]` event).
    pub(crate) delivered: bool,
    finished: bool,
}

impl Recording {
    pub(crate) fn new(
        ex: Option<Exchange>,
        start: std::time::Instant,
        shared: Arc<Shared>,
    ) -> Recording {
        Recording {
            ex,
            start,
            shared,
            outcome: Outcome::Completed,
            delivered: false,
            finished: false,
        }
    }

    fn elapsed_us(&self) -> i64 {
        self.start.elapsed().as_micros() as i64
    }

    /// The upstream's headers came: its status (a 5xx makes the outcome `upstream_error`), the
    /// time to them, the body's encoding.
    pub(crate) fn answered(&mut self, status: http::StatusCode, content_encoding: Option<String>) {
        let t = self.elapsed_us();
        if let Some(ex) = self.ex.as_mut() {
            ex.status = Some(status.as_u16());
            ex.ttfb_us = Some(t);
            ex.content_encoding = content_encoding;
        }
        if status.is_server_error() {
            self.outcome = Outcome::UpstreamError;
        }
    }

    pub(crate) fn chunk(&mut self, data: Bytes) {
        let t = self.elapsed_us();
        if let Some(ex) = self.ex.as_mut() {
            ex.chunks.push((t, data));
        }
    }

    pub(crate) fn finish(&mut self, outcome: Outcome) {
        self.outcome = outcome;
        self.finish_as_is();
    }

    pub(crate) fn finish_as_is(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let end_us = self.elapsed_us();
        if let Some(mut ex) = self.ex.take() {
            ex.end_us = end_us;
            ex.outcome = self.outcome;
            self.shared.outcomes[self.outcome.index()].fetch_add(1, Ordering::Relaxed);
            let counter = match self.shared.finished.push(ex) {
                Ok(()) => &self.shared.queued,
                Err(Refused::Full) => &self.shared.dropped[0],
                Err(Refused::Backlog) => &self.shared.dropped[1],
                Err(Refused::Shed) => &self.shared.dropped[2],
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Recording {
    /// Dropped unfinished: the client went away (hyper drops the request's future or its body).
    fn drop(&mut self) {
        if !self.finished {
            if !self.delivered {
                self.outcome = Outcome::ClientDisconnected;
            }
            self.finish_as_is();
        }
    }
}
