"""The saturation rule (replay.sweep.saturation) on plain stage summaries, and the one result JSON."""

from __future__ import annotations

import pytest

from replay.config import RunConfig
from replay.sweep import MAX_FAILED_SHARE, Saturation, SweepResult, saturation


def stage(*, sent=100, completed=100, rejected=0, growth=(20.0, 25.0), slo_pass=None, valid=True, lag_p99=0.4,
          cancelled=False) -> dict:
    """The summary fields the rule reads, for a stage that kept up unless told otherwise."""
    first, last = growth
    return {
        "sent": sent, "completed": completed, "rejected": rejected,
        "queue": {"ttft_first_third_ms": first, "ttft_last_third_ms": last, "growth_ms": last - first},
        "slo_pass": slo_pass, "slo_attainment": None if slo_pass is None else (0.95 if slo_pass else 0.5),
        "valid": valid, "cancelled": cancelled, "send_lag_ms": {"p99": lag_p99}, "lag_bound_ms": 1.0,
    }


def test_stages_that_keep_up_do_not_saturate():
    assert saturation([1, 2], [stage(), stage()]) == Saturation("not_reached")


def test_a_queue_that_builds_names_the_first_such_rate():
    result = saturation([1, 2, 4], [stage(), stage(growth=(20, 900)), stage(growth=(20, 3000))])
    assert result.status == "saturated" and result.rate == 2 and result.undetermined_at is None
    assert "queue built up" in result.reason and "900 ms" in result.reason


def test_queue_growth_must_double_and_exceed_the_bound():
    # +300 ms over 20 ms: doubled and above 250 ms
    assert saturation([1], [stage(growth=(20, 320))]).status == "saturated"
    # +300 ms over 400 ms: above the bound but not doubled
    assert saturation([1], [stage(growth=(400, 700))]).status == "not_reached"
    # tripled but only +40 ms
    assert saturation([1], [stage(growth=(20, 60))]).status == "not_reached"
    assert saturation([1], [stage(growth=(20, 60))], queue_growth_s=0.01).status == "saturated"


def test_more_than_a_tenth_failing_saturates():
    assert MAX_FAILED_SHARE == 0.1
    at_threshold = stage(sent=100, completed=90)  # exactly 10% failed: not more than the share
    assert saturation([1], [at_threshold]).status == "not_reached"
    result = saturation([1], [stage(sent=100, completed=89)])
    assert result.status == "saturated" and result.reason.startswith("11 of 100 requests sent failed")


def test_requests_rejected_as_invalid_are_not_a_sign_of_load():
    # 30 prompts too long for the model: HTTP 400 at any rate
    assert saturation([1], [stage(sent=100, completed=70, rejected=30)]).status == "not_reached"
    result = saturation([1], [stage(sent=100, completed=55, rejected=30)])
    assert result.status == "saturated" and result.reason.startswith("15 of 100")


def test_a_failed_slo_saturates():
    result = saturation([1, 2], [stage(slo_pass=True), stage(slo_pass=False)])
    assert result.rate == 2 and "SLO" in result.reason


def test_an_invalid_stage_cannot_be_the_saturation_point():
    result = saturation([1, 2, 4], [stage(), stage(growth=(20, 900), valid=False, lag_p99=7.5), stage(growth=(20, 3000))])
    assert result.status == "undetermined"
    assert result.rate is None and result.undetermined_at == 2
    assert "send lag p99 7.5 ms above the 1 ms bound" in result.reason
    assert result.to_json() == {"status": "undetermined", "rate": None, "undetermined_at": 2,
                                "reason": result.reason, "resource": None, "concurrency": None}
    cancelled = saturation([1], [stage(sent=10, completed=2, valid=False, cancelled=True)])
    assert cancelled.undetermined_at == 1 and "cancelled" in cancelled.reason


def test_the_saturation_point_names_what_the_engine_ran_out_of():
    full = {"engine": "vllm", "samples": 9, "kv_usage": {"p50": 0.7, "max": 0.97}, "preemptions": 4.0}
    result = saturation([1, 2], [stage(), {**stage(growth=(20, 900)), "engine_metrics": full}])
    assert result.rate == 2 and result.resource == "the KV cache (usage max 97%, 4 preemptions)"
    # nothing read, or read from a stage that kept up: nothing named
    assert saturation([1, 2], [stage(), stage(growth=(20, 900))]).resource is None


def test_an_invalid_stage_that_kept_up_does_not_hide_a_later_saturation():
    result = saturation([1, 2], [stage(valid=False, lag_p99=3.0), stage(growth=(20, 900))])
    assert result.status == "saturated" and result.rate == 2


def test_the_result_json_is_one_shape_with_the_callers_context_first():
    config = RunConfig(url="http://127.0.0.1:8000", duration_s=20.0)
    result = SweepResult(config=config, rates=[1.0, 2.0], stages=[], summaries=[stage(), stage(growth=(20, 900))],
                         saturation=Saturation("saturated", rate=2.0, reason="r"))
    data = result.to_json(trace="t.parquet", files=["a", "b"])
    assert list(data)[:2] == ["trace", "files"]
    assert data["url"] == config.url and data["duration_s"] == 20.0 and data["rates"] == [1.0, 2.0]
    assert data["saturation"] == {"status": "saturated", "rate": 2.0, "undetermined_at": None, "reason": "r",
                                  "resource": None, "concurrency": None}
    assert data["rate_search"] is None and data["concurrency"] is None and len(data["stages"]) == 2
    assert result.saturation_rate == 2.0 and result.saturation_reason == "r"
    with pytest.raises(ValueError, match="context key 'stages'"):
        result.to_json(stages=[])
