"""The statistics fidelity compares: distances between two samples, and the shape of a stream of
arrival times. Everything is numpy over whole columns (no per-row Python loops), so a
million-request trace costs seconds. The counting statistics (whole windows, index of
dispersion, lag-1 autocorrelation, peak-to-mean) are ``replay inspect``'s own, re-exported.
"""

from __future__ import annotations

import math

import numpy as np

from replay.traffic import index_of_dispersion, lag1_autocorrelation, peak_to_mean, window_counts

__all__ = [
    "QUANTILES",
    "ks_distance",
    "wasserstein_over_median",
    "quantile_errors",
    "spearman",
    "window_counts",
    "index_of_dispersion",
    "lag1_autocorrelation",
    "peak_to_mean",
    "interarrival_cv",
    "relative_difference",
]

QUANTILES = (50, 90, 99)


def _clean(x) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    return a[np.isfinite(a)]


def ks_distance(a, b, slack: float = 0.0) -> float | None:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical CDFs
    (0 = same sample distribution, 1 = disjoint). None when either sample is empty.

    With ``slack`` > 0, a value may move by up to ``slack`` before it counts as apart: the gap is
    the larger of ``F_a(x - slack) - F_b(x)`` and ``F_b(x - slack) - F_a(x)`` over x (0 when every
    value of one sample can be paired with one of the other within ``slack``; the plain statistic
    at 0). For samples of times measured to within ``slack``: a one-sample pair 0.4 ms apart with
    a 1 ms slack is 0, where the plain statistic is 1."""
    a, b = np.sort(_clean(a)), np.sort(_clean(b))
    if not len(a) or not len(b):
        return None
    if slack <= 0:
        points = np.concatenate([a, b])
        fa = np.searchsorted(a, points, side="right") / len(a)
        fb = np.searchsorted(b, points, side="right") / len(b)
        return float(np.max(np.abs(fa - fb)))

    def ahead(x: np.ndarray, y: np.ndarray) -> float:
        # sup over t of F_x(t - slack) - F_y(t): reached where F_x(t - slack) steps up, t = x_i + slack
        fx = np.searchsorted(x, x, side="right") / len(x)
        fy = np.searchsorted(y, x + slack, side="right") / len(y)
        return float(np.max(fx - fy))

    return max(0.0, ahead(a, b), ahead(b, a))


def wasserstein_over_median(a, b) -> float | None:
    """The 1-Wasserstein distance between the samples (the area between their CDFs, in the
    values' unit), divided by the median of ``a`` (the reference), so it reads as a share of a
    typical value. None when a sample is empty or ``a``'s median is 0."""
    a, b = np.sort(_clean(a)), np.sort(_clean(b))
    if not len(a) or not len(b):
        return None
    median = float(np.median(a))
    if median == 0:
        return None
    points = np.concatenate([a, b])
    points.sort()
    widths = np.diff(points)
    fa = np.searchsorted(a, points[:-1], side="right") / len(a)
    fb = np.searchsorted(b, points[:-1], side="right") / len(b)
    return float(np.sum(np.abs(fa - fb) * widths)) / abs(median)


def quantile_errors(a, b, quantiles=QUANTILES) -> dict[str, float | None]:
    """|q_b - q_a| / |q_a| at each quantile (``a`` is the reference); None where q_a is 0."""
    a, b = _clean(a), _clean(b)
    if not len(a) or not len(b):
        return {f"p{q}": None for q in quantiles}
    qa, qb = np.percentile(a, quantiles), np.percentile(b, quantiles)
    return {f"p{q}": (float(abs(y - x) / abs(x)) if x != 0 else None) for q, x, y in zip(quantiles, qa, qb)}


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions)."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    ranks = np.empty(len(x), dtype=np.float64)
    starts = np.flatnonzero(np.concatenate([[True], sorted_x[1:] != sorted_x[:-1]]))
    ends = np.concatenate([starts[1:], [len(x)]])
    mean_rank = (starts + ends - 1) / 2.0
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(x, y) -> float | None:
    """Spearman's rank correlation of paired samples (None with fewer than 3 pairs or a constant side)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3:
        return None
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def interarrival_cv(times_s) -> float | None:
    """Coefficient of variation of the gaps between consecutive arrivals (1 for Poisson)."""
    gaps = np.diff(np.sort(_clean(times_s)))
    if len(gaps) < 2 or gaps.mean() == 0:
        return None
    return float(gaps.std() / gaps.mean())


def relative_difference(reference: float | None, value: float | None) -> float | None:
    """|value - reference| / |reference| (None when either is missing or the reference is 0)."""
    if reference is None or value is None or reference == 0 or math.isnan(reference) or math.isnan(value):
        return None
    return abs(value - reference) / abs(reference)
