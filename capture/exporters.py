"""Exporters of a Trace into other tools' formats, streaming (the library side of ``replay export``).

Owns :data:`EXPORT_FORMATS`, :class:`ExportResult`, :func:`export_trace` and :func:`mooncake_hash_ids`.
The trace is read with its small columns in memory and its bodies a window at a time (null bodies
built by :mod:`replay.synth` as the replay would build them); lines are written as they are made,
to a hidden file (a hidden folder for ``inference-perf``) renamed over ``out`` at the end (nothing
half-written on an error). The formats that group requests (``dag``: a session a line;
``inference-perf``: a root session and its subagents a file) hold the turns of the groups still
open, and write a group when its last request is read.

The second lock (:mod:`redact.lock`): unless the trace is raw (``redaction_policy`` "none"), every
string of each line (JSON keys and values; a whole session's line or file for the grouping formats)
is scanned before it is written; one with a PII shape whose exact string is not a surrogate of the
trace's ``lock_exempt`` is not written, and is counted per type found
(:attr:`ExportResult.quarantined`, in lines or files). A raw trace bypasses the lock
(:attr:`ExportResult.locked` is False) and its lines are written as stored.

- ``mooncake``: Mooncake JSON Lines, ``{"timestamp", "input_length", "output_length",
  "hash_ids"}``. ``timestamp`` is ms from the first request; ``output_length`` is
  ``output_tokens``, else ``max_tokens``, else 0. ``hash_ids`` has one id per ``block_size``
  tokens of the prompt's token ids (the synthesized text's, or the body's text under the trace's
  tokenizer), the partial last block included: the chained hash of the block and everything
  before it (:func:`replay.blocks.chain_hash`; a partial block is hashed with its own tokens),
  numbered 0, 1, 2, ... in order of first appearance. Two requests share leading ids exactly as
  long as they share leading blocks of tokens. The block size is the reader's too: a tool that
  reads these ids with another block size (vLLM's ``benchmarks`` ``timed_trace`` reader assumes
  16 unless told) makes prompts of ``len(hash_ids) * its_block`` tokens, far shorter than
  ``input_length`` for 512-token ids, without a warning.
- ``vllm``: vLLM's ``timed_trace`` (``vllm bench serve --dataset-name timed_trace``): the
  ``mooncake`` fields with ``timestamp`` in **seconds** (the reader's default
  ``--timed-trace-sec-multiplier 1``) and ids of **16** tokens by default (its default
  ``--timed-trace-chunk-hash-size``); another ``block_size`` must be passed to it.
- ``guidellm``: GuideLLM's trace replay: the ``vllm`` fields with ids of 512 tokens by default,
  and ``duration`` (``e2e_us`` in seconds, where recorded: its ``schedule_turn=idle_gap`` keeps
  the gap after it). ``kind=trace_synthetic`` reads ``timestamp`` (s), ``input_length``,
  ``output_length`` and ignores ``hash_ids``; ``kind=mooncake`` reads the ids too, with
  ``hash_id_block_size`` (default 512) set to ``block_size``.
- ``aiperf``: AIPerf's ``mooncake_trace`` with text: ``{"timestamp", "session_id"?,
  "messages" | "text_input", "output_length"}``; a chat body's ``messages`` as they are, any
  other body's prompt text (:func:`replay.bodies.text_slots`: a completions ``prompt``, a
  Responses API ``instructions`` and ``input``, an embeddings ``input``) as ``text_input``.
- ``dag``: AIPerf's ``dag_jsonl``, a session a line (a row without a session is one of its own,
  named by its ``request_id``): ``{"session_id", "context_mode": "message_array_with_responses",
  "turns": [{"messages", "max_tokens"?, "tools"?, "extra"?, "delay"?, "spawns"?}],
  "pre_session_spawns"?}``. Each turn is the request's own message array, sent as it is (the
  context mode: no accumulation, no live answers threaded in), a non-chat body's prompt text as
  one user message; ``max_tokens`` is ``output_tokens``, else the body's limit; ``extra`` the
  body's other parameters (``model`` and ``stream`` are left to AIPerf). ``delay`` is ms after the
  previous turn (or the spawning turn) ended: ``wait_us``, else the gap from its recorded end
  (``arrival_us + e2e_us``, its arrival where ``e2e_us`` is null). A session whose first request
  depends on a request of another session (else names it in ``parent_session_id``) is a SPAWN of
  that turn (``pre_session_spawns`` when it starts before the parent's first turn); the first
  later turn of the parent that depends on one of its requests is the spawn's ``join_at``.
  Counted in :attr:`ExportResult.unmapped`, because ``dag_jsonl`` cannot say it: root sessions'
  arrival times (AIPerf paces roots itself), a turn whose in-session dependencies are not just the
  previous turn (joins or parallel requests inside a session are serialized), further
  cross-session dependencies (a first request depending on several sessions, or a turn on a
  session it did not spawn), subagents nothing joins that were spawned before the parent's last
  turn (they are joined at it), joins on subagents that start before their parent's first turn,
  and non-chat bodies.
- ``inference-perf``: a folder of inference-perf's OTel replay files, one JSON file per root
  session with its subagent sessions (``{"trace_id", "span_count", "collected_at", "spans"}``), a
  ``chat`` span per request: ``start_time`` its arrival, ``end_time`` arrival + ``e2e_us`` (its
  arrival where null), ISO 8601 UTC to the µs; attributes ``gen_ai.operation.name`` "chat",
  ``gen_ai.input.messages`` (the body's messages as a JSON string, a non-chat body's prompt as
  one user message), ``gen_ai.output.text`` (``response``, where stored),
  ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.request.model`` /
  ``max_tokens``, ``gen_ai.conversation.id``, ``gen_ai.tool.definitions``; ``status.code`` 2 for
  an HTTP status >= 400, else 1. inference-perf ignores span parents and rebuilds dependencies
  from these times (each call waits for the latest call that ended before it started) and from
  answers quoted in later inputs: chains and fan-out come back as ``depends_on``; a join comes
  back with its latest dependency only unless the dependencies' answers are in its input.
- ``openai``: an OpenAI request log as ``replay import openai`` reads it: ``timestamp`` (ISO 8601,
  UTC, µs), ``request_id``, ``session_id``, ``url`` (for a Responses API or embeddings row, whose
  body alone does not say which), ``body``, and where the trace has them ``response``
  (the answer's text), ``usage`` (``prompt_tokens``, ``completion_tokens``,
  ``prompt_tokens_details.cached_tokens``), ``ttft_ms``, ``latency_ms``, ``status``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from replay.bodies import text_slots
from replay.errors import ConfigError, TraceError
from replay.plan import API_PATHS
from replay.trace import Trace, read_trace

if TYPE_CHECKING:
    from replay.synth import Synthesizer

__all__ = ["EXPORT_FORMATS", "ExportResult", "export_trace", "mooncake_hash_ids", "default_block_size"]

EXPORT_FORMATS = ("mooncake", "vllm", "guidellm", "aiperf", "dag", "inference-perf", "openai")
_BLOCK_FORMATS = {"mooncake": 512, "vllm": 16, "guidellm": 512}  # format -> default tokens per hash id
_WINDOW = 1024
_COLUMNS = (
    "request_id",
    "api",
    "model",
    "session_id",
    "arrival_us",
    "input_tokens",
    "output_tokens",
    "max_tokens",
    "hash_ids",
    "response",
    "cached_tokens",
    "status",
    "ttft_us",
    "e2e_us",
)


def default_block_size(format: str) -> int | None:
    """The tokens per hash id ``format`` writes unless told (its reader's default), or None for a
    format without hash ids."""
    return _BLOCK_FORMATS.get(format)


def mooncake_hash_ids(token_ids: np.ndarray, block_size: int, numbering: dict[int, int]) -> list[int]:
    """Mooncake ids of one prompt (see the module docstring); ``numbering`` maps chained hashes
    to ids across the trace and is updated in place."""
    from replay.blocks import chain_hash

    out: list[int] = []
    parent = None
    for start in range(0, len(token_ids), block_size):
        parent = chain_hash(parent, token_ids[start : start + block_size])
        out.append(numbering.setdefault(parent, len(numbering)))
    return out


def _ms(us: int) -> int | float:
    return us // 1000 if us % 1000 == 0 else round(us / 1000, 3)


def _iso(us: int) -> str:
    stamp = datetime.fromtimestamp(us // 1_000_000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{us % 1_000_000:06d}Z"


def _dumps(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _output_length(row: dict) -> int | None:
    return row["output_tokens"] if row["output_tokens"] is not None else row["max_tokens"]


def _chat_messages(obj: dict) -> list:
    """The body's ``messages``, or a non-chat body's prompt text as one user message."""
    if isinstance(obj.get("messages"), list):
        return obj["messages"]
    return [{"role": "user", "content": "".join(s.text for s in text_slots(obj))}]


@dataclass(frozen=True)
class ExportResult:
    """Records written, the records the second lock kept out (per type found), and what the format
    could not express (a one-line reason -> how many times; see the module docstring)."""

    written: int
    quarantined: Counter = field(default_factory=Counter)  # type -> records kept out
    locked: bool = True  # False: a raw trace, written without the lock
    unmapped: Counter = field(default_factory=Counter)


def _lock_of(trace: Trace, source: str) -> Callable[[dict], Counter] | None:
    """The second lock for the trace's lines (a line -> its hits per type, surrogates of the trace's
    ``lock_exempt`` left out), or None for a raw trace (the lock is bypassed)."""
    if trace.meta.raw_text:
        return None
    from redact.lock import Exempt, check, strings_of

    try:
        exempt = Exempt.from_meta(trace.meta.lock_exempt)
    except ValueError as e:
        raise TraceError(f"{source}: metadata 'lock_exempt': {e}") from None
    return lambda line: check(strings_of(line), exempt)


def export_trace(
    format: str,
    trace: str | os.PathLike[str] | Trace,
    out: str | os.PathLike[str],
    *,
    block_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    """Write ``trace`` (a path or a Trace) to ``out`` (a file; a folder for ``inference-perf``) in
    ``format`` (see the module docstring). ``block_size``: tokens per hash id of ``mooncake``,
    ``vllm`` and ``guidellm`` (default :func:`default_block_size`); ``progress(records done)``."""
    if format not in EXPORT_FORMATS:
        raise ConfigError(f"format '{format}' unknown (known: {', '.join(EXPORT_FORMATS)})")
    if block_size is not None and format not in _BLOCK_FORMATS:
        raise ConfigError(f"--block-size: only for {', '.join(_BLOCK_FORMATS)} (the other formats carry text)")
    block = block_size if block_size is not None else _BLOCK_FORMATS.get(format, 512)
    if block <= 0:
        raise ConfigError(f"--block-size: must be positive, got {block}")
    source = "trace"
    if not isinstance(trace, Trace):
        source = Path(trace).name
        trace = read_trace(trace, bodies=False)
    lock = _lock_of(trace, source)
    writer: _Writer = _WRITERS[format](trace, block)
    writer.lock = lock
    sink: _Sink = _Folder(Path(out)) if format == "inference-perf" else _Lines(Path(out))
    quarantined: Counter = Counter()
    dropped: set[str] = set()
    small = trace.df.select(*_COLUMNS)
    done = written = 0

    def emit(units: Iterable[dict | _Packed]) -> None:
        nonlocal written
        for unit in units:
            if not isinstance(unit, _Packed):
                unit = _Packed("", _dumps(unit), writer.check(unit))
            if unit.found:
                quarantined.update(unit.found.keys())
                dropped.add(unit.key)
                continue
            sink.write(unit.text, unit.key)
            written += 1

    try:
        synthesize = format not in _BLOCK_FORMATS  # the ids formats need token ids, not text
        for batch in trace.body_batches(len(trace), _WINDOW, synthesize=synthesize):
            rows = small.slice(done, len(batch)).to_dicts()  # a window at a time
            for i, (row, body) in enumerate(zip(rows, batch)):
                emit(writer.add(done + i, row, body))
            done += len(batch)
            sink.flush()
            if progress is not None:
                progress(done)
        emit(writer.close())
        if dropped:
            sink.rewrite(lambda unit: writer.repair(unit, dropped))
        sink.commit()
    except OSError as e:
        sink.abort()
        raise TraceError(f"{Path(out).name}: cannot write ({e.strerror or e})") from e
    except BaseException:
        sink.abort()
        raise
    return ExportResult(written, quarantined, locked=lock is not None, unmapped=writer.unmapped)


class _Sink:
    """Where the units go: a hidden temporary renamed over ``out`` by :meth:`commit`."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")

    def write(self, text: str, key: str) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def rewrite(self, fix: Callable[[dict], dict]) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError


class _Lines(_Sink):
    """A JSON Lines file, a unit a line."""

    def __init__(self, out: Path) -> None:
        super().__init__(out)
        self.f = self.tmp.open("w", encoding="utf-8")
        self.pending: list[str] = []

    def write(self, text: str, key: str) -> None:
        self.pending.append(text + "\n")

    def flush(self) -> None:
        self.f.write("".join(self.pending))
        self.pending.clear()

    def rewrite(self, fix: Callable[[dict], dict]) -> None:
        """Pass the written lines through ``fix`` (streaming, into a second temporary)."""
        self.flush()
        self.f.close()
        second = self.tmp.with_name(self.tmp.name + "2")
        try:
            with self.tmp.open(encoding="utf-8") as src, second.open("w", encoding="utf-8") as dst:
                for line in src:
                    dst.write(_dumps(fix(json.loads(line))) + "\n")
            os.replace(second, self.tmp)
        finally:
            second.unlink(missing_ok=True)
        self.f = self.tmp.open("a", encoding="utf-8")

    def commit(self) -> None:
        self.flush()
        self.f.close()
        os.replace(self.tmp, self.out)

    def abort(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)


class _Folder(_Sink):
    """A folder of JSON files, a unit a file named by its key (the ``trace_id``; made file-safe,
    numbered in order of writing so two ids that clean to the same name stay apart)."""

    def __init__(self, out: Path) -> None:
        super().__init__(out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"{out}: exists and is not a folder (inference-perf reads a folder of files)")
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir()
        self.n = 0

    def write(self, text: str, key: str) -> None:
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", key)[:80]
        (self.tmp / f"{self.n:06d}-{name}.json").write_text(text, encoding="utf-8")
        self.n += 1

    def rewrite(self, fix: Callable[[dict], dict]) -> None:
        pass  # files do not name each other

    def commit(self) -> None:
        old = self.out.with_name(f".{self.out.name}.{os.getpid()}.old")
        if self.out.exists():
            os.replace(self.out, old)
        os.replace(self.tmp, self.out)
        shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class _Packed:
    """A unit kept as text: a grouping format's line or file, assembled from parts that the lock
    checked as they came (``found``: their hits per type), so an open group holds compact JSON text
    rather than parsed objects. ``key``: what other units name it by (see :meth:`_Writer.repair`)."""

    key: str
    text: str
    found: Counter


class _Group:
    """The parts of one open group, as JSON text, and the lock's hits in them."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.found: Counter = Counter()

    def pack(self, key: str, head: dict, name: str, found: Counter) -> _Packed:
        """``head`` with ``name`` (the parts, a JSON array) added last, as one unit."""
        text = _dumps(head)[:-1] + f',"{name}":[' + ",".join(self.parts) + "]}"
        return _Packed(key, text, self.found + found)


class _Writer:
    """Makes a format's units (lines, or files) from rows: :meth:`add` is given each row in order
    and returns the units it completes; :meth:`close` the rest. ``lock`` is the trace's second
    lock (None: a raw trace)."""

    lock: Callable[[dict], Counter] | None = None

    def __init__(self, trace: Trace, block_size: int) -> None:
        self.unmapped: Counter = Counter()

    def check(self, obj: dict) -> Counter:
        """The lock's hits in ``obj`` per type (none for a raw trace)."""
        return self.lock(obj) if self.lock is not None else Counter()

    def put(self, group: _Group, obj: dict) -> None:
        group.parts.append(_dumps(obj))
        group.found.update(self.check(obj))

    def add(self, i: int, row: dict, body: str | None) -> list[dict | _Packed]:
        return [self.line(row, body)]

    def line(self, row: dict, body: Any) -> dict:
        raise NotImplementedError

    def close(self) -> list[dict | _Packed]:
        return []

    def repair(self, unit: dict, dropped: set[str]) -> dict:
        """``unit`` with its references to the units the lock kept out removed."""
        return unit


class _Mooncake(_Writer):
    seconds = False  # timestamps in ms (Mooncake, AIPerf) or s (vLLM, GuideLLM)

    def __init__(self, trace: Trace, block_size: int) -> None:
        super().__init__(trace, block_size)
        from replay.tokenizer import load_tokenizer

        self.block_size = block_size
        self.numbering: dict[int, int] = {}
        self.tok = load_tokenizer(trace.meta.tokenizer)
        self.synth: Synthesizer | None = None
        if trace.meta.synthesis:
            from replay.synth import Synthesis, Synthesizer

            self.synth = Synthesizer(trace.meta.tokenizer, Synthesis.parse(trace.meta.synthesis, "trace"))

    def token_ids(self, row: dict, body: str | None) -> np.ndarray:
        if body is None:
            if self.synth is None:
                raise TraceError(f"row {row['request_id']!r} has no body, and the trace no synthesis rule to build its tokens")
            return self.synth.token_ids(row["request_id"], row["input_tokens"], row["hash_ids"])
        from replay.bodies import prompt_token_ids

        return prompt_token_ids([s.text for s in text_slots(json.loads(body))], self.tok)

    def line(self, row: dict, body: str | None) -> dict:
        ids = self.token_ids(row, body)
        us = row["arrival_us"]
        return {
            "timestamp": us / 1_000_000 if self.seconds else _ms(us),
            "input_length": len(ids),
            "output_length": _output_length(row) or 0,
            "hash_ids": mooncake_hash_ids(ids, self.block_size, self.numbering),
        }


class _TimedTrace(_Mooncake):
    seconds = True


class _GuideLLM(_TimedTrace):
    def line(self, row: dict, body: str | None) -> dict:
        line = super().line(row, body)
        if row["e2e_us"] is not None:
            line["duration"] = row["e2e_us"] / 1_000_000
        return line


class _AIPerf(_Writer):
    def line(self, row: dict, body: str) -> dict:
        obj = json.loads(body)
        line: dict = {"timestamp": _ms(row["arrival_us"])}
        if row["session_id"] is not None:
            line["session_id"] = row["session_id"]
        if isinstance(obj.get("messages"), list):
            line["messages"] = obj["messages"]
        else:  # a completions prompt, a Responses API or embeddings input: its text
            line["text_input"] = "".join(s.text for s in text_slots(obj))
        out = _output_length(row)
        if out is not None:
            line["output_length"] = out
        return line


class _OpenAI(_Writer):
    def __init__(self, trace: Trace, block_size: int) -> None:
        super().__init__(trace, block_size)
        self.t0 = trace.meta.t0_unix_us

    def line(self, row: dict, body: str) -> dict:
        line: dict = {"timestamp": _iso(self.t0 + row["arrival_us"]), "request_id": row["request_id"]}
        if row["session_id"] is not None:
            line["session_id"] = row["session_id"]
        if row["api"] not in ("chat", "completions"):  # a body with 'input': the url says which API
            line["url"] = API_PATHS[row["api"]]
        line["body"] = json.loads(body)
        if row["response"] is not None:
            line["response"] = row["response"]
        if row["output_tokens"] is not None:
            usage: dict = {"prompt_tokens": row["input_tokens"], "completion_tokens": row["output_tokens"]}
            if row["cached_tokens"] is not None:
                usage["prompt_tokens_details"] = {"cached_tokens": row["cached_tokens"]}
            line["usage"] = usage
        for name, key in (("ttft_us", "ttft_ms"), ("e2e_us", "latency_ms")):
            if row[name] is not None:
                line[key] = row[name] / 1000
        if row["status"] is not None:
            line["status"] = row["status"]
        return line


class _Sessions:
    """The trace's sessions as the grouping formats see them (from the small columns, in memory):
    each row's session (its ``request_id`` where it has none), its turn (position in the session),
    each session's last row, and each subagent session's spawn: the session and turn it starts
    from (the latest of its first request's dependencies in another session; else the
    ``parent_session_id``'s latest request arriving before it, turn -1 where none does)."""

    def __init__(self, trace: Trace) -> None:
        df = trace.df
        self.rids: list[str] = df["request_id"].to_list()
        self.session: list[str] = [s if s is not None else r for s, r in zip(df["session_id"].to_list(), self.rids)]
        self.deps: list[list[str]] = [d or [] for d in df["depends_on"].to_list()]
        self.wait: list[int | None] = df["wait_us"].to_list()
        self.arrival: list[int] = df["arrival_us"].to_list()
        e2e = df["e2e_us"].to_list()
        self.end: list[int] = [a + (e or 0) for a, e in zip(self.arrival, e2e)]
        self.index = {r: i for i, r in enumerate(self.rids)}
        self.turn: list[int] = []
        self.rows: dict[str, list[int]] = {}
        for i, s in enumerate(self.session):
            rows = self.rows.setdefault(s, [])
            self.turn.append(len(rows))
            rows.append(i)
        self.spawn: dict[str, tuple[str, int, int | None]] = {}  # child -> (parent, turn, row)
        self.cross_first = 0  # sessions whose first request waits on several other sessions
        parents = df["parent_session_id"].to_list()
        for s, rows in self.rows.items():
            first = rows[0]
            cross = [self.index[d] for d in self.deps[first] if d in self.index and self.session[self.index[d]] != s]
            if cross:
                j = max(cross)
                self.spawn[s] = (self.session[j], self.turn[j], j)
                if len({self.session[k] for k in cross}) > 1:
                    self.cross_first += 1
                continue
            p = parents[first]
            if p is not None and p != s and p in self.rows:
                before = [k for k in self.rows[p] if k < first]
                self.spawn[s] = (p, self.turn[before[-1]], before[-1]) if before else (p, -1, None)

    def last(self, i: int) -> bool:
        return self.rows[self.session[i]][-1] == i

    def root(self, s: str) -> str:
        seen = {s}
        while s in self.spawn and self.spawn[s][0] not in seen:
            s = self.spawn[s][0]
            seen.add(s)
        return s


_NATIVE = frozenset(("messages", "tools", "model", "max_tokens", "max_completion_tokens", "stream", "stream_options"))


class _Dag(_Writer):
    def __init__(self, trace: Trace, block_size: int) -> None:
        super().__init__(trace, block_size)
        self.s = s = _Sessions(trace)
        # spawns[(parent, turn)] -> {join_at (None: not joined) -> children}; turn -1: pre-session
        self.spawns: dict[tuple[str, int], dict[int | None, list[str]]] = {}
        joins: dict[str, int] = {}
        u = self.unmapped
        for i, deps in enumerate(s.deps):
            me, k = s.session[i], s.turn[i]
            inside = {s.index[d] for d in deps if d in s.index and s.session[s.index[d]] == me}
            if inside and (k == 0 or inside != {s.rows[me][k - 1]}):
                u["turns whose in-session dependencies are not just the previous turn (serialized)"] += 1
            if k == 0:
                continue
            for d in deps:
                j = s.index.get(d)
                if j is None or s.session[j] == me:
                    continue
                spawned = s.spawn.get(s.session[j])
                if spawned is not None and spawned[0] == me:  # a join on a subagent of this session
                    if spawned[1] < k:
                        joins[s.session[j]] = min(joins.get(s.session[j], k), k)
                else:
                    u["dependencies on a session the turn's session did not spawn (dropped)"] += 1
        for child, (parent, turn, _row) in s.spawn.items():
            join = joins.get(child)  # always after the spawning turn: a dependency ends before
            if turn < 0 and join is not None:
                u["joins on subagents that start before their parent (pre_session_spawns are not joined)"] += 1
            n = len(s.rows[parent])
            if join is None and 0 <= turn < n - 1:
                u["subagents nothing joins, spawned before the parent's last turn (joined at it)"] += 1
                join = n - 1
            self.spawns.setdefault((parent, turn), {}).setdefault(join, []).append(child)
        if s.cross_first:
            u["cross-session dependencies of a subagent's first request beyond its spawn (dropped)"] += s.cross_first
        roots = len(s.rows) - len(s.spawn)
        if roots > 1:
            u["root sessions whose arrival times are not expressible (AIPerf paces roots itself)"] += roots
        self.open: dict[str, _Group] = {}

    def delay_us(self, i: int) -> int:
        s = self.s
        me, k = s.session[i], s.turn[i]
        wait = s.wait[i]
        if wait is not None:
            return wait
        spawned_by = s.spawn[me][2] if me in s.spawn else None
        if k > 0:
            since = s.end[s.rows[me][k - 1]]
        elif spawned_by is not None:
            since = s.end[spawned_by]
        else:
            return 0
        return max(0, s.arrival[i] - since)

    def add(self, i: int, row: dict, body: str | None) -> list[dict | _Packed]:
        s = self.s
        me, k = s.session[i], s.turn[i]
        obj = json.loads(body or "{}")
        if not isinstance(obj.get("messages"), list):
            self.unmapped["non-chat bodies sent as one user message"] += 1
        turn: dict = {"messages": _chat_messages(obj)}
        out = row["output_tokens"] if row["output_tokens"] else (obj.get("max_completion_tokens") or obj.get("max_tokens"))
        if isinstance(out, int) and out >= 1:
            turn["max_tokens"] = out
        if isinstance(obj.get("tools"), list) and isinstance(obj.get("messages"), list):
            turn["tools"] = obj["tools"]
        extra = {key: v for key, v in obj.items() if key not in _NATIVE} if "messages" in obj else {}
        if extra:
            turn["extra"] = extra
        if k > 0 or me in s.spawn:
            delay = self.delay_us(i)
            if delay:
                turn["delay"] = _ms(delay)
        spawns = self.spawns.get((me, k))
        if spawns:
            entries: list = []
            for join, children in spawns.items():  # a bare id is a spawn nothing joins
                if join is None:
                    entries.extend(children)
                else:
                    entries.append({"children": children, "join_at": join})
            turn["spawns"] = entries
        self.put(self.open.setdefault(me, _Group()), turn)
        if not s.last(i):
            return []
        head: dict = {"session_id": me, "context_mode": "message_array_with_responses"}
        pre = self.spawns.get((me, -1))
        if pre:
            head["pre_session_spawns"] = [c for children in pre.values() for c in children]
        return [self.open.pop(me).pack(me, head, "turns", self.check(head))]

    def repair(self, unit: dict, dropped: set[str]) -> dict:
        """Drop spawns of sessions the lock kept out (their children start as roots)."""
        for turn in unit["turns"]:
            if "spawns" not in turn:
                continue
            kept: list = []
            for entry in turn["spawns"]:
                if isinstance(entry, str):
                    if entry not in dropped:
                        kept.append(entry)
                    continue
                children = [c for c in entry["children"] if c not in dropped]
                if children:
                    kept.append({**entry, "children": children})
            if kept:
                turn["spawns"] = kept
            else:
                del turn["spawns"]
        if "pre_session_spawns" in unit:
            unit["pre_session_spawns"] = [c for c in unit["pre_session_spawns"] if c not in dropped]
            if not unit["pre_session_spawns"]:
                del unit["pre_session_spawns"]
        return unit


class _InferencePerf(_Writer):
    def __init__(self, trace: Trace, block_size: int) -> None:
        super().__init__(trace, block_size)
        self.s = s = _Sessions(trace)
        self.t0 = trace.meta.t0_unix_us
        self.group = [s.root(sid) for sid in s.session]
        self.last_row: dict[str, int] = {}
        for i, g in enumerate(self.group):
            self.last_row[g] = i
        self.open: dict[str, _Group] = {}
        self.first: dict[str, str] = {}  # group -> its first span's start

    def add(self, i: int, row: dict, body: str | None) -> list[dict | _Packed]:
        s, g = self.s, self.group[i]
        obj = json.loads(body or "{}")
        attrs: dict = {"gen_ai.operation.name": "chat"}
        if row["model"] is not None:
            attrs["gen_ai.request.model"] = row["model"]
        attrs["gen_ai.conversation.id"] = s.session[i]
        attrs["gen_ai.input.messages"] = json.dumps(_chat_messages(obj), ensure_ascii=False)
        if row["response"] is not None:
            attrs["gen_ai.output.text"] = row["response"]
        attrs["gen_ai.usage.input_tokens"] = row["input_tokens"]
        if row["output_tokens"] is not None:
            attrs["gen_ai.usage.output_tokens"] = row["output_tokens"]
        if row["max_tokens"] is not None:
            attrs["gen_ai.request.max_tokens"] = row["max_tokens"]
        if isinstance(obj.get("tools"), list):
            attrs["gen_ai.tool.definitions"] = json.dumps(obj["tools"], ensure_ascii=False)
        status = row["status"]
        span = {
            "trace_id": g,
            "span_id": row["request_id"],
            "parent_span_id": None,
            "name": f"chat {row['model']}" if row["model"] else "chat",
            "kind": "SPAN_KIND_CLIENT",
            "start_time": _iso(self.t0 + s.arrival[i]),
            "end_time": _iso(self.t0 + s.end[i]),
            "attributes": attrs,
            "resource_attributes": {"service.name": "faithful-replay"},
            "status": {"code": 2 if status is not None and status >= 400 else 1},
        }
        group = self.open.setdefault(g, _Group())
        self.first.setdefault(g, span["start_time"])
        self.put(group, span)
        if self.last_row[g] != i:
            return []
        del self.open[g]
        head = {"trace_id": g, "span_count": len(group.parts), "collected_at": self.first.pop(g)}
        return [group.pack(g, head, "spans", self.check(head))]


_WRITERS: dict[str, Callable[[Trace, int], _Writer]] = {
    "mooncake": _Mooncake,
    "vllm": _TimedTrace,
    "guidellm": _GuideLLM,
    "aiperf": _AIPerf,
    "dag": _Dag,
    "inference-perf": _InferencePerf,
    "openai": _OpenAI,
}
