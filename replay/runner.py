"""Running one replay stage: plan -> Rust runner (GIL released) -> per-request results.

The results are one row per request (times in ns from the run start, null where a thing never
happened; the chunk arrival times as a list column of u32 microseconds after the first token)
plus the trace's own columns that later analysis needs. Nothing per request crosses from Rust as
a Python object: numpy columns and one string buffer come back, in batches of consecutive
requests as the stage goes, and become polars DataFrames.

Before t0 the runner opens keep-alive connections, as many as the schedule has requests in
flight at its peak if each takes its expected response time (:data:`WARM_CAP` at most; see
:func:`warm_connections`), each checked by one ``GET /v1/models``, and keeps them open while
it runs; the warm-up and the runner's own thread statistics come back as
``StageResult.runner``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np
import polars as pl
import pyarrow as pa

import contextlib
import dataclasses

from replay.causal import causal_gates
from replay.dag import after_failed, dag_gates
from replay.config import RunConfig, SessionMode
from replay.engine_metrics import EngineSampler, FleetSampler
from replay.errors import RunnerError
from replay.fleet import route_keys
from replay.metrics import StageResult
from replay.plan import Plan, build_plan, send_limits
from replay.targets.url import base_url, check_target
from replay.trace import Trace

if TYPE_CHECKING:
    from replay._engine import Rows, RunOptions

__all__ = [
    "StageResult",
    "run_stage",
    "run_plan",
    "resolve_model",
    "warm_connections",
    "Progress",
    "RowsSink",
    "ERROR_KINDS",
    "WARM_CAP",
    "READER_STALL_S",
    "WARM_STALL_CAP",
]

# most connections opened before t0 for the requests in flight (Little's law)
WARM_CAP = 64
# ... and as a cushion for a reader held off its CPU: the requests due in this long must each
# find an idle connection the dispatcher writes on itself. Measured on 2 cores beside a busy local
# server (nginx at 5,000 req/s): with 64 connections the I/O thread was away long enough (up to
# 75 ms) to empty the pool in 2 of 20 stages (send lag p99 15-52 ms), with 512 in none of 20.
READER_STALL_S = 0.1
WARM_STALL_CAP = 2048
# expected response time where the trace has no recorded one: a first token after ~0.25 s,
# then ~30 ms per output token (a typical decode pace under load)
_EXPECTED_TTFT_S = 0.25
_EXPECTED_TPOT_S = 0.03

# progress(sent, completed, errors, total)
Progress = Callable[[int, int, int, int], None]
# sees each batch of finished requests' results as the stage goes
RowsSink = Callable[[pl.DataFrame], None]


def _error_kinds() -> list[str]:
    from replay import _engine

    return list(_engine.error_kinds())


ERROR_KINDS: list[str] = _error_kinds()


def _strings(offsets: np.ndarray, data: bytes) -> pa.Array:
    n = len(offsets) - 1
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data))


def _numbers(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """A numpy column as an Arrow array over the same buffer. Not `pa.array`: its first call
    imports pandas (to ask whether the column is a pandas one), which held the GIL for about
    0.7 s in the middle of a process's first stage, and the body feeder waited for it."""
    values = np.ascontiguousarray(values, dtype=kind.to_pandas_dtype())
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def _results_frame(plan: Plan, raw: Rows, replicas: tuple[str, ...] = ()) -> pl.DataFrame:
    """The rows of `raw` (requests ``raw["first"]`` on) as a results frame; with a fleet's
    `replicas` (their names, replica 0 first), a ``replica`` column names where each request went
    (null: never sent)."""
    rows = plan.rows.slice(int(raw["first"]), len(raw["intended_ns"]))
    chunks = pa.LargeListArray.from_arrays(_numbers(raw["chunk_offsets"], pa.int64()), _numbers(raw["chunk_us"], pa.uint32()))
    kinds = pl.Series("error", ERROR_KINDS, dtype=pl.Categorical)
    error_codes = pl.Series(raw["error_kind"].astype(np.uint32))
    frame = pl.DataFrame(
        {
            "request_id": rows["request_id"],
            "session_id": rows["session_id"],
            "api": rows["api"],
            "input_tokens": rows["input_tokens"],
            "expected_output_tokens": send_limits(rows, plan.ignore_eos),
            "intended_ns": raw["intended_ns"],
            "release_ns": raw["release_ns"],
            "conn_ns": raw["conn_ns"],
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
            "chunk_us": pl.from_arrow(chunks).cast(pl.List(pl.UInt32)),
        }
    )
    # -1 marks "never happened" in Rust; nulls are clearer in Parquet and polars.
    time_cols = ["release_ns", "conn_ns", "sent_ns", "first_byte_ns", "first_token_ns", "end_ns"]
    count_cols = ["prompt_tokens", "completion_tokens", "cached_tokens"]
    frame = frame.with_columns([pl.when(pl.col(c) >= 0).then(pl.col(c)).alias(c) for c in time_cols + count_cols])
    if replicas:
        names = np.array([*replicas, None], dtype=object)
        index = np.minimum(raw["replica"].astype(np.int64), len(replicas))  # 65535 (none sent) -> None
        frame = frame.with_columns(replica=pl.Series(names[index], dtype=pl.Utf8))
    return frame


def warm_connections(plan: Plan, config: RunConfig) -> int:
    """Connections to open before t0: ``config.warm_connections``, or the most requests the
    schedule has in flight at once if each takes its expected response time (its recorded
    ``e2e_us``, else 0.25 s + 30 ms per expected output token), at most :data:`WARM_CAP`; or,
    when more, the most requests due within any :data:`READER_STALL_S` (at most
    :data:`WARM_STALL_CAP`); at least 1 and at most ``max_connections`` (a closed-loop stage: its
    users). The first is Little's law (rate x response time) where the arrivals are even, and a
    burst's size where they are not: with only the mean, a bursty stage's second request in a
    burst connected on its own path. The second keeps a fast schedule on time while the I/O
    thread that reads answers and frees connections is off its CPU: every request due
    meanwhile still finds an idle connection that the dispatcher writes on itself."""
    if config.warm_connections is not None:
        return config.warm_connections
    if config.closed_loop:  # its users
        return int(min(WARM_CAP, config.max_connections, config.concurrency or 1, max(plan.n, 1)))
    if plan.n == 0:
        return 1
    tokens = send_limits(plan.rows, plan.ignore_eos).fill_null(0).to_numpy()
    expected_s = _EXPECTED_TTFT_S + _EXPECTED_TPOT_S * tokens.astype(np.float64)
    recorded = plan.rows["e2e_us"].to_numpy(allow_copy=True).astype(np.float64) / 1e6
    expected_s = np.where(np.isnan(recorded), expected_s, recorded)
    starts = np.sort(plan.offsets_ns)
    ends = np.sort(plan.offsets_ns + (expected_s * 1e9).astype(np.int64))
    # in flight just after each start: the starts so far less the requests already ended
    in_flight = np.arange(1, len(starts) + 1) - np.searchsorted(ends, starts, side="right")
    # due within READER_STALL_S of each start (that one included)
    burst = np.searchsorted(starts, starts + int(READER_STALL_S * 1e9), side="left") - np.arange(len(starts))
    wanted = max(min(WARM_CAP, int(in_flight.max())), min(WARM_STALL_CAP, int(burst.max())))
    return int(min(config.max_connections, max(1, wanted)))


def runner_options(plan: Plan, config: RunConfig, start_at_unix_ns: int = 0) -> RunOptions:
    """What the Rust runner is asked to do for this stage's plan: the target, its TLS and headers,
    the deadlines and caps of `config`, the connections opened before t0
    (:func:`warm_connections`), whether the plan's causal turns resend the answers streamed, and
    the wall-clock instant t0 waits for (0: none; a shard of :mod:`replay.shards`). A fleet:
    every replica's base URL and the routing policy (:mod:`replay.fleet`)."""
    from replay import _engine

    return _engine.RunOptions(
        base_url(config.url),
        more_urls=[base_url(t.url) for t in config.targets[1:]],
        route=config.routing or "round-robin",
        headers=config.request_headers(),
        ca_cert=config.ca_cert,
        insecure=config.insecure,
        timeout_s=config.timeout_s,
        stall_timeout_s=config.stall_timeout_s,
        connect_timeout_s=config.connect_timeout_s,
        drain_s=config.drain_s,
        max_connections=config.max_connections,
        max_in_flight=config.concurrency or 0,
        warm_connections=warm_connections(plan, config),
        chunk_times=config.chunk_times,
        worker_threads=config.worker_threads,
        cpus=list(config.cpus),
        resend_answers=plan.mark_answers,
        start_at_unix_ns=start_at_unix_ns,
    )


def run_plan(
    plan: Plan,
    config: RunConfig,
    progress: Progress | None = None,
    on_rows: RowsSink | None = None,
    *,
    start_at_unix_ns: int = 0,
) -> StageResult:
    """Send a prepared plan; returns when every request finished, the drain ended or the run was
    cancelled. The bodies are made a window at a time (:meth:`Plan.body_windows`) while it runs.
    With `start_at_unix_ns` the runner takes t0 when this machine's clock reads it (ns since the
    epoch), after its warm-up: the shards of :mod:`replay.shards` start together.

    Finished requests come back from the runner as the stage goes, in request order, about every
    half second (a batch waits for any earlier request still open); `on_rows` sees each batch's
    results frame as it comes (:class:`replay.results.StageParts` writes them to disk), and
    the last one after the run ended."""
    from replay import _engine

    frames: list[pl.DataFrame] = []

    # gated stages: per request, whether it failed (its dependents are marked)
    failed = np.zeros(plan.n, dtype=bool)
    gates: tuple[np.ndarray, np.ndarray | None, np.ndarray | None] | None = None

    replicas = tuple(t.name for t in config.targets) if config.fleet else ()

    def take(raw: Rows) -> None:
        frame = _results_frame(plan, raw, replicas)
        lo, hi = int(raw["first"]), int(raw["first"]) + frame.height
        failed[lo:hi] = ((frame["error"] != "none") | (frame["status"].fill_null(0) >= 400)).to_numpy()
        marked = after_failed(*gates, failed=failed, lo=lo, hi=hi) if gates is not None else np.zeros(frame.height, dtype=bool)
        frame = frame.with_columns(after_failed_dependency=pl.Series(marked, dtype=pl.Boolean))
        if config.closed_loop:  # no schedule: a request was due when the runner released it
            frame = frame.with_columns(intended_ns=pl.col("release_ns").fill_null(pl.col("intended_ns")))
        if frame.height:
            frames.append(frame)
            if on_rows is not None:
                on_rows(frame)

    callback = None
    if progress is not None:
        total = plan.n
        callback = lambda sent, completed, errors: progress(sent, completed, errors, total)  # noqa: E731

    config = dataclasses.replace(config, sessions=cast(SessionMode, plan.sessions))  # "auto" resolved
    after, think_ns, joins, join_offsets = None, None, None, None
    if plan.sessions == "causal":
        after, think_ns = causal_gates(plan.rows, plan.offsets_ns, scale=1.0 if config.closed_loop else None)
    elif plan.sessions == "dag":
        after, think_ns, joins, join_offsets = dag_gates(plan.rows, plan.offsets_ns, keep_waits=config.keep_waits)
    if after is not None:
        gates = (after, joins, join_offsets)
    # polars imports pyarrow.compute on its first from_arrow (about 0.3 s, holding the GIL):
    # before t0, not in the first hand-over of results while the body feeder waits for the GIL
    import pyarrow.compute  # noqa: F401

    windows = plan.body_windows()
    head = plan.head_lines()  # rows with recorded tool calls ask the embedded engine for them
    sampler = engine_sampler(config)
    with sampler if sampler is not None else contextlib.nullcontext():
        raw = _engine.run(
            runner_options(plan, config, start_at_unix_ns),
            list(plan.paths),
            plan.path_index,
            plan.offsets_ns,
            lambda: next(windows, None),
            after=after,
            think_ns=think_ns,
            joins=joins,
            join_offsets=join_offsets,
            head_lines=head[0] if head is not None else None,
            head_offsets=head[1] if head is not None else None,
            progress=callback,
            results=take,
            **route_keys(plan.rows, config.routing),
        )
    take(raw)
    got = sum(f.height for f in frames)
    if got != plan.n:
        raise RunnerError(f"runner returned {got} records for {plan.n} requests")
    requests = (
        pl.concat(frames) if frames else _results_frame(plan, raw, replicas).with_columns(after_failed_dependency=pl.lit(False))
    )
    if progress is not None:
        errors = requests["error"] != "none"
        finished = int((requests["end_ns"].is_not_null() | errors).sum())
        progress(int(requests["sent_ns"].is_not_null().sum()), finished, int(errors.sum()), plan.n)
    return StageResult(
        config=config,
        requests=requests,
        start_unix_ns=int(raw["start_unix_ns"]),
        offered_rate=plan.offered_rate,
        cancelled=bool(raw["cancelled"]),
        interrupted=bool(raw["interrupted"]),
        cut_off=bool(raw["cut_off"]),
        runner=dict(raw["runner"]),
        engine_metrics=sampler.summary() if sampler is not None else None,
    )


def engine_sampler(config: RunConfig) -> EngineSampler | FleetSampler | None:
    """The reader of the engine's metrics for one stage (:mod:`replay.engine_metrics`):
    ``--metrics-url``, else the target's ``/metrics`` (sent the target's headers and key, which
    another URL is not); a fleet's: every replica's ``/metrics``, labelled by replica (unless
    ``--metrics-url``); None with ``--metrics-url none``."""
    if config.metrics_url == "none":
        return None
    context = config.ssl_context()
    if config.fleet and not config.metrics_url:
        return FleetSampler(
            {
                t.name: EngineSampler(base_url(t.url) + "/metrics", config.request_headers(), cpus=config.cpus, context=context)
                for t in config.targets
            }
        )
    if config.metrics_url:
        return EngineSampler(config.metrics_url, cpus=config.cpus, context=context)
    return EngineSampler(base_url(config.url) + "/metrics", config.request_headers(), cpus=config.cpus, context=context)


def resolve_model(trace: Trace, config: RunConfig) -> str | None:
    """Check the target (TargetError, one line naming the URL, when it cannot serve: see
    :func:`~replay.targets.url.check_target`) and pick the model name to send: --model, else None
    (keep the bodies' own) when the target serves every model the trace names or lists none, else
    the target's first. A fleet: every replica is checked; the first's models decide."""
    for t in config.targets[1:]:
        check_target(t.url, headers=config.request_headers(), timeout_s=config.connect_timeout_s, context=config.ssl_context())
    served = check_target(
        config.url, headers=config.request_headers(), timeout_s=config.connect_timeout_s, context=config.ssl_context()
    )
    if config.model:
        return config.model
    if not served:
        return None
    trace_models = set(trace.df["model"].drop_nulls().unique().to_list()) if "model" in trace.df.columns else set()
    if trace_models and trace_models <= set(served):
        return None
    return served[0]


def run_stage(
    trace: Trace, config: RunConfig, progress: Progress | None = None, model: str | None = None, on_rows: RowsSink | None = None
) -> StageResult:
    """Replay `trace` against `config.url` once (one stage). Without `model`, first checks the
    target and picks the model (:func:`resolve_model`). `on_rows`: see :func:`run_plan`."""
    if model is None:
        model = resolve_model(trace, config)
    return run_plan(build_plan(trace, config, model=model), config, progress, on_rows)
