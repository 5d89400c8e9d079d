"""Importer of Mooncake's JSON Lines traces (FAST'25) into a Trace.

Owns :func:`import_mooncake`. Each line has ``timestamp`` (ms from the start),
``input_length``, ``output_length`` and ``hash_ids``: one id per 512-token block of the prompt,
the partial last block included. Each row becomes a completions request whose prompt is the
concatenation of :func:`replay.prompts.block_text` for each hash id (the last block cut to the
tokens left), so the same hash id always yields the same text and the trace's prefix sharing
survives into the bodies and into ``block_hashes``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl

from replay.blocks import HASH_ALGO, block_hashes
from replay.errors import TraceError
from replay.trace import Trace, TraceMeta, validate

__all__ = ["MOONCAKE_BLOCK_TOKENS", "MOONCAKE_COLUMNS", "import_mooncake"]

MOONCAKE_BLOCK_TOKENS = 512
MOONCAKE_COLUMNS = ("timestamp", "input_length", "output_length", "hash_ids")
SOURCE_FORMAT = "mooncake-jsonl"


def _line_of_row(path: Path, row: int) -> int:
    """1-based line number of data row ``row`` (blank lines are not rows)."""
    seen = -1
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                seen += 1
                if seen == row:
                    return number
    return row + 1


def _first_bad_line(path: Path, source: str) -> TraceError:
    """Find the line polars could not read and describe it."""
    empty = True
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            empty = False
            try:
                record = json.loads(line)
            except ValueError:
                return TraceError(f"{source}: line {number}: not valid JSON")
            if not isinstance(record, dict):
                return TraceError(f"{source}: line {number}: not a JSON object")
            for name in MOONCAKE_COLUMNS:
                value = record.get(name)
                ok = (isinstance(value, list) and all(isinstance(v, int) and v >= 0 for v in value)
                      if name == "hash_ids" else
                      isinstance(value, (int, float)) and not isinstance(value, bool))
                if not ok:
                    return TraceError(f"{source}: line {number}: column '{name}' has {value!r}")
    if empty:
        return TraceError(f"{source}: trace is empty")
    return TraceError(f"{source}: not readable as JSON Lines")


def _column(df: pl.DataFrame, name: str, path: Path, integer: bool = True) -> pl.Series:
    s = df[name]
    source = path.name
    if s.dtype.is_float() and not integer:
        s = s.round(3)
    elif not s.dtype.is_integer():
        raise _first_bad_line(path, source)
    bad = (s.is_null() | (s < 0)).fill_null(True)
    if bad.any():
        row = int(bad.arg_true()[0])
        raise TraceError(
            f"{source}: line {_line_of_row(path, row)}: column '{name}' has {s[row]!r}, "
            "expected a number >= 0"
        )
    return s


def import_mooncake(
    path: str | os.PathLike[str],
    tokenizer: str = "gpt2",
    limit: int | None = None,
    model: str | None = None,
) -> Trace:
    """Read a Mooncake JSON Lines trace into a Trace (``limit``: first rows only).

    ``block_hashes`` are over the prompts' real token ids in 512-token blocks (the metadata
    says so); ``model``, when given, is put in each body and the model column.
    """
    from replay.prompts import block_units, prompt_vocab

    path = Path(path)
    source = path.name
    if not path.is_file():
        raise TraceError(f"{source}: no such file")
    try:
        df = pl.read_ndjson(path, n_rows=limit, infer_schema_length=None)
    except (pl.exceptions.PolarsError, OSError) as e:
        raise _first_bad_line(path, source) from e
    for name in MOONCAKE_COLUMNS:
        if name not in df.columns:
            raise TraceError(f"{source}: column '{name}' missing (Mooncake JSON Lines trace)")
    if df.height == 0:
        raise TraceError(f"{source}: trace is empty")
    stamp_ms = _column(df, "timestamp", path, integer=False)
    inputs = _column(df, "input_length", path).to_numpy()
    outputs = _column(df, "output_length", path).to_numpy()
    ids_col = df["hash_ids"]
    if not (isinstance(ids_col.dtype, pl.List)
            and (ids_col.dtype.inner.is_integer() or ids_col.dtype.inner == pl.Null)):
        raise _first_bad_line(path, source)
    expected = -(-inputs // MOONCAKE_BLOCK_TOKENS)
    got = ids_col.list.len().fill_null(-1).to_numpy()
    negative = ids_col.list.eval(pl.element() < 0).list.any().fill_null(False).to_numpy()
    bad = np.flatnonzero((got != expected) | negative)
    if len(bad):
        row = int(bad[0])
        what = ("a negative id" if negative[row] else
                f"{got[row]} ids, expected ceil(input_length / {MOONCAKE_BLOCK_TOKENS}) = "
                f"{expected[row]}")
        raise TraceError(f"{source}: line {_line_of_row(path, row)}: column 'hash_ids' has {what}")

    arrival_us = (stamp_ms * 1000).round().cast(pl.Int64).to_numpy()
    order = np.argsort(arrival_us, kind="stable")
    vocab = prompt_vocab(tokenizer)
    blocks: dict[int, tuple[str, np.ndarray, np.ndarray]] = {}  # id -> (text, units, ids)
    bodies, hashes = [], []
    hash_lists = ids_col.to_list()
    for r in order.tolist():
        n_in, ids = int(inputs[r]), hash_lists[r]
        texts, token_ids = [], []
        for k, h in enumerate(ids):
            block = blocks.get(h)
            if block is None:
                units = block_units(h, MOONCAKE_BLOCK_TOKENS, tokenizer)
                block = (vocab.render(units), units, vocab.ids(units))
                blocks[h] = block
            left = n_in - k * MOONCAKE_BLOCK_TOKENS
            if left >= MOONCAKE_BLOCK_TOKENS:
                texts.append(block[0])
                token_ids.append(block[2])
            else:
                texts.append(vocab.render(block[1][:left]))
                token_ids.append(block[2][:left])
        body = {"prompt": "".join(texts), "max_tokens": int(outputs[r])}
        if model is not None:
            body = {"model": model, **body}
        bodies.append(json.dumps(body, separators=(",", ":"), ensure_ascii=False))
        all_ids = np.concatenate(token_ids) if token_ids else np.zeros(0, np.uint32)
        hashes.append(block_hashes(all_ids, MOONCAKE_BLOCK_TOKENS))
    n = len(bodies)
    arrival_us = arrival_us[order]
    frame = pl.DataFrame({
        "request_id": [f"mooncake-{int(r):06d}" for r in order],
        "api": ["completions"] * n,
        "model": pl.Series([model] * n, dtype=pl.String),
        "arrival_us": arrival_us - arrival_us[0],
        "body": bodies,
        "input_tokens": inputs[order],
        "output_tokens": outputs[order],
        "max_tokens": outputs[order],
        "block_hashes": pl.Series(hashes, dtype=pl.List(pl.UInt64)),
    })
    meta = TraceMeta(t0_unix_us=0, source_format=SOURCE_FORMAT, tokenizer=tokenizer,
                     block_size_tokens=MOONCAKE_BLOCK_TOKENS, hash_algo=HASH_ALGO,
                     redaction_policy="synthetic")
    return Trace(validate(frame, meta, source), meta)
