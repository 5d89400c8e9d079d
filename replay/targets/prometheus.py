"""Reading the Prometheus text format that engines serve on ``/metrics``.

:func:`parse` reads the text exposition format (OpenMetrics' ``# EOF`` is a comment to it) with
``prometheus_client``'s parser into :class:`Scrape`: every sample with its sorted labels, plus each
family's declared type and help. Names stay as the text writes them: the parser renames the
samples of a counter declared without ``_total`` (``x`` becomes ``x_total``), and :func:`parse`
names them back. A trailing timestamp is ignored. A line the parser rejects is a TargetError naming
the source and the line number. :meth:`Scrape.value` sums a metric over label sets (accepting the
name with or without ``_total``), and :meth:`Scrape.histogram` gathers a histogram's ``_bucket`` /
``_sum`` / ``_count`` samples; both read a fleet's totals where each replica's series (a
``replica`` label) stand beside them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from replay.errors import ConfigError, TargetError

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["Sample", "Histogram", "Scrape", "parse", "REPLICA_LABEL"]

# the label that splits a fleet's series by replica (the embedded engine's --replicas)
REPLICA_LABEL = "replica"


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
        """Samples called ``name`` whose labels include ``labels``. Where a family carries both a
        fleet's totals and each replica's series (a :data:`REPLICA_LABEL` label: the embedded
        engine run with ``--replicas``), the totals, unless ``labels`` names a replica: summing
        both would count every request twice."""
        want = labels.items()
        found = [s for s in self.samples if s.name == name and want <= dict(s.labels).items()]
        if REPLICA_LABEL not in labels:
            totals = [s for s in found if s.label(REPLICA_LABEL) is None]
            if totals and len(totals) < len(found):
                return totals
        return found

    def replicas(self) -> list[str]:
        """The values of :data:`REPLICA_LABEL` the scrape holds (a fleet's replicas), sorted."""
        return sorted({v for s in self.samples if (v := s.label(REPLICA_LABEL)) is not None}, key=lambda v: (len(v), v))

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
                raise ConfigError(f"agg must be sum, mean or max, not {agg!r}")
        return None

    def histogram(self, name: str, **labels: str) -> Histogram | None:
        """The histogram ``name`` (its ``_bucket`` / ``_sum`` / ``_count`` samples) summed over labels."""
        buckets: dict[float, float] = {}
        for s in self.find(f"{name}_bucket", **labels):
            le = s.label("le")
            if le is not None:
                bound = float(le)  # "+Inf" included
                buckets[bound] = buckets.get(bound, 0.0) + s.value
        if not buckets:
            return None
        total = self.value(f"{name}_sum", **labels)
        count = self.value(f"{name}_count", **labels)
        ordered = tuple(sorted(buckets.items()))
        return Histogram(
            buckets=ordered, sum=total if total is not None else math.nan, count=count if count is not None else ordered[-1][1]
        )

    def flat(self) -> dict[str, float]:
        """Every sample keyed as Prometheus writes it (``name{labels}``)."""
        return {s.key: s.value for s in self.samples}


def _spellings(name: str) -> tuple[str, ...]:
    if name.endswith("_total"):
        return (name, name[: -len("_total")])
    return (name, f"{name}_total")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Lines:
    """The text's lines as the parser reads them, counted, with each ``# TYPE`` line's declaration."""

    def __init__(self, text: str) -> None:
        self._lines = iter(text.split("\n"))
        self.number = 0
        self.line = ""
        self.types: dict[str, str] = {}

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        self.line = next(self._lines)
        self.number += 1
        parts = self.line.split(None, 3)
        if len(parts) == 4 and parts[:2] == ["#", "TYPE"]:
            self.types[parts[2]] = parts[3].strip()
        return self.line


def _add_family(scrape: Scrape, family: Metric, types: dict[str, str]) -> None:
    """Add one parsed family to ``scrape`` under the names its text declared and wrote."""
    name = family.name
    renamed = family.type == "counter" and types.get(name) == "counter"  # declared without _total
    if family.type == "counter" and not renamed:
        name += "_total"  # the parser drops a declared counter's _total
    if family.documentation:
        scrape.help[name] = family.documentation
    for s in family.samples:
        sample_name = s.name[: -len("_total")] if renamed and s.name.endswith("_total") else s.name
        scrape.samples.append(Sample(name=sample_name, labels=tuple(sorted(s.labels.items())), value=float(s.value)))


def parse(text: str, source: str = "/metrics") -> Scrape:
    """Parse Prometheus text with prometheus_client; a rejected line is a TargetError naming ``source``."""
    from prometheus_client.parser import text_fd_to_metric_families

    lines = _Lines(text)
    scrape = Scrape()
    try:
        for family in text_fd_to_metric_families(lines):  # type: ignore[arg-type]
            _add_family(scrape, family, lines.types)
    except (ValueError, IndexError) as e:  # the parser raises both on malformed lines
        reason = " ".join(str(e).split()) or type(e).__name__
        raise TargetError(f"{source}: line {lines.number}: cannot parse {lines.line.strip()[:120]!r} ({reason[:120]})") from e
    scrape.types = lines.types
    return scrape
