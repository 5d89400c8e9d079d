"""Fidelity of a results folder (one verdict per stage) and drift between two traces.

``compare_results(LIVE, RESULTS)`` reads the live Trace and the stage files of a ``replay run`` or
``replay sweep`` folder; each stage is judged against the live rows it replayed, at its own
compression (:func:`fidelity.sides.compression`). ``drift(OLD, NEW)`` judges NEW as if it were a
replay of OLD, at their own times: has live traffic moved away from the workload a config was
tuned on?
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from fidelity.compare import AA_RUNS, CANNOT_TELL, FAITHFUL, UNFAITHFUL, FidelityVerdict, compare_sides
from fidelity.sides import Side, compression, live_side, message_counts, replay_side
from replay.config import LAG_BOUND_MS
from replay.errors import ConfigError
from replay.fleet import replica_vs_live
from replay.trace import Trace, read_trace

__all__ = ["StageFidelity", "FidelityReport", "compare_stage", "compare_results", "drift", "own_times"]


@dataclass(frozen=True)
class StageFidelity:
    file: str
    requested_rate: float | None
    compression: float  # how many times faster than live the stage ran
    requests: int  # rows of the stage
    sent: int
    verdict: FidelityVerdict
    # a fleet's stage: each replica's requests beside the same requests live (replay.fleet
    # .replica_vs_live); shown, never judged. None with one target
    replicas: list[dict] | None = None
    # the two sides compared (for plots; not in the JSON)
    live_side: Side | None = field(default=None, repr=False, compare=False)
    replay_side: Side | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "requested_rate": self.requested_rate,
            "compression": self.compression,
            "requests": self.requests,
            "sent": self.sent,
            **self.verdict.to_json(),
            **({"replicas": self.replicas} if self.replicas else {}),
        }


@dataclass(frozen=True)
class FidelityReport:
    """What ``replay fidelity`` prints and writes: one verdict per stage (or one, for drift)."""

    live: str
    results: str
    stages: list[StageFidelity]
    kind: str = "fidelity"  # or "drift"

    @property
    def state(self) -> str:
        """UNFAITHFUL when a stage is, else CANNOT_TELL when a stage is, else FAITHFUL."""
        states = {s.verdict.state for s in self.stages}
        return next((st for st in (UNFAITHFUL, CANNOT_TELL) if st in states), FAITHFUL)

    @property
    def faithful(self) -> bool:
        return self.state == FAITHFUL

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "live": self.live,
            "results": self.results,
            "state": self.state,
            "faithful": self.faithful,
            "stages": [s.to_json() for s in self.stages],
        }


def _live(live: Trace | str | Path) -> tuple[Trace, str]:
    if isinstance(live, Trace):
        return live, "<trace>"
    return read_trace(live, bodies=False), str(live)


def own_times(arrivals: str | None = None, concurrency: int | None = None) -> str | None:
    """Why a stage's send times are its own, not live's rescaled (None when they are live's):
    a closed loop (``concurrency`` users), or arrival times drawn anew (``arrivals`` other than
    ``trace``). Its sends are then not paired with live's arrivals (arrivals.paired_offsets)."""
    if concurrency is not None:
        return f"a closed loop of {concurrency} users sends a request when one before it ended, not at live's time"
    if arrivals not in (None, "trace"):
        return f"the stage drew its own arrival times (--arrivals {arrivals}): the distribution tests judge them"
    return None


def _replay_of(live: Trace, sent: Trace, stage: pl.DataFrame, messages: pl.DataFrame | None, lag_bound_ms: float | None) -> Side:
    """The replay side of a stage, at its compression against live, its times within its send-lag
    bound (``lag_bound_ms``; the runner's default when None) of their schedule."""
    c = compression(live.df, stage)
    slack = (LAG_BOUND_MS if lag_bound_ms is None else lag_bound_ms) / 1e3 * c
    return replace(replay_side(sent.df, stage, live.meta.block_size_tokens, messages=messages), time_scale=c, time_slack_s=slack)


def compare_stage(
    live: Trace,
    stage: pl.DataFrame,
    *,
    sent: Trace | None = None,
    file: str = "<stage>",
    requested_rate: float | None = None,
    judge_outcomes: bool = False,
    seed: int = 0,
    lag_bound_ms: float | None = None,
    repeats: tuple[pl.DataFrame, ...] = (),
    aa_runs: int = AA_RUNS,
    messages: pl.DataFrame | None = None,
    own_times: str | None = None,
) -> StageFidelity:
    """Judge one stage's per-request results against the live rows it replayed. ``sent`` is the
    trace the stage replayed, when it is not ``live`` itself (a redacted or edited copy with the
    same request ids): its block hashes and lengths are what the replay offered. ``lag_bound_ms``
    is the stage's own send-lag bound (default: the runner's default, 1 ms). ``repeats``: the rows
    of the other replays of this stage (same engine, config and load), for the outcomes' replay
    A/A (:mod:`fidelity.compare`; ``aa_runs`` replays in all). ``messages``: the sent rows' message
    counts (:func:`fidelity.sides.message_counts`; read from ``sent``'s bodies when not given).
    ``own_times``: why the stage's send times are not live's rescaled, when it made its own
    (:func:`own_times`); its sends are then not compared with live's arrivals one by one."""
    sent = live if sent is None else sent
    if stage.height == 0:
        raise ConfigError(f"{file}: the stage has no requests")
    for trace, what in ((live, "live trace"), (sent, "replayed trace")):
        missing = stage.join(trace.df.select("request_id"), on="request_id", how="anti")
        if missing.height:
            raise ConfigError(
                f"{file}: {missing.height} requests are not in the {what} "
                f"(first: {missing['request_id'][0]!r}): was it replayed from another trace?"
            )
    rows = live.df.filter(pl.col("request_id").is_in(stage["request_id"].implode()))
    if messages is None:
        messages = message_counts(sent, stage["request_id"])
    ours = _replay_of(live, sent, stage, messages, lag_bound_ms)
    theirs = live_side(rows, live.meta.block_size_tokens)
    verdict = compare_sides(
        theirs,
        ours,
        judge_outcomes=judge_outcomes,
        seed=seed,
        stage=stage,
        lag_bound_ms=lag_bound_ms,
        replays=tuple(_replay_of(live, sent, r, messages, lag_bound_ms) for r in repeats),
        aa_runs=aa_runs,
        own_times=own_times,
    )
    return StageFidelity(
        file=file,
        requested_rate=requested_rate,
        compression=ours.time_scale,
        requests=stage.height,
        sent=ours.n,
        verdict=verdict,
        replicas=replica_vs_live(stage, rows),
        live_side=theirs,
        replay_side=ours,
    )


def compare_results(
    live: Trace | str | Path, results: str | Path, *, judge_outcomes: bool = False, seed: int = 0, aa_runs: int = AA_RUNS
) -> FidelityReport:
    """Judge every stage of a results folder (``replay run`` / ``replay sweep`` output). The
    trace the folder's summary names as replayed, when it is another file than ``live``, gives
    what the replay offered (:func:`compare_stage`'s ``sent``). With ``judge_outcomes`` the
    stages at the same load (the repeats of ``--repeats K``) are each other's replay A/A."""
    from replay.results import read_stage

    trace, live_name = _live(live)
    folder = Path(results)
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        raise ConfigError(f"{folder}: not a results folder (no summary.json)")
    try:
        summary = json.loads(summary_path.read_text())
        files = summary["files"]
        stage_summaries = summary.get("stages", [])
    except (ValueError, KeyError) as e:
        raise ConfigError(f"{summary_path}: not a results summary ({e})") from None
    sent = None
    replayed = summary.get("trace")
    if (
        replayed
        and Path(replayed).is_file()
        and (live_name == "<trace>" or Path(replayed).resolve() != Path(live_name).resolve())
    ):
        sent = read_trace(replayed, bodies=False)
    messages = message_counts(sent if sent is not None else trace)  # once for every stage
    summaries = [stage_summaries[i] if i < len(stage_summaries) else {} for i in range(len(files))]
    loads = [(s.get("requested_rate"), s.get("concurrency")) for s in summaries]
    arrivals = (summary.get("arrivals") or {}).get("kind")
    stages = []
    # with outcomes judged, each stage read once and kept (it is a repeat of its siblings);
    # otherwise read as judged, one at a time
    frames: dict[int, pl.DataFrame] = {}

    def frame(i: int) -> pl.DataFrame:
        if i in frames:
            return frames[i]
        df = read_stage(folder / files[i])[0]
        if judge_outcomes:
            frames[i] = df
        return df

    for i, name in enumerate(files):
        repeats = tuple(frame(j) for j in range(len(files)) if judge_outcomes and j != i and loads[j] == loads[i])
        stages.append(
            compare_stage(
                trace,
                frame(i),
                sent=sent,
                file=name,
                requested_rate=summaries[i].get("requested_rate"),
                judge_outcomes=judge_outcomes,
                seed=seed,
                lag_bound_ms=summaries[i].get("lag_bound_ms"),
                repeats=repeats,
                aa_runs=aa_runs,
                messages=messages,
                own_times=own_times(arrivals, summaries[i].get("concurrency")),
            )
        )
    return FidelityReport(live=live_name, results=str(folder), stages=stages)


def drift(old: Trace | str | Path, new: Trace | str | Path, *, seed: int = 0) -> FidelityReport:
    """Judge NEW against OLD with the same metrics (NEW's own arrival times and lengths), as a
    later stretch of the same traffic: the A/A halves are OLD's, by the scheme and factor that
    ``benchmarks/fidelity_calibration.py`` chose by judging later windows of one stationary
    stream against earlier ones (:mod:`fidelity.resample`), scaled to the two traces' sizes.
    Their request ids pair only where NEW holds OLD's own requests (an edited copy)."""
    old_trace, old_name = _live(old)
    new_trace, new_name = _live(new)
    if old_trace.meta.block_size_tokens != new_trace.meta.block_size_tokens:
        raise ConfigError(
            f"{new_name}: block size {new_trace.meta.block_size_tokens} differs from {old_name}'s "
            f"{old_trace.meta.block_size_tokens}: the prefix metrics would not compare"
        )
    block = old_trace.meta.block_size_tokens
    old_side, new_side = live_side(old_trace.df, block, name="old"), live_side(new_trace.df, block, name="new")
    verdict = compare_sides(old_side, new_side, seed=seed)
    stage = StageFidelity(
        file=new_name,
        requested_rate=None,
        compression=1.0,
        requests=new_trace.df.height,
        sent=new_trace.df.height,
        verdict=verdict,
        live_side=old_side,
        replay_side=new_side,
    )
    return FidelityReport(live=old_name, results=new_name, stages=[stage], kind="drift")
