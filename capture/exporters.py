"""Exporters of a Trace into other tools' formats, streaming (the library side of ``replay export``).

Owns :data:`EXPORT_FORMATS`, :class:`ExportResult`, :func:`export_trace` and :func:`mooncake_hash_ids`.
The trace is read with its small columns in memory and its bodies a window at a time (null bodies
built by :mod:`replay.synth` as the replay would build them); lines are written as they are made,
to a hidden file renamed over ``out`` at the end (nothing half-written on an error).

The second lock (:mod:`redact.lock`): unless the trace is raw (``redaction_policy`` "none"), every
string of each line (JSON keys and values) is scanned before the line is written; a line with a
PII shape whose exact string is not a surrogate of the trace's ``lock_exempt`` is not written, and
is counted per type found (:attr:`ExportResult.quarantined`). A raw trace bypasses the lock
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
- ``aiperf``: AIPerf's ``mooncake_trace`` with text: ``{"timestamp", "session_id"?,
  "messages" | "text_input", "output_length"}``; a chat body's ``messages`` as they are, any
  other body's prompt text (:func:`replay.bodies.text_slots`: a completions ``prompt``, a
  Responses API ``instructions`` and ``input``, an embeddings ``input``) as ``text_input``.
- ``openai``: an OpenAI request log as ``replay import openai`` reads it: ``timestamp`` (ISO 8601,
  UTC, µs), ``request_id``, ``session_id``, ``url`` (for a Responses API or embeddings row, whose
  body alone does not say which), ``body``, and where the trace has them ``response``
  (the answer's text), ``usage`` (``prompt_tokens``, ``completion_tokens``,
  ``prompt_tokens_details.cached_tokens``), ``ttft_ms``, ``latency_ms``, ``status``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
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

__all__ = ["EXPORT_FORMATS", "ExportResult", "export_trace", "mooncake_hash_ids"]

EXPORT_FORMATS = ("mooncake", "aiperf", "openai")
_WINDOW = 1024


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


def _dumps(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class ExportResult:
    """Lines written, and the records the second lock kept out (per type found)."""

    written: int
    quarantined: Counter = field(default_factory=Counter)  # type -> records kept out
    locked: bool = True  # False: a raw trace, written without the lock


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
    block_size: int = 512,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    """Write ``trace`` (a path or a Trace) to ``out`` in ``format`` (see the module docstring).
    ``block_size`` is the Mooncake ids' block; ``progress(records done)``."""
    if format not in EXPORT_FORMATS:
        raise ConfigError(f"format '{format}' unknown (known: {', '.join(EXPORT_FORMATS)})")
    if block_size <= 0:
        raise ConfigError(f"--block-size: must be positive, got {block_size}")
    source = "trace"
    if not isinstance(trace, Trace):
        source = Path(trace).name
        trace = read_trace(trace, bodies=False)
    lock = _lock_of(trace, source)
    quarantined: Counter = Counter()
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    writers: dict[str, Callable[[Trace, int], Callable[[dict, Any], dict]]] = {
        "mooncake": _Mooncake,
        "aiperf": _AIPerf,
        "openai": _OpenAI,
    }
    write_line = writers[format](trace, block_size)
    small = trace.df.select(
        "request_id",
        "api",
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
    done = written = 0
    try:
        with tmp.open("w", encoding="utf-8") as f:
            synthesize = format != "mooncake"
            for batch in trace.body_batches(len(trace), _WINDOW, synthesize=synthesize):
                rows = small.slice(done, len(batch)).to_dicts()  # a window at a time
                lines = []
                for row, body in zip(rows, batch):
                    line = write_line(row, body)
                    if lock is not None:
                        found = lock(line)
                        if found:
                            quarantined.update(found.keys())
                            continue
                    lines.append(_dumps(line) + "\n")
                f.write("".join(lines))
                done += len(batch)
                written += len(lines)
                if progress is not None:
                    progress(done)
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise TraceError(f"{out.name}: cannot write ({e.strerror or e})") from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ExportResult(written, quarantined, locked=lock is not None)


class _Mooncake:
    def __init__(self, trace: Trace, block_size: int) -> None:
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
        from replay.bodies import prompt_token_ids, text_slots

        return prompt_token_ids([s.text for s in text_slots(json.loads(body))], self.tok)

    def __call__(self, row: dict, body: str | None) -> dict:
        ids = self.token_ids(row, body)
        out = row["output_tokens"] if row["output_tokens"] is not None else (row["max_tokens"] or 0)
        return {
            "timestamp": _ms(row["arrival_us"]),
            "input_length": len(ids),
            "output_length": out,
            "hash_ids": mooncake_hash_ids(ids, self.block_size, self.numbering),
        }


class _AIPerf:
    def __init__(self, trace: Trace, block_size: int) -> None:
        pass

    def __call__(self, row: dict, body: str) -> dict:
        obj = json.loads(body)
        line: dict = {"timestamp": _ms(row["arrival_us"])}
        if row["session_id"] is not None:
            line["session_id"] = row["session_id"]
        if isinstance(obj.get("messages"), list):
            line["messages"] = obj["messages"]
        else:  # a completions prompt, a Responses API or embeddings input: its text
            line["text_input"] = "".join(s.text for s in text_slots(obj))
        out = row["output_tokens"] if row["output_tokens"] is not None else row["max_tokens"]
        if out is not None:
            line["output_length"] = out
        return line


class _OpenAI:
    def __init__(self, trace: Trace, block_size: int) -> None:
        self.t0 = trace.meta.t0_unix_us

    def __call__(self, row: dict, body: str) -> dict:
        us = self.t0 + row["arrival_us"]
        stamp = datetime.fromtimestamp(us // 1_000_000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        line: dict = {"timestamp": f"{stamp}.{us % 1_000_000:06d}Z", "request_id": row["request_id"]}
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
