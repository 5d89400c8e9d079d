"""The engine protocol the core owns, and the knob spaces engines declare.

An :class:`Engine` is something the suite can start with a config and then replay against: it
names itself, declares its :class:`Knob` s (the flags worth tuning, each marked lossless, like
scheduling and batching, or lossy, like weight or KV-cache precision), builds its command line for
a config and a port, and :meth:`Engine.launch` es itself into a :class:`Running` engine
(:class:`replay.targets.process.RunningEngine`). A config is a mapping from knob name to value; a knob left out
keeps the engine's own default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from replay.errors import ConfigError


__all__ = ["KnobKind", "Knob", "Engine", "Running", "check_config", "config_args", "COMMON_METRICS"]

KnobKind = Literal["int", "float", "bool", "choice", "json"]
KNOB_KINDS = ("int", "float", "bool", "choice", "json")

# The engine-independent names that RunningEngine.metrics() fills in where an engine exposes them.
COMMON_METRICS: dict[str, str] = {
    "running": "requests being decoded or prefilled now",
    "waiting": "requests queued, not yet scheduled",
    "kv_usage": "share of the KV cache in use, 0..1",
    "prefix_cache_queries": "prompt tokens looked up in the prefix cache (counter)",
    "prefix_cache_hits": "prompt tokens found in the prefix cache (counter)",
    "prefix_cache_hit_rate": "hits / queries, or the engine's own rate gauge",
    "preemptions": "requests preempted or retracted (counter)",
    "prompt_tokens": "prompt tokens processed (counter)",
    "generation_tokens": "tokens generated (counter)",
    "cached_prompt_tokens": "prompt tokens served from cache (counter)",
    "requests_finished": "requests finished (counter)",
    "gen_throughput": "the engine's own generation throughput gauge, tok/s",
    "prefill_time_s": "seconds requests spent in prefill, from scheduled to first token, summed (counter)",
    "prefill_requests": "requests whose prefill time is counted (counter)",
    "decode_time_s": "seconds requests spent in decode, from first to last token, summed (counter)",
    "decode_requests": "requests whose decode time is counted (counter)",
}


@dataclass(frozen=True)
class Knob:
    """One tunable flag of an engine.

    ``name`` is the config key (snake case), ``flag`` the command-line flag. ``range`` bounds int
    and float knobs (inclusive), ``choices`` lists a choice knob's values. A bool knob writes
    ``flag`` when true and ``off_flag`` (if any) when false. ``default`` is the engine's own
    default (None where the engine derives it). ``lossless`` is False for knobs that change what
    the model computes (weight or KV precision), which a tuner may only try with a quality check.
    """

    name: str
    flag: str
    kind: KnobKind
    default: Any = None
    range: tuple[float, float] | None = None
    choices: tuple[str, ...] = ()
    lossless: bool = True
    doc: str = ""
    off_flag: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KNOB_KINDS:
            raise ConfigError(f"knob {self.name}: kind {self.kind!r} not one of {KNOB_KINDS}")
        if self.kind == "choice" and not self.choices:
            raise ConfigError(f"knob {self.name}: a choice knob needs choices")

    def check(self, value: Any) -> Any:
        """``value`` coerced to this knob's kind, or a ConfigError naming the flag."""
        where = f"{self.flag}"
        if self.kind == "bool":
            if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
                return False
            if isinstance(value, bool):
                return value
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        if self.kind in ("int", "float"):
            try:
                if isinstance(value, bool):
                    raise ValueError
                number = float(value)
                if self.kind == "int":
                    if number != int(number):
                        raise ValueError
                    number = int(number)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"{where}: expected {'an integer' if self.kind == 'int' else 'a number'}, got {value!r}"
                ) from None
            if self.range is not None and not self.range[0] <= number <= self.range[1]:
                raise ConfigError(f"{where}: {number} outside [{_fmt(self.range[0])}, {_fmt(self.range[1])}]")
            return number
        if self.kind == "choice":
            text = str(value)
            if text not in self.choices:
                raise ConfigError(f"{where}: {text!r} not one of {', '.join(self.choices)}")
            return text
        # json: a mapping / list, or a string holding one
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a JSON object, got {value!r}")
        return value

    def args(self, value: Any) -> list[str]:
        """The command-line words for ``value`` (already checked)."""
        if self.kind == "bool":
            if value:
                return [self.flag]
            return [self.off_flag] if self.off_flag else []
        if self.kind == "json":
            return [self.flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        if self.kind == "float":
            return [self.flag, _fmt(value)]
        return [self.flag, str(value)]

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (for `replay engines list --json` and tuners)."""
        out: dict[str, Any] = {
            "name": self.name,
            "flag": self.flag,
            "kind": self.kind,
            "default": self.default,
            "lossless": self.lossless,
            "doc": self.doc,
        }
        if self.range is not None:
            out["range"] = list(self.range)
        if self.choices:
            out["choices"] = list(self.choices)
        if self.off_flag:
            out["off_flag"] = self.off_flag
        return out


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


class Running(Protocol):
    """A started engine (:class:`replay.targets.process.RunningEngine` is the one there is): its
    URL, its metrics, and a stop; a context manager that stops it."""

    url: str

    def metrics(self) -> dict[str, float]: ...

    def stop(self, timeout_s: float | None = None) -> int | None: ...

    def __enter__(self) -> Running: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class Engine(Protocol):
    """What the core needs from an engine it starts: implemented by each adapter."""

    name: str
    knobs: tuple[Knob, ...]
    default_knobs: tuple[str, ...]  # what `replay optimize` tunes without --knobs

    def command(self, config: Mapping[str, Any], port: int) -> list[str]:
        """The full command line that serves on 127.0.0.1:``port`` with ``config`` applied."""
        ...

    def launch(self, config: Mapping[str, Any] | None = None, port: int = 0) -> Running:
        """Start the engine, wait until it is healthy, return the running handle."""
        ...


def check_config(engine_name: str, knobs: Sequence[Knob], config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate a config against a knob space: unknown keys and bad values are ConfigErrors."""
    by_name = {k.name: k for k in knobs}
    out: dict[str, Any] = {}
    for key, value in (config or {}).items():
        knob = by_name.get(key)
        if knob is None:
            known = ", ".join(sorted(by_name))
            raise ConfigError(f"{engine_name}: unknown knob '{key}' (known: {known})")
        out[key] = knob.check(value)
    return out


def config_args(engine_name: str, knobs: Sequence[Knob], config: Mapping[str, Any] | None) -> list[str]:
    """The command-line words of a config, in the knob space's order (stable command lines)."""
    checked = check_config(engine_name, knobs, config)
    words: list[str] = []
    for knob in knobs:
        if knob.name in checked:
            words += knob.args(checked[knob.name])
    return words
