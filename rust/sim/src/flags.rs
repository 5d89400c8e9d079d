//! vLLM-style command-line flags for the `replay-sim` binary, parsed into an `EngineConfig`.
//!
//! Owns `parse_flags` and `USAGE`. `--flag value` and `--flag=value` both work, and so do
//! vLLM's underscore spellings (`--max_num_seqs`). Flags are turned into the config's JSON keys
//! and go through the same validation as a JSON config.

use serde_json::{Map, Value};

use crate::config::EngineConfig;
use crate::error::SimError;

pub const USAGE: &str = "usage: replay-sim --tokenizer PATH [--host 127.0.0.1] [--port 8000] \
[--profile NAME|PATH.json] [--max-num-seqs N] [--max-num-batched-tokens N] \
[--enable-prefix-caching | --no-enable-prefix-caching] [--gpu-memory-utilization F] [--block-size N] \
[--scheduling-policy fcfs|priority] [--long-prefill-token-threshold N] [--speculative-config JSON] \
[--kv-cache-dtype auto|fp8] [--max-model-len N] [--seed N] [--served-model-name NAME] [--time-scale X] \
[--threads N] [--tool-call-probability P] [--max-parallel-tool-calls N] \
[--mean-parallel-tool-calls X] [--tool-argument-tokens N] \
[--replicas N] [--router round-robin|session|prefix|least-loaded] [--session-header NAME]";

#[derive(Clone, Copy)]
enum Kind {
    Int,
    Float,
    Str,
    Json,
}

const FLAGS: [(&str, Kind); 24] = [
    ("profile", Kind::Str),
    ("tokenizer", Kind::Str),
    ("max-num-seqs", Kind::Int),
    ("max-num-batched-tokens", Kind::Int),
    ("gpu-memory-utilization", Kind::Float),
    ("block-size", Kind::Int),
    ("scheduling-policy", Kind::Str),
    ("long-prefill-token-threshold", Kind::Int),
    ("speculative-config", Kind::Json),
    ("kv-cache-dtype", Kind::Str),
    ("max-model-len", Kind::Int),
    ("seed", Kind::Int),
    ("served-model-name", Kind::Str),
    ("time-scale", Kind::Float),
    ("host", Kind::Str),
    ("port", Kind::Int),
    ("threads", Kind::Int),
    ("tool-call-probability", Kind::Float),
    ("max-parallel-tool-calls", Kind::Int),
    ("mean-parallel-tool-calls", Kind::Float),
    ("tool-argument-tokens", Kind::Int),
    ("replicas", Kind::Int),
    ("router", Kind::Str),
    ("session-header", Kind::Str),
];

/// Parse flags (without the program name). `Ok(None)` means `--help` was asked for.
pub fn parse_flags(
    argv: impl IntoIterator<Item = String>,
) -> Result<Option<EngineConfig>, SimError> {
    let mut obj = Map::new();
    let mut it = argv.into_iter();
    while let Some(raw) = it.next() {
        if raw == "-h" || raw == "--help" {
            return Ok(None);
        }
        let (name, inline) = match raw.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (raw.clone(), None),
        };
        let Some(bare) = name.strip_prefix("--") else {
            return Err(SimError::config(
                &raw,
                format!("unexpected argument ({USAGE})"),
            ));
        };
        let bare = bare.replace('_', "-");
        let flag = format!("--{bare}");
        match bare.as_str() {
            "enable-prefix-caching" | "no-enable-prefix-caching" if inline.is_none() => {
                obj.insert(
                    "enable_prefix_caching".into(),
                    Value::Bool(bare == "enable-prefix-caching"),
                );
                continue;
            }
            _ => {}
        }
        let Some(&(_, kind)) = FLAGS.iter().find(|(f, _)| *f == bare) else {
            return Err(SimError::config(&flag, format!("unknown flag ({USAGE})")));
        };
        let value = inline
            .or_else(|| it.next())
            .ok_or_else(|| SimError::config(&flag, "needs a value"))?;
        let parsed = match kind {
            Kind::Str => Value::String(value),
            Kind::Json => serde_json::from_str::<Value>(&value)
                .map_err(|e| SimError::config(&flag, format!("not JSON: {e}")))?,
            Kind::Int => value.parse::<u64>().map(Value::from).map_err(|_| {
                SimError::config(
                    &flag,
                    format!("needs a non-negative integer, got {value:?}"),
                )
            })?,
            Kind::Float => value
                .parse::<f64>()
                .ok()
                .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
                .ok_or_else(|| SimError::config(&flag, format!("needs a number, got {value:?}")))?,
        };
        obj.insert(bare.replace('-', "_"), parsed);
    }
    let config: EngineConfig = serde_json::from_value(Value::Object(obj))
        .map_err(|e| SimError::config("flags", e.to_string()))?;
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Option<EngineConfig>, SimError> {
        parse_flags(s.split_whitespace().map(String::from))
    }

    #[test]
    fn vllm_flags_map_onto_the_config() {
        let c = p("--max-num-seqs 8 --max_num_batched_tokens=512 --no-enable-prefix-caching \
                   --gpu-memory-utilization 0.5 --scheduling-policy priority --kv-cache-dtype fp8 \
                   --speculative-config {\"method\":\"ngram\",\"num_speculative_tokens\":3} --time-scale 0 --port 0 \
                   --tool-call-probability 0.5 --max-parallel-tool-calls 3 --mean-parallel-tool-calls 2 \
                   --tool-argument-tokens 12")
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                c.max_num_seqs,
                c.max_num_batched_tokens,
                c.enable_prefix_caching
            ),
            (8, 512, false)
        );
        assert_eq!(
            (
                c.gpu_memory_utilization,
                c.scheduling_policy.as_str(),
                c.time_scale
            ),
            (0.5, "priority", 0.0)
        );
        assert_eq!(c.speculative_config.unwrap()["num_speculative_tokens"], 3);
        assert_eq!(
            (
                c.tool_call_probability,
                c.max_parallel_tool_calls,
                c.mean_parallel_tool_calls,
                c.tool_argument_tokens
            ),
            (0.5, 3, 2.0, 12)
        );
        assert!(p("--help").unwrap().is_none());
        for bad in [
            "--max-num-seqs x",
            "--bogus 1",
            "--max-num-seqs",
            "positional",
            "--port 70000",
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
        assert!(p("--max-num-seqs -1")
            .unwrap_err()
            .to_string()
            .contains("--max-num-seqs"));
    }
}
