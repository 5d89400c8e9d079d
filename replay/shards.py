"""One trace on many machines, on one clock: shards of a stage, their start, and their merge.

**Shards.** A stage's plan is split by whole *root session* (:func:`shard_of`): a subagent's
session goes with the session that spawned it (``parent_session_id``, followed to the root), and
requests joined by ``depends_on`` go together whatever their sessions, so no dependency crosses a
shard and each shard's runner gates its own DAGs locally. A request without a session is its own
root (its request id). Each group goes to shard ``blake2b(root) mod N``: the same trace and N
always give the same split.

**One clock.** The driver picks one start instant ``T`` a few seconds ahead (:data:`LEAD_S`) on
its own clock and hands it to every shard. Before that it measures each shard's clock offset
(:func:`clock_offset`: several pings, the one with the least round trip kept, offset = remote -
(t_send + rtt / 2), uncertain by rtt / 2). A shard's runner warms up, then takes t0 when its own
clock reads ``T + offset`` (``RunOptions(start_at_unix_ns=)``), so every shard starts at the same
instant. Its times come back from its own t0; the merge puts them on the driver's clock: each
shard's actual times (release, send, first byte, first token, end) are moved by its *start lag*
``(t0 - offset) - T`` (how late its t0 was on the driver's clock), and ``intended_ns`` stays the
one schedule of the whole plan. The merged results are one results folder of the shape of a
single run (:mod:`replay.results`) with a ``shard`` column, which ``replay fidelity``,
``compare`` and ``optimize`` read unchanged.

**Validity.** A merged stage is valid only when its requests' send lag holds (as a single run's,
:func:`replay.metrics.summarize`) and every shard kept its schedule: its own send lag p99, its
start lag and its clock offset's uncertainty each within the lag bound, and its runner neither
cancelled nor dead. :func:`judge_shard` says which shard failed and why; the summary's ``shards``
lists them all.

**Runs.** :class:`RayShards` runs the shards as Ray actors, one per shard, in a placement group
that puts each on its own node (``STRICT_SPREAD``, falling back with a warning to ``SPREAD``
when the cluster has fewer nodes than shards); each actor writes its rows as they come to
``<stage>.parts/shardNN.parts/`` (:class:`replay.results.StageParts`), so an actor killed
mid-stage loses nothing it had written: its shard is marked invalid and its unwritten requests
are ``cancelled`` rows. Without Ray (a Kubernetes Indexed Job, docs/sharding.md) each pod runs
``replay run ... --shard I/N --start-at T`` into its own folder and :func:`merge_folders` merges
them (each pod's ``<stage>.shard.json`` says which rows it holds); the pods' clocks are then
trusted as their nodes keep them (no offset is measured).
Ray is imported only by :class:`RayShards`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from replay.config import Arrivals, RunConfig, Slo
from replay.dag import root_sessions
from replay.errors import ConfigError
from replay.metrics import StageResult
from replay.plan import BODY_WINDOW, Plan, offered_window
from replay.trace import Trace

__all__ = [
    "SHARD_COLUMN",
    "LEAD_S",
    "PINGS",
    "ClockOffset",
    "ShardRun",
    "shard_of",
    "shard_plan",
    "clock_offset",
    "judge_shard",
    "merge",
    "run_shard",
    "parse_shard",
    "parse_start_at",
    "merge_folders",
    "RayShards",
]

SHARD_COLUMN = "shard"
LEAD_S = 3.0  # the start instant is this far ahead of the moment the shards are asked to run
PINGS = 12  # clock pings per shard and stage; the one with the least round trip is kept
# actual times a shard's runner stamps from its own t0 (conn_ns is a duration, intended_ns the plan's)
_MOVED = ("release_ns", "sent_ns", "first_byte_ns", "first_token_ns", "end_ns")


# --- the split ---------------------------------------------------------------------------------


def _roots(df: pl.DataFrame) -> list[str]:
    """Each row's group key: its root session (:func:`replay.dag.root_sessions`), its request id
    when it has no session, and one key for groups joined by ``depends_on`` across sessions (the
    key of the earliest row of the joined groups)."""
    ids = df["request_id"].to_list()
    keys = [r if r is not None else i for r, i in zip(root_sessions(df), ids)]
    if "depends_on" not in df.columns:
        return keys
    up: dict[str, str] = {}  # union-find over the keys joined by a dependency

    def find(x: str) -> str:
        while up.get(x, x) != x:
            up[x] = up.get(up[x], up[x])
            x = up[x]
        return x

    first: dict[str, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    key_of = dict(zip(ids, keys))
    for k, deps in zip(keys, df["depends_on"].to_list()):
        for d in deps or ():
            if d in key_of:
                a, b = find(key_of[d]), find(k)
                if a != b:  # the key that appeared first names the group
                    if first[b] < first[a]:
                        a, b = b, a
                    up[b] = a
    return [find(k) for k in keys]


def shard_of(df: pl.DataFrame, shards: int) -> np.ndarray:
    """The shard (0 .. shards - 1) of each row of ``df``: its group's root key hashed (module
    docstring); a dependency never crosses a shard."""
    if not (isinstance(shards, int) and shards >= 1):
        raise ConfigError(f"--shards: must be a whole number >= 1, got {shards!r}")
    keys = _roots(df)
    memo: dict[str, int] = {}
    out = np.empty(len(keys), dtype=np.int64)
    for i, k in enumerate(keys):
        if k not in memo:
            memo[k] = int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little") % shards
        out[i] = memo[k]
    return out


def shard_plan(plan: Plan, index: int, shards: int, assigned: np.ndarray | None = None) -> tuple[Plan, np.ndarray]:
    """Shard ``index`` of ``shards`` of ``plan``: the sub-plan (its rows, their send offsets on the
    plan's one schedule, their bodies in memory) and those rows' positions in ``plan``.
    ``assigned``: :func:`shard_of` of the plan's rows, where already made."""
    if not 0 <= index < shards:
        raise ConfigError(f"--shard: {index} is not a shard of {shards} (0 to {shards - 1})")
    assigned = shard_of(plan.rows, shards) if assigned is None else assigned
    rows = np.flatnonzero(assigned == index)
    keep = set(rows.tolist())
    bodies: list[str | None] = []
    at = 0
    for batch in plan.trace.body_batches(plan.n, BODY_WINDOW):
        bodies += [b for k, b in enumerate(batch, start=at) if k in keep]
        at += len(batch)
    mask = pl.Series(np.isin(np.arange(plan.n), rows))
    df = (
        plan.trace.df.head(plan.n)
        .drop("body", strict=False)
        .filter(mask)
        .with_columns(pl.Series("body", bodies, dtype=pl.String))
    )
    offsets = plan.offsets_ns[rows]
    window_s, rate = offered_window(offsets, None)
    part = dataclasses.replace(
        plan,
        rows=plan.rows.filter(mask),
        offsets_ns=offsets,
        path_index=plan.path_index[rows],
        window_s=window_s,
        offered_rate=rate,
        trace=Trace(df=df, meta=plan.trace.meta),
    )
    return part, rows


# --- the clock ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClockOffset:
    """A shard's clock less the driver's (ns), as measured by the ping with the least round trip;
    the true offset is within ``uncertainty_ns`` (half that round trip) of it."""

    offset_ns: int
    uncertainty_ns: int
    pings: int


def clock_offset(ping: Callable[[], int], pings: int = PINGS, now: Callable[[], int] = time.time_ns) -> ClockOffset:
    """Measure a remote clock against ``now`` (the driver's): ``ping()`` returns the remote
    clock's reading in ns since the epoch; of ``pings`` round trips the shortest is kept and
    offset = remote - (t_send + rtt / 2), uncertain by rtt / 2 (NTP's rule)."""
    best: tuple[int, int] | None = None  # (rtt, offset)
    for _ in range(pings):
        sent = now()
        remote = ping()
        rtt = now() - sent
        offset = remote - (sent + rtt // 2)
        if best is None or rtt < best[0]:
            best = (rtt, offset)
    assert best is not None
    return ClockOffset(offset_ns=int(best[1]), uncertainty_ns=int(best[0] // 2), pings=pings)


# --- one shard's run and the merge ---------------------------------------------------------------


@dataclass
class ShardRun:
    """What one shard did: its requests (times from its own t0; None rows when its runner died
    before returning: then ``written`` holds what it had written), its t0 on its own clock, the
    start instant on the driver's clock, its clock offset (None: not measured), where it ran."""

    shard: int
    rows: np.ndarray  # the shard's rows' positions in the whole plan
    start_at_unix_ns: int  # T, on the driver's clock
    clock: ClockOffset | None
    node: str = ""
    result: StageResult | None = None  # None: the runner died
    written: pl.DataFrame | None = None  # what a dead runner had written
    died: str | None = None  # why it died


def run_shard(
    part: Plan,
    config: RunConfig,
    start_at_unix_ns: int,
    *,
    shard: int,
    spool: Path | None = None,
    progress: Callable[[int, int, int, int], None] | None = None,
) -> StageResult:
    """Run one shard's sub-plan with our runner, t0 at ``start_at_unix_ns`` on this machine's
    clock, writing its rows as they come to ``spool`` (a ``shardNN.parts`` folder; None: kept in
    memory only). What an actor or a pod calls."""
    from replay.results import StageParts
    from replay.runner import run_plan

    sink = None
    if spool is not None:
        parts = StageParts(Path(spool) / f"shard{shard:02d}.parquet")
        sink = lambda frame: parts(frame.with_columns(pl.lit(shard, dtype=pl.Int32).alias(SHARD_COLUMN)))  # noqa: E731
    return run_plan(part, config, progress, sink, start_at_unix_ns=start_at_unix_ns)


def written_rows(spool: Path, shard: int) -> pl.DataFrame | None:
    """What shard ``shard`` had written to ``spool`` (None: nothing)."""
    from replay.results import parts_dir

    files = sorted(parts_dir(Path(spool) / f"shard{shard:02d}.parquet").glob("*.parquet"))
    return pl.concat([pl.read_parquet(f) for f in files]) if files else None


def _pcts(values: np.ndarray) -> dict[str, float | None]:
    if not len(values):
        return {"p50": None, "p99": None, "max": None}
    return {
        "p50": float(np.percentile(values, 50)) / 1e6,
        "p99": float(np.percentile(values, 99)) / 1e6,
        "max": float(values.max()) / 1e6,
    }


def judge_shard(run: ShardRun, frame: pl.DataFrame, lag_bound_ms: float) -> dict[str, Any]:
    """One shard's entry of a stage summary's ``shards``: where it ran, its clock offset and
    uncertainty, its start lag, its send lag, its rate, and whether it kept its schedule (and if
    not, why)."""
    sent = frame.filter(pl.col("sent_ns").is_not_null())
    lag = (sent["sent_ns"] - sent["release_ns"]).to_numpy()
    lag_ms = _pcts(lag)
    result = run.result
    start_lag_ms = None
    if result is not None:
        offset = run.clock.offset_ns if run.clock else 0
        start_lag_ms = (result.start_unix_ns - offset - run.start_at_unix_ns) / 1e6
    uncertainty_ms = run.clock.uncertainty_ns / 1e6 if run.clock else None
    why: list[str] = []
    if run.died is not None:
        wrote = 0 if run.written is None else run.written.height
        why.append(f"its runner died ({run.died}) after writing {wrote} of {len(run.rows)} requests")
    elif result is not None and result.cancelled:
        why.append("it was cancelled")
    if lag_ms["p99"] is not None and lag_ms["p99"] > lag_bound_ms:
        why.append(f"send lag p99 {lag_ms['p99']:.2f} ms over the {lag_bound_ms:g} ms bound")
    if start_lag_ms is not None and abs(start_lag_ms) > lag_bound_ms:
        why.append(f"it started {start_lag_ms:.2f} ms off the start instant (bound {lag_bound_ms:g} ms)")
    if uncertainty_ms is not None and uncertainty_ms > lag_bound_ms:
        why.append(f"its clock offset is uncertain by {uncertainty_ms:.2f} ms, over the {lag_bound_ms:g} ms bound")
    intended = np.sort(frame["intended_ns"].to_numpy())
    actual = np.sort(sent["sent_ns"].to_numpy())
    rate = None
    if len(actual) > 1 and actual[-1] > actual[0]:
        rate = float((len(actual) - 1) / ((actual[-1] - actual[0]) / 1e9))
    offered = None
    if len(intended) > 1 and intended[-1] > intended[0]:
        offered = float((len(intended) - 1) / ((intended[-1] - intended[0]) / 1e9))
    return {
        "shard": run.shard,
        "node": run.node,
        "requests": len(run.rows),
        "sent": sent.height,
        "offered_rate": offered,
        "achieved_send_rate": rate,
        "clock_offset_ms": run.clock.offset_ns / 1e6 if run.clock else None,
        "clock_uncertainty_ms": uncertainty_ms,
        "start_lag_ms": start_lag_ms,
        "send_lag_ms": lag_ms,
        "valid": not why,
        "invalid_reason": "; ".join(why) or None,
    }


def _unsent(plan: Plan, rows: np.ndarray, schema: pl.Schema, detail: str) -> pl.DataFrame:
    """Rows of results for requests of ``plan`` (its positions ``rows``) that no runner returned:
    ``cancelled``, never sent."""
    from replay.plan import send_limits

    picked = plan.rows[rows.tolist()] if len(rows) else plan.rows.head(0)
    base = {
        "request_id": picked["request_id"],
        "session_id": picked["session_id"],
        "api": picked["api"],
        "input_tokens": picked["input_tokens"],
        "expected_output_tokens": send_limits(picked, plan.ignore_eos),
        "intended_ns": pl.Series(plan.offsets_ns[rows], dtype=pl.Int64),
        "status": pl.Series([0] * len(rows), dtype=pl.Int32),
        "error": pl.Series(["cancelled"] * len(rows), dtype=pl.Utf8),
        "error_detail": pl.Series([detail] * len(rows), dtype=pl.Utf8),
        "output_chunks": pl.Series([0] * len(rows)),
        "after_failed_dependency": pl.Series([False] * len(rows)),
    }
    frame = pl.DataFrame(base)
    cols = [frame[c].cast(schema[c]) if c in frame.columns else pl.Series(c, [None] * len(rows), dtype=schema[c]) for c in schema]
    return (
        pl.DataFrame(cols).with_columns(pl.col("chunk_us").fill_null(pl.lit([], dtype=schema["chunk_us"])))
        if "chunk_us" in schema
        else pl.DataFrame(cols)
    )


def merge(
    runs: Sequence[ShardRun],
    config: RunConfig,
    start_at_unix_ns: int,
    offered_rate: float,
    *,
    unsent: Callable[[np.ndarray, pl.Schema, str], pl.DataFrame] | None = None,
    engine_metrics: dict | None = None,
    interrupted: bool = False,
) -> StageResult:
    """The shards' runs of one stage as one stage: its rows in the plan's order with a ``shard``
    column, actual times on the driver's clock from ``start_at_unix_ns`` (module docstring), the
    shards' judgements in ``shards``. A dead shard's written rows are kept; with ``unsent``
    (rows of the plan that no runner returned, as results) its others are added as such."""
    pending: list[tuple[ShardRun, pl.DataFrame | None]] = []
    for run in runs:
        frame = run.result.requests if run.result is not None else run.written
        shift = 0  # a dead runner's t0 never came back: taken as the start instant itself
        if run.result is not None:
            offset = run.clock.offset_ns if run.clock else 0
            shift = run.result.start_unix_ns - offset - start_at_unix_ns
        if frame is not None:
            frame = frame.drop(SHARD_COLUMN, strict=False).with_columns(
                *[pl.col(c) + shift for c in _MOVED], pl.Series("_row", run.rows[: frame.height], dtype=pl.Int64)
            )
        pending.append((run, frame))
    schema = next((f.drop("_row").schema for _, f in pending if f is not None), None)
    frames: list[pl.DataFrame] = []
    judged: list[dict] = []
    for run, frame in pending:
        done = 0 if frame is None else frame.height
        if run.result is None and unsent is not None and schema is not None and done < len(run.rows):
            left = run.rows[done:]
            missing = unsent(left, schema, f"shard {run.shard}'s runner died before it finished ({run.died})")
            missing = missing.with_columns(pl.Series("_row", left, dtype=pl.Int64))
            frame = missing if frame is None else pl.concat([frame, missing], how="vertical_relaxed")
        if frame is None:
            frame = pl.DataFrame(schema=schema or {}).with_columns(pl.lit(0, dtype=pl.Int64).alias("_row")).head(0)
        frame = frame.with_columns(pl.lit(run.shard, dtype=pl.Int32).alias(SHARD_COLUMN))
        judged.append(judge_shard(run, frame, config.lag_bound_ms))
        if frame.height:
            frames.append(frame)
    if not frames:
        raise ConfigError("shards: no shard returned or wrote any row")
    requests = pl.concat(frames, how="vertical_relaxed").sort("_row").drop("_row")
    results = [r.result for r in runs if r.result is not None]
    worst = max(results, key=lambda r: _lag_p99(r.requests), default=None)
    return StageResult(
        config=config,
        requests=requests,
        start_unix_ns=start_at_unix_ns,
        offered_rate=offered_rate,
        cancelled=any(r.cancelled for r in results),
        interrupted=interrupted or any(r.interrupted for r in results),
        cut_off=any(r.cut_off for r in results),
        runner=worst.runner if worst is not None else None,
        engine_metrics=engine_metrics,
        shards=tuple(sorted(judged, key=lambda s: s["shard"])),
    )


def _lag_p99(frame: pl.DataFrame) -> float:
    sent = frame.filter(pl.col("sent_ns").is_not_null())
    return float(np.percentile((sent["sent_ns"] - sent["release_ns"]).to_numpy(), 99)) if sent.height else 0.0


# --- flags of a pod's shard (Kubernetes) ---------------------------------------------------------


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard I/N`` (I from 0) -> (I, N); ``I`` may be ``$JOB_COMPLETION_INDEX``'s value."""
    try:
        index, of = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise ConfigError(f"--shard: expected I/N (shard I of N, I from 0), got {text!r}") from None
    if of < 1 or not 0 <= index < of:
        raise ConfigError(f"--shard: expected I/N with 0 <= I < N, got {text!r}")
    return index, of


def parse_start_at(text: str) -> int:
    """``--start-at``: Unix seconds (``1765155600.5``) or ISO 8601 with a zone
    (``2026-12-08T01:00:00Z``) -> ns since the epoch."""
    from datetime import datetime

    from decimal import Decimal, InvalidOperation

    try:
        seconds = Decimal(str(text).strip())
        if seconds.is_finite():
            return int(seconds * 10**9)  # exact: a float would move it by up to ~100 ns
    except InvalidOperation:
        pass
    try:
        at = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--start-at: expected Unix seconds or an ISO 8601 time, got {text!r}") from None
    if at.tzinfo is None:
        raise ConfigError(f"--start-at: {text!r} has no time zone (end it with Z for UTC)")
    return int(round(at.timestamp() * 1e9))


SIDECAR = ".shard.json"  # beside a pod's stage file: which shard of which plan it holds


def slice_runner(index: int, shards: int, start_at_unix_ns: int):
    """A ``sweep`` stage runner for one pod's shard: builds the stage's whole plan as every pod
    does (the same flags, the same schedule) and runs its shard at the start instant. Before it
    sends anything it writes ``<stage>.shard.json`` beside the stage's rows (which shard, the
    start instant, the shard's rows' positions in the plan), so :func:`merge_folders` can place
    the rows of a pod killed mid-stage too; the stage's summary names the shard as well."""
    from replay.results import StageParts
    from replay.runner import run_plan

    def run(plan: Plan, config: RunConfig, progress=None, on_rows=None) -> StageResult:
        part, rows = shard_plan(plan, index, shards)
        entry = {
            "shard": index,
            "of": shards,
            "start_at_unix_ns": start_at_unix_ns,
            "plan_requests": plan.n,
            "plan_offered_rate": None if math.isnan(plan.offered_rate) else plan.offered_rate,
            "node": os.uname().nodename,
        }
        if isinstance(on_rows, StageParts):
            side = on_rows.dir.with_suffix(SIDECAR)
            side.parent.mkdir(parents=True, exist_ok=True)
            side.write_text(json.dumps({**entry, "rows": rows.tolist()}))
        tagged = None
        if on_rows is not None:
            tagged = lambda frame: on_rows(frame.with_columns(pl.lit(index, dtype=pl.Int32).alias(SHARD_COLUMN)))  # noqa: E731
        result = run_plan(part, config, progress, tagged, start_at_unix_ns=start_at_unix_ns)
        requests = result.requests.with_columns(pl.lit(index, dtype=pl.Int32).alias(SHARD_COLUMN))
        return dataclasses.replace(result, requests=requests, shards=(entry,))

    return run


def _config_of(summary: dict, stage: dict) -> RunConfig:
    """The RunConfig a stage summary was judged with (what :func:`replay.metrics.summarize` reads)."""
    slo = stage.get("slo") or {}
    return RunConfig(
        url=summary["url"],
        rate=stage["requested_rate"],
        speedup=summary.get("speedup"),
        arrivals=Arrivals(**summary["arrivals"]),
        duration_s=summary.get("duration_s"),
        requests=summary.get("requests"),
        sessions=stage["sessions"],
        concurrency=stage["concurrency"],
        lag_bound_ms=stage["lag_bound_ms"],
        slo=Slo(**slo) if slo else Slo(),
    )


def merge_folders(folders: Sequence[Path], out: Path) -> dict:
    """Merge the results folders of one run's shards, one per pod (``replay run --shard I/N
    --start-at T``), into one results folder ``out`` of a single run's shape; returns its summary.
    Every shard of the N must be there, stage by stage (``stageNN_*.shard.json``). A stage a pod
    never finished (it was killed) is read from the rows it wrote, and its shard, so the stage,
    is invalid; the stages are judged with the config of a pod that finished them. The pods'
    clocks are taken as their nodes keep them: no offset was measured."""
    from replay.results import read_stage, write_stage, write_summary
    from replay.sweep import SweepResult

    if not folders:
        raise ConfigError("shards merge: give the shard folders")
    by_stage: dict[str, list[tuple[Path, dict]]] = {}
    summaries: list[dict] = []
    for folder in map(Path, folders):
        sides = sorted(folder.glob("stage*" + SIDECAR))
        if not sides:
            raise ConfigError(f"shards merge: {folder} holds no stage of `replay run --shard I/N` (no stage*{SIDECAR})")
        for side in sides:
            stage_name = side.name[: -len(SIDECAR)] + ".parquet"
            by_stage.setdefault(stage_name, []).append((folder / stage_name, json.loads(side.read_text())))
        if (folder / "summary.json").is_file():
            summaries.append(json.loads((folder / "summary.json").read_text()))
    out_files: list[str] = []
    merged_stages: list[StageResult] = []
    for k, (name, shard_stages) in enumerate(sorted(by_stage.items())):
        entries = [e for _, e in shard_stages]
        counts = {e["of"] for e in entries}
        if len(counts) != 1:
            raise ConfigError(f"shards merge: {name}: the folders are shards of different counts ({sorted(counts)})")
        n = counts.pop()
        have = sorted(e["shard"] for e in entries)
        if have != list(range(n)):
            missing = sorted(set(range(n)) - set(have))
            raise ConfigError(f"shards merge: {name}: shard(s) {missing or 'repeated'} of {n} not among the folders")
        done = [(x, x["stages"][x["files"].index(name)]) for x in summaries if name in x.get("files", [])]
        if not done:
            raise ConfigError(
                f"shards merge: {name}: no shard's pod finished it (its config is in a finished pod's summary.json)"
            )
        config = _config_of(*done[0])
        start_at = entries[0]["start_at_unix_ns"]
        runs: list[ShardRun] = []
        for path, e in shard_stages:
            requests, meta = read_stage(path)
            partial = bool(meta.get("partial"))
            result = None
            if not partial:
                result = StageResult(
                    config=config,
                    requests=requests,
                    start_unix_ns=int(pq_start(path) or start_at),
                    offered_rate=float("nan"),
                    cancelled=bool(meta.get("cancelled")),
                    interrupted=False,
                    runner=meta.get("runner"),
                )
            runs.append(
                ShardRun(
                    shard=e["shard"],
                    rows=np.asarray(e["rows"], dtype=np.int64),
                    start_at_unix_ns=start_at,
                    clock=None,
                    node=e.get("node", ""),
                    result=result,
                    written=requests if partial else None,
                    died="its pod ended before the stage did" if partial else None,
                )
            )
        held, planned = sum(len(r.rows) for r in runs), entries[0]["plan_requests"]
        if held != planned:
            raise ConfigError(f"shards merge: {name}: the shards hold {held} of the plan's {planned} requests")
        rate = entries[0].get("plan_offered_rate")
        merged = merge(runs, config, start_at, float("nan") if rate is None else rate)
        path = write_stage(merged, Path(out) / name)
        out_files.append(path.name)
        merged_stages.append(merged)
    first = summaries[0]
    summary = SweepResult.of(merged_stages[0].config, [s.config.rate for s in merged_stages], merged_stages, repeats=1).to_json(
        trace=first.get("trace"), files=out_files, merged_from=[str(f) for f in folders]
    )
    write_summary(Path(out), summary)
    return summary


def pq_start(path: Path) -> int | None:
    """A stage file's ``start_unix_ns`` (its t0 on its runner's clock); None for a stage never finished."""
    import pyarrow.parquet as pq

    if not path.exists():
        return None
    meta = pq.read_schema(path).metadata or {}
    value = meta.get(b"start_unix_ns")
    return int(value) if value else None


# --- Ray ---------------------------------------------------------------------------------------


class ShardWorker:
    """One shard's runner on a Ray node (made an actor by :class:`RayShards`)."""

    def __init__(self, shard: int) -> None:
        self.shard = shard
        self.counts = (0, 0, 0)

    def clock(self) -> int:
        return time.time_ns()

    def where(self) -> str:
        import ray

        return f"{ray.util.get_node_ip_address()} ({ray.get_runtime_context().get_node_id()[:8]})"

    def progress(self) -> tuple[int, int, int]:
        return self.counts

    def peak_rss_mb(self) -> float:
        """This actor's process's peak resident memory (benchmarks/sharded_replay.py)."""
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def run(self, wire: dict, config: RunConfig, start_at_unix_ns: int, spool: str | None) -> StageResult:
        self.counts = (0, 0, 0)
        part = _from_wire(wire)

        def seen(sent: int, completed: int, errors: int, total: int) -> None:
            self.counts = (sent, completed, errors)

        result = run_shard(part, config, start_at_unix_ns, shard=self.shard, spool=Path(spool) if spool else None, progress=seen)
        # as Arrow, which Ray ships as it is: pickling a polars frame here (its own serializer,
        # on its own threads) hung the actor's thread now and then
        return dataclasses.replace(result, requests=result.requests.to_arrow())  # type: ignore[arg-type]


def _to_wire(plan: Plan) -> dict:
    """A plan as Ray ships it: its frames as Arrow tables (see :meth:`ShardWorker.run`)."""
    fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
    return {**fields, "rows": plan.rows.to_arrow(), "trace": (plan.trace.df.to_arrow(), plan.trace.meta)}


def _from_wire(wire: dict) -> Plan:
    df, meta = wire["trace"]
    return Plan(**{**wire, "rows": pl.from_arrow(wire["rows"]), "trace": Trace(df=pl.from_arrow(df), meta=meta)})  # type: ignore[arg-type]


def _cluster_running() -> bool:
    """Whether a Ray cluster this machine started is up (what ``ray.init(address='auto')`` finds)."""
    return bool(os.environ.get("RAY_ADDRESS")) or Path("/tmp/ray/ray_current_cluster").exists()


class RayShards:
    """Run each stage as ``shards`` Ray actors on one clock (module docstring): a ``sweep`` stage
    runner (``sweep(..., stage_runner=RayShards(...))``) and a context manager that holds the
    cluster connection, the placement group and the actors across the stages.

    ``address``: a cluster's address, ``auto``, or None (``auto`` when a cluster is running on
    this machine, else a Ray started for this process). ``say`` gets the warnings (one line each)."""

    def __init__(
        self,
        shards: int,
        address: str | None = None,
        *,
        lead_s: float = LEAD_S,
        pings: int = PINGS,
        say: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    ) -> None:
        if not (isinstance(shards, int) and shards >= 1):
            raise ConfigError(f"--shards: must be a whole number >= 1, got {shards!r}")
        self.shards, self.address, self.lead_s, self.pings, self.say = shards, address, lead_s, pings, say
        self.actors: list[Any] = []
        self.strategy: str | None = None
        self._group: Any = None
        self._started_ray = False
        self._cpus = 1.0

    def __enter__(self) -> RayShards:
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray: Ray is not installed (pip install 'faithful-replay[ray]')") from None
        if not ray.is_initialized():
            self._init(ray)
            self._started_ray = True
        free = float(ray.available_resources().get("CPU", 0))
        if free <= 0:
            raise ConfigError("--ray: the cluster has no free CPU to place the shards on")
        # a CPU per shard where there are enough; else a share each (a shard mostly waits on its sockets)
        self._cpus = 1.0 if free >= self.shards else math.floor(free / self.shards * 1000) / 1000
        self._place(ray)
        self.actors = [self._actor(ray, k) for k in range(self.shards)]
        self.nodes = ray.get([a.where.remote() for a in self.actors])
        return self

    def _init(self, ray) -> None:
        """Join ``address``; without one, the cluster running here (a stale record of one that
        stopped is passed over), else a Ray of this process's own."""
        tries = [self.address] if self.address else (["auto"] if _cluster_running() else []) + [None]
        for k, address in enumerate(tries):
            try:
                if address is None:
                    ray.init(num_cpus=max(self.shards, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(address=address, log_to_driver=False)
                return
            except (ConnectionError, ValueError, RuntimeError) as e:
                if k == len(tries) - 1:
                    where = f" {address}" if address else ""
                    raise ConfigError(f"--ray{where}: cannot connect to the Ray cluster ({str(e).splitlines()[0]})") from None

    def _place(self, ray) -> None:
        from ray.util.placement_group import placement_group, remove_placement_group

        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        bundles = [{"CPU": self._cpus} for _ in range(self.shards)]
        if len(nodes) >= self.shards:
            group = placement_group(bundles, strategy="STRICT_SPREAD")
            if _ready(ray, group, 30.0):
                self._group, self.strategy = group, "STRICT_SPREAD"
                return
            remove_placement_group(group)
            why = f"the cluster's {len(nodes)} nodes could not each take a shard in 30 s"
        else:
            why = f"the cluster has {len(nodes)} node(s) with CPUs for {self.shards} shards"
        self.say(f"warning: --shards {self.shards}: {why}; placing the shards with SPREAD (some share a node)")
        group = placement_group(bundles, strategy="SPREAD")
        if not _ready(ray, group, 30.0):
            remove_placement_group(group)
            raise ConfigError(f"--shards {self.shards}: the Ray cluster could not place {self.shards} shards in 30 s")
        self._group, self.strategy = group, "SPREAD"

    def _actor(self, ray, k: int):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(placement_group=self._group, placement_group_bundle_index=k)
        cls = ray.remote(ShardWorker)
        return cls.options(num_cpus=self._cpus, max_concurrency=4, scheduling_strategy=strategy).remote(k)

    def _alive(self, ray) -> None:
        """Replace the actors that died (a stage whose actor was killed)."""
        for k, actor in enumerate(self.actors):
            try:
                ray.get(actor.clock.remote(), timeout=10)
            except Exception:  # noqa: BLE001 (RayActorError, GetTimeoutError: either way, a new one)
                self.say(f"warning: --shards: shard {k}'s actor is gone; starting a new one")
                self.actors[k] = self._actor(ray, k)
                self.nodes[k] = ray.get(self.actors[k].where.remote())

    def __exit__(self, *exc) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
        if self._group is not None:
            remove_placement_group(self._group)
            self._group = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def __call__(self, plan: Plan, config: RunConfig, progress=None, on_rows=None) -> StageResult:
        """Run ``plan`` as this runner's shards and return the merged stage (module docstring).
        ``on_rows``: a :class:`replay.results.StageParts` gets the shards' rows in its folder as
        they come (``shardNN.parts/``); another sink sees the merged rows at the end."""
        import ray

        from replay.results import StageParts
        from replay.runner import engine_sampler

        if config.closed_loop:
            raise ConfigError("--shards: a closed-loop stage (--concurrency) cannot be sharded: its users share one cap")
        self._alive(ray)
        assigned = shard_of(plan.rows, self.shards)
        parts = [shard_plan(plan, k, self.shards, assigned) for k in range(self.shards)]
        spool = on_rows.dir if isinstance(on_rows, StageParts) else None
        if spool is not None:
            spool.mkdir(parents=True, exist_ok=True)
        own = dataclasses.replace(config, cpus=(), metrics_url="none")  # each shard on its own node's CPUs
        refs = [ray.put(_to_wire(part)) for part, _ in parts]
        clocks = [clock_offset(_pinger(ray, a), self.pings) for a in self.actors]
        start_at = time.time_ns() + int(self.lead_s * 1e9)
        futures = [
            a.run.remote(ref, own, start_at + c.offset_ns, str(spool) if spool else None)
            for a, ref, c in zip(self.actors, refs, clocks)
        ]
        sampler = engine_sampler(config)
        interrupted = False
        done: dict[int, StageResult | BaseException] = {}
        with sampler if sampler is not None else _Null():
            try:
                waiting = dict(enumerate(futures))
                while waiting:
                    ready, _ = ray.wait(list(waiting.values()), num_returns=len(waiting), timeout=0.5)
                    for k, f in list(waiting.items()):
                        if f in ready:
                            try:
                                got = ray.get(f)
                                done[k] = dataclasses.replace(got, requests=pl.from_arrow(got.requests))
                            except Exception as e:  # noqa: BLE001 (a dead actor or its failed task: that shard fails)
                                done[k] = e
                            del waiting[k]
                    if progress is not None:
                        counts = [(0, 0, 0)] * self.shards
                        for k in waiting:
                            try:
                                counts[k] = ray.get(self.actors[k].progress.remote(), timeout=2)
                            except Exception:  # noqa: BLE001 (dead or busy: counted when it ends)
                                pass
                        for k, r in done.items():
                            if isinstance(r, StageResult):
                                counts[k] = (
                                    int(r.requests["sent_ns"].is_not_null().sum()),
                                    len(parts[k][1]),
                                    int((r.requests["error"] != "none").sum()),
                                )
                        progress(sum(c[0] for c in counts), sum(c[1] for c in counts), sum(c[2] for c in counts), plan.n)
            except KeyboardInterrupt:
                interrupted = True
                for k in waiting:
                    ray.kill(self.actors[k])
                    done[k] = KeyboardInterrupt()
        runs = []
        for k, ((_, rows), c) in enumerate(zip(parts, clocks)):
            r = done[k]
            run = ShardRun(shard=k, rows=rows, start_at_unix_ns=start_at, clock=c, node=self.nodes[k])
            if isinstance(r, StageResult):
                run.result = r
            else:
                run.died = f"{type(r).__name__}: {str(r).splitlines()[0] if str(r) else 'killed'}"[:200]
                run.written = written_rows(spool, k) if spool is not None else None
            runs.append(run)
        merged = merge(
            runs,
            config,
            start_at,
            plan.offered_rate,
            unsent=lambda rows, schema, detail: _unsent(plan, rows, schema, detail),
            engine_metrics=sampler.summary() if sampler else None,
            interrupted=interrupted,
        )
        if on_rows is not None and not isinstance(on_rows, StageParts):
            on_rows(merged.requests)
        return merged


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


def _pinger(ray, actor) -> Callable[[], int]:
    """One clock reading of ``actor``'s node per call."""
    return lambda: int(ray.get(actor.clock.remote()))


def _ready(ray, group, timeout_s: float) -> bool:
    try:
        ray.get(group.ready(), timeout=timeout_s)
        return True
    except Exception:  # noqa: BLE001 (GetTimeoutError: not placeable)
        return False
