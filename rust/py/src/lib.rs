//! `replay._engine`: the thin PyO3 binding of `replay-core`.
//!
//! It holds no logic: it extracts Python values into core types, runs the core with the GIL
//! released, and hands results back as numpy columns (and one Arrow-style string buffer), never
//! as a Python object per request. Core errors map onto the classes of `replay.errors`.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};

mod bodies;
mod capture;
mod errors;
mod feeder;
mod options;
mod prompts;
mod sim;

use options::RunOptions;
use replay_core::{
    arrival_offsets as core_arrival_offsets, run_streamed as core_run_streamed,
    simulate_prefix_cache as core_simulate_prefix_cache, Arrivals, CoreError, ErrorKind, Gate,
    HeadLines, Records, RouteKeys, RunControl, Schedule, SendBody, Sink, Switches,
};

/// Arrival offsets in ns from the run start (see `replay_core::schedule`).
#[pyfunction]
#[pyo3(signature = (kind, n, trace_offsets_ns, rate=None, speedup=None, cv=None, seed=0))]
#[allow(clippy::too_many_arguments)]
fn arrival_offsets<'py>(
    py: Python<'py>,
    kind: &str,
    n: usize,
    trace_offsets_ns: PyReadonlyArray1<'py, i64>,
    rate: Option<f64>,
    speedup: Option<f64>,
    cv: Option<f64>,
    seed: u64,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let arrivals = match kind {
        "trace" => Arrivals::Trace,
        "poisson" => Arrivals::Poisson,
        "gamma" => Arrivals::Gamma {
            cv: cv.unwrap_or(1.0),
        },
        "constant" => Arrivals::Constant,
        other => {
            return Err(errors::from_core(CoreError::Config {
                field: "arrivals",
                message: format!(
                    "unknown arrival kind '{other}' (trace, poisson, gamma, constant)"
                ),
            }))
        }
    };
    let trace = trace_offsets_ns.as_slice()?;
    let offsets = core_arrival_offsets(&arrivals, n, rate, speedup, trace, seed)
        .map_err(errors::from_core)?;
    Ok(offsets.into_pyarray(py))
}

/// For each request, the leading blocks an LRU prefix cache of `capacity` blocks (0: unbounded)
/// held when it arrived; request i's chained block hashes are `hashes[offsets[i]..offsets[i+1]]`
/// (see `replay_core::prefix_cache`). With `times_s` (one per request), also each request's
/// reuse time (NaN without a hit): returns (hits, reuse_s).
#[pyfunction]
#[pyo3(signature = (hashes, offsets, capacity, times_s=None))]
fn prefix_cache_hits<'py>(
    py: Python<'py>,
    hashes: PyReadonlyArray1<'py, u64>,
    offsets: PyReadonlyArray1<'py, u64>,
    capacity: usize,
    times_s: Option<PyReadonlyArray1<'py, f64>>,
) -> PyResult<Bound<'py, PyAny>> {
    let (h, o) = (hashes.as_slice()?, offsets.as_slice()?);
    if o.first().is_some_and(|&f| f != 0)
        || o.windows(2).any(|w| w[0] > w[1])
        || o.last().is_some_and(|&l| l as usize != h.len())
    {
        return Err(errors::config(
            "offsets",
            "must start at 0, not decrease and end at len(hashes)",
        ));
    }
    let t = times_s.as_ref().map(|t| t.as_slice()).transpose()?;
    if t.is_some_and(|t| t.len() + 1 != o.len()) {
        return Err(errors::config("times_s", "must have one entry per request"));
    }
    let (hits, reuse) = py.detach(|| core_simulate_prefix_cache(h, o, capacity, t));
    if t.is_none() {
        return Ok(hits.into_pyarray(py).into_any());
    }
    Ok((hits.into_pyarray(py), reuse.into_pyarray(py))
        .into_pyobject(py)?
        .into_any())
}

/// One chained hash per full block of `block_size` ids (`replay.blocks.block_hashes`; see
/// `replay_core::blocks`), the GIL released while it hashes.
#[pyfunction]
fn block_hashes<'py>(
    py: Python<'py>,
    ids: PyReadonlyArray1<'py, u32>,
    block_size: usize,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    if block_size == 0 {
        return Err(errors::config("block_size", "must be positive, got 0"));
    }
    let ids = ids.as_slice()?;
    let hashes = py.detach(|| replay_core::blocks::block_hashes(ids, block_size));
    Ok(hashes.into_pyarray(py))
}

/// The hash of one block given its parent's (None: the first block): `replay.blocks.chain_hash`.
#[pyfunction]
#[pyo3(signature = (parent, block))]
fn chain_hash(parent: Option<u64>, block: PyReadonlyArray1<'_, u32>) -> PyResult<u64> {
    Ok(replay_core::blocks::chain_hash(parent, block.as_slice()?))
}

/// The error kind names, indexed by the codes in the `error_kind` column.
#[pyfunction]
fn error_kinds() -> Vec<&'static str> {
    ErrorKind::ALL.iter().map(|k| k.name()).collect()
}

fn switches_dict<'py>(py: Python<'py>, s: Switches) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("voluntary", s.voluntary)?;
    d.set_item("involuntary", s.involuntary)?;
    Ok(d)
}

/// The per-request columns of `r` (rows `first`..), as numpy arrays.
fn rows_to_dict<'py>(py: Python<'py>, r: Records) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("first", r.first)?;
    let mut detail_offsets: Vec<i64> = Vec::with_capacity(r.error_detail.len() + 1);
    let mut detail_bytes: Vec<u8> = Vec::new();
    detail_offsets.push(0);
    for s in &r.error_detail {
        detail_bytes.extend_from_slice(s.as_bytes());
        detail_offsets.push(detail_bytes.len() as i64);
    }
    d.set_item("intended_ns", r.intended_ns.into_pyarray(py))?;
    d.set_item("release_ns", r.release_ns.into_pyarray(py))?;
    d.set_item("conn_ns", r.conn_ns.into_pyarray(py))?;
    d.set_item("sent_ns", r.sent_ns.into_pyarray(py))?;
    d.set_item("first_byte_ns", r.first_byte_ns.into_pyarray(py))?;
    d.set_item("first_token_ns", r.first_token_ns.into_pyarray(py))?;
    d.set_item("end_ns", r.end_ns.into_pyarray(py))?;
    d.set_item("status", r.status.into_pyarray(py))?;
    d.set_item("error_kind", r.error_kind.into_pyarray(py))?;
    d.set_item("prompt_tokens", r.prompt_tokens.into_pyarray(py))?;
    d.set_item("completion_tokens", r.completion_tokens.into_pyarray(py))?;
    d.set_item("cached_tokens", r.cached_tokens.into_pyarray(py))?;
    d.set_item("output_chunks", r.output_chunks.into_pyarray(py))?;
    d.set_item("error_detail_offsets", detail_offsets.into_pyarray(py))?;
    d.set_item("error_detail_bytes", PyBytes::new(py, &detail_bytes))?;
    d.set_item("chunk_offsets", r.chunk_offsets.into_pyarray(py))?;
    d.set_item("chunk_us", r.chunk_us.into_pyarray(py))?;
    d.set_item("replica", r.replica.into_pyarray(py))?;
    Ok(d)
}

/// The rows of `r` and what the run as a whole did.
fn records_to_dict<'py>(py: Python<'py>, mut r: Records) -> PyResult<Bound<'py, PyDict>> {
    let run = std::mem::take(&mut r.stats);
    let (start_unix_ns, cancelled, cut_off) = (r.start_unix_ns, r.cancelled, r.cut_off);
    let d = rows_to_dict(py, r)?;
    d.set_item("start_unix_ns", start_unix_ns)?;
    d.set_item("cancelled", cancelled)?;
    d.set_item("cut_off", cut_off)?;
    let stats = PyDict::new(py);
    stats.set_item("warmup_ms", run.warmup_ns as f64 / 1e6)?;
    stats.set_item("warm_connections_wanted", run.warm_wanted)?;
    stats.set_item("warm_connections", run.warm_opened)?;
    stats.set_item("warm_detail", run.warm_detail)?;
    stats.set_item("dispatcher_switches", switches_dict(py, run.dispatcher)?)?;
    stats.set_item("dispatcher_priority", run.dispatcher_priority)?;
    stats.set_item("worker_switches", switches_dict(py, run.workers)?)?;
    stats.set_item("resent", run.resent)?;
    stats.set_item("body_waits", run.body_waits)?;
    stats.set_item("body_wait_max_ms", run.body_wait_max_ns as f64 / 1e6)?;
    stats.set_item("answers_resent", run.answers_resent)?;
    stats.set_item("answers_recorded", run.answers_recorded)?;
    d.set_item("runner", stats)?;
    Ok(d)
}

/// Bodies `data[offsets[i]..offsets[i+1]]` of one Python bytes object, which they share (not
/// copied: a window of 1,024 bodies of 13 KB copied was 13 MB of fresh memory to fault in), with
/// the spans of the earlier answers in body i as pairs `spans[span_offsets[i]..span_offsets[i+1]]`
/// (start, end, start, end, ...: oldest first), when given.
pub(crate) fn split_bodies(
    data: &Bound<'_, PyBytes>,
    offsets: &[u64],
    spans: Option<(&[i64], &[u64])>,
) -> PyResult<Vec<SendBody>> {
    let all = bytes::Bytes::from_owner(PyBackedBytes::from(data.clone()));
    let n = offsets.len().saturating_sub(1);
    if let Some((s, so)) = spans {
        if so.len() != n + 1
            || so.last().is_some_and(|&e| e as usize != s.len())
            || s.len() % 2 != 0
        {
            return Err(errors::config(
                "answer_spans",
                format!(
                    "{} span offsets and {} entries for {n} bodies (want n + 1 offsets ending at an even count)",
                    so.len(),
                    s.len()
                ),
            ));
        }
    }
    let mut out = Vec::with_capacity(n);
    for (i, w) in offsets.windows(2).enumerate() {
        let (a, b) = (w[0] as usize, w[1] as usize);
        if a > b || b > all.len() {
            return Err(errors::config(
                "body_offsets",
                format!("body {i}: offsets {a}..{b} outside {} bytes", all.len()),
            ));
        }
        let answers_at = match spans {
            None => Vec::new(),
            Some((s, so)) => {
                let (from, to) = (so[i] as usize, (so[i + 1] as usize).max(so[i] as usize));
                s[from..to.min(s.len())]
                    .chunks_exact(2)
                    .filter(|p| p[0] >= 0 && p[0] <= p[1] && (p[1] as usize) <= b - a)
                    .map(|p| (p[0] as u32, p[1] as u32))
                    .collect()
            }
        };
        out.push(SendBody {
            bytes: all.slice(a..b),
            answers_at,
        });
    }
    Ok(out)
}

/// Replay planned requests open-loop as `options` say (the target, its deadlines and caps:
/// [`RunOptions`]); blocks (GIL released) until done.
///
/// The schedule comes as columns: request i goes to `paths[path_index[i]]` and is due
/// `offsets_ns[i]` after the start. Bodies come either all at once (`bodies` bytes with
/// `body_offsets`, n + 1 entries: body i is `bodies[body_offsets[i]..body_offsets[i+1]]`) or as
/// a callable returning the next window `(bytes, offsets)` in the same form, or None at the end;
/// it is called on a thread of its own, about a second of sends ahead of them (at least two
/// windows, at most 256 MiB: `feeder`), so memory holds only those windows. Causal sessions and
/// DAGs: `after[i]` is the index of the request that request i follows (-1: none) and
/// `think_ns[i]` the think time after it; a join also waits for
/// `joins[join_offsets[i]..join_offsets[i + 1]]` (`join_offsets`: n + 1 entries).
/// Requests' own headers: `head_lines[head_offsets[i]..head_offsets[i + 1]]` are request i's
/// header lines (`name: value\r\n` each; `head_offsets`: n + 1 entries), sent after the run's.
/// A fleet's router reads `route_sessions[i]` (request i's root session hash, 0: none) and
/// `route_blocks[route_block_offsets[i]..route_block_offsets[i + 1]]` (its prompt block hashes);
/// each result row's `replica` says where it went (65535: never sent).
/// `progress(sent, completed, errors)` is called every `progress_interval_s` with the GIL held.
/// With `results`, finished requests are handed over as the run goes: `results(rows)` is called
/// with consecutive batches in request order (`rows["first"]` is the first one's index; the same
/// columns as the returned dict, whose rows are then the rest).
/// On Ctrl-C the run is cancelled, partial results are returned and `interrupted` is True.
/// An https target whose certificate cannot be trusted raises TargetError before t0.
#[pyfunction]
#[pyo3(signature = (
    options, paths, path_index, offsets_ns, bodies, *, body_offsets=None, after=None, think_ns=None,
    joins=None, join_offsets=None, head_lines=None, head_offsets=None, progress=None,
    progress_interval_s=0.2, results=None, route_sessions=None, route_blocks=None,
    route_block_offsets=None
))]
#[allow(clippy::too_many_arguments)]
fn run<'py>(
    py: Python<'py>,
    options: PyRef<'py, RunOptions>,
    paths: Vec<String>,
    path_index: PyReadonlyArray1<'py, u8>,
    offsets_ns: PyReadonlyArray1<'py, i64>,
    bodies: Bound<'py, PyAny>,
    body_offsets: Option<PyReadonlyArray1<'py, u64>>,
    after: Option<PyReadonlyArray1<'py, i64>>,
    think_ns: Option<PyReadonlyArray1<'py, i64>>,
    joins: Option<PyReadonlyArray1<'py, i64>>,
    join_offsets: Option<PyReadonlyArray1<'py, i64>>,
    head_lines: Option<Bound<'py, PyBytes>>,
    head_offsets: Option<PyReadonlyArray1<'py, u64>>,
    progress: Option<Bound<'py, PyAny>>,
    progress_interval_s: f64,
    results: Option<Bound<'py, PyAny>>,
    route_sessions: Option<PyReadonlyArray1<'py, u64>>,
    route_blocks: Option<PyReadonlyArray1<'py, u64>>,
    route_block_offsets: Option<PyReadonlyArray1<'py, u64>>,
) -> PyResult<Bound<'py, PyDict>> {
    let offsets = offsets_ns.as_slice()?;
    let n = offsets.len();
    let after = after.as_ref().map(|a| a.as_slice()).transpose()?;
    let think = think_ns.as_ref().map(|a| a.as_slice()).transpose()?;
    if after.is_some_and(|a| a.len() != n) || think.is_some_and(|t| t.len() != n) {
        return Err(errors::config(
            "after",
            format!("after and think_ns must have one entry per request ({n})"),
        ));
    }
    let joins = joins
        .as_ref()
        .map(|a| a.as_slice())
        .transpose()?
        .unwrap_or(&[]);
    let join_offsets = join_offsets.as_ref().map(|a| a.as_slice()).transpose()?;
    if join_offsets.is_some_and(|o| o.len() != n + 1)
        || joins.iter().any(|&j| j < 0)
        || join_offsets.is_some_and(|o| {
            o.windows(2).any(|w| w[0] > w[1] || w[0] < 0)
                || o.last().is_some_and(|&l| l as usize != joins.len())
        })
    {
        return Err(errors::config(
            "joins",
            format!("join_offsets must be n + 1 ({}) nondecreasing offsets into joins ({} entries), joins >= 0", n + 1, joins.len()),
        ));
    }
    let gates = match after {
        None => Vec::new(),
        Some(a) => (0..n)
            .map(|i| {
                (a[i] >= 0).then(|| Gate {
                    parent: a[i] as usize,
                    think_ns: think.map(|t| t[i]).unwrap_or(0),
                    joins: join_offsets.map_or((0, 0), |o| (o[i] as usize, o[i + 1] as usize)),
                })
            })
            .collect(),
    };
    let schedule = Schedule {
        paths,
        path_index: path_index.as_slice()?.to_vec(),
        offsets_ns: offsets.to_vec(),
        after: gates,
        joins: joins.iter().map(|&j| j as usize).collect(),
        head_lines: match (head_lines, head_offsets) {
            (Some(lines), Some(offs)) => HeadLines {
                bytes: bytes::Bytes::copy_from_slice(lines.as_bytes()),
                offsets: offs.as_slice()?.to_vec(),
            },
            (None, None) => HeadLines::default(),
            _ => {
                return Err(errors::config(
                    "head_lines",
                    "head_lines and head_offsets come together",
                ))
            }
        },
        route: RouteKeys {
            sessions: route_sessions
                .map(|a| a.as_slice().map(<[u64]>::to_vec))
                .transpose()?
                .unwrap_or_default(),
            blocks: route_blocks
                .map(|a| a.as_slice().map(<[u64]>::to_vec))
                .transpose()?
                .unwrap_or_default(),
            block_offsets: route_block_offsets
                .map(|a| a.as_slice().map(<[u64]>::to_vec))
                .transpose()?
                .unwrap_or_default(),
        },
    };
    let control = Arc::new(RunControl::default());
    let (feeder, source): (
        Option<feeder::Feeder>,
        Box<dyn Iterator<Item = SendBody> + Send>,
    ) = match (bodies.cast::<PyBytes>(), body_offsets) {
        (Ok(data), Some(offs)) => {
            let offs = offs.as_slice()?;
            if offs.len() != n + 1 {
                return Err(errors::config(
                    "body_offsets",
                    format!("{} body offsets for {n} requests (want n + 1)", offs.len()),
                ));
            }
            (None, Box::new(split_bodies(data, offs, None)?.into_iter()))
        }
        (Ok(_), None) => {
            return Err(errors::config(
                "body_offsets",
                "needed with bodies as bytes",
            ))
        }
        (Err(_), _) if bodies.is_callable() => {
            // a closed loop's send times are not known ahead: windows, not schedule time
            let lookahead_ns = match options.config.max_in_flight {
                0 => feeder::LOOKAHEAD_NS,
                _ => 0,
            };
            let (f, rx) = feeder::start_feeder(
                bodies.clone().unbind(),
                control.clone(),
                offsets.to_vec(),
                lookahead_ns,
            )?;
            (Some(f), Box::new(rx))
        }
        (Err(_), _) => return Err(errors::config("bodies", "expected bytes or a callable")),
    };
    let config = options.config.clone();
    let (tx, rx) = mpsc::channel();
    let rx = Mutex::new(rx); // detach() needs a Sync closure
    let (batch_tx, batches) = mpsc::channel::<Records>();
    let streamed = results.is_some();
    let thread_control = Arc::clone(&control);
    std::thread::Builder::new()
        .name("replay-run".into())
        .spawn(move || {
            let mut sink = move |batch: Records| {
                let _ = batch_tx.send(batch);
            };
            let sink: Option<Sink<'_>> = if streamed { Some(&mut sink) } else { None };
            let outcome = core_run_streamed(&config, schedule, source, thread_control, sink);
            let _ = tx.send(outcome);
        })
        .map_err(|e| errors::runner(format!("cannot start the runner thread: {e}")))?;

    let interval = Duration::from_secs_f64(progress_interval_s.max(0.01));
    let mut interrupted = false;
    let mut callback_error: Option<PyErr> = None;
    // Hand the batches that came in to `results`; an error there cancels the run.
    let hand_over = |py: Python<'py>, callback_error: &mut Option<PyErr>| {
        let Some(cb) = results.as_ref() else { return };
        for batch in batches.try_iter() {
            if callback_error.is_some() {
                continue; // drained and dropped: the run is being cancelled
            }
            if let Err(e) = rows_to_dict(py, batch).and_then(|d| cb.call1((d,))) {
                control.cancel.store(true, Ordering::SeqCst);
                *callback_error = Some(e);
            }
        }
    };
    let outcome = loop {
        match py.detach(|| rx.lock().expect("receiver").recv_timeout(interval)) {
            Ok(result) => break result,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Err(CoreError::Runtime {
                    message: "the runner thread died".into(),
                })
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !interrupted && py.check_signals().is_err() {
            // Ctrl-C: cancel, then keep waiting for the partial results.
            interrupted = true;
            control.cancel.store(true, Ordering::SeqCst);
        }
        hand_over(py, &mut callback_error);
        if let (Some(cb), None) = (progress.as_ref(), callback_error.as_ref()) {
            let args = (
                control.sent.load(Ordering::Relaxed),
                control.completed.load(Ordering::Relaxed),
                control.errors.load(Ordering::Relaxed),
            );
            if let Err(e) = cb.call1(args) {
                control.cancel.store(true, Ordering::SeqCst);
                callback_error = Some(e);
            }
        }
    };
    if let Some(f) = feeder {
        f.stop.store(true, Ordering::SeqCst);
        let _ = py.detach(|| f.handle.join());
        if let Some(e) = f.error.lock().expect("feeder error").take() {
            return Err(e);
        }
    }
    hand_over(py, &mut callback_error); // the runner sent its last batches before its outcome
    if let Some(e) = callback_error {
        return Err(e);
    }
    let records = outcome.map_err(errors::from_core)?;
    let d = records_to_dict(py, records)?;
    d.set_item("interrupted", interrupted)?;
    Ok(d)
}

#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(arrival_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(error_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(options::run_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(sim::sim_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(sim::sim_profiles, m)?)?;
    m.add_function(wrap_pyfunction!(sim::sim_profile_max_len, m)?)?;
    m.add_function(wrap_pyfunction!(prefix_cache_hits, m)?)?;
    m.add_function(wrap_pyfunction!(block_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(capture::sse_events, m)?)?;
    m.add_function(wrap_pyfunction!(chain_hash, m)?)?;
    m.add_function(wrap_pyfunction!(prompts::prompt_units, m)?)?;
    m.add_function(wrap_pyfunction!(prompts::prompt_texts, m)?)?;
    m.add_function(wrap_pyfunction!(bodies::send_bodies, m)?)?;
    m.add(
        "REPLAY_TOOL_CALLS_HEADER",
        replay_sim::tools::REPLAY_TOOL_CALLS_HEADER,
    )?;
    m.add(
        "TOOL_CALL_OVERHEAD_TOKENS",
        replay_sim::tools::CALL_OVERHEAD_TOKENS,
    )?;
    m.add_class::<RunOptions>()?;
    m.add_class::<sim::SimServer>()?;
    m.add_class::<capture::CaptureServer>()?;
    Ok(())
}
