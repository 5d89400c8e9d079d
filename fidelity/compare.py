"""Does a replay match live traffic? Metrics, thresholds from A/A, and verdicts in words.

A *side* (:mod:`fidelity.sides`) is one stream of requests as it was observed: the live trace
(its arrival times, the lengths it recorded, what the live engine reported) or one replay stage
(the times its requests were actually sent, the lengths the target engine reported). The same metric functions compare
any two sides; :func:`compare_stage` compares a stage with the live rows it replayed, and
:func:`drift` two traces.

Thresholds. Each metric has a distance (0 = same). Its bound is the larger of a fixed bound
(:data:`FIXED_BOUNDS`) and ``AA_FACTOR`` (3) times the largest of the same distances between two
random halves of the live side (whole sessions to each half, seeded) over ``AA_SPLITS`` (10)
splits: a metric the live traffic itself does not pin down more tightly than that cannot fail a
replay for it. (The largest, not the mean: a few long sessions carry much of a trace's tokens and
reuse, so these distances have heavy tails.) On a live side of more than ``AA_MAX_REQUESTS``
(20,000) requests the halves are drawn from a sample of its sessions of about that size, which
overstates the noise of a larger trace; there the fixed bounds, far above its noise, decide.

Three answers. A metric *fails* when its distance is over its bound. It *passes* when the
distance is within a bound that is itself within the metric's ceiling (:data:`CEILINGS`, well
below the metric's range: a KS distance of 0.15, a relative error of 0.25, a hit-rate gap of 0.10,
...). Where the A/A noise puts the bound above the ceiling, the live side is too small to pin the
metric down, and a distance within that bound says nothing: the metric is *cannot tell*, with
the live size it would need (A/A distances shrink about as 1/sqrt(n), so about
``n x (bound / ceiling)^2`` requests, sessions or windows). A metric whose smallest detectable
change (:mod:`fidelity.power`) is over its maximum is *cannot tell* too. A stage is *unfaithful*
when a metric failed, *cannot tell* when none failed but a part of :data:`JUDGED_GROUPS` (input
lengths, output lengths, cache, arrivals) had no metric that passed, and *faithful* otherwise
(other metrics may still be cannot tell: its reason names them). Metrics whose inputs are
missing (no engine-reported cached tokens live, no recorded latencies, too few windows) are
reported as not applicable. Outcomes (TTFT / ITL / E2E) are reported but judged only with
``judge_outcomes=True``: they match live only when the target runs the live engine's config at
the live rate, and they wobble from one replay to the next by the bench's own noise (an engine
start, a neighbour, the scheduler), which live's halves cannot show. So a judged outcome also
needs a *replay A/A*: ``aa_runs`` (2) replays of the stage on the same engine and config (``replay
run / sweep --repeats 2``); its A/A distance is the larger of live's halves' and the largest
between those replays, and the bound follows from it as above. With fewer replays an outcome is
*cannot tell*, and with outcomes judged a stage needs them conclusive to be faithful.

The bound rule itself (bounds, ceilings, A/A splits, the decision and its power) is in
:mod:`fidelity.bounds`; the metrics, their groups and the verdicts are here.

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

from fidelity import cache, stats
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
    aa_splits,
    counts,
    decide,
    stated,
)
from fidelity.sides import PER_REQUEST_SLACK, TEMPLATE_MAX, Side
from replay.noise import AA_RUNS

__all__ = [
    "AA_FACTOR",
    "AA_RUNS",
    "CEILINGS",
    "FIXED_BOUNDS",
    "JUDGED_GROUPS",
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

# what a faithful verdict needs judged: (what, the prefix of its metrics' names); at least one
# metric of each, judged against the A/A halves, must pass with its bound within its ceiling and
# its detectable change within its maximum
JUDGED_GROUPS: tuple[tuple[str, str], ...] = (
    ("input lengths", "input_tokens."),
    ("output lengths", "output_tokens."),
    ("cache", "cache."),
    ("arrivals", "arrivals."),
)

# with outcomes judged, they are a part a faithful verdict needs too
OUTCOMES_GROUP = ("outcomes", "outcomes.")

# a verdict's state (CANNOT_TELL as for a metric)
FAITHFUL, UNFAITHFUL = "faithful", "unfaithful"


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


def _needs(attr: str, what: str) -> Callable[[Side, Side], str | None]:
    def check(a: Side, b: Side) -> str | None:
        for side in (a, b):
            v = getattr(side, attr)
            if v is None or not np.isfinite(np.asarray(v, dtype=np.float64)).any():
                return f"{side.name} has no {what}"
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
            _Spec("lengths", f"{side_attr}.p{q}", _quantile_error(get, q), f"{side_attr} p{q} (relative error)")
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
        _Spec(
            "arrivals",
            "arrivals.rate_correlation",
            lambda a, b: (None, None, _one_minus(stats.rate_correlation(a.times_s, b.times_s))),
            "rate over time (1 - correlation of counts over 50 slices of each run)",
        ),
        _Spec("sessions", "sessions.turns", _scalar(_turns, relative=True), "turns per session (relative difference)"),
        _Spec(
            "sessions",
            "sessions.think_time.ks",
            _two_sample(stats.ks_distance, _scaled(lambda s: s.think_s)),
            "think time: previous turn's end to the next turn (KS D, live seconds)",
            applicable=_needs("think_s", "think times (recorded durations)"),
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


def _one_minus(x: float | None) -> float | None:
    return None if x is None else 1.0 - x


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
    )


def _judge(
    spec: _Spec,
    live: Side,
    other: Side,
    splits: list[tuple[Side, Side]],
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
    aas = [a for h in splits if spec.applicable(*h) is None and (a := spec.fn(*h)[2]) is not None and not math.isnan(a)]
    aa = float(np.max(aas)) if aas else None
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


def _cache_sim_metrics(live: Side, other: Side, splits: list[tuple[Side, Side]], aa_side: Side) -> list[Metric]:
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
        pairs = [(share(a), share(b)) for a, b in splits]
        aas = [abs(hy - hx) for hx, hy in pairs if hx is not None and hy is not None]
        aa = float(np.max(aas)) if aas else None
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


def _state(ok: bool) -> str:
    return PASS if ok else FAIL


def _per_request(stage: pl.DataFrame, other: Side, lag_bound_ms: float | None = None) -> list[Metric]:
    """When the replay sent the trace's own requests: each one's prompt tokens as the engine
    counted them vs as recorded, its output tokens vs the max_tokens it asked for, and the
    runner's own send lag (its p99 within the stage's lag bound, ``lag_bound_ms``, by default the
    runner's default of 1 ms)."""
    out = []
    prompt = other.engine_prompt_all
    assert prompt is not None  # a side made of a stage (sides.replay_side) has the engine's counts
    finite = np.isfinite(prompt) & np.isfinite(other.recorded_input)
    if finite.any():
        diff = prompt[finite] - other.recorded_input[finite]
        off = (diff < -PER_REQUEST_SLACK) | (diff > TEMPLATE_MAX)
        share = float(off.mean())
        bound = FIXED_BOUNDS["lengths.prompt_tokens_per_request"]
        out.append(
            Metric(
                "lengths",
                "lengths.prompt_tokens_per_request",
                None,
                None,
                share,
                None,
                bound,
                _state(share <= bound),
                f"{off.sum()} of {finite.sum()} completed requests' prompt tokens, as the engine counted "
                f"them, are not between {PER_REQUEST_SLACK} fewer and {TEMPLATE_MAX} more (a chat template) "
                f"than the ones sent (share {share:.3g}, bound {bound:g})",
            )
        )
    sent = stage.filter(pl.col("sent_ns").is_not_null() & pl.col("release_ns").is_not_null())
    if sent.height:
        lag_ms = float(np.percentile((sent["sent_ns"] - sent["release_ns"]).to_numpy(), 99)) / 1e6
        bound = FIXED_BOUNDS["arrivals.send_lag_p99_ms"] if lag_bound_ms is None else lag_bound_ms
        out.append(
            Metric(
                "arrivals",
                "arrivals.send_lag_p99_ms",
                None,
                lag_ms,
                lag_ms,
                None,
                bound,
                _state(lag_ms <= bound),
                f"the runner's own send lag p99: {lag_ms:.3g} ms ({'within' if lag_ms <= bound else 'over'} "
                f"{bound:g} ms): the requests left when they were due",
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
    done = stage.filter((pl.col("error") == "none") & pl.col("expected_output_tokens").is_not_null())
    if done.height:
        got = done["completion_tokens"].fill_null(done["output_chunks"])
        short = int((got != done["expected_output_tokens"]).sum())
        share = short / done.height
        bound = FIXED_BOUNDS["lengths.output_vs_max_tokens"]
        out.append(
            Metric(
                "lengths",
                "lengths.output_vs_max_tokens",
                None,
                None,
                share,
                None,
                bound,
                _state(share <= bound),
                f"{short} of {done.height} completed requests' output tokens differ from the max_tokens "
                f"they asked for (share {share:.3g}, bound {bound:g})",
            )
        )
    return out


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
) -> FidelityVerdict:
    """Every metric between ``live`` and ``other``, judged against thresholds from the A/A halves
    of ``aa_from`` (default: live); ``stage`` (the replay's rows) adds the per-request checks.
    ``replays``: the other replays of ``other``'s stage (same engine, config and load), whose
    distances from it set the outcomes' replay A/A (``aa_runs`` replays in all are needed)."""
    if other.template_tokens and not live.template_tokens:
        # live's engine added its chat template to every prompt too: taken to be the replay's
        live = replace(live, template_tokens=other.template_tokens)
    aa_side = live if aa_from is None else aa_from
    splits = aa_splits(aa_side, seed)
    metrics = [_judge(spec, live, other, splits, aa_side, replays, aa_runs) for spec in _specs(judge_outcomes)]
    metrics += _cache_sim_metrics(live, other, splits, aa_side)
    if stage is not None:
        metrics += _per_request(stage, other, lag_bound_ms)
    order = {"lengths": 0, "cache": 1, "arrivals": 2, "sessions": 3, "outcomes": 4}
    metrics.sort(key=lambda m: order[m.group])
    state, reason = _overall(metrics, JUDGED_GROUPS + ((OUTCOMES_GROUP,) if judge_outcomes else ()))
    diagnosis = list(other.notes) + _cache_diagnosis(metrics, other.name, live)
    if stage is not None:
        diagnosis += _causal_diagnosis(metrics, stage, other)
    return FidelityVerdict(state=state, reason=reason, metrics=metrics, diagnosis=diagnosis)


def _overall(metrics: list[Metric], groups: tuple[tuple[str, str], ...] = JUDGED_GROUPS) -> tuple[str, str]:
    """UNFAITHFUL when a metric failed; CANNOT_TELL when none did but a part of ``groups`` had
    no metric that passed conclusively; else FAITHFUL. With the reason in words (naming the
    metrics that could not tell either way)."""
    failed = [m for m in metrics if m.state == FAIL]
    if failed:
        return UNFAITHFUL, "unfaithful: " + "; ".join(m.reason for m in failed)
    undecided = [m for m in metrics if m.state == CANNOT_TELL]
    judged = [m for m in metrics if m.ceiling is not None]  # against the A/A halves
    missing = [what for what, prefix in groups if not any(m.name.startswith(prefix) and m.state == PASS for m in judged)]
    if missing:
        why = []
        for what, prefix in groups:
            if what in missing:
                cannot = [m for m in undecided if m.name.startswith(prefix)]
                why.append(
                    f"{what}: " + ("; ".join(f"{m.name} needs {m.needs}" for m in cannot) if cannot else "no metric applies")
                )
        return CANNOT_TELL, (
            "cannot tell: nothing failed, but " + ", ".join(missing) + " could not be judged on "
            "this live side (" + " | ".join(why) + ")"
        )
    passed = sum(m.state == PASS for m in metrics)
    also = f"; {len(undecided)} more cannot tell on this live side ({', '.join(m.name for m in undecided)})" if undecided else ""
    return FAITHFUL, f"faithful: all {passed} conclusive metrics within their bounds{also}"
