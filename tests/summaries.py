"""Stage summaries for tests of what reads them (the saturation rule, objectives): every field
as a stage that measured nothing would have it, the fields a test is about given."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from replay.config import LAG_BOUND_MS
from replay.metrics import StageSummary

_NONE = {"p50": None, "p90": None, "p99": None}

BLANK = StageSummary(
    requested_rate=None,
    offered_rate=None,
    window_s=10.0,
    achieved_send_rate=None,
    requests=0,
    sent=0,
    completed=0,
    errors={},
    rejected=0,
    throughput_rps=None,
    output_tokens_per_s=None,
    queue={"ttft_first_third_ms": None, "ttft_last_third_ms": None, "growth_ms": None},
    ttft_ms={"from_intended": dict(_NONE), "from_sent": dict(_NONE)},
    e2e_ms={"from_intended": dict(_NONE), "from_sent": dict(_NONE)},
    tpot_ms=dict(_NONE),
    itl_ms=dict(_NONE),
    send_lag_ms={"p50": None, "p99": None, "max": None},
    lag_bound_ms=LAG_BOUND_MS,
    valid=True,
    invalid_reason=None,
    conn_ms=dict(_NONE),
    sessions="open",
    concurrency=None,
    slip_ms=None,
    cancelled=False,
    cut_off=0,
    runner=None,
    engine_metrics=None,
    prefix_cache=None,
    repeat=None,
    discarded_attempts=[],
    prompt_tokens=0,
    cached_tokens=None,
    cache_hit_rate=None,
    slo=None,
    slo_met=None,
    slo_attainment=None,
    slo_pass=None,
    goodput_rps=None,
    duration_s=10.0,
)


def stage_summary(**fields: Any) -> StageSummary:
    """:data:`BLANK` with `fields` set."""
    return replace(BLANK, **fields)
