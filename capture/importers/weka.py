"""Importer of Weka's Claude Code traces (the KV-cache trace format of
callanjfox/agentic-coding-analysis, published by SemiAnalysis / Weka) into a Trace.

Owns :func:`import_weka`. A trace is one conversation, a JSON object (docs/TRACE_FORMAT.md of
that repository): ``id``, ``models``, ``block_size`` (tokens per hash id, 64 recommended),
``hash_id_scope`` (``local``: ids numbered per trace; ``global``: one numbering for every trace),
``tool_tokens``, ``system_tokens``, ``requests`` (in order) and optional ``totals`` /
``_analysis``. A request: ``t`` (seconds from the conversation's start), ``type`` (``n`` / ``s``:
an API call; ``subagent``: a nested agent), ``model``, ``in`` / ``out`` (tokens), ``hash_ids``
(one per full block; a trailing id for the partial block is tolerated, as GuideLLM does),
``input_types``, ``output_types``, ``stop``, ``api_time`` (s, the whole response), ``ttft`` (s),
``think_time`` (s since the previous response completed). A subagent entry: ``t`` (its spawn),
``agent_id``, ``subagent_type``, ``duration_ms``, ``status``, ``models``, ``requests`` (the same
request schema; their ``t`` from the subagent's start when the first is earlier than the entry's
``t``, as AIPerf's loader reads them, else from the conversation's).

Input: a ``.json`` file of one trace, a folder of them (any depth, name order), or a JSON Lines
file (``.gz`` streamed) of one trace a line. One trace is held at a time.

What becomes what: each API call is a chat request with a null body (synthesized at replay):
``input_tokens`` ``in``, ``output_tokens`` ``out``, ``model``, ``e2e_us`` ``api_time``, ``ttft_us``
``ttft``, ``arrival_us`` ``t`` (every conversation starts at 0: the format has no absolute time),
``request_id`` ``<trace id>:<n>`` (``<trace id>/<agent_id>:<n>`` in a subagent), ``session_id``
the trace id (a subagent: ``<trace id>/<agent_id>``, ``parent_session_id`` the trace's,
``agent`` its ``subagent_type``). ``hash_ids``: the trace's ids (``local`` ones made unique to
the trace by a blake2b-64 of the trace id and the id; ``global`` ones kept), plus, where the file
left the partial last block out, one id of the request's own for it; ``synthesis.block_tokens``
is ``block_size`` (every trace of one import must have the same).

The DAG: a request depends on the previous request of its session, ``wait_us`` its arrival less
that request's end (``t + api_time``; without ``api_time``, its ``think_time``). A subagent's
first request depends on the parent's latest request at or before the spawn; the parent's next
request after a subagent entry depends on the subagent's last request too (a join), unless the
entry's ``status`` is ``async_launched`` (the parent did not wait). A dependency arriving after
its dependent is left out and counted.

Not mapped (``import_report``): ``tool_tokens`` / ``system_tokens`` (the warm shared prefix; the
hash ids already hold it), ``input_types``, ``output_types``, ``stop`` (counted), ``type`` ``n``
/ ``s`` (counted), the subagent entries' ``duration_ms``, ``total_tokens``, ``tool_use_count``,
``models``, and ``totals`` / ``_analysis``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture.importers.records import BadLines, LineError, count
from capture.importers.tokens import ImportResult, TokenRecord, read_jsonl_rows, time_ordered, write_token_trace
from replay.errors import ConfigError, TraceError
from replay.synth import Synthesis

__all__ = ["SOURCE_FORMAT", "WEKA_BLOCK_TOKENS", "import_weka"]

SOURCE_FORMAT = "weka-trace"
WEKA_BLOCK_TOKENS = 64  # the format's recommended block size
NOT_MAPPED = (
    "tool_tokens",
    "system_tokens",
    "input_types",
    "output_types",
    "stop",
    "type",
    "subagent.duration_ms",
    "subagent.total_tokens",
    "subagent.tool_use_count",
    "subagent.models",
    "totals",
    "_analysis",
)


def _key(*parts: object) -> int:
    """A 64-bit id from its parts (blake2b-64): a trace-local hash id made unique to the trace."""
    text = "\x00".join(str(p) for p in parts)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _seconds(value: Any, field: str, required: bool = True) -> float | None:
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LineError(f"{value!r} is not a time in seconds >= 0" if value is not None else "is missing", field)
    return float(value)


def _us(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1_000_000)


@dataclass(slots=True)
class _Done:
    request_id: str
    arrival: int
    end: int | None


class _Traces:
    def __init__(self, model: str | None) -> None:
        self.model = model
        self.block: int | None = None
        self.counts: Counter = Counter()
        self.stops: Counter = Counter()
        self.types: Counter = Counter()
        self.numbered: Counter = Counter()

    def report(self) -> dict[str, Any]:
        c = self.counts
        return {
            "traces": c["traces"],
            "api_calls": c["calls"],
            "subagents": c["subagents"],
            "async_subagents": c["async_subagents"],
            "partial_block_ids_added": c["tail_ids"],
            "edges": {"chain": c["edges_chain"], "spawn": c["edges_spawn"], "join": c["edges_join"]},
            "edges_dropped_out_of_time": c["edges_dropped"],
            "waits_from_think_time": c["waits_think"],
            "waits_clamped": c["waits_clamped"],
            "stop": dict(sorted(self.stops.items())),
            "type": dict(sorted(self.types.items())),
        }

    def records(self, obj: Any) -> list[TokenRecord]:
        trace = obj if isinstance(obj, dict) else None
        if trace is None:
            raise LineError("is not a trace object")
        tid = trace.get("id")
        if isinstance(tid, bool) or not isinstance(tid, (str, int)) or tid == "":
            raise LineError(f"{tid!r} is not a trace id", "id")
        tid = str(tid)
        kept = (self.counts.copy(), self.stops.copy(), self.types.copy(), self.block)
        try:
            out = self._trace(tid, trace)
        except LineError as e:
            self.counts, self.stops, self.types, self.block = kept  # a bad trace counts for nothing
            raise LineError(f"trace {tid}: {e.what}", e.field) from None
        self.counts["traces"] += 1
        return out

    def _trace(self, tid: str, trace: dict) -> list[TokenRecord]:
        block = count(trace.get("block_size"), "block_size")
        if block is None or block < 1:
            raise LineError(f"{trace.get('block_size')!r} is not a block size >= 1", "block_size")
        if self.block is None:
            self.block = block
        elif block != self.block:
            raise LineError(f"is {block}, an earlier trace's is {self.block} (one block size an import)", "block_size")
        scope = trace.get("hash_id_scope", "local")
        if scope not in ("local", "global"):
            raise LineError(f"{scope!r} is neither 'local' nor 'global'", "hash_id_scope")
        requests = trace.get("requests")
        if not isinstance(requests, list):
            raise LineError("is not a list", "requests")
        self.numbered = Counter()  # the requests of each of the trace's sessions so far
        out: list[TokenRecord] = []
        last: _Done | None = None  # the parent's latest request
        joins: list[_Done] = []  # subagents' last requests the parent's next request waits for
        for i, req in enumerate(requests):
            field = f"requests[{i}]"
            if not isinstance(req, dict):
                raise LineError("is not an object", field)
            if req.get("type") == "subagent":
                spawn = _seconds(req.get("t"), f"{field}.t")
                assert spawn is not None
                aid = req.get("agent_id")
                if isinstance(aid, bool) or not isinstance(aid, (str, int)) or aid == "":
                    raise LineError(f"{aid!r} is not an agent id", f"{field}.agent_id")
                inner = req.get("requests")
                if not isinstance(inner, list):
                    raise LineError("is not a list", f"{field}.requests")
                kind = req.get("subagent_type")
                role = kind if isinstance(kind, str) else None
                sid = f"{tid}/{aid}"
                spawner = last if last is not None and last.arrival <= round(spawn * 1_000_000) else None
                first_t = inner[0].get("t") if inner and isinstance(inner[0], dict) else None
                offset = spawn if isinstance(first_t, (int, float)) and first_t < spawn else 0.0
                done = self._session(out, tid, sid, inner, f"{field}.requests", scope, offset, spawner, tid, role)
                self.counts["subagents"] += 1
                if req.get("status") == "async_launched":
                    self.counts["async_subagents"] += 1
                elif done is not None:
                    joins.append(done)
                continue
            done = self._session(out, tid, tid, [req], field, scope, 0.0, last, None, None, joins=joins, single=True)
            joins = []
            last = done
        return out

    def _session(
        self,
        out: list[TokenRecord],
        scope_id: str,
        sid: str,
        reqs: list,
        field: str,
        scope: str,
        offset: float,
        first_dep: _Done | None,
        parent_session: str | None,
        agent: str | None,
        joins: list[_Done] | None = None,
        single: bool = False,
    ) -> _Done | None:
        """Append the API calls ``reqs`` of session ``sid`` (each after the one before);
        ``first_dep`` is what the first waits for, ``joins`` more of it. Returns the last."""
        prev = first_dep
        block = self.block
        assert block is not None
        for j, req in enumerate(reqs):
            f = field if single else f"{field}[{j}]"
            if not isinstance(req, dict):
                raise LineError("is not an object", f)
            kind = req.get("type")
            if kind not in ("n", "s"):
                raise LineError(f"{kind!r} is not 'n', 's' or 'subagent'", f"{f}.type")
            t = _seconds(req.get("t"), f"{f}.t")
            assert t is not None
            n_in = count(req.get("in"), f"{f}.in")
            n_out = count(req.get("out"), f"{f}.out")
            if n_in is None:
                raise LineError("is missing", f"{f}.in")
            api = _seconds(req.get("api_time"), f"{f}.api_time", required=False)
            ttft = _seconds(req.get("ttft"), f"{f}.ttft", required=False)
            think = _seconds(req.get("think_time"), f"{f}.think_time", required=False)
            model = req.get("model")
            if model is not None and not isinstance(model, str):
                raise LineError(f"{model!r} is not a string", f"{f}.model")
            ids = req.get("hash_ids", [])
            if not isinstance(ids, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ids):
                raise LineError("is not a list of integers >= 0", f"{f}.hash_ids")
            full, part = divmod(n_in, block)
            if len(ids) not in (full, full + (1 if part else 0)):
                raise LineError(
                    f"has {len(ids)} ids for {n_in} tokens in blocks of {block} (expected {full}"
                    + (f" or {full + 1})" if part else ")"),
                    f"{f}.hash_ids",
                )
            rid = f"{sid}:{self.numbered[sid]}"
            self.numbered[sid] += 1
            hash_ids = [v if scope == "global" else _key(scope_id, v) for v in ids]
            if len(hash_ids) < -(-n_in // block):
                hash_ids.append(_key(rid, "partial"))
                self.counts["tail_ids"] += 1
            arrival = _us(t + offset)
            assert arrival is not None
            e2e = _us(api)
            deps = [d for d in ([prev] if prev is not None else []) + (joins or []) if d is not None]
            kept = [d for d in deps if d.arrival <= arrival]
            self.counts["edges_dropped"] += len(deps) - len(kept)
            wait = None
            if kept:
                ends = [d.end for d in kept]
                if all(e is not None for e in ends):
                    wait = arrival - max(e for e in ends if e is not None)
                elif think is not None:
                    wait = _us(think)
                    self.counts["waits_think"] += 1
                if wait is not None and wait < 0:
                    self.counts["waits_clamped"] += 1
                    wait = 0
                for d in kept:
                    if joins and d in joins:
                        self.counts["edges_join"] += 1
                    elif j == 0 and parent_session is not None:
                        self.counts["edges_spawn"] += 1
                    else:
                        self.counts["edges_chain"] += 1
            joins = None
            self.counts["calls"] += 1
            self.types[kind] += 1
            self.stops[str(req.get("stop", ""))] += 1
            out.append(
                TokenRecord(
                    line=0,
                    arrival_us=arrival,
                    input_tokens=n_in,
                    output_tokens=n_out,
                    request_id=rid,
                    api="chat",
                    model=self.model if self.model is not None else model,
                    session_id=sid,
                    hash_ids=hash_ids,
                    e2e_us=e2e,
                    ttft_us=_us(ttft),
                    depends_on=[d.request_id for d in kept],
                    wait_us=wait,
                    parent_session_id=parent_session,
                    agent=agent,
                )
            )
            prev = _Done(rid, arrival, None if e2e is None else arrival + e2e)
        return prev if reqs else None


def _sources(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith((".json", ".jsonl", ".jsonl.gz")))
        if not files:
            raise TraceError(f"{path}: a folder without .json / .jsonl trace files")
        return files
    if not path.is_file():
        raise TraceError(f"{path}: no such file or folder")
    return [path]


def _objects(f: Path, name: str) -> Iterator[tuple[int, object]]:
    """A ``.json`` file's one trace (as line 1), or each line of a JSON Lines file."""
    if f.name.endswith(".json"):
        try:
            text = f.read_bytes()
        except OSError as e:
            raise TraceError(f"{name}: cannot read ({e.strerror or e})") from None
        try:
            yield 1, json.loads(text)
        except ValueError:
            yield 1, LineError("not valid JSON")
        return
    yield from read_jsonl_rows(f, name)


def import_weka(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    seed: int = 0,
    limit: int | None = None,
    block_size: int | None = None,
    model: str | None = None,
    skip_bad: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import Weka traces (a ``.json`` trace, a folder of them, or JSON Lines of them) into the
    Trace file ``out`` (see the module docstring). ``block_size`` (of ``block_hashes``) defaults
    to the traces' own ``block_size``."""
    path = Path(path)
    files = _sources(path)
    bad = BadLines(files[0].name, skip_bad)
    traces = _Traces(model)

    def records() -> Iterator[TokenRecord]:
        for f in files:
            name = str(f.relative_to(path)) if path.is_dir() else f.name
            bad.source = name
            for line, obj in _objects(f, name):
                try:
                    if isinstance(obj, LineError):
                        raise obj
                    recs = traces.records(obj)
                except LineError as e:
                    kept = len(bad.first)
                    bad.bad(line, e)
                    if len(bad.first) > kept:
                        bad.first[-1]["file"] = name
                    continue
                for r in recs:
                    r.line = line
                yield from recs

    ordered = time_ordered(records())
    # the block size is the first trace's: read one record before the writer is set up
    first = next(ordered, None)
    if first is None:
        raise TraceError(f"{path.name}: no requests imported ({bad.count} traces skipped as malformed)")
    assert traces.block is not None
    if block_size is not None and block_size < 1:
        raise ConfigError(f"--block-size: must be positive, got {block_size}")

    def all_records() -> Iterator[TokenRecord]:
        yield first
        yield from ordered

    report: dict[str, Any] = {"files": len(files), "block_size": traces.block, "not_mapped": list(NOT_MAPPED)}
    return write_token_trace(
        all_records(),
        out,
        source=path.name,
        source_format=SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size if block_size is not None else traces.block,
        synthesis=Synthesis(seed=seed, block_tokens=traces.block),
        bad=bad,
        limit=limit,
        progress=progress,
        report=lambda: {**report, **traces.report()},
    )
