"""sweep.html from a sweep's summary: what the plots draw (the saturation line at the right stage,
invalid stages kept apart, engine metrics only where read) and a page that escapes what came from
the summary. The page in a real browser: tests/e2e/test_fidelity_report.py."""

from __future__ import annotations

import base64
import re

import pytest

from replay.metrics import StageSummary
from replay.sweep import saturation
from replay.sweep_html import sweep_html, sweep_plots, sweep_points, write_sweep_html
from tests.summaries import stage_summary


def stage(
    rate: float,
    achieved: float,
    ttft_p50: float,
    *,
    valid: bool = True,
    failed: int = 0,
    kv: dict | None = None,
    growth_ms: float | None = 0.0,
) -> dict:
    """A stage summary with the fields replay.metrics.summarize gives and the page reads."""
    sent = 100
    return stage_summary(
        requested_rate=rate,
        requests=sent,
        offered_rate=rate,
        throughput_rps=achieved,
        goodput_rps=achieved * 0.9,
        sent=sent,
        completed=sent - failed,
        rejected=0,
        valid=valid,
        cancelled=False,
        invalid_reason=None if valid else "send lag p99 3.2 ms over the 1 ms bound",
        lag_bound_ms=1.0,
        send_lag_ms={"p50": 0.1, "p99": 0.5 if valid else 3.2, "max": 4.0},
        queue={"ttft_first_third_ms": ttft_p50, "ttft_last_third_ms": ttft_p50 + (growth_ms or 0), "growth_ms": growth_ms},
        slo_pass=None,
        ttft_ms={
            "from_intended": {"p50": ttft_p50, "p90": ttft_p50 * 2, "p99": ttft_p50 * 3},
            "from_sent": {"p50": ttft_p50, "p90": ttft_p50, "p99": ttft_p50},
        },
        e2e_ms={
            "from_intended": {"p50": ttft_p50 + 50, "p90": None, "p99": ttft_p50 + 90},
            "from_sent": {"p50": None, "p90": None, "p99": None},
        },
        tpot_ms={"p50": 5.0, "p90": 6.0, "p99": 7.0},
        engine_metrics=kv
        if kv is not None
        else {"url": "http://127.0.0.1:1/metrics", "unavailable": "GET ...: connection refused"},
    ).to_json()


def summary_of(rates, stages, **extra) -> dict:
    """As SweepResult.to_json shapes it, the saturation computed by replay.sweep's own rule."""
    return {
        "trace": "t.parquet",
        "url": "http://127.0.0.1:8000",
        "arrivals": {"kind": "poisson", "cv": None},
        "rates": rates,
        "stages": stages,
        "saturation": saturation(rates, [StageSummary.from_json(s) for s in stages]).to_json(),
        **extra,
    }


def test_the_saturation_line_goes_at_the_achieved_rate_of_the_stage_that_saturated():
    kv = {"url": "u", "engine": "vllm", "samples": 5, "kv_usage": {"p50": 0.2, "max": 0.5}, "waiting": {"p50": 0.0, "max": 12.0}}
    stages = [stage(2, 2.0, 10), stage(4, 3.9, 12, kv=kv), stage(8, 5.1, 400, failed=20, kv=kv, growth_ms=900)]
    data = sweep_points(summary_of([2.0, 4.0, 8.0], stages))
    assert data["saturation"]["status"] == "saturated" and data["saturation"]["rate"] == 8.0
    assert data["saturation_x"] == 5.1  # the stage's achieved rate, not its requested 8
    assert [p["ttft_ms"]["p99"] for p in data["stages"]] == [30, 36, 1200]
    assert [p["e2e_ms"]["p50"] for p in data["stages"]] == [60, 62, 450]  # from the intended send
    # engine metrics where read; the first stage's endpoint did not answer
    assert [p["kv_usage"] for p in data["stages"]] == [None, kv["kv_usage"], kv["kv_usage"]]


def test_an_invalid_stage_is_undetermined_and_marked_in_the_table():
    stages = [stage(2, 2.0, 10), stage(4, 3.0, 300, valid=False, failed=30, growth_ms=900)]
    summary = summary_of([2.0, 4.0], stages)
    data = sweep_points(summary)
    assert data["saturation"]["status"] == "undetermined" and data["saturation_x"] == 3.0
    assert [p["valid"] for p in data["stages"]] == [True, False]
    page = sweep_html(summary, plots=False)
    assert "Sweep: saturation undetermined at 4 req/s" in page
    rows = re.findall(r'<tr class="(\w+)">', page)
    assert rows == ["pass", "fail"]
    assert "invalid: send lag p99 3.2 ms over the 1 ms bound" in page


def test_no_saturation_draws_no_line():
    data = sweep_points(summary_of([1.0, 2.0], [stage(1, 1.0, 10), stage(2, 2.0, 11)]))
    assert data["saturation"]["status"] == "not_reached" and data["saturation_x"] is None


def test_the_page_escapes_the_summary_and_embeds_three_plots(tmp_path):
    hostile = "<img src=x onerror=alert(1)>"
    summary = summary_of([2.0], [stage(2, 2.0, 10)])
    summary["trace"] = hostile
    path = write_sweep_html(tmp_path, summary)
    page = path.read_text()
    assert path.name == "sweep.html" and not (tmp_path / "sweep.html.tmp").exists()
    assert hostile not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    kinds = re.findall(r'data-kind="(\w+)"', page)
    assert kinds == ["latency", "goodput", "engine"]
    for data in re.findall(r"base64,([A-Za-z0-9+/=]+)", page):
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
    assert "<script" not in page and "http://" not in page.replace("http://127.0.0.1:8000", "")


@pytest.mark.parametrize("stages", [[], [stage(2, 0.0, 0.0)]])
def test_a_sweep_with_nothing_to_draw_still_draws_every_plot(stages):
    if stages:  # nothing completed
        stages[0]["throughput_rps"] = None
        stages[0]["ttft_ms"] = {"from_intended": {"p50": None, "p99": None}, "from_sent": {}}
        stages[0]["e2e_ms"] = {"from_intended": {"p50": None, "p99": None}, "from_sent": {}}
        stages[0]["tpot_ms"] = {"p50": None, "p99": None}
        stages[0]["goodput_rps"] = None
    plots = sweep_plots({"rates": [2.0] * len(stages), "stages": stages, "saturation": {"status": "not_reached"}})
    assert [p.kind for p in plots] == ["latency", "goodput", "engine"]
    assert all(p.png.startswith(b"\x89PNG") for p in plots)
