"""Bottleneck first: what limits the baseline, from the engine's own metrics during its replay.

While a measurement's stage runs, the engine's ``/metrics`` is read every ``SAMPLE_S`` (running
and waiting requests, KV-cache usage; :class:`MetricSampler`); with the counters at the end
(preemptions, prefix-cache queries and hits) they name the bottleneck with its evidence, and the
order in which the knobs are worth trying:

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
- otherwise **not saturated**: the engine kept up at this rate; knobs in the space's order.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SAMPLE_S", "MetricSampler", "Diagnosis", "diagnose"]

SAMPLE_S = 0.5
KV_FULL = 0.9
KV_ROOM = 0.5
COLD_HIT = 0.1


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


@dataclass(frozen=True)
class Diagnosis:
    bottleneck: str
    evidence: str
    order: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"bottleneck": self.bottleneck, "evidence": self.evidence, "order": self.order}


def _ordered(preferred: list[str], names: list[str]) -> list[str]:
    return [n for n in preferred if n in names] + [n for n in names if n not in preferred]


def diagnose(peaks: Mapping[str, float], counters: Mapping[str, float], config: Mapping[str, Any],
             max_num_seqs_default: int | None, names: list[str], offered_reuse: float | None = None) -> Diagnosis:
    """The bottleneck of one measurement (its gauge peaks and end counters), and the order to try
    ``names`` in."""
    running, waiting = peaks.get("running", 0.0), peaks.get("waiting", 0.0)
    kv = peaks.get("kv_usage")
    preemptions = counters.get("preemptions", 0.0) or 0.0
    cap = config.get("max_num_seqs", max_num_seqs_default)
    queries, hits = counters.get("prefix_cache_queries"), counters.get("prefix_cache_hits")
    kv_text = "unknown (not in the engine's metrics)" if kv is None else f"{kv:.0%}"
    if preemptions > 0 or (kv is not None and kv >= KV_FULL):
        return Diagnosis("KV-bound", f"{preemptions:.0f} preemptions, KV usage peaked at {kv_text}",
                         _ordered(["enable_prefix_caching", "max_num_seqs", "max_num_batched_tokens",
                                   "gpu_memory_utilization", "block_size"], names))
    if cap and running >= cap and waiting > 0 and (kv is None or kv <= KV_ROOM):
        return Diagnosis("batch-capped", f"max-num-seqs ({cap}) reached with up to {waiting:.0f} waiting while KV "
                                         f"usage peaked at {kv_text}",
                         _ordered(["max_num_seqs", "max_num_batched_tokens"], names))
    if waiting > 0 and (not cap or running < cap) and (kv is None or kv < KV_FULL):
        return Diagnosis("prefill-bound", f"up to {waiting:.0f} requests waited while the batch peaked at "
                                          f"{running:.0f}{f' of {cap}' if cap else ''} and KV usage at {kv_text}",
                         _ordered(["max_num_batched_tokens", "max_num_seqs", "enable_prefix_caching"], names))
    caching = config.get("enable_prefix_caching", True)
    hit_rate = (hits / queries) if queries else None
    if (offered_reuse or 0) > COLD_HIT and (not caching or (hit_rate is not None and hit_rate < COLD_HIT)):
        why = "prefix caching is off" if not caching else f"the prefix cache hit {hit_rate:.0%} of its queries"
        return Diagnosis("cache-cold", f"{why} while the workload offers {offered_reuse:.0%} prefix reuse",
                         _ordered(["enable_prefix_caching", "block_size"], names))
    return Diagnosis("not saturated", f"no queue: the batch peaked at {running:.0f} with {waiting:.0f} waiting, "
                                      f"KV usage at {kv_text}", list(names))
