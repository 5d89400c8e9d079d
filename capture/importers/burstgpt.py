"""Importer of BurstGPT CSV traces (Wang et al., 2024) into a Trace.

Owns :func:`import_burstgpt`. Columns: ``Timestamp`` (seconds from the trace's start), ``Model``
(``ChatGPT``, ``GPT-4``), ``Request tokens``, ``Response tokens`` (0: the request failed),
``Total tokens``, ``Log Type`` (``Conversation log`` / ``API log``), and in some releases
``Session ID`` and ``Elapsed time`` (end-to-end seconds). Each row becomes a chat request of
``Request tokens`` synthesized prompt tokens (a null body, :mod:`replay.synth`):
``output_tokens`` is ``Response tokens``; ``model`` the ``Model`` (or ``--model``); ``session_id``
the ``Session ID`` (its turns in time order); ``e2e_us`` the ``Elapsed time``. A failed request
(0 response tokens) keeps ``output_tokens`` 0 with ``status`` 500 (the trace gives no code) and
``max_tokens`` 1, the least a server accepts; the import report counts them and the log types.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from capture.importers.azure import csv_count, csv_seconds
from capture.importers.records import BadLines
from capture.importers.tokens import ImportResult, TokenRecord, csv_records, write_token_trace
from replay.synth import Synthesis
from replay.trace import BLOCK_SIZE

__all__ = ["BURSTGPT_COLUMNS", "import_burstgpt"]

BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
SOURCE_FORMAT = "burstgpt-csv"


def _record(line: int, cells: dict[str, str], row: int, model: str | None) -> TokenRecord:
    output = csv_count(cells, "Response tokens")
    session = cells.get("Session ID", "").strip() or None
    elapsed = cells.get("Elapsed time", "").strip()
    return TokenRecord(
        line=line,
        arrival_us=round(csv_seconds(cells, "Timestamp") * 1_000_000),
        input_tokens=csv_count(cells, "Request tokens"),
        output_tokens=output,
        max_tokens=None if output > 0 else 1,
        status=200 if output > 0 else 500,
        request_id=f"burstgpt-{row:07d}",
        api="chat",
        model=model if model is not None else (cells.get("Model", "").strip() or None),
        session_id=session,
        e2e_us=round(csv_seconds(cells, "Elapsed time") * 1_000_000) if elapsed else None,
    )


def import_burstgpt(
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
    """Import a BurstGPT CSV into the Trace file ``out`` (see the module docstring)."""
    path = Path(path)
    bad = BadLines(path.name, skip_bad)
    counts: Counter = Counter()

    def records() -> Iterator[TokenRecord]:
        parse = lambda line, cells, row: _record(line, cells, row, model)  # noqa: E731
        for cells, rec in csv_records(path, BURSTGPT_COLUMNS, "BurstGPT CSV", parse, bad):
            counts["failed_requests"] += rec.status == 500
            counts[f"log_type:{cells.get('Log Type', '').strip() or 'none'}"] += 1
            yield rec

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
        report=counts,
    )
