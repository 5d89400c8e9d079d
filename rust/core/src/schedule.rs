//! Arrival schedules: when each request is due, as integer ns offsets from the run start.
//!
//! Owns `Arrivals` and `arrival_offsets`. Generated schedules (Poisson, Gamma, Constant) are
//! deterministic under a seed (ChaCha12, portable across platforms). Trace schedules rescale a
//! recorded arrival sequence uniformly in time, which keeps its burst shape (the coefficient of
//! variation of interarrival gaps) and changes only its mean rate.

use rand::rngs::ChaCha12Rng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp, Gamma};

use crate::error::CoreError;

const NS_PER_S: f64 = 1e9;

/// How arrival times are produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Arrivals {
    /// The trace's own arrival times, rescaled to a target rate (or by a speedup factor).
    Trace,
    /// Exponential interarrival gaps (a Poisson process).
    Poisson,
    /// Gamma interarrival gaps with the given coefficient of variation (cv = 1 is Poisson;
    /// cv > 1 is burstier, cv < 1 is more regular).
    Gamma { cv: f64 },
    /// Evenly spaced arrivals.
    Constant,
}

/// `n` arrival offsets in ns, nondecreasing, the first one 0.
///
/// * `Trace`: uses the first `n` of `trace_offsets_ns` (nondecreasing, `len >= n`), shifted so the
///   first maps to 0 and compressed uniformly. With `rate` (req/s) the factor is
///   `rate / trace_rate` where `trace_rate = (n-1) / (last - first)`, so the result has exactly the
///   requested mean rate; with `speedup` (> 0, 1.0 = as recorded) time is divided by it. Exactly
///   one of `rate` and `speedup` must be given.
/// * `Poisson`, `Gamma`, `Constant`: generated at `rate` req/s (required; `speedup` must be None).
///   The seed fixes the output; the trace is ignored.
pub fn arrival_offsets(
    kind: &Arrivals,
    n: usize,
    rate: Option<f64>,
    speedup: Option<f64>,
    trace_offsets_ns: &[i64],
    seed: u64,
) -> Result<Vec<i64>, CoreError> {
    if let Some(r) = rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(CoreError::config(
                "rate",
                format!("must be a finite number > 0 req/s, got {r}"),
            ));
        }
    }
    if let Some(s) = speedup {
        if !(s.is_finite() && s > 0.0) {
            return Err(CoreError::config(
                "speedup",
                format!("must be a finite factor > 0, got {s}"),
            ));
        }
    }
    match kind {
        Arrivals::Trace => trace_offsets(n, rate, speedup, trace_offsets_ns),
        other => {
            if speedup.is_some() {
                return Err(CoreError::config(
                    "speedup",
                    "applies only to trace arrivals; give rate instead",
                ));
            }
            let rate =
                rate.ok_or_else(|| CoreError::config("rate", "required for generated arrivals"))?;
            generated_offsets(other, n, rate, seed)
        }
    }
}

fn trace_offsets(
    n: usize,
    rate: Option<f64>,
    speedup: Option<f64>,
    trace: &[i64],
) -> Result<Vec<i64>, CoreError> {
    let divisor = match (rate, speedup) {
        (Some(_), Some(_)) => {
            return Err(CoreError::config(
                "rate",
                "give either rate or speedup for trace arrivals, not both",
            ))
        }
        (None, None) => {
            return Err(CoreError::config(
                "rate",
                "trace arrivals need a rate or a speedup",
            ))
        }
        (None, Some(s)) => Some(s),
        (Some(_), None) => None,
    };
    if trace.len() < n {
        return Err(CoreError::config(
            "trace_offsets_ns",
            format!(
                "trace has {} arrivals, fewer than the {n} requested",
                trace.len()
            ),
        ));
    }
    if let Some(i) = trace.windows(2).position(|w| w[1] < w[0]) {
        return Err(CoreError::config(
            "trace_offsets_ns",
            format!(
                "not sorted: arrival {} ({} ns) comes before arrival {} ({} ns)",
                i + 1,
                trace[i + 1],
                i,
                trace[i]
            ),
        ));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    let used = &trace[..n];
    let first = used[0];
    let span_ns = (used[n - 1] - first) as f64;
    // Output offset = (t - first) * scale.
    let scale = match (divisor, rate) {
        (Some(s), _) => 1.0 / s,
        (None, Some(r)) => {
            if n == 1 {
                return Ok(vec![0]);
            }
            if span_ns <= 0.0 {
                return Err(CoreError::config(
                    "trace_offsets_ns",
                    format!("all {n} used arrivals are simultaneous; no rate to rescale from"),
                ));
            }
            let trace_rate = (n - 1) as f64 / (span_ns / NS_PER_S);
            trace_rate / r
        }
        (None, None) => unreachable!("checked above"),
    };
    used.iter()
        .map(|&t| to_ns((t - first) as f64 * scale, "trace_offsets_ns"))
        .collect()
}

fn generated_offsets(
    kind: &Arrivals,
    n: usize,
    rate: f64,
    seed: u64,
) -> Result<Vec<i64>, CoreError> {
    let mean_gap_s = 1.0 / rate;
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return Ok(out);
    }
    match kind {
        Arrivals::Constant => {
            let gap_ns = mean_gap_s * NS_PER_S;
            for i in 0..n {
                out.push(to_ns(i as f64 * gap_ns, "rate")?);
            }
        }
        Arrivals::Poisson => {
            let exp = Exp::new(rate).map_err(|e| CoreError::config("rate", e.to_string()))?;
            accumulate(&mut out, n, &exp, seed)?;
        }
        Arrivals::Gamma { cv } => {
            let cv = *cv;
            if !(cv.is_finite() && cv > 0.0) {
                return Err(CoreError::config(
                    "cv",
                    format!("must be a finite number > 0, got {cv}"),
                ));
            }
            // Gamma(shape k, scale θ): mean kθ, CV 1/sqrt(k).
            let shape = 1.0 / (cv * cv);
            let scale = mean_gap_s / shape;
            let gamma =
                Gamma::new(shape, scale).map_err(|e| CoreError::config("cv", e.to_string()))?;
            accumulate(&mut out, n, &gamma, seed)?;
        }
        Arrivals::Trace => unreachable!("trace handled separately"),
    }
    Ok(out)
}

/// Push 0 then the running sum of n-1 gaps (seconds) drawn from `dist`, converted to ns.
fn accumulate(
    out: &mut Vec<i64>,
    n: usize,
    dist: &impl Distribution<f64>,
    seed: u64,
) -> Result<(), CoreError> {
    let mut rng = ChaCha12Rng::seed_from_u64(seed);
    let mut t_s = 0.0f64;
    out.push(0);
    for _ in 1..n {
        t_s += dist.sample(&mut rng).max(0.0);
        out.push(to_ns(t_s * NS_PER_S, "rate")?);
    }
    Ok(())
}

fn to_ns(x: f64, field: &'static str) -> Result<i64, CoreError> {
    // i64 ns covers ~292 years; anything past that is a configuration mistake.
    if (0.0..9.0e18).contains(&x) {
        Ok(x.round() as i64)
    } else {
        Err(CoreError::config(
            field,
            format!("schedule offset {x} ns is out of range"),
        ))
    }
}
