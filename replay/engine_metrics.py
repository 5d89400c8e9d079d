"""The engine's own metrics during a stage: its Prometheus ``/metrics``, read while the stage runs.

Owns :class:`EngineSampler`, :class:`FleetSampler`, :func:`identify` and :func:`exhausted`. Every replay stage (``replay
run``, each stage of ``replay sweep``) reads the target's metrics endpoint once before it starts,
every :data:`SAMPLE_S` while it runs and once after it ends, on a thread of its own (pinned to the
runner's I/O CPUs when it has some, so never the dispatcher's). The endpoint is ``--metrics-url``,
else the target's ``/metrics`` when it answers; a stage whose endpoint does not answer, or answers
with no names we read, says why instead (``unavailable``), and the replay goes on.

The engine is told by its metric names (``vllm:``, ``sglang:``, ``llamacpp:``; the embedded
engine exports vLLM's) and read through its adapter's parser
(:meth:`replay.targets.process.ProcessEngine.common_metrics`), so every engine gives the same
common names. A stage's summary (``engine_metrics`` in summary.json):

- ``kv_usage``, ``running``, ``waiting``: p50 and max over the samples taken while it ran;
- ``preemptions``: how many the engine counted during the stage (after less before);
- ``prefix_cache_hit_rate``: prompt tokens found in the prefix cache over those looked up during
  the stage (counters, after less before), else the mean of the engine's own rate gauge.

:func:`exhausted` names the resource a stage ran out of, for the saturation line.

A fleet (:mod:`replay.fleet`) is read replica by replica (:class:`FleetSampler`): its summary has
each replica's under ``replicas`` (by name) and, at the top, the fleet's: the largest p50 and max
of each gauge, the preemptions summed, the prefix-cache hit rate averaged over the replicas that
report one; so :func:`exhausted` names what the fullest replica ran out of.
"""

from __future__ import annotations

import os
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["SAMPLE_S", "KV_FULL", "EngineSampler", "FleetSampler", "identify", "exhausted", "describe"]

SAMPLE_S = 1.0
# KV usage at or above this share is a full cache (the optimizer's diagnosis uses it too)
KV_FULL = 0.9
GAUGES = ("kv_usage", "running", "waiting")
# metric name prefix -> the engine (replay.targets.registry.ENGINES) whose adapter reads them
_PREFIXES = (("vllm:", "vllm"), ("sglang:", "sglang"), ("llamacpp:", "llama-server"))
_TIMEOUT_S = 2.0


def identify(names: set[str]) -> str | None:
    """The engine whose metric names these are (its name in the registry), or None."""
    for prefix, engine in _PREFIXES:
        if any(n.startswith(prefix) for n in names):
            return engine
    return None


class EngineSampler:
    """Reads ``url`` (a Prometheus endpoint) before, during (every ``interval_s``) and after a
    stage; :meth:`summary` is the stage's ``engine_metrics``. ``headers`` go with every read (the
    target's --header / --api-key); an https endpoint's certificate is checked under ``context``
    (the target's --ca-cert / --insecure); ``cpus`` pin the reading thread."""

    def __init__(
        self,
        url: str,
        headers: Sequence[tuple[str, str]] = (),
        interval_s: float = SAMPLE_S,
        cpus: Sequence[int] = (),
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.url = url
        self.headers = dict(headers)
        self.context = context
        self.interval_s = interval_s
        self.cpus = tuple(cpus)
        self.engine: str | None = None
        self.unavailable: str | None = None
        self._reader: Any = None  # the adapter class whose common_metrics reads a scrape
        self._first: dict[str, float] = {}
        self._last: dict[str, float] = {}
        self._samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> dict[str, float]:
        from replay.targets.prometheus import parse

        request = urllib.request.Request(self.url, headers=self.headers)
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S, context=self.context) as resp:  # noqa: S310 (http(s) only)
            scrape = parse(resp.read().decode("utf-8", errors="replace"), source=self.url)
        if self._reader is None:
            from replay.targets.registry import engine_class

            self.engine = identify(scrape.names())
            if self.engine is None:
                raise ValueError("no vLLM, SGLang or llama.cpp metric names")
            self._reader = engine_class(self.engine)
        return self._reader.common_metrics(scrape)

    def _loop(self) -> None:
        if self.cpus:
            try:
                os.sched_setaffinity(threading.get_native_id(), self.cpus)
            except OSError:
                pass  # not pinned: it reads once a second
        while not self._stop.wait(self.interval_s):
            try:
                self._samples.append(self._read())
            except (OSError, ValueError):  # a missed read is not an error of the stage
                continue

    def __enter__(self) -> EngineSampler:
        try:
            self._first = self._read()
        except urllib.error.HTTPError as e:
            self.unavailable = f"GET {self.url} answered HTTP {e.code}"
        except (OSError, ValueError) as e:
            self.unavailable = f"GET {self.url}: {getattr(e, 'reason', e)}"
        if self.unavailable is None:
            self._thread = threading.Thread(target=self._loop, name="replay-metrics", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=_TIMEOUT_S + 1)
        try:
            self._last = self._read()
        except (OSError, ValueError):
            self._last = self._samples[-1] if self._samples else {}

    def summary(self) -> dict:
        """The stage's ``engine_metrics`` (see the module docstring)."""
        if self.unavailable is not None:
            return {"url": self.url, "unavailable": self.unavailable}
        out: dict[str, Any] = {"url": self.url, "engine": self.engine, "samples": len(self._samples)}
        for name in GAUGES:
            values = [s[name] for s in self._samples if name in s]
            if values:
                out[name] = {"p50": float(np.percentile(values, 50)), "max": float(max(values))}
        before, after = self._first, self._last

        def delta(name: str) -> float | None:
            return after[name] - before[name] if name in after and name in before else None

        if delta("preemptions") is not None:
            out["preemptions"] = delta("preemptions")
        queries, hits = delta("prefix_cache_queries"), delta("prefix_cache_hits")
        if queries:
            out["prefix_cache_hit_rate"] = (hits or 0.0) / queries
        else:
            rates = [s["prefix_cache_hit_rate"] for s in self._samples if "prefix_cache_hit_rate" in s]
            if rates:
                out["prefix_cache_hit_rate"] = float(np.mean(rates))
        return out


class FleetSampler:
    """Reads every replica's metrics (one :class:`EngineSampler` each, by replica name) before,
    during and after a stage; :meth:`summary` is the fleet's ``engine_metrics`` (see the module
    docstring)."""

    def __init__(self, samplers: dict[str, EngineSampler]) -> None:
        self.samplers = samplers

    def __enter__(self) -> FleetSampler:
        for s in self.samplers.values():
            s.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for s in self.samplers.values():
            s.__exit__(*exc)

    def summary(self) -> dict:
        each = {name: s.summary() for name, s in self.samplers.items()}
        read = [m for m in each.values() if "unavailable" not in m]
        if not read:
            first = next(iter(each.values()))
            return {"url": first["url"], "unavailable": first["unavailable"], "replicas": each}
        out: dict[str, Any] = {
            "url": ", ".join(m["url"] for m in read),
            "engine": read[0]["engine"],
            "samples": sum(m["samples"] for m in read),
        }
        for name in GAUGES:
            values = [m[name] for m in read if name in m]
            if values:
                out[name] = {"p50": max(v["p50"] for v in values), "max": max(v["max"] for v in values)}
        if any("preemptions" in m for m in read):
            out["preemptions"] = sum(m.get("preemptions", 0.0) for m in read)
        rates = [m["prefix_cache_hit_rate"] for m in read if "prefix_cache_hit_rate" in m]
        if rates:
            out["prefix_cache_hit_rate"] = float(np.mean(rates))
        out["replicas"] = each
        return out


def exhausted(m: dict | None) -> str | None:
    """The resource a stage's engine ran out of, from its ``engine_metrics``: the KV cache
    (preemptions, or usage at :data:`KV_FULL`), else its batch (requests waited while KV had
    room), else None (nothing says so)."""
    if not m or "unavailable" in m:
        return None
    kv = (m.get("kv_usage") or {}).get("max")
    waiting = (m.get("waiting") or {}).get("max")
    running = (m.get("running") or {}).get("max")
    if m.get("preemptions") or (kv is not None and kv >= KV_FULL):
        return (
            f"the KV cache (usage max {kv:.0%}" if kv is not None else "the KV cache ("
        ) + f", {m.get('preemptions', 0):.0f} preemptions)"
    if waiting:
        return f"the batch (up to {waiting:.0f} waited while {running or 0:.0f} ran" + (
            f", KV usage max {kv:.0%})" if kv is not None else ")"
        )
    return None


def describe(m: dict | None) -> str:
    """One line for a stage's ``engine_metrics``."""
    if not m:
        return "engine metrics: not read"
    if "unavailable" in m:
        return f"engine metrics: unavailable ({m['unavailable']})"
    parts = [f"{name} p50 {m[name]['p50']:.3g} max {m[name]['max']:.3g}" for name in GAUGES if name in m]
    if "prefix_cache_hit_rate" in m:
        parts.append(f"prefix cache hits {m['prefix_cache_hit_rate']:.0%}")
    if "preemptions" in m:
        parts.append(f"preemptions {m['preemptions']:.0f}")
    fleet = f", {len(m['replicas'])} replicas: the fullest's gauges" if "replicas" in m else ""
    return f"engine metrics ({m['engine']} names, {m['samples']} samples{fleet}): " + (", ".join(parts) or "none read")
