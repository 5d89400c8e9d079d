"""National identity numbers beyond the US SSN, found shape first.

Owns :data:`NATIONAL_ID_ENTITIES`, :class:`NationalIdRecognizer`, :func:`verhoeff_ok`,
:func:`cpf_ok`, :func:`dni_ok` and :func:`nir_ok`.

The rule is the one :mod:`redact.shapes` follows: a string with a type's shape is that type, and a
checksum (Verhoeff for Aadhaar, mod 11 for CPF / CNPJ, mod 23 for a DNI's letter, mod 97 for a
NIR's key) only raises the score; a value that fails it is still redacted. Where a shape alone is
too common (a run of 9 or 11 digits, 9 letters and digits), the type is found only after one of
its words in the 40 characters before it (the context words of each type below); the context
lowers false positives, never the checksum.

- ``UK_NINO``: two prefix letters (not D, F, I, Q, U, V; not O second), six digits, a suffix
  A-D, contiguous or split by spaces (``QQ 12 34 56 C``): shape alone;
- ``IN_AADHAAR``: 12 digits, the first 2-9, in groups of four split by a space or a dash: shape
  alone; contiguous after "Aadhaar" / "UID" / "आधार";
- ``IN_PAN``: five capitals (the fourth one of P C H F A T B L J G, the holder's kind), four
  digits, a capital: shape alone;
- ``DE_TAX_ID``: 11 digits, contiguous or grouped 2-3-3-3, after "Steuer-ID", "Steuer-IdNr",
  "Steueridentifikationsnummer", "IdNr", "tax id" / "TIN";
- ``DE_ID_CARD``: 9 or 10 characters of the ID card's alphabet (digits and C F G H J K L M N P R T
  V W X Y Z) with a digit among them, after "Personalausweis", "Ausweisnummer", "ID card",
  "Ausweis-Nr";
- ``CA_SIN``: 9 digits, grouped 3-3-3 by spaces or dashes or contiguous, after "SIN", "social
  insurance", "NAS", "assurance sociale";
- ``ES_DNI``: a DNI (8 digits and a letter, an optional dash) or an NIE (X, Y or Z, 7 digits and a
  letter): shape alone;
- ``FR_NIR``: sex 1/2, year, month, department (2 digits, 2A or 2B), commune, order and an
  optional key: 13 or 15 characters, grouped by spaces (1 2 2 2 3 3 [2]: shape alone) or
  contiguous after "NIR", "sécurité sociale", "sécu", "INSEE", "social security";
- ``BR_CPF``: ``ddd.ddd.ddd-dd`` (shape alone) or 11 digits after "CPF"; ``BR_CNPJ``:
  ``dd.ddd.ddd/dddd-dd`` (shape alone) or 14 digits after "CNPJ";
- ``PASSPORT``: 6 to 9 capitals and digits with a digit among them after "passport" (and
  "Reisepass", "passeport", "pasaporte", "passaporte"), optionally its "no." / "number" / ":".

Scores: 0.9 with a checksum that holds (or no checksum: NINO, PAN), 0.7 by shape when it fails,
0.65 by context; all above the analyzer's threshold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from redact.shapes import ShapeRecognizer

__all__ = ["NATIONAL_ID_ENTITIES", "NationalIdRecognizer", "verhoeff_ok", "cpf_ok", "dni_ok", "nir_ok", "national_id_recognizers"]

NATIONAL_ID_ENTITIES = (
    "UK_NINO",
    "IN_AADHAAR",
    "IN_PAN",
    "DE_TAX_ID",
    "DE_ID_CARD",
    "CA_SIN",
    "ES_DNI",
    "FR_NIR",
    "BR_CPF",
    "BR_CNPJ",
    "PASSPORT",
)
_CONTEXT_CHARS = 40

# -- checksums ----------------------------------------------------------------------------------

_V_D = (
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
    (1, 2, 3, 4, 0, 6, 7, 8, 9, 5),
    (2, 3, 4, 0, 1, 7, 8, 9, 5, 6),
    (3, 4, 0, 1, 2, 8, 9, 5, 6, 7),
    (4, 0, 1, 2, 3, 9, 5, 6, 7, 8),
    (5, 9, 8, 7, 6, 0, 4, 3, 2, 1),
    (6, 5, 9, 8, 7, 1, 0, 4, 3, 2),
    (7, 6, 5, 9, 8, 2, 1, 0, 4, 3),
    (8, 7, 6, 5, 9, 3, 2, 1, 0, 4),
    (9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
)
_V_P = (
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
    (1, 5, 7, 6, 2, 8, 3, 0, 9, 4),
    (5, 8, 0, 3, 7, 9, 6, 1, 4, 2),
    (8, 9, 1, 6, 0, 4, 3, 5, 2, 7),
    (9, 4, 5, 3, 1, 2, 6, 8, 7, 0),
    (4, 2, 8, 6, 5, 7, 3, 9, 0, 1),
    (2, 7, 9, 3, 8, 0, 6, 4, 1, 5),
    (7, 0, 4, 6, 9, 1, 3, 2, 5, 8),
)


def _digits(value: str) -> str:
    return "".join(c for c in value if c.isdigit())


def verhoeff_ok(value: str) -> bool:
    """The Verhoeff check of the digits of ``value`` (Aadhaar's)."""
    c = 0
    for i, d in enumerate(reversed(_digits(value))):
        c = _V_D[c][_V_P[i % 8][int(d)]]
    return c == 0


def cpf_ok(value: str) -> bool:
    """The two mod-11 check digits of a CPF (11 digits) or a CNPJ (14 digits)."""
    d = [int(c) for c in _digits(value)]
    if len(d) == 11:
        weights = [list(range(10, 1, -1)), list(range(11, 1, -1))]
    elif len(d) == 14:
        weights = [[5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2], [6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2]]
    else:
        return False
    for k, w in enumerate(weights):
        r = sum(a * b for a, b in zip(d, w, strict=False)) % 11
        if d[len(w)] != (0 if r < 2 else 11 - r):
            return False
    return True


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def dni_ok(value: str) -> bool:
    """A Spanish DNI's or NIE's check letter (mod 23)."""
    v = value.replace("-", "").upper()
    head = v[:-1]
    if head[:1] in ("X", "Y", "Z"):
        head = str("XYZ".index(head[0])) + head[1:]
    return head.isdigit() and v[-1] == _DNI_LETTERS[int(head) % 23]


def nir_ok(value: str) -> bool:
    """A French NIR's mod-97 key (15 characters, spaces ignored)."""
    v = value.replace(" ", "").upper()
    if len(v) != 15:
        return False
    body = v[:13].replace("2A", "19").replace("2B", "18")
    return body.isdigit() and v[13:].isdigit() and 97 - int(body) % 97 == int(v[13:])


# -- the types ----------------------------------------------------------------------------------

_WB = r"(?<![\w./-])"  # a whole token: no word, path or number before it
_WE = r"(?![\w/]|[.-]\w)"
_S = r"[ \u00a0]?"
# (entity, regex, context words or None for shape alone, checksum or None)
_Spec = tuple[str, re.Pattern[str], re.Pattern[str] | None, Callable[[str], bool] | None]


def _words(rx: str) -> re.Pattern[str]:
    return re.compile(rf"(?i)(?:{rx})")


_SPECS: tuple[_Spec, ...] = (
    (
        "UK_NINO",
        re.compile(rf"{_WB}(?![DFIQUV])[A-Z](?![DFIOQUV])[A-Z]{_S}\d{{2}}{_S}\d{{2}}{_S}\d{{2}}{_S}[A-D]{_WE}"),
        None,
        None,
    ),
    ("IN_AADHAAR", re.compile(rf"{_WB}[2-9]\d{{3}}(?P<sep>[ -])\d{{4}}(?P=sep)\d{{4}}{_WE}"), None, verhoeff_ok),
    ("IN_AADHAAR", re.compile(rf"{_WB}[2-9]\d{{11}}{_WE}"), _words(r"aadhaa?r|\buid\b|uidai|आधार"), verhoeff_ok),
    ("IN_PAN", re.compile(rf"{_WB}[A-Z]{{3}}[PCHFATBLJG][A-Z]\d{{4}}[A-Z]{_WE}"), None, None),
    (
        "DE_TAX_ID",
        re.compile(rf"{_WB}\d{{2}}{_S}\d{{3}}{_S}\d{{3}}{_S}\d{{3}}{_WE}"),
        _words(r"steuer[- ]?id|steuer-?idnr|steueridentifikations|identifikationsnummer|\bidnr|tax[ -]?id|\btin\b"),
        None,
    ),
    (
        "DE_ID_CARD",
        re.compile(rf"{_WB}(?=[CFGHJKLMNPRTVWXYZ0-9]{{0,9}}\d)[CFGHJKLMNPRTVWXYZ0-9]{{9,10}}{_WE}"),
        _words(r"personalausweis|ausweis|id[ -]?card|identity card|\bpa[ -]?nr"),
        None,
    ),
    (
        "CA_SIN",
        re.compile(rf"{_WB}\d{{3}}(?P<sep>[ -]?)\d{{3}}(?P=sep)\d{{3}}{_WE}"),
        _words(r"\bsin\b|social insurance|\bnas\b|assurance sociale"),
        None,
    ),
    ("ES_DNI", re.compile(rf"{_WB}(?:\d{{8}}|[XYZ]\d{{7}})-?[A-Z]{_WE}"), None, dni_ok),
    (
        "FR_NIR",
        re.compile(rf"{_WB}[12] \d{{2}} (?:0[1-9]|1[0-2]|[2-9]\d) (?:\d{{2}}|2[AB]) \d{{3}} \d{{3}}(?: \d{{2}})?{_WE}"),
        None,
        nir_ok,
    ),
    (
        "FR_NIR",
        re.compile(rf"{_WB}[12]\d{{4}}(?:\d{{2}}|2[AB])\d{{6}}(?:\d{{2}})?{_WE}"),
        _words(r"\bnir\b|s[ée]curit[ée] sociale|\bs[ée]cu\b|insee|social security"),
        nir_ok,
    ),
    ("BR_CPF", re.compile(rf"{_WB}\d{{3}}\.\d{{3}}\.\d{{3}}-\d{{2}}{_WE}"), None, cpf_ok),
    ("BR_CPF", re.compile(rf"{_WB}\d{{11}}{_WE}"), _words(r"\bcpf\b"), cpf_ok),
    ("BR_CNPJ", re.compile(rf"{_WB}\d{{2}}\.\d{{3}}\.\d{{3}}/\d{{4}}-\d{{2}}{_WE}"), None, cpf_ok),
    ("BR_CNPJ", re.compile(rf"{_WB}\d{{14}}{_WE}"), _words(r"\bcnpj\b"), cpf_ok),
    (
        "PASSPORT",
        re.compile(rf"{_WB}(?=[A-Z0-9]{{0,8}}\d)[A-Z0-9]{{6,9}}{_WE}"),
        _words(r"passports?|reisepass|passeport|pasaporte|passaporte|paspoort"),
        None,
    ),
)


class NationalIdRecognizer(ShapeRecognizer):
    """One national id type: its shapes, context words and checksum (module docstring)."""

    def __init__(self, entity: str) -> None:
        self.ENTITY = entity
        self._specs = [s for s in _SPECS if s[0] == entity]
        super().__init__()

    def spans(self, text: str) -> Iterator[tuple[int, int, float]]:
        for _entity, rx, context, check in self._specs:
            for m in rx.finditer(text):
                start, end = m.span()
                if context is not None:
                    if context.search(text, max(0, start - _CONTEXT_CHARS), start) is None:
                        continue
                    score = 0.9 if check is not None and check(m.group()) else 0.65
                else:
                    score = 0.9 if check is None or check(m.group()) else 0.7
                yield start, end, score


def national_id_recognizers() -> list[NationalIdRecognizer]:
    """One recognizer per type of :data:`NATIONAL_ID_ENTITIES`."""
    return [NationalIdRecognizer(e) for e in NATIONAL_ID_ENTITIES]
