"""Importer of vidur / splitwise request CSVs into a Trace.

Owns :func:`import_vidur`. Columns: ``arrived_at`` (seconds from the start), ``num_prefill_tokens``
and ``num_decode_tokens`` (vidur's trace files and its splitwise conversions; other columns are
ignored). Each row becomes a chat request of ``num_prefill_tokens`` synthesized prompt tokens (a
null body, :mod:`replay.synth`) with ``max_tokens = num_decode_tokens``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from capture.importers.azure import csv_count, csv_seconds
from capture.importers.records import BadLines
from capture.importers.tokens import ImportResult, TokenRecord, csv_records, write_token_trace
from replay.synth import Synthesis
from replay.trace import BLOCK_SIZE

__all__ = ["VIDUR_COLUMNS", "import_vidur"]

VIDUR_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
SOURCE_FORMAT = "vidur-csv"


def import_vidur(
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
    """Import a vidur / splitwise CSV into the Trace file ``out`` (see the module docstring)."""
    path = Path(path)
    bad = BadLines(path.name, skip_bad)

    def parse(line: int, cells: dict[str, str], row: int) -> TokenRecord:
        return TokenRecord(
            line=line,
            arrival_us=round(csv_seconds(cells, "arrived_at") * 1_000_000),
            input_tokens=csv_count(cells, "num_prefill_tokens"),
            output_tokens=csv_count(cells, "num_decode_tokens"),
            request_id=f"vidur-{row:07d}",
            api="chat",
            model=model,
        )

    def records() -> Iterator[TokenRecord]:
        return (rec for _, rec in csv_records(path, VIDUR_COLUMNS, "vidur / splitwise CSV", parse, bad))

    return write_token_trace(
        records(),
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
