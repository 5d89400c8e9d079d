"""What every request-log format turns one line into, and the field readers the formats share.

Owns :class:`Usage`, :class:`LogRecord` (one request as a log recorded it), :class:`LineError`
(what is wrong with a line, and in which field), :class:`BadLines` (malformed lines: raise at
the first, or skip and count them), :class:`NotARequest` (a well-formed line of another kind) and
the field readers (:func:`parse_time_us`, :func:`count`, :func:`answer_text`, ...). The format
modules (``openai_log``, ``litellm``, ``langfuse``) and the token-only importers use them;
:mod:`capture.importers.logs` turns records into a Trace.
"""

from __future__ import annotations

import calendar
import math
import re
from dataclasses import dataclass
from typing import Any

from replay.errors import TraceError

__all__ = [
    "Usage",
    "LogRecord",
    "LineError",
    "BadLines",
    "NotARequest",
    "REPORT_FIRST_SKIPPED",
    "parse_time_us",
    "duration_us",
    "ms_to_us",
    "count",
    "opt_str",
    "http_status",
    "content_text",
    "answer_text",
    "answer_calls",
    "output_text",
    "openai_usage",
    "api_of_body",
]

# skipped lines whose line number and reason the import report keeps
REPORT_FIRST_SKIPPED = 5


@dataclass(frozen=True)
class Usage:
    """Token counts a log recorded for one request (each may be unknown)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True)
class LogRecord:
    """One request of a log, whatever the format (the one common record)."""

    arrival_us: int | None  # absolute, µs since the Unix epoch (None: an OpenAI Batch line, no time)
    api: str  # "chat" or "completions"
    model: str | None
    body: dict  # the request exactly as sent
    request_id: str | None = None  # None: derived from the line number
    session_id: str | None = None  # the log's own session id, where it has one
    # a weaker grouping id (LiteLLM's trace_id, Langfuse's trace id): the session where no
    # session_id says otherwise and at least two records share it
    group_id: str | None = None
    response: str | None = None  # the answer's text, where the log recorded it
    calls: tuple[str, ...] = ()  # the arguments of the answer's tool calls, where the log recorded them
    usage: Usage | None = None
    ttft_us: int | None = None
    e2e_us: int | None = None
    status: int | None = None  # HTTP status
    line: int = 0  # 1-based line number in the file (set by scan_log)
    # the graph where the source states it (AIPerf dag_jsonl): None leaves the session linker's
    # edges (capture.importers.linker); a tuple (even empty) replaces its depends_on, and then
    # wait_us and parent_session_id are these
    depends_on: tuple[str, ...] | None = None
    wait_us: int | None = None
    parent_session_id: str | None = None
    outcome: str | None = None  # how the request ended, one of replay.trace.OUTCOMES, where known


class LineError(Exception):
    """A malformed line: what is wrong, and the field at fault."""

    def __init__(self, what: str, field: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.field = field

    def describe(self) -> str:
        return f"{self.what} (field '{self.field}')" if self.field else self.what


class BadLines:
    """Where malformed lines go: the first one stops the import with ``FILE: line N: <what>
    (field 'x')``, or with ``skip_bad`` each is skipped and counted (the first few kept with
    their line numbers and reasons) for the import report. Every line importer uses this."""

    def __init__(self, source: str, skip_bad: bool, unit: str = "line") -> None:
        self.source = source
        self.skip_bad = skip_bad
        self.unit = unit  # what a numbered record is called in the message ("message" in a protobuf file)
        self.count = 0
        self.first: list[dict] = []

    def bad(self, line: int, error: LineError) -> None:
        """Raise :class:`~replay.errors.TraceError` for ``line``, or (skip_bad) count it."""
        if not self.skip_bad:
            raise TraceError(f"{self.source}: {self.unit} {line}: {error.describe()}") from None
        self.count += 1
        if len(self.first) < REPORT_FIRST_SKIPPED:
            self.first.append({"line": line, "reason": error.describe()})

    def report(self) -> dict:
        return {"skipped_lines": self.count, "first_skipped": list(self.first)}


class NotARequest(Exception):
    """A well-formed line that is not a replayable request; counted under ``kind``."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


# field readers shared by the format modules

_ISO = re.compile(
    r"^\s*(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?\s*"
    r"(Z|z|UTC|[+-]\d{2}(?::?\d{2})?)?\s*$"
)


def parse_time_us(value: Any, field: str) -> int:
    """µs since the Unix epoch of ``value``: epoch seconds (a number) or an ISO 8601 string
    (``2024-05-10T12:00:01.5Z``, ``2024-05-10 12:00:01.500000``; no zone means UTC)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise LineError(f"time {value!r} is not a time", field)
        return round(value * 1_000_000)
    if isinstance(value, str):
        m = _ISO.match(value)
        if m:
            year, month, day, hh, mm, ss, frac, zone = m.groups()
            try:
                secs = calendar.timegm((int(year), int(month), int(day), int(hh or 0), int(mm or 0), int(ss or 0), 0, 0, 0))
                valid = (
                    1 <= int(month) <= 12
                    and 1 <= int(day) <= 31
                    and int(hh or 0) < 24
                    and int(mm or 0) < 60
                    and int(ss or 0) < 61
                )
            except (ValueError, OverflowError):
                valid = False
            if valid:
                us = int((frac or "0")[:6].ljust(6, "0"))
                offset = 0
                if zone and zone[0] in "+-":
                    digits = zone[1:].replace(":", "")
                    offset = int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60
                    offset = -offset if zone[0] == "-" else offset
                return (secs - offset) * 1_000_000 + us
    raise LineError(f"time {value!r} is not epoch seconds or an ISO 8601 time", field)


def duration_us(start_us: int | None, end_us: int | None, field: str) -> int | None:
    """``end - start`` (None when either is unknown); a negative one is a malformed line."""
    if start_us is None or end_us is None:
        return None
    if end_us < start_us:
        raise LineError("is before the request's start time", field)
    return end_us - start_us


def ms_to_us(value: Any, field: str) -> int | None:
    """A duration in milliseconds (a number >= 0, or null) in µs."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LineError(f"{value!r} is not a duration in ms >= 0", field)
    return round(value * 1000)


def count(value: Any, field: str) -> int | None:
    """A token count (an integer >= 0, or null)."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LineError(f"{value!r} is not a count >= 0", field)
    return value


def opt_str(value: Any, field: str) -> str | None:
    """An optional string (an empty string counts as absent, as exports write unset fields)."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise LineError(f"{value!r} is not a string", field)
    return value


def http_status(value: Any, field: str) -> int | None:
    """An HTTP status code (an integer, or a string of digits, 100..599)."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 599:
        raise LineError(f"{value!r} is not an HTTP status", field)
    return value


def content_text(content: Any) -> str | None:
    """The text of a message's ``content``: a string, or the joined ``text`` of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(parts) if parts else None
    return None


def output_text(output: Any) -> str | None:
    """The text of a Responses API object's ``output`` items (each message's ``output_text``)."""
    parts: list[str] = []
    for item in output if isinstance(output, list) else []:
        content = item.get("content") if isinstance(item, dict) and item.get("type") == "message" else None
        parts += [
            part["text"]
            for part in (content if isinstance(content, list) else [])
            if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str)
        ]
    return "".join(parts) if parts else None


def answer_text(response: Any) -> str | None:
    """The answer's text in a logged response: a ``chat.completion`` / ``text_completion``
    object (its first choice's ``message.content`` or ``text``), a message dict, a list of
    them (the first), or a plain string. None where there is no text (e.g. only tool calls)."""
    if isinstance(response, str):
        return response
    if isinstance(response, list):
        return answer_text(response[0]) if response else None
    if not isinstance(response, dict):
        return None
    if response.get("object") == "response":  # the Responses API: its message items' output_text
        return output_text(response.get("output"))
    choices = response.get("choices")
    if isinstance(choices, list):
        if not choices or not isinstance(choices[0], dict):
            return None
        first = choices[0]
        if isinstance(first.get("message"), dict):
            return content_text(first["message"].get("content"))
        if isinstance(first.get("text"), str):
            return first["text"]
        return None
    if "content" in response:
        return content_text(response.get("content"))
    if isinstance(response.get("text"), str):
        return response["text"]
    return None


def answer_calls(response: Any) -> tuple[str, ...]:
    """The arguments (JSON text) of the tool calls in a logged answer: a chat answer's first
    choice's ``message.tool_calls``, a message dict's ``tool_calls``, or a Responses API object's
    ``function_call`` output items; () where there are none."""
    if isinstance(response, list):
        return answer_calls(response[0]) if response else ()
    if not isinstance(response, dict):
        return ()
    if response.get("object") == "response":
        items = response.get("output")
        return tuple(
            i["arguments"]
            for i in (items if isinstance(items, list) else [])
            if isinstance(i, dict) and i.get("type") == "function_call" and isinstance(i.get("arguments"), str)
        )
    choices = response.get("choices")
    message: dict = response
    if isinstance(choices, list):
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        got = first.get("message")
        message = got if isinstance(got, dict) else {}
    calls = message.get("tool_calls")
    out = []
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
            out.append(fn["arguments"])
    return tuple(out)


def openai_usage(usage: Any, field: str) -> Usage | None:
    """An OpenAI ``usage`` object (``prompt_tokens``, ``completion_tokens``,
    ``prompt_tokens_details.cached_tokens``; the Responses API's ``input_tokens``,
    ``output_tokens``, ``input_tokens_details``) as :class:`Usage`."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise LineError("is not an object", field)
    names = ("prompt", "completion") if "input_tokens" not in usage else ("input", "output")
    details = usage.get(f"{names[0]}_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=count(usage.get(f"{names[0]}_tokens"), f"{field}.{names[0]}_tokens"),
        completion_tokens=count(usage.get(f"{names[1]}_tokens"), f"{field}.{names[1]}_tokens"),
        cached_tokens=count(cached, f"{field}.{names[0]}_tokens_details.cached_tokens"),
    )


def api_of_body(body: Any, field: str = "body", api: str | None = None) -> str:
    """``chat`` for a body with ``messages`` (a list), ``completions`` for one with ``prompt``;
    a body with ``input`` is a Responses API or embeddings request, which only ``api`` (from the
    line's ``url``) tells apart. With ``api`` given, the body must have its field."""
    if not isinstance(body, dict):
        raise LineError("is not a JSON object", field)
    if isinstance(body.get("messages"), list):
        found = "chat"
    elif isinstance(body.get("prompt"), (str, list)):
        found = "completions"
    elif isinstance(body.get("input"), (str, list)):
        if api in ("responses", "embeddings"):
            return api
        raise LineError("has 'input': a Responses API or embeddings request; say which with the line's 'url'", field)
    else:
        raise LineError("has none of 'messages' (a list), 'prompt' or 'input'", field)
    if api is not None and api != found:
        raise LineError(f"is a {found} request, not {api}", field)
    return found
