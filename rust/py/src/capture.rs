//! `replay._engine.CaptureServer`: the data path of `replay capture` (`replay-capture`), started
//! from Python.
//!
//! Thin: the proxy's settings go in, it serves on its own runtime threads without the GIL, and the
//! Python recorder side takes the finished exchanges (`take`, the GIL released while it waits) and
//! reads the proxy's counts. GET on the metrics path calls the Python `metrics` callable (on a
//! blocking thread of the proxy, the GIL held for that one request). Bad settings raise
//! `replay.errors.ConfigError` (`.field`), an address that cannot be listened on `TargetError`.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use replay_capture::{CaptureConfig, MetricsFn, Proxy, OUTCOMES};
use replay_core::{SseParser, TlsOptions};

fn duration(field: &str, seconds: f64) -> PyResult<Duration> {
    if seconds.is_finite() && seconds >= 0.0 {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(crate::errors::config(
            field,
            format!("must be a number of seconds >= 0, got {seconds}"),
        ))
    }
}

/// A running capture proxy.
#[pyclass(module = "replay._engine", frozen)]
pub struct CaptureServer {
    proxy: Proxy,
}

#[pymethods]
impl CaptureServer {
    #[new]
    #[pyo3(signature = (upstream, listen, metrics, *, connect_timeout_s, read_timeout_s, metrics_path,
                        session_header, queue_size, backlog_bytes, tls_cert=None, tls_key=None, ca_cert=None,
                        insecure=false, threads=0, grace_s=60.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        upstream: String,
        listen: String,
        metrics: Py<PyAny>,
        connect_timeout_s: f64,
        read_timeout_s: f64,
        metrics_path: String,
        session_header: String,
        queue_size: usize,
        backlog_bytes: usize,
        tls_cert: Option<String>,
        tls_key: Option<String>,
        ca_cert: Option<String>,
        insecure: bool,
        threads: usize,
        grace_s: f64,
    ) -> PyResult<Self> {
        let mut cfg = CaptureConfig::new(&listen, &upstream);
        cfg.connect_timeout = duration("connect_timeout_s", connect_timeout_s)?;
        cfg.read_timeout = duration("read_timeout_s", read_timeout_s)?;
        cfg.grace = duration("grace_s", grace_s)?;
        cfg.metrics_path = metrics_path;
        cfg.session_header = session_header;
        cfg.queue_size = queue_size;
        cfg.backlog_bytes = backlog_bytes;
        cfg.tls_cert = tls_cert;
        cfg.tls_key = tls_key;
        cfg.upstream_tls = TlsOptions { ca_cert, insecure };
        cfg.threads = threads;
        let render: MetricsFn = Arc::new(move || {
            Python::attach(
                |py| match metrics.call0(py).and_then(|v| v.extract::<Vec<u8>>(py)) {
                    Ok(text) => text,
                    Err(e) => {
                        e.print(py);
                        Vec::new()
                    }
                },
            )
        });
        let proxy = py
            .detach(|| Proxy::start(&cfg, render))
            .map_err(crate::errors::from_core)?;
        Ok(CaptureServer { proxy })
    }

    /// `http://HOST:PORT` (`https://` with TLS).
    #[getter]
    fn url(&self) -> String {
        self.proxy.url()
    }

    /// The address listened on: (IP, port).
    #[getter]
    fn address(&self) -> (String, u16) {
        let a = self.proxy.local_addr();
        (a.ip().to_string(), a.port())
    }

    /// Wait (the GIL released) up to `timeout_s` until a finished exchange is there to take.
    fn wait(&self, py: Python<'_>, timeout_s: f64) -> PyResult<bool> {
        let timeout = duration("timeout_s", timeout_s)?;
        Ok(py.detach(|| self.proxy.wait(timeout)))
    }

    /// Up to `max` of the finished exchanges waiting, without waiting: tuples of (api,
    /// arrival_unix_us, body, session, stream, status, ttfb_us, end_us, outcome, chunks,
    /// content_encoding), `chunks` a list of (µs after arrival, bytes).
    fn take<'py>(&self, py: Python<'py>, max: usize) -> PyResult<Bound<'py, PyList>> {
        let taken = self.proxy.take(max);
        let out = PyList::empty(py);
        for ex in taken {
            let chunks = PyList::empty(py);
            for (t, data) in &ex.chunks {
                chunks.append((*t, PyBytes::new(py, data)))?;
            }
            let row = PyTuple::new(
                py,
                [
                    ex.api.into_pyobject(py)?.into_any(),
                    ex.arrival_unix_us.into_pyobject(py)?.into_any(),
                    PyBytes::new(py, &ex.body).into_any(),
                    ex.session.into_pyobject(py)?.into_any(),
                    pyo3::types::PyBool::new(py, ex.stream)
                        .to_owned()
                        .into_any(),
                    ex.status.into_pyobject(py)?.into_any(),
                    ex.ttfb_us.into_pyobject(py)?.into_any(),
                    ex.end_us.into_pyobject(py)?.into_any(),
                    ex.outcome.as_str().into_pyobject(py)?.into_any(),
                    chunks.into_any(),
                    ex.content_encoding.into_pyobject(py)?.into_any(),
                ],
            )?;
            out.append(row)?;
        }
        Ok(out)
    }

    /// The proxy's counts: requests, unrecorded, queued, dropped_queue_full, dropped_backlog,
    /// dropped_session_shed, and `outcomes`
    /// (a dict of the recorded requests by outcome).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.proxy.counters();
        let d = PyDict::new(py);
        d.set_item("requests", c.requests)?;
        d.set_item("unrecorded", c.unrecorded)?;
        d.set_item("queued", c.queued)?;
        d.set_item("dropped_queue_full", c.dropped_queue_full)?;
        d.set_item("dropped_backlog", c.dropped_backlog)?;
        d.set_item("dropped_session_shed", c.dropped_session_shed)?;
        d.set_item("upstream_connections", c.upstream_connections)?;
        let outcomes = PyDict::new(py);
        for (o, n) in OUTCOMES.iter().zip(c.outcomes) {
            outcomes.set_item(o.as_str(), n)?;
        }
        d.set_item("outcomes", outcomes)?;
        Ok(d)
    }

    /// Stop listening and wait (up to `grace_s`) for the requests in flight to end; the
    /// exchanges they leave can still be taken. Idempotent.
    fn stop(&self, py: Python<'_>) {
        py.detach(|| self.proxy.stop());
    }

    fn __repr__(&self) -> String {
        format!("CaptureServer({})", self.proxy.url())
    }
}

/// The data of each event of an SSE answer read as `chunks` ((µs, bytes) per read), each with the
/// time of the read that ended it: the runner's framing (`replay_core::SseParser`, WHATWG rules;
/// a last event without its closing blank line is taken at the stream's end). Events without
/// data are left out; an event past the parser's 16 MiB limit ends the list there.
#[pyfunction]
pub(crate) fn sse_events<'py>(
    py: Python<'py>,
    chunks: Vec<(i64, Bound<'py, PyBytes>)>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let mut parser = SseParser::new();
    let mut events: Vec<(i64, Vec<u8>)> = Vec::new();
    let mut last = 0;
    for (t, data) in &chunks {
        last = *t;
        let fed = parser.feed(data.as_bytes(), |event| {
            if !event.is_empty() {
                events.push((*t, event.to_vec()));
            }
        });
        if fed.is_err() {
            return to_list(py, out, events);
        }
    }
    // an error here (the last line too long) leaves the events before it
    let _ = parser.finish(|event| {
        if !event.is_empty() {
            events.push((last, event.to_vec()));
        }
    });
    to_list(py, out, events)
}

fn to_list<'py>(
    py: Python<'py>,
    out: Bound<'py, PyList>,
    events: Vec<(i64, Vec<u8>)>,
) -> PyResult<Bound<'py, PyList>> {
    for (t, data) in events {
        out.append((t, PyBytes::new(py, &data)))?;
    }
    Ok(out)
}
