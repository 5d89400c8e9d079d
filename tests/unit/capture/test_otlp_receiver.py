"""The OTLP/HTTP receiver's answers to bad input, its spool's torn tail, its folder lock.

Bodies are POSTed with urllib; the error bodies are read with googleapis' own ``google.rpc.Status``
(installed with opentelemetry-exporter-otlp-proto-http) and the 200s with opentelemetry-proto's
``ExportTraceServiceResponse``.
"""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request

import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from capture.otlp import SPOOL_FILE, OtlpConfig, OtlpReceiver
from replay.errors import ConfigError

TRACE = "5b8efff798038103d269b633813fc60c"


def chat_span(span_id: str, **extra) -> dict:
    span = {
        "traceId": TRACE,
        "spanId": span_id,
        "name": "chat m",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000100000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": "my card is 4111 1111 1111 1111"}},
        ],
    }
    span.update(extra)
    return span


def body(*spans) -> bytes:
    resource = {"attributes": [{"key": "host.name", "value": {"stringValue": "alice-laptop"}}]}
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": list(spans)}]}]}).encode()


@pytest.fixture
def receiver(tmp_path):
    r = OtlpReceiver(OtlpConfig(out=tmp_path / "otlp", port=0, max_body_bytes=4096))
    r.start()
    yield r
    r.stop()


def post(r: OtlpReceiver, data: bytes, ctype: str = "application/json", path: str = "/v1/traces", **headers):
    req = urllib.request.Request(r.url + path, data=data, headers={"Content-Type": ctype, **headers}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_a_good_request_is_spooled_without_text_and_answered_empty(receiver):
    assert post(receiver, body(chat_span("c1"))) == (200, "application/json", b"{}")
    status, ctype, answer = post(
        receiver, gzip.compress(body(chat_span("c2"))), "application/x-protobuf", **{"Content-Encoding": "gzip"}
    )
    assert (status, ctype) == (400, "application/x-protobuf")  # JSON bytes are not protobuf
    assert Status.FromString(answer).message == "the body is not an OTLP protobuf ExportTraceServiceRequest"
    assert post(receiver, gzip.compress(body(chat_span("c3"))), **{"Content-Encoding": "gzip"})[0] == 200
    spool = (receiver.cfg.out / SPOOL_FILE).read_text()
    assert spool.count("\n") == 2 and "4111" not in spool and "alice" not in spool and '"spanId":"c3"' in spool
    assert receiver.counts["spans_spooled"] == 2 and receiver.counts["answered_400"] == 1


JSON, GZ = "application/json", {"Content-Encoding": "gzip"}
NOT_JSON = "the body is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"


@pytest.mark.parametrize(
    ("data", "ctype", "headers", "status", "message"),
    [
        (body(), "text/plain", {}, 415, "Content-Type 'text/plain' is not application/x-protobuf or application/json"),
        (body(), "application/json", {"Content-Encoding": "br"}, 415, "Content-Encoding 'br' is not gzip or identity"),
        (b"{not json", JSON, {}, 400, NOT_JSON),
        (b"[1, 2]", JSON, {}, 400, "the body is not an OTLP/JSON ExportTraceServiceRequest (field 'resourceSpans')"),
        (b'{"resourceSpans": [{"scopeSpans": 3}]}', "application/json", {}, 400, "resourceSpans[0].scopeSpans is not a list"),
        (gzip.compress(body())[:20], "application/json", {"Content-Encoding": "gzip"}, 400, "the gzip body is cut short"),
        (b"plain", JSON, GZ, 400, "the body is not gzip (Error -3 while decompressing data: incorrect header check)"),
        (b"x" * 5000, "application/json", {}, 413, "the body's 5000 bytes are over 4096"),
        (gzip.compress(b" " * 10_000), JSON, GZ, 413, "the body is over 4096 bytes once decompressed"),
    ],
)  # fmt: skip
def test_bad_requests_get_one_line_naming_what_is_wrong(receiver, data, ctype, headers, status, message):
    got, got_type, answer = post(receiver, data, ctype, **headers)
    assert (got, got_type) == (status, "application/json")
    assert json.loads(answer) == {"code": 3, "message": message}
    assert not (receiver.cfg.out / SPOOL_FILE).read_bytes()


def test_other_paths_are_not_found_and_protobuf_errors_are_protobuf(receiver):
    status, _, answer = post(receiver, b"", "application/x-protobuf", path="/v1/logs")
    assert status == 404 and Status.FromString(answer).message == "/v1/logs: not found (spans go to POST /v1/traces)"
    status, _, answer = post(receiver, b"\xff\xff\xff", "application/x-protobuf")
    assert status == 400 and Status.FromString(answer).code == 3


def test_malformed_spans_are_rejected_by_partial_success_and_the_rest_kept(receiver):
    no_tokens = chat_span("c2")
    no_tokens["attributes"] = no_tokens["attributes"][:1]
    status, _, answer = post(receiver, body(chat_span("c1"), no_tokens, chat_span("", name="chat")))
    assert status == 200 and json.loads(answer) == {
        "partialSuccess": {
            "rejectedSpans": "2",
            "errorMessage": "span c2: a request span without an input token count or message content "
            "(field 'gen_ai.usage.input_tokens')",
        }
    }
    # protobuf answers carry it too
    from capture.importers.otel import traces_from_protobuf  # noqa: F401 (the decoder the receiver uses)
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    bad = ParseDict({"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "chat m"}]}]}]}, ExportTraceServiceRequest())
    status, ctype, answer = post(receiver, bad.SerializeToString(), "application/x-protobuf")
    response = ExportTraceServiceResponse.FromString(answer)
    assert (status, ctype, response.partial_success.rejected_spans) == (200, "application/x-protobuf", 1)
    assert response.partial_success.error_message == "span None: a span has no id (field 'spanId')"
    spool = (receiver.cfg.out / SPOOL_FILE).read_text().splitlines()
    assert len(spool) == 1 and '"spanId":"c1"' in spool[0] and '"c2"' not in spool[0]


def test_a_torn_last_line_is_cut_at_the_next_start_and_the_folder_is_held(tmp_path):
    out = tmp_path / "otlp"
    out.mkdir()
    good = body(chat_span("c1")).decode()
    (out / SPOOL_FILE).write_text(good + "\n" + good[:40])  # a crash mid-write
    r = OtlpReceiver(OtlpConfig(out=out, port=0))
    r.start()
    try:
        with pytest.raises(ConfigError, match="another capture is receiving into this folder"):
            OtlpReceiver(OtlpConfig(out=out, port=0)).start()
        assert post(r, body(chat_span("c2")))[0] == 200
    finally:
        counts = r.stop()
    assert counts["torn_bytes_cut"] == 40
    lines = (out / SPOOL_FILE).read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["resourceSpans"] for x in lines)
