//! `replay._engine.SimServer`: the embedded simulated engine (`replay-sim`), started from Python.
//!
//! Thin: a config (a dict or a JSON string of `replay_sim::EngineConfig` keys) and a tokenizer
//! path go in, the server runs on its own Rust thread, and Python gets its port and URL back.
//! Bad knobs raise `replay.errors.ConfigError` (`.field`: the flag); a port that cannot be bound,
//! `TargetError` (`crate::errors::from_sim`).

use pyo3::prelude::*;
use pyo3::types::PyString;

use replay_sim::{serve, EngineConfig, ServerHandle, SimError, PROFILE_NAMES};

/// The embedded engine's knob defaults (`EngineConfig::default()`) as a JSON object: the one
/// source `replay.sim` (its config, knobs and the serve-sim flags) reads them from.
#[pyfunction]
pub fn sim_defaults() -> String {
    EngineConfig::default().to_json()
}

/// The embedded engine's preset profile names (`replay_sim::PROFILE_NAMES`), the default first.
#[pyfunction]
pub fn sim_profiles() -> Vec<String> {
    PROFILE_NAMES.iter().map(|s| s.to_string()).collect()
}

/// The longest prompt + output a preset profile accepts by default (its `max_model_len`), or
/// None for a name that is not a preset.
#[pyfunction]
pub fn sim_profile_max_len(name: &str) -> Option<u32> {
    replay_sim::profile::Profile::named(name).map(|p| p.max_model_len)
}

/// A running simulated engine.
/// `SimServer(config: dict | str | None, tokenizer: str | None, cpus: list[int] = [], priority: str = "normal")`;
/// `cpus` pins the engine's threads to those CPUs, `priority` ("idle", "nice" or "normal":
/// `replay_core::threads::lower_priority`) lowers their CPU priority below the caller's, so that
/// a runner in the same process keeps its schedule (no privilege needed).
#[pyclass(module = "replay._engine")]
pub struct SimServer {
    handle: Option<ServerHandle>,
    port: u16,
    url: String,
    num_gpu_blocks: u32,
    max_model_len: u32,
}

#[pymethods]
impl SimServer {
    #[new]
    #[pyo3(signature = (config=None, tokenizer=None, cpus=Vec::new(), priority="normal".to_string()))]
    fn new(
        py: Python<'_>,
        config: Option<&Bound<'_, PyAny>>,
        tokenizer: Option<String>,
        cpus: Vec<usize>,
        priority: String,
    ) -> PyResult<Self> {
        let text: String = match config {
            None => "{}".to_string(),
            Some(c) if c.is_instance_of::<PyString>() => c.extract()?,
            Some(c) => py.import("json")?.call_method1("dumps", (c,))?.extract()?,
        };
        let mut cfg = EngineConfig::from_json(&text).map_err(crate::errors::from_sim)?;
        if tokenizer.is_some() {
            cfg.tokenizer = tokenizer;
        }
        // Started from a pinned helper thread: the server thread and its runtime's workers
        // inherit the helper's CPU set and niceness, and the caller's own are left alone.
        let started = py.detach(|| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    replay_core::threads::pin_current_thread(&cpus).map_err(|e| {
                        SimError::Config {
                            flag: "cpus".into(),
                            message: format!("cannot pin the engine to {cpus:?}: {e}"),
                        }
                    })?;
                    replay_core::threads::lower_priority(&priority);
                    serve(&cfg)
                })
                .join()
                .unwrap_or_else(|_| {
                    Err(SimError::Runtime {
                        message: "the engine's start-up thread panicked".into(),
                    })
                })
            })
        });
        let handle = started.map_err(crate::errors::from_sim)?;
        let r = handle.resolved();
        Ok(SimServer {
            port: handle.port(),
            url: handle.url(),
            num_gpu_blocks: r.num_blocks,
            max_model_len: r.max_model_len,
            handle: Some(handle),
        })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`
    #[getter]
    fn url(&self) -> String {
        self.url.clone()
    }

    /// KV blocks the profile and `gpu_memory_utilization` give.
    #[getter]
    fn num_gpu_blocks(&self) -> u32 {
        self.num_gpu_blocks
    }

    #[getter]
    fn max_model_len(&self) -> u32 {
        self.max_model_len
    }

    #[getter]
    fn running(&self) -> bool {
        self.handle.is_some()
    }

    /// The Prometheus text GET /metrics answers.
    fn metrics_text(&self) -> String {
        self.handle
            .as_ref()
            .map(ServerHandle::metrics_text)
            .unwrap_or_default()
    }

    /// Stop serving and wait for the server thread (idempotent).
    fn stop(&mut self, py: Python<'_>) {
        if let Some(mut h) = self.handle.take() {
            py.detach(move || h.stop());
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.stop(py);
        false
    }

    fn __repr__(&self) -> String {
        let state = if self.handle.is_some() {
            "running"
        } else {
            "stopped"
        };
        format!("SimServer({}, {state})", self.url)
    }
}
