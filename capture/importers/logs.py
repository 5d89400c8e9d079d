"""Request logs into a Trace file: the two reading passes and the one record->row builder.

Owns :class:`LogIndex`, :func:`scan_log`, :class:`TokenCache`, :func:`write_log_trace`,
:func:`build_trace`; :func:`capture.importers.import_log` picks the format. Each format module
(``openai_log``, ``litellm``, ``langfuse``) turns one JSON line into one
:class:`capture.importers.records.LogRecord`; everything after that is here, the same for every
format.

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
- Sessions: the rule of :mod:`capture.importers.linker` (:class:`SessionLinker`); where a
  record states its dependencies (``LogRecord.depends_on`` not None: a source with an explicit
  graph), they, its ``wait_us`` and ``parent_session_id`` replace the linker's edges (the
  session, turn and parent stay the linker's).
- Metadata: ``redaction_policy="none"`` (raw text), ``import_report`` a JSON object: lines
  read, records imported, skipped lines (count and the first few with line numbers and
  reasons), lines that were not requests by kind, and how sessions were found.
- Redaction: given a key, :func:`write_log_trace` redacts each chunk
  (:class:`redact.pipeline.Redactor`) before it is written, so no raw text reaches the disk;
  tokens and hashes stay those of the raw text, and the metadata is what ``replay redact``
  writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from array import array
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from capture.importers.records import BadLines, LineError, LogRecord, NotARequest
from capture.importers.linker import SessionLinker
from replay.blocks import HASH_ALGO, block_hashes
from replay.bodies import body_json, name_slots, text_slots, text_token_ids
from replay.errors import ConfigError, TraceError
from replay.trace import APIS, BLOCK_SIZE, Trace, TraceMeta, TraceWriter, read_meta, validate

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = [
    "LOG_FORMATS",
    "ROW_TYPES",
    "LogIndex",
    "TokenCache",
    "TraceOutput",
    "scan_log",
    "write_log_trace",
    "build_trace",
    "check_block_size",
]

# the log formats :func:`capture.importers.import_log` reads (as the CLI spells them)
LOG_FORMATS = (
    "openai",
    "litellm",
    "langfuse",
    "claude-code",
    "codex",
    "aiperf-dag",
    "aiperf-multi-turn",
    "baseten",
    "sagemaker",
    "sharegpt",
)
# a chunk of rows (one Parquet row group, what memory holds of the rows) ends at this many rows
# or this many characters of bodies and answers, whichever comes first
CHUNK_ROWS = 8192
CHUNK_CHARS = 64 << 20
# the token ids of distinct texts kept for reuse (ids and entries, bytes), and what an entry
# costs besides its ids (its key, the array's header, the cache's links)
TOKEN_CACHE_BYTES = 64 << 20
TOKEN_CACHE_ENTRY_BYTES = 256


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
    lines: np.ndarray  # int64, 1-based line numbers
    offsets: np.ndarray  # int64, where those lines start
    arrivals: np.ndarray  # int64
    untimed: int | None  # the first request's line that has no time (None: all have one)
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
                part = order[start : start + CHUNK_ROWS]
                for line, offset, arrival in zip(
                    self.lines[part].tolist(), self.offsets[part].tolist(), self.arrivals[part].tolist()
                ):
                    f.seek(offset)  # in arrival order: within the read buffer, no system call
                    try:
                        record = _parsed(f.readline(), parse_line, line)
                    except (LineError, NotARequest):
                        raise TraceError(f"{source}: line {line}: changed while it was imported") from None
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
                    raise LineError(f"request id {record.request_id!r} repeats line {seen[record.request_id]}", "request id")
            except LineError as e:
                bad.bad(number, e)
                continue
            except NotARequest as e:
                not_requests[e.kind] += 1
                continue
            assert record.request_id is not None  # _checked fills a missing one
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
        raise TraceError(
            f"{source}: no requests imported ({lines_read} lines read, "
            f"{bad.count} skipped as malformed"
            + "".join(f", {n} {kind.replace('_', ' ')}" for kind, n in sorted(not_requests.items()))
            + ")"
        )
    return LogIndex(
        path,
        np.frombuffer(lines, np.int64),
        np.frombuffer(offsets, np.int64),
        np.frombuffer(arrivals, np.int64),
        untimed,
        _shared(groups),
        report,
    )


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
# building


class TokenCache:
    """Token ids of texts, each encoded on its own (:func:`replay.bodies.text_token_ids`), kept
    while they are reused: a conversation repeats its history every turn, so each distinct text
    is encoded about once. Least recently used first out, within ``max_bytes`` (the ids plus
    :data:`TOKEN_CACHE_ENTRY_BYTES` an entry), whatever the size of the log. The capture
    recorder (:class:`capture.record.RowBuilder`) keeps its own, of
    :data:`capture.record.TOKEN_CACHE_BYTES`."""

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
        return self.prompts_ids([texts])[0]

    def prompts_ids(self, prompts: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """:meth:`prompt_ids` of each prompt's texts, the texts of all of them not cached
        encoded in one batch (the recorder's batch of requests)."""
        keys = [
            [hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest() for t in texts] for texts in prompts
        ]
        missing = {k: t for texts, ks in zip(prompts, keys) for k, t in zip(ks, texts) if k not in self._ids}
        new = dict(zip(missing, text_token_ids(list(missing.values()), self.tok))) if missing else {}
        out = []
        for ks in keys:
            parts = []
            for k in ks:
                ids = new.get(k)
                if ids is None:
                    ids = self._ids[k]
                    self._ids.move_to_end(k)
                parts.append(ids)
            out.append(np.zeros(0, np.uint32) if not parts else parts[0] if len(parts) == 1 else np.concatenate(parts))
        for k, ids in new.items():
            self._ids[k] = ids
            self.bytes += ids.nbytes + TOKEN_CACHE_ENTRY_BYTES
        while self.bytes > self.max_bytes and self._ids:
            self.bytes -= self._ids.popitem(last=False)[1].nbytes + TOKEN_CACHE_ENTRY_BYTES
        return out


def _body_max_tokens(body: dict) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def check_block_size(block_size: int) -> None:
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
        assert rec.request_id is not None and rec.arrival_us is not None  # _checked and build_trace see to both
        log_session = rec.session_id
        if log_session is None and rec.group_id in self.shared_groups:
            log_session = rec.group_id
        end = rec.arrival_us + rec.e2e_us if rec.e2e_us is not None else None
        link = self.linker.add(
            rec.request_id, rec.api, rec.body, rec.response, log_session, calls=rec.calls, arrival_us=rec.arrival_us, end_us=end
        )
        t0 = self.t0 = rec.arrival_us if self.t0 is None else self.t0
        ids = self.tokens.prompt_ids([s.text for s in text_slots(rec.body)])
        out = rec.usage.completion_tokens if rec.usage is not None else None
        if out is None and rec.response is not None:
            out = len(self.tokens.prompt_ids([rec.response]))
        # the answer's tool calls: each one's argument tokens, counted as the answer's are
        # (none recorded: a text answer where the log holds the answer, else not known)
        answered = rec.response is not None or bool(rec.calls)
        calls = [len(self.tokens.prompt_ids([a])) for a in rec.calls] if answered and rec.api != "completions" else None
        limit = _body_max_tokens(rec.body)
        body = body_json(rec.body)
        self.chars += len(body) + len(rec.response or "")
        for name, value in (
            ("request_id", rec.request_id),
            ("session_id", link.session_id),
            ("parent_request_id", link.parent_request_id),
            ("turn", link.turn),
            ("api", rec.api),
            ("model", rec.model),
            ("arrival_us", rec.arrival_us - t0),
            ("body", body),
            ("input_tokens", len(ids)),
            ("output_tokens", out),
            ("max_tokens", limit if limit is not None else out),
            ("block_hashes", block_hashes(ids, self.block_size)),
            ("cached_tokens", rec.usage.cached_tokens if rec.usage else None),
            ("status", rec.status),
            ("ttft_us", rec.ttft_us),
            ("e2e_us", rec.e2e_us),
            ("response", rec.response),
            ("depends_on", link.depends_on if rec.depends_on is None else list(rec.depends_on)),
            ("wait_us", link.wait_us if rec.depends_on is None else rec.wait_us),
            ("parent_session_id", link.parent_session_id if rec.depends_on is None else rec.parent_session_id),
            ("tool_calls", calls),
            ("outcome", rec.outcome),
        ):
            self._cols[name].append(value)

    def full(self) -> bool:
        return len(self) >= CHUNK_ROWS or self.chars >= CHUNK_CHARS

    def frame(self) -> pl.DataFrame:
        """The rows added since the last call."""
        cols, self._cols, self.chars = self._cols, defaultdict(list), 0
        return pl.DataFrame({name: pl.Series(cols[name], dtype=dtype) for name, dtype in _LOG_ROW_TYPES.items()})

    def meta(self, source_format: str, report: dict | None) -> TraceMeta:
        """The metadata, once every row was added: the import report ends with the sessions."""
        full_report = {
            "format": source_format,
            **(report or {}),
            "sessions": self.linker.sessions,
            "requests_in_log_sessions": self.linker.in_log_sessions,
            "turns_linked_by_conversation": self.linker.linked,
            "joins_linked_by_answers": self.linker.joins,
            "subagents_linked_by_calls": self.linker.subagents,
        }
        return TraceMeta(
            t0_unix_us=self.t0 or 0,
            source_format=source_format,
            tokenizer=self.tokenizer,
            block_size_tokens=self.block_size,
            hash_algo=HASH_ALGO,
            redaction_policy="none",
            import_report=json.dumps(full_report, separators=(",", ":")),
        )


# the columns of an imported row and their types before the Trace's validation (the span
# importer, capture.importers.otel, adds the agent's name)
ROW_TYPES: dict[str, pl.DataType | type[pl.DataType]] = {
    "request_id": pl.String,
    "session_id": pl.String,
    "parent_request_id": pl.String,
    "turn": pl.Int32,
    "api": pl.String,
    "model": pl.String,
    "arrival_us": pl.Int64,
    "body": pl.String,
    "input_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "max_tokens": pl.Int64,
    "block_hashes": pl.List(pl.UInt64),
    "cached_tokens": pl.Int64,
    "status": pl.Int64,
    "ttft_us": pl.Int64,
    "e2e_us": pl.Int64,
    "response": pl.String,
    "depends_on": pl.List(pl.String),
    "wait_us": pl.Int64,
    "parent_session_id": pl.String,
    "tool_calls": pl.List(pl.Int32),
}
# a log's rows also say how a request ended, where the source records it (Baseten's cancels)
_LOG_ROW_TYPES = {**ROW_TYPES, "outcome": pl.String}


def build_trace(
    records: Sequence[LogRecord],
    *,
    source: str,
    source_format: str,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    report: dict | None = None,
) -> Trace:
    """The Trace of ``records`` (every ``arrival_us`` set) in memory, by the rules in the module
    docstring: the same rows a log of them imports to (:func:`write_log_trace`)."""
    check_block_size(block_size)
    if not records:
        raise TraceError(f"{source}: no requests imported")
    missing = [r.line for r in records if r.arrival_us is None]
    if missing:
        raise TraceError(f"{source}: line {missing[0]}: no arrival time")
    groups = Counter(g for g in map(_group_of, records) if g is not None)
    rows = _Rows(tokenizer, block_size, _shared(groups))
    for i in sorted(range(len(records)), key=lambda i: records[i].arrival_us or 0):  # none is missing (above)
        rows.add(records[i])
    meta = rows.meta(source_format, report)
    return Trace(validate(rows.frame(), meta, source), meta)


class TraceOutput:
    """The Trace file being written, a frame at a time: as it is, or (with a redaction key)
    redacted first, :data:`redact.pipeline.ROW_BATCH` rows at a time
    (:class:`redact.pipeline.Redactor`; quarantined rows are left out), so no raw text is
    written. Removed again on an error."""

    def __init__(self, out: Path, meta: TraceMeta, key: Any | None) -> None:
        self.writer = TraceWriter(out, meta)
        self.key = key
        self.redactor = None
        if key is not None:
            from redact.pipeline import Redactor
            from redact.report import Accounts

            self.redactor = Redactor(key, meta.tokenizer)
            self.accounts = Accounts()
            self.started = time.perf_counter()

    def __enter__(self) -> TraceOutput:
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
            part = self.accounts.add(*self.redactor.redact_rows(df.slice(start, ROW_BATCH), block_size))
            if part.height:
                self.writer.write(part)

    def close(self, meta: TraceMeta) -> Any | None:
        """Finish the file with ``meta`` (and the redaction's); the redaction report, if any."""
        if self.redactor is None or self.key is None:
            self.writer.close(meta)
            return None
        from redact.pipeline import finish_output

        return finish_output(self.writer, self.accounts, self.started, self.writer.path, meta, self.key)


def write_log_trace(
    index: LogIndex,
    parse_line: Callable[[dict], LogRecord],
    out: str | os.PathLike[str],
    *,
    source_format: str,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """The second pass: read the requests of ``index`` again in arrival order and write their
    rows to the Trace file ``out``, a chunk (:data:`CHUNK_ROWS` rows or :data:`CHUNK_CHARS`
    characters of bodies and answers, whichever comes first) at a time, each redacted first
    with ``key`` (a :class:`redact.key.RedactionKey`) where one is given.
    ``progress(rows_read)`` is called after each chunk."""
    from capture.importers.tokens import ImportResult

    check_block_size(block_size)
    out = Path(out)
    rows = _Rows(tokenizer, block_size, index.shared_groups)
    start = TraceMeta(
        source_format=source_format,
        tokenizer=tokenizer,
        block_size_tokens=block_size,
        hash_algo=HASH_ALGO,
        redaction_policy="none",
    )
    done = 0
    with TraceOutput(out, start, key) as output:
        if output.redactor is not None:
            # first pass: analyse every text, learning every value found and every message name,
            # before any row is written (a value found in a later request is replaced in
            # earlier ones too)
            texts: list[str] = []
            names: list[str] = []
            for rec in index.records(parse_line):
                texts.extend(s.text for s in text_slots(rec.body))
                names.extend(s.text for s in name_slots(rec.body))
                if rec.response:
                    texts.append(rec.response)
                if len(texts) >= CHUNK_ROWS:
                    output.redactor.learn(texts, names)
                    texts, names = [], []
            output.redactor.learn(texts, names)

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
