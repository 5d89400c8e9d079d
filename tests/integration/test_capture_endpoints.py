"""The Responses API and embeddings, end to end: the official OpenAI SDK through `replay capture`
to the embedded engine (stream and not; the SDK's default base64 embeddings), what the capture
records of them (redacted before it is written), and the runner replaying that capture."""

from __future__ import annotations

import json

import numpy as np
import openai
import pytest

from replay.config import RunConfig
from replay.runner import run_stage
from replay.sim import start_sim
from replay.targets.url import reset_prefix_cache
from replay.trace import read_trace
from tests.integration.capture_proxy import capture, stored_bytes

AUTH = "sk-client-authorization-value-1a2b3c4d5e6f"
EMAIL = "dorothea.vance@example.net"
PHONE = "+1 415 555 0134"


@pytest.fixture(scope="module")
def sim():
    server = start_sim(time_scale=0.2, served_model_name="sim")
    yield server
    server.stop()


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=AUTH, max_retries=0, timeout=60)


def test_responses_and_embeddings_pass_through_are_recorded_and_replay(sim, tmp_path):
    out = tmp_path / "cap"
    direct = _client(sim.url)
    instructions = "You are a support agent. Answer briefly."
    question = f"My email is {EMAIL} and my phone is {PHONE}. Where is my order?"
    with capture(sim.url, out, "--segment-seconds", "1") as proxy:
        client = _client(proxy.url)
        # not streamed: the same response object as direct, usage in the Responses API's names
        a = client.responses.create(model="sim", instructions=instructions, input=question, max_output_tokens=9)
        b = direct.responses.create(model="sim", instructions=instructions, input=question, max_output_tokens=9)
        assert a.output_text == b.output_text and a.output_text
        assert (a.status, a.usage.input_tokens, a.usage.output_tokens) == ("incomplete", b.usage.input_tokens, 9)
        # streamed, with a conversation as input items: the typed events arrive as they do direct
        items = [
            {"role": "user", "content": [{"type": "input_text", "text": question}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": a.output_text}]},
            {"role": "user", "content": "And when will it arrive?"},
        ]
        s1 = list(client.responses.create(model="sim", input=items, max_output_tokens=7, stream=True))
        s2 = list(direct.responses.create(model="sim", input=items, max_output_tokens=7, stream=True))
        assert [e.type for e in s1] == [e.type for e in s2]
        deltas = [e.delta for e in s1 if e.type == "response.output_text.delta"]
        assert deltas == [e.delta for e in s2 if e.type == "response.output_text.delta"] and deltas
        assert s1[-1].type == "response.incomplete" and s1[-1].response.usage.output_tokens == 7
        # embeddings: the SDK asks for base64 and decodes it; the same vector as direct
        e1 = client.embeddings.create(model="sim", input=question)
        e2 = direct.embeddings.create(model="sim", input=question)
        assert np.allclose(e1.data[0].embedding, e2.data[0].embedding) and len(e1.data[0].embedding) == 64
        assert e1.usage.prompt_tokens == e2.usage.prompt_tokens > 0
        floats = client.embeddings.create(model="sim", input="plain words", encoding_format="float")
        assert abs(np.linalg.norm(floats.data[0].embedding) - 1) < 1e-5
        assert proxy.stop() == 0
        assert "Traceback" not in proxy.stderr()

    trace = read_trace(out)
    rows = trace.df.to_dicts()
    assert [r["api"] for r in rows] == ["responses", "responses", "embeddings", "embeddings"]
    assert all(r["outcome"] == "completed" and r["status"] == 200 and r["input_tokens"] > 0 for r in rows)
    first, streamed, embedded = rows[0], rows[1], rows[2]
    # the Responses API's usage, limit and end, in the trace's words
    assert (first["output_tokens"], first["max_tokens"], first["finish_reason"]) == (9, 9, "length")
    assert first["cached_tokens"] is not None and first["response"]
    assert first["ttft_us"] is None and first["chunk_us"] is None
    assert (streamed["output_tokens"], streamed["finish_reason"]) == (7, "length")
    assert streamed["ttft_us"] is not None and len(streamed["chunk_us"]) == len(deltas)
    # an embedding decodes nothing
    assert (embedded["output_tokens"], embedded["response"]) == (0, None)
    # the instructions and every input item count as prompt text (the raw text's tokens)
    from replay.bodies import prompt_token_ids, text_slots
    from replay.tokenizer import load_tokenizer

    body = {"instructions": instructions, "input": question}
    assert first["input_tokens"] == len(prompt_token_ids([s.text for s in text_slots(body)], load_tokenizer("gpt2")))
    assert embedded["input_tokens"] == len(prompt_token_ids([question], load_tokenizer("gpt2")))
    # redacted before it was written: instructions, input items and the answer; nothing raw stored
    stored = stored_bytes(out)
    assert EMAIL.encode() not in stored and PHONE.encode() not in stored and AUTH.encode() not in stored
    assert json.loads(first["body"])["instructions"] == instructions
    assert json.loads(streamed["body"])["input"][2]["content"] == "And when will it arrive?"

    # replayed by the runner: each request to its own endpoint, answered and counted (the engine's
    # prefix cache reset first, as the capture's requests left it warm)
    reset_prefix_cache(sim.url)
    stage = run_stage(trace, RunConfig(url=sim.url, lag_bound_ms=50, timeout_s=60))
    got = stage.requests.sort("intended_ns").to_dicts()
    assert [r["api"] for r in got] == [r["api"] for r in rows]
    assert [r["error"] for r in got] == ["none"] * 4, [r["error_detail"] for r in got]
    for sent, live in zip(got[:2], rows[:2]):
        # a Responses API stream ends with response.incomplete: max_output_tokens from the trace
        assert sent["completion_tokens"] == live["output_tokens"] and sent["first_token_ns"] is not None
        assert sent["prompt_tokens"] > 0 and sent["cached_tokens"] is not None
    for sent in got[2:]:
        assert sent["prompt_tokens"] > 0 and sent["first_token_ns"] is None and sent["end_ns"] > sent["sent_ns"]
    # and judged against the capture: nothing in the replay of these four differs from live
    from fidelity import compare_stage

    verdict = compare_stage(trace, stage.requests, lag_bound_ms=50).verdict
    assert not verdict.failed, verdict.reason
