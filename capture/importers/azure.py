"""Importer of the Azure LLM inference trace CSV (Splitwise, ISCA'24) into a Trace.

Owns :func:`import_azure`. The CSV has ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``, or ISO
with a ``T`` and/or ``+00:00``; formats may mix within a file), ``ContextTokens`` and
``GeneratedTokens``. Each row becomes a chat request with one user message of exactly
``ContextTokens`` tokens of synthesized text (unique per row, deterministic per seed) and
``max_tokens = GeneratedTokens``.
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

__all__ = ["AZURE_COLUMNS", "import_azure"]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
SOURCE_FORMAT = "azure-llm-csv"
_TIMESTAMP = (
    r"^\s*(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d+))?\s*"
    r"(?:(Z)|([+-])(\d{2}):?(\d{2}))?\s*$"
)
_TEXT_DOMAIN = 0xA2E


def _line(row: int) -> int:
    return row + 2  # 1-based, after the header line


def _parse_timestamps(ts: pl.Series, source: str) -> np.ndarray:
    """Microseconds since the Unix epoch (UTC) of each timestamp string."""
    g = ts.str.extract_groups(_TIMESTAMP).struct.unnest()
    naive = (g["1"] + " " + g["2"]).str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S",
                                                  strict=False)
    frac = g["3"].str.slice(0, 6).str.pad_end(6, "0").cast(pl.Int64).fill_null(0)
    sign = pl.Series(np.where((g["5"] == "-").fill_null(False).to_numpy(), -1, 1))
    offset_min = (g["6"].cast(pl.Int64) * 60 + g["7"].cast(pl.Int64)).fill_null(0)
    us = naive.cast(pl.Int64) + frac - sign * offset_min * 60_000_000
    bad = us.is_null()
    if bad.any():
        row = int(bad.arg_true()[0])
        raise TraceError(
            f"{source}: line {_line(row)}: column 'TIMESTAMP' has {ts[row]!r}, "
            "expected a time like '2023-11-16 18:15:46.6805900'"
        )
    return us.to_numpy()


def _parse_counts(df: pl.DataFrame, name: str, source: str) -> np.ndarray:
    raw = df[name]
    values = raw.str.strip_chars().cast(pl.Int64, strict=False)
    bad = values.is_null() | (values < 0).fill_null(True)
    if bad.any():
        row = int(bad.arg_true()[0])
        raise TraceError(
            f"{source}: line {_line(row)}: column '{name}' has {raw[row]!r}, "
            "expected an integer >= 0"
        )
    if int(values.max()) > 2**31 - 1:
        row = int(values.arg_max())
        raise TraceError(f"{source}: line {_line(row)}: column '{name}' value too large")
    return values.to_numpy()


def import_azure(
    path: str | os.PathLike[str],
    tokenizer: str = "gpt2",
    seed: int = 0,
    limit: int | None = None,
    block_size: int = 16,
    model: str | None = None,
) -> Trace:
    """Read an Azure LLM inference trace CSV into a Trace (``limit``: first rows only).

    ``arrival_us`` counts from the earliest timestamp, which is also ``t0_unix_us``; rows are
    put in time order (stably). ``block_hashes`` are over the prompt's real token ids in
    blocks of ``block_size``. ``model``, when given, is put in each body and the model column.
    """
    from replay.prompts import prompt_vocab

    path = Path(path)
    source = path.name
    if not path.is_file():
        raise TraceError(f"{source}: no such file")
    try:
        df = pl.read_csv(path, infer_schema=False, n_rows=limit)
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{source}: not a readable CSV ({str(e).splitlines()[0]})") from e
    for name in AZURE_COLUMNS:
        if name not in df.columns:
            raise TraceError(f"{source}: column '{name}' missing (Azure LLM inference trace CSV)")
    if df.height == 0:
        raise TraceError(f"{source}: trace is empty")
    for name in AZURE_COLUMNS:
        row = df[name].is_null().arg_true()
        if len(row):
            raise TraceError(f"{source}: line {_line(int(row[0]))}: column '{name}' is empty")
    stamps = _parse_timestamps(df["TIMESTAMP"], source)
    context = _parse_counts(df, "ContextTokens", source)
    generated = _parse_counts(df, "GeneratedTokens", source)
    order = np.argsort(stamps, kind="stable")
    stamps, context, generated = stamps[order], context[order], generated[order]

    vocab = prompt_vocab(tokenizer)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), _TEXT_DOMAIN]))
    units = vocab.sample_many(context, rng)  # in time order, so a limit keeps the same texts
    text = vocab.render(units)
    token_ids = vocab.ids(units)
    chars = vocab.char_offsets(units)
    bounds = np.concatenate([[0], np.cumsum(context)]).tolist()
    char_bounds = chars[bounds].tolist()
    bodies, hashes = [], []
    for i, out in enumerate(generated.tolist()):
        content = text[char_bounds[i]:char_bounds[i + 1]]
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": out}
        if model is not None:
            body = {"model": model, **body}
        bodies.append(json.dumps(body, separators=(",", ":"), ensure_ascii=False))
        hashes.append(block_hashes(token_ids[bounds[i]:bounds[i + 1]], block_size))
    n = len(bodies)
    frame = pl.DataFrame({
        "request_id": [f"azure-{int(r):06d}" for r in order],
        "api": ["chat"] * n,
        "model": pl.Series([model] * n, dtype=pl.String),
        "arrival_us": stamps - stamps[0],
        "body": bodies,
        "input_tokens": context,
        "output_tokens": generated,
        "max_tokens": generated,
        "block_hashes": pl.Series(hashes, dtype=pl.List(pl.UInt64)),
    })
    meta = TraceMeta(t0_unix_us=int(stamps[0]), source_format=SOURCE_FORMAT, tokenizer=tokenizer,
                     block_size_tokens=block_size, hash_algo=HASH_ALGO,
                     redaction_policy="synthetic")
    return Trace(validate(frame, meta, source), meta)
