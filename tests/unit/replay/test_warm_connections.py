"""How many connections a stage opens before t0: the schedule's peak in flight (Little's law
where arrivals are even)."""

from __future__ import annotations

import polars as pl

from replay.config import Arrivals, RunConfig
from replay.plan import build_plan
from replay.runner import WARM_CAP, warm_connections
from tests.integration.conftest import trace_of_bodies


def plan_of(n: int, max_tokens: int, rate: float, e2e_us: int | None = None):
    trace = trace_of_bodies([{"max_tokens": max_tokens} for _ in range(n)])
    if e2e_us is not None:
        trace = type(trace)(df=trace.df.with_columns(pl.lit(e2e_us, pl.Int64).alias("e2e_us")), meta=trace.meta)
    config = RunConfig(url="http://127.0.0.1:9", rate=rate, arrivals=Arrivals(kind="constant"))
    return build_plan(trace, config, model="m"), config


def test_littles_law_from_expected_output_lengths():
    plan, config = plan_of(50, 100, rate=10.0)
    # 10 req/s x (0.25 s + 100 tokens x 30 ms) = 32.5 in flight
    assert warm_connections(plan, config) == 33


def test_recorded_durations_win_and_the_cap_holds():
    plan, config = plan_of(50, 100, rate=10.0, e2e_us=500_000)
    assert warm_connections(plan, config) == 5
    plan, config = plan_of(100, 2000, rate=100.0)  # all 100 in flight at once
    assert warm_connections(plan, config) == WARM_CAP
    from dataclasses import replace

    assert warm_connections(plan, replace(config, warm_connections=0)) == 0
    assert warm_connections(plan, replace(config, max_connections=7)) == 7


def test_a_burst_gets_its_connections_even_at_a_low_mean_rate():
    # 6 requests at once, then one a minute later: about 0.12 req/s on average, so Little's law
    # alone says 1 connection; each takes 0.5 s, so the burst has 6 in flight
    trace = trace_of_bodies([{"max_tokens": 8} for _ in range(7)], arrival_us=[0, 0, 0, 0, 0, 0, 60_000_000])
    trace = type(trace)(df=trace.df.with_columns(pl.lit(500_000, pl.Int64).alias("e2e_us")), meta=trace.meta)
    config = RunConfig(url="http://127.0.0.1:9")
    plan = build_plan(trace, config, model="m")
    assert plan.offered_rate < 0.2
    assert warm_connections(plan, config) == 6
    # requests that end before the next starts share one connection
    spaced = trace_of_bodies([{"max_tokens": 8} for _ in range(5)], arrival_us=[i * 2_000_000 for i in range(5)])
    spaced = type(spaced)(df=spaced.df.with_columns(pl.lit(500_000, pl.Int64).alias("e2e_us")), meta=spaced.meta)
    assert warm_connections(build_plan(spaced, config, model="m"), config) == 1


def test_a_fast_schedule_gets_a_cushion_for_a_reader_off_its_cpu():
    from replay.runner import READER_STALL_S, WARM_STALL_CAP

    # 5,000 req/s, each answered in 1 ms: about 5 in flight, but the 500 due in any
    # READER_STALL_S each need an idle connection while the thread that frees them is away
    plan, config = plan_of(2_000, 8, rate=5_000.0, e2e_us=1_000)
    assert warm_connections(plan, config) == round(5_000 * READER_STALL_S)
    plan, config = plan_of(30_000, 8, rate=50_000.0, e2e_us=1_000)
    assert warm_connections(plan, config) == WARM_STALL_CAP
    # a slow schedule keeps Little's law: 10 req/s x 0.5 s
    plan, config = plan_of(50, 8, rate=10.0, e2e_us=500_000)
    assert warm_connections(plan, config) == 5
