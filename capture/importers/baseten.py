"""Importer of Baseten traces (Parquet, or uncompressed Arrow IPC) into a Trace file.

Owns :func:`import_baseten`. Sources: ai-dynamo/aiperf@264464ae
src/aiperf/dataset/loader/baseten_trace_models.py (``BasetenTrace``), @022dec3d baseten_trace.py,
docs/tutorials/baseten-trace.md. One row per ``/v1/completions`` request:

- required: ``timestamp_start_unix_ms`` (the arrival), ``prompt`` (the literal, fully expanded
  prompt: the body's ``prompt``), ``input_tokens`` (the recorded prompt tokens, summed in the
  report against the trace's own count), ``output_tokens`` (the observed output, which a replay
  sends as ``max_tokens``), ``total_hashes``, ``provided_session_id`` (the session, chosen as
  AIPerf chooses: ``provided_session_id`` if one of its ids repeats, else ``poor_man_session_id``
  if one of its does; a row without the chosen id takes the other, else is a session of its own);
- optional: ``duration_ttft_ms`` -> ``ttft_us``, ``duration_e2e_ms`` -> ``e2e_us``,
  ``cached_tokens_reference`` -> ``cached_tokens``, ``request_canceled`` (0/1) -> ``outcome``
  (``client_disconnected`` / ``completed``), ``model_name`` -> ``model``, ``output_text`` -> the
  recorded ``response``.

Not mapped (said in the import report): ``total_hashes`` and ``block_size`` are the serving
engine's KV-cache block hashes of the prompt (AIPerf forwards them in the request body); the
trace's ``block_hashes`` are computed from the prompt text itself under the trace's tokenizer,
which gives the same prefix sharing without them. ``org_id``,
``features``, ``speculation_ratio``, ``__version__`` and ``total_hashes_len`` are not imported.
The recorded request's own ``max_tokens`` and sampling parameters are not in the trace.

The file is read a record batch at a time (only the columns used) and each row written as a
request log line for the log pipeline (:mod:`capture.importers.graph_log`): tokens and block
hashes from the prompt text, sessions, redaction with a key before anything is written. A bad
row stops the import with ``FILE: row N: <what> (field 'x')`` (rows numbered from 1), or with
``skip_bad`` is skipped and counted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from capture.importers.graph_log import import_requests
from capture.importers.records import BadLines, LineError, count, ms_to_us, opt_str
from replay.errors import TraceError
from replay.trace import BLOCK_SIZE

__all__ = ["import_baseten", "BASETEN_COLUMNS"]

SOURCE_FORMAT = "baseten"
# the columns AIPerf requires to recognize the format
BASETEN_COLUMNS = ("timestamp_start_unix_ms", "prompt", "input_tokens", "output_tokens", "total_hashes", "provided_session_id")
_OPTIONAL = (
    "poor_man_session_id",
    "duration_e2e_ms",
    "duration_ttft_ms",
    "request_canceled",
    "cached_tokens_reference",
    "model_name",
    "output_text",
)
_SESSION_KEYS = ("provided_session_id", "poor_man_session_id")
BATCH_ROWS = 4096


def _session_key(path: Path) -> str:
    """The column that names sessions, as AIPerf chooses it: ``provided_session_id`` where one
    of its ids repeats, else ``poor_man_session_id`` where one of its ids does, else whichever
    has ids (a row without one falls back to the other column, then to a session of its own).
    Read from the two columns alone (a hash of each id kept, not the rows)."""
    seen: dict[str, set[int]] = {k: set() for k in _SESSION_KEYS}
    repeats = {k: False for k in _SESSION_KEYS}
    for batch in _batches(path, _SESSION_KEYS):
        for k in _SESSION_KEYS:
            if k not in batch.schema.names:
                continue
            for v in batch.column(k).to_pylist():
                if v is None:
                    continue
                h = hash(str(v))
                repeats[k] = repeats[k] or h in seen[k]
                seen[k].add(h)
    for k in _SESSION_KEYS:
        if repeats[k]:
            return k
    return "poor_man_session_id" if seen["poor_man_session_id"] and not seen["provided_session_id"] else "provided_session_id"


def _batches(path: Path, wanted: tuple[str, ...] = (*BASETEN_COLUMNS, *_OPTIONAL)) -> Iterator[Any]:
    """The record batches of a Parquet or Arrow IPC (file or stream) ``path``, of the
    ``wanted`` columns only (an IPC file's batches carry every column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with path.open("rb") as f:
        magic = f.read(6)
    try:
        if magic[:4] == b"PAR1":
            pf = pq.ParquetFile(path)
            names = pf.schema_arrow.names
            _check_columns(path, names)
            yield from pf.iter_batches(batch_size=BATCH_ROWS, columns=[c for c in names if c in wanted])
            return
        source = pa.memory_map(str(path))
        reader = pa.ipc.open_file(source) if magic == b"ARROW1" else pa.ipc.open_stream(source)
        _check_columns(path, reader.schema.names)
        if magic == b"ARROW1":
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
        else:
            yield from reader
    except (pa.ArrowInvalid, OSError) as e:
        raise TraceError(f"{path.name}: not a Parquet or Arrow IPC file ({e})") from None


def _check_columns(path: Path, names: list[str]) -> None:
    missing = [c for c in BASETEN_COLUMNS if c not in names]
    if missing:
        raise TraceError(f"{path.name}: no column '{missing[0]}' (a Baseten trace has {', '.join(BASETEN_COLUMNS)})")


def _line(row: dict, number: int, session_key: str) -> dict:
    """The request log line of one row (its session from ``session_key``, else the other)."""
    start = count(row.get("timestamp_start_unix_ms"), "timestamp_start_unix_ms")
    if start is None:
        raise LineError("is missing", "timestamp_start_unix_ms")
    prompt = row.get("prompt")
    if not isinstance(prompt, str):
        raise LineError("is missing or not a string", "prompt")
    prompt_tokens = count(row.get("input_tokens"), "input_tokens")
    completion = count(row.get("output_tokens"), "output_tokens")
    if completion is None:
        raise LineError("is missing", "output_tokens")
    cached = count(row.get("cached_tokens_reference"), "cached_tokens_reference")
    canceled = row.get("request_canceled")
    if canceled not in (None, 0, 1):
        raise LineError(f"{canceled!r} is not 0 or 1", "request_canceled")
    ttft = ms_to_us(row.get("duration_ttft_ms"), "duration_ttft_ms")
    e2e = ms_to_us(row.get("duration_e2e_ms"), "duration_e2e_ms")
    model = opt_str(row.get("model_name"), "model_name")
    body: dict[str, Any] = {"prompt": prompt} if model is None else {"model": model, "prompt": prompt}
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    line: dict[str, Any] = {
        "request_id": f"row-{number}",
        "session_id": next(
            (opt_str(row.get(k), k) for k in sorted(_SESSION_KEYS, key=lambda k: k != session_key) if row.get(k) is not None),
            None,
        ),
        "timestamp": start / 1e3,
        "body": body,
        "usage": usage,
        "ttft_ms": ttft / 1e3 if ttft is not None else None,
        "latency_ms": e2e / 1e3 if e2e is not None else None,
        "outcome": None if canceled is None else "client_disconnected" if canceled else "completed",
    }
    text = row.get("output_text")
    if isinstance(text, str):
        line["response"] = {"object": "text_completion", "choices": [{"index": 0, "text": text}], "usage": usage}
        del line["usage"]
    return line


def import_baseten(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    skip_bad: bool = False,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> Any:
    """Import a Baseten trace (Parquet or Arrow IPC) into the Trace file ``out`` (module
    docstring; raw text unless ``key`` is given)."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path.name}: no such file")
    bad = BadLines(path.name, skip_bad, unit="row")
    totals = {"rows_read": 0, "recorded_prompt_tokens": 0, "canceled": 0}

    session_key = _session_key(path)

    def lines() -> Iterator[dict]:
        number = 0
        for batch in _batches(path):
            for row in batch.to_pylist():
                number += 1
                totals["rows_read"] += 1
                try:
                    line = _line(row, number, session_key)
                except LineError as e:
                    bad.bad(number, e)
                    continue
                totals["recorded_prompt_tokens"] += row.get("input_tokens") or 0
                totals["canceled"] += line["outcome"] == "client_disconnected"
                yield line

    def report() -> dict:
        return {
            **totals,
            "session_column": session_key,
            **bad.report(),
            "not_mapped": "total_hashes and block_size (the engine's KV block hashes: block_hashes come from the "
            "prompt text instead), org_id, features, speculation_ratio; the request's own "
            "max_tokens and sampling parameters were not recorded",
        }

    return import_requests(
        lines(),
        out,
        source=path.name,
        source_format=SOURCE_FORMAT,
        report=report,
        tokenizer=tokenizer,
        block_size=block_size,
        limit=limit,
        key=key,
        progress=progress,
    )
