"""Trace summaries: rate, burstiness, percentiles, bucketed timestamps, prefix reuse."""

from __future__ import annotations

import json

import polars as pl
import pytest

from replay.traffic import prefix_reuse_share, trace_summary
from replay.trace import TraceMeta


def test_summary_of_a_small_trace(make_trace):
    trace = make_trace(
        n=5,
        arrival_us=pl.Series([0, 1_000_000, 1_000_000, 1_000_000, 4_000_000]),
        input_tokens=pl.Series([8, 8, 12, 4, 8]),
        block_hashes=pl.Series([[1, 2], [1, 2], [1, 3, 4], [9], [4, 5]], dtype=pl.List(pl.UInt64)),
        meta=TraceMeta(block_size_tokens=4),
    )
    s = trace_summary(trace)
    json.dumps(s)  # plain values
    assert s["rows"] == 5
    assert s["duration_s"] == pytest.approx(4.0)
    assert s["mean_rate_rps"] == pytest.approx(1.0)
    assert s["distinct_timestamps"] == 3
    assert s["zero_interarrival_share"] == pytest.approx(0.5)
    assert s["bucketed_timestamps"] is True
    assert s["sessions"] == 1
    assert s["input_tokens_p50"] == 8
    # seen before: row1 hashes 1,2; row2 hash 1; row4 hash 4 -> 4 blocks of 4 tokens of 40
    assert s["prefix_reuse_share"] == pytest.approx(16 / 40)
    assert prefix_reuse_share(trace) == s["prefix_reuse_share"]


def test_evenly_spaced_trace_is_not_bursty_nor_bucketed(make_trace):
    s = trace_summary(make_trace(n=6))
    assert s["interarrival_cv"] == pytest.approx(0.0)
    assert s["bucketed_timestamps"] is False
    assert s["distinct_timestamp_share"] == 1.0


def test_counting_statistics_tell_poisson_from_bursty():
    import numpy as np

    from replay.traffic import counting_stats, rate_series, sparkline

    rng = np.random.default_rng(1)
    poisson = np.cumsum(rng.exponential(0.2, 30_000))  # 5 req/s, ~6,000 s
    s = counting_stats(poisson)
    for w in (1, 10, 60):
        assert 0.8 < s[f"idc_{w}s"] < 1.25, (w, s)
    assert abs(s["count_lag1_autocorr_1s"]) < 0.05
    # the same number of requests, modulated: 60 s on at 9 req/s, 60 s off at 1 req/s
    rate = lambda t: 9.0 if (t // 60) % 2 == 0 else 1.0  # noqa: E731
    t, times = 0.0, []
    while len(times) < 30_000:
        t += rng.exponential(1 / rate(t))
        times.append(t)
    bursty = counting_stats(np.array(times))
    assert bursty["idc_60s"] > 50 and bursty["idc_10s"] > 10
    assert bursty["count_lag1_autocorr_1s"] > 0.5
    assert bursty["peak_to_mean_1s"] > s["peak_to_mean_1s"]
    # exact values on a tiny case: per-second counts [3, 1, 0, 2] (the last second partial: dropped)
    tiny = counting_stats(np.array([0.0, 0.1, 0.2, 1.5, 3.0, 3.5, 4.2]))
    c = np.array([3, 1, 0, 2])
    assert tiny["idc_1s"] == pytest.approx(c.var() / c.mean())
    assert tiny["peak_to_mean_1s"] == pytest.approx(3 / 1.5)
    assert tiny["count_lag1_autocorr_1s"] == pytest.approx(np.corrcoef(c[:-1], c[1:])[0, 1])
    assert tiny["idc_10s"] is None and tiny["idc_60s"] is None
    series = rate_series(np.array(times))
    assert series["bin_s"] >= 1 and len(series["rps"]) <= 60
    assert sum(series["rps"]) * series["bin_s"] == pytest.approx(len(times))
    assert sparkline([0.0, 1.0, 2.0, 4.0]) == "▁▃▅█" and sparkline([]) == ""


def test_inspect_cli_prints_the_sparkline_and_json_series(make_trace, tmp_path, capsys):
    from replay.cli.main import main

    path = make_trace(n=6, arrival_us=pl.Series([0, 1, 2, 3, 4, 5]) * 1_000_000).write(tmp_path / "t.parquet")
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "rate over time (1 s bins, peak 1 req/s):\n██████\n" in out
    assert main(["inspect", str(path), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["rate_series"] == {"bin_s": 1.0, "rps": [1.0] * 6}
    assert s["idc_1s"] == 0.0 and s["peak_to_mean_1s"] == 1.0
