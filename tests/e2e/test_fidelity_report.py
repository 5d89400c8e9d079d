"""`replay sweep / run --fidelity LIVE` against the embedded engine, and the HTML pages it writes
(the fidelity report, and the sweep's own sweep.html) opened in headless Chromium: every plot
loads, nothing errs, and names that look like markup stay text."""

from __future__ import annotations

import json

import pytest

from fidelity import AA_FACTOR
from tests.browser import find_chromium, load_page
from tests.integration.real_engines import require

# a results folder whose name is markup: the report must show it as text (an <img> it let through
# would be one image too many, broken, and would log an error)
HOSTILE = "res <img src=x onerror=console.error(1)> & co"
EMBEDDED = ["--sim-profile", "instant", "--sim-config", '{"max_num_seqs": 8}', "--lag-bound-ms", "200"]


def chromium() -> str:
    return str(require(find_chromium(), "chromium", "apt-get update && apt-get install -y --no-install-recommends chromium"))


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    from tests.e2e.conftest import run_cli

    path = tmp_path_factory.mktemp("live") / "live.parquet"
    done = run_cli("generate", "-o", str(path), "--requests", "60", "--seed", "3", "--rate", "20")
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture(scope="module")
def swept(live, tmp_path_factory):
    """A two-stage sweep of the live trace judged against it, and what it printed: 40 live
    requests are too few to judge lengths, cache or arrivals, so it exits 3 (cannot tell)."""
    from tests.e2e.conftest import run_cli

    out = tmp_path_factory.mktemp("sweep") / HOSTILE
    done = run_cli(
        "sweep", str(live), "--rates", "20,40", "--requests", "40", *EMBEDDED, "--fidelity", str(live), "--out", str(out)
    )
    assert done.returncode == 3, done.stderr
    return out, done


@pytest.mark.slow
def test_sweep_fidelity_adds_a_verdict_per_stage_to_the_table_and_summary(swept, live, cli):
    out, done = swept
    header = next(line for line in done.stdout.splitlines() if "┃ requested" in line)
    assert header.rstrip(" ┃|").endswith("fidelity")
    rows = [line for line in done.stdout.splitlines() if line.strip("│ ").startswith(("20 ", "40 "))]
    assert len(rows) == 2 and all("cannot tell" in r for r in rows), done.stdout
    summary = json.loads((out / "summary.json").read_text())
    verdicts = [s["fidelity"] for s in summary["stages"]]
    assert [v["live"] for v in verdicts] == [str(live)] * 2
    assert [v["state"] for v in verdicts] == ["cannot tell"] * 2 and all(v["undecided"] for v in verdicts)
    assert summary["fidelity"] == {"live": str(live), "state": "cannot tell", "inconclusive_allowed": False}
    # the stages replay the same 40 requests, one twice as fast as the other
    assert verdicts[1]["compression"] / verdicts[0]["compression"] == pytest.approx(2.0, rel=1e-3)
    # the same verdicts as `replay fidelity` gives on the folder afterwards
    again = cli("fidelity", str(live), str(out), "--json")
    assert again.returncode == 3, again.stderr
    report = json.loads(again.stdout)
    assert [s["file"] for s in report["stages"]] == summary["files"]
    for brief, full in zip(verdicts, report["stages"]):
        assert brief["state"] == full["state"] and brief["reason"] == full["reason"]
        assert brief["undecided"] == [m["name"] for m in full["metrics"] if m["state"] == "cannot tell"]
        assert brief["failed"] == [m["name"] for m in full["metrics"] if m["passed"] is False]
        assert brief["diagnosis"] == full["diagnosis"]
    assert json.loads((out / "fidelity.json").read_text()) == report
    assert {p.name for p in out.iterdir()} >= {"fidelity.json", "fidelity.md", "fidelity.html"}
    # outcomes asked for: a generated live trace recorded no latencies, so they cannot be told
    outcomes = cli("fidelity", str(live), str(out), "--judge-outcomes", "--json")
    assert outcomes.returncode == 3, outcomes.stderr
    assert all("outcomes: no metric applies" in s["reason"] for s in json.loads(outcomes.stdout)["stages"])
    bad = cli("fidelity", str(live), str(out), "--judge-outcomes", "--aa-runs", "1")
    assert bad.returncode == 2 and "--aa-runs" in bad.stderr


@pytest.mark.slow
def test_the_report_loads_in_chromium_with_its_plots_and_no_errors(swept):
    browser = chromium()
    out, _ = swept
    page = load_page(browser, out / "fidelity.html")
    assert not page.console_errors and not page.exceptions and not page.log_errors, page
    assert page.resources == []  # nothing fetched: the plots are embedded
    # a sweep: the verdict chart, then per stage its CDFs, QQ, counts, cache curves and (replays
    # report TTFT / E2E) survival curves
    assert [i["kind"] for i in page.images] == ["verdicts"] + ["cdf", "qq", "counts", "cache", "survival"] * 2
    assert all(i["complete"] and i["width"] > 0 for i in page.images), page.images
    assert HOSTILE in page.text  # shown as text, not parsed as markup
    assert page.title.startswith("Fidelity: ")
    assert f"{AA_FACTOR:g} times the largest" in page.text


@pytest.mark.slow
def test_the_sweep_page_loads_in_chromium_with_its_plots_and_no_errors(swept):
    browser = chromium()
    out, done = swept
    assert f"(page: {out / 'sweep.html'})" in done.stdout
    page = load_page(browser, out / "sweep.html")
    assert not page.console_errors and not page.exceptions and not page.log_errors, page
    assert page.resources == []
    assert [i["kind"] for i in page.images] == ["latency", "goodput", "engine"]
    assert all(i["complete"] and i["width"] > 0 for i in page.images), page.images
    assert page.title.startswith("Sweep: ")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trace"] in page.text
    # a row per stage, with the achieved rate summary.json holds
    for s in summary["stages"]:
        assert f"{s['throughput_rps']:.3g}" in page.text


@pytest.mark.slow
def test_the_browser_check_sees_broken_images_and_script_errors(tmp_path):
    """The page check itself: a broken image, a console error and an exception are all caught."""
    browser = chromium()
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>bad</title></head><body>'
        '<img data-kind="cdf" src="data:image/png;base64,AAAA">'
        "<script>console.error('boom'); undefinedFunction();</script></body></html>"
    )
    page = load_page(browser, bad)
    assert page.images == [{"kind": "cdf", "alt": "", "complete": True, "width": 0}]
    assert page.console_errors == ["boom"]
    assert len(page.exceptions) == 1 and "undefinedFunction" in page.exceptions[0]


@pytest.mark.slow
def test_run_fidelity_prints_the_verdict_in_its_json(live, cli, tmp_path):
    out = tmp_path / "run"
    done = cli(
        "run",
        str(live),
        "--rate",
        "30",
        "--requests",
        "30",
        *EMBEDDED,
        "--fidelity",
        str(live),
        "--judge-outcomes",
        "--allow-inconclusive",
        "--out",
        str(out),
        "--json",
    )
    assert done.returncode == 0, done.stderr  # cannot tell on 30 requests, allowed
    printed = json.loads(done.stdout)
    assert printed == json.loads((out / "summary.json").read_text())
    (verdict,) = [s["fidelity"] for s in printed["stages"]]
    assert set(verdict) == {"live", "state", "faithful", "compression", "failed", "undecided", "facets", "reason", "diagnosis"}
    assert verdict["state"] == "cannot tell" and verdict["reason"].startswith("cannot tell: nothing failed")
    assert printed["fidelity"]["inconclusive_allowed"] is True
    assert (out / "fidelity.html").is_file()
    # --judge-outcomes reached the judge: a generated live trace recorded no latencies
    report = json.loads((out / "fidelity.json").read_text())
    assert "outcomes: no metric applies" in report["stages"][0]["reason"]


def test_a_live_trace_without_the_replayed_requests_fails_before_any_stage(live, cli, tmp_path):
    other = tmp_path / "other.parquet"
    assert cli("generate", "-o", str(other), "--requests", "20", "--seed", "9").returncode == 0
    out = tmp_path / "never"
    done = cli("sweep", str(live), "--rates", "20,40", "--requests", "10", *EMBEDDED, "--fidelity", str(other), "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: --fidelity: ") and f"are not in {other}" in done.stderr
    assert "embedded engine" not in done.stderr and not out.exists()
    missing = cli("run", str(live), "--requests", "5", *EMBEDDED, "--fidelity", str(tmp_path / "nope.parquet"))
    assert missing.returncode == 2 and "nope.parquet" in missing.stderr
    one_replay = cli(
        "sweep",
        str(live),
        "--rates",
        "20",
        "--requests",
        "10",
        *EMBEDDED,
        "--fidelity",
        str(live),
        "--judge-outcomes",
        "--aa-runs",
        "1",
        "--out",
        str(out),
    )
    assert one_replay.returncode == 2 and "--aa-runs" in one_replay.stderr and not out.exists()


def test_fidelity_help_states_the_threshold_factor(cli):
    done = cli("fidelity", "--help")
    assert done.returncode == 0 and f"{AA_FACTOR:g} times the largest" in " ".join(done.stdout.split())
