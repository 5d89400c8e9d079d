"""The results folder: one Parquet file of per-request results per stage, and a summary JSON.

Each stage is written as soon as it ends, and the summary is rewritten atomically after each, so a
crash or Ctrl-C loses at most the stage in flight (whose partial results are saved too).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from replay.errors import ConfigError
from replay.runner import StageResult

__all__ = ["stage_file", "write_stage", "read_stage", "write_summary", "RESULTS_VERSION"]

RESULTS_VERSION = "2"  # 2: chunk_us (u32 µs after the first token), release_ns, conn_ns


def stage_file(folder: Path, index: int, rate: float | None) -> Path:
    label = "asrecorded" if rate is None else f"{rate:g}rps"
    return Path(folder) / f"stage{index:02d}_{label}.parquet"


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
        "summary": json.dumps(result.summary),
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)
    return path


def read_stage(path: Path) -> tuple[pl.DataFrame, dict]:
    """A stage file back as (requests, summary)."""
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
