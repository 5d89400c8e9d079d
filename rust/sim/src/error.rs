//! The crate's error type, `SimError`: why an engine could not be configured or started.
//!
//! Per-request problems (bad JSON, a prompt that is too long, an unknown model) are not errors of
//! the engine: they are HTTP answers (see `render.rs`). Every message is one line that names the
//! flag, file or address at fault.

/// Why the simulated engine could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A knob has a bad value; `flag` is its vLLM-style name (e.g. `--max-num-seqs`).
    #[error("{flag}: {message}")]
    Config { flag: String, message: String },
    /// The hardware/model profile is unknown or its JSON is wrong.
    #[error("profile {name}: {message}")]
    Profile { name: String, message: String },
    /// The tokenizer.json could not be loaded.
    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: String, message: String },
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {message}")]
    Bind { addr: String, message: String },
    /// The server thread or its runtime could not start.
    #[error("runtime error: {message}")]
    Runtime { message: String },
}

impl SimError {
    pub(crate) fn config(flag: &str, message: impl Into<String>) -> Self {
        SimError::Config {
            flag: flag.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn profile(name: &str, message: impl Into<String>) -> Self {
        SimError::Profile {
            name: name.to_string(),
            message: message.into(),
        }
    }
}
