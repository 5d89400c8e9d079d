"""The bench's own noise: how far repeated runs of one config spread, and the bar a change must clear.

One rule for every verdict that compares runs (the optimizer's :mod:`optimizer.verdict`,
``replay compare``, the repeats of ``replay run`` / ``replay sweep``). A :class:`NoiseFloor` holds
the values of one metric over repeated runs: its spread is ``s = max(1.4826 * MAD, SD,
MIN_SPREAD * median)`` (1.4826 * MAD estimates a standard deviation robustly, but from a few runs
it can come out tiny by luck, so the sample standard deviation and a floor of 0.5% of the median
bound it from below); a change counts when it clears ``K * s + MIN_GAIN * median``; runs that
spread more than ``MAX_NOISE`` of their median are too noisy to decide anything.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

__all__ = ["K", "MIN_GAIN", "MIN_SPREAD", "MAX_NOISE", "AA_RUNS", "NoiseFloor"]

K = 3.0
MIN_GAIN = 0.01
MIN_SPREAD = 0.005
MAX_NOISE = 0.25
# replays of a stage that a replay A/A of its outcomes needs (fidelity's --judge-outcomes, --aa-runs)
AA_RUNS = 2


@dataclass(frozen=True)
class NoiseFloor:
    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def mad(self) -> float:
        m = self.median
        return statistics.median(abs(v - m) for v in self.values)

    @property
    def sd(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    @property
    def spread(self) -> float:
        return max(1.4826 * self.mad, self.sd, MIN_SPREAD * abs(self.median))

    @property
    def relative(self) -> float:
        return self.spread / abs(self.median) if self.median else float("inf")

    def too_noisy(self, limit: float = MAX_NOISE) -> bool:
        """Whether the runs spread more than ``limit`` of their median."""
        return self.relative > limit

    def bar(self) -> float:
        """How far above the median a candidate must land to count as a win."""
        return K * self.spread + MIN_GAIN * abs(self.median)

    def to_json(self) -> dict:
        return {
            "values": list(self.values),
            "median": self.median,
            "mad": self.mad,
            "sd": self.sd,
            "spread": self.spread,
            "relative": self.relative,
            "bar": self.bar(),
        }
