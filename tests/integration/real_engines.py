"""What the tests against real engines share: the CI gate and the workloads they replay.

An engine that is not built or installed skips its tests on a developer's machine; under CI
(env ``CI`` set) it is a failure, since ``.ci/run`` builds and installs them first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from replay.config import RunConfig
from replay.generate import GenerateConfig, generate
from replay.prompts import text_of_tokens
from replay.runner import run_stage
from replay.targets.process import RunningEngine
from replay.trace import Trace
from tests.integration.conftest import trace_of_bodies

# Says it is up, sleeps argv[1] seconds, SIGKILLs process group argv[2], prints when (ns since the
# epoch), then waits until port argv[3] refuses connections and prints when. The two differ: a
# process with gigabytes mapped (vLLM) takes a while to die, and until its last process is gone the
# kernel still accepts into its listening socket's backlog (on CI a request due 119 ms after the
# signal was accepted, then reset).
_KILLER = """
import os, signal, socket, sys, time
print('up', flush=True)
time.sleep(float(sys.argv[1]))
t = time.time_ns()
os.killpg(int(sys.argv[2]), signal.SIGKILL)
print(t, flush=True)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        socket.create_connection(('127.0.0.1', int(sys.argv[3])), timeout=0.05).close()
    except ConnectionRefusedError:
        break
    except OSError:
        pass
    time.sleep(0.001)
print(time.time_ns(), flush=True)
"""
NETWORK_ERRORS = {"reset", "connect_refused", "connect", "malformed_sse", "other"}


def require(found: Path | None, what: str, how: str) -> Path:
    """``found``, or skip (developer machine) / fail (CI) naming the command that provides it."""
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{what} is missing under CI: .ci/run should have run `{how}`")
        pytest.skip(f"{what} not available; run `{how}`")
    return found


def small_trace(n: int = 12, seed: int = 0, max_input_tokens: int = 1500) -> Trace:
    """A production-shaped trace (sessions, shared system prompts, bursts) scaled down for a CPU."""
    return generate(
        GenerateConfig(
            n_requests=n,
            seed=seed,
            rate=4.0,
            n_system_prompts=2,
            system_prompt_tokens=150,
            turns_mean=2.0,
            think_time_mean_s=1.0,
            user_tokens_p50=30,
            output_tokens_p50=8,
            max_user_tokens=200,
            max_output_tokens=16,
            max_input_tokens=max_input_tokens,
            tokenizer="gpt2",
        )
    )


def shared_prefix_trace(system_tokens: int, n: int = 6, gap_ms: int = 500, max_tokens: int = 4) -> Trace:
    """``n`` chat requests sharing one ``system_tokens``-token system prompt, ``gap_ms`` apart."""
    system = text_of_tokens(system_tokens, seed=11)
    bodies = [
        {
            "model": "m",
            "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": text_of_tokens(12, seed=100 + i)}],
        }
        for i in range(n)
    ]
    return trace_of_bodies(bodies, arrival_us=[i * gap_ms * 1000 for i in range(n)])


def replay_through_a_crash(
    running: RunningEngine, *, n: int = 10, gap_ms: int = 250, kill_after_s: float = 1.0, max_tokens: int = 300
):
    """Replay long requests and SIGKILL the engine, every process of it at once, ``kill_after_s``
    into the call (two warm connections keep the runner's own start-up short). Returns the
    requests and when the engine's port first refused a connection after the kill, in ns on the
    run's clock (from its t0).

    ``ignore_eos`` makes every answer ``max_tokens`` long, so the run cannot end before the kill
    when the model happens to stop early (it once did, on CI: every answer ended by 1.75 s).

    The whole process group goes (the engine leads its own, ``start_new_session``), not only the
    process that listens: vLLM binds its socket before it forks its engine core, so the core holds
    the listening socket too. With only the API server killed, the kernel kept accepting into the
    backlog until the core noticed and exited, and those connections were then reset (on CI every
    request due after the kill ended ``reset``, not ``connect_refused``).
    """
    bodies = [
        {
            "model": "m",
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": text_of_tokens(20, seed=200 + i)}],
        }
        for i in range(n)
    ]
    trace = trace_of_bodies(bodies, arrival_us=[i * gap_ms * 1000 for i in range(n)])
    # The kill comes from a process of its own, not a thread of this one (a timer thread here once
    # fired 4.6 s late); its clock starts once it is up, not while the interpreter loads.
    killer = subprocess.Popen(
        [sys.executable, "-c", _KILLER, str(kill_after_s), str(running.process.pid), str(urlsplit(running.url).port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert killer.stdout.readline().strip() == "up"
        config = RunConfig(
            url=running.url,
            speedup=1.0,
            timeout_s=60,
            stall_timeout_s=20,
            connect_timeout_s=2,
            lag_bound_ms=50,
            warm_connections=2,
        )
        result = run_stage(trace, config)
    finally:
        if killer.poll() is None:
            killer.kill()
        killed_unix_ns = [int(line) for line in killer.communicate()[0].split()]
        running.stop()
    assert len(killed_unix_ns) == 2, "the run ended before the kill"
    return result.requests, killed_unix_ns[1] - result.start_unix_ns


def check_crash(df, gone_ns: int) -> None:
    """What a crash must look like: some requests failed, every failure is a network error, and
    the requests due after the port first refused a connection (``gone_ns``, plus 10 ms) found
    nobody listening: an idle connection from before the crash is not used for them."""
    errors = df["error"].to_list()
    failed = [e for e in errors if e != "none"]
    assert failed and set(failed) <= NETWORK_ERRORS, errors
    after = df.filter(df["intended_ns"] > gone_ns + 10_000_000)["error"].to_list()
    assert after, "no request was due after the engine was gone"
    assert all(e == "connect_refused" for e in after), (gone_ns, errors)


def agent_trace(max_context: int = 420, seed: int = 1) -> Trace:
    """A small agent trace (replay.agentic) that fits a 2,048-token window with its tools rendered:
    two root sessions with 1-3 parallel tool calls and subagents that join back, short texts (tool
    descriptions of 8 tokens, a 40-token system prompt) and texts up to ``max_context`` tokens. A
    tool-aware template (Qwen2.5's, GPT-2's vocabulary) more than doubles that: the tools' JSON
    (16 tools: about 1,000 tokens) and each call's and result's markup."""
    from replay.agentic import AgentConfig, generate_agentic

    config = AgentConfig(
        sessions=2,
        seed=seed,
        session_rate=1.0,
        steps_mean=4,
        system_tokens=40,
        tool_tokens=8,
        task_tokens_p50=20,
        content_tokens_p50=8,
        argument_tokens_p50=6,
        parallel_weights=(0.6, 0.3, 0.1),
        result_tokens_p50=40,
        max_result_tokens=120,
        answer_tokens_p50=12,
        subagent_p=0.5,
        subagent_system_tokens=20,
        max_context_tokens=max_context,
    )
    return generate_agentic(config)


def check_agent_replay(trace: Trace, result) -> None:
    """A ``--sessions dag`` replay of :func:`agent_trace` on a real engine: every request a 200
    with its full answer, none sent before each of its dependencies ended, and every earlier
    answer in a history (turn k carries k) the engine's own streamed text, none as recorded."""
    import polars as pl

    df = result.requests
    assert result.summary.sessions == "dag"
    bad = df.filter((pl.col("error") != "none") | (pl.col("status") != 200))
    assert bad.is_empty(), bad.select("request_id", "status", "error", "error_detail").rows()
    assert df["completion_tokens"].to_list() == df["expected_output_tokens"].to_list()
    ends = dict(zip(df["request_id"], df["end_ns"]))
    deps = dict(zip(trace.df["request_id"], trace.df["depends_on"].to_list()))
    early = [(rid, d) for rid, sent in zip(df["request_id"], df["sent_ns"]) for d in deps[rid] if sent < ends[d]]
    assert not early and result.summary.after_failed_dependency == 0, early
    assert sum(len(d) > 1 for d in deps.values()) >= 1, "the trace has a join"
    assert result.runner["answers_resent"] == int(trace.df["turn"].sum()) > 0, result.runner
    assert result.runner["answers_recorded"] == 0, result.runner
