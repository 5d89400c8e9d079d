"""Importer of the Azure LLM inference trace CSV (Splitwise, ISCA'24; the 2024 week) into a Trace.

Owns :func:`import_azure` and :func:`parse_azure_row`. The CSV has ``TIMESTAMP``, ``ContextTokens``
and ``GeneratedTokens``. Timestamps come in the 2023 form (``2023-11-16 18:15:46.6805900``, seven
fraction digits, no zone) and the 2024 ISO forms (``2024-05-10 00:00:00.009930+00:00``, with or
without a fraction or a ``T``), mixed within a file; no zone means UTC. Each row becomes a chat
request of ``ContextTokens`` prompt tokens (a null body: its text is synthesized per request,
:mod:`replay.synth`) with ``max_tokens = GeneratedTokens``. Written in one streaming pass
(:func:`capture.importers.tokens.write_token_trace`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from capture.importers.records import BadLines, LineError, parse_time_us
from capture.importers.tokens import (
    ImportResult,
    TokenRecord,
    csv_records,
    write_token_trace,
)
from replay.synth import Synthesis
from replay.trace import BLOCK_SIZE

__all__ = ["AZURE_COLUMNS", "import_azure", "parse_azure_row", "csv_count"]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
SOURCE_FORMAT = "azure-llm-csv"
_MAX_COUNT = 2**31 - 1


def csv_count(cells: dict[str, str], name: str) -> int:
    """A token count cell (an integer >= 0; ``12.0`` is read as 12)."""
    text = cells[name].strip()
    try:
        value = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            f = -1.0
        if not f.is_integer():
            raise LineError(f"{text!r} is not an integer >= 0", name) from None
        value = int(f)
    if value < 0:
        raise LineError(f"{text!r} is not an integer >= 0", name)
    if value > _MAX_COUNT:
        raise LineError(f"{text!r} is too large", name)
    return value


def csv_seconds(cells: dict[str, str], name: str) -> float:
    """A time or duration cell in seconds (a finite number >= 0)."""
    text = cells[name].strip()
    try:
        value = float(text)
    except ValueError:
        raise LineError(f"{text!r} is not a number of seconds", name) from None
    if not value >= 0 or value == float("inf"):
        raise LineError(f"{text!r} is not a number of seconds >= 0", name)
    return value


def parse_azure_row(line: int, cells: dict[str, str], row: int, model: str | None) -> TokenRecord:
    stamp = cells["TIMESTAMP"].strip()
    if not stamp:
        raise LineError("is empty", "TIMESTAMP")
    return TokenRecord(
        line=line,
        arrival_us=parse_time_us(stamp, "TIMESTAMP"),
        input_tokens=csv_count(cells, "ContextTokens"),
        output_tokens=csv_count(cells, "GeneratedTokens"),
        request_id=f"azure-{row:06d}",
        api="chat",
        model=model,
    )


def _records(path: Path, bad: BadLines, model: str | None) -> Iterator[TokenRecord]:
    parse = lambda line, cells, row: parse_azure_row(line, cells, row, model)  # noqa: E731
    return (rec for _, rec in csv_records(path, AZURE_COLUMNS, "Azure LLM inference trace CSV", parse, bad))


def import_azure(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    seed: int = 0,
    limit: int | None = None,
    block_size: int = BLOCK_SIZE,
    model: str | None = None,
    skip_bad: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import an Azure LLM inference trace CSV into the Trace file ``out`` (``limit``: the first
    N rows). ``arrival_us`` counts from the earliest timestamp, which is also ``t0_unix_us``;
    ``seed`` seeds the synthesized texts; ``block_hashes`` are over their token ids in blocks of
    ``block_size``; ``model``, when given, is the model column (and so each body's)."""
    path = Path(path)
    bad = BadLines(path.name, skip_bad)
    return write_token_trace(
        _records(path, bad, model),
        out,
        source=path.name,
        source_format=SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size,
        synthesis=Synthesis(seed=seed),
        bad=bad,
        limit=limit,
        progress=progress,
    )
