"""The request plan: which trace rows are sent, when, to which path, with which exact bytes.

A plan is columns ready for the Rust runner (offsets in ns, one bytes buffer of bodies with
offsets, a path index per request). Bodies are the trace's bodies with the replay's settings
applied: streaming with usage, `max_tokens` from the trace and the engine's ignore-EOS flag (so the
server decodes as much as live traffic did), and the target's model name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import polars as pl

from replay.config import RunConfig
from replay.errors import ConfigError, TraceError
from replay.trace import Trace

__all__ = ["Plan", "build_plan", "API_PATHS"]

API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@dataclass(frozen=True)
class Plan:
    rows: pl.DataFrame  # the selected trace rows, in send order (request_id, input/output tokens, ...)
    offsets_ns: np.ndarray  # int64, intended send offset from the run start
    path_index: np.ndarray  # uint8 index into `paths`
    paths: tuple[str, ...]
    bodies: bytes
    body_offsets: np.ndarray  # uint64, n + 1 entries

    @property
    def n(self) -> int:
        return len(self.offsets_ns)

    @property
    def offered_rate(self) -> float:
        """Mean scheduled rate in req/s: (n - 1) over the span of send offsets."""
        if self.n < 2 or self.offsets_ns[-1] <= self.offsets_ns[0]:
            return float("nan")
        return (self.n - 1) / ((self.offsets_ns[-1] - self.offsets_ns[0]) / 1e9)


def _offsets(trace: Trace, config: RunConfig, n: int) -> np.ndarray:
    from replay import _engine

    arrivals = config.arrivals
    trace_us = trace.df["arrival_us"].to_numpy()[:n].astype(np.int64)
    if arrivals.kind == "trace":
        rate, speedup = config.rate, config.speedup
        if rate is None and speedup is None:
            speedup = 1.0
        if n < 2 or (rate is not None and trace_us[-1] == trace_us[0]):
            # one request, or all at one instant: nothing to rescale
            return trace_us - trace_us[0] if rate is None else np.zeros(n, np.int64)
        return _engine.arrival_offsets("trace", n, trace_us * 1000, rate=rate, speedup=speedup, seed=arrivals.seed)
    if config.rate is None:
        raise ConfigError(f"--arrivals {arrivals.kind}: needs --rate")
    return _engine.arrival_offsets(
        arrivals.kind, n, np.zeros(0, np.int64), rate=config.rate, cv=arrivals.cv, seed=arrivals.seed
    )


def _rewrite_body(body: str, row: int, *, model: str | None, max_tokens: int | None, ignore_eos: bool) -> bytes:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        raise TraceError(f"column 'body' row {row}: not JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise TraceError(f"column 'body' row {row}: not a JSON object")
    obj["stream"] = True
    obj["stream_options"] = {"include_usage": True}
    if max_tokens is not None:
        obj["max_tokens"] = int(max_tokens)
        obj.pop("max_completion_tokens", None)
        if ignore_eos:
            obj["ignore_eos"] = True
    if model is not None:
        obj["model"] = model
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def build_plan(trace: Trace, config: RunConfig, model: str | None = None) -> Plan:
    """Select the rows this stage sends and make their send times and bodies.

    `model` (or `config.model`, which wins) replaces every body's model name.
    """
    total = trace.df.height
    if total == 0:
        raise TraceError("trace is empty")
    n = total
    if config.requests is not None:
        if config.requests > total:
            raise ConfigError(f"--requests: {config.requests} asked, the trace has {total} rows")
        n = config.requests
    offsets = np.asarray(_offsets(trace, config, n), dtype=np.int64)
    if config.duration_s is not None:
        n = int(np.searchsorted(offsets, int(config.duration_s * 1e9), side="left"))
        if n == 0:
            raise ConfigError(f"--duration: {config.duration_s}s keeps no request")
        offsets = offsets[:n]
    rows = trace.df.head(n)

    model = config.model or model
    paths = tuple(API_PATHS.values())
    api_codes = {api: i for i, api in enumerate(API_PATHS)}
    path_index = np.fromiter((api_codes[a] for a in rows["api"]), dtype=np.uint8, count=n)
    max_tokens = rows["max_tokens"].fill_null(rows["output_tokens"]).to_list()
    chunks: list[bytes] = []
    body_offsets = np.zeros(n + 1, dtype=np.uint64)
    pos = 0
    for i, (body, mt) in enumerate(zip(rows["body"], max_tokens)):
        b = _rewrite_body(body, i, model=model, max_tokens=mt, ignore_eos=config.ignore_eos)
        chunks.append(b)
        pos += len(b)
        body_offsets[i + 1] = pos
    return Plan(
        rows=rows,
        offsets_ns=offsets,
        path_index=path_index,
        paths=paths,
        bodies=b"".join(chunks),
        body_offsets=body_offsets,
    )
