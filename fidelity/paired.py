"""Paired tests: a replay of live's own requests compared with live request by request.

Most replays send the live trace's own requests: the same ids, the same bodies (or bodies
synthesized to the same token counts and prefix sharing), at live's times rescaled. Comparing two
marginal distributions throws that pairing away, and needs thousands of requests to vouch for
what one pass over the pairs shows at any size: that each request went out with live's prompt,
asked for live's answer length, left at live's (rescaled) time and offered live's prefix reuse.

Every test here pairs the two sides' requests by request id (:func:`pair`) and counts the
requests that *miss*: whose replayed value is further from live's than a tolerance (a request
live holds and the replay has no value for, one not sent or failed, misses too). The rule is
the within-tolerance rate (Lin et al. 2002's coverage probability): with ``k`` misses of ``n``,
the share of misses is bounded by one-sided Clopper-Pearson bounds at :data:`CONFIDENCE`
(95%), and

* the test *passes* when the upper bound is under the tolerated share ``p0`` (:data:`MISS_SHARE`,
  5%): with no miss at all that takes 59 requests, 80 give an upper bound of 3.7%;
* it *fails* when the lower bound is over ``p0`` (more misses than ``p0`` allows, beyond
  chance: every one of 60 doubled answers gives a lower bound of 95%);
* else it *cannot tell*, with the paired requests it would need at the share of misses seen.

Misses cluster in sessions (a session shares its prompts, so one bad rule misses all its
turns): the counts are divided by Kish's design effect ``1 + (m - 1) rho`` (``m`` the mean
session size, ``rho`` the intra-session correlation of misses, by ANOVA) before the bounds are
taken (:func:`design_effect`; 1 where every miss or none is in one session, as it cannot be
estimated there). Where replays of the same stage disagree among themselves (the engine's own
nondeterminism: how the send lag falls), ``p0`` is the larger of 5% and ``AA_FACTOR`` times
the share of misses between two replays, up to :data:`MISS_SHARE_CEILING` (10%); over it the
test cannot tell ("needs a steadier bench").

A paired test vouches for a facet only when the pairs cover live: a replay that sent fewer than
``1 - MISS_SHARE`` of the live requests compared (a sample judged against the whole trace, two
traces of other requests) is not a replay of live's own requests, and its facets are judged by
the distribution tests (:mod:`fidelity.compare`) as before.

The tolerances (what counts as the same value) are per test: input lengths within
:data:`INPUT_TOLERANCE` (after the engine's chat template is taken out, :func:`fidelity.sides.
template_overhead`; its fit leaves a few tokens a request), output lengths within
:data:`OUTPUT_TOLERANCE`, a send within :data:`OFFSET_SHARE_OF_GAP` of the gap from its burst
to the nearest other one in live's rescaled arrivals (requests within live's timestamp resolution
of each other are one burst: :func:`neighbour_gaps`), and never less than the two sides' timing
slack (live's timestamp resolution, the stage's send-lag bound).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fidelity.sides import Side

__all__ = [
    "CONFIDENCE",
    "MISS_SHARE",
    "MISS_SHARE_CEILING",
    "INPUT_TOLERANCE",
    "OUTPUT_TOLERANCE",
    "OFFSET_SHARE_OF_GAP",
    "Tolerance",
    "Pairs",
    "Agreement",
    "pair",
    "covers",
    "share_bounds",
    "design_effect",
    "agreement",
    "length_misses",
    "offset_misses",
    "neighbour_gaps",
    "needed_pairs",
    "catchable_share",
]

CONFIDENCE = 0.95  # one-sided, each way
MISS_SHARE = 0.05  # p0: the share of requests that may miss
MISS_SHARE_CEILING = 0.10  # the widest p0 a replay A/A may set


@dataclass(frozen=True)
class Tolerance:
    """A value agrees with live's when it is within ``max(tokens, share x live's)``."""

    tokens: float
    share: float

    def of(self, live: np.ndarray) -> np.ndarray:
        return np.maximum(self.tokens, self.share * np.abs(live))

    def words(self) -> str:
        return f"max({self.tokens:g} tokens, {100 * self.share:g}%)"


# the engine's prompt tokens less its chat template, against live's: the template's fit (a + b x
# messages) leaves a residual of a few tokens a request (within +-7 on the quickstart's capture)
INPUT_TOLERANCE = Tolerance(8, 0.02)
# the output tokens the engine reported against live's: an engine told to ignore EOS decodes
# exactly max_tokens; a count from chunks (no usage reported) may be off by one
OUTPUT_TOLERANCE = Tolerance(2, 0.01)
# a send agrees with live's rescaled arrival when it is off by at most this share of the gap from
# its burst to the nearest other one (it keeps its place among them, each gap changed by at most
# that share)
OFFSET_SHARE_OF_GAP = 0.25


@dataclass(frozen=True)
class Pairs:
    """The requests of two sides paired by request id: ``live_index[j]`` and ``other_index[j]``
    are the same request; ``live_n`` the requests of the live side compared."""

    live_index: np.ndarray
    other_index: np.ndarray
    live_n: int

    @property
    def n(self) -> int:
        return len(self.live_index)

    @property
    def coverage(self) -> float:
        return self.n / self.live_n if self.live_n else 0.0


def pair(live: Side, other: Side) -> Pairs | None:
    """The pairs of ``live`` and ``other`` by request id (None when a side has no ids)."""
    if live.ids is None or other.ids is None:
        return None
    _, li, oi = np.intersect1d(live.ids, other.ids, assume_unique=True, return_indices=True)
    order = np.argsort(li, kind="stable")  # in live's order
    return Pairs(li[order], oi[order], live.n)


def covers(pairs: Pairs | None) -> bool:
    """Whether the pairs are a replay of live's own requests (they cover all but at most
    :data:`MISS_SHARE` of live's)."""
    return pairs is not None and pairs.live_n > 0 and pairs.coverage >= 1 - MISS_SHARE


def share_bounds(misses: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """One-sided Clopper-Pearson (lower, upper) bounds on a share from ``misses`` of ``n`` (each
    at ``confidence``; real-valued counts, as after a design effect)."""
    from scipy.stats import beta

    if n <= 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    lower = 0.0 if misses <= 0 else float(beta.ppf(alpha, misses, n - misses + 1))
    upper = 1.0 if misses >= n else float(beta.ppf(1.0 - alpha, misses + 1, n - misses))
    return lower, upper


def design_effect(miss: np.ndarray, sessions: np.ndarray) -> float:
    """Kish's design effect ``1 + (m0 - 1) rho`` of a miss indicator clustered in ``sessions``
    (``rho`` by one-way ANOVA, ``m0`` the ANOVA's mean cluster size; at least 1). 1 when there
    is one session per request, or no miss at all or nothing but misses (``rho`` unknowable)."""
    n = len(miss)
    if n < 2:
        return 1.0
    _, codes = np.unique(sessions, return_inverse=True)
    sizes = np.bincount(codes).astype(np.float64)
    clusters = len(sizes)
    k = float(miss.sum())
    if clusters in (1, n) or k in (0.0, float(n)):
        return 1.0
    hits = np.bincount(codes, weights=miss.astype(np.float64))
    p = k / n
    p_s = hits / sizes
    msb = float(np.sum(sizes * (p_s - p) ** 2)) / (clusters - 1)
    msw = float(np.sum(sizes * p_s * (1 - p_s))) / (n - clusters)
    m0 = (n - float(np.sum(sizes**2)) / n) / (clusters - 1)
    denominator = msb + (m0 - 1) * msw
    rho = 0.0 if denominator <= 0 else min(1.0, max(0.0, (msb - msw) / denominator))
    return max(1.0, 1.0 + (m0 - 1) * rho)


@dataclass(frozen=True)
class Agreement:
    """One paired test's count: of ``n`` live requests, ``misses`` were further from live than
    the tolerance, ``unknown`` of them for want of a value on the other side; ``deff`` the
    design effect of the misses over live's sessions; ``lower`` / ``upper`` the bounds on the
    share of misses after it."""

    n: int
    misses: int
    unknown: int
    deff: float
    lower: float
    upper: float

    @property
    def share(self) -> float:
        return self.misses / self.n if self.n else 0.0


def agreement(miss: np.ndarray, unknown: int, sessions: np.ndarray) -> Agreement:
    """The count of a per-request miss indicator (live's requests, unknown ones included as misses)."""
    n = len(miss)
    deff = design_effect(miss, sessions)
    k = int(miss.sum())
    lower, upper = share_bounds(k / deff, n / deff)
    return Agreement(n, k, unknown, deff, lower, upper)


def length_misses(live: Side, other: Side, attr: str, tolerance: Tolerance) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Per live request with a value (in live's order), whether ``other``'s ``attr`` (input or
    output tokens) misses live's by more than ``tolerance``, those requests' sessions, and how many
    of the misses had no value on the other side (not sent, failed, not reported: they miss too).
    None when the pairs do not cover live or live has no values."""
    pairs = pair(live, other)
    if not covers(pairs):
        return None
    assert pairs is not None
    theirs = getattr(live, attr)
    if not np.isfinite(theirs).any():
        return None
    ours = np.full(live.n, np.nan)
    ours[pairs.live_index] = getattr(other, attr)[pairs.other_index]
    known = np.isfinite(ours) & np.isfinite(theirs)
    miss = np.ones(live.n, bool)
    miss[known] = np.abs(ours[known] - theirs[known]) > tolerance.of(theirs[known])
    unknown = int((~known & np.isfinite(theirs)).sum())
    keep = np.isfinite(theirs)  # live's own unknowns are not compared
    return miss[keep], live.sessions[keep], unknown


@dataclass(frozen=True)
class OffsetMisses:
    """The send-offset test's count over live's requests (in live's order): ``miss`` per
    request, and of the misses, how many came from each cause."""

    miss: np.ndarray
    sessions: np.ndarray
    unknown: int  # not sent
    schedule: int  # the stage's schedule put them elsewhere (drawn arrivals, another trace's times)
    lag: int  # the sender left late (or early) by more than the tolerance
    held: int  # causal turns released after their schedule (their slip is the sessions' to judge)
    worst_s: float  # the largest displacement, live seconds


def _live_seconds(s: Side) -> np.ndarray:
    return s.times_s * s.time_scale


def offset_misses(live: Side, other: Side) -> OffsetMisses | None:
    """Per live request, whether ``other`` sent it further from live's arrival (both in live
    seconds, aligned on the median difference) than :data:`OFFSET_SHARE_OF_GAP` of the gap from
    its burst to the nearest other one in live's arrivals (:func:`neighbour_gaps`, bursts of
    live's timestamp resolution), and at least the two sides' timing slack. A causal turn released
    after its schedule (``ready_s`` past ``scheduled_s``: it waited for the turn before) is
    measured from its release: its slip from live's time is the sessions' (think times), not the
    sender's. None when the pairs do not cover live."""
    pairs = pair(live, other)
    if not covers(pairs) or live.n < 2:
        return None
    assert pairs is not None
    theirs = _live_seconds(live)[pairs.live_index]
    ours = _live_seconds(other)[pairs.other_index]
    c = other.time_scale
    scheduled = None if other.scheduled_s is None else other.scheduled_s[pairs.other_index] * c
    ready = None if other.ready_s is None else other.ready_s[pairs.other_index] * c
    held = np.zeros(pairs.n, bool)
    if scheduled is not None and ready is not None:
        held = np.isfinite(ready) & np.isfinite(scheduled) & (ready > scheduled + 1e-9)
    # the sends aligned on live's arrivals by their median difference (the turns held back left out)
    align = float(np.median((ours - theirs)[~held])) if (~held).any() else 0.0
    off = np.where(held, ours - (ready if ready is not None else ours), ours - theirs - align)
    nearest = neighbour_gaps(_live_seconds(live), live.time_slack_s)
    floor = live.time_slack_s + other.time_slack_s
    tolerance = np.maximum(floor, OFFSET_SHARE_OF_GAP * nearest[pairs.live_index])
    miss = np.ones(live.n, bool)
    paired_miss = np.abs(off) > tolerance
    miss[pairs.live_index] = paired_miss
    unknown = live.n - pairs.n
    schedule = lag = 0
    if scheduled is not None:
        by_schedule = np.abs(np.where(held, 0.0, scheduled - theirs - align)) > tolerance
        schedule = int((paired_miss & by_schedule).sum())
        lag = int((paired_miss & ~by_schedule).sum())
    return OffsetMisses(
        miss=miss,
        sessions=live.sessions,
        unknown=unknown,
        schedule=schedule,
        lag=lag,
        held=int(held.sum()),
        worst_s=float(np.max(np.abs(off))) if len(off) else 0.0,
    )


def neighbour_gaps(t: np.ndarray, resolution: float) -> np.ndarray:
    """Per arrival, the gap from its burst to the nearest other burst: arrivals within
    ``resolution`` of a burst's first arrival are one burst (live's timestamps cannot order
    them), and a burst's gap is the smaller of those to the bursts before and after it (inf for
    a lone burst). A burst of requests due at once, which one sender writes back to back over the
    time its writes take, keeps its place while it spreads over less than a share of that gap."""
    order = np.argsort(t, kind="stable")
    ts = t[order]
    n = len(ts)
    burst = np.zeros(n, np.int64)
    start = ts[0] if n else 0.0
    k = 0
    for i in range(1, n):  # greedy: a burst spans at most `resolution` from its first arrival
        if ts[i] - start > resolution:
            k += 1
            start = ts[i]
        burst[i] = k
    firsts = np.flatnonzero(np.concatenate([[True], burst[1:] != burst[:-1]])) if n else np.zeros(0, np.int64)
    begin = ts[firsts]
    end = ts[np.concatenate([firsts[1:] - 1, [n - 1]])] if n else np.zeros(0)
    before = np.concatenate([[np.inf], begin[1:] - end[:-1]])
    after = np.concatenate([begin[1:] - end[:-1], [np.inf]])
    gaps = np.empty(n)
    gaps[order] = np.minimum(before, after)[burst]
    return gaps


def needed_pairs(share: float, p0: float) -> int | None:
    """The paired requests a test needs for its upper bound to come under ``p0`` at a share of
    misses ``share`` (None when ``share`` is not under ``p0``: no number of them would do)."""
    if share >= p0:
        return None
    lo, hi = 1, 2
    while share_bounds(share * hi, hi)[1] >= p0:
        lo, hi = hi, hi * 2
        if hi > 10**9:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if share_bounds(share * mid, mid)[1] < p0 else (mid, hi)
    return hi


def catchable_share(n: int, p0: float, deff: float = 1.0) -> float:
    """The smallest share of ``n`` paired requests that, all missing, the test fails on (its
    lower bound over ``p0``); inf when even all of them would not."""
    n_eff = n / deff
    if share_bounds(n_eff, n_eff)[0] <= p0:
        return math.inf
    lo, hi = 0, max(1, int(n))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if share_bounds(mid / deff, n_eff)[0] > p0 else (mid, hi)
    return hi / n


def scaled_misses(values: np.ndarray, tolerance: Tolerance) -> Callable[[float], int]:
    """How many of ``values`` a change x (1 + d) would move beyond ``tolerance``: for the
    smallest uniform change of lengths a length test catches."""
    v = values[np.isfinite(values) & (values > 0)]
    return lambda d: int((np.abs(d) * v > tolerance.of(v)).sum())
