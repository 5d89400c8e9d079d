"""Causal gates: whom each turn follows and its think time, from the trace's own columns."""

from __future__ import annotations

import numpy as np
import polars as pl

from replay.causal import causal_gates


def rows(session, arrival_us, e2e_us=None) -> pl.DataFrame:
    n = len(session)
    return pl.DataFrame(
        {
            "session_id": pl.Series(session, dtype=pl.String),
            "arrival_us": pl.Series(arrival_us, dtype=pl.Int64),
            "e2e_us": pl.Series(e2e_us if e2e_us is not None else [None] * n, dtype=pl.Int64),
        }
    )


def test_each_turn_follows_the_previous_turn_of_its_session():
    r = rows(["a", "b", "a", None, "a", "b"], [0, 1_000, 3_000, 4_000, 10_000, 11_000])
    after, think = causal_gates(r, np.array([0, 1, 3, 4, 10, 11]) * 1_000_000)
    assert after.tolist() == [-1, -1, 0, -1, 2, 1]
    # no recorded durations: the think time is the whole recorded gap (scale 1: same spans)
    assert think.tolist() == [0, 0, 3_000_000, 0, 7_000_000, 10_000_000]


def test_think_time_subtracts_the_previous_turns_duration_and_follows_the_stage_compression():
    r = rows(["a", "a", "a"], [0, 5_000_000, 6_000_000], e2e_us=[2_000_000, 3_000_000, 100])
    # the stage replays the trace 10x faster: offsets span 0.6 s for 6 s of trace
    after, think = causal_gates(r, np.array([0, 500_000_000, 600_000_000]))
    assert after.tolist() == [-1, 0, 1]
    # turn 1: gap 5 s - turn 0's 2 s = 3 s -> 0.3 s; turn 2: gap 1 s - 3 s < 0 -> 0
    assert think.tolist() == [0, 300_000_000, 0]
