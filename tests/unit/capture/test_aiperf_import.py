"""AIPerf dag_jsonl and multi_turn imports: samples written field by field from AIPerf's schema
(ai-dynamo/aiperf@05440a0e dag_jsonl_models.py, docs/benchmark-modes/dag.md; @02b0d5c3 models.py
``MultiTurn`` / ``SingleTurn``), checked against the graph they state."""

from __future__ import annotations

import json

import numpy as np
import pytest

from capture.importers import import_log
from capture.importers.sniff import sniff
from replay.errors import ConfigError, TraceError


def _turn(text, **kw):
    return {"messages": [{"role": "user", "content": text}], **kw}


# root: turn 0 spawns worker w (joined at turn 2) and runs turn 1 meanwhile; turn 2 (its last)
# forks f; template t is spawned twice by w (a SPAWN template: two copies)
DAG = [
    {
        "session_id": "root",
        "turns": [
            {
                "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Plan it."}],
                "model": "m",
                "max_tokens": 8,
                "spawns": [{"children": ["w"], "join_at": 2}],
            },
            _turn("Go on.", max_tokens=4, delay=500),
            _turn("Merge.", max_tokens=6, forks=["f"]),
        ],
    },
    {"session_id": "w", "turns": [_turn("Work.", max_tokens=5, delay=100, spawns=["t"]), _turn("More.", max_tokens=5)]},
    {"session_id": "f", "turns": [_turn("Expand.", max_tokens=3, extra={"temperature": 0})]},
    {"session_id": "t", "turns": [_turn("Check.", max_tokens=2, delay=50)]},
    {"session_id": "solo", "turns": [_turn("Alone.", max_tokens=7, spawns=["t"])]},
]


def test_a_dag_file_imports_its_forks_spawns_joins_and_waits(jsonl, imported):
    path = jsonl(DAG, "tree.dag.jsonl")
    assert sniff(path) == "aiperf-dag"
    trace = imported(import_log, "aiperf-dag", path, rate=2.0, seed=3)
    rows = {r["request_id"]: r for r in trace.df.to_dicts()}
    assert sorted(rows) == sorted(["root:0", "w:0", "t:0", "w:1", "root:1", "root:2", "f:0", "solo:0", "t#2:0"])
    assert trace.df["arrival_us"].is_sorted()
    deps = {rid: r["depends_on"] for rid, r in rows.items()}
    assert deps == {
        "root:0": [],
        "w:0": ["root:0"],  # a spawned child starts after the spawning turn
        "t:0": ["w:0"],
        "w:1": ["w:0", "t:0"],  # a bare spawn joins at the next turn
        "root:1": ["root:0"],  # runs while w does (join_at 2)
        "root:2": ["root:1", "w:1"],  # the join: w's last turn
        "f:0": ["root:2"],  # the fork continues the parent's last turn
        "solo:0": [],
        "t#2:0": ["solo:0"],  # the template's second copy
    }
    assert {rid: r["parent_session_id"] for rid, r in rows.items() if r["parent_session_id"]} == {
        "w:0": "root",
        "t:0": "w",
        "w:1": "root",
        "f:0": "root",
        "t#2:0": "solo",
    }
    # waits are the turns' delays (ms); arrivals follow the graph from the roots' Poisson starts
    assert {rid: r["wait_us"] for rid, r in rows.items() if r["depends_on"]} == {
        "w:0": 100_000,
        "t:0": 50_000,
        "w:1": 0,
        "root:1": 500_000,
        "root:2": 0,
        "f:0": 0,
        "t#2:0": 50_000,
    }
    gap = np.random.default_rng(3).exponential(1 / 2.0, size=1)[0]
    assert rows["root:0"]["arrival_us"] == 0 and rows["solo:0"]["arrival_us"] == round(gap * 1e6)
    assert rows["root:2"]["arrival_us"] == 500_000 and rows["t:0"]["arrival_us"] == 150_000
    # the fork child's history is the parent's with an empty live reply after each turn
    fork = json.loads(rows["f:0"]["body"])
    roles = ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert [m["role"] for m in fork["messages"]] == roles
    assert fork["messages"][-1]["content"] == "Expand." and fork["temperature"] == 0 and fork["max_tokens"] == 3
    assert json.loads(rows["w:0"]["body"])["messages"] == [{"role": "user", "content": "Work."}]  # a spawn starts fresh
    assert rows["root:0"]["model"] == "m" and rows["root:0"]["output_tokens"] == 8 == rows["root:0"]["max_tokens"]
    assert [rows[r]["input_tokens"] for r in ("w:0", "f:0")] == [2, 15]
    report = json.loads(trace.meta.import_report)["aiperf-dag"]
    assert (report["conversations"], report["roots"], report["copies"], report["spawns"], report["joins"]) == (5, 2, 6, 3, 2)
    assert report["forks"] == 1 and "output_tokens is max_tokens" in report["not_mapped"]


def test_an_orchestrator_fires_rounds_each_after_the_last_with_its_think_time(jsonl, imported):
    lines = [
        {"session_id": "start", "orchestrator": True, "rounds": [{"spawns": ["a", "b"]}, {"spawns": ["c"], "think_time_ms": 5}]},
        {"session_id": "a", "turns": [_turn("A.")]},
        {"session_id": "b", "turns": [_turn("B."), _turn("B2.", delay=10)]},
        {"session_id": "c", "context_mode": "message_array_with_responses", "turns": [_turn("C."), _turn("C2.")]},
    ]
    trace = imported(import_log, "aiperf-dag", jsonl(lines), rate=1.0)
    rows = {r["request_id"]: r for r in trace.df.to_dicts()}
    assert rows["a:0"]["depends_on"] == rows["b:0"]["depends_on"] == []
    assert rows["c:0"]["depends_on"] == ["a:0", "b:1"]
    assert rows["c:0"]["wait_us"] == 0 and rows["c:0"]["arrival_us"] == 10_000  # round 0's think time: none
    assert json.loads(rows["c:1"]["body"])["messages"] == [{"role": "user", "content": "C2."}]  # its own messages only


BAD_DAG_LINES = [
    ({"session_id": "x", "turns": [_turn("Hi.", max_token=3)]}, r"is not a dag_jsonl turn key \(field 'turns.0.max_token'\)"),
    ({"session_id": "x", "turns": [_turn("Hi.", forks=["r"]), _turn("Hi.")]}, r"a bare fork .* \(field 'turns.0.forks'\)"),
    ({"session_id": "x", "turns": [_turn("Hi.", spawns=["nope"])]}, r"names session 'nope', .* \(field 'turns.0.spawns'\)"),
    ({"session_id": "r", "turns": [_turn("Hi.")]}, r"'r' repeats line 1 \(field 'session_id'\)"),
    ({"session_id": "x", "turns": [{"messages": []}]}, r"is missing or not a non-empty list \(field 'turns.0.messages'\)"),
]


@pytest.mark.parametrize(("line", "message"), BAD_DAG_LINES)
def test_a_bad_dag_line_names_the_file_line_and_field(jsonl, tmp_path, line, message):
    path = jsonl([{"session_id": "r", "turns": [_turn("Root.")]}, line], "bad.jsonl")
    with pytest.raises(TraceError, match=rf"^bad.jsonl: line 2: {message}"):
        import_log("aiperf-dag", path, tmp_path / "x.parquet", rate=1.0)
    assert not (tmp_path / "x.parquet").exists()


def test_skip_bad_counts_bad_dag_lines_and_a_cycle_or_missing_rate_is_an_error(jsonl, imported, tmp_path):
    path = jsonl([{"session_id": "r", "turns": [_turn("Root.")]}, "{oops", {"session_id": "x", "turns": "no"}])
    trace = imported(import_log, "aiperf-dag", path, rate=1.0, skip_bad=True)
    report = json.loads(trace.meta.import_report)["aiperf-dag"]
    assert len(trace) == 1 and report["skipped_lines"] == 2 and report["first_skipped"][0]["line"] == 2
    with pytest.raises(ConfigError, match="--rate"):
        import_log("aiperf-dag", path, tmp_path / "y.parquet", skip_bad=True)
    loop = jsonl(
        [
            {"session_id": "r", "turns": [_turn("R.", spawns=["a"])]},
            {"session_id": "a", "turns": [_turn("A.", spawns=["b"])]},
            {"session_id": "b", "turns": [_turn("B.", spawns=["a"])]},
        ],
        "loop.jsonl",
    )
    with pytest.raises(TraceError, match=r"loop.jsonl: line 2: session 'a' names itself through a -> b -> a"):
        import_log("aiperf-dag", loop, tmp_path / "z.parquet", rate=1.0)


MULTI_TURN = [
    {"session_id": "a", "turns": [{"role": "system", "text": "Be kind."}, {"text": "Hi", "output_length": 4}]},
    {"session_id": "b", "turns": [{"timestamp": 500, "texts": ["One", "Two"]}, {"timestamp": 2500, "text": "Three"}]},
    {"session_id": "a", "turns": [{"text": "More", "delay": 1000, "image": "cat.png", "extra": {"top_p": 0.5}}]},
]


def test_a_multi_turn_file_is_sessions_of_chained_turns(jsonl, imported):
    path = jsonl(MULTI_TURN, "chat.jsonl")
    assert sniff(path) == "aiperf-multi-turn"
    trace = imported(import_log, "aiperf-multi-turn", path, rate=4.0)
    rows = {r["request_id"]: r for r in trace.df.to_dicts()}
    assert list(rows) == ["a:0", "b:0", "a:1", "b:1"]
    assert [rows[r]["arrival_us"] for r in rows] == [0, 500_000, 1_000_000, 2_500_000]
    assert rows["a:1"]["depends_on"] == ["a:0"] and rows["a:1"]["wait_us"] == 1_000_000 and rows["a:1"]["turn"] == 1
    assert rows["b:1"]["depends_on"] == ["b:0"] and rows["b:1"]["wait_us"] is None  # a timestamp, not a wait
    body = json.loads(rows["a:1"]["body"])
    assert body["messages"] == [
        {"role": "system", "content": "Be kind."},  # the hoisted system turn, first in every request
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "More"},
    ]
    assert body["top_p"] == 0.5 and rows["a:0"]["output_tokens"] == 4 and rows["a:1"]["output_tokens"] is None
    parts = [{"type": "text", "text": "One"}, {"type": "text", "text": "Two"}]
    assert json.loads(rows["b:0"]["body"])["messages"][0]["content"] == parts
    report = json.loads(trace.meta.import_report)["aiperf-multi-turn"]
    assert report["sessions"] == 2 and report["media_not_imported"] == 1


def test_a_bad_multi_turn_line_names_the_field_and_untimed_sessions_need_a_rate(jsonl, tmp_path):
    path = jsonl([MULTI_TURN[1], {"turns": [{"text": "x", "timestamp": 1, "delay": 2}]}], "mt.jsonl")
    message = r"^mt.jsonl: line 2: timestamp and delay cannot be set together \(field 'turns.0.delay'\)"
    with pytest.raises(TraceError, match=message):
        import_log("aiperf-multi-turn", path, tmp_path / "x.parquet")
    result = import_log("aiperf-multi-turn", path, tmp_path / "y.parquet", skip_bad=True)  # timed: no rate needed
    assert result.rows == 2
    with pytest.raises(ConfigError, match="session 'a' has no timestamp: pass --rate"):
        import_log("aiperf-multi-turn", jsonl(MULTI_TURN), tmp_path / "z.parquet")


def test_the_cli_imports_a_dag_file_found_by_auto(jsonl, tmp_path, monkeypatch):
    from replay.cli.main import main
    from replay.trace import read_trace

    monkeypatch.delenv("REPLAY_REDACT_KEY", raising=False)
    path = jsonl(DAG, "tree.dag.jsonl")
    out = tmp_path / "t.parquet"
    assert main(["import", "auto", str(path), "-o", str(out), "--rate", "2", "--no-redact", "--quiet"]) == 0
    trace = read_trace(out)
    assert trace.meta.source_format == "aiperf-dag" and len(trace) == 9
