"""The redaction key: where it comes from and how it is named without being stored.

Owns :class:`RedactionKey`, :func:`load_key`, :data:`KEY_ENV`. Surrogates are a keyed HMAC of the
original value, so the same key gives the same surrogates in every trace (prefix sharing across
captures survives) and nobody without the key can test a guess against a surrogate. The key is
never written anywhere; a trace's metadata holds only its fingerprint (the first 16 hex digits
of an HMAC of a fixed label), which tells two traces redacted with the same key apart from
others.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field
from pathlib import Path

from replay.errors import ConfigError

__all__ = ["KEY_ENV", "MIN_KEY_BYTES", "RedactionKey", "load_key"]

KEY_ENV = "REPLAY_REDACT_KEY"
MIN_KEY_BYTES = 16
_HOW = (
    f"set {KEY_ENV} to a secret of at least {MIN_KEY_BYTES} characters "
    f"(e.g. export {KEY_ENV}=$(openssl rand -hex 32)) or pass --key-file FILE, "
    "or --no-redact to keep raw text"
)


@dataclass(frozen=True)
class RedactionKey:
    """A secret key for keyed surrogates. ``repr`` never shows it."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_KEY_BYTES:
            raise ConfigError(f"redaction key: {len(self.secret)} bytes, need at least {MIN_KEY_BYTES}; {_HOW}")

    @property
    def fingerprint(self) -> str:
        return hmac.new(self.secret, b"faithful-replay key fingerprint", hashlib.sha256).hexdigest()[:16]

    def digest(self, label: str, value: str) -> bytes:
        """HMAC-SHA256 of ``value`` under this key, separated by ``label`` (the entity type)."""
        return hmac.new(self.secret, f"{label}\x00{value}".encode(), hashlib.sha256).digest()


def load_key(key_file: str | os.PathLike[str] | None = None) -> RedactionKey:
    """The key from ``key_file`` (its contents, surrounding whitespace stripped), else from
    ``$REPLAY_REDACT_KEY``; a :class:`ConfigError` (exit 2) saying how to set one if neither."""
    if key_file is not None:
        path = Path(key_file)
        try:
            secret = path.read_bytes().strip()
        except OSError as e:
            raise ConfigError(f"--key-file {path}: cannot read ({e.strerror or e})") from None
        if not secret:
            raise ConfigError(f"--key-file {path}: empty; {_HOW}")
        return RedactionKey(secret)
    value = os.environ.get(KEY_ENV, "").strip()
    if not value:
        raise ConfigError(f"no redaction key: {_HOW}")
    return RedactionKey(value.encode())
