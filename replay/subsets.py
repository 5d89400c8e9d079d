"""Smaller traces cut from a trace file, streaming (the library side of ``replay sample`` / ``slice``).

Owns :func:`sample_sessions`, :func:`slice_window` and :func:`session_kept`. Both read the trace
file a row batch at a time and write the rows they keep through
:class:`replay.trace.TraceWriter`, so memory holds one batch whatever the trace's size; the
metadata (tokenizer, block size, synthesis rule, reports) is kept, so a null body is built the
same way from the smaller trace (:mod:`replay.synth` seeds a row's text by its request id, not
its position).

- :func:`sample_sessions` keeps whole sessions: a session is kept when
  blake2b-64(``seed``, its root session id) / 2**64 < ``fraction``, so every turn of a kept session is
  kept (and the prefix sharing inside it), and the same seed keeps the same sessions of any file.
  A subagent's session (``parent_session_id``) goes with the session that spawned it: the draw is
  made for the root of that chain. A row without a session is a session of its
  own (its request id). Times are unchanged.
- :func:`slice_window` keeps the rows that arrive in ``[start_s, end_s)`` seconds from the
  trace's start and moves time 0 to ``start_s`` (``t0_unix_us`` moves with it), so the gap from
  the window's start to its first request is kept. A kept turn whose parent arrived before the
  window keeps its ``parent_request_id`` and ``turn``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import polars as pl

from replay.dag import has_edges
from replay.errors import ConfigError, TraceError
from replay.trace import SEGMENT_GLOB, TraceWriter, batch_frame, read_meta, read_trace, validate

__all__ = ["sample_sessions", "slice_window", "session_kept"]

_BATCH_ROWS = 65_536


def session_kept(session: str, fraction: float, seed: int) -> bool:
    """Whether :func:`sample_sessions` keeps ``session`` (see the module docstring)."""
    digest = hashlib.blake2b(f"{seed}\0{session}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64 < fraction


def _row_batches(src: Path, meta) -> Iterator[pl.DataFrame]:
    """The trace's rows in order, validated, a batch at a time: a file's row groups, or a capture
    folder's rows in arrival order (read without their bodies, which are merged in a batch at a
    time: :meth:`replay.trace.Trace.body_batches`)."""
    import pyarrow.parquet as pq

    if src.is_dir():
        trace = read_trace(src, bodies=False)
        n = len(trace)
        for start, bodies in zip(range(0, n, _BATCH_ROWS), trace.body_batches(n, _BATCH_ROWS)):
            rows = trace.df.slice(start, len(bodies)).with_columns(pl.Series("body", bodies, dtype=pl.String))
            yield validate(rows, meta, f"{src.name} (row batch from row {start})", whole=False)
        return
    done = 0
    with pq.ParquetFile(src, buffer_size=1 << 20, pre_buffer=False) as f:
        for batch in f.iter_batches(batch_size=_BATCH_ROWS):
            rows = validate(batch_frame(batch), meta, f"{src.name} (row batch from row {done})", whole=False)
            done += rows.height
            yield rows


def _copy(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    keep: Callable[[pl.DataFrame], pl.DataFrame],
    meta_change: dict | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    src, out = Path(src), Path(out)
    meta, total = read_meta(src)
    new_meta = replace(meta, **(meta_change or {}))
    done = 0
    with TraceWriter(out, new_meta) as writer:
        for rows in _row_batches(src, meta):
            done += rows.height
            kept = keep(rows)
            if kept.height:
                writer.write(kept)
            if progress is not None:
                progress(done, total)
        if writer.rows == 0:
            writer.abort()
            raise TraceError(f"{out.name}: no rows kept (of {total}); nothing written")
        writer.close()
        return writer.rows


def sample_sessions(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    fraction: float,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Write the whole sessions of ``src`` that the seeded draw keeps to ``out``; return the rows
    written (see the module docstring)."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"--sessions: a fraction in (0, 1], got {fraction}")

    roots: dict[str, str] = {}  # a subagent's session -> the root session that spawned it

    def keep(rows: pl.DataFrame) -> pl.DataFrame:
        sessions = rows.get_column("session_id").fill_null(rows.get_column("request_id")).to_list()
        for s, p in zip(sessions, rows.get_column("parent_session_id").to_list()):
            if p is not None and s not in roots:
                roots[s] = roots.get(p, p)
        cache: dict[str, bool] = {}
        mask = []
        for s in sessions:
            root = roots.get(s, s)
            if root not in cache:
                cache[root] = session_kept(root, fraction, seed)
            mask.append(cache[root])
        return rows.filter(pl.Series(mask, dtype=pl.Boolean))

    return _copy(src, out, _keeping_graph(Path(src), keep), progress=progress)


def _file_has_edges(src: Path) -> bool:
    """Whether a row of the trace at ``src`` depends on another (its ``depends_on`` column only)."""
    import pyarrow.parquet as pq

    for path in sorted(src.glob(SEGMENT_GLOB)) if src.is_dir() else [src]:
        with pq.ParquetFile(path) as f:
            if "depends_on" not in f.schema_arrow.names:
                continue
            for batch in f.iter_batches(batch_size=_BATCH_ROWS, columns=["depends_on"]):
                if has_edges(batch_frame(batch)):
                    return True
    return False


def _keeping_graph(src: Path, keep: Callable[[pl.DataFrame], pl.DataFrame]) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """``keep``, then each kept row's ``depends_on`` cut to the ids kept so far (see the module
    docstring); the set of kept ids is held only for a trace with dependencies."""
    if not _file_has_edges(Path(src)):
        return keep
    kept_ids: set[str] = set()

    def run(rows: pl.DataFrame) -> pl.DataFrame:
        kept = keep(rows)
        ids = kept.get_column("request_id").to_list()
        deps = kept.get_column("depends_on").to_list()
        cut = []
        for rid, d in zip(ids, deps):
            cut.append([x for x in d if x in kept_ids])
            kept_ids.add(rid)
        return kept.with_columns(pl.Series("depends_on", cut, dtype=pl.List(pl.String)))

    return run


def slice_window(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    start_s: float,
    end_s: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Write the rows of ``src`` arriving in ``[start_s, end_s)`` (seconds from its start; no end:
    to the last) to ``out``, time 0 moved to ``start_s``; return the rows written."""
    if start_s < 0 or (end_s is not None and end_s <= start_s):
        raise ConfigError(f"--from/--to: need 0 <= from < to, got {start_s} and {end_s}")
    lo = round(start_s * 1e6)
    hi = None if end_s is None else round(end_s * 1e6)
    meta, _ = read_meta(src)

    def keep(rows: pl.DataFrame) -> pl.DataFrame:
        t = pl.col("arrival_us")
        cond = t >= lo if hi is None else (t >= lo) & (t < hi)
        return rows.filter(cond).with_columns(t - lo)

    return _copy(src, out, _keeping_graph(Path(src), keep), {"t0_unix_us": meta.t0_unix_us + lo}, progress=progress)
