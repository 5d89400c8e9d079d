"""Importer of Mooncake JSON Lines traces (FAST'25), and AIPerf's ``mooncake_trace`` variant.

Owns :func:`import_mooncake`. Each line is a JSON object:

- Mooncake: ``timestamp`` (ms from the start), ``input_length``, ``output_length`` and
  ``hash_ids``: one id per 512-token block of the prompt, the partial last block included
  (``len(hash_ids) == ceil(input_length / 512)``). The FAST'25 workload traces
  (``conversation_trace.jsonl``, ``toolagent_trace.jsonl``, ``synthetic_trace.jsonl``) and the
  older arXiv ``mooncake_trace.jsonl`` all have this form.
- AIPerf's ``mooncake_trace`` adds, each optional: ``text_input`` (the prompt as text),
  ``messages`` (a chat conversation, OpenAI form), ``session_id`` and ``delay`` (ms after the
  session's previous turn, for a line without a ``timestamp``); ``hash_ids`` may be absent.

A row with ``messages`` or ``text_input`` keeps that real text as its body (a chat request with
``max_tokens = output_length``; its tokens and block hashes come from the text, and the trace is
marked ``redaction_policy=none``: run ``replay redact`` before sharing it). Any other row is a
completions request with a null body, synthesized by the replay (:mod:`replay.synth`): from its
``hash_ids``, the same id always giving the same 512-token block of text, so the trace's prefix
sharing survives; or, without ids, per request. ``block_hashes`` are over that text's token ids.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from capture.importers.records import BadLines, LineError, count
from capture.importers.tokens import ImportResult, TokenRecord, read_jsonl_rows, write_token_trace
from replay.synth import Synthesis

__all__ = ["MOONCAKE_BLOCK_TOKENS", "MOONCAKE_COLUMNS", "import_mooncake"]

MOONCAKE_BLOCK_TOKENS = 512
MOONCAKE_COLUMNS = ("timestamp", "input_length", "output_length", "hash_ids")
SOURCE_FORMAT = "mooncake-jsonl"


def _ms(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LineError(f"{value!r} is not a time in ms >= 0", field)
    return float(value)


class _Parser:
    def __init__(self, model: str | None, hash_block: int) -> None:
        self.model = model
        self.hash_block = hash_block
        self.row = 0
        self.session_last: dict[str, int] = {}  # session -> arrival µs of its latest turn

    def record(self, line: int, obj: object) -> TokenRecord:
        if isinstance(obj, LineError):
            raise obj
        if not isinstance(obj, dict):
            raise LineError("not a JSON object")
        session = obj.get("session_id")
        if session is not None and not isinstance(session, (str, int)):
            raise LineError(f"{session!r} is not a string", "session_id")
        session = None if session is None else str(session)
        if obj.get("timestamp") is not None:
            arrival = round(_ms(obj["timestamp"], "timestamp") * 1000)
        elif obj.get("delay") is not None and session in self.session_last:
            arrival = self.session_last[session] + round(_ms(obj["delay"], "delay") * 1000)
        else:
            raise LineError("is missing (a 'delay' needs an earlier turn of its session)", "timestamp")
        output = count(obj.get("output_length"), "output_length")
        body: dict[str, Any] | None = None
        messages, text = obj.get("messages"), obj.get("text_input")
        if messages is not None:
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages) or not messages:
                raise LineError("is not a list of message objects", "messages")
            body = {"messages": messages}
        elif text is not None:
            if not isinstance(text, str):
                raise LineError("is not a string", "text_input")
            body = {"messages": [{"role": "user", "content": text}]}
        hash_ids = None
        n_in = 0
        if body is None:
            length = count(obj.get("input_length"), "input_length")
            if length is None:
                raise LineError("is missing", "input_length")
            n_in = length
            if output is None:
                raise LineError("is missing", "output_length")
            ids = obj.get("hash_ids")
            if ids is not None:
                if not isinstance(ids, list) or not all(
                    isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64 for v in ids
                ):
                    raise LineError("is not a list of integers >= 0", "hash_ids")
                want = -(-n_in // self.hash_block)
                if len(ids) != want:
                    raise LineError(
                        f"has {len(ids)} ids, expected ceil(input_length / "
                        f"{self.hash_block}) = {want} (a file written at another block "
                        f"size needs --hash-block)",
                        "hash_ids",
                    )
                hash_ids = ids
        else:
            if self.model is not None:
                body = {"model": self.model, **body}
            if output is not None:
                body["max_tokens"] = output
        if session is not None:
            self.session_last[session] = arrival
        rec = TokenRecord(
            line=line,
            arrival_us=arrival,
            input_tokens=n_in,
            output_tokens=output,
            request_id=f"mooncake-{self.row:06d}",
            api="chat" if body is not None else "completions",
            model=self.model,
            session_id=session,
            hash_ids=hash_ids,
            body=body,
        )
        self.row += 1
        return rec


def import_mooncake(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    seed: int = 0,
    limit: int | None = None,
    block_size: int = MOONCAKE_BLOCK_TOKENS,
    hash_block: int = MOONCAKE_BLOCK_TOKENS,
    model: str | None = None,
    skip_bad: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import a Mooncake (or AIPerf ``mooncake_trace``) JSON Lines file into the Trace file
    ``out`` (``limit``: the first N rows). ``block_hashes`` are in blocks of ``block_size``
    (default 512, Mooncake's own); ``hash_block`` is the file's tokens per hash id (default 512,
    Mooncake's; ``replay export mooncake --block-size N`` writes N), and the text synthesized for
    one id has that many tokens; ``seed`` seeds the texts of rows without ``hash_ids``;
    ``model``, when given, is the model column (and so each body's)."""
    path = Path(path)
    if hash_block < 1:
        from replay.errors import ConfigError

        raise ConfigError(f"--hash-block: {hash_block} tokens per hash id; need at least 1")
    bad = BadLines(path.name, skip_bad)
    parser = _Parser(model, hash_block)

    def records() -> Iterator[TokenRecord]:
        for line, obj in read_jsonl_rows(path):
            try:
                yield parser.record(line, obj)
            except LineError as e:
                bad.bad(line, e)

    return write_token_trace(
        records(),
        out,
        source=path.name,
        source_format=SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size,
        synthesis=Synthesis(seed=seed, block_tokens=hash_block),
        bad=bad,
        limit=limit,
        progress=progress,
    )
