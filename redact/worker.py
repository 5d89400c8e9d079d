"""What a redaction worker holds and does: a process of a :class:`redact.pipeline.Redactor`'s
pool, or one of its Ray actors (:mod:`redact.ray_pool`).

Owns :class:`ChunkAnalyzer` (a Presidio analyser and the surrogates of the values it finds, made
with the Redactor's key and tokenizer, so they are the ones the Redactor would make),
:func:`init_worker` (a pool process's initializer) and :func:`analyze_chunk` (its task).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Sequence
from typing import Any

from redact.key import RedactionKey
from replay.errors import RedactionError

__all__ = ["Spans", "Made", "ChunkAnalyzer", "init_worker", "analyze_chunk"]

# a worker's answer for a chunk of texts: each text's spans (type, start, end) or the reason its
# analysis failed, and the surrogates it made: (type, value, surrogate, token count off)
Spans = list[tuple[str, int, int]] | str
Made = list[tuple[str, str, str, bool]]


class ChunkAnalyzer:
    """What a worker process or a Ray actor holds: a Presidio analyser and, where the tokenizer
    loads, the surrogates of the values it finds (see the module docstring)."""

    def __init__(
        self, entities: Sequence[str], threshold: float, extra: Sequence[Any], key: RedactionKey, tokenizer: str
    ) -> None:
        from redact.analyzer import TextAnalyzer
        from redact.surrogates import Surrogates
        from replay.tokenizer import load_tokenizer

        self.analyzer = TextAnalyzer(entities, threshold, extra)
        try:
            self.surrogates: Surrogates | None = Surrogates(key, load_tokenizer(tokenizer))
        except Exception:  # noqa: BLE001 (a node without the tokenizer: the Redactor makes them)
            self.surrogates = None

    def analyze(self, texts: list[str]) -> tuple[list[Spans], Made]:
        results = self.analyzer.analyze_spans(texts)
        made: Made = []
        if self.surrogates is not None:
            seen: set[tuple[str, str]] = set()
            for text, spans in zip(texts, results):
                if isinstance(spans, str):
                    continue
                for entity, start, end in spans:
                    value = text[start:end]
                    if (entity, value) not in seen:
                        seen.add((entity, value))
                        made.append((entity, value, *self.surrogates.make(entity, value)))
        return results, made


_worker: ChunkAnalyzer | None = None  # a worker process's, made by init_worker


def init_worker(entities: Sequence[str], threshold: float, extra: Sequence[Any], key: RedactionKey, tokenizer: str) -> None:
    global _worker
    _worker = ChunkAnalyzer(entities, threshold, extra, key, tokenizer)
    # a spawned worker ends with a full interpreter shutdown (tearing down spaCy, Presidio and
    # their modules object by object: 0.3-0.7 s that close() waits for); it writes no files, so
    # end it at the first exit handler instead, once its output is flushed (only in a child
    # process: never cut short the exit, or change the exit status, of a process that called
    # this itself)
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        atexit.register(_quick_exit)


def _quick_exit() -> None:
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001,S110 (a closed stream: nothing to flush)
            pass
    os._exit(0)


def analyze_chunk(texts: list[str]) -> tuple[list[Spans], Made]:
    if _worker is None:  # the pool's initializer makes it; a worker without one analyses nothing
        raise RedactionError("redaction worker: its analyzer was not loaded (init_worker did not run)")
    return _worker.analyze(texts)
