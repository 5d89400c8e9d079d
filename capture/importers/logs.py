"""Request logs into a Trace file: the common record, the two reading passes and the one
record->row builder.

Owns :class:`Usage`, :class:`LogRecord`, :class:`LineError`, :class:`BadLines`, :class:`NotARequest`,
:class:`LogIndex`, :func:`scan_log`, :class:`SessionLinker`, :class:`TokenCache`,
:func:`write_log_trace`, :func:`build_trace`, :func:`import_log` and the small field readers the
format modules share (:func:`parse_time_us`, :func:`answer_text`, ...). Each format module
(``openai_log``, ``litellm``, ``langfuse``) turns one JSON line into one :class:`LogRecord`;
everything after that is here, the same for every format.

Streaming, in bounded memory (a log may hold millions of requests, each repeating its
conversation's history): the first pass (:func:`scan_log`) parses every line and keeps of each
request only its line, the byte offset of the line and its arrival (a :class:`LogIndex`), plus
how many requests share each group id. The second (:func:`write_log_trace`) reads the requests
again in arrival order (a file already in arrival order straight through, otherwise each line
where it starts), builds their rows and writes them a chunk at a time (:data:`CHUNK_ROWS` rows
or :data:`CHUNK_CHARS` characters of bodies and answers) as Parquet row groups. What lasts
across chunks: the index, the request ids, the :class:`SessionLinker`'s few numbers a request
and a :class:`TokenCache` of at most :data:`TOKEN_CACHE_BYTES`. :func:`build_trace` builds the
same rows from records in memory.

Reading: JSON Lines; lines are numbered from 1, blank ones counted but skipped. A malformed line raises a
one-line :class:`~replay.errors.TraceError` ``FILE: line N: <what> (field 'x')``; with
``skip_bad=True`` it is skipped and counted in the import report instead. A well-formed line
that is not a request (a Langfuse span, a LiteLLM embedding call) is skipped and counted by
kind. A request id seen on an earlier line is a malformed line. An empty result is an error.

Building (:func:`write_log_trace`, :func:`build_trace`):

- Rows in arrival order (stable: equal arrivals keep file order); ``t0_unix_us`` is the first
  arrival, ``arrival_us`` counts from it.
- Tokens and hashes from the real text under the trace's tokenizer: ``input_tokens`` is the
  number of :func:`replay.bodies.prompt_token_ids` of the texts of
  :func:`replay.bodies.text_slots` (the one rule for a body's prompt text), ``block_hashes`` are
  :func:`replay.blocks.block_hashes` of those ids. ``output_tokens`` is the logged completion
  tokens, else the recorded answer's token count, else null; ``max_tokens`` is the body's
  ``max_completion_tokens`` or ``max_tokens``, else ``output_tokens``. ``response`` is the
  recorded answer text as logged; bodies are stored as compact JSON, exactly as logged
  (``stream`` included where the log has it).
- Sessions. A request whose log names a session (``session_id``; else a group id such as
  LiteLLM's or Langfuse's trace id, when at least two requests of the file share it: a group id
  seen once is no evidence, LiteLLM makes a fresh one per call) is in that session: its turn is
  the number of earlier requests of that session and its parent is the latest of them.
  Without one, the conversation decides. Each chat request's messages are normalized (each
  message is its role and :func:`replay.bodies.message_texts`) and hashed as a chain, one hash
  per prefix, so finding the earlier request a conversation continues costs one dictionary
  look-up per message (O(total messages), never pairwise). A chat request continues earlier
  request P when its messages start with

  1. P's messages followed by P's answer (an assistant message whose text is P's recorded
     response text), or, where P has no recorded answer,
  2. P's messages followed by any assistant message,

  possibly followed by further messages. The longest such match wins (rule 1 before rule 2 at
  the same length); among earlier requests with the very same match, the latest one with no
  next turn yet, else the latest. The request then joins P's session as P's next turn
  (``parent_request_id`` = P, ``turn`` = P's turn + 1). A request that continues nothing known
  begins a new session whose id is its own request id (turn 0). Two conversations that only
  share a system prompt (or any prefix that is not a whole earlier request plus an assistant
  message) never merge.
- Metadata: ``redaction_policy="none"`` (raw text), ``import_report`` a JSON object: lines
  read, records imported, skipped lines (count and the first few with line numbers and
  reasons), lines that were not requests by kind, and how sessions were found.
- Redaction: given a key, :func:`write_log_trace` redacts each chunk
  (:class:`redact.pipeline.Redactor`) before it is written, so no raw text reaches the disk;
  tokens and hashes stay those of the raw text, and the metadata is what ``replay redact``
  writes.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import math
import os
import re
import time
from array import array
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from replay.blocks import HASH_ALGO, block_hashes
from replay.errors import ConfigError, TraceError
from replay.trace import APIS, Trace, TraceMeta, TraceWriter, read_meta, validate

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = [
    "LOG_FORMATS",
    "Usage",
    "LogRecord",
    "LineError",
    "BadLines",
    "NotARequest",
    "LogIndex",
    "SessionLinker",
    "TokenCache",
    "scan_log",
    "write_log_trace",
    "build_trace",
    "import_log",
    "parse_time_us",
    "answer_text",
]

# the log formats :func:`import_log` reads (as the CLI spells them)
LOG_FORMATS = ("openai", "litellm", "langfuse")
# skipped lines whose line number and reason the import report keeps
REPORT_FIRST_SKIPPED = 5
# a chunk of rows (one Parquet row group, what memory holds of the rows) ends at this many rows
# or this many characters of bodies and answers, whichever comes first
CHUNK_ROWS = 8192
CHUNK_CHARS = 64 << 20
# the token ids of distinct texts kept for reuse (ids and entries, bytes), and what an entry
# costs besides its ids (its key, the array's header, the cache's links)
TOKEN_CACHE_BYTES = 64 << 20
TOKEN_CACHE_ENTRY_BYTES = 256


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
    usage: Usage | None = None
    ttft_us: int | None = None
    e2e_us: int | None = None
    status: int | None = None  # HTTP status
    line: int = 0  # 1-based line number in the file (set by scan_log)


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

    def __init__(self, source: str, skip_bad: bool) -> None:
        self.source = source
        self.skip_bad = skip_bad
        self.count = 0
        self.first: list[dict] = []

    def bad(self, line: int, error: LineError) -> None:
        """Raise :class:`~replay.errors.TraceError` for ``line``, or (skip_bad) count it."""
        if not self.skip_bad:
            raise TraceError(f"{self.source}: line {line}: {error.describe()}") from None
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


# ---------------------------------------------------------------------------------------------
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
                secs = calendar.timegm((int(year), int(month), int(day), int(hh or 0),
                                        int(mm or 0), int(ss or 0), 0, 0, 0))
                valid = (1 <= int(month) <= 12 and 1 <= int(day) <= 31 and int(hh or 0) < 24
                         and int(mm or 0) < 60 and int(ss or 0) < 61)
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
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
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


def openai_usage(usage: Any, field: str) -> Usage | None:
    """An OpenAI ``usage`` object (``prompt_tokens``, ``completion_tokens``,
    ``prompt_tokens_details.cached_tokens``) as :class:`Usage`."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise LineError("is not an object", field)
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=count(usage.get("prompt_tokens"), f"{field}.prompt_tokens"),
        completion_tokens=count(usage.get("completion_tokens"), f"{field}.completion_tokens"),
        cached_tokens=count(cached, f"{field}.prompt_tokens_details.cached_tokens"),
    )


def api_of_body(body: Any, field: str = "body") -> str:
    """``chat`` for a body with ``messages`` (a list), ``completions`` for one with ``prompt``."""
    if not isinstance(body, dict):
        raise LineError("is not a JSON object", field)
    if isinstance(body.get("messages"), list):
        return "chat"
    if isinstance(body.get("prompt"), (str, list)):
        return "completions"
    raise LineError("has neither 'messages' (a list) nor 'prompt'", field)


# ---------------------------------------------------------------------------------------------
# reading: the first pass (where each request is, when it arrived), the second (the requests
# again, in arrival order)


@dataclass(frozen=True)
class LogIndex:
    """What the first pass over a log keeps of each request, in file order: its line, the byte
    offset of that line and its arrival (µs since the Unix epoch; 0 where the line has no time),
    so that the second pass can read the requests again in arrival order. Also the group ids
    that two requests or more share (the sessions they make) and the reading half of the import
    report. A few numbers a request, never its text."""

    path: Path
    lines: np.ndarray     # int64, 1-based line numbers
    offsets: np.ndarray   # int64, where those lines start
    arrivals: np.ndarray  # int64
    untimed: int | None   # the first request's line that has no time (None: all have one)
    shared_groups: frozenset[str]
    report: dict

    def __len__(self) -> int:
        return len(self.lines)

    def timed(self, arrivals: np.ndarray) -> LogIndex:
        """This index with the requests' arrivals (file order) given, for a file without times."""
        return replace(self, arrivals=np.asarray(arrivals, dtype=np.int64), untimed=None)

    def records(self, parse_line: Callable[[dict], LogRecord]) -> Iterator[LogRecord]:
        """Each request parsed again, in arrival order (stable: equal arrivals in file order),
        with its arrival from the index. A file in arrival order (the common case) is read
        straight through; otherwise each line is read where it starts."""
        source = self.path.name
        if self.untimed is not None:
            raise TraceError(f"{source}: line {self.untimed}: no arrival time")
        order = np.argsort(self.arrivals, kind="stable")
        try:
            f = self.path.open("rb")
        except OSError as e:
            raise TraceError(f"{source}: cannot read ({e.strerror or e})") from e
        with f:
            for start in range(0, len(order), CHUNK_ROWS):  # Python ints a block at a time
                part = order[start:start + CHUNK_ROWS]
                for line, offset, arrival in zip(self.lines[part].tolist(),
                                                 self.offsets[part].tolist(),
                                                 self.arrivals[part].tolist()):
                    f.seek(offset)  # in arrival order: within the read buffer, no system call
                    try:
                        record = _parsed(f.readline(), parse_line, line)
                    except (LineError, NotARequest):
                        raise TraceError(f"{source}: line {line}: changed while it was "
                                         "imported") from None
                    yield replace(record, arrival_us=arrival)


def scan_log(
    path: Path,
    parse_line: Callable[[dict], LogRecord],
    *,
    skip_bad: bool = False,
    limit: int | None = None,
) -> LogIndex:
    """The first pass: parse each non-blank line of ``path`` with ``parse_line`` (the first
    ``limit`` requests) and index the requests. See the module docstring for malformed lines
    and lines that are not requests."""
    source = path.name
    if not path.is_file():
        raise TraceError(f"{source}: no such file")
    lines, offsets, arrivals = array("q"), array("q"), array("q")
    untimed: int | None = None
    groups: Counter = Counter()
    seen: dict[str, int] = {}
    not_requests: dict[str, int] = defaultdict(int)
    bad = BadLines(source, skip_bad)
    lines_read = 0
    offset = 0
    try:
        f = path.open("rb")
    except OSError as e:
        raise TraceError(f"{source}: cannot read ({e.strerror or e})") from e
    with f:
        for number, raw in enumerate(f, start=1):
            start, offset = offset, offset + len(raw)
            if limit is not None and len(lines) >= limit:
                break
            if not raw.strip():
                continue
            lines_read += 1
            try:
                record = _parsed(raw, parse_line, number)
                if record.request_id in seen:
                    raise LineError(f"request id {record.request_id!r} repeats line "
                                    f"{seen[record.request_id]}", "request id")
            except LineError as e:
                bad.bad(number, e)
                continue
            except NotARequest as e:
                not_requests[e.kind] += 1
                continue
            seen[record.request_id] = number
            lines.append(number)
            offsets.append(start)
            if record.arrival_us is None and untimed is None:
                untimed = number
            arrivals.append(record.arrival_us or 0)
            group = _group_of(record)
            if group is not None:
                groups[group] += 1
    report = {
        "lines_read": lines_read,
        "records_imported": len(lines),
        **bad.report(),
        **dict(sorted(not_requests.items())),
    }
    if not lines:
        raise TraceError(f"{source}: no requests imported ({lines_read} lines read, "
                         f"{bad.count} skipped as malformed"
                         + "".join(f", {n} {kind.replace('_', ' ')}"
                                   for kind, n in sorted(not_requests.items())) + ")")
    return LogIndex(path, np.frombuffer(lines, np.int64), np.frombuffer(offsets, np.int64),
                    np.frombuffer(arrivals, np.int64), untimed, _shared(groups), report)


def _parsed(raw: bytes, parse_line: Callable[[dict], LogRecord], line: int) -> LogRecord:
    """The record of one line (``line`` and a missing ``request_id`` filled in)."""
    try:
        obj = json.loads(raw)
    except ValueError:
        raise LineError("not valid JSON") from None
    if not isinstance(obj, dict):
        raise LineError("not a JSON object")
    return _checked(parse_line(obj), line)


def _checked(record: LogRecord, line: int) -> LogRecord:
    if record.api not in APIS:
        raise LineError(f"api {record.api!r} is not one of {', '.join(sorted(APIS))}")
    if not isinstance(record.body, dict):
        raise LineError("the request is not a JSON object", "body")
    for name in ("ttft_us", "e2e_us"):
        value = getattr(record, name)
        if value is not None and value < 0:
            raise LineError("is negative", name)
    request_id = record.request_id if record.request_id else f"line-{line}"
    return replace(record, line=line, request_id=request_id)


def _group_of(record: LogRecord) -> str | None:
    """The group id that may name ``record``'s session (none where the log names one)."""
    return record.group_id if record.session_id is None else None


def _shared(groups: Counter) -> frozenset[str]:
    """The group ids at least two requests share: a group id seen once is no evidence."""
    return frozenset(g for g, n in groups.items() if n >= 2)


# ---------------------------------------------------------------------------------------------
# sessions


def _message_key(message: Any) -> bytes:
    from replay.bodies import message_texts

    role = message.get("role") if isinstance(message, dict) else None
    return json.dumps([role, message_texts(message)], ensure_ascii=False,
                      separators=(",", ":")).encode()


def _chain(parent: bytes, message_key: bytes) -> bytes:
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(message_key)
    return h.digest()


_ROOT = bytes(16)


def _is_assistant(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "assistant"


class SessionLinker:
    """The session rule of the module docstring, applied one request at a time (requests in
    arrival order, each with its recorded answer): the log importer runs it over a log,
    the recording proxy (``capture.record``) over live traffic as requests end.

    ``max_requests`` bounds the memory of a long-running linker: the oldest requests are
    forgotten (a conversation continuing one of them starts a new session).
    """

    def __init__(self, max_requests: int | None = None) -> None:
        self.max_requests = max_requests
        self._n = 0
        self._info: dict[int, tuple[str, str, int]] = {}  # index -> (request id, session, turn)
        self._keys: dict[int, tuple[dict, bytes]] = {}    # index -> where it is registered
        self._last_of_session: dict[str, int] = {}
        self._turns_in_session: dict[str, int] = defaultdict(int)
        # key -> earlier requests (indices) it continues: after their answer, or (no answer)
        # after any assistant message
        self._answered: dict[bytes, list[int]] = defaultdict(list)
        self._unanswered: dict[bytes, list[int]] = defaultdict(list)
        self._has_child: set[int] = set()
        self.linked = 0
        self.in_log_sessions = 0

    def add(self, request_id: str, api: str, body: dict, response: str | None,
            log_session: str | None = None) -> tuple[str, str | None, int]:
        """``(session_id, parent_request_id, turn)`` of this request; it is then known as a
        conversation later requests may continue."""
        i = self._n
        self._n += 1
        messages = body.get("messages") if api == "chat" else None
        prefix: list[bytes] = []
        if isinstance(messages, list):
            h = _ROOT
            for m in messages:
                h = _chain(h, _message_key(m))
                prefix.append(h)
        parent_id: str | None = None
        if log_session is not None:
            self.in_log_sessions += 1
            sid = log_session
            prev = self._last_of_session.get(sid)
            if prev is not None:
                parent_id = self._info[prev][0]
                self._has_child.add(prev)
            turn = self._turns_in_session[sid]
        else:
            parent = _continued(prefix, messages, self._answered, self._unanswered,
                                self._has_child)
            if parent is None:
                sid, turn = request_id, 0
            else:
                self.linked += 1
                parent_id, sid, parent_turn = self._info[parent]
                turn = parent_turn + 1
                self._has_child.add(parent)
        self._turns_in_session[sid] += 1
        self._last_of_session[sid] = i
        self._info[i] = (request_id, sid, turn)
        if prefix:
            if response:
                table = self._answered
                key = _chain(prefix[-1], _message_key({"role": "assistant", "content": response}))
            else:
                table, key = self._unanswered, prefix[-1]
            table[key].append(i)
            if self.max_requests is not None:  # kept only to forget it again
                self._keys[i] = (table, key)
        if self.max_requests is not None and len(self._info) > self.max_requests:
            self._forget(i - self.max_requests)
        return sid, parent_id, turn

    def _forget(self, i: int) -> None:
        info = self._info.pop(i, None)
        if info is None:
            return
        where = self._keys.pop(i, None)
        if where is not None:
            table, key = where
            table[key].remove(i)
            if not table[key]:
                del table[key]
        self._has_child.discard(i)
        sid = info[1]
        if self._last_of_session.get(sid) == i:
            del self._last_of_session[sid]
            self._turns_in_session.pop(sid, None)

    @property
    def sessions(self) -> int:
        return len(self._turns_in_session)


def _continued(prefix: list[bytes], messages: Any, answered: dict, unanswered: dict,
               has_child: set[int]) -> int | None:
    """The earlier request this chat request continues (longest match), or None."""
    for k in range(len(prefix), 0, -1):  # k messages matched, the last an assistant message
        candidates = answered.get(prefix[k - 1])
        if not candidates and k >= 2 and _is_assistant(messages[k - 1]):
            candidates = unanswered.get(prefix[k - 2])
        if candidates:
            for j in reversed(candidates):
                if j not in has_child:
                    return j
            return candidates[-1]
    return None




# ---------------------------------------------------------------------------------------------
# building


class TokenCache:
    """Token ids of texts, each encoded on its own (:func:`replay.bodies.text_token_ids`), kept
    while they are reused: a conversation repeats its history every turn, so each distinct text
    is encoded about once. Least recently used first out, within ``max_bytes`` (the ids plus
    :data:`TOKEN_CACHE_ENTRY_BYTES` an entry), whatever the size of the log."""

    def __init__(self, tokenizer: Any, max_bytes: int = TOKEN_CACHE_BYTES) -> None:
        self.tok = tokenizer
        self.max_bytes = max_bytes
        self.bytes = 0
        self._ids: OrderedDict[bytes, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def prompt_ids(self, texts: Sequence[str]) -> np.ndarray:
        """:func:`replay.bodies.prompt_token_ids` of ``texts`` (the texts not cached are encoded
        in one batch)."""
        from replay.bodies import text_token_ids

        if not texts:
            return np.zeros(0, np.uint32)
        keys = [hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
                for t in texts]
        missing = {k: t for k, t in zip(keys, texts) if k not in self._ids}
        new = dict(zip(missing, text_token_ids(list(missing.values()), self.tok))) if missing else {}
        parts = []
        for k in keys:
            ids = new.get(k)
            if ids is None:
                ids = self._ids[k]
                self._ids.move_to_end(k)
            parts.append(ids)
        for k, ids in new.items():
            self._ids[k] = ids
            self.bytes += ids.nbytes + TOKEN_CACHE_ENTRY_BYTES
        while self.bytes > self.max_bytes and self._ids:
            self.bytes -= self._ids.popitem(last=False)[1].nbytes + TOKEN_CACHE_ENTRY_BYTES
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _body_max_tokens(body: dict) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _check_block_size(block_size: int) -> None:
    if block_size <= 0:
        raise ConfigError(f"--block-size: must be positive, got {block_size}")


class _Rows:
    """Trace rows of records taken in arrival order, by the rules of the module docstring, held
    until :meth:`frame` takes them (a chunk). What lasts from chunk to chunk: the sessions
    (:class:`SessionLinker`), the token cache and ``t0``."""

    def __init__(self, tokenizer: str, block_size: int, shared_groups: frozenset[str]) -> None:
        from replay.tokenizer import load_tokenizer

        self.tokenizer = tokenizer
        self.block_size = block_size
        self.shared_groups = shared_groups
        self.tokens = TokenCache(load_tokenizer(tokenizer))
        self.linker = SessionLinker()
        self.t0: int | None = None
        self.chars = 0  # body and answer characters held
        self._cols: dict[str, list] = defaultdict(list)

    def __len__(self) -> int:
        return len(self._cols["request_id"])

    def add(self, rec: LogRecord) -> None:
        from replay.bodies import text_slots

        log_session = rec.session_id
        if log_session is None and rec.group_id in self.shared_groups:
            log_session = rec.group_id
        sid, parent, turn = self.linker.add(rec.request_id, rec.api, rec.body, rec.response,
                                            log_session)
        if self.t0 is None:
            self.t0 = rec.arrival_us
        ids = self.tokens.prompt_ids([s.text for s in text_slots(rec.body)])
        out = rec.usage.completion_tokens if rec.usage is not None else None
        if out is None and rec.response is not None:
            out = len(self.tokens.prompt_ids([rec.response]))
        limit = _body_max_tokens(rec.body)
        body = json.dumps(rec.body, separators=(",", ":"), ensure_ascii=False)
        self.chars += len(body) + len(rec.response or "")
        for name, value in (
            ("request_id", rec.request_id), ("session_id", sid), ("parent_request_id", parent),
            ("turn", turn), ("api", rec.api), ("model", rec.model),
            ("arrival_us", rec.arrival_us - self.t0), ("body", body), ("input_tokens", len(ids)),
            ("output_tokens", out), ("max_tokens", limit if limit is not None else out),
            ("block_hashes", block_hashes(ids, self.block_size)),
            ("cached_tokens", rec.usage.cached_tokens if rec.usage else None),
            ("status", rec.status), ("ttft_us", rec.ttft_us), ("e2e_us", rec.e2e_us),
            ("response", rec.response),
        ):
            self._cols[name].append(value)

    def full(self) -> bool:
        return len(self) >= CHUNK_ROWS or self.chars >= CHUNK_CHARS

    def frame(self) -> pl.DataFrame:
        """The rows added since the last call."""
        cols, self._cols, self.chars = self._cols, defaultdict(list), 0
        return pl.DataFrame({name: pl.Series(cols[name], dtype=dtype)
                             for name, dtype in _ROW_TYPES.items()})

    def meta(self, source_format: str, report: dict | None) -> TraceMeta:
        """The metadata, once every row was added: the import report ends with the sessions."""
        full_report = {"format": source_format, **(report or {}),
                       "sessions": self.linker.sessions,
                       "requests_in_log_sessions": self.linker.in_log_sessions,
                       "turns_linked_by_conversation": self.linker.linked}
        return TraceMeta(t0_unix_us=self.t0 or 0, source_format=source_format,
                         tokenizer=self.tokenizer, block_size_tokens=self.block_size,
                         hash_algo=HASH_ALGO, redaction_policy="none",
                         import_report=json.dumps(full_report, separators=(",", ":")))


_ROW_TYPES = {
    "request_id": pl.String, "session_id": pl.String, "parent_request_id": pl.String,
    "turn": pl.Int32, "api": pl.String, "model": pl.String, "arrival_us": pl.Int64,
    "body": pl.String, "input_tokens": pl.Int64, "output_tokens": pl.Int64,
    "max_tokens": pl.Int64, "block_hashes": pl.List(pl.UInt64), "cached_tokens": pl.Int64,
    "status": pl.Int64, "ttft_us": pl.Int64, "e2e_us": pl.Int64, "response": pl.String,
}


def build_trace(
    records: Sequence[LogRecord],
    *,
    source: str,
    source_format: str,
    tokenizer: str = "gpt2",
    block_size: int = 16,
    report: dict | None = None,
) -> Trace:
    """The Trace of ``records`` (every ``arrival_us`` set) in memory, by the rules in the module
    docstring: the same rows a log of them imports to (:func:`write_log_trace`)."""
    _check_block_size(block_size)
    if not records:
        raise TraceError(f"{source}: no requests imported")
    missing = [r.line for r in records if r.arrival_us is None]
    if missing:
        raise TraceError(f"{source}: line {missing[0]}: no arrival time")
    groups = Counter(g for g in map(_group_of, records) if g is not None)
    rows = _Rows(tokenizer, block_size, _shared(groups))
    for i in sorted(range(len(records)), key=lambda i: records[i].arrival_us):
        rows.add(records[i])
    meta = rows.meta(source_format, report)
    return Trace(validate(rows.frame(), meta, source), meta)


class _Output:
    """The Trace file being written, a frame at a time: as it is, or (with a redaction key)
    redacted first, :data:`redact.pipeline.ROW_BATCH` rows at a time
    (:class:`redact.pipeline.Redactor`; quarantined rows are left out), so no raw text is
    written. Removed again on an error."""

    def __init__(self, out: Path, meta: TraceMeta, key: Any | None) -> None:
        self.writer = TraceWriter(out, meta)
        self.key = key
        self.redactor = None
        if key is not None:
            from redact.pipeline import Accounts, Redactor

            self.redactor = Redactor(key, meta.tokenizer)
            self.accounts = Accounts()
            self.started = time.perf_counter()

    def __enter__(self) -> _Output:
        return self

    def __exit__(self, kind, value, tb) -> None:
        try:
            if kind is not None:
                self.writer.abort()
        finally:
            if self.redactor is not None:
                self.redactor.close()

    @property
    def rows(self) -> int:
        return self.writer.rows

    def write(self, df: pl.DataFrame) -> None:
        if self.redactor is None:
            self.writer.write(df)
            return
        from redact.pipeline import ROW_BATCH

        block_size = self.writer.meta.block_size_tokens
        for start in range(0, df.height, ROW_BATCH):
            part = self.accounts.add(*self.redactor.redact_rows(df.slice(start, ROW_BATCH),
                                                                block_size))
            if part.height:
                self.writer.write(part)

    def close(self, meta: TraceMeta) -> Any | None:
        """Finish the file with ``meta`` (and the redaction's); the redaction report, if any."""
        if self.redactor is None:
            self.writer.close(meta)
            return None
        from redact.pipeline import finish_output

        return finish_output(self.writer, self.accounts, self.started, self.writer.path, meta,
                             self.key)


def write_log_trace(
    index: LogIndex,
    parse_line: Callable[[dict], LogRecord],
    out: str | os.PathLike[str],
    *,
    source_format: str,
    tokenizer: str = "gpt2",
    block_size: int = 16,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """The second pass: read the requests of ``index`` again in arrival order and write their
    rows to the Trace file ``out``, a chunk (:data:`CHUNK_ROWS` rows or :data:`CHUNK_CHARS`
    characters of bodies and answers, whichever comes first) at a time, each redacted first
    with ``key`` (a :class:`redact.key.RedactionKey`) where one is given.
    ``progress(rows_read)`` is called after each chunk."""
    from capture.importers.tokens import ImportResult

    _check_block_size(block_size)
    out = Path(out)
    rows = _Rows(tokenizer, block_size, index.shared_groups)
    start = TraceMeta(source_format=source_format, tokenizer=tokenizer,
                      block_size_tokens=block_size, hash_algo=HASH_ALGO, redaction_policy="none")
    done = 0
    with _Output(out, start, key) as output:
        def flush() -> None:
            nonlocal done
            done += len(rows)
            output.write(rows.frame())
            if progress is not None:
                progress(done)

        for rec in index.records(parse_line):
            rows.add(rec)
            if rows.full():
                flush()
        if len(rows):
            flush()
        redaction = output.close(rows.meta(source_format, index.report))
    meta, n = read_meta(out)
    return ImportResult(out, n, meta, redaction)


def import_log(
    format: str,
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    block_size: int = 16,
    skip_bad: bool = False,
    rate: float | None = None,
    seed: int = 0,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import a request log of ``format`` ("openai", "litellm" or "langfuse") into the Trace
    file ``out``, in two streaming passes (see the module docstring). Without ``key`` (a
    :class:`redact.key.RedactionKey`) the text is raw (``redaction_policy="none"``: redact it
    before sharing it); with one, each chunk is redacted before it is written.

    ``rate`` (req/s) and ``seed`` space an OpenAI Batch input file's requests as a seeded
    Poisson process (it has no times); ``limit`` keeps the first N requests of the file.
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: must be >= 1, got {limit}")
    _check_block_size(block_size)
    common = dict(tokenizer=tokenizer, block_size=block_size, skip_bad=skip_bad, limit=limit,
                  key=key, progress=progress)
    if format == "openai":
        from capture.importers.openai_log import import_openai

        return import_openai(path, out, rate=rate, seed=seed, **common)
    if format not in LOG_FORMATS:
        raise ConfigError(f"log format '{format}' unknown (known: {', '.join(LOG_FORMATS)})")
    if rate is not None:
        raise ConfigError(f"--rate: only for OpenAI Batch input files, not {format} logs "
                          "(they have their own times)")
    if format == "litellm":
        from capture.importers.litellm import import_litellm

        return import_litellm(path, out, **common)
    from capture.importers.langfuse import import_langfuse

    return import_langfuse(path, out, **common)
