"""Importer of Langfuse generations exported as JSON Lines into a Trace file.

Owns :func:`import_langfuse` and :func:`parse_langfuse_line`. One observation a line, as the
public API returns it (camelCase: ``traceId``, ``startTime``, ``completionStartTime``,
``modelParameters``, ``usageDetails``, ``statusMessage``; ISO 8601 times) or as the blob storage
export writes it (snake_case: ``trace_id``, ``start_time``, ``completion_start_time``,
``provided_model_name``, ``model_parameters`` as a JSON string, ``usage_details``, ``input`` and
``output`` as strings that may hold JSON; times ``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC; empty
strings for unset fields). Both spellings are read
(https://langfuse.com/docs/api-and-data-platform/features/blob-storage-export-fields).

- Only observations of ``type`` GENERATION (LLM calls) are requests; the others (spans,
  events, tools, ...) are counted in the import report as ``non_generation_observations``. A
  line without a type is taken for a generation.
- ``id`` is the request id; the session is ``sessionId`` / ``session_id`` (also under
  ``trace``); else the trace id is a group id (a session when two generations or more share it:
  the LLM calls of one agent run).
- The body is rebuilt from ``input``: a list of messages (or an object holding ``messages`` and
  maybe ``tools``) makes a chat request, a string (or an object holding ``prompt``) a
  completions one; then ``model`` (``provided_model_name``) and the model parameters (numeric
  ones given as strings are read as numbers; infinite ones, as SDKs log an unset
  ``max_tokens``, are left out).
- The answer is ``output``'s text (a message's ``content``, a response object's first choice,
  or a plain string); usage is ``usageDetails`` / ``usage_details`` / ``usage`` (``input``,
  ``output``; cached tokens ``input_cached_tokens`` or ``input_cache_read``).
- TTFT is ``completionStartTime - startTime``, E2E ``endTime - startTime``; the status is 500
  for ``level`` ERROR, else 200.

The rest (two streaming passes, tokens, hashes, sessions, the report) is
:mod:`capture.importers.logs`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capture.importers.logs import scan_log, write_log_trace
from capture.importers.records import (
    LineError,
    LogRecord,
    NotARequest,
    Usage,
    answer_calls,
    answer_text,
    count,
    duration_us,
    opt_str,
    parse_time_us,
)
from replay.trace import BLOCK_SIZE

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = ["import_langfuse", "parse_langfuse_line"]

SOURCE_FORMAT = "langfuse-jsonl"
# model parameters that are numbers (Langfuse may hold them as strings)
_NUMERIC_PARAMS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "seed",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
    }
)


def _get(obj: dict, *names: str) -> tuple[Any, str]:
    """The first of ``names`` that is set (not null, not ""), and its name."""
    for name in names:
        value = obj.get(name)
        if value is not None and value != "":
            return value, name
    return None, names[0]


def _decoded(value: Any) -> Any:
    """A string holding a JSON array or object, decoded; anything else as it is."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return value
        return int(value) if value.is_integer() else value
    return value


def _params(obj: dict) -> dict:
    raw, name = _get(obj, "modelParameters", "model_parameters")
    params = _decoded(raw) if raw is not None else {}
    if not isinstance(params, dict):
        raise LineError("is not an object", name)
    out: dict[str, Any] = {}
    for key, value in params.items():
        if key in _NUMERIC_PARAMS:
            value = _number(value)
            if isinstance(value, float) and not math.isfinite(value):
                continue  # e.g. max_tokens "inf": not set
        out[key] = value
    return out


def _body(obj: dict, model: str | None) -> tuple[str, dict]:
    raw, name = _get(obj, "input")
    if raw is None:
        raise LineError("is missing", "input")
    value = _decoded(raw)
    body: dict[str, Any] = {} if model is None else {"model": model}
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        body["messages"] = value["messages"]
        if isinstance(value.get("tools"), list):
            body["tools"] = value["tools"]
    elif isinstance(value, dict) and isinstance(value.get("prompt"), (str, list)):
        body["prompt"] = value["prompt"]
    elif isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        body["messages"] = value
    elif isinstance(raw, str):
        body["prompt"] = raw  # plain text (or JSON that is not messages: a prompt all the same)
    else:
        raise LineError("is not a list of messages or a prompt", name)
    api = "chat" if "messages" in body else "completions"
    for key, param in _params(obj).items():
        body.setdefault(key, param)
    return api, body


def _answer(obj: dict) -> str | None:
    raw = obj.get("output")
    value = _decoded(raw)
    if (
        isinstance(raw, str)
        and isinstance(value, (dict, list))
        and not (
            isinstance(value, dict)
            and {"content", "choices", "role", "text"} & value.keys()
            or isinstance(value, list)
            and value
            and isinstance(value[0], dict)
        )
    ):
        return raw  # text that happens to be JSON (an answer in JSON), not a message
    return answer_text(value) if raw != "" else None


def _session(obj: dict) -> str | None:
    value, name = _get(obj, "sessionId", "session_id")
    if value is None and isinstance(obj.get("trace"), dict):
        value, name = _get(obj["trace"], "sessionId", "session_id")
        name = f"trace.{name}"
    return opt_str(value, name)


def _usage(obj: dict) -> Usage | None:
    usage, name = _get(obj, "usageDetails", "usage_details", "usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise LineError("is not an object", name)
    prompt, key = _get(usage, "input", "promptTokens")
    completion, ckey = _get(usage, "output", "completionTokens")
    cached, cache_key = _get(usage, "input_cached_tokens", "input_cache_read")
    return Usage(
        prompt_tokens=count(prompt, f"{name}.{key}"),
        completion_tokens=count(completion, f"{name}.{ckey}"),
        cached_tokens=count(cached, f"{name}.{cache_key}"),
    )


def _time(obj: dict, *names: str) -> int | None:
    value, name = _get(obj, *names)
    return None if value is None else parse_time_us(value, name)


def parse_langfuse_line(obj: dict) -> LogRecord:
    """One Langfuse observation as a record (see the module docstring)."""
    kind = obj.get("type")
    if kind is not None and kind != "GENERATION":
        raise NotARequest("non_generation_observations")
    start = _time(obj, "startTime", "start_time")
    if start is None:
        raise LineError("is missing", "startTime")
    first = _time(obj, "completionStartTime", "completion_start_time")
    end = _time(obj, "endTime", "end_time")
    model_value, model_name = _get(obj, "model", "provided_model_name")
    model = opt_str(model_value, model_name)
    api, body = _body(obj, model)
    trace_id, trace_name = _get(obj, "traceId", "trace_id")
    level = obj.get("level")
    return LogRecord(
        arrival_us=start,
        api=api,
        model=model,
        body=body,
        request_id=opt_str(obj.get("id"), "id"),
        session_id=_session(obj),
        group_id=opt_str(trace_id, trace_name),
        response=_answer(obj),
        calls=answer_calls(_decoded(obj.get("output"))),
        usage=_usage(obj),
        ttft_us=duration_us(start, first, "completionStartTime"),
        e2e_us=duration_us(start, end, "endTime"),
        status=500 if level == "ERROR" else 200,
    )


def import_langfuse(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    skip_bad: bool = False,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import a JSON Lines export of Langfuse observations (generations) into the Trace file
    ``out`` (raw text unless ``key`` is given: :func:`capture.importers.logs.write_log_trace`)."""
    index = scan_log(Path(path), parse_langfuse_line, skip_bad=skip_bad, limit=limit)
    index.report.setdefault("non_generation_observations", 0)
    return write_log_trace(
        index,
        parse_langfuse_line,
        out,
        source_format=SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size,
        key=key,
        progress=progress,
    )
