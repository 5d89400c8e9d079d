"""`replay capture` in front of a real llama.cpp `llama-server`: the official OpenAI SDK gets what it
gets direct, and every request is recorded (usage and cached tokens from the engine itself)."""

from __future__ import annotations

import pytest

from replay.targets import LlamaServer
from replay.targets.llamacpp_build import llama_server_path
from replay.targets.tiny_models import tiny_gguf_path
from replay.trace import read_trace
from tests.integration.capture_proxy import capture, stored_bytes
from tests.integration.real_engines import require

pytestmark = pytest.mark.engine

EMAIL = "eleanor.vance@example.net"


@pytest.fixture(scope="module")
def running():
    binary = require(llama_server_path(), "llama-server", "replay engines build-llama-server")
    engine = LlamaServer(model=tiny_gguf_path("gpt-2"), binary=binary, defaults={"threads": 1, "parallel": 2, "ctx_size": 4096})
    with engine.launch() as r:
        yield r


def test_the_openai_sdk_through_the_proxy_to_llama_server(running, tmp_path):
    import openai

    def client(url):
        return openai.OpenAI(base_url=url + "/v1", api_key="sk-llama-test-authorization-0000", max_retries=0, timeout=120)

    direct = client(running.url)
    msgs = [
        {"role": "system", "content": "You are a helpful assistant. " * 10},
        {"role": "user", "content": f"Write to {EMAIL} about the weather."},
    ]
    greedy = {"temperature": 0.0, "seed": 1, "max_tokens": 8}
    out = tmp_path / "cap"
    with capture(running.url, out, "--segment-seconds", "1") as proxy:
        via = client(proxy.url)
        a = via.chat.completions.create(model="m", messages=msgs, **greedy)
        b = direct.chat.completions.create(model="m", messages=msgs, **greedy)
        assert a.choices[0].message.content == b.choices[0].message.content
        assert a.usage.prompt_tokens == b.usage.prompt_tokens
        s1 = list(via.chat.completions.create(model="m", messages=msgs, stream=True, **greedy))
        s2 = list(direct.chat.completions.create(model="m", messages=msgs, stream=True, **greedy))
        text1 = "".join(c.choices[0].delta.content or "" for c in s1 if c.choices)
        text2 = "".join(c.choices[0].delta.content or "" for c in s2 if c.choices)
        assert text1 == text2 == a.choices[0].message.content
        assert [c.usage is None for c in s1] == [c.usage is None for c in s2]
        # a long answer (ignore_eos: the random-weight model may end early) the client leaves
        stream = via.chat.completions.create(
            model="m", messages=msgs, stream=True, extra_body={"ignore_eos": True}, **{**greedy, "max_tokens": 1000}
        )
        next(stream), next(stream)
        stream.close()
        assert proxy.stop() == 0
    rows = read_trace(out).df.to_dicts()
    assert [r["outcome"] for r in rows] == ["completed", "completed", "client_disconnected"]
    for r in rows[:2]:
        assert r["status"] == 200 and r["output_tokens"] == a.usage.completion_tokens
        assert r["cached_tokens"] is not None and r["finish_reason"] in ("length", "stop")
    # the streamed answer's usage (asked for by the proxy) carried the engine's cached tokens
    assert rows[1]["cached_tokens"] > 0 and rows[1]["chunk_us"][0] == 0
    assert rows[1]["response"] == text1
    assert EMAIL.encode() not in stored_bytes(out)
    assert b"sk-llama-test-authorization" not in stored_bytes(out)


def test_the_responses_api_through_the_proxy_to_llama_server_is_recorded_and_replayed(running, tmp_path):
    """llama-server's own /v1/responses (its stream ends with response.completed, no [DONE]):
    the SDK's events through the proxy as direct, the usage recorded in the Trace's names, and
    the runner replays the capture against the engine itself."""
    import openai

    from replay.config import RunConfig
    from replay.runner import run_stage

    def client(url):
        return openai.OpenAI(base_url=url + "/v1", api_key="sk-llama-test-authorization-0000", max_retries=0, timeout=120)

    direct = client(running.url)
    ask = {"model": "m", "instructions": "Answer briefly.", "input": f"Write to {EMAIL} about rain.", "temperature": 0.0}
    out = tmp_path / "cap"
    with capture(running.url, out, "--segment-seconds", "1") as proxy:
        via = client(proxy.url)
        a = via.responses.create(max_output_tokens=8, **ask)
        b = direct.responses.create(max_output_tokens=8, **ask)
        assert a.output_text == b.output_text and a.usage.input_tokens == b.usage.input_tokens
        s1 = list(via.responses.create(max_output_tokens=8, stream=True, **ask))
        s2 = list(direct.responses.create(max_output_tokens=8, stream=True, **ask))
        assert [e.type for e in s1] == [e.type for e in s2]
        text = "".join(e.delta for e in s1 if e.type == "response.output_text.delta")
        assert text == a.output_text and s1[-1].type == "response.completed"
        assert proxy.stop() == 0
    trace = read_trace(out)
    rows = trace.df.to_dicts()
    assert [(r["api"], r["outcome"], r["status"]) for r in rows] == [("responses", "completed", 200)] * 2
    for r in rows:
        assert r["output_tokens"] == a.usage.output_tokens and r["input_tokens"] > 0
    assert rows[1]["chunk_us"][0] == 0 and rows[1]["ttft_us"] is not None
    assert EMAIL.encode() not in stored_bytes(out)
    stage = run_stage(trace, RunConfig(url=running.url, lag_bound_ms=50, timeout_s=120))
    sent = stage.requests.to_dicts()
    assert [r["error"] for r in sent] == ["none", "none"], [r["error_detail"] for r in sent]
    for r in sent:
        assert r["prompt_tokens"] == a.usage.input_tokens and r["first_token_ns"] is not None
        assert 0 < r["completion_tokens"] <= 8
