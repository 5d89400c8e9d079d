"""One trace on a real local Ray cluster (a head node and a worker node of this machine, started
here and stopped at the end), on one clock, against the embedded engine: the merged results
equal a single replay's, a killed actor keeps what it wrote and marks its shard invalid, and the
CLI's sweep --shards --ray writes one results folder that the fidelity judge reads."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import polars as pl
import pytest

from replay.agentic import AgentConfig, generate_agentic
from replay.config import RunConfig
from replay.plan import build_plan
from replay.results import StageParts, parts_dir
from replay.runner import resolve_model, run_plan
from replay.shards import RayShards, shard_of
from replay.sim import SimConfig, start_sim
from tests.ray_cluster import LocalCluster

if os.environ.get("CI"):  # the `ray` extra is part of CI's install: missing, these fail
    import ray
else:
    ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow  # a Ray cluster starts (about 15-25 s on 2 cores)


def agents(sessions: int, seed: int):
    return generate_agentic(
        AgentConfig(
            sessions=sessions,
            steps_mean=5,
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


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(workers=1, cpus=4) as c:  # logical CPUs: a CPU for each shard of the tests
        yield c


@pytest.fixture(scope="module")
def engine():
    with start_sim(SimConfig(profile="instant", time_scale=0)) as s:
        yield s


@pytest.fixture(scope="module")
def shards(cluster):
    said: list[str] = []
    with RayShards(2, cluster.address, lead_s=2.0, say=said.append) as s:
        s.said = said
        yield s


def test_sharded_replay_equals_a_single_replay(shards, engine):
    trace = agents(8, seed=4)
    config = RunConfig(url=engine.url, sessions="dag", speedup=50.0)
    model = resolve_model(trace, config)
    single = run_plan(build_plan(trace, config, model=model), config)
    merged = shards(build_plan(trace, config, model=model), config)

    # two shards on two nodes, no warning
    assert shards.strategy == "STRICT_SPREAD" and len(set(shards.nodes)) == 2 and not shards.said
    a, b = single.requests, merged.requests
    # the same requests in the same (plan) order, each answered with the same tokens
    assert a["request_id"].to_list() == b["request_id"].to_list()
    assert (a["error"] == "none").all() and (b["error"] == "none").all()
    assert a["completion_tokens"].to_list() == b["completion_tokens"].to_list()
    assert a["prompt_tokens"].to_list() == b["prompt_tokens"].to_list()
    # the one schedule: the same intended times, each row in the shard of its root session
    assert a["intended_ns"].to_list() == b["intended_ns"].to_list()
    assert (b["shard"].to_numpy() == shard_of(trace.df, 2)).all()
    assert set(b["shard"].to_list()) == {0, 1}
    # one clock: on one machine the true offset is 0, so each measured offset is within its uncertainty
    for s in merged.shards:
        assert abs(s["clock_offset_ms"]) <= s["clock_uncertainty_ms"], s
        assert s["start_lag_ms"] >= -s["clock_uncertainty_ms"], s
        assert s["requests"] == int((b["shard"] == s["shard"]).sum())
    # nothing was sent before its intended time on the driver's clock (within the shard's uncertainty)
    uncertain = {s["shard"]: s["clock_uncertainty_ms"] * 1e6 for s in merged.shards}
    slack = b["shard"].replace_strict(uncertain, return_dtype=pl.Float64)
    assert ((b["sent_ns"] - b["intended_ns"]).cast(pl.Float64) >= -slack).all()
    # DAG order: no request sent before every request it depends on had ended
    ends = dict(zip(b["request_id"].to_list(), b["end_ns"].to_list()))
    waited = 0
    for sent, deps in zip(b["sent_ns"].to_list(), trace.df["depends_on"].to_list()):
        for d in deps or ():
            assert sent >= ends[d]
            waited += 1
    assert waited > 10
    s = merged.summary
    assert s.requests == single.summary.requests and s.completed == single.summary.completed
    assert s.shards is not None and len(s.shards) == 2
    assert s.valid == all(x["valid"] for x in s.shards) and (s.valid or "shard" in s.invalid_reason)


def test_a_killed_actor_keeps_its_rows_and_marks_its_shard_invalid(shards, engine, tmp_path):
    trace = agents(10, seed=7)
    config = RunConfig(url=engine.url, sessions="dag", rate=25.0)  # a few seconds long
    model = resolve_model(trace, config)
    plan = build_plan(trace, config, model=model)
    stage = tmp_path / "stage00_asrecorded.parquet"
    box: dict = {}
    run = threading.Thread(target=lambda: box.setdefault("result", shards(plan, config, on_rows=StageParts(stage))))
    run.start()
    spool = parts_dir(stage) / "shard01.parts"
    deadline = time.monotonic() + 60
    while not list(spool.glob("*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.1)
    written = sorted(spool.glob("*.parquet"))
    assert written, "shard 1 wrote nothing in 60 s"
    ray.kill(shards.actors[1])
    run.join(120)
    merged = box["result"]
    on_disk = pl.concat([pl.read_parquet(p) for p in sorted(spool.glob("*.parquet"))])
    assert on_disk.height >= sum(pl.read_parquet(p).height for p in written)

    one = next(s for s in merged.shards if s["shard"] == 1)
    assert not one["valid"] and "died" in one["invalid_reason"]
    assert f"after writing {on_disk.height} of {one['requests']}" in one["invalid_reason"]
    summary = merged.summary
    assert not summary.valid and "shard 1: its runner died" in summary.invalid_reason
    # every request is there once; what shard 1 wrote is kept as written, the rest never came back
    assert merged.requests["request_id"].to_list() == plan.rows["request_id"].to_list()
    kept = merged.requests.join(on_disk.select("request_id", "sent_ns", "end_ns", "completion_tokens"), on="request_id")
    assert kept.height == on_disk.height
    assert kept["completion_tokens"].to_list() == kept["completion_tokens_right"].to_list()
    assert kept["sent_ns"].to_list() == kept["sent_ns_right"].to_list()
    kept_ids = on_disk["request_id"].to_list()
    lost = merged.requests.filter((pl.col("shard") == 1) & ~pl.col("request_id").is_in(kept_ids))
    assert (lost["error"] == "cancelled").all()
    assert merged.requests.filter(pl.col("shard") == 0)["error"].to_list() == ["none"] * int(
        (merged.requests["shard"] == 0).sum()
    )
    # the next stage gets a new actor for shard 1
    again = shards(build_plan(agents(4, seed=1), config, model=model), config)
    assert all(s["invalid_reason"] is None or "died" not in s["invalid_reason"] for s in again.shards)


def test_sweep_with_three_shards_on_two_nodes_warns_and_writes_one_folder(cluster, engine, tmp_path, capsys):
    from fidelity import compare_results
    from replay.cli.main import main

    live = tmp_path / "agents.parquet"
    agents(6, seed=2).write(live)
    out = tmp_path / "sharded"
    code = main(
        ["sweep", str(live), "--url", engine.url, "--rates", "8", "--shards", "3", "--ray", cluster.address]
        + ["--out", str(out), "--keep-prefix-cache"]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "warning: --shards 3: the cluster has 2 node(s) with CPUs for 3 shards; placing the shards with SPREAD" in err
    summary = json.loads((out / "summary.json").read_text())
    assert [len(s["shards"]) for s in summary["stages"]] == [3]
    stage = pl.read_parquet(out / summary["files"][0])
    assert sorted(stage["shard"].unique().to_list()) == sorted({int(x) for x in shard_of(pl.read_parquet(live), 3)})
    assert stage.height == summary["stages"][0]["requests"]
    assert not list(out.glob("*.parts"))  # merged: the shards' parts are gone
    # the fidelity judge reads the merged folder as it reads one run's
    report = compare_results(live, out)
    assert len(report.stages) == 1
    assert np.isfinite(summary["stages"][0]["offered_rate"])


def test_shard_flags_are_checked_before_anything_runs(tmp_path, capsys):
    from replay.cli.main import main

    live = tmp_path / "agents.parquet"
    agents(2, seed=2).write(live)
    for flags, message in (
        (["--shards", "2"], "--shards: needs --ray [ADDRESS]"),
        (["--ray"], "--ray: give --shards N"),
        (["--shards", "2", "--ray", "--concurrency", "2"], "--shards: a closed-loop stage"),
    ):
        rates = [] if "--concurrency" in flags else ["--rates", "1"]
        assert main(["sweep", str(live), *rates, *flags, "--out", str(tmp_path / "x")]) != 0
        assert message in capsys.readouterr().err
