"""The HTML report: self-contained, every captured text escaped, the plots each stage should have,
and plot data that stays bounded and lands on live's time axis."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from fidelity import compare_stage, drift
from fidelity.html import html_report
from fidelity.judge import FidelityReport
from fidelity.plots import MAX_POINTS, counts_over_time, ecdf_points, facet_verdicts
from fidelity.report_files import write_report
from replay.generate import GenerateConfig, generate
from tests.unit.fidelity.test_compare import live, stage_of  # noqa: F401  (the shared live fixture)

HOSTILE = '<img src=x onerror="alert(1)"> & <script>alert(2)</script>'


def plots_of(html: str) -> list[str]:
    return re.findall(r'<img class="plot" data-kind="(\w+)"', html)


@pytest.fixture(scope="module")
def sweep_report(live) -> FidelityReport:  # noqa: F811
    stages = [
        compare_stage(live, stage_of(live, speedup=1.0), file=f"stage-1 {HOSTILE}.parquet", requested_rate=15),
        compare_stage(live, stage_of(live, prompt_scale=0.5), file="stage-2.parquet", requested_rate=30),
    ]
    stages[1] = replace(stages[1], verdict=replace(stages[1].verdict, diagnosis=[*stages[1].verdict.diagnosis, HOSTILE]))
    return FidelityReport(live=f"live {HOSTILE}.parquet", results="results $x$ & co", stages=stages)


@pytest.fixture(scope="module")
def sweep_html(sweep_report) -> str:
    return html_report(sweep_report)


def test_the_page_escapes_every_captured_text_and_loads_nothing_from_elsewhere(sweep_html):
    html = sweep_html
    assert HOSTILE not in html and "<script" not in html and 'onerror="' not in html
    assert html.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; &lt;script&gt;") >= 3
    # every image is an embedded PNG; no stylesheet, script, font or frame is fetched
    sources = re.findall(r'src="([^"]*)"', html)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert not re.search(r"<(link|script|iframe|object|embed)\b", html)
    assert "url(" not in html and "@import" not in html and "http://" not in html and "https://" not in html


def test_a_sweep_has_its_verdict_chart_and_every_stage_its_plots(sweep_report, sweep_html):
    html = sweep_html
    # replays report TTFT / E2E, so each stage has survival curves too
    assert plots_of(html) == ["verdicts"] + ["cdf", "qq", "counts", "cache", "survival"] * 2
    assert "faithful" in html and "NOT faithful" in html  # banner: one stage failed
    # the table holds the same metrics as the Markdown
    for s in sweep_report.stages:
        for m in s.verdict.metrics:
            assert f"<td>{m.name}</td>" in html
    # a row per failed (cannot tell) metric and per failed (cannot tell) facet
    for state, of in (("fail", "failed"), ("undecided", "undecided")):
        rows = sum(
            len(getattr(s.verdict, of))
            + sum(f.state == {"fail": "fail", "undecided": "cannot tell"}[state] for f in s.verdict.facets)
            for s in sweep_report.stages
        )
        assert len(re.findall(rf'<tr class="{state}"', html)) == rows, state
    for s in sweep_report.stages:
        for f in s.verdict.facets:
            assert f"<td>{f.name}" in html
    assert "1 of 2 stages faithful" in html
    assert html_report(sweep_report, plots=False).count("<img") == 0


def test_the_verdict_chart_shows_each_stage_s_facets(sweep_report):
    faithful, shortened = (facet_verdicts(s.verdict) for s in sweep_report.stages)
    assert all(v[0] != "fail" for v in faithful.values())
    # the faithful replay's required facets rest on its paired tests
    assert faithful["input lengths"] == ("pass", 0, "input_tokens.paired")
    assert faithful["arrivals"] == ("pass", 0, "arrivals.paired_offsets")
    # a facet that none of its metrics can judge on this live side cannot tell
    assert all(faithful[f.name][0] == "cannot tell" for f in sweep_report.stages[0].verdict.facets if f.state == "cannot tell")
    assert shortened["input lengths"][0] == "fail" and shortened["input lengths"][1] >= 1
    assert shortened["outcomes"][0] == "n/a"  # outcomes are reported, not judged


def test_drift_without_recorded_latencies_has_no_survival_curves(tmp_path):
    old = generate(GenerateConfig(n_requests=400, seed=1, rate=10.0))
    new = generate(GenerateConfig(n_requests=400, seed=2, rate=10.0))
    report = drift(old, new)
    paths = write_report(report, tmp_path, html=True)
    assert [p.name for p in paths] == ["drift.json", "drift.md", "drift.html"]
    html = paths[2].read_text()
    assert plots_of(html) == ["cdf", "qq", "counts", "cache"]
    assert "Drift: " in html and "two halves of both traces together" in html


def test_ecdf_points_are_bounded_and_exact():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.lognormal(3, 1, 100_000), [np.nan] * 10])
    x, f = ecdf_points(values)
    assert len(x) <= MAX_POINTS and len(x) == len(f)
    clean = np.sort(values[np.isfinite(values)])
    assert x[0] == clean[0] and x[-1] == clean[-1] and f[-1] == 1.0
    np.testing.assert_allclose(f, np.searchsorted(clean, x, side="right") / len(clean))
    small = np.array([3.0, 1.0, 2.0])
    assert ecdf_points(small)[0].tolist() == [1.0, 2.0, 3.0] and ecdf_points(small)[1].tolist() == [1 / 3, 2 / 3, 1.0]


def test_counts_over_time_put_a_faster_replay_on_live_s_time_axis(live):  # noqa: F811
    stage = compare_stage(live, stage_of(live, speedup=10.0))
    a, b = stage.live_side, stage.replay_side
    assert b.time_scale == pytest.approx(10.0, rel=1e-3)
    edges, live_counts, replay_counts = counts_over_time(a, b)
    assert edges[-1] == pytest.approx(a.times_s.max() - a.times_s.min(), rel=1e-3)
    assert live_counts.sum() == replay_counts.sum() == live.df.height
    assert np.corrcoef(live_counts, replay_counts)[0, 1] > 0.95
    # unscaled, the replay would crowd into the first tenth of the axis
    _, _, unscaled = counts_over_time(a, replace(b, time_scale=1.0))
    assert unscaled[len(unscaled) // 5 :].sum() == 0


def test_a_stage_read_without_its_sides_still_renders(sweep_report):
    bare = replace(sweep_report, stages=[replace(s, live_side=None, replay_side=None) for s in sweep_report.stages])
    assert plots_of(html_report(bare)) == ["verdicts"]


def test_names_with_dollar_signs_do_not_break_the_plots(live):  # noqa: F811
    stage = compare_stage(live, stage_of(live), file="a $\\frac{1}{0}$ b$.parquet")
    report = FidelityReport(live="x", results="y", stages=[stage, replace(stage, file="$$")])
    assert len(plots_of(html_report(report))) == 11


def test_an_empty_hash_column_still_draws(live):  # noqa: F811
    stage = compare_stage(live, stage_of(live))
    empty = pl.Series([[]] * stage.live_side.n, dtype=pl.List(pl.UInt64))
    bare = replace(stage, live_side=replace(stage.live_side, hashes=empty), replay_side=replace(stage.replay_side, hashes=empty))
    assert plots_of(html_report(FidelityReport(live="x", results="y", stages=[bare]))) == [
        "cdf",
        "qq",
        "counts",
        "cache",
        "survival",
    ]
