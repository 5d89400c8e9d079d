//! The step cost model: how long one engine iteration takes on a profile's hardware.
//!
//! `step = overhead + per_seq × seqs + max(compute, memory) + all-reduce`, where
//!
//! * compute = FLOPs / (devices × peak × compute_efficiency), FLOPs = Σ over the step's sequences
//!   of 2 × params × new tokens (the matmuls) + 4 × layers × (query heads × head dim) × Σ
//!   attended positions (QKᵀ and AV, 2 FLOPs per multiply-add each; a chunk of n new tokens
//!   after c cached ones attends n·c + n(n+1)/2 positions, so a prefill's attention grows with
//!   the square of its length and a decode's with its context);
//! * memory = bytes / (devices × bandwidth × memory_efficiency), bytes = all weights once per
//!   step + the KV read (Σ context lengths × KV bytes per token) + the KV written for new tokens;
//! * all-reduce (tensor parallel only) = 2 per layer, each its latency plus the step's
//!   activations (tokens × hidden × 2 bytes × 2(tp−1)/tp) over the interconnect.
//!
//! So decode is memory-bound at small batches (the weights dominate) and grows with batch size
//! and context length; big prefills are compute-bound. A sequence verifying k speculative tokens
//! adds k tokens of compute but reads the weights and its KV once, so speculation is nearly free
//! while memory-bound and costs real time once compute-bound.

use crate::profile::Profile;

/// One sequence's share of a step: `new_tokens` computed after `context` already in the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqWork {
    pub new_tokens: u32,
    pub context: u32,
}

/// The parts of one step's modelled time, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepCost {
    pub total_s: f64,
    pub compute_s: f64,
    pub memory_s: f64,
    pub overhead_s: f64,
    pub comm_s: f64,
}

/// A profile's constants, resolved once for a KV element size.
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    instant: bool,
    flops_per_token: f64,
    attn_flops_per_position: f64,
    flops_per_s: f64,
    weight_bytes: f64,
    kv_bytes_per_token: f64,
    bytes_per_s: f64,
    step_overhead_s: f64,
    per_seq_overhead_s: f64,
    allreduces: f64,
    allreduce_latency_s: f64,
    comm_bytes_per_token: f64,
    interconnect_bytes_per_s: f64,
}

impl CostModel {
    /// The model for `profile` with KV elements of `kv_elem_bytes` (2 for bf16, 1 for fp8).
    pub fn new(profile: &Profile, kv_elem_bytes: f64) -> CostModel {
        let tp = profile.tensor_parallel as f64;
        let (allreduces, comm_bytes_per_token) = if profile.tensor_parallel > 1 {
            (
                2.0 * profile.num_layers as f64,
                profile.hidden_size as f64 * 2.0 * 2.0 * (tp - 1.0) / tp,
            )
        } else {
            (0.0, 0.0)
        };
        CostModel {
            instant: profile.instant,
            flops_per_token: 2.0 * profile.params_b * 1e9,
            attn_flops_per_position: 4.0 * profile.num_layers as f64 * profile.attention_width(),
            flops_per_s: tp * profile.peak_tflops * 1e12 * profile.compute_efficiency,
            weight_bytes: profile.weight_bytes(),
            kv_bytes_per_token: profile.kv_bytes_per_token(kv_elem_bytes),
            bytes_per_s: tp * profile.memory_bandwidth_gbs * 1e9 * profile.memory_efficiency,
            step_overhead_s: profile.step_overhead_ms * 1e-3,
            per_seq_overhead_s: profile.per_seq_overhead_us * 1e-6,
            allreduces,
            allreduce_latency_s: profile.allreduce_latency_us * 1e-6,
            comm_bytes_per_token,
            interconnect_bytes_per_s: profile.interconnect_gbs * 1e9,
        }
    }

    /// The modelled time of one step over these sequences (zero for an empty step).
    pub fn step(&self, work: impl IntoIterator<Item = SeqWork>) -> StepCost {
        let (mut seqs, mut tokens, mut positions, mut kv_tokens) = (0u64, 0f64, 0f64, 0f64);
        for w in work {
            let (n, c) = (w.new_tokens as f64, w.context as f64);
            seqs += 1;
            tokens += n;
            positions += n * c + n * (n + 1.0) / 2.0;
            kv_tokens += c + n;
        }
        if self.instant || seqs == 0 {
            return StepCost::default();
        }
        let flops = self.flops_per_token * tokens + self.attn_flops_per_position * positions;
        let compute_s = flops / self.flops_per_s;
        let memory_s = (self.weight_bytes + kv_tokens * self.kv_bytes_per_token) / self.bytes_per_s;
        let overhead_s = self.step_overhead_s + self.per_seq_overhead_s * seqs as f64;
        let comm_s = if self.allreduces > 0.0 {
            let bw = if self.interconnect_bytes_per_s > 0.0 {
                tokens * self.comm_bytes_per_token / self.interconnect_bytes_per_s
            } else {
                0.0
            };
            self.allreduces * self.allreduce_latency_s + bw
        } else {
            0.0
        };
        StepCost {
            total_s: overhead_s + compute_s.max(memory_s) + comm_s,
            compute_s,
            memory_s,
            overhead_s,
            comm_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> CostModel {
        CostModel::new(&Profile::named(name).unwrap(), 2.0)
    }

    /// `seqs` equal sequences, each computing `new_tokens` after `context`.
    fn batch(seqs: u32, new_tokens: u32, context: u32) -> Vec<SeqWork> {
        vec![
            SeqWork {
                new_tokens,
                context
            };
            seqs as usize
        ]
    }

    fn decode(seqs: u32, context: u32) -> Vec<SeqWork> {
        batch(seqs, 1, context)
    }

    #[test]
    fn decode_is_memory_bound_at_small_batch_and_grows() {
        let m = model("a100-80g/llama-3-8b");
        let one = m.step(decode(1, 512));
        assert!(one.memory_s > one.compute_s);
        // weights 16 GB over ~1.6 TB/s: about 10 ms
        assert!((0.009..0.013).contains(&one.memory_s), "{one:?}");
        let b64 = m.step(decode(64, 512));
        let b256 = m.step(decode(256, 512));
        assert!(one.total_s < b64.total_s && b64.total_s < b256.total_s);
        // per-token cost falls with batch size (weights are shared)
        assert!(b256.total_s / 256.0 < one.total_s / 8.0);
        // longer contexts cost more
        assert!(m.step(decode(64, 4096)).total_s > b64.total_s);
    }

    #[test]
    fn big_prefill_is_compute_bound() {
        let m = model("a100-80g/llama-3-8b");
        let p = m.step([SeqWork {
            new_tokens: 4096,
            context: 0,
        }]);
        assert!(p.compute_s > 5.0 * p.memory_s, "{p:?}");
        // ~4096 x 16 GFLOP over ~156 TFLOP/s: ~0.42 s plus attention
        assert!((0.35..0.6).contains(&p.total_s), "{p:?}");
        // a prefix-cache hit (context instead of new tokens) is far cheaper
        let hit = m.step([SeqWork {
            new_tokens: 96,
            context: 4000,
        }]);
        assert!(hit.total_s < p.total_s / 5.0);
    }

    /// The modelled time of prefilling `tokens` after `cached` ones in chunks of `chunk`, one
    /// step per chunk, as the scheduler runs a long prompt under its step budget.
    fn prefill(m: &CostModel, cached: u32, tokens: u32, chunk: u32) -> f64 {
        let mut done = 0;
        let mut total = 0.0;
        while done < tokens {
            let n = chunk.min(tokens - done);
            total += m
                .step([SeqWork {
                    new_tokens: n,
                    context: cached + done,
                }])
                .total_s;
            done += n;
        }
        total
    }

    #[test]
    fn long_prefills_cost_super_linearly_as_attention_does() {
        for name in ["a100-80g/llama-3.1-8b", "h100-80g/qwen3-4b-2507"] {
            let m = model(name);
            // 8x the tokens: the matmuls and overheads cost 8x, attention 64x
            let short = prefill(&m, 0, 16_384, 8192);
            let long = prefill(&m, 0, 131_072, 8192);
            assert!(long > 12.0 * short, "{name}: {short} s -> {long} s");
            // the same 8192-token chunk costs more the more context it attends to
            let first = m.step([SeqWork {
                new_tokens: 8192,
                context: 0,
            }]);
            let late = m.step([SeqWork {
                new_tokens: 8192,
                context: 122_880,
            }]);
            assert!(late.compute_s > 3.0 * first.compute_s, "{first:?} {late:?}");
        }
        // Llama-3.1-8B at 128k: attention is 4 x 32 x 4096 x 131072^2 / 2 = 4.5e15 FLOPs, more
        // than the 2 x 8.03e9 x 131072 = 2.1e15 of the matmuls; over 156 TFLOP/s: ~42 s
        let whole = prefill(&model("a100-80g/llama-3.1-8b"), 0, 131_072, 8192);
        assert!((38.0..48.0).contains(&whole), "{whole}");
        // MInference 1.0 (NeurIPS 2024): "it takes 30 minutes for an 8B LLM to process a prompt
        // of 1M tokens ... on a single A100 GPU"; the same shape and device here, at its 0.5 MFU
        let million = prefill(&model("a100-80g/llama-3.1-8b"), 0, 1_000_000, 8192);
        assert!((1500.0..2100.0).contains(&million), "{million} s");
    }

    #[test]
    fn a_cached_150k_agent_context_costs_far_less_than_a_cold_one() {
        // an agent turn: 148k tokens of history already in the KV cache, 2k new ones
        let m = model("h100-80g/qwen3-4b-2507");
        let cold = prefill(&m, 0, 150_000, 8192);
        let hit = prefill(&m, 148_000, 2000, 8192);
        assert!(hit < cold / 20.0, "hit {hit} s, cold {cold} s");
        // but the hit still pays attention over its whole context
        let short_hit = prefill(&m, 1000, 2000, 8192);
        assert!(hit > 5.0 * short_hit, "{short_hit} s -> {hit} s");
        // and decoding at that context reads its KV each step: 150k x 144 KiB = 22 GB
        let decode_long = m.step(decode(1, 150_000));
        let decode_short = m.step(decode(1, 1000));
        assert!(decode_long.memory_s > 2.0 * decode_short.memory_s);
    }

    #[test]
    fn attention_is_priced_by_query_heads_not_hidden_size() {
        // Qwen3-4B's queries are 32 x 128 = 4096 wide over a 2560 hidden size
        let p = Profile::named("h100-80g/qwen3-4b-2507").unwrap();
        let narrow = CostModel::new(
            &Profile {
                num_attention_heads: 20,
                ..p.clone()
            },
            2.0,
        );
        let wide = CostModel::new(&p, 2.0);
        let work = [SeqWork {
            new_tokens: 8192,
            context: 100_000,
        }];
        let (a, b) = (narrow.step(work).compute_s, wide.step(work).compute_s);
        let matmul = 2.0 * 4.02e9 * 8192.0;
        let positions = 8192.0 * 100_000.0 + 8192.0 * 8193.0 / 2.0;
        let per_s = 989e12 * 0.5;
        let expect = |width: f64| (matmul + 4.0 * 36.0 * width * positions) / per_s;
        assert!((a / expect(2560.0) - 1.0).abs() < 1e-9, "{a}");
        assert!((b / expect(4096.0) - 1.0).abs() < 1e-9, "{b}");
    }

    #[test]
    fn speculation_is_cheap_when_memory_bound_and_costly_when_compute_bound() {
        let m = model("a100-80g/llama-3-8b");
        let plain_small = m.step(decode(4, 512)).total_s;
        let spec_small = m.step(batch(4, 5, 512)).total_s;
        assert!(spec_small < plain_small * 1.1);
        let plain_big = m.step(decode(256, 512)).total_s;
        let spec_big = m.step(batch(256, 5, 512)).total_s;
        assert!(spec_big > plain_big * 2.0);
    }

    #[test]
    fn tensor_parallel_adds_all_reduce_and_instant_is_free() {
        let tp = model("h100-80g/llama-3-70b-tp4").step(decode(8, 256));
        assert!(tp.comm_s > 0.0 && tp.total_s > tp.comm_s);
        assert_eq!(model("instant").step(decode(8, 256)).total_s, 0.0);
        assert_eq!(model("cpu/tiny").step([]).total_s, 0.0);
    }
}
