"""Presidio analysers on a Ray cluster: the executor a :class:`redact.pipeline.Redactor` analyses
on with ``ray_address`` (``replay capture --redact-ray [ADDRESS]``), in place of its worker
processes.

Owns :class:`RayAnalyzerPool` and :data:`LOCAL`. Each of ``workers`` Ray actors (one CPU each)
holds a :class:`redact.worker.ChunkAnalyzer` built as a worker process builds it (the Presidio
analyser, and the surrogates of the values it finds: the key goes to the actors, which see the
raw text anyway); chunks of texts go to the actors in turn and come back as
:class:`concurrent.futures.Future` objects, so the Redactor's rules are unchanged: a chunk that
times out or whose actor died is retried text by text on fresh actors, and a text that still
cannot be analysed is reported as such (its record is dropped, never written raw).

- ``LOCAL`` ("local") starts a Ray cluster of this machine's CPUs in this process (stopped again
  by :meth:`RayAnalyzerPool.shutdown`); any other address joins that cluster (``auto``,
  ``ray://host:10001``, ``host:6379``), whose nodes must have faithful-replay installed.
- Raw text stays in memory: a local cluster is started with object spilling off, so a text that
  does not fit Ray's object store fails its analysis (and its record is dropped) instead of being
  written to ``/tmp/ray``. On a cluster started elsewhere, that cluster's spilling settings apply.
- ``ray`` is the optional extra ``ray`` (``pip install 'faithful-replay[ray]'``).
"""

from __future__ import annotations

import logging
import os
import sys
from concurrent.futures import Future
from typing import Any

from replay.errors import ConfigError

__all__ = ["LOCAL", "RayAnalyzerPool"]

LOCAL = "local"
_started_here = False  # this process started the Ray it is connected to (and stops it)


class _Analyzer:
    """One Ray actor: a :class:`redact.worker.ChunkAnalyzer`, answering chunks as a worker
    process does (the spans, and the surrogates of the values found)."""

    def __init__(self, *init_args: Any):
        from redact.worker import ChunkAnalyzer

        self.worker = ChunkAnalyzer(*init_args)

    def analyze(self, texts: list[str]) -> tuple[list, list]:
        return self.worker.analyze(texts)


def _ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("--redact-ray: Ray is not installed (pip install 'faithful-replay[ray]')") from None
    return ray


CONNECT_TIMEOUT_S = 5.0


def _check_reachable(address: str) -> None:
    """A ``host:port`` address (``ray://`` or not) that takes no TCP connection within
    :data:`CONNECT_TIMEOUT_S` is a one-line error now (Ray itself waits minutes for it)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "local", "auto": Ray's own lookup, which fails at once when there is none
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise ConfigError(f"--redact-ray {address}: no Ray cluster answers there ({e.strerror or e})") from None


class RayAnalyzerPool:
    """``workers`` analyser actors on the Ray cluster at ``address`` (:data:`LOCAL`: one started
    here). ``init_args`` are a :class:`redact.worker.ChunkAnalyzer`'s (entities, threshold,
    extra recognizers, the key and the tokenizer's name)."""

    def __init__(self, workers: int, init_args: tuple, address: str):
        global _started_here
        ray = _ray()
        self._ray = ray
        if not ray.is_initialized():
            options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False, "include_dashboard": False}
            _check_reachable(address)
            if address == LOCAL:
                options["_system_config"] = {"automatic_object_spilling_enabled": False}
                # the actors import what this process imports (a checkout run from its folder,
                # a user's own recognizers)
                options["runtime_env"] = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}}
            else:
                options["address"] = address
            try:
                ray.init(**options)
            except Exception as e:  # noqa: BLE001 (Ray's own errors: one line naming the address)
                raise ConfigError(f"--redact-ray {address}: cannot join the cluster ({type(e).__name__}: {e})") from None
            _started_here = True
        actor = ray.remote(num_cpus=1)(_Analyzer)
        self.actors = [actor.remote(*init_args) for _ in range(workers)]
        self._next = 0

    def submit(self, fn: Any, texts: list[str]) -> Future:
        """Analyse ``texts`` on the next actor (``fn`` is the worker processes' function, whose
        work the actor does)."""
        actor = self.actors[self._next % len(self.actors)]
        self._next += 1
        return actor.analyze.remote(texts).future()

    def kill(self) -> None:
        """Stop the actors (a hung one too); the cluster stays for the next pool."""
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Stop the actors, and Ray itself when this process started it."""
        global _started_here
        self.kill()
        if _started_here:
            self._ray.shutdown()
            _started_here = False
