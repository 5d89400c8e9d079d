"""The one error hierarchy of faithful-replay.

Every error we raise derives from :class:`ReplayError`, those of the Rust core included (the
binding raises these classes, never a bare ``ValueError``). Messages are one line and name the
thing at fault (a file and column, a flag, a URL). The CLI prints ``error: <message>`` and exits
with :attr:`ReplayError.exit_code` (2 for bad input). An invalid run or a worse verdict is a
result, not an exception.
"""

from __future__ import annotations

__all__ = [
    "ReplayError",
    "TraceError",
    "ConfigError",
    "TargetError",
    "RunnerError",
    "RedactionError",
    "BudgetExhausted",
]


class ReplayError(Exception):
    """Root of every error faithful-replay raises."""

    exit_code = 1


class TraceError(ReplayError):
    """A trace file is missing, unreadable or does not match the schema (names file and column)."""

    exit_code = 2


class ConfigError(ReplayError, ValueError):
    """A flag, option or config field has a bad value (names the flag or field). Raised from the
    Rust core, ``field`` is the argument or flag at fault (``"timeout_s"``, ``"--max-num-seqs"``).
    A ``ValueError`` too, so that a caller who catches bad values that way catches it."""

    exit_code = 2
    field: str | None = None


class TargetError(ReplayError):
    """A target cannot be reached or started (names the URL or the engine command). Raised from
    the Rust core, ``url`` is the URL (or listening address) at fault, where there is one."""

    exit_code = 2
    url: str | None = None


class RunnerError(ReplayError):
    """The Rust runner failed as a whole (not a per-request fault, which is a recorded result)."""


class RedactionError(ReplayError):
    """PII redaction could not guarantee its policy; the trace is not written (fail closed)."""


class BudgetExhausted(ReplayError):
    """An optimizer campaign ran out of its time or trial budget."""
