"""The split of a stage into shards, the clock offset rule, a shard's judgement and the shard flags."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from replay.agentic import AgentConfig, generate_agentic
from replay.dag import row_edges
from replay.errors import ConfigError
from replay.shards import ClockOffset, ShardRun, clock_offset, judge_shard, parse_shard, parse_start_at, shard_of


def small_agents(seed: int = 4):
    return generate_agentic(
        AgentConfig(
            sessions=12,
            steps_mean=4,
            tool_tokens=20,
            system_tokens=200,
            task_tokens_p50=40,
            result_tokens_p50=60,
            max_context_tokens=3000,
            content_tokens_p50=20,
            subagent_p=0.4,
            seed=seed,
        )
    ).df


def test_no_dependency_and_no_subagent_leaves_its_root_shard():
    df = small_agents()
    assert df["parent_session_id"].drop_nulls().len() > 0  # the trace has subagents
    shard = shard_of(df, 3)
    assert set(shard.tolist()) == {0, 1, 2}  # 12 roots spread over the 3
    edges = row_edges(df)
    assert edges.height > 0
    assert (shard[edges["i"].to_numpy()] == shard[edges["j"].to_numpy()]).all()
    by_session = dict(zip(df["session_id"].to_list(), shard.tolist()))
    for session, parent in df.select("session_id", "parent_session_id").unique().iter_rows():
        if parent is not None:
            assert by_session[session] == by_session[parent]
    # the same trace and N, the same split; one shard holds everything
    assert (shard_of(df, 3) == shard).all()
    assert (shard_of(df, 1) == 0).all()


def test_requests_without_a_session_spread_by_their_id_and_a_join_across_sessions_holds_them():
    n = 400
    df = pl.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "session_id": pl.Series([None] * n, dtype=pl.String),
            "depends_on": [[] for _ in range(n)],
        }
    )
    counts = np.bincount(shard_of(df, 4), minlength=4)
    assert counts.min() > n / 4 * 0.6  # hashed: about a quarter each
    # two sessions joined by a dependency go to one shard, whatever their hashes
    joined = pl.DataFrame(
        {
            "request_id": ["a1", "b1", "b2"],
            "session_id": ["a", "b", "b"],
            "depends_on": [[], [], ["a1"]],
        }
    )
    for shards in range(2, 9):
        s = shard_of(joined, shards)
        assert s[0] == s[1] == s[2]


def test_clock_offset_takes_the_fastest_ping_and_its_half_round_trip():
    # the driver's clock ticks 1 us per read; the remote is 5 ms ahead and answers after a delay
    t = [1_000_000_000]
    delays = iter([400_000, 40_000, 900_000, 100_000])

    def now() -> int:
        t[0] += 1_000
        return t[0]

    def ping() -> int:
        d = next(delays)
        t[0] += d // 2
        remote = t[0] + 5_000_000
        t[0] += d // 2
        return remote

    c = clock_offset(ping, pings=4, now=now)
    # the 40 us round trip (+1 us per clock read): offset 5 ms within its half
    assert c.uncertainty_ns == (40_000 + 1_000) // 2
    assert abs(c.offset_ns - 5_000_000) <= c.uncertainty_ns


def frame(lags_ms: list[float]) -> pl.DataFrame:
    sent = np.arange(len(lags_ms), dtype=np.int64) * 10_000_000
    return pl.DataFrame(
        {
            "intended_ns": sent,
            "release_ns": sent,
            "sent_ns": sent + (np.asarray(lags_ms) * 1e6).astype(np.int64),
            "error": ["none"] * len(lags_ms),
        }
    )


def test_a_shard_is_judged_on_its_lag_its_clock_and_its_runner():
    rows = np.arange(5)
    ok = judge_shard(ShardRun(0, rows, 0, ClockOffset(0, 200_000, 8)), frame([0.1] * 5), lag_bound_ms=1.0)
    assert ok["valid"] and ok["invalid_reason"] is None and ok["clock_uncertainty_ms"] == 0.2
    late = judge_shard(ShardRun(1, rows, 0, ClockOffset(0, 200_000, 8)), frame([0.1, 0.1, 0.1, 0.1, 5.0]), 1.0)
    assert not late["valid"] and "send lag p99" in late["invalid_reason"]
    vague = judge_shard(ShardRun(2, rows, 0, ClockOffset(0, 3_000_000, 8)), frame([0.1] * 5), 1.0)
    assert not vague["valid"] and "uncertain by 3.00 ms" in vague["invalid_reason"]
    dead = ShardRun(3, rows, 0, ClockOffset(0, 100_000, 8), written=frame([0.1] * 2), died="RayActorError")
    judged = judge_shard(dead, frame([0.1] * 2), 1.0)
    assert not judged["valid"] and "died (RayActorError) after writing 2 of 5 requests" in judged["invalid_reason"]


def test_shard_flags():
    assert parse_shard("2/4") == (2, 4)
    for bad in ("4/4", "x/2", "1", "-1/2"):
        with pytest.raises(ConfigError, match="--shard"):
            parse_shard(bad)
    assert parse_start_at("1765155600.5") == 1_765_155_600_500_000_000
    assert parse_start_at("2026-12-08T01:00:00Z") == parse_start_at("2026-12-08T02:00:00+01:00")
    with pytest.raises(ConfigError, match="--start-at: .* no time zone"):
        parse_start_at("2026-12-08T01:00:00")
    with pytest.raises(ConfigError, match="--start-at"):
        parse_start_at("soon")
