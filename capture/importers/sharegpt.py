"""Importer of ShareGPT conversation files (one JSON array), as vLLM's benchmarks read them.

Owns :func:`import_sharegpt`, :func:`json_array_items` (a JSON array read a record at a time)
and :func:`first_array_item`. The file (``ShareGPT_V3_unfiltered_cleaned_split.json``, about
673 MB) is one JSON array of records ``{"id": "<conversation>_<n>", "conversations": [{"from":
"human"|"user"|"gpt"|"bing"|"chatgpt"|"bard"|"system", "value": "<text>"}]}``; FastChat split
long conversations into chunks whose ids share the part before ``_``. It is read a record at a
time (:func:`json_array_items`: :meth:`json.JSONDecoder.raw_decode` over a window of the file),
never whole. It has no times: ``rate`` spaces the requests (``single``) or the conversations
(``multi``) as a Poisson process seeded by ``seed``, the first at 0, as an OpenAI Batch file's
are (:mod:`capture.importers.openai_log`).

Two readings (``mode``):

- ``single`` (vLLM ``bench serve --dataset-name sharegpt``, ``ShareGPTDataset`` and
  ``is_valid_sequence``): each record of at least 2 messages is one request whose prompt is
  ``conversations[0].value`` (sent as one user message, whatever its role) and whose reference
  completion is ``conversations[1].value`` (its token count is the row's ``output_tokens`` and
  ``max_tokens``). vLLM's length filters drop a record whose prompt or completion is under 4
  tokens, whose prompt is over 1024, or whose sum is over 2048, counted under the trace's
  tokenizer (without special tokens: a tokenizer that adds a BOS counts one more in vLLM).
  Unlike vLLM, records are taken in file order, not shuffled, and not repeated to a count
  (``limit`` keeps the first N).
- ``multi`` (vLLM's ``benchmarks/multi_turn/convert_sharegpt_to_openai.py``): the chunks of a
  conversation (adjacent records with the same ``id.split("_")[0]``) are joined, a chunk's first
  message dropped when it has the role the previous chunk ended with; ``from`` maps to roles
  (human/user: user, gpt/bing/chatgpt/bard: assistant, system: system); the leading assistant
  messages of a conversation (it continues an earlier one) are dropped. Each assistant message
  is then one turn: its body is the conversation before it (the history and the next user
  message), its answer that message (``output_tokens`` its token count). A conversation is a
  session (``session_id`` its id; the chunks of one id that are not adjacent make another,
  ``<id>~<k>``); its turns are ``think_s`` seconds apart (default :data:`THINK_TIME_S`: ShareGPT
  records no think time). The rows carry no latency, so a replay with ``--sessions dag`` sends
  each turn that long after the previous turn's answer ends. No length filter (the converter
  has none by tokens); messages after the last answer are not requests (counted).

The requests are written as an OpenAI request log beside the output and imported as ``replay
import openai`` does (:func:`capture.importers.agent_logs.import_calls`: tokens, block hashes,
redaction with the key before anything is written, sessions and edges); the import report's
``sharegpt`` entry counts the records read, dropped by each rule, and the skipped ones. A record
that is not an object with ``id`` and ``conversations`` (or, in ``multi``, a message with an
unknown ``from``) is an error naming its number and field, or skipped and counted with
``skip_bad``; JSON that does not parse stops the import whatever ``skip_bad`` says (an array
cannot be read past it).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from capture.importers.agent_logs import Skips, chat_completion, import_calls
from capture.importers.records import LineError
from replay.errors import ConfigError, TraceError
from replay.trace import BLOCK_SIZE

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = ["MODES", "THINK_TIME_S", "import_sharegpt", "json_array_items", "first_array_item"]

SOURCE_FORMAT = "sharegpt"
MODES = ("single", "multi")
THINK_TIME_S = 10.0  # multi: seconds between a turn and the next (ShareGPT records none)
# vLLM's is_valid_sequence: the least prompt / completion tokens, the most prompt and total
MIN_TOKENS, MAX_PROMPT_TOKENS, MAX_TOTAL_TOKENS = 4, 1024, 2048
ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "bing": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "system": "system",
}
READ_CHARS = 1 << 20  # characters read from the file at a time
MAX_RECORD_CHARS = 256 << 20  # a record longer than this is malformed JSON
_SPACE = re.compile(r"\s*")


class _Window:
    """A window of a text file: the unread part of what has been read."""

    def __init__(self, f: TextIO) -> None:
        self.f = f
        self.buf = ""
        self.pos = 0

    def more(self, chars: int) -> bool:
        data = self.f.read(chars)
        if not data:
            return False
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            self.pos = _SPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more(READ_CHARS):
                return ""


def json_array_items(path: Path) -> Iterator[tuple[int, Any]]:
    """``(n, item)`` for each item of the JSON array in ``path`` (n from 1), read a window at a
    time (memory: the window and one item). Not an array, or an item that does not parse, is a
    :class:`~replay.errors.TraceError` naming the item."""
    source = path.name
    if not path.is_file():
        raise TraceError(f"{source}: no such file")
    decode = json.JSONDecoder().raw_decode
    try:
        f = path.open("r", encoding="utf-8")
    except OSError as e:
        raise TraceError(f"{source}: cannot read ({e.strerror or e})") from e
    with f:
        w = _Window(f)
        try:
            if w.peek() != "[":
                raise TraceError(f"{source}: not a JSON array (a ShareGPT file is one array of records)")
            w.pos += 1
            n = 0
            while True:
                c = w.peek()
                if c == "]":
                    return
                if n:
                    if c != ",":
                        raise TraceError(f"{source}: record {n}: not followed by ',' or ']'")
                    w.pos += 1
                    c = w.peek()
                if not c:
                    raise TraceError(f"{source}: the array ends unclosed after record {n}")
                chunk = READ_CHARS
                while True:
                    try:
                        item, end = decode(w.buf, w.pos)
                        break
                    except json.JSONDecodeError:
                        if len(w.buf) - w.pos > MAX_RECORD_CHARS or not w.more(chunk):
                            raise TraceError(f"{source}: record {n + 1}: not valid JSON") from None
                        chunk *= 2  # an item longer than the window: read on, doubling
                n += 1
                w.pos = end
                yield n, item
        except UnicodeDecodeError:
            raise TraceError(f"{source}: not UTF-8 text") from None


def first_array_item(text: str) -> Any:
    """The first item of the JSON array ``text`` starts (a file's head), or None."""
    start = text.find("[")
    if start < 0:
        return None
    pos = _SPACE.match(text, start + 1).end()  # type: ignore[union-attr]
    try:
        return json.JSONDecoder().raw_decode(text, pos)[0]
    except ValueError:
        return None


def _record(item: Any, roles: bool) -> tuple[str, list[dict]]:
    """A record's id and its messages (``role`` and ``content``; ``roles=False``: ``from`` kept
    as it is, unchecked, as vLLM's single-turn reading ignores it)."""
    if not isinstance(item, dict):
        raise LineError("is not a JSON object")
    rid = item.get("id")
    if not isinstance(rid, str) or not rid:
        raise LineError("is missing or not a string", "id")
    conv = item.get("conversations")
    if not isinstance(conv, list):
        raise LineError(f"(id {rid}) is missing or not a list", "conversations")
    messages = []
    for i, m in enumerate(conv):
        if not isinstance(m, dict) or not isinstance(m.get("value"), str):
            raise LineError(f"(id {rid}) is not a string", f"conversations[{i}].value")
        role = ROLES.get(m.get("from")) if roles else m.get("from")  # type: ignore[arg-type]
        if roles and role is None:
            raise LineError(f"(id {rid}) {m.get('from')!r} is not one of {', '.join(ROLES)}", f"conversations[{i}].from")
        messages.append({"role": role, "content": m["value"]})
    return rid, messages


def _line(arrival_s: float, request_id: str, messages: list[dict], answer: str, session: str | None) -> dict:
    """An OpenAI request log line (what :func:`capture.importers.openai_log.parse_openai_line` reads)."""
    line = {
        "timestamp": round(arrival_s, 6),
        "request_id": request_id,
        "body": {"messages": messages},
        "response": chat_completion(None, None, {"role": "assistant", "content": answer}, None),
    }
    if session is not None:
        line["session_id"] = session
    return line


class _Reader:
    """Turns the records of a ShareGPT file into OpenAI request log lines (the module docstring)."""

    def __init__(self, path: Path, skips: Skips, skip_bad: bool, rate: float, seed: int, limit: int | None) -> None:
        self.path = path
        self.skips = skips
        self.skip_bad = skip_bad
        self.rate = rate
        self.rng = np.random.default_rng(seed)
        self.limit = limit
        self.next_s = 0.0  # the next arrival of the Poisson process
        self.records = 0

    def arrival(self) -> float:
        t = self.next_s
        self.next_s += float(self.rng.exponential(1.0 / self.rate))
        return t

    def items(self, roles: bool) -> Iterator[tuple[str, list[dict]]]:
        for n, item in json_array_items(self.path):
            self.records += 1
            try:
                yield _record(item, roles)
            except LineError as e:
                if not self.skip_bad:
                    raise TraceError(f"{self.path}: record {n}: {e.describe()}") from None
                self.skips.bad.append(f"{self.path.name}: record {n}: {e.describe()}")

    def single(self, tokenizer: str) -> Iterator[dict]:
        from replay.bodies import text_token_ids
        from replay.tokenizer import load_tokenizer

        tok = load_tokenizer(tokenizer)
        kinds = self.skips.kinds
        made = 0
        for rid, messages in self.items(roles=False):
            if len(messages) < 2:
                kinds["fewer_than_2_messages"] += 1
                continue
            prompt, completion = messages[0]["content"], messages[1]["content"]
            p, c = (len(ids) for ids in text_token_ids([prompt, completion], tok))
            if p < MIN_TOKENS or c < MIN_TOKENS:
                kinds[f"prompt_or_output_under_{MIN_TOKENS}_tokens"] += 1
            elif p > MAX_PROMPT_TOKENS:
                kinds[f"prompt_over_{MAX_PROMPT_TOKENS}_tokens"] += 1
            elif p + c > MAX_TOTAL_TOKENS:
                kinds[f"total_over_{MAX_TOTAL_TOKENS}_tokens"] += 1
            else:
                yield _line(self.arrival(), f"{rid}@{self.records}", [{"role": "user", "content": prompt}], completion, None)
                made += 1
                if self.limit is not None and made >= self.limit:
                    return

    def conversations(self) -> Iterator[tuple[str, list[dict]]]:
        """Each conversation (adjacent chunks joined), its id made unique."""
        seen: dict[str, int] = {}
        base: str | None = None
        joined: list[dict] = []
        for rid, messages in self.items(roles=True):
            conv = rid.split("_")[0]
            if conv == base:
                if joined and messages and joined[-1]["role"] == messages[0]["role"]:
                    messages = messages[1:]
                joined.extend(messages)
                self.skips.kinds["chunks_joined"] += 1
                continue
            if base is not None:
                yield self._session_id(base, seen), joined
            base, joined = conv, list(messages)
        if base is not None:
            yield self._session_id(base, seen), joined

    def _session_id(self, conv: str, seen: dict[str, int]) -> str:
        k = seen.get(conv, 0)
        seen[conv] = k + 1
        if k:
            self.skips.kinds["conversations_split_apart"] += 1
        return conv if k == 0 else f"{conv}~{k}"

    def multi(self, think_s: float) -> Iterator[dict]:
        kinds = self.skips.kinds
        made = 0
        for session, messages in self.conversations():
            lead = 0
            while lead < len(messages) and messages[lead]["role"] == "assistant":
                lead += 1
            kinds["leading_assistant_messages_dropped"] += lead
            messages = messages[lead:]
            start = None
            turn = 0
            for i, m in enumerate(messages):
                if m["role"] != "assistant":
                    continue
                if start is None:
                    start = self.arrival()
                yield _line(start + turn * think_s, f"{session}/{turn}", messages[:i], m["content"], session)
                turn += 1
                made += 1
                if self.limit is not None and made >= self.limit:
                    return
            last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
            kinds["messages_after_the_last_answer"] += len(messages) - 1 - last
            if turn == 0:
                kinds["conversations_without_an_answer"] += 1


def import_sharegpt(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    mode: str = "single",
    rate: float | None = None,
    think_s: float = THINK_TIME_S,
    seed: int = 0,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    skip_bad: bool = False,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import the ShareGPT file ``path`` into the Trace file ``out`` (see the module docstring):
    ``mode`` ``single`` (vLLM's reading) or ``multi`` (sessions of chat turns); ``rate``
    requests (single) or conversations (multi) per second; ``think_s`` between turns."""
    if mode not in MODES:
        raise ConfigError(f"--sharegpt-mode: {mode!r} is not one of {', '.join(MODES)}")
    if rate is None:
        raise ConfigError(
            "sharegpt: the file has no times: pass --rate R (requests per second; with "
            "--sharegpt-mode multi, conversations per second)"
        )
    if not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"--rate: must be a number > 0, got {rate}")
    if not (math.isfinite(think_s) and think_s >= 0):
        raise ConfigError(f"--think-time: must be a number of seconds >= 0, got {think_s}")
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    report: dict[str, Any] = {"mode": mode, "rate": rate, "seed": seed}
    if mode == "multi":
        report["think_time_s"] = think_s

    def calls_of(file: Path, skips: Skips) -> Iterator[dict]:
        reader = _Reader(file, skips, skip_bad, rate, seed, limit)
        yield from reader.single(tokenizer) if mode == "single" else reader.multi(think_s)
        report["records_read"] = reader.records

    return import_calls(
        [path],
        calls_of,
        out,
        source_format=SOURCE_FORMAT,
        report_key="sharegpt",
        report=report,
        tokenizer=tokenizer,
        block_size=block_size,
        limit=limit,
        key=key,
        progress=progress,
    )
