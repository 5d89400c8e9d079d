"""Fidelity of real replays (the Rust runner over loopback) against the embedded engine: a public
trace replayed at its own pace and 10x faster is faithful on 70 live requests, request by request
(paired tests), where its distributions cannot tell; Poisson arrivals of a bursty trace fail on
burstiness; an engine with prefix caching off fails on the engine side of cache hits."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from fidelity import compare_stage
from fidelity.judge import own_times
from replay.config import Arrivals, RunConfig
from replay.generate import GenerateConfig, generate
from replay.runner import run_stage
from replay.sim import start_sim
from replay.targets.url import reset_prefix_cache
from replay.trace import Trace


@pytest.fixture(scope="module")
def sim():
    with start_sim(time_scale=0.01, max_num_seqs=64) as server:
        yield server


def observed(trace: Trace, requests: pl.DataFrame) -> Trace:
    """``trace`` with what a stage observed recorded as live traffic's own observations."""
    seen = requests.select(
        "request_id",
        pl.col("cached_tokens").cast(pl.Int32),
        ((pl.col("first_token_ns") - pl.col("sent_ns")) // 1000).alias("ttft_us"),
        ((pl.col("end_ns") - pl.col("sent_ns")) // 1000).alias("e2e_us"),
    )
    df = trace.df.drop([c for c in ("cached_tokens", "ttft_us", "e2e_us") if c in trace.df.columns])
    return Trace(df=df.join(seen, on="request_id", how="left"), meta=trace.meta)


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("speedup", [1.0, 10.0])
def test_a_public_trace_replayed_at_its_pace_and_10x_faster_is_faithful_request_by_request(shared_traces, tmp_path, sim, speedup):
    from capture.importers.azure import import_azure
    from replay.trace import read_trace

    live = read_trace(import_azure(shared_traces / "azure_llm_2023_conv.csv", tmp_path / "azure.parquet", limit=70).path)
    stage = run_stage(live, RunConfig(url=sim.url, speedup=speedup, lag_bound_ms=5, timeout_s=60))
    assert set(stage.requests["error"].to_list()) == {"none"}
    result = compare_stage(live, stage.requests, lag_bound_ms=5)
    assert result.compression == pytest.approx(speedup, rel=0.01)
    assert result.verdict.state == "faithful", result.verdict.reason
    facets = {f.name: f.decided_by for f in result.verdict.facets if f.state == "pass"}
    assert facets["input lengths"] == ("input_tokens.paired",)
    assert facets["output lengths"] == ("output_tokens.paired",)
    assert facets["arrivals"] == ("arrivals.paired_offsets",)
    by = {m.name: m for m in result.verdict.metrics}
    assert "70 of 70 requests" in by["output_tokens.paired"].reason, by["output_tokens.paired"].reason
    # 70 live requests cannot pin the distributions down: those say so, and the verdict stands
    assert by["output_tokens.ks"].state == "cannot tell" and "needs about" in by["output_tokens.ks"].reason


@pytest.mark.data
@pytest.mark.slow
def test_an_exact_replay_of_ten_minutes_of_a_bursty_public_trace_at_10x_is_faithful(shared_traces, tmp_path, sim):
    """The first 10 minutes of the Azure conversation trace (2,867 requests; counts per minute
    with an index of dispersion of 7, bursty at that scale), replayed with its own timing 10x
    faster: faithful, each required facet decided request by request."""
    from capture.importers.azure import import_azure
    from replay.subsets import slice_window
    from replay.trace import read_trace

    whole = import_azure(shared_traces / "azure_llm_2023_conv.csv", tmp_path / "azure.parquet").path
    slice_window(whole, tmp_path / "ten.parquet", 0, 600)
    live = read_trace(tmp_path / "ten.parquet")
    stage = run_stage(live, RunConfig(url=sim.url, speedup=10.0, timeout_s=60))
    result = compare_stage(live, stage.requests)
    assert result.compression == pytest.approx(10.0, rel=0.01)
    assert result.verdict.state == "faithful", result.verdict.reason
    facets = {f.name: f.decided_by[0] for f in result.verdict.facets if f.state == "pass"}
    assert facets["input lengths"] == "input_tokens.paired" and facets["output lengths"] == "output_tokens.paired"
    assert facets["arrivals"] == "arrivals.paired_offsets" and facets["cache"] == "cache.paired_reuse"


@pytest.mark.slow
def test_poisson_arrivals_of_a_bursty_trace_fail_on_burstiness(sim):
    # 2,000 requests: fewer cannot pin the interarrival CV down (an unpaired comparison, as drawn
    # arrivals are: benchmarks/fidelity_calibration.py)
    live = generate(
        GenerateConfig(
            n_requests=2000,
            seed=2,
            rate=200.0,
            burst_cv=4.0,
            system_prompt_tokens=32,
            user_tokens_p50=24,
            output_tokens_p50=4,
            max_output_tokens=8,
            turns_mean=1.5,
        )
    )
    offered = (live.df.height - 1) / ((live.df["arrival_us"].max() - live.df["arrival_us"].min()) / 1e6)
    stage = run_stage(live, RunConfig(url=sim.url, rate=offered, arrivals=Arrivals(kind="poisson", seed=1), lag_bound_ms=5))
    result = compare_stage(live, stage.requests, lag_bound_ms=5, own_times=own_times("poisson"))
    failed = {m.name for m in result.verdict.failed}
    assert "arrivals.interarrival_cv" in failed, result.verdict.reason
    # its sends are not live's: not compared one by one with live's arrivals
    (offsets,) = [m for m in result.verdict.metrics if m.name == "arrivals.paired_offsets"]
    assert offsets.state == "n/a" and "--arrivals poisson" in offsets.reason
    assert not any(name.startswith(("input_tokens", "output_tokens", "cache.offered")) for name in failed), failed


@pytest.mark.slow
def test_an_engine_without_prefix_caching_fails_on_the_engine_side_of_cache_hits(sim):
    trace = generate(
        GenerateConfig(
            n_requests=120,
            seed=4,
            rate=20.0,
            n_system_prompts=2,
            system_prompt_tokens=256,
            user_tokens_p50=24,
            output_tokens_p50=4,
            max_output_tokens=8,
            turns_mean=2.0,
            think_time_mean_s=1.0,
        )
    )
    config = RunConfig(url=sim.url, speedup=1.0, lag_bound_ms=5)
    live = observed(trace, run_stage(trace, config).requests)  # "live": an engine that caches prefixes
    assert live.df["cached_tokens"].sum() > 0

    # the same engine again, from a cold prefix cache as live's run started (else it hits what live cached)
    assert reset_prefix_cache(sim.url).startswith("reset")
    again = compare_stage(live, run_stage(trace, config).requests, lag_bound_ms=5)
    assert not again.verdict.failed, again.verdict.reason

    with start_sim(time_scale=0.01, enable_prefix_caching=False) as no_cache:
        stage = run_stage(trace, RunConfig(url=no_cache.url, speedup=1.0, lag_bound_ms=5))
    result = compare_stage(live, stage.requests, lag_bound_ms=5)
    assert {m.name for m in result.verdict.failed} == {"cache.engine_hit_rate"}, result.verdict.reason
    assert any("prefix caching is off" in d for d in result.verdict.diagnosis), result.verdict.diagnosis
    assert np.all(stage.requests["cached_tokens"].fill_null(0).to_numpy() == 0)
