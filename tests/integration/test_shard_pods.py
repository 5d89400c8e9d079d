"""One trace on several "pods" without Ray (a Kubernetes Indexed Job's shape): two processes run
`replay run --shard I/2 --start-at T` into their own folders against the embedded engine, and
`replay shards merge` makes one results folder of them; the Job's manifest parses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

from replay.agentic import AgentConfig, generate_agentic
from replay.cli.main import main
from replay.errors import ConfigError
from replay.shards import merge_folders, shard_of
from replay.sim import SimConfig, start_sim

ROOT = Path(__file__).resolve().parents[2]


def agents(sessions: int, seed: int):
    return generate_agentic(
        AgentConfig(
            sessions=sessions,
            steps_mean=4,
            tool_tokens=20,
            system_tokens=200,
            task_tokens_p50=40,
            result_tokens_p50=60,
            max_context_tokens=3000,
            content_tokens_p50=20,
            subagent_p=0.3,
            seed=seed,
        )
    )


def test_two_pods_and_one_merge(tmp_path, capsys):
    trace = agents(6, seed=3)
    live = tmp_path / "agents.parquet"
    trace.write(live)
    with start_sim(SimConfig(profile="instant", time_scale=0)) as engine:
        start_at, procs = pods(live, engine.url, tmp_path, rate=10.0, lead_s=4)
        outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    started = [json.loads(out)["stages"][0]["shards"][0] for out, _ in outs]
    assert [s["shard"] for s in started] == [0, 1] and {s["start_at_unix_ns"] for s in started} == {
        int(round(start_at * 1e3)) * 10**6
    }

    merged = tmp_path / "merged"
    assert main(["shards", "merge", str(tmp_path / "shard-1"), str(tmp_path / "shard-0"), "--out", str(merged), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    stage = pl.read_parquet(merged / summary["files"][0])
    # every request once, in the trace's order, in the shard of its root session, answered
    assert stage["request_id"].to_list() == trace.df["request_id"].to_list()
    assert (stage["shard"].to_numpy() == shard_of(trace.df, 2)).all()
    assert (stage["error"] == "none").all()
    assert stage["completion_tokens"].to_list() == trace.df["output_tokens"].to_list()
    # one schedule from one instant: the whole plan's intended times, each pod's sends after them
    assert stage["intended_ns"].is_sorted() and stage["intended_ns"][0] == 0
    assert ((stage["sent_ns"] - stage["intended_ns"]) >= 0).all()
    ends = dict(zip(stage["request_id"].to_list(), stage["end_ns"].to_list()))
    for sent, deps in zip(stage["sent_ns"].to_list(), trace.df["depends_on"].to_list()):
        assert all(sent >= ends[d] for d in deps or ())
    s = summary["stages"][0]
    assert s["requests"] == trace.df.height and [x["shard"] for x in s["shards"]] == [0, 1]
    assert all(x["clock_offset_ms"] is None for x in s["shards"])  # no driver: not measured
    assert abs(s["offered_rate"] - 10) < 1e-6


def pods(live: Path, url: str, out: Path, rate: float, lead_s: float) -> tuple[float, list[subprocess.Popen]]:
    start_at = time.time() + lead_s  # the pods' Python and the runner's warm-up fit well inside
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "replay.cli.main", "run", str(live), "--url", url, "--rate", str(rate)]
            + ["--shard", f"{i}/2", "--start-at", f"{start_at:.3f}", "--out", str(out / f"shard-{i}"), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    return start_at, procs


def test_a_killed_pod_keeps_what_it_wrote_and_a_missing_one_is_named(tmp_path, capsys):
    trace = agents(8, seed=5)
    live = tmp_path / "agents.parquet"
    trace.write(live)
    with start_sim(SimConfig(profile="instant", time_scale=0)) as engine:
        _, (kept, killed) = pods(live, engine.url, tmp_path, rate=10.0, lead_s=4)
        parts = tmp_path / "shard-1" / "stage00_10rps.parts"
        deadline = time.monotonic() + 60
        while not list(parts.glob("*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.05)
        killed.kill()  # as a node lost mid-stage: no summary, no stage file, its rows so far
        killed.communicate()
        err = kept.communicate(timeout=120)[1]
        assert kept.returncode == 0, err
    written = pl.concat([pl.read_parquet(p) for p in sorted(parts.glob("*.parquet"))])
    assert 0 < written.height < int((shard_of(trace.df, 2) == 1).sum())
    assert not (tmp_path / "shard-1" / "summary.json").exists()

    merged = tmp_path / "merged"
    assert main(["shards", "merge", str(tmp_path / "shard-0"), str(tmp_path / "shard-1"), "--out", str(merged), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    s = summary["stages"][0]
    one = next(x for x in s["shards"] if x["shard"] == 1)
    assert not s["valid"] and not one["valid"]
    assert f"its pod ended before the stage did) after writing {written.height} of" in one["invalid_reason"]
    assert "shard 1: its runner died" in s["invalid_reason"]
    stage = pl.read_parquet(merged / summary["files"][0])
    # shard 0 whole, shard 1 as far as it wrote: each row as its pod recorded it
    assert stage.filter(pl.col("shard") == 0).height == int((shard_of(trace.df, 2) == 0).sum())
    got = stage.filter(pl.col("shard") == 1).join(written, on="request_id")
    assert got.height == written.height and got["completion_tokens"].to_list() == got["completion_tokens_right"].to_list()

    # a folder of shard 0 alone is not a whole run
    with pytest.raises(ConfigError, match=r"shard\(s\) \[1\] of 2 not among the folders"):
        merge_folders([tmp_path / "shard-0"], tmp_path / "alone")


def test_the_indexed_job_manifest_parses():
    job = yaml.safe_load((ROOT / "examples" / "k8s" / "sharded-replay-job.yaml").read_text())
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"]
    container = spec["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert int(env["SHARDS"]) == spec["completions"]
    command = " ".join(container["args"])
    assert '--shard "${JOB_COMPLETION_INDEX}/${SHARDS}"' in command and '--start-at "${START_AT}"' in command


def test_run_shard_flags_are_checked_before_anything_runs(tmp_path, capsys):
    live = tmp_path / "agents.parquet"
    generate_agentic(AgentConfig(sessions=2, steps_mean=2, max_context_tokens=30_000, seed=1)).write(live)
    for flags, message in (
        (["--shard", "0/2"], "--shard: needs --start-at T"),
        (["--start-at", "1765155600"], "--start-at: only with --shard I/N"),
        (["--shard", "0/2", "--start-at", "1765155600", "--shards", "2", "--ray"], "--shard and --shards: give one"),
        (["--shard", "2/2", "--start-at", "1765155600"], "--shard: expected I/N with 0 <= I < N"),
        (["--shard", "0/2", "--start-at", "tomorrow"], "--start-at: expected Unix seconds or an ISO 8601 time"),
    ):
        assert main(["run", str(live), "--rate", "1", *flags, "--out", str(tmp_path / "x")]) != 0
        assert message in capsys.readouterr().err
