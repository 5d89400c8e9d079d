"""Closed-loop stages over real HTTP (``concurrency``: N users, each sending its next request the
moment its last one ended): never more than N in flight, each request after the first N released
by the end that made room for it, latencies counted from that release; a sweep over users."""

from __future__ import annotations

import numpy as np
import pytest

from replay.config import RunConfig
from replay.errors import ConfigError
from replay.runner import run_stage
from replay.sweep import Saturation, sweep
from tests.integration.conftest import trace_of_bodies


def in_flight_at_sends(df) -> np.ndarray:
    """How many requests were open just after each send (sent by then, not yet ended)."""
    sent, end = df["sent_ns"].to_numpy(), df["end_ns"].to_numpy()
    return np.array([int(((sent <= t) & (end > t)).sum()) for t in sent])


def test_a_closed_loop_stage_keeps_its_users_busy_and_no_more(scripted):
    # the server answers 2 at a time, each ~0.1 s (5 chunks 20 ms apart): 3 users keep it full
    server = scripted(concurrency=2, chunk_delay_s=0.02)
    trace = trace_of_bodies([{"max_tokens": 5} for _ in range(12)])
    stage = run_stage(trace, RunConfig(url=server.url, concurrency=3, lag_bound_ms=50))
    df = stage.requests
    assert df["error"].to_list() == ["none"] * 12, df["error_detail"].to_list()
    assert in_flight_at_sends(df).max() == 3
    releases = np.sort(df["release_ns"].to_numpy())
    ends = set(df["end_ns"].to_list())
    assert list(releases[:3]) == [0, 0, 0]
    assert all(r in ends for r in releases[3:]), "a request was released other than at an end"
    # no schedule: latencies count from the release, so the wait for a user is not latency
    assert (df["intended_ns"] == df["release_ns"]).all()
    s = stage.summary
    assert s["concurrency"] == 3 and s["requested_rate"] is None and s["offered_rate"] is None
    assert s["valid"] and s["completed"] == 12
    assert s["send_lag_ms"]["p99"] < 50  # the dispatcher's wake-up after each end


def test_a_concurrency_sweep_runs_one_closed_loop_stage_per_number_of_users(scripted):
    server = scripted(concurrency=2, chunk_delay_s=0.02)
    trace = trace_of_bodies([{"max_tokens": 5} for _ in range(16)])
    labels: list[str] = []
    result = sweep(trace, RunConfig(url=server.url, lag_bound_ms=50), [], concurrency=[1, 4],
                   progress=lambda label: labels.append(label))
    assert labels == ["1 user", "4 users"]
    one, four = result.summaries
    assert [one["concurrency"], four["concurrency"]] == [1, 4] and result.rates == [None, None]
    assert in_flight_at_sends(result.stages[0].requests).max() == 1
    assert in_flight_at_sends(result.stages[1].requests).max() == 4
    # one user keeps one of the server's two slots busy, four keep both (and queue for them)
    assert four["throughput_rps"] > 1.3 * one["throughput_rps"], (one["throughput_rps"], four["throughput_rps"])
    assert four["ttft_ms"]["from_intended"]["p50"] > one["ttft_ms"]["from_intended"]["p50"]
    body = result.to_json()
    assert body["concurrency"] == [1, 4] and body["rates"] == [None, None]
    assert Saturation.where({"status": "saturated", "rate": None, "concurrency": 4}) == "4 users"


@pytest.mark.parametrize("extra, message", [
    ({"rate": 5.0}, "sets no rate"),
    ({"duration_s": 5.0}, "use --requests, not --duration"),
    ({"sessions": "causal"}, "do not replay causal sessions yet"),
    ({"max_connections": 2}, "--max-connections is 2"),
    ({"concurrency": 0}, "whole number >= 1"),
])
def test_a_closed_loop_stage_refuses_what_it_cannot_honour(extra, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(url="http://127.0.0.1:1", **{"concurrency": 3, **extra})


def test_a_sweep_takes_rates_or_users_not_both():
    trace = trace_of_bodies([{"max_tokens": 5} for _ in range(4)])
    with pytest.raises(ConfigError, match="--rates and --concurrency: give one"):
        sweep(trace, RunConfig(url="http://127.0.0.1:1"), [1.0], concurrency=[2])
