"""Trace summaries: rate, burstiness, percentiles, bucketed timestamps, prefix reuse."""

from __future__ import annotations

import json

import polars as pl
import pytest

from replay.inspect import prefix_reuse_share, summarize
from replay.trace import TraceMeta


def test_summary_of_a_small_trace(make_trace):
    trace = make_trace(
        n=5,
        arrival_us=pl.Series([0, 1_000_000, 1_000_000, 1_000_000, 4_000_000]),
        input_tokens=pl.Series([8, 8, 12, 4, 8]),
        block_hashes=pl.Series([[1, 2], [1, 2], [1, 3, 4], [9], [4, 5]], dtype=pl.List(pl.UInt64)),
        meta=TraceMeta(block_size_tokens=4),
    )
    s = summarize(trace)
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
    s = summarize(make_trace(n=6))
    assert s["interarrival_cv"] == pytest.approx(0.0)
    assert s["bucketed_timestamps"] is False
    assert s["distinct_timestamp_share"] == 1.0
