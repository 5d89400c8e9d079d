"""`replay optimize` on the embedded engine, started for every measurement as a real engine is: a
deliberately poor baseline (max-num-seqs 2 under concurrent load) is beaten and the win repeats;
a config that fails to start is an invalid verdict, not a crash; the campaign run again resumes
from its ledger without measuring anything twice."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.e2e.conftest import run_cli

SPACE = """
[knobs.max_num_seqs]
values = [2, 16]
[knobs.gpu_memory_utilization]
values = [0.9, 0.05]
"""


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    path = tmp_path_factory.mktemp("opt") / "work.parquet"
    done = run_cli("generate", "-o", str(path), "--requests", "120", "--seed", "1", "--rate", "10")
    assert done.returncode == 0, done.stderr
    return path


@pytest.mark.slow
def test_a_poor_baseline_is_beaten_failures_are_verdicts_and_the_campaign_resumes(workload, tmp_path):
    space = tmp_path / "space.toml"
    space.write_text(SPACE)
    out = tmp_path / "out"
    args = ["optimize", str(workload), "--engine", "sim", "--sim-time-scale", "0.1", "--rate", "20",
            "--requests", "40", "--space", str(space), "--baseline", '{"max_num_seqs": 2}',
            "--objective", "throughput", "--repeats", "3", "--budget", "trials=6", "--out", str(out), "--json"]
    done = run_cli(*args, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["diagnosis"]["bottleneck"] == "batch-capped", result["diagnosis"]
    assert result["diagnosis"]["order"][0] == "max_num_seqs"
    accepted = result["accepted"]
    assert accepted and accepted[0]["config"]["max_num_seqs"] == 16
    assert len(accepted[0]["verdict"]["measurements"]) == 2, "confirmed on a fresh restart"
    assert result["best"]["max_num_seqs"] == 16
    failed = [s for s in result["steps"] if s["config"].get("gpu_memory_utilization") == 0.05]
    assert failed and all(s["verdict"]["kind"] == "invalid" for s in failed)
    assert "failed to start" in failed[0]["verdict"]["reason"]
    assert (out / "optimize.md").is_file() and "--max-num-seqs 16" in (out / "optimize.md").read_text()
    rows = sqlite3.connect(out / "ledger.sqlite").execute("SELECT COUNT(*) FROM experiments").fetchone()[0]

    again = run_cli(*args, timeout=600)
    assert again.returncode == 0, again.stderr
    resumed = json.loads(again.stdout)
    assert all(s["reused"] for s in resumed["steps"]), "every judged config came from the ledger"
    assert resumed["best"] == result["best"]
    assert sqlite3.connect(out / "ledger.sqlite").execute("SELECT COUNT(*) FROM experiments").fetchone()[0] == rows


def test_a_bad_flag_is_one_line_before_any_engine_starts(workload, tmp_path):
    done = run_cli("optimize", str(workload), "--rate", "5", "--knobs", "max_seqs", "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "unknown knob 'max_seqs'" in done.stderr
    done = run_cli("optimize", str(workload), "--rate", "5", "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "needs SLOs" in done.stderr
