"""The embedded engine as a fleet (``replicas`` engines behind its own router) over real HTTP.

A multi-turn trace with shared prefixes replayed by our runner, which sends each request's root
session in ``x-session-id``: session routing finds the sessions' histories in the cache where
round robin does not. /metrics carries each replica's series beside the fleet's totals, and the
scrape reader takes the totals (not both). The CLI's fleet answers the official ``openai`` SDK,
and a bad --router is one line naming it. Modelled time runs at a fraction of real time.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from replay.config import RunConfig
from replay.generate import GenerateConfig, generate
from replay.runner import run_stage
from replay.sim import SimConfig, modelled_requests, start_sim
from replay.targets.prometheus import parse


@pytest.fixture(scope="module")
def multi_turn():
    """Sessions of several turns, each resending a shared system prompt and its history (replayed
    causal: a turn waits for the one before it, whose answer it resends)."""
    return generate(
        GenerateConfig(
            n_requests=48,
            rate=6.0,
            turns_mean=5,
            n_system_prompts=2,
            system_prompt_tokens=600,
            user_tokens_p50=120,
            output_tokens_p50=20,
            think_time_mean_s=1.0,
            seed=5,
        )
    )


def replay_on_fleet(trace, router: str):
    """(share of prompt tokens served from the cache, the modelled requests, the scrape, summary)."""
    with start_sim(SimConfig(replicas=4, router=router, time_scale=0.025)) as server:
        config = RunConfig(url=server.url, speedup=40, sessions="causal", session_header="x-session-id", lag_bound_ms=1000)
        result = run_stage(trace, config)
        done = modelled_requests(server.url)
        scrape = parse(server.metrics_text())
    assert result.summary.completed == trace.df.height, result.summary.errors
    return done["cached_tokens"].sum() / done["prompt_tokens"].sum(), done, scrape, result.summary


@pytest.fixture(scope="module")
def round_robin(multi_turn):
    return replay_on_fleet(multi_turn, "round-robin")


def test_session_routing_finds_the_history_that_round_robin_misses(multi_turn, round_robin):
    rr_hit, rr, rr_scrape, _ = round_robin
    hit, done, scrape, summary = replay_on_fleet(multi_turn, "session")
    assert hit > rr_hit + 0.1, (hit, rr_hit)
    # round robin spreads the requests evenly; both use all four replicas
    assert sorted(rr.group_by("replica").len()["len"].to_list()) == [12, 12, 12, 12]
    assert done["replica"].n_unique() == 4
    # the scrape holds every replica's series and the totals; reading it takes the totals
    assert scrape.replicas() == ["0", "1", "2", "3"]
    per_replica = [scrape.value("vllm:prompt_tokens_total", replica=r) for r in scrape.replicas()]
    assert scrape.value("vllm:prompt_tokens_total") == sum(per_replica) == done["prompt_tokens"].sum()
    assert scrape.value("vllm:prefix_cache_hits_total") > rr_scrape.value("vllm:prefix_cache_hits_total")
    assert scrape.histogram("vllm:time_to_first_token_seconds").count == multi_turn.df.height
    # the stage's engine metrics (read from /metrics while it ran) see the same hits
    rate = summary.engine_metrics["prefix_cache_hit_rate"]
    assert rate == pytest.approx(
        scrape.value("vllm:prefix_cache_hits_total") / scrape.value("vllm:prefix_cache_queries_total"), abs=1e-9
    )


def test_one_replica_has_no_replica_series():
    with start_sim(SimConfig(time_scale=0)) as server:
        scrape = parse(server.metrics_text())
    assert scrape.replicas() == []
    assert scrape.value("vllm:num_requests_running") == 0


def test_serve_sim_fleet_answers_the_openai_sdk():
    import openai

    proc = subprocess.Popen(
        [sys.executable, "-m", "replay.cli.main", "serve-sim", "--port", "0", "--profile", "instant"]
        + ["--replicas", "2", "--router", "prefix"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line + proc.stderr.read()
        assert "2 replicas, prefix router" in proc.stdout.readline()
        client = openai.OpenAI(base_url=line.split()[-1] + "/v1", api_key="none", max_retries=0)
        prompt = "you are a careful agent; read the file and answer. " * 20
        replicas = []
        for turn in range(3):
            raw = client.chat.completions.with_raw_response.create(
                model="sim", messages=[{"role": "user", "content": prompt + f" turn {turn}"}], max_tokens=8
            )
            answer = raw.parse()
            assert answer.choices[0].message.content and answer.usage.completion_tokens == 8
            replicas.append(raw.headers["x-replay-replica"])
        # the prefix router keeps a prompt that shares its prefix where that prefix is cached
        assert len(set(replicas)) == 1 and answer.usage.prompt_tokens_details.cached_tokens > 0
        stream = client.chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "hello"}], max_tokens=4, stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


def test_a_bad_router_is_one_line_naming_the_flag(capsys):
    from replay.cli.main import main

    assert main(["serve-sim", "--replicas", "2", "--router", "random"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --router") and err.count("\n") == 1, err


def test_replay_run_without_url_runs_the_fleet(multi_turn, round_robin, tmp_path, capsys):
    """`replay run --replicas 4 --router session`: the embedded fleet, the runner sending the
    root sessions by itself; with --url the fleet's flags are refused."""
    import json

    from replay.cli.main import main

    path = tmp_path / "chat.parquet"
    multi_turn.write(path)
    out = tmp_path / "run"
    args = ["run", str(path), "--speedup", "40", "--sim-config", '{"time_scale": 0.025}', "--lag-bound-ms", "1000"]
    args += ["--sessions", "causal"]
    assert main([*args, "--replicas", "4", "--router", "session", "--out", str(out), "--json"]) == 0, capsys.readouterr().err
    stage = json.loads((out / "summary.json").read_text())["stages"][0]
    assert stage["completed"] == multi_turn.df.height
    # as session routing's (the root sessions were sent without --session-header), not round robin's
    assert stage["engine_metrics"]["prefix_cache_hit_rate"] > round_robin[0] + 0.1
    assert main(["run", str(path), "--url", "http://127.0.0.1:9", "--replicas", "2"]) == 2
    assert capsys.readouterr().err.startswith("error: --replicas: only applies without --url")
