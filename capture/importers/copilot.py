"""Importer of the GitHub Copilot coding agent dataset (Azure Public Dataset, 2026) into a Trace.

Owns :func:`import_copilot` and :func:`copilot_files`. The release is a folder of
``date=YYYY-MM-DD/shard-NNNN.jsonl.gz`` files (gzip JSON Lines, streamed; a ``manifest.json``
beside them is not read); one such file, or a plain ``.jsonl``, is imported alone. Each line is
one agent session (Azure/AzurePublicDataset, ``analysis/GitHubCopilotCodingAgents/schema.json``):
``{session_id, date, turns: [{turn_id, llm_calls: [...], tool_batches: [...]}]}``.

- An LLM call (``message_id``, ``timestamp`` ISO 8601, ``duration_ms`` end to end,
  ``initiator_type`` ``user`` / ``agent``, ``model``, ``result``, ``status_code``, ``tokens``
  ``{prompt, completion, cached, total, cached_pct}``, ``message_metadata``) is one chat request
  with a null body (synthesized at replay): ``request_id`` its ``message_id``, ``arrival_us`` its
  timestamp, ``e2e_us`` its duration, ``input_tokens`` / ``output_tokens`` / ``cached_tokens``
  ``tokens.prompt`` / ``completion`` / ``cached``, ``model`` its model (or ``--model``),
  ``status`` 200 for ``status_code`` ``OK`` (a 3-digit code as itself, anything else 500),
  ``session_id`` the session's. A call with ``tokens.prompt`` 0 is skipped and counted (the
  dataset's own analysis leaves them out).
- A tool batch (``timestamp``, ``duration_ms``, ``request_id`` = the ``message_id`` of the call
  that asked for the tools, ``function_calls`` ``[{name, status 1 ok / 2 failed, duration_ms}]``)
  is no request: it links the call that asked for it to the next agent-initiated call of the same
  turn that arrives at or after the batch ended, which ``depends_on`` the asking call (several
  batches ending before it: a join on all their asking calls). ``wait_us`` is that call's
  arrival less the latest end (arrival + duration) of its dependencies: the tool time and the
  agent's overhead (0 where the dependency's recorded end is after the arrival, counted).
- Any other call (a user-initiated call starting a turn, whose wait is the user's think time;
  an agent call no batch leads to) depends on the call of its session that ended last at or
  before its arrival. Calls that overlap in time have no link between them in the data, so they
  stay independent: siblings of what ended before both, never a chain.
- Prefix sharing: the dataset has no hash ids, only each call's cached tokens. A call's prompt
  extends the prompt of the previous call of its session with the same model, sharing its first
  ``cached`` tokens (:class:`capture.importers.tokens.PrefixChain`, blocks of
  :data:`COPILOT_BLOCK_TOKENS`): a call that hit the cache for 60k tokens of a 70k prompt repeats
  the previous prompt's first 60k tokens' blocks and adds new ones, a call with no cached tokens
  (a model switch, a compaction, an evicted cache) starts fresh blocks.

Sessions are lines, so the calls of different lines overlap in time: the records are put in
arrival order by :func:`capture.importers.tokens.time_ordered` (sorted runs spilled to temporary
files when the input is longer than one), then written by the one token-trace writer.

Not mapped (said in ``import_report``): ``message_metadata`` (the prompt's segments by type and
length, no text), ``tokens.total`` / ``cached_pct``, ``result`` (counted), the tool batches'
``auto_continue`` and ``result``, the function calls' names and durations (counted, failures
too), the session's ``date`` and the ``turn_id`` (the Trace's ``turn`` counts a session's
requests). There is no TTFT, text or tool-call size.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture.importers.records import BadLines, LineError, count, ms_to_us, parse_time_us
from capture.importers.tokens import ImportResult, PrefixChain, TokenRecord, read_jsonl_rows, time_ordered, write_token_trace
from replay.errors import TraceError
from replay.synth import Synthesis

__all__ = ["COPILOT_BLOCK_TOKENS", "SOURCE_FORMAT", "copilot_files", "import_copilot"]

SOURCE_FORMAT = "copilot-agent-jsonl"
# tokens per synthesized block id (and the default --block-size of block_hashes)
COPILOT_BLOCK_TOKENS = 512
NOT_MAPPED = (
    "message_metadata",
    "tokens.total",
    "tokens.cached_pct",
    "result",
    "tool_batches.auto_continue",
    "tool_batches.result",
    "function_calls.name",
    "function_calls.duration_ms",
    "date",
    "turn_id",
)


def copilot_files(path: Path) -> list[Path]:
    """The files to read: ``path`` itself, or a folder's ``*.jsonl.gz`` / ``*.jsonl`` files (any
    depth, ``date=*/shard-*`` in name order)."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith((".jsonl", ".jsonl.gz")))
        if not files:
            raise TraceError(f"{path}: a folder without .jsonl.gz / .jsonl files (date=YYYY-MM-DD/shard-NNNN.jsonl.gz)")
        return files
    if not path.is_file():
        raise TraceError(f"{path}: no such file or folder")
    return [path]


@dataclass(slots=True)
class _Call:
    order: int
    turn: int
    message_id: str
    start: int
    end: int
    agent: bool
    model: str | None
    prompt: int
    completion: int | None
    cached: int | None
    status: int


def _dict(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        raise LineError("is not an object", field)
    return value


def _list(value: Any, field: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise LineError("is not a list", field)
    return value


def _text(value: Any, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise LineError(f"{value!r} is not an id", field)
    return str(value)


def _status(code: Any, field: str) -> int:
    if code is None or (isinstance(code, str) and code.strip().upper() == "OK"):
        return 200
    text = str(code).strip()
    if text.isdigit() and len(text) == 3:
        return int(text)
    if not isinstance(code, (str, int)) or isinstance(code, bool):
        raise LineError(f"{code!r} is not a status", field)
    return 500


class _Sessions:
    """Turns session lines into records, and counts what the import report says."""

    def __init__(self, model: str | None, chain: PrefixChain) -> None:
        self.model = model
        self.chain = chain
        self.counts: Counter = Counter()
        self.results: Counter = Counter()
        self.status_codes: Counter = Counter()

    def report(self) -> dict[str, Any]:
        c = self.counts
        return {
            "llm_calls": c["llm_calls"],
            "copilot_sessions": c["sessions"],
            "turns": c["turns"],
            "calls_prompt_zero_skipped": c["calls_prompt_zero"],
            "initiators": {"user": c["initiator:user"], "agent": c["initiator:agent"]},
            "tool_batches": c["tool_batches"],
            "tool_batches_linked": c["tool_batches_linked"],
            "tool_batches_without_request": c["tool_batches_without_request"],
            "tool_batches_of_skipped_calls": c["tool_batches_of_skipped_calls"],
            "tool_batches_without_next_call": c["tool_batches_without_next_call"],
            "function_calls": c["function_calls"],
            "function_calls_failed": c["function_calls_failed"],
            "edges": {"tool": c["edges_tool"], "turn": c["edges_turn"], "temporal": c["edges_temporal"]},
            "waits_clamped": c["waits_clamped"],
            "calls_with_message_metadata": c["calls_with_message_metadata"],
            "results": dict(sorted(self.results.items())),
            "status_codes": dict(sorted(self.status_codes.items())),
        }

    def records(self, line: int, obj: object) -> list[TokenRecord]:
        if isinstance(obj, LineError):
            raise obj
        sess = _dict(obj, "session")
        sid = _text(sess.get("session_id"), "session_id")
        try:
            return self._session(line, sid, sess)
        except LineError as e:
            raise LineError(f"session {sid}: {e.what}", e.field) from None

    def _session(self, line: int, sid: str, sess: dict) -> list[TokenRecord]:
        turns = _list(sess.get("turns"), "turns")
        calls: list[_Call] = []
        batches: list[tuple[int, str, int, int]] = []  # (turn, request_id, start, end)
        skipped: set[str] = set()
        seen: set[str] = set()
        counts: Counter = Counter()
        results: Counter = Counter()
        codes: Counter = Counter()
        for ti, turn in enumerate(turns):
            where = f"turns[{ti}]"
            turn = _dict(turn, where)
            for ci, raw in enumerate(_list(turn.get("llm_calls"), f"{where}.llm_calls")):
                f = f"{where}.llm_calls[{ci}]"
                c = _dict(raw, f)
                mid = _text(c.get("message_id"), f"{f}.message_id")
                if mid in seen:
                    raise LineError(f"message id {mid!r} twice in the session", f"{f}.message_id")
                seen.add(mid)
                tokens = _dict(c.get("tokens"), f"{f}.tokens")
                prompt = count(tokens.get("prompt"), f"{f}.tokens.prompt")
                if prompt is None:
                    raise LineError("is missing", f"{f}.tokens.prompt")
                completion = count(tokens.get("completion"), f"{f}.tokens.completion")
                cached = count(tokens.get("cached"), f"{f}.tokens.cached")
                if c.get("timestamp") is None:
                    raise LineError("is missing", f"{f}.timestamp")
                start = parse_time_us(c.get("timestamp"), f"{f}.timestamp")
                e2e = ms_to_us(c.get("duration_ms"), f"{f}.duration_ms")
                initiator = c.get("initiator_type")
                if initiator not in ("user", "agent"):
                    raise LineError(f"{initiator!r} is neither 'user' nor 'agent'", f"{f}.initiator_type")
                model = c.get("model")
                if model is not None and not isinstance(model, str):
                    raise LineError(f"{model!r} is not a string", f"{f}.model")
                status = _status(c.get("status_code"), f"{f}.status_code")
                counts["llm_calls"] += 1
                counts[f"initiator:{initiator}"] += 1
                results[str(c.get("result"))] += 1
                codes[str(c.get("status_code"))] += 1
                if c.get("message_metadata"):
                    counts["calls_with_message_metadata"] += 1
                if prompt == 0:
                    counts["calls_prompt_zero"] += 1
                    skipped.add(mid)
                    continue
                calls.append(
                    _Call(
                        order=len(calls),
                        turn=ti,
                        message_id=mid,
                        start=start,
                        end=start + (e2e or 0),
                        agent=initiator == "agent",
                        model=self.model if self.model is not None else (model or None),
                        prompt=prompt,
                        completion=completion,
                        cached=cached,
                        status=status,
                    )
                )
            for bi, raw in enumerate(_list(turn.get("tool_batches"), f"{where}.tool_batches")):
                f = f"{where}.tool_batches[{bi}]"
                b = _dict(raw, f)
                rid = _text(b.get("request_id"), f"{f}.request_id")
                if b.get("timestamp") is None:
                    raise LineError("is missing", f"{f}.timestamp")
                start = parse_time_us(b.get("timestamp"), f"{f}.timestamp")
                end = start + (ms_to_us(b.get("duration_ms"), f"{f}.duration_ms") or 0)
                fcs = _list(b.get("function_calls"), f"{f}.function_calls")
                for ki, fc in enumerate(fcs):
                    fc = _dict(fc, f"{f}.function_calls[{ki}]")
                    counts["function_calls"] += 1
                    counts["function_calls_failed"] += fc.get("status") == 2
                counts["tool_batches"] += 1
                if rid in skipped:
                    counts["tool_batches_of_skipped_calls"] += 1
                    continue
                batches.append((ti, rid, start, end))
        # the line is good: its counts are the import's
        self.counts.update(counts)
        self.results.update(results)
        self.status_codes.update(codes)
        self.counts["sessions"] += 1
        self.counts["turns"] += len(turns)
        return self._link(line, sid, calls, batches)

    def _link(self, line: int, sid: str, calls: list[_Call], batches: list[tuple[int, str, int, int]]) -> list[TokenRecord]:
        calls.sort(key=lambda c: (c.start, c.order))
        by_id = {c.message_id: c for c in calls}
        tool_deps: dict[str, list[_Call]] = {}
        for ti, rid, _start, end in batches:
            asker = by_id.get(rid)
            if asker is None:
                self.counts["tool_batches_without_request"] += 1
                continue
            nxt = next((c for c in calls if c.turn == ti and c.agent and c is not asker and c.start >= end), None)
            if nxt is None:
                self.counts["tool_batches_without_next_call"] += 1
                continue
            self.counts["tool_batches_linked"] += 1
            deps = tool_deps.setdefault(nxt.message_id, [])
            if asker not in deps:
                deps.append(asker)
        out: list[TokenRecord] = []
        last_of_model: dict[str | None, tuple[list[int], int]] = {}
        for i, c in enumerate(calls):
            deps = tool_deps.get(c.message_id, [])
            if deps:
                deps.sort(key=lambda d: (d.start, d.order))
                kind = "tool"
            else:
                ended = [d for d in calls[:i] if d.end <= c.start]
                deps = [max(ended, key=lambda d: (d.end, d.start, d.order))] if ended else []
                kind = "turn" if not c.agent else "temporal"
            wait = None
            if deps:
                latest = max(d.end for d in deps)
                wait = c.start - latest
                if wait < 0:
                    self.counts["waits_clamped"] += 1
                    wait = 0
                self.counts[f"edges_{kind}"] += len(deps)
            ids = self.chain.extend(last_of_model.get(c.model), c.cached or 0, c.prompt)
            last_of_model[c.model] = (ids, c.prompt)
            out.append(
                TokenRecord(
                    line=line,
                    arrival_us=c.start,
                    input_tokens=c.prompt,
                    output_tokens=c.completion,
                    request_id=c.message_id,
                    api="chat",
                    model=c.model,
                    session_id=sid,
                    hash_ids=ids,
                    status=c.status,
                    e2e_us=c.end - c.start,
                    cached_tokens=c.cached,
                    depends_on=[d.message_id for d in deps],
                    wait_us=wait,
                )
            )
        return out


def import_copilot(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    seed: int = 0,
    limit: int | None = None,
    block_size: int = COPILOT_BLOCK_TOKENS,
    model: str | None = None,
    skip_bad: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import the Copilot coding agent dataset (a folder of shards, or one shard) into the Trace
    file ``out`` (see the module docstring); ``limit``: the first N requests in arrival order."""
    path = Path(path)
    files = copilot_files(path)
    bad = BadLines(files[0].name, skip_bad)
    sessions = _Sessions(model, PrefixChain(COPILOT_BLOCK_TOKENS))

    def records() -> Iterator[TokenRecord]:
        for f in files:
            name = str(f.relative_to(path)) if path.is_dir() else f.name
            bad.source = name
            for line, obj in read_jsonl_rows(f, name):
                try:
                    recs = sessions.records(line, obj)
                except LineError as e:
                    kept = len(bad.first)
                    bad.bad(line, e)
                    if len(bad.first) > kept:
                        bad.first[-1]["file"] = name
                    continue
                yield from recs

    report: dict[str, Any] = {"files": len(files), "not_mapped": list(NOT_MAPPED)}
    return write_token_trace(
        time_ordered(records()),
        out,
        source=path.name,
        source_format=SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size,
        synthesis=Synthesis(seed=seed, block_tokens=COPILOT_BLOCK_TOKENS),
        bad=bad,
        limit=limit,
        progress=progress,
        report=lambda: {**report, **sessions.report()},
    )
