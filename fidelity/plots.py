"""The fidelity report's plots, drawn as every report here draws (:mod:`replay.figures`).

Every plot compares the live side with the replay side of one stage (:class:`StageFidelity`
keeps both), except the sweep's verdict chart. Plot work is bounded on any trace size: a CDF or
survival curve draws at most :data:`MAX_POINTS` points per series (the exact empirical CDF at
evenly spaced ranks) and a QQ plot :data:`QQ_POINTS` quantiles. The values behind them are
the metrics' own, computed once per side (the prefix-cache simulations are memoized on the
side: :meth:`Side.cache_share`, :meth:`Side.reuse_s`).
"""

from __future__ import annotations

import math

import numpy as np

from fidelity import cache
from fidelity.compare import CANNOT_TELL, FAIL, NOT_JUDGED, PASS, FidelityVerdict
from fidelity.facets import FACETS
from fidelity.sides import Side
from fidelity.judge import FidelityReport, StageFidelity
from replay.figures import Plot, empty, literal, new_figure, png_of

__all__ = [
    "MAX_POINTS",
    "QQ_POINTS",
    "FACET_NAMES",
    "ecdf_points",
    "counts_over_time",
    "stage_plots",
    "verdict_chart",
    "facet_verdicts",
]

MAX_POINTS = 20_000
QQ_POINTS = 199
COUNT_BINS = 120  # windows of the counts-over-time plot
# capacities of the cache-hit curve, as shares of live's distinct blocks: the metrics' own, whose
# simulations the sides have already run (another capacity costs one pass over every block of
# each side, ~2 s at 1M requests)
LRU_SHARES = cache.CAPACITY_SHARES
FACET_NAMES = tuple(name for name, _ in FACETS)

LIVE, REPLAY = "#1f77b4", "#d62728"
STYLE = {LIVE: "-", REPLAY: "--"}  # the replay dashed over live: where they agree both show
# colours of a group's state in the verdict chart
STATE_COLOURS = {PASS: "#4caf50", FAIL: "#e53935", CANNOT_TELL: "#ffb300", NOT_JUDGED: "#bdbdbd"}


# --- data ---------------------------------------------------------------------------------------


def _clean(values) -> np.ndarray:
    if values is None:
        return np.zeros(0)
    a = np.asarray(values, dtype=np.float64)
    return a[np.isfinite(a)]


def ecdf_points(values, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF of ``values`` (NaN dropped) as (x, F(x)) at no more than ``max_points``
    evenly spaced ranks, the smallest and the largest value included."""
    v = np.sort(_clean(values))
    n = len(v)
    if n == 0:
        return np.zeros(0), np.zeros(0)
    idx = np.arange(n) if n <= max_points else np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))
    return v[idx], (idx + 1) / n


def facet_verdicts(verdict: FidelityVerdict) -> dict[str, tuple[str, int, str]]:
    """Per facet (:mod:`fidelity.facets`): (state, metrics failed, the metric that decided a
    pass); NOT_JUDGED for a facet no metric of the verdict falls in."""
    by = {f.name: f for f in verdict.facets}
    out = {}
    for name in FACET_NAMES:
        f = by.get(name)
        if f is None:
            out[name] = (NOT_JUDGED, 0, "")
        else:
            out[name] = (f.state, len(f.decided_by) if f.state == FAIL else 0, f.decided_by[0] if f.state == PASS else "")
    return out


# --- drawing ------------------------------------------------------------------------------------


def _log_if_wide(ax, *arrays: np.ndarray) -> None:
    v = np.concatenate([a for a in arrays if len(a)]) if any(len(a) for a in arrays) else np.zeros(0)
    v = v[v > 0]
    if len(v) and len(v) == sum(len(a) for a in arrays) and v.max() / v.min() > 100:
        ax.set_xscale("log")
    else:
        ax.ticklabel_format(axis="x", useOffset=False)  # plain values, not "+2e-2" beside the axis


def _series(live: Side, replay: Side) -> list[tuple[str, str, np.ndarray, np.ndarray]]:
    """(label, unit, live values, replay values) of every distribution plotted, where one side has any."""

    def scaled(side: Side, attr: str) -> np.ndarray:
        return _clean(getattr(side, attr)) * side.time_scale

    rows = [
        ("input tokens", "tokens", _clean(live.input_tokens), _clean(replay.input_tokens)),
        ("output tokens", "tokens", _clean(live.output_tokens), _clean(replay.output_tokens)),
        ("prefix reuse time", "live s", live.reuse_s(), replay.reuse_s()),
        ("think time", "live s", scaled(live, "think_s"), scaled(replay, "think_s")),
        ("TTFT", "s", _clean(live.ttft_s), _clean(replay.ttft_s)),
        ("E2E", "s", _clean(live.e2e_s), _clean(replay.e2e_s)),
    ]
    return [r for r in rows if len(r[2]) or len(r[3])]


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")


def cdf_plot(live: Side, replay: Side) -> Plot:
    rows = _series(live, replay)
    ncols = 3
    fig, axes = new_figure(ncols, max(1, math.ceil(len(rows) / ncols)))
    for ax, (label, unit, a, b) in zip(axes, rows):
        for side, values, color in ((live, a, LIVE), (replay, b, REPLAY)):
            if len(values):
                x, y = ecdf_points(values)
                ax.step(
                    x, y, where="post", color=color, linestyle=STYLE[color], label=literal(f"{side.name} (n={len(values):,})")
                )
        _log_if_wide(ax, a, b)
        ax.set_xlabel(literal(f"{label} ({unit})"))
        ax.set_ylabel("CDF")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        _legend(ax)
    for ax in axes[len(rows) :]:
        ax.set_visible(False)
    names = ", ".join(r[0] for r in rows)
    return Plot(
        "cdf",
        "Distributions (CDF)",
        f"Empirical CDFs of {names}; times in live seconds are the replay's multiplied by its pace ({replay.time_scale:.3g}x).",
        png_of(fig),
    )


def qq_plot(live: Side, replay: Side) -> Plot:
    fig, axes = new_figure(2, width=3.6, height=3.4)
    p = np.linspace(0.005, 0.995, QQ_POINTS)
    for ax, label, attr in zip(axes, ("input tokens", "output tokens"), ("input_tokens", "output_tokens")):
        a, b = _clean(getattr(live, attr)), _clean(getattr(replay, attr))
        if not len(a) or not len(b):
            empty(ax, f"{label}: one side has none")
            continue
        qa, qb = np.quantile(a, p), np.quantile(b, p)
        ax.plot(qa, qb, ".", color=REPLAY, markersize=3)
        lo, hi = min(qa.min(), qb.min()), max(qa.max(), qb.max())
        ax.plot([lo, hi], [lo, hi], color="#555555", linewidth=0.8, label="y = x")
        ax.set_xlabel(literal(f"{live.name} {label}"))
        ax.set_ylabel(literal(f"{replay.name} {label}"))
        ax.set_title(literal(label), fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return Plot(
        "qq",
        "QQ plots of lengths",
        f"{QQ_POINTS} quantiles (0.5% to 99.5%) of the replay against live's; points on the diagonal mean the same distribution.",
        png_of(fig),
    )


def counts_over_time(live: Side, replay: Side, bins: int = COUNT_BINS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(window edges in live seconds, live's arrivals per window, the replay's sends per window):
    each side from its first time, the replay's times multiplied by its ``time_scale`` so a stage
    run k times faster lands on live's time axis. Empty arrays when both spans are 0."""
    t_live = live.times_s - live.times_s.min() if live.n else np.zeros(0)
    t_rep = (replay.times_s - replay.times_s.min()) * replay.time_scale if replay.n else np.zeros(0)
    span = max([float(t.max()) for t in (t_live, t_rep) if len(t)] or [0.0])
    if span <= 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    edges = np.linspace(0.0, span, bins + 1)
    edges[-1] = np.nextafter(span, np.inf)  # the last time falls in the last window
    return edges, np.histogram(t_live, bins=edges)[0], np.histogram(t_rep, bins=edges)[0]


def counts_plot(live: Side, replay: Side) -> Plot:
    fig, (ax,) = new_figure(1, width=8.0, height=3.0)
    edges, a, b = counts_over_time(live, replay)
    window = float(edges[1] - edges[0]) if len(edges) > 1 else 0.0
    if not len(edges):
        empty(ax, "fewer than two distinct send times")
    else:
        for side, counts, color in ((live, a, LIVE), (replay, b, REPLAY)):
            ax.step(edges[:-1], counts, where="post", color=color, linestyle=STYLE[color], label=literal(side.name))
        ax.set_xlabel("seconds on live's time axis")
        ax.set_ylabel(f"requests per {window:.3g} s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return Plot(
        "counts",
        "Counts over time",
        f"Requests per {window:.3g} s window of live time: live's arrivals and "
        f"the replay's sends, its times multiplied by its pace ({replay.time_scale:.3g}x).",
        png_of(fig),
    )


def _metric_value(verdict: FidelityVerdict | None, name: str, attr: str) -> float | None:
    if verdict is None:
        return None
    for m in verdict.metrics:
        if m.name == name:
            return getattr(m, attr)
    return None


def cache_plot(live: Side, replay: Side, verdict: FidelityVerdict | None = None) -> Plot:
    fig, (ax,) = new_figure(1, width=6.0, height=3.4)
    named = cache.capacities_for(live.hashes, (*LRU_SHARES, 1.0))
    distinct = named.pop("lru_1")  # all of live's distinct blocks (at least 1)
    if not int(live.hashes.list.len().fill_null(0).sum()):
        empty(ax, "no block hashes")
    else:
        capacities = sorted({c for c in named.values() if c})
        for side, color in ((live, LIVE), (replay, REPLAY)):
            shares = [side.cache_share(c) for c in capacities]
            if all(s is not None for s in shares):
                ax.plot(capacities, shares, "o-", color=color, label=literal(f"{side.name}: LRU simulation"))
            unbounded = side.cache_share(0)
            if unbounded is not None:
                ax.axhline(
                    unbounded, color=color, linestyle="--", linewidth=1, label=literal(f"{side.name}: unbounded simulation")
                )
        for attr, side, color in (("live", live, LIVE), ("replay", replay, REPLAY)):
            engine = _metric_value(verdict, "cache.engine_hit_rate", attr)
            if engine is not None:
                ax.axhline(engine, color=color, linestyle=":", linewidth=2, label=literal(f"{side.name}: engine-reported"))
        ax.set_xscale("log")
        ax.set_xlabel(f"LRU capacity (blocks; live has {distinct:,} distinct)")
        ax.set_ylabel("share of prompt tokens hit")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="lower right")
    return Plot(
        "cache",
        "Cache-hit curves",
        "Simulated prefix-cache hit share of the prompt tokens against the LRU "
        "capacity (from the block hashes, in the order each side sent them), the unbounded cache (dashed) "
        "and the hit rate the engines reported (dotted), where known.",
        png_of(fig),
    )


def survival_plot(live: Side, replay: Side) -> Plot | None:
    rows = [
        (label, _clean(getattr(live, attr)), _clean(getattr(replay, attr)))
        for label, attr in (("TTFT", "ttft_s"), ("E2E", "e2e_s"))
    ]
    rows = [r for r in rows if len(r[1]) or len(r[2])]
    if not rows:
        return None
    fig, axes = new_figure(len(rows), width=4.0, height=3.0)
    for ax, (label, a, b) in zip(axes, rows):
        for side, values, color in ((live, a, LIVE), (replay, b, REPLAY)):
            if len(values):
                x, f = ecdf_points(values)
                keep = f < 1
                ax.step(
                    x[keep],
                    1 - f[keep],
                    where="post",
                    color=color,
                    linestyle=STYLE[color],
                    label=literal(f"{side.name} (n={len(values):,})"),
                )
        ax.set_yscale("log")
        ax.set_xlabel(f"{label} (s)")
        ax.set_ylabel("P(X > x)")
        ax.grid(alpha=0.3)
        _legend(ax)
    return Plot("survival", "Survival curves", "The share of requests slower than x (log scale: the tail).", png_of(fig))


def stage_plots(stage: StageFidelity) -> list[Plot]:
    """Every plot of one stage (none when it carries no sides, e.g. read back from JSON)."""
    live, replay = stage.live_side, stage.replay_side
    if live is None or replay is None:
        return []
    plots = [cdf_plot(live, replay), qq_plot(live, replay), counts_plot(live, replay), cache_plot(live, replay, stage.verdict)]
    survival = survival_plot(live, replay)
    return plots + ([survival] if survival is not None else [])


def _stage_label(stage: StageFidelity) -> str:
    rate = "as recorded" if stage.requested_rate is None else f"{stage.requested_rate:g} req/s"
    return f"{stage.file} ({rate})"


def verdict_chart(report: FidelityReport) -> Plot:
    """Stages x facets: pass, FAIL, cannot tell, or n/a (nothing judged)."""
    from matplotlib.colors import ListedColormap

    n = len(report.stages)
    fig, (ax,) = new_figure(1, width=2.0 + 1.4 * len(FACET_NAMES), height=0.9 + 0.45 * n)
    grid = np.zeros((n, len(FACET_NAMES)))
    for i, s in enumerate(report.stages):
        for j, (state, failed, decided_by) in enumerate(facet_verdicts(s.verdict).values()):
            grid[i, j] = list(STATE_COLOURS).index(state)
            word = {FAIL: f"FAIL ({failed})", PASS: "pass" + ("\npaired" if "paired" in decided_by else "")}.get(state, state)
            ax.text(j, i, word, ha="center", va="center", fontsize="small")
    ax.imshow(grid, cmap=ListedColormap(list(STATE_COLOURS.values())), vmin=0, vmax=len(STATE_COLOURS) - 1, aspect="auto")
    ax.set_xticks(range(len(FACET_NAMES)), FACET_NAMES)
    ax.set_yticks(range(n), [literal(_stage_label(s)) for s in report.stages])
    ax.tick_params(length=0)
    ax.xaxis.tick_top()
    return Plot(
        "verdicts",
        "Verdicts per stage",
        "Each stage's verdict per facet: pass (paired: decided request by request), FAIL (the metrics that "
        "failed), cannot tell (no metric of the facet could judge it on this live side), or n/a when none "
        "applied.",
        png_of(fig),
    )
