"""Importers of AIPerf's authored datasets (JSON Lines with real text) into a Trace file:
``dag_jsonl`` (:func:`import_aiperf_dag`) and ``multi_turn`` (:func:`import_aiperf_multi_turn`).

Sources: ai-dynamo/aiperf@05440a0e src/aiperf/dataset/loader/dag_jsonl_models.py and
docs/benchmark-modes/dag.md; @02b0d5c3 src/aiperf/dataset/loader/models.py (``MultiTurn``,
``SingleTurn``) and @13b4567a multi_turn.py.

**dag_jsonl.** Each line is one conversation ``{session_id, turns[], pre_session_spawns?,
orchestrator?, spawns?, rounds?, think_time_ms?, context_mode?}``; a turn is ``{messages,
model?, max_tokens?, tools?, extra?, forks?, spawns?, delay?}`` (unknown keys are malformed, as
AIPerf rejects them). A session no other one names is a root; each root, in file order, starts at
a seeded Poisson process of ``rate`` sessions/s (the file has no times), and the graph places
everything else:

- turn k of a session depends on turn k-1, its ``delay`` (ms) is its ``wait_us``, and it arrives
  at its dependencies' latest arrival plus that delay (no replies were recorded, so no durations);
- ``forks`` (an id, or ``{child, background}``): after the turn, the child session's first turn
  depends on it, with the parent's history plus the parent's live reply before its own messages
  (FORK: the child continues the parent's conversation; its ``parent_session_id`` is the
  parent's, as AIPerf tags both kinds of child, so ``replay sample`` keeps the tree whole); a
  bare fork ends the parent (the turn must be its last);
- ``spawns`` (an id, or ``{children, join_at}``): after the turn, each child starts fresh, a
  subagent session (``parent_session_id`` the parent's), its first turn depending on the
  spawning turn; the parent's turn ``join_at`` (default the next one; none after the last turn)
  also depends on each child's last turn (the join);
- ``pre_session_spawns``: children started with the session, depending on nothing;
- an ``orchestrator`` sends no request: its ``spawns`` are roots started at its arrival, and with
  ``rounds`` (N repeats of its ``spawns``, or a list of ``{spawns, think_time_ms}``) each round's
  first turns depend on every last turn of the round before, waiting its ``think_time_ms`` (the
  median: ``think_time_sigma`` draws are not made);
- a session named by several parents (a SPAWN template) is imported once per parent, the later
  copies as ``<id>#2``, ``<id>#3``...; request ids are ``<session>:<turn>``.

A request's body is its history (``context_mode`` ``message_array_with_responses``: its own
messages only) and the turn's ``model``, ``max_tokens``, ``tools`` and ``extra`` keys. Each live
reply in the history is an empty assistant message: a replay with ``--answers engine`` writes
the engine's answer there. No outputs were recorded: ``output_tokens`` is ``max_tokens``.

**multi_turn.** Each line ``{session_id?, turns[]}``, lines with the same ``session_id`` one
session (a line without one is a session of its own); a turn has ``text`` or ``texts`` (strings
or ``{name, contents}``), ``role``, ``timestamp`` or ``delay`` (ms), ``output_length`` (its
``max_tokens``) and ``extra``. A leading text-only ``system`` turn is the session's system
message, sent first in every request. Each request is the history with a live (empty) reply after
each earlier turn, then the turn's text as one message; turn k depends on turn k-1. A turn with a
``timestamp`` arrives at it (ms from 0), else at the turn before plus its ``delay``; a session
whose first turn has no timestamp starts at a seeded Poisson process of ``rate`` sessions/s.
Images, audio and video are not imported (counted in the report).

Both: text is real and goes through the request log pipeline (:mod:`capture.importers.graph_log`),
redacted with a key before anything is written. Bad input stops at ``FILE: line N: <what>
(field 'x')``, or with ``skip_bad`` the line is skipped and counted. A first pass keeps each
conversation's structure (ids, turn counts, branches) and where its line starts, not its text;
the second reads each conversation again as it is expanded.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from capture.importers.graph_log import import_requests
from capture.importers.records import BadLines, LineError, content_text
from replay.errors import ConfigError, TraceError
from replay.trace import BLOCK_SIZE

__all__ = ["import_aiperf_dag", "import_aiperf_multi_turn"]

DAG_FORMAT = "aiperf-dag"
MULTI_TURN_FORMAT = "aiperf-multi-turn"
_CONVERSATION_KEYS = frozenset(
    {
        "session_id",
        "turns",
        "pre_session_spawns",
        "orchestrator",
        "spawns",
        "rounds",
        "context_mode",
        "think_time_ms",
        "think_time_sigma",
        "think_time_min_ms",
        "think_time_max_ms",
    }
)
_TURN_KEYS = frozenset({"messages", "model", "max_tokens", "tools", "extra", "forks", "spawns", "delay"})
_CONTEXT_MODES = frozenset({"deltas_without_responses", "message_array_with_responses"})
_LIVE_REPLY = {"role": "assistant", "content": ""}  # where a replay writes the engine's answer


def _check_rate(rate: float | None) -> None:
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"--rate: must be a number > 0, got {rate}")


def _starts(n: int, rate: float, seed: int) -> list[int]:
    """``n`` session starts (µs) of a Poisson process of ``rate``/s seeded by ``seed``, the
    first at 0 (the rule of an OpenAI Batch file's arrivals)."""
    gaps_s = np.random.default_rng(seed).exponential(1.0 / rate, size=max(n - 1, 0))
    return np.rint(np.concatenate([[0.0], np.cumsum(gaps_s)]) * 1e6).astype(np.int64).tolist()


def _ms(value: Any, field: str) -> int:
    """A non-negative number of ms as µs (absent: 0)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LineError(f"{value!r} is not a number of ms >= 0", field)
    return round(value * 1000)


def _ids(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise LineError("is not a list of session ids", field)
    return list(value)


def _lines(path: Path, bad: BadLines) -> Iterator[tuple[int, int, dict]]:
    """(line number, byte offset, object) of each non-blank line that is a JSON object."""
    if not path.is_file():
        raise TraceError(f"{path.name}: no such file")
    offset = 0
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            start, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                bad.bad(number, LineError("not valid JSON"))
                continue
            if not isinstance(obj, dict):
                bad.bad(number, LineError("not a JSON object"))
                continue
            yield number, start, obj


def _read_at(path: Path, offset: int) -> dict:
    with path.open("rb") as f:
        f.seek(offset)
        return json.loads(f.readline())


# ---------------------------------------------------------------------------------------------
# dag_jsonl


@dataclass
class _Turn:
    delay_us: int
    forks: list[tuple[str, bool]]  # (child, background)
    spawns: list[tuple[list[str], int | None]]  # (children, join_at)


@dataclass
class _Conversation:
    line: int
    offset: int
    turns: list[_Turn]
    pre_session_spawns: list[str]
    orchestrator: bool = False
    rounds: list[tuple[list[str], int]] = field(default_factory=list)  # (spawns, think time µs)
    own_messages_only: bool = False

    def targets(self) -> Iterator[tuple[str, str]]:
        """(child, field) of every session this one names."""
        for k, t in enumerate(self.turns):
            for child, _ in t.forks:
                yield child, f"turns.{k}.forks"
            for children, _ in t.spawns:
                for child in children:
                    yield child, f"turns.{k}.spawns"
        for child in self.pre_session_spawns:
            yield child, "pre_session_spawns"
        for r, (children, _) in enumerate(self.rounds):
            for child in children:
                yield child, f"rounds.{r}" if len(self.rounds) > 1 else "spawns"


def _dag_turn(obj: Any, k: int, n: int) -> _Turn:
    at = f"turns.{k}"
    if not isinstance(obj, dict):
        raise LineError("is not an object", at)
    unknown = sorted(set(obj) - _TURN_KEYS)
    if unknown:
        raise LineError("is not a dag_jsonl turn key", f"{at}.{unknown[0]}")
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        raise LineError("is missing or not a non-empty list", f"{at}.messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise LineError("has no 'role'", f"{at}.messages.{i}")
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise LineError(f"{max_tokens!r} is not an integer >= 1", f"{at}.max_tokens")
    for name, kind in (("model", str), ("tools", list), ("extra", dict)):
        if obj.get(name) is not None and not isinstance(obj[name], kind):
            raise LineError(f"is not a{'n object' if kind is dict else ' list' if kind is list else ' string'}", f"{at}.{name}")
    forks: list[tuple[str, bool]] = []
    for f in obj.get("forks") or []:
        if isinstance(f, str) and f:
            if k != n - 1:
                raise LineError("a bare fork ends the conversation: only on its last turn", f"{at}.forks")
            forks.append((f, False))
        elif isinstance(f, dict) and isinstance(f.get("child"), str) and f["child"] and set(f) <= {"child", "background"}:
            forks.append((f["child"], bool(f.get("background", False))))
        else:
            raise LineError(f"{f!r} is not a session id or {{child, background}}", f"{at}.forks")
    spawns: list[tuple[list[str], int | None]] = []
    for s in obj.get("spawns") or []:
        if isinstance(s, str) and s:
            spawns.append(([s], k + 1 if k + 1 < n else None))
        elif isinstance(s, dict) and set(s) <= {"children", "join_at"}:
            children = _ids(s.get("children"), f"{at}.spawns.children")
            join_at = s.get("join_at", k + 1)
            if not children:
                raise LineError("is empty", f"{at}.spawns.children")
            if isinstance(join_at, bool) or not isinstance(join_at, int) or not k < join_at < n:
                raise LineError(f"{join_at!r} is not a later turn of this conversation", f"{at}.spawns.join_at")
            spawns.append((children, join_at))
        else:
            raise LineError(f"{s!r} is not a session id or {{children, join_at}}", f"{at}.spawns")
    return _Turn(_ms(obj.get("delay"), f"{at}.delay"), forks, spawns)


def _dag_conversation(obj: dict, line: int, offset: int) -> tuple[str, _Conversation]:
    unknown = sorted(set(obj) - _CONVERSATION_KEYS)
    if unknown:
        raise LineError("is not a dag_jsonl conversation key", unknown[0])
    sid = obj.get("session_id")
    if not isinstance(sid, str) or not sid:
        raise LineError("is missing or not a non-empty string", "session_id")
    mode = obj.get("context_mode")
    if mode is not None and mode not in _CONTEXT_MODES:
        raise LineError(f"{mode!r} is not one of {', '.join(sorted(_CONTEXT_MODES))}", "context_mode")
    turns = obj.get("turns") or []
    if not isinstance(turns, list):
        raise LineError("is not a list", "turns")
    think_us = _ms(obj.get("think_time_ms"), "think_time_ms")
    conv = _Conversation(line, offset, [], _ids(obj.get("pre_session_spawns"), "pre_session_spawns"))
    conv.own_messages_only = mode == "message_array_with_responses"
    if obj.get("orchestrator"):
        if turns:
            raise LineError("an orchestrator has no authored turns", "turns")
        conv.orchestrator = True
        rounds = obj.get("rounds")
        spawns = _ids(obj.get("spawns"), "spawns")
        if isinstance(rounds, list):
            for r, item in enumerate(rounds):
                if not isinstance(item, dict) or set(item) - {"spawns", "think_time_ms"}:
                    raise LineError("is not {spawns, think_time_ms}", f"rounds.{r}")
                children = _ids(item.get("spawns"), f"rounds.{r}.spawns")
                if not children:
                    raise LineError("is empty", f"rounds.{r}.spawns")
                own = item.get("think_time_ms")
                conv.rounds.append((children, think_us if own is None else _ms(own, f"rounds.{r}.think_time_ms")))
        else:
            if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1):
                raise LineError(f"{rounds!r} is not a number of rounds >= 1 or a list", "rounds")
            if not spawns:
                raise LineError("an orchestrator needs spawns", "spawns")
            conv.rounds = [(spawns, think_us)] * (rounds or 1)
        return sid, conv
    if not turns:
        raise LineError("is missing or empty", "turns")
    if obj.get("spawns") or obj.get("rounds") is not None:
        raise LineError("only for an orchestrator conversation", "spawns" if obj.get("spawns") else "rounds")
    conv.turns = [_dag_turn(t, k, len(turns)) for k, t in enumerate(turns)]
    return sid, conv


class _DagExpansion:
    """The requests of a DAG file's conversations, expanded from its roots (module docstring)."""

    def __init__(self, path: Path, conversations: dict[str, _Conversation], report: Counter) -> None:
        self.path = path
        self.conversations = conversations
        self.report = report
        self.copies: Counter = Counter()
        self.stack: list[str] = []  # the conversations being expanded, outermost first

    def instance(self, sid: str) -> str:
        self.copies[sid] += 1
        n = self.copies[sid]
        return sid if n == 1 else f"{sid}#{n}"

    def last_id(self, sid: str, inst: str) -> str:
        return f"{inst}:{len(self.conversations[sid].turns) - 1}"

    def root(self, sid: str, start_us: int) -> Iterator[dict]:
        conv = self.conversations[sid]
        if not conv.orchestrator:
            yield from self.session(sid, self.instance(sid), start_us, [], [], None)
            return
        self.report["orchestrators"] += 1
        self.copies[sid] += 1
        deps: list[tuple[str, int]] = []  # (last request id, its arrival) of the round before
        wait_us = 0
        for children, think_us in conv.rounds:
            ends: list[tuple[str, int]] = []
            for child in children:
                inst = self.instance(child)
                yield from self.session(child, inst, start_us, deps, [], None, wait_us=wait_us if deps else None, ends=ends)
            deps, wait_us = ends, think_us

    def session(
        self,
        sid: str,
        inst: str,
        after_us: int,
        deps: list[tuple[str, int]],
        seed: list[dict],
        parent_session: str | None,
        *,
        wait_us: int | None = None,
        ends: list[tuple[str, int]] | None = None,
    ) -> Iterator[dict]:
        """The requests of one copy ``inst`` of conversation ``sid``, its first turn after
        ``deps`` (request id, arrival) or at ``after_us``, its history starting with ``seed``;
        its last request (id, arrival) is appended to ``ends``."""
        if sid in self.stack:
            raise TraceError(
                f"{self.path.name}: line {self.conversations[sid].line}: session {sid!r} names itself "
                f"through {' -> '.join(self.stack[self.stack.index(sid) :] + [sid])}"
            )
        self.stack.append(sid)
        conv = self.conversations[sid]
        obj = _read_at(self.path, conv.offset)
        joins: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for child in conv.pre_session_spawns:
            self.report["pre_session_spawns"] += 1
            yield from self.session(child, self.instance(child), after_us, [], [], inst)
        history = list(seed)
        prev: list[tuple[str, int]] = deps
        for k, (turn, raw) in enumerate(zip(conv.turns, obj["turns"])):
            rid = f"{inst}:{k}"
            waits_for = prev + joins.pop(k, [])
            wait = turn.delay_us + (wait_us or 0 if k == 0 else 0)  # a round's first turns: its think time too
            arrival = max([after_us] + [a for _, a in waits_for]) + wait
            messages = list(raw["messages"]) if conv.own_messages_only else history + raw["messages"]
            body: dict[str, Any] = {}
            for name in ("model", "max_tokens", "tools"):
                if raw.get(name) is not None:
                    body[name] = raw[name]
            body["messages"] = messages
            body.update(raw.get("extra") or {})
            line: dict[str, Any] = {
                "request_id": rid,
                "session_id": inst,
                "timestamp": arrival / 1e6,
                "body": body,
                "depends_on": [d for d, _ in waits_for],
                "wait_ms": wait / 1e3 if waits_for else None,
                "parent_session_id": parent_session,
            }
            if isinstance(raw.get("max_tokens"), int):
                line["usage"] = {"completion_tokens": raw["max_tokens"]}  # no recorded output: its limit
            yield line
            history = messages + [dict(_LIVE_REPLY)]
            here = [(rid, arrival)]
            for child, _background in turn.forks:
                self.report["forks"] += 1
                yield from self.session(child, self.instance(child), arrival, here, history, inst)
            for children, join_at in turn.spawns:
                for child in children:
                    self.report["spawns"] += 1
                    child_inst = self.instance(child)
                    child_ends: list[tuple[str, int]] = []
                    yield from self.session(child, child_inst, arrival, here, [], inst, ends=child_ends)
                    if join_at is not None:
                        self.report["joins"] += 1
                        joins[join_at] += child_ends
            prev = here
        if ends is not None:
            ends.extend(prev)
        self.stack.pop()


def import_aiperf_dag(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    rate: float | None = None,
    seed: int = 0,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    skip_bad: bool = False,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> Any:
    """Import an AIPerf ``dag_jsonl`` file into the Trace file ``out`` (module docstring): roots
    start at a Poisson process of ``rate`` sessions/s seeded by ``seed``."""
    path = Path(path)
    source = path.name
    _check_rate(rate)
    if rate is None:
        raise ConfigError(f"{source}: a dag_jsonl file has no times: pass --rate R to start its root sessions at R/s")
    bad = BadLines(source, skip_bad)
    conversations: dict[str, _Conversation] = {}
    for number, offset, obj in _lines(path, bad):
        try:
            sid, conv = _dag_conversation(obj, number, offset)
            if sid in conversations:
                raise LineError(f"{sid!r} repeats line {conversations[sid].line}", "session_id")
        except LineError as e:
            bad.bad(number, e)
            continue
        conversations[sid] = conv
    report: Counter = Counter()
    named: set[str] = set()
    fork_parent: dict[str, str] = {}
    for sid, conv in list(conversations.items()):
        for child, where in conv.targets():
            try:
                if child not in conversations:
                    raise LineError(f"names session {child!r}, which is not in the file", where)
                if where.endswith(".forks") and fork_parent.setdefault(child, sid) != sid:
                    raise LineError(f"forks {child!r}, already forked by {fork_parent[child]!r}", where)
            except LineError as e:
                bad.bad(conv.line, e)
                conversations.pop(sid, None)
                break
            named.add(child)
    roots = [sid for sid in conversations if sid not in named]
    if not roots:
        raise TraceError(f"{source}: no root conversation (every session is named by another: a cycle)")
    starts = _starts(len(roots), rate, seed)
    expansion = _DagExpansion(path, conversations, report)

    def lines() -> Iterator[dict]:
        for sid, start in zip(roots, starts):
            yield from expansion.root(sid, start)

    def dag_report() -> dict:
        return {
            "conversations": len(conversations),
            "roots": len(roots),
            "copies": sum(expansion.copies.values()),
            "not_reached": sum(1 for sid in conversations if sid not in expansion.copies),
            "rate": rate,
            "seed": seed,
            **bad.report(),
            **dict(sorted(report.items())),
            "not_mapped": "no recorded replies or times: output_tokens is max_tokens, live replies are empty "
            "assistant messages, arrivals follow the graph from Poisson root starts",
        }

    return import_requests(
        lines(),
        out,
        source=path.name,
        source_format=DAG_FORMAT,
        report=dag_report,
        tokenizer=tokenizer,
        block_size=block_size,
        limit=limit,
        key=key,
        progress=progress,
    )


# ---------------------------------------------------------------------------------------------
# multi_turn

_MEDIA = ("image", "images", "audio", "audios", "video", "videos")
_SINGLE_TURN_KEYS = frozenset(
    {"type", "text", "texts", "timestamp", "delay", "role", "session_id", "output_length", "extra", *_MEDIA}
)


def _turn_text(turn: dict, at: str) -> tuple[str | list[dict] | None, int]:
    """A multi_turn turn's text as a message content (one text: a string; several: text parts),
    and how many media fields it has (not imported)."""
    texts: list[str] = []
    if turn.get("text") is not None:
        if not isinstance(turn["text"], str):
            raise LineError("is not a string", f"{at}.text")
        texts.append(turn["text"])
    raw = turn.get("texts")
    if raw is not None:
        if not isinstance(raw, list):
            raise LineError("is not a list", f"{at}.texts")
        for item in raw:
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, dict) and isinstance(item.get("contents"), list):
                texts += [c for c in item["contents"] if isinstance(c, str)]
            else:
                raise LineError(f"{item!r} is not a string or {{name, contents}}", f"{at}.texts")
    media = sum(1 for m in _MEDIA if turn.get(m))
    if not texts and not media:
        raise LineError("has no text, texts or media", at)
    if not texts:
        return None, media
    return (texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]), media


def _multi_turn_line(obj: dict) -> str | None:
    """Check a multi_turn line; its session id (None: a session of its own)."""
    sid = obj.get("session_id")
    if sid is not None and not isinstance(sid, str):
        raise LineError("is not a string", "session_id")
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns:
        raise LineError("is missing or not a non-empty list", "turns")
    for k, t in enumerate(turns):
        at = f"turns.{k}"
        if not isinstance(t, dict):
            raise LineError("is not an object", at)
        unknown = sorted(set(t) - _SINGLE_TURN_KEYS)
        if unknown:
            raise LineError("is not a multi_turn turn key", f"{at}.{unknown[0]}")
        _turn_text(t, at)
        if t.get("timestamp") and t.get("delay"):
            raise LineError("timestamp and delay cannot be set together", f"{at}.delay")
        _ms(t.get("timestamp"), f"{at}.timestamp")
        _ms(t.get("delay"), f"{at}.delay")
        n = t.get("output_length")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise LineError(f"{n!r} is not an integer >= 1", f"{at}.output_length")
        if t.get("extra") is not None and not isinstance(t["extra"], dict):
            raise LineError("is not an object", f"{at}.extra")
        if t.get("role") is not None and not isinstance(t["role"], str):
            raise LineError("is not a string", f"{at}.role")
    return sid or None


def import_aiperf_multi_turn(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    rate: float | None = None,
    seed: int = 0,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    skip_bad: bool = False,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> Any:
    """Import an AIPerf ``multi_turn`` file into the Trace file ``out`` (module docstring):
    sessions whose first turn has no timestamp start at a Poisson process of ``rate``
    sessions/s seeded by ``seed``."""
    path = Path(path)
    source = path.name
    _check_rate(rate)
    bad = BadLines(source, skip_bad)
    sessions: dict[str, list[int]] = {}  # session -> offsets of its lines, in file order
    timed: dict[str, bool] = {}  # session -> its first turn has a timestamp
    for number, offset, obj in _lines(path, bad):
        try:
            sid = _multi_turn_line(obj)
        except LineError as e:
            bad.bad(number, e)
            continue
        sid = sid if sid is not None else f"line-{number}"
        if sid not in sessions:
            sessions[sid] = []
            timed[sid] = obj["turns"][0].get("timestamp") is not None
        sessions[sid].append(offset)
    if not sessions:
        raise TraceError(f"{source}: no sessions imported ({bad.count} lines skipped as malformed)")
    untimed = [sid for sid in sessions if not timed[sid]]
    if untimed and rate is None:
        raise ConfigError(f"{source}: session {untimed[0]!r} has no timestamp: pass --rate R to start such sessions at R/s")
    starts = dict(zip(untimed, _starts(len(untimed), rate or 1.0, seed)))
    counts: Counter = Counter()

    def lines() -> Iterator[dict]:
        for sid, offsets in sessions.items():
            turns = [t for offset in offsets for t in _read_at(path, offset)["turns"]]
            system: list[dict] = []
            first = turns[0]
            if (
                len(turns) > 1
                and first.get("role") == "system"
                and not any(first.get(m) for m in _MEDIA)
                and all(first.get(f) is None for f in ("timestamp", "delay", "output_length", "extra"))
            ):
                text, _ = _turn_text(first, "turns.0")
                system = [{"role": "system", "content": content_text(text) or ""}]
                turns = turns[1:]
            history: list[dict] = []
            prev: tuple[str, int] | None = None
            for k, t in enumerate(turns):
                text, media = _turn_text(t, f"turns.{k}")
                counts["media_not_imported"] += media
                if text is None:
                    counts["turns_without_text"] += 1
                    continue
                if t.get("timestamp") is not None:
                    arrival = _ms(t["timestamp"], "timestamp")
                    wait = None
                else:
                    delay = _ms(t.get("delay"), "delay")
                    arrival = (prev[1] if prev else starts[sid]) + delay
                    wait = delay if prev else None
                if prev is not None and arrival < prev[1]:
                    arrival = prev[1]  # a timestamp before the turn it follows: not before it
                    counts["timestamps_before_previous_turn"] += 1
                messages = history + [{"role": t.get("role") or "user", "content": text}]
                body: dict[str, Any] = {"messages": system + messages}
                if t.get("output_length") is not None:
                    body["max_tokens"] = t["output_length"]
                body.update(t.get("extra") or {})
                rid = f"{sid}:{k}"
                line: dict[str, Any] = {
                    "request_id": rid,
                    "session_id": sid,
                    "timestamp": arrival / 1e6,
                    "body": body,
                    "depends_on": [prev[0]] if prev else [],
                    "wait_ms": wait / 1e3 if wait is not None else None,
                }
                if t.get("output_length") is not None:
                    line["usage"] = {"completion_tokens": t["output_length"]}  # no recorded output: its limit
                yield line
                history = messages + [dict(_LIVE_REPLY)]
                prev = (rid, arrival)

    def multi_turn_report() -> dict:
        return {
            "sessions": len(sessions),
            "rate": rate if untimed else None,
            "seed": seed,
            **bad.report(),
            **dict(sorted(counts.items())),
            "not_mapped": "no recorded replies: output_tokens is output_length, live replies are empty "
            "assistant messages; images, audio and video are not imported",
        }

    return import_requests(
        lines(),
        out,
        source=path.name,
        source_format=MULTI_TURN_FORMAT,
        report=multi_turn_report,
        tokenizer=tokenizer,
        block_size=block_size,
        limit=limit,
        key=key,
        progress=progress,
    )
