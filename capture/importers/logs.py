"""Request logs into a Trace: the common record, the line reader and the one record->Trace builder.

Owns :class:`Usage`, :class:`LogRecord`, :class:`LineError`, :class:`BadLines`, :class:`NotARequest`,
:func:`read_records`, :func:`build_trace`, :func:`import_log` and the small field readers the
format modules share (:func:`parse_time_us`, :func:`answer_text`, ...). Each format module
(``openai_log``, ``litellm``, ``langfuse``) turns one JSON line into one :class:`LogRecord`;
everything after that is here, the same for every format.

Reading: JSON Lines; lines are numbered from 1, blank ones counted but skipped. A malformed line raises a
one-line :class:`~replay.errors.TraceError` ``FILE: line N: <what> (field 'x')``; with
``skip_bad=True`` it is skipped and counted in the import report instead. A well-formed line
that is not a request (a Langfuse span, a LiteLLM embedding call) is skipped and counted by
kind. A request id seen on an earlier line is a malformed line. An empty result is an error.

Building (:func:`build_trace`):

- Rows in arrival order (stable); ``t0_unix_us`` is the first arrival, ``arrival_us`` counts
  from it.
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
- Metadata: ``redaction_policy="none"`` (raw text: the caller redacts), ``import_report`` a
  JSON object: lines read, records imported, skipped lines (count and the first few with
  line numbers and reasons), lines that were not requests by kind, and how sessions were found.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from replay.blocks import HASH_ALGO, block_hashes
from replay.errors import ConfigError, TraceError
from replay.trace import APIS, Trace, TraceMeta, validate

__all__ = [
    "LOG_FORMATS",
    "Usage",
    "LogRecord",
    "LineError",
    "BadLines",
    "NotARequest",
    "SessionLinker",
    "read_records",
    "build_trace",
    "import_log",
    "parse_time_us",
    "answer_text",
]

# the log formats :func:`import_log` reads (as the CLI spells them)
LOG_FORMATS = ("openai", "litellm", "langfuse")
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
    usage: Usage | None = None
    ttft_us: int | None = None
    e2e_us: int | None = None
    status: int | None = None  # HTTP status
    line: int = 0  # 1-based line number in the file (set by read_records)


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
# reading


def read_records(
    path: Path,
    parse_line: Callable[[dict], LogRecord],
    *,
    skip_bad: bool = False,
    limit: int | None = None,
) -> tuple[list[LogRecord], dict]:
    """Parse each non-blank line of ``path`` with ``parse_line``; return the records (file
    order, ``line`` and a missing ``request_id`` filled in) and the reading half of the import
    report. See the module docstring for malformed lines and lines that are not requests."""
    source = path.name
    if not path.is_file():
        raise TraceError(f"{source}: no such file")
    records: list[LogRecord] = []
    seen: dict[str, int] = {}
    not_requests: dict[str, int] = defaultdict(int)
    bad = BadLines(source, skip_bad)
    lines_read = 0
    try:
        f = path.open("rb")
    except OSError as e:
        raise TraceError(f"{source}: cannot read ({e.strerror or e})") from e
    with f:
        for number, raw in enumerate(f, start=1):
            if limit is not None and len(records) >= limit:
                break
            if not raw.strip():
                continue
            lines_read += 1
            try:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    raise LineError("not valid JSON") from None
                if not isinstance(obj, dict):
                    raise LineError("not a JSON object")
                record = parse_line(obj)
                record = _checked(record, number)
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
            records.append(record)
    report = {
        "lines_read": lines_read,
        "records_imported": len(records),
        **bad.report(),
        **dict(sorted(not_requests.items())),
    }
    if not records:
        raise TraceError(f"{source}: no requests imported ({lines_read} lines read, "
                         f"{bad.count} skipped as malformed"
                         + "".join(f", {n} {kind.replace('_', ' ')}"
                                   for kind, n in sorted(not_requests.items())) + ")")
    return records, report


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
    arrival order, each with its recorded answer): :func:`assign_sessions` runs it over a log,
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
            full = prefix[-1]
            if response:
                key = _chain(full, _message_key({"role": "assistant", "content": response}))
                self._answered[key].append(i)
                self._keys[i] = (self._answered, key)
            else:
                self._unanswered[full].append(i)
                self._keys[i] = (self._unanswered, full)
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


def assign_sessions(records: Sequence[LogRecord]) -> tuple[list[str], list[str | None], list[int], dict]:
    """``(session_id, parent_request_id, turn)`` per record (records in arrival order) by the
    rule in the module docstring, and counts of how the sessions were found."""
    linker = SessionLinker()
    shared = Counter(r.group_id for r in records if r.session_id is None and r.group_id is not None)
    sessions: list[str] = []
    parents: list[str | None] = []
    turns: list[int] = []
    for rec in records:
        log_session = rec.session_id
        if log_session is None and shared[rec.group_id] >= 2:
            log_session = rec.group_id
        sid, parent, turn = linker.add(rec.request_id, rec.api, rec.body, rec.response, log_session)
        sessions.append(sid)
        parents.append(parent)
        turns.append(turn)
    stats = {
        "sessions": linker.sessions,
        "requests_in_log_sessions": linker.in_log_sessions,
        "turns_linked_by_conversation": linker.linked,
    }
    return sessions, parents, turns, stats


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


def _body_max_tokens(body: dict) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def build_trace(
    records: Sequence[LogRecord],
    *,
    source: str,
    source_format: str,
    tokenizer: str = "gpt2",
    block_size: int = 16,
    report: dict | None = None,
) -> Trace:
    """The Trace of ``records`` (every ``arrival_us`` set) by the rules in the module docstring."""
    from replay.bodies import prompt_token_ids, text_slots
    from replay.tokenizer import load_tokenizer

    if block_size <= 0:
        raise ConfigError(f"--block-size: must be positive, got {block_size}")
    if not records:
        raise TraceError(f"{source}: no requests imported")
    missing = [r.line for r in records if r.arrival_us is None]
    if missing:
        raise TraceError(f"{source}: line {missing[0]}: no arrival time")
    tok = load_tokenizer(tokenizer)
    order = sorted(range(len(records)), key=lambda i: records[i].arrival_us)
    rows = [records[i] for i in order]
    sessions, parents, turns, session_stats = assign_sessions(rows)

    # prompt_token_ids encodes each text on its own and concatenates, so each distinct text (a
    # conversation repeats its history every turn) is encoded once
    encoded: dict[str, np.ndarray] = {}

    def token_ids(texts: list[str]) -> np.ndarray:
        for t in texts:
            if t not in encoded:
                encoded[t] = prompt_token_ids([t], tok)
        return np.concatenate([encoded[t] for t in texts]) if texts else prompt_token_ids([], tok)

    t0 = rows[0].arrival_us
    bodies, inputs, hashes, outputs, max_tokens = [], [], [], [], []
    for rec in rows:
        ids = token_ids([s.text for s in text_slots(rec.body)])
        inputs.append(len(ids))
        hashes.append(block_hashes(ids, block_size))
        out = rec.usage.completion_tokens if rec.usage is not None else None
        if out is None and rec.response is not None:
            out = len(tok.encode(rec.response, add_special_tokens=False).ids)
        outputs.append(out)
        limit = _body_max_tokens(rec.body)
        max_tokens.append(limit if limit is not None else out)
        bodies.append(json.dumps(rec.body, separators=(",", ":"), ensure_ascii=False))
    frame = pl.DataFrame({
        "request_id": [r.request_id for r in rows],
        "session_id": pl.Series(sessions, dtype=pl.String),
        "parent_request_id": pl.Series(parents, dtype=pl.String),
        "turn": pl.Series(turns, dtype=pl.Int32),
        "api": [r.api for r in rows],
        "model": pl.Series([r.model for r in rows], dtype=pl.String),
        "arrival_us": pl.Series([r.arrival_us - t0 for r in rows], dtype=pl.Int64),
        "body": bodies,
        "input_tokens": pl.Series(inputs, dtype=pl.Int64),
        "output_tokens": pl.Series(outputs, dtype=pl.Int64),
        "max_tokens": pl.Series(max_tokens, dtype=pl.Int64),
        "block_hashes": pl.Series(hashes, dtype=pl.List(pl.UInt64)),
        "cached_tokens": pl.Series([r.usage.cached_tokens if r.usage else None for r in rows],
                                   dtype=pl.Int64),
        "status": pl.Series([r.status for r in rows], dtype=pl.Int64),
        "ttft_us": pl.Series([r.ttft_us for r in rows], dtype=pl.Int64),
        "e2e_us": pl.Series([r.e2e_us for r in rows], dtype=pl.Int64),
        "response": pl.Series([r.response for r in rows], dtype=pl.String),
    })
    full_report = {"format": source_format, **(report or {}), **session_stats}
    meta = TraceMeta(t0_unix_us=t0, source_format=source_format, tokenizer=tokenizer,
                     block_size_tokens=block_size, hash_algo=HASH_ALGO, redaction_policy="none",
                     import_report=json.dumps(full_report, separators=(",", ":")))
    return Trace(validate(frame, meta, source), meta)


def import_log(
    format: str,
    path: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    block_size: int = 16,
    skip_bad: bool = False,
    rate: float | None = None,
    seed: int = 0,
    limit: int | None = None,
) -> Trace:
    """Import a request log of ``format`` ("openai", "litellm" or "langfuse") into a Trace of
    raw text (``redaction_policy="none"``: redact it before sharing it).

    ``rate`` (req/s) and ``seed`` space an OpenAI Batch input file's requests as a seeded
    Poisson process (it has no times); ``limit`` keeps the first N requests of the file.
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: must be >= 1, got {limit}")
    common = dict(tokenizer=tokenizer, block_size=block_size, skip_bad=skip_bad, limit=limit)
    if format == "openai":
        from capture.importers.openai_log import import_openai

        return import_openai(path, rate=rate, seed=seed, **common)
    if format not in LOG_FORMATS:
        raise ConfigError(f"log format '{format}' unknown (known: {', '.join(LOG_FORMATS)})")
    if rate is not None:
        raise ConfigError(f"--rate: only for OpenAI Batch input files, not {format} logs "
                          "(they have their own times)")
    if format == "litellm":
        from capture.importers.litellm import import_litellm

        return import_litellm(path, **common)
    from capture.importers.langfuse import import_langfuse

    return import_langfuse(path, **common)
