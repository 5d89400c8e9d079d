"""How many connections a stage opens before t0 (Little's law over the plan)."""

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
    plan, config = plan_of(50, 2000, rate=100.0)
    assert warm_connections(plan, config) == WARM_CAP
    from dataclasses import replace

    assert warm_connections(plan, replace(config, warm_connections=0)) == 0
    assert warm_connections(plan, replace(config, max_connections=7)) == 7
