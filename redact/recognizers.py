"""Recognizers for the secrets that turn up in prompts.

Owns :class:`SecretRecognizer`, :func:`secret_recognizers` and :func:`shannon_entropy`. Each
secret pattern is a regex whose named group ``s`` (or the whole match) is the secret: only the
password of ``postgres://user:PASSWORD@host`` is replaced, only the token after ``Bearer``.
Entity types: ``API_KEY`` (OpenAI, Anthropic, GitHub, AWS, Google (``AIza`` keys, ``ya29.`` OAuth
tokens), Slack, Stripe, Hugging Face
shapes, and any short lower-case prefix such as ``dop_v1_`` or ``npm_`` before 32+ letters and
digits), ``JWT`` (its header must decode to a JSON object), ``PRIVATE_KEY`` (a whole
PEM block), ``BEARER_TOKEN``, ``URL_PASSWORD`` (the password of a URL), ``PASSWORD``
(:class:`redact.passwords.PasswordRecognizer`: values that a secret word or a secret-holding
variable name introduces in prose, code and config), ``PERSON`` where a fixed shape names someone
(:class:`redact.names.NameRecognizer`: greetings, sign-offs, titles, "X's number", ``cc:``...), and
``SECRET`` (any other run of 24+ key
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

from presidio_analyzer import EntityRecognizer, RecognizerResult

from redact.names import NameRecognizer
from redact.passwords import PasswordRecognizer

__all__ = [
    "SECRET_ENTITIES",
    "MIN_SECRET_ENTROPY",
    "SecretRecognizer",
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
    "google_oauth": r"\bya29\.[0-9A-Za-z_-]{20,}",
    "slack": r"\bxox[abposr]-[0-9A-Za-z-]{10,}",
    "stripe": r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}",
    "huggingface": r"\bhf_[A-Za-z0-9]{30,}",
    # other providers' shape: a short lower-case prefix (DigitalOcean dop_v1_, npm_, ...), maybe a
    # version, then 32+ letters and digits with a digit among them
    "prefixed": r"\b[a-z]{2,8}_(?:v\d+_)?(?=[A-Za-z0-9]*\d)[A-Za-z0-9]{32,}\b",
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
    return (
        any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() for c in token)
        and shannon_entropy(token) >= MIN_SECRET_ENTROPY
    )


class SecretRecognizer(EntityRecognizer):
    """One entity type found by regexes; the named group ``s`` (else the match) is the span."""

    def __init__(self, entity: str, patterns: list[tuple[str, str]], score: float, check: Callable[[str], bool] | None = None):
        self._patterns = [(name, re.compile(rx)) for name, rx in patterns]
        self._score = score
        self._check = check
        super().__init__(supported_entities=[entity], name=f"{entity.lower()}_recognizer", supported_language="en")

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
        SecretRecognizer("JWT", [("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")], 0.95, _jwt_header_ok),
        SecretRecognizer(
            "PRIVATE_KEY",
            [
                (
                    "pem",
                    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]{16,}?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
                )
            ],
            0.99,
        ),
        SecretRecognizer(
            "BEARER_TOKEN",
            [
                (
                    "bearer",
                    r"\b[Bb]earer[ \t]+(?P<s>[A-Za-z0-9._~+/-]{16,}=*)",
                )
            ],
            0.9,
        ),
        SecretRecognizer(
            "URL_PASSWORD",
            [
                # scheme://user:password@host (postgres, mysql, redis, amqp, mongodb, https, ...)
                ("url", r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:(?P<s>[^\s@/]+)@[^\s/]"),
            ],
            0.9,
        ),  # key=value connection strings (Password=...;) are PASSWORD's
        SecretRecognizer(
            "SECRET",
            [
                (
                    "entropy",
                    rf"(?<![A-Za-z0-9+/_-])(?P<s>[A-Za-z0-9+/_-]{{{_SECRET_MIN_LEN},}}={{0,2}})(?![A-Za-z0-9+/_=-])",
                )
            ],
            0.6,
            _high_entropy,
        ),
        PasswordRecognizer(),
        NameRecognizer(),
    ]


SECRET_ENTITIES = ("API_KEY", "JWT", "PRIVATE_KEY", "BEARER_TOKEN", "URL_PASSWORD", "PASSWORD", "SECRET")
