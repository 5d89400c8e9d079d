//! Errors raised into Python: always a class of `replay.errors` (the `ReplayError` family), with
//! the Rust error's kind as the class and its field (or URL) as an attribute, never a bare
//! `ValueError`.

use pyo3::prelude::*;

use replay_core::CoreError;
use replay_sim::SimError;

/// An instance of `replay.errors.<class>` with `message`, and `attrs` set on it.
fn raise(class: &str, message: String, attrs: &[(&str, &str)]) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("replay.errors")
            .and_then(|m| m.getattr(class))
            .and_then(|cls| cls.call1((message,)));
        match made {
            Ok(err) => {
                for (name, value) in attrs {
                    if let Err(e) = err.setattr(*name, *value) {
                        return e;
                    }
                }
                PyErr::from_value(err)
            }
            // replay.errors could not be imported: that error says why
            Err(e) => e,
        }
    })
}

/// `ConfigError(message)` naming the argument or flag at fault (`.field`).
pub(crate) fn config(field: &str, message: impl Into<String>) -> PyErr {
    raise(
        "ConfigError",
        format!("{field}: {}", message.into()),
        &[("field", field)],
    )
}

/// `RunnerError(message)`: the runner as a whole could not go on.
pub(crate) fn runner(message: impl Into<String>) -> PyErr {
    raise("RunnerError", message.into(), &[])
}

/// The `replay.errors` class of a core error: `ConfigError` (`.field`), `TargetError` (`.url`) or
/// `RunnerError`.
pub(crate) fn from_core(err: CoreError) -> PyErr {
    let message = err.to_string();
    match &err {
        CoreError::Config { field, .. } => raise("ConfigError", message, &[("field", field)]),
        CoreError::Url { url, .. } => raise("TargetError", message, &[("url", url)]),
        CoreError::Runtime { .. } => raise("RunnerError", message, &[]),
    }
}

/// The `replay.errors` class of an embedded-engine error: a knob, profile or tokenizer is a
/// `ConfigError` naming its flag (`.field`); a socket or thread that would not start, a
/// `TargetError` (`.url` for the address it could not listen on).
pub(crate) fn from_sim(err: SimError) -> PyErr {
    let message = err.to_string();
    match &err {
        SimError::Config { flag, .. } => raise("ConfigError", message, &[("field", flag)]),
        SimError::Profile { .. } => raise("ConfigError", message, &[("field", "--profile")]),
        SimError::Tokenizer { .. } => raise("ConfigError", message, &[("field", "--tokenizer")]),
        SimError::Bind { addr, .. } => raise("TargetError", message, &[("url", addr)]),
        SimError::Runtime { .. } => raise("TargetError", message, &[]),
    }
}
