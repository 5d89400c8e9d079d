//! Scheduler rules: token budget, max-num-seqs, chunked prefill, prefix hits, preemption under
//! KV pressure, priority order, and speculation that changes timing but never outputs.

use replay_sim::kv::BlockPool;
use replay_sim::scheduler::{Policy, Scheduler, SchedulerConfig, SeqId};
use replay_sim::sequence::{FinishReason, SeqParams, Sequence};
use replay_sim::spec::NgramConfig;
use replay_sim::textgen::Lexicon;

const EOS: u32 = 9999;

fn cfg(max_seqs: u32, budget: u32) -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs: max_seqs,
        max_num_batched_tokens: budget,
        long_prefill_token_threshold: 0,
        policy: Policy::Fcfs,
        spec: None,
        eos_token: EOS,
    }
}

fn seq(prompt: Vec<u32>, max_tokens: u32, priority: i64, arrival: u64) -> Sequence {
    let params = SeqParams {
        max_tokens,
        min_tokens: 0,
        ignore_eos: true,
        priority,
    };
    Sequence::new(prompt, &params, 0, 0, arrival)
}

fn lexicon() -> Lexicon {
    Lexicon::new((500..508).collect(), Vec::new())
}

fn prompt(n: u32, salt: u32) -> Vec<u32> {
    (0..n).map(|i| (i * 31 + salt * 7919) % 5000).collect()
}

/// Run steps until idle; returns (steps, outputs by id, finish order).
fn run(s: &mut Scheduler, ids: &[SeqId]) -> (usize, Vec<Vec<u32>>, Vec<SeqId>) {
    let mut outputs = vec![Vec::new(); ids.len()];
    let mut order = Vec::new();
    let mut steps = 0;
    let lex = lexicon();
    while !s.is_idle() {
        let plan = s.schedule();
        assert!(!plan.seqs.is_empty(), "stuck at step {steps}");
        for e in s.complete(&plan, &lex) {
            if e.finish.is_some() {
                let k = ids.iter().position(|&i| i == e.id).unwrap();
                outputs[k] = s.get(e.id).output().to_vec();
                order.push(e.id);
                s.remove(e.id);
            }
        }
        steps += 1;
        assert!(steps < 100_000);
    }
    (steps, outputs, order)
}

#[test]
fn budget_is_shared_running_first_then_chunked_admission() {
    let mut s = Scheduler::new(cfg(8, 128), BlockPool::new(1000, 16, true));
    let ids: Vec<SeqId> = (0..3)
        .map(|i| s.add(seq(prompt(100, i), 10, 0, i as u64)))
        .collect();
    let p1 = s.schedule();
    let got: Vec<(SeqId, u32)> = p1.seqs.iter().map(|x| (x.id, x.new_tokens)).collect();
    assert_eq!(got, vec![(ids[0], 100), (ids[1], 28)]);
    assert_eq!(p1.num_tokens(), 128);
    s.complete(&p1, &lexicon());
    assert_eq!(s.get(ids[0]).output_len(), 1); // prefill done: first token
    assert_eq!(s.get(ids[1]).output_len(), 0); // chunk only
    let p2 = s.schedule();
    let got: Vec<(SeqId, u32, u32)> = p2
        .seqs
        .iter()
        .map(|x| (x.id, x.new_tokens, x.context))
        .collect();
    assert_eq!(
        got,
        vec![(ids[0], 1, 100), (ids[1], 72, 28), (ids[2], 55, 0)]
    );
}

#[test]
fn max_num_seqs_caps_the_running_set() {
    let mut s = Scheduler::new(cfg(2, 4096), BlockPool::new(1000, 16, true));
    for i in 0..5 {
        s.add(seq(prompt(20, i), 4, 0, i as u64));
    }
    let p = s.schedule();
    assert_eq!(p.seqs.len(), 2);
    assert_eq!((s.num_running(), s.num_waiting()), (2, 3));
}

#[test]
fn long_prefill_threshold_chunks_one_sequence() {
    let mut c = cfg(4, 4096);
    c.long_prefill_token_threshold = 256;
    let mut s = Scheduler::new(c, BlockPool::new(1000, 16, false));
    let id = s.add(seq(prompt(1000, 1), 2, 0, 0));
    let mut chunks = Vec::new();
    while s.get(id).output_len() == 0 {
        let p = s.schedule();
        chunks.push(p.seqs[0].new_tokens);
        s.complete(&p, &lexicon());
    }
    assert_eq!(chunks, vec![256, 256, 256, 232]);
}

#[test]
fn prefix_cache_hits_full_shared_blocks_only() {
    let mut s = Scheduler::new(cfg(8, 4096), BlockPool::new(1000, 16, true));
    let base = prompt(100, 3);
    let a = s.add(seq(base.clone(), 1, 0, 0));
    run(&mut s, &[a]);
    // shares 70 tokens: 4 full blocks (64 tokens)
    let mut other = base[..70].to_vec();
    other.extend(prompt(30, 9));
    let b = s.add(seq(other, 1, 0, 1));
    let p = s.schedule();
    assert_eq!((p.seqs[0].context, p.seqs[0].new_tokens), (64, 36));
    assert_eq!(s.get(b).cached_tokens, Some(64));
    // the same 64-token prompt again: at most floor((64-1)/16) = 3 blocks hit
    s.complete(&p, &lexicon());
    run(&mut s, &[b]);
    let c = s.add(seq(base[..64].to_vec(), 1, 0, 2));
    let p = s.schedule();
    assert_eq!(s.get(c).cached_tokens, Some(48));
    assert_eq!(p.seqs[0].new_tokens, 16);
    assert_eq!(
        (s.stats.prefix_queries, s.stats.prefix_hits),
        (100 + 100 + 64, 64 + 48)
    );
    // without caching nothing hits
    let mut off = Scheduler::new(cfg(8, 4096), BlockPool::new(1000, 16, false));
    let x = off.add(seq(base.clone(), 1, 0, 0));
    run(&mut off, &[x]);
    let y = off.add(seq(base, 1, 0, 1));
    off.schedule();
    assert_eq!(off.get(y).cached_tokens, Some(0));
}

#[test]
fn kv_pressure_preempts_the_latest_and_outputs_do_not_change() {
    // 4 sequences of 32 prompt + 64 output tokens need 6 blocks of 16 each at the end; 12 blocks
    // hold only two of them fully grown.
    let make = |s: &mut Scheduler| -> Vec<SeqId> {
        (0..4)
            .map(|i| s.add(seq(prompt(32, i), 64, 0, i as u64)))
            .collect()
    };
    let mut small = Scheduler::new(cfg(8, 4096), BlockPool::new(12, 16, true));
    let ids = make(&mut small);
    let (_, out_small, order) = run(&mut small, &ids);
    assert!(small.stats.preemptions > 0);
    assert_eq!(
        order[0], ids[0],
        "the earliest arrival is never the victim under fcfs"
    );
    let mut big = Scheduler::new(cfg(8, 4096), BlockPool::new(1000, 16, true));
    let ids = make(&mut big);
    let (_, out_big, _) = run(&mut big, &ids);
    assert_eq!(big.stats.preemptions, 0);
    assert_eq!(out_small, out_big);
    assert!(out_small.iter().all(|o| o.len() == 64));
    assert_eq!(small.pool().num_free(), 12);
}

#[test]
fn priority_policy_admits_lowest_value_first_and_preempts_highest() {
    let mut c = cfg(1, 4096);
    c.policy = Policy::Priority;
    let mut s = Scheduler::new(c, BlockPool::new(1000, 16, true));
    let ids: Vec<SeqId> = [5, 1, 3]
        .iter()
        .enumerate()
        .map(|(i, &p)| s.add(seq(prompt(16, i as u32), 2, p, i as u64)))
        .collect();
    let (_, _, order) = run(&mut s, &ids);
    assert_eq!(order, vec![ids[1], ids[2], ids[0]]);

    // under KV pressure the victim is the running sequence with the largest priority value
    let mut c = cfg(8, 4096);
    c.policy = Policy::Priority;
    let mut s = Scheduler::new(c, BlockPool::new(6, 16, true));
    let urgent = s.add(seq(prompt(16, 1), 40, 0, 0));
    let lazy = s.add(seq(prompt(16, 2), 40, 9, 1));
    let normal = s.add(seq(prompt(16, 3), 40, 4, 2));
    let mut first_victim = None;
    while !s.is_idle() && first_victim.is_none() {
        let p = s.schedule();
        first_victim = p.preempted.first().copied();
        for e in s.complete(&p, &lexicon()) {
            if e.finish.is_some() {
                s.remove(e.id);
            }
        }
    }
    assert_eq!(first_victim, Some(lazy));
    let _ = (urgent, normal);
}

#[test]
fn eos_ends_early_with_stop_and_the_eos_token() {
    let mut s = Scheduler::new(cfg(8, 4096), BlockPool::new(1000, 16, true));
    let params = SeqParams {
        max_tokens: 5000,
        min_tokens: 0,
        ignore_eos: false,
        priority: 0,
    };
    let id = s.add(Sequence::new(prompt(40, 1), &params, 0, 0, 0));
    let target = s.get(id).target_len;
    assert!(target < 5000);
    let mut finish = None;
    while finish.is_none() {
        let p = s.schedule();
        finish = s.complete(&p, &lexicon()).iter().find_map(|e| e.finish);
    }
    assert_eq!(finish, Some(FinishReason::Eos));
    assert_eq!(s.get(id).output_len(), target);
    assert_eq!(*s.get(id).tokens.last().unwrap(), EOS);
}

#[test]
fn speculation_emits_several_tokens_per_step_on_repetitive_prompts_with_identical_outputs() {
    let pattern: Vec<u32> = (0..20).map(|i| 1000 + i).collect();
    let repetitive: Vec<u32> = pattern.iter().cycle().take(400).copied().collect();
    let spec = NgramConfig {
        num_speculative_tokens: 4,
        prompt_lookup_max: 4,
        prompt_lookup_min: 2,
    };
    let steps_and_out = |with_spec: bool| {
        let mut c = cfg(8, 4096);
        c.spec = with_spec.then_some(spec);
        let mut s = Scheduler::new(c, BlockPool::new(1000, 16, true));
        let id = s.add(seq(repetitive.clone(), 200, 0, 0));
        let (steps, out, _) = run(&mut s, &[id]);
        (steps, out, s.stats.clone())
    };
    let (plain_steps, plain_out, _) = steps_and_out(false);
    let (spec_steps, spec_out, stats) = steps_and_out(true);
    assert_eq!(plain_out, spec_out, "speculation is lossless");
    assert!(
        spec_steps * 2 < plain_steps,
        "{spec_steps} vs {plain_steps}"
    );
    assert!(stats.spec_accepted_tokens * 2 > stats.spec_draft_tokens);
}
