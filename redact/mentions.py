"""Every mention of a found value: what the analyzer found once is replaced wherever it stands.

Owns :class:`Mentions` and :data:`MENTION_VALUES`. A password found inside
``postgres://user:PASSWORD@host`` and typed again bare in prose, a name found after "Hi" and
written alone later, an email found in one message and pasted into a tool call: the analyzer sees
each text on its own, and the context that made it find the value once is missing elsewhere. The
:class:`redact.pipeline.Redactor` keeps the values it found (in memory only, never stored) and
scans every text for them after analysis, replacing each occurrence with the same surrogate.

The rules:

- What is learned: the value of every span found, under its entity type; for PERSON and LOCATION
  also each word of it that is capitalized, alphabetic and at least :data:`MIN_WORD` letters long
  ("Sonia" after "Sonia Hunt"); for a PERSON of two or more words also the whole name in lower
  case, CAPITALS and title case (a CRM record's ``HARRIET DAVIES`` typed ``Harriet Davies`` in a
  prompt; the surrogates choose a word's replacement by its lower-cased form, so each variant
  gets the same names in its own case). A value shorter than :data:`MIN_VALUE` characters is not learned
  (one- to three-character strings are everywhere).
- What is a mention: an exact, case-sensitive occurrence that does not continue a word: when the
  value starts (ends) with a letter or digit, the character before (after) it is neither.
- A value found as several types is, everywhere, the type whose name sorts first (one value, one
  surrogate, whatever order the texts were analysed in: a Ray cluster's actors and one process
  give the same trace).
- Scanning is by words, not by value: each value is indexed under its first run of word
  characters, and a text's word runs are looked up in that index, so the time is linear in the
  text whatever the number of values. A value with no word character is never learned.
- Memory is bounded: at most :data:`MENTION_VALUES` values; past that the least recently found or
  seen are forgotten (counted in :attr:`Mentions.forgotten`). The set lives as long as its
  Redactor: a whole ``replay redact`` or import, a recorder's lifetime under capture.
- :attr:`Mentions.learned` counts every change to the set (a value added, or its type changed): a
  redacted text remembers the count it was made at, and is looked at again only when it grew.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["MENTION_VALUES", "MIN_VALUE", "MIN_WORD", "Mentions"]

MENTION_VALUES = 1_000_000
MIN_VALUE = 4
MIN_WORD = 3
_WORDS = re.compile(r"\w+")
_NAME_TYPES = frozenset({"PERSON", "LOCATION"})
# a name whose case variants are learned too: words of letters (hyphens, apostrophes inside)
_NAME_CASES = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*(?:[ \t]+[^\W\d_]+(?:['’-][^\W\d_]+)*)+")


class Mentions:
    """The values found in one trace (see the module docstring)."""

    def __init__(self, limit: int = MENTION_VALUES):
        self.limit = limit
        # value -> its entity type, least recently found or seen first
        self._values: OrderedDict[str, str] = OrderedDict()
        # first word run of a value -> {value: offset of that run in the value}
        self._index: dict[str, dict[str, int]] = {}
        self.learned = 0
        self.forgotten = 0

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, value: str) -> bool:
        return value in self._values

    def learn(self, entity: str, value: str) -> None:
        """Remember ``value`` (found as ``entity``) and, for names and places, its words; a
        person's name of two or more words also in lower case, CAPITALS and title case."""
        self.add(entity, value)
        if entity == "PERSON" and len(value.split()) >= 2 and _NAME_CASES.fullmatch(value):
            for variant in {value.lower(), value.upper(), " ".join(w[:1].upper() + w[1:].lower() for w in value.split())}:
                self.add(entity, variant)
        if entity in _NAME_TYPES:
            for word in value.split():
                if len(word) >= MIN_WORD and word.isalpha() and word[0].isupper():
                    self.add(entity, word)

    def learn_spans(self, text: str, spans: Iterable[tuple[str, int, int]]) -> None:
        for entity, start, end in spans:
            self.learn(entity, text[start:end])

    def items(self) -> list[tuple[str, str]]:
        """``(entity, value)`` of every value known (to hand them to another Mentions: :meth:`add`)."""
        return [(entity, value) for value, entity in self._values.items()]

    def add(self, entity: str, value: str) -> None:
        """Remember ``value`` as ``entity`` (not its words: see :meth:`learn`)."""
        value = value.strip()
        if len(value) < MIN_VALUE and not (entity in _NAME_TYPES and len(value) >= MIN_WORD):
            return
        known = self._values.get(value)
        if known is not None:
            self._values.move_to_end(value)
            if entity < known:  # found as two types: the one that sorts first, whatever the order
                self._values[value] = entity
                self.learned += 1
            return
        m = _WORDS.search(value)
        if m is None:
            return
        self.learned += 1
        self._values[value] = entity
        self._index.setdefault(m.group(), {})[value] = m.start()
        while len(self._values) > self.limit:
            old, _ = self._values.popitem(last=False)
            head = _WORDS.search(old).group()  # type: ignore[union-attr]
            bucket = self._index[head]
            del bucket[old]
            if not bucket:
                del self._index[head]
            self.forgotten += 1

    def find(self, text: str, taken: Iterable[tuple[int, int]] = ()) -> list[tuple[str, int, int]]:
        """Mentions in ``text`` of the values known now, as ``(entity, start, end)``, sorted, not
        overlapping each other nor the ``taken`` spans (the longest wins where two start
        together; the earlier where two overlap): a function of the text and the set of values,
        whatever order they were learned in."""
        if not self._index:
            return []
        found: list[tuple[int, int, str]] = []
        for m in _WORDS.finditer(text):
            bucket = self._index.get(m.group())
            if bucket is None:
                continue
            for value, offset in bucket.items():
                entity = self._values[value]
                start = m.start() - offset
                end = start + len(value)
                if start < 0 or not text.startswith(value, start):
                    continue
                if value[0].isalnum() and start > 0 and text[start - 1].isalnum():
                    continue
                if value[-1].isalnum() and end < len(text) and text[end].isalnum():
                    continue
                found.append((start, end, entity))
        if not found:
            return []
        out: list[tuple[str, int, int]] = []
        blocked = sorted(taken)
        last_end = 0
        for start, end, entity in sorted(found, key=lambda f: (f[0], -f[1])):
            if start < last_end or any(s < end and start < e for s, e in blocked):
                continue
            out.append((entity, start, end))
            last_end = end
            self._values.move_to_end(text[start:end])
        return out
