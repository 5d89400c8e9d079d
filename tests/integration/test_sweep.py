"""Sweeps over real HTTP: stages at each rate, and the saturation point of a server that saturates."""

from __future__ import annotations

from replay.config import Arrivals, RunConfig, Slo
from replay.sweep import sweep
from tests.integration.conftest import trace_of_bodies


def test_sweep_finds_the_rate_where_a_bounded_server_saturates(scripted):
    # 2 responses at a time, each ~0.1 s (5 chunks, 20 ms apart): capacity about 20 req/s.
    server = scripted(concurrency=2, chunk_delay_s=0.02)
    trace = trace_of_bodies([{"max_tokens": 5} for _ in range(40)])
    # the bound on the runner's own lag is loose: this test is about the server, on a shared machine
    config = RunConfig(url=server.url, arrivals=Arrivals(kind="constant"), lag_bound_ms=50)
    result = sweep(trace, config, rates=[4.0, 8.0, 80.0])
    assert [s.requested_rate for s in result.summaries] == [4.0, 8.0, 80.0]
    low, mid, high = result.summaries
    assert low.completed == mid.completed == high.completed == 40
    assert abs(low.queue["growth_ms"]) < 20 and abs(mid.queue["growth_ms"]) < 20
    assert high.queue["growth_ms"] > 500
    assert result.saturation_rate == 80.0 and "queue built up" in result.saturation_reason
    # queueing shows up in latency from the intended send time, not in the runner's own lag
    assert high.ttft_ms["from_intended"]["p50"] > 5 * low.ttft_ms["from_intended"]["p50"]
    assert high.send_lag_ms["p99"] < 50


def test_slo_failure_names_the_saturation_point(scripted):
    server = scripted(chunk_delay_s=0.05)  # TPOT 50 ms at any rate
    trace = trace_of_bodies([{"max_tokens": 3} for _ in range(10)])
    config = RunConfig(url=server.url, arrivals=Arrivals(kind="constant"), slo=Slo(tpot_s=0.01), lag_bound_ms=50)
    result = sweep(trace, config, rates=[20.0, 40.0])
    assert result.summaries[0].slo_pass is False
    assert result.summaries[0].slo_attainment == 0.0
    assert result.saturation_rate == 20.0 and "SLO" in result.saturation_reason
    ok = sweep(trace, RunConfig(url=server.url, arrivals=Arrivals(kind="constant"), slo=Slo(tpot_s=1.0)), rates=[20.0])
    assert ok.summaries[0].slo_pass is True and ok.summaries[0].goodput_rps > 0


def test_a_stage_made_invalid_by_send_lag_leaves_the_saturation_point_undetermined(scripted):
    server = scripted(concurrency=2, chunk_delay_s=0.02)
    trace = trace_of_bodies([{"max_tokens": 5} for _ in range(40)])
    # a 1 ns bound on the runner's own send lag: every stage is invalid
    config = RunConfig(url=server.url, arrivals=Arrivals(kind="constant"), lag_bound_ms=1e-6)
    seen: list[int] = []
    result = sweep(
        trace,
        config,
        rates=[10.0, 80.0, 160.0],
        stop_after_saturation=True,
        on_stage=lambda partial: seen.append(len(partial.summaries)),
    )
    assert [s.valid for s in result.summaries] == [False, False]  # stopped after the undetermined stage
    assert result.summaries[1].queue["growth_ms"] > 500  # the symptom is there...
    assert result.saturation.status == "undetermined"  # ...but the stage cannot name the point
    assert result.saturation_rate is None and result.saturation.undetermined_at == 80.0
    assert "send lag p99" in result.saturation.reason
    assert seen == [1, 2]  # on_stage saw the result after each stage
    assert result.to_json()["saturation"]["undetermined_at"] == 80.0


def test_find_rates_brackets_the_saturation_of_the_embedded_engine():
    from replay.sim import SimConfig, split_cpus, start_sim
    from replay.sweep import find_rates
    from tests.integration.real_engines import small_trace

    trace = small_trace(n=300, seed=1)
    engine_cpus, runner_cpus = split_cpus()
    # a CPU-sized model with two sequences at a time, its steps at a third of their modelled time
    with start_sim(SimConfig(profile="cpu/tiny", max_num_seqs=2, time_scale=0.3), cpus=engine_cpus) as server:
        config = RunConfig(url=server.url, lag_bound_ms=50, cpus=runner_cpus, duration_s=2.0)
        search = find_rates(trace, config, 4, start_rate=4.0, probe_s=2.0)
        assert search.saturation.status == "saturated", search.probes
        saturated_at = search.saturation.rate
        assert search.kept_up_rate < saturated_at
        assert [p["status"] for p in search.probes if p["rate"] == saturated_at] == ["saturated"]
        assert search.probes[0]["rate"] == 4.0 and search.probes[0]["status"] == "kept_up"
        rates = search.rates
        assert len(rates) == 4 and rates == sorted(rates)
        assert rates[0] < search.kept_up_rate and saturated_at < rates[-1]  # below and past it
        result = sweep(trace, config, search)
    assert result.rates == rates and result.to_json()["rate_search"]["rates"] == rates
    assert result.summaries[0].valid and result.saturation.status != "undetermined"
    # the lowest stage keeps up, the highest (1.5 times the saturation found) does not
    assert result.saturation.status == "saturated" and result.saturation.rate > rates[0]


def test_each_stage_starts_from_a_cold_prefix_cache_unless_kept(scripted):
    from replay.sim import SimConfig, start_sim
    from tests.integration.real_engines import small_trace

    trace = small_trace(n=40, seed=2)  # shared system prompts: the prefix cache hits within a stage
    with start_sim(SimConfig(profile="instant")) as server:
        config = RunConfig(url=server.url, lag_bound_ms=1000, requests=40)
        reset = sweep(trace, config, [20.0, 40.0])
        kept = sweep(trace, config, [20.0, 40.0], reset_cache=False)
    first, second = (s.cache_hit_rate for s in reset.summaries)
    assert [s.prefix_cache for s in reset.summaries] == ["reset (POST /reset_prefix_cache)"] * 2
    assert 0 < first and abs(second - first) < 0.02, (first, second)  # the same requests, cold each time
    # kept: the second stage finds the first's prefixes (the same 40 requests) in the cache
    assert [s.prefix_cache for s in kept.summaries] == ["kept (--keep-prefix-cache)"] * 2
    assert kept.summaries[1].cache_hit_rate > second + 0.1, (kept.summaries[1].cache_hit_rate, second)
    # a server without the endpoint is replayed as it is, and the summary says so
    plain = scripted()
    out = sweep(trace_of_bodies([{"max_tokens": 1}] * 4), RunConfig(url=plain.url, lag_bound_ms=1000), [50.0])
    assert out.summaries[0].prefix_cache.startswith("not reset: /reset_prefix_cache answered HTTP 404")


def test_a_stage_the_runner_made_invalid_is_run_again_and_the_discarded_attempt_named(scripted, monkeypatch):
    import dataclasses

    import pytest

    import replay.sweep as sweep_module
    from replay.errors import ConfigError

    server = scripted(chunk_delay_s=0.005)
    trace = trace_of_bodies([{"max_tokens": 3} for _ in range(20)])
    config = RunConfig(url=server.url, arrivals=Arrivals(kind="constant"), lag_bound_ms=50)
    # the first attempt of the first stage is judged under a 1 ns bound (the machine "held the
    # sender up"); every later attempt under the stage's own 50 ms
    real, calls = sweep_module.run_plan, []

    def first_attempt_late(plan, stage_config, *args, **kwargs):
        calls.append(stage_config.rate)
        stage = real(plan, stage_config, *args, **kwargs)
        if len(calls) == 1:
            stage = dataclasses.replace(stage, config=dataclasses.replace(stage.config, lag_bound_ms=1e-6))
        return stage

    monkeypatch.setattr(sweep_module, "run_plan", first_attempt_late)
    result = sweep(trace, config, rates=[20.0, 40.0], retry_invalid=2)
    assert calls == [20.0, 20.0, 40.0]  # the late stage twice, the other once
    first, second = result.summaries
    assert first.valid and second.valid and len(result.stages) == 2
    assert len(first.discarded_attempts) == 1 and "send lag p99" in first.discarded_attempts[0]
    assert second.discarded_attempts == []
    assert result.to_json()["stages"][0]["discarded_attempts"] == first.discarded_attempts

    # without retries the invalid attempt is the stage; with them, a runner always late gives up
    # after N more attempts and keeps the last, still invalid
    calls.clear()
    assert not sweep(trace, config, rates=[20.0]).summaries[0].valid
    always_late = RunConfig(url=server.url, arrivals=Arrivals(kind="constant"), lag_bound_ms=1e-6)
    monkeypatch.setattr(sweep_module, "run_plan", real)
    kept = sweep(trace, always_late, rates=[20.0], retry_invalid=2).summaries[0]
    assert not kept.valid and len(kept.discarded_attempts) == 2
    with pytest.raises(ConfigError, match="--retry-invalid"):
        sweep(trace, config, rates=[20.0], retry_invalid=1, reset_cache=False)
    with pytest.raises(ConfigError, match="--retry-invalid"):
        sweep(trace, config, rates=[20.0], retry_invalid=-1)
