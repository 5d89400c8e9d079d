"""The optimizer's hypotheses, written from the diagnosis and checked against what was measured.

A proposal changes knobs of the incumbent config. Its hypothesis names the mechanism the change
works through, given the incumbent's bottleneck (:mod:`optimizer.diagnosis`), and the engine
metrics that mechanism predicts will move and which way. :data:`MECHANISMS` is the table, keyed
by (bottleneck, the knob's role, up or down); a knob's role (:data:`ROLES`) maps each engine's
name for it (vLLM's ``max_num_seqs``, llama.cpp's ``parallel``, SGLang's
``max_running_requests``, ...) onto one mechanism. A change the table does not cover predicts only
that the objective rises.

After the candidate's run each prediction is checked against the incumbent's own run (the first
run of its noise floor) with :func:`check`: **held** when the metric moved the predicted way by
more than :data:`MOVED` (10%) of the incumbent's value (and more than the metric's floor in
:data:`METRICS`), **refuted** when it did not (stayed, or moved the other way), **not measurable**
when either run lacks it. A prediction of "no change" holds when the metric stayed within that
tolerance. The candidate's own metrics are diagnosed again (:func:`optimizer.diagnosis.diagnose`),
so the hypothesis of a proposal made after a win starts from the new incumbent's state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ROLES",
    "METRICS",
    "MECHANISMS",
    "MOVED",
    "HELD",
    "REFUTED",
    "NOT_MEASURABLE",
    "Mechanism",
    "observed",
    "hypothesis",
    "check",
    "score",
]

HELD, REFUTED, NOT_MEASURABLE = "held", "refuted", "not measurable"
MOVED = 0.10  # a metric moved when it changed by more than this share of the incumbent's value

# each engine's knob -> its role in the mechanisms, and whether "up" means turning the role up
ROLES: dict[str, tuple[str, bool]] = {
    "max_num_seqs": ("batch cap", True),
    "parallel": ("batch cap", True),
    "max_running_requests": ("batch cap", True),
    "max_num_batched_tokens": ("token budget", True),
    "batch_size": ("token budget", True),
    "max_prefill_tokens": ("token budget", True),
    "chunked_prefill_size": ("token budget", True),
    "enable_prefix_caching": ("prefix cache", True),
    "disable_radix_cache": ("prefix cache", False),
    "cache_reuse": ("prefix cache", True),
    "gpu_memory_utilization": ("KV memory", True),
    "mem_fraction_static": ("KV memory", True),
}

# metric -> (what it is, the smallest change that counts as a move; :func:`observed` reads them)
METRICS: dict[str, tuple[str, float]] = {
    "waiting": ("peak requests waiting (engine)", 1.0),
    "running": ("peak requests running (engine)", 1.0),
    "kv_usage": ("peak KV-cache usage (engine)", 0.02),
    "preemptions": ("preemptions (engine)", 1.0),
    "prefix_hit_rate": ("prefix-cache hits per query (engine)", 0.02),
    "ttft_p50_ms": ("TTFT p50 (replay)", 1.0),
    "objective": ("the objective", 0.0),
}


@dataclass(frozen=True)
class Mechanism:
    text: str
    predictions: tuple[tuple[str, int], ...]  # (metric of METRICS, +1 rises / -1 falls / 0 stays)


_M = Mechanism
# (bottleneck, role, up?) -> mechanism; docs/optimizer.md lists the same table
MECHANISMS: dict[tuple[str, str, bool], Mechanism] = {
    ("batch-capped", "batch cap", True): _M(
        "the cap admits more of the waiting requests at once", (("running", 1), ("waiting", -1), ("ttft_p50_ms", -1))
    ),
    ("batch-capped", "batch cap", False): _M(
        "a lower cap leaves more requests waiting", (("running", -1), ("waiting", 1), ("ttft_p50_ms", 1))
    ),
    ("batch-capped", "token budget", True): _M(
        "the cap, not the token budget, limits: a larger budget changes little", (("objective", 0),)
    ),
    ("prefill-bound", "token budget", True): _M(
        "more prompt tokens per step admit the waiting requests sooner", (("waiting", -1), ("ttft_p50_ms", -1))
    ),
    ("prefill-bound", "token budget", False): _M(
        "fewer prompt tokens per step admit requests more slowly", (("waiting", 1), ("ttft_p50_ms", 1))
    ),
    ("prefill-bound", "batch cap", True): _M(
        "the token budget, not the cap, limits admission: a higher cap changes little", (("objective", 0),)
    ),
    ("KV-bound", "prefix cache", True): _M(
        "shared prefixes are stored once and reused: fewer blocks per request", (("prefix_hit_rate", 1), ("preemptions", -1))
    ),
    ("KV-bound", "batch cap", False): _M(
        "fewer sequences hold KV blocks at once: fewer preemptions", (("preemptions", -1), ("running", -1))
    ),
    ("KV-bound", "batch cap", True): _M("more sequences compete for the same KV blocks: more preemptions", (("preemptions", 1),)),
    ("KV-bound", "token budget", False): _M("smaller prefill chunks hold fewer new blocks per step", (("preemptions", -1),)),
    ("KV-bound", "KV memory", True): _M(
        "more memory for KV blocks: fewer preemptions, lower usage", (("preemptions", -1), ("kv_usage", -1))
    ),
    ("cache-cold", "prefix cache", True): _M(
        "the workload's shared prefixes are served from the cache", (("prefix_hit_rate", 1), ("ttft_p50_ms", -1))
    ),
    ("not saturated", "batch cap", True): _M(
        "the engine kept up: a higher cap has nothing to admit", (("objective", 0), ("waiting", 0))
    ),
    ("not saturated", "token budget", True): _M(
        "the engine kept up: a larger token budget has no queue to drain", (("objective", 0), ("waiting", 0))
    ),
    ("not saturated", "prefix cache", True): _M(
        "the engine kept up; reuse served from the cache shortens prefill", (("prefix_hit_rate", 1), ("ttft_p50_ms", -1))
    ),
}


def observed(details: Mapping[str, Any] | None, value: float | None = None) -> dict[str, float]:
    """The :data:`METRICS` a run's measurement details hold (engine peaks and counters, the
    stage summary), and ``objective`` when ``value`` is given."""
    details = details or {}
    peaks, counters = details.get("peaks") or {}, details.get("counters") or {}
    out = {k: float(peaks[k]) for k in ("waiting", "running", "kv_usage") if peaks.get(k) is not None}
    if counters.get("preemptions") is not None:
        out["preemptions"] = float(counters["preemptions"])
    queries, hits = counters.get("prefix_cache_queries"), counters.get("prefix_cache_hits")
    if queries:
        out["prefix_hit_rate"] = float(hits or 0.0) / float(queries)
    ttft = (((details.get("summary") or {}).get("ttft_ms") or {}).get("from_intended") or {}).get("p50")
    if ttft is not None:
        out["ttft_p50_ms"] = float(ttft)
    if value is not None:
        out["objective"] = float(value)
    return out


def _moves(base: Mapping[str, Any], config: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """(knob, role, up?) of each knob the proposal changes that has a role."""
    out = []
    for knob, new in config.items():
        old = base.get(knob)
        if old == new or knob not in ROLES or old is None:
            continue
        try:
            up = new > old
        except TypeError:
            continue
        role, same_way = ROLES[knob]
        out.append((knob, role, up == same_way))
    return out


def _change(base: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    parts = [f"{k} {base.get(k, 'default')} -> {v}" for k, v in config.items() if base.get(k) != v]
    return ", ".join(parts) or "no change"


def _words(predictions: list[dict]) -> str:
    verb = {1: "rises", -1: "falls", 0: "stays"}
    return "; ".join(f"{METRICS[p['metric']][0]} {verb[p['direction']]}" for p in predictions)


def hypothesis(
    base: Mapping[str, Any], config: Mapping[str, Any], bottleneck: str | None = None, evidence: str = ""
) -> dict[str, Any]:
    """The hypothesis for moving from ``base`` (diagnosed as ``bottleneck``) to ``config``:
    explanation, change, mechanism, predictions (metric and direction), prediction and
    falsified_by in words."""
    mechanisms = [(knob, MECHANISMS.get((bottleneck or "", role, up))) for knob, role, up in _moves(base, config)]
    known = [(knob, m) for knob, m in mechanisms if m is not None]
    predictions: list[dict] = []
    for _, m in known:
        for metric, direction in m.predictions:
            if not any(p["metric"] == metric for p in predictions):
                predictions.append({"metric": metric, "direction": direction})
    if not predictions:
        predictions = [{"metric": "objective", "direction": 1}]
    mechanism = (
        "; ".join(f"{knob}: {m.text}" for knob, m in known)
        or f"no mechanism on record for this change at '{bottleneck or 'unknown'}': the objective should rise"
    )
    explanation = f"{bottleneck}: {evidence}" if bottleneck else (evidence or "the knob may be what limits the objective")
    return {
        "explanation": explanation,
        "change": _change(base, config),
        "mechanism": mechanism,
        "predictions": predictions,
        "prediction": _words(predictions),
        "falsified_by": f"any of these moving the other way or not at all (by more than {MOVED:.0%} of the incumbent's value)",
    }


def check(
    predictions: list[dict], incumbent: Mapping[str, float], candidate: Mapping[str, float], verdict: str | None = None
) -> list[dict]:
    """Each prediction with what the metric did: incumbent and candidate values and held / refuted
    / not measurable (module docstring). The objective's move is the campaign's ``verdict`` on
    the candidate when given (better: rose, worse: fell, same: stayed; the noise decides, not
    :data:`MOVED`)."""
    out = []
    for p in predictions:
        metric, direction = p["metric"], p["direction"]
        a, b = incumbent.get(metric), candidate.get(metric)
        if metric == "objective" and verdict in ("better", "same", "worse"):
            moved = {"better": 1, "same": 0, "worse": -1}[verdict]
        elif a is None or b is None:
            out.append({**p, "incumbent": a, "candidate": b, "outcome": NOT_MEASURABLE})
            continue
        else:
            tol = max(MOVED * abs(a), METRICS[metric][1])
            moved = 0 if abs(b - a) <= tol else (1 if b > a else -1)
        out.append({**p, "incumbent": a, "candidate": b, "outcome": HELD if moved == direction else REFUTED})
    return out


def score(checks: list[dict] | None) -> str:
    """A step's prediction score in words: "2 held, 1 refuted", or "-" when nothing was checked."""
    if not checks:
        return "-"
    counts = {o: sum(c["outcome"] == o for c in checks) for o in (HELD, REFUTED, NOT_MEASURABLE)}
    return ", ".join(f"{n} {o}" for o, n in counts.items() if n)
