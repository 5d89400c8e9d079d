"""Closed-loop stages over real HTTP (``concurrency``: N users, each sending its next request the
moment its last one ended): never more than N in flight, each request after the first N released
by the end that made room for it, latencies counted from that release; a sweep over users."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from replay.config import RunConfig
from replay.errors import ConfigError
from replay.runner import run_stage
from replay.sweep import Saturation, sweep
from replay.trace import Trace, validate
from tests.integration.conftest import in_flight_at_sends, trace_of_bodies


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
    assert s.concurrency == 3 and s.requested_rate is None and s.offered_rate is None
    assert s.valid and s.completed == 12
    assert s.send_lag_ms["p99"] < 50  # the dispatcher's wake-up after each end


def test_a_concurrency_sweep_runs_one_closed_loop_stage_per_number_of_users(scripted):
    server = scripted(concurrency=2, chunk_delay_s=0.02)
    trace = trace_of_bodies([{"max_tokens": 5} for _ in range(16)])
    labels: list[str] = []
    result = sweep(
        trace, RunConfig(url=server.url, lag_bound_ms=50), [], concurrency=[1, 4], progress=lambda label: labels.append(label)
    )
    assert labels == ["1 user", "4 users"]
    one, four = result.summaries
    assert [one.concurrency, four.concurrency] == [1, 4] and result.rates == [None, None]
    assert in_flight_at_sends(result.stages[0].requests).max() == 1
    assert in_flight_at_sends(result.stages[1].requests).max() == 4
    # one user keeps one of the server's two slots busy, four keep both (and queue for them)
    assert four.throughput_rps > 1.3 * one.throughput_rps, (one.throughput_rps, four.throughput_rps)
    assert four.ttft_ms["from_intended"]["p50"] > one.ttft_ms["from_intended"]["p50"]
    body = result.to_json()
    assert body["concurrency"] == [1, 4] and body["rates"] == [None, None]
    assert Saturation.where({"status": "saturated", "rate": None, "concurrency": 4}) == "4 users"


def test_causal_sessions_in_closed_loop_hold_a_user_from_first_turn_to_last(scripted):
    # sessions interleaved in the trace (arrival ms: A1 0, B1 50, C1 100, A2 150, D1 200, C2 250,
    # A3 300; every turn recorded as 20 ms long, so each later turn follows 130 ms of think time)
    server = scripted(concurrency=4, chunk_delay_s=0.005)
    sessions = ["A", "B", "C", "A", "D", "C", "A"]
    base = trace_of_bodies(
        [{"max_tokens": 3, "messages": [{"role": "user", "content": f"turn {i}"}]} for i in range(7)],
        arrival_us=[i * 50_000 for i in range(7)],
    )
    df = base.df.with_columns(session_id=pl.Series(sessions), e2e_us=pl.lit(20_000, pl.Int64))
    trace = Trace(df=validate(df, base.meta, source="<test>"), meta=base.meta)
    stage = run_stage(trace, RunConfig(url=server.url, concurrency=2, sessions="causal", lag_bound_ms=50))
    out = stage.requests.with_columns(
        session=pl.col("request_id").str.slice(1).cast(pl.Int64).map_elements(lambda i: sessions[i], return_dtype=pl.String)
    )
    assert out["error"].to_list() == ["none"] * 7, out["error_detail"].to_list()
    think_ns = 130_000_000
    spans = {}
    for (name,), turns in out.sort("sent_ns").group_by("session", maintain_order=True):
        ends, releases = turns["end_ns"].to_list(), turns["release_ns"].to_list()
        # each later turn is released at the end of the one before plus the recorded think time
        assert releases[1:] == [e + think_ns for e in ends[:-1]], (name, releases, ends)
        spans[name] = (turns["sent_ns"].min(), turns["end_ns"].max())
    # sessions start in the trace's order, and never more than the two users' worth are under way
    assert sorted(spans, key=lambda k: spans[k][0]) == ["A", "B", "C", "D"]
    for name, (start, _) in spans.items():
        under_way = sum(1 for s, e in spans.values() if s <= start < e)
        assert under_way <= 2, (name, spans)
    # a session's first turn waits for a user: C starts at B's end (A still holds the other user)
    c_first = out.filter(pl.col("request_id") == "r2")
    assert c_first["release_ns"].item() == spans["B"][1]
    assert stage.summary.slip_ms is None and stage.summary.valid


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"rate": 5.0}, "sets no rate"),
        ({"duration_s": 5.0}, "use --requests, not --duration"),
        ({"max_connections": 2}, "--max-connections is 2"),
        ({"concurrency": 0}, "whole number >= 1"),
    ],
)
def test_a_closed_loop_stage_refuses_what_it_cannot_honour(extra, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(url="http://127.0.0.1:1", **{"concurrency": 3, **extra})


def test_a_sweep_takes_rates_or_users_not_both():
    trace = trace_of_bodies([{"max_tokens": 5} for _ in range(4)])
    with pytest.raises(ConfigError, match="--rates and --concurrency: give one"):
        sweep(trace, RunConfig(url="http://127.0.0.1:1"), [1.0], concurrency=[2])
