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
import yaml

from replay.agentic import AgentConfig, generate_agentic
from replay.cli.main import main
from replay.shards import shard_of
from replay.sim import SimConfig, start_sim

ROOT = Path(__file__).resolve().parents[2]


def test_two_pods_and_one_merge(tmp_path, capsys):
    trace = generate_agentic(
        AgentConfig(
            sessions=6,
            steps_mean=4,
            tool_tokens=20,
            system_tokens=200,
            task_tokens_p50=40,
            result_tokens_p50=60,
            max_context_tokens=3000,
            content_tokens_p50=20,
            subagent_p=0.3,
            seed=3,
        )
    )
    live = tmp_path / "agents.parquet"
    trace.write(live)
    start_at = time.time() + 4  # the pods' Python and the runner's warm-up fit well inside
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with start_sim(SimConfig(profile="instant", time_scale=0)) as engine:
        pods = [
            subprocess.Popen(
                [sys.executable, "-m", "replay.cli.main", "run", str(live), "--url", engine.url, "--rate", "10"]
                + ["--shard", f"{i}/2", "--start-at", f"{start_at:.3f}", "--out", str(tmp_path / f"shard-{i}"), "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for i in range(2)
        ]
        outs = [p.communicate(timeout=120) for p in pods]
    for p, (_, err) in zip(pods, outs):
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


def test_a_missing_shard_is_named(tmp_path):
    folder = tmp_path / "shard-0"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"stages": [{"shards": [{"shard": 0, "of": 2}]}], "files": []}))
    from replay.errors import ConfigError
    from replay.shards import merge_folders

    try:
        merge_folders([folder], tmp_path / "out")
    except ConfigError as e:
        assert "shard(s) [1] of 2 not among the folders" in str(e)
    else:
        raise AssertionError("merged one shard of two")


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
