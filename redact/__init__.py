"""PII detection (Presidio) and shape-keeping pseudonymization of traces.

``redact_trace(trace, key)`` and ``redact_file(src, dst, key)`` redact every prompt string and
recorded answer of a trace with keyed surrogates that keep entity type, format and token count,
analysing each distinct text once and failing closed (:mod:`redact.pipeline`). The key comes from
``load_key()`` (``$REPLAY_REDACT_KEY`` or a key file; :mod:`redact.key`).
"""

from redact.key import KEY_ENV, RedactionKey, load_key
from redact.pipeline import Redactor, redact_file, redact_trace
from redact.report import RedactionReport

__all__ = ["KEY_ENV", "RedactionKey", "RedactionReport", "Redactor", "load_key", "redact_file",
           "redact_trace"]
