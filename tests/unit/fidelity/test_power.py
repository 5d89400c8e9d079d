"""Verdicts with known answers, at two live sizes: each metric's stated detectable change is the
change it catches. A replay off by a bit more than it (x1.3) fails that metric; one off by well
less (x0.3) does not. A small live side gives "cannot tell", never "faithful"."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from fidelity import compare_stage
from fidelity.compare import CANNOT_TELL, FAIL, FAITHFUL, UNFAITHFUL
from fidelity.power import burstier, cv_change
from fidelity.sides import live_side
from tests.unit.fidelity.test_compare import live_trace, stage_of

ABOVE, BELOW = 1.3, 0.3


@pytest.fixture(scope="module", params=[60, 2000], ids=["60 requests", "2000 requests"])
def case(request):
    live = live_trace(request.param, seed=11)
    faithful = compare_stage(live, stage_of(live))
    return live, {m.name: m for m in faithful.verdict.metrics}, faithful


def metric(live, stage: pl.DataFrame, name: str):
    return next(m for m in compare_stage(live, stage).verdict.metrics if m.name == name)


@pytest.mark.parametrize("name", ["output_tokens.p50", "output_tokens.ks", "output_tokens.wasserstein"])
def test_output_lengths_off_by_more_than_the_detectable_change_fail(case, name):
    live, judged, _ = case
    found = judged[name].detectable
    if found is None:
        pytest.skip(f"{name} catches no change up to x5 here: {judged[name].detects}")
    for factor, fails in ((ABOVE, True), (BELOW, False)):
        stage = stage_of(live).with_columns(completion_tokens=pl.col("completion_tokens") * (1 + factor * found))
        m = metric(live, stage, name)
        assert (m.state == FAIL) is fails, (factor, found, m.reason)


@pytest.mark.parametrize("name", ["input_tokens.p50", "input_tokens.ks", "input_tokens.wasserstein", "input_tokens.per_request"])
def test_input_lengths_off_by_more_than_the_detectable_change_fail(case, name):
    """The engine counts a template of 9 tokens a prompt beside the prompts, longer or shorter
    by the factor: the template is taken out, the change is caught above the detectable change."""
    live, judged, _ = case
    found = judged[name].detectable
    if found is None:
        pytest.skip(f"{name} catches no change up to x5 here: {judged[name].detects}")
    for factor, fails in ((ABOVE, True), (BELOW, False)):
        m = metric(live, stage_of(live, prompt_scale=1 + factor * found), name)
        assert (m.state == FAIL) is fails, (factor, found, m.reason)


def test_arrivals_burstier_than_the_detectable_change_fail(case):
    live, judged, _ = case
    name = "arrivals.interarrival_cv"
    found = judged[name].detectable
    if found is None:
        pytest.skip(f"{name} catches no change up to its limit here: {judged[name].detects}")
    side = live_side(live.df, live.meta.block_size_tokens)
    arrival = live.df["arrival_us"].to_numpy() / 1e6
    assert np.all(np.diff(arrival) >= 0)  # the stage's rows are in live's order
    for factor, fails in ((ABOVE, True), (BELOW, False)):
        lo, hi = 0.0, 4.0  # the exponent that makes the CV change factor x found
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if cv_change(side, mid) < factor * found else (lo, mid)
        sent = burstier(side, hi).times_s
        m = metric(live, stage_of(live, sent_s=sent - sent[0]), name)
        assert (m.state == FAIL) is fails, (factor, found, m.reason)


def test_engine_hit_rate_lower_than_the_detectable_change_fails(case):
    live, judged, _ = case
    name = "cache.engine_hit_rate"
    found, rate = judged[name].detectable, judged[name].live
    assert found == pytest.approx(judged[name].bound) and rate > 0
    cached = live.df["cached_tokens"].to_numpy()
    for factor, fails in ((ABOVE, True), (BELOW, False)):
        keep = 1 - factor * found / rate
        m = metric(live, stage_of(live, cached=np.round(cached * keep).astype(np.int64)), name)
        assert (m.state == FAIL) is fails, (factor, found, m.reason)


def test_a_faithful_replay_of_a_small_live_side_cannot_tell_and_says_what_it_needs(case):
    live, judged, faithful = case
    n = live.df.height
    # 6,000 requests of this traffic are faithful (test_compare); fewer may not be conclusive
    assert faithful.verdict.state in (FAITHFUL, CANNOT_TELL), faithful.verdict.reason
    if n == 60:
        assert faithful.verdict.state == CANNOT_TELL
        assert "could not be judged" in faithful.verdict.reason and "needs about" in faithful.verdict.reason
    # a metric that cannot tell says how much live traffic would pin it down
    for m in faithful.verdict.undecided:
        assert m.needs.startswith("about ") and f"(has {n:,})" in m.needs or "live sessions" in m.needs or "windows" in m.needs, (
            m.needs
        )


def test_doubled_outputs_are_never_faithful(case):
    live, _, _ = case
    doubled = compare_stage(live, stage_of(live).with_columns(completion_tokens=pl.col("completion_tokens") * 2))
    assert doubled.verdict.state != FAITHFUL, doubled.verdict.reason
    if live.df.height >= 2000:
        assert doubled.verdict.state == UNFAITHFUL
        assert {"output_tokens.ks", "output_tokens.p50"} <= {m.name for m in doubled.verdict.failed}


def test_a_hit_rate_under_the_bound_is_judged_on_gains_and_its_loss_is_bounded_by_live():
    from fidelity.bounds import decide

    t = live_trace(200, seed=3)
    live = live_side(t.df, t.meta.block_size_tokens)
    # live hits 3% in this simulated cache: no loss can reach the bound of 10 points (every loss
    # that can happen is under it), and a replay that invents 10 points of reuse is caught
    low = decide("cache.offered_reuse.lru_0.01", 0.0, 0.0, live, live_value=0.03)
    assert low.state == "pass" and low.detects == "hit rate 10 points, as a gain (live has only 3 points to lose)"
    gained = decide("cache.offered_reuse.lru_0.01", 0.11, 0.0, live, live_value=0.03)
    assert gained.state == "fail"
    high = decide("cache.offered_reuse.lru_0.01", 0.0, 0.0, live, live_value=0.4)
    assert high.state == "pass" and high.detects == "hit rate 10 points"
    # a bound over the stated maximum (10 points) still cannot tell, whatever live's hit rate
    noisy = decide("cache.offered_reuse.lru_0.01", 0.0, 0.05, live, live_value=0.03)
    assert noisy.state == "cannot tell", noisy
