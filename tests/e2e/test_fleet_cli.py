"""`replay run` against a fleet from the command line: --url given twice, --targets FILE, --route,
and the one-line errors of a bad targets file or a --route without a fleet."""

from __future__ import annotations

import json

import polars as pl
import pytest

from replay.results import read_stage


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "work.parquet"
    from tests.e2e.conftest import run_cli

    done = run_cli("generate", "-o", str(path), "--requests", "40", "--seed", "3", "--rate", "20")
    assert done.returncode == 0, done.stderr
    return path


def test_url_twice_round_robins_and_names_each_replica(cli, small_trace, scripted, tmp_path):
    a, b = scripted(), scripted()
    out = tmp_path / "res"
    done = cli(
        "run", str(small_trace), "--url", a.url, "--url", b.url, "--rate", "30", "--requests", "10", "--out", str(out), "--json"
    )
    assert done.returncode == 0, done.stderr
    stage = json.loads(done.stdout)["stages"][0]
    assert stage["completed"] == 10
    names = [a.url.removeprefix("http://"), b.url.removeprefix("http://")]
    requests, _ = read_stage(out / json.loads(done.stdout)["files"][0])
    assert requests["replica"].to_list() == names * 5
    table = stage["replicas"]
    assert table["route"] == "round-robin" and [r["replica"] for r in table["rows"]] == sorted(names)
    assert [r["requests"] for r in table["rows"]] == [5, 5] and table["imbalance"] is None
    # each replica's /metrics was asked for (the scripted server has none)
    assert set(stage["engine_metrics"]["replicas"]) == set(names)
    # the printed table has the per-replica lines too
    done = cli(
        "run", str(small_trace), "--url", a.url, "--url", b.url, "--rate", "30", "--requests", "4", "--out", str(tmp_path / "p")
    )
    assert done.returncode == 0, done.stderr
    assert "replica" in done.stdout and names[0] in done.stdout, done.stdout
    # compare shows both sides' replicas beside its verdicts (4 requests: too few to judge)
    done = cli("compare", str(out), str(tmp_path / "p"))
    assert done.returncode in (0, 3), done.stderr
    assert f"A replica {sorted(names)[0]}: 50% of requests (5)" in done.stdout, done.stdout
    assert f"B replica {sorted(names)[0]}: 50% of requests (2)" in done.stdout, done.stdout


def test_targets_file_names_the_replicas_and_session_routing_keeps_sessions_together(cli, small_trace, scripted, tmp_path):
    a, b = scripted(), scripted()
    targets = tmp_path / "fleet.txt"
    targets.write_text(f"# two replicas\nleft {a.url}\n\n{b.url}   # named by host:port\n")
    out = tmp_path / "res"
    done = cli(
        "run", str(small_trace), "--targets", str(targets), "--route", "session", "--rate", "30", "--requests", "20",
        "--sessions", "open", "--out", str(out), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    requests, _ = read_stage(out / json.loads(done.stdout)["files"][0])
    assert set(requests["replica"].unique()) <= {"left", b.url.removeprefix("http://")}
    k = requests.group_by("session_id").agg(pl.col("replica").n_unique().alias("k"))["k"]
    assert k.max() == 1
    assert json.loads(done.stdout)["stages"][0]["replicas"]["route"] == "session"


def test_a_bad_targets_line_is_named_by_file_and_line(cli, small_trace, tmp_path):
    targets = tmp_path / "fleet.txt"
    targets.write_text("a http://127.0.0.1:9\n# fine\nb 127.0.0.1:10\n")
    done = cli("run", str(small_trace), "--targets", str(targets))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{targets}:3" in lines[0] and "127.0.0.1:10" in lines[0], done.stderr


def test_route_without_a_fleet_is_an_error_naming_route(cli, small_trace):
    done = cli("run", str(small_trace), "--url", "http://127.0.0.1:9", "--route", "session")
    assert done.returncode == 2 and "--route" in done.stderr and "Traceback" not in done.stderr, done.stderr
