"""Importer of Amazon SageMaker Data Capture files (JSON Lines) into a Trace file.

Owns :func:`import_sagemaker`. Sources: ai-dynamo/aiperf@1acb3691
src/aiperf/dataset/loader/sagemaker_data_capture.py and docs/tutorials/sagemaker-data-capture.md;
the AWS API reference (DataCaptureConfig, CaptureContentTypeHeader). An endpoint writes
``<prefix>/<endpoint>/<variant>/yyyy/mm/dd/hh/<uuid>.jsonl``; the input is one such file or a
folder (every ``*.jsonl`` under it, sorted by path, which is time order). Each line is one
invocation:

- ``captureData.endpointInput`` / ``endpointOutput``: ``observedContentType``, ``mode``,
  ``data`` and ``encoding`` (``JSON``: ``data`` is the JSON text itself; ``BASE64``: it is base64
  of the payload; ``CSV``: not JSON). The request body is the input payload, exactly as sent (an
  OpenAI chat body with ``messages`` or a completions one with ``prompt``); the output payload
  gives the answer's text, tool calls and ``usage`` (prompt, completion and cached tokens).
- ``eventMetadata.eventId`` (the request id) and ``inferenceTime`` (ISO 8601 UTC, whole seconds:
  requests of the same second tie and keep file order).

Each request goes through the log pipeline (:mod:`capture.importers.graph_log`): tokens and block
hashes from the text, sessions and edges by the session linker's rule (a request whose messages
continue an earlier one's, with its recorded answer), redaction with a key before anything is
written. Not mapped: there is no latency (``ttft_us``, ``e2e_us`` stay null); a payload that is
not JSON (CSV, or base64 of something else) or a JSON body that is not an OpenAI chat or
completions request is counted, not imported; a streamed answer is not captured by SageMaker, so
such a request has no usage. Sampling below 100 % has already dropped requests, silently.
A malformed line stops the import with ``FILE: line N: <what> (field 'x')``, or with ``skip_bad``
is skipped and counted.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from capture.importers.agent_logs import session_files
from capture.importers.graph_log import import_requests
from capture.importers.records import BadLines, LineError, api_of_body, opt_str, parse_time_us
from replay.trace import BLOCK_SIZE

__all__ = ["import_sagemaker"]

SOURCE_FORMAT = "sagemaker"


class _NotJson(Exception):
    """A payload that is not a JSON object (counted, not imported)."""


def _payload(capture: Any, field: str) -> Any:
    """The JSON value of a capture entry's ``data`` (None: no entry or no data)."""
    if capture is None:
        return None
    if not isinstance(capture, dict):
        raise LineError("is not an object", field)
    data = capture.get("data")
    if data is None:
        return None
    if not isinstance(data, str):
        raise LineError("is not a string", f"{field}.data")
    encoding = capture.get("encoding", "BASE64")
    if encoding == "BASE64":
        try:
            data = base64.b64decode(data, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise LineError("is not base64 of UTF-8 text", f"{field}.data") from None
    elif encoding != "JSON":
        raise _NotJson(str(encoding))
    try:
        return json.loads(data)
    except ValueError:
        raise _NotJson(str(capture.get("observedContentType") or encoding)) from None


def _line(obj: dict) -> dict:
    """The request log line of one capture record."""
    meta = obj.get("eventMetadata")
    if not isinstance(meta, dict):
        raise LineError("is missing or not an object", "eventMetadata")
    arrival = parse_time_us(meta.get("inferenceTime"), "eventMetadata.inferenceTime")
    data = obj.get("captureData")
    if not isinstance(data, dict):
        raise LineError("is missing or not an object", "captureData")
    if data.get("endpointInput") is None:
        raise LineError("is missing", "captureData.endpointInput")
    body = _payload(data["endpointInput"], "captureData.endpointInput")
    if not isinstance(body, dict):
        raise _NotJson("not a JSON object")
    try:
        api_of_body(body)
    except LineError:
        raise _NotJson("not an OpenAI chat or completions body") from None
    line: dict[str, Any] = {
        "request_id": opt_str(meta.get("eventId"), "eventMetadata.eventId"),
        "timestamp": arrival / 1e6,
        "body": body,
    }
    try:
        answer = _payload(data.get("endpointOutput"), "captureData.endpointOutput")
    except _NotJson:
        answer = None  # an answer that is not JSON (a stream): the request without it
    if isinstance(answer, dict):
        line["response"] = answer
    return line


def import_sagemaker(
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
    """Import a SageMaker Data Capture file, or a folder of them, into the Trace file ``out``
    (module docstring; raw text unless ``key`` is given)."""
    path = Path(path)
    files = session_files(path, "*.jsonl", "SageMaker Data Capture files")
    skipped: Counter = Counter()
    bad_of: list[BadLines] = []

    def lines() -> Iterator[dict]:
        for file in files:
            bad = BadLines(str(file.relative_to(path)) if path.is_dir() else file.name, skip_bad)
            bad_of.append(bad)
            with file.open("rb") as f:
                for number, raw in enumerate(f, start=1):
                    if not raw.strip():
                        continue
                    try:
                        try:
                            obj = json.loads(raw)
                        except ValueError:
                            raise LineError("not valid JSON") from None
                        if not isinstance(obj, dict):
                            raise LineError("not a JSON object")
                        yield _line(obj)
                    except _NotJson as e:
                        skipped[f"not_json: {e}"] += 1
                    except LineError as e:
                        bad.bad(number, e)

    def report() -> dict:
        first = [dict(f, file=b.source) for b in bad_of for f in b.first][:5]
        return {
            "files": len(files),
            "skipped_lines": sum(b.count for b in bad_of),
            "first_skipped": first,
            "not_imported": dict(sorted(skipped.items())),
            "not_mapped": "no latency (ttft_us, e2e_us); inferenceTime has whole seconds, so requests of a second tie",
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
