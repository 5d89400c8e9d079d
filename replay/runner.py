"""Running one replay stage: plan -> Rust runner (GIL released) -> per-request results.

The results are one row per request (times in ns from the run start, -1 where a thing never
happened; the chunk arrival times as a list column) plus the trace's own columns that later
analysis needs. Nothing per request crosses from Rust as a Python object: numpy columns and one
string buffer come back and become a polars DataFrame.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from replay.config import RunConfig
from replay.errors import RunnerError
from replay.plan import Plan, build_plan
from replay.targets.url import base_url, check_target
from replay.trace import Trace

__all__ = ["StageResult", "run_stage", "run_plan", "resolve_model", "Progress", "ERROR_KINDS"]

# progress(sent, completed, errors, total)
Progress = Callable[[int, int, int, int], None]


def _error_kinds() -> list[str]:
    from replay import _engine

    return list(_engine.error_kinds())


ERROR_KINDS: list[str] = _error_kinds()


@dataclass(frozen=True)
class StageResult:
    config: RunConfig
    requests: pl.DataFrame  # one row per request, see `_results_frame`
    start_unix_ns: int
    offered_rate: float
    cancelled: bool
    interrupted: bool

    @property
    def summary(self) -> dict:
        from replay.metrics import summarize

        return summarize(self)


def _strings(offsets: np.ndarray, data: bytes) -> pa.Array:
    n = len(offsets) - 1
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data))


def _results_frame(plan: Plan, raw: dict) -> pl.DataFrame:
    n = plan.n
    chunks = pl.DataFrame({"i": raw["chunk_request"].astype(np.uint32), "t": raw["chunk_t_ns"]})
    per_req = chunks.sort(["i", "t"]).group_by("i", maintain_order=True).agg(pl.col("t").alias("chunk_t_ns"))
    kinds = pl.Series("error", ERROR_KINDS, dtype=pl.Categorical)
    error_codes = pl.Series(raw["error_kind"].astype(np.uint32))
    frame = pl.DataFrame(
        {
            "i": np.arange(n, dtype=np.uint32),
            "request_id": plan.rows["request_id"],
            "session_id": plan.rows["session_id"],
            "api": plan.rows["api"],
            "input_tokens": plan.rows["input_tokens"],
            "expected_output_tokens": plan.rows["max_tokens"].fill_null(plan.rows["output_tokens"]),
            "intended_ns": raw["intended_ns"],
            "sent_ns": raw["sent_ns"],
            "first_byte_ns": raw["first_byte_ns"],
            "first_token_ns": raw["first_token_ns"],
            "end_ns": raw["end_ns"],
            "status": raw["status"].astype(np.int32),
            "error": kinds.gather(error_codes).cast(pl.Utf8),
            "error_detail": pl.from_arrow(_strings(raw["error_detail_offsets"], raw["error_detail_bytes"])),
            "prompt_tokens": raw["prompt_tokens"],
            "completion_tokens": raw["completion_tokens"],
            "cached_tokens": raw["cached_tokens"],
            "output_chunks": raw["output_chunks"],
        }
    )
    frame = frame.join(per_req, on="i", how="left").with_columns(pl.col("chunk_t_ns").fill_null([]))
    # -1 marks "never happened" in Rust; nulls are clearer in Parquet and polars.
    time_cols = ["sent_ns", "first_byte_ns", "first_token_ns", "end_ns"]
    count_cols = ["prompt_tokens", "completion_tokens", "cached_tokens"]
    return frame.with_columns(
        [pl.when(pl.col(c) >= 0).then(pl.col(c)).alias(c) for c in time_cols + count_cols]
    ).drop("i")


def run_plan(plan: Plan, config: RunConfig, progress: Progress | None = None) -> StageResult:
    """Send a prepared plan; returns when every request finished or the run was cancelled."""
    from replay import _engine

    callback = None
    if progress is not None:
        total = plan.n
        callback = lambda sent, completed, errors: progress(sent, completed, errors, total)  # noqa: E731

    headers = [("Authorization", f"Bearer {config.api_key}")] if config.api_key else []
    raw = _engine.run(
        base_url(config.url),
        list(plan.paths),
        plan.path_index,
        plan.bodies,
        plan.body_offsets,
        plan.offsets_ns,
        headers=headers,
        timeout_s=config.timeout_s,
        stall_timeout_s=config.stall_timeout_s,
        connect_timeout_s=config.connect_timeout_s,
        max_connections=config.max_connections,
        worker_threads=config.worker_threads,
        progress=callback,
        cpus=list(config.cpus),
    )
    if len(raw["intended_ns"]) != plan.n:
        raise RunnerError(f"runner returned {len(raw['intended_ns'])} records for {plan.n} requests")
    if progress is not None:
        failed = raw["error_kind"] > 0
        finished = int(((raw["end_ns"] >= 0) | failed).sum())
        progress(int((raw["sent_ns"] >= 0).sum()), finished, int(failed.sum()), plan.n)
    return StageResult(
        config=config,
        requests=_results_frame(plan, raw),
        start_unix_ns=int(raw["start_unix_ns"]),
        offered_rate=plan.offered_rate,
        cancelled=bool(raw["cancelled"]),
        interrupted=bool(raw["interrupted"]),
    )


def resolve_model(trace: Trace, config: RunConfig) -> str | None:
    """Check the target (TargetError, one line naming the URL, when it cannot serve: see
    :func:`~replay.targets.url.check_target`) and pick the model name to send: --model, else None
    (keep the bodies' own) when the target serves every model the trace names or lists none, else
    the target's first."""
    served = check_target(config.url, api_key=config.api_key, timeout_s=config.connect_timeout_s)
    if config.model:
        return config.model
    if not served:
        return None
    trace_models = set(trace.df["model"].drop_nulls().unique().to_list()) if "model" in trace.df.columns else set()
    if trace_models and trace_models <= set(served):
        return None
    return served[0]


def run_stage(trace: Trace, config: RunConfig, progress: Progress | None = None, model: str | None = None) -> StageResult:
    """Replay `trace` against `config.url` once (one stage). Without `model`, first checks the
    target and picks the model (:func:`resolve_model`)."""
    if model is None:
        model = resolve_model(trace, config)
    return run_plan(build_plan(trace, config, model=model), config, progress)
