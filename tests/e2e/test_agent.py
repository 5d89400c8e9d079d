"""An agent workload end to end through the CLI: generated (``replay generate --profile agent``),
inspected (the dependency graph's shape), swept with ``--sessions dag`` on the embedded engine at
contexts past 128k (it picks its 256k profile for such a trace: no 4xx), and judged: the graph
kept under ``dag``, broken by a replay that ignores the edges (``--sessions open``)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from replay.agentic import AgentConfig, generate_agentic


def test_generate_and_inspect_an_agent_trace(cli, tmp_path):
    out = tmp_path / "agent.parquet"
    made = cli("generate", "--profile", "agent", "--sessions", "3", "--steps", "5", "--max-context", "40000", "-o", str(out))
    assert made.returncode == 0, made.stderr
    shown = cli("inspect", str(out), "--json")
    assert shown.returncode == 0, shown.stderr
    graph = json.loads(shown.stdout)["dag"]
    assert graph["root_sessions"] == 3 and graph["edges"] >= graph["requests_with_dependencies"] > 0
    assert graph["critical_path_requests"] >= 2 and graph["wait_s"]["p50"] > 0
    table = cli("inspect", str(out))
    assert "dependency graph (depends_on)" in table.stdout and "critical_path_requests" in table.stdout
    bad = cli("generate", "--profile", "agent", "--max-context", "9000", "-o", str(tmp_path / "x.parquet"))
    assert bad.returncode != 0 and "--max-context: 9000 tokens does not hold" in bad.stderr


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory):
    # two sessions whose large tool results take contexts past 128k within a few steps
    config = AgentConfig(
        sessions=2,
        steps_mean=6,
        result_tokens_p50=12_000,
        max_result_tokens=40_000,
        max_context_tokens=200_000,
        session_rate=0.5,
        seed=3,
    )
    trace = generate_agentic(config)
    assert trace.df["input_tokens"].max() > 131_072
    return trace.write(tmp_path_factory.mktemp("agent") / "long.parquet")


def _judge(cli, trace, results) -> dict:
    judged = cli("fidelity", str(trace), str(results), "--json", timeout=300)
    assert judged.returncode in (0, 1, 3), judged.stderr
    stage = json.loads(judged.stdout)["stages"][0]
    return {m["name"]: m for m in stage["metrics"]} | {"_state": stage["state"]}


def test_a_dag_sweep_at_long_contexts_keeps_the_graph_and_an_open_replay_breaks_it(cli, long_trace, tmp_path):
    sim = ("--sim-config", '{"time_scale": 0.1}')
    # swept at two rates (the live trace offers 0.2 req/s: its session starts compressed 10x and
    # 20x) with --sessions auto, and judged by the sweep itself
    swept = tmp_path / "swept"
    done = cli("sweep", str(long_trace), "--rates", "2,4", "--fidelity", str(long_trace), "--out", str(swept), *sim, timeout=300)
    assert done.returncode in (0, 1, 3), done.stderr  # 1: a stage unfaithful, 3: cannot tell
    assert "h100-80g/qwen3-4b-2507" in done.stderr  # the 128k default does not hold this trace
    stages = json.loads((swept / "summary.json").read_text())["stages"]
    judged = json.loads((swept / "fidelity.json").read_text())["stages"]
    assert [s["requested_rate"] for s in stages] == [2, 4] and len(judged) == 2
    for stage, verdict in zip(stages, judged):
        assert stage["sessions"] == "dag" and stage["slip_ms"] is not None and stage["after_failed_dependency"] == 0
        assert stage["errors"] == {} and stage["rejected"] == 0 and stage["completed"] == stage["requests"]
        kept = {m["name"]: m for m in verdict["metrics"]}
        assert kept["sessions.dag.early"]["state"] == "pass" and kept["sessions.dag.early"]["replay"] == 0
    opened = tmp_path / "open"
    done = cli("run", str(long_trace), "--sessions", "open", "--speedup", "10", "--out", str(opened), *sim, timeout=300)
    assert done.returncode == 0, done.stderr
    stage = json.loads((opened / "summary.json").read_text())["stages"][0]
    assert stage["sessions"] == "open" and stage["errors"] == {} and stage["completed"] == stage["requests"]
    broken = _judge(cli, long_trace, opened)
    assert broken["sessions.dag.early"]["state"] == "fail" and broken["sessions.dag.early"]["replay"] > 0
    assert broken["_state"] == "unfaithful"


def test_the_agent_workload_example_runs_as_a_reader_runs_it(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "agent_workload.py"
    spec = importlib.util.spec_from_file_location("agent_workload_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    got = example.main(sessions=3, max_context=40_000)
    assert got["profile"] == "a100-80g/llama-3.1-8b"  # 40k contexts: the default holds them
    assert got["dag"]["errors"] == got["open"]["errors"] == 0
    assert got["dag"]["early"] == 0 and got["dag"]["early_state"] == "pass"
    assert got["open"]["early"] > 0 and "sessions.dag.early" in got["open"]["failed"]
    assert "--sessions dag:" in capsys.readouterr().out


@pytest.mark.data
def test_mooncake_requests_past_80k_tokens_replay_on_the_default_engine(cli, shared_traces, tmp_path):
    # the public Mooncake trace's 17 requests with more than 80k input tokens (to 191k): imported,
    # their bodies built from the recorded blocks, replayed with no --sim-profile
    lines = (shared_traces / "mooncake_synthetic.jsonl").read_text().splitlines(keepends=True)
    rows = [line for line in lines if json.loads(line)["input_length"] > 80_000]
    assert len(rows) == 17
    (tmp_path / "long.jsonl").write_text("".join(rows))
    done = cli("import", "mooncake", str(tmp_path / "long.jsonl"), "-o", str(tmp_path / "long.parquet"))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    sim = ("--sim-config", '{"time_scale": 0.002}')
    done = cli("run", str(tmp_path / "long.parquet"), "--speedup", "500", "--out", str(out), *sim, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "h100-80g/qwen3-4b-2507" in done.stderr  # 191k does not fit the 128k default
    stage = json.loads((out / "summary.json").read_text())["stages"][0]
    assert stage["completed"] == stage["requests"] == 17 and stage["errors"] == {} and stage["rejected"] == 0
    sent = pl.read_parquet(next(out.glob("stage00_*.parquet")))
    assert sent["prompt_tokens"].min() > 80_000 and sent["prompt_tokens"].max() > 190_000
