"""The fidelity report judges the dependency graph (schema 3): a replay that ignores the edges
(as peers' trace replay does) is unfaithful, naming the graph's metrics; one that keeps them is
faithful."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from fidelity import compare_stage
from replay.agentic import AgentConfig, generate_agentic
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


def test_a_trace_without_edges_has_no_graph_metrics():
    chat = live_trace(300)
    by = {m.name: m for m in compare_stage(chat, stage_of(chat)).verdict.metrics}
    assert by["sessions.dag.early"].state == "n/a" and "no dependencies" in by["sessions.dag.early"].reason
