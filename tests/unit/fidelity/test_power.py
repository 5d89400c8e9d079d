"""Verdicts with known answers, at two live sizes: the smallest change a facet (or a metric)
states it catches is the change it catches. A replay off by a bit more than it (x1.3) fails;
one off by well less (x0.3) does not. A replay of live's own requests is judged request by
request (paired tests) at any size; a comparison that cannot pair them falls back to the
distribution tests and says "cannot tell" on a small live side, never "faithful"."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from fidelity import compare_stage
from fidelity.compare import CANNOT_TELL, FAIL, FAITHFUL, PASS, UNFAITHFUL, compare_sides
from fidelity.power import burstier, cv_change
from fidelity.sides import live_side
from tests.unit.fidelity.test_compare import live_trace, stage_of

ABOVE, BELOW = 1.3, 0.3


@pytest.fixture(scope="module", params=[60, 2000], ids=["60 requests", "2000 requests"])
def case(request):
    live = live_trace(request.param, seed=11)
    faithful = compare_stage(live, stage_of(live))
    return live, {m.name: m for m in faithful.verdict.metrics}, faithful


@pytest.fixture(scope="module")
def large():
    live = live_trace(2000, seed=11)
    return live, {m.name: m for m in compare_stage(live, stage_of(live)).verdict.metrics}


def metric(live, stage: pl.DataFrame, name: str):
    return next(m for m in compare_stage(live, stage).verdict.metrics if m.name == name)


def facet(result, name: str):
    return next(f for f in result.verdict.facets if f.name == name)


def decider(faithful, name: str):
    """The metric that decided facet ``name`` of the faithful replay, and the change it catches."""
    f = facet(faithful, name)
    assert f.state == PASS, f.reason
    m = next(m for m in faithful.verdict.metrics if m.name == f.decided_by[0])
    assert m.detectable is not None, (f.reason, m.reason)
    return m


def cv_exponent(side, target: float) -> float:
    """The exponent of :func:`burstier` that changes ``side``'s interarrival CV by ``target``."""
    lo, hi = 0.0, 4.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cv_change(side, mid) < target else (lo, mid)
    return hi


def test_output_lengths_off_by_more_than_the_facet_catches_fail(case):
    live, _, faithful = case
    best = decider(faithful, "output lengths")
    assert best.paired, best.name  # a replay of live's own requests is judged request by request
    for factor, fails in ((ABOVE, True), (BELOW, False)):
        stage = stage_of(live).with_columns(completion_tokens=pl.col("completion_tokens") * (1 + factor * best.detectable))
        got = facet(compare_stage(live, stage), "output lengths")
        assert (got.state == FAIL) is fails, (factor, best.detectable, got.reason)


def test_input_lengths_off_by_more_than_the_facet_catches_fail(case):
    """The engine counts a template of 9 tokens a prompt beside the prompts, longer or shorter
    by the factor: the template is taken out, the change is caught above the detectable change."""
    live, _, faithful = case
    best = decider(faithful, "input lengths")
    assert best.paired, best.name
    for factor, fails in ((ABOVE, True), (BELOW, False)):
        got = facet(compare_stage(live, stage_of(live, prompt_scale=1 + factor * best.detectable)), "input lengths")
        assert (got.state == FAIL) is fails, (factor, best.detectable, got.reason)


def test_arrivals_burstier_than_the_facet_catches_fail(case):
    live, _, faithful = case
    best = decider(faithful, "arrivals")
    assert best.name == "arrivals.paired_offsets"
    side = live_side(live.df, live.meta.block_size_tokens)
    for factor, fails in ((ABOVE, True), (BELOW, False)):
        sent = burstier(side, cv_exponent(side, factor * best.detectable)).times_s
        got = facet(compare_stage(live, stage_of(live, sent_s=sent - sent[0])), "arrivals")
        assert (got.state == FAIL) is fails, (factor, best.detectable, got.reason)


@pytest.mark.parametrize("name", ["output_tokens.p50", "output_tokens.ks", "output_tokens.wasserstein"])
def test_output_length_distributions_off_by_more_than_their_detectable_change_fail(large, name):
    live, judged = large
    found = judged[name].detectable
    assert found is not None, judged[name].reason  # 2,000 live requests pin these down
    for factor, fails in ((ABOVE, True), (BELOW, False)):
        stage = stage_of(live).with_columns(completion_tokens=pl.col("completion_tokens") * (1 + factor * found))
        m = metric(live, stage, name)
        assert (m.state == FAIL) is fails, (factor, found, m.reason)


@pytest.mark.parametrize("name", ["input_tokens.p50", "input_tokens.ks", "input_tokens.wasserstein", "input_tokens.per_request"])
def test_input_length_distributions_off_by_more_than_their_detectable_change_fail(large, name):
    live, judged = large
    found = judged[name].detectable
    assert found is not None, judged[name].reason
    for factor, fails in ((ABOVE, True), (BELOW, False)):
        m = metric(live, stage_of(live, prompt_scale=1 + factor * found), name)
        assert (m.state == FAIL) is fails, (factor, found, m.reason)


def test_interarrival_cv_off_by_more_than_its_detectable_change_fails(large):
    live, judged = large
    name = "arrivals.interarrival_cv"
    found = judged[name].detectable
    assert found is not None, judged[name].reason
    side = live_side(live.df, live.meta.block_size_tokens)
    for factor, fails in ((ABOVE, True), (BELOW, False)):
        sent = burstier(side, cv_exponent(side, factor * found)).times_s
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


def test_a_replay_of_live_s_own_requests_is_faithful_at_any_size_where_distributions_cannot_tell(case):
    live, judged, faithful = case
    n = live.df.height
    assert faithful.verdict.state == FAITHFUL, faithful.verdict.reason
    for name in ("input lengths", "output lengths", "cache", "arrivals"):
        assert facet(faithful, name).decided_by[0].endswith(".paired") or "paired" in facet(faithful, name).decided_by[0]
    # a distribution metric that cannot tell says how much live traffic would pin it down
    for m in faithful.verdict.undecided:
        assert m.needs.startswith("about ") and f"(has {n:,})" in m.needs or "live sessions" in m.needs or "windows" in m.needs, (
            m.needs
        )
    if n == 60:  # 60 live requests cannot pin the output length distribution down
        assert judged["output_tokens.ks"].state == CANNOT_TELL


def test_without_pairs_a_small_live_side_cannot_tell_and_says_what_it_needs(case):
    """The same replay with its request ids renamed (two traces of other requests): no pairs,
    so the distribution tests judge it, and 60 requests are too few for them."""
    live, _, faithful = case
    other = faithful.replay_side
    renamed = compare_sides(faithful.live_side, replace(other, ids=np.char.add("x", other.ids.astype(str))))
    paired = {m.name: m for m in renamed.metrics if m.paired}
    assert all(m.state == "n/a" and "not a replay of live's own requests" in m.reason for m in paired.values())
    if live.df.height == 60:
        assert renamed.state == CANNOT_TELL
        assert "could not be judged" in renamed.reason and "needs about" in renamed.reason


def test_doubled_outputs_are_never_faithful(case):
    live, _, _ = case
    doubled = compare_stage(live, stage_of(live).with_columns(completion_tokens=pl.col("completion_tokens") * 2))
    assert doubled.verdict.state == UNFAITHFUL, doubled.verdict.reason
    assert "output_tokens.paired" in {m.name for m in doubled.verdict.failed}
    if live.df.height >= 2000:
        assert {"output_tokens.ks", "output_tokens.p50"} <= {m.name for m in doubled.verdict.failed}


def test_a_hit_rate_under_the_bound_is_judged_on_gains_and_its_loss_is_bounded_by_live():
    from fidelity.bounds import decide

    t = live_trace(200, seed=3)
    live = live_side(t.df, t.meta.block_size_tokens)
    # live hits 1% in this simulated cache: no loss can reach the bound of 2 points (every loss
    # that can happen is under it), and a replay that invents 2 points of reuse is caught
    low = decide("cache.offered_reuse.lru_0.01", 0.0, 0.0, live, live_value=0.01)
    assert low.state == "pass" and low.detects == "hit rate 2 points, as a gain (live has only 1 points to lose)"
    gained = decide("cache.offered_reuse.lru_0.01", 0.03, 0.0, live, live_value=0.01)
    assert gained.state == "fail"
    high = decide("cache.offered_reuse.lru_0.01", 0.0, 0.0, live, live_value=0.4)
    assert high.state == "pass" and high.detects == "hit rate 2 points"
    # a bound over the ceiling (10 points) still cannot tell, whatever live's hit rate
    noisy = decide("cache.offered_reuse.lru_0.01", 0.0, 0.05, live, live_value=0.01)
    assert noisy.state == "cannot tell", noisy
