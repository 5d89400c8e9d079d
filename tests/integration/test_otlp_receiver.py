"""The OTLP/HTTP receiver (`replay capture --otlp`) and OTLP protobuf files, fed by a real producer.

One run of the instrumented agent loop (tests/integration/otel_loop.py) exports every span five
ways at once: by the real ``opentelemetry-exporter-otlp-proto-http`` ``OTLPSpanExporter`` over
HTTP on 127.0.0.1 to one receiver plainly and to another gzip-compressed, and to files as OTLP/JSON
lines and as length-prefixed OTLP protobuf (the collector's ``format: proto`` framing). The JSON
file's lines are also POSTed as ``application/json`` to a third receiver. Each receiver's Trace
must equal the JSON file's import row for row (requests, tokens, sessions, edges, waits, block
hashes), and so must the protobuf file's import.
"""

from __future__ import annotations

import json
import urllib.request

import polars as pl
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from capture.importers.otel import import_otel
from capture.otlp import SPOOL_FILE, OtlpConfig, OtlpReceiver, finish
from replay.sim import SimConfig, start_sim
from replay.trace import read_trace

from tests.integration.otel_loop import OtlpJsonFileExporter, OtlpProtobufFileExporter, check_graph, run_agent


@pytest.fixture(scope="module")
def server():
    with start_sim(SimConfig(profile="instant", time_scale=0, mean_parallel_tool_calls=3.0, max_parallel_tool_calls=4)) as s:
        yield s


def receiver(path, **kwargs) -> OtlpReceiver:
    r = OtlpReceiver(OtlpConfig(out=path, port=0, **kwargs))
    r.start()
    return r


def test_receiver_and_protobuf_file_give_the_trace_of_the_json_file(server, tmp_path, monkeypatch):
    plain, gz, posted = receiver(tmp_path / "plain"), receiver(tmp_path / "gzip"), receiver(tmp_path / "json")
    json_file, proto_file = OtlpJsonFileExporter(tmp_path / "spans.jsonl"), OtlpProtobufFileExporter(tmp_path / "spans.pb")
    try:
        agent = run_agent(
            server,
            monkeypatch,
            False,
            [
                OTLPSpanExporter(endpoint=plain.url + "/v1/traces"),
                OTLPSpanExporter(endpoint=gz.url + "/v1/traces", compression=Compression.Gzip),
                json_file,
                proto_file,
            ],
        )
        for line in json_file.path.read_bytes().splitlines():
            req = urllib.request.Request(
                posted.url + "/v1/traces", data=line, headers={"Content-Type": "application/json"}, method="POST"
            )
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200 and json.loads(resp.read()) == {}
    finally:
        counts = [r.stop() for r in (plain, gz, posted)]
    assert json_file.lines >= 4 and proto_file.messages >= 4  # spread over exports (each processor batches its own)
    for c in counts:
        assert c["spans_rejected"] == 0 and c["spans_spooled"] == c["spans_received"] > 6 and c["requests"] >= 4
    expected = read_trace(import_otel(json_file.path, tmp_path / "from-json.parquet").path).df
    check_graph(expected, agent)
    assert expected["input_tokens"].to_list() == [c[1].prompt_tokens for c in agent.calls]
    from_proto = import_otel(proto_file.path, tmp_path / "from-proto.parquet")
    assert from_proto.meta.source_format == "otlp-protobuf"
    frames = {"protobuf file": read_trace(from_proto.path).df}
    for name, r in (("receiver", plain), ("gzip receiver", gz), ("json receiver", posted)):
        result = finish(r.cfg)
        assert result is not None and result.path == r.cfg.out / "trace.parquet"
        frames[name] = read_trace(result.path).df
    for name, df in frames.items():
        assert df.columns == expected.columns, name
        assert df.equals(expected), f"{name}: {df.head(3)} != {expected.head(3)}"


def test_the_grpc_receiver_gives_the_trace_of_the_json_file(server, tmp_path, monkeypatch):
    """OTLP/gRPC (`replay capture --otlp-grpc`), fed by the real gRPC exporter, plain and gzip:
    the same spool and Trace as the JSON file's (grpcio and the gRPC exporter are in the test
    extra)."""
    from grpc import Compression as GrpcCompression
    from opentelemetry.exporter.otlp.proto.grpc import trace_exporter as grpc_exporter

    plain, gz = receiver(tmp_path / "grpc", grpc=True), receiver(tmp_path / "grpc-gzip", grpc=True)
    json_file = OtlpJsonFileExporter(tmp_path / "spans.jsonl")
    try:
        agent = run_agent(
            server,
            monkeypatch,
            False,
            [
                grpc_exporter.OTLPSpanExporter(endpoint=plain.url, insecure=True),
                grpc_exporter.OTLPSpanExporter(endpoint=gz.url, insecure=True, compression=GrpcCompression.Gzip),
                json_file,
            ],
        )
    finally:
        counts = [r.stop() for r in (plain, gz)]
    for c in counts:
        assert c["spans_rejected"] == 0 and c["spans_spooled"] == c["spans_received"] > 6 and c["requests"] >= 4
    expected = read_trace(import_otel(json_file.path, tmp_path / "from-json.parquet").path).df
    check_graph(expected, agent)
    for r in (plain, gz):
        assert read_trace(finish(r.cfg).path).df.equals(expected)


def test_receiver_spools_no_text_unless_told_to(server, tmp_path, monkeypatch):
    from redact.key import RedactionKey

    key = RedactionKey(b"otlp-receiver-test-key-0123456789")
    stripped, whole = receiver(tmp_path / "stripped"), receiver(tmp_path / "whole", keep_content=True)
    redacted = receiver(tmp_path / "redacted", key=key, redact_processes=1)
    json_file = OtlpJsonFileExporter(tmp_path / "spans.jsonl")
    email, phone = "jane.roe@example.com", "(415) 555-0134"
    task = f"Find why the build fails and fix it, then mail {email} or call {phone}."
    try:
        agent = run_agent(
            server,
            monkeypatch,
            True,
            [
                OTLPSpanExporter(endpoint=stripped.url + "/v1/traces"),
                OTLPSpanExporter(endpoint=whole.url + "/v1/traces"),
                OTLPSpanExporter(endpoint=redacted.url + "/v1/traces"),
                json_file,
            ],
            task=task,
        )
        # a span whose content does not parse is spooled without it (never as it came)
        odd = {"traceId": "ab" * 16, "spanId": "0dd0dd0dd0dd0dd0", "name": "chat m", "startTimeUnixNano": "1700000000000000000",
               "endTimeUnixNano": "1700000000100000000", "attributes": [
                   {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                   {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
                   {"key": "gen_ai.input.messages", "value": {"stringValue": f"not JSON: write to {email}"}}]}  # fmt: skip
        req = urllib.request.Request(
            redacted.url + "/v1/traces",
            data=json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [odd]}]}]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
    finally:
        stripped.stop()
        whole.stop()
        redacted.stop()
    secret = "Find why the build fails"
    assert secret in json_file.path.read_text() and secret in (whole.cfg.out / SPOOL_FILE).read_text()
    assert secret not in (stripped.cfg.out / SPOOL_FILE).read_text()
    assert "gen_ai.input.messages" not in (stripped.cfg.out / SPOOL_FILE).read_text()
    # without text: token-only rows with the engine's counts, the same graph
    bare = read_trace(finish(stripped.cfg).path).df
    check_graph(bare, agent)
    assert bare["body"].is_null().all()
    assert bare["input_tokens"].to_list() == [c[1].prompt_tokens for c in agent.calls]
    # kept whole (--no-redact): the bodies of the file import, raw
    kept = read_trace(finish(whole.cfg).path)
    assert kept.meta.redaction_policy == "none"
    assert kept.df.equals(read_trace(import_otel(json_file.path, tmp_path / "raw.parquet").path).df)
    assert kept.df["body"].is_not_null().all() and pl.Series([secret in b for b in kept.df["body"]]).any()
    # with a key: redacted before it is spooled (no email, no phone on disk), the rest of the text
    # kept; the Trace has the raw text's tokens, hashes (so its prefix sharing) and graph
    spool = (redacted.cfg.out / SPOOL_FILE).read_text()
    assert email not in spool and "555-0134" not in spool and "jane.roe" not in spool
    assert secret in spool and redacted.counts["spans_redacted"] == len(agent.calls)
    trace = read_trace(finish(redacted.cfg).path)
    assert trace.meta.redaction_policy == "redacted"
    odd_row = trace.df.filter(pl.col("request_id") == odd["spanId"])
    assert odd_row["body"].to_list() == [None] and odd_row["input_tokens"].to_list() == [12]
    df, raw = trace.df.filter(pl.col("request_id") != odd["spanId"]), kept.df
    for column in ("request_id", "input_tokens", "output_tokens", "block_hashes", "tool_calls", "depends_on", "wait_us"):
        assert df[column].to_list() == raw[column].to_list(), column
    assert not any(email in b or "555-0134" in b for b in df["body"])
    # the surrogates keep token counts: the redacted prompts are as long as the raw ones
    from replay.bodies import prompt_token_ids, text_slots
    from replay.tokenizer import load_tokenizer

    tok = load_tokenizer("gpt2")
    for mine, theirs in zip(df["body"], raw["body"]):
        mine_ids, raw_ids = (prompt_token_ids([s.text for s in text_slots(json.loads(b))], tok) for b in (mine, theirs))
        assert len(mine_ids) == len(raw_ids)


def _cli(out, *extra):
    import subprocess
    import sys

    from tests.integration.capture_proxy import ROOT

    proc = subprocess.Popen(
        [sys.executable, "-m", "replay.cli.main", "capture", "--otlp", "127.0.0.1:0", "--out", str(out), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("receiving OTLP/HTTP spans on http://127.0.0.1:"):
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(line + err)
    return proc, line.split()[4].rstrip(";")


def _export(url: str, runs: int) -> list[str]:
    """``runs`` agent runs of two chat calls each, exported span by span (each export
    acknowledged before the next); the chat spans' ids."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

    exporter = OTLPSpanExporter(endpoint=url)
    results = []
    export = exporter.export
    exporter.export = lambda spans: results.append(export(spans)) or results[-1]
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("cli-test")
    ids = []
    for run in range(runs):
        with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}):
            for step in range(2):
                attrs = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 100 * run + step + 1}
                with tracer.start_as_current_span("chat m", attributes=attrs) as span:
                    ids.append(format(span.get_span_context().span_id, "016x"))
    provider.shutdown()
    assert results and all(r is SpanExportResult.SUCCESS for r in results)
    return ids


def test_the_cli_receiver_loses_nothing_acknowledged_when_killed_and_continues(tmp_path):
    import signal

    out = tmp_path / "otlp"
    proc, url = _cli(out)
    try:
        first = _export(url, runs=3)  # every export answered 200, so on disk
    finally:
        proc.kill()  # no chance to finish: the spool is all there is
        proc.communicate(timeout=30)
    assert not (out / "trace.parquet").exists()
    recovered = import_otel(out / SPOOL_FILE, tmp_path / "recovered.parquet")
    assert sorted(read_trace(recovered.path).df["request_id"].to_list()) == sorted(first)
    # a restart into the folder continues the spool; SIGTERM writes the Trace of both runs
    proc, url = _cli(out)
    try:
        second = _export(url, runs=1)
    finally:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    # this run's counts, the Trace of the whole spool
    assert err.strip().splitlines()[-1] == (
        f"received 3 export requests, 3 spans spooled (0 rejected as malformed); wrote {out / 'trace.parquet'} (8 requests)"
    )
    df = read_trace(out / "trace.parquet").df
    assert sorted(df["request_id"].to_list()) == sorted(first + second)
    assert sorted(df["input_tokens"].to_list()) == [1, 1, 2, 2, 101, 102, 201, 202]
    assert df["depends_on"].to_list().count([]) == 4  # each run's second call waits for its first


def test_cli_refuses_the_proxys_flags_with_otlp(tmp_path, capsys):
    from replay.cli.main import main

    assert main(["capture", "--otlp", "127.0.0.1:0", "--out", str(tmp_path / "o"), "--sample", "0.5"]) == 2
    assert capsys.readouterr().err.strip() == "error: --sample: only with --upstream (the proxy), not --otlp"
    with pytest.raises(SystemExit):
        main(["capture", "--otlp", "127.0.0.1:0", "--upstream", "http://x", "--out", str(tmp_path / "o")])
