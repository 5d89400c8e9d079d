"""Importer of LiteLLM's StandardLoggingPayload, one JSON object a line, into a Trace file.

Owns :func:`import_litellm` and :func:`parse_litellm_line`. The payload is what LiteLLM hands
every logging callback for each successful and failed call
(https://docs.litellm.ai/docs/proxy/logging_spec). Used here:

- ``id`` (the request id), ``call_type`` (``completion`` / ``acompletion``: chat;
  ``text_completion`` / ``atext_completion``: completions; any other call, e.g. an embedding,
  is not a request to replay and is counted as such; without one, a ``messages`` list means
  chat), ``model``, ``stream``.
- The request body is rebuilt as ``{model, messages, **model_parameters}`` (the sampling
  parameters and ``max_tokens``; an ``extra_body`` in them is merged into the body, as the
  OpenAI client does) plus ``stream`` where the payload has it; a completions call's
  ``messages`` is its prompt (a string or a list of strings; a single message's text).
- ``startTime`` (the arrival), ``completionStartTime`` and ``endTime``: epoch seconds (ISO
  strings are read too); TTFT is ``completionStartTime - startTime`` (LiteLLM sets it to
  ``endTime`` for a call that did not stream), E2E ``endTime - startTime``.
- ``response`` (the model response object or its text: the answer is its first choice's
  content), ``prompt_tokens``, ``completion_tokens``; cached tokens from
  ``metadata.usage_object.prompt_tokens_details.cached_tokens`` or the response's ``usage``.
- ``status``: ``success`` is 200; ``failure`` is ``error_information.error_code`` where that is
  an HTTP status, else 500.
- The session: ``session_id``, else ``metadata.session_id``, else
  ``metadata.requester_metadata.session_id``; else ``trace_id`` as a group id (a session only
  when two calls or more share it: LiteLLM makes a fresh one per call unless the caller sets
  ``litellm_trace_id`` / ``litellm_session_id``).

A ``cache_hit`` call was answered by LiteLLM's own cache, not an engine; it is imported like the
others. The rest (two streaming passes, tokens, hashes, sessions, the report) is
:mod:`capture.importers.logs`.
"""

from __future__ import annotations

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
    content_text,
    count,
    duration_us,
    http_status,
    openai_usage,
    opt_str,
    parse_time_us,
)
from replay.trace import BLOCK_SIZE

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = ["import_litellm", "parse_litellm_line"]

SOURCE_FORMAT = "litellm-jsonl"
CHAT_CALLS = frozenset({"completion", "acompletion"})
TEXT_CALLS = frozenset({"text_completion", "atext_completion"})


def _api(obj: dict) -> str:
    call_type = obj.get("call_type")
    if call_type is None:
        return "chat" if isinstance(obj.get("messages"), list) else "completions"
    if not isinstance(call_type, str):
        raise LineError(f"{call_type!r} is not a string", "call_type")
    if call_type in CHAT_CALLS:
        return "chat"
    if call_type in TEXT_CALLS:
        return "completions"
    raise NotARequest("other_call_types")


def _prompt(messages: Any) -> str | list[str]:
    if isinstance(messages, str):
        return messages
    if isinstance(messages, list) and messages and all(isinstance(m, str) for m in messages):
        return messages
    if isinstance(messages, list) and len(messages) == 1 and isinstance(messages[0], dict):
        prompt = content_text(messages[0].get("content"))
        if prompt is not None:
            return prompt
    raise LineError("is not a text completion's prompt (a string, a list of strings or one message)", "messages")


def _body(obj: dict, api: str, model: str | None) -> dict:
    params = obj.get("model_parameters")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise LineError("is not an object", "model_parameters")
    messages = obj.get("messages")
    body: dict[str, Any] = {} if model is None else {"model": model}
    if api == "chat":
        if not isinstance(messages, list):
            raise LineError("is not a list of messages", "messages")
        body["messages"] = messages
    else:
        body["prompt"] = _prompt(messages)
    extra = params.get("extra_body")
    for name, value in params.items():
        if name != "extra_body" and name not in body:
            body[name] = value
    if isinstance(extra, dict):
        for name, value in extra.items():
            body.setdefault(name, value)
    stream = obj.get("stream")
    if isinstance(stream, bool) and "stream" not in body:
        body["stream"] = stream
    return body


def _session(obj: dict) -> str | None:
    sid = opt_str(obj.get("session_id"), "session_id")
    metadata = obj.get("metadata")
    if sid is None and isinstance(metadata, dict):
        sid = opt_str(metadata.get("session_id"), "metadata.session_id")
        requester = metadata.get("requester_metadata")
        if sid is None and isinstance(requester, dict):
            sid = opt_str(requester.get("session_id"), "metadata.requester_metadata.session_id")
    return sid


def _cached(obj: dict) -> int | None:
    metadata = obj.get("metadata")
    usage_object = metadata.get("usage_object") if isinstance(metadata, dict) else None
    if isinstance(usage_object, dict):
        usage = openai_usage(usage_object, "metadata.usage_object")
        if usage is not None and usage.cached_tokens is not None:
            return usage.cached_tokens
    response = obj.get("response")
    if isinstance(response, dict) and isinstance(response.get("usage"), dict):
        usage = openai_usage(response["usage"], "response.usage")
        return usage.cached_tokens if usage is not None else None
    return None


def _status(obj: dict) -> int | None:
    status = obj.get("status")
    if status is None:
        return None
    if status == "success":
        return 200
    if status != "failure":
        raise LineError(f"{status!r} is not 'success' or 'failure'", "status")
    info = obj.get("error_information")
    code = info.get("error_code") if isinstance(info, dict) else None
    try:
        return http_status(code, "error_information.error_code") or 500
    except LineError:
        return 500  # an error code that is not an HTTP status (e.g. "rate_limit_exceeded")


def parse_litellm_line(obj: dict) -> LogRecord:
    """One StandardLoggingPayload as a record (see the module docstring)."""
    api = _api(obj)
    if obj.get("startTime") is None:
        raise LineError("is missing", "startTime")
    start = parse_time_us(obj["startTime"], "startTime")
    first = (
        parse_time_us(obj["completionStartTime"], "completionStartTime") if obj.get("completionStartTime") is not None else None
    )
    end = parse_time_us(obj["endTime"], "endTime") if obj.get("endTime") is not None else None
    model = opt_str(obj.get("model"), "model")
    response = obj.get("response")
    return LogRecord(
        arrival_us=start,
        api=api,
        model=model,
        body=_body(obj, api, model),
        request_id=opt_str(obj.get("id"), "id"),
        session_id=_session(obj),
        group_id=opt_str(obj.get("trace_id"), "trace_id"),
        response=answer_text(response) if obj.get("status") != "failure" else None,
        calls=answer_calls(response) if obj.get("status") != "failure" else (),
        usage=Usage(
            prompt_tokens=count(obj.get("prompt_tokens"), "prompt_tokens"),
            completion_tokens=count(obj.get("completion_tokens"), "completion_tokens"),
            cached_tokens=_cached(obj),
        ),
        ttft_us=duration_us(start, first, "completionStartTime"),
        e2e_us=duration_us(start, end, "endTime"),
        status=_status(obj),
    )


def import_litellm(
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
    """Import a JSON Lines file of LiteLLM StandardLoggingPayloads into the Trace file ``out``
    (raw text unless ``key`` is given: :func:`capture.importers.logs.write_log_trace`)."""
    index = scan_log(Path(path), parse_litellm_line, skip_bad=skip_bad, limit=limit)
    return write_log_trace(
        index,
        parse_litellm_line,
        out,
        source_format=SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size,
        key=key,
        progress=progress,
    )
