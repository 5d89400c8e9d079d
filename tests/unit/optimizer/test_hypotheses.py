"""The optimizer's hypotheses: written from the incumbent's bottleneck and the knob's mechanism,
checked against the metrics the candidate's run measured, the candidate diagnosed again, and the
table in docs/optimizer.md the same as the one in code."""

from __future__ import annotations

import re
from pathlib import Path

from optimizer import Budget, Campaign, Measurement, Space
from optimizer.html import html_report
from optimizer.hypotheses import HELD, MECHANISMS, NOT_MEASURABLE, REFUTED, check, hypothesis, observed, score
from optimizer.report import markdown
from replay.sim import KNOBS

ROOT = Path(__file__).resolve().parents[3]


def test_a_batch_capped_incumbent_predicts_the_queue_shrinks_when_the_cap_rises():
    h = hypothesis({"max_num_seqs": 2}, {"max_num_seqs": 4}, "batch-capped", "max-num-seqs (2) reached")
    assert h["change"] == "max_num_seqs 2 -> 4"
    assert h["predictions"] == [
        {"metric": "running", "direction": 1},
        {"metric": "waiting", "direction": -1},
        {"metric": "ttft_p50_ms", "direction": -1},
    ]
    assert "admits more of the waiting requests" in h["mechanism"]
    # the same change on an engine that kept up predicts nothing moves
    idle = hypothesis({"max_num_seqs": 2}, {"max_num_seqs": 4}, "not saturated", "no queue")
    assert idle["predictions"] == [{"metric": "objective", "direction": 0}, {"metric": "waiting", "direction": 0}]
    # each engine's name for the same role: llama.cpp's parallel, SGLang's inverted radix-cache switch
    assert hypothesis({"parallel": 2}, {"parallel": 4}, "batch-capped")["predictions"] == h["predictions"]
    radix = hypothesis({"disable_radix_cache": True}, {"disable_radix_cache": False}, "cache-cold")
    assert radix["predictions"][0] == {"metric": "prefix_hit_rate", "direction": 1}
    # no mechanism on record: only the objective is predicted to rise
    other = hypothesis({"block_size": 16}, {"block_size": 32}, "batch-capped")
    assert other["predictions"] == [{"metric": "objective", "direction": 1}] and "no mechanism" in other["mechanism"]


def test_checks_hold_refute_or_cannot_measure():
    preds = [
        {"metric": "waiting", "direction": -1},
        {"metric": "running", "direction": 1},
        {"metric": "kv_usage", "direction": -1},
        {"metric": "objective", "direction": 1},
    ]
    inc = {"waiting": 12.0, "running": 2.0, "objective": 5.0}
    cand = {"waiting": 3.0, "running": 2.0, "objective": 5.1}
    out = check(preds, inc, cand, verdict="same")
    assert [c["outcome"] for c in out] == [HELD, REFUTED, NOT_MEASURABLE, REFUTED]
    assert score(out) == "1 held, 2 refuted, 1 not measurable" and score([]) == "-"
    assert check([{"metric": "objective", "direction": 1}], {}, {}, verdict="better")[0]["outcome"] == HELD


def test_observed_reads_a_runs_details():
    details = {
        "peaks": {"running": 4, "waiting": 1, "kv_usage": 0.3},
        "counters": {"preemptions": 0.0, "prefix_cache_queries": 200.0, "prefix_cache_hits": 50.0},
        "summary": {"ttft_ms": {"from_intended": {"p50": 42.0}}},
    }
    assert observed(details, 7.0) == {
        "running": 4.0,
        "waiting": 1.0,
        "kv_usage": 0.3,
        "preemptions": 0.0,
        "prefix_hit_rate": 0.25,
        "ttft_p50_ms": 42.0,
        "objective": 7.0,
    }


class CappedEngine:
    """max_num_seqs = k runs k at once; with 12 requests offered, 12 - k wait and TTFT falls as k
    rises; the objective rises up to k = 8."""

    def __call__(self, config) -> Measurement:
        k = config.get("max_num_seqs", 2)
        return Measurement(
            min(k, 8) * 1.0,
            details={
                "peaks": {"running": float(k), "waiting": float(max(0, 12 - k)), "kv_usage": 0.1},
                "counters": {},
                "summary": {"offered_rate": 4.0, "ttft_ms": {"from_intended": {"p50": 1000.0 / k}}},
            },
        )


def test_a_campaign_checks_each_prediction_and_diagnoses_each_candidate_again(tmp_path):
    c = Campaign(
        space=Space.of("sim", KNOBS, {"max_num_seqs": [2, 4, 8, 16]}),
        measure=CappedEngine(),
        ledger=tmp_path / "ledger.sqlite",
        identity={"engine": "sim", "workload": "w"},
        baseline={"max_num_seqs": 2},
        repeats=2,
        budget=Budget(trials=3),
    )
    result = c.run()
    first = result.steps[0]
    assert first.config == {"max_num_seqs": 4} and first.verdict.kind == "better"
    assert [(k["metric"], k["outcome"]) for k in first.checks] == [("running", HELD), ("waiting", HELD), ("ttft_p50_ms", HELD)]
    assert first.hypothesis["diagnosis"]["bottleneck"] == "batch-capped"
    assert "max-num-seqs (4) reached" in first.hypothesis["diagnosis"]["evidence"]
    # the next proposal starts from the new incumbent: its explanation cites 4, not the baseline's 2
    second = result.steps[1]
    assert second.config == {"max_num_seqs": 8}
    assert "max-num-seqs (4) reached" in second.hypothesis["explanation"]
    assert [k["incumbent"] for k in second.checks][:2] == [4.0, 8.0]  # running and waiting of the cap-4 run
    # the ledger holds the checks
    rows = [e for e in c.ledger.entries(role="candidate") if e.config == {"max_num_seqs": 4}]
    assert rows[0].hypothesis["checks"] == first.checks
    # the reports show the score beside the verdict
    assert (
        r"| 3 held (running up: 2 -\> 4 held; waiting down: 10 -\> 8 held; ttft\_p50\_ms down: 500 -\> 250 held) |"
        in markdown(result)
    )
    assert "3 held (running up" in html_report(result)
    c.close()


def test_the_docs_table_is_the_code_table():
    text = (ROOT / "docs" / "optimizer.md").read_text()
    rows = re.findall(r"^\| (\S[^|]*?) \| (\S[^|]*?) \| (up|down) \| ([^|]+?) \| ([^|]+?) \|$", text, re.M)
    verbs = {"rises": 1, "falls": -1, "stays": 0}
    documented = {
        (b, r, d == "up"): tuple((m.strip("` "), verbs[v]) for m, v in (p.strip().rsplit(" ", 1) for p in preds.split(",")))
        for b, r, d, _, preds in rows
    }
    assert documented == {k: m.predictions for k, m in MECHANISMS.items()}
