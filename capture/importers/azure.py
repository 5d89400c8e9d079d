"""Importer of the Azure LLM inference trace CSVs into a Trace: 2023 (Splitwise, ISCA'24), the 2024
week (DynamoLLM, HPCA'25) and the 2025 multimodal trace (ModServe, SoCC'25).

Owns :func:`import_azure` and :func:`parse_azure_row`. The CSV has ``TIMESTAMP``, ``ContextTokens``
and ``GeneratedTokens``; the multimodal one also ``NumImages``, and ships gzipped (a ``.gz`` file is
decompressed as it is read). Timestamps come in the 2023 form (``2023-11-16 18:15:46.6805900``,
seven fraction digits, no zone), the 2024 forms (``2024-05-10 00:00:00.009930+00:00`` and
``2024-05-12 00:00:00+00:00``, mixed within a file) and the 2025 form (``2024-10-15T12:00:00.269Z``);
no zone means UTC. Each row becomes a chat request of ``ContextTokens`` prompt tokens (a null
body: its text is synthesized per request, :mod:`replay.synth`) with ``max_tokens =
GeneratedTokens``. Images are not replayed: ``ContextTokens`` counts text and image tokens
alike, so a multimodal row is sent as that many text tokens and no image; the import report says
how many rows had images and how many images there were (:data:`IMAGES_NOT_REPLAYED`). Written in
one streaming pass (:func:`capture.importers.tokens.write_token_trace`).
"""

from __future__ import annotations

import os
from collections import Counter
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

__all__ = ["AZURE_COLUMNS", "IMAGES_NOT_REPLAYED", "import_azure", "parse_azure_row", "csv_count"]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
IMAGES_COLUMN = "NumImages"  # the 2025 multimodal trace's images per request
# what a multimodal import leaves out, said in its import report (and by the CLI)
IMAGES_NOT_REPLAYED = (
    "images not replayed: {rows} rows had {images} images; their tokens are in ContextTokens "
    "(the source counts text and image tokens there), sent as text tokens"
)
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


def _records(path: Path, bad: BadLines, model: str | None, images: Counter) -> Iterator[TokenRecord]:
    """The file's records; a file with ``NumImages`` (multimodal) counts its images into ``images``."""

    def parse(line: int, cells: dict[str, str], row: int) -> TokenRecord:
        if IMAGES_COLUMN in cells:
            csv_count(cells, IMAGES_COLUMN)  # a bad count is a bad line, before the row is numbered
        return parse_azure_row(line, cells, row, model)

    for cells, rec in csv_records(path, AZURE_COLUMNS, "Azure LLM inference trace CSV", parse, bad):
        if IMAGES_COLUMN in cells:
            n = csv_count(cells, IMAGES_COLUMN)
            images["image_rows"] += n > 0
            images["images"] += n
            images["multimodal"] = 1
        yield rec


def _image_report(images: Counter) -> dict:
    """What a multimodal file's import report adds: its image counts and what is not replayed."""
    if not images["multimodal"]:
        return {}
    rows, total = images["image_rows"], images["images"]
    return {"image_rows": rows, "images": total, "not_replayed": IMAGES_NOT_REPLAYED.format(rows=rows, images=total)}


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
    ``block_size``; ``model``, when given, is the model column (and so each body's). A
    multimodal file's report has ``image_rows``, ``images`` and ``not_replayed``."""
    path = Path(path)
    bad = BadLines(path.name, skip_bad)
    images: Counter = Counter()
    return write_token_trace(
        _records(path, bad, model, images),
        out,
        source=path.name,
        source_format=SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size,
        synthesis=Synthesis(seed=seed),
        bad=bad,
        report=lambda: _image_report(images),
        limit=limit,
        progress=progress,
    )
