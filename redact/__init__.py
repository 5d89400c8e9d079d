"""PII detection (Presidio) and shape-keeping pseudonymization of traces.

``redact_trace(trace, key)`` and ``redact_file(src, dst, key)`` redact every prompt string and
recorded answer of a trace with keyed surrogates that keep entity type, format and token count,
analysing each distinct text once and failing closed (:mod:`redact.pipeline`). The key comes from
``load_key()`` (``$REPLAY_REDACT_KEY`` or a key file; :mod:`redact.key`). Before anything is
written, the second lock (:mod:`redact.lock`) keeps out any record still holding a PII shape;
``replay audit`` (:mod:`redact.audit`) runs it over a stored trace.

The names below are imported on first use: ``import redact.lock`` does not load Presidio.
"""

from replay._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "redact.key": ("KEY_ENV", "RedactionKey", "load_key"),
        "redact.pipeline": ("Redactor", "redact_file", "redact_trace"),
        "redact.report": ("RedactionReport",),
    },
)
