"""Stage metrics: what one replay stage achieved, computed from its per-request results.

Latencies are reported twice: from the intended send time (what a user waiting on an open-loop
schedule sees, as wrk2 does) and from the actual send (the moment the request's write started,
see docs/latency.md). Send lag (actual send - the time the request became due) is the runner's own
error; a stage whose send lag p99 exceeds the bound is marked invalid, and ``invalid_reason`` says
how often the runner's own threads lost the CPU. With causal sessions a turn becomes due at the
later of its schedule and the end of the previous turn + think time; how far that held it back
is ``slip_ms``, apart from the lag (the same for ``--sessions dag``, whose requests wait for
every dependency: ``after_failed_dependency`` counts those sent after one failed). ``conn_ms`` is
the time spent getting or opening a connection.
Requests still open when the drain ended are ``cut_off`` errors. Goodput counts requests that meet
every SLO, per second; a request with one output token has no TPOT, so it does not meet a TPOT
objective. ``rejected`` counts the requests the server refused as invalid (an HTTP 4xx other than
408 and 429, e.g. a prompt longer than the model's context), which would fail at any rate.

A closed-loop stage (``concurrency``: N users, each sending its next request when its last
ended) has no schedule: a request is due when the runner released it, so its latencies "from the
intended send" count from that release, and it offers no rate (``offered_rate`` None); with causal
sessions it reports no ``slip_ms`` either.

Three rates describe a stage's load, in req/s:

- ``requested_rate``: the rate asked for (None: the trace's own timing, as recorded or sped up);
- ``offered_rate``: what the schedule offers over the stage's own window (``window_s``): with
  ``--duration`` the requests due in ``[0, duration)`` over the duration, otherwise
  ``(n - 1) / (last - first intended send)`` (:func:`replay.plan.offered_window`). The schedule is
  built to make it equal the requested rate (:func:`replay.plan.schedule`);
- ``achieved_send_rate``: the same measure over the requests actually sent, divided by how much
  the runner stretched their schedule ((last - first actual send) / (last - first intended send)).
  It equals the offered rate when every request left on time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, TypedDict, cast

import numpy as np
import polars as pl

from replay.config import RunConfig
from replay.errors import ConfigError
from replay.fleet import replica_breakdown
from replay.plan import offered_window

__all__ = [
    "StageResult",
    "StageSummary",
    "Percentiles",
    "summarize",
    "completed",
    "slo_met",
    "load_label",
    "PERCENTILES",
    "queue_growth",
    "LOAD_4XX",
]


class Percentiles(TypedDict):
    """p50 / p90 / p99 (:data:`PERCENTILES`) of a latency, in ms; None without samples."""

    p50: float | None
    p90: float | None
    p99: float | None


class FromIntendedAndSent(TypedDict):
    """A latency counted from the intended send (wrk2's rule) and from the actual send."""

    from_intended: Percentiles
    from_sent: Percentiles


class QueueGrowth(TypedDict):
    """:func:`queue_growth`: median TTFT of the stage's first and last third, and the growth."""

    ttft_first_third_ms: float | None
    ttft_last_third_ms: float | None
    growth_ms: float | None


class SendLag(TypedDict):
    p50: float | None
    p99: float | None
    max: float | None


class Slip(Percentiles):
    max: float | None


class SloSpec(TypedDict):
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None


@dataclass(frozen=True)
class StageSummary:
    """One stage's summary (:func:`summarize`): the module docstring says what each rate and
    latency means. Times in ms unless named ``_s``, rates in 1/s. :meth:`to_json` is a stage of
    summary.json (these fields by name; the CLI adds its own beside them, e.g. ``fidelity``),
    :meth:`from_json` reads one back."""

    requested_rate: float | None
    offered_rate: float | None
    window_s: float
    achieved_send_rate: float | None
    requests: int
    sent: int
    completed: int
    errors: dict[str, int]  # error kind -> requests
    rejected: int
    throughput_rps: float | None
    output_tokens_per_s: float | None
    queue: QueueGrowth
    ttft_ms: FromIntendedAndSent
    e2e_ms: FromIntendedAndSent
    tpot_ms: Percentiles
    itl_ms: Percentiles
    send_lag_ms: SendLag
    lag_bound_ms: float
    valid: bool
    invalid_reason: str | None
    conn_ms: Percentiles
    sessions: str
    concurrency: int | None
    slip_ms: Slip | None
    cancelled: bool
    cut_off: int
    runner: dict[str, Any] | None  # the runner's own statistics (replay._engine.RunnerStats)
    engine_metrics: dict[str, Any] | None  # replay.engine_metrics
    prefix_cache: str | None
    repeat: int | None
    discarded_attempts: list[str]  # --retry-invalid: the invalid reasons of the attempts this stage replaced
    prompt_tokens: int
    cached_tokens: int | None
    cache_hit_rate: float | None
    slo: SloSpec | None
    slo_met: int | None
    slo_attainment: float | None
    slo_pass: bool | None
    goodput_rps: float | None
    duration_s: float
    # gated stages (--sessions causal or dag): requests sent after a dependency failed (sent anyway,
    # when it ended; the results' after_failed_dependency). Summaries written before it lack it.
    after_failed_dependency: int = 0
    # a fleet's stage (replay.fleet.replica_breakdown): each replica's share, errors, cache hit,
    # TTFT / E2E, and why the load looks uneven; None with one target (and in older summaries)
    replicas: dict[str, Any] | None = None
    # a stage run as shards (replay.shards): per shard its node, clock offset and uncertainty,
    # start lag, send lag, and whether it kept its schedule; the stage is valid only when all did
    shards: list[dict] | None = None

    def to_json(self) -> dict[str, Any]:
        """The stage as JSON-ready data, a key per field (the shape of a summary.json stage)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "a stage summary") -> StageSummary:
        """A stage read back from :meth:`to_json`'s shape; keys it does not know (what the CLI
        added) are left out; a missing one is a ConfigError naming it and `where`."""
        missing = [f.name for f in fields(cls) if f.name not in data and f.default is MISSING]
        if missing:
            raise ConfigError(f"{where}: no '{missing[0]}' (not a stage summary of this version of faithful-replay)")
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class StageResult:
    """One stage as the runner ran it: its config, a row per request (``replay.runner``'s
    results frame), and what the runner and the engine reported; :attr:`summary` is
    :func:`summarize` of it."""

    config: RunConfig
    requests: pl.DataFrame  # one row per request, see `replay.runner._results_frame`
    start_unix_ns: int
    offered_rate: float
    cancelled: bool
    interrupted: bool
    cut_off: bool = False  # the drain ended with requests still open (they are 'cut_off')
    runner: dict | None = None  # warm-up and thread statistics of the runner itself
    engine_metrics: dict | None = None  # the engine's own metrics during the stage (replay.engine_metrics)
    # a sweep's stage: whether the target's prefix cache was reset before it (replay.sweep.sweep)
    prefix_cache: str | None = None
    # a stage run with --repeats: which repeat (0-based); None when the stage ran once
    repeat: int | None = None
    # a sweep's stage run again for --retry-invalid: why each earlier attempt was invalid
    discarded_attempts: tuple[str, ...] = ()
    # a stage run as shards on one clock (replay.shards): each shard's judgement
    shards: tuple[dict, ...] | None = None

    @property
    def summary(self) -> StageSummary:
        return summarize(self)


PERCENTILES = (50, 90, 99)
LOAD_4XX = (408, 429)  # the 4xx statuses a server gives under load; other 4xx reject the request itself


def load_label(rate: float | None, concurrency: int | None = None) -> str:
    """A stage's load in words: "4 users" (closed loop), "20 req/s", or "as recorded"."""
    if concurrency is not None:
        return f"{concurrency} user{'s' if concurrency != 1 else ''}"
    return "as recorded" if rate is None else f"{rate:g} req/s"


def _pcts(values: np.ndarray, scale: float) -> Percentiles:
    values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if len(values) == 0:
        return cast(Percentiles, {f"p{p}": None for p in PERCENTILES})
    qs = np.percentile(values, PERCENTILES)
    return cast(Percentiles, {f"p{p}": float(q) / scale for p, q in zip(PERCENTILES, qs)})


def queue_growth(intended_ns: np.ndarray, ttft_ns: np.ndarray) -> QueueGrowth:
    """Median TTFT (from the intended send) of the first and the last third of the stage, in ms.

    A server that keeps up admits requests as promptly at the end of a stage as at its start; one
    that has saturated builds a queue, so TTFT from the intended time grows through the stage.
    Unlike completion counts this does not depend on how long the outputs are.
    """
    if len(intended_ns) < 3:
        return {"ttft_first_third_ms": None, "ttft_last_third_ms": None, "growth_ms": None}
    order = np.argsort(intended_ns, kind="stable")
    ttft = ttft_ns[order].astype(np.float64) / 1e6
    third = len(ttft) // 3
    first, last = float(np.median(ttft[:third])), float(np.median(ttft[-third:]))
    return {"ttft_first_third_ms": first, "ttft_last_third_ms": last, "growth_ms": last - first}


def slo_met(ok: pl.DataFrame, slo) -> np.ndarray:
    """Which requests of :func:`completed` meet every set objective; a missing TTFT or TPOT (one output
    token: no time per output token to judge) does not meet its objective."""
    mask = np.ones(ok.height, dtype=bool)
    if slo.ttft_s is not None:
        mask &= ok["ttft_ns"].fill_null(np.iinfo(np.int64).max).to_numpy() <= slo.ttft_s * 1e9
    if slo.tpot_s is not None:
        tpot = ok["tpot_ns"].cast(pl.Float64).fill_nan(None).fill_null(float("inf")).to_numpy()
        mask &= tpot <= slo.tpot_s * 1e9
    if slo.e2e_s is not None:
        mask &= ok["e2e_ns"].to_numpy() <= slo.e2e_s * 1e9
    return mask


def _achieved_rate(sent: pl.DataFrame, duration_s: float | None) -> float | None:
    """The offered-rate measure over the requests sent, divided by how much sending stretched them."""
    intended = np.sort(sent["intended_ns"].to_numpy())
    actual = np.sort(sent["sent_ns"].to_numpy())
    if len(actual) == 0:
        return None
    rate = offered_window(intended, duration_s)[1]
    if len(actual) < 2 or intended[-1] == intended[0]:
        return None if math.isnan(rate) else rate
    if actual[-1] == actual[0]:
        return None
    return rate * float(intended[-1] - intended[0]) / float(actual[-1] - actual[0])


def _invalid_reason(result: StageResult, lag_p99_ms: float | None) -> str:
    """Why a stage is invalid, in one line, with what the runner's own threads went through."""
    if result.cancelled:
        return "cancelled before every request finished"
    if lag_p99_ms is None:
        return "no request was sent"
    why = f"send lag p99 {lag_p99_ms:.2f} ms over the {result.config.lag_bound_ms:g} ms bound"
    runner = result.runner or {}
    if runner:
        d, w = runner["dispatcher_switches"], runner["worker_switches"]
        why += (
            f"; the runner lost the CPU {d['involuntary']} times on its dispatcher "
            f"({runner['dispatcher_priority']} priority) and {w['involuntary']} on its I/O threads"
        )
        if runner.get("body_waits"):
            why += f"; it waited for request bodies {runner['body_waits']} times (longest {runner['body_wait_max_ms']:.1f} ms)"
    return why


def completed(requests: pl.DataFrame) -> pl.DataFrame:
    """A stage's completed requests with their latencies (ns): ``ttft_ns`` and ``e2e_ns`` from
    the intended send time (wrk2's rule), ``ttft_sent_ns`` and ``e2e_sent_ns`` from the actual
    send, and ``tpot_ns`` (first token to end over the tokens after the first; null for one)."""
    tokens = pl.col("completion_tokens").fill_null(pl.col("output_chunks"))
    return requests.filter(pl.col("error") == "none").with_columns(
        ttft_ns=pl.col("first_token_ns") - pl.col("intended_ns"),
        ttft_sent_ns=pl.col("first_token_ns") - pl.col("sent_ns"),
        e2e_ns=pl.col("end_ns") - pl.col("intended_ns"),
        e2e_sent_ns=pl.col("end_ns") - pl.col("sent_ns"),
        tpot_ns=pl.when(tokens > 1).then((pl.col("end_ns") - pl.col("first_token_ns")) / (tokens - 1)),
    )


def summarize(result: StageResult) -> StageSummary:
    """A JSON-ready summary of one stage (times in ms, rates in 1/s)."""
    config = result.config
    df = result.requests
    n = df.height
    sent = df.filter(pl.col("sent_ns").is_not_null())
    ok = completed(df)
    # the runner's own error: actual send - the time the request became due (its intended time,
    # or for a causal turn the end of the previous turn + think time when that is later)
    lag = (sent["sent_ns"] - sent["release_ns"]).to_numpy()
    itl = (
        ok.select(pl.col("chunk_us").cast(pl.List(pl.Int64)).list.diff(null_behavior="drop").alias("d"))
        .explode("d")["d"]
        .drop_nulls()
        .to_numpy()
        * 1000
    )
    errors = df.filter(pl.col("error") != "none").group_by("error").len().sort("error")
    # refused as invalid (HTTP 4xx but 408 timeout / 429 too many requests): would fail at any rate
    rejected = df.filter((pl.col("error") == "http_4xx") & ~pl.col("status").is_in(list(LOAD_4XX))).height
    out_tokens = int(ok["completion_tokens"].fill_null(ok["output_chunks"]).sum() or 0)
    duration_s = 0.0
    if ok.height:
        duration_s = (cast(int, ok["end_ns"].max()) - cast(int, df["intended_ns"].min())) / 1e9
    lag_p99_ms = float(np.percentile(lag, 99)) / 1e6 if len(lag) else None
    valid = lag_p99_ms is not None and lag_p99_ms <= config.lag_bound_ms and not result.cancelled
    failed_shards = [s for s in result.shards or () if s.get("valid") is False]
    reason = None if valid else _invalid_reason(result, lag_p99_ms)
    if failed_shards:
        valid = False
        each = "; ".join(f"shard {s['shard']}: {s['invalid_reason']}" for s in failed_shards)
        reason = f"{reason}; {each}" if reason else each
    # causal sessions: how far turns were held back behind their schedule (kept out of the lag)
    released = df.filter(pl.col("release_ns").is_not_null())
    slip = (released["release_ns"] - released["intended_ns"]).to_numpy()
    slo = config.slo
    met = int(slo_met(ok, slo).sum()) if not slo.empty else ok.height
    cached = ok["cached_tokens"].drop_nulls()
    prompt = ok.filter(pl.col("cached_tokens").is_not_null())["prompt_tokens"].fill_null(0)

    def pair(col: str, col_sent: str) -> FromIntendedAndSent:
        return {
            "from_intended": _pcts(ok[col].cast(pl.Float64).to_numpy(), 1e6),
            "from_sent": _pcts(ok[col_sent].cast(pl.Float64).to_numpy(), 1e6),
        }

    return StageSummary(
        requested_rate=config.rate,
        offered_rate=None if math.isnan(result.offered_rate) else result.offered_rate,
        window_s=offered_window(np.sort(df["intended_ns"].to_numpy()), config.duration_s)[0],
        achieved_send_rate=_achieved_rate(sent, config.duration_s),
        requests=n,
        sent=sent.height,
        completed=ok.height,
        errors={row["error"]: row["len"] for row in errors.iter_rows(named=True)},
        rejected=rejected,
        throughput_rps=ok.height / duration_s if duration_s > 0 else None,
        output_tokens_per_s=out_tokens / duration_s if duration_s > 0 else None,
        queue=queue_growth(ok["intended_ns"].to_numpy(), ok["ttft_ns"].to_numpy()),
        ttft_ms=pair("ttft_ns", "ttft_sent_ns"),
        e2e_ms=pair("e2e_ns", "e2e_sent_ns"),
        tpot_ms=_pcts(ok["tpot_ns"].cast(pl.Float64).to_numpy(), 1e6),
        itl_ms=_pcts(itl.astype(np.float64), 1e6),
        send_lag_ms={
            "p50": float(np.percentile(lag, 50)) / 1e6 if len(lag) else None,
            "p99": lag_p99_ms,
            "max": float(lag.max()) / 1e6 if len(lag) else None,
        },
        lag_bound_ms=config.lag_bound_ms,
        valid=valid,
        invalid_reason=reason,
        conn_ms=_pcts(df["conn_ns"].drop_nulls().cast(pl.Float64).to_numpy(), 1e6),
        sessions=config.sessions,
        concurrency=config.concurrency,
        # closed loop: no schedule to slip behind (a request is due at its release)
        slip_ms={**_pcts(slip.astype(np.float64), 1e6), "max": float(slip.max()) / 1e6 if len(slip) else None}
        if config.sessions in ("causal", "dag") and not config.closed_loop
        else None,
        cancelled=result.cancelled,
        cut_off=int((df["error"] == "cut_off").sum()),
        runner=result.runner,
        engine_metrics=result.engine_metrics,
        prefix_cache=result.prefix_cache,
        repeat=result.repeat,
        discarded_attempts=list(result.discarded_attempts),
        prompt_tokens=int(ok["prompt_tokens"].sum() or 0),
        cached_tokens=int(cached.sum() or 0) if cached.len() else None,
        cache_hit_rate=(float(cached.sum()) / float(prompt.sum())) if cached.len() and prompt.sum() else None,
        slo=None if slo.empty else {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s},
        slo_met=met if not slo.empty else None,
        slo_attainment=(met / n if n else None) if not slo.empty else None,
        slo_pass=(n > 0 and met / n >= slo.attainment) if not slo.empty else None,
        goodput_rps=met / duration_s if duration_s > 0 else None,
        duration_s=duration_s,
        after_failed_dependency=int(df["after_failed_dependency"].sum()) if "after_failed_dependency" in df.columns else 0,
        replicas=replica_breakdown(df, ok, config.routing),
        shards=list(result.shards) if result.shards is not None else None,
    )
