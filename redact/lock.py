"""The second lock: a fast scan, independent of the analyzer, for strings that still have a PII shape.

Owns :data:`LOCK_TYPES`, :class:`Hit`, :func:`scan`, :func:`strings_of`, :class:`Exempt` and
:func:`check`. Before a record is written (capture segment, import, ``replay redact``, export),
every string it will store is scanned; a hit whose exact string is not a surrogate this run made
(:class:`Exempt`) keeps the record out. ``replay audit`` runs the same scan over a stored trace.

The scan is compiled regexes with its own, deliberately simple table (not Presidio, and not
:mod:`redact.recognizers`' patterns), one entity type per shape:

- ``EMAIL_ADDRESS``: ``local@domain.tld``, any top-level domain of 2+ letters (``.internal``,
  ``.example`` and ``.local`` included); not the ``password@host`` of ``scheme://user:password@host``;
- ``PHONE_NUMBER``: ``+``, a country code and 7 to 14 further digits, with one or two spaces, dots,
  dashes or brackets between them; or a North American number written ``(xxx) xxx-xxxx``,
  ``xxx-xxx-xxxx`` or ``xxx.xxx.xxxx`` (optionally ``1-`` first), whatever its area code;
- ``CREDIT_CARD``: 13-19 digits starting 2-6 (the card networks), contiguous or in groups of four
  (the last may be shorter; or Amex's 4-6-5) split by spaces or dashes, Luhn-valid;
- ``IBAN_CODE``: 2 capital letters, 2 digits, 11-30 capitals or digits, optionally grouped by
  spaces or dashes, mod-97 valid (ISO 13616);
- ``API_KEY``: a provider prefix (``sk-`` with a digit in the key, ``sk-ant-``, ``ghp_`` / ``gho_`` /
  ``ghs_`` / ``ghu_`` / ``ghr_``, ``github_pat_``, ``AKIA`` / ``ASIA``, ``AIza``, ``xox?-``,
  ``sk_`` / ``rk_`` / ``pk_`` + ``live_`` / ``test_``, ``hf_``) and the key's characters;
- ``JWT``: ``eyJ...`` ``.eyJ...`` ``.signature`` (the signature may be empty);
- ``PRIVATE_KEY``: a ``-----BEGIN ... PRIVATE KEY-----`` line and its key material, to the END
  line (or, cut short, to the end of the base64); a BEGIN line with under 16 characters of key
  material after it holds no key and is not a hit;
- ``UK_NINO`` (two prefix letters, six digits, a suffix A-D), ``IN_PAN`` (five capitals, the
  fourth a holder kind, four digits, a capital), ``IN_AADHAAR`` (4-4-4 digits, Verhoeff-valid),
  ``ES_DNI`` (a DNI or NIE whose mod-23 letter holds), ``FR_NIR`` (the grouped 15-character form,
  mod-97 key valid), ``BR_CPF`` / ``BR_CNPJ`` (their punctuated forms, mod-11 valid): the national
  ids with a shape of their own (:mod:`redact.national_ids`); those its recognizers find only in
  context (German, Canadian, passports, contiguous runs) are not the lock's;
- ``EMAIL_ADDRESS`` spelled out: ``jane [at] example [dot] com`` (any bracket, any top-level
  domain) and ``jane dot doe at example dot com`` (a known top-level domain);
- ``IP_ADDRESS``: IPv4 with octets 0-255; IPv6 full or compressed (an IPv4 tail too) with three or
  more groups, checked by :mod:`ipaddress`. Loopback and unspecified addresses name no host and
  are not hits (nor are two-group forms such as Python's ``x[1::2]`` slices).

Validity checks (Luhn, mod 97, :mod:`ipaddress`) are the lock's own precision: a hit quarantines
a record, so the lock keeps its false positives low; the analyzer (:mod:`redact.analyzer`) is the
one that redacts on shape alone. Matches are whole tokens (never inside a longer word or number);
a grouped card or IBAN that runs into a following group is cut back to its longest valid prefix;
a hit inside a longer hit is dropped. On :func:`examples.pii_corpus.make_corpus` (150 sessions, seed 11)
every hit lies on a labelled PII span, and none of the corpus's non-PII strings is hit.

Speed: one regex per shape family, each with its first character ahead of its lookbehind and a
gate (a substring or cheap regex the text must hold) where one exists, 15.5-16.5 MB/s on the
2,078 distinct texts (0.60 MB) of ``make_corpus(250, seed=0)`` (2-core VM, Python 3.11); one
combined regex of the same shapes ran at 5.5 MB/s. The national ids (their digit shapes in the
digit regex, tried first: one that fails its check is matched again as the other digit shapes)
and spelled emails cost a quarter of that: 9.0 MB/s against 12.0 MB/s without them, measured
side by side on the same texts on 2026-12-08 (a shared, noisy machine).

:class:`Exempt` holds the surrogates a run wrote as 8-byte unkeyed blake2b digests (a surrogate
names no one; nothing raw is held): about 78 bytes a value in memory (a Python set of ints). Its
:meth:`Exempt.to_meta` encoding is the sorted digests, big-endian, in standard base64 after the
tag ``b2b8:``: 10.67 characters a value (the trace metadata field ``lock_exempt``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from redact.national_ids import cpf_ok, dni_ok, nir_ok, verhoeff_ok

__all__ = ["LOCK_TYPES", "Hit", "scan", "strings_of", "Exempt", "check"]

LOCK_TYPES: tuple[str, ...] = (
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "API_KEY",
    "JWT",
    "PRIVATE_KEY",
    "IP_ADDRESS",
    "UK_NINO",
    "IN_AADHAAR",
    "IN_PAN",
    "ES_DNI",
    "FR_NIR",
    "BR_CPF",
    "BR_CNPJ",
)

# -- the shapes ---------------------------------------------------------------------------------
# Each group name is an entity type (with a digit suffix where one type has several shapes in one
# regex). Lookarounds keep a match to a whole token: no letter, digit or joining character on
# either side. A lookbehind placed after a pattern's first character (``\d(?<![\w.]\d)``) lets
# the regex engine skip ahead to that character instead of trying every position; a gate skips a
# regex outright.

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# the national ids that start with a digit (after the first digit); checked in _ok_end
_DIGIT_IDS = (
    r"(?:(?P<IN_AADHAAR>(?<=[2-9])\d{3}(?P<sep>[ -])\d{4}(?P=sep)\d{4})"
    r"|(?P<ES_DNI1>\d{7}-?[A-Z])"
    r"|(?P<FR_NIR>(?<=[12]) \d{2} \d{2} (?:\d{2}|2[AB]) \d{3} \d{3} \d{2})"
    r"|(?P<BR_CPF>\d{2}\.\d{3}\.\d{3}-\d{2})"
    r"|(?P<BR_CNPJ>\d\.\d{3}\.\d{3}/\d{4}-\d{2}))(?![\w/]|[.-]\w)"
)
_NANP_END = r"\d{3}[.-]\d{4}(?![\w]|[.-]\d)"
_DIGIT_REST = (
    r"(?P<PHONE_NUMBER2>(?<=1)[ .-](?:\(\d{3}\) ?|\d{3}[.-])" + _NANP_END + ")"
    r"|(?P<PHONE_NUMBER3>\d{2}[.-]" + _NANP_END + ")"
    r"|(?P<CREDIT_CARD>(?<=[2-6])(?:\d{12,18}|\d{3}(?:[ -]\d{4}){1,3}[ -]\d{1,4}|\d{3}[ -]\d{6}[ -]\d{4,5}))(?!\w)"
    r"|(?P<IP_ADDRESS>\d{0,2}(?:\.\d{1,3}){3})(?![\w]|\.\d)"
)
_DIGIT_SHAPES = re.compile(r"\d(?<![\w+.-]\d)(?:" + _DIGIT_REST + ")")
# (gate: a substring the text must hold, a regex it must match, or None; the regex)
_SCANNERS: tuple[tuple[str | re.Pattern[str] | None, re.Pattern[str]], ...] = (
    (
        "PRIVATE KEY",
        re.compile(
            r"(?P<PRIVATE_KEY>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
            r"(?:[A-Za-z0-9+/=\s\\:,.-]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|[A-Za-z0-9+/=\s\\]*))"
        ),
    ),
    ("eyJ", re.compile(r"(?P<JWT>eyJ(?<![\w-]eyJ)[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)(?![\w-])")),
    (
        None,
        re.compile(
            r"[Aghprsx](?<![\w-][Aghprsx])(?P<API_KEY>"
            r"(?<=s)k-ant-[A-Za-z0-9_-]{20,}"
            r"|(?<=s)k-(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{20,}"
            r"|(?<=g)h[opsur]_[A-Za-z0-9]{30,}|(?<=g)ithub_pat_[A-Za-z0-9_]{30,}"
            r"|(?<=A)(?:KIA|SIA)[A-Z0-9]{16}|(?<=A)Iza[A-Za-z0-9_-]{30,}"
            r"|(?<=x)ox[a-z]-[A-Za-z0-9-]{10,}"
            r"|(?<=[spr])k_(?:live|test)_[A-Za-z0-9]{16,}"
            r"|(?<=h)f_[A-Za-z0-9]{30,})(?![\w-])"
        ),
    ),
    ("+", re.compile(r"(?P<PHONE_NUMBER>\+(?<![\w+]\+)\d{1,3}(?:[ .()-]{1,2}\d|\d){7,14})(?![\w]|[ .-]\d)")),
    ("(", re.compile(r"(?P<PHONE_NUMBER1>\((?<![\w+.-]\()\d{3}\) ?" + _NANP_END + ")")),
    # the shapes that start with a digit, in one regex (one pass over the digits): national ids
    # first; one that fails its check is tried again as the others (_DIGIT_SHAPES)
    (None, re.compile(r"\d(?<![\w+.-]\d)(?:" + _DIGIT_IDS + "|" + _DIGIT_REST + ")")),
    (
        re.compile(r":[0-9A-Fa-f]{0,4}:"),
        re.compile(
            r"(?P<IP_ADDRESS1>[0-9A-Fa-f:](?<![\w:.][0-9A-Fa-f:])(?=[0-9A-Fa-f]{0,3}:[0-9A-Fa-f]{0,4}:|:)"
            r"[0-9A-Fa-f:]{1,38}(?:(?<=:)" + _OCTET + r"(?:\." + _OCTET + r"){3})?)(?![\w:]|\.\d)"
        ),
    ),
    (None, re.compile(r"(?P<IBAN_CODE>[A-Z](?<![\w-][A-Z])[A-Z]\d{2}(?:[ -]?[A-Z0-9]){11,32})(?!\w)")),
    # the national ids that start with a capital; each ends in a digit, maybe a space, a capital
    (
        re.compile(r"[0-9][ \u00a0-]?[A-Z]"),
        re.compile(
            r"[A-Z](?<![\w./-][A-Z])(?:"
            r"(?P<UK_NINO>[A-CEGHJ-PRSTW-Z][ \u00a0]?\d{2}[ \u00a0]?\d{2}[ \u00a0]?\d{2}[ \u00a0]?[A-D])"
            r"|(?P<IN_PAN>[A-Z]{2}[PCHFATBLJG][A-Z]\d{4}[A-Z])"
            r"|(?P<ES_DNI>(?<=[XYZ])\d{7}-?[A-Z]))(?![\w/]|[.-]\w)"
        ),
    ),
    # an email spelled out: "jane [at] example [dot] com", "jane dot doe at example dot com"
    (
        re.compile(r"(?i)dot"),
        re.compile(
            r"(?P<EMAIL_ADDRESS>\w(?<![\w.+-]\w)[\w.+-]*(?:"
            r"[ \t]*[\[({<][ \t]*(?i:at)[ \t]*[\])}>][ \t]*[\w-]+(?:(?:[ \t]*[\[({<][ \t]*(?i:dot)[ \t]*[\])}>][ \t]*|\.)[\w-]+)*"
            r"[ \t]*[\[({<][ \t]*(?i:dot)[ \t]*[\])}>][ \t]*[A-Za-z]{2,6}"
            r"|(?:[ \t]+(?i:dot)[ \t]+[\w+-]+)*[ \t]+(?i:at)[ \t]+[\w-]+(?:[ \t]+(?i:dot)[ \t]+[\w-]+)*[ \t]+(?i:dot)[ \t]+"
            r"(?i:com|org|net|io|co|uk|de|fr|es|it|nl|edu|gov|info|me|ai|dev|app|eu|example|test|internal|local)))(?![\w-])"
        ),
    ),
)
_ID_CHECKS = {"IN_AADHAAR": verhoeff_ok, "ES_DNI": dni_ok, "BR_CPF": cpf_ok, "BR_CNPJ": cpf_ok, "FR_NIR": nir_ok}
# an email is found from its "@" and domain, then its local part is read backwards: 3x faster than
# trying every letter as a local part's start
_EMAIL_DOMAIN = re.compile(r"@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}(?![\w-])")
_EMAIL_LOCAL_REVERSED = re.compile(r"[\w.%+-]{1,64}")
# the password of scheme://user:password@host is not an email's local part
_URL_USERINFO = re.compile(r"[A-Za-z][\w+.-]*://[^\s/@:]*:[^\s/@]*$")
_PEM_HEADER = re.compile(r"-----(?:BEGIN|END) [A-Z0-9 ]+-----")
_PEM_MATERIAL = 16


@dataclass(frozen=True)
class Hit:
    """A lock-shaped string of a text (character offsets)."""

    entity: str
    start: int
    end: int


def _luhn(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _iban_ok(compact: str) -> bool:
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _card_ok(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and _luhn(digits)


def _valid_length(value: str, ok) -> int:
    """The length of the longest prefix of a grouped candidate, cut at a space or dash, whose
    characters without separators pass ``ok`` (0: none): a grouped card or IBAN can run into a
    following group of digits or capitals."""
    cuts = [i for i, c in enumerate(value) if c in " -"] + [len(value)]
    for cut in reversed(cuts):
        if ok(value[:cut].replace(" ", "").replace("-", "")):
            return cut
    return 0


def _ip6_ok(value: str) -> bool:
    try:
        addr = ipaddress.IPv6Address(value)
    except ValueError:
        return False
    groups = sum(1 if "." not in g else 2 for g in value.split(":") if g)  # an IPv4 tail is two
    return groups >= 3 and not (addr.is_loopback or addr.is_unspecified)


def _ip4_ok(value: str) -> bool:
    try:
        addr = ipaddress.IPv4Address(value)  # octets 0-255, no leading zeros
    except ValueError:
        return False
    return not (addr.is_loopback or addr.is_unspecified)


def _ok_end(name: str, value: str) -> int:
    """Where a candidate of type ``name`` ends once checked (0: not a hit)."""
    if name == "CREDIT_CARD" or name == "IBAN_CODE":
        return _valid_length(value, _card_ok if name == "CREDIT_CARD" else _iban_ok)
    if name == "IP_ADDRESS":
        ok = _ip6_ok(value) if ":" in value else _ip4_ok(value)
        return len(value) if ok else 0
    if name in _ID_CHECKS:
        return len(value) if _ID_CHECKS[name](value) else 0
    if name == "PRIVATE_KEY":
        material = sum(c.isalnum() for c in _PEM_HEADER.sub("", value))
        return len(value.rstrip()) if material >= _PEM_MATERIAL else 0
    return len(value)


def _emails(text: str, found: list[Hit]) -> None:
    for m in _EMAIL_DOMAIN.finditer(text):
        at = m.start()
        lo = max(0, at - 64)
        local = _EMAIL_LOCAL_REVERSED.match(text[lo:at][::-1])
        if local is None:
            continue
        start = at - local.end()
        while start < at and not text[start].isalnum():
            start += 1
        # the "@" that ends a URL's user:password is not an email's (whatever the password holds)
        if start < at and not _URL_USERINFO.search(text, max(0, at - 256), at):
            found.append(Hit("EMAIL_ADDRESS", start, m.end()))


def scan(text: str) -> list[Hit]:
    """The lock-shaped strings of ``text``, in order; a hit inside a longer one is dropped (see the
    module docstring)."""
    found: list[Hit] = []
    for gate, rx in _SCANNERS:
        if gate is not None and (gate not in text if isinstance(gate, str) else gate.search(text) is None):
            continue
        for m in rx.finditer(text):
            group = m.lastgroup if m.lastgroup != "sep" else next(k for k, v in m.groupdict().items() if v and k != "sep")
            assert group is not None  # every scanner is an alternation of named groups
            entity = group.rstrip("0123456789")
            start = m.start()  # a group of the digit regex starts after its first digit
            end = _ok_end(entity, text[start : m.end(group)])
            if end:
                found.append(Hit(entity, start, start + end))
            elif entity in _ID_CHECKS and text[start].isdigit():
                again = _DIGIT_SHAPES.match(text, start)  # a phone, card or IP after all
                if again is not None and again.lastgroup is not None:
                    other = again.lastgroup.rstrip("0123456789")
                    end = _ok_end(other, text[start : again.end(again.lastgroup)])
                    if end:
                        found.append(Hit(other, start, start + end))
    if "@" in text:
        _emails(text, found)
    if len(found) < 2:
        return found
    found.sort(key=lambda h: (h.start, -h.end))
    out = [found[0]]
    for h in found[1:]:
        if h.end > out[-1].end:
            out.append(h)
    return out


def strings_of(value: Any) -> Iterator[str]:
    """Every string a JSON value holds: dict keys and values, list items, nested, depth first."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for k, item in v.items():
                if isinstance(k, str):
                    yield k
                stack.append(item)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


def _digest(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


_META_TAG = "b2b8:"


class Exempt:
    """The surrogates this run wrote: whole values and the lock-shaped strings inside them, as
    8-byte blake2b digests (see the module docstring)."""

    __slots__ = ("_digests",)

    def __init__(self, strings: Iterable[str] = ()) -> None:
        self._digests: set[int] = set()
        for s in strings:
            self.add(s)

    @staticmethod
    def digests_of(surrogate: str) -> tuple[int, ...]:
        """What :meth:`add` adds for ``surrogate``: its digest and those of the lock-shaped
        strings in it."""
        return (_digest(surrogate), *(_digest(surrogate[h.start : h.end]) for h in scan(surrogate)))

    def add(self, surrogate: str) -> None:
        """Exempt ``surrogate`` and every lock-shaped string in it."""
        self._digests.update(self.digests_of(surrogate))

    def add_digests(self, digests: Iterable[int]) -> None:
        """Exempt what :meth:`digests_of` gave (computed elsewhere: a worker, a Ray actor)."""
        self._digests.update(digests)

    def __contains__(self, s: object) -> bool:
        return isinstance(s, str) and _digest(s) in self._digests

    def __len__(self) -> int:
        return len(self._digests)

    def update(self, other: Exempt) -> None:
        self._digests |= other._digests

    def to_meta(self) -> str:
        """The trace metadata's encoding ("" when empty)."""
        if not self._digests:
            return ""
        raw = b"".join(d.to_bytes(8, "big") for d in sorted(self._digests))
        return _META_TAG + base64.b64encode(raw).decode("ascii")

    @classmethod
    def from_meta(cls, text: str) -> Exempt:
        """Read :meth:`to_meta`'s encoding, or several of them separated by spaces (a capture
        folder's segments, :func:`replay.trace.read_meta`), as their union; ValueError when one
        is not an encoding."""
        out = cls()
        for part in text.split():
            if not part.startswith(_META_TAG):
                raise ValueError(f"not a lock exemption set (no '{_META_TAG}' tag)")
            try:
                raw = base64.b64decode(part[len(_META_TAG) :], validate=True)
            except binascii.Error:
                raise ValueError("lock exemption set is not valid base64") from None
            if len(raw) % 8:
                raise ValueError(f"lock exemption set holds {len(raw)} bytes, not a multiple of 8")
            out._digests.update(int.from_bytes(raw[i : i + 8], "big") for i in range(0, len(raw), 8))
        return out

    @classmethod
    def union_meta(cls, texts: Iterable[str]) -> str:
        """The encoding of the union of several encodings (a capture folder's segments)."""
        out = cls()
        for text in texts:
            out.update(cls.from_meta(text))
        return out.to_meta()


def check(strings: Iterable[str], exempt: Exempt | None = None) -> Counter[str]:
    """Per type, the hits in ``strings`` whose exact string is not in ``exempt``."""
    found: Counter[str] = Counter()
    for s in strings:
        for h in scan(s):
            if exempt is None or s[h.start : h.end] not in exempt:
                found[h.entity] += 1
    return found
