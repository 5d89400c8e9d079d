//! One recorded request as the proxy saw it, and how it ended.

use bytes::Bytes;

/// How a recorded request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The client had the whole answer (every byte, or a streamed answer's `[DONE]` event).
    Completed,
    /// The client went away before it had the whole answer.
    ClientDisconnected,
    /// The upstream could not be reached, reset the connection, or answered with a 5xx status.
    UpstreamError,
    /// The upstream sent no headers, or nothing more of its body, within the read timeout.
    Timeout,
}

/// Every outcome, in the order of [`Outcome::index`].
pub const OUTCOMES: [Outcome; 4] = [
    Outcome::Completed,
    Outcome::ClientDisconnected,
    Outcome::UpstreamError,
    Outcome::Timeout,
];

impl Outcome {
    /// The Trace's `outcome` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::ClientDisconnected => "client_disconnected",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Timeout => "timeout",
        }
    }

    pub fn index(self) -> usize {
        match self {
            Outcome::Completed => 0,
            Outcome::ClientDisconnected => 1,
            Outcome::UpstreamError => 2,
            Outcome::Timeout => 3,
        }
    }
}

/// The endpoints whose POST requests are recorded, and the Trace's `api` for each.
pub fn api_of_path(path: &str) -> Option<&'static str> {
    match path {
        "/v1/chat/completions" => Some("chat"),
        "/v1/completions" => Some("completions"),
        "/v1/responses" => Some("responses"),
        "/v1/embeddings" => Some("embeddings"),
        _ => None,
    }
}

/// Whether a streamed request of `api` brings its usage only when asked (`stream_options.
/// include_usage`): chat and completions. A Responses API stream ends with `response.completed`,
/// which carries it; embeddings do not stream.
pub fn usage_on_request(api: &str) -> bool {
    matches!(api, "chat" | "completions")
}

/// What the proxy saw of one recorded request (raw: it lives only in memory on its way to the
/// recorder). Times are microseconds after the request's headers arrived.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub api: &'static str,
    /// When the request arrived (µs since the Unix epoch).
    pub arrival_unix_us: i64,
    /// The request body as the client sent it (before `include_usage` was added).
    pub body: Bytes,
    /// The session header's value, if the request had one.
    pub session: Option<String>,
    /// The request asked for a streamed answer (`"stream": true`).
    pub stream: bool,
    /// The upstream's status (None: no answer came).
    pub status: Option<u16>,
    /// Arrival to the upstream's response headers.
    pub ttfb_us: Option<i64>,
    /// Arrival to the last byte (or to the failure).
    pub end_us: i64,
    pub outcome: Outcome,
    /// The upstream's response body as it came: (µs after arrival, bytes) per read, the usage
    /// chunk included.
    pub chunks: Vec<(i64, Bytes)>,
    /// The upstream's `Content-Encoding` (the bytes above are as sent, not decompressed).
    pub content_encoding: Option<String>,
}
