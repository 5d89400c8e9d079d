"""Reading the Prometheus text format that engines serve on ``/metrics``.

:func:`parse` turns the text exposition format (and OpenMetrics' superset of it: ``# EOF``,
``_created`` samples) into :class:`Scrape`: every sample with its labels, plus each family's
declared type and help. Label values may hold escaped quotes, backslashes and newlines; values may
be ``NaN``, ``+Inf`` or ``-Inf``; a trailing timestamp is ignored. :meth:`Scrape.value` sums a
metric over label sets (accepting the name with or without ``_total``), and
:meth:`Scrape.histogram` gathers a histogram's ``_bucket`` / ``_sum`` / ``_count`` samples.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from replay.errors import TargetError

__all__ = ["Sample", "Histogram", "Scrape", "parse"]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})\s*(\{{.*\}})?\s+(\S+)(?:\s+(\S+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One line of the exposition: a sample name, its sorted labels and its value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    @property
    def key(self) -> str:
        """The sample as Prometheus writes it: ``name{a="x",b="y"}`` (labels sorted)."""
        if not self.labels:
            return self.name
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in self.labels)
        return f"{self.name}{{{inner}}}"

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)


@dataclass(frozen=True)
class Histogram:
    """A histogram summed over label sets: cumulative buckets (upper bound, count), sum, count."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def quantile(self, q: float) -> float:
        """Linear interpolation inside the bucket holding quantile ``q`` (as PromQL does)."""
        if not self.buckets or self.count <= 0:
            return math.nan
        rank = q * self.buckets[-1][1]
        lower_bound, lower_count = 0.0, 0.0
        for bound, count in self.buckets:
            if count >= rank:
                if math.isinf(bound):
                    return lower_bound
                span = count - lower_count
                return bound if span <= 0 else lower_bound + (bound - lower_bound) * (rank - lower_count) / span
            lower_bound, lower_count = bound, count
        return self.buckets[-1][0]


@dataclass
class Scrape:
    """The samples of one scrape, with the families' declared types and help texts."""

    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    help: dict[str, str] = field(default_factory=dict)

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def find(self, name: str, **labels: str) -> list[Sample]:
        """Samples called ``name`` whose labels include ``labels``."""
        want = labels.items()
        return [s for s in self.samples if s.name == name and want <= dict(s.labels).items()]

    def value(self, name: str, agg: str = "sum", **labels: str) -> float | None:
        """``name`` (or its ``_total`` twin) aggregated over matching label sets; None if absent.

        ``agg`` is "sum", "mean" or "max". Counters are found under either spelling, since
        prometheus_client exposes ``x_total`` for a counter declared as ``x`` and some engines
        declare the ``_total`` themselves.
        """
        for candidate in _spellings(name):
            found = self.find(candidate, **labels)
            if found:
                values = [s.value for s in found]
                if agg == "sum":
                    return float(sum(values))
                if agg == "mean":
                    return float(sum(values) / len(values))
                if agg == "max":
                    return float(max(values))
                raise ValueError(f"agg must be sum, mean or max, not {agg!r}")
        return None

    def histogram(self, name: str, **labels: str) -> Histogram | None:
        """The histogram ``name`` (its ``_bucket`` / ``_sum`` / ``_count`` samples) summed over labels."""
        buckets: dict[float, float] = {}
        for s in self.find(f"{name}_bucket", **labels):
            le = s.label("le")
            if le is not None:
                bound = _number(le)
                buckets[bound] = buckets.get(bound, 0.0) + s.value
        if not buckets:
            return None
        total = self.value(f"{name}_sum", **labels)
        count = self.value(f"{name}_count", **labels)
        ordered = tuple(sorted(buckets.items()))
        return Histogram(buckets=ordered, sum=total if total is not None else math.nan,
                         count=count if count is not None else ordered[-1][1])

    def flat(self) -> dict[str, float]:
        """Every sample keyed as Prometheus writes it (``name{labels}``)."""
        return {s.key: s.value for s in self.samples}


def _spellings(name: str) -> tuple[str, ...]:
    if name.endswith("_total"):
        return (name, name[: -len("_total")])
    return (name, f"{name}_total")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _ESCAPES[m.group(0)], value)


def _number(text: str) -> float:
    low = text.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(text)


def _labels(text: str, line_no: int, source: str) -> tuple[tuple[str, str], ...]:
    inner = text.strip()[1:-1]
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(inner):
        if inner[pos:].strip() == "":
            break
        m = _LABEL.match(inner, pos)
        if not m:
            raise TargetError(f"{source}: line {line_no}: bad labels {{{inner}}}")
        out.append((m.group(1), _unescape(m.group(2))))
        pos = m.end()
    return tuple(sorted(out))


def parse(text: str, source: str = "/metrics") -> Scrape:
    """Parse Prometheus / OpenMetrics text; a malformed line is a TargetError naming ``source``."""
    scrape = Scrape()
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                scrape.types[parts[2]] = parts[3].strip() if len(parts) > 3 else "untyped"
            elif len(parts) >= 3 and parts[1] == "HELP":
                scrape.help[parts[2]] = parts[3] if len(parts) > 3 else ""
            continue                                   # other comments and "# EOF"
        m = _SAMPLE.match(line)
        if not m:
            raise TargetError(f"{source}: line {line_no}: not a sample: {line[:120]}")
        name, label_text, value_text = m.group(1), m.group(2), m.group(3)
        try:
            value = _number(value_text)
        except ValueError:
            raise TargetError(f"{source}: line {line_no}: bad value {value_text!r}") from None
        labels = _labels(label_text, line_no, source) if label_text else ()
        scrape.samples.append(Sample(name=name, labels=labels, value=value))
    return scrape

