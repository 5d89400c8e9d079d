"""Bottleneck first: each bottleneck named from an engine's peaks and counters with the offered
rate it was seen at and the prefill / decode split; the diagnostic sweep's rule (the lowest rate
where a bottleneck shows); a campaign sweeps its baseline once, keeps the sweep in its ledger and
reads it back when resumed; and on the embedded engine, a baseline capped at one sequence is
named batch-capped at a rate of its sweep."""

from __future__ import annotations

import pytest

from optimizer import Budget, Campaign, Measurement, Objective, Space, measure_on_engine
from optimizer.diagnosis import SWEEP_FACTORS, counter_deltas, diagnose, diagnose_sweep, phase_split
from replay.config import RunConfig
from replay.generate import GenerateConfig, generate
from replay.sim import KNOBS
from replay.targets import SimEngine

NAMES = ["max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching"]
SPLIT = {"prefill_time_s": 6.2, "decode_time_s": 3.8, "prefill_requests": 10.0}


def test_kv_bound_names_its_preemptions_and_rate():
    d = diagnose({"running": 8, "waiting": 3, "kv_usage": 0.95}, {"preemptions": 4, **SPLIT}, {}, 256, NAMES, rate=4)
    assert d.bottleneck == "KV-bound" and d.rate == 4
    assert d.evidence == (
        "at 4 req/s: 4 preemptions, KV usage peaked at 95%; prefill took 62% of the requests' "
        "running time (prefill 6.2 s, decode 3.8 s over 10 requests)"
    )
    assert d.order[0] == "enable_prefix_caching"


def test_batch_capped_names_the_cap_and_rate():
    d = diagnose({"running": 2, "waiting": 5, "kv_usage": 0.1}, {}, {"max_num_seqs": 2}, 256, NAMES, rate=6.5)
    assert d.bottleneck == "batch-capped"
    assert d.evidence.startswith("at 6.5 req/s: max-num-seqs (2) reached with up to 5 waiting while KV usage peaked at 10%; ")
    assert d.order[:2] == ["max_num_seqs", "max_num_batched_tokens"]


def test_prefill_bound_when_requests_wait_under_the_cap():
    d = diagnose({"running": 3, "waiting": 4, "kv_usage": 0.3}, SPLIT, {}, 256, NAMES, rate=12)
    assert d.bottleneck == "prefill-bound" and d.order[0] == "max_num_batched_tokens"
    assert d.evidence.startswith("at 12 req/s: up to 4 requests waited while the batch peaked at 3 of 256")


def test_waiting_with_no_request_ever_seen_running_is_neither_capped_nor_prefill_bound():
    # vLLM under a cap of 1 (CI once): every sample caught the engine between steps, 15 waiting
    # and none running; that says nothing of whether the batch was under its cap
    for peaks in ({"running": 0, "waiting": 15, "kv_usage": 0.01}, {"waiting": 15}):
        d = diagnose(peaks, SPLIT, {"max_num_seqs": 1}, 256, NAMES, rate=20)
        assert d.bottleneck == "cannot tell" and d.order == NAMES, d
        assert d.evidence.startswith("at 20 req/s: up to 15 requests waited but no sample saw a request running")
    # the sweep looks past such a rate to the next one where a bottleneck shows
    sweep = [stage(20, running=0, waiting=15), stage(40, running=1, waiting=30), stage(80, running=1, waiting=40)]
    d = diagnose_sweep(sweep, {"max_num_seqs": 1}, 256, NAMES)
    assert d.bottleneck == "batch-capped" and d.rate == 40
    assert [s["bottleneck"] for s in d.sweep] == ["cannot tell", "batch-capped", "batch-capped"]
    # and where no rate shows one, the highest rate's is named
    d = diagnose_sweep([stage(2), stage(4, running=0, waiting=2)], {}, 256, NAMES)
    assert d.bottleneck == "cannot tell" and d.rate == 4


def test_cache_cold_when_caching_is_off_on_a_workload_with_reuse():
    d = diagnose(
        {"running": 1, "waiting": 0, "kv_usage": 0.1}, {}, {"enable_prefix_caching": False}, 256, NAMES, offered_reuse=0.5, rate=2
    )
    assert d.bottleneck == "cache-cold" and d.order[0] == "enable_prefix_caching"
    assert d.evidence.startswith("at 2 req/s: prefix caching is off while the workload offers 50% prefix reuse")


def test_not_saturated_and_an_unknown_rate():
    d = diagnose({"running": 1, "waiting": 0}, {}, {}, 256, NAMES)
    assert d.bottleneck == "not saturated" and d.rate is None and d.order == NAMES
    assert d.evidence == (
        "no queue: the batch peaked at 1 with 0 waiting, KV usage at unknown (not in the engine's "
        "metrics); prefill vs decode time not reported by the engine"
    )


def test_the_prefill_decode_split():
    assert phase_split({}) == "prefill vs decode time not reported by the engine"
    assert phase_split({"prefill_time_s": 1.0}) == "prefill vs decode time not reported by the engine"
    # llama.cpp: times without request counts
    assert phase_split({"prefill_time_s": 1.0, "decode_time_s": 3.0}) == (
        "prefill took 25% of the requests' running time (prefill 1 s, decode 3 s)"
    )
    assert phase_split({"prefill_time_s": 0.0, "decode_time_s": 0.0}) == "no prefill or decode time reported"


def test_counter_deltas_are_a_stages_own():
    before = {"preemptions": 2.0, "prefill_time_s": 1.5, "running": 4.0}
    after = {"preemptions": 5.0, "prefill_time_s": 4.0, "decode_time_s": 2.0, "running": 1.0, "kv_usage": 0.5}
    assert counter_deltas(before, after) == {"preemptions": 3.0, "prefill_time_s": 2.5, "decode_time_s": 2.0}


def stage(rate, running=1, waiting=0, kv=0.1, **counters):
    return {
        "rate": rate,
        "factor": rate / 4,
        "peaks": {"running": running, "waiting": waiting, "kv_usage": kv},
        "counters": counters,
        "goodput_rps": rate * 0.9,
        "throughput_rps": rate,
        "sent": 20,
        "completed": 20,
        "valid": True,
    }


def test_the_sweep_takes_the_lowest_rate_where_a_bottleneck_shows():
    sweep = [stage(2), stage(4, running=2, waiting=3), stage(8, running=2, waiting=9, kv=0.95, preemptions=3)]
    d = diagnose_sweep(sweep, {"max_num_seqs": 2}, 256, NAMES)
    assert d.bottleneck == "batch-capped" and d.rate == 4
    assert d.evidence.startswith("at 4 req/s: max-num-seqs (2) reached with up to 3 waiting")
    assert [s["bottleneck"] for s in d.sweep] == ["not saturated", "batch-capped", "KV-bound"]
    assert [s["rate"] for s in d.sweep] == [2, 4, 8] and d.sweep[2]["counters"] == {"preemptions": 3}
    assert d.to_json()["rate"] == 4 and d.to_json()["sweep"] == d.sweep
    lines = d.sweep_lines()
    assert len(lines) == 3 and lines[0].startswith("at 2 req/s: not saturated, goodput 1.8 req/s, throughput 2 req/s")
    assert lines[2].startswith("at 8 req/s: KV-bound") and "(3 preemptions, KV usage peaked at 95%;" in lines[2]


def test_a_sweep_that_never_saturates_is_named_at_its_highest_rate():
    d = diagnose_sweep([stage(2), stage(4), stage(8)], {}, 256, NAMES)
    assert d.bottleneck == "not saturated" and d.rate == 8 and d.evidence.startswith("at 8 req/s: no queue")


# -- in a campaign --------------------------------------------------------------------------------


class Sweeping:
    """A measure whose baseline queues behind a cap of 2 at 4 req/s; it counts its sweeps."""

    def __init__(self, fails: bool = False) -> None:
        self.sweeps = 0
        self.fails = fails

    def __call__(self, config) -> Measurement:
        return Measurement(
            10.0 if config.get("max_num_seqs", 2) == 2 else 10.05,
            details={"peaks": {"running": 1}, "counters": {}, "summary": {"offered_rate": 2.0}},
        )

    def diagnose(self, config) -> Measurement:
        self.sweeps += 1
        if self.fails:
            return Measurement(None, "the engine failed to start: boom", {"sweep": []})
        return Measurement(None, None, {"sweep": [stage(1), stage(2), stage(4, running=2, waiting=3)]})


def campaign(tmp_path, measure) -> Campaign:
    return Campaign(
        space=Space.of("sim", KNOBS, {"max_num_seqs": [2, 4]}),
        measure=measure,
        ledger=tmp_path / "ledger.sqlite",
        identity={"engine": "sim", "workload": "w"},
        baseline={"max_num_seqs": 2},
        repeats=2,
        budget=Budget(trials=1),
    )


def test_a_campaign_sweeps_its_baseline_once_and_reads_it_back_when_resumed(tmp_path):
    measure = Sweeping()
    c = campaign(tmp_path, measure)
    c.start()
    assert measure.sweeps == 1
    assert c.diagnosis.bottleneck == "batch-capped" and c.diagnosis.rate == 4 and len(c.diagnosis.sweep) == 3
    [row] = c.ledger.entries(role="diagnosis")
    assert row.config == {"max_num_seqs": 2} and row.measurement.details["sweep"][2]["rate"] == 4
    result = c.run()
    assert result.to_json()["diagnosis"]["rate"] == 4
    c.close()
    from optimizer.html import html_report
    from optimizer.report import markdown

    md, html = markdown(result), html_report(result)
    lines = c.diagnosis.sweep_lines()
    assert len(lines) == 3
    for line in lines:  # every rate's evidence, in both reports
        assert f"- {line}\n" in md and f"<li>{line}</li>" in html

    again = campaign(tmp_path, measure)
    again.start()
    assert measure.sweeps == 1, "the resumed campaign read the sweep from its ledger"
    assert again.diagnosis == c.diagnosis
    again.close()


class Stopping(Sweeping):
    """A measure whose sweep runs its stages until the campaign's ``stop`` says one is enough."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[float] = []

    def diagnose(self, config, stop=None) -> Measurement:
        stages = []
        for s in (stage(1), stage(2, running=2, waiting=3), stage(4, running=2, waiting=6)):
            stages.append(s)
            self.ran.append(s["rate"])
            if stop is not None and stop(s):
                break
        return Measurement(None, None, {"sweep": stages})


def test_the_sweep_stops_at_the_first_rate_that_names_a_bottleneck(tmp_path):
    measure = Stopping()
    c = campaign(tmp_path, measure)
    c.start()
    assert measure.ran == [1, 2], "no stage after the one that named the cap"
    assert c.diagnosis.bottleneck == "batch-capped" and c.diagnosis.rate == 2 and len(c.diagnosis.sweep) == 2
    c.close()


def test_a_failed_sweep_falls_back_to_the_first_run_and_is_not_retried(tmp_path):
    measure = Sweeping(fails=True)
    c = campaign(tmp_path, measure)
    c.start()
    assert c.diagnosis.bottleneck == "not saturated" and c.diagnosis.rate == 2.0  # the first baseline run's rate
    assert c.ledger.entries(role="diagnosis")[0].measurement.invalid == "the engine failed to start: boom"
    c.close()
    campaign(tmp_path, measure).start()
    assert measure.sweeps == 1


def test_a_measure_without_a_sweep_is_diagnosed_from_the_first_run(tmp_path):
    c = campaign(tmp_path, lambda config: Measurement(10.0, details={"peaks": {"running": 2, "waiting": 4}, "counters": {}}))
    c.start()
    assert c.diagnosis.bottleneck == "batch-capped" and c.diagnosis.rate is None and c.diagnosis.sweep == []
    assert c.diagnosis.evidence.startswith("max-num-seqs (2) reached") and not c.ledger.entries(role="diagnosis")
    c.close()


# -- on the embedded engine -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_batch_capped_baseline_is_named_with_the_rate_of_its_sweep(tmp_path):
    trace = generate(GenerateConfig(n_requests=30, seed=1, rate=10))
    run = RunConfig(url="http://127.0.0.1:0", rate=8, requests=16, lag_bound_ms=50)
    measure = measure_on_engine(SimEngine(time_scale=0.05), trace, run, Objective("throughput"), check_outputs=False)
    c = Campaign(
        space=Space.of("sim", KNOBS, {"max_num_seqs": [1, 8]}),
        measure=measure,
        ledger=tmp_path / "ledger.sqlite",
        identity={"engine": "sim", "workload": "w"},
        baseline={"max_num_seqs": 1},
        repeats=2,
    )
    try:
        c.start()
    finally:
        c.close()
    d = c.diagnosis
    # the sweep stops at the first rate that names a bottleneck: the diagnosis's
    rates = [s["rate"] for s in d.sweep]
    assert rates == [8 * f for f in SWEEP_FACTORS][: len(rates)]
    assert d.bottleneck == "batch-capped", d.sweep
    assert d.rate == rates[-1] and all(s["bottleneck"] in ("not saturated", "cannot tell") for s in d.sweep[:-1])
    assert d.evidence.startswith(f"at {d.rate:.3g} req/s: max-num-seqs (1) reached with up to")
    for s in d.sweep:  # every stage ran all its requests, and the engine's counters are the stage's own
        assert s["sent"] == s["completed"] == 16 and s["counters"]["requests_finished"] == 16
        assert s["counters"]["decode_requests"] == 16 and s["counters"]["prefill_time_s"] > 0
        assert s["prefix_cache"] == "reset (POST /reset_prefix_cache)"  # each stage from a cold cache
    assert "prefill took" in d.evidence and "of the requests' running time" in d.evidence
