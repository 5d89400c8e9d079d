"""Replays against a real llama.cpp ``llama-server`` on loopback, with tiny random-weight models.

The binary comes from `replay engines build-llama-server` (cached per machine); the model is a
2-layer Llama with the real GPT-2 vocabulary, so the engine's prompt token counts are the ones
our tokenizer predicts. The module's server renders chats with a real tool-aware template
(Qwen2.5's, from llama.cpp's sources): the model's own plain one ignores ``tools`` and
``tool_calls``, and llama-server then takes any history.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import polars as pl
import pytest

from replay.config import Arrivals, RunConfig
from replay.errors import TargetError
from replay.runner import run_stage
from replay.sweep import sweep
from replay.targets import LlamaServer
from replay.targets.llamacpp_build import llama_server_path
from replay.targets.tiny_models import sdist_chat_template, smollm2_path, tiny_gguf_path
from tests.integration.conftest import in_flight_at_sends
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

# one thread (two fight over a 2-core machine), four slots of 2048 tokens
BASE = {"threads": 1, "parallel": 4, "ctx_size": 8192}


@pytest.fixture(scope="module")
def binary():
    return require(llama_server_path(), "llama-server", "replay engines build-llama-server")


@pytest.fixture(scope="module")
def engine(binary):
    return LlamaServer(model=tiny_gguf_path("gpt-2"), binary=binary, defaults=BASE, chat_template=sdist_chat_template())


@pytest.fixture(scope="module")
def running(engine):
    with engine.launch() as r:
        yield r


def test_sweep_completes_with_usage_parsed(running):
    trace = small_trace(n=12)
    result = sweep(trace, RunConfig(url=running.url, lag_bound_ms=20), rates=[2.0, 6.0])
    assert [s.requested_rate for s in result.summaries] == [2.0, 6.0]
    for stage in result.stages:
        df = stage.requests
        failed = df.with_row_index().filter(df["error"] != "none")
        assert failed.is_empty(), (
            stage.summary.requested_rate,
            failed.select("index", "error", "error_detail", "conn_ns").rows(),
        )
        # ignore_eos: exactly the trace's output lengths; the engine counts our prompt tokens
        assert df["completion_tokens"].to_list() == df["expected_output_tokens"].to_list()
        assert df["prompt_tokens"].null_count() == 0 and (df["prompt_tokens"] > df["input_tokens"]).all()
        assert df["cached_tokens"].null_count() == 0
    assert all(s.completed == 12 and s.output_tokens_per_s > 0 for s in result.summaries)


def test_every_stage_reads_the_engines_own_metrics(running):
    # replay.engine_metrics: the target's /metrics, told apart by its names, read through the
    # llama.cpp adapter's parser, before, every second during and after the stage
    result = sweep(small_trace(n=12, seed=3), RunConfig(url=running.url, lag_bound_ms=20), rates=[4.0])
    m = result.summaries[0].engine_metrics
    assert m["engine"] == "llama-server" and m["url"] == running.url + "/metrics", m
    # this llama.cpp exports no KV usage gauge (llamacpp:kv_cache_usage_ratio is gone)
    assert m["samples"] >= 1 and {"running", "waiting"} <= set(m) and "kv_usage" not in m, m
    assert 0 <= m["prefix_cache_hit_rate"] <= 1, m
    assert result.summaries[0].completed == 12


def test_closed_loop_stages_keep_their_users_busy_against_the_engine(running):
    # four slots: one user leaves three idle, four fill them; a request goes the moment one ends.
    # llama-server closes its connection after every streamed answer (without `Connection:
    # close`), so a request sent the moment one ends may go out on a connection being closed: the
    # runner sends it again on a new one (it once failed here with "connection closed before the
    # response headers").
    trace = small_trace(n=12, seed=5)
    result = sweep(trace, RunConfig(url=running.url, lag_bound_ms=20), [], concurrency=[1, 4])
    for users, stage in zip([1, 4], result.stages):
        df = stage.requests
        assert df["error"].to_list() == ["none"] * 12, df["error_detail"].to_list()
        assert df["completion_tokens"].to_list() == df["expected_output_tokens"].to_list()
        assert in_flight_at_sends(df).max() == users
        assert stage.summary.concurrency == users and stage.summary.offered_rate is None
    # causal sessions in closed loop: two users replay whole sessions, turns after their think time
    stage = run_stage(trace, RunConfig(url=running.url, concurrency=2, sessions="causal", lag_bound_ms=20))
    df = stage.requests
    assert df["error"].to_list() == ["none"] * 12, df["error_detail"].to_list()
    assert trace.df["session_id"].n_unique() < 12, "the trace has sessions of several turns"
    assert in_flight_at_sends(df).max() <= 2


def test_shared_prefix_hits_the_cache_in_responses_and_metrics(running):
    before = running.metrics()
    trace = shared_prefix_trace(system_tokens=300, n=5)
    df = run_stage(trace, RunConfig(url=running.url, speedup=1.0, lag_bound_ms=20)).requests
    assert df["error"].to_list() == ["none"] * 5
    cached = df["cached_tokens"].to_list()
    assert all(c >= 290 for c in cached[1:]), cached  # the 300-token system prompt, and more
    after = running.metrics()
    assert after["prefix_cache_hits"] - before["prefix_cache_hits"] >= sum(cached[1:])
    assert after["prompt_tokens"] - before["prompt_tokens"] == df["prompt_tokens"].sum()
    assert after["generation_tokens"] - before["generation_tokens"] == 5 * 4
    assert after["running"] == 0 and after["waiting"] == 0


def test_an_agent_trace_replayed_as_a_dag_resends_the_engines_answers_and_gets_no_4xx(running):
    # replay.agentic's bodies (tools, parallel tool calls, tool results, subagents joining back)
    # with the engine's answers written into every later history (--answers engine, the default)
    trace = agent_trace()
    result = run_stage(trace, RunConfig(url=running.url, speedup=10.0, lag_bound_ms=20))
    check_agent_replay(trace, result)
    # the template rendered the tool definitions (the texts alone are input_tokens)
    df = result.requests
    assert (df["prompt_tokens"] > df["input_tokens"]).all()
    # and it reads the recorded calls: arguments that are not JSON fail the request (a 500 here)
    body = json.loads(trace.df.filter(pl.col("turn") == 1)["body"][0])
    body["messages"][2]["tool_calls"][0]["function"]["arguments"] = "not json{"
    sent = urllib.request.Request(running.url + "/v1/chat/completions", data=json.dumps(body).encode())
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(sent, timeout=30)
    assert refused.value.code >= 400 and b"arguments" in refused.value.read()


def test_the_cli_sweeps_a_trace_file(running, tmp_path):
    path = small_trace(n=6, seed=1).write(tmp_path / "small.parquet")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "replay.cli.main",
            "sweep",
            str(path),
            "--url",
            running.url,
            "--rates",
            "3,6",
            "--lag-bound-ms",
            "20",
            "--json",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert [s["completed"] for s in summary["stages"]] == [6, 6]
    assert all(s["prompt_tokens"] > 0 for s in summary["stages"])
    assert (tmp_path / "out" / "summary.json").is_file()


def test_a_server_killed_mid_run_gives_recorded_errors(engine):
    # 1,900 tokens keep the first request streaming for about a second at this model's pace, so it
    # is in flight at the kill (0.6 s into the call) and the requests due later find nobody listening
    df, gone_ns = replay_through_a_crash(engine.launch(), n=10, gap_ms=250, kill_after_s=0.6, max_tokens=1900)
    check_crash(df, gone_ns)
    errors = df["error"].to_list()
    assert errors[0] == "reset", errors  # in flight when it died
    assert errors[-1] == "connect_refused", errors  # sent after the crash: nobody listens


def test_a_config_that_fails_to_start_names_the_engine_and_its_log(engine, tmp_path):
    # quantized V cache needs flash attention: llama.cpp refuses it when creating the context
    with pytest.raises(TargetError) as info:
        engine.launch({"cache_type_v": "q4_0", "flash_attn": "off"})
    msg = str(info.value)
    assert msg.startswith("llama-server: exited with code") and "\n" not in msg
    assert "-ctv q4_0" in msg and "last log lines: " in msg and "failed to create" in msg
    missing = LlamaServer(model=tmp_path / "nope.gguf", binary=engine.binary, defaults=BASE)
    with pytest.raises(TargetError, match=r"llama-server: exited .*nope\.gguf.*last log lines: .*failed to load model"):
        missing.launch()


@pytest.mark.slow
def test_a_real_trained_model_serves_a_small_sweep(binary):
    model = smollm2_path()
    with LlamaServer(model=model, binary=binary, defaults=BASE).launch() as r:
        trace = small_trace(n=4, seed=2)
        config = RunConfig(url=r.url, arrivals=Arrivals(kind="constant"), lag_bound_ms=20)
        result = sweep(trace, config, rates=[1.0])
        df = result.stages[0].requests
        assert df["error"].to_list() == ["none"] * 4
        assert df["completion_tokens"].to_list() == df["expected_output_tokens"].to_list()
        assert r.metrics()["generation_tokens"] == df["completion_tokens"].sum()


LLAMA_SPACE = """
[knobs.parallel]
values = [1, 4]
[knobs.batch_size]
values = [512, 2048]
[knobs.ubatch_size]
values = [128, 512]
[knobs.cache_reuse]
values = [0, 256]
[constraints]
rules = ["batch_size >= ubatch_size"]
"""


def test_an_optimize_campaign_over_llama_server_knobs_completes_with_verdicts_ledger_and_report(binary, tmp_path):
    from replay.generate import GenerateConfig, generate

    trace = generate(
        GenerateConfig(
            n_requests=40,
            seed=5,
            rate=8.0,
            n_system_prompts=2,
            system_prompt_tokens=64,
            user_tokens_p50=24,
            output_tokens_p50=32,
            max_output_tokens=48,
            max_input_tokens=1000,
            tokenizer="gpt2",
        )
    )
    path = tmp_path / "work.parquet"
    trace.write(path)
    space = tmp_path / "space.toml"
    space.write_text(LLAMA_SPACE)
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "replay.cli.main",
            "optimize",
            str(path),
            "--engine",
            "llama-server",
            "--model",
            str(tiny_gguf_path("gpt-2")),
            "--space",
            str(space),
            "--baseline",
            '{"parallel": 1, "threads": 1}',
            "--rate",
            "8",
            "--requests",
            "24",
            "--slo",
            "ttft=1s",
            "--lag-bound-ms",
            "20",
            "--repeats",
            "2",
            "--budget",
            "trials=3",
            "--allow-inconclusive",
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["diagnosis"]["bottleneck"] and result["diagnosis"]["evidence"]
    assert len(result["steps"]) == 3 and result["stopped"].startswith("the trial budget")
    for step in result["steps"]:
        assert step["verdict"]["kind"] in ("better", "same", "worse", "invalid"), step
        assert step["hypothesis"]["change"] and step["hypothesis"]["explanation"]
    import sqlite3

    rows = sqlite3.connect(out / "ledger.sqlite").execute("SELECT role, COUNT(*) FROM experiments GROUP BY role").fetchall()
    assert dict(rows)["baseline"] == 2 and dict(rows)["candidate"] == 3
    assert "## Experiments" in (out / "optimize.md").read_text()
    assert json.loads((out / "optimize.json").read_text())["final_flags"].startswith("-np") or result["best"] == {}
