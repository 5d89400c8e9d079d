"""LiteLLM StandardLoggingPayload JSON Lines into a Trace.

The sample payloads follow the documented field names and types
(https://docs.litellm.ai/docs/proxy/logging_spec: ``id``, ``trace_id``, ``call_type``,
``status``, ``prompt_tokens``, ``completion_tokens``, ``startTime`` / ``endTime`` /
``completionStartTime`` as float epoch seconds, ``model``, ``metadata``, ``cache_hit``,
``messages``, ``response``, ``error_information.error_code``, ``model_parameters``), with our
own values; ``stream`` and ``metadata.usage_object`` are in the TypedDict of litellm/types/utils.py.
"""

from __future__ import annotations

import json

import pytest

from capture.importers import import_litellm, import_log
from replay.errors import TraceError

START = 1_730_000_000.0
MESSAGES = [
    {"role": "system", "content": "You are a travel agent."},
    {"role": "user", "content": "Find me a train from Lyon to Turin."},
]
ANSWER = "There is a direct TGV at 07:40, arriving at 12:05."


def _payload(i: str, t: float, **over) -> dict:
    base = {
        "id": f"call-{i}",
        "trace_id": f"trace-{i}",
        "call_type": "acompletion",
        "stream": True,
        "response_cost": 0.00021,
        "status": "success",
        "custom_llm_provider": "openai",
        "total_tokens": 52,
        "prompt_tokens": 30,
        "completion_tokens": 22,
        "startTime": START + t,
        "endTime": START + t + 1.5,
        "completionStartTime": START + t + 0.25,
        "response_time": 0.25,
        "model": "gpt-4o",
        "model_id": "deployment-1",
        "model_group": "gpt-4o",
        "api_base": "https://api.openai.com/v1",
        "metadata": {
            "user_api_key_hash": "hash",
            "user_api_key_alias": None,
            "requester_metadata": {},
            "usage_object": {"prompt_tokens": 30, "completion_tokens": 22, "prompt_tokens_details": {"cached_tokens": 16}},
        },
        "cache_hit": None,
        "cache_key": None,
        "saved_cache_cost": 0.0,
        "request_tags": [],
        "end_user": None,
        "requester_ip_address": "127.0.0.1",
        "messages": MESSAGES,
        "response": {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ANSWER}}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 22, "total_tokens": 52},
        },
        "error_str": None,
        "error_information": {"error_code": "", "error_class": "", "llm_provider": ""},
        "model_parameters": {"temperature": 0.3, "max_tokens": 200},
        "hidden_params": {
            "model_id": "deployment-1",
            "cache_key": None,
            "api_base": None,
            "response_cost": "0.00021",
            "additional_headers": {},
        },
    }
    base.update(over)
    return base


def _rows(trace) -> dict[str, dict]:
    return {r["request_id"]: r for r in trace.df.iter_rows(named=True)}


def test_fields(jsonl, imported):
    lines = [
        _payload("1", 0.0),
        # a failed call with an HTTP error code, and one whose code is not HTTP
        _payload(
            "2",
            2.0,
            status="failure",
            response=None,
            completion_tokens=0,
            completionStartTime=None,
            error_str="RateLimitError",
            error_information={"error_code": "429", "error_class": "RateLimitError", "llm_provider": "openai"},
        ),
        _payload("3", 3.0, status="failure", response="boom", error_information={"error_code": "timeout"}),
        # not a chat or text completion: counted, not imported
        _payload("4", 4.0, call_type="aembedding", messages=None, response=None),
        # a text completion: the logged prompt string becomes the body's prompt
        _payload(
            "5",
            5.0,
            call_type="text_completion",
            messages="Complete: the train leaves",
            stream=False,
            model_parameters={"max_tokens": 12, "extra_body": {"top_k": 5}},
            response={"object": "text_completion", "choices": [{"index": 0, "text": " at dawn."}]},
            completion_tokens=3,
        ),
    ]
    trace = imported(import_log, "litellm", jsonl(lines))
    rows = _rows(trace)
    assert trace.meta.source_format == "litellm-jsonl"
    assert trace.meta.t0_unix_us == round(START * 1e6)
    assert trace.df["request_id"].to_list() == ["call-1", "call-2", "call-3", "call-5"]

    r1 = rows["call-1"]
    assert json.loads(r1["body"]) == {
        "model": "gpt-4o",
        "messages": MESSAGES,
        "temperature": 0.3,
        "max_tokens": 200,
        "stream": True,
    }
    assert (r1["api"], r1["model"], r1["response"]) == ("chat", "gpt-4o", ANSWER)
    assert (r1["output_tokens"], r1["max_tokens"], r1["cached_tokens"]) == (22, 200, 16)
    assert (r1["ttft_us"], r1["e2e_us"], r1["status"]) == (250_000, 1_500_000, 200)

    r2 = rows["call-2"]
    assert (r2["status"], r2["response"], r2["ttft_us"], r2["output_tokens"]) == (429, None, None, 0)
    assert rows["call-3"]["status"] == 500 and rows["call-3"]["response"] is None

    r5 = rows["call-5"]
    assert r5["api"] == "completions"
    assert json.loads(r5["body"]) == {
        "model": "gpt-4o",
        "prompt": "Complete: the train leaves",
        "max_tokens": 12,
        "top_k": 5,
        "stream": False,
    }
    assert (r5["response"], r5["output_tokens"], r5["max_tokens"]) == (" at dawn.", 3, 12)
    report = json.loads(trace.meta.import_report)
    assert report["other_call_types"] == 1 and report["records_imported"] == 4


def test_sessions(jsonl, imported):
    follow_up = [*MESSAGES, {"role": "assistant", "content": ANSWER}, {"role": "user", "content": "And back on Sunday?"}]
    lines = [
        # no session id, unique trace ids: the conversation links these two
        _payload("a1", 0.0),
        _payload("a2", 10.0, messages=follow_up),
        # a session id in the metadata, or in the requester's metadata
        _payload("b1", 1.0, metadata={"session_id": "sess-b"}, messages=[{"role": "user", "content": "x"}]),
        _payload(
            "b2", 2.0, metadata={"requester_metadata": {"session_id": "sess-b"}}, messages=[{"role": "user", "content": "y"}]
        ),
        # a trace id shared by two calls (litellm_trace_id / litellm_session_id set by the caller)
        _payload("c1", 3.0, trace_id="shared", messages=[{"role": "user", "content": "z"}]),
        _payload("c2", 4.0, trace_id="shared", messages=[{"role": "user", "content": "w"}]),
    ]
    rows = _rows(imported(import_litellm, jsonl(lines)))
    a1, a2 = rows["call-a1"], rows["call-a2"]
    assert (a1["session_id"], a1["turn"]) == ("call-a1", 0)
    assert (a2["session_id"], a2["parent_request_id"], a2["turn"]) == ("call-a1", "call-a1", 1)
    assert rows["call-b1"]["session_id"] == rows["call-b2"]["session_id"] == "sess-b"
    assert rows["call-b2"]["parent_request_id"] == "call-b1"
    assert rows["call-c1"]["session_id"] == rows["call-c2"]["session_id"] == "shared"
    assert rows["call-c2"]["turn"] == 1


def test_bad_lines(jsonl, imported):
    cases = [
        (_payload("x", 1.0, startTime=None), "line 2: is missing (field 'startTime')"),
        (_payload("x", 1.0, endTime=START - 5), "line 2: is before the request's start time (field 'endTime')"),
        (_payload("x", 1.0, messages="not a list"), "line 2: is not a list of messages (field 'messages')"),
        (_payload("x", 1.0, status="maybe"), "line 2: 'maybe' is not 'success' or 'failure' (field 'status')"),
        (_payload("x", 1.0, prompt_tokens=-3), "line 2: -3 is not a count >= 0 (field 'prompt_tokens')"),
    ]
    for bad, message in cases:
        with pytest.raises(TraceError) as e:
            imported(import_litellm, jsonl([_payload("ok", 0.0), bad]))
        assert str(e.value) == f"log.jsonl: {message}"
    trace = imported(import_litellm, jsonl([_payload("ok", 0.0), *(c[0] for c in cases)]), skip_bad=True)
    assert len(trace) == 1 and json.loads(trace.meta.import_report)["skipped_lines"] == len(cases)
