"""The results folder: one Parquet file of per-request results per stage, and a summary JSON.

While a stage runs, its finished requests are written as they come back from the runner (about
every half second, in request order) to ``<stage file>.parts/``, one small Parquet file per batch,
each renamed into place whole (:class:`StageParts`). When the stage ends its file is written with
the summary in its metadata and the parts are removed; the summary JSON is rewritten atomically
after each stage. So a crash, even a kill -9, loses at most the last half second of finished
requests (and those still open): :func:`read_stage` reads a stage that never finished from its
parts. Ctrl-C cancels the stage and saves it whole, partial results included.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from replay.errors import ConfigError
from replay.runner import StageResult

__all__ = ["stage_file", "write_stage", "read_stage", "write_summary", "StageParts", "parts_dir", "RESULTS_VERSION"]

RESULTS_VERSION = "2"  # 2: chunk_us (u32 µs after the first token), release_ns, conn_ns


def stage_file(folder: Path, index: int, rate: float | None, concurrency: int | None = None) -> Path:
    """``stageNN_<load>.parquet``: ``20rps``, ``asrecorded``, or ``c4`` (a closed-loop stage of 4 users)."""
    label = f"c{concurrency}" if concurrency is not None else "asrecorded" if rate is None else f"{rate:g}rps"
    return Path(folder) / f"stage{index:02d}_{label}.parquet"


def parts_dir(stage_path: Path) -> Path:
    """Where a stage's rows go while it runs."""
    return Path(stage_path).with_suffix(".parts")


class StageParts:
    """Writes a running stage's results batch by batch (a ``RowsSink`` for
    :func:`replay.runner.run_plan`): ``<stage file>.parts/NNNNNN.parquet``, each written to a
    temporary name and renamed, so every file there is whole. :func:`write_stage` removes them."""

    def __init__(self, stage_path: Path) -> None:
        self.dir = parts_dir(stage_path)
        self.written = 0

    def __call__(self, frame: pl.DataFrame) -> None:
        if self.written == 0:  # the folder appears with the first rows
            _prepare(self.dir.parent)
            shutil.rmtree(self.dir, ignore_errors=True)  # a crashed earlier run's
            self.dir.mkdir()
        path = self.dir / f"{self.written:06d}.parquet"
        tmp = path.with_suffix(".tmp")
        frame.write_parquet(tmp, compression="zstd")
        os.replace(tmp, path)
        self.written += 1


def _prepare(folder: Path) -> Path:
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out: {folder} exists and is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_stage(result: StageResult, path: Path) -> Path:
    """Write one stage's per-request results (zstd Parquet, summary in the file metadata)."""
    path = Path(path)
    _prepare(path.parent)
    table = result.requests.to_arrow()
    meta = {
        "faithful_replay.results_version": RESULTS_VERSION,
        "start_unix_ns": str(result.start_unix_ns),
        "summary": json.dumps(result.summary.to_json()),
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)
    shutil.rmtree(parts_dir(path), ignore_errors=True)
    return path


def read_stage(path: Path) -> tuple[pl.DataFrame, dict]:
    """A stage file back as (requests, summary). A stage that never finished (the process died)
    has no file but its parts: then the requests written so far, in request order, and the
    summary ``{"partial": True}`` (a sharded stage's rows shard after shard, each shard's on its
    own clock)."""
    path = Path(path)
    # a sharded stage's (replay.shards): each shard's parts in a folder of its own
    parts = sorted(parts_dir(path).glob("*.parquet")) + sorted(parts_dir(path).glob("shard*.parts/*.parquet"))
    if not path.exists() and parts:
        return pl.concat([pl.read_parquet(p) for p in parts], how="vertical_relaxed"), {"partial": True}
    meta = pq.read_schema(path).metadata or {}
    summary = json.loads(meta.get(b"summary", b"{}"))
    return pl.read_parquet(path), summary


def write_summary(folder: Path, summary: dict) -> Path:
    folder = _prepare(folder)
    path = folder / "summary.json"
    tmp = folder / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, path)
    return path
