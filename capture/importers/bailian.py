"""Importer of the Alibaba Bailian (Qwen) usage traces, JSON Lines (KVCache in the wild, ATC'25).

Owns :func:`import_bailian`. Each line is one request (alibaba-edu/qwen-bailian-usagetraces-anon,
README.md):

- ``chat_id``: the request's id (an integer), ``parent_chat_id``: the request it follows (-1: a
  root, the first request of a conversation);
- ``timestamp``: seconds (a float) from the start of the file;
- ``input_length``, ``output_length``: token counts; ``input_length`` is the COMPLETE request,
  the history included (the next turn's request repeats the earlier ones, as a chat API's does);
- ``type``: text, search, image or file (the product feature, not the API);
- ``turn``: the turn in the conversation, 1 for a root;
- ``hash_ids``: one id per 16-token block of the prompt (salted SipHash remapped to integers), the
  partial last block included, so ``len(hash_ids) == ceil(input_length / 16)``.

Each row becomes a completions request with a null body, synthesized by the replay from its
``hash_ids`` (:mod:`replay.synth`, 16 tokens per id): rows sharing ids share text, so the trace's
prefix sharing survives. ``max_tokens = output_length``. Its session is the root ``chat_id`` reached
by following the parents, its ``parent_request_id`` the parent's request, its ``turn`` the
source's minus one (the Trace counts from 0). A parent not read before its child (missing from
the file, or skipped as malformed) makes the child a root; the import report counts these
(``parent_missing``), the rows of each ``type`` and what is not replayed (:data:`NOT_REPLAYED`).

Streaming: the one thing kept from row to row is a dict from each ``chat_id`` read to its root's
(about 75 bytes a row: 74 MB measured at 1M rows); records are not held.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from capture.importers.records import BadLines, LineError, count
from capture.importers.tokens import ImportResult, TokenRecord, read_jsonl_rows, write_token_trace
from replay.errors import ConfigError
from replay.synth import Synthesis

__all__ = ["BAILIAN_BLOCK_TOKENS", "BAILIAN_FIELDS", "NOT_REPLAYED", "import_bailian"]

BAILIAN_BLOCK_TOKENS = 16
BAILIAN_FIELDS = ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length", "type", "turn", "hash_ids")
SOURCE_FORMAT = "bailian-jsonl"
# what the trace cannot carry, said in the import report (and by the CLI)
NOT_REPLAYED = (
    "not replayed: the 'type' feature (search, image, file: the prompt's tokens are replayed as text); "
    "no end times, so turns arrive at their recorded times (no depends_on / wait_us)"
)


def _int(value: object, field: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise LineError(f"{value!r} is not an integer >= {least}", field)
    return value


class _Parser:
    def __init__(self, hash_block: int) -> None:
        self.hash_block = hash_block
        self.roots: dict[int, int] = {}  # chat_id -> its root's chat_id (every row read so far)
        self.types: Counter = Counter()
        self.sessions = 0
        self.parent_missing = 0

    def record(self, line: int, obj: object) -> TokenRecord:
        if isinstance(obj, LineError):
            raise obj
        if not isinstance(obj, dict):
            raise LineError("not a JSON object")
        chat = _int(obj.get("chat_id"), "chat_id", 0)
        if chat in self.roots:
            raise LineError(f"{chat} is the chat_id of an earlier line", "chat_id")
        parent = _int(obj.get("parent_chat_id"), "parent_chat_id", -1)
        stamp = obj.get("timestamp")
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp) or stamp < 0:
            raise LineError(f"{stamp!r} is not a time in seconds >= 0", "timestamp")
        n_in = count(obj.get("input_length"), "input_length")
        n_out = count(obj.get("output_length"), "output_length")
        for name, value in (("input_length", n_in), ("output_length", n_out)):
            if value is None:
                raise LineError("is missing", name)
        assert n_in is not None  # for mypy: checked just above
        turn = _int(obj.get("turn"), "turn", 1)
        kind = obj.get("type", "none")
        if not isinstance(kind, str):
            raise LineError(f"{kind!r} is not a string", "type")
        ids = obj.get("hash_ids")
        if not isinstance(ids, list) or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64 for v in ids):
            raise LineError("is not a list of integers >= 0", "hash_ids")
        want = -(-n_in // self.hash_block)
        if len(ids) != want:
            raise LineError(
                f"has {len(ids)} ids, expected ceil(input_length / {self.hash_block}) = {want} "
                f"(a file hashed at another block size needs --hash-block)",
                "hash_ids",
            )
        # only a well-formed line gets here: its chat_id is known from now on
        root = self.roots.get(parent) if parent != -1 else None
        if root is None:
            root = chat
            self.sessions += 1
            self.parent_missing += parent != -1
        self.roots[chat] = root
        self.types[kind] += 1
        return TokenRecord(
            line=line,
            arrival_us=round(stamp * 1_000_000),
            input_tokens=n_in,
            output_tokens=n_out,
            request_id=f"bailian-{chat}",
            api="completions",
            session_id=str(root),
            parent_request_id=None if root == chat else f"bailian-{parent}",
            turn=turn - 1,
            hash_ids=ids,
        )

    def report(self) -> dict:
        return {
            "sessions": self.sessions,
            "parent_missing": self.parent_missing,
            "types": dict(sorted(self.types.items())),
            "not_replayed": NOT_REPLAYED,
        }


def import_bailian(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    seed: int = 0,
    limit: int | None = None,
    block_size: int = BAILIAN_BLOCK_TOKENS,
    hash_block: int = BAILIAN_BLOCK_TOKENS,
    model: str | None = None,
    skip_bad: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import a Bailian trace (JSON Lines) into the Trace file ``out`` (see the module docstring;
    ``limit``: the first N rows). ``hash_block`` is the file's tokens per hash id (default 16, the
    published files'); ``block_size`` the block of ``block_hashes`` (default 16); ``seed`` seeds
    the synthesized texts; ``model``, when given, is the model column (and so each body's)."""
    path = Path(path)
    if hash_block < 1:
        raise ConfigError(f"--hash-block: {hash_block} tokens per hash id; need at least 1")
    bad = BadLines(path.name, skip_bad)
    parser = _Parser(hash_block)

    def records() -> Iterator[TokenRecord]:
        for line, obj in read_jsonl_rows(path):
            try:
                rec = parser.record(line, obj)
            except LineError as e:
                bad.bad(line, e)
                continue
            rec.model = model
            yield rec

    return write_token_trace(
        records(),
        out,
        source=path.name,
        source_format=SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size,
        synthesis=Synthesis(seed=seed, block_tokens=hash_block),
        bad=bad,
        report=parser.report,
        limit=limit,
        progress=progress,
    )
