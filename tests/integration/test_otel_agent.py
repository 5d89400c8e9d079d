"""`replay import otel` of spans from a real producer: the official ``openai`` SDK instrumented by
``opentelemetry-instrumentation-openai-v2`` runs a tool-calling agent loop against the embedded
engine (tests/integration/otel_loop.py), with the SDK's BatchSpanProcessor exporting the spans as
OTLP/JSON lines.

The import must give the loop's requests in order, with the tokens the engine reported, and the
edges: the spawn, the subagent's chain, the join, and every step after a tool round depending on
the step that asked for the tools; with message content captured, the bodies the SDK sent.
"""

from __future__ import annotations

import json

import pytest

from capture.importers.otel import import_otel
from replay.cli.main import main
from replay.sim import SimConfig, start_sim
from replay.trace import read_trace

from tests.integration.otel_loop import OtlpJsonFileExporter, check_graph, run_agent


@pytest.fixture(scope="module")
def server():
    with start_sim(SimConfig(profile="instant", time_scale=0, mean_parallel_tool_calls=3.0, max_parallel_tool_calls=4)) as s:
        yield s


def test_spans_without_content_import_to_token_rows_with_the_engines_counts(server, tmp_path, monkeypatch):
    path = tmp_path / "spans.jsonl"
    exporter = OtlpJsonFileExporter(path)
    agent = run_agent(server, monkeypatch, False, [exporter])
    assert exporter.lines >= 4  # spread over batches
    result = import_otel(path, tmp_path / "t.parquet")
    df = read_trace(result.path).df
    check_graph(df, agent)
    # tokens: exactly what the engine reported to the SDK, call by call
    assert df["input_tokens"].to_list() == [c[1].prompt_tokens for c in agent.calls]
    assert df["output_tokens"].to_list() == [c[1].completion_tokens for c in agent.calls]
    assert df["body"].is_null().all() and df["model"].to_list() == ["sim"] * 6
    assert df["max_tokens"].to_list()[1:3] == [300, 40]
    report = json.loads(result.meta.import_report)
    tools = sum(c[3] for c in agent.calls if c[0] == "main")  # the subagent answers its calls without tools
    assert report["tool_spans"] == tools and report["tool_spans_linked"] == tools
    assert report["spawns_linked"] == 1 and report["joins_linked"] == 1 and report["synthesized_rows"] == 6
    assert report["attribute_styles"] == {"semconv": 6}


@pytest.mark.slow
def test_spans_with_content_keep_the_bodies_sent(server, tmp_path, monkeypatch, capsys):
    path = tmp_path / "spans.jsonl"
    agent = run_agent(server, monkeypatch, True, [OtlpJsonFileExporter(path)])
    df = read_trace(import_otel(path, tmp_path / "raw.parquet").path).df
    check_graph(df, agent)
    assert df["output_tokens"].to_list() == [c[1].completion_tokens for c in agent.calls]
    for row, (_, _, sent, n_calls) in zip(df.to_dicts(), agent.calls):
        messages = json.loads(row["body"])["messages"]
        assert [m["role"] for m in messages] == [m["role"] for m in sent]
        assert [m.get("content") for m in messages if m["role"] != "assistant"] == [
            m.get("content") for m in sent if m["role"] != "assistant"
        ]
        assert [c["id"] for m in messages for c in m.get("tool_calls", [])] == [
            c["id"] for m in sent for c in m.get("tool_calls") or []
        ]
        assert len(row["tool_calls"]) == n_calls
    # through the CLI, redacted by default
    monkeypatch.setenv("REPLAY_REDACT_KEY", "otel-agent-test-key-0123456789")
    out = tmp_path / "red.parquet"
    assert main(["import", "otel", str(path), "-o", str(out), "--quiet"]) == 0
    assert "(6 requests)" in capsys.readouterr().out
    red = read_trace(out)
    assert red.meta.redaction_policy == "redacted" and red.df["depends_on"].to_list() == df["depends_on"].to_list()
