"""The dependency graph of a trace (schema 3): its rules, the gates a dag replay sends, subsets
that keep it whole, and its shape."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from replay import dag
from replay.errors import TraceError
from replay.trace import TraceMeta, TraceWriter, read_trace

DEPS = pl.List(pl.String)


def agent(make_trace, **columns):
    """r0 -> (r1, r2) -> r3 (a join), and r4 alone: one session 's' but r4 in 't'."""
    n = 5
    base = {
        "session_id": pl.Series(["s", "s", "s", "s", "t"]),
        "depends_on": pl.Series([[], ["r0"], ["r0"], ["r1", "r2"], []], dtype=DEPS),
        "wait_us": pl.Series([None, 1_000, 1_000, 500, None], dtype=pl.Int64),
        "arrival_us": pl.Series([0, 2_000, 2_000, 4_000, 4_500], dtype=pl.Int64),
    }
    base.update(columns)
    return make_trace(n=n, **base)


def test_a_valid_dag_reads_back_and_old_files_have_no_edges(make_trace, tmp_path):
    trace = agent(make_trace)
    path = trace.write(tmp_path / "t.parquet")
    back = read_trace(path)
    assert back.meta.schema_version == 3
    assert back.df["depends_on"].to_list() == [[], ["r0"], ["r0"], ["r1", "r2"], []]
    assert dag.has_edges(back.df)
    plain = make_trace(n=3)
    assert plain.df["depends_on"].to_list() == [[], [], []] and not dag.has_edges(plain.df)


@pytest.mark.parametrize(
    ("deps", "arrival", "message"),
    [
        ([[], ["nope"], [], [], []], None, "row 1: request 'r1' depends on 'nope', which is not in the trace"),
        ([[], [], [], [], ["r3", "r4"]], None, "row 4: request 'r4' is in a dependency cycle: 'r4' -> 'r4'"),
        ([[], [], ["r3"], [], []], None, "row 2: request 'r2' depends on 'r3' (row 3), which arrives after it"),
        # same arrival, waiting for each other: a cycle
        ([[], ["r2"], ["r1"], [], []], [0, 2_000, 2_000, 4_000, 4_500], "dependency cycle: 'r1' -> 'r2' -> 'r1'"),
        # same arrival, written in the wrong order
        ([[], ["r2"], [], [], []], [0, 2_000, 2_000, 4_000, 4_500], "arrives at the same time but comes after it"),
    ],
)
def test_a_broken_graph_is_one_clear_error(make_trace, deps, arrival, message):
    columns = {"depends_on": pl.Series(deps, dtype=DEPS)}
    if arrival is not None:
        columns["arrival_us"] = pl.Series(arrival, dtype=pl.Int64)
    with pytest.raises(TraceError, match="fixture: column 'depends_on' at ") as e:
        agent(make_trace, **columns)
    assert message in str(e.value)


def test_the_writer_checks_dependencies_across_batches(make_trace, tmp_path):
    df = agent(make_trace).df
    meta = TraceMeta(source_format="test")
    with TraceWriter(tmp_path / "ok.parquet", meta) as w:
        w.write(df.head(2))
        w.write(df.slice(2))  # r3 depends on r1 (the first batch) and r2 (its own)
    assert read_trace(tmp_path / "ok.parquet").df.height == 5
    with pytest.raises(
        TraceError, match=r"bad.parquet: column 'depends_on' at row 2: request 'r3' depends on 'r1', which is not in"
    ):
        with TraceWriter(tmp_path / "bad.parquet", meta) as w:
            w.write(df.head(1))
            w.write(df.slice(2))  # r1 was never written
    assert not (tmp_path / "bad.parquet").exists()


def test_gates_name_the_history_parent_the_joins_and_the_waits(make_trace):
    rows = agent(make_trace).df
    offsets = rows["arrival_us"].to_numpy() * 1000
    after, think, joins, join_offsets = dag.dag_gates(rows, offsets)
    assert after.tolist() == [-1, 0, 0, 2, -1]  # r3's parent: the later row of its two
    assert joins.tolist() == [1] and join_offsets.tolist() == [0, 0, 0, 0, 1, 1]
    assert think.tolist() == [0, 1_000_000, 1_000_000, 500_000, 0]
    # a stage at twice the speed halves the waits, unless they are kept
    _, half, _, _ = dag.dag_gates(rows, offsets // 2)
    assert half.tolist() == [0, 500_000, 500_000, 250_000, 0]
    _, kept, _, _ = dag.dag_gates(rows, offsets // 2, keep_waits=True)
    assert kept.tolist() == think.tolist()
    # no recorded wait: the arrival minus the latest end of the dependencies (arrival + e2e_us)
    e2e = pl.Series([1_500, 1_000, 1_000, 1_000, 1_000], dtype=pl.Int64)
    rows = agent(make_trace, wait_us=pl.Series([None] * 5, dtype=pl.Int64), e2e_us=e2e).df
    _, think, _, _ = dag.dag_gates(rows, offsets)
    assert think.tolist() == [0, 500_000, 500_000, 1_000_000, 0]


def test_the_history_parent_is_in_the_same_session(make_trace):
    # r3 waits for r1 (its own session 's') and for r2 (a subagent's session 'sub'): r1 is the
    # parent whose answer its history carries, though r2 came later
    rows = agent(make_trace, session_id=pl.Series(["s", "s", "sub", "s", "t"])).df
    after, _, joins, _ = dag.dag_gates(rows, rows["arrival_us"].to_numpy() * 1000)
    assert after[3] == 1 and joins.tolist() == [2]


def test_dependencies_outside_the_stage_are_not_waited_for(make_trace):
    rows = agent(make_trace).df.slice(1)  # r0 is not sent
    after, _, joins, join_offsets = dag.dag_gates(rows, rows["arrival_us"].to_numpy() * 1000)
    assert after.tolist() == [-1, -1, 1, -1] and joins.tolist() == [0]


def test_after_failed_marks_the_dependents_of_a_failure(make_trace):
    rows = agent(make_trace).df
    after, _, joins, join_offsets = dag.dag_gates(rows, rows["arrival_us"].to_numpy() * 1000)
    failed = np.array([False, True, False, False, False])
    assert dag.after_failed(after, joins, join_offsets, failed, 0, 5).tolist() == [False, False, False, True, False]
    failed = np.array([True, False, False, False, False])
    assert dag.after_failed(after, joins, join_offsets, failed, 1, 5).tolist() == [True, True, False, False]


def test_shape(make_trace):
    trace = agent(
        make_trace,
        parent_session_id=pl.Series([None, None, None, None, "s"]),
        input_tokens=pl.Series([100, 200, 200, 400, 50], dtype=pl.Int32),
        cached_tokens=pl.Series([0, 100, 100, 300, 0], dtype=pl.Int32),
    )
    got = dag.shape(trace.df)
    assert got is not None
    assert got["edges"] == 4 and got["joins"] == 1 and got["requests_with_dependencies"] == 3
    assert got["critical_path_requests"] == 3  # r0 -> r1 -> r3
    assert got["fan_out"]["max"] == 2 and got["depth"]["max"] == 2
    assert got["sessions"] == 2 and got["root_sessions"] == 1
    assert got["subagents_per_root_session"] == {"sessions_with_subagents": 1, "mean": 1.0, "max": 1}
    assert got["input_tokens_by_depth"] == {0: 75, 1: 200, 2: 400}
    assert got["cached_share_of_input"] == round(500 / 950, 4)
    assert got["wait_s"]["max"] == 0.001
    assert dag.shape(make_trace(n=3).df) is None


def test_subsets_keep_subagents_with_their_root_and_cut_lost_edges(make_trace, tmp_path):
    from replay.subsets import sample_sessions, session_kept, slice_window

    # 'sub' was spawned by 's'; 't' is a session of its own
    trace = agent(
        make_trace,
        session_id=pl.Series(["s", "s", "sub", "s", "t"]),
        parent_session_id=pl.Series([None, None, "s", None, None]),
    )
    src = trace.write(tmp_path / "src.parquet")
    seed = next(k for k in range(200) if session_kept("s", 0.5, k) != session_kept("sub", 0.5, k))
    sample_sessions(src, tmp_path / "sampled.parquet", 0.5, seed=seed)
    got = read_trace(tmp_path / "sampled.parquet").df
    kept = set(got["session_id"].to_list())
    assert ("s" in kept) == ("sub" in kept) == session_kept("s", 0.5, seed), "a subagent goes with its root"
    # a slice from 1 ms loses r0: r1 and r2 no longer wait for it, r3 still waits for both
    slice_window(src, tmp_path / "sliced.parquet", 0.001)
    sliced = read_trace(tmp_path / "sliced.parquet").df
    assert sliced["depends_on"].to_list() == [[], [], ["r1", "r2"], []]
