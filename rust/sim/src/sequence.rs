//! One request's state inside the engine: its tokens, KV blocks, progress and generator.
//!
//! Owns `Sequence`, `SeqParams` and `FinishReason`. `tokens` holds the prompt followed by the
//! output generated so far; `computed` counts the leading tokens whose KV is in the cache (after
//! a preemption it drops to 0 and the sequence is recomputed, as vLLM v1 does).

use crate::kv::hash_block;
use crate::spec::NgramIndex;
use crate::textgen::{output_length, Lexicon, TextGen};

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The model emitted EOS (finish_reason "stop").
    Eos,
    /// A stop string matched (finish_reason "stop").
    StopString,
    /// `max_tokens` reached (finish_reason "length").
    Length,
    /// The client went away.
    Abort,
    /// A tool answer generated all its calls (finish_reason "tool_calls").
    ToolCalls,
}

impl FinishReason {
    /// The OpenAI `finish_reason` (and vLLM's `finished_reason` label).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Eos | FinishReason::StopString => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::ToolCalls => "tool_calls",
        }
    }
}

/// Sampling parameters the engine honours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqParams {
    pub max_tokens: u32,
    pub min_tokens: u32,
    pub ignore_eos: bool,
    /// Lower is served first under `--scheduling-policy priority`.
    pub priority: i64,
}

/// A request inside the engine.
#[derive(Debug, Clone)]
pub struct Sequence {
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    pub max_tokens: u32,
    /// Output length at which the sequence ends (EOS included).
    pub target_len: u32,
    pub priority: i64,
    /// Arrival order (ties broken by it; lower = earlier).
    pub arrival: u64,
    /// Leading tokens whose KV is computed.
    pub computed: usize,
    pub blocks: Vec<u32>,
    /// Chained hashes of the full blocks of `tokens` computed so far.
    pub hashes: Vec<u64>,
    /// Leading blocks already offered to the prefix cache.
    pub registered: usize,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_tokens: Option<u32>,
    pub preemptions: u32,
    pub finished: Option<FinishReason>,
    pub gen: TextGen,
    pub ngram: NgramIndex,
}

impl Sequence {
    /// A new sequence for `prompt`; `content_salt` is 0 unless a lossy knob changes outputs.
    pub fn new(
        prompt: Vec<u32>,
        params: &SeqParams,
        seed: u64,
        content_salt: u64,
        arrival: u64,
    ) -> Sequence {
        let target_len = output_length(
            seed,
            &prompt,
            params.max_tokens,
            params.min_tokens,
            params.ignore_eos,
        );
        let gen = TextGen::new(seed, content_salt, &prompt);
        Sequence {
            prompt_len: prompt.len(),
            tokens: prompt,
            max_tokens: params.max_tokens,
            target_len,
            priority: params.priority,
            arrival,
            computed: 0,
            blocks: Vec::new(),
            hashes: Vec::new(),
            registered: 0,
            cached_tokens: None,
            preemptions: 0,
            finished: None,
            gen,
            ngram: NgramIndex::default(),
        }
    }

    pub fn prompt(&self) -> &[u32] {
        &self.tokens[..self.prompt_len]
    }

    pub fn output(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    pub fn output_len(&self) -> u32 {
        (self.tokens.len() - self.prompt_len) as u32
    }

    /// Tokens still to generate before the sequence ends.
    pub fn left(&self) -> u32 {
        self.target_len.saturating_sub(self.output_len())
    }

    /// Why it ends now, if its output reached its length.
    pub fn natural_finish(&self) -> Option<FinishReason> {
        if self.output_len() < self.target_len {
            None
        } else if self.target_len < self.max_tokens {
            Some(FinishReason::Eos)
        } else {
            Some(FinishReason::Length)
        }
    }

    /// Extend `hashes` to cover the first `blocks` full blocks of `tokens`.
    pub fn hash_blocks(&mut self, blocks: usize, block_size: usize) {
        let blocks = blocks.min(self.tokens.len() / block_size);
        while self.hashes.len() < blocks {
            let i = self.hashes.len();
            let parent = if i == 0 { 0 } else { self.hashes[i - 1] };
            let h = hash_block(parent, &self.tokens[i * block_size..(i + 1) * block_size]);
            self.hashes.push(h);
        }
    }

    /// Generate the next real token and append it.
    pub fn generate(&mut self, lexicon: &Lexicon) -> u32 {
        let t = self.gen.next(&self.tokens[..self.prompt_len], lexicon);
        self.tokens.push(t);
        t
    }
}
