"""Requests rebuilt from a source that is not a request log, imported through the request log
pipeline: the AIPerf datasets (:mod:`capture.importers.aiperf`), Baseten traces
(:mod:`capture.importers.baseten`) and SageMaker Data Capture (:mod:`capture.importers.sagemaker`).

Owns :func:`import_requests` and :func:`parse_request_line`. Each format's module turns its input
into OpenAI request log lines (``request_id``, ``session_id``, ``timestamp`` in epoch seconds,
``body``, and where known ``response``, ``usage``, ``ttft_ms``, ``latency_ms``) plus the keys that
state what the log pipeline cannot find from the text: ``depends_on`` (a list of request ids: the
edges, replacing the session linker's), ``wait_ms`` and ``parent_session_id`` (with
``depends_on``), and ``outcome`` (one of :data:`replay.trace.OUTCOMES`). The lines are written,
in the order the format yields them, to a hidden file beside the output, imported as
``replay import openai`` imports a log (:mod:`capture.importers.logs`: tokens, block hashes,
sessions, redaction with a key before anything is written) and removed again.

A malformed source record is the format module's to report (``FILE: line N`` / ``row N``, the
field; or skipped and counted with ``skip_bad``); the lines written here are well formed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capture.importers.logs import scan_log, write_log_trace
from capture.importers.openai_log import parse_openai_line
from capture.importers.records import LineError, LogRecord, ms_to_us, opt_str
from replay.errors import TraceError
from replay.trace import BLOCK_SIZE, OUTCOMES

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = ["import_requests", "parse_request_line"]


def parse_request_line(obj: dict) -> LogRecord:
    """An OpenAI request log line (:func:`parse_openai_line`) with the graph and outcome keys of
    the module docstring."""
    record = parse_openai_line(obj)
    outcome = opt_str(obj.get("outcome"), "outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise LineError(f"{outcome!r} is not one of {', '.join(sorted(OUTCOMES))}", "outcome")
    deps = obj.get("depends_on")
    if deps is None:
        return replace(record, outcome=outcome) if outcome is not None else record
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise LineError("is not a list of request ids", "depends_on")
    return replace(
        record,
        outcome=outcome,
        depends_on=tuple(deps),
        wait_us=ms_to_us(obj.get("wait_ms"), "wait_ms"),
        parent_session_id=opt_str(obj.get("parent_session_id"), "parent_session_id"),
    )


def import_requests(
    lines: Iterable[dict],
    out: str | os.PathLike[str],
    *,
    source: str,
    source_format: str,
    report: Callable[[], dict],
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Write ``lines`` (request log lines, see the module docstring; the first ``limit``) beside
    ``out``, import them into the Trace file ``out`` and remove them (none: an error naming
    ``source``, the input). ``report()``, called once every line was
    written, is what the format's own reading adds to the import report (under
    ``source_format``)."""
    out = Path(out)
    log = out.with_name(f".{out.name}.{source_format}.jsonl")
    written = 0
    try:
        with log.open("w") as f:
            for line in lines:
                if limit is not None and written >= limit:
                    break
                f.write(json.dumps(line, separators=(",", ":")) + "\n")
                written += 1
        if not written:
            raise TraceError(f"{source}: no requests imported ({json.dumps(report(), separators=(',', ':'))})")
        index = scan_log(log, parse_request_line, skip_bad=False, limit=limit)
        index.report[source_format] = report()
        return write_log_trace(
            index,
            parse_request_line,
            out,
            source_format=source_format,
            tokenizer=tokenizer,
            block_size=block_size,
            key=key,
            progress=progress,
        )
    finally:
        log.unlink(missing_ok=True)
