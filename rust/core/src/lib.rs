//! replay-core: the pure-Rust core of an open-loop LLM load replayer.
//!
//! * `schedule` — arrival offsets (trace rescaling, Poisson, Gamma, constant), seeded.
//! * `sse` / `openai` — incremental SSE framing and OpenAI-style chunk interpretation.
//! * `record` — per-request timing records, assembled into columns.
//! * `body` — request bodies as a replay sends them, set without a JSON round trip.
//! * `blocks` — the Trace's chained block hashes (BLAKE2b, 8 bytes).
//! * `prefix_cache` — an offline LRU prefix-cache simulation over chained block hashes.
//! * `route` — the fleet routing policies (round-robin, session, prefix, least-loaded).
//! * `answers` — causal sessions resend the engine's own answers in place of the recorded ones.
//! * `run` (with `config`, `plan`, `client`, `conn`, `pool`, `shared`, `warmup`, `exchange`,
//!   `response`, `dispatch`, `threads`) — the open-loop HTTP/1.1 runner: warm-up, dispatch (open
//!   or causal), true send stamps, drain and cut-off. The pieces depend one way: `run` on the
//!   rest, `exchange` on `response`, both (and `warmup`) on `shared`, `plan` and `shared` on
//!   `config`.
//!
//! Times are integer nanoseconds; names carry their unit (`lag_ns`).

pub mod answers;
pub mod blocks;
pub mod body;
pub mod client;
pub mod config;
pub mod conn;
pub mod dispatch;
pub mod error;
mod exchange;
pub mod openai;
mod plan;
pub mod pool;
pub mod prefix_cache;
pub mod record;
mod response;
pub mod route;
pub mod run;
pub mod schedule;
mod shared;
pub mod sse;
pub mod synth;
pub mod threads;
pub mod tls;
mod users;
mod warmup;

pub use answers::SendBody;
pub use config::{RunConfig, RunControl};
pub use dispatch::Gate;
pub use error::CoreError;
pub use openai::{parse_openai_event, parse_openai_response, OpenAiEvent, Usage};
pub use plan::{HeadLines, PlannedRequest, RouteKeys, Schedule};
pub use prefix_cache::{prefix_cache_hits, simulate as simulate_prefix_cache};
pub use record::{ErrorKind, Recorder, Records, RequestRecord, RunStats, Switches, NO_REPLICA};
pub use route::{Policy, Router};
pub use run::{run, run_streamed, Sink, HAND_OVER_EVERY};
pub use schedule::{arrival_offsets, Arrivals};
pub use sse::{SseError, SseParser};
pub use tls::TlsOptions;
