"""Recognizers for the secrets that turn up in prompts, and fixes to Presidio's defaults.

Owns :class:`SecretRecognizer`, :func:`secret_recognizers`, :class:`CardRecognizer` and
:func:`shannon_entropy`. Each secret pattern is a regex whose named group ``s`` (or the whole
match) is the secret: only the password of ``postgres://user:PASSWORD@host`` is replaced, only
the token after ``Bearer``. Entity types: ``API_KEY`` (OpenAI, Anthropic, GitHub, AWS, Google,
Slack, Stripe, Hugging Face shapes), ``JWT`` (its header must decode to a JSON object), ``PRIVATE_KEY`` (a whole
PEM block), ``BEARER_TOKEN``, ``URL_PASSWORD``, ``LOCATION`` for US-style street addresses
(number, capitalized words, a USPS street suffix, an optional unit, city and state + ZIP), which
spaCy finds only in pieces, ``PERSON`` where prompts name people in a fixed shape the small spaCy
model often misses (greetings, sign-offs, ``Name <email>``, From: headers, vCard ``FN:``,
``"name": "..."`` fields), and ``SECRET`` (any other run of 24+ key
characters with upper case, lower case and digits whose Shannon entropy is at least
:data:`MIN_SECRET_ENTROPY` bits a character: hex digests, UUIDs and code identifiers fall below).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections import Counter
from collections.abc import Callable

from presidio_analyzer import EntityRecognizer, Pattern, RecognizerResult
from presidio_analyzer.predefined_recognizers import CreditCardRecognizer

__all__ = [
    "SECRET_ENTITIES",
    "STREET_WORDS",
    "MIN_SECRET_ENTROPY",
    "SecretRecognizer",
    "CardRecognizer",
    "secret_recognizers",
    "shannon_entropy",
]

MIN_SECRET_ENTROPY = 4.0
_SECRET_MIN_LEN = 24

# name -> (regex, score); group "s" is the secret when present
_API_KEYS: dict[str, str] = {
    "anthropic": r"\bsk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_-]{32,}",
    "openai": r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}",
    "github": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})",
    "aws_access_key_id": r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
    "google": r"\bAIza[0-9A-Za-z_-]{35}",
    "slack": r"\bxox[abposr]-[0-9A-Za-z-]{10,}",
    "stripe": r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}",
    "huggingface": r"\bhf_[A-Za-z0-9]{30,}",
}


# USPS street suffixes (Publication 28, the common ones) and unit designators
_STREET_SUFFIXES = (
    "Alley|Avenue|Ave|Boulevard|Blvd|Bridge|Brook|Bypass|Camp|Canyon|Causeway|Center|Circle|Cir|"
    "Cliff|Common|Corner|Course|Court|Ct|Cove|Creek|Crescent|Crest|Crossing|Dale|Dam|Divide|Drive|"
    "Dr|Estate|Expressway|Extension|Falls|Ferry|Field|Fields|Flat|Ford|Forest|Forge|Fork|Fort|"
    "Freeway|Garden|Gardens|Gateway|Glen|Green|Grove|Harbor|Haven|Heights|Highway|Hwy|Hill|Hills|"
    "Hollow|Island|Isle|Junction|Key|Knoll|Lake|Lakes|Landing|Lane|Ln|Light|Lock|Lodge|Loop|Mall|"
    "Manor|Meadow|Meadows|Mill|Mills|Mission|Motorway|Mount|Mountain|Neck|Orchard|Oval|Park|"
    "Parkway|Pkwy|Pass|Path|Pike|Pine|Pines|Place|Pl|Plain|Plains|Plaza|Point|Port|Prairie|Radial|"
    "Ranch|Rapids|Rest|Ridge|River|Road|Rd|Route|Row|Run|Shoal|Shore|Shores|Skyway|Spring|Springs|"
    "Square|Sq|Station|Stravenue|Stream|Street|St|Summit|Terrace|Ter|Trace|Track|Trail|Tunnel|"
    "Turnpike|Union|Valley|Viaduct|View|Village|Ville|Vista|Walk|Wall|Way|Well|Wells"
)
STREET_WORDS = frozenset(w.lower() for w in _STREET_SUFFIXES.split("|")) | {
    "apt", "suite", "ste", "unit", "floor", "building", "room", "po", "box"}
# a street address: number, one to four capitalized words, a suffix, an optional unit, then an
# optional ", City" and ", ST 12345"
_STREET = (
    r"\b\d{1,6}\s+(?:[A-Z][A-Za-z'.-]*\s+){1,4}(?:" + _STREET_SUFFIXES + r")\b\.?"
    r"(?:,?\s+(?:Apt\.?|Suite|Ste\.?|Unit|#)\s*[\w-]+)?"
    r"(?:,\s*[A-Z][A-Za-z .'-]{1,40}?(?:,\s*[A-Z]{2}\s+\d{5}(?:-\d{4})?)?(?=[\s,.;:)]|$))?"
)


# a capitalized name of one to four words (Latin letters with accents, apostrophes, hyphens)
_NAME = r"(?P<s>[A-ZÀ-ÖØ-Þ][A-Za-zÀ-ÖØ-öø-ÿ'’-]+(?:[ \t]+[A-ZÀ-ÖØ-Þ][A-Za-zÀ-ÖØ-öø-ÿ'’-]+){0,3})"
# where prompts name people in a fixed shape that spaCy's small model often misses
_PERSON_CONTEXTS: dict[str, str] = {
    "greeting": r"\b(?:Hi|Hello|Hey|Dear)[ \t]+" + _NAME + r"(?=[ \t]*[,!:\n])",
    "sign_off": r"(?:Regards|regards|Thanks|Cheers|Sincerely|Best),?[ \t]*\n[ \t]*" + _NAME + r"[ \t]*(?=\n|$)",
    "display_name": _NAME + r"[ \t]*[<(][\w.+-]+@",  # Name <user@host>, Name (user@host)
    "from_header": r"(?m)^(?:From|To|Cc|Reply-To):[ \t]*" + _NAME,
    "vcard": r"(?m)^FN:[ \t]*" + _NAME,
    "name_field": r"[\"']?(?:full_?name|fullName|first_?name|last_?name|display_?name|customer_?name|"
                  r"contact_?name|author|owner|name)[\"']?[ \t]*[:=][ \t]*[\"']" + _NAME + r"[\"']",
}


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``'s own character distribution."""
    if not text:
        return 0.0
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _jwt_header_ok(token: str) -> bool:
    head = token.split(".", 1)[0]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(decoded, dict)


def _high_entropy(token: str) -> bool:
    return (any(c.isupper() for c in token) and any(c.islower() for c in token)
            and any(c.isdigit() for c in token) and shannon_entropy(token) >= MIN_SECRET_ENTROPY)


class SecretRecognizer(EntityRecognizer):
    """One entity type found by regexes; the named group ``s`` (else the match) is the span."""

    def __init__(self, entity: str, patterns: list[tuple[str, str]], score: float,
                 check: Callable[[str], bool] | None = None):
        self._patterns = [(name, re.compile(rx)) for name, rx in patterns]
        self._score = score
        self._check = check
        super().__init__(supported_entities=[entity], name=f"{entity.lower()}_recognizer",
                         supported_language="en")

    def load(self) -> None:
        pass

    def analyze(self, text, entities, nlp_artifacts=None):  # noqa: D102 (presidio's signature)
        entity = self.supported_entities[0]
        out: list[RecognizerResult] = []
        for _name, rx in self._patterns:
            for m in rx.finditer(text):
                group = "s" if "s" in rx.groupindex else 0
                start, end = m.span(group)
                if end <= start or (self._check is not None and not self._check(text[start:end])):
                    continue
                out.append(RecognizerResult(entity, start, end, self._score))
        return out


def secret_recognizers() -> list[EntityRecognizer]:
    """The secret recognizers, one per entity type."""
    return [
        SecretRecognizer("API_KEY", list(_API_KEYS.items()), 0.95),
        SecretRecognizer("JWT", [("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")],
                         0.95, _jwt_header_ok),
        SecretRecognizer("PRIVATE_KEY", [(
            "pem", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]{16,}?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
        )], 0.99),
        SecretRecognizer("BEARER_TOKEN", [(
            "bearer", r"\b[Bb]earer[ \t]+(?P<s>[A-Za-z0-9._~+/-]{16,}=*)",
        )], 0.9),
        SecretRecognizer("URL_PASSWORD", [
            # scheme://user:password@host (postgres, mysql, redis, amqp, mongodb, https, ...)
            ("url", r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:(?P<s>[^\s@/]+)@[^\s/]"),
            # key=value connection strings
            ("dsn", r"(?i)\b(?:password|passwd|pwd)\s*=\s*(?P<s>[^\s;'\"]+)"),
        ], 0.9),
        SecretRecognizer("SECRET", [(
            "entropy", rf"(?<![A-Za-z0-9+/_-])(?P<s>[A-Za-z0-9+/_-]{{{_SECRET_MIN_LEN},}}={{0,2}})(?![A-Za-z0-9+/_=-])",
        )], 0.6, _high_entropy),
        SecretRecognizer("LOCATION", [("street", _STREET)], 0.7),
        SecretRecognizer("PERSON", list(_PERSON_CONTEXTS.items()), 0.6),
    ]


class CardRecognizer(CreditCardRecognizer):
    """Presidio's card recognizer plus Mastercard's 2-series (2221-2720), which its pattern misses;
    numbers are still checked with Luhn."""

    PATTERNS = [
        *CreditCardRecognizer.PATTERNS,
        Pattern("Mastercard 2-series",
                r"\b2(?:2(?:2[1-9]|[3-9]\d)|[3-6]\d{2}|7(?:[01]\d|20))[- ]?\d{4}[- ]?\d{4}[- ]?\d{4}\b",
                0.3),
    ]

    def __init__(self) -> None:
        super().__init__(patterns=self.PATTERNS)


SECRET_ENTITIES = ("API_KEY", "JWT", "PRIVATE_KEY", "BEARER_TOKEN", "URL_PASSWORD", "SECRET")
