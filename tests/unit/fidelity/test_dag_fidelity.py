"""The fidelity report judges the dependency graph (schema 3): a replay that ignores the edges
(as peers' trace replay does) is unfaithful, naming the graph's metrics; one that keeps them is
faithful."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from fidelity import compare_stage
from fidelity.compare import compare_sides
from fidelity.cache import simulate
from replay.agentic import AgentConfig, generate_agentic
from replay.dag import depth_and_fan_out
from fidelity.sides import Side, live_side
from replay.trace import Trace
from tests.unit.fidelity.test_compare import live_trace, stage_of

SLOWER = 1.5  # the replay's engine takes 1.5x live's time for every request


@pytest.fixture(scope="module")
def live():
    config = AgentConfig(sessions=12, steps_mean=12, max_context_tokens=60_000, subagent_p=0.2, session_rate=0.2, seed=3)
    return generate_agentic(config)


def dag_sends(df: pl.DataFrame, e2e_s: np.ndarray) -> np.ndarray:
    """When a --sessions dag replay sends each request: at the later of its live arrival and its
    dependencies' last end plus its recorded wait."""
    arrival = df["arrival_us"].to_numpy() / 1e6
    wait = df["wait_us"].fill_null(0).to_numpy() / 1e6
    row = {r: i for i, r in enumerate(df["request_id"].to_list())}
    sent, end = np.zeros(df.height), np.zeros(df.height)
    for i, deps in enumerate(df["depends_on"].to_list()):
        sent[i] = max([arrival[i]] + [end[row[d]] + wait[i] for d in deps])
        end[i] = sent[i] + e2e_s[i]
    return sent


def replay(live, sent_s: np.ndarray | None) -> pl.DataFrame:
    e2e = live.df["e2e_us"].to_numpy() / 1e6 * SLOWER
    stage = stage_of(live, sent_s=sent_s)
    stage = stage.with_columns(end_ns=pl.col("sent_ns") + pl.Series((e2e * 1e9).astype(np.int64)))
    if sent_s is not None:  # released when the dependencies ended, sent 50 µs later
        stage = stage.with_columns(release_ns=pl.col("sent_ns") - 50_000)
    return stage


def test_a_replay_that_ignores_the_edges_is_unfaithful_and_one_that_keeps_them_is_faithful(live):
    e2e = live.df["e2e_us"].to_numpy() / 1e6 * SLOWER
    ignored = compare_stage(live, replay(live, None)).verdict
    by = {m.name: m for m in ignored.metrics}
    assert ignored.state == "unfaithful"
    assert {"sessions.dag.early", "sessions.dag.wait.ks", "sessions.dag.concurrency.ks"} <= {m.name for m in ignored.failed}
    assert by["sessions.dag.early"].replay > 0.3 and by["sessions.dag.early"].live == 0
    assert "sent before a dependency ended" in ignored.reason
    kept = compare_stage(live, replay(live, dag_sends(live.df, e2e))).verdict
    by = {m.name: m for m in kept.metrics}
    assert kept.state == "faithful", kept.reason
    assert by["sessions.dag.early"].state == "pass" and by["sessions.dag.early"].replay == 0
    assert by["sessions.dag.wait.ks"].distance < 0.01
    # a session's steps never overlap, live or kept; sent early, they do
    assert by["sessions.dag.concurrency.ks"].state == "pass" and by["sessions.dag.concurrency.ks"].distance == 0
    # the same requests keep the graph's shape, and the prefixes each session and depth was offered
    # (at 45 sessions their A/A is too wide to vouch for it: cannot tell, never a failure)
    for name in ("sessions.dag.fan_out.ks", "sessions.dag.depth.ks", "cache.session_offered.ks", "cache.depth_offered"):
        assert by[name].state != "fail" and by[name].distance < 0.01, by[name]


def with_cached(live, cached: np.ndarray) -> Trace:
    return Trace(live.df.with_columns(cached_tokens=pl.Series(cached, dtype=pl.Int32)), live.meta)


def test_an_engine_that_loses_the_deep_contexts_is_caught_by_depth(live):
    # live's engine cached every prefix it had seen (an unbounded cache in arrival order)
    hits = simulate(live.df["block_hashes"], 0) * live.meta.block_size_tokens
    cached = np.minimum(hits, live.df["input_tokens"].to_numpy())
    live = with_cached(live, cached)
    sends = dag_sends(live.df, live.df["e2e_us"].to_numpy() / 1e6 * SLOWER)
    kept = replay(live, sends).with_columns(cached_tokens=pl.Series(cached))
    same = {m.name: m for m in compare_stage(live, kept).verdict.metrics}
    for name in ("cache.session_engine.ks", "cache.depth_engine"):
        assert same[name].state != "fail" and same[name].distance < 0.01, same[name]
    # a replay engine whose cache holds only short contexts: the deep requests (depth 4+) miss
    lost = np.where(depth_and_fan_out(live.df)[0] >= 4, 0, cached)
    verdict = compare_stage(live, replay(live, sends).with_columns(cached_tokens=pl.Series(lost))).verdict
    by = {m.name: m for m in verdict.metrics}
    assert by["cache.depth_engine"].state == "fail" and by["cache.depth_engine"].distance > 0.8, by["cache.depth_engine"]
    # per session it is as far off, but 45 sessions' halves are too far apart to vouch either way
    assert by["cache.session_engine.ks"].distance > 0.8 and by["cache.session_engine.ks"].state != "pass"
    assert verdict.state == "unfaithful"


def graph_side(sessions: int, wide: bool, seed: int) -> Side:
    """``sessions`` agent sessions a minute apart on average, each a root step then either three
    parallel steps joined by a fourth (``wide``: fan-out 3, depth to 2) or a chain of four (fan-out
    1, depth to 4); token-only rows, as a drift between two captures compares them."""
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    t = 0.0
    for k in range(sessions):
        t += rng.exponential(60.0)
        sid = f"s{k}"
        root = f"{sid}/0"
        rows.append({"request_id": root, "session_id": sid, "t": t, "depends_on": []})
        if wide:
            mid = [f"{sid}/{j}" for j in (1, 2, 3)]
            rows += [{"request_id": m, "session_id": sid, "t": t + 5, "depends_on": [root]} for m in mid]
            rows.append({"request_id": f"{sid}/4", "session_id": sid, "t": t + 10, "depends_on": mid})
        else:
            for j in range(1, 5):
                rows.append({"request_id": f"{sid}/{j}", "session_id": sid, "t": t + 2.5 * j, "depends_on": [f"{sid}/{j - 1}"]})
    df = pl.DataFrame(rows).with_columns(
        arrival_us=(pl.col("t") * 1e6).cast(pl.Int64),
        input_tokens=pl.lit(1000, dtype=pl.Int32),
        output_tokens=pl.lit(100, dtype=pl.Int32),
        block_hashes=pl.lit([], dtype=pl.List(pl.UInt64)),
        e2e_us=pl.lit(2_000_000, dtype=pl.Int64),
    )
    return live_side(df, 16, name="old" if seed == 0 else "new")


def test_two_traces_of_other_graphs_differ_in_fan_out_and_depth():
    wide, chains = graph_side(400, True, 0), graph_side(400, False, 1)
    by = {m.name: m for m in compare_sides(wide, chains).metrics}
    for name in ("sessions.dag.fan_out.ks", "sessions.dag.depth.ks"):
        assert by[name].state == "fail" and by[name].distance >= 0.25, by[name]
    # two samples of the same graphs: conclusive, and faithful
    by = {m.name: m for m in compare_sides(wide, graph_side(400, True, 2)).metrics}
    for name in ("sessions.dag.fan_out.ks", "sessions.dag.depth.ks"):
        assert by[name].state == "pass", by[name]


def test_a_trace_without_edges_has_no_graph_metrics():
    chat = live_trace(300)
    by = {m.name: m for m in compare_stage(chat, stage_of(chat)).verdict.metrics}
    assert by["sessions.dag.early"].state == "n/a" and "no dependencies" in by["sessions.dag.early"].reason
    for name in ("sessions.dag.fan_out.ks", "sessions.dag.depth.ks", "cache.session_offered.ks", "cache.depth_engine"):
        assert by[name].state == "n/a", by[name]
