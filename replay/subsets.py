"""Smaller traces cut from a trace file, streaming (the library side of ``replay sample`` / ``slice``).

Owns :func:`sample_sessions`, :func:`slice_window` and :func:`session_kept`. Both read the trace
file a row batch at a time and write the rows they keep through
:class:`replay.trace.TraceWriter`, so memory holds one batch whatever the trace's size; the
metadata (tokenizer, block size, synthesis rule, reports) is kept, so a null body is built the
same way from the smaller trace (:mod:`replay.synth` seeds a row's text by its request id, not
its position).

- :func:`sample_sessions` keeps whole sessions: a session is kept when
  blake2b-64(``seed``, session id) / 2**64 < ``fraction``, so every turn of a kept session is
  kept (and the prefix sharing inside it), the choice needs no memory of the sessions seen, and
  the same seed keeps the same sessions of any file. A row without a session is a session of its
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

from replay.errors import ConfigError, TraceError
from replay.trace import TraceWriter, batch_frame, read_meta, read_trace, validate

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
            yield validate(rows, meta, f"{src.name} (row batch from row {start})")
        return
    done = 0
    with pq.ParquetFile(src, buffer_size=1 << 20, pre_buffer=False) as f:
        for batch in f.iter_batches(batch_size=_BATCH_ROWS):
            rows = validate(batch_frame(batch), meta, f"{src.name} (row batch from row {done})")
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

    def keep(rows: pl.DataFrame) -> pl.DataFrame:
        sessions = rows.get_column("session_id").fill_null(rows.get_column("request_id")).to_list()
        cache: dict[str, bool] = {}
        mask = [cache[s] if s in cache else cache.setdefault(s, session_kept(s, fraction, seed)) for s in sessions]
        return rows.filter(pl.Series(mask, dtype=pl.Boolean))

    return _copy(src, out, keep, progress=progress)


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

    return _copy(src, out, keep, {"t0_unix_us": meta.t0_unix_us + lo}, progress=progress)
