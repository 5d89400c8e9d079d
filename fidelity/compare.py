"""Does a replay match live traffic? Metrics, thresholds from A/A, and verdicts in words.

A *side* (:mod:`fidelity.sides`) is one stream of requests as it was observed: the live trace
(its arrival times, the lengths it recorded, what the live engine reported) or one replay stage
(the times its requests were actually sent, the lengths the target engine reported). The same
metric functions compare any two sides; :func:`compare_sides` compares a stage with the live rows
it replayed (``fidelity.judge.compare_stage``), or two traces (``drift``).

Two kinds of test. Where the replay sent live's own requests (paired by request id), each is
compared with the live one it replayed (:mod:`fidelity.paired`): lengths, the prefix reuse it
was offered, its send against live's rescaled arrival; a paired test vouches at any size. Every
other metric compares the two sides' distributions: it has a distance (0 = same) and passes
within the larger of a fixed bound (:data:`FIXED_BOUNDS`) and ``AA_FACTOR`` times its A/A noise,
the largest of the same distances between the halves of ``AA_SPLITS`` splits of the live side
(:mod:`fidelity.resample`, scaled to the sizes compared): a metric the live traffic itself does
not pin down more tightly than that cannot fail a replay for it. On a live side of more than
``AA_MAX_REQUESTS`` (20,000) requests the halves are drawn from a sample of its sessions of about
that size, which overstates the noise of a larger trace; there the fixed bounds decide.

Three answers. A metric *fails* when its distance is over its bound. It *passes* when the
distance is within a bound that is itself within the metric's ceiling (:data:`CEILINGS`, well
below the metric's range: a KS distance of 0.15, a relative error of 0.25, a hit-rate gap of 0.10,
...). Where the A/A noise puts the bound above the ceiling, the live side is too small to pin the
metric down, and a distance within that bound says nothing: the metric is *cannot tell*, with
the live size it would need (A/A distances shrink about as 1/sqrt(n), so about
``n x (bound / ceiling)^2`` requests, sessions or windows). A metric whose smallest detectable
change (:mod:`fidelity.power`) is over its maximum is *cannot tell* too. The verdict is given per
facet (:mod:`fidelity.facets`: input and output lengths, cache, arrivals, sessions, outcomes),
each judged by its most powerful test: a stage is *unfaithful* when a metric failed, *cannot
tell* when none failed but a required facet had no metric that passed, and *faithful* otherwise
(other metrics may still be cannot tell: its reason names them). Metrics whose inputs are
missing (no engine-reported cached tokens live, no recorded latencies, too few windows) are
reported as not applicable. Outcomes (TTFT / ITL / E2E) and the engine's cached tokens request
by request are reported but judged only with ``judge_outcomes=True``: they match live only when
the target runs the live engine's config at the live rate, and they wobble from one replay to the
next by the bench's own noise (an engine start, a neighbour, the scheduler), which live's halves
cannot show. So they also need a *replay A/A*: ``aa_runs`` (2) replays of the stage on the same
engine and config (``replay run / sweep --repeats 2``); its A/A distance is the larger of live's
halves' and the largest between those replays, and the bound follows from it as above. With
fewer replays they are *cannot tell*, and with outcomes judged a stage needs them conclusive to
be faithful.

The bound rule itself (bounds, ceilings, A/A splits, the decision and its power) is in
:mod:`fidelity.bounds`; the metrics and the verdicts are here.

Time scales. A stage that replays the trace k times faster is compared at 1/k of the live
windows: its counting windows are the live ones divided by the stage's compression
(:func:`compression`), and its reuse and think times are multiplied by it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from fidelity import cache, paired, stats
from fidelity.bounds import (
    AA_FACTOR,
    CANNOT_TELL,
    CEILINGS,
    COUNT_WINDOWS_S,
    FAIL,
    FIXED_BOUNDS,
    NOT_JUDGED,
    PASS,
    Decision,
    round_up2,
    aa_of,
    aa_splits,
    counts,
    decide,
    size_of,
    stated,
)
from fidelity.facets import FAITHFUL, OUTCOMES, REQUIRED, UNFAITHFUL, Facet, judge_facets, overall
from fidelity.power import CHANGES, MAX_DETECTABLE, in_words
from fidelity.resample import AA_SCHEME, Split
from fidelity.sides import Side
from replay.config import LAG_BOUND_MS
from replay.noise import AA_RUNS

__all__ = [
    "AA_FACTOR",
    "AA_RUNS",
    "CEILINGS",
    "FIXED_BOUNDS",
    "PASS",
    "FAIL",
    "CANNOT_TELL",
    "NOT_JUDGED",
    "FAITHFUL",
    "UNFAITHFUL",
    "COUNT_WINDOWS_S",
    "MIN_SAMPLES",
    "Metric",
    "FidelityVerdict",
    "compare_sides",
]

MIN_WINDOWS = 10  # a count statistic needs at least this many windows on the live side
MIN_SAMPLES = 50  # quantiles from fewer samples are flagged
# a length quantile is judged only where each side has this many values beyond it (a p99 needs
# 1,000 requests): a p99 of 500 is their fifth largest, which two samples of one traffic move by
# more than any A/A of it shows (benchmarks/fidelity_calibration.py: the most frequent false
# "unfaithful" at 500 requests)
MIN_TAIL = 10


@dataclass(frozen=True)
class Metric:
    """One comparison. ``distance`` is 0 when the sides agree; ``bound`` = max(fixed, AA_FACTOR x
    ``aa``), ``aa`` the largest same distance between two random halves of live; ``state`` is
    PASS, FAIL, CANNOT_TELL (the bound is over the metric's ``ceiling``; ``needs`` says how much
    live traffic would pin it down) or NOT_JUDGED (not applicable, or reported only)."""

    group: str
    name: str
    live: float | None
    replay: float | None
    distance: float | None
    aa: float | None
    bound: float | None
    state: str
    reason: str
    flags: tuple[str, ...] = ()
    ceiling: float | None = None
    needs: str | None = None
    detectable: float | None = None  # the smallest change of its kind it catches (fidelity.power); None: none / n/a
    detects: str = ""  # that change in words ("lengths +12%", "none up to lengths x5", "")
    paired: bool = False  # compares the replay's requests with the live ones they replayed, one by one

    @property
    def passed(self) -> bool | None:
        """True / False for a metric judged pass / fail; None when it was not (cannot tell, n/a)."""
        return {PASS: True, FAIL: False}.get(self.state)

    def to_json(self) -> dict:
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}
        out["passed"] = self.passed
        return out


@dataclass(frozen=True)
class FidelityVerdict:
    """A stage's answer: ``state`` FAITHFUL, UNFAITHFUL or CANNOT_TELL, and why."""

    state: str
    reason: str
    metrics: list[Metric] = field(default_factory=list)
    diagnosis: list[str] = field(default_factory=list)
    facets: list[Facet] = field(default_factory=list)  # what the verdict rests on (fidelity.facets)

    @property
    def faithful(self) -> bool:
        return self.state == FAITHFUL

    @property
    def failed(self) -> list[Metric]:
        return [m for m in self.metrics if m.state == FAIL]

    @property
    def undecided(self) -> list[Metric]:
        return [m for m in self.metrics if m.state == CANNOT_TELL]

    def to_json(self) -> dict:
        return {
            "state": self.state,
            "faithful": self.faithful,
            "reason": self.reason,
            "diagnosis": self.diagnosis,
            "facets": [f.to_json() for f in self.facets],
            "metrics": [m.to_json() for m in self.metrics],
        }


# --- metrics ------------------------------------------------------------------------------------

# a metric: (live side, other side) -> (live value, other value, distance); the other side's
# time_scale says how much faster it ran
MetricFn = Callable[[Side, Side], tuple[float | None, float | None, float | None]]


def _two_sample(distance: Callable[[np.ndarray, np.ndarray], float | None], get: Callable[[Side], np.ndarray]) -> MetricFn:
    return lambda a, b: (None, None, distance(get(a), get(b)))


def _quantile_error(get: Callable[[Side], np.ndarray], q: int) -> MetricFn:
    def fn(a: Side, b: Side):
        x, y = _clean_pct(get(a), q), _clean_pct(get(b), q)
        return x, y, stats.relative_difference(x, y)

    return fn


def _per_request_change(get: Callable[[Side], np.ndarray]) -> MetricFn:
    """exp(mean |log(other / live)|) - 1 over the requests of ``other`` paired by id with the
    live rows they replayed (both lengths known and positive): every length x (1 + d) gives d,
    and so does a replay that sent each request with another's length (lengths shuffled keep
    every marginal metric at 0). Undefined where no request pairs (two traces, A/A halves)."""

    def fn(a: Side, b: Side):
        if a.ids is None or b.ids is None:
            return None, None, None
        _, ia, ib = np.intersect1d(a.ids, b.ids, assume_unique=True, return_indices=True)
        x, y = get(a)[ia], get(b)[ib]
        ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
        if not ok.any():
            return None, None, None
        return None, None, float(np.expm1(np.mean(np.abs(np.log(y[ok] / x[ok])))))

    return fn


def _reuse_time_ks(a: Side, b: Side):
    """KS D of the two sides' reuse times, where a reuse time may move by up to the two sides'
    timing slack together before it counts as apart. A reuse time is the gap between two of a
    side's times, each late by between 0 and that side's slack (live's timestamps are whole
    milliseconds in some traces; a valid replay sends within its send-lag bound of the schedule),
    so it is within one slack of the true gap: a 4-request replay whose one reuse came out 2 ms
    longer than live's under a 50 ms bound is not unfaithful in its reuse times."""
    return None, None, stats.ks_distance(a.reuse_s(), b.reuse_s(), slack=a.time_slack_s + b.time_slack_s)


def _clean_pct(values: np.ndarray, q: int) -> float | None:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.percentile(v, q)) if len(v) else None


def _max_quantile_error(get: Callable[[Side], np.ndarray]) -> MetricFn:
    def fn(a: Side, b: Side):
        errors = [e for e in stats.quantile_errors(get(a), get(b)).values() if e is not None]
        return None, None, (max(errors) if errors else None)

    return fn


def _scalar(value: Callable[[Side], float | None], relative: bool) -> MetricFn:
    def fn(a: Side, b: Side):
        x, y = value(a), value(b)
        if x is None or y is None:
            return x, y, None
        return x, y, (stats.relative_difference(x, y) if relative else abs(y - x))

    return fn


def _spearman(s: Side) -> float | None:
    return stats.spearman(s.input_tokens, s.output_tokens)


def _engine_hit_rate(s: Side) -> float | None:
    if s.engine_cached is None:
        return None
    keep = np.isfinite(s.engine_cached) & np.isfinite(s.recorded_input)
    total = (s.recorded_input[keep] + s.template_tokens).sum()
    return float(s.engine_cached[keep].sum() / total) if total > 0 else None


def _dispersion(window_s: float) -> Callable[[Side], float | None]:
    return lambda s: stats.index_of_dispersion(counts(s, window_s))


def _sent_early(s: Side) -> float | None:
    """Share of a side's requests with a known dependency wait that were sent before a
    dependency ended by more than the side's timing slack (live: none, by definition)."""
    if s.dep_wait_s is None:
        return None
    w = s.dep_wait_s[np.isfinite(s.dep_wait_s)]
    return float((w * s.time_scale < -s.time_slack_s).mean()) if len(w) else None


def _session_concurrency(s: Side) -> np.ndarray:
    """Per session of two requests or more (of a side with dependencies and durations): the most
    of its requests in flight at once (from each one's time to its end; an interval ending when
    another starts does not overlap it). Scale-free: a side k times faster has the same counts."""
    if s.dep_wait_s is None or s.e2e_s is None or not s.n:
        return np.zeros(0)
    keep = np.isfinite(s.e2e_s)
    start = s.times_s[keep]
    frame = pl.DataFrame(
        {
            "session": np.concatenate([s.sessions[keep], s.sessions[keep]]),
            "t": np.concatenate([start, start + s.e2e_s[keep]]),
            "step": np.concatenate([np.ones(len(start), np.int64), -np.ones(len(start), np.int64)]),
        }
    )
    most = (
        frame.sort("session", "t", "step")
        .with_columns(open=pl.col("step").cum_sum().over("session"), n=(pl.col("step") > 0).sum().over("session"))
        .filter(pl.col("n") >= 2)
        .group_by("session")
        .agg(pl.col("open").max())
    )
    return most["open"].cast(pl.Float64).to_numpy()


def _positive(get: Callable[[Side], np.ndarray | None]) -> Callable[[Side], np.ndarray]:
    """A per-request value of a side where it is over 0 (a fan-out: the requests that have dependents)."""

    def fn(s: Side) -> np.ndarray:
        v = get(s)
        return np.zeros(0) if v is None else v[v > 0]

    return fn


def _offered_tokens(s: Side) -> np.ndarray:
    """Per request, the prompt tokens an unbounded prefix cache over the side's order held."""
    return np.minimum(s.offered_hits() * float(s.block_size), s.recorded_input)


def _engine_tokens(s: Side) -> np.ndarray:
    """Per request, the prompt tokens its engine reported cached (NaN: not reported)."""
    return np.full(s.n, np.nan) if s.engine_cached is None else s.engine_cached


def _session_hit(hits: Callable[[Side], np.ndarray]) -> Callable[[Side], np.ndarray]:
    """Per session of two requests or more: the share of its prompt tokens that ``hits`` says
    were cached (requests whose hits are unknown left out). Live's template is taken to be the
    replay's, as for the engine's hit rate: ``Side.template_tokens`` is added to each prompt."""

    def fn(s: Side) -> np.ndarray:
        h = hits(s)
        keep = np.isfinite(h) & np.isfinite(s.recorded_input)
        if not keep.any():
            return np.zeros(0)
        frame = pl.DataFrame({"session": s.sessions[keep], "hit": h[keep], "prompt": s.recorded_input[keep] + s.template_tokens})
        per = frame.group_by("session").agg(pl.len(), pl.col("hit").sum(), pl.col("prompt").sum()).filter(pl.col("len") >= 2)
        per = per.filter(pl.col("prompt") > 0)
        return (per["hit"] / per["prompt"]).to_numpy()

    return fn


# depth bands for the cached share by depth: 0, 1, 2-3, 4-7, 8-15, ...; a band is compared where
# each side has this many requests in it
MIN_BAND = 10


def _depth_share(hits: Callable[[Side], np.ndarray]) -> MetricFn:
    """The largest difference over depth bands (0, 1, 2-3, 4-7, ...) in the share of the band's
    prompt tokens that ``hits`` says were cached: an agent's context is cached more the deeper it
    is, and a replay that breaks the graph moves the deep requests' hits."""

    def shares(s: Side) -> dict[int, float]:
        if s.depth is None:
            return {}
        h = hits(s)
        keep = np.isfinite(h) & np.isfinite(s.recorded_input) & np.isfinite(s.depth)
        band = np.where(s.depth[keep] > 0, np.floor(np.log2(np.maximum(s.depth[keep], 1))) + 1, 0).astype(np.int64)
        frame = pl.DataFrame({"band": band, "hit": h[keep], "prompt": s.recorded_input[keep] + s.template_tokens})
        per = frame.group_by("band").agg(pl.len(), pl.col("hit").sum(), pl.col("prompt").sum())
        per = per.filter((pl.col("len") >= MIN_BAND) & (pl.col("prompt") > 0))
        return dict(zip(per["band"].to_list(), (per["hit"] / per["prompt"]).to_list()))

    def fn(a: Side, b: Side):
        x, y = shares(a), shares(b)
        both = sorted(set(x) & set(y))
        if not both:
            return None, None, None
        return None, None, max(abs(y[k] - x[k]) for k in both)

    return fn


def _turns(s: Side) -> float | None:
    sessions = len(np.unique(s.sessions)) if s.n else 0
    return s.n / sessions if sessions else None


def _scaled(get: Callable[[Side], np.ndarray | None]) -> Callable[[Side], np.ndarray]:
    """Times of a side in live seconds (multiplied by its time scale)."""

    def fn(s: Side) -> np.ndarray:
        v = get(s)
        return np.zeros(0) if v is None else v * s.time_scale

    return fn


@dataclass(frozen=True)
class _Spec:
    group: str
    name: str
    fn: MetricFn
    what: str  # the words for the reason
    judged: bool = True
    applicable: Callable[[Side, Side], str | None] = lambda a, b: None  # a reason it does not apply
    # judged against live's A/A halves (without any, it cannot tell); False: its fixed bound alone
    aa_judged: bool = True


def _needs(attr: str, what: str) -> Callable[[Side, Side], str | None]:
    def check(a: Side, b: Side) -> str | None:
        for side in (a, b):
            v = getattr(side, attr)
            if v is None or not np.isfinite(np.asarray(v, dtype=np.float64)).any():
                return f"{side.name} has no {what}"
        return None

    return check


def _all(*checks: Callable[[Side, Side], str | None]) -> Callable[[Side, Side], str | None]:
    """The first reason any of ``checks`` gives that a metric does not apply (None: it applies)."""
    return lambda a, b: next((r for c in checks if (r := c(a, b)) is not None), None)


_GRAPH = _needs("depth", "dependencies (schema 3 depends_on)")  # both sides have a dependency graph


def _enough_tail(get: Callable[[Side], np.ndarray], q: int) -> Callable[[Side, Side], str | None]:
    def check(a: Side, b: Side) -> str | None:
        for side in (a, b):
            n = int(np.isfinite(get(side)).sum())
            if n * (100 - q) / 100 < MIN_TAIL:
                need = math.ceil(MIN_TAIL * 100 / (100 - q))
                beyond = n * (100 - q) / 100
                return f"{side.name}'s p{q} of {n:,} values rests on its {beyond:.3g} beyond it (judged from {need:,})"
        return None

    return check


def _enough_windows(window_s: float) -> Callable[[Side, Side], str | None]:
    def check(a: Side, b: Side) -> str | None:
        windows = len(counts(a, window_s))
        return None if windows >= MIN_WINDOWS else f"{a.name} spans {windows} windows of {window_s:g} s (< {MIN_WINDOWS})"

    return check


def _specs(outcomes_judged: bool) -> list[_Spec]:
    def lengths(side_attr: str) -> list[_Spec]:
        get = lambda s: getattr(s, side_attr)  # noqa: E731
        return [
            _Spec("lengths", f"{side_attr}.ks", _two_sample(stats.ks_distance, get), f"{side_attr} distribution (KS D)"),
            _Spec(
                "lengths",
                f"{side_attr}.wasserstein",
                _two_sample(stats.wasserstein_over_median, get),
                f"{side_attr} distribution (Wasserstein / live median)",
            ),
        ] + [
            _Spec(
                "lengths",
                f"{side_attr}.p{q}",
                _quantile_error(get, q),
                f"{side_attr} p{q} (relative error)",
                applicable=_enough_tail(get, q),
            )
            for q in stats.QUANTILES
        ]

    specs = (
        lengths("input_tokens")
        + [
            _Spec(
                "lengths",
                "input_tokens.per_request",
                _per_request_change(lambda s: s.input_tokens),
                "input_tokens per request (exp of the mean |log(replay / live)| over the requests, - 1)",
                aa_judged=False,  # request by request: halves hold other requests
            )
        ]
        + lengths("output_tokens")
        + [
            _Spec(
                "lengths",
                "lengths.spearman",
                _scalar(_spearman, relative=False),
                "input/output length rank correlation (Spearman, absolute difference)",
            ),
            _Spec(
                "cache",
                "cache.engine_hit_rate",
                _scalar(_engine_hit_rate, relative=False),
                "engine-reported cached / prompt tokens (absolute difference)",
                applicable=_needs("engine_cached", "engine-reported cached tokens"),
            ),
            _Spec(
                "cache",
                "cache.reuse_time.ks",
                _reuse_time_ks,
                "time since a request's longest cached prefix was last used (KS D, in live seconds, "
                "a time moved by no more than the two sides' timing slack not counted apart)",
            ),
            _Spec(
                "arrivals",
                "arrivals.interarrival_cv",
                _scalar(lambda s: stats.interarrival_cv(s.times_s), relative=True),
                "interarrival CV (relative difference)",
            ),
        ]
    )
    for w in COUNT_WINDOWS_S:
        specs.append(
            _Spec(
                "arrivals",
                f"arrivals.dispersion_{w:g}s",
                _scalar(_dispersion(w), relative=True),
                f"index of dispersion of counts per {w:g} s live window (relative difference)",
                applicable=_enough_windows(w),
            )
        )
    specs += [
        _Spec(
            "arrivals",
            "arrivals.lag1_autocorrelation",
            _scalar(lambda s: stats.lag1_autocorrelation(counts(s, 1.0)), relative=False),
            "lag-1 autocorrelation of per-second counts (absolute difference)",
            applicable=_enough_windows(1.0),
        ),
        _Spec(
            "arrivals",
            "arrivals.peak_to_mean",
            _scalar(lambda s: stats.peak_to_mean(counts(s, 1.0)), relative=True),
            "peak-to-mean of per-second counts (relative difference)",
            applicable=_enough_windows(1.0),
        ),
        _Spec("sessions", "sessions.turns", _scalar(_turns, relative=True), "turns per session (relative difference)"),
        _Spec(
            "sessions",
            "sessions.think_time.ks",
            _two_sample(stats.ks_distance, _scaled(lambda s: s.think_s)),
            "think time: previous turn's end to the next turn (KS D, live seconds)",
            applicable=_needs("think_s", "think times (recorded durations)"),
        ),
        _Spec(
            "sessions",
            "sessions.dag.early",
            _scalar(_sent_early, relative=False),
            "share of the requests with dependencies sent before a dependency ended (absolute difference)",
            applicable=_needs("dep_wait_s", "dependencies (schema 3 depends_on)"),
            aa_judged=False,  # request by request: live's are 0 by definition
        ),
        _Spec(
            "sessions",
            "sessions.dag.concurrency.ks",
            _two_sample(stats.ks_distance, _session_concurrency),
            "the most requests of a session in flight at once (KS D over sessions of 2+ requests)",
            applicable=_needs("dep_wait_s", "dependencies (schema 3 depends_on)"),
        ),
        _Spec(
            "sessions",
            "sessions.dag.fan_out.ks",
            _two_sample(stats.ks_distance, _positive(lambda s: s.fan_out)),
            "fan-out: the requests that depend on a request, of those with any (KS D)",
            applicable=_GRAPH,
        ),
        _Spec(
            "sessions",
            "sessions.dag.depth.ks",
            _two_sample(stats.ks_distance, lambda s: np.zeros(0) if s.depth is None else s.depth),
            "depth: the longest chain of dependencies ending at a request (KS D)",
            applicable=_GRAPH,
        ),
        _Spec(
            "cache",
            "cache.session_offered.ks",
            _two_sample(stats.ks_distance, _session_hit(_offered_tokens)),
            "per session: the share of its prompt tokens an unbounded prefix cache over the side's order held "
            "(KS D over sessions of 2+ requests)",
            applicable=_GRAPH,
        ),
        _Spec(
            "cache",
            "cache.session_engine.ks",
            _two_sample(stats.ks_distance, _session_hit(_engine_tokens)),
            "per session: the share of its prompt tokens the engine reported cached (KS D over sessions of 2+ requests)",
            applicable=_all(_GRAPH, _needs("engine_cached", "engine-reported cached tokens")),
        ),
        _Spec(
            "cache",
            "cache.depth_offered",
            _depth_share(_offered_tokens),
            f"share of prompt tokens an unbounded prefix cache held, by depth 0, 1, 2-3, 4-7, ... "
            f"(largest absolute difference over the bands with {MIN_BAND}+ requests a side)",
            applicable=_GRAPH,
        ),
        _Spec(
            "cache",
            "cache.depth_engine",
            _depth_share(_engine_tokens),
            f"share of prompt tokens the engine reported cached, by depth 0, 1, 2-3, 4-7, ... "
            f"(largest absolute difference over the bands with {MIN_BAND}+ requests a side)",
            applicable=_all(_GRAPH, _needs("engine_cached", "engine-reported cached tokens")),
        ),
        _Spec(
            "sessions",
            "sessions.dag.wait.ks",
            _two_sample(stats.ks_distance, _scaled(lambda s: s.dep_wait_s)),
            "wait: the last dependency's end to the request (tool or think time; KS D, live seconds)",
            applicable=_needs("dep_wait_s", "dependencies (schema 3 depends_on)"),
        ),
    ]
    for what, attr in (("ttft", "ttft_s"), ("e2e", "e2e_s"), ("itl", "itl_s")):
        specs.append(
            _Spec(
                "outcomes",
                f"outcomes.{what}",
                _max_quantile_error(_scaled_none(attr)),
                f"{what.upper()} p50/p90/p99 (largest relative error)",
                judged=outcomes_judged,
                applicable=_needs(attr, f"recorded {what.upper()}"),
            )
        )
    return specs


def _scaled_none(attr: str) -> Callable[[Side], np.ndarray]:
    return lambda s: np.zeros(0) if getattr(s, attr) is None else getattr(s, attr)


def _metric(
    group: str,
    name: str,
    x,
    y,
    d: float,
    aa: float | None,
    decision: Decision,
    reason: str,
    flags: tuple[str, ...] = (),
    state: str | None = None,
    paired: bool = False,
) -> Metric:
    return Metric(
        group,
        name,
        x,
        y,
        d,
        aa,
        decision.bound,
        state or decision.state,
        reason,
        flags,
        decision.ceiling,
        decision.needs,
        decision.detectable,
        decision.detects,
        paired,
    )


def _judge(
    spec: _Spec,
    live: Side,
    other: Side,
    splits: list[Split],
    aa_side: Side,
    replays: tuple[Side, ...] = (),
    aa_runs: int = AA_RUNS,
) -> Metric:
    not_applicable = spec.applicable(live, other)
    if not_applicable:
        return Metric(spec.group, spec.name, None, None, None, None, None, NOT_JUDGED, f"not applicable: {not_applicable}")
    x, y, d = spec.fn(live, other)
    if d is None or (isinstance(d, float) and math.isnan(d)):
        return Metric(spec.group, spec.name, x, y, None, None, None, NOT_JUDGED, f"not applicable: {spec.what} undefined")
    aa = aa_of(
        [
            h.scale * a
            for h in splits
            if spec.applicable(h.a, h.b) is None and (a := spec.fn(h.a, h.b)[2]) is not None and not math.isnan(a)
        ]
    )
    flags: tuple[str, ...] = ()
    bench = None  # outcomes: the largest distance between two replays of the stage
    need = max(2, aa_runs)  # replays the outcomes' replay A/A needs
    if spec.group == "outcomes":
        n = min(_count(getattr(live, _OUTCOME_ATTR[spec.name])), _count(getattr(other, _OUTCOME_ATTR[spec.name])))
        if n < MIN_SAMPLES:
            flags = (f"quantiles from {n} samples (< {MIN_SAMPLES})",)
        runs = (other, *replays)
        pairs = [
            p for i, a in enumerate(runs) for b in runs[i + 1 :] if (p := spec.fn(a, b)[2]) is not None and not math.isnan(p)
        ]
        bench = max(pairs) if len(runs) >= need and pairs else None
        if bench is not None:
            aa = max(aa or 0.0, bench)
    decision = decide(spec.name, d, aa, aa_side, lambda a, b: spec.fn(a, b)[2], x)
    if aa is None and spec.aa_judged and spec.judged and spec.group != "outcomes":
        # no split of live could be judged by it (too few windows in a half, too little traffic):
        # without its noise a distance over the fixed bound may be noise, and one within it may hide a change
        count, what = size_of(spec.name, aa_side)
        decision = replace(
            decision,
            state=CANNOT_TELL,
            needs=f"about {round_up2(2 * count):,} {what} (has {count:,})",
            why="live's halves are too small to measure its noise (no A/A)",
        )
        return _metric(spec.group, spec.name, x, y, d, aa, decision, stated(spec.what, d, x, y, other.name, decision), flags)
    if not spec.judged:
        return _metric(
            spec.group,
            spec.name,
            x,
            y,
            d,
            aa,
            decision,
            f"reported, not judged: {spec.what} {d:.3g} (bound {decision.bound:.3g})",
            flags,
            NOT_JUDGED,
        )
    if spec.group == "outcomes":
        if bench is None:
            return _metric(
                spec.group,
                spec.name,
                x,
                y,
                d,
                aa,
                replace(
                    decision,
                    needs=(
                        f"a replay A/A: {need} replays of this stage on the same engine and config "
                        f"(replay run / sweep --repeats {need}; has {len(runs)})"
                    ),
                ),
                f"{spec.what}: {d:.3g}, but the bench's own noise was not measured: cannot tell; needs a replay "
                f"A/A ({need} replays of this stage, has {len(runs)})",
                flags,
                CANNOT_TELL,
            )
        if decision.state == CANNOT_TELL and AA_FACTOR * bench > (decision.ceiling or math.inf):
            return _metric(
                spec.group,
                spec.name,
                x,
                y,
                d,
                aa,
                replace(decision, needs="a steadier bench"),
                f"{spec.what}: {d:.3g}, but {len(runs)} replays of this stage differ by up to {bench:.3g} "
                f"among themselves, so the bound {decision.bound:.3g} is over its ceiling "
                f"{decision.ceiling:.3g}: cannot tell; needs a steadier bench",
                flags,
                CANNOT_TELL,
            )
        said = stated(spec.what, d, x, y, other.name, decision)
        return _metric(
            spec.group, spec.name, x, y, d, aa, decision, f"{said} (replay A/A over {len(runs)} replays: {bench:.3g})", flags
        )
    return _metric(spec.group, spec.name, x, y, d, aa, decision, stated(spec.what, d, x, y, other.name, decision), flags)


_OUTCOME_ATTR = {"outcomes.ttft": "ttft_s", "outcomes.e2e": "e2e_s", "outcomes.itl": "itl_s"}


def _count(a: np.ndarray | None) -> int:
    return 0 if a is None else int(np.isfinite(np.asarray(a, dtype=np.float64)).sum())


def _cache_sim_metrics(live: Side, other: Side, splits: list[Split], aa_side: Side) -> list[Metric]:
    """Offered reuse: the simulated prefix cache's hit share on each side, at each capacity."""
    out = []
    capacities = cache.capacities_for(live.hashes)
    for label, capacity in capacities.items():

        def share(s: Side, c: int = capacity) -> float | None:
            return s.cache_share(c)

        x, y = share(live), share(other)
        name = f"cache.offered_reuse.{label}"
        what = f"simulated prefix-cache hit share, {label.replace('_', ' ')}" + (f" ({capacity} blocks)" if capacity else "")
        if x is None or y is None:
            out.append(Metric("cache", name, x, y, None, None, None, NOT_JUDGED, "not applicable: no prompt tokens"))
            continue
        d = abs(y - x)
        pairs = [(share(h.a), share(h.b), h.scale) for h in splits]
        aa = aa_of([scale * abs(hy - hx) for hx, hy, scale in pairs if hx is not None and hy is not None])
        decision = decide(name, d, aa, aa_side, live_value=x)
        out.append(_metric("cache", name, x, y, d, aa, decision, stated(what, d, x, y, other.name, decision)))
    return out


def _cache_diagnosis(metrics: list[Metric], other: str, live: Side) -> list[str]:
    by = {m.name: m for m in metrics}
    engine = by.get("cache.engine_hit_rate")
    offered = by.get("cache.offered_reuse.unbounded")
    out = []
    if offered is not None and offered.passed is False:
        out.append(
            f"cache hits: the {other} did not offer live's prefix reuse (simulated unbounded cache "
            f"{offered.replay:.3f} vs live {offered.live:.3f}): the workload side differs (prefix sharing "
            f"or arrival order)"
        )
    if engine is not None and engine.passed is False and engine.live is not None and engine.replay is not None:
        side = "reproduced" if offered is not None and offered.passed else "not reproduced either"
        turns = _turns(live)
        if engine.replay < engine.live and turns is not None and turns > 1:
            out.append(
                f"cache hits: the trace's own reuse is {side}, but the engine hit less than live "
                f"({engine.replay:.3f} vs {engine.live:.3f}). Live's sessions have {turns:.2g} turns on "
                f"average: each turn resends the earlier answers, which live's engine had generated and "
                f"cached, while a replay resends live's recorded answers, which its engine did not generate "
                f"(its own answers' blocks are not reused); or its prefix cache is smaller than live's, or "
                f"prefix caching is off"
            )
        elif engine.replay < engine.live:
            out.append(
                f"cache hits: the trace's own reuse is {side}, but the engine hit less than live "
                f"({engine.replay:.3f} vs {engine.live:.3f}): its prefix cache is smaller than live's, "
                f"or prefix caching is off"
            )
        else:
            out.append(
                f"cache hits: the engine hit more than live ({engine.replay:.3f} vs {engine.live:.3f}): its "
                f"prefix cache is larger than live's, or live's was under more memory pressure"
            )
    return out


def _held(stage: pl.DataFrame) -> pl.DataFrame:
    """The rows of a causal stage held back past their schedule for the turn before."""
    return stage.filter(pl.col("release_ns") > pl.col("intended_ns"))


def _causal_diagnosis(metrics: list[Metric], stage: pl.DataFrame, other: Side) -> list[str]:
    """A causal stage (turns held back for the previous one: ``release_ns`` past ``intended_ns``)
    that ran faster than live compressed the think times only; the answers took what the target
    took. Said when its ``cache.reuse_time.ks`` failed or used more than half of its bound."""
    reuse = next((m for m in metrics if m.name == "cache.reuse_time.ks"), None)
    if reuse is None or reuse.distance is None or reuse.bound is None or other.time_scale <= 1:
        return []
    if reuse.state != FAIL and reuse.distance <= reuse.bound / 2:
        return []
    turns = stage.filter(pl.col("session_id").is_not_null() & pl.col("release_ns").is_not_null())
    later = turns.height - turns["session_id"].n_unique()
    held = _held(turns).height
    if held == 0 or later <= 0:
        return []
    c = other.time_scale
    return [
        f"reuse times: this causal stage ran at {c:.3g}x live's pace and {held} of its {later} later turns "
        f"waited past their schedule for the turn before: a causal stage compresses the think times, not "
        f"the answers, so the times between a session's turns, and between reuses of a prefix, are not "
        f"live's / {c:.3g} (cache.reuse_time.ks {reuse.distance:.3g}, bound {reuse.bound:.3g}). Replay at "
        f"live's pace (--speedup 1), or against an engine {c:.3g}x as fast as live's"
    ]


def _per_request(stage: pl.DataFrame, lag_bound_ms: float | None = None) -> list[Metric]:
    """Reported from the stage's own rows: the runner's send lag p99 against the stage's lag
    bound (``lag_bound_ms``, by default the runner's default of 1 ms), which decides whether the
    stage is valid (the arrivals are judged by what the lag did to them:
    ``arrivals.paired_offsets``), and under causal sessions how far turns slipped."""
    out = []
    sent = stage.filter(pl.col("sent_ns").is_not_null() & pl.col("release_ns").is_not_null())
    if sent.height:
        lag_ms = float(np.percentile((sent["sent_ns"] - sent["release_ns"]).to_numpy(), 99)) / 1e6
        bound = LAG_BOUND_MS if lag_bound_ms is None else lag_bound_ms
        valid = "valid" if lag_ms <= bound else "invalid"
        out.append(
            Metric(
                "arrivals",
                "arrivals.send_lag_p99_ms",
                None,
                lag_ms,
                lag_ms,
                None,
                bound,
                NOT_JUDGED,
                f"reported, not judged: the runner's own send lag p99 {lag_ms:.3g} ms, "
                f"{'within' if lag_ms <= bound else 'over'} the stage's {bound:g} ms bound (the stage is {valid}); "
                f"what the lag did to the arrivals is judged by arrivals.paired_offsets",
            )
        )
    held = _held(sent)
    if held.height:  # causal sessions: turns held back until the previous turn ended (+ think time)
        slip = (held["release_ns"] - held["intended_ns"]).to_numpy() / 1e6
        p50, p99 = (float(np.percentile(slip, q)) for q in (50, 99))
        out.append(
            Metric(
                "sessions",
                "sessions.slip_ms",
                None,
                p99,
                None,
                None,
                None,
                NOT_JUDGED,
                f"reported, not judged: {held.height} turns waited for the previous turn past their "
                f"schedule, slip p50 {p50:.3g} ms, p99 {p99:.3g} ms (kept out of the send lag)",
            )
        )
    return out


# --- paired tests (fidelity.paired) ---------------------------------------------------------------


def _share_decision(
    count: paired.Agreement, p0: float, aa: float | None, detectable: float | None, detects: str, family_max: float | None
) -> Decision:
    """The within-tolerance rule (:mod:`fidelity.paired`) as a Decision: pass when the upper
    bound on the share of misses is under ``p0``, fail when the lower one is over it."""
    ceiling = paired.MISS_SHARE_CEILING
    if count.lower > p0:
        return Decision(p0, FAIL, ceiling, detectable=detectable, detects=detects)
    if aa is not None and p0 > ceiling:
        return Decision(
            p0,
            CANNOT_TELL,
            ceiling,
            "a steadier bench",
            detectable,
            detects,
            f"the replays of this stage miss each other on {100 * aa:.3g}% of the requests, so the share "
            f"tolerated is {100 * p0:.3g}%, over its ceiling {100 * ceiling:g}%",
        )
    if count.upper >= p0:
        need = paired.needed_pairs(count.share, p0)
        more = (
            f"about {need:,} paired requests at this share of misses (has {count.n:,})"
            if need
            else f"a replay with fewer misses ({100 * count.share:.3g}% of {count.n:,})"
        )
        return Decision(
            p0,
            CANNOT_TELL,
            ceiling,
            more,
            detectable,
            detects,
            f"the share of misses is at most {100 * count.upper:.3g}% (95%), not under {100 * p0:.3g}%",
        )
    if family_max is not None and (detectable is None or detectable > family_max):
        return Decision(
            p0,
            CANNOT_TELL,
            ceiling,
            "requests whose values a small change moves beyond the tolerance",
            detectable,
            detects,
            f"it would catch only {detects}",
        )
    return Decision(p0, PASS, ceiling, detectable=detectable, detects=detects)


def _share_metric(
    group: str, name: str, what: str, count: paired.Agreement, said: str, decision: Decision, aa: float | None
) -> Metric:
    p0 = decision.bound
    head = f"{what}: {count.n - count.misses:,} of {count.n:,} requests {said}"
    if count.unknown:
        head += f" ({count.unknown:,} with nothing to compare on the replay side, counted as misses)"
    deff = f", design effect {count.deff:.2g} over live's sessions" if count.deff > 1 else ""
    bounds = (
        f"share of misses {100 * count.share:.3g}%, at most {100 * count.upper:.3g}% and at least "
        f"{100 * count.lower:.3g}% (95%{deff})"
    )
    if decision.state == CANNOT_TELL:
        reason = f"{head}; {bounds}, but {decision.why}: cannot tell; needs {decision.needs}"
    elif decision.state == FAIL:
        reason = f"{head}; {bounds}: more misses than the {100 * p0:.3g}% tolerated"
    else:
        reason = f"{head}; {bounds}: under the {100 * p0:.3g}% tolerated"
        if decision.detects:
            reason += f" (catches {decision.detects})"
    if aa is not None:
        reason += f" (replays of this stage miss each other on {100 * aa:.3g}%)"
    return _metric(group, name, None, None, count.share, aa, decision, reason, paired=True)


def _paired_na(group: str, name: str, why: str) -> Metric:
    return Metric(group, name, None, None, None, None, None, NOT_JUDGED, f"not applicable: {why}", paired=True)


def _replay_aa(test, other: Side, replays: tuple[Side, ...]) -> float | None:
    """The largest share of misses of ``test(a, b)`` between this stage and one of its replays."""
    shares = [c.share for r in replays if (c := test(r, other)) is not None]
    return max(shares) if shares else None


def _p0(aa: float | None) -> float:
    return paired.MISS_SHARE if aa is None else max(paired.MISS_SHARE, AA_FACTOR * aa)


def _length_test(attr: str, tolerance: paired.Tolerance):
    def test(a: Side, b: Side) -> paired.Agreement | None:
        got = paired.length_misses(a, b, attr, tolerance)
        return None if got is None else paired.agreement(got[0], got[2], got[1])

    return test


def _offset_test(a: Side, b: Side) -> paired.Agreement | None:
    got = paired.offset_misses(a, b)
    return None if got is None else paired.agreement(got.miss, got.unknown, got.sessions)


def _length_power(
    live: Side, attr: str, tolerance: paired.Tolerance, count: paired.Agreement, p0: float
) -> tuple[float | None, str]:
    """The smallest uniform change of lengths x (1 + d) the test fails on, and in words with the
    share of requests a change of any size must touch to be caught."""
    values = getattr(live, attr)
    moved = paired.scaled_misses(values, tolerance)
    n = count.n

    def fails(d: float) -> bool:
        return paired.share_bounds(moved(d) / count.deff, n / count.deff)[0] > p0

    family = CHANGES[attr].family
    share = paired.catchable_share(n, p0, count.deff)
    anywhere = "" if not math.isfinite(share) else f" or any change beyond it in {100 * share:.2g}% of the requests"
    if not fails(CHANGES[attr].d_max):
        return None, f"none up to {CHANGES[attr].limit}{anywhere}"
    lo, hi = 0.0, CHANGES[attr].d_max
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fails(mid) else (mid, hi)
    return hi, in_words(family, hi) + anywhere


def _paired_metrics(
    live: Side, other: Side, replays: tuple[Side, ...], own_times: str | None, judge_outcomes: bool, aa_runs: int
) -> list[Metric]:
    """The paired tests (:mod:`fidelity.paired`), when ``other``'s requests are live's own: input
    and output lengths request by request, the prefix reuse each request was offered (and the
    engine took: judged with the outcomes), and each send against live's rescaled arrival (not
    when the stage made its own send times: ``own_times`` says how)."""
    pairs = paired.pair(live, other)
    names = [
        ("lengths", "input_tokens.paired"),
        ("lengths", "output_tokens.paired"),
        ("cache", "cache.paired_reuse"),
        ("arrivals", "arrivals.paired_offsets"),
    ]
    if not paired.covers(pairs):
        why = (
            "the sides' requests do not pair (no request ids)"
            if pairs is None
            else f"the {other.name} holds {pairs.n:,} of the {pairs.live_n:,} {live.name} requests compared: not a replay of "
            f"{live.name}'s own requests (the distribution tests judge it)"
        )
        return [_paired_na(g, n, why) for g, n in names]
    assert pairs is not None
    out = []
    for attr, tolerance, what in (
        ("input_tokens", paired.INPUT_TOLERANCE, "input tokens request by request (the engine's count less its chat template)"),
        ("output_tokens", paired.OUTPUT_TOLERANCE, "output tokens request by request (as the engine reported them)"),
    ):
        name = f"{attr}.paired"
        test = _length_test(attr, tolerance)
        count = test(live, other)
        if count is None or count.n == 0:
            out.append(_paired_na("lengths", name, f"{live.name} has no {attr}"))
            continue
        aa = _replay_aa(test, other, replays)
        p0 = _p0(aa)
        found, detects = _length_power(live, attr, tolerance, count, p0)
        decision = _share_decision(count, p0, aa, found, detects, MAX_DETECTABLE["lengths"])
        out.append(_share_metric("lengths", name, what, count, f"within {tolerance.words()} of live's", decision, aa))
    out.append(_paired_reuse(live, other, pairs))
    engine = _paired_engine_hits(live, other, replays, judge_outcomes, aa_runs)
    if engine is not None:
        out.append(engine)
    out.append(_paired_offsets(live, other, replays, own_times))
    return out


def _hits_apart(live: Side, other: Side, pairs: paired.Pairs) -> float | None:
    """Prompt tokens whose offered prefix-cache hit differs between the sides, request by
    request (each side's unbounded cache over its own order), over live's prompt tokens."""
    total = float(np.nansum(live.recorded_input))
    if total <= 0:
        return None
    theirs = live.offered_hits().astype(np.int64)
    ours = np.zeros(live.n, np.int64)  # a request not sent offered nothing
    ours[pairs.live_index] = other.offered_hits().astype(np.int64)[pairs.other_index]
    return float(np.abs(ours - theirs).sum()) * live.block_size / total


def _paired_reuse(live: Side, other: Side, pairs: paired.Pairs) -> Metric:
    name = "cache.paired_reuse"
    d = _hits_apart(live, other, pairs)
    if d is None:
        return _paired_na("cache", name, "no prompt tokens")
    bound = FIXED_BOUNDS[name]
    decision = Decision(
        bound, PASS if d <= bound else FAIL, CEILINGS[name], detectable=bound, detects=in_words("hit rate", bound)
    )
    word = "within" if d <= bound else "over"
    reason = (
        f"prefix reuse request by request (the prompt tokens each request would hit in an unbounded prefix cache over "
        f"its side's order, summed over the requests where the sides differ, over live's prompt tokens): {d:.3g}, "
        f"{word} the bound {bound:g}"
    )
    return _metric("cache", name, None, None, d, None, decision, reason, paired=True)


def _engine_hits_apart(a: Side, b: Side) -> float | None:
    """Engine-reported cached tokens that differ between the sides, request by request, over
    ``a``'s prompt tokens (its recorded ones plus its engine's chat template), on ``a``'s
    requests with a count (a request ``b`` has no count for differs by all of ``a``'s)."""
    if a.engine_cached is None or b.engine_cached is None:
        return None
    pairs = paired.pair(a, b)
    if not paired.covers(pairs):
        return None
    assert pairs is not None
    known = np.isfinite(a.engine_cached) & np.isfinite(a.recorded_input)
    total = float((a.recorded_input[known] + a.template_tokens).sum())
    if total <= 0:
        return None
    ours = np.zeros(a.n)
    ours[pairs.live_index] = np.nan_to_num(b.engine_cached[pairs.other_index], nan=0.0)
    return float(np.abs(ours[known] - a.engine_cached[known]).sum()) / total


def _paired_engine_hits(live: Side, other: Side, replays: tuple[Side, ...], judged: bool, aa_runs: int) -> Metric | None:
    """The engine's cached tokens against live's, request by request. Which requests an engine
    finds cached depends on its config and on the load (at another rate than live's, a session's
    second request may arrive after the first ended, or before), as the outcomes do: reported,
    and judged only with the outcomes (``judged``), within a band that covers how much
    ``aa_runs`` replays of the stage differ among themselves."""
    name = "cache.paired_engine_hits"
    if live.engine_cached is None:
        return None
    d = _engine_hits_apart(live, other)
    if d is None:
        return _paired_na("cache", name, f"the {other.name} reported no cached tokens")
    what = (
        "engine-reported cached tokens request by request (summed where the sides differ, over live's prompt "
        "tokens and the engine's chat template)"
    )
    if not judged:
        return Metric(
            "cache",
            name,
            None,
            None,
            d,
            None,
            None,
            NOT_JUDGED,
            f"reported, not judged: {what} {d:.3g} (an engine's own hits depend on its config and load, as the "
            f"outcomes do: judged with them, --judge-outcomes)",
            paired=True,
        )
    runs = (other, *replays)
    apart = [x for i, a in enumerate(runs) for b in runs[i + 1 :] if (x := _engine_hits_apart(a, b)) is not None]
    need = max(2, aa_runs)
    aa = max(apart) if apart and len(runs) >= need else None
    ceiling = CEILINGS[name]
    if aa is None:
        decision = Decision(
            FIXED_BOUNDS[name],
            CANNOT_TELL,
            ceiling,
            f"a replay A/A: {need} replays of this stage on the same engine and config "
            f"(replay run / sweep --repeats {need}; has {len(runs)})",
        )
        reason = (
            f"{what}: {d:.3g}, but the bench's own noise was not measured: cannot tell; needs a replay A/A "
            f"({need} replays of this stage, has {len(runs)})"
        )
        return _metric("cache", name, None, None, d, None, decision, reason, paired=True)
    bound = max(FIXED_BOUNDS[name], AA_FACTOR * aa)
    if d > bound:
        state, why = FAIL, ""
    elif bound > ceiling:
        state, why = CANNOT_TELL, f"{len(runs)} replays of this stage differ by up to {aa:.3g} among themselves"
    else:
        state, why = PASS, ""
    decision = Decision(
        bound, state, ceiling, "a steadier bench" if state == CANNOT_TELL else None, bound, in_words("hit rate", bound), why
    )
    reason = (
        f"{what}: {d:.3g}, {'over' if state == FAIL else 'within'} the bound {bound:.3g} "
        f"(replay A/A over {len(runs)} replays: {aa:.3g})"
    )
    if state == CANNOT_TELL:
        reason += f", but {why}: cannot tell; needs a steadier bench"
    return _metric("cache", name, None, None, d, aa, decision, reason, paired=True)


def _paired_offsets(live: Side, other: Side, replays: tuple[Side, ...], own_times: str | None) -> Metric:
    name = "arrivals.paired_offsets"
    if own_times:
        return _paired_na("arrivals", name, own_times)
    got = paired.offset_misses(live, other)
    if got is None:
        return _paired_na("arrivals", name, "fewer than 2 requests")
    count = paired.agreement(got.miss, got.unknown, got.sessions)
    aa = _replay_aa(_offset_test, other, replays)
    p0 = _p0(aa)

    def lower(a: Side, b: Side) -> float | None:
        # the changed live side sent with this stage's own timing slack
        m = paired.offset_misses(a, replace(b, time_slack_s=other.time_slack_s))
        return None if m is None else paired.agreement(m.miss, m.unknown, m.sessions).lower

    from fidelity.power import detectable

    found, change = detectable("arrivals.paired_offsets", lower, live, p0)
    share = paired.catchable_share(count.n, p0, count.deff)
    anywhere = "" if not math.isfinite(share) else f" or any displacement beyond it of {100 * share:.2g}% of the requests"
    if change is None or found is None:
        detects = anywhere.removeprefix(" or ")
    elif not math.isfinite(found):
        detects = f"none up to {change.limit}{anywhere}"
    else:
        detects = in_words(change.family, found) + anywhere
    power = None if found is None or not math.isfinite(found) else found
    decision = _share_decision(count, p0, aa, power, detects, MAX_DETECTABLE["arrivals"])
    c = other.time_scale
    said = (
        f"sent within max({1e3 * (live.time_slack_s + other.time_slack_s) / c:.3g} ms, "
        f"{100 * paired.OFFSET_SHARE_OF_GAP:g}% of the gap from its burst to the nearest other) of live's arrival at "
        f"{c:.3g}x its pace"
    )
    parts = []
    if got.schedule:
        parts.append(f"{got.schedule:,} by the schedule (not live's times)")
    if got.lag:
        parts.append(f"{got.lag:,} by the sender's lag")
    if got.held:
        parts.append(f"{got.held:,} causal turns held for the turn before, measured from their release")
    metric = _share_metric("arrivals", name, "send offsets request by request", count, said, decision, aa)
    extra = f"; worst {1e3 * got.worst_s / c:.3g} ms off" + (f"; {', '.join(parts)}" if parts else "")
    return replace(metric, reason=metric.reason + extra)


def compare_sides(
    live: Side,
    other: Side,
    *,
    judge_outcomes: bool = False,
    seed: int = 0,
    stage: pl.DataFrame | None = None,
    aa_from: Side | None = None,
    lag_bound_ms: float | None = None,
    replays: tuple[Side, ...] = (),
    aa_runs: int = AA_RUNS,
    own_times: str | None = None,
    aa_scheme: str = AA_SCHEME,
) -> FidelityVerdict:
    """Every metric between ``live`` and ``other``, judged against thresholds from the A/A halves
    of ``aa_from`` (default: live), the paired tests where ``other``'s requests are live's own
    (:mod:`fidelity.paired`; ``own_times``: why the stage's send times are not live's, when it
    made its own: drawn arrivals, a closed loop), and the verdict by facet
    (:mod:`fidelity.facets`); ``stage`` (the replay's rows) adds the send lag and slip it
    reports. ``replays``: the other replays of ``other``'s stage (same engine, config and
    load), whose distances from it set the outcomes' replay A/A (``aa_runs`` replays in all are
    needed) and the paired tests' tolerated share. ``aa_scheme``: how the A/A halves are drawn
    (:mod:`fidelity.resample`; its default was chosen by calibration)."""
    if other.template_tokens and not live.template_tokens:
        # live's engine added its chat template to every prompt too: taken to be the replay's
        live = replace(live, template_tokens=other.template_tokens)
    aa_side = live if aa_from is None else aa_from
    splits = aa_splits(aa_side, seed, compared=(live.n, other.n), scheme=aa_scheme)
    metrics = [_judge(spec, live, other, splits, aa_side, replays, aa_runs) for spec in _specs(judge_outcomes)]
    metrics += _cache_sim_metrics(live, other, splits, aa_side)
    metrics += _paired_metrics(live, other, replays, own_times, judge_outcomes, aa_runs)
    if stage is not None:
        metrics += _per_request(stage, lag_bound_ms)
    order = {"lengths": 0, "cache": 1, "arrivals": 2, "sessions": 3, "outcomes": 4}
    metrics.sort(key=lambda m: order[m.group])
    required = REQUIRED + ((OUTCOMES,) if judge_outcomes else ())
    facets = judge_facets(metrics, required)
    state, reason = overall(facets, metrics, required)
    diagnosis = list(other.notes) + _cache_diagnosis(metrics, other.name, live)
    if stage is not None:
        diagnosis += _causal_diagnosis(metrics, stage, other)
    return FidelityVerdict(state=state, reason=reason, metrics=metrics, diagnosis=diagnosis, facets=facets)
