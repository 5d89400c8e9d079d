//! The engine's knobs (`EngineConfig`, named like vLLM's flags) and their validation.
//!
//! Owns `EngineConfig` (serde: JSON keys are the flags' snake_case names, unknown keys refused),
//! `Resolved` (a validated config with its profile loaded and KV capacity computed) and the
//! knob defaults. Every error names the flag (`--max-num-seqs: ...`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::SimError;
use crate::metrics::CacheInfo;
use crate::profile::{Profile, DEFAULT_PROFILE};
use crate::scheduler::{Policy, SchedulerConfig};
use crate::spec::NgramConfig;
use crate::tools::ToolPolicy;
use replay_core::route::Policy as RoutePolicy;

/// Most replicas one fleet runs.
pub const MAX_REPLICAS: u32 = 64;

/// Every knob of the simulated engine, with vLLM's defaults where vLLM has the knob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// `--profile`: a preset name or a profile .json path.
    pub profile: String,
    /// `--tokenizer`: path of a tokenizer.json (required to serve).
    pub tokenizer: Option<String>,
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    pub enable_prefix_caching: bool,
    pub gpu_memory_utilization: f64,
    pub block_size: u32,
    /// "fcfs" or "priority".
    pub scheduling_policy: String,
    /// 0 = no cap on one sequence's prefill chunk (besides the step budget).
    pub long_prefill_token_threshold: u32,
    /// `{"method":"ngram","num_speculative_tokens":K,"prompt_lookup_max":N,"prompt_lookup_min":M}`
    /// (an object, or a string holding one).
    pub speculative_config: Option<Value>,
    /// "auto" or "fp8" (also "fp8_e4m3", "fp8_e5m2").
    pub kv_cache_dtype: String,
    /// Default: the profile's.
    pub max_model_len: Option<u32>,
    pub seed: u64,
    pub served_model_name: String,
    /// Wall time = modelled time × this (0 = as fast as possible).
    pub time_scale: f64,
    pub host: String,
    /// 0 = any free port.
    pub port: u16,
    /// Runtime threads (1 = a current-thread runtime: one core).
    pub threads: usize,
    /// Chance that a request offering tools with `tool_choice` auto is answered with tool calls
    /// (`tools.rs`; the defaults' sources are in docs/sim-engine.md).
    pub tool_call_probability: f64,
    /// Most tool calls in one answer.
    pub max_parallel_tool_calls: u32,
    /// Mean number of tool calls in a tool answer (1 + a geometric count).
    pub mean_parallel_tool_calls: f64,
    /// Median size of a call's argument text, in tokens (lognormal).
    pub tool_argument_tokens: u32,
    /// Engines behind one HTTP front (`fleet` module docs): each its own scheduler, KV cache and
    /// modelled compute, as N separate GPUs. 1 = one engine, no router in the path.
    pub replicas: u32,
    /// How the front picks a replica when `replicas` > 1: "round-robin", "session", "prefix" or
    /// "least-loaded" (`replay_core::route::Policy`).
    pub router: String,
    /// The request header whose value is a request's session (the session router's key).
    pub session_header: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            profile: DEFAULT_PROFILE.to_string(),
            tokenizer: None,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            enable_prefix_caching: true,
            gpu_memory_utilization: 0.9,
            block_size: 16,
            scheduling_policy: "fcfs".into(),
            long_prefill_token_threshold: 0,
            speculative_config: None,
            kv_cache_dtype: "auto".into(),
            max_model_len: None,
            seed: 0,
            served_model_name: "sim".into(),
            time_scale: 1.0,
            host: "127.0.0.1".into(),
            port: 0,
            threads: 1,
            tool_call_probability: 0.97,
            max_parallel_tool_calls: 8,
            mean_parallel_tool_calls: 1.5,
            tool_argument_tokens: 40,
            replicas: 1,
            router: "round-robin".into(),
            session_header: "x-session-id".into(),
        }
    }
}

/// A validated config: the profile, scheduler knobs and the KV capacity they give.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub config: EngineConfig,
    pub profile: Profile,
    pub scheduler: SchedulerConfig,
    pub num_blocks: u32,
    pub max_model_len: u32,
    /// Bytes of one K or V element (2 for auto on bf16 profiles, 1 for fp8).
    pub kv_elem_bytes: f64,
    /// 0, or a lossy knob's perturbation of the generated tokens.
    pub content_salt: u64,
    /// When and how the engine answers with tool calls.
    pub tools: ToolPolicy,
    /// How a fleet's front routes (`replicas` > 1).
    pub router: RoutePolicy,
}

impl EngineConfig {
    /// This config as the JSON object `from_json` reads (every knob, by its snake_case name).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an EngineConfig is plain data")
    }

    /// Parse a JSON object of knobs (missing ones take their defaults).
    pub fn from_json(text: &str) -> Result<EngineConfig, SimError> {
        if text.trim().is_empty() {
            return Ok(EngineConfig::default());
        }
        serde_json::from_str(text).map_err(|e| {
            let msg = e.to_string();
            // serde names the field in its message ("unknown field `x`", "invalid type ... for `y`")
            SimError::config(
                "config",
                msg.lines().next().unwrap_or("invalid").to_string(),
            )
        })
    }

    /// Validate every knob, load the profile and size the KV cache.
    pub fn resolve(&self) -> Result<Resolved, SimError> {
        let c = self;
        if c.max_num_seqs < 1 {
            return Err(SimError::config("--max-num-seqs", "must be >= 1"));
        }
        if c.max_num_batched_tokens < c.max_num_seqs {
            return Err(SimError::config(
                "--max-num-batched-tokens",
                format!(
                    "({}) must be >= --max-num-seqs ({})",
                    c.max_num_batched_tokens, c.max_num_seqs
                ),
            ));
        }
        if !(c.gpu_memory_utilization > 0.0 && c.gpu_memory_utilization <= 1.0) {
            return Err(SimError::config(
                "--gpu-memory-utilization",
                format!("must be in (0, 1], got {}", c.gpu_memory_utilization),
            ));
        }
        if !(1..=1024).contains(&c.block_size) {
            return Err(SimError::config(
                "--block-size",
                format!("must be in [1, 1024], got {}", c.block_size),
            ));
        }
        let policy = match c.scheduling_policy.as_str() {
            "fcfs" => Policy::Fcfs,
            "priority" => Policy::Priority,
            other => {
                return Err(SimError::config(
                    "--scheduling-policy",
                    format!("must be fcfs or priority, got '{other}'"),
                ))
            }
        };
        if !(c.time_scale.is_finite() && c.time_scale >= 0.0) {
            return Err(SimError::config(
                "--time-scale",
                format!("must be >= 0, got {}", c.time_scale),
            ));
        }
        if c.served_model_name.trim().is_empty() {
            return Err(SimError::config("--served-model-name", "must not be empty"));
        }
        if c.threads < 1 {
            return Err(SimError::config("--threads", "must be >= 1"));
        }
        if !(1..=MAX_REPLICAS).contains(&c.replicas) {
            return Err(SimError::config(
                "--replicas",
                format!("must be in [1, {MAX_REPLICAS}], got {}", c.replicas),
            ));
        }
        let router: RoutePolicy = c.router.parse().map_err(|_| {
            SimError::config(
                "--router",
                format!(
                    "must be round-robin, session, prefix or least-loaded, got '{}'",
                    c.router
                ),
            )
        })?;
        if http::HeaderName::from_bytes(c.session_header.as_bytes()).is_err() {
            return Err(SimError::config(
                "--session-header",
                format!("'{}' is not an HTTP header name", c.session_header),
            ));
        }
        let tools = ToolPolicy::from_config(c)?;
        let profile = Profile::load(&c.profile)?;
        let (kv_elem_bytes, content_salt) = match c.kv_cache_dtype.as_str() {
            "auto" => (profile.kv_bytes_per_elem, 0),
            "fp8" | "fp8_e4m3" => (1.0, 0xF8E4_3000),
            "fp8_e5m2" => (1.0, 0xF8E5_2000),
            other => {
                return Err(SimError::config(
                    "--kv-cache-dtype",
                    format!("must be auto, fp8, fp8_e4m3 or fp8_e5m2, got '{other}'"),
                ))
            }
        };
        let blocks = profile.kv_blocks(c.gpu_memory_utilization, c.block_size, kv_elem_bytes);
        if blocks == 0 {
            return Err(SimError::config(
                "--gpu-memory-utilization",
                format!(
                    "{} of {} GiB leaves no room for the KV cache after {:.1} GiB of weights ({})",
                    c.gpu_memory_utilization,
                    profile.device_memory_gib * profile.tensor_parallel as f64,
                    profile.weight_bytes() / (1u64 << 30) as f64,
                    profile.name
                ),
            ));
        }
        let num_blocks = blocks.min(u32::MAX as u64 / 2) as u32;
        let max_model_len = c.max_model_len.unwrap_or(profile.max_model_len);
        if max_model_len < 1 || max_model_len > profile.max_model_len {
            return Err(SimError::config(
                "--max-model-len",
                format!(
                    "must be in [1, {}] for {}, got {max_model_len}",
                    profile.max_model_len, profile.name
                ),
            ));
        }
        let capacity = num_blocks as u64 * c.block_size as u64;
        if (max_model_len as u64) > capacity {
            return Err(SimError::config(
                "--max-model-len",
                format!(
                    "{max_model_len} is more than the KV cache holds ({capacity} tokens in {num_blocks} blocks); \
                     raise --gpu-memory-utilization or lower --max-model-len"
                ),
            ));
        }
        let spec = c
            .speculative_config
            .as_ref()
            .filter(|v| !v.is_null())
            .map(NgramConfig::from_json)
            .transpose()?;
        let scheduler = SchedulerConfig {
            max_num_seqs: c.max_num_seqs,
            max_num_batched_tokens: c.max_num_batched_tokens,
            long_prefill_token_threshold: c.long_prefill_token_threshold,
            policy,
            spec,
            eos_token: u32::MAX,
        };
        Ok(Resolved {
            config: c.clone(),
            profile,
            scheduler,
            num_blocks,
            max_model_len,
            kv_elem_bytes,
            content_salt,
            tools,
            router,
        })
    }
}

impl Resolved {
    pub fn cache_info(&self) -> CacheInfo {
        CacheInfo {
            block_size: self.config.block_size,
            num_gpu_blocks: self.num_blocks as u64,
            enable_prefix_caching: self.config.enable_prefix_caching,
            cache_dtype: self.config.kv_cache_dtype.clone(),
            gpu_memory_utilization: self.config.gpu_memory_utilization,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(json: &str) -> Result<Resolved, SimError> {
        EngineConfig::from_json(json)?.resolve()
    }

    #[test]
    fn defaults_resolve() {
        let r = resolve("{}").unwrap();
        // the default profile serves 128k contexts, and its KV cache holds one
        assert_eq!(r.max_model_len, 131072);
        assert!(r.num_blocks as u64 * 16 >= 131072 && r.num_blocks > 20_000);
        let old = resolve(r#"{"profile":"a100-80g/llama-3-8b"}"#).unwrap();
        assert_eq!((old.max_model_len, old.num_blocks), (8192, r.num_blocks));
        let qwen = resolve(r#"{"profile":"h100-80g/qwen3-4b-2507"}"#).unwrap();
        assert_eq!(qwen.max_model_len, 262144);
        // 128k needs more KV than a low utilization leaves, and says so (as vLLM does)
        let e = resolve(r#"{"gpu_memory_utilization":0.35}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--max-model-len") && e.contains("131072"), "{e}");
        assert!(resolve(r#"{"gpu_memory_utilization":0.35,"max_model_len":8192}"#).is_ok());
        assert_eq!(r.scheduler.policy, Policy::Fcfs);
        assert!(r.scheduler.spec.is_none());
    }

    #[test]
    fn fp8_doubles_blocks_and_changes_outputs() {
        let auto = resolve("{}").unwrap();
        let fp8 = resolve(r#"{"kv_cache_dtype":"fp8"}"#).unwrap();
        assert!((fp8.num_blocks as f64 / auto.num_blocks as f64 - 2.0).abs() < 0.01);
        assert_ne!(fp8.content_salt, auto.content_salt);
    }

    #[test]
    fn speculative_config_parses_like_vllm() {
        let r = resolve(r#"{"speculative_config":{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":3}}"#).unwrap();
        let s = r.scheduler.spec.unwrap();
        assert_eq!(
            (
                s.num_speculative_tokens,
                s.prompt_lookup_max,
                s.prompt_lookup_min
            ),
            (4, 3, 3)
        );
        let from_string = resolve(
            r#"{"speculative_config":"{\"method\":\"ngram\",\"num_speculative_tokens\":2}"}"#,
        )
        .unwrap();
        assert_eq!(from_string.scheduler.spec.unwrap().prompt_lookup_max, 5);
    }

    #[test]
    fn bad_knobs_name_their_flag() {
        for (json, flag) in [
            (r#"{"max_num_seqs":0}"#, "--max-num-seqs"),
            (
                r#"{"max_num_seqs":64,"max_num_batched_tokens":32}"#,
                "--max-num-batched-tokens",
            ),
            (
                r#"{"gpu_memory_utilization":1.5}"#,
                "--gpu-memory-utilization",
            ),
            (
                r#"{"gpu_memory_utilization":0.1}"#,
                "--gpu-memory-utilization",
            ),
            (r#"{"block_size":0}"#, "--block-size"),
            (r#"{"scheduling_policy":"lifo"}"#, "--scheduling-policy"),
            (r#"{"kv_cache_dtype":"int4"}"#, "--kv-cache-dtype"),
            (r#"{"max_model_len":200000}"#, "--max-model-len"),
            (r#"{"time_scale":-1}"#, "--time-scale"),
            (
                r#"{"speculative_config":{"method":"eagle","num_speculative_tokens":2}}"#,
                "--speculative-config",
            ),
            (
                r#"{"speculative_config":{"method":"ngram"}}"#,
                "--speculative-config",
            ),
            (
                r#"{"speculative_config":{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_min":4,"prompt_lookup_max":2}}"#,
                "--speculative-config",
            ),
            (r#"{"profile":"tpu/unknown"}"#, "tpu/unknown"),
            (r#"{"max_num_seq":3}"#, "max_num_seq"),
            (
                r#"{"tool_call_probability":1.5}"#,
                "--tool-call-probability",
            ),
            (
                r#"{"max_parallel_tool_calls":0}"#,
                "--max-parallel-tool-calls",
            ),
            (
                r#"{"max_parallel_tool_calls":2,"mean_parallel_tool_calls":3}"#,
                "--mean-parallel-tool-calls",
            ),
            (r#"{"tool_argument_tokens":0}"#, "--tool-argument-tokens"),
            (r#"{"replicas":0}"#, "--replicas"),
            (r#"{"replicas":2,"router":"random"}"#, "--router"),
            (r#"{"session_header":"bad header"}"#, "--session-header"),
        ] {
            let e = resolve(json).unwrap_err().to_string();
            assert!(e.contains(flag), "{json}: {e}");
        }
        // a cache too small for one max-length request is refused, like vLLM
        let e = resolve(r#"{"profile":"l4/qwen2-7b","gpu_memory_utilization":0.7}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--max-model-len") || e.contains("--gpu-memory-utilization"),
            "{e}"
        );
    }
}
