//! What a run is asked to do (`RunConfig`: the target, its TLS and headers, the deadlines and
//! caps) and how its caller steers and watches it (`RunControl`: cancel, progress counters).

use std::sync::atomic::{AtomicBool, AtomicU64};

use crate::route::Policy;
use crate::tls::TlsOptions;

/// How to reach the server and how patient to be. A timeout of 0 means "no limit".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// e.g. "http://127.0.0.1:8000" or "https://gateway.example/llm" (a path prefix is allowed).
    pub base_url: String,
    /// A fleet: the base URLs of replicas 1, 2, ... (replica 0 is `base_url`), each with its
    /// own connections; each request gets its replica from `route` when it is sent. Empty: one
    /// target, and no routing at all.
    pub more_urls: Vec<String>,
    /// How a fleet's requests are routed (`route.rs`); the schedule's `route` keys feed it.
    pub route: Policy,
    /// How an https target's certificate is checked (`tls.rs`).
    pub tls: TlsOptions,
    /// Sent with every request (e.g. Authorization); replaces defaults of the same name.
    pub headers: Vec<(String, String)>,
    /// Whole-request deadline from the actual send → `ErrorKind::Timeout`.
    pub timeout_ns: u64,
    /// Longest gap between body reads once the first token arrived → `ErrorKind::Stall`. The
    /// wait before the first token (queueing in the engine) is governed by `timeout_ns` only.
    pub stall_timeout_ns: u64,
    /// TCP connect deadline → `ErrorKind::Connect`.
    pub connect_timeout_ns: u64,
    /// How long after the last scheduled send the run waits for open requests; those still
    /// open then (or never sent) end as `ErrorKind::CutOff`.
    pub drain_ns: u64,
    /// Upper bound on requests in flight (hence open connections); later ones wait, and their
    /// send lag shows it.
    pub max_connections: usize,
    /// A closed-loop stage's users (0: open loop): at most this many requests in flight, the
    /// next released when one ends (`dispatch::Ends::cap`); the drain then counts from the last
    /// send. At most `max_connections`.
    pub max_in_flight: usize,
    /// Keep-alive connections opened and checked before t0.
    pub warm_connections: usize,
    /// Keep each chunk's arrival time (false: only count chunks).
    pub keep_chunks: bool,
    /// Tokio worker threads.
    pub worker_threads: usize,
    /// CPUs for the I/O workers (empty: not pinned), e.g. the ones an engine in the same
    /// process does not use. The dispatcher keeps the calling thread's CPU set: it sleeps
    /// between sends, and given two CPUs or more it runs real-time and preempts whatever holds
    /// one the moment a send is due (`threads::raise_priority`); pinned to a single CPU it
    /// could only be niced, and lost that CPU to the runner's own threads.
    pub cpus: Vec<usize>,
    /// Causal runs: write each parent's streamed answer into its child's body at the child's
    /// `SendBody::answer_at` (`answers`); false: every body as recorded.
    pub resend_answers: bool,
    /// Take t0 at this wall-clock instant (ns since the Unix epoch), after the warm-up: the
    /// shards of one replay start together (`replay.shards`). 0: at once, when warm.
    pub start_at_unix_ns: u64,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            base_url: "http://127.0.0.1:8000".into(),
            more_urls: Vec::new(),
            route: Policy::RoundRobin,
            tls: TlsOptions::default(),
            headers: Vec::new(),
            timeout_ns: 600_000_000_000,
            stall_timeout_ns: 60_000_000_000,
            connect_timeout_ns: 10_000_000_000,
            drain_ns: 60_000_000_000,
            max_connections: 20_000,
            max_in_flight: 0,
            warm_connections: 0,
            keep_chunks: true,
            worker_threads: 1,
            cpus: Vec::new(),
            resend_answers: false,
            start_at_unix_ns: 0,
        }
    }
}

/// Shared between `run` and its caller: cancel it from any thread, read progress counters.
#[derive(Debug, Default)]
pub struct RunControl {
    /// Set to stop dispatching and abort in-flight requests.
    pub cancel: AtomicBool,
    /// Requests sent (stamped `sent_ns`).
    pub sent: AtomicU64,
    /// Requests that finished (ok or not, sent or not).
    pub completed: AtomicU64,
    /// Finished requests that ended with an error (cancelled and cut off included).
    pub errors: AtomicU64,
}
