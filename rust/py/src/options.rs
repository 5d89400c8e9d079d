//! The runner's settings from Python: [`RunOptions`] (the core's `RunConfig`, checked once when
//! made) and [`run_defaults`] (the core's defaults, the one source of them).

use pyo3::prelude::*;
use pyo3::types::PyDict;

use replay_core::route::Policy;
use replay_core::{RunConfig, TlsOptions};

use crate::errors;

/// Seconds -> ns; None keeps `default_ns` (the core's default), 0 means "no limit".
fn seconds_to_ns(field: &str, seconds: Option<f64>, default_ns: u64) -> PyResult<u64> {
    match seconds {
        None => Ok(default_ns),
        Some(s) if s.is_finite() && s >= 0.0 => Ok((s * 1e9) as u64),
        Some(s) => Err(errors::config(
            field,
            format!("must be a number of seconds >= 0, got {s}"),
        )),
    }
}

/// The core runner's defaults (the one source of them), in seconds where they are times.
#[pyfunction]
pub(crate) fn run_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let c = RunConfig::default();
    let d = PyDict::new(py);
    d.set_item("timeout_s", c.timeout_ns as f64 / 1e9)?;
    d.set_item("stall_timeout_s", c.stall_timeout_ns as f64 / 1e9)?;
    d.set_item("connect_timeout_s", c.connect_timeout_ns as f64 / 1e9)?;
    d.set_item("drain_s", c.drain_ns as f64 / 1e9)?;
    d.set_item("max_connections", c.max_connections)?;
    d.set_item("worker_threads", c.worker_threads)?;
    Ok(d)
}

/// What a run is asked to do: the target (`url`, a path prefix allowed), its TLS (`ca_cert`:
/// a PEM file trusted alone; `insecure`: no check) and headers, the deadlines in seconds (None
/// keeps the core's default, `run_defaults()`; 0 means no limit), the caps on connections and on
/// requests in flight (`max_in_flight`: a closed-loop stage's users, 0 open loop), the
/// connections opened before t0, whether each chunk's time is kept, the I/O worker threads and
/// the CPUs they are pinned to, whether a causal run writes the answers it streamed into
/// the later turns, and the wall-clock instant t0 waits for (`start_at_unix_ns`, 0: none). A
/// fleet: `more_urls` are replicas 1, 2, ... (replica 0 is `url`) and `route` the policy that
/// picks each request's replica as it is sent (`replay_core::route`).
/// A bad value raises ConfigError naming its argument here, before any run.
#[pyclass(module = "replay._engine", frozen)]
pub(crate) struct RunOptions {
    pub(crate) config: RunConfig,
}

#[pymethods]
impl RunOptions {
    #[new]
    #[pyo3(signature = (
        url, *, headers=Vec::new(), ca_cert=None, insecure=false, timeout_s=None, stall_timeout_s=None,
        connect_timeout_s=None, drain_s=None, max_connections=None, max_in_flight=0, warm_connections=0,
        chunk_times=true, worker_threads=None, cpus=Vec::new(), resend_answers=false,
        more_urls=Vec::new(), route="round-robin", start_at_unix_ns=0
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        url: String,
        headers: Vec<(String, String)>,
        ca_cert: Option<String>,
        insecure: bool,
        timeout_s: Option<f64>,
        stall_timeout_s: Option<f64>,
        connect_timeout_s: Option<f64>,
        drain_s: Option<f64>,
        max_connections: Option<usize>,
        max_in_flight: usize,
        warm_connections: usize,
        chunk_times: bool,
        worker_threads: Option<usize>,
        cpus: Vec<usize>,
        resend_answers: bool,
        more_urls: Vec<String>,
        route: &str,
        start_at_unix_ns: u64,
    ) -> PyResult<Self> {
        let d = RunConfig::default();
        let route: Policy = route.parse().map_err(|e| errors::config("route", e))?;
        Ok(RunOptions {
            config: RunConfig {
                base_url: url,
                more_urls,
                route,
                tls: TlsOptions { ca_cert, insecure },
                headers,
                timeout_ns: seconds_to_ns("timeout_s", timeout_s, d.timeout_ns)?,
                stall_timeout_ns: seconds_to_ns(
                    "stall_timeout_s",
                    stall_timeout_s,
                    d.stall_timeout_ns,
                )?,
                connect_timeout_ns: seconds_to_ns(
                    "connect_timeout_s",
                    connect_timeout_s,
                    d.connect_timeout_ns,
                )?,
                drain_ns: seconds_to_ns("drain_s", drain_s, d.drain_ns)?,
                max_connections: max_connections.unwrap_or(d.max_connections),
                max_in_flight,
                warm_connections,
                keep_chunks: chunk_times,
                worker_threads: worker_threads.unwrap_or(d.worker_threads),
                cpus,
                resend_answers,
                start_at_unix_ns,
            },
        })
    }

    #[getter]
    fn url(&self) -> &str {
        &self.config.base_url
    }

    /// Every replica's base URL, replica 0 first.
    #[getter]
    fn urls(&self) -> Vec<String> {
        std::iter::once(&self.config.base_url)
            .chain(&self.config.more_urls)
            .cloned()
            .collect()
    }

    #[getter]
    fn route(&self) -> String {
        self.config.route.to_string()
    }

    fn __repr__(&self) -> String {
        let c = &self.config;
        format!(
            "RunOptions(url={:?}, more_urls={:?}, route={}, timeout_s={}, stall_timeout_s={}, connect_timeout_s={}, drain_s={}, \
             max_connections={}, max_in_flight={}, warm_connections={}, chunk_times={}, \
             worker_threads={}, cpus={:?}, resend_answers={}, headers={}, ca_cert={:?}, insecure={})",
            c.base_url,
            c.more_urls,
            c.route,
            c.timeout_ns as f64 / 1e9,
            c.stall_timeout_ns as f64 / 1e9,
            c.connect_timeout_ns as f64 / 1e9,
            c.drain_ns as f64 / 1e9,
            c.max_connections,
            c.max_in_flight,
            c.warm_connections,
            c.keep_chunks,
            c.worker_threads,
            c.cpus,
            c.resend_answers,
            c.headers.len(),
            c.tls.ca_cert,
            c.tls.insecure,
        )
    }
}
