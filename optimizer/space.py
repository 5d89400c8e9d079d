"""What a campaign may change: a few of an engine's knobs, each with the values to try, in order.

A ``Dimension`` is one knob (from the engine adapter, which says whether it is lossless) with an
ordered tuple of candidate values; a ``Space`` is the dimensions plus constraints between knobs.
A space comes from the adapter's knob list (defaults around the knob's default) or from a TOML
file::

    [knobs.max_num_seqs]
    values = [2, 4, 8, 16, 32]
    [knobs.enable_prefix_caching]
    values = [false, true]
    [constraints]
    rules = ["max_num_batched_tokens >= max_num_seqs"]

Lossy knobs (``Knob.lossless`` False: weight or KV precision) are refused unless allowed.
"""

from __future__ import annotations

import json
import math
import operator
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay.errors import ConfigError
from replay.targets.engine import Knob

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Dimension", "Space", "Constraint", "config_key"]

_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq, "!=": operator.ne}
_RULE = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(>=|<=|==|!=|>|<)\s*([a-z_][a-z0-9_]*|-?\d+(?:\.\d+)?)\s*$")


def config_key(config: Mapping[str, Any]) -> str:
    """The canonical text of a config (sorted keys, compact): the ledger's identity of a config."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Dimension:
    knob: Knob
    values: tuple[Any, ...]  # in the knob's order (low to high for numbers)

    @property
    def name(self) -> str:
        return self.knob.name


@dataclass(frozen=True)
class Constraint:
    """``left OP right``, where each side is a knob name or a number (e.g.
    ``max_num_batched_tokens >= max_num_seqs``)."""

    text: str

    def __post_init__(self) -> None:
        if not _RULE.match(self.text):
            raise ConfigError(f"constraint {self.text!r}: expected 'knob OP knob|number' with OP one of {', '.join(_OPS)}")

    def holds(self, config: Mapping[str, Any]) -> bool:
        left, op, right = _RULE.match(self.text).groups()  # type: ignore[union-attr]

        def value(term: str) -> Any:
            if re.match(r"^-?\d", term):
                return float(term)
            return config.get(term)

        a, b = value(left), value(right)
        if a is None or b is None:
            return True  # a knob the config leaves at the engine's default constrains nothing
        return bool(_OPS[op](a, b))


def _default_values(knob: Knob) -> tuple[Any, ...]:
    """Values to try when the space names a knob without them: powers of two across an int
    knob's range around its default, both states of a bool, every choice."""
    if knob.kind == "bool":
        return (False, True)
    if knob.kind == "choice":
        return tuple(knob.choices)
    if knob.kind == "int" and knob.range is not None:
        lo, hi = int(knob.range[0]), int(knob.range[1])
        center = int(knob.default) if isinstance(knob.default, int) else 2 ** int(math.log2(max(lo, 1)) + 3)
        values = sorted({v for v in (center // 4, center // 2, center, center * 2, center * 4) if lo <= v <= hi})
        return tuple(values)
    raise ConfigError(f"knob {knob.name}: give its values in the space file (kind {knob.kind})")


@dataclass(frozen=True)
class Space:
    engine: str
    dimensions: tuple[Dimension, ...]
    constraints: tuple[Constraint, ...] = field(default=())

    @classmethod
    def of(
        cls,
        engine: str,
        knobs: Sequence[Knob],
        values: Mapping[str, Sequence[Any] | None],
        constraints: Sequence[str] = (),
        allow_lossy: bool = False,
    ) -> Space:
        """A space over ``values``' knobs (None: the default values), checked against the adapter's knobs."""
        by_name = {k.name: k for k in knobs}
        dims = []
        for name, vals in values.items():
            knob = by_name.get(name)
            if knob is None:
                raise ConfigError(f"{engine}: unknown knob '{name}' (known: {', '.join(sorted(by_name))})")
            if not knob.lossless and not allow_lossy:
                raise ConfigError(
                    f"{engine}: knob '{name}' is lossy (it changes what the model computes); "
                    f"allow lossy knobs to try it, and have a person approve the result"
                )
            chosen = tuple(knob.check(v) for v in (vals if vals is not None else _default_values(knob)))
            if len(set(map(json.dumps, chosen))) != len(chosen) or not chosen:
                raise ConfigError(f"{engine}: knob '{name}': values must be distinct and not empty")
            dims.append(Dimension(knob, chosen))
        if not dims:
            raise ConfigError(f"{engine}: the space has no knobs")
        return cls(engine, tuple(dims), tuple(Constraint(c) for c in constraints))

    @classmethod
    def load(cls, engine: str, knobs: Sequence[Knob], path: Path, allow_lossy: bool = False) -> Space:
        """A space from a TOML file (module docstring)."""
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"{path}: not a readable TOML space file ({e})") from None
        table = data.get("knobs")
        if not isinstance(table, dict) or not table:
            raise ConfigError(f"{path}: no [knobs.NAME] tables")
        values = {}
        for name, spec in table.items():
            if not isinstance(spec, dict):
                raise ConfigError(f"{path}: [knobs.{name}] must be a table")
            vals = spec.get("values")
            if vals is not None and not isinstance(vals, list):
                raise ConfigError(f"{path}: knobs.{name}.values must be a list")
            values[name] = vals
        rules = data.get("constraints", {}).get("rules", [])
        return cls.of(engine, knobs, values, rules, allow_lossy)

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.dimensions]

    def dimension(self, name: str) -> Dimension:
        for d in self.dimensions:
            if d.name == name:
                return d
        raise KeyError(name)

    def allows(self, config: Mapping[str, Any]) -> bool:
        return all(c.holds(config) for c in self.constraints)

    def size(self) -> int:
        return math.prod(len(d.values) for d in self.dimensions)

    def grid(self) -> Iterator[dict[str, Any]]:
        """Every allowed config of the space (for exhaustive search and tests)."""

        def rec(i: int, acc: dict[str, Any]) -> Iterator[dict[str, Any]]:
            if i == len(self.dimensions):
                if self.allows(acc):
                    yield dict(acc)
                return
            d = self.dimensions[i]
            for v in d.values:
                acc[d.name] = v
                yield from rec(i + 1, acc)
            acc.pop(d.name, None)

        yield from rec(0, {})

    def lossy_changes(self, base: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
        """The lossy knobs ``config`` sets differently from ``base`` (a knob either leaves out is at
        the engine's default)."""
        return [
            d.name
            for d in self.dimensions
            if not d.knob.lossless and config.get(d.name, d.knob.default) != base.get(d.name, d.knob.default)
        ]
