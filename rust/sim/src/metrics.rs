//! Prometheus metrics under vLLM's names, rendered as the text exposition format.
//!
//! Owns `Metrics`, `Histogram` and `Modelled`. The engine updates them once per step (gauges,
//! counters and per-request latencies); GET /metrics renders them. Every series carries
//! `model_name` (and vLLM's `engine="0"`); histogram buckets are vLLM's. The latency histograms
//! are wall time, as a real engine's are; each finished request's times on the modelled clock
//! (`engine` module docs) are kept apart, the last `MODELLED_KEPT`, for GET /sim/requests.

use std::collections::VecDeque;
use std::fmt::Write;

use crate::scheduler::SchedStats;

const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// Finished requests whose modelled times are kept (about 100 bytes each).
pub const MODELLED_KEPT: usize = 100_000;

/// One finished request on the engine's modelled clock: seconds since the engine started, in
/// the cost model's time (`engine` module docs), free of the machine's timing noise.
#[derive(Debug, Clone, PartialEq)]
pub struct Modelled {
    /// The request's arrival order at the engine (0, 1, ...).
    pub id: u64,
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub completion_tokens: u32,
    /// Engine steps that gave it tokens (a stream's content chunks).
    pub steps: u32,
    pub finish: &'static str,
    pub arrived_s: f64,
    /// When the scheduler first took it (its prefill starts); None if it never ran.
    pub scheduled_s: Option<f64>,
    pub first_token_s: Option<f64>,
    pub finished_s: f64,
}

/// A Prometheus histogram with fixed upper bounds.
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Add `other`'s observations (same bounds) to these.
    pub fn add(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum += other.sum;
        self.count += other.count;
    }
}

/// Static facts about the engine, shown as `vllm:cache_config_info`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheInfo {
    pub block_size: u32,
    pub num_gpu_blocks: u64,
    pub enable_prefix_caching: bool,
    pub cache_dtype: String,
    pub gpu_memory_utilization: f64,
}

/// Every series the engine exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub model_name: String,
    pub cache: CacheInfo,
    pub num_requests_running: usize,
    pub num_requests_waiting: usize,
    pub kv_cache_usage_perc: f64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub prompt_tokens_cached: u64,
    /// finished requests by reason: stop, length, abort
    pub success: [u64; 3],
    pub sched: SchedStats,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub queue: Histogram,
    /// From scheduled to first token, and from first to last token (vLLM's phases).
    pub prefill: Histogram,
    pub decode: Histogram,
    pub steps: u64,
    /// The last `MODELLED_KEPT` finished requests, oldest first, and the modelled clock now.
    pub modelled: VecDeque<Modelled>,
    pub modelled_clock_s: f64,
}

impl Metrics {
    pub fn new(model_name: &str, cache: CacheInfo) -> Metrics {
        Metrics {
            model_name: model_name.to_string(),
            cache,
            num_requests_running: 0,
            num_requests_waiting: 0,
            kv_cache_usage_perc: 0.0,
            prompt_tokens: 0,
            generation_tokens: 0,
            prompt_tokens_cached: 0,
            success: [0; 3],
            sched: SchedStats::default(),
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
            queue: Histogram::new(E2E_BUCKETS),
            prefill: Histogram::new(E2E_BUCKETS),
            decode: Histogram::new(E2E_BUCKETS),
            steps: 0,
            modelled: VecDeque::new(),
            modelled_clock_s: 0.0,
        }
    }

    /// Keep a finished request's modelled times (the oldest one goes past `MODELLED_KEPT`).
    pub fn keep_modelled(&mut self, m: Modelled) {
        if self.modelled.len() == MODELLED_KEPT {
            self.modelled.pop_front();
        }
        self.modelled.push_back(m);
    }

    /// GET /sim/requests: `{"clock_s", "kept", "requests": [...]}`, oldest first.
    pub fn modelled_json(&self) -> String {
        modelled_json(&[self])
    }

    /// Count a finished request by its `finish_reason` ("stop", "length" or "abort").
    pub fn finished(&mut self, reason: &str) {
        let i = match reason {
            // the model ended its turn with its calls: vLLM's label is "stop"
            "stop" | "tool_calls" => 0,
            "length" => 1,
            _ => 2,
        };
        self.success[i] += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        render_fleet(&[self])
    }

    /// A fleet's totals: counters, gauges of requests and histograms summed over `parts`, KV
    /// usage their mean (the replicas' caches are the same size), the cache's info the first
    /// part's with the fleet's blocks, the modelled clock the latest (`modelled` is left empty).
    pub fn sum(parts: &[&Metrics]) -> Metrics {
        let first = parts.first().expect("a fleet has a replica");
        let mut t = Metrics::new(&first.model_name, first.cache.clone());
        t.cache.num_gpu_blocks = parts.iter().map(|m| m.cache.num_gpu_blocks).sum();
        for m in parts {
            t.num_requests_running += m.num_requests_running;
            t.num_requests_waiting += m.num_requests_waiting;
            t.kv_cache_usage_perc += m.kv_cache_usage_perc / parts.len() as f64;
            t.prompt_tokens += m.prompt_tokens;
            t.generation_tokens += m.generation_tokens;
            t.prompt_tokens_cached += m.prompt_tokens_cached;
            for (a, b) in t.success.iter_mut().zip(m.success) {
                *a += b;
            }
            let (s, o) = (&mut t.sched, &m.sched);
            s.preemptions += o.preemptions;
            s.prefix_queries += o.prefix_queries;
            s.prefix_hits += o.prefix_hits;
            s.spec_drafts += o.spec_drafts;
            s.spec_draft_tokens += o.spec_draft_tokens;
            s.spec_accepted_tokens += o.spec_accepted_tokens;
            for (a, b) in [
                (&mut t.ttft, &m.ttft),
                (&mut t.itl, &m.itl),
                (&mut t.e2e, &m.e2e),
                (&mut t.queue, &m.queue),
                (&mut t.prefill, &m.prefill),
                (&mut t.decode, &m.decode),
            ] {
                a.add(b);
            }
            t.steps += m.steps;
            t.modelled_clock_s = t.modelled_clock_s.max(m.modelled_clock_s);
        }
        t
    }
}

/// GET /sim/requests of a fleet (or one engine): `{"clock_s", "kept", "requests": [...]}`,
/// each request with its `replica` (0 for one engine; `id` is its arrival order there), oldest
/// first by modelled arrival; `clock_s` is the latest replica's clock, `kept` per replica.
pub fn modelled_json(replicas: &[&Metrics]) -> String {
    let mut all: Vec<(usize, &Modelled)> = replicas
        .iter()
        .enumerate()
        .flat_map(|(i, m)| m.modelled.iter().map(move |r| (i, r)))
        .collect();
    if replicas.len() > 1 {
        all.sort_by(|a, b| a.1.arrived_s.total_cmp(&b.1.arrived_s));
    }
    let requests: Vec<serde_json::Value> = all
        .into_iter()
        .map(|(replica, m)| {
            serde_json::json!({
                "id": m.id, "replica": replica, "prompt_tokens": m.prompt_tokens,
                "cached_tokens": m.cached_tokens, "completion_tokens": m.completion_tokens,
                "steps": m.steps, "finish": m.finish, "arrived_s": m.arrived_s,
                "scheduled_s": m.scheduled_s, "first_token_s": m.first_token_s,
                "finished_s": m.finished_s,
            })
        })
        .collect();
    let clock = replicas
        .iter()
        .map(|m| m.modelled_clock_s)
        .fold(0.0, f64::max);
    serde_json::json!({"clock_s": clock, "kept": MODELLED_KEPT, "requests": requests}).to_string()
}

/// GET /metrics of one engine (`replicas` of one: its series as vLLM's) or of a fleet: every
/// family's fleet totals under the usual labels, then each replica's with `replica="i"` added.
/// A reader that sums a family over its label sets must take the totals or the replicas, not
/// both (`replay.targets.prometheus` takes the totals where a `replica` label splits them).
pub fn render_fleet(replicas: &[&Metrics]) -> String {
    let total;
    let mut sets: Vec<(&Metrics, String)> = Vec::with_capacity(replicas.len() + 1);
    if replicas.len() == 1 {
        sets.push((replicas[0], String::new()));
    } else {
        total = Metrics::sum(replicas);
        sets.push((&total, String::new()));
        for (i, m) in replicas.iter().enumerate() {
            sets.push((m, format!(",replica=\"{i}\"")));
        }
    }
    render_sets(&sets)
}

/// The exposition of `sets`, each a `Metrics` and the labels that follow its own (`,a="b"`).
fn render_sets(sets: &[(&Metrics, String)]) -> String {
    let labels: Vec<String> = sets
        .iter()
        .map(|(m, extra)| {
            format!(
                "engine=\"0\",model_name=\"{}\"{extra}",
                escape(&m.model_name)
            )
        })
        .collect();
    let each = |f: &dyn Fn(&Metrics) -> f64| -> Vec<(String, f64)> {
        sets.iter()
            .zip(&labels)
            .map(|((m, _), l)| (l.clone(), f(m)))
            .collect()
    };
    let mut out = String::with_capacity(8192 * sets.len());
    type Read = fn(&Metrics) -> f64;
    let gauges: [(&str, &str, Read); 3] = [
        (
            "num_requests_running",
            "Number of requests in model execution batches.",
            |m| m.num_requests_running as f64,
        ),
        (
            "num_requests_waiting",
            "Number of requests waiting to be processed.",
            |m| m.num_requests_waiting as f64,
        ),
        (
            "kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            |m| m.kv_cache_usage_perc,
        ),
    ];
    for (name, help, read) in gauges {
        series(&mut out, name, help, "gauge", &each(&read));
    }
    let counters: [(&str, &str, Read); 10] = [
        (
            "num_preemptions_total",
            "Cumulative number of preemption from the engine.",
            |m| m.sched.preemptions as f64,
        ),
        (
            "prompt_tokens_total",
            "Number of prefill tokens processed.",
            |m| m.prompt_tokens as f64,
        ),
        (
            "generation_tokens_total",
            "Number of generation tokens processed.",
            |m| m.generation_tokens as f64,
        ),
        (
            "prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            |m| m.sched.prefix_queries as f64,
        ),
        (
            "prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            |m| m.sched.prefix_hits as f64,
        ),
        (
            "prompt_tokens_cached_total",
            "Number of cached prompt tokens (local prefix cache).",
            |m| m.prompt_tokens_cached as f64,
        ),
        (
            "spec_decode_num_drafts_total",
            "Number of spec decoding drafts.",
            |m| m.sched.spec_drafts as f64,
        ),
        (
            "spec_decode_num_draft_tokens_total",
            "Number of draft tokens.",
            |m| m.sched.spec_draft_tokens as f64,
        ),
        (
            "spec_decode_num_accepted_tokens_total",
            "Number of accepted tokens.",
            |m| m.sched.spec_accepted_tokens as f64,
        ),
        (
            "engine_steps_total",
            "Number of engine steps (replay-sim extension).",
            |m| m.steps as f64,
        ),
    ];
    for (name, help, read) in counters {
        series(&mut out, name, help, "counter", &each(&read));
    }
    let by_reason: Vec<(String, f64)> = sets
        .iter()
        .flat_map(|(m, extra)| {
            ["stop", "length", "abort"]
                .iter()
                .zip(m.success)
                .map(move |(r, v)| {
                    (
                        format!(
                            "engine=\"0\",finished_reason=\"{r}\",model_name=\"{}\"{extra}",
                            escape(&m.model_name)
                        ),
                        v as f64,
                    )
                })
        })
        .collect();
    series(
        &mut out,
        "request_success_total",
        "Count of successfully processed requests.",
        "counter",
        &by_reason,
    );
    type Hist = fn(&Metrics) -> &Histogram;
    let hists: [(&str, &str, Hist); 6] = [
        (
            "time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            |m| &m.ttft,
        ),
        (
            "inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            |m| &m.itl,
        ),
        (
            "e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            |m| &m.e2e,
        ),
        (
            "request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            |m| &m.queue,
        ),
        (
            "request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            |m| &m.prefill,
        ),
        (
            "request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            |m| &m.decode,
        ),
    ];
    for (name, help, read) in hists {
        let _ = writeln!(
            out,
            "# HELP vllm:{name} {help}\n# TYPE vllm:{name} histogram"
        );
        for ((m, _), l) in sets.iter().zip(&labels) {
            histogram(&mut out, name, l, read(m));
        }
    }
    let info: Vec<(String, f64)> = sets
        .iter()
        .map(|(m, extra)| {
            let c = &m.cache;
            (format!(
                "block_size=\"{}\",cache_dtype=\"{}\",enable_prefix_caching=\"{}\",engine=\"0\",gpu_memory_utilization=\"{}\",num_gpu_blocks=\"{}\"{extra}",
                c.block_size, escape(&c.cache_dtype), if c.enable_prefix_caching { "True" } else { "False" },
                c.gpu_memory_utilization, c.num_gpu_blocks
            ), 1.0)
        })
        .collect();
    series(
        &mut out,
        "cache_config_info",
        "Information of the LLMEngine CacheConfig",
        "gauge",
        &info,
    );
    out
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn num(v: f64) -> String {
    if v.is_infinite() {
        "+Inf".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

fn series(out: &mut String, name: &str, help: &str, kind: &str, values: &[(String, f64)]) {
    let _ = writeln!(out, "# HELP vllm:{name} {help}\n# TYPE vllm:{name} {kind}");
    for (labels, v) in values {
        let _ = writeln!(out, "vllm:{name}{{{labels}}} {}", num(*v));
    }
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let mut cumulative = 0;
    for (b, c) in h.bounds.iter().zip(&h.counts) {
        cumulative += c;
        let _ = writeln!(
            out,
            "vllm:{name}_bucket{{{labels},le=\"{}\"}} {}",
            num(*b),
            num(cumulative as f64)
        );
    }
    let _ = writeln!(
        out,
        "vllm:{name}_bucket{{{labels},le=\"+Inf\"}} {}",
        num(h.count as f64)
    );
    let _ = writeln!(out, "vllm:{name}_count{{{labels}}} {}", num(h.count as f64));
    let _ = writeln!(out, "vllm:{name}_sum{{{labels}}} {}", num(h.sum));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_exposition_has_vllm_names_and_labels() {
        let mut m = Metrics::new(
            "sim",
            CacheInfo {
                block_size: 16,
                num_gpu_blocks: 100,
                ..Default::default()
            },
        );
        m.num_requests_running = 3;
        m.sched.preemptions = 2;
        m.sched.prefix_hits = 32;
        m.finished("length");
        m.ttft.observe(0.03);
        m.ttft.observe(100.0);
        m.ttft.observe(5000.0);
        let text = m.render();
        for needle in [
            "# TYPE vllm:num_requests_running gauge",
            "vllm:num_requests_running{engine=\"0\",model_name=\"sim\"} 3.0",
            "vllm:num_requests_waiting{",
            "vllm:kv_cache_usage_perc{",
            "vllm:num_preemptions_total{engine=\"0\",model_name=\"sim\"} 2.0",
            "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"sim\"} 32.0",
            "vllm:prefix_cache_queries_total{",
            "vllm:prompt_tokens_total{",
            "vllm:generation_tokens_total{",
            "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"sim\"} 1.0",
            "# TYPE vllm:time_to_first_token_seconds histogram",
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"sim\",le=\"0.04\"} 1.0",
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"sim\",le=\"160.0\"} 2.0",
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"sim\",le=\"+Inf\"} 3.0",
            "vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"sim\"} 3.0",
            "vllm:inter_token_latency_seconds_count{",
            "vllm:e2e_request_latency_seconds_sum{",
            "vllm:request_prefill_time_seconds_count{",
            "vllm:request_decode_time_seconds_sum{",
            "num_gpu_blocks=\"100\"",
        ] {
            assert!(text.contains(needle), "missing {needle}\n{text}");
        }
        // every non-comment line is `name{labels} value`
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            assert!(value == "+Inf" || value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
