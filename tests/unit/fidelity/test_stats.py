"""The statistics fidelity stands on, against values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from fidelity import stats


def test_ks_distance_is_zero_for_one_sample_and_one_for_disjoint_ones():
    a = np.arange(100)
    assert stats.ks_distance(a, a) == 0
    assert stats.ks_distance(a, a + 1000) == 1
    # [1,2,3,4] vs [3,4,5,6]: at 2 the CDFs are 0.5 and 0
    assert stats.ks_distance([1, 2, 3, 4], [3, 4, 5, 6]) == pytest.approx(0.5)
    assert stats.ks_distance([], [1]) is None


def test_ks_distance_with_a_slack_counts_only_moves_beyond_it():
    # one value each, 0.8 ms apart: disjoint to the plain statistic, the same within a 1 ms slack
    assert stats.ks_distance([5.0], [5.0008]) == 1
    assert stats.ks_distance([5.0], [5.0008], slack=1e-3) == 0
    assert stats.ks_distance([5.0], [5.0018], slack=1e-3) == 1
    # every value moved by up to the slack, in either direction: nothing apart
    rng = np.random.default_rng(0)
    a = rng.exponential(size=500)
    assert stats.ks_distance(a, a + rng.uniform(-0.01, 0.01, size=500), slack=0.01) == 0
    # a move larger than the slack still counts: [1,2,3,4] vs [3,4,5,6], each value 2 apart, within
    # 1.5: F_a(x - 1.5) at x = 2.5 is 0.25 where F_b(2.5) is 0; within 2, nothing apart
    assert stats.ks_distance([1, 2, 3, 4], [3, 4, 5, 6], slack=1.5) == pytest.approx(0.25)
    assert stats.ks_distance([1, 2, 3, 4], [3, 4, 5, 6], slack=2) == 0
    # the same as the plain statistic when the slack is far below the gaps between values
    b = rng.exponential(size=300) * 1.3
    assert stats.ks_distance(a, b, slack=1e-12) == pytest.approx(stats.ks_distance(a, b))


def test_wasserstein_over_median_is_the_shift_over_the_median():
    a = np.arange(1, 101, dtype=float)  # median 50.5
    assert stats.wasserstein_over_median(a, a + 5) == pytest.approx(5 / 50.5)
    assert stats.wasserstein_over_median(a, a) == 0


def test_quantile_errors_and_spearman():
    a = np.arange(1, 1001, dtype=float)
    errors = stats.quantile_errors(a, a * 1.1)
    assert errors["p50"] == pytest.approx(0.1) and errors["p99"] == pytest.approx(0.1)
    x = np.arange(50, dtype=float)
    assert stats.spearman(x, x**3) == pytest.approx(1.0)
    assert stats.spearman(x, -x) == pytest.approx(-1.0)
    assert stats.spearman(x, np.ones(50)) is None
    # ties share their mean rank: [1,1,2] ranks [0.5,0.5,2] correlate perfectly with [0,0,1]
    assert stats.spearman([1, 1, 2], [0, 0, 1]) == pytest.approx(1.0)


def test_count_statistics_tell_a_poisson_stream_from_a_bursty_one():
    rng = np.random.default_rng(1)
    poisson = np.cumsum(rng.exponential(0.1, 20_000))
    # bursts: 10 s on, 10 s off, their size rising and falling slowly over the run
    bursty = np.concatenate([k * 20 + np.sort(rng.uniform(0, 10, int(200 + 150 * np.sin(k / 8)))) for k in range(100)])
    c_p, c_b = stats.window_counts(poisson, 1.0), stats.window_counts(bursty, 1.0)
    assert stats.index_of_dispersion(c_p) == pytest.approx(1.0, abs=0.1)
    assert stats.index_of_dispersion(c_b) > 5
    assert stats.interarrival_cv(poisson) == pytest.approx(1.0, abs=0.05)
    assert stats.interarrival_cv(bursty) > 1.5
    assert abs(stats.lag1_autocorrelation(c_p)) < 0.05
    assert stats.lag1_autocorrelation(c_b) > 0.6  # 10 busy seconds, then 10 quiet ones
    assert stats.peak_to_mean(c_b) > stats.peak_to_mean(c_p)


def test_window_counts_are_whole_windows_empty_ones_included():
    assert stats.window_counts(np.array([0.0, 0.5, 3.2, 4.0]), 1.0).tolist() == [2, 0, 0, 1]
