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


@pytest.mark.slow
def test_spans_and_the_proxys_capture_of_the_same_traffic_agree(server, tmp_path, monkeypatch):
    """The agent loop run once through the recording proxy (`replay capture`, raw text) while its
    spans are exported: the Trace from the spans and the Trace from the capture have the same
    requests in the same order, the same tokens (input counted from the same messages, output the
    engine's; the proxy's also hold the tool definitions, which the instrumentation leaves out),
    the same tool calls, and every edge the proxy can see (a step continuing its
    conversation) is the spans' edge too; the spans add what a proxy cannot see (the spawn of the
    subagent and its join)."""
    from types import SimpleNamespace

    from replay.bodies import prompt_token_ids, text_slots
    from replay.tokenizer import load_tokenizer
    from tests.integration.capture_proxy import capture

    path = tmp_path / "spans.jsonl"
    with capture(server.url, tmp_path / "cap", redact=False) as proxy:
        agent = run_agent(SimpleNamespace(url=proxy.url), monkeypatch, True, [OtlpJsonFileExporter(path)])
        assert proxy.stop() == 0
    spans = read_trace(import_otel(path, tmp_path / "spans.parquet").path).df
    captured = read_trace(tmp_path / "cap").df.sort("arrival_us", maintain_order=True)
    check_graph(spans, agent)
    assert captured.height == spans.height == len(agent.calls)
    for name in ("output_tokens", "tool_calls"):
        assert captured[name].to_list() == spans[name].to_list(), name
    # input: the same messages; the proxy also saw the tool definitions, which the
    # instrumentation does not record (no gen_ai.tool.definitions on its spans)
    tokenizer = load_tokenizer("gpt2")
    tool_tokens = [
        len(prompt_token_ids([s.text for s in text_slots(json.loads(b)) if s.path[0] == "tools"], tokenizer))
        for b in captured["body"].to_list()
    ]
    assert min(tool_tokens) > 0
    assert captured["input_tokens"].to_list() == [n + t for n, t in zip(spans["input_tokens"].to_list(), tool_tokens)]
    assert captured["output_tokens"].to_list() == [c[1].completion_tokens for c in agent.calls]
    # edges, by position: the proxy's (continuations) are the spans' own; the spans add the rest
    at_c = {r: i for i, r in enumerate(captured["request_id"].to_list())}
    at_s = {r: i for i, r in enumerate(spans["request_id"].to_list())}
    edges_c = {(at_c[d], i) for i, deps in enumerate(captured["depends_on"].to_list()) for d in deps}
    edges_s = {(at_s[d], i) for i, deps in enumerate(spans["depends_on"].to_list()) for d in deps}
    # m1 -> m2 (the step after the tools), m2 -> m3, m3 -> m4 and the subagent's s1 -> s2
    assert {(0, 3), (3, 4), (4, 5), (1, 2)} <= edges_c <= edges_s
    assert edges_s - edges_c <= {(0, 1), (2, 3)}, "only the spawn and the join are the spans' alone"
