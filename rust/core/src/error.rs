//! The crate's error type for configuration and runtime failures (`CoreError`).
//!
//! Per-request faults (refused connections, HTTP errors, stalls...) are *not* errors of the run:
//! they are recorded per request as an `ErrorKind` (see `record.rs`). `CoreError` is only for
//! things that stop a run from starting at all. Every message is one line naming the culprit.

/// Why a schedule or a run could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// A configuration value is out of range or inconsistent.
    #[error("invalid {field}: {message}")]
    Config {
        field: &'static str,
        message: String,
    },
    /// The base URL (or a URL built from it and a request path) cannot be used.
    #[error("bad url {url:?}: {message}")]
    Url { url: String, message: String },
    /// The async runtime or the dispatcher thread could not be started.
    #[error("runtime error: {message}")]
    Runtime { message: String },
}

impl CoreError {
    pub fn config(field: &'static str, message: impl Into<String>) -> Self {
        CoreError::Config {
            field,
            message: message.into(),
        }
    }
}
