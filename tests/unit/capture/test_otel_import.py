"""`replay import otel` on a hand-written OTLP/JSON file (the collector's file exporter layout).

The sample, span by span (times in ms after T0): a root agent ``coder`` (conversation
``conv-1``) whose chat c1 asks for two parallel tools (t1, t2), chat c2 (OpenLLMetry's names)
asks for a ``task`` tool t3 that runs a subagent ``explorer`` (chat e1 with OpenInference's names,
tool t4, chat e2 with message content), and chat c3 carries the subagent's answer. The spans are
spread over lines the way a batching exporter writes them (children before their parents, the
root last), with a line that is not JSON, a logs line, an embeddings span and, in a second trace,
a chat span with neither usage nor content.
"""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from capture.importers.otel import import_otel
from replay.cli.main import main
from replay.errors import TraceError
from replay.prompts import count_tokens
from replay.trace import read_trace

T0 = 1_700_000_000_000_000_000
TRACE = "5b8efff798038103d269b633813fc60c"
OTHER = "0af7651916cd43dd8448eb211c80319c"


def s(v):
    return {"stringValue": v}


def i(v):
    return {"intValue": str(v)}


def attrs(**kv):
    return [{"key": k.replace("__", "."), "value": v} for k, v in kv.items()]


def span(span_id, parent, name, start_ms, end_ms, attributes, trace=TRACE, **extra):
    out = {
        "traceId": trace,
        "spanId": span_id,
        "parentSpanId": parent or "",
        "name": name,
        "kind": 3,
        "startTimeUnixNano": str(T0 + start_ms * 1_000_000),
        "endTimeUnixNano": str(T0 + end_ms * 1_000_000),
        "attributes": attributes,
        "status": {},
    }
    out.update(extra)
    return out


def line(*spans):
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": attrs(service__name=s("agent"))},
                    "scopeSpans": [{"scope": {"name": "test"}, "spans": list(spans)}],
                }
            ]
        }
    )


AGENT = span(
    "a1", None, "invoke_agent coder", 0, 1000,
    attrs(gen_ai__operation__name=s("invoke_agent"), gen_ai__agent__name=s("coder"), gen_ai__conversation__id=s("conv-1")),
)  # fmt: skip
C1 = span(
    "c1", "a1", "chat gpt-x", 10, 110,
    attrs(
        gen_ai__operation__name=s("chat"), gen_ai__request__model=s("gpt-x"), gen_ai__request__max_tokens=i(256),
        gen_ai__usage__input_tokens=i(100), gen_ai__usage__output_tokens=i(20),
        gen_ai__usage__cache_read__input_tokens=i(64), gen_ai__response__time_to_first_chunk={"doubleValue": 0.05},
    ),
)  # fmt: skip
T1 = span(
    "t1",
    "a1",
    "execute_tool read_file",
    120,
    300,
    attrs(gen_ai__operation__name=s("execute_tool"), gen_ai__tool__name=s("read_file")),
)
T2 = span(
    "t2", "a1", "execute_tool search", 125, 250, attrs(gen_ai__operation__name=s("execute_tool"), gen_ai__tool__name=s("search"))
)
# OpenLLMetry (traceloop) names: llm.request.type, gen_ai.usage.prompt_tokens / completion_tokens
C2 = span(
    "c2", "a1", "openai.chat", 310, 400,
    attrs(llm__request__type=s("chat"), gen_ai__request__model=s("gpt-x"), gen_ai__usage__prompt_tokens=i(150),
          gen_ai__usage__completion_tokens=i(30)),
)  # fmt: skip
T3 = span(
    "t3", "a1", "execute_tool task", 410, 800, attrs(gen_ai__operation__name=s("execute_tool"), gen_ai__tool__name=s("task"))
)
SUB = span(
    "s1",
    "t3",
    "invoke_agent explorer",
    420,
    790,
    attrs(gen_ai__operation__name=s("invoke_agent"), gen_ai__agent__name=s("explorer")),
)
# OpenInference names: openinference.span.kind, llm.token_count.*, llm.model_name, llm.invocation_parameters
E1 = span(
    "e1", "s1", "ChatCompletion", 430, 500,
    attrs(openinference__span__kind=s("LLM"), llm__model_name=s("gpt-y"), llm__token_count__prompt=i(40),
          llm__token_count__completion=i(10), llm__token_count__prompt_details__cache_read=i(16),
          llm__invocation_parameters=s('{"max_tokens": 64}')),
)  # fmt: skip
T4 = span("t4", "s1", "execute_tool grep", 510, 600, attrs(gen_ai__operation__name=s("execute_tool")))
E2_INPUT = [
    {"role": "user", "parts": [{"type": "text", "content": "Find the config loader."}]},
    {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "call_1", "name": "grep", "arguments": {"pattern": "load_config"}}],
    },
    {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call_1", "response": "src/config.py:12: def load_config()"}],
    },
]
E2_OUTPUT = [{"role": "assistant", "parts": [{"type": "text", "content": "It is in src/config.py."}], "finish_reason": "stop"}]
E2 = span(
    "e2", "s1", "chat gpt-y", 610, 700,
    attrs(
        gen_ai__operation__name=s("chat"), gen_ai__request__model=s("gpt-y"), gen_ai__usage__input_tokens=i(77),
        gen_ai__usage__output_tokens=i(9), gen_ai__system_instructions=s('[{"type": "text", "content": "You explore code."}]'),
        gen_ai__input__messages=s(json.dumps(E2_INPUT)), gen_ai__output__messages=s(json.dumps(E2_OUTPUT)),
    ),
)  # fmt: skip
C3 = span(
    "c3", "a1", "chat gpt-x", 810, 900,
    attrs(gen_ai__operation__name=s("chat"), gen_ai__request__model=s("gpt-x"), gen_ai__usage__input_tokens=i(300),
          gen_ai__usage__output_tokens=i(40)),
    status={"code": 2, "message": "upstream 503"},
)  # fmt: skip
EMBED = span("m1", "a1", "embeddings text-embedding-3", 20, 30, attrs(gen_ai__operation__name=s("embeddings")))
NO_USAGE = span("x1", None, "chat gpt-x", 2000, 2100, attrs(gen_ai__operation__name=s("chat")), trace=OTHER)

LINES = [
    line(C1, T1, EMBED),
    line(T2, C2, E1),
    '{"resourceSpans": [',  # line 3: cut short
    line(T4, E2, SUB, T3),
    line(C3, AGENT),
    json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": "hi"}}]}]}]}),
    line(NO_USAGE),  # line 7
]


@pytest.fixture
def sample(tmp_path):
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    return path


def test_a_bad_line_is_one_line_naming_file_and_line(sample, tmp_path):
    with pytest.raises(TraceError, match=r"^spans\.jsonl: line 3: not valid JSON$"):
        import_otel(sample, tmp_path / "t.parquet")
    assert not (tmp_path / "t.parquet").exists()


def test_a_request_span_without_usage_or_content_names_line_span_and_field(tmp_path):
    path = tmp_path / "spans.jsonl"
    path.write_text(line(C1) + "\n" + line(NO_USAGE) + "\n")
    with pytest.raises(TraceError) as e:
        import_otel(path, tmp_path / "t.parquet")
    assert str(e.value) == (
        "spans.jsonl: line 2: span x1: a request span without an input token count or message content "
        "(field 'gen_ai.usage.input_tokens')"
    )


def test_the_sample_maps_requests_sessions_tokens_and_edges(sample, tmp_path):
    result = import_otel(sample, tmp_path / "t.parquet", skip_bad=True)
    trace = read_trace(result.path)
    df = trace.df
    rows = {r["request_id"]: r for r in df.to_dicts()}
    assert df["request_id"].to_list() == ["c1", "c2", "e1", "e2", "c3"]
    assert trace.meta.t0_unix_us == (T0 + 10_000_000) // 1000
    assert df["arrival_us"].to_list() == [0, 300_000, 420_000, 600_000, 800_000]
    # sessions: the root agent's conversation id; the subagent's own span id, naming its spawner
    assert [rows[r]["session_id"] for r in ("c1", "c2", "c3")] == ["conv-1"] * 3
    assert rows["e1"]["session_id"] == rows["e2"]["session_id"] == "s1"
    assert rows["e1"]["parent_session_id"] == "conv-1" and rows["c1"]["parent_session_id"] is None
    assert [rows[r]["agent"] for r in ("c1", "e1")] == ["coder", "explorer"]
    assert [rows[r]["turn"] for r in ("c1", "c2", "c3", "e1", "e2")] == [0, 1, 2, 0, 1]
    assert rows["c3"]["parent_request_id"] == "c2"
    # edges: the tool round (c1 asked for t1, t2; c2 follows), the spawn (c2 -> e1), the
    # subagent's chain, and the join (c3 carries the subagent's last answer, e2)
    assert {r: rows[r]["depends_on"] for r in rows} == {
        "c1": [],
        "c2": ["c1"],
        "e1": ["c2"],
        "e2": ["e1"],
        "c3": ["c2", "e2"],
    }
    assert {r: rows[r]["wait_us"] for r in rows} == {
        "c1": None,
        "c2": 200_000,  # 310 - c1's end 110
        "e1": 30_000,  # 430 - c2's end 400
        "e2": 110_000,
        "c3": 110_000,  # 810 - e2's end 700, the later of its two dependencies
    }
    # tokens in each naming style; token-only rows are synthesized, the content row is real text
    assert [rows[r]["input_tokens"] for r in ("c1", "c2", "e1", "c3")] == [100, 150, 40, 300]
    assert [rows[r]["output_tokens"] for r in ("c1", "c2", "e1", "e2", "c3")] == [20, 30, 10, 9, 40]
    assert [rows[r]["cached_tokens"] for r in ("c1", "c2", "e1")] == [64, None, 16]
    assert [rows[r]["max_tokens"] for r in ("c1", "c2", "e1")] == [256, 30, 64]
    assert [rows[r]["model"] for r in ("c1", "e1")] == ["gpt-x", "gpt-y"]
    assert rows["c1"]["ttft_us"] == 50_000 and rows["c1"]["e2e_us"] == 100_000
    assert rows["c3"]["status"] == 500 and rows["c1"]["status"] == 200
    assert all(rows[r]["body"] is None for r in ("c1", "c2", "e1", "c3"))
    assert all(len(rows[r]["block_hashes"]) == rows[r]["input_tokens"] // 16 for r in rows)
    body = json.loads(rows["e2"]["body"])
    assert body["model"] == "gpt-y"
    assert body["messages"] == [
        {"role": "system", "content": "You explore code."},
        {"role": "user", "content": "Find the config loader."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "grep", "arguments": '{"pattern":"load_config"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "src/config.py:12: def load_config()"},
    ]
    assert rows["e2"]["response"] == "It is in src/config.py." and rows["e2"]["tool_calls"] == []
    assert rows["e2"]["input_tokens"] > 10  # from the text, as a request log's
    # the whole trace replays without the text it lacks
    assert trace.meta.redaction_policy == "none" and json.loads(trace.meta.synthesis)["rule"] == "prompt-vocab-1"
    report = json.loads(trace.meta.import_report)
    assert report["skipped_lines"] == 2 and [f["line"] for f in report["first_skipped"]] == [3, 7]
    assert report["other_signal_lines"] == 1
    assert report["spans_not_mapped"] == {"embeddings": 1}
    assert report["tool_spans"] == 4 and report["tool_spans_linked"] == 4
    assert report["spawns_linked"] == 1 and report["joins_linked"] == 1
    assert report["attribute_styles"] == {"openinference": 1, "openllmetry": 1, "semconv": 3}
    assert report["content_rows"] == 1 and report["synthesized_rows"] == 4
    assert report["subagent_sessions"] == 1 and report["sessions"] == 2


def test_cli_redacts_content_by_default_and_needs_a_key_only_for_it(sample, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("REPLAY_REDACT_KEY", raising=False)
    out = tmp_path / "t.parquet"
    assert main(["import", "otel", str(sample), "-o", str(out), "--skip-bad", "--quiet"]) == 2
    assert "REPLAY_REDACT_KEY" in capsys.readouterr().err and not out.exists()
    monkeypatch.setenv("REPLAY_REDACT_KEY", "otel-test-key-0123456789abcdef")
    # c1's content comes in log records (--logs), with an email address in it
    logs = tmp_path / "logs.jsonl"
    asked = "Mail the report to jane.roe@example.com please."
    logs.write_text(logs_line(log_record("c1", "gen_ai.user.message", {"content": asked})) + "\n")
    assert main(["import", "otel", str(sample), "-o", str(out), "--skip-bad", "--quiet", "--logs", str(logs)]) == 0
    said = capsys.readouterr().out
    assert "skipped 2 malformed lines (first: 3: not valid JSON)" in said and "(5 requests)" in said
    trace = read_trace(out)
    assert trace.meta.redaction_policy == "redacted" and trace.df.height == 5
    rows = {r["request_id"]: r for r in trace.df.to_dicts()}
    c1 = json.loads(rows["c1"]["body"])["messages"][0]["content"]
    assert "jane.roe@example.com" not in c1 and c1.startswith("Mail the report to ")
    assert rows["c1"]["input_tokens"] == count_tokens(asked)  # tokens of the raw text, as logs keep
    # token-only spans need no key at all
    monkeypatch.delenv("REPLAY_REDACT_KEY")
    tokens_only = tmp_path / "tokens.jsonl"
    tokens_only.write_text(line(C1, T1) + "\n" + line(C2, C3, AGENT) + "\n")
    assert main(["import", "otel", str(tokens_only), "-o", str(out), "--quiet"]) == 0
    trace = read_trace(out)
    assert trace.meta.redaction_policy == "synthetic" and trace.df["body"].is_null().all()
    assert trace.df["depends_on"].to_list() == [[], ["c1"], ["c2"]]


def test_spans_of_one_trace_spread_far_apart_still_link(tmp_path):
    """The root comes last, after many lines of other traces: the trace is held until then."""
    path = tmp_path / "spans.jsonl"
    filler = [
        line(span(f"f{k}", None, "chat m", 5 + k, 6 + k, attrs(gen_ai__usage__input_tokens=i(8)), trace=f"{k:032x}"))
        for k in range(40)
    ]
    path.write_text("\n".join([line(C1, T1, T2), *filler, line(C2, AGENT)]) + "\n")
    df = read_trace(import_otel(path, tmp_path / "t.parquet").path).df
    rows = {r["request_id"]: r for r in df.to_dicts()}
    assert rows["c2"]["depends_on"] == ["c1"] and rows["c2"]["session_id"] == "conv-1"
    assert df.height == 42 and df["arrival_us"].is_sorted()
    assert pl.Series([rows[f"f{k}"]["session_id"] for k in range(40)]).n_unique() == 40


# ---------------------------------------------------------------------------------------------
# OTLP protobuf files: the collector file exporter's `format: proto` framing


def _hex_ids(obj):
    """The sample's line with its span ids as 8 bytes in hex (protobuf ids are bytes)."""
    obj = json.loads(obj)
    for rs in obj["resourceSpans"]:
        for sc in rs["scopeSpans"]:
            for sp in sc["spans"]:
                for name in ("spanId", "parentSpanId"):
                    if sp.get(name):
                        sp[name] = sp[name].encode().hex().rjust(16, "0")
    return obj


def _framed(objs) -> bytes:
    """Each object as a protobuf TracesData: a 4-byte big-endian length, then the message."""
    import base64

    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    out = b""
    for obj in objs:
        obj = json.loads(json.dumps(obj))
        for rs in obj["resourceSpans"]:
            for sc in rs["scopeSpans"]:
                for sp in sc["spans"]:
                    for name in ("traceId", "spanId", "parentSpanId"):
                        sp[name] = base64.b64encode(bytes.fromhex(sp.get(name) or "")).decode()
        data = ParseDict(obj, TracesData()).SerializeToString()
        out += len(data).to_bytes(4, "big") + data
    return out


TRACE_LINES = [_hex_ids(LINES[i]) for i in (0, 1, 3, 4)]  # the sample's well-formed trace lines


def test_a_protobuf_file_imports_as_its_json_lines_do(tmp_path):
    json_path, proto_path = tmp_path / "spans.jsonl", tmp_path / "spans.pb"
    json_path.write_text("".join(json.dumps(o) + "\n" for o in TRACE_LINES))
    proto_path.write_bytes(_framed(TRACE_LINES))
    from_json = import_otel(json_path, tmp_path / "j.parquet")
    from_proto = import_otel(proto_path, tmp_path / "p.parquet")
    assert (from_json.meta.source_format, from_proto.meta.source_format) == ("otlp-json", "otlp-protobuf")
    a, b = read_trace(from_json.path).df, read_trace(from_proto.path).df
    assert a.height == 5 and a.equals(b)
    assert b["body"].null_count() == 4 and "Find the config loader." in b["body"].drop_nulls()[0]  # e2's content, read again
    report_a, report_b = json.loads(from_json.meta.import_report), json.loads(from_proto.meta.import_report)
    assert {k: v for k, v in report_b.items() if k != "format"} == {k: v for k, v in report_a.items() if k != "format"}


def test_a_protobuf_message_cut_short_or_not_protobuf_is_one_line(tmp_path):
    good = _framed(TRACE_LINES)
    path = tmp_path / "spans.pb"
    path.write_bytes(good + _framed([_hex_ids(line(NO_USAGE.copy() | {"spanId": "x1"}))])[:-5])
    with pytest.raises(TraceError) as e:
        import_otel(path, tmp_path / "t.parquet")
    assert re.fullmatch(
        r"spans\.pb: message 5: cut short: its length prefix says \d+ bytes, \d+ follow \(byte \d+\)", str(e.value)
    )
    assert not (tmp_path / "t.parquet").exists()
    # skipped and counted with --skip-bad
    result = import_otel(path, tmp_path / "t.parquet", skip_bad=True)
    report = json.loads(result.meta.import_report)
    assert result.rows == 5 and report["skipped_lines"] == 1 and report["first_skipped"][0]["line"] == 5
    path.write_bytes(good[: 4 + int.from_bytes(good[:4], "big")] + b"\x00\x00\x00\x03\xff\xff\xff")
    with pytest.raises(TraceError, match=r"^spans\.pb: message 2: is not an OTLP protobuf TracesData message$"):
        import_otel(path, tmp_path / "t.parquet")
    path.write_bytes(good + b"\x00\x00")
    with pytest.raises(TraceError, match=r"^spans\.pb: message 5: cut short: 2 bytes of a 4-byte length prefix at byte \d+$"):
        import_otel(path, tmp_path / "t.parquet")


# ---------------------------------------------------------------------------------------------
# prefix sharing of token-only rows


def _chat(span_id, parent, start_ms, end_ms, tokens, cached=None, trace=TRACE):
    kv = {"gen_ai__operation__name": s("chat"), "gen_ai__request__model": s("m"), "gen_ai__usage__input_tokens": i(tokens)}
    if cached is not None:
        kv["gen_ai__usage__cache_read__input_tokens"] = i(cached)
    return span(span_id, parent, "chat m", start_ms, end_ms, attrs(**kv), trace=trace)


def _agent(span_id, parent, name, start_ms, end_ms, trace=TRACE):
    kv = attrs(gen_ai__operation__name=s("invoke_agent"), gen_ai__agent__name=s(name))
    return span(span_id, parent, f"invoke_agent {name}", start_ms, end_ms, kv, trace=trace)


def test_token_only_steps_of_one_agent_extend_each_other(tmp_path, monkeypatch):
    """p1 -> tool -> p2 (longer: the history plus the tool result) -> p3 (shorter: the history
    was cut; the cache read 300 tokens) under agent "coder"; a subagent q1 spawned by it; another
    "coder" run (b1: no cache count; c1 in a third trace: 520 tokens read from the cache)."""
    from capture.importers.otel import PREFIX_BLOCK_TOKENS as BT
    from replay.blocks import block_hashes
    from replay.synth import BodyBuilder, Synthesizer

    assert BT == 256
    other, third = "1" * 32, "2" * 32
    spans = [
        _chat("p1", "a1", 0, 100, 600),
        span("t1", "a1", "execute_tool x", 110, 200, attrs(gen_ai__operation__name=s("execute_tool"))),
        _chat("p2", "a1", 210, 300, 1000),
        _chat("p3", "a1", 310, 400, 500, cached=300),
        _agent("s1", "a1", "explorer", 405, 600),
        _chat("q1", "s1", 420, 500, 700),
        _agent("a1", None, "coder", 0, 700),
        _chat("b1", "b0", 50, 150, 600, trace=other),
        _agent("b0", None, "coder", 40, 160, trace=other),
        _chat("c1", "c0", 800, 900, 900, cached=520, trace=third),
        _agent("c0", None, "coder", 790, 910, trace=third),
    ]
    path = tmp_path / "spans.jsonl"
    path.write_text(line(*spans) + "\n")
    trace = read_trace(import_otel(path, tmp_path / "t.parquet").path)
    rows = {r["request_id"]: r for r in trace.df.to_dicts()}
    ids = {r: rows[r]["hash_ids"] for r in rows}
    hashes = {r: rows[r]["block_hashes"] for r in rows}
    assert {r: len(v) for r, v in ids.items()} == {"p1": 3, "b1": 3, "p2": 4, "p3": 2, "q1": 3, "c1": 4}
    # p2 extends p1: all p1's ids (its last block, partial in p1, is whole in p2) then one new
    assert ids["p2"][:3] == ids["p1"] and ids["p2"][3] not in ids["p1"]
    assert hashes["p2"][: 600 // 16] == hashes["p1"] and len(hashes["p2"]) == 1000 // 16
    # p3 is shorter: only the cache's 300 tokens count, in whole 256-token ids
    assert ids["p3"][0] == ids["p2"][0] and ids["p3"][1] not in ids["p2"]
    assert hashes["p3"][:16] == hashes["p2"][:16] and hashes["p3"][16] != hashes["p2"][16]
    # the subagent's first step shares nothing with its spawner (its own system prompt and task)
    assert not set(ids["q1"]) & set(ids["p1"] + ids["p2"] + ids["p3"])
    # another run of the same agent without a cache count shares nothing ...
    assert not set(ids["b1"]) & set(ids["p1"] + ids["p2"])
    # ... with one, its first step shares the cache's 520 tokens, in whole ids, with the previous
    # start of that agent (b1, started after p1)
    assert ids["c1"][:2] == ids["b1"][:2] and not set(ids["c1"][2:]) & set(ids["b1"])
    report = json.loads(trace.meta.import_report)
    assert (report["prefix_rows"], report["prefix_tokens"], report["prefix_sources_forgotten"]) == (3, 600 + 256 + 512, 0)
    assert json.loads(trace.meta.synthesis)["block_tokens"] == BT
    # the texts the replay builds: equal ids give equal text, and the stored hashes are theirs
    synth = Synthesizer("gpt2", BodyBuilder(trace.meta).synth.synthesis)
    text = {r: synth.text(r, rows[r]["input_tokens"], ids[r]) for r in rows}
    assert text["p2"].startswith(text["p1"]) and not text["b1"].startswith(text["p1"][:200])
    for r in rows:
        assert block_hashes(synth.token_ids(r, rows[r]["input_tokens"], ids[r]), 16) == hashes[r], r
    # with no room for earlier rows' block hashes each row hashes its whole prompt: the same rows
    import capture.importers.otel as otel

    monkeypatch.setattr(otel, "PREFIX_HASHES_BYTES", 1)
    again = read_trace(import_otel(path, tmp_path / "again.parquet").path)
    assert again.df.equals(trace.df) and json.loads(again.meta.import_report)["prefix_hashes_recomputed"] == 3


# ---------------------------------------------------------------------------------------------
# content carried as log records (the per-message events of semconv 1.28-1.36, exported as OTLP
# logs: open-telemetry/semantic-conventions@3c0b5cca model/gen-ai/deprecated/events-deprecated.yaml)


def log_record(span_id, event, body, trace=TRACE, old_style=False):
    """One LogRecord as OTLP/JSON writes it: the event name in ``eventName`` (OTLP 1.5+) or, the
    older way, in an ``event.name`` attribute; the body an AnyValue map."""

    def value(v):
        if isinstance(v, dict):
            return {"kvlistValue": {"values": [{"key": k, "value": value(x)} for k, x in v.items()]}}
        if isinstance(v, list):
            return {"arrayValue": {"values": [value(x) for x in v]}}
        return i(v) if isinstance(v, int) else s(v)

    record = {"timeUnixNano": str(T0), "traceId": trace, "spanId": span_id, "body": value(body)}
    record["attributes"] = attrs(gen_ai__system=s("openai"))
    if old_style:
        record["attributes"] += attrs(event__name=s(event))
    else:
        record["eventName"] = event
    return record


def logs_line(*records):
    scope_logs = [{"scope": {"name": "openai"}, "logRecords": list(records)}]
    return json.dumps({"resourceLogs": [{"resource": {}, "scopeLogs": scope_logs}]})


CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}}
LOG_SPANS = [
    span("l1", "la", "chat gpt-x", 10, 100,
         attrs(gen_ai__operation__name=s("chat"), gen_ai__request__model=s("gpt-x"), gen_ai__usage__input_tokens=i(30),
               gen_ai__usage__output_tokens=i(12))),
    span("lt", "la", "execute_tool ls", 110, 150, attrs(gen_ai__operation__name=s("execute_tool"))),
    # no usage: its content comes only from its log records
    span("l2", "la", "chat gpt-x", 160, 200, attrs(gen_ai__operation__name=s("chat"), gen_ai__request__model=s("gpt-x"))),
    span("la", None, "invoke_agent coder", 0, 210, attrs(gen_ai__operation__name=s("invoke_agent"))),
]  # fmt: skip
LOG_LINES = [
    logs_line(
        log_record("l1", "gen_ai.system.message", {"content": "You are terse."}),
        log_record("l1", "gen_ai.user.message", {"content": "List the files."}),
        log_record(
            "l1",
            "gen_ai.choice",
            {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [CALL]}},
        ),
        log_record("zz", "gen_ai.user.message", {"content": "a span this file does not have"}),
    ),  # fmt: skip
    logs_line(
        {"timeUnixNano": str(T0), "body": s("an ordinary log line")},
        log_record("l2", "gen_ai.system.message", {"content": "You are terse."}, old_style=True),
        log_record("l2", "gen_ai.user.message", {"content": "List the files."}, old_style=True),
        log_record("l2", "gen_ai.assistant.message", {"tool_calls": [CALL]}, old_style=True),
        log_record("l2", "gen_ai.tool.message", {"content": "a.py b.py", "id": "call_1"}, old_style=True),
        log_record(
            "l2", "gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {"content": "Two files."}}, old_style=True
        ),
    ),  # fmt: skip
]
L1_MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List the files."}]
L2_MESSAGES = [
    *L1_MESSAGES,
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a.py b.py"},
]


def _bodies(result):
    return {r["request_id"]: r for r in read_trace(result.path).df.to_dicts()}


def test_log_records_give_spans_their_content(tmp_path):
    spans, logs = tmp_path / "spans.jsonl", tmp_path / "logs.jsonl"
    spans.write_text(line(*LOG_SPANS) + "\n")
    logs.write_text("\n".join(LOG_LINES) + "\n")
    result = import_otel(spans, tmp_path / "t.parquet", logs=logs)
    rows = _bodies(result)
    assert json.loads(rows["l1"]["body"]) == {"model": "gpt-x", "messages": L1_MESSAGES}
    assert json.loads(rows["l2"]["body"]) == {"model": "gpt-x", "messages": L2_MESSAGES}
    # the answers: l1's a call (its argument tokens), l2's text
    assert rows["l1"]["response"] is None and rows["l1"]["tool_calls"] == [count_tokens(CALL["function"]["arguments"])]
    assert rows["l2"]["response"] == "Two files." and rows["l2"]["output_tokens"] == 3
    # tokens from the text, as for any request with content (l2 has no usage count at all)
    assert rows["l1"]["input_tokens"] == count_tokens("You are terse.") + count_tokens("List the files.")
    assert rows["l2"]["input_tokens"] > rows["l1"]["input_tokens"]
    assert rows["l1"]["hash_ids"] is None and rows["l2"]["depends_on"] == ["l1"]
    report = json.loads(result.meta.import_report)
    assert (report["content_rows"], report["content_rows_from_logs"], report["synthesized_rows"]) == (2, 2, 0)
    assert (report["log_lines"], report["log_records"], report["log_events_joined"], report["log_events_not_joined"]) == (
        2, 10, 8, 1,
    )  # fmt: skip
    # one file holding both kinds of lines reads the same
    both = tmp_path / "both.jsonl"
    both.write_text("\n".join([LOG_LINES[0], line(*LOG_SPANS), LOG_LINES[1]]) + "\n")
    assert read_trace(import_otel(both, tmp_path / "b.parquet").path).df.equals(read_trace(result.path).df)
    # and so do the records as a length-prefixed protobuf LogsData file
    import base64

    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.logs.v1.logs_pb2 import LogsData

    framed = b""
    for text in LOG_LINES:
        obj = json.loads(text)
        for record in obj["resourceLogs"][0]["scopeLogs"][0]["logRecords"]:
            for name in ("traceId", "spanId"):
                if name in record:
                    record[name] = base64.b64encode(record[name].encode()).decode()  # the test's ids as bytes
        data = ParseDict(obj, LogsData()).SerializeToString()
        framed += len(data).to_bytes(4, "big") + data
    proto = tmp_path / "logs.pb"
    proto.write_bytes(framed)
    hexed = [
        span(sp["spanId"].encode().hex(), sp["parentSpanId"].encode().hex(), sp["name"], 0, 0, sp["attributes"],
             trace=TRACE.encode().hex()) | {k: sp[k] for k in ("startTimeUnixNano", "endTimeUnixNano")}
        for sp in LOG_SPANS
    ]  # fmt: skip
    spans.write_text(line(*hexed) + "\n")
    rows = _bodies(import_otel(spans, tmp_path / "p.parquet", logs=proto))
    assert json.loads(rows["l2".encode().hex()]["body"])["messages"] == L2_MESSAGES


def test_a_span_without_usage_needs_its_log_records(tmp_path):
    spans = tmp_path / "spans.jsonl"
    spans.write_text(line(*LOG_SPANS) + "\n")
    with pytest.raises(TraceError) as e:
        import_otel(spans, tmp_path / "t.parquet")
    assert str(e.value) == (
        "spans.jsonl: line 1: span l2: a request span without an input token count or message content "
        "(field 'gen_ai.usage.input_tokens')"
    )
    # records without text (the application did not opt in to content) are no content either
    logs = tmp_path / "logs.jsonl"
    logs.write_text(logs_line(log_record("l2", "gen_ai.user.message", {}), log_record("l2", "gen_ai.choice", {"index": 0})))
    result = import_otel(spans, tmp_path / "t.parquet", logs=logs, skip_bad=True)
    report = json.loads(result.meta.import_report)
    assert result.rows == 1 and report["skipped_lines"] == 1 and report["content_rows"] == 0
    logs.write_text("{not json\n")
    with pytest.raises(TraceError, match=r"^logs\.jsonl: line 1: not valid JSON$"):
        import_otel(spans, tmp_path / "t.parquet", logs=logs)
