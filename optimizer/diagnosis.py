"""Bottleneck first: what limits the baseline, from the engine's own metrics during its replay.

While a stage runs, the engine's ``/metrics`` is read every ``SAMPLE_S`` (running and waiting
requests, KV-cache usage; :class:`MetricSampler`); with the counters over the stage
(preemptions, prefix-cache queries and hits, and where the engine reports them the time requests
spent in prefill and in decode) they name the bottleneck with its evidence and the offered rate it
was seen at, and the order in which the knobs are worth trying.

The **diagnostic sweep** (:meth:`optimizer.measure.EngineMeasure.diagnose`, run once per
campaign on the baseline): on one engine start, one stage at each of ``SWEEP_FACTORS`` (0.5, 1, 2)
x the run's rate (with no rate, x its speedup), each with the run's own requests or duration,
sampled stage by stage, stopping at the first stage that names a bottleneck
(:func:`names_bottleneck`). :func:`diagnose_sweep` takes the diagnosis at the lowest rate where a
bottleneck shows, else the highest rate's ("not saturated" or "cannot tell"), and keeps every
rate's evidence. A
measure without a sweep is diagnosed from one stage (:func:`diagnose`). The bottlenecks:

- **KV-bound**: requests were preempted, or KV usage reached ``KV_FULL`` (90%): memory for KV
  blocks limits the batch. Try prefix caching (reuse saves blocks), then fewer sequences or a
  smaller prefill chunk, then the memory share.
- **batch-capped**: the running batch reached ``max_num_seqs`` while requests waited and KV was
  at most ``KV_ROOM`` (50%) used: the cap, not memory, limits. Try more sequences, then a larger
  scheduler token budget.
- **prefill-bound**: requests waited while the batch stayed under its cap and KV had room: the
  per-step token budget (chunked prefill) admits them slowly. Try a larger token budget first.
- **cache-cold**: the prefix cache hit under ``COLD_HIT`` (10%) of its queries (or is off) while
  the workload offers reuse: try prefix caching first.
- **cannot tell**: requests waited but no sample saw one running (the engine caught between
  steps, or a running gauge it does not export): nothing says whether the batch was at its cap,
  so neither batch-capped nor prefill-bound is named; knobs in the space's order.
- otherwise **not saturated**: the engine kept up at this rate; knobs in the space's order.

Every evidence line ends with the share of the requests' running time (in the engine, queueing
left out) that went to prefill, from vLLM's ``request_prefill_time_seconds`` and
``request_decode_time_seconds`` histograms (the embedded engine exports them too) or llama.cpp's
``prompt_seconds_total`` and ``tokens_predicted_seconds_total``; an engine that reports neither
(SGLang) is said not to. It is evidence, not a rule: it does not change the bottleneck named.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from replay.engine_metrics import KV_FULL  # one definition: the sweep's saturation line uses it too
from replay.errors import ConfigError

__all__ = [
    "SAMPLE_S",
    "SWEEP_FACTORS",
    "COUNTERS",
    "MetricSampler",
    "Diagnosis",
    "diagnose",
    "diagnose_sweep",
    "names_bottleneck",
    "counter_deltas",
    "phase_split",
]

SAMPLE_S = 0.5
# what a stage is diagnosed as when it names no bottleneck: the sweep looks past it to the next rate
UNNAMED = ("not saturated", "cannot tell")
KV_ROOM = 0.5
COLD_HIT = 0.1
# the diagnostic sweep's rates, as multiples of the run's rate
SWEEP_FACTORS = (0.5, 1.0, 2.0)
# the engine's counters (common names, replay.targets.engine.COMMON_METRICS) a sweep stage
# reports over its own span: the difference between the scrapes before and after it
COUNTERS = (
    "preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prompt_tokens",
    "generation_tokens",
    "requests_finished",
    "prefill_time_s",
    "prefill_requests",
    "decode_time_s",
    "decode_requests",
)


class MetricSampler:
    """Reads ``running.metrics()`` every ``SAMPLE_S`` on a thread of its own until stopped; keeps
    the peaks of the gauges. A scrape that fails is skipped."""

    def __init__(self, running, interval_s: float = SAMPLE_S) -> None:
        self.running = running
        self.interval_s = interval_s
        self.peaks: dict[str, float] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="replay-metrics", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                m = self.running.metrics()
            except Exception:  # noqa: BLE001 - a missed sample is not an error of the run
                continue
            self.samples += 1
            for key in ("running", "waiting", "kv_usage"):
                if key in m:
                    self.peaks[key] = max(self.peaks.get(key, 0.0), float(m[key]))

    def __enter__(self) -> MetricSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def counter_deltas(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """The :data:`COUNTERS` ``after`` reports, less what they were ``before`` (a stage's own)."""
    return {k: float(after[k]) - float(before.get(k, 0.0)) for k in COUNTERS if k in after}


@dataclass(frozen=True)
class Diagnosis:
    bottleneck: str
    evidence: str
    order: list[str] = field(default_factory=list)
    rate: float | None = None  # the offered rate (req/s) it was seen at, when known
    # the diagnostic sweep, one entry per rate: rate, factor, peaks, counters, goodput_rps,
    # throughput_rps, sent, completed, valid, and the bottleneck and evidence at that rate
    sweep: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "bottleneck": self.bottleneck,
            "evidence": self.evidence,
            "order": self.order,
            "rate": self.rate,
            "sweep": self.sweep,
        }

    def sweep_lines(self) -> list[str]:
        """One line per rate of the sweep, for the reports."""
        return [
            f"{_rate(s['rate'])}: {s['bottleneck']}, goodput {_num(s.get('goodput_rps'))} req/s, throughput "
            f"{_num(s.get('throughput_rps'))} req/s{'' if s.get('valid', True) else ' (the runner fell behind)'}"
            f" ({s['evidence']})"
            for s in self.sweep
        ]


def _rate(rate: float | None) -> str:
    return "at the trace's own rate" if rate is None else f"at {rate:.3g} req/s"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def phase_split(counters: Mapping[str, float]) -> str:
    """How the requests' running time split between prefill and decode, or that the engine does
    not report it."""
    prefill, decode = counters.get("prefill_time_s"), counters.get("decode_time_s")
    if prefill is None or decode is None:
        return "prefill vs decode time not reported by the engine"
    if prefill + decode <= 0:
        return "no prefill or decode time reported"
    n = counters.get("prefill_requests")
    over = f" over {n:.0f} requests" if n else ""
    return (
        f"prefill took {prefill / (prefill + decode):.0%} of the requests' running time (prefill {prefill:.3g} s, "
        f"decode {decode:.3g} s{over})"
    )


def _ordered(preferred: list[str], names: list[str]) -> list[str]:
    return [n for n in preferred if n in names] + [n for n in names if n not in preferred]


def diagnose(
    peaks: Mapping[str, float],
    counters: Mapping[str, float],
    config: Mapping[str, Any],
    max_num_seqs_default: int | None,
    names: list[str],
    offered_reuse: float | None = None,
    rate: float | None = None,
) -> Diagnosis:
    """The bottleneck of one stage (its gauge peaks and counters) offered at ``rate`` req/s, and
    the order to try ``names`` in."""
    found = _bottleneck(peaks, counters, config, max_num_seqs_default, names, offered_reuse)
    at = "" if rate is None else f"{_rate(rate)}: "
    return Diagnosis(found.bottleneck, f"{at}{found.evidence}; {phase_split(counters)}", found.order, rate)


def names_bottleneck(
    stage: Mapping[str, Any],
    config: Mapping[str, Any],
    max_num_seqs_default: int | None,
    names: list[str],
    offered_reuse: float | None = None,
) -> bool:
    """Whether a sweep stage names a bottleneck (not "not saturated" or "cannot tell"): the
    diagnostic sweep stops there, as :func:`diagnose_sweep` takes the lowest such rate."""
    found = diagnose(stage.get("peaks", {}), stage.get("counters", {}), config, max_num_seqs_default, names, offered_reuse)
    return found.bottleneck not in UNNAMED


def diagnose_sweep(
    sweep: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any],
    max_num_seqs_default: int | None,
    names: list[str],
    offered_reuse: float | None = None,
) -> Diagnosis:
    """The diagnosis of a sweep's stages (in rising rate: each with its rate, peaks and counters):
    the one at the lowest rate where a bottleneck shows, else the highest rate's ("not saturated"
    or "cannot tell");
    every rate's own, in ``sweep``."""
    if not sweep:
        raise ConfigError("diagnose_sweep: no stages")
    found = [
        diagnose(s.get("peaks", {}), s.get("counters", {}), config, max_num_seqs_default, names, offered_reuse) for s in sweep
    ]
    per_rate = [{**s, "bottleneck": d.bottleneck, "evidence": d.evidence} for s, d in zip(sweep, found)]
    i = next((i for i, d in enumerate(found) if d.bottleneck not in UNNAMED), len(found) - 1)
    pick = diagnose(
        sweep[i].get("peaks", {}),
        sweep[i].get("counters", {}),
        config,
        max_num_seqs_default,
        names,
        offered_reuse,
        rate=sweep[i].get("rate"),
    )
    return Diagnosis(pick.bottleneck, pick.evidence, pick.order, pick.rate, per_rate)


def _bottleneck(
    peaks: Mapping[str, float],
    counters: Mapping[str, float],
    config: Mapping[str, Any],
    max_num_seqs_default: int | None,
    names: list[str],
    offered_reuse: float | None,
) -> Diagnosis:
    running, waiting = peaks.get("running", 0.0), peaks.get("waiting", 0.0)
    kv = peaks.get("kv_usage")
    preemptions = counters.get("preemptions", 0.0) or 0.0
    cap = config.get("max_num_seqs", max_num_seqs_default)
    queries, hits = counters.get("prefix_cache_queries"), counters.get("prefix_cache_hits")
    kv_text = "unknown (not in the engine's metrics)" if kv is None else f"{kv:.0%}"
    if preemptions > 0 or (kv is not None and kv >= KV_FULL):
        return Diagnosis(
            "KV-bound",
            f"{preemptions:.0f} preemptions, KV usage peaked at {kv_text}",
            _ordered(
                ["enable_prefix_caching", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "block_size"], names
            ),
        )
    if cap and running >= cap and waiting > 0 and (kv is None or kv <= KV_ROOM):
        return Diagnosis(
            "batch-capped",
            f"max-num-seqs ({cap}) reached with up to {waiting:.0f} waiting while KV usage peaked at {kv_text}",
            _ordered(["max_num_seqs", "max_num_batched_tokens"], names),
        )
    if waiting > 0 and running <= 0:
        # every sample that saw a request waiting saw none running: the engine was caught between
        # steps (or its metrics lack the gauge), which says nothing of whether its batch was full
        return Diagnosis(
            "cannot tell",
            f"up to {waiting:.0f} requests waited but no sample saw a request running: the engine's "
            f"metrics cannot say what held them (KV usage peaked at {kv_text})",
            list(names),
        )
    if waiting > 0 and (not cap or running < cap) and (kv is None or kv < KV_FULL):
        return Diagnosis(
            "prefill-bound",
            f"up to {waiting:.0f} requests waited while the batch peaked at "
            f"{running:.0f}{f' of {cap}' if cap else ''} and KV usage at {kv_text}",
            _ordered(["max_num_batched_tokens", "max_num_seqs", "enable_prefix_caching"], names),
        )
    caching = config.get("enable_prefix_caching", True)
    hit_rate = (hits / queries) if queries and hits is not None else None
    if (offered_reuse or 0) > COLD_HIT and (not caching or (hit_rate is not None and hit_rate < COLD_HIT)):
        why = "prefix caching is off" if not caching else f"the prefix cache hit {hit_rate:.0%} of its queries"
        return Diagnosis(
            "cache-cold",
            f"{why} while the workload offers {offered_reuse:.0%} prefix reuse",
            _ordered(["enable_prefix_caching", "block_size"], names),
        )
    return Diagnosis(
        "not saturated",
        f"no queue: the batch peaked at {running:.0f} with {waiting:.0f} waiting, KV usage at {kv_text}",
        list(names),
    )
