"""`replay import otel` of spans from a real producer: the official ``openai`` SDK instrumented by
``opentelemetry-instrumentation-openai-v2`` runs a tool-calling agent loop against the embedded
engine, with the SDK's BatchSpanProcessor exporting the spans as OTLP/JSON lines.

The loop is what an agent framework does: an ``invoke_agent`` span around the run, each tool
call executed in an ``execute_tool`` span (semantic-convention names), the parallel calls of a
step on threads at once, and the first call of the first step delegated to a subagent (an
``invoke_agent`` span inside that tool span running chat calls of its own). The exporter is small
and written here: the SDK encodes the spans with its own OTLP encoder
(``opentelemetry-exporter-otlp-proto-common``), protobuf's ``json_format`` turns them into JSON
and the ids are written in hex, as the OTLP/JSON encoding and the collector's file exporter have
them. Small batches spread each trace's spans over many lines, children before their parents.

The import must give the loop's requests in order, with the tokens the engine reported, and the
edges: the spawn, the subagent's chain, the join, and every step after a tool round depending on
the step that asked for the tools; with message content captured, the bodies the SDK sent.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from capture.importers.otel import import_otel
from replay.cli.main import main
from replay.sim import SimConfig, start_sim
from replay.trace import read_trace

from tests.integration.test_sim_tools import CHAT_TOOLS

TOOL_SECONDS = 0.05  # each tool's run (a sleep), so a tool round has a wait worth measuring
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class OtlpJsonFileExporter(SpanExporter):
    """Each export batch as one line of OTLP/JSON (a ``TracesData`` object, ids in hex)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.lines = 0

    def export(self, spans) -> SpanExportResult:
        request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
        for rs in request.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    for name in _ID_FIELDS:
                        if span.get(name):
                            span[name] = base64.b64decode(span[name]).hex()
        with self.lock, self.path.open("a") as f:
            f.write(json.dumps({"resourceSpans": request["resourceSpans"]}, separators=(",", ":")) + "\n")
            self.lines += 1
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


@pytest.fixture(scope="module")
def server():
    with start_sim(SimConfig(profile="instant", time_scale=0, mean_parallel_tool_calls=3.0, max_parallel_tool_calls=4)) as s:
        yield s


class Agent:
    """The agent loop; ``calls`` holds each chat call in the order it started: (who, usage, the
    messages sent, the number of tool calls in the answer)."""

    def __init__(self, client: openai.OpenAI, tracer) -> None:
        self.client = client
        self.tracer = tracer
        self.calls: list[tuple[str, object, list[dict], int]] = []
        self.lock = threading.Lock()

    def chat(self, who: str, messages: list[dict], **kwargs):
        with self.lock:
            index = len(self.calls)
            self.calls.append((who, None, [dict(m) for m in messages], 0))
        if kwargs.pop("stream", False):
            stream = self.client.chat.completions.create(
                model="sim", messages=messages, stream=True, stream_options={"include_usage": True}, **kwargs
            )
            usage, calls, text = None, {}, ""
            for chunk in stream:
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for d in choice.delta.tool_calls or []:
                        c = calls.setdefault(d.index, {"id": d.id, "name": d.function.name, "arguments": ""})
                        c["arguments"] += d.function.arguments or ""
            message: dict = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in (calls[i] for i in sorted(calls))
                ]
        else:
            r = self.client.chat.completions.create(model="sim", messages=messages, **kwargs)
            usage = r.usage
            message = r.choices[0].message.model_dump(exclude_none=True)
        with self.lock:
            self.calls[index] = (who, usage, self.calls[index][2], len(message.get("tool_calls") or []))
        return message

    def tool(self, parent, call: dict, delegate: bool) -> str:
        token = otel_context.attach(otel_trace.set_span_in_context(parent))
        try:
            name = call["function"]["name"]
            attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call["id"]}
            with self.tracer.start_as_current_span(f"execute_tool {name}", attributes=attrs):
                if delegate:
                    return self.subagent(call["function"]["arguments"])
                time.sleep(TOOL_SECONDS)
                return f"{name}: done, {len(call['function']['arguments'])} bytes of arguments"
        finally:
            otel_context.detach(token)

    def subagent(self, task: str) -> str:
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "explorer"}
        with self.tracer.start_as_current_span("invoke_agent explorer", attributes=attrs):
            messages = [{"role": "user", "content": f"Explore: {task}"}]
            answer = self.chat("sub", messages, tools=CHAT_TOOLS, tool_choice="required", max_tokens=300)
            messages.append(answer)
            for call in answer["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "nothing found there"})
            answer = self.chat("sub", messages, tools=CHAT_TOOLS, tool_choice="none", max_tokens=40)
            return answer["content"]

    def run(self, steps: int = 3) -> None:
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder", "gen_ai.conversation.id": "run-1"}
        with self.tracer.start_as_current_span("invoke_agent coder", attributes=attrs) as root:
            messages: list[dict] = [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Find why the build fails and fix it."},
            ]
            with ThreadPoolExecutor(max_workers=4) as pool:
                for step in range(steps):
                    answer = self.chat("main", messages, tools=CHAT_TOOLS, tool_choice="required", stream=step == 1)
                    messages.append(answer)
                    calls = answer["tool_calls"]
                    results = list(pool.map(lambda c: self.tool(root, c[1], step == 0 and c[0] == 0), enumerate(calls)))
                    for call, result in zip(calls, results):
                        messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            self.chat("main", messages, tools=CHAT_TOOLS, tool_choice="none", max_tokens=50)


def record(server, path: Path, monkeypatch, content: bool) -> tuple[Agent, OtlpJsonFileExporter]:
    if content:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    else:
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    exporter = OtlpJsonFileExporter(path)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=5, max_export_batch_size=3))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0) as client:
            agent = Agent(client, provider.get_tracer("agent-loop"))
            agent.run()
    finally:
        instrumentor.uninstrument()
        provider.shutdown()  # flushes the last batch
    return agent, exporter


def check_graph(df, agent: Agent) -> None:
    who = [c[0] for c in agent.calls]
    assert df.height == len(agent.calls) == 6 and who == ["main", "sub", "sub", "main", "main", "main"]
    ids = df["request_id"].to_list()
    m1, s1, s2, m2, m3, m4 = ids
    rows = {r["request_id"]: r for r in df.to_dicts()}
    assert {r: rows[r]["depends_on"] for r in ids} == {m1: [], s1: [m1], s2: [s1], m2: [m1, s2], m3: [m2], m4: [m3]}
    assert [rows[r]["session_id"] for r in ids] == [
        "run-1",
        s1_session := rows[s1]["session_id"],
        s1_session,
        "run-1",
        "run-1",
        "run-1",
    ]
    assert s1_session != "run-1" and rows[s1]["parent_session_id"] == "run-1" and rows[m1]["parent_session_id"] is None
    assert [rows[r]["agent"] for r in ids] == ["coder", "explorer", "explorer", "coder", "coder", "coder"]
    assert [rows[r]["turn"] for r in ids] == [0, 0, 1, 1, 2, 3]
    # the step after a round of parallel tools waited for the slowest of them
    assert agent.calls[0][3] >= 2 and agent.calls[3][3] >= 2, "the steps' answers had parallel calls"
    assert rows[m3]["wait_us"] >= TOOL_SECONDS * 1e6 and rows[m4]["wait_us"] >= TOOL_SECONDS * 1e6
    assert df["arrival_us"].is_sorted()


def test_spans_without_content_import_to_token_rows_with_the_engines_counts(server, tmp_path, monkeypatch):
    path = tmp_path / "spans.jsonl"
    agent, exporter = record(server, path, monkeypatch, content=False)
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
    agent, _ = record(server, path, monkeypatch, content=True)
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
