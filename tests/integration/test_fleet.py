"""A fleet of three embedded engines, each routing policy over real HTTP: where each request went
(the results' ``replica`` column), the per-replica summary, and the engines' own prefix caches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import polars as pl

from replay.agentic import AgentConfig, generate_agentic
from replay.config import RunConfig
from replay.fleet import Target
from replay.generate import GenerateConfig, generate
from replay.runner import run_stage
from replay.sim import start_sim
from replay.trace import Trace


@contextlib.contextmanager
def fleet(*time_scales: float) -> Iterator[tuple[Target, ...]]:
    """One embedded engine per time scale (modelled time, stretched by it into wall time)."""
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(start_sim(time_scale=s, max_num_seqs=64)) for s in time_scales]
        yield tuple(Target(f"r{i}", s.url) for i, s in enumerate(servers))


def replay(trace: Trace, targets: tuple[Target, ...], route: str, **kw) -> pl.DataFrame:
    config = RunConfig(url=targets[0].url, targets=targets, route=route, lag_bound_ms=50, **kw)
    result = run_stage(trace, config)
    return result.requests, result.summary


def multi_turn(n: int = 36) -> Trace:
    """Chat sessions of several turns sharing system prompts: each turn resends its history."""
    return generate(
        GenerateConfig(
            n_requests=n,
            rate=40.0,
            turns_mean=4.0,
            think_time_mean_s=0.05,
            n_system_prompts=3,
            system_prompt_tokens=300,
            user_tokens_p50=60,
            output_tokens_p50=8,
            max_output_tokens=16,
            seed=3,
        )
    )


def test_round_robin_spreads_evenly_and_the_summary_breaks_down_per_replica():
    with fleet(0.01, 0.01, 0.01) as targets:
        df, summary = replay(multi_turn(12), targets, "round-robin", sessions="open", speedup=4.0)
    assert df["error"].to_list() == ["none"] * 12
    assert df["replica"].to_list() == ["r0", "r1", "r2"] * 4
    rows = summary.replicas["rows"]
    assert [r["replica"] for r in rows] == ["r0", "r1", "r2"]
    assert [r["requests"] for r in rows] == [4, 4, 4]
    assert summary.replicas["route"] == "round-robin" and summary.replicas["imbalance"] is None
    assert all(r["ttft_p50_ms"] is not None and r["errors"] == 0 for r in rows)
    # every replica's engine metrics were read, labelled by name
    assert set(summary.engine_metrics["replicas"]) == {"r0", "r1", "r2"}


def test_session_keeps_every_request_of_a_root_session_subagents_included_on_one_replica():
    trace = generate_agentic(
        AgentConfig(
            sessions=4,
            session_rate=20.0,
            steps_mean=4.0,
            system_tokens=100,
            tool_tokens=10,
            task_tokens_p50=20,
            content_tokens_p50=8,
            argument_tokens_p50=8,
            result_tokens_p50=20,
            max_result_tokens=60,
            tool_time_p50_s=0.01,
            subagent_p=0.8,
            subagent_steps_mean=2.0,
            subagent_system_tokens=50,
            answer_tokens_p50=8,
            seed=5,
        )
    )
    rows = trace.df
    assert rows["parent_session_id"].drop_nulls().len() > 0, "the trace has subagents"
    with fleet(0.01, 0.01, 0.01) as targets:
        df, summary = replay(trace, targets, "session", speedup=20.0)
    assert (df["error"] == "none").all()
    parent = dict(zip(rows["session_id"].to_list(), rows["parent_session_id"].to_list()))

    def root(s: str) -> str:
        while parent.get(s) is not None:
            s = parent[s]
        return s

    placed = df.with_columns(root=pl.col("session_id").map_elements(root, return_dtype=pl.Utf8))
    per_root = placed.group_by("root").agg(pl.col("replica").n_unique().alias("replicas"), pl.len())
    assert per_root["replicas"].to_list() == [1] * per_root.height, per_root
    assert placed["replica"].n_unique() >= 2, "four root sessions went to more than one replica"


def test_prefix_sends_shared_prefixes_together_and_hits_the_cache_more_than_round_robin():
    trace = multi_turn()
    hit = {}
    for route in ("round-robin", "prefix"):
        with fleet(0.01, 0.01, 0.01) as targets:  # fresh engines: empty caches
            df, summary = replay(trace, targets, route, sessions="open", speedup=3.0)
        assert (df["error"] == "none").all()
        hit[route] = summary.cache_hit_rate
        if route == "prefix":
            # a session's turns share their history: prefix routing keeps them together
            per_session = df.group_by("session_id").agg(pl.col("replica").n_unique().alias("k"))
            assert per_session["k"].max() == 1, per_session
    assert hit["prefix"] > hit["round-robin"], hit


def test_least_loaded_sends_a_slow_replica_fewer_requests():
    trace = multi_turn(30)
    # r0 runs in modelled time (a request ~150 ms), the others 50 times faster (~7 ms, well
    # inside the ~17 ms between arrivals): r0's requests stay open while theirs have ended
    with fleet(1.0, 0.02, 0.02) as targets:
        df, summary = replay(trace, targets, "least-loaded", sessions="open", rate=60.0)
    assert (df["error"] == "none").all()
    counts = dict(zip(*df["replica"].value_counts().sort("replica").to_dict(as_series=False).values()))
    assert counts.get("r0", 0) < min(counts["r1"], counts["r2"]), counts


def test_a_fleet_sweep_resets_every_replica_and_its_page_shows_them():
    from replay.sweep import sweep
    from replay.sweep_html import sweep_html

    with fleet(0.01, 0.01) as targets:
        config = RunConfig(url=targets[0].url, targets=targets, route="session", requests=8, lag_bound_ms=50)
        result = sweep(multi_turn(8), config, [20.0, 40.0])
    summary = result.to_json()
    assert summary["targets"] == [{"name": "r0", "url": targets[0].url}, {"name": "r1", "url": targets[1].url}]
    assert summary["route"] == "session"
    for stage in summary["stages"]:
        assert stage["prefix_cache"] == "reset (POST /reset_prefix_cache)"  # both replicas answered alike
        assert stage["replicas"]["route"] == "session" and sum(r["requests"] for r in stage["replicas"]["rows"]) == 8
    page = sweep_html(summary, plots=False)
    assert "Per replica (route: session)" in page and f"r1 {targets[1].url}" in page
