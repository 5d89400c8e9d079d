"""Stage metrics that need no server: which requests meet an SLO."""

from __future__ import annotations

import polars as pl

from replay.config import Slo
from replay.metrics import slo_met

MS = 1_000_000


def _completed(ttft_ms, tpot_ms, e2e_ms) -> pl.DataFrame:
    """Completed requests as summarize derives them (tpot null: one output token)."""
    return pl.DataFrame(
        {
            "ttft_ns": [None if t is None else int(t * MS) for t in ttft_ms],
            "tpot_ns": pl.Series([None if t is None else t * MS for t in tpot_ms], dtype=pl.Float64),
            "e2e_ns": [int(t * MS) for t in e2e_ms],
        }
    )


def test_a_request_without_tpot_does_not_meet_a_tpot_objective():
    ok = _completed(ttft_ms=[100, 100, 100], tpot_ms=[20.0, None, 80.0], e2e_ms=[500, 500, 500])
    assert slo_met(ok, Slo(tpot_s=0.05)).tolist() == [True, False, False]
    # without a TPOT objective the one-token request is judged on the others alone
    assert slo_met(ok, Slo(ttft_s=0.2, e2e_s=1.0)).tolist() == [True, True, True]


def test_every_set_objective_must_hold():
    ok = _completed(ttft_ms=[100, 300, None], tpot_ms=[20.0, 20.0, 20.0], e2e_ms=[500, 500, 500])
    assert slo_met(ok, Slo(ttft_s=0.2, tpot_s=0.05)).tolist() == [True, False, False]
    assert slo_met(ok, Slo(e2e_s=0.4)).tolist() == [False, False, False]
