"""Contact data written out to dodge filters: spelled emails and phone numbers in words.

Owns :class:`SpelledEmailShape`, :class:`SpelledPhoneShape`, :data:`SPELLED_EMAIL`,
:data:`DIGIT_WORDS` and :func:`spelled_recognizers`. Their types are the ordinary ones
(``EMAIL_ADDRESS``, ``PHONE_NUMBER``), so their surrogates, the lock and the scores treat them as
addresses and phones (:meth:`redact.surrogates.Surrogates._email` and ``_phone`` keep the
spelling: "dot", "[at]", the top-level domain, digit words stay words).

- email: a local part of words joined by ``.`` or a spelled dot, a spelled ``@`` ("at", "[at]",
  "(at)", "{at}", "<at>", any case), a domain of words joined the same way with at least one
  spelled dot, ending in a top-level domain. With the bare words ("jane dot doe at example dot
  com") the top-level domain must be one of :data:`_TLDS`; with a bracketed ``[at]`` / ``(dot)``
  any run of 2 to 6 letters is one;
- phone: 7 to 15 digits written as words ("five five five, one two three four", "oh", "zero") or
  as single digits split by spaces ("5 5 5 1 2 3 4"), split by spaces, commas, dashes or dots,
  optionally after "plus", after a phone word (:data:`redact.shapes.PHONE_WORDS`) in the 40
  characters before it. Score 0.6 (email) and 0.5 (phone).
"""

from __future__ import annotations

import re

from presidio_analyzer import EntityRecognizer

from redact.shapes import PHONE_WORDS, ShapeRecognizer

__all__ = ["SPELLED_EMAIL", "SPELLED_SEPARATOR", "DIGIT_WORDS", "SpelledEmailShape", "SpelledPhoneShape", "spelled_recognizers"]

_TLDS = (
    "com|org|net|io|co|uk|de|fr|es|it|nl|be|ch|at|se|no|dk|fi|pl|pt|br|in|ca|au|us|jp|cn|ru|mx|ie|"
    "edu|gov|info|biz|me|ai|dev|app|eu|tech|example|test|internal|local"
)
_BOPEN = r"[\[\(\{<]"
_BCLOSE = r"[\]\)\}>]"
_DOT_BR = rf"[ \t]*{_BOPEN}[ \t]*(?i:dot)[ \t]*{_BCLOSE}[ \t]*"
_AT_BR = rf"[ \t]*{_BOPEN}[ \t]*(?i:at)[ \t]*{_BCLOSE}[ \t]*"
_DOT_W = r"[ \t]+(?i:dot)[ \t]+"
_AT_W = r"[ \t]+(?i:at)[ \t]+"
_WORD = r"[A-Za-z0-9][A-Za-z0-9_+-]*"
# one alternation per spelling: bracketed (any TLD) and bare words (a known TLD)
SPELLED_EMAIL = re.compile(
    rf"(?<![\w.+-])(?:"
    rf"{_WORD}(?:(?:{_DOT_BR}|{_DOT_W}|\.){_WORD})*(?:{_AT_BR}|[ \t]*@[ \t]+|[ \t]+@[ \t]*){_WORD}"
    rf"(?:(?:{_DOT_BR}|{_DOT_W}|\.){_WORD})*(?:{_DOT_BR}|{_DOT_W})[A-Za-z]{{2,6}}"
    rf"|{_WORD}(?:(?:{_DOT_BR}|{_DOT_W}|\.){_WORD})*(?:{_AT_W}|{_AT_BR}){_WORD}"
    rf"(?:(?:{_DOT_BR}|{_DOT_W}|\.){_WORD})*(?:{_DOT_BR}|{_DOT_W})(?i:{_TLDS})"
    rf")(?![\w-])"
)
# what joins a spelled address's words (kept by its surrogate)
SPELLED_SEPARATOR = re.compile(rf"{_DOT_BR}|{_AT_BR}|{_DOT_W}|{_AT_W}|[ \t]*@[ \t]*|\.")

DIGIT_WORDS = ("zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_DIGIT = rf"(?:(?i:{'|'.join(DIGIT_WORDS)})|\d)"
_SEP = r"(?:[ \t]*[,.–-][ \t]*|[ \t]+)"
_SPELLED_PHONE = re.compile(rf"(?<![\w+])(?:(?i:plus)[ \t]+)?{_DIGIT}(?:{_SEP}{_DIGIT}){{6,14}}(?!\w)")
_CONTEXT_CHARS = 40


class SpelledEmailShape(ShapeRecognizer):
    """An email address spelled with "at" and "dot" (module docstring)."""

    ENTITY = "EMAIL_ADDRESS"

    def __init__(self) -> None:
        EntityRecognizer.__init__(self, supported_entities=[self.ENTITY], name="spelled_email_shape", supported_language="en")

    def spans(self, text):
        lowered = text.lower()
        if "dot" not in lowered:
            return
        for m in SPELLED_EMAIL.finditer(text):
            yield m.start(), m.end(), 0.6


class SpelledPhoneShape(ShapeRecognizer):
    """A phone number in digit words or single digits, after a phone word (module docstring)."""

    ENTITY = "PHONE_NUMBER"

    def __init__(self) -> None:
        EntityRecognizer.__init__(self, supported_entities=[self.ENTITY], name="spelled_phone_shape", supported_language="en")

    def spans(self, text):
        for m in _SPELLED_PHONE.finditer(text):
            if PHONE_WORDS.search(text, max(0, m.start() - _CONTEXT_CHARS), m.start()):
                yield m.start(), m.end(), 0.5


def spelled_recognizers() -> list[ShapeRecognizer]:
    """The spelled email and phone recognizers."""
    return [SpelledEmailShape(), SpelledPhoneShape()]
