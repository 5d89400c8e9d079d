//! The engine loop: steps the scheduler in real time and streams what each step produced.
//!
//! Owns `Engine`, `Submission`, `Sink` and `Answer`. One task runs the loop: take new requests,
//! plan a step (`Scheduler::schedule`), price it with the cost model, sleep until the step's
//! end (wall time = modelled time × `time_scale`), then apply it (`Scheduler::complete`) and hand
//! each sequence's new text to its client in ONE write (role, token text, and on the last step
//! the finish, usage and `[DONE]` chunks together). Step ends are kept on an absolute clock, so
//! timer jitter does not accumulate; a step after idling, or more than `LATE_TOLERANCE` behind
//! (the CPU was busy), starts from now. With a profile's `request_overhead_ms`, each request first
//! passes a front end that handles one request at a time (a real server's HTTP, tokenization and
//! hand-off to the engine): it joins the scheduler that long after the front end is free, at the
//! next step boundary. Stop strings are matched on the decoded text; a stream holds back the
//! last (longest stop − 1) bytes until they can no longer start a match, as vLLM does.
//!
//! **The modelled clock.** Beside the wall clock that paces the steps, the engine keeps the time
//! it models (seconds since it started): each step advances it by exactly the step's modelled
//! cost. A request is placed on it at the wall time it was handed to the engine (parsed and
//! tokenized), divided by `time_scale`, less the lag the wall clock has gathered over the
//! modelled one (timer overshoot, the engine's own wake-ups, a busy CPU: a step restarted from
//! now), and never after the step that schedules it; a step after idling starts when the last
//! request it takes in could start (its arrival, or the front end's end for it).
//! So each finished request's modelled arrival, scheduling, first token and end (`Modelled`, GET
//! /sim/requests) count modelled work and modelled waiting only: the same requests arriving the
//! same way get the same modelled latencies on an idle machine and a busy one. With `time_scale`
//! 0 nothing is slept and idle time is not modelled: a request arrives at the clock's present.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::config::Resolved;
use crate::cost::{CostModel, SeqWork};
use crate::kv::BlockPool;
use crate::metrics::{Metrics, Modelled};
use crate::render::{StreamFormat, Usage};
use crate::scheduler::{Emitted, Scheduler, SeqId};
use crate::sequence::{FinishReason, SeqParams, Sequence};
use crate::tools::{CallTurn, ToolCall};
use crate::vocab::Vocab;

/// A step that starts within this of its planned start keeps the absolute clock (tokio's timer
/// wakes up to ~2 ms late; the steps after a late wake-up run back to back until caught up).
const LATE_TOLERANCE: Duration = Duration::from_millis(10);
/// How often waiting requests are checked for clients that went away.
const SWEEP_EVERY: Duration = Duration::from_millis(200);

/// Where a request's output goes.
pub enum Sink {
    /// SSE bytes, one message per step.
    Stream {
        tx: mpsc::UnboundedSender<Bytes>,
        format: StreamFormat,
    },
    /// The whole answer at the end.
    Whole { tx: oneshot::Sender<Answer> },
}

impl Sink {
    fn is_closed(&self) -> bool {
        match self {
            Sink::Stream { tx, .. } => tx.is_closed(),
            Sink::Whole { tx } => tx.is_closed(),
        }
    }
}

/// A finished non-streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    /// A tool answer's calls (empty for text).
    pub calls: Vec<ToolCall>,
    pub finish: FinishReason,
    pub usage: Usage,
}

/// A tokenized request handed to the engine.
pub struct Submission {
    pub prompt: Vec<u32>,
    pub params: SeqParams,
    /// The request's own seed (else the engine's).
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    /// A tool answer: its calls and any text before them (its tokens are theirs: `SeqParams`
    /// sized for them), else text.
    pub calls: Option<CallTurn>,
    pub sink: Sink,
    /// When the request arrived (the wall-time metrics count from here, as vLLM's do) ...
    pub arrived: Instant,
    /// ... and when, parsed and tokenized, it was handed to the engine: its modelled arrival
    /// (the machine's parsing time is not modelled; a profile's `request_overhead_ms` is).
    pub submitted: Instant,
    /// The prompt's chained block hashes where a fleet's router already computed them (the
    /// prefix cache then reuses them), else empty (computed as the scheduler needs them).
    pub hashes: Vec<u64>,
}

struct Outlet {
    sink: Sink,
    stop: Vec<String>,
    /// Bytes held back while they could still start a stop string.
    hold: usize,
    pending: Vec<u8>,
    /// Unsent text (streams) or all text so far (whole answers).
    text: String,
    /// A tool answer: its calls and how far their tokens went.
    calls: Option<CallTurn>,
    arrived: Instant,
    /// When the scheduler first took it (its prefill starts).
    scheduled: Option<Instant>,
    first: Option<Instant>,
    last: Option<Instant>,
    /// Its arrival order, and its times on the modelled clock (module docs).
    id: u64,
    arrived_m: f64,
    ready_m: f64,
    scheduled_m: Option<f64>,
    first_m: Option<f64>,
    steps: u32,
}

/// The simulated engine; see the module docs.
pub struct Engine {
    sched: Scheduler,
    cost: CostModel,
    time_scale: f64,
    /// Front-end time per request (wall time, `time_scale` applied); zero = straight in.
    request_overhead: Duration,
    /// Requests in the front end, with when each joins the scheduler (nondecreasing).
    front: VecDeque<(Instant, Submission)>,
    /// When the front end is done with the last request handed to it.
    front_free: Instant,
    seed: u64,
    content_salt: u64,
    vocab: Arc<Vocab>,
    metrics: Arc<Mutex<Metrics>>,
    outlets: Vec<Option<Outlet>>,
    arrivals: u64,
    rx: mpsc::UnboundedReceiver<Submission>,
    /// Prefix-cache resets asked for (`POST /reset_prefix_cache`), and how many were applied:
    /// a reset takes effect before the next request is accepted.
    resets: Arc<AtomicU64>,
    resets_applied: u64,
    /// Requests handed to this engine and not yet finished (a fleet's router reads it; the
    /// front raises it, `finalize` lowers it).
    in_flight: Arc<AtomicU32>,
    /// The modelled clock (module docs): its zero, its present (the end of the last step, or
    /// the start of the one under way), and how far the wall clock, scaled, runs ahead of it.
    epoch: Instant,
    modelled: f64,
    offset: f64,
}

impl Engine {
    /// An engine for a resolved config; returns it and the sender requests go to.
    pub fn new(
        r: &Resolved,
        vocab: Arc<Vocab>,
        metrics: Arc<Mutex<Metrics>>,
    ) -> (Engine, mpsc::UnboundedSender<Submission>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut sched_cfg = r.scheduler.clone();
        sched_cfg.eos_token = vocab.eos;
        let pool = BlockPool::new(
            r.num_blocks,
            r.config.block_size,
            r.config.enable_prefix_caching,
        );
        let engine = Engine {
            sched: Scheduler::new(sched_cfg, pool),
            cost: CostModel::new(&r.profile, r.kv_elem_bytes),
            time_scale: r.config.time_scale,
            request_overhead: Duration::from_secs_f64(
                r.profile.request_overhead_ms * 1e-3 * r.config.time_scale,
            ),
            front: VecDeque::new(),
            front_free: Instant::now(),
            seed: r.config.seed,
            content_salt: r.content_salt,
            vocab,
            metrics,
            outlets: Vec::new(),
            arrivals: 0,
            rx,
            resets: Arc::new(AtomicU64::new(0)),
            resets_applied: 0,
            in_flight: Arc::new(AtomicU32::new(0)),
            epoch: Instant::now(),
            modelled: 0.0,
            offset: 0.0,
        };
        (engine, tx)
    }

    /// Wall time `t` on the modelled clock, before the offset: scaled seconds since the start.
    fn scaled(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64() / self.time_scale
    }

    /// Where a wall instant falls on the modelled clock (module docs); with `time_scale` 0, now.
    fn modelled_at(&self, t: Instant) -> f64 {
        if self.time_scale > 0.0 {
            (self.scaled(t) - self.offset).max(0.0)
        } else {
            self.modelled
        }
    }

    /// Pass a new request to the front end, or straight to the scheduler without one.
    fn submit(&mut self, sub: Submission) {
        if self.request_overhead.is_zero() {
            let at = self.modelled_at(sub.submitted);
            self.accept(sub, at, at);
            return;
        }
        let ready = sub.arrived.max(self.front_free) + self.request_overhead;
        self.front_free = ready;
        self.front.push_back((ready, sub));
    }

    /// Move the requests the front end is done with into the scheduler.
    fn admit_ready(&mut self) {
        let now = Instant::now();
        while self.front.front().is_some_and(|(ready, _)| *ready <= now) {
            let (ready, sub) = self.front.pop_front().expect("front entry");
            let (arrived_m, ready_m) = (self.modelled_at(sub.arrived), self.modelled_at(ready));
            self.accept(sub, arrived_m, ready_m);
        }
    }

    /// Block until a request arrives or the front end's next request is due (`admit_ready`
    /// moves it on); false once every request sender is gone.
    async fn wait_for_work(&mut self) -> bool {
        let next = self.front.front().map(|(ready, _)| *ready);
        let received = match next {
            None => self.rx.recv().await,
            Some(ready) => tokio::select! {
                sub = self.rx.recv() => sub,
                _ = tokio::time::sleep_until(ready) => return true,
            },
        };
        match received {
            Some(sub) => {
                self.submit(sub);
                true
            }
            None => false,
        }
    }

    /// The counter `POST /reset_prefix_cache` raises.
    pub fn resets(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.resets)
    }

    /// The count of requests in flight: whoever hands the engine a request raises it first;
    /// the engine lowers it as each ends.
    pub fn in_flight(&self) -> Arc<AtomicU32> {
        Arc::clone(&self.in_flight)
    }

    /// Hand a request to the scheduler; it arrived at `arrived_m` on the modelled clock and
    /// could be scheduled from `ready_m` (later by the front end's time, when there is one).
    fn accept(&mut self, sub: Submission, arrived_m: f64, ready_m: f64) {
        let asked = self.resets.load(Ordering::Acquire);
        if asked != self.resets_applied {
            self.resets_applied = asked;
            self.sched.pool_mut().reset_cache();
        }
        let id = self.arrivals;
        let mut seq = Sequence::new(
            sub.prompt,
            &sub.params,
            sub.seed.unwrap_or(self.seed),
            self.content_salt,
            id,
        );
        seq.hashes = sub.hashes;
        self.arrivals += 1;
        let slot = self.sched.add(seq) as usize;
        if self.outlets.len() <= slot {
            self.outlets.resize_with(slot + 1, || None);
        }
        let hold = sub
            .stop
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(1)
            .saturating_sub(1);
        self.outlets[slot] = Some(Outlet {
            sink: sub.sink,
            stop: sub.stop,
            hold,
            pending: Vec::new(),
            text: String::new(),
            calls: sub.calls,
            arrived: sub.arrived,
            scheduled: None,
            first: None,
            last: None,
            id,
            arrived_m,
            ready_m,
            scheduled_m: None,
            first_m: None,
            steps: 0,
        });
    }

    /// Run until every request sender is gone.
    pub async fn run(mut self) {
        let mut clock = Instant::now();
        let mut last_sweep = Instant::now();
        // whether the last pass ran a step: then the next starts where it ended, in modelled time
        let mut stepped = false;
        loop {
            if self.sched.is_idle() {
                stepped = false;
                if !self.wait_for_work().await {
                    return;
                }
                clock = Instant::now();
            }
            while let Ok(sub) = self.rx.try_recv() {
                self.submit(sub);
            }
            self.admit_ready();
            if self.sched.is_idle() {
                continue;
            }
            let plan = self.sched.schedule();
            if plan.seqs.is_empty() {
                stepped = false;
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            let now = Instant::now();
            let cost = self.cost.step(plan.seqs.iter().map(|s| SeqWork {
                new_tokens: s.new_tokens,
                context: s.context,
            }));
            let start = if now.saturating_duration_since(clock) <= LATE_TOLERANCE {
                clock
            } else {
                now
            };
            if !stepped {
                // after idling, the step starts when the last request it takes in could start
                let ready = plan
                    .seqs
                    .iter()
                    .filter_map(|s| self.outlets[s.id as usize].as_ref())
                    .filter(|o| o.scheduled_m.is_none())
                    .map(|o| o.ready_m)
                    .fold(self.modelled, f64::max);
                self.modelled = ready;
            }
            if self.time_scale > 0.0 {
                self.offset = self.scaled(start) - self.modelled;
            }
            self.mark_scheduled(&plan.seqs.iter().map(|s| s.id).collect::<Vec<_>>(), now);
            let end = start + Duration::from_secs_f64(cost.total_s * self.time_scale);
            if end > now {
                tokio::time::sleep_until(end).await;
            } else {
                tokio::task::yield_now().await;
            }
            clock = end;
            self.modelled += cost.total_s;
            stepped = true;
            let emitted = self.sched.complete(&plan, &self.vocab.lexicon);
            self.deliver(&emitted);
            if last_sweep.elapsed() >= SWEEP_EVERY {
                last_sweep = Instant::now();
                self.sweep();
            }
            self.publish();
        }
    }

    /// Note the step's new sequences as scheduled, at `now` and at the modelled present.
    fn mark_scheduled(&mut self, ids: &[SeqId], now: Instant) {
        let mut m = self.metrics.lock().expect("metrics");
        for &id in ids {
            if let Some(o) = self.outlets[id as usize].as_mut() {
                if o.scheduled.is_none() {
                    o.scheduled = Some(now);
                    o.scheduled_m = Some(self.modelled);
                    o.arrived_m = o.arrived_m.min(self.modelled);
                    m.queue.observe((now - o.arrived).as_secs_f64());
                }
            }
        }
    }

    fn deliver(&mut self, emitted: &[Emitted]) {
        let now = Instant::now();
        let metrics = Arc::clone(&self.metrics);
        let mut m = metrics.lock().expect("metrics");
        let mut delta = String::new();
        for e in emitted {
            let seq = self.sched.get(e.id);
            let Some(out) = self.outlets[e.id as usize].as_mut() else {
                continue;
            };
            let new = &seq.tokens[e.from..];
            m.generation_tokens += new.len() as u64;
            if out.first.is_none() {
                m.ttft.observe((now - out.arrived).as_secs_f64());
                if let Some(at) = out.scheduled {
                    m.prefill.observe((now - at).as_secs_f64());
                }
                m.prompt_tokens += seq.prompt_len as u64;
                m.prompt_tokens_cached += seq.cached_tokens.unwrap_or(0) as u64;
            } else if let Some(last) = out.last {
                m.itl.observe((now - last).as_secs_f64());
            }
            let visible = if e.finish == Some(FinishReason::Eos) {
                &new[..new.len().saturating_sub(1)]
            } else {
                new
            };
            let mut finish = e.finish;
            let mut calls = Vec::new();
            let mut shown = visible;
            if let Some(turn) = out.calls.as_mut() {
                // a tool answer: its text lead's tokens are shown as text, the calls' tokens
                // are the calls (their generated text is not shown)
                let text = turn.take_text(new.len());
                shown = &new[..text];
                calls = turn.advance(new.len() - text);
                if finish == Some(FinishReason::Length) && turn.complete() {
                    finish = Some(FinishReason::ToolCalls);
                }
            }
            let before = out.text.len();
            self.vocab
                .decode_into(shown, &mut out.pending, &mut out.text);
            if !out.stop.is_empty() && out.calls.is_none() {
                let from = floor_char(&out.text, before.saturating_sub(out.hold));
                let hit = out
                    .stop
                    .iter()
                    .filter_map(|s| out.text[from..].find(s.as_str()).map(|p| from + p))
                    .min();
                if let Some(p) = hit {
                    out.text.truncate(p);
                    finish = Some(FinishReason::StopString);
                }
            }
            let usage = Usage {
                prompt_tokens: seq.prompt_len as u32,
                completion_tokens: seq.output_len(),
                cached_tokens: seq.cached_tokens.unwrap_or(0),
            };
            let first = out.first.is_none();
            out.first.get_or_insert(now);
            out.last = Some(now);
            out.first_m.get_or_insert(self.modelled);
            out.steps += 1;
            let mut gone = false;
            if let Sink::Stream { tx, format } = &out.sink {
                // a tool answer's text goes out before its calls: nothing held back
                let keep = if finish.is_some() || out.calls.is_some() {
                    0
                } else {
                    out.hold
                };
                let cut = floor_char(&out.text, out.text.len().saturating_sub(keep));
                delta.clear();
                delta.push_str(&out.text[..cut]);
                out.text.drain(..cut);
                let mut buf = Vec::with_capacity(delta.len() + 384);
                if first {
                    format.role(&mut buf, out.calls.as_ref().is_none_or(|t| t.lead > 0));
                }
                if !delta.is_empty() {
                    format.token(&mut buf, &delta);
                }
                let turn = out.calls.as_ref();
                for event in &calls {
                    format.call_event(&mut buf, event, &turn.expect("tool answer").calls);
                }
                if let Some(f) = finish {
                    let made = turn.map(CallTurn::generated).unwrap_or_default();
                    format.finish(&mut buf, f.as_str(), usage, &made);
                }
                gone = !buf.is_empty() && tx.send(Bytes::from(buf)).is_err();
            }
            let finish = if gone {
                Some(FinishReason::Abort)
            } else {
                finish
            };
            if let Some(f) = finish {
                drop(m);
                self.finalize(e.id, f, usage, now);
                m = metrics.lock().expect("metrics");
            }
        }
    }

    /// End a request: answer a whole-answer client, count it, forget it.
    fn finalize(&mut self, id: SeqId, finish: FinishReason, usage: Usage, now: Instant) {
        self.sched.stop(id, finish);
        self.sched.remove(id);
        let Some(out) = self.outlets[id as usize].take() else {
            return;
        };
        // saturating: a request handed straight to the engine (a test's) was never counted in
        let _ = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        let mut m = self.metrics.lock().expect("metrics");
        m.finished(finish.as_str());
        m.keep_modelled(Modelled {
            id: out.id,
            prompt_tokens: usage.prompt_tokens,
            cached_tokens: usage.cached_tokens,
            completion_tokens: usage.completion_tokens,
            steps: out.steps,
            finish: finish.as_str(),
            arrived_s: out.arrived_m,
            scheduled_s: out.scheduled_m,
            first_token_s: out.first_m,
            finished_s: self.modelled.max(out.arrived_m),
        });
        if finish != FinishReason::Abort {
            m.e2e.observe((now - out.arrived).as_secs_f64());
            if let Some(first) = out.first {
                m.decode.observe((now - first).as_secs_f64());
            }
        }
        if let Sink::Whole { tx } = out.sink {
            let _ = tx.send(Answer {
                text: out.text,
                calls: out.calls.map(|t| t.generated()).unwrap_or_default(),
                finish,
                usage,
            });
        }
    }

    /// Abort requests whose clients went away.
    fn sweep(&mut self) {
        let gone: Vec<SeqId> = self
            .outlets
            .iter()
            .enumerate()
            .filter_map(|(i, o)| {
                o.as_ref()
                    .filter(|o| o.sink.is_closed())
                    .map(|_| i as SeqId)
            })
            .collect();
        let now = Instant::now();
        for id in gone {
            self.finalize(id, FinishReason::Abort, Usage::default(), now);
        }
    }

    fn publish(&self) {
        let mut m = self.metrics.lock().expect("metrics");
        m.num_requests_running = self.sched.num_running();
        m.num_requests_waiting = self.sched.num_waiting();
        m.kv_cache_usage_perc = self.sched.pool().usage();
        m.sched = self.sched.stats.clone();
        m.steps += 1;
        m.modelled_clock_s = self.modelled;
    }
}

/// The largest char boundary of `s` at or below `i`.
fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
