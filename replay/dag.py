"""What waits for what: the dependency graph of a trace (schema 3) and its rules.

Owns :func:`check` (the DAG rules every reader and writer applies), :func:`has_edges`,
:func:`dag_gates` (what the Rust dispatcher is told for a ``--sessions dag`` stage),
:func:`after_failed` (requests sent after a dependency failed), :func:`depth_and_fan_out` (each
request's place in the graph, for ``shape`` and the fidelity report) and :func:`shape` (what
``replay inspect`` reports of the graph).

A request's ``depends_on`` lists the request ids that must all have ended before it may be sent:
one for a chain (a chat's previous turn, an agent's previous step), several for a join (the step
that reads every parallel tool call's or subagent's result). ``wait_us`` is the recorded time from
the last of them ending to its arrival (tool time or think time).

The rules (:func:`check`): each dependency is the id of a request at an earlier row of the trace
(rows are in arrival order, so a dependency arrives no later than its dependent). A dependency
that is not in the trace, one that arrives after its dependent, and a cycle (requests of the same
arrival that wait for each other) are errors naming the file, the row and the ids.

The replay (``--sessions dag``): a request is sent at the later of its scheduled time and the end
of its last dependency plus its wait (scaled by the stage's compression of time unless
``keep_waits``). Fan-out siblings (the same dependencies and waits) leave together; a join waits
for all. The Rust dispatcher applies the rule (``replay._engine.run(after=, think_ns=, joins=,
join_offsets=)``): ``after[i]`` is the dependency whose answer request i's history carries (its
*history parent*: the latest-arriving dependency in its own session, else its latest-arriving
one), the others are ``joins[join_offsets[i]:join_offsets[i + 1]]``. A dependency outside the
stage's rows is not waited for.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np
import polars as pl

from replay.errors import TraceError

__all__ = ["check", "root_sessions", "has_edges", "row_edges", "depth_and_fan_out", "dag_gates", "after_failed", "shape"]


def root_sessions(rows: pl.DataFrame) -> list[str | None]:
    """Each row's root session: its ``session_id`` (None when it has none), or for a subagent's
    session the session that spawned it, followed through ``parent_session_id`` to the top."""
    sessions = rows["session_id"].to_list() if "session_id" in rows.columns else [None] * rows.height
    parents = rows["parent_session_id"].to_list() if "parent_session_id" in rows.columns else [None] * rows.height
    parent_of: dict[str, str] = {}
    for s, p in zip(sessions, parents):
        if s is not None and p is not None and p != s:
            parent_of.setdefault(s, p)
    root: dict[str, str] = {}

    def find(s: str) -> str:
        path, seen = [], set()
        while s in parent_of and s not in root and s not in seen:
            seen.add(s)
            path.append(s)
            s = parent_of[s]
        top = root.get(s, s)
        for x in path:
            root[x] = top
        return top

    return [None if s is None else find(s) for s in sessions]


def has_edges(df: pl.DataFrame) -> bool:
    """Whether any row of ``df`` depends on another."""
    return "depends_on" in df.columns and bool((df.get_column("depends_on").list.len() > 0).any())


def _edges(df: pl.DataFrame) -> pl.DataFrame:
    """One row per (dependent row ``i``, dependency id ``dep``)."""
    return (
        df.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("i"), pl.col("depends_on").alias("dep"))
        .filter(pl.col("dep").list.len() > 0)
        .explode("dep")
    )


def check(
    df: pl.DataFrame,
    source: str,
    *,
    earlier: AbstractSet[str] | None = None,
    whole: bool = True,
    first_row: int = 0,
) -> None:
    """Raise :class:`TraceError` unless every dependency of ``df``'s rows is an earlier row.

    ``df`` is the whole trace (``whole=True``), or a batch of it that follows rows whose ids are
    ``earlier`` (a dependency may name those), or a batch checked alone (``whole=False`` and no
    ``earlier``: a dependency outside the batch is left to the writer's check). ``first_row`` is
    the batch's first row number in the file, for the messages."""
    if not has_edges(df):
        return
    ids = df.get_column("request_id")
    edges = _edges(df)
    if edges.get_column("dep").is_null().any():
        i = int(edges.filter(pl.col("dep").is_null())["i"][0])
        raise TraceError(f"{source}: column 'depends_on' has a null id at row {first_row + i}")
    index = pl.DataFrame({"dep": ids, "j": pl.int_range(df.height, dtype=pl.Int64, eager=True)})
    found = edges.join(index, on="dep", how="left")
    missing = found.filter(pl.col("j").is_null())
    if missing.height and (whole or earlier is not None):
        unknown = missing if earlier is None else missing.filter(~pl.col("dep").is_in(list(earlier)))
        if unknown.height:
            i, dep = int(unknown["i"][0]), unknown["dep"][0]
            raise TraceError(
                f"{source}: column 'depends_on' at row {first_row + i}: request {ids[i]!r} depends on {dep!r}, "
                "which is not in the trace"
            )
    back = found.filter(pl.col("j") >= pl.col("i"))
    if not back.height:
        return
    i, dep, j = int(back["i"][0]), back["dep"][0], int(back["j"][0])
    arrival = df.get_column("arrival_us")
    where = f"{source}: column 'depends_on' at row {first_row + i}: request {ids[i]!r}"
    if arrival[j] > arrival[i]:
        raise TraceError(f"{where} depends on {dep!r} (row {first_row + j}), which arrives after it")
    cycle = _cycle(found, i)
    if cycle:
        raise TraceError(f"{where} is in a dependency cycle: {' -> '.join(repr(ids[k]) for k in cycle)}")
    raise TraceError(
        f"{where} depends on {dep!r} (row {first_row + j}), which arrives at the same time but comes after it "
        "(write a dependency before its dependents)"
    )


def _cycle(found: pl.DataFrame, start: int) -> list[int]:
    """A cycle through row ``start`` in the (i -> j) edges, as rows (first repeated last), or []."""
    succ: dict[int, list[int]] = {}
    for i, j in found.filter(pl.col("j").is_not_null()).select("i", "j").iter_rows():
        succ.setdefault(i, []).append(j)
    path, seen = [start], {start}
    stack = [iter(succ.get(start, []))]
    while stack:
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            seen.discard(path.pop())
            continue
        if nxt == start:
            return [*path, start]
        if nxt not in seen:
            path.append(nxt)
            seen.add(nxt)
            stack.append(iter(succ.get(nxt, [])))
    return []


def row_edges(df: pl.DataFrame) -> pl.DataFrame:
    """Columns ``i``, ``j``: row i of ``df`` depends on row j of ``df`` (each pair once, in no
    order); a dependency that is not a row of ``df`` is left out."""
    index = pl.DataFrame({"dep": df["request_id"], "j": pl.int_range(df.height, dtype=pl.Int64, eager=True)})
    return _edges(df).join(index, on="dep", how="inner").select("i", "j").unique()


def _dep_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """Edges between the plan's rows (:func:`row_edges`), each dependency an earlier row."""
    return row_edges(rows).filter(pl.col("j") < pl.col("i"))


def depth_and_fan_out(df: pl.DataFrame, edges: pl.DataFrame | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``df`` (rows in a trace's order: every dependency an earlier row): its depth
    (the longest chain of dependencies among the rows ending at it, 0 for a root) and its fan-out
    (how many rows depend on it). ``edges``: :func:`row_edges` of ``df`` where already made."""
    pairs = _dep_rows(df) if edges is None else edges.filter(pl.col("j") < pl.col("i"))
    i, j = pairs["i"].to_numpy(), pairs["j"].to_numpy()
    depth = np.zeros(df.height, dtype=np.int64)
    # one pass in row order: a row's dependencies are all earlier, so their depths are final
    order = np.argsort(i, kind="stable")
    for a, b in zip(i[order].tolist(), j[order].tolist()):
        if depth[b] + 1 > depth[a]:
            depth[a] = depth[b] + 1
    return depth, np.bincount(j, minlength=df.height)


def dag_gates(
    rows: pl.DataFrame, offsets_ns: np.ndarray, keep_waits: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(after, think_ns, joins, join_offsets)`` for the plan's rows (in send order) and their
    send offsets: the history parent of each row (-1: none), its wait in ns (the recorded
    ``wait_us``, else its arrival minus the latest end of its dependencies, never negative;
    scaled by the stage's compression of time unless ``keep_waits``), and its other dependencies
    (``joins[join_offsets[i]:join_offsets[i + 1]]``)."""
    n = rows.height
    arrival = rows["arrival_us"].cast(pl.Int64).to_numpy()
    scale = 1.0
    if not keep_waits and n > 1:
        span_us = int(np.ptp(arrival))
        span_ns = int(offsets_ns[-1] - offsets_ns[0])
        scale = span_ns / (span_us * 1000) if span_us > 0 else 1.0
    edges = _dep_rows(rows)
    after = np.full(n, -1, dtype=np.int64)
    think = np.zeros(n, dtype=np.int64)
    join_offsets = np.zeros(n + 1, dtype=np.int64)
    if not edges.height:
        return after, think, np.zeros(0, dtype=np.int64), join_offsets
    e2e = rows["e2e_us"].cast(pl.Int64).fill_null(0).to_numpy()
    i = edges["i"].to_numpy()
    j = edges["j"].to_numpy()
    _, session = np.unique(rows["session_id"].fill_null("").to_numpy().astype(str), return_inverse=True)
    same = (session[i] == session[j]) & rows["session_id"].is_not_null().to_numpy()[i]
    # history parent: same session first, then the latest arrival, then the latest row
    order = np.lexsort((j, arrival[j], same, i))
    i, j, same = i[order], j[order], same[order]
    last = np.r_[i[1:] != i[:-1], True]
    after[i[last]] = j[last]
    # the others, in row order
    rest = ~last
    ri, rj = i[rest], j[rest]
    ro = np.lexsort((rj, ri))
    ri, rj = ri[ro], rj[ro]
    np.add.at(join_offsets, ri + 1, 1)
    np.cumsum(join_offsets, out=join_offsets)
    # the wait: recorded, else arrival - the latest end among the dependencies
    ends = arrival[j] + e2e[j]
    latest = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(latest, i, ends)
    has = after >= 0
    gap = np.where(has, np.clip(arrival - latest, 0, None), 0)
    wait = rows["wait_us"].cast(pl.Int64) if "wait_us" in rows.columns else pl.Series([None] * n, dtype=pl.Int64)
    w = np.where(wait.is_not_null().to_numpy(), wait.fill_null(0).to_numpy(), gap)
    think[has] = (w[has].astype(np.float64) * 1000.0 * scale).astype(np.int64)
    return after, think, rj.astype(np.int64), join_offsets


def after_failed(
    after: np.ndarray, joins: np.ndarray | None, join_offsets: np.ndarray | None, failed: np.ndarray, lo: int, hi: int
) -> np.ndarray:
    """For the plan's rows ``lo..hi``: True where a dependency (``after``, or a join's other
    ones) failed (``failed``: per row, an error or a status >= 400; known for every earlier row,
    as the runner hands results back in request order). Such a request was sent anyway, when the
    dependency ended: the results' ``after_failed_dependency``."""
    a = after[lo:hi]
    out = (a >= 0) & failed[np.clip(a, 0, None)]
    if joins is not None and join_offsets is not None and len(joins):
        a0, a1 = int(join_offsets[lo]), int(join_offsets[hi])
        if a1 > a0:
            rows = np.repeat(np.arange(lo, hi), np.diff(join_offsets[lo : hi + 1])) - lo
            np.logical_or.at(out, rows, failed[joins[a0:a1]])
    return out


def shape(df: pl.DataFrame) -> dict[str, Any] | None:
    """The DAG's shape for ``replay inspect`` (None when no row depends on another): requests per
    session, fan-out degree (the dependents of a request that has any), depth (longest chain of
    dependencies ending at a request, 0 for a root), critical-path length (the longest chain, in
    requests), subagent sessions per root session, wait-time percentiles, input tokens by depth
    and the cached share of input where the trace recorded cached tokens."""
    if not has_edges(df):
        return None
    n = df.height
    edges = _dep_rows(df)
    i = edges["i"].to_numpy()
    depth, fan = depth_and_fan_out(df, edges)
    fan = fan[fan > 0]
    sessions = df["session_id"].fill_null(df["request_id"])
    per_session = sessions.value_counts()["count"].to_numpy()
    parent = df["parent_session_id"] if "parent_session_id" in df.columns else pl.Series([None] * n, dtype=pl.String)
    subagents = (
        pl.DataFrame({"s": sessions, "p": parent})
        .filter(pl.col("p").is_not_null())
        .unique("s")
        .group_by("p")
        .len()["len"]
        .to_numpy()
    )
    roots = int(pl.DataFrame({"s": sessions, "p": parent}).filter(pl.col("p").is_null())["s"].n_unique())
    wait = df["wait_us"].drop_nulls().to_numpy() / 1e6 if "wait_us" in df.columns else np.zeros(0)
    inp = df["input_tokens"].to_numpy()
    by_depth = pl.DataFrame({"d": depth, "t": inp}).group_by("d").agg(pl.col("t").mean()).sort("d")
    cached = df["cached_tokens"]

    def pcts(x: np.ndarray, digits: int = 2) -> dict[str, float] | None:
        if not len(x):
            return None
        return {f"p{q}": round(float(np.percentile(x, q)), digits) for q in (50, 90, 99)} | {"max": round(float(x.max()), digits)}

    known = cached.is_not_null()
    return {
        "requests_with_dependencies": int((df["depends_on"].list.len() > 0).sum()),
        "edges": int(len(i)),
        "joins": int((np.bincount(i, minlength=n) > 1).sum()),
        "sessions": int(len(per_session)),
        "root_sessions": roots,
        "requests_per_session": pcts(per_session.astype(np.float64), 1),
        "fan_out": pcts(fan.astype(np.float64), 1),
        "depth": pcts(depth.astype(np.float64), 1),
        "critical_path_requests": int(depth.max()) + 1,
        "subagents_per_root_session": {
            "sessions_with_subagents": int(len(subagents)),
            "mean": round(float(subagents.sum()) / roots, 2) if roots else None,
            "max": int(subagents.max()) if len(subagents) else 0,
        },
        "wait_s": pcts(wait, 3),
        "input_tokens_by_depth": {int(d): round(float(t)) for d, t in by_depth.iter_rows()},
        "cached_share_of_input": round(float(cached.filter(known).sum()) / float(df["input_tokens"].filter(known).sum()), 4)
        if known.any() and df["input_tokens"].filter(known).sum()
        else None,
    }
