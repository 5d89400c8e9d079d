"""Where a campaign's measurements run: one at a time, several engine instances at once on this
machine, or as tasks on a Ray cluster.

A pool's ``map(measure, configs)`` runs ``measure(config)`` for each config and returns one
:class:`Timed` per config, in order. ``slots`` is how many it runs at once; a campaign asks its
searcher for that many proposals a round (:meth:`optimizer.Campaign.run`).

- :class:`SerialPool`: here, one at a time (the default).
- :class:`LocalPool`: ``slots`` threads here. Each measurement starts its own engine on a free
  port, so ``slots`` engines serve at once. They share this machine's CPUs and GPUs: give each
  its own devices (an engine config that pins them), or the instances slow each other and every
  measurement, the baseline's noise floor included, is taken under that contention.
- :class:`RayPool`: each measurement is a Ray task that asks for ``cpus`` CPUs and ``gpus`` GPUs,
  so Ray places it on a node with room and runs as many at once as the cluster holds (capped at
  ``slots``). The measure callable and the trace it holds are sent once per round
  (``ray.put``); every node needs the engine (its binary or venv, and the model) where the
  engine adapter looks for it. (Ray 2.60 has no local mode any more; the tests start a
  single-node cluster on this machine.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from optimizer.verdict import Measurement

__all__ = ["Timed", "Pool", "SerialPool", "LocalPool", "RayPool", "timed"]

Measure = Callable[[Mapping[str, Any]], Measurement]


@dataclass(frozen=True)
class Timed:
    measurement: Measurement
    started: float  # unix seconds
    seconds: float  # wall time of the measurement


def timed(measure: Measure, config: Mapping[str, Any]) -> Timed:
    """``measure(config)`` with when it started and how long it took."""
    started, t = time.time(), time.monotonic()
    m = measure(config)
    return Timed(m, started, time.monotonic() - t)


class Pool(Protocol):
    slots: int

    def map(self, measure: Measure, configs: Sequence[Mapping[str, Any]]) -> list[Timed]: ...

    def close(self) -> None: ...


class SerialPool:
    slots = 1

    def map(self, measure: Measure, configs: Sequence[Mapping[str, Any]]) -> list[Timed]:
        return [timed(measure, c) for c in configs]

    def close(self) -> None:
        pass


class LocalPool:
    def __init__(self, slots: int) -> None:
        if slots < 1:
            from replay.errors import ConfigError

            raise ConfigError(f"--parallel: needs at least 1 engine instance, got {slots}")
        self.slots = slots
        self._threads = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="trial")

    def map(self, measure: Measure, configs: Sequence[Mapping[str, Any]]) -> list[Timed]:
        return list(self._threads.map(lambda c: timed(measure, c), configs))

    def close(self) -> None:
        self._threads.shutdown(wait=True)


class RayPool:
    """Measurements as Ray tasks. Connects to ``address`` (or ``RAY_ADDRESS``, or starts Ray on
    this machine) unless Ray is already initialized; what it started, :meth:`close` stops."""

    def __init__(self, slots: int, *, address: str | None = None, cpus: float = 1.0, gpus: float = 0.0) -> None:
        try:
            import ray
        except ImportError:
            from replay.errors import ConfigError

            raise ConfigError("--ray: Ray is not installed (pip install 'faithful-replay[ray]')") from None
        import logging

        self.slots = max(1, slots)
        self._ray = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        self._task = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=0)(timed)

    def map(self, measure: Measure, configs: Sequence[Mapping[str, Any]]) -> list[Timed]:
        ray = self._ray
        shared = ray.put(measure)
        out: list[Timed] = []
        for start in range(0, len(configs), self.slots):
            out.extend(ray.get([self._task.remote(shared, dict(c)) for c in configs[start : start + self.slots]]))
        return out

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()
