"""The power behind a fidelity verdict: the smallest change each metric would have caught.

For a metric judged under bound ``b`` on a live side, the live side is changed by an amount ``d``
of the change the metric stands for, and the least ``d`` at which the metric's distance between
live and the changed live is over ``b`` is the metric's *detectable change* (bisection over
``d``; the distances grow with ``d`` up to the discreteness of quantiles). The changes
(:data:`CHANGES`):

* lengths (``input_tokens.*``, ``output_tokens.*``): every length x (1 + d);
* arrivals (interarrival CV, dispersion, lag-1 autocorrelation, peak-to-mean, the sends against live's arrivals):
  each gap between arrivals raised to the power 1 + d and scaled back to the same mean (the
  same rate, burstier), the change stated as the relative change of the interarrival CV;
* think times (``sessions.think_time.ks``): every think time x (1 + d);
* outcomes (TTFT / E2E / ITL): every latency x (1 + d);
* hit rates (``cache.engine_hit_rate``, ``cache.offered_reuse.*``): the distance is itself the
  difference in hit rate, so a change of ``b`` points either way is what it catches (no search).
  Where live's hit rate ``h`` is under ``b`` a loss cannot reach the bound, but neither can it be
  over ``h`` points: every loss that could happen is smaller than ``b``, and a gain of ``b`` points
  (reuse the replay invented) is caught, so the detectable change is still ``b``. A trace that
  records no reuse is judged on whether the replay keeps it that way.

A metric whose detectable change is over its stated maximum (:data:`MAX_DETECTABLE`: lengths 20%,
CV 30%, hit rate 10 points) cannot tell a faithful replay from one off by that much: it is
"cannot tell" (:mod:`fidelity.compare`). Metrics without a change here (length rank correlation,
reuse times, turns per session) are held to their ceilings only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fidelity.sides import Side

__all__ = ["Change", "CHANGES", "MAX_DETECTABLE", "burstier", "cv_change", "change_for", "detectable"]

BISECTIONS = 14  # steps of the search: d to within D_MAX / 2^14


@dataclass(frozen=True)
class Change:
    """A change of a live side by an amount ``d`` >= 0, and how the report states it."""

    family: str  # what it stands for (the key of MAX_DETECTABLE)
    apply: Callable[[Side, float], Side] | None  # None: the metric's distance is itself the change
    d_max: float  # the largest d searched; a metric still within its bound there catches nothing up to it
    # the size of the change, as stated, from the live side and d (default: d itself)
    stated: Callable[[Side, float], float] = lambda side, d: d
    unit: str = "%"  # "%": a relative change; "points": an absolute one
    limit: str = ""  # the change at d_max, in words


def _scaled(attr: str) -> Callable[[Side, float], Side]:
    def apply(side: Side, d: float) -> Side:
        values = getattr(side, attr)
        changed: dict[str, Any] = {attr: None if values is None else values * (1.0 + d)}
        return replace(side, **changed)

    return apply


def burstier(side: Side, d: float) -> Side:
    """Interarrival gaps raised to the power 1 + d, rescaled to their mean: the same rate and
    span, more (d > 0) variable gaps."""
    t = side.times_s
    if len(t) < 3:
        return side
    gaps = np.diff(t)
    positive = gaps > 0
    if not positive.any():
        return side
    changed = np.zeros_like(gaps)
    changed[positive] = (gaps[positive] / gaps[positive].mean()) ** (1.0 + d)
    changed *= gaps.sum() / changed.sum()
    times = np.concatenate([[t[0]], t[0] + np.cumsum(changed)])
    return replace(side, times_s=times)


def _cv(times: np.ndarray) -> float | None:
    gaps = np.diff(np.sort(times))
    return float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else None


def cv_change(side: Side, d: float) -> float:
    before, after = _cv(side.times_s), _cv(burstier(side, d).times_s)
    return float("inf") if not before or after is None else after / before - 1.0


LENGTHS = Change("lengths", None, 4.0, limit="lengths x5")  # apply set per side below
CHANGES: dict[str, Change] = {
    "input_tokens": replace(LENGTHS, apply=_scaled("input_tokens")),
    "output_tokens": replace(LENGTHS, apply=_scaled("output_tokens")),
    "arrivals": Change("arrivals", burstier, 4.0, stated=cv_change, limit="interarrival gaps to the power 5"),
    "sessions.think_time": Change("think times", _scaled("think_s"), 4.0, limit="think times x5"),
    "sessions.dag.wait": Change("think times", _scaled("dep_wait_s"), 4.0, limit="waits x5"),
    "outcomes.ttft": Change("outcomes", _scaled("ttft_s"), 4.0, limit="latencies x5"),
    "outcomes.e2e": Change("outcomes", _scaled("e2e_s"), 4.0, limit="latencies x5"),
    "outcomes.itl": Change("outcomes", _scaled("itl_s"), 4.0, limit="latencies x5"),
    "cache": Change("hit rate", None, 1.0, unit="points", limit="a change of 100 points"),
}

_UNITS = {c.family: c.unit for c in CHANGES.values()}

# the largest detectable change a judged metric may have: over it, the metric cannot tell
MAX_DETECTABLE: dict[str, float] = {
    "lengths": 0.20,
    "arrivals": 0.30,  # relative change of the interarrival CV ("arrivals +12%": CV x1.12)
    "think times": 0.20,
    "outcomes": 0.20,
    "hit rate": 0.10,
}

# a family's name in the reports, where it is not the family itself
FAMILY_WORDS = {"arrivals": "interarrival CV"}


def in_words(family: str, size: float, signed: bool = True) -> str:
    """A change of ``size`` of ``family`` as every report states it: "hit rate 8.8 points",
    "interarrival CV +12%", "lengths 20%" (``signed`` False: a maximum, not a change)."""
    name = FAMILY_WORDS.get(family, family)
    if _UNITS.get(family) == "points":
        return f"{name} {100 * size:.3g} points"
    return f"{name} {100 * size:+.3g}%" if signed else f"{name} {100 * size:g}%"


_NO_CHANGE = (
    "lengths.spearman",
    "cache.reuse_time",
    "sessions.turns",
    "sessions.dag.early",
    "sessions.dag.concurrency",
    "sessions.dag.fan_out",
    "sessions.dag.depth",
    "cache.session_",
    "arrivals.send_lag",
)


def change_for(name: str) -> Change | None:
    """The change metric ``name`` stands for, or None (held to its ceiling only)."""
    if name.startswith(_NO_CHANGE):
        return None
    for prefix, change in CHANGES.items():
        if name.startswith(prefix):
            return change
    return None


def detectable(
    name: str, distance: Callable[[Side, Side], float | None], live: Side, bound: float
) -> tuple[float | None, Change | None]:
    """(the smallest change of its kind metric ``name`` catches on ``live`` under ``bound``, as
    stated; inf when none up to the change's ``d_max``; None when it has no change), and the
    change. ``distance(a, b)`` is the metric's distance. A hit rate's distance is the change itself,
    either way: a change of ``bound`` points is caught (where live's hit rate is under the bound, a
    loss cannot be larger than live's own hits, and a gain of ``bound`` is caught)."""
    change = change_for(name)
    if change is None:
        return None, None
    apply = change.apply
    if apply is None:  # the distance is the change
        return bound, change

    def over(d: float) -> bool:
        value = distance(live, apply(live, d))
        return value is not None and np.isfinite(value) and value > bound

    if not over(change.d_max):
        return float("inf"), change
    lo, hi = 0.0, change.d_max
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if over(mid) else (mid, hi)
    return change.stated(live, hi), change
