"""Langfuse observations (generations) exported as JSON Lines into a Trace.

Two documented shapes, with our own values:
- the public API's observation (camelCase; ISO times; ``input`` / ``output`` any JSON;
  ``modelParameters`` an object; ``usageDetails``): the Observation schema of Langfuse's
  OpenAPI spec (https://cloud.langfuse.com/generated/api/openapi.yml), see also
  https://langfuse.com/docs/api-and-data-platform/features/observations-api
- the blob storage export row (snake_case; ``YYYY-MM-DD HH:MM:SS.ffffff`` UTC times; ``input``,
  ``output`` and ``model_parameters`` as strings holding JSON; ``usage_details`` with ``input``,
  ``output``, ``total``, ``input_cached_tokens``; ``session_id`` on enriched rows; empty strings
  for unset fields):
  https://langfuse.com/docs/api-and-data-platform/features/blob-storage-export-fields
"""

from __future__ import annotations

import json

import pytest

from capture.importers import import_langfuse, import_log
from replay.errors import TraceError

MESSAGES = [
    {"role": "system", "content": "You are a gardening expert."},
    {"role": "user", "content": "When should I prune roses?"},
]
ANSWER = "Prune roses in late winter, just as the buds swell."


def _api_generation(i: str, start: str, **over) -> dict:
    base = {
        "id": f"gen-{i}",
        "traceId": f"trace-{i}",
        "type": "GENERATION",
        "name": "chat",
        "startTime": start,
        "endTime": start.replace(":00.000Z", ":02.000Z"),
        "completionStartTime": start.replace(":00.000Z", ":00.400Z"),
        "model": "gpt-4o",
        "modelParameters": {"temperature": "0.7", "max_tokens": "inf", "stop": "END"},
        "input": MESSAGES,
        "output": {"role": "assistant", "content": ANSWER},
        "usage": {"input": 25, "output": 12, "total": 37, "unit": "TOKENS"},
        "usageDetails": {"input": 25, "output": 12, "total": 37, "input_cached_tokens": 8},
        "level": "DEFAULT",
        "statusMessage": None,
        "parentObservationId": None,
        "version": None,
        "metadata": {},
    }
    base.update(over)
    return base


def _blob_row(i: str, start: str, **over) -> dict:
    base = {
        "id": f"obs-{i}",
        "trace_id": f"t-{i}",
        "project_id": "proj-1",
        "environment": "production",
        "type": "GENERATION",
        "parent_observation_id": "",
        "start_time": start,
        "end_time": start.replace(":00.000000", ":03.000000"),
        "name": "answer",
        "metadata": {},
        "level": "DEFAULT",
        "status_message": "",
        "version": "",
        "input": json.dumps(MESSAGES),
        "output": json.dumps({"role": "assistant", "content": ANSWER}),
        "provided_model_name": "claude-sonnet",
        "model_parameters": json.dumps({"max_tokens": 300, "temperature": 0}),
        "usage_details": {"input": 25, "output": 14, "total": 39},
        "cost_details": {"input": 0.0001, "output": 0.0002},
        "completion_start_time": None,
        "total_cost": 0.0003,
        "latency": 3.0,
        "time_to_first_token": None,
        "user_id": "",
        "session_id": "",
        "trace_name": "garden-bot",
        "tags": [],
    }
    base.update(over)
    return base


def _rows(trace) -> dict[str, dict]:
    return {r["request_id"]: r for r in trace.df.iter_rows(named=True)}


def test_api_shape_fields_and_non_generations(jsonl, imported):
    lines = [
        {
            "id": "span-1",
            "traceId": "trace-1",
            "type": "SPAN",
            "name": "retrieve",
            "startTime": "2024-06-01T10:00:00.000Z",
            "input": {"query": "roses"},
        },
        _api_generation("1", "2024-06-01T10:00:00.000Z"),
        {"id": "ev-1", "traceId": "trace-1", "type": "EVENT", "startTime": "2024-06-01T10:00:01.000Z"},
        # a string input is a completions prompt; an ERROR level a failed request
        _api_generation(
            "2",
            "2024-06-01T10:01:00.000Z",
            input="Roses are red,",
            output=" violets are blue.",
            modelParameters={"max_tokens": 10},
            usageDetails=None,
            usage=None,
            completionStartTime=None,
            level="ERROR",
            statusMessage="upstream 502",
        ),
    ]
    trace = imported(import_langfuse, jsonl(lines))
    rows = _rows(trace)
    assert trace.meta.source_format == "langfuse-jsonl"
    assert trace.df["request_id"].to_list() == ["gen-1", "gen-2"]
    report = json.loads(trace.meta.import_report)
    assert report["non_generation_observations"] == 2 and report["records_imported"] == 2
    assert report["lines_read"] == 4

    g1 = rows["gen-1"]
    # numeric parameters held as strings are numbers again; an infinite max_tokens is not set
    assert json.loads(g1["body"]) == {"model": "gpt-4o", "messages": MESSAGES, "temperature": 0.7, "stop": "END"}
    assert (g1["api"], g1["model"], g1["response"]) == ("chat", "gpt-4o", ANSWER)
    assert (g1["output_tokens"], g1["max_tokens"], g1["cached_tokens"]) == (12, 12, 8)
    assert (g1["ttft_us"], g1["e2e_us"], g1["status"]) == (400_000, 2_000_000, 200)

    g2 = rows["gen-2"]
    assert json.loads(g2["body"]) == {"model": "gpt-4o", "prompt": "Roses are red,", "max_tokens": 10}
    assert (g2["api"], g2["response"], g2["status"], g2["ttft_us"]) == ("completions", " violets are blue.", 500, None)


def test_blob_export_shape(jsonl, imported):
    follow_up = [*MESSAGES, {"role": "assistant", "content": ANSWER}, {"role": "user", "content": "And hydrangeas?"}]
    lines = [
        _blob_row("1", "2024-06-01 10:00:00.000000", session_id="chat-42"),
        _blob_row(
            "2",
            "2024-06-01 10:05:00.000000",
            session_id="chat-42",
            input=json.dumps({"messages": follow_up, "tools": []}),
            output=json.dumps({"role": "assistant", "content": '{"month": "March"}'}),
            completion_start_time="2024-06-01 10:05:00.250000",
        ),
        # no session: the trace id groups the generations of one run
        _blob_row("3", "2024-06-01 11:00:00.000000", trace_id="run-9", output='{"answer": 1}'),
        _blob_row("4", "2024-06-01 11:00:10.000000", trace_id="run-9", input="Plain prompt text"),
    ]
    trace = imported(import_log, "langfuse", jsonl(lines))
    rows = _rows(trace)
    assert trace.meta.t0_unix_us == 1_717_236_000_000_000  # 2024-06-01T10:00:00Z
    o1, o2 = rows["obs-1"], rows["obs-2"]
    assert json.loads(o1["body"]) == {"model": "claude-sonnet", "messages": MESSAGES, "max_tokens": 300, "temperature": 0}
    assert (o1["response"], o1["output_tokens"], o1["max_tokens"], o1["cached_tokens"]) == (ANSWER, 14, 300, None)
    assert (o1["ttft_us"], o1["e2e_us"], o1["status"]) == (None, 3_000_000, 200)
    assert (o2["session_id"], o2["parent_request_id"], o2["turn"]) == ("chat-42", "obs-1", 1)
    assert json.loads(o2["body"])["messages"] == follow_up and json.loads(o2["body"])["tools"] == []
    assert o2["response"] == '{"month": "March"}' and o2["ttft_us"] == 250_000
    # an answer that is itself JSON text stays text
    assert rows["obs-3"]["response"] == '{"answer": 1}'
    assert rows["obs-3"]["session_id"] == rows["obs-4"]["session_id"] == "run-9"
    assert rows["obs-4"]["api"] == "completions"
    assert json.loads(rows["obs-4"]["body"])["prompt"] == "Plain prompt text"


def test_bad_lines(jsonl, imported):
    good = _api_generation("ok", "2024-06-01T10:00:00.000Z")
    cases = [
        (_api_generation("x", "2024-06-01T10:00:00.000Z", startTime=None), "line 2: is missing (field 'startTime')"),
        (_api_generation("x", "2024-06-01T10:00:00.000Z", input=None), "line 2: is missing (field 'input')"),
        (
            _api_generation("x", "2024-06-01T10:00:00.000Z", input=42),
            "line 2: is not a list of messages or a prompt (field 'input')",
        ),
        (
            _api_generation("x", "2024-06-01T10:00:00.000Z", endTime="2024-06-01T09:00:00.000Z"),
            "line 2: is before the request's start time (field 'endTime')",
        ),
        (
            _api_generation("x", "2024-06-01T10:00:00.000Z", usageDetails={"output": "many"}),
            "line 2: 'many' is not a count >= 0 (field 'usageDetails.output')",
        ),
    ]
    for bad, message in cases:
        with pytest.raises(TraceError) as e:
            imported(import_langfuse, jsonl([good, bad]))
        assert str(e.value) == f"log.jsonl: {message}"
    with pytest.raises(
        TraceError,
        match=r"no requests imported \(1 lines read, 0 skipped as malformed, "
        r"1 non generation observations\)",
    ):
        imported(import_langfuse, jsonl([{"id": "s", "type": "SPAN", "startTime": "2024-06-01T10:00:00Z"}]))
