//! replay-core: the pure-Rust core of an open-loop LLM load replayer.
//!
//! * `schedule` — arrival offsets (trace rescaling, Poisson, Gamma, constant), seeded.
//! * `sse` / `openai` — incremental SSE framing and OpenAI-style chunk interpretation.
//! * `record` — per-request timing records, assembled into columns.
//! * `run` (with `client`, `conn`, `exchange`, `dispatch`, `threads`) — the open-loop HTTP/1.1
//!   runner: warm-up, dispatch (open or causal), true send stamps, drain and cut-off.
//!
//! Times are integer nanoseconds; names carry their unit (`lag_ns`).

pub mod client;
pub mod conn;
pub mod dispatch;
pub mod error;
mod exchange;
pub mod openai;
pub mod record;
pub mod run;
pub mod schedule;
pub mod sse;
pub mod threads;

pub use dispatch::Gate;
pub use error::CoreError;
pub use openai::{parse_openai_event, parse_openai_response, OpenAiEvent, Usage};
pub use record::{ErrorKind, Recorder, Records, RequestRecord, RunStats, Switches};
pub use run::{run, run_streamed, PlannedRequest, RunConfig, RunControl, Schedule};
pub use schedule::{arrival_offsets, Arrivals};
pub use sse::{SseError, SseParser};
