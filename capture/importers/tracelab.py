"""Importer of TraceLab round traces (uw-syfi/TraceLab: Claude Code and Codex sessions, 2025-26)
into a Trace.

Owns :func:`import_tracelab`. The input is TraceLab's normalized round trace, JSON Lines (``.gz``
streamed; the public release is ``syfi_coding_trace.jsonl.gz``), one LLM invocation ("round") a
line (uw-syfi/TraceLab ``example_sessions/derived/README.md``): ``provider`` (``claude`` /
``codex``), ``session_id``, ``round_index``, ``round_id``, ``model``, ``input_tokens_total`` =
``prefix_tokens`` (the provider's cache-read tokens) + ``newly_append_tokens``, ``output_tokens``
(Codex: reasoning included), ``reasoning_output_tokens``, ``timing_events`` (``[{event_type,
timestamp, ...}]``: ``user_message`` / ``tool_result`` on the input side, ``reasoning`` / ``text``
/ ``tool_call`` / ``usage_report`` on the output side), ``tools`` (the calls the round made:
``tool_name``, ``emitted_at``, ``result_at``, ``tool_wall_latency_ms``, ``is_error``, ...),
``first_input_event_type``, ``current_*`` input summaries, ``trace_key`` and (sanitized away in
the public pool) ``user``, ``project``, ``home``.

Each round is a chat request with a null body (synthesized at replay): ``arrival_us`` its
submission, the latest input event (a round fed by several tool results cannot have been sent
before the last arrived), else its first output event (AIPerf's ``round_timing`` rule); ``e2e_us``
from the submission to its last ``reasoning`` / ``text`` / ``tool_call`` event (a proxy: TraceLab
records no server latency or TTFT); ``input_tokens`` ``input_tokens_total``, ``cached_tokens``
``prefix_tokens``, ``output_tokens`` ``output_tokens``; ``model``; ``session_id`` the row's;
``request_id`` ``<session_id>:<n>``, n counting the session's rows in file order (the corpus has
duplicate ``round_index`` pairs). A round with no timed event is skipped and counted.

The DAG: a round depends on the previous round of its session (in file order: TraceLab writes a
session's rounds in order), ``wait_us`` its arrival less that round's end: the tool time for a
round its tool results started, the user's think time for one a ``user_message`` started
(counted apart). A subagent is its own session: TraceLab has no link to its parent (AIPerf guesses
one from timing containment; not done here). Prefix sharing: each round's prompt extends the
session's previous round's, sharing its first ``prefix_tokens`` tokens
(:class:`capture.importers.tokens.PrefixChain`, the rule of AIPerf's ``synthesize_hash_ids``,
blocks of :data:`TRACELAB_BLOCK_TOKENS`): a compaction (a smaller prefix) starts fresh blocks.

Not mapped (``import_report``): ``tools`` (counted, errors too), the other ``timing_events``, the
``claude_*`` usage split, ``newly_append_tokens`` (``input_tokens_total - prefix_tokens``),
``reasoning_output_tokens``, the ``current_*`` summaries, ``round_id``, ``trace_key``, ``provider``
(counted), ``project``, ``user``, ``home``, ``store``, ``session_file``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture.importers.records import BadLines, LineError, count, parse_time_us
from capture.importers.tokens import ImportResult, PrefixChain, TokenRecord, read_jsonl_rows, time_ordered, write_token_trace
from replay.errors import TraceError
from replay.synth import Synthesis

__all__ = ["SOURCE_FORMAT", "TRACELAB_BLOCK_TOKENS", "import_tracelab"]

SOURCE_FORMAT = "tracelab-jsonl"
TRACELAB_BLOCK_TOKENS = 512
_INPUT_EVENTS = frozenset({"user_message", "tool_result"})
_OUTPUT_EVENTS = frozenset({"reasoning", "text", "tool_call"})
NOT_MAPPED = (
    "tools",
    "timing_events (other than the submission and the last output)",
    "claude_uncached_input_tokens",
    "claude_cache_creation_input_tokens",
    "claude_cache_read_input_tokens",
    "newly_append_tokens",
    "reasoning_output_tokens",
    "current_*",
    "round_id",
    "trace_key",
    "provider",
    "project",
    "user",
    "home",
    "store",
    "session_file",
)


@dataclass(slots=True)
class _Last:
    request_id: str
    arrival: int
    end: int
    prompt: tuple[list[int], int]


class _Rounds:
    def __init__(self, model: str | None, chain: PrefixChain) -> None:
        self.model = model
        self.chain = chain
        self.sessions: dict[str, _Last] = {}
        self.numbered: Counter = Counter()
        self.counts: Counter = Counter()
        self.providers: Counter = Counter()

    def report(self) -> dict[str, Any]:
        c = self.counts
        return {
            "rounds": c["rounds"],
            "rounds_without_time": c["untimed"],
            "rounds_user_initiated": c["user"],
            "rounds_tool_initiated": c["tool"],
            "edges": c["edges"],
            "edges_dropped_out_of_time": c["dropped"],
            "waits_clamped": c["clamped"],
            "tool_calls": c["tools"],
            "tool_calls_failed": c["tool_errors"],
            "providers": dict(sorted(self.providers.items())),
        }

    def record(self, line: int, obj: object) -> TokenRecord | None:
        if isinstance(obj, LineError):
            raise obj
        if not isinstance(obj, dict):
            raise LineError("not a JSON object")
        sid = obj.get("session_id")
        if isinstance(sid, bool) or not isinstance(sid, (str, int)) or sid == "":
            raise LineError(f"{sid!r} is not a session id", "session_id")
        sid = str(sid)
        total = count(obj.get("input_tokens_total"), "input_tokens_total")
        if total is None:
            raise LineError("is missing", "input_tokens_total")
        prefix = count(obj.get("prefix_tokens"), "prefix_tokens") or 0
        output = count(obj.get("output_tokens"), "output_tokens")
        model = obj.get("model")
        if model is not None and not isinstance(model, str):
            raise LineError(f"{model!r} is not a string", "model")
        events = obj.get("timing_events")
        events = [] if events is None else events
        if not isinstance(events, list):
            raise LineError("is not a list", "timing_events")
        ins: list[int] = []
        outs: list[int] = []
        for i, e in enumerate(events):
            if not isinstance(e, dict):
                raise LineError("is not an object", f"timing_events[{i}]")
            kind = e.get("event_type")
            if e.get("timestamp") and kind in _INPUT_EVENTS | _OUTPUT_EVENTS:
                at = parse_time_us(e["timestamp"], f"timing_events[{i}].timestamp")
                (ins if kind in _INPUT_EVENTS else outs).append(at)
        tools = obj.get("tools")
        tools = [] if tools is None else tools
        if not isinstance(tools, list):
            raise LineError("is not a list", "tools")
        self.counts["rounds"] += 1
        self.providers[str(obj.get("provider"))] += 1
        self.counts["tools"] += len(tools)
        self.counts["tool_errors"] += sum(1 for t in tools if isinstance(t, dict) and t.get("is_error") is True)
        if not ins and not outs:
            self.counts["untimed"] += 1
            return None
        arrival = max(ins) if ins else min(outs)
        end = max([arrival, *outs])
        self.counts["user" if obj.get("first_input_event_type") == "user_message" else "tool"] += 1
        rid = f"{sid}:{self.numbered[sid]}"
        self.numbered[sid] += 1
        last = self.sessions.get(sid)
        deps: list[str] = []
        wait = None
        if last is not None and last.arrival <= arrival:
            deps = [last.request_id]
            wait = arrival - last.end
            if wait < 0:
                self.counts["clamped"] += 1
                wait = 0
            self.counts["edges"] += 1
        elif last is not None:
            self.counts["dropped"] += 1
        ids = self.chain.extend(last.prompt if last is not None else None, prefix, total)
        self.sessions[sid] = _Last(rid, arrival, end, (ids, total))
        return TokenRecord(
            line=line,
            arrival_us=arrival,
            input_tokens=total,
            output_tokens=output,
            request_id=rid,
            api="chat",
            model=self.model if self.model is not None else model,
            session_id=sid,
            hash_ids=ids,
            e2e_us=end - arrival,
            cached_tokens=prefix,
            depends_on=deps,
            wait_us=wait,
        )


def import_tracelab(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    seed: int = 0,
    limit: int | None = None,
    block_size: int = TRACELAB_BLOCK_TOKENS,
    model: str | None = None,
    skip_bad: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import a TraceLab round trace (JSON Lines, ``.gz`` streamed) into the Trace file ``out``
    (see the module docstring); ``limit``: the first N requests in arrival order."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    bad = BadLines(path.name, skip_bad)
    rounds = _Rounds(model, PrefixChain(TRACELAB_BLOCK_TOKENS))

    def records() -> Iterator[TokenRecord]:
        for line, obj in read_jsonl_rows(path):
            try:
                rec = rounds.record(line, obj)
            except LineError as e:
                bad.bad(line, e)
                continue
            if rec is not None:
                yield rec

    report: dict[str, Any] = {"not_mapped": list(NOT_MAPPED)}
    return write_token_trace(
        time_ordered(records()),
        out,
        source=path.name,
        source_format=SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size,
        synthesis=Synthesis(seed=seed, block_tokens=TRACELAB_BLOCK_TOKENS),
        bad=bad,
        limit=limit,
        progress=progress,
        report=lambda: {**report, **rounds.report()},
    )
