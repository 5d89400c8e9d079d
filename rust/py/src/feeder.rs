//! The body feeder: windows of request bodies read from a Python callable on a thread of its
//! own, ahead of the runner's dispatcher, so that a due request never waits for Python.
//!
//! How far ahead is counted in schedule time: the feeder reads windows until those waiting cover
//! [`LOOKAHEAD_NS`] of sends past the window the dispatcher is sending (at least
//! [`MIN_WINDOWS_AHEAD`] windows, at most [`MAX_BYTES_AHEAD`] bytes of bodies), so a fast stage
//! has as much slack against a stall of the feeder (the GIL held elsewhere, the CPU taken by the
//! server beside it) as a slow one. A closed-loop stage, whose send times are not known in
//! advance, keeps [`MIN_WINDOWS_AHEAD`] windows.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use replay_core::{RunControl, SendBody};

use crate::errors;
use crate::split_bodies;

/// Schedule time the waiting windows cover past the one being sent (open loop).
pub const LOOKAHEAD_NS: i64 = 1_000_000_000;
/// Windows kept waiting whatever their schedule time.
pub const MIN_WINDOWS_AHEAD: usize = 2;
/// Bytes of waiting bodies past which the feeder reads no further (the memory bound).
pub const MAX_BYTES_AHEAD: usize = 256 << 20;
/// How often a feeder with enough read ahead looks at its stop flag.
const IDLE_CHECK: Duration = Duration::from_millis(50);

/// What the feeder has read that the dispatcher has not taken yet.
#[derive(Default)]
struct Waiting {
    windows: AtomicUsize,
    bytes: AtomicUsize,
    /// bodies in the windows the dispatcher has taken (the first one it has not is this index)
    taken: AtomicUsize,
}

impl Waiting {
    /// More is wanted after `read` bodies: fewer than the minimum of windows wait, or (in bytes
    /// under the bound) they cover less than `lookahead_ns` of `offsets` past the taken ones.
    fn wants_more(&self, read: usize, offsets: &[i64], lookahead_ns: i64) -> bool {
        if self.windows.load(Ordering::Acquire) < MIN_WINDOWS_AHEAD {
            return true;
        }
        if self.bytes.load(Ordering::Acquire) >= MAX_BYTES_AHEAD || lookahead_ns <= 0 {
            return false;
        }
        let taken = self.taken.load(Ordering::Acquire);
        match (
            offsets.get(taken),
            read.checked_sub(1).and_then(|i| offsets.get(i)),
        ) {
            (Some(&first), Some(&last)) => last.saturating_sub(first) < lookahead_ns,
            _ => true, // every window taken: the next call ends the source
        }
    }
}

/// The feeder thread, stopped and joined by the run when it ends.
pub struct Feeder {
    pub handle: std::thread::JoinHandle<()>,
    pub stop: Arc<AtomicBool>,
    pub error: Arc<Mutex<Option<PyErr>>>,
}

/// The dispatcher's side: the bodies in order, window by window, each window counted as taken
/// when its first body is asked for.
pub struct Bodies {
    windows: mpsc::Receiver<(Vec<SendBody>, usize)>,
    current: std::vec::IntoIter<SendBody>,
    waiting: Arc<Waiting>,
    taken_tx: mpsc::Sender<()>,
}

impl Iterator for Bodies {
    type Item = SendBody;

    fn next(&mut self) -> Option<SendBody> {
        loop {
            if let Some(body) = self.current.next() {
                return Some(body);
            }
            let (window, bytes) = self.windows.recv().ok()?;
            self.waiting.windows.fetch_sub(1, Ordering::AcqRel);
            self.waiting.bytes.fetch_sub(bytes, Ordering::AcqRel);
            self.waiting.taken.fetch_add(window.len(), Ordering::AcqRel);
            let _ = self.taken_tx.send(()); // wakes a feeder that had read enough
            self.current = window.into_iter();
        }
    }
}

/// Start reading windows `(bytes, offsets)` or `(bytes, offsets, spans, span offsets)` from
/// `source` (None at the end) for requests due at `offsets_ns`, `lookahead_ns` of them ahead of
/// the dispatcher (0: [`MIN_WINDOWS_AHEAD`] windows only). The GIL is taken only while `source`
/// runs; an error there is kept for the run to raise and cancels it.
pub fn start_feeder(
    source: Py<PyAny>,
    control: Arc<RunControl>,
    offsets_ns: Vec<i64>,
    lookahead_ns: i64,
) -> PyResult<(Feeder, Bodies)> {
    let (tx, rx) = mpsc::channel::<(Vec<SendBody>, usize)>();
    let (taken_tx, taken_rx) = mpsc::channel::<()>();
    let waiting = Arc::new(Waiting::default());
    let stop = Arc::new(AtomicBool::new(false));
    let error: Arc<Mutex<Option<PyErr>>> = Arc::new(Mutex::new(None));
    let (stop2, error2, waiting2) = (stop.clone(), error.clone(), waiting.clone());
    let handle = std::thread::Builder::new()
        .name("replay-bodies".into())
        .spawn(move || {
            let mut read = 0usize;
            loop {
                while !waiting2.wants_more(read, &offsets_ns, lookahead_ns) {
                    if stop2.load(Ordering::SeqCst) {
                        return;
                    }
                    match taken_rx.recv_timeout(IDLE_CHECK) {
                        Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => return, // the run is over
                    }
                }
                let window = Python::attach(|py| -> PyResult<Option<Vec<SendBody>>> {
                    if stop2.load(Ordering::SeqCst) {
                        return Ok(None);
                    }
                    let next = source.bind(py).call0()?;
                    if next.is_none() {
                        return Ok(None);
                    }
                    let data = next.get_item(0)?;
                    let data = data.cast::<PyBytes>()?;
                    let offsets: PyReadonlyArray1<'_, u64> = next.get_item(1)?.extract()?;
                    let spans: Option<(PyReadonlyArray1<'_, i64>, PyReadonlyArray1<'_, u64>)> =
                        match next.len()? {
                            4 => Some((next.get_item(2)?.extract()?, next.get_item(3)?.extract()?)),
                            _ => None,
                        };
                    let spans = match &spans {
                        Some((s, so)) => Some((s.as_slice()?, so.as_slice()?)),
                        None => None,
                    };
                    split_bodies(data, offsets.as_slice()?, spans).map(Some)
                });
                match window {
                    Ok(Some(w)) => {
                        let bytes = w.iter().map(|b| b.bytes.len()).sum();
                        read += w.len();
                        waiting2.windows.fetch_add(1, Ordering::AcqRel);
                        waiting2.bytes.fetch_add(bytes, Ordering::AcqRel);
                        if tx.send((w, bytes)).is_err() {
                            return; // the run is over
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        *error2.lock().expect("feeder error") = Some(e);
                        control.cancel.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            }
        })
        .map_err(|e| errors::runner(format!("cannot start the body feeder thread: {e}")))?;
    Ok((
        Feeder {
            handle,
            stop,
            error,
        },
        Bodies {
            windows: rx,
            current: Vec::new().into_iter(),
            waiting,
            taken_tx,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(windows: usize, bytes: usize, taken: usize) -> Waiting {
        let w = Waiting::default();
        w.windows.store(windows, Ordering::SeqCst);
        w.bytes.store(bytes, Ordering::SeqCst);
        w.taken.store(taken, Ordering::SeqCst);
        w
    }

    #[test]
    fn reads_until_the_waiting_windows_cover_the_lookahead() {
        // 1,000 req/s: a request every ms; windows of 100 (0.1 s each)
        let offsets: Vec<i64> = (0..10_000).map(|i| i * 1_000_000).collect();
        // two windows wait (0.2 s): more, since a second is wanted
        assert!(waiting(2, 1000, 100).wants_more(300, &offsets, LOOKAHEAD_NS));
        // ten windows past the taken ones end 0.999 s on: one more
        assert!(waiting(10, 1000, 100).wants_more(1100, &offsets, LOOKAHEAD_NS));
        // eleven: they cover a second, enough
        assert!(!waiting(11, 1000, 100).wants_more(1200, &offsets, LOOKAHEAD_NS));
    }

    #[test]
    fn the_minimum_of_windows_and_the_byte_bound_win_over_schedule_time() {
        // everything due at once: no schedule time passes, so past the minimum only the byte
        // bound stops the reading...
        let at_once = vec![0i64; 10_000];
        assert!(waiting(1, 0, 0).wants_more(100, &at_once, LOOKAHEAD_NS));
        assert!(!waiting(5, MAX_BYTES_AHEAD, 100).wants_more(600, &at_once, LOOKAHEAD_NS));
        // ...and a closed loop (no lookahead) keeps just the minimum
        assert!(!waiting(2, 10, 0).wants_more(200, &at_once, 0));
        assert!(waiting(1, 10, 0).wants_more(200, &at_once, 0));
    }

    #[test]
    fn the_end_of_the_source_is_always_read() {
        let offsets: Vec<i64> = (0..200).map(|i| i * 1_000).collect();
        assert!(waiting(3, 10, 200).wants_more(200, &offsets, LOOKAHEAD_NS));
    }
}
