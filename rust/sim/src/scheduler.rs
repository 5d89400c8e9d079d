//! The iteration-level continuous-batching scheduler (after vLLM v1's design).
//!
//! Owns `Scheduler`, `SchedulerConfig`, `Policy`, `StepPlan` and `Emitted`. Each step shares one
//! token budget (`max_num_batched_tokens`):
//!
//! 1. Running sequences first, in admission order: a decode takes 1 token plus its n-gram draft
//!    (if speculation is on), an unfinished prefill its remaining tokens, capped by
//!    `long_prefill_token_threshold` (chunked prefill). KV blocks for the new tokens are allocated
//!    now; when they run out, a victim is preempted (recompute): under fcfs the last admitted,
//!    under priority the one with the largest (priority, arrival). It frees its blocks and goes
//!    back to waiting; when the victim is the sequence being scheduled, it stops there.
//! 2. Then, if nothing was preempted this step, waiting sequences in (priority, arrival) order
//!    (fcfs: arrival) while the budget lasts and fewer than `max_num_seqs` run: the prefix cache
//!    is looked up (at most floor((n−1)/block) blocks hit), and the rest is a prefill chunk; a
//!    sequence whose blocks cannot be allocated waits (and so does everything behind it).
//!
//! After the step's time has passed, `complete` advances each sequence: prefill chunks add to
//! `computed`, and a sequence whose known tokens are all computed generates its next token (a
//! speculating one verifies its draft: it keeps the draft's prefix that matches the real tokens
//! plus one more). Full computed blocks are registered in the prefix cache; finished sequences
//! free their blocks.

use std::collections::BTreeSet;

use crate::kv::BlockPool;
use crate::sequence::{FinishReason, Sequence};
use crate::spec::NgramConfig;
use crate::textgen::Lexicon;

pub type SeqId = u32;

/// `--scheduling-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Fcfs,
    Priority,
}

/// The scheduler's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    /// Largest prefill chunk of one sequence per step (0 = no cap but the budget).
    pub long_prefill_token_threshold: u32,
    pub policy: Policy,
    pub spec: Option<NgramConfig>,
    /// Appended as the last token of a sequence that ends by EOS.
    pub eos_token: u32,
}

/// One sequence's part of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    pub id: SeqId,
    /// Tokens computed this step (draft tokens included).
    pub new_tokens: u32,
    /// Tokens already in the KV cache before this step.
    pub context: u32,
    /// The draft: a range of the sequence's own tokens (start, len).
    pub draft: Option<(usize, usize)>,
}

/// What one step computes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepPlan {
    pub seqs: Vec<Scheduled>,
    pub preempted: Vec<SeqId>,
}

impl StepPlan {
    pub fn num_tokens(&self) -> u32 {
        self.seqs.iter().map(|s| s.new_tokens).sum()
    }
}

/// A sequence that got new tokens (`tokens[from..]`) or ended in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Emitted {
    pub id: SeqId,
    pub from: usize,
    pub finish: Option<FinishReason>,
}

/// Counters since the scheduler started (tokens for the prefix cache, like vLLM).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedStats {
    pub preemptions: u64,
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub spec_drafts: u64,
    pub spec_draft_tokens: u64,
    pub spec_accepted_tokens: u64,
}

/// Waiting and running queues over a block pool; see the module docs.
#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    pool: BlockPool,
    seqs: Vec<Option<Sequence>>,
    free_ids: Vec<SeqId>,
    waiting: BTreeSet<(i64, u64, SeqId)>,
    running: Vec<SeqId>,
    pub stats: SchedStats,
}

impl Scheduler {
    pub fn new(cfg: SchedulerConfig, pool: BlockPool) -> Scheduler {
        Scheduler {
            cfg,
            pool,
            seqs: Vec::new(),
            free_ids: Vec::new(),
            waiting: BTreeSet::new(),
            running: Vec::new(),
            stats: SchedStats::default(),
        }
    }

    pub fn pool_mut(&mut self) -> &mut BlockPool {
        &mut self.pool
    }

    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    pub fn get(&self, id: SeqId) -> &Sequence {
        self.seqs[id as usize].as_ref().expect("live sequence")
    }

    fn seq_mut(&mut self, id: SeqId) -> &mut Sequence {
        self.seqs[id as usize].as_mut().expect("live sequence")
    }

    fn wait_key(&self, id: SeqId) -> (i64, u64, SeqId) {
        let s = self.get(id);
        let priority = if self.cfg.policy == Policy::Priority {
            s.priority
        } else {
            0
        };
        (priority, s.arrival, id)
    }

    /// Queue a new sequence; returns its id.
    pub fn add(&mut self, seq: Sequence) -> SeqId {
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.seqs[id as usize] = Some(seq);
                id
            }
            None => {
                self.seqs.push(Some(seq));
                (self.seqs.len() - 1) as SeqId
            }
        };
        let key = self.wait_key(id);
        self.waiting.insert(key);
        id
    }

    fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.pool.block_size() as usize)
    }

    /// Decide the next step; see the module docs.
    pub fn schedule(&mut self) -> StepPlan {
        let mut plan = StepPlan::default();
        let mut budget = self.cfg.max_num_batched_tokens as usize;
        let threshold = self.cfg.long_prefill_token_threshold as usize;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let spec = self.cfg.spec;
            let seq = self.seqs[id as usize].as_mut().expect("running sequence");
            let context = seq.computed;
            let remaining = seq.tokens.len() - context;
            let mut n = remaining.min(budget);
            if remaining > 1 && threshold > 0 {
                n = n.min(threshold);
            }
            let mut draft = None;
            if let (Some(spec), 1) = (spec, remaining) {
                let limit = (budget - 1).min(seq.left().saturating_sub(1) as usize) as u32;
                draft = seq.ngram.propose(&seq.tokens, &spec, limit);
            }
            let total = n + draft.map_or(0, |d| d.1);
            let have = seq.blocks.len();
            let need = self.blocks_for(context + total).saturating_sub(have);
            let mut self_preempted = false;
            while self.pool.num_free() < need {
                let v = self.pick_victim();
                let victim = self.running[v];
                self.preempt_at(v, &mut plan, &mut budget);
                if victim == id {
                    self_preempted = true;
                    break;
                }
                if v < i {
                    i -= 1;
                }
            }
            if self_preempted {
                continue;
            }
            let new = self.pool.allocate(need).expect("checked free blocks");
            self.seq_mut(id).blocks.extend(new);
            plan.seqs.push(Scheduled {
                id,
                new_tokens: total as u32,
                context: context as u32,
                draft,
            });
            budget -= total;
            i += 1;
        }
        if plan.preempted.is_empty() {
            self.admit(&mut plan, budget);
        }
        plan
    }

    fn admit(&mut self, plan: &mut StepPlan, mut budget: usize) {
        let bs = self.pool.block_size() as usize;
        let threshold = self.cfg.long_prefill_token_threshold as usize;
        let caching = self.pool.caching();
        while budget > 0 && self.running.len() < self.cfg.max_num_seqs as usize {
            let Some(&key) = self.waiting.first() else {
                break;
            };
            let id = key.2;
            let seq = self.seqs[id as usize].as_mut().expect("waiting sequence");
            let len = seq.tokens.len();
            let hits = if caching {
                seq.hash_blocks(len / bs, bs);
                self.pool.lookup(&seq.hashes, (len - 1) / bs)
            } else {
                Vec::new()
            };
            let hit_tokens = hits.len() * bs;
            let mut n = (len - hit_tokens).min(budget);
            if threshold > 0 {
                n = n.min(threshold);
            }
            let need = (hit_tokens + n).div_ceil(bs) - hits.len();
            if !self.pool.can_allocate(&hits, need) {
                break;
            }
            self.pool.touch(&hits);
            let new = self.pool.allocate(need).expect("checked free blocks");
            seq.registered = hits.len();
            seq.blocks = hits;
            seq.blocks.extend(new);
            seq.computed = hit_tokens;
            seq.cached_tokens.get_or_insert(hit_tokens as u32);
            if caching {
                self.stats.prefix_queries += len as u64;
                self.stats.prefix_hits += hit_tokens as u64;
            }
            self.waiting.remove(&key);
            self.running.push(id);
            plan.seqs.push(Scheduled {
                id,
                new_tokens: n as u32,
                context: hit_tokens as u32,
                draft: None,
            });
            budget -= n;
        }
    }

    /// Index in `running` of the sequence to preempt.
    fn pick_victim(&self) -> usize {
        match self.cfg.policy {
            Policy::Fcfs => self.running.len() - 1,
            Policy::Priority => (0..self.running.len())
                .max_by_key(|&j| {
                    let s = self.get(self.running[j]);
                    (s.priority, s.arrival)
                })
                .expect("a running sequence"),
        }
    }

    fn preempt_at(&mut self, index: usize, plan: &mut StepPlan, budget: &mut usize) {
        let id = self.running.remove(index);
        if let Some(k) = plan.seqs.iter().position(|s| s.id == id) {
            *budget += plan.seqs.remove(k).new_tokens as usize;
        }
        let seq = self.seqs[id as usize].as_mut().expect("running sequence");
        let blocks = std::mem::take(&mut seq.blocks);
        seq.computed = 0;
        seq.registered = 0;
        seq.preemptions += 1;
        self.pool.free(&blocks);
        let key = self.wait_key(id);
        self.waiting.insert(key);
        self.stats.preemptions += 1;
        plan.preempted.push(id);
    }

    /// Apply a finished step: advance, generate, verify drafts, cache blocks, end sequences.
    pub fn complete(&mut self, plan: &StepPlan, lexicon: &Lexicon) -> Vec<Emitted> {
        let bs = self.pool.block_size() as usize;
        let caching = self.pool.caching();
        let eos = self.cfg.eos_token;
        let mut out = Vec::with_capacity(plan.seqs.len());
        let mut ended = false;
        for s in &plan.seqs {
            let seq = self.seqs[s.id as usize]
                .as_mut()
                .expect("scheduled sequence");
            let from = seq.tokens.len();
            if let Some((start, len)) = s.draft {
                let mut accepted = 0;
                for i in 0..=len {
                    let t = seq.generate(lexicon);
                    if i == len || t != seq.tokens[start + i] || seq.left() == 0 {
                        break;
                    }
                    accepted += 1;
                }
                seq.computed = from + accepted;
                self.stats.spec_drafts += 1;
                self.stats.spec_draft_tokens += len as u64;
                self.stats.spec_accepted_tokens += accepted as u64;
            } else {
                seq.computed += s.new_tokens as usize;
                if seq.computed == from {
                    seq.generate(lexicon);
                }
            }
            if caching {
                let full = seq.computed / bs;
                seq.hash_blocks(full, bs);
                while seq.registered < full {
                    self.pool
                        .register(seq.blocks[seq.registered], seq.hashes[seq.registered]);
                    seq.registered += 1;
                }
            }
            let finish = seq.natural_finish();
            if finish == Some(FinishReason::Eos) {
                *seq.tokens.last_mut().expect("an output token") = eos;
            }
            if seq.tokens.len() > from || finish.is_some() {
                out.push(Emitted {
                    id: s.id,
                    from,
                    finish,
                });
            }
            if let Some(f) = finish {
                seq.finished = Some(f);
                let blocks = std::mem::take(&mut seq.blocks);
                self.pool.free(&blocks);
                ended = true;
            }
        }
        if ended {
            let seqs = &self.seqs;
            self.running.retain(|&id| {
                seqs[id as usize]
                    .as_ref()
                    .is_some_and(|s| s.finished.is_none())
            });
        }
        out
    }

    /// End a sequence early (stop string, client gone); no-op if it already ended.
    pub fn stop(&mut self, id: SeqId, reason: FinishReason) {
        let key = self.wait_key(id);
        let seq = self.seqs[id as usize].as_mut().expect("live sequence");
        if seq.finished.is_some() {
            return;
        }
        seq.finished = Some(reason);
        let blocks = std::mem::take(&mut seq.blocks);
        self.pool.free(&blocks);
        if !self.waiting.remove(&key) {
            self.running.retain(|&r| r != id);
        }
    }

    /// Forget a sequence (stopping it first if it still runs or waits).
    pub fn remove(&mut self, id: SeqId) -> Sequence {
        self.stop(id, FinishReason::Abort);
        self.free_ids.push(id);
        self.seqs[id as usize].take().expect("live sequence")
    }
}
