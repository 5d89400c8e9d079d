//! Hardware + model profiles: what one named accelerator running one named model looks like to
//! the cost model (`cost.rs`) and to the KV-capacity formula.
//!
//! Owns `Profile`, the shipped presets (`PROFILE_NAMES`) and loading a custom profile from a JSON
//! file. A JSON profile is a flat object of the fields below; with `"base": "<preset name>"` it
//! starts from that preset and overrides only the fields it names (so a calibration can fit just
//! the efficiencies and overheads). Unknown fields are refused, so a typo cannot go unnoticed.
//!
//! | field | meaning |
//! |---|---|
//! | `name` | label shown in /v1/models and /metrics |
//! | `device_memory_gib` | memory of ONE device, GiB |
//! | `peak_tflops` | dense bf16 peak of one device, TFLOP/s |
//! | `memory_bandwidth_gbs` | memory bandwidth of one device, GB/s |
//! | `tensor_parallel` | devices the model is sharded over (memory, FLOP/s and bandwidth add up) |
//! | `reserved_memory_gib` | per-device memory neither weights nor KV (activations, graphs, runtime) |
//! | `params_b` | parameters, billions |
//! | `weight_bytes_per_param` | 2 for bf16 weights, 1 for fp8/int8, ~0.56 for 4-bit |
//! | `num_layers`, `hidden_size`, `num_kv_heads`, `head_dim` | model shape (KV size, attention FLOPs) |
//! | `num_attention_heads` | query heads; attention FLOPs use heads × head_dim (0: `hidden_size`) |
//! | `kv_bytes_per_elem` | bytes of one K or V element with `--kv-cache-dtype auto` (fp8 is 1) |
//! | `max_model_len` | default `--max-model-len` |
//! | `compute_efficiency` | achieved share of peak FLOP/s (MFU) |
//! | `memory_efficiency` | achieved share of peak bandwidth |
//! | `step_overhead_ms` | fixed cost of one engine step (scheduling, launch, sampling) |
//! | `per_seq_overhead_us` | extra cost per sequence in a step |
//! | `request_overhead_ms` | front-end time per request before it is scheduled, one request at a time |
//! | `interconnect_gbs`, `allreduce_latency_us` | tensor-parallel all-reduce bandwidth and latency |
//! | `instant` | every step takes no time (for fast tests) |

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::SimError;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// One accelerator + model pairing; see the module docs for each field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub device_memory_gib: f64,
    pub peak_tflops: f64,
    pub memory_bandwidth_gbs: f64,
    #[serde(default = "one")]
    pub tensor_parallel: u32,
    #[serde(default)]
    pub reserved_memory_gib: f64,
    pub params_b: f64,
    #[serde(default = "two")]
    pub weight_bytes_per_param: f64,
    pub num_layers: u32,
    pub hidden_size: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
    #[serde(default)]
    pub num_attention_heads: u32,
    #[serde(default = "two")]
    pub kv_bytes_per_elem: f64,
    pub max_model_len: u32,
    #[serde(default = "half")]
    pub compute_efficiency: f64,
    #[serde(default = "eighty")]
    pub memory_efficiency: f64,
    #[serde(default)]
    pub step_overhead_ms: f64,
    #[serde(default)]
    pub per_seq_overhead_us: f64,
    #[serde(default)]
    pub request_overhead_ms: f64,
    #[serde(default)]
    pub interconnect_gbs: f64,
    #[serde(default)]
    pub allreduce_latency_us: f64,
    #[serde(default)]
    pub instant: bool,
}

fn one() -> u32 {
    1
}
fn two() -> f64 {
    2.0
}
fn half() -> f64 {
    0.5
}
fn eighty() -> f64 {
    0.8
}

/// The shipped presets, by name (the default first).
pub const PROFILE_NAMES: [&str; 7] = [
    "a100-80g/llama-3.1-8b",
    "h100-80g/qwen3-4b-2507",
    "a100-80g/llama-3-8b",
    "h100-80g/llama-3-70b-tp4",
    "l4/qwen2-7b",
    "cpu/tiny",
    "instant",
];

/// The default `--profile`.
pub const DEFAULT_PROFILE: &str = "a100-80g/llama-3.1-8b";

#[allow(clippy::too_many_arguments)]
fn preset(
    name: &str,
    device: (f64, f64, f64, u32, f64),
    model: (f64, u32, u32, u32, u32, u32, u32),
    efficiency: (f64, f64),
    overhead: (f64, f64),
    interconnect: (f64, f64),
) -> Profile {
    let (mem, tflops, bw, tp, reserved) = device;
    let (params_b, layers, hidden, heads, kv_heads, head_dim, max_len) = model;
    Profile {
        name: name.to_string(),
        device_memory_gib: mem,
        peak_tflops: tflops,
        memory_bandwidth_gbs: bw,
        tensor_parallel: tp,
        reserved_memory_gib: reserved,
        params_b,
        weight_bytes_per_param: 2.0,
        num_layers: layers,
        hidden_size: hidden,
        num_kv_heads: kv_heads,
        head_dim,
        num_attention_heads: heads,
        kv_bytes_per_elem: 2.0,
        max_model_len: max_len,
        compute_efficiency: efficiency.0,
        memory_efficiency: efficiency.1,
        step_overhead_ms: overhead.0,
        per_seq_overhead_us: overhead.1,
        request_overhead_ms: 0.0,
        interconnect_gbs: interconnect.0,
        allreduce_latency_us: interconnect.1,
        instant: false,
    }
}

impl Profile {
    /// A shipped preset (see `PROFILE_NAMES`), or None.
    pub fn named(name: &str) -> Option<Profile> {
        // device: (GiB, dense bf16 TFLOP/s, GB/s, tensor parallel, reserved GiB per device)
        // model: (params 1e9, layers, hidden, query heads, kv heads, head dim, max_model_len)
        // Sources of every figure: docs/sim-engine.md, "Shipped profiles".
        let p = match name {
            "a100-80g/llama-3.1-8b" => preset(
                name,
                (80.0, 312.0, 2039.0, 1, 2.0),
                (8.03, 32, 4096, 32, 8, 128, 131072),
                (0.5, 0.8),
                (1.5, 10.0),
                (0.0, 0.0),
            ),
            "h100-80g/qwen3-4b-2507" => preset(
                name,
                (80.0, 989.0, 3350.0, 1, 2.0),
                (4.02, 36, 2560, 32, 8, 128, 262144),
                (0.5, 0.8),
                (1.5, 10.0),
                (0.0, 0.0),
            ),
            "a100-80g/llama-3-8b" => preset(
                name,
                (80.0, 312.0, 2039.0, 1, 2.0),
                (8.03, 32, 4096, 32, 8, 128, 8192),
                (0.5, 0.8),
                (1.5, 10.0),
                (0.0, 0.0),
            ),
            "h100-80g/llama-3-70b-tp4" => preset(
                name,
                (80.0, 989.0, 3350.0, 4, 3.0),
                (70.6, 80, 8192, 64, 8, 128, 8192),
                (0.45, 0.8),
                (2.5, 10.0),
                (450.0, 6.0),
            ),
            "l4/qwen2-7b" => preset(
                name,
                (22.5, 121.0, 300.0, 1, 1.0),
                (7.62, 28, 3584, 28, 4, 128, 32768),
                (0.5, 0.8),
                (2.0, 10.0),
                (0.0, 0.0),
            ),
            "cpu/tiny" => preset(
                name,
                (16.0, 1.0, 50.0, 1, 0.5),
                (0.135, 30, 576, 9, 3, 64, 2048),
                (0.3, 0.6),
                (0.5, 20.0),
                (0.0, 0.0),
            ),
            "instant" => Profile {
                name: name.to_string(),
                instant: true,
                ..Profile::named(DEFAULT_PROFILE)?
            },
            _ => return None,
        };
        Some(p)
    }

    /// A preset name, or the path of a JSON profile (see the module docs).
    pub fn load(name_or_path: &str) -> Result<Profile, SimError> {
        if let Some(p) = Profile::named(name_or_path) {
            return Ok(p);
        }
        let path = std::path::Path::new(name_or_path);
        if !(name_or_path.ends_with(".json") || path.is_file()) {
            return Err(SimError::profile(
                name_or_path,
                format!(
                    "unknown (presets: {}; or a path to a profile .json)",
                    PROFILE_NAMES.join(", ")
                ),
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| SimError::profile(name_or_path, format!("cannot read: {e}")))?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| SimError::profile(name_or_path, format!("not JSON: {e}")))?;
        Profile::from_json(name_or_path, value)
    }

    /// Build from a JSON object (optionally `"base": "<preset>"` plus overrides).
    pub fn from_json(label: &str, value: Value) -> Result<Profile, SimError> {
        let Value::Object(mut fields) = value else {
            return Err(SimError::profile(label, "must be a JSON object"));
        };
        let mut merged: Map<String, Value> = Map::new();
        if let Some(base) = fields.remove("base") {
            let base_name = base.as_str().unwrap_or_default().to_string();
            let preset = Profile::named(&base_name).ok_or_else(|| {
                SimError::profile(
                    label,
                    format!("base {base}: not a preset ({})", PROFILE_NAMES.join(", ")),
                )
            })?;
            if let Ok(Value::Object(m)) = serde_json::to_value(preset) {
                merged = m;
            }
        }
        merged.extend(fields);
        merged
            .entry("name")
            .or_insert_with(|| Value::String(label.to_string()));
        let p: Profile = serde_json::from_value(Value::Object(merged))
            .map_err(|e| SimError::profile(label, e.to_string()))?;
        p.validate(label)?;
        Ok(p)
    }

    fn validate(&self, label: &str) -> Result<(), SimError> {
        let positive = [
            ("device_memory_gib", self.device_memory_gib),
            ("peak_tflops", self.peak_tflops),
            ("memory_bandwidth_gbs", self.memory_bandwidth_gbs),
            ("params_b", self.params_b),
            ("weight_bytes_per_param", self.weight_bytes_per_param),
            ("kv_bytes_per_elem", self.kv_bytes_per_elem),
        ];
        for (field, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(SimError::profile(
                    label,
                    format!("{field} must be > 0, got {v}"),
                ));
            }
        }
        for (field, v) in [
            ("compute_efficiency", self.compute_efficiency),
            ("memory_efficiency", self.memory_efficiency),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(SimError::profile(
                    label,
                    format!("{field} must be in (0, 1], got {v}"),
                ));
            }
        }
        let non_negative = [
            ("reserved_memory_gib", self.reserved_memory_gib),
            ("step_overhead_ms", self.step_overhead_ms),
            ("per_seq_overhead_us", self.per_seq_overhead_us),
            ("request_overhead_ms", self.request_overhead_ms),
            ("interconnect_gbs", self.interconnect_gbs),
            ("allreduce_latency_us", self.allreduce_latency_us),
        ];
        for (field, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(SimError::profile(
                    label,
                    format!("{field} must be >= 0, got {v}"),
                ));
            }
        }
        let shape = [
            ("tensor_parallel", self.tensor_parallel),
            ("num_layers", self.num_layers),
            ("hidden_size", self.hidden_size),
            ("num_kv_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
            ("max_model_len", self.max_model_len),
        ];
        for (field, v) in shape {
            if v == 0 {
                return Err(SimError::profile(label, format!("{field} must be >= 1")));
            }
        }
        Ok(())
    }

    /// Bytes of all weights (over all tensor-parallel devices).
    pub fn weight_bytes(&self) -> f64 {
        self.params_b * 1e9 * self.weight_bytes_per_param
    }

    /// Width of the attention's query projection, heads × head dim (`hidden_size` when
    /// `num_attention_heads` is 0): QKᵀ and AV cost 2 FLOPs per element each, per layer.
    pub fn attention_width(&self) -> f64 {
        if self.num_attention_heads > 0 {
            self.num_attention_heads as f64 * self.head_dim as f64
        } else {
            self.hidden_size as f64
        }
    }

    /// KV bytes per token (K and V, all layers) for an element size of `elem_bytes`.
    pub fn kv_bytes_per_token(&self, elem_bytes: f64) -> f64 {
        2.0 * self.num_layers as f64 * self.num_kv_heads as f64 * self.head_dim as f64 * elem_bytes
    }

    /// KV blocks that fit: (utilization × device memory − reserved) × devices − weights, over
    /// (block size × KV bytes per token); 0 when the weights do not fit.
    pub fn kv_blocks(&self, gpu_memory_utilization: f64, block_size: u32, elem_bytes: f64) -> u64 {
        let per_device = gpu_memory_utilization * self.device_memory_gib - self.reserved_memory_gib;
        let budget = per_device * GIB * self.tensor_parallel as f64 - self.weight_bytes();
        let block = block_size as f64 * self.kv_bytes_per_token(elem_bytes);
        if budget <= 0.0 || block <= 0.0 {
            return 0;
        }
        (budget / block).floor() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_load_and_validate() {
        for name in PROFILE_NAMES {
            let p = Profile::load(name).unwrap();
            p.validate(name).unwrap();
            assert_eq!(p.name, name);
        }
        assert!(Profile::load("nope").is_err());
        assert_eq!(PROFILE_NAMES[0], DEFAULT_PROFILE);
    }

    #[test]
    fn every_preset_holds_one_max_length_request_at_the_default_utilization() {
        // the rule config.rs applies (max_model_len <= KV capacity), so a preset always starts
        for name in PROFILE_NAMES {
            let p = Profile::named(name).unwrap();
            let tokens = p.kv_blocks(0.9, 16, p.kv_bytes_per_elem) * 16;
            assert!(tokens >= p.max_model_len as u64, "{name}: {tokens} tokens");
        }
        let long = Profile::named(DEFAULT_PROFILE).unwrap();
        assert_eq!(long.max_model_len, 131072);
        // the 128k default is the old default's model with a longer context, nothing else
        let old = Profile::named("a100-80g/llama-3-8b").unwrap();
        assert_eq!(old.max_model_len, 8192);
        assert_eq!(
            Profile {
                name: old.name.clone(),
                max_model_len: 8192,
                ..long.clone()
            },
            old
        );
        let qwen = Profile::named("h100-80g/qwen3-4b-2507").unwrap();
        assert_eq!(qwen.max_model_len, 262144);
        // 2 x 36 layers x 8 KV heads x 128 dims x 2 bytes = 144 KiB per token
        assert_eq!(qwen.kv_bytes_per_token(2.0), 147456.0);
        assert!(Profile::load("/no/such/profile.json").is_err());
    }

    #[test]
    fn capacity_math() {
        let p = Profile::named("a100-80g/llama-3-8b").unwrap();
        // 2 (K,V) x 32 layers x 8 heads x 128 dims x 2 bytes = 128 KiB per token
        assert_eq!(p.kv_bytes_per_token(2.0), 131072.0);
        let blocks = p.kv_blocks(0.9, 16, 2.0);
        let expect = ((0.9 * 80.0 - 2.0) * GIB - 8.03e9 * 2.0) / (16.0 * 131072.0);
        assert_eq!(blocks, expect.floor() as u64);
        // fp8 KV: half the bytes per token, (about) twice the blocks
        assert_eq!(p.kv_blocks(0.9, 16, 1.0), (2.0 * expect).floor() as u64);
        // weights do not fit
        assert_eq!(p.kv_blocks(0.2, 16, 2.0), 0);
        // tensor parallel adds the devices' memory
        let h = Profile::named("h100-80g/llama-3-70b-tp4").unwrap();
        assert!(h.kv_blocks(0.9, 16, 2.0) > 20_000);
    }

    #[test]
    fn attention_width_is_query_heads_times_head_dim() {
        // Qwen3-4B: 32 query heads x 128 = 4096, wider than its 2560 hidden size
        let q = Profile::named("h100-80g/qwen3-4b-2507").unwrap();
        assert_eq!(q.attention_width(), 4096.0);
        // the other presets' query width equals their hidden size
        for name in PROFILE_NAMES {
            let p = Profile::named(name).unwrap();
            if p.name != q.name {
                assert_eq!(p.attention_width(), p.hidden_size as f64, "{name}");
            }
        }
        // num_attention_heads 0 (a JSON profile without it) prices attention by the hidden size
        let v =
            serde_json::json!({"base": "cpu/tiny", "num_attention_heads": 0, "hidden_size": 1000});
        assert_eq!(
            Profile::from_json("w.json", v).unwrap().attention_width(),
            1000.0
        );
    }

    #[test]
    fn json_profile_with_base_and_overrides() {
        let v =
            serde_json::json!({"base": "l4/qwen2-7b", "compute_efficiency": 0.3, "name": "fit"});
        let p = Profile::from_json("fit.json", v).unwrap();
        assert_eq!(
            (p.name.as_str(), p.compute_efficiency, p.num_layers),
            ("fit", 0.3, 28)
        );
        let bad = serde_json::json!({"base": "l4/qwen2-7b", "compute_eficiency": 0.3});
        let e = Profile::from_json("x.json", bad).unwrap_err().to_string();
        assert!(e.contains("compute_eficiency"), "{e}");
        let incomplete = serde_json::json!({"peak_tflops": 1.0});
        assert!(Profile::from_json("y.json", incomplete).is_err());
        let zero = serde_json::json!({"base": "cpu/tiny", "memory_efficiency": 0.0});
        assert!(Profile::from_json("z.json", zero).is_err());
    }
}
