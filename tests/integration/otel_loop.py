"""The agent loop the OpenTelemetry tests record: the official ``openai`` SDK instrumented by
``opentelemetry-instrumentation-openai-v2`` runs a tool-calling agent loop against the embedded
engine (:func:`run_agent`), and the exporters the tests write its spans with.

The loop is what an agent framework does: an ``invoke_agent`` span around the run, each tool
call executed in an ``execute_tool`` span (semantic-convention names), the parallel calls of a
step on threads at once, and the first call of the first step delegated to a subagent (an
``invoke_agent`` span inside that tool span running chat calls of its own). The file exporters
are small and written here: the SDK encodes the spans with its own OTLP encoder
(``opentelemetry-exporter-otlp-proto-common``); :class:`OtlpJsonFileExporter` turns them into
JSON with protobuf's ``json_format`` and writes the ids in hex, as the OTLP/JSON encoding and the
collector's file exporter have them; :class:`OtlpProtobufFileExporter` writes the protobuf
messages length-prefixed, as the collector's file exporter does with ``format: proto``.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
from google.protobuf.json_format import MessageToDict
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

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


class OtlpProtobufFileExporter(SpanExporter):
    """Each export batch as one OTLP protobuf message (the SDK's own encoder's
    ``ExportTraceServiceRequest``, the same bytes as a ``TracesData``) framed as the collector's
    file exporter frames ``format: proto``: a 4-byte big-endian length, then the message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.messages = 0

    def export(self, spans) -> SpanExportResult:
        data = encode_spans(spans).SerializeToString()
        with self.lock, self.path.open("ab") as f:
            f.write(len(data).to_bytes(4, "big") + data)
            self.messages += 1
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


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

    def run(self, steps: int = 3, task: str = "Find why the build fails and fix it.") -> None:
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder", "gen_ai.conversation.id": "run-1"}
        with self.tracer.start_as_current_span("invoke_agent coder", attributes=attrs) as root:
            messages: list[dict] = [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": task},
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


def run_agent(server, monkeypatch, content: bool, exporters: list[SpanExporter], batch: int = 3, **run) -> Agent:
    """Run the agent loop instrumented by the official instrumentation, each span exported by
    every one of ``exporters`` (a BatchSpanProcessor each, ``batch`` spans an export, so a
    trace's spans spread over many exports, children before their parents)."""
    if content:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    else:
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    provider = TracerProvider()
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=5, max_export_batch_size=batch))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0) as client:
            agent = Agent(client, provider.get_tracer("agent-loop"))
            agent.run(**run)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()  # flushes the last batch
    return agent


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
