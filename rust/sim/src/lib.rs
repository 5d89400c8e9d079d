//! replay-sim: an embedded simulated LLM inference engine behind an OpenAI-compatible server.
//!
//! It behaves like a real engine under load without a model: real tokenization (`vocab`), a
//! real prefix cache over chained block hashes (`kv`), an iteration-level continuous-batching
//! scheduler with chunked prefill, preemption and priorities (`scheduler`), n-gram speculative
//! decoding (`spec`), deterministic outputs (`textgen`), tool calls when a request offers tools
//! (`tools`) and the OpenAI API's checks of agent histories (`history`), and step times from a
//! hardware + model cost model (`profile`, `cost`), played out in real time (`engine`) behind
//! hyper (`server`) with vLLM's metric names (`metrics`).
//!
//! ```no_run
//! let config = replay_sim::EngineConfig { tokenizer: Some("gpt2.json".into()), ..Default::default() };
//! let mut server = replay_sim::serve(&config).unwrap();
//! println!("{}", server.url());
//! server.stop();
//! ```

pub mod config;
pub mod cost;
pub mod engine;
pub mod error;
pub mod fixture;
pub mod flags;
pub mod fleet;
pub mod history;
pub mod kv;
pub mod metrics;
pub mod profile;
pub mod render;
pub mod request;
pub mod scheduler;
pub mod sequence;
pub mod server;
pub mod spec;
pub mod template;
pub mod textgen;
pub mod tools;
pub mod vocab;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

pub use config::{EngineConfig, Resolved};
pub use error::SimError;
pub use profile::{Profile, PROFILE_NAMES};
pub use vocab::Vocab;

use crate::engine::Engine;
use crate::fleet::{Fleet, Replica};
use crate::metrics::Metrics;
use crate::scheduler::Policy;
use crate::server::{accept_loop, AppState};

/// A running server: its address, metrics, and the way to stop it.
pub struct ServerHandle {
    addr: SocketAddr,
    resolved: Resolved,
    fleet: Arc<Fleet>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://host:port` (the host the server listens on).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The validated config, with the KV capacity it gives.
    pub fn resolved(&self) -> &Resolved {
        &self.resolved
    }

    /// The Prometheus text GET /metrics would answer.
    pub fn metrics_text(&self) -> String {
        self.fleet.metrics_text()
    }

    /// Stop serving (open connections are dropped) and wait for the server thread.
    pub fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Block until the server stops (it stops only through `stop` from another handle owner or
    /// the process ending).
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Validate `config`, load its tokenizer and start serving on a thread of its own.
pub fn serve(config: &EngineConfig) -> Result<ServerHandle, SimError> {
    let resolved = config.resolve()?;
    let path = config
        .tokenizer
        .as_deref()
        .ok_or_else(|| SimError::config("--tokenizer", "a tokenizer.json path is required"))?;
    let vocab = Arc::new(Vocab::from_file(path)?);
    serve_with(resolved, vocab)
}

/// Start serving a resolved config with an already loaded vocabulary.
pub fn serve_with(resolved: Resolved, vocab: Arc<Vocab>) -> Result<ServerHandle, SimError> {
    let c = &resolved.config;
    let addr = format!("{}:{}", c.host, c.port);
    let bind_err = |e: std::io::Error| SimError::Bind {
        addr: addr.clone(),
        message: e.to_string(),
    };
    let listener = std::net::TcpListener::bind(&addr).map_err(bind_err)?;
    listener.set_nonblocking(true).map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let runtime = if c.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(c.threads)
            .enable_all()
            .build()
    }
    .map_err(|e| SimError::Runtime {
        message: e.to_string(),
    })?;
    // one engine per replica, each with its own scheduler, KV cache, metrics and clock
    let mut engines = Vec::with_capacity(c.replicas as usize);
    let mut replicas = Vec::with_capacity(c.replicas as usize);
    for _ in 0..c.replicas.max(1) {
        let metrics = Arc::new(Mutex::new(Metrics::new(
            &c.served_model_name,
            resolved.cache_info(),
        )));
        let (engine, engine_tx) = Engine::new(&resolved, Arc::clone(&vocab), Arc::clone(&metrics));
        replicas.push(Replica {
            engine: engine_tx,
            metrics,
            cache_resets: engine.resets(),
            in_flight: engine.in_flight(),
        });
        engines.push(engine);
    }
    let fleet = Arc::new(Fleet::new(
        replicas,
        resolved.router,
        &c.session_header,
        c.block_size,
        resolved.num_blocks,
    ));
    let state = Arc::new(AppState {
        model: c.served_model_name.clone(),
        max_model_len: resolved.max_model_len,
        priority_enabled: resolved.scheduler.policy == Policy::Priority,
        seed: c.seed,
        tool_policy: resolved.tools.clone(),
        vocab,
        fleet: Arc::clone(&fleet),
        next_id: AtomicU64::new(0),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    });
    let (shutdown_tx, shutdown_rx) = oneshot::channel();
    // the server thread says when it is serving (named, its listener registered with the
    // runtime), so that a caller who gets the handle finds the thread there and accepting
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<(), String>>(1);
    let thread = std::thread::Builder::new()
        .name("replay-sim".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("cannot use the listening socket: {e}")));
                        return;
                    }
                };
                for engine in engines {
                    tokio::spawn(engine.run());
                }
                let _ = ready_tx.send(Ok(()));
                accept_loop(listener, state, shutdown_rx).await;
            });
        })
        .map_err(|e| SimError::Runtime {
            message: e.to_string(),
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(message)) => {
            let _ = thread.join();
            return Err(SimError::Runtime { message });
        }
        Err(_) => {
            let _ = thread.join();
            return Err(SimError::Runtime {
                message: "the server thread ended before it served".into(),
            });
        }
    }
    Ok(ServerHandle {
        addr: local,
        resolved,
        fleet,
        shutdown: Some(shutdown_tx),
        thread: Some(thread),
    })
}
