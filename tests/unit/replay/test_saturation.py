"""The saturation rule (replay.sweep.saturation) on plain stage summaries, and the one result JSON."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest

from replay.config import RunConfig
from replay.errors import ConfigError
from replay.metrics import StageSummary
from replay.noise import NoiseFloor
from tests.summaries import stage_summary
from replay.sweep import (
    MAX_FAILED_SHARE,
    QUEUE_GROWTH_S,
    HeldInterval,
    Saturation,
    SweepResult,
    _saturation_over,
    by_load,
    held_interval,
    saturation,
)


def stage(
    *, sent=100, completed=100, rejected=0, growth=(20.0, 25.0), slo_pass=None, valid=True, lag_p99=0.4, cancelled=False
) -> StageSummary:
    """A stage summary that kept up unless told otherwise: the fields the rule reads as given."""
    first, last = growth
    return stage_summary(
        requests=sent,
        sent=sent,
        completed=completed,
        rejected=rejected,
        queue={"ttft_first_third_ms": first, "ttft_last_third_ms": last, "growth_ms": last - first},
        send_lag_ms={"p50": None, "p99": lag_p99, "max": None},
        valid=valid,
        invalid_reason=None if valid else "invalid",
        cancelled=cancelled,
        slo_attainment=None if slo_pass is None else (0.95 if slo_pass else 0.5),
        slo_pass=slo_pass,
    )


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
    assert result.to_json() == {
        "status": "undetermined",
        "rate": None,
        "undetermined_at": 2,
        "reason": result.reason,
        "resource": None,
        "concurrency": None,
    }
    cancelled = saturation([1], [stage(sent=10, completed=2, valid=False, cancelled=True)])
    assert cancelled.undetermined_at == 1 and "cancelled" in cancelled.reason


def test_the_saturation_point_names_what_the_engine_ran_out_of():
    full = {"engine": "vllm", "samples": 9, "kv_usage": {"p50": 0.7, "max": 0.97}, "preemptions": 4.0}
    result = saturation([1, 2], [stage(), replace(stage(growth=(20, 900)), engine_metrics=full)])
    assert result.rate == 2 and result.resource == "the KV cache (usage max 97%, 4 preemptions)"
    # nothing read, or read from a stage that kept up: nothing named
    assert saturation([1, 2], [stage(), stage(growth=(20, 900))]).resource is None


def test_an_invalid_stage_that_kept_up_does_not_hide_a_later_saturation():
    result = saturation([1, 2], [stage(valid=False, lag_p99=3.0), stage(growth=(20, 900))])
    assert result.status == "saturated" and result.rate == 2


def test_the_result_json_is_one_shape_with_the_callers_context_first():
    config = RunConfig(url="http://127.0.0.1:8000", duration_s=20.0)
    result = SweepResult(
        config=config,
        rates=[1.0, 2.0],
        stages=[],
        summaries=[stage(), stage(growth=(20, 900))],
        saturation=Saturation("saturated", rate=2.0, reason="r"),
    )
    data = result.to_json(trace="t.parquet", files=["a", "b"])
    assert list(data)[:2] == ["trace", "files"]
    assert data["url"] == config.url and data["duration_s"] == 20.0 and data["rates"] == [1.0, 2.0]
    assert data["saturation"] == {
        "status": "saturated",
        "rate": 2.0,
        "undetermined_at": None,
        "reason": "r",
        "resource": None,
        "concurrency": None,
    }
    assert data["rate_search"] is None and data["concurrency"] is None
    assert data["stages"] == [s.to_json() for s in result.summaries]
    assert result.saturation_rate == 2.0 and result.saturation_reason == "r"
    with pytest.raises(ValueError, match="context key 'stages'"):
        result.to_json(stages=[])


def test_a_stage_summary_goes_to_json_and_back_unchanged():
    s = replace(stage(growth=(20, 900), valid=False), engine_metrics={"engine": "vllm", "kv_usage": {"max": 0.9}})
    data = json.loads(json.dumps(s.to_json()))
    assert list(data) == [f.name for f in fields(StageSummary)]
    assert StageSummary.from_json(data) == s
    # what the CLI adds beside a stage (its fidelity verdict) is left out; a missing field is named
    assert StageSummary.from_json({**data, "fidelity": {"faithful": True}}) == s
    with pytest.raises(ConfigError, match="summary.json stage 2: no 'valid'"):
        StageSummary.from_json({k: v for k, v in data.items() if k != "valid"}, "summary.json stage 2")


# --repeats: the saturation interval and the per-load medians (replay.sweep.held_interval, by_load)


def repeated(rate, repeat, *, users=None, **kw) -> StageSummary:
    """A stage summary of one repeat at `rate` (or `users` of a closed loop)."""
    return replace(stage(**kw), requested_rate=None if users else rate, concurrency=users, repeat=repeat)


SLOW = {"growth": (20, 900)}  # a queue built: did not keep up


def test_the_interval_is_the_highest_load_held_every_time_and_the_lowest_held_never():
    stages = [
        repeated(1, 0),
        repeated(2, 0),
        repeated(4, 0, **SLOW),
        repeated(8, 0, **SLOW),
        repeated(1, 1),
        repeated(2, 1),
        repeated(4, 1),
        repeated(8, 1, **SLOW),
        repeated(1, 2),
        repeated(2, 2),
        repeated(4, 2, **SLOW),
        repeated(8, 2, **SLOW),
    ]
    interval = held_interval(stages)
    assert (interval.held, interval.not_held, interval.unit) == (2, 8, "req/s")
    assert [(x["load"], x["held"], x["of"]) for x in interval.shares] == [(1, 3, 3), (2, 3, 3), (4, 1, 3), (8, 0, 3)]
    line = HeldInterval.line(interval.to_json())
    assert "between 2 req/s (held in every repeat) and 8 req/s (held in none)" in line and "4 in 1 of 3" in line
    # the sweep's saturation point is the lowest load any repeat failed at (a load holds only every time)
    assert sweep_saturation(stages).rate == 4


def test_a_load_holds_only_when_every_lower_load_held_in_that_repeat():
    # repeat 0 failed at 2 (invalid: the runner fell behind) and kept up at 4: 4 did not hold there
    stages = [
        repeated(1, 0),
        repeated(2, 0, valid=False, lag_p99=3.0),
        repeated(4, 0),
        repeated(1, 1),
        repeated(2, 1),
        repeated(4, 1),
    ]
    interval = held_interval(stages)
    assert [(x["load"], x["held"]) for x in interval.shares] == [(1, 2), (2, 1), (4, 1)]
    assert (interval.held, interval.not_held) == (1, None)
    # no repeat showed a sign of load, so no saturation point; the interval still says 2 was not held
    assert sweep_saturation(stages).status == "not_reached"
    assert sweep_saturation(stages[:2] + [repeated(4, 0, **SLOW)]).status == "saturated"


def test_loads_skipped_after_the_saturation_point_count_as_not_held():
    # --stop-after-saturation: repeat 0 stopped at 2, so 4 was never run there
    stages = [repeated(1, 0), repeated(2, 0, **SLOW), repeated(1, 1), repeated(2, 1), repeated(4, 1, **SLOW)]
    interval = held_interval(stages)
    assert [(x["load"], x["held"], x["of"]) for x in interval.shares] == [(1, 2, 2), (2, 1, 2), (4, 0, 2)]
    assert (interval.held, interval.not_held) == (1, 4)


def test_a_closed_loop_interval_is_in_users_and_as_recorded_stages_have_none():
    stages = [repeated(None, k, users=u, **(SLOW if u == 16 else {})) for k in (0, 1) for u in (1, 4, 16)]
    interval = held_interval(stages)
    assert (interval.held, interval.not_held, interval.unit) == (4, 16, "users")
    assert held_interval([repeated(None, 0), repeated(None, 1)]) is None


def test_by_load_takes_median_and_spread_over_the_valid_repeats_only():
    def with_rps(rate, repeat, rps, valid=True):
        return replace(repeated(rate, repeat, valid=valid), throughput_rps=rps)

    rows = by_load(
        [with_rps(2, 0, 1.9), with_rps(2, 1, 2.1), with_rps(2, 2, 50.0, valid=False), with_rps(1, 0, 1.0), with_rps(1, 1, 1.0)]
    )
    assert [(r["load"], r["runs"], r["valid"]) for r in rows] == [(1, 2, 2), (2, 3, 2)]
    rps = rows[1]["metrics"]["req/s"]
    assert rps["values"] == [1.9, 2.1] and rps["median"] == pytest.approx(2.0)
    assert rps["spread"] == pytest.approx(NoiseFloor((1.9, 2.1)).spread)  # the one noise rule
    assert rows[0]["metrics"]["TTFT p50"] is None  # no value in these summaries


def sweep_saturation(stages):
    """The saturation point SweepResult.of gives these stages (over their repeats)."""
    return _saturation_over(stages, QUEUE_GROWTH_S)
