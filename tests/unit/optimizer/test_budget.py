"""Budget caps and per-GPU normalization: ``--budget`` as the CLI reads it, each cap stopping a
campaign with its reason, and values and GPU-seconds counted per GPU (the library and
``replay optimize --gpus``). Time is a clock the tests move, never the wall clock."""

from __future__ import annotations

import json
import sqlite3
import time
import types

import pytest

from optimizer import Budget, Campaign, Measurement, Objective, Space
from optimizer.pool import Timed
from replay.cli.optimize_cmds import parse_budget
from replay.errors import ConfigError
from replay.sim import KNOBS
from tests.e2e.conftest import run_cli
from tests.summaries import stage_summary

# -- parse_budget ------------------------------------------------------------------------------------


def test_parse_budget_reads_every_cap():
    assert parse_budget("trials=5,time=90m,gpu_hours=1.5,gpus=4") == Budget(trials=5, time_s=5400.0, gpu_hours=1.5, gpus=4)
    assert parse_budget(" trials=3 , time=30s ,") == Budget(trials=3, time_s=30.0)
    assert parse_budget("") == Budget()  # the defaults: 20 trials, 2 hours, no GPU caps
    assert parse_budget("time=2h") == Budget(time_s=7200.0)


@pytest.mark.parametrize(
    "text, message",
    [
        ("trials=many", "--budget: trials must be a whole number, got 'many'"),
        ("trials=2.5", "--budget: trials must be a whole number, got '2.5'"),
        ("gpu_hours=lots", "--budget: gpu_hours must be a number, got 'lots'"),
        ("gpus=0.5", "--budget: gpus must be a whole number, got '0.5'"),
        ("cost=5", "--budget: 'cost=5' is not one of trials=N, time=DURATION, gpu_hours=H, gpus=G"),
        ("trials", "--budget: trials must be a whole number, got ''"),
    ],
)
def test_parse_budget_errors_name_the_flag(text, message):
    with pytest.raises(ConfigError) as info:
        parse_budget(text)
    assert str(info.value) == message


def test_a_bad_budget_time_names_the_flag():
    with pytest.raises(ConfigError, match="--budget time"):
        parse_budget("time=soon")


# -- Budget.left -------------------------------------------------------------------------------------


def test_budget_left_names_the_cap_that_is_spent():
    now = time.monotonic()
    b = Budget(trials=10, time_s=60.0, gpu_hours=1.0)
    assert b.left(9, now, 3599.0) is None
    assert b.left(10, now, 0.0) == "the trial budget (10) is spent"
    assert b.left(0, now - 61.0, 0.0) == "the time budget (60 s) is spent"
    assert b.left(0, now, 3600.0) == "the GPU-hour budget (1) is spent"
    assert Budget(gpu_hours=None).left(0, now, 1e9) is None  # no GPU-hour cap unless given


# -- a campaign under each cap ------------------------------------------------------------------------

SECONDS = 600.0  # what every measurement takes, on the test's own clock


class FixedPool:
    """One measurement at a time, each taking ``SECONDS`` (reported to the campaign, and added to
    ``clock``, which stands for the campaign's monotonic clock)."""

    slots = 1

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def map(self, measure, configs):
        out = []
        for c in configs:
            self.clock[0] += SECONDS
            out.append(Timed(measure(c), 0.0, SECONDS))
        return out

    def close(self) -> None:
        pass


def surface(config) -> float:
    return {2: 10.0, 4: 20.0, 8: 30.0, 16: 40.0}[config.get("max_num_seqs", 2)]  # every step up is a win


def campaign(tmp_path, monkeypatch, budget: Budget, gpus: int = 1) -> tuple[Campaign, list[str]]:
    clock = [1000.0]
    monkeypatch.setattr("optimizer.campaign.time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    calls: list[str] = []

    def measure(config):
        calls.append(json.dumps(config, sort_keys=True))
        return Measurement(surface(config))

    c = Campaign(
        space=Space.of("sim", KNOBS, {"max_num_seqs": [2, 4, 8, 16]}),
        measure=measure,
        ledger=tmp_path / "ledger.sqlite",
        identity={"engine": "sim", "workload": "w"},
        baseline={"max_num_seqs": 2},
        repeats=2,
        budget=budget,
        gpus=gpus,
        pool=FixedPool(clock),
        recheck_every=0,
    )
    return c, calls


def test_the_gpu_hour_budget_stops_the_campaign(tmp_path, monkeypatch):
    # 1 GPU-hour = 6 measurements of 600 s: 2 baseline runs, then two wins, each a measurement and
    # its confirmation (which, with the first, is the new baseline's floor of 2)
    c, calls = campaign(tmp_path, monkeypatch, Budget(trials=20, gpu_hours=1.0))
    result = c.run()
    assert result.stopped == "the GPU-hour budget (1) is spent"
    assert len(calls) == 6 and c._gpu_s == 3600
    assert [s.config["max_num_seqs"] for s in result.accepted] == [4, 8], "the search stopped at the cap, not its end"


def test_each_gpu_of_a_config_counts_against_the_gpu_hours(tmp_path, monkeypatch):
    # half a GPU-hour: 3 measurements of a 1-GPU config, 1.5 of a 2-GPU one
    one, _ = campaign(tmp_path / "one", monkeypatch, Budget(trials=20, gpu_hours=0.5))
    assert one.run().steps, "1 GPU: the 2 baseline runs (1200 GPU-s) leave budget for a candidate"
    two, calls = campaign(tmp_path / "two", monkeypatch, Budget(trials=20, gpu_hours=0.5), gpus=2)
    result = two.run()
    assert len(calls) == 2 and not result.steps, "2 GPUs: the baseline's 2 runs spent it"
    assert two._gpu_s == 2 * 2 * SECONDS
    assert result.stopped == "the GPU-hour budget (0.5) is spent"


def test_the_time_budget_stops_the_campaign(tmp_path, monkeypatch):
    # 25 minutes: 2 baseline runs (20 min), then one candidate's measurement and confirmation
    c, calls = campaign(tmp_path, monkeypatch, Budget(trials=20, time_s=1500.0))
    result = c.run()
    assert result.stopped == "the time budget (1500 s) is spent"
    assert len(result.steps) == 1 and result.steps[0].verdict.kind == "better"
    assert len(calls) == 2 + 2  # the baseline's floor of 2, the win and its confirmation


def test_a_spent_budget_before_any_candidate_still_reports_the_baseline(tmp_path, monkeypatch):
    c, calls = campaign(tmp_path, monkeypatch, Budget(trials=20, time_s=SECONDS))
    result = c.run()
    assert len(calls) == 2 and result.steps == [] and result.noise.median == 10.0
    assert result.stopped == f"the time budget ({SECONDS:g} s) is spent"


# -- per-GPU values -----------------------------------------------------------------------------------


def test_objective_values_are_per_gpu():
    summary = stage_summary(goodput_rps=6.0, throughput_rps=8.0)
    assert Objective("goodput", gpus=2).value(summary) == 3.0
    assert Objective("throughput", gpus=2).value(summary) == 4.0
    assert Objective("throughput").value(summary) == 8.0
    assert Objective("goodput", gpus=4).value(stage_summary(goodput_rps=None)) == 0.0


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    path = tmp_path_factory.mktemp("budget") / "work.parquet"
    done = run_cli("generate", "-o", str(path), "--requests", "30", "--seed", "1", "--rate", "10")
    assert done.returncode == 0, done.stderr
    return path


@pytest.mark.slow
def test_optimize_gpus_divides_values_and_counts_gpu_hours(workload, tmp_path):
    out = tmp_path / "out"
    # a GPU-hour budget of 3.6 ms: the baseline's first runs spend it, whatever their length
    done = run_cli(
        "optimize",
        str(workload),
        "--engine",
        "sim",
        "--sim-time-scale",
        "0.05",
        "--rate",
        "10",
        "--requests",
        "20",
        "--knobs",
        "max_num_seqs",
        "--objective",
        "throughput",
        "--repeats",
        "2",
        "--gpus",
        "2",
        "--budget",
        "trials=3,gpu_hours=0.000001",
        "--lag-bound-ms",
        "50",
        "--allow-inconclusive",
        "--out",
        str(out),
        "--json",
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # 20 live requests cannot tell, allowed: the stop says so
    assert result["steps"] == [] and result["stopped"] == (
        "the GPU-hour budget (1e-06) is spent (--allow-inconclusive: 2 measurements could not be told faithful and were kept)"
    )
    rows = (
        sqlite3.connect(out / "ledger.sqlite")
        .execute("SELECT campaign, value, details FROM experiments WHERE role = 'baseline'")
        .fetchall()
    )
    assert len(rows) == 2
    for identity, value, details in rows:
        assert json.loads(identity)["gpus"] == 2
        assert value == pytest.approx(json.loads(details)["summary"]["throughput_rps"] / 2)
    assert sorted(result["noise"]["values"]) == sorted(v for _, v, _ in rows)


def test_optimize_refuses_a_gpu_cap_under_one_engine(workload, tmp_path):
    done = run_cli(
        "optimize",
        str(workload),
        "--rate",
        "5",
        "--objective",
        "throughput",
        "--gpus",
        "4",
        "--budget",
        "gpus=2",
        "--out",
        str(tmp_path / "o"),
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --budget: gpus=2 is fewer than one engine's --gpus 4"
