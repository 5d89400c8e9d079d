"""Importer of OpenTelemetry GenAI spans in OTLP/JSON or OTLP protobuf files into a Trace file.

Owns :func:`import_otel` (and :func:`traces_from_protobuf`, :func:`check_span`, which the OTLP
receiver :mod:`capture.otlp` shares). The input is what the OpenTelemetry Collector's file exporter
writes. With ``format: proto``: each ``TracesData`` protobuf message after its length as a 4-byte
big-endian unsigned integer (:func:`framing` tells the two apart by the first byte: below 0x09,
a length prefix), each message decoded by ``opentelemetry-proto`` into the object a JSON line holds
(:func:`traces_from_protobuf`), so everything below is one code path. With ``format: json``
(and what :class:`opentelemetry.proto` encodes as JSON): one ``TracesData`` object a line,
``{"resourceSpans": [{"resource": ..., "scopeSpans": [{"scope": ..., "spans": [...]}]}]}``; a
span has ``traceId``, ``spanId``, ``parentSpanId``, ``name``, ``startTimeUnixNano`` /
``endTimeUnixNano`` (decimal strings or numbers), ``attributes`` (``[{"key", "value":
{"stringValue" | "intValue" | "doubleValue" | "boolValue" | "arrayValue" | "kvlistValue"}}]``),
``events`` and ``status``. A line of another signal (``resourceLogs``, ``resourceMetrics``) is
counted and skipped. Ids are compared as the strings they are (hex, or base64 as protobuf's own
JSON writes them), so either works as long as the file is consistent.

What becomes what (docs/otel.md has the table and its sources):

- A request: a span whose ``gen_ai.operation.name`` is ``chat``, ``text_completion`` or
  ``generate_content`` (else whose name starts with one of those), an OpenInference span of
  ``openinference.span.kind`` ``LLM``, or an OpenLLMetry span with ``llm.request.type``
  ``chat`` / ``completion``. Its arrival is the span's start, ``e2e_us`` its duration, ``ttft_us``
  ``gen_ai.response.time_to_first_chunk`` (s), ``status`` 500 for a span whose status is ERROR
  (else 200), ``request_id`` its span id.
- Tokens: ``gen_ai.usage.input_tokens`` / ``output_tokens`` / ``cache_read.input_tokens``
  (OpenLLMetry's ``gen_ai.usage.prompt_tokens`` / ``completion_tokens`` /
  ``cache_read_input_tokens``, OpenInference's ``llm.token_count.prompt`` / ``completion`` /
  ``prompt_details.cache_read``); ``model`` ``gen_ai.request.model`` (else the response's,
  OpenInference's ``llm.model_name``); ``max_tokens`` ``gen_ai.request.max_tokens`` (OpenInference:
  in ``llm.invocation_parameters``), else the output tokens.
- Content, where the application opted in: ``gen_ai.input.messages`` (a JSON string or a structured
  array; messages of ``parts``) with ``gen_ai.system_instructions`` and ``gen_ai.tool.definitions``,
  and ``gen_ai.output.messages`` for the answer; the span events ``gen_ai.content.prompt`` /
  ``gen_ai.content.completion`` of semconv <= 1.27 (``gen_ai.prompt`` / ``gen_ai.completion``
  JSON); OpenLLMetry's flattened ``gen_ai.prompt.N.role`` / ``.content`` and
  ``gen_ai.completion.N.content``; OpenInference's ``llm.input_messages.N.message.role`` /
  ``.content`` and ``llm.output_messages.N.message.content``. Such a request gets a real chat
  body (OpenAI messages), and its ``input_tokens`` and ``block_hashes`` come from that text under
  the trace's tokenizer, as a request log's do; the text is redacted before anything is written
  unless the import is told not to. A request without content is a token-only row: a null body,
  synthesized at replay (:mod:`replay.synth`) with the span's input tokens, from ``hash_ids``
  (one per :data:`PREFIX_BLOCK_TOKENS` tokens) so that prompts share prefixes as an agent's do.
- Prefix sharing (token-only rows, in arrival order; :class:`_Prefixes`): a request that waits
  for a token-only request of its session (the one that ended last before it started, below)
  continues it: when its prompt is at least as long it starts with all of that prompt's ids (the
  history resent; the ids after them are new), when shorter (the history was cut) with as many
  whole ids as its ``cache_read`` count covers (none without one). A request that waits for none
  shares only what its ``cache_read`` count says, with its session's previous request or, the
  first of its session, with the latest first request of a session of the same agent name and
  model (an agent's system prompt and tools). A subagent's first request so shares nothing with
  its spawner's unless counted (docs/agentic.md: a subagent has its own system prompt and tools,
  and its first message is the task). Equal ids give equal text, so the replay's prompts share
  exactly these prefixes; block hashes of a shared prefix are the earlier row's, only the rest is
  synthesized and hashed.
- Content in log records (semconv 1.28-1.36; :class:`_Logs`): the events
  ``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice`` as OTLP log records
  (``resourceLogs[].scopeLogs[].logRecords[]``, the name in ``eventName`` or an ``event.name``
  attribute, joined to their span by ``spanId``), from ``logs`` or the spans' own file, give a
  span without content of its own its messages (one OpenAI message an event) and answer (the
  choice of index 0), when any of them carries text.
- Sessions: the nearest ``invoke_agent`` ancestor (OpenInference ``AGENT``) of a request is its
  agent: its session is the agent span's ``gen_ai.conversation.id`` (unless the spawning agent's
  session has that id), else the agent span's id; ``agent`` is its ``gen_ai.agent.name``. An agent
  under another agent is a subagent: ``parent_session_id`` is the spawner's session. A request
  with no agent above it is in its own ``gen_ai.conversation.id`` if it has one, else in its
  trace's session (a trace is one workflow; with no parent span, each call is its own trace).
- What waits for what, inside a session (rows in arrival order): ``turn`` counts the session's
  earlier requests and ``parent_request_id`` is the latest of them; a request depends on the
  request of its session that ended last before it started (requests that overlap are siblings,
  not a chain). An ``execute_tool`` span (OpenInference ``TOOL``) of a session was asked for by
  the session's request that ended last before the tool started; the first request of the
  session that starts after the tool ended depends on that one too. A subagent's first request
  depends on the spawner's request that ended last before it (the spawn), and the spawner's first
  request after the subagent span ended depends on the subagent's request that ended last (the
  join). ``wait_us`` is the arrival less the latest end of the dependencies.

Streaming, in bounded memory: spans are grouped by trace id as the lines are read. A trace is
finished when its root span (no ``parentSpanId``) has been read and :data:`LINGER_LINES` more
lines have been read (spans another process exported a little later), or at the end of the file;
when the spans of unfinished traces exceed :data:`MAX_PENDING_SPANS`, the trace whose last span
was read longest ago is finished early (counted: ``traces_finished_early``). A span of a trace
already finished starts a new piece of it (counted: ``late_spans``); its ancestors in the earlier
piece are not known to it. A finished trace is reduced to a few numbers and short strings a
request (its times, tokens, session, extra dependencies and, where it has content, where its line
starts); its spans are dropped. After the file is read the requests are put in arrival order and
the rows are written a chunk (:data:`CHUNK_ROWS` rows or :data:`CHUNK_HELD` block hashes) at a
time; a request with content is read again from its line (each line parsed once, its needed spans
kept until their rows are written).

A malformed line (not JSON, not a ``TracesData`` object) or span (no ids, a bad time, a request
without an input token count and without content, of its own or in log records, a count that is
not a count) stops the import
with ``FILE: line N: span S: <what> (field 'x')``; ``skip_bad`` skips and counts it instead.
``import_report`` says what was read, imported, skipped and not mapped (spans by operation).
"""

from __future__ import annotations

import base64
import json
import os
from array import array
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import polars as pl

from capture.importers.logs import ROW_TYPES, TokenCache, TraceOutput, check_block_size
from capture.importers.records import BadLines, LineError
from capture.importers.tokens import PrefixChain
from replay.blocks import HASH_ALGO, block_hashes
from replay.bodies import body_json, text_slots
from replay.errors import ConfigError, TraceError
from replay.synth import Synthesis, Synthesizer
from replay.trace import BLOCK_SIZE, TraceMeta, read_meta

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = [
    "import_otel",
    "framing",
    "traces_from_protobuf",
    "check_span",
    "span_content",
    "RawCounts",
    "RAW_COUNTS",
    "LINGER_LINES",
    "MAX_PENDING_SPANS",
    "CHUNK_ROWS",
    "SOURCE_FORMAT",
    "SOURCE_FORMAT_PROTOBUF",
]

SOURCE_FORMAT = "otlp-json"
SOURCE_FORMAT_PROTOBUF = "otlp-protobuf"
# a trace whose root span was read is finished this many lines later
LINGER_LINES = 16
# spans of unfinished traces held at most; past it the stalest trace is finished early
MAX_PENDING_SPANS = 200_000
# a chunk of rows (one Parquet row group, what memory holds of the rows) ends at this many rows
# or this many block hashes (a body's or answer's 8 characters count as one), whichever first:
# an agent's contexts of 100k tokens make thousands of hashes a row
CHUNK_ROWS = 8192
CHUNK_HELD = 1 << 20
# a session's latest requests kept to find the one that ended last before a new one
RECENT_PER_SESSION = 32
# the tokens one hash id of a token-only row stands for (its ``Synthesis.block_tokens``). A step
# shares its predecessor's prompt to the token whatever this is; it is the grain at which a cache
# count is honoured, and a row holds ceil(input_tokens / this) ids
PREFIX_BLOCK_TOKENS = 256
# the hash ids of recent token-only rows kept for the rows that extend them (bytes; least
# recently used out: a row whose predecessor's ids were forgotten starts afresh, counted), and
# their block hashes (a row whose predecessor's hashes were forgotten hashes its whole prompt)
PREFIX_IDS_BYTES = 16 << 20
PREFIX_HASHES_BYTES = 32 << 20

_INFERENCE_OPS = {"chat": "chat", "text_completion": "completions", "generate_content": "chat"}
_NS_PER_US = 1000


# ---------------------------------------------------------------------------------------------
# OTLP/JSON values


def _any(value: Any) -> Any:
    """An OTLP ``AnyValue`` as Python (``intValue`` may be a string: int64 in JSON)."""
    if not isinstance(value, dict) or not value:
        return None
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        v = value["intValue"]
        try:
            return int(v)
        except (TypeError, ValueError):
            return v
    if "doubleValue" in value:
        return value["doubleValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "arrayValue" in value:
        items = value["arrayValue"].get("values") if isinstance(value["arrayValue"], dict) else None
        return [_any(v) for v in items or []]
    if "kvlistValue" in value:
        items = value["kvlistValue"].get("values") if isinstance(value["kvlistValue"], dict) else None
        return {kv.get("key"): _any(kv.get("value")) for kv in items or [] if isinstance(kv, dict)}
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _attributes(items: Any, where: str) -> dict[str, Any]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise LineError("is not a list", where)
    out = {}
    for kv in items:
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[kv["key"]] = _any(kv.get("value"))
    return out


def _time_ns(value: Any, name: str) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise LineError(f"{value!r} is not unix nanoseconds", name)


def _count(attrs: dict, names: tuple[str, ...]) -> int | None:
    """The first of ``names`` present, as a token count."""
    for name in names:
        value = attrs.get(name)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise LineError(f"{value!r} is not a count >= 0", name)
        return value
    return None


def _str(attrs: dict, names: tuple[str, ...]) -> str | None:
    for name in names:
        value = attrs.get(name)
        if isinstance(value, str) and value:
            return value
    return None


# the attribute names read, each fact's names in order of preference: GenAI semantic conventions,
# then OpenLLMetry's (and the deprecated semconv names), then OpenInference's
INPUT_TOKENS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
OUTPUT_TOKENS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")
CACHED_TOKENS = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "llm.token_count.prompt_details.cache_read",
)
MODEL = ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name")
CONVERSATION = ("gen_ai.conversation.id", "session.id")
AGENT_NAME = ("gen_ai.agent.name", "agent.name")


# ---------------------------------------------------------------------------------------------
# spans as the first pass keeps them


@dataclass(slots=True)
class _Req:
    api: str
    model: str | None
    max_tokens: int | None
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    ttft_us: int | None
    status: int
    content: tuple[int, int] | None  # (byte offset of the line, the span's ordinal in it)
    conversation: str | None


@dataclass(slots=True)
class _Span:
    span_id: str
    parent: str | None
    kind: str  # "llm", "agent", "tool" or "other"
    start: int  # ns
    end: int
    line: int
    conversation: str | None = None
    agent_name: str | None = None
    req: _Req | None = None


@dataclass
class _Pending:
    spans: dict[str, _Span] = field(default_factory=dict)
    root_line: int | None = None
    last_line: int = 0


def _kind(attrs: dict, name: str) -> tuple[str, str | None]:
    """What a span is ("llm" with its api, "agent", "tool", "other") and its operation name."""
    op = attrs.get("gen_ai.operation.name")
    if not isinstance(op, str) or not op:
        op = name.split(" ", 1)[0] if isinstance(name, str) else None
    if op in _INFERENCE_OPS:
        return "llm", op
    if op == "invoke_agent":
        return "agent", op
    if op == "execute_tool":
        return "tool", op
    oi = attrs.get("openinference.span.kind")
    if isinstance(oi, str):
        oi = oi.upper()
        if oi == "LLM":
            return "llm", "chat"
        if oi == "AGENT":
            return "agent", "invoke_agent"
        if oi == "TOOL":
            return "tool", "execute_tool"
    request_type = attrs.get("llm.request.type")  # OpenLLMetry
    if request_type in ("chat", "completion"):
        return "llm", "chat" if request_type == "chat" else "text_completion"
    op = attrs.get("gen_ai.operation.name")
    return "other", op if isinstance(op, str) and op else None


def _has_content(attrs: dict, events: Any) -> bool:
    if "gen_ai.input.messages" in attrs or "gen_ai.prompt.0.content" in attrs or "llm.input_messages.0.message.content" in attrs:
        return True
    return any(isinstance(e, dict) and e.get("name") == "gen_ai.content.prompt" for e in events or [])


def _invocation_max_tokens(attrs: dict) -> int | None:
    params = attrs.get("llm.invocation_parameters")  # OpenInference: a JSON object as a string
    if not isinstance(params, str):
        return None
    try:
        obj = json.loads(params)
    except ValueError:
        return None
    if isinstance(obj, dict):
        for name in ("max_completion_tokens", "max_tokens"):
            v = obj.get(name)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                return v
    return None


def _span(
    raw: Any, line: int, offset: int, ordinal: int, styles: Counter, need_tokens: bool = True
) -> tuple[str, _Span, str | None]:
    """``(trace id, span, operation name)`` of one OTLP span object. ``need_tokens=False``: a
    request span without a token count or content is kept (its content may come in log
    records; :func:`import_otel` checks it once they are read)."""
    if not isinstance(raw, dict):
        raise LineError("a span is not a JSON object", "spans")
    trace_id, span_id = raw.get("traceId"), raw.get("spanId")
    if not isinstance(span_id, str) or not span_id:
        raise LineError("a span has no id", "spanId")
    try:
        if not isinstance(trace_id, str) or not trace_id:
            raise LineError("is missing", "traceId")
        parent = raw.get("parentSpanId") or None
        if parent is not None and not isinstance(parent, str):
            raise LineError(f"{parent!r} is not a span id", "parentSpanId")
        start = _time_ns(raw.get("startTimeUnixNano"), "startTimeUnixNano")
        end = _time_ns(raw.get("endTimeUnixNano"), "endTimeUnixNano")
        if end < start:
            raise LineError("is before the span's start", "endTimeUnixNano")
        attrs = _attributes(raw.get("attributes"), "attributes")
        kind, op = _kind(attrs, raw.get("name") or "")
        span = _Span(span_id, parent, kind, start, end, line)
        if kind == "agent":
            span.conversation = _str(attrs, CONVERSATION)
            span.agent_name = _str(attrs, AGENT_NAME)
        elif kind == "llm":
            span.req = _request(raw, attrs, op, offset, ordinal, styles, need_tokens)
        return trace_id, span, op
    except LineError as e:
        raise LineError(f"span {span_id}: {e.what}", e.field) from None


_NO_TOKENS = "a request span without an input token count or message content"


def _request(raw: dict, attrs: dict, op: str | None, offset: int, ordinal: int, styles: Counter, need_tokens: bool) -> _Req:
    content = _has_content(attrs, raw.get("events"))
    input_tokens = _count(attrs, INPUT_TOKENS)
    output_tokens = _count(attrs, OUTPUT_TOKENS)
    if input_tokens is None and not content and need_tokens:
        raise LineError(_NO_TOKENS, INPUT_TOKENS[0])
    for style, names in (("semconv", INPUT_TOKENS[:1]), ("openllmetry", INPUT_TOKENS[1:2]), ("openinference", INPUT_TOKENS[2:])):
        if any(n in attrs for n in names):
            styles[style] += 1
    max_tokens = _count(attrs, ("gen_ai.request.max_tokens",))
    if max_tokens is None:
        max_tokens = _invocation_max_tokens(attrs)
    ttft = attrs.get("gen_ai.response.time_to_first_chunk")
    ttft_us = round(ttft * 1e6) if isinstance(ttft, (int, float)) and not isinstance(ttft, bool) and ttft >= 0 else None
    status = raw.get("status")
    error = isinstance(status, dict) and status.get("code") in (2, "STATUS_CODE_ERROR")
    return _Req(
        api=_INFERENCE_OPS.get(op or "chat", "chat"),
        model=_str(attrs, MODEL),
        max_tokens=max_tokens,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=_count(attrs, CACHED_TOKENS),
        ttft_us=ttft_us,
        status=500 if error else 200,
        content=(offset, ordinal) if content else None,
        conversation=_str(attrs, CONVERSATION),
    )


def _line_spans(obj: Any) -> Iterator[Any] | None:
    """The span objects of one ``TracesData`` line, in order (None: a line of another signal)."""
    if not isinstance(obj, dict):
        raise LineError("not a JSON object")
    resource_spans = obj.get("resourceSpans")
    if resource_spans is None:
        if any(k in obj for k in ("resourceLogs", "resourceMetrics", "resourceProfiles")):
            return None
        raise LineError("is missing (not an OTLP/JSON traces line)", "resourceSpans")
    if not isinstance(resource_spans, list):
        raise LineError("is not a list", "resourceSpans")

    def spans() -> Iterator[Any]:
        for rs in resource_spans:
            for ss in (rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []) if isinstance(rs, dict) else []:
                yield from (ss.get("spans") or []) if isinstance(ss, dict) else []

    return spans()


# ---------------------------------------------------------------------------------------------
# the file's records: OTLP/JSON lines or length-prefixed OTLP protobuf messages

JSON, PROTOBUF = "json", "protobuf"
# a protobuf file's first byte is the high byte of a big-endian length: below 0x09 for a first
# message under 144 MiB, a byte no text file (JSON lines) starts with
_PROTOBUF_FIRST_BYTE_BELOW = 0x09
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def framing(path: Path) -> str:
    """:data:`PROTOBUF` when the file's first byte is below 0x09 (a length prefix), else
    :data:`JSON` (an empty file too)."""
    with path.open("rb") as f:
        first = f.read(1)
    return PROTOBUF if first and first[0] < _PROTOBUF_FIRST_BYTE_BELOW else JSON


def traces_from_protobuf(data: bytes) -> dict:
    """An OTLP protobuf ``TracesData`` (or ``ExportTraceServiceRequest``: the same message on
    the wire) as the OTLP/JSON object a file line holds: protobuf's JSON mapping
    (lowerCamelCase names, 64-bit integers as decimal strings, enums as numbers) with the span
    ids in hex, as the OTLP/JSON encoding writes them."""
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    try:
        message = TracesData.FromString(data)
    except DecodeError:
        raise LineError("is not an OTLP protobuf TracesData message") from None
    obj = MessageToDict(message, use_integers_for_enums=True)
    for rs in obj.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                for name in _ID_FIELDS:
                    if span.get(name):
                        span[name] = base64.b64decode(span[name]).hex()
    obj.setdefault("resourceSpans", [])
    return obj


def _records(f: BinaryIO, kind: str) -> Iterator[tuple[int, int, bytes | LineError]]:
    """``(number, byte offset, payload)`` of each record of an open file: its non-blank lines
    (numbered as lines, blank ones counted) or its protobuf messages (numbered from 1), a
    message cut short (the file ends inside it) as a :class:`LineError` and the last record."""
    if kind == JSON:
        offset = 0
        for number, raw in enumerate(f, start=1):
            start, offset = offset, offset + len(raw)
            if raw.strip():
                yield number, start, raw
        return
    size = os.fstat(f.fileno()).st_size
    offset, number = 0, 0
    while offset < size:
        number += 1
        head = f.read(4)
        if len(head) < 4:
            yield number, offset, LineError(f"cut short: {len(head)} bytes of a 4-byte length prefix at byte {offset}")
            return
        length = int.from_bytes(head, "big")
        if offset + 4 + length > size:
            yield (
                number,
                offset,
                LineError(f"cut short: its length prefix says {length} bytes, {size - offset - 4} follow (byte {offset})"),
            )
            return
        yield number, offset, f.read(length)
        offset += 4 + length


def _decode(payload: bytes, kind: str) -> Any:
    """A record's object (:func:`_line_spans` reads it)."""
    if kind == PROTOBUF:
        return traces_from_protobuf(payload)
    try:
        return json.loads(payload)
    except ValueError:
        raise LineError("not valid JSON") from None


def _read_at(f: BinaryIO, offset: int, kind: str) -> Any:
    """The object of the record at ``offset`` (read again for its content)."""
    f.seek(offset)
    if kind == JSON:
        return json.loads(f.readline())
    return traces_from_protobuf(f.read(int.from_bytes(f.read(4), "big")))


def span_content(raw: Any) -> tuple[dict, str | None, list[str]] | None:
    """The request body, answer text and call arguments of a request span that carries content
    in its attributes or events (None for any other span): what the import makes of it."""
    _, span, _ = _span(raw, 0, 0, 0, Counter(), need_tokens=False)
    req = span.req
    if req is None or req.content is None:
        return None
    return _content(raw, req.api, req.model, req.max_tokens)


def check_span(raw: Any) -> None:
    """Raise :class:`LineError` (``span S: <what>``, with the field) for a span object the import
    would reject: the receiver (:mod:`capture.otlp`) answers with it."""
    _span(raw, 0, 0, 0, Counter())


# ---------------------------------------------------------------------------------------------
# the first pass: spans grouped by trace, each trace reduced to its requests when finished


class _Requests:
    """The requests of finished traces, a few values each, in the order traces finished."""

    NAMES = (
        "request_id",
        "session_id",
        "parent_session_id",
        "agent",
        "start",
        "end",
        "line",
        "api",
        "model",
        "max_tokens",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "ttft_us",
        "status",
        "content",
        "extra_deps",
        "extra_end",
    )

    def __init__(self) -> None:
        self.cols: dict[str, list] = {n: [] for n in self.NAMES}
        self.start = array("q")
        self.end = array("q")
        self.models: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.start)

    def add(self, **values: Any) -> None:
        model = values["model"]
        if model is not None:
            values["model"] = self.models.setdefault(model, model)
        self.start.append(values["start"])
        self.end.append(values["end"])
        for name in self.NAMES:
            if name not in ("start", "end"):
                self.cols[name].append(values[name])


class _Reader:
    """The first pass: the lines of ``path`` read, their spans grouped by trace, each trace
    reduced to its requests (:class:`_Requests`) when finished (the module docstring's rule)."""

    def __init__(self, path: Path, skip_bad: bool, limit: int | None) -> None:
        self.path = path
        self.kind = framing(path) if path.is_file() else JSON
        self.bad = BadLines(path.name, skip_bad, "line" if self.kind == JSON else "message")
        self.limit = limit
        self.requests = _Requests()
        self.pending: dict[str, _Pending] = {}
        self.pending_spans = 0
        self.finished: dict[str, None] = {}  # finished trace ids, the latest :data:`_FINISHED_KEPT`
        self.report: Counter = Counter()
        self.ops: Counter = Counter()  # spans not mapped, by operation name
        self.styles: Counter = Counter()
        self.session_parent: dict[str, str] = {}
        self.has_logs = False  # a JSON line of log records was read (content may be in them)

    def read(self) -> None:
        source = self.path.name
        if not self.path.is_file():
            raise TraceError(f"{source}: no such file")
        try:
            f = self.path.open("rb")
        except OSError as e:
            raise TraceError(f"{source}: cannot read ({e.strerror or e})") from e
        with f:
            for number, start, raw in _records(f, self.kind):
                if self.limit is not None and len(self.requests) >= self.limit:
                    break
                self.report["lines_read"] += 1
                try:
                    if isinstance(raw, LineError):
                        raise raw
                    spans = _line_spans(_decode(raw, self.kind))
                except LineError as e:
                    self.bad.bad(number, e)
                    continue
                if spans is None:
                    self.report["other_signal_lines"] += 1
                    self.has_logs = self.has_logs or (self.kind == JSON and b'"resourceLogs"' in raw)
                    continue
                self._line(spans, number, start)
                self._finish_ready(number)
        for trace_id in list(self.pending):
            self._finish(trace_id)

    def _line(self, spans: Iterator[Any], number: int, offset: int) -> None:
        for ordinal, raw in enumerate(spans):
            self.report["spans_read"] += 1
            try:
                trace_id, span, op = _span(raw, number, offset, ordinal, self.styles, need_tokens=False)
            except LineError as e:
                self.bad.bad(number, e)
                continue
            if trace_id in self.finished and trace_id not in self.pending:
                self.report["late_spans"] += 1
            pending = self.pending.get(trace_id)
            if pending is None:
                pending = self.pending[trace_id] = _Pending()
            if span.span_id in pending.spans:
                self.report["duplicate_spans"] += 1
                continue
            pending.spans[span.span_id] = span
            pending.last_line = number
            self.pending_spans += 1
            if span.parent is None:
                pending.root_line = number
            if span.kind == "other":
                self.ops[op or "(no gen_ai.operation.name)"] += 1
            elif span.kind == "tool":
                self.report["tool_spans"] += 1
            elif span.kind == "agent":
                self.report["agent_spans"] += 1

    def _finish_ready(self, number: int) -> None:
        done = [t for t, p in self.pending.items() if p.root_line is not None and number - p.root_line >= LINGER_LINES]
        for trace_id in done:
            self._finish(trace_id)
        while self.pending_spans > MAX_PENDING_SPANS and self.pending:
            stalest = min(self.pending, key=lambda t: self.pending[t].last_line)
            self.report["traces_finished_early"] += 1
            self._finish(stalest)

    def _finish(self, trace_id: str) -> None:
        pending = self.pending.pop(trace_id)
        self.pending_spans -= len(pending.spans)
        self.report["traces"] += 1
        self.finished[trace_id] = None
        if len(self.finished) > _FINISHED_KEPT:
            del self.finished[next(iter(self.finished))]
        self._requests_of(trace_id, pending.spans)

    def _requests_of(self, trace_id: str, spans: dict[str, _Span]) -> None:
        """The requests of one finished trace, with their sessions and the dependencies that
        tool and agent spans give (the module docstring)."""
        agent_of: dict[str, _Span | None] = {}

        def nearest_agent(span: _Span) -> _Span | None:
            """The nearest agent span above ``span`` (not itself)."""
            chain = []
            at = span.parent
            found = None
            while at is not None:
                if at in agent_of:
                    found = agent_of[at]
                    break
                parent = spans.get(at)
                if parent is None:
                    break
                if parent.kind == "agent":
                    found = parent
                    break
                chain.append(at)
                at = parent.parent
            for sid in chain:
                agent_of[sid] = found
            return found

        session_of_agent: dict[str, str] = {}

        def agent_session(agent: _Span) -> str:
            got = session_of_agent.get(agent.span_id)
            if got is not None:
                return got
            above = nearest_agent(agent)
            parent_session = agent_session(above) if above is not None else None
            sid = agent.conversation if agent.conversation and agent.conversation != parent_session else agent.span_id
            session_of_agent[agent.span_id] = sid
            if parent_session is not None:
                self.session_parent.setdefault(sid, parent_session)
            return sid

        # requests and tools by session
        by_session: dict[str, list[_Span]] = defaultdict(list)
        tools: dict[str, list[_Span]] = defaultdict(list)
        agents_in: dict[str, list[_Span]] = defaultdict(list)  # spawner session -> subagent spans
        for span in spans.values():
            if span.kind not in ("llm", "tool", "agent"):
                continue
            agent = nearest_agent(span)
            if span.kind == "agent":
                if agent is not None:
                    agents_in[agent_session(agent)].append(span)
                agent_session(span)
                continue
            if agent is not None:
                sid = agent_session(agent)
            elif span.req is not None and span.req.conversation:
                sid = span.req.conversation
            else:
                sid = trace_id
            (by_session[sid] if span.kind == "llm" else tools[sid]).append(span)
        extra: dict[str, list[_Span]] = defaultdict(list)  # request -> the requests it also waits for

        def ended_last_before(requests: list[_Span], t: int, ends: list[int]) -> _Span | None:
            i = int(np.searchsorted(ends, t, side="right"))
            return requests[i - 1] if i else None

        def first_after(requests: list[_Span], t: int) -> _Span | None:
            return next((r for r in requests if r.start >= t), None)

        by_end = {}
        for sid, requests in by_session.items():
            requests.sort(key=lambda s: (s.start, s.end))
            ordered = sorted(requests, key=lambda s: s.end)
            by_end[sid] = (ordered, [s.end for s in ordered])
        for sid, session_tools in tools.items():
            if sid not in by_session:
                self.report["tool_spans_without_request"] += len(session_tools)
                continue
            requests = by_session[sid]
            ordered, ends = by_end[sid]
            for tool in session_tools:
                asker = ended_last_before(ordered, tool.start, ends)
                follower = first_after(requests, tool.end)
                if asker is None or follower is None:
                    self.report["tool_spans_not_linked"] += 1
                    continue
                self.report["tool_spans_linked"] += 1
                if asker not in extra[follower.span_id]:
                    extra[follower.span_id].append(asker)
        for spawner, subagents in agents_in.items():
            parent_requests = by_session.get(spawner, [])
            for agent in subagents:
                child = session_of_agent[agent.span_id]
                child_requests = by_session.get(child)
                if not child_requests:
                    continue
                if parent_requests:
                    ordered, ends = by_end[spawner]
                    first = child_requests[0]
                    spawn = ended_last_before(ordered, first.start, ends)
                    if spawn is not None:
                        extra[first.span_id].append(spawn)
                        self.report["spawns_linked"] += 1
                    c_ordered, c_ends = by_end[child]
                    last = c_ordered[-1]
                    joiner = first_after(parent_requests, max(agent.end, last.end))
                    if joiner is not None:
                        extra[joiner.span_id].append(last)
                        self.report["joins_linked"] += 1
        for sid, requests in by_session.items():
            agent_name = None
            for span in requests:
                agent = nearest_agent(span)
                agent_name = agent.agent_name if agent is not None else None
                req = span.req
                assert req is not None
                deps = [d for d in extra.get(span.span_id, ()) if d.end <= span.start]
                self.requests.add(
                    request_id=span.span_id,
                    session_id=sid,
                    parent_session_id=self.session_parent.get(sid),
                    agent=agent_name,
                    start=span.start,
                    end=span.end,
                    line=span.line,
                    api=req.api,
                    model=req.model,
                    max_tokens=req.max_tokens,
                    input_tokens=req.input_tokens,
                    output_tokens=req.output_tokens,
                    cached_tokens=req.cached_tokens,
                    ttft_us=req.ttft_us,
                    status=req.status,
                    content=req.content,
                    extra_deps=tuple(d.span_id for d in deps) or None,
                    extra_end=max((d.end for d in deps), default=None),
                )


# finished trace ids remembered (to count spans that come after their trace was finished)
_FINISHED_KEPT = 65_536


# ---------------------------------------------------------------------------------------------
# content: the spans of requests with content, read again


class _Content:
    """The content spans read again for the rows being built, in the order the rows need them:
    a line is parsed once, and those of its spans that rows still need are kept until each is
    taken (``wanted``: line offset -> the ordinals of the spans needed from it)."""

    def __init__(self, path: Path, kind: str, wanted: dict[int, set[int]]) -> None:
        self.f = path.open("rb")
        self.kind = kind
        self.wanted = wanted
        self.kept: dict[int, dict[int, dict]] = {}

    def close(self) -> None:
        self.f.close()

    def take(self, offset: int, ordinal: int) -> dict:
        line = self.kept.get(offset)
        if line is None:
            spans = _line_spans(_read_at(self.f, offset, self.kind))
            assert spans is not None
            wanted = self.wanted[offset]
            line = self.kept[offset] = {i: s for i, s in enumerate(spans) if i in wanted}
        span = line.pop(ordinal)
        if not line:
            del self.kept[offset]
        return span


def _openai_messages(messages: Any, where: str) -> list[dict]:
    """Messages in the semantic conventions' form (``role`` and ``parts``) as OpenAI chat
    messages; messages already in OpenAI's form (``content``) are kept."""
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except ValueError:
            raise LineError("is not JSON", where) from None
    if not isinstance(messages, list):
        raise LineError("is not a list of messages", where)
    out: list[dict] = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise LineError("holds a message without a role", where)
        parts = m.get("parts")
        if not isinstance(parts, list):
            out.append(m)
            continue
        role = m["role"]
        texts: list[str] = []
        calls: list[dict] = []
        for p in parts:
            if not isinstance(p, dict):
                continue
            kind = p.get("type")
            if kind == "text" and isinstance(p.get("content"), str):
                texts.append(p["content"])
            elif kind == "tool_call":
                args = p.get("arguments")
                calls.append(
                    {
                        "id": p.get("id") or f"call_{len(calls)}",
                        "type": "function",
                        "function": {
                            "name": p.get("name") or "",
                            "arguments": args if isinstance(args, str) else json.dumps(args, separators=(",", ":")),
                        },
                    }
                )
            elif kind == "tool_call_response":
                result = p.get("response", p.get("result"))
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": p.get("id") or "",
                        "content": result if isinstance(result, str) else json.dumps(result, separators=(",", ":")),
                    }
                )
        if role == "tool" or (
            not texts and not calls and any(isinstance(p, dict) and p.get("type") == "tool_call_response" for p in parts)
        ):
            continue  # its tool messages were added above
        msg: dict[str, Any] = {"role": role, "content": "".join(texts) if texts or not calls else None}
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def _flattened(attrs: dict, prefix: str, role_key: str, content_key: str) -> list[dict] | None:
    """Messages written as flattened attributes (``prefix.N.role`` / ``prefix.N.content``)."""
    out = []
    i = 0
    while f"{prefix}.{i}.{content_key}" in attrs or f"{prefix}.{i}.{role_key}" in attrs:
        content = attrs.get(f"{prefix}.{i}.{content_key}")
        out.append(
            {"role": attrs.get(f"{prefix}.{i}.{role_key}") or "user", "content": content if isinstance(content, str) else ""}
        )
        i += 1
    return out or None


def _event_attr(events: Any, name: str, key: str) -> Any:
    for e in events or []:
        if isinstance(e, dict) and e.get("name") == name:
            return _attributes(e.get("attributes"), f"events.{name}").get(key)
    return None


def _system_text(value: Any) -> str | None:
    """``gen_ai.system_instructions``: a list of parts (or its JSON), or a string."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p["content"] for p in value if isinstance(p, dict) and isinstance(p.get("content"), str)) or None
    return None


def _content(raw: dict, req_api: str, model: str | None, max_tokens: int | None) -> tuple[dict, str | None, list[str]]:
    """The request body, the answer's text and its tool calls' arguments of a span with content."""
    attrs = _attributes(raw.get("attributes"), "attributes")
    events = raw.get("events")
    messages: list[dict] | None = None
    answer: list[dict] | None = None
    if "gen_ai.input.messages" in attrs:
        messages = _openai_messages(attrs["gen_ai.input.messages"], "gen_ai.input.messages")
        system = _system_text(attrs.get("gen_ai.system_instructions"))
        if system and not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": system})
        if "gen_ai.output.messages" in attrs:
            answer = _openai_messages(attrs["gen_ai.output.messages"], "gen_ai.output.messages")
    elif "gen_ai.prompt.0.content" in attrs or "gen_ai.prompt.0.role" in attrs:
        messages = _flattened(attrs, "gen_ai.prompt", "role", "content")
        answer = _flattened(attrs, "gen_ai.completion", "role", "content")
    elif "llm.input_messages.0.message.content" in attrs:
        messages = _flattened(attrs, "llm.input_messages", "message.role", "message.content")
        answer = _flattened(attrs, "llm.output_messages", "message.role", "message.content")
    else:
        prompt = _event_attr(events, "gen_ai.content.prompt", "gen_ai.prompt")
        messages = _openai_messages(prompt, "gen_ai.prompt")
        completion = _event_attr(events, "gen_ai.content.completion", "gen_ai.completion")
        if completion is not None:
            answer = _openai_messages(completion, "gen_ai.completion")
    assert messages is not None
    return _assembled(messages, answer, attrs.get("gen_ai.tool.definitions"), req_api, model, max_tokens)


def _assembled(
    messages: list[dict], answer: list[dict] | None, tools: Any, req_api: str, model: str | None, max_tokens: int | None
) -> tuple[dict, str | None, list[str]]:
    """The request body (OpenAI chat or completions), the answer's text and its tool calls'
    arguments, of a request's messages and answer messages (OpenAI form)."""
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if req_api == "completions":
        body["prompt"] = "".join(str(m.get("content") or "") for m in messages)
    else:
        body["messages"] = messages
        if isinstance(tools, str):
            try:
                tools = json.loads(tools)
            except ValueError:
                tools = None
        if isinstance(tools, list) and tools:
            body["tools"] = tools
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    answer_text: str | None = None
    calls: list[str] = []
    for m in answer or []:
        if m.get("role") != "assistant":
            continue
        if isinstance(m.get("content"), str):
            answer_text = (answer_text or "") + m["content"]
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                calls.append(fn["arguments"])
    return body, answer_text, calls


# the attribute in which the receiver (:mod:`capture.otlp`) records, for a span whose text it
# redacted live, the counts of the raw text: the import takes them instead of the redacted
# text's (as a request log's rows keep the raw text's tokens and hashes when redacted)
RAW_COUNTS = "replay.raw_text_counts"


@dataclass(frozen=True)
class RawCounts:
    """The counts of a span's raw text (:data:`RAW_COUNTS`, a JSON object)."""

    block_size: int
    input_tokens: int
    block_hashes: list[int]
    output_tokens: int | None  # of the recorded answer
    tool_calls: list[int] | None  # argument tokens of each call of the answer (None: no answer)

    def to_json(self) -> str:
        return json.dumps(
            {
                "block_size": self.block_size,
                "input_tokens": self.input_tokens,
                "block_hashes": self.block_hashes,
                "output_tokens": self.output_tokens,
                "tool_calls": self.tool_calls,
            },
            separators=(",", ":"),
        )

    @classmethod
    def of(cls, raw: dict) -> RawCounts | None:
        """The counts a span records, None where it records none; a malformed record is a
        :class:`LineError`."""
        value = next(
            (kv.get("value") for kv in raw.get("attributes") or [] if isinstance(kv, dict) and kv.get("key") == RAW_COUNTS),
            None,
        )
        if value is None:
            return None
        try:
            obj = json.loads(_any(value))
            counts = cls(
                int(obj["block_size"]),
                int(obj["input_tokens"]),
                [int(h) for h in obj["block_hashes"]],
                None if obj["output_tokens"] is None else int(obj["output_tokens"]),
                None if obj["tool_calls"] is None else [int(n) for n in obj["tool_calls"]],
            )
        except (TypeError, ValueError, KeyError):
            raise LineError("is not the receiver's record of counts", RAW_COUNTS) from None
        return counts


# ---------------------------------------------------------------------------------------------
# content carried as log records: the per-message events of semconv 1.28-1.36


# the events read (open-telemetry/semantic-conventions@3c0b5cca
# model/gen-ai/deprecated/events-deprecated.yaml): one a message, the answer one a choice
_MESSAGE_EVENTS = {f"gen_ai.{role}.message": role for role in ("system", "user", "assistant", "tool")}
_CHOICE_EVENT = "gen_ai.choice"
_CHAT_ROLES = frozenset(("system", "developer", "user", "assistant", "tool"))


def _line_logs(obj: Any) -> Iterator[Any] | None:
    """The log record objects of one ``LogsData`` line, in order (None: not a logs line)."""
    if not isinstance(obj, dict):
        raise LineError("not a JSON object")
    resource_logs = obj.get("resourceLogs")
    if resource_logs is None:
        return None
    if not isinstance(resource_logs, list):
        raise LineError("is not a list", "resourceLogs")

    def records() -> Iterator[Any]:
        for rl in resource_logs:
            for sl in (rl.get("scopeLogs") or []) if isinstance(rl, dict) else []:
                yield from (sl.get("logRecords") or []) if isinstance(sl, dict) else []

    return records()


def logs_from_protobuf(data: bytes) -> dict:
    """An OTLP protobuf ``LogsData`` (or ``ExportLogsServiceRequest``) as the OTLP/JSON object a
    file line holds, ids in hex (as :func:`traces_from_protobuf`)."""
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.logs.v1.logs_pb2 import LogsData

    try:
        message = LogsData.FromString(data)
    except DecodeError:
        raise LineError("is not an OTLP protobuf LogsData message") from None
    obj = MessageToDict(message, use_integers_for_enums=True)
    for rl in obj.get("resourceLogs", ()):
        for sl in rl.get("scopeLogs", ()):
            for record in sl.get("logRecords", ()):
                for name in ("traceId", "spanId"):
                    if record.get(name):
                        record[name] = base64.b64decode(record[name]).hex()
    obj.setdefault("resourceLogs", [])
    return obj


def _decode_logs(payload: bytes, kind: str) -> Any:
    if kind == PROTOBUF:
        return logs_from_protobuf(payload)
    try:
        return json.loads(payload)
    except ValueError:
        raise LineError("not valid JSON") from None


def _event(record: Any) -> tuple[str, dict] | None:
    """``(event name, body)`` of a GenAI message or choice event record (else None): the name
    is the record's ``eventName`` (OTLP 1.5+) or its ``event.name`` attribute (before)."""
    if not isinstance(record, dict):
        return None
    name = record.get("eventName")
    if not name:
        for kv in record.get("attributes") or []:
            if isinstance(kv, dict) and kv.get("key") == "event.name":
                name = _any(kv.get("value"))
                break
    if name not in _MESSAGE_EVENTS and name != _CHOICE_EVENT:
        return None
    body = _any(record.get("body"))
    return name, body if isinstance(body, dict) else {}


def _has_text(name: str, body: dict) -> bool:
    """Whether an event carries content (the application opted in), not only roles and ids."""
    message = body.get("message") if name == _CHOICE_EVENT else body
    if not isinstance(message, dict):
        return False
    calls = message.get("tool_calls") or body.get("tool_calls") or []
    return bool(message.get("content")) or any(
        isinstance(c, dict) and isinstance(c.get("function"), dict) and "arguments" in c["function"] for c in calls
    )


def _event_content(value: Any) -> Any:
    """A message's content as an OpenAI message holds it: text, or a list of parts."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        return value
    return json.dumps(value, separators=(",", ":"))


def _event_calls(calls: Any) -> list[dict]:
    out = []
    for k, call in enumerate(calls if isinstance(calls, list) else []):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            continue
        args = fn.get("arguments")
        out.append(
            {
                "id": call.get("id") or f"call_{k}",
                "type": "function",
                "function": {
                    "name": fn.get("name") or "",
                    "arguments": args if isinstance(args, str) else json.dumps(args if args is not None else {}),
                },
            }
        )
    return out


def _log_content(
    records: list[dict], req_api: str, model: str | None, max_tokens: int | None
) -> tuple[dict, str | None, list[str]]:
    """The request body, answer text and call arguments of a request's event records (in the
    order they were emitted): each message event one OpenAI message, the choice of index 0 the
    answer."""
    messages: list[dict] = []
    answer: list[dict] | None = None
    for record in records:
        got = _event(record)
        if got is None:
            continue
        name, body = got
        if name == _CHOICE_EVENT:
            if answer is not None or body.get("index", 0) not in (0, "0"):
                continue
            message = body["message"] if isinstance(body.get("message"), dict) else {}
            msg: dict[str, Any] = {"role": "assistant", "content": _event_content(message.get("content"))}
            calls = _event_calls(message.get("tool_calls") or body.get("tool_calls"))
            if calls:
                msg["tool_calls"] = calls
            answer = [msg]
            continue
        role = body.get("role") if body.get("role") in _CHAT_ROLES else _MESSAGE_EVENTS[name]
        content = _event_content(body.get("content"))
        if role == "assistant":
            msg = {"role": role, "content": content}
            calls = _event_calls(body.get("tool_calls"))
            if calls:
                msg["tool_calls"] = calls
        elif role == "tool":
            msg = {"role": role, "tool_call_id": str(body.get("id") or ""), "content": content or ""}
        else:
            msg = {"role": role, "content": content or ""}
        messages.append(msg)
    return _assembled(messages, answer, None, req_api, model, max_tokens)


class _Logs:
    """The join of log records to request spans (by span id: a span id is a request id, unique
    in the Trace), in bounded memory. :meth:`index` reads the log file once and keeps, for each
    request of ``wanted`` (span id -> request index: the requests without content of their
    own) that has GenAI events, only the byte offsets of the lines holding them and whether any
    carries text; :meth:`take` reads those lines again as rows need them, each line parsed once
    and its needed records kept until taken (as :class:`_Content` does for spans)."""

    def __init__(self, path: Path, skip_bad: bool, same_file: bool) -> None:
        self.path = path
        self.kind = framing(path) if path.is_file() else JSON
        self.same_file = same_file  # the spans' own file: its bad lines were counted already
        self.bad = BadLines(path.name, skip_bad, "line" if self.kind == JSON else "message")
        self.lines: dict[int, list[int]] = {}  # request index -> offsets of its records' lines
        self.with_text: set[int] = set()
        self.report: Counter = Counter()
        self.f: BinaryIO | None = None
        self.wanted: dict[int, set[str]] = defaultdict(set)  # line offset -> span ids taken from it
        self.kept: dict[int, dict[str, list[dict]]] = {}

    def index(self, wanted: dict[str, int]) -> None:
        source = self.path.name
        if not self.path.is_file():
            raise TraceError(f"{source}: no such file")
        with self.path.open("rb") as f:
            for number, offset, raw in _records(f, self.kind):
                try:
                    if isinstance(raw, LineError):
                        raise raw
                    records = _line_logs(_decode_logs(raw, self.kind))
                except LineError as e:
                    if not self.same_file:
                        self.bad.bad(number, e)
                    continue
                if records is None:
                    continue
                self.report["log_lines"] += 1
                for record in records:
                    self.report["log_records"] += 1
                    event = _event(record)
                    if event is None:
                        continue
                    i = wanted.get(record.get("spanId"))
                    if i is None:
                        self.report["log_events_not_joined"] += 1
                        continue
                    self.report["log_events_joined"] += 1
                    where = self.lines.setdefault(i, [])
                    if not where or where[-1] != offset:
                        where.append(offset)
                    if i not in self.with_text and _has_text(*event):
                        self.with_text.add(i)
        for i in list(self.lines):
            if i not in self.with_text:
                del self.lines[i]

    def open(self, rids: dict[int, str]) -> None:
        """Ready :meth:`take` for the requests ``rids`` (index -> span id) that rows will need."""
        self.wanted = defaultdict(set)
        self.kept = {}
        for i, rid in rids.items():
            for offset in self.lines[i]:
                self.wanted[offset].add(rid)
        self.f = self.path.open("rb")

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None

    def take(self, i: int, rid: str) -> list[dict]:
        """The event records of request ``i`` (span id ``rid``), in file order."""
        assert self.f is not None
        out: list[dict] = []
        for offset in self.lines[i]:
            line = self.kept.get(offset)
            if line is None:
                self.f.seek(offset)
                payload = self.f.readline() if self.kind == JSON else self.f.read(int.from_bytes(self.f.read(4), "big"))
                records = _line_logs(_decode_logs(payload, self.kind))
                assert records is not None
                want = self.wanted[offset]
                line = self.kept[offset] = defaultdict(list)
                for record in records:
                    if isinstance(record, dict) and record.get("spanId") in want:
                        line[record["spanId"]].append(record)
            out.extend(line.pop(rid, ()))
            self.wanted[offset].discard(rid)
            if not self.wanted[offset]:
                del self.kept[offset], self.wanted[offset]
        return out


# ---------------------------------------------------------------------------------------------
# the second pass: rows in arrival order


class _Links:
    """Sessions in arrival order: turn, the previous request, and the request of the session
    that ended last before a new one started (:data:`RECENT_PER_SESSION` kept a session)."""

    def __init__(self) -> None:
        self.turns: Counter = Counter()
        self.last: dict[str, str] = {}
        self.recent: dict[str, deque] = {}

    def add(
        self, rid: str, sid: str, start: int, end: int, token_only: bool
    ) -> tuple[int, str | None, tuple[str, int, bool] | None]:
        """``(turn, the previous request, (request, end, token-only) that ended last before)``."""
        turn = self.turns[sid]
        self.turns[sid] += 1
        parent = self.last.get(sid)
        self.last[sid] = rid
        recent = self.recent.setdefault(sid, deque(maxlen=RECENT_PER_SESSION))
        best = None
        for other in recent:
            if other[1] <= start and (best is None or other[1] >= best[1]):
                best = other
        recent.append((rid, end, token_only))
        return turn, parent, best


@dataclass(slots=True)
class _Prompt:
    tokens: int
    ids: np.ndarray  # uint64 hash ids, one per PREFIX_BLOCK_TOKENS tokens


class _Prefixes:
    """The hash ids and block hashes of token-only rows, taken in arrival order, so that
    prompts share prefixes as an agent's do (the module docstring, "Prefix sharing"). New ids
    are numbered from 0 in the order rows need them, kept and given by the one rule of
    :class:`capture.importers.tokens.PrefixChain`; equal ids give equal text
    (:class:`replay.synth.Synthesizer`)."""

    def __init__(self, synth: Synthesizer, block_size: int) -> None:
        self.synth = synth
        self.bt = synth.synthesis.block_tokens
        self.block_size = block_size
        self.chain = PrefixChain(self.bt, first_id=0)
        self.kept: _Recent = _Recent(PREFIX_IDS_BYTES)  # rid -> _Prompt
        self.hashes: _Recent = _Recent(PREFIX_HASHES_BYTES)  # rid -> its block hashes
        self.first_of: dict[tuple[str | None, str | None], str] = {}  # (agent, model) -> its latest session start
        self.counts: Counter = Counter()

    def row(
        self,
        rid: str,
        tokens: int,
        cached: int | None,
        *,
        waits_for: str | None,
        previous: str | None,
        agent: str | None,
        model: str | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(hash ids, block hashes)`` (uint64) of token-only row ``rid`` of ``tokens`` input tokens
        (``cached`` of them read from the cache live), which waits for ``waits_for`` (the
        token-only request of its session that ended last before it started; None: none, or
        one with content) and follows ``previous`` in its session (None: it starts its
        session, of ``agent`` and ``model``)."""
        share, source, source_rid = 0, None, None
        if waits_for is not None:
            source_rid = waits_for
            source = self.kept.get(waits_for)
            if source is None:
                self.counts["prefix_sources_forgotten"] += 1
            else:
                share = source.tokens if tokens >= source.tokens else min(cached or 0, tokens)
        elif cached:
            # not a continuation: only what the cache read says is shared, with the session's
            # previous request or, at a session's start, the previous start of the same agent
            key = (agent, model)
            source_rid = previous if previous is not None else self.first_of.get(key)
            source = self.kept.get(source_rid)
            if source is not None:
                share = min(cached, tokens, source.tokens)
        if previous is None:
            self.first_of[(agent, model)] = rid
        k = self.chain.kept(len(source.ids), source.tokens, share, tokens) if source is not None and share else 0
        common = min(k * self.bt, tokens, source.tokens) if source is not None else 0
        if k:
            self.counts["prefix_rows"] += 1
            self.counts["prefix_tokens"] += common
        fresh = self.chain.fresh(-(-tokens // self.bt) - k)
        new = np.arange(fresh.start, fresh.stop, dtype=np.uint64)
        ids = np.concatenate((source.ids[:k], new)) if source is not None and k else new
        id_list = ids.tolist()
        known = ids[:0]
        if common >= self.block_size:
            assert source is not None
            source_hashes = self.hashes.get(source_rid)
            if source_hashes is None:
                self.counts["prefix_hashes_recomputed"] += 1
            else:
                known = source_hashes[: common // self.block_size]
        hashes = self.synth.block_hashes_after(known, tokens, id_list, self.block_size)
        self.kept.put(rid, _Prompt(tokens, ids), ids.nbytes)
        self.hashes.put(rid, hashes, hashes.nbytes)
        return ids, hashes


# the import report's counts of the log records read
_LOG_COUNTS = ("log_lines", "log_records", "log_events_joined", "log_events_not_joined")
# the import report's counts of prefix sharing
_PREFIX_COUNTS = ("prefix_rows", "prefix_tokens", "prefix_sources_forgotten", "prefix_hashes_recomputed")


class _Recent:
    """Values by request id within ``max_bytes`` (their sizes as given, plus what an entry
    costs besides: its key, the entry, an array's header), least recently used first out."""

    ENTRY_BYTES = 300

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.items: OrderedDict[str, tuple[Any, int]] = OrderedDict()

    def get(self, rid: str | None) -> Any:
        got = self.items.get(rid) if rid is not None else None
        if got is None:
            return None
        self.items.move_to_end(rid)  # type: ignore[arg-type]
        return got[0]

    def put(self, rid: str, value: Any, size: int) -> None:
        self.items[rid] = (value, size + self.ENTRY_BYTES)
        self.bytes += size + self.ENTRY_BYTES
        while self.bytes > self.max_bytes and self.items:
            self.bytes -= self.items.popitem(last=False)[1][1]


def import_otel(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    skip_bad: bool = False,
    seed: int = 0,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
    logs: str | os.PathLike[str] | None = None,
) -> ImportResult:
    """Import an OTLP/JSON file of GenAI spans (see the module docstring) into the Trace file
    ``out``; ``logs``: a file of the log records carrying their content (OTLP/JSON or protobuf
    ``LogsData``; without it, the spans' file's own log lines are read). ``key``: a
    :class:`redact.key.RedactionKey` (the text of spans with content is redacted before it is
    written), a callable returning one (called only when a span has content, before anything
    is written), or None (raw text, ``redaction_policy=none``).
    ``seed`` seeds the synthesized text of requests without content; ``limit``: the first N
    requests read."""
    from capture.importers.tokens import ImportResult

    check_block_size(block_size)
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: must be >= 1, got {limit}")
    path, out = Path(path), Path(out)
    source = path.name
    reader = _Reader(path, skip_bad, limit)
    reader.read()
    source_format = SOURCE_FORMAT if reader.kind == JSON else SOURCE_FORMAT_PROTOBUF
    reqs = reader.requests
    cols = reqs.cols
    # content carried as log records: joined to the requests without content of their own
    logs_path = Path(logs) if logs is not None else path if reader.has_logs else None
    log_join = _Logs(logs_path, skip_bad, same_file=logs_path == path) if logs_path is not None else None
    if log_join is not None:
        log_join.index({rid: i for i, rid in enumerate(cols["request_id"]) if cols["content"][i] is None})
    log_text = log_join.lines if log_join is not None else {}
    # a request with neither a token count nor content (of its span or its log records)
    valid = np.ones(len(reqs), bool)
    for i, n_in in enumerate(cols["input_tokens"]):
        if n_in is None and cols["content"][i] is None and i not in log_text:
            reader.bad.bad(cols["line"][i], LineError(f"span {cols['request_id'][i]}: {_NO_TOKENS}", INPUT_TOKENS[0]))
            valid[i] = False
    # arrival order (equal starts: the shorter first); with a limit, the first N of it
    order = np.lexsort((np.frombuffer(reqs.end, np.int64), np.frombuffer(reqs.start, np.int64)))
    order = order[valid[order]][:limit]
    n = len(order)
    report: dict[str, Any] = {
        "format": source_format,
        "lines_read": reader.report["lines_read"],
        "spans_read": reader.report["spans_read"],
        "records_imported": n,
        **reader.bad.report(),
    }
    if n == 0:
        raise TraceError(
            f"{source}: no requests imported ({report['lines_read']} lines, {report['spans_read']} spans read, "
            f"{reader.bad.count} skipped as malformed; no chat or text_completion span)"
        )
    wanted: dict[int, set[int]] = defaultdict(set)
    log_rows: dict[int, str] = {}
    for i in order.tolist():
        if cols["content"][i] is not None:
            wanted[cols["content"][i][0]].add(cols["content"][i][1])
        elif i in log_text:
            log_rows[i] = cols["request_id"][i]
    content_rows = sum(len(v) for v in wanted.values()) + len(log_rows)
    report["records_imported"] = n
    if callable(key):
        key = key() if content_rows else None
    t0_us = reqs.start[int(order[0])] // _NS_PER_US
    synthesis = Synthesis(seed=seed, block_tokens=PREFIX_BLOCK_TOKENS) if content_rows < n else None
    meta = TraceMeta(
        t0_unix_us=t0_us,
        source_format=source_format,
        tokenizer=tokenizer,
        block_size_tokens=block_size,
        hash_algo=HASH_ALGO,
        redaction_policy="none" if content_rows else "synthetic",
        synthesis=synthesis.to_json() if synthesis is not None else "",
    )
    from replay.tokenizer import load_tokenizer

    tokens = TokenCache(load_tokenizer(tokenizer)) if content_rows else None
    prefixes = _Prefixes(Synthesizer(tokenizer, synthesis), block_size) if synthesis is not None else None
    links = _Links()
    counts: Counter = Counter()

    def content_of(content: _Content, i: int) -> tuple[dict, str | None, list[str], RawCounts | None]:
        """The body, answer and call arguments of request ``i``, and the counts of its raw text
        where the receiver recorded them (its text was redacted live)."""
        try:
            if cols["content"][i] is None:
                assert log_join is not None
                records = log_join.take(i, cols["request_id"][i])
                return (*_log_content(records, cols["api"][i], cols["model"][i], cols["max_tokens"][i]), None)
            offset, ordinal = cols["content"][i]
            raw = content.take(offset, ordinal)
            return (*_content(raw, cols["api"][i], cols["model"][i], cols["max_tokens"][i]), RawCounts.of(raw))
        except LineError as e:
            raise TraceError(
                f"{source}: {reader.bad.unit} {cols['line'][i]}: span {cols['request_id'][i]}: {e.describe()}"
            ) from None

    with TraceOutput(out, meta, key) as output:
        if output.redactor is not None:
            # every text analysed before any row is written (a value found later is replaced in
            # earlier rows too), as the request-log importers do
            content = _Content(path, reader.kind, wanted)
            if log_join is not None:
                log_join.open(log_rows)
            try:
                texts: list[str] = []
                for i in order.tolist():
                    if cols["content"][i] is None and i not in log_rows:
                        continue
                    body, text, _, _ = content_of(content, i)
                    texts.extend(s.text for s in text_slots(body))
                    if text:
                        texts.append(text)
                    if len(texts) >= CHUNK_ROWS:
                        output.redactor.learn(texts, [])
                        texts = []
                output.redactor.learn(texts, [])
            finally:
                content.close()
                if log_join is not None:
                    log_join.close()
        content = _Content(path, reader.kind, wanted)
        if log_join is not None:
            log_join.open(log_rows)
        try:
            rows: dict[str, list] = defaultdict(list)
            held = 0  # block hashes and body characters in ``rows``
            done = 0

            def flush() -> None:
                nonlocal rows, held, done
                output.write(
                    pl.DataFrame(
                        {
                            name: _u64_lists(rows[name]) if name in _U64_LISTS else pl.Series(rows[name], dtype=dtype)
                            for name, dtype in _ROW_TYPES.items()
                        }
                    )
                )
                done += len(rows["request_id"])
                rows, held = defaultdict(list), 0
                if progress is not None:
                    progress(done)

            for start_at in range(0, n, CHUNK_ROWS):
                for i in order[start_at : start_at + CHUNK_ROWS].tolist():
                    rid, sid = cols["request_id"][i], cols["session_id"][i]
                    start, end = reqs.start[i], reqs.end[i]
                    token_only = cols["content"][i] is None and i not in log_rows
                    turn, parent, chain = links.add(rid, sid, start, end, token_only)
                    deps = [chain[0]] if chain is not None else []
                    latest = chain[1] if chain is not None else None
                    for d in cols["extra_deps"][i] or ():
                        if d not in deps:
                            deps.append(d)
                    extra_end = cols["extra_end"][i]
                    if extra_end is not None:
                        latest = extra_end if latest is None else max(latest, extra_end)
                    counts["dependencies"] += len(deps)
                    out_tokens = cols["output_tokens"][i]
                    limit_tokens = cols["max_tokens"][i]
                    body_text: str | None = None
                    response: str | None = None
                    calls: list[int] | None = None
                    hash_ids: np.ndarray | None = None
                    if not token_only:
                        assert tokens is not None
                        body, response, arguments, recorded = content_of(content, i)
                        if recorded is not None and recorded.block_size == block_size:
                            # redacted live: the tokens and hashes of the raw text, as recorded
                            n_in, hashes = recorded.input_tokens, np.asarray(recorded.block_hashes, dtype=np.uint64)
                            out_tokens = out_tokens if out_tokens is not None else recorded.output_tokens
                            calls = recorded.tool_calls
                        else:
                            ids = tokens.prompt_ids([s.text for s in text_slots(body)])
                            if out_tokens is None and response is not None:
                                out_tokens = len(tokens.prompt_ids([response]))
                            if response is not None or arguments:
                                calls = [len(tokens.prompt_ids([a])) for a in arguments]
                            n_in = len(ids)
                            hashes = np.asarray(block_hashes(ids, block_size), dtype=np.uint64)
                        body_text = body_json(body)
                    else:
                        assert prefixes is not None
                        n_in = cols["input_tokens"][i]
                        hash_ids, hashes = prefixes.row(
                            rid,
                            n_in,
                            cols["cached_tokens"][i],
                            waits_for=chain[0] if chain is not None and chain[2] else None,
                            previous=parent,
                            agent=cols["agent"][i],
                            model=cols["model"][i],
                        )
                    for name, value in (
                        ("request_id", rid),
                        ("session_id", sid),
                        ("parent_request_id", parent),
                        ("turn", turn),
                        ("api", cols["api"][i]),
                        ("model", cols["model"][i]),
                        ("arrival_us", start // _NS_PER_US - t0_us),
                        ("body", body_text),
                        ("input_tokens", n_in),
                        ("output_tokens", out_tokens),
                        ("max_tokens", limit_tokens if limit_tokens is not None else out_tokens),
                        ("block_hashes", hashes),
                        ("hash_ids", hash_ids),
                        ("cached_tokens", cols["cached_tokens"][i]),
                        ("status", cols["status"][i]),
                        ("ttft_us", cols["ttft_us"][i]),
                        ("e2e_us", (end - start) // _NS_PER_US),
                        ("response", response),
                        ("depends_on", deps),
                        ("wait_us", (start - latest) // _NS_PER_US if latest is not None and deps else None),
                        ("parent_session_id", cols["parent_session_id"][i]),
                        ("agent", cols["agent"][i]),
                        ("tool_calls", calls),
                    ):
                        rows[name].append(value)
                    held += len(hashes) + len(body_text or "") // 8 + len(response or "") // 8
                    if len(rows["request_id"]) >= CHUNK_ROWS or held >= CHUNK_HELD:
                        flush()
            if rows["request_id"]:
                flush()
        finally:
            content.close()
            if log_join is not None:
                log_join.close()
        not_mapped = dict(sorted(reader.ops.items()))
        report.update(
            {
                "traces": reader.report["traces"],
                "traces_finished_early": reader.report["traces_finished_early"],
                "late_spans": reader.report["late_spans"],
                "duplicate_spans": reader.report["duplicate_spans"],
                "other_signal_lines": reader.report["other_signal_lines"],
                "content_rows": content_rows,
                "content_rows_from_logs": len(log_rows),
                **{name: log_join.report[name] if log_join is not None else 0 for name in _LOG_COUNTS},
                "log_skipped_lines": log_join.bad.count if log_join is not None else 0,
                "synthesized_rows": n - content_rows,
                "sessions": len(links.turns),
                "subagent_sessions": len(reader.session_parent),
                "agent_spans": reader.report["agent_spans"],
                "tool_spans": reader.report["tool_spans"],
                "tool_spans_linked": reader.report["tool_spans_linked"],
                "tool_spans_not_linked": reader.report["tool_spans_not_linked"] + reader.report["tool_spans_without_request"],
                "spawns_linked": reader.report["spawns_linked"],
                "joins_linked": reader.report["joins_linked"],
                "dependencies": counts["dependencies"],
                **{name: prefixes.counts[name] if prefixes is not None else 0 for name in _PREFIX_COUNTS},
                "attribute_styles": dict(sorted(reader.styles.items())),
                "spans_not_mapped": not_mapped,
            }
        )
        final = TraceMeta(
            t0_unix_us=t0_us,
            source_format=source_format,
            tokenizer=tokenizer,
            block_size_tokens=block_size,
            hash_algo=HASH_ALGO,
            redaction_policy="none" if content_rows else "synthetic",
            import_report=json.dumps(report, separators=(",", ":")),
            synthesis=meta.synthesis,
        )
        redaction = output.close(final)
    meta, rows_written = read_meta(out)
    return ImportResult(out, rows_written, meta, redaction)


_ROW_TYPES: dict[str, pl.DataType | type[pl.DataType]] = {**ROW_TYPES, "agent": pl.String, "hash_ids": pl.List(pl.UInt64)}
# the columns of uint64 arrays, built straight from the arrays (not Python lists)
_U64_LISTS = ("block_hashes", "hash_ids")


def _u64_lists(values: list[np.ndarray | None]) -> pl.Series:
    """A ``List(UInt64)`` column of uint64 arrays (None: null), without a Python int each."""
    import pyarrow as pa

    lengths = np.fromiter((0 if v is None else len(v) for v in values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    present = [v for v in values if v is not None]
    flat = np.ascontiguousarray(np.concatenate(present) if present else np.zeros(0), dtype=np.uint64)
    items = pa.Array.from_buffers(pa.uint64(), len(flat), [None, pa.py_buffer(flat)])
    nulls = np.fromiter((v is None for v in values), bool, len(values))
    mask = pa.array(nulls) if nulls.any() else None
    return pl.Series(pl.from_arrow(pa.LargeListArray.from_arrays(pa.array(offsets), items, mask=mask)))
