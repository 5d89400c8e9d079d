"""What a redaction did: the report, and the per-row accounts it is kept from.

Owns :class:`RedactionReport` (stored as JSON in the redacted trace's metadata, printed by the
CLI), :class:`RowAccount` (what the report needs of one redacted row; it travels with the row
from a Ray actor) and :class:`Accounts` (the report kept from the rows' accounts in trace order,
so it is the same wherever the rows were redacted). The rules are in :class:`Accounts`.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from redact.lock import Exempt
from replay.blocks import prefix_hits

__all__ = ["CACHE_CHARS", "PREFIX_CHECK_REQUESTS", "RedactionReport", "RowAccount", "Accounts"]

# the redactor's text cache, in characters of distinct text (:class:`redact.pipeline.Redactor`):
# a text counts as analysed when it is not among those the cache still holds
CACHE_CHARS = 200_000_000
# the share of prefix sharing kept is measured over the first this many requests (hashing every
# block of every request twice is the slowest part of a large trace)
PREFIX_CHECK_REQUESTS = 50_000


@dataclass
class RedactionReport:
    """What a redaction did (stored as JSON in the trace's metadata, printed by the CLI)."""

    requests: int = 0
    written: int = 0
    quarantined: int = 0
    quarantine_reasons: Counter = field(default_factory=Counter)
    lock: Counter = field(default_factory=Counter)  # type -> records the second lock kept out
    texts: int = 0  # prompt and response strings seen
    analysed: int = 0  # distinct strings analysed (cache misses)
    chars_analysed: int = 0
    entities: Counter = field(default_factory=Counter)  # type -> spans replaced
    mentions: int = 0  # of those, mentions of a value found in another place (redact.mentions)
    token_exceptions: Counter = field(default_factory=Counter)  # type -> surrogates off in length
    token_delta: Counter = field(default_factory=Counter)  # tokens(redacted) - tokens(raw) -> requests
    shared_blocks_raw: int = 0
    shared_blocks_kept: int = 0
    prefix_checked_requests: int = 0
    seconds: float = 0.0

    @property
    def prefix_sharing_kept(self) -> float | None:
        if self.shared_blocks_raw == 0:
            return None
        return self.shared_blocks_kept / self.shared_blocks_raw

    def delta_quantiles(self) -> dict[str, int]:
        if not self.token_delta:
            return {}
        values = np.repeat(np.array(list(self.token_delta.keys())), np.array(list(self.token_delta.values())))
        return {f"p{int(q * 100)}": int(np.quantile(values, q, method="inverted_cdf")) for q in (0.01, 0.5, 0.99)} | {
            "min": int(values.min()),
            "max": int(values.max()),
        }

    def to_dict(self) -> dict[str, Any]:
        exact = self.token_delta.get(0, 0)
        return {
            "requests": self.requests,
            "written": self.written,
            "quarantined": self.quarantined,
            "quarantine_reasons": dict(self.quarantine_reasons),
            "lock": dict(sorted(self.lock.items())),
            "texts": self.texts,
            "analysed": self.analysed,
            "chars_analysed": self.chars_analysed,
            "entities": dict(sorted(self.entities.items())),
            "mentions": self.mentions,
            "token_exceptions": dict(sorted(self.token_exceptions.items())),
            "token_delta": self.delta_quantiles(),
            "requests_token_exact": exact / self.written if self.written else None,
            "prefix_sharing_kept": self.prefix_sharing_kept,
            "shared_blocks_raw": self.shared_blocks_raw,
            "prefix_checked_requests": self.prefix_checked_requests,
            "seconds": round(self.seconds, 3),
        }

    def summary(self) -> str:
        d = self.to_dict()
        ents = ", ".join(f"{k} {v}" for k, v in d["entities"].items()) or "none"
        kept = d["prefix_sharing_kept"]
        exact = d["requests_token_exact"]
        lines = [
            f"redacted {self.written} of {self.requests} requests in {self.seconds:.1f} s "
            f"({self.analysed} distinct texts analysed of {self.texts}; "
            f"{self.quarantined} quarantined)",
            f"entities: {ents}" + (f" ({self.mentions} of them mentions of a value found elsewhere)" if self.mentions else ""),
            "token count unchanged in "
            + ("-" if exact is None else f"{exact:.1%}")
            + f" of requests; delta {d['token_delta']}"
            + (f"; surrogates off in length: {d['token_exceptions']}" if self.token_exceptions else ""),
            "prefix sharing kept: "
            + (
                "no shared blocks"
                if kept is None
                else f"{kept:.2%} of {self.shared_blocks_raw} shared blocks (first {self.prefix_checked_requests} requests)"
            ),
        ]
        if self.quarantine_reasons:
            lines.append(f"quarantined because: {dict(self.quarantine_reasons)}")
        if self.lock:
            lines.append(
                "kept out by the second lock (a PII shape left after redaction), records per type: "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.lock.items()))
            )
        return "\n".join(lines)


@dataclass
class RowAccount:
    """What the report needs of one redacted row (it travels with the row from a Ray actor)."""

    reason: str | None  # why the row is quarantined (None: it is written)
    delta: int  # tokens(redacted prompt) - tokens(raw prompt)
    red_hashes: list[int] | None  # block hashes of the redacted prompt (None: a null body)
    raw_hashes: list[int] | None  # of the raw prompt, when the row has none stored
    texts: list[tuple[bytes, int, tuple[str, ...], tuple[tuple[str, bytes], ...], int, tuple[int, ...]]]  # _Entry.info()


class Accounts:
    """The report of a redaction, kept from each row's :class:`RowAccount` in trace order, so it
    is the same whether the rows were redacted in this process or by Ray actors.

    - A text counts as analysed (with its characters, entities, mentions and token exceptions,
      as they stand when the row is redacted) when it is
      not among the distinct texts met in the last ``cache_chars`` characters of distinct text:
      the texts the local cache still holds.
    - A token exception counts once per distinct (type, value), by a keyed digest of it.
    - Prefix sharing is measured over the first :data:`PREFIX_CHECK_REQUESTS` rows written.
    """

    def __init__(self, cache_chars: int = CACHE_CHARS):
        self.report = RedactionReport()
        self.cache_chars = cache_chars
        self._texts: OrderedDict[bytes, int] = OrderedDict()
        self._chars = 0
        self._off: set[bytes] = set()
        self._seen: tuple[set, set] = (set(), set())
        # the surrogates of the texts counted (Exempt.digests_of): the output's lock_exempt (since
        # the last take_exempt(), under capture)
        self.exempt = Exempt()

    def take_exempt(self) -> Exempt:
        """The surrogates of the texts counted since the last call, and start afresh: each batch
        of a capture's rows goes to the spool with the surrogates it holds."""
        out, self.exempt = self.exempt, Exempt()
        return out

    def _text(
        self,
        digest: bytes,
        chars: int,
        entities: tuple[str, ...],
        off: tuple[tuple[str, bytes], ...],
        mentions: int,
        exempt: tuple[int, ...],
    ) -> None:
        rep = self.report
        rep.texts += 1
        if exempt:
            self.exempt.add_digests(exempt)
        if digest in self._texts:
            self._texts.move_to_end(digest)
            return
        self._texts[digest] = chars
        self._chars += chars
        while self._chars > self.cache_chars and len(self._texts) > 1:
            self._chars -= self._texts.popitem(last=False)[1]
        rep.analysed += 1
        rep.chars_analysed += chars
        rep.entities.update(entities)
        rep.mentions += mentions
        for entity, d in off:
            if d not in self._off:
                self._off.add(d)
                rep.token_exceptions[entity] += 1

    def add(self, df: pl.DataFrame, accounts: Sequence[RowAccount]) -> pl.DataFrame:
        """Count the rows of ``df`` (redacted, with their accounts); returns those to write."""
        rep = self.report
        stored = df.get_column("block_hashes").to_list() if "block_hashes" in df.columns else None
        keep: list[int] = []
        raw_hashes, red_hashes = [], []
        for row, acc in enumerate(accounts):
            for info in acc.texts:
                self._text(*info)
            rep.requests += 1
            if acc.reason is not None:
                rep.quarantined += 1
                kind, _, what = acc.reason.partition(":")
                rep.quarantine_reasons[kind] += 1
                if kind == "lock":  # "lock: TYPE,TYPE": the second lock's hits, per type
                    rep.lock.update(what.strip().split(","))
                continue
            keep.append(row)
            rep.written += 1
            if acc.red_hashes is None:  # a null body (synthesized text): no prompt to measure
                continue
            rep.token_delta[acc.delta] += 1
            if rep.prefix_checked_requests < PREFIX_CHECK_REQUESTS:
                rep.prefix_checked_requests += 1
                if acc.raw_hashes is not None:
                    raw_hashes.append(acc.raw_hashes)
                elif stored is not None:
                    raw_hashes.append(stored[row])
                else:
                    from replay.errors import RedactionError

                    raise RedactionError("a row without its raw block hashes, in a frame without a block_hashes column")
                red_hashes.append(acc.red_hashes)
        raw_hits = prefix_hits(raw_hashes, self._seen[0])
        red_hits = prefix_hits(red_hashes, self._seen[1])
        rep.shared_blocks_raw += sum(raw_hits)
        rep.shared_blocks_kept += sum(min(a, b) for a, b in zip(raw_hits, red_hits))
        return df[keep]

    def finish(self, started: float) -> RedactionReport:
        self.report.seconds = time.perf_counter() - started
        return self.report
