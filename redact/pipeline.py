"""Redacting a trace: each distinct text analysed once, in worker processes, failing closed.

Owns :class:`Redactor`, :func:`redact_trace` and :func:`redact_file` (:mod:`redact.ray_data` runs
the same Redactor on a Ray cluster); the report and its per-row accounts are :mod:`redact.report`.

- What is redacted: every prompt string of each body (:func:`replay.bodies.text_slots`: message
  contents and content parts, tool descriptions, tool-call arguments, a completions prompt) and
  the recorded ``response``. Roles, structure and sampling parameters are untouched; a body with
  nothing found keeps its exact bytes. Each text is read through its structure
  (:mod:`redact.structure`): a JSON text leaf by leaf with its keys as context, written back as
  the same JSON (only string values and numbers change; a surrogate in a string is JSON-escaped;
  a text that would not stay the same JSON is kept out, ``lock: INVALID_JSON``), and a pasted
  table column by column.
- A body's identifier fields (:data:`ID_FIELDS`: the end user's id, the prompt-cache routing key)
  and every string value of its ``metadata`` are not prompt text (they add no tokens) but name
  people and accounts: each becomes ``"id-"`` and 24 hex digits of its keyed HMAC, so equal values
  stay equal across the trace and nothing raw is stored.
- Each text is analysed on its own and cached by its content hash (blake2b-128), so a system
  prompt or an earlier turn repeated in later requests is analysed once and redacted identically,
  and two requests that shared a prefix before share it after. The work grows with the unique
  text, not with requests x history. The cache is bounded (:data:`CACHE_CHARS` characters of
  text); LLM traffic repeats itself within sessions, so an LRU keeps what is reused.
- Texts the cache misses go to worker processes (:mod:`redact.worker`: a
  :class:`redact.analyzer.TextAnalyzer`, spaCy's ``nlp.pipe`` in batches) in chunks of
  :data:`CHUNK_TEXTS`. A worker also makes the surrogate
  of every value it found (:class:`redact.surrogates.Surrogates` with the same key and tokenizer:
  a surrogate is a function of the key, the type and the value, so it is the one this process
  would make) and sends them back with the spans; this process takes them into its own cache
  and makes only those a worker did not (a worker whose tokenizer did not load makes none).
  The recorder's own work per record is then the mentions, the second lock and the token counts.
- Every value found is learned (:class:`redact.mentions.Mentions`, in memory only) and replaced
  at every mention of it in every text; a text's redaction is built again when values were
  learned since it was built and its spans change. A whole trace is redacted in two passes
  (:meth:`Redactor.learn` over every text, then :meth:`Redactor.redact_rows`), so a value found
  in a later request is replaced in earlier ones too.
- Fail closed: a text whose analysis raises, or does not finish within ``timeout_s`` (the worker
  is killed and the texts it held are retried one at a time), is never written; every request
  that holds it is quarantined (counted, kept out of the output). So is a row the second lock
  (:mod:`redact.lock`) finds a PII shape in, outside the surrogates placed in it: in a redacted
  text, in the body's other strings (keys, names, schemas) or in the row's string columns
  (reason ``"lock: TYPE,..."``). The digests of the surrogates written go in the output's
  ``lock_exempt`` (for ``replay audit``).
- The input token counts and block hashes stay those of the raw text (the trace keeps the live
  lengths and prefix sharing); the report says how far the redacted text moved from them.
- Two steps per row batch: :meth:`Redactor.redact_rows` redacts the rows and gives each a
  :class:`RowAccount`; :meth:`Accounts.add` keeps the report from the accounts, in trace order,
  and returns the rows to write. Wherever the first step ran (here, or in a Ray actor), the
  report is the same.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from redact.analyzer import ENTITIES, SCORE_THRESHOLD
from redact.key import RedactionKey
from redact.lock import Exempt, strings_of
from redact.lock import scan as lock_scan
from redact.mentions import Mentions
from redact.report import CACHE_CHARS, Accounts, RedactionReport, RowAccount
from redact.structure import escaped_like, is_json, json_escape, json_unescape, span_values, value_ranges, view
from redact.worker import analyze_chunk, init_worker
from replay.bodies import body_json, name_slots, prompt_token_ids, replace_texts, text_slots
from replay.blocks import block_hashes
from replay.errors import RedactionError, TraceError
from replay.trace import Trace, TraceWriter, read_trace

__all__ = [
    "CHUNK_TEXTS",
    "ROW_BATCH",
    "DEFAULT_TIMEOUT_S",
    "ID_FIELDS",
    "Redactor",
    "pseudonymize_ids",
    "redact_trace",
    "redact_file",
    "finish_output",
]

CHUNK_TEXTS = 32
# where a message name (alice_smith, Alice-Smith) splits into words
_NAME_PARTS = re.compile(r"[_\-.\s]+")
ROW_BATCH = 2048
# JSON texts whose value ranges a Redactor remembers (redact.structure.value_ranges)
JSON_RANGES_KEPT = 4096
DEFAULT_TIMEOUT_S = 60.0
# a worker loads spaCy and Presidio when it starts (seconds; more on a busy machine)
START_TIMEOUT_S = 180.0
POLICY = "redacted"


# body fields that identify a person or an account (OpenAI's request fields), pseudonymized
ID_FIELDS = ("user", "safety_identifier", "prompt_cache_key")


def pseudonymize_ids(body: dict, key: RedactionKey) -> bool:
    """Replace ``body``'s identifier fields and ``metadata`` string values, in place, with keyed
    pseudonyms (see the module docstring); True when anything changed."""

    def pseudonym(field_name: str, value: str) -> str:
        return "id-" + key.digest("ID:" + field_name, value).hex()[:24]

    changed = False
    for name in ID_FIELDS:
        value = body.get(name)
        if isinstance(value, str) and value:
            body[name] = pseudonym(name, value)
            changed = True
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        for name, value in metadata.items():
            if isinstance(value, str) and value:
                metadata[name] = pseudonym("metadata", value)
                changed = True
    return changed


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def default_processes() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


@dataclass
class _Entry:
    """One distinct text: what the analyzer found in it, and once built, its redaction."""

    digest: bytes  # blake2b-128 of the raw text
    chars: int  # characters of the raw text
    failed: str | None  # why its analysis failed (then the text is never written)
    found: tuple[tuple[str, int, int], ...] = ()  # the analyzer's spans (raw offsets)
    text: str = ""  # the redacted text
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))  # its token ids
    delta: int = 0  # tokens(redacted) - tokens(raw)
    entities: tuple[str, ...] = ()  # the type of each span replaced
    off: tuple[tuple[str, bytes], ...] = ()  # (type, keyed digest) of surrogates off in length
    spans: tuple[tuple[str, int, int], ...] = ()  # what was replaced: found + mentions (raw offsets)
    mentions: int = 0  # of those, mentions of values found elsewhere (redact.mentions)
    scanned: int = -1  # Mentions.learned when it was built (-1: not yet)
    lock: tuple[str, ...] = ()  # types of the second lock's hits outside surrogates (never written)
    exempt: tuple[int, ...] = ()  # Exempt.digests_of its surrogates (the output's lock_exempt)

    @property
    def built(self) -> bool:
        """Whether its redaction is made (:meth:`Redactor.redact_texts` with ``build``)."""
        return self.scanned >= 0

    def info(self) -> tuple[bytes, int, tuple[str, ...], tuple[tuple[str, bytes], ...], int, tuple[int, ...]]:
        return self.digest, self.chars, self.entities, self.off, self.mentions, self.exempt


class Redactor:
    """Redacts texts and request bodies with one key, under one tokenizer, with a text cache.

    Use as a context manager (or call :meth:`close`) to stop the worker processes.
    """

    def __init__(
        self,
        key: RedactionKey,
        tokenizer: str = "gpt2",
        *,
        processes: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        entities: Sequence[str] = ENTITIES,
        threshold: float = SCORE_THRESHOLD,
        extra_recognizers: Sequence[Any] = (),
        cache_chars: int = CACHE_CHARS,
        ray_address: str | None = None,
    ):
        from redact.surrogates import Surrogates
        from replay.tokenizer import load_tokenizer

        self.key = key
        self.tokenizer_name = tokenizer
        self.tok = load_tokenizer(tokenizer)
        self.surrogates = Surrogates(key, self.tok)
        self.processes = processes or default_processes()
        self.timeout_s = timeout_s
        # a worker's (ChunkAnalyzer's) arguments; the key goes to the workers (and Ray actors),
        # which see the raw text anyway, so that they make the surrogates too
        self._init_args = (tuple(entities), threshold, tuple(extra_recognizers), key, tokenizer)
        # a Ray cluster's address (redact.ray_pool: "local" starts one here): ``processes``
        # analyser actors there in place of worker processes
        self.ray_address = ray_address
        self._pool: Any = None  # a ProcessPoolExecutor, or a redact.ray_pool.RayAnalyzerPool
        self._cache: OrderedDict[bytes, _Entry] = OrderedDict()
        self._cache_chars = 0
        self.cache_chars = cache_chars
        self.mentions = Mentions()
        self._seeded: dict[bytes, Any] = {}
        self._ranges: OrderedDict[bytes, list[tuple[int, int]] | None] = OrderedDict()  # see _json_ranges

    def __enter__(self) -> Redactor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    # -- analysis ---------------------------------------------------------------------------------

    def _get_pool(self) -> Any:
        """The worker pool (processes, or actors on Ray), started and checked: a pool that
        cannot analyse an empty text within :data:`START_TIMEOUT_S` is an error (not a reason to
        quarantine)."""
        if self._pool is None:
            import multiprocessing

            pool: Any  # a ProcessPoolExecutor, or a RayAnalyzerPool with its methods
            if self.ray_address is not None:
                from redact.ray_pool import RayAnalyzerPool

                pool = RayAnalyzerPool(self.processes, self._init_args, self.ray_address)
            else:
                pool = ProcessPoolExecutor(
                    max_workers=self.processes,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=init_worker,
                    initargs=self._init_args,
                )
            try:
                for fut in [pool.submit(analyze_chunk, [""]) for _ in range(self.processes)]:
                    fut.result(timeout=START_TIMEOUT_S)
            except Exception as e:
                pool.shutdown(wait=False, cancel_futures=True)
                raise RedactionError(
                    f"redaction: worker processes did not start ({type(e).__name__}: {e}); a "
                    'script that redacts must run under `if __name__ == "__main__":`'
                ) from None
            self._pool = pool
        return self._pool

    def _kill_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if hasattr(pool, "kill"):  # Ray's actors: the cluster stays
            pool.kill()
            return
        # a hung worker never returns: kill the processes (ProcessPoolExecutor has no public way)
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def _analyze(
        self,
        texts: list[str],
        on_result: Callable[[int, list[tuple[str, int, int]] | str], None] | None = None,
    ) -> list[list[tuple[str, int, int]] | str]:
        """Entities of each text, or the reason it could not be analysed. ``on_result(i, r)`` is
        called with each text's final result as it comes in (while the workers go on with the
        rest)."""
        results: list[Any] = [None] * len(texts)

        def settle(i: int, r: Any) -> None:
            results[i] = r
            if on_result is not None:
                on_result(i, r)

        queue = [list(range(i, min(i + CHUNK_TEXTS, len(texts)))) for i in range(0, len(texts), CHUNK_TEXTS)]
        while queue:
            pool = self._get_pool()
            futures: list[tuple[list[int], Future]] = [
                (idx, pool.submit(analyze_chunk, [texts[i] for i in idx])) for idx in queue
            ]
            queue = []
            for n, (idx, fut) in enumerate(futures):
                try:
                    got = fut.result(timeout=self.timeout_s)
                except FutureTimeout:
                    self._kill_pool()
                    if len(idx) == 1:
                        settle(idx[0], f"timeout: analysis took over {self.timeout_s:g} s")
                    else:  # find the slow text: retry this chunk's texts one at a time
                        queue.extend([i] for i in idx)
                    queue.extend(i for i, _ in futures[n + 1 :])
                    break
                except Exception as e:  # noqa: BLE001 (a worker died: fail closed on its texts)
                    self._kill_pool()
                    if len(idx) == 1:
                        settle(idx[0], f"{type(e).__name__}: analysis failed")
                    else:
                        queue.extend([i] for i in idx)
                    queue.extend(i for i, _ in futures[n + 1 :])
                    break
                spans, made = got
                self.surrogates.adopt(made)
                for i, r in zip(idx, spans):
                    settle(i, r)
        return results

    def _apply(
        self, text: str, spans: Sequence[tuple[str, int, int]], json_text: bool = False
    ) -> tuple[str, tuple[str, ...], tuple[tuple[str, bytes], ...], list[tuple[int, int]], tuple[int, ...]]:
        """``text`` with its spans replaced, the type of each, the surrogates off in length,
        where each surrogate stands in the new text, and their :meth:`Exempt.digests_of`. In a
        ``json_text`` a span lies in a JSON string: its value is read with its escapes decoded
        and its surrogate is written escaped (:func:`redact.structure.json_escape`, with ``\\u``
        escapes where the value had them: :func:`redact.structure.escaped_like`), so the text
        stays JSON; a surrogate whose count differs from the escaped value's is counted as off."""
        out: list[str] = []
        off: list[tuple[str, bytes]] = []
        placed: list[tuple[int, int]] = []
        exempt: set[int] = set()
        at = length = 0
        for entity, start, end in spans:
            value = text[start:end]
            if json_text:
                raw = value
                value = (json_unescape(raw) or raw) if "\\" in raw else raw
                surrogate, is_off = self.surrogates.make(entity, value)
                if "\\u" in raw:  # as many tokens as the escaped value, where escapes allow
                    surrogate = escaped_like(surrogate, self.surrogates.ntok(raw), self.surrogates.ntok)
                else:
                    surrogate = json_escape(surrogate)
                if value != raw:  # the count of the value as it stood escaped: else say so
                    is_off = self.surrogates.ntok(surrogate) != self.surrogates.ntok(raw)
            else:
                surrogate, is_off = self.surrogates.make(entity, value)
            out.append(text[at:start])
            length += start - at
            out.append(surrogate)
            placed.append((length, length + len(surrogate)))
            length += len(surrogate)
            exempt.update(Exempt.digests_of(surrogate))
            if is_off:
                off.append((entity, self.key.digest("token exception\x00" + entity, value)))
            at = end
        out.append(text[at:])
        return "".join(out), tuple(e for e, _, _ in spans), tuple(off), placed, tuple(exempt)

    def _build(self, pairs: list[tuple[str, _Entry]]) -> list[_Entry]:
        """``pairs`` of (raw text, entry) built against the values known now: the analyzer's
        spans and every mention of a known value outside them replaced, the second lock run over
        the result, the new text tokenized (one batch)."""
        made = []
        for text, e in pairs:
            json_ranges = self._json_ranges(e.digest, text)
            json_text = json_ranges is not None
            ranges = json_ranges or []
            extra = self._mentions_in(text, e.found, json_ranges)
            spans = tuple(sorted((*e.found, *extra), key=lambda s: s[1])) if extra else e.found
            redacted, entities, off, placed, exempt = self._apply(text, spans, json_text) if spans else (text, (), (), [], ())
            # the second lock: a PII shape in the new text outside every surrogate keeps it out
            lock = tuple(
                sorted({h.entity for h in lock_scan(redacted) if not any(a <= h.start and h.end <= b for a, b in placed)})
            )
            # a JSON text is written only as the same JSON: every span inside one string value
            # or number, and the result parses
            if json_text and spans and (len(_inside(spans, ranges)) < len(spans) or not is_json(redacted)):
                lock = (*lock, "INVALID_JSON")
            made.append((text, e, redacted, entities, off, spans, len(extra), lock, exempt))
        ids = self.tok.encode_batch([m[2] for m in made], add_special_tokens=False)
        changed = [i for i, m in enumerate(made) if m[0] != m[2]]
        raw_len = dict(
            zip(changed, (len(x.ids) for x in self.tok.encode_batch([made[i][0] for i in changed], add_special_tokens=False)))
        )
        out = []
        for i, (text, e, redacted, entities, off, spans, mentions, lock, exempt) in enumerate(made):
            red_ids = np.asarray(ids[i].ids, dtype=np.uint32)
            out.append(
                _Entry(
                    e.digest,
                    e.chars,
                    None,
                    e.found,
                    redacted,
                    red_ids,
                    len(red_ids) - raw_len.get(i, len(red_ids)),
                    entities,
                    off,
                    spans,
                    mentions,
                    self.mentions.learned,
                    lock,
                    exempt,
                )
            )
        return out

    def _json_ranges(self, digest: bytes, text: str) -> list[tuple[int, int]] | None:
        """Where a JSON text's string values and numbers lie (:func:`value_ranges`), None when
        ``text`` is not JSON; remembered by digest (a text is built again as values are learned)."""
        if text.lstrip()[:1] not in ("{", "["):
            return None
        if digest in self._ranges:
            self._ranges.move_to_end(digest)
            return self._ranges[digest]
        got = value_ranges(text) if is_json(text) else None
        self._ranges[digest] = got
        if len(self._ranges) > JSON_RANGES_KEPT:
            self._ranges.popitem(last=False)
        return got

    def _mentions_in(
        self, text: str, found: Sequence[tuple[str, int, int]], ranges: list[tuple[int, int]] | None
    ) -> list[tuple[str, int, int]]:
        """The mentions (:meth:`Mentions.find`) in ``text`` outside the ``found`` spans. In a JSON
        text (``ranges``: :meth:`_json_ranges`; None: not JSON), only those inside a string value
        or a number (keys and the layout stay); in one
        whose strings hold escapes, also those in its strings as they read decoded
        (``"Jos\\u00e9"`` mentions ``José``)."""
        taken = [(a, b) for _, a, b in found]
        if ranges is None:  # not JSON
            return self.mentions.find(text, taken)
        if not ranges:  # JSON without a string value or a number: nothing may change
            return []
        if "\\" not in text:  # in JSON only inside a string value or a number
            return _inside(self.mentions.find(text, taken), ranges)
        if not len(self.mentions):
            return []
        # escapes: the strings as they read (the rendering holds the values, not the keys)
        v = view(text)
        extra: list[tuple[str, int, int]] = []
        have = list(taken)
        for entity, a, b in v.to_raw(self.mentions.find(v.text)):
            if all(b <= s or a >= t for s, t in have):
                extra.append((entity, a, b))
                have.append((a, b))
        return extra

    def _remember(self, entry: _Entry) -> None:
        old = self._cache.pop(entry.digest, None)
        if old is not None:
            self._cache_chars -= old.chars
        self._cache[entry.digest] = entry
        self._cache_chars += entry.chars
        while self._cache_chars > self.cache_chars and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._cache_chars -= old.chars

    def seed(self, found: dict[bytes, list[tuple[str, int, int]] | str]) -> None:
        """Analysis results made elsewhere (a first pass on Ray: :mod:`redact.ray_data`), by the
        raw text's digest: a text among them is not analysed again."""
        self._seeded.update(found)

    def redact_texts(self, texts: Sequence[str], build: bool = True) -> dict[str, _Entry]:
        """Each distinct text of ``texts`` -> its entry, or why its analysis failed (``failed``).

        The texts the cache misses are analysed, and every value found is learned
        (:class:`redact.mentions.Mentions`). With ``build``, each entry is then made (or made
        again, when values were learned since it was: their mentions are replaced too)."""
        out: dict[str, _Entry] = {}
        todo: dict[bytes, str] = {}
        for text in texts:
            if text in out:
                continue
            d = _digest(text)
            hit = self._cache.get(d)
            if hit is not None:
                self._cache.move_to_end(d)
                out[text] = hit
            elif d not in todo:
                todo[d] = text
        if todo:
            digests, fresh = list(todo.keys()), list(todo.values())
            need = [i for i, d in enumerate(digests) if d not in self._seeded]
            found: list[Any] = [self._seeded.pop(d, None) for d in digests]

            def warm(j: int, f: list[tuple[str, int, int]] | str) -> None:
                # the surrogates (the costly part of building): those a worker did not make
                # are made here, while the workers analyse later chunks; Surrogates caches them
                if isinstance(f, list):
                    text = fresh[need[j]]
                    for entity, start, end in f:
                        self.surrogates.make(entity, text[start:end])

            for i, f in zip(need, self._analyze([fresh[i] for i in need], warm)):
                found[i] = f
            for d, text, f in zip(digests, fresh, found):
                if isinstance(f, str):
                    entry = _Entry(d, len(text), f)
                else:
                    for entity, value in span_values(text, f):
                        self.mentions.learn(entity, value)
                    entry = _Entry(d, len(text), None, tuple(map(tuple, f)))
                self._remember(entry)
                out[text] = entry
        if build:
            # an entry is made again when values were learned since it was (a value found in a
            # later text is a mention in an earlier one); kept when its spans come out the same
            learned = self.mentions.learned
            stale = [(text, e) for text, e in out.items() if e.failed is None and e.scanned < learned]
            for (text, old), new in zip(stale, self._build(stale) if stale else ()):
                if old.built and new.spans == old.spans:
                    old.scanned = new.scanned
                    continue
                self._remember(new)
                out[text] = new
        return out

    # -- rows -------------------------------------------------------------------------------------

    def learn(self, texts: Sequence[str], names: Sequence[str] = ()) -> None:
        """The first pass over a whole trace (:func:`redact_trace`, :func:`redact_file`, ``replay
        import``): analyse ``texts`` into the cache and learn every value found, and every
        message ``names`` (:func:`frame_names`), so that the second pass (:meth:`redact_rows`)
        replaces a value found anywhere in the trace at every mention of it, in earlier requests
        too. Nothing is written; a text whose analysis fails is remembered as failed."""
        learn_names(self.mentions, names)
        self.redact_texts(texts, build=False)

    def redact_rows(self, df: pl.DataFrame, block_size: int) -> tuple[pl.DataFrame, list[RowAccount]]:
        """``df`` with its bodies and responses redacted, and each row's account. A quarantined
        row keeps no text: its body and response are null (:meth:`Accounts.add` leaves it out)."""
        bodies_raw = df.get_column("body").to_list()
        # a null body is synthesized text (replay.synth): nothing to redact, it stays null
        bodies = [json.loads(b) if b is not None else None for b in bodies_raw]
        slots = [text_slots(b) if b is not None else [] for b in bodies]
        names = [name_slots(b) if b is not None else [] for b in bodies]
        learn_names(self.mentions, [s.text for row in names for s in row])
        responses = df.get_column("response").to_list() if "response" in df.columns else [None] * df.height
        done = self.redact_texts([s.text for row in slots for s in row] + [r for r in responses if r])
        stored = df.get_column("block_hashes").to_list() if "block_hashes" in df.columns else None
        # the row's other strings (ids, session, model...) are stored as they are: the lock
        # checks them too
        columns = [df.get_column(c).to_list() for c, t in df.schema.items() if t == pl.String and c not in ("body", "response")]
        new_bodies: list[str | None] = []
        new_responses: list[str | None] = []
        accounts: list[RowAccount] = []
        for row, (body, row_slots, response) in enumerate(zip(bodies, slots, responses)):
            entries = [done[s.text] for s in row_slots]
            resp = done[response] if response else None
            texts = [e.info() for e in (*entries, resp) if e is not None]
            bad = next((e.failed for e in (*entries, resp) if e is not None and e.failed), None)
            ids_changed = body is not None and bad is None and pseudonymize_ids(body, self.key)
            if bad is None:
                bad = self._locked(body, row_slots, entries, resp, columns, row)
            if bad is not None:
                new_bodies.append(None)
                new_responses.append(None)
                accounts.append(RowAccount(bad, 0, [], None, texts))
                continue
            texts_changed = body is not None and any(e.text != s.text for e, s in zip(entries, row_slots))
            if body is not None and (ids_changed or texts_changed or names[row]):
                # a message's name is replaced whole by a PERSON surrogate (the same at its mentions)
                new_names = [self.surrogates.make("PERSON", s.text)[0] for s in names[row]]
                new_bodies.append(
                    body_json(replace_texts(body, [*row_slots, *names[row]], [*(e.text for e in entries), *new_names]))
                )
            else:
                new_bodies.append(bodies_raw[row])
            new_responses.append(resp.text if resp is not None else response)
            if body is None:  # no prompt text: not in the token delta or the prefix check
                accounts.append(RowAccount(None, 0, None, None, texts))
                continue
            ids = np.concatenate([e.ids for e in entries]) if entries else np.zeros(0, np.uint32)
            raw = None
            if stored is None or not stored[row]:
                raw = block_hashes(prompt_token_ids([s.text for s in row_slots], self.tok), block_size)
            accounts.append(RowAccount(None, sum(e.delta for e in entries), block_hashes(ids, block_size), raw, texts))
        out = df.with_columns(pl.Series("body", new_bodies, dtype=pl.String))
        if "response" in df.columns:
            out = out.with_columns(pl.Series("response", new_responses, dtype=pl.String))
        return out, accounts

    def _locked(
        self, body: dict | None, row_slots: list, entries: list[_Entry], resp: _Entry | None, columns: list[list], row: int
    ) -> str | None:
        """Why the second lock keeps this row out (``"lock: TYPE,..."``), or None. The texts were
        checked when redacted (:attr:`_Entry.lock`); here the body's other strings (keys, roles,
        names, tool schemas...) and the row's string columns, which are stored as they are."""
        found = {t for e in (*entries, resp) if e is not None for t in e.lock}
        if body is not None:
            texts = {s.text for s in row_slots}  # checked as entries, once redacted
            found.update(h.entity for v in strings_of(body) if v not in texts for h in lock_scan(v))
        found.update(h.entity for col in columns if col[row] for h in lock_scan(col[row]))
        return f"lock: {','.join(sorted(found))}" if found else None


def _inside(spans: Sequence[tuple[str, int, int]], ranges: list[tuple[int, int]]) -> list[tuple[str, int, int]]:
    """The ``spans`` that lie inside one of the sorted, disjoint ``ranges``."""
    starts = [a for a, _ in ranges]
    out = []
    for span in spans:
        i = bisect.bisect_right(starts, span[1]) - 1
        if i >= 0 and span[2] <= ranges[i][1]:
            out.append(span)
    return out


def finish_output(writer, accounts: Accounts, started: float, src: Path, meta, key: RedactionKey) -> RedactionReport:
    """Close the redacted trace with its report in the metadata; a trace that lost every request
    to the quarantine is not written at all."""
    report = accounts.finish(started)
    if report.written == 0:
        writer.abort()
        raise RedactionError(
            f"{src.name}: all {report.requests} requests quarantined ({dict(report.quarantine_reasons)}); nothing written"
        )
    writer.close(_redacted_meta(meta, key, accounts))
    return report


def _redacted_meta(meta, key: RedactionKey, accounts: Accounts):
    return replace(
        meta,
        redaction_policy=POLICY,
        redaction_key=key.fingerprint,
        redaction_report=json.dumps(accounts.report.to_dict(), separators=(",", ":")),
        lock_exempt=accounts.exempt.to_meta(),
    )


def _check_input(trace_meta, source: str) -> None:
    if trace_meta.redaction_policy == POLICY:
        raise TraceError(
            f"{source}: already redacted (key {trace_meta.redaction_key or '?'}); redacting again would change its surrogates"
        )


def _frames(trace: Trace, size: int) -> Iterator[pl.DataFrame]:
    for start in range(0, len(trace), size):
        yield trace.df.slice(start, size)


def learn_names(mentions: Mentions, names: Sequence[str]) -> None:
    """Message names (:func:`replay.bodies.name_slots`) are people's or agents' names, whole:
    each is learned as a PERSON (its mentions in any text are replaced), and so are its
    capitalized parts ("Alice_Smith": "Alice", "Smith")."""
    for name in names:
        mentions.learn("PERSON", name)
        for part in _NAME_PARTS.split(name):
            if part[:1].isupper():
                mentions.learn("PERSON", part)


def frame_names(df: pl.DataFrame) -> list[str]:
    """The message names (:func:`replay.bodies.name_slots`) of ``df``'s bodies, for
    :meth:`Redactor.learn`."""
    return [s.text for b in df.get_column("body").to_list() if b is not None for s in name_slots(json.loads(b))]


def frame_texts(df: pl.DataFrame) -> list[str]:
    """The texts :meth:`Redactor.redact_rows` redacts in ``df``: each body's prompt strings and
    each recorded answer."""
    texts = [s.text for b in df.get_column("body").to_list() if b is not None for s in text_slots(json.loads(b))]
    if "response" in df.columns:
        texts.extend(r for r in df.get_column("response").to_list() if r)
    return texts


def redact_trace(
    trace: Trace,
    key: RedactionKey,
    *,
    processes: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    extra_recognizers: Sequence[Any] = (),
) -> tuple[Trace, RedactionReport]:
    """Redact an in-memory trace (with its bodies); returns the redacted trace and the report.

    Raises :class:`RedactionError` if every request was quarantined."""
    from replay.trace import validate

    if trace.body_file is not None:
        trace = read_trace(trace.body_file)
    _check_input(trace.meta, "trace")
    started = time.perf_counter()
    accounts = Accounts()
    with Redactor(key, trace.meta.tokenizer, processes=processes, timeout_s=timeout_s, extra_recognizers=extra_recognizers) as r:
        for f in _frames(trace, ROW_BATCH):  # first pass: every value found, before any row
            r.learn(frame_texts(f), frame_names(f))
        parts = [accounts.add(*r.redact_rows(f, trace.meta.block_size_tokens)) for f in _frames(trace, ROW_BATCH)]
        report = accounts.finish(started)
    if report.written == 0:
        raise RedactionError(
            f"redaction: all {report.requests} requests quarantined ({dict(report.quarantine_reasons)}); nothing written"
        )
    meta = _redacted_meta(trace.meta, key, accounts)
    return Trace(validate(pl.concat(parts), meta, "redacted trace"), meta), report


def redact_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    key: RedactionKey,
    *,
    processes: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    extra_recognizers: Sequence[Any] = (),
    progress: Callable[[int, int], None] | None = None,
) -> RedactionReport:
    """Redact the trace file ``src`` into ``dst`` a row batch at a time (memory bounded by the
    batch and the text cache), atomically, in two passes: the first analyses every text (learning
    every value found: :meth:`Redactor.learn`), the second redacts and writes the rows. Each batch
    is validated as it is read. ``progress(rows_done, rows_total)`` is called after each batch of
    the first pass."""
    import pyarrow.parquet as pq

    from replay.trace import batch_frame, read_meta, validate

    src, dst = Path(src), Path(dst)
    meta, total = read_meta(src)
    _check_input(meta, src.name)
    if src.is_dir():
        # a capture folder taken with --no-redact: its segments overlap in arrival, so it is read
        # whole (in arrival order) and redacted in memory
        trace, report = redact_trace(
            read_trace(src), key, processes=processes, timeout_s=timeout_s, extra_recognizers=extra_recognizers
        )
        trace.write(dst)
        if progress is not None:
            progress(total, total)
        return report
    started = time.perf_counter()
    accounts = Accounts()
    with (
        Redactor(key, meta.tokenizer, processes=processes, timeout_s=timeout_s, extra_recognizers=extra_recognizers) as r,
        TraceWriter(dst, meta) as writer,
        pq.ParquetFile(src, buffer_size=1 << 20, pre_buffer=False) as f,
    ):
        row = 0
        # first pass: analyse every text (the slow part: the progress counts it), learning every
        # value found, before any row is written
        for batch in f.iter_batches(batch_size=ROW_BATCH):
            part = validate(batch_frame(batch), meta, f"{src.name} (row batch from row {row})", whole=False)
            row += part.height
            r.learn(frame_texts(part), frame_names(part))
            if progress is not None:
                progress(row, total)
        row = 0
        for batch in f.iter_batches(batch_size=ROW_BATCH):
            rows = validate(batch_frame(batch), meta, f"{src.name} (row batch from row {row})", whole=False)
            row += rows.height
            out = accounts.add(*r.redact_rows(rows, meta.block_size_tokens))
            if out.height:
                writer.write(out)
        report = finish_output(writer, accounts, started, src, meta, key)
    return report
