"""OpenAI request logs and OpenAI Batch input files into a Trace.

Sample lines are written here in the documented shapes, with our own values:
- the request bodies: https://platform.openai.com/docs/api-reference/chat/create and
  https://platform.openai.com/docs/api-reference/completions/create
- the logged responses: the chat completion object
  (https://platform.openai.com/docs/api-reference/chat/object: ``choices[0].message.content``,
  ``usage.prompt_tokens_details.cached_tokens``) and the completion object
  (https://platform.openai.com/docs/api-reference/completions/object: ``choices[0].text``)
- Batch input lines (``custom_id``, ``method``, ``url``, ``body``):
  https://platform.openai.com/docs/guides/batch and
  https://platform.openai.com/docs/api-reference/batch/request-input
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from capture.importers import import_openai
from replay.errors import ConfigError, TraceError

CHAT_BODY = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "You answer in one sentence."},
        {"role": "user", "content": "Why is the sky blue?"},
    ],
    "temperature": 0.2,
    "max_completion_tokens": 64,
    "stream": True,
}
CHAT_RESPONSE = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion",
    "created": 1715299200,
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Air scatters short blue wavelengths most."},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 27, "completion_tokens": 9, "total_tokens": 36, "prompt_tokens_details": {"cached_tokens": 16}},
}
TEXT_RESPONSE = {
    "id": "cmpl-xyz789",
    "object": "text_completion",
    "created": 1715299203,
    "model": "gpt-3.5-turbo-instruct",
    "choices": [{"text": " in a land of bread.", "index": 0, "logprobs": None, "finish_reason": "length"}],
    "usage": {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10},
}


def _rows(trace) -> dict[str, dict]:
    return {r["request_id"]: r for r in trace.df.iter_rows(named=True)}


def test_log_fields(jsonl, imported):
    lines = [
        {
            "timestamp": "2024-05-10T00:00:01.5Z",
            "request_id": "req-1",
            "session_id": "user-7",
            "body": CHAT_BODY,
            "response": CHAT_RESPONSE,
            "ttft_ms": 120.5,
            "latency_ms": 830,
            "status": 200,
        },
        # time from `created`; id from the response; no status given: a response means 200
        {
            "created": 1715299203,
            "body": {"model": "gpt-3.5-turbo-instruct", "prompt": "Once upon a time", "max_tokens": 6},
            "response": TEXT_RESPONSE,
        },
        # no response; top-level usage; a failed request
        {
            "timestamp": 1715299200.25,
            "request_id": "req-3",
            "session_id": "user-7",
            "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]},
            "usage": {"prompt_tokens": 8, "completion_tokens": 0},
            "status": 429,
        },
    ]
    trace = imported(import_openai, jsonl(lines))
    rows = _rows(trace)
    assert trace.df["request_id"].to_list() == ["req-3", "req-1", "cmpl-xyz789"]
    assert trace.meta.t0_unix_us == 1_715_299_200_250_000
    assert trace.df["arrival_us"].to_list() == [0, 1_250_000, 2_750_000]
    assert trace.meta.source_format == "openai-jsonl" and trace.meta.redaction_policy == "none"

    r1 = rows["req-1"]
    assert r1["api"] == "chat" and r1["model"] == "gpt-4o-mini"
    assert json.loads(r1["body"]) == CHAT_BODY and json.loads(r1["body"])["stream"] is True
    assert r1["response"] == "Air scatters short blue wavelengths most."
    assert (r1["output_tokens"], r1["max_tokens"], r1["cached_tokens"]) == (9, 64, 16)
    assert (r1["ttft_us"], r1["e2e_us"], r1["status"]) == (120_500, 830_000, 200)
    assert (r1["session_id"], r1["parent_request_id"], r1["turn"]) == ("user-7", "req-3", 1)

    r2 = rows["cmpl-xyz789"]
    assert r2["api"] == "completions" and r2["response"] == " in a land of bread."
    assert (r2["output_tokens"], r2["max_tokens"], r2["cached_tokens"], r2["status"]) == (6, 6, None, 200)
    assert r2["ttft_us"] is None and r2["e2e_us"] is None

    r3 = rows["req-3"]
    assert (r3["status"], r3["output_tokens"], r3["response"]) == (429, 0, None)
    report = json.loads(trace.meta.import_report)
    assert report["records_imported"] == 3 and report["requests_in_log_sessions"] == 2


def test_a_plain_text_response_is_the_answer(jsonl, gpt2, imported):
    line = {"timestamp": 5, "body": {"messages": [{"role": "user", "content": "Say hi"}]}, "response": "Hi there, friend"}
    row = imported(import_openai, jsonl([line])).df.row(0, named=True)
    assert row["response"] == "Hi there, friend"
    assert row["output_tokens"] == len(gpt2.encode("Hi there, friend", add_special_tokens=False).ids)
    assert row["model"] is None and row["status"] is None


def _batch(n: int, url: str = "/v1/chat/completions") -> list[dict]:
    return [
        {
            "custom_id": f"request-{i}",
            "method": "POST",
            "url": url,
            "body": {
                "model": "gpt-4o-mini",
                "max_tokens": 100,
                "messages": [{"role": "user", "content": f"Summarize document {i}."}],
            },
        }
        for i in range(n)
    ]


def test_batch_file_with_rate_gives_seeded_poisson_arrivals(jsonl, imported):
    path = jsonl(_batch(400))
    trace = imported(import_openai, path, rate=20.0, seed=3)
    df = trace.df
    assert trace.meta.source_format == "openai-batch" and trace.meta.t0_unix_us == 0
    assert df["request_id"].to_list() == [f"request-{i}" for i in range(400)]  # file order kept
    assert (df["api"] == "chat").all() and (df["max_tokens"] == 100).all()
    arrival = np.asarray(df["arrival_us"].to_list())
    gaps = np.diff(arrival)
    assert arrival[0] == 0 and (gaps >= 0).all() and gaps.max() > 0
    # exponential gaps of mean 1/rate (seeded, so these are fixed numbers, not timing)
    assert np.mean(gaps) / 1e6 == pytest.approx(1 / 20, rel=0.15)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.15)
    report = json.loads(trace.meta.import_report)
    assert report["rate"] == 20.0 and report["seed"] == 3
    assert imported(import_openai, path, rate=20.0, seed=3).df["arrival_us"].equals(df["arrival_us"])
    assert not imported(import_openai, path, rate=20.0, seed=4).df["arrival_us"].equals(df["arrival_us"])
    # twice the rate, the same draws: half the span
    fast = imported(import_openai, path, rate=40.0, seed=3).df["arrival_us"].to_numpy()
    assert np.abs(fast - arrival / 2).max() <= 1
    # a completions batch
    completions = [{"custom_id": "c0", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "Hello"}}]
    trace = imported(import_openai, jsonl(completions, "c.jsonl"), rate=1.0)
    assert trace.df["api"].to_list() == ["completions"]


def test_batch_file_without_rate_is_an_error(jsonl, imported):
    with pytest.raises(ConfigError) as e:
        imported(import_openai, jsonl(_batch(3)))
    assert "--rate" in str(e.value) and "\n" not in str(e.value)
    timed = [{"timestamp": 1, "body": {"prompt": "p"}}]
    with pytest.raises(ConfigError, match="--rate: only for OpenAI Batch input files"):
        imported(import_openai, jsonl(timed), rate=2.0)
    with pytest.raises(ConfigError, match="--rate: must be a number > 0"):
        imported(import_openai, jsonl(_batch(3)), rate=0.0)


def test_bad_batch_lines(jsonl, imported):
    cases = [
        (
            {**_batch(1)[0], "custom_id": "x", "url": "/v1/moderations"},
            "line 2: '/v1/moderations' is not one of /v1/chat/completions, /v1/completions, /v1/responses, "
            "/v1/embeddings (field 'url')",
        ),
        ({**_batch(1)[0], "custom_id": "x", "method": "GET"}, "line 2: 'GET' is not POST (field 'method')"),
        (
            {**_batch(1)[0], "custom_id": "x", "url": "/v1/completions"},
            "line 2: does not match url '/v1/completions' (is a chat request, not completions) (field 'body')",
        ),
        (
            {"timestamp": 3, "body": {"prompt": "p"}},
            "line 2: a request log line in an OpenAI Batch input file (field 'custom_id')",
        ),
    ]
    for bad, message in cases:
        with pytest.raises(TraceError) as e:
            imported(import_openai, jsonl([_batch(1)[0], bad]), rate=1.0)
        assert str(e.value) == f"log.jsonl: {message}"
    with pytest.raises(TraceError, match=r"line 2: an OpenAI Batch line in a request log \(field 'custom_id'\)"):
        imported(import_openai, jsonl([{"timestamp": 3, "body": {"prompt": "p"}}, _batch(1)[0]]))
    embeddings = {**_batch(1)[0], "custom_id": "x", "url": "/v1/embeddings"}
    with pytest.raises(TraceError, match=r"line 2: does not match url '/v1/embeddings' \(is a chat request, not embeddings\)"):
        imported(import_openai, jsonl([_batch(1)[0], embeddings]), rate=1.0)
    trace = imported(import_openai, jsonl([*_batch(2), cases[0][0]]), rate=1.0, skip_bad=True)
    assert len(trace) == 2 and json.loads(trace.meta.import_report)["skipped_lines"] == 1
