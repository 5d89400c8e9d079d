"""The within-tolerance rule of the paired tests (fidelity.paired): its bounds against known
values, the design effect of misses clustered in sessions, and the bursts a send may spread in."""

from __future__ import annotations

import numpy as np
import pytest

from fidelity.paired import MISS_SHARE, agreement, catchable_share, design_effect, needed_pairs, neighbour_gaps, share_bounds


@pytest.mark.parametrize(
    ("misses", "n", "upper"),
    # one-sided 95% Clopper-Pearson upper bounds (Hanley & Lippman-Hand's "rule of three" at 0)
    [(0, 80, 0.0368), (1, 80, 0.0578), (2, 80, 0.0766), (0, 300, 0.00994), (0, 1500, 0.00200)],
)
def test_the_upper_bound_on_the_share_of_misses_is_clopper_pearson_s(misses, n, upper):
    assert share_bounds(misses, n)[1] == pytest.approx(upper, abs=2e-4)


def test_a_paired_test_needs_59_requests_without_a_miss_to_vouch_at_5_percent():
    assert needed_pairs(0.0, MISS_SHARE) == 59
    assert share_bounds(0, 58)[1] >= MISS_SHARE > share_bounds(0, 59)[1]
    # at a share of misses of 5% or more no number of requests would do
    assert needed_pairs(0.05, MISS_SHARE) is None
    # a change to every request of 60 fails; to few of them does not
    assert catchable_share(60, MISS_SHARE) < 0.15 and share_bounds(60, 60)[0] > MISS_SHARE
    assert share_bounds(1, 60)[0] < MISS_SHARE


def test_misses_clustered_in_sessions_weigh_less_than_as_many_scattered_ones():
    sessions = np.repeat(np.arange(100), 10)  # 100 sessions of 10 requests
    clustered = np.zeros(1000, bool)
    clustered[:30] = True  # every turn of 3 sessions
    scattered = np.zeros(1000, bool)
    scattered[::33] = True  # about one turn in each of 30 sessions
    assert design_effect(clustered, sessions) == pytest.approx(10, rel=0.05)
    assert design_effect(scattered, sessions) == pytest.approx(1.0, abs=0.05)
    # 30 misses in 3 sessions bound the share more loosely than 30 spread over 30 sessions
    assert agreement(clustered, 0, sessions).upper > 1.5 * agreement(scattered, 0, sessions).upper
    # no miss at all (or every request missing): nothing to estimate the clustering from
    assert design_effect(np.zeros(1000, bool), sessions) == 1.0
    assert design_effect(np.ones(1000, bool), sessions) == 1.0


def test_requests_within_live_s_resolution_are_one_burst_with_its_gaps():
    t = np.array([0.0, 0.0, 0.0005, 0.0015, 1.0, 1.0002, 3.0])
    gaps = neighbour_gaps(t, 0.001)
    # the first three are one burst 1 ms from the next (0.0015); that one is 0.9985 s from the
    # burst at 1 s; which is 1.9998 s from the last
    assert gaps.tolist() == pytest.approx([0.001, 0.001, 0.001, 0.001, 0.9985, 0.9985, 1.9998])
    # a burst spans at most the resolution from its first arrival, however dense the stream
    dense = np.arange(0, 0.01, 0.0004)
    assert np.all(neighbour_gaps(dense, 0.001) < 0.001)
