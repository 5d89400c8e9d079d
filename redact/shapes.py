"""Structured PII found by its shape: email addresses, phone numbers, cards, IBANs and IP addresses.

Owns :data:`SHAPE_ENTITIES`, :data:`PHONE_WORDS`, :class:`ShapeRecognizer` and its five
recognizers (:class:`EmailShape`, :class:`PhoneShape`, :class:`CardShape`, :class:`IbanShape`,
:class:`IpShape`), :func:`shape_recognizers`, :func:`luhn_ok` and :func:`iban_ok`.

The rule is *shape first*: a string with the shape of a type is that type. A validity check (Luhn,
ISO 13616 mod 97, an IBAN country's length) only raises the score; nothing is dropped for failing
one. Each recognizer is compiled regexes plus a little arithmetic, with no lookups:

- email: ``local@domain.tld``, any top-level domain of two or more letters (``.example``,
  ``.internal``, ``.local``, ``.lan``, ``.corp``, ``home.arpa``) or a punycode one; not the
  password and host of a URL's userinfo (``scheme://user:pass~word@host``: the password is a
  URL_PASSWORD, and the host no one's);
- phone: a run of digit groups split by one or two spaces, or by one or two of ``. - / – ( )``
  with a space on either side, is cut into phones by the layout of its groups
  (:meth:`PhoneShape.score`): ``+`` and a country code with 7 to 17 digits in all; ``00`` and a
  country code; North American numbers with any area code (``(xxx) xxx-xxxx``, ``xxx-xxx-xxxx``,
  ``xxx.xxx.xxxx``, ``xxx xxx xxxx``, ``1-xxx-...``); a national number with the trunk prefix
  ``0`` (or ``0``, ``1``, ``7`` or ``8`` before a bracketed area code), 9 to 13 digits, as India, China,
  Indonesia, Pakistan, Nigeria, Bangladesh, Ethiopia, Japan, Egypt, the Philippines, DR Congo,
  Vietnam, Iran, Turkey, Germany, Thailand, the UK, France, the Netherlands and Italy write them
  (not 3-2-4, a US social security number); a bracketed area code with 8 to 13 digits (Brazil,
  Mexico, Russia...); and the layouts written without a prefix (Indian 5-5 mobiles, Chinese
  3-4-4, Mexican and Brazilian 2-4-4 / 2-5-4, Spanish 3-3-3 / 3-2-2-2 / 2-3-2-2, Turkish and
  Russian 3-3-2-2, Italian 3-7). Any other run of 7 to 15 digits (a bare run too) is a phone only
  after a phone word (:data:`PHONE_WORDS`) or a phone of those layouts in the 40 characters
  before it (a list of numbers). A run glued to a word
  or an id (``ORD-2024-973417``, a UUID's groups, ``v1.2.3``) ends there; a date or an IPv4
  address in a run splits it (unless the run starts with ``+``); a group after ``-`` or ``.``
  never starts a phone (``1.234.567``); two slashes make a path, not a phone. The phones found
  from each start are merged where they overlap;
- card: 13 to 19 digits in card groups split by spaces or dashes (4-4-4-4, 4-6-5, 4-6-4, 4-4-4-4-3,
  any last group of 1 to 4) whatever Luhn says, every start tried and overlapping ones merged; a
  contiguous run of 13 to 19 digits when it is Luhn-valid or a card or payment word stands in
  the 40 characters before it;
- IBAN: two letters, two digits, 11 to 30 letters or digits, contiguous or in groups of four split
  by spaces or dashes; upper case, or any case when the checksum holds and the country's length
  matches. A run that goes on into the next word is cut at the longest checksum-valid prefix,
  else at the longest well-grouped one;
- IP: IPv4 with octets 0-255 (leading zeros too), an optional ``/prefix``, not inside a longer
  dotted number (``1.2.3.4.5``); IPv6 full or compressed (``::1``, an IPv4 tail, a ``%zone``, a
  ``/prefix``), checked by :mod:`ipaddress` for its grammar; a two-group form inside an index
  bracket (Python's ``x[1::2]``) is a slice, not an address.

Scores: email 0.9; phone 0.8 with ``+`` or ``00``, 0.7 with a trunk prefix or a bracketed area
code, 0.6 for the other layouts, 0.45 by context only (below Presidio's US_SSN 0.5, which
wins a tie); card 0.95 Luhn-valid, else 0.6; IBAN 1.0 (checksum and the country's length), 0.9
(checksum), 0.6 (the country's length), 0.5 (shape only); IP 0.8.

Every shape the second lock (:mod:`redact.lock`) flags for these five types is found here, and
covers the lock's span (``tests/unit/redact/test_shapes.py`` checks it), but one: the address
shape the lock reads at the end of a URL's password when the password holds a character an
address cannot (``://u:Pass#12@host.lan``): it is URL_PASSWORD's.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from presidio_analyzer import EntityRecognizer, RecognizerResult

__all__ = [
    "SHAPE_ENTITIES",
    "PHONE_WORDS",
    "ShapeRecognizer",
    "EmailShape",
    "PhoneShape",
    "CardShape",
    "IbanShape",
    "IpShape",
    "shape_recognizers",
    "luhn_ok",
    "iban_ok",
]

SHAPE_ENTITIES = ("EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS")
# a word before a number that says it is a phone number (tel covers telefon, teléfono, téléphone)
PHONE_WORDS = re.compile(
    r"(?i)(?:phone|call|tel|mobile|cell|fax|sms|whatsapp|contact|reach|handy|móvil|movil|"
    r"celular|portable|e\.164)"
)
_CONTEXT_CHARS = 40
_BY_CONTEXT = 0.45  # the score of a phone found by its context only


def _char(text: str, i: int) -> str:
    """``text[i]``, or a space outside the text."""
    return text[i] if 0 <= i < len(text) else " "


class ShapeRecognizer(EntityRecognizer):
    """One entity type found by :meth:`spans`, a generator of (start, end, score)."""

    ENTITY = ""

    def __init__(self) -> None:
        super().__init__(supported_entities=[self.ENTITY], name=f"{self.ENTITY.lower()}_shape", supported_language="en")

    def load(self) -> None:
        pass

    def spans(self, text: str) -> Iterator[tuple[int, int, float]]:
        raise NotImplementedError

    def analyze(self, text, entities, nlp_artifacts=None):  # noqa: D102 (presidio's signature)
        return [RecognizerResult(self.ENTITY, start, end, score) for start, end, score in self.spans(text)]


# -- email ------------------------------------------------------------------------------------------

_LOCAL = r"[\w.%+-]"  # no quotes, backticks, slashes or "=": they wrap or precede addresses


# a URL's scheme, user and ":" and the start of its password, up to where an address's local part
# would begin: scheme://user:pass~word@host holds a password (URL_PASSWORD's), not an address
_USERINFO = re.compile(r"://[^\s:/@]+:[^\s/@]*\Z")
_USERINFO_CHARS = 256


class EmailShape(ShapeRecognizer):
    """``local@domain.tld`` with any top-level domain (module docstring)."""

    ENTITY = "EMAIL_ADDRESS"
    PATTERN = re.compile(rf"(?<!{_LOCAL}){_LOCAL}+@(?:[\w-]+\.)+(?:[^\W\d_]{{2,}}|xn--[a-z0-9-]+)(?![\w-])")

    def spans(self, text):
        if "@" not in text:
            return
        found: list[tuple[int, int, float]] = []
        at = 0
        while (m := self.PATTERN.search(text, at)) is not None:
            start, end = m.span()
            at = text.index("@", start) + 1  # "a@b.cc@d.ee" holds two, overlapping: merged
            if start and not text[start - 1].isspace() and _USERINFO.search(text, max(0, start - _USERINFO_CHARS), start):
                continue
            if found and start < found[-1][1]:
                found[-1] = (found[-1][0], max(end, found[-1][1]), 0.9)
            else:
                found.append((start, end, 0.9))
        yield from found


# -- phone ------------------------------------------------------------------------------------------

_SP = "[ \u00a0\u202f]"
# "+" or a start that does not cut a run of digits, then digit groups split by one separator:
# one or two spaces, or one or two of . - / – ( ) with a space on either side
_PHONE_RUN = re.compile(rf"(?:\(?\+{_SP}?|(?<![\d+]))\(?\d+(?:(?:{_SP}?[-./–()]{{1,2}}{_SP}?|{_SP}{{1,2}})\d+)*")
_GROUP = re.compile(r"\d+")
_MAX_GROUPS = 8  # groups in one phone number at most
# group-length layouts of national numbers written without a trunk prefix: (lengths, first digits)
_NATIONAL = {
    (3, 3, 4): "123456789",
    (5, 5): "6789",
    (3, 4, 4): "123456789",
    (2, 4, 4): "123456789",
    (2, 5, 4): "123456789",
    (3, 3, 3): "6789",
    (3, 2, 2, 2): "6789",
    (2, 3, 2, 2): "123456789",
    (3, 3, 2, 2): "123456789",
    (1, 3, 3, 2, 2): "78",
    (3, 7): "123456789",
    (1, 3, 3, 4): "1",
}
_NO_DOTS = {(3, 3, 3), (3, 7)}  # "912.345.678" is a number with thousands dots


def _is_year(s: str) -> bool:
    return len(s) == 4 and s[:2] in ("19", "20")


def _is_date(a: str, b: str, c: str, sep: str) -> bool:
    """dd.mm.yyyy / mm/dd/yyyy / yyyy-mm-dd (and dd/mm/yy with slashes) as three digit groups."""
    if _is_year(a):
        return len(b) <= 2 and len(c) <= 2 and 1 <= int(b) <= 12 and 1 <= int(c) <= 31
    return (
        len(a) <= 2
        and len(b) <= 2
        and (_is_year(c) or (len(c) == 2 and sep == "/"))
        and 1 <= int(a) <= 31
        and 1 <= int(b) <= 31
        and min(int(a), int(b)) <= 12
    )


class PhoneShape(ShapeRecognizer):
    """National and international phone numbers by the layout of their digit groups (module
    docstring)."""

    ENTITY = "PHONE_NUMBER"

    def spans(self, text):
        last = -_CONTEXT_CHARS - 1  # where the last phone of a known layout ended
        for m in _PHONE_RUN.finditer(text):
            for start, end, score in self._run(text, m.start(), m.end(), last):
                if score > _BY_CONTEXT:
                    last = end
                yield start, end, score

    def _run(self, text: str, start: int, end: int, last: int) -> list[tuple[int, int, float]]:
        groups = [(g.start(), g.end()) for g in _GROUP.finditer(text, start, end)]
        lead = text[start : groups[0][0]]
        plus = "+" in lead
        n = len(groups)
        seps = [text[groups[k][1] : groups[k + 1][0]] for k in range(n - 1)]
        # groups glued to a word or an id ("ORD-2024-973417", a UUID's groups) end every phone;
        # dates and IPv4 addresses end those without a "+"
        glued = [False] * n
        before = lead[-1] if lead else _char(text, start - 1)
        if not plus and (before.isalnum() or before == "_" or (before in "-." and _char(text, start - 2).isalnum())):
            glued[0] = True
        if _char(text, end).isalnum() or _char(text, end) == "_":
            glued[-1] = True
        cut = glued[:]
        digits = [text[a:b] for a, b in groups]
        for k in range(n - 2):  # a date: its two separators alike, unlike those around it
            sep = seps[k]
            if (
                sep in ("-", ".", "/")
                and seps[k + 1] == sep
                and (k == 0 or seps[k - 1] != sep)
                and (k + 2 == n - 1 or seps[k + 2] != sep)
                and _is_date(digits[k], digits[k + 1], digits[k + 2], sep)
            ):
                cut[k] = cut[k + 1] = cut[k + 2] = True
        for k in range(n - 3):  # an IPv4 address: four dotted groups, no more
            if (
                all(s == "." for s in seps[k : k + 3])
                and all(len(d) <= 3 for d in digits[k : k + 4])
                and (k == 0 or seps[k - 1] != ".")
                and (k + 3 == n - 1 or seps[k + 3] != ".")
            ):
                cut[k : k + 4] = [True] * 4
        found: list[tuple[int, int, float]] = []
        for k in range(n):  # the longest phone from each start; overlapping ones are merged
            ends = glued if plus and k == 0 else cut
            if ends[k] or (k > 0 and seps[k - 1][-1] in "-."):  # "12-34" or "1.2": one number
                continue
            stop = k
            while stop < n and not ends[stop] and stop - k < _MAX_GROUPS:
                stop += 1
            at = groups[k][0]
            context = at - last <= _CONTEXT_CHARS or PHONE_WORDS.search(text, max(0, at - _CONTEXT_CHARS), at) is not None
            for j in range(stop, k, -1):
                stop_at = groups[j - 1][1]
                score = self.score(
                    text,
                    groups[k:j],
                    seps[k : j - 1],
                    plus and k == 0,
                    lead if k == 0 else seps[k - 1],
                    _char(text, stop_at),
                    context,
                )
                if score is not None:
                    first = self._start(text, start, groups, seps, k, j, lead)
                    if found and first < found[-1][1]:
                        found[-1] = (found[-1][0], max(stop_at, found[-1][1]), max(score, found[-1][2]))
                    else:
                        found.append((first, stop_at, score))
                    break
        return found

    @staticmethod
    def _start(text: str, start: int, groups: list[tuple[int, int]], seps: list[str], k: int, j: int, lead: str) -> int:
        """Where the phone made of groups k..j-1 starts: at its "+", or at the "(" of a bracketed
        first group, else at its first digit."""
        if k > 0:
            return groups[k][0] - (1 if seps[k - 1].endswith("(") else 0)
        after = seps[0] if j > 1 else text[groups[0][1] : groups[0][1] + 1]
        if lead.startswith("(") and after.lstrip(" ").startswith(")"):
            return start
        return start + lead.index("+") if "+" in lead else groups[0][0]

    @staticmethod
    def score(
        text: str, groups: list[tuple[int, int]], seps: list[str], plus: bool, lead: str, after: str, near: bool
    ) -> float | None:
        """The score of the digit groups ``groups`` (offsets in ``text``) as a phone number, or
        None. ``seps`` lie between them, ``lead`` before the first ("+", "(" or a separator),
        ``after`` is the character after the last; ``near``: a phone word or a phone of a known
        layout ends in the 40 characters before them."""
        digits = [text[a:b] for a, b in groups]
        lengths = tuple(len(d) for d in digits)
        total, n, first = sum(lengths), len(lengths), digits[0]
        context = _BY_CONTEXT if near else None
        if plus:
            return 0.8 if 7 <= total <= 17 else None
        if total > 15 or total < 7:
            return None
        if n == 1:
            return context
        if sum(s.count("/") for s in seps) > 1:  # a path or a date, not "030/1234567"
            return None
        if any(x == 1 for x in lengths[1:]):  # one-digit groups after the first: a list, a version
            return context if n <= 3 else None

        def bracketed(k: int) -> bool:
            opened = (lead if k == 0 else seps[k - 1]).rstrip(" ").endswith("(")
            closed = (seps[k] if k < n - 1 else after).lstrip(" ").startswith(")")
            return opened and closed

        if first.startswith("00") and total >= 9:  # the international prefix
            return 0.8
        if first[0] == "0" and len(first) >= 2 and 9 <= total <= 13 and n <= 6 and lengths != (3, 2, 4):
            return 0.7  # a trunk prefix (3-2-4 is a US social security number's layout)
        if bracketed(0) and len(first) <= 5 and 8 <= total <= 13:
            return 0.7
        if first in ("0", "1", "7", "8") and n >= 3 and bracketed(1) and 9 <= total <= 13:
            return 0.7
        allowed = _NATIONAL.get(lengths)
        if allowed and first[0] in allowed and not (lengths in _NO_DOTS and "." in "".join(seps)):
            return 0.6
        return context


# -- cards ------------------------------------------------------------------------------------------

# a lookahead, so that every start is tried ("8761 4512 5758 8560 3484" holds two cards)
_CARD_GROUPED = re.compile(
    r"(?<!\w)(?=(\d{4}[ -](?:\d{6}[ -]\d{4,5}"
    r"|\d{4}[ -]\d{4}[ -](?:\d{4}[ -]\d{1,3}|\d{1,4})))(?!\w))"
)
_CARD_RUN = re.compile(r"(?<!\w)\d{13,19}(?!\w)")
_CARD_WORDS = re.compile(
    r"(?i)(?:card|credit|debit|visa|master|amex|american express|discover|diners|jcb|"
    r"maestro|unionpay|\bcc\b|\bpan\b|\bpay|charge|billing|checkout|purchase|karte|carte|"
    r"tarjeta|cartão)"
)


def luhn_ok(digits: str) -> bool:
    """The Luhn check of a string of digits."""
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        total += d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2)
    return total % 10 == 0


class CardShape(ShapeRecognizer):
    """Card numbers: card groups whatever Luhn says, contiguous runs when Luhn-valid or named."""

    ENTITY = "CREDIT_CARD"

    def spans(self, text):
        merged: list[tuple[int, int, float]] = []  # overlapping groupings as one span
        for m in _CARD_GROUPED.finditer(text):
            start, end = m.span(1)
            score = 0.95 if luhn_ok(re.sub(r"\D", "", m.group(1))) else 0.6
            if merged and start < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]), max(score, merged[-1][2]))
            else:
                merged.append((start, end, score))
        yield from merged
        for m in _CARD_RUN.finditer(text):
            if luhn_ok(m.group()):
                yield m.start(), m.end(), 0.95
            elif _CARD_WORDS.search(text, max(0, m.start() - _CONTEXT_CHARS), m.start()):
                yield m.start(), m.end(), 0.6


# -- IBAN -------------------------------------------------------------------------------------------

_IBAN = re.compile(r"(?ai)(?<!\w)[a-z]{2}\d{2}(?:[ -]?[a-z0-9]){11,32}(?!\w)")
# ISO 13616 registry: total length of each country's IBAN
_IBAN_LENGTHS = {
    "AD": 24,
    "AE": 23,
    "AL": 28,
    "AT": 20,
    "AZ": 28,
    "BA": 20,
    "BE": 16,
    "BG": 22,
    "BH": 22,
    "BI": 27,
    "BR": 29,
    "BY": 28,
    "CH": 21,
    "CR": 22,
    "CY": 28,
    "CZ": 24,
    "DE": 22,
    "DJ": 27,
    "DK": 18,
    "DO": 28,
    "EE": 20,
    "EG": 29,
    "ES": 24,
    "FI": 18,
    "FK": 18,
    "FO": 18,
    "FR": 27,
    "GB": 22,
    "GE": 22,
    "GI": 23,
    "GL": 18,
    "GR": 27,
    "GT": 28,
    "HN": 28,
    "HR": 21,
    "HU": 28,
    "IE": 22,
    "IL": 23,
    "IQ": 23,
    "IS": 26,
    "IT": 27,
    "JO": 30,
    "KW": 30,
    "KZ": 20,
    "LB": 28,
    "LC": 32,
    "LI": 21,
    "LT": 20,
    "LU": 20,
    "LV": 21,
    "LY": 25,
    "MC": 27,
    "MD": 24,
    "ME": 22,
    "MK": 19,
    "MN": 20,
    "MR": 27,
    "MT": 31,
    "MU": 30,
    "NI": 28,
    "NL": 18,
    "NO": 15,
    "OM": 23,
    "PK": 24,
    "PL": 28,
    "PS": 29,
    "PT": 25,
    "QA": 29,
    "RO": 24,
    "RS": 22,
    "RU": 33,
    "SA": 24,
    "SC": 31,
    "SD": 18,
    "SE": 24,
    "SI": 19,
    "SK": 24,
    "SM": 27,
    "SO": 23,
    "ST": 25,
    "SV": 28,
    "TL": 23,
    "TN": 24,
    "TR": 26,
    "UA": 29,
    "VA": 22,
    "VG": 24,
    "XK": 20,
    "YE": 30,
}


def iban_ok(compact: str) -> bool:
    """The ISO 13616 mod-97 check of an IBAN without separators (any case)."""
    if not 15 <= len(compact) <= 34 or not (compact.isascii() and compact.isalnum()):
        return False
    moved = (compact[4:] + compact[:4]).upper()
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _iban_grouped(value: str) -> bool:
    """Contiguous, or groups of four split by single spaces or dashes (the last of 1 to 4)."""
    parts = re.split(r"[ -]", value)
    return len(parts) == 1 or (all(len(p) == 4 for p in parts[:-1]) and 1 <= len(parts[-1]) <= 4)


class IbanShape(ShapeRecognizer):
    """IBANs by shape; the checksum and the country's length raise the score (module docstring)."""

    ENTITY = "IBAN_CODE"

    def spans(self, text):
        at = 0
        while (m := _IBAN.search(text, at)) is not None:
            at = m.start() + 1  # a candidate that fails may hold an IBAN after its first word
            value = m.group()
            cuts = [i for i, c in enumerate(value) if c in " -"] + [len(value)]
            got = None
            for cut in reversed(cuts):
                compact = value[:cut].replace(" ", "").replace("-", "")
                if iban_ok(compact):
                    country_len = _IBAN_LENGTHS.get(compact[:2].upper()) == len(compact)
                    if compact[:2].isupper() or country_len:
                        got = cut, 1.0 if country_len else 0.9
                        break
            if got is None:
                for cut in reversed(cuts):
                    head = value[:cut]
                    compact = head.replace(" ", "").replace("-", "")
                    if len(compact) >= 15 and head.upper() == head and _iban_grouped(head):
                        got = cut, 0.6 if _IBAN_LENGTHS.get(compact[:2]) == len(compact) else 0.5
                        break
            if got is not None:
                yield m.start(), m.start() + got[0], got[1]
                at = m.start() + got[0]


# -- IP addresses -----------------------------------------------------------------------------------

_OCTET = r"(?:25[0-5]|2[0-4]\d|[01]?\d?\d)"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_IP4 = re.compile(rf"(?a)(?<![\w.]){_IPV4}(?:/\d{{1,2}})?(?![\w]|\.\d)")
_IP6 = re.compile(
    rf"(?a)(?<![\w:.])(?P<a>(?:[0-9A-Fa-f]{{1,4}}|:)(?::[0-9A-Fa-f]{{0,4}}){{1,8}}(?:(?<=:){_IPV4})?)"
    r"(?:%[\w.~-]+)?(?:/\d{1,3})?(?![\w:]|\.\d)"
)


class IpShape(ShapeRecognizer):
    """IPv4 and IPv6 addresses (module docstring)."""

    ENTITY = "IP_ADDRESS"

    def spans(self, text):
        if "." in text:
            for m in _IP4.finditer(text):
                yield m.start(), m.end(), 0.8
        if ":" not in text:
            return
        for m in _IP6.finditer(text):
            address = m.group("a")
            if not any(c not in ":" for c in address):
                continue  # "::" alone names nothing
            try:
                ipaddress.IPv6Address(address)
            except ValueError:
                continue
            start, end = m.span()
            groups = sum(1 for g in re.split(r"[:.]", address) if g)
            if (
                groups <= 2
                and _char(text, start - 1) == "["
                and _char(text, end) == "]"
                and (_char(text, start - 2).isalnum() or _char(text, start - 2) in "_])")
            ):
                continue  # x[1::2], x[::2]: a slice
            yield start, end, 0.8


def shape_recognizers() -> list[ShapeRecognizer]:
    """The five shape recognizers, one per entity type of :data:`SHAPE_ENTITIES`."""
    return [EmailShape(), PhoneShape(), CardShape(), IbanShape(), IpShape()]
