//! replay-capture: the data path of `replay capture`, a reverse proxy in hyper and tokio.
//!
//! * `config` — what the proxy runs with: where it listens (plain or TLS), the upstream (http or
//!   https), timeouts, the metrics path, the queue to the recorder.
//! * `exchange` — what the proxy saw of one recorded request ([`Exchange`]) and how it ended
//!   ([`Outcome`]), the endpoints recorded ([`api_of_path`]).
//! * `usage` — the one change made to traffic: a streamed request is asked for its usage chunk
//!   (`stream_options.include_usage`), and when the client had not asked, that chunk is taken out
//!   of what it receives.
//! * `upstream` — connections to the upstream: dialled (TCP, then TLS for https), kept alive and
//!   reused.
//! * `backlog` — the bounded queue of finished exchanges and the record of a request in flight.
//! * `body` — the answer's body passed to the client a read at a time, recorded as it goes.
//! * `proxy` — the listener and the request handler; [`Proxy::start`] runs it
//!   on its own runtime and hands finished exchanges out through a bounded queue that never makes
//!   a request wait: a full queue drops the exchange and counts it.
//!
//! The crate holds no Python: the recorder (token counts, sessions, redaction, Parquet) is the
//! caller's, fed through [`Proxy::take`].

mod backlog;
mod body;
pub mod config;
pub mod exchange;
pub mod proxy;
mod upstream;
pub mod usage;

pub use config::CaptureConfig;
pub use exchange::{api_of_path, Exchange, Outcome, OUTCOMES};
pub use proxy::{Counters, MetricsFn, Proxy};
