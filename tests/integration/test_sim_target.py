"""The embedded simulator started through its engine adapter, like the real engines are."""

from __future__ import annotations

from replay.config import RunConfig
from replay.runner import run_stage
from replay.targets import SimEngine
from tests.integration.real_engines import shared_prefix_trace


def test_the_sim_adapter_launches_replays_and_reports_vllm_style_metrics():
    engine = SimEngine(time_scale=0.01, served_model_name="sim")
    with engine.launch({"max_num_seqs": 4, "block_size": "16"}) as running:
        assert running.start_s > 0  # how long the start took is reported
        df = run_stage(
            shared_prefix_trace(system_tokens=64, n=4, gap_ms=100), RunConfig(url=running.url, speedup=1.0, lag_bound_ms=20)
        ).requests
        assert df["error"].to_list() == ["none"] * 4
        assert all(c >= 64 for c in df["cached_tokens"].to_list()[1:])
        m = running.metrics()
        assert m["prefix_cache_hits"] >= sum(df["cached_tokens"].to_list()[1:])
        assert m["requests_finished"] == 4 and m["generation_tokens"] == 16
    assert not running.alive
