"""Sweeps over real HTTP: stages at each rate, and the saturation point of a server that saturates."""

from __future__ import annotations

from replay.config import Arrivals, RunConfig, Slo
from replay.sweep import sweep
from tests.integration.conftest import trace_of_bodies


def test_sweep_finds_the_rate_where_a_bounded_server_saturates(scripted):
    # 2 responses at a time, each ~0.1 s (5 chunks, 20 ms apart): capacity about 20 req/s.
    server = scripted(concurrency=2, chunk_delay_s=0.02)
    trace = trace_of_bodies([{"max_tokens": 5} for _ in range(40)])
    config = RunConfig(url=server.url, arrivals=Arrivals(kind="constant"))
    result = sweep(trace, config, rates=[4.0, 8.0, 80.0])
    assert [s["requested_rate"] for s in result.summaries] == [4.0, 8.0, 80.0]
    low, mid, high = result.summaries
    assert low["completed"] == mid["completed"] == high["completed"] == 40
    assert abs(low["queue"]["growth_ms"]) < 20 and abs(mid["queue"]["growth_ms"]) < 20
    assert high["queue"]["growth_ms"] > 500
    assert result.saturation_rate == 80.0 and "queue built up" in result.saturation_reason
    # queueing shows up in latency from the intended send time, not in the runner's own lag
    assert high["ttft_ms"]["from_intended"]["p50"] > 5 * low["ttft_ms"]["from_intended"]["p50"]
    assert high["send_lag_ms"]["p99"] < 50


def test_slo_failure_names_the_saturation_point(scripted):
    server = scripted(chunk_delay_s=0.05)  # TPOT 50 ms at any rate
    trace = trace_of_bodies([{"max_tokens": 3} for _ in range(10)])
    config = RunConfig(url=server.url, arrivals=Arrivals(kind="constant"), slo=Slo(tpot_s=0.01))
    result = sweep(trace, config, rates=[20.0, 40.0])
    assert result.summaries[0]["slo_pass"] is False
    assert result.summaries[0]["slo_attainment"] == 0.0
    assert result.saturation_rate == 20.0 and "SLO" in result.saturation_reason
    ok = sweep(trace, RunConfig(url=server.url, arrivals=Arrivals(kind="constant"), slo=Slo(tpot_s=1.0)), rates=[20.0])
    assert ok.summaries[0]["slo_pass"] is True and ok.summaries[0]["goodput_rps"] > 0
