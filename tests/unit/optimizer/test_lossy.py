"""A win on a lossy knob is judged and confirmed like any other but never adopted: it waits for a
person's approval, in the result and in every report, while lossless wins still move the baseline."""

from __future__ import annotations

import json
import random

from optimizer import Budget, Campaign, Measurement, Space
from optimizer.report_files import write_result
from optimizer.space import config_key
from replay.sim import KNOBS

BASE = {"max_num_seqs": 2, "kv_cache_dtype": "auto"}


def space() -> Space:
    return Space.of("sim", KNOBS, {"kv_cache_dtype": ["auto", "fp8"], "max_num_seqs": [2, 4, 8]}, allow_lossy=True)


def measure(calls: list):
    """fp8 KV gives 40% more, each doubling of max_num_seqs 20% more (1% noise)."""
    rng = random.Random(5)

    def m(config) -> Measurement:
        calls.append(config_key(config))
        value = 100.0 * (1.4 if config.get("kv_cache_dtype") == "fp8" else 1.0)
        value *= 1.2 ** [2, 4, 8].index(config.get("max_num_seqs", 2))
        return Measurement(value * (1 + rng.gauss(0, 0.01)))

    return m


def campaign(tmp_path, calls, **kw) -> Campaign:
    return Campaign(
        space=space(),
        measure=measure(calls),
        ledger=tmp_path / "ledger.sqlite",
        identity={"engine": "sim", "workload": "w"},
        baseline=BASE,
        budget=Budget(trials=10),
        **kw,
    )


def test_a_lossy_win_waits_for_approval_and_a_lossless_one_is_adopted(tmp_path):
    calls: list[str] = []
    c = campaign(tmp_path, calls, order=["kv_cache_dtype", "max_num_seqs"])
    result = c.run()
    c.close()
    lossy = [s for s in result.steps if s.config["kv_cache_dtype"] == "fp8"]
    assert lossy, "the search tried the lossy knob"
    first = lossy[0]
    # judged and confirmed on a fresh restart, like any win ...
    assert first.verdict.kind == "better" and len(first.verdict.measurements) == 2
    assert first.needs_approval == ("kv_cache_dtype",)
    # ... but not adopted
    assert result.best["kv_cache_dtype"] == "auto"
    assert all(s.config["kv_cache_dtype"] == "auto" for s in result.accepted)
    assert result.awaiting_approval and all(s.needs_approval == ("kv_cache_dtype",) for s in result.awaiting_approval)
    assert first in result.awaiting_approval and first not in result.accepted
    # the search went on from the lossless baseline, and its lossless wins were adopted
    assert result.accepted and result.best == {"max_num_seqs": 8, "kv_cache_dtype": "auto"}
    assert all(not s.needs_approval for s in result.accepted)
    # a lossless change never needs approval, whatever its verdict
    assert all(not s.needs_approval for s in result.steps if s.config["kv_cache_dtype"] == "auto")

    data = result.to_json()
    assert [s["needs_approval"] for s in data["awaiting_approval"]] == [["kv_cache_dtype"]] * len(lossy)
    assert data["best"]["kv_cache_dtype"] == "auto"
    out = write_result(result, tmp_path / "report")
    assert json.loads(out[0].read_text())["awaiting_approval"][0]["config"]["kv_cache_dtype"] == "fp8"
    gain = f"{first.verdict.gain:+.1%}"
    for path in out[1:]:  # optimize.md, optimize.html
        text = path.read_text()
        assert "needs a person's approval" in text.replace("&#x27;", "'"), path
        assert "kv_cache_dtype" in text and gain in text, path


def test_an_outside_loop_s_lossy_win_is_not_adopted_and_the_terminal_says_so(tmp_path, capsys):
    from optimizer.report import print_result

    calls: list[str] = []
    c = campaign(tmp_path, calls)
    c.start()
    lossy = c.evaluate({"max_num_seqs": 2, "kv_cache_dtype": "fp8"}, {"change": "kv fp8"})
    assert lossy.kind == "better"
    assert c.result.best == BASE and not c.result.accepted
    # a knob left out is at the engine's default: no lossy change, no approval needed
    lossless = c.evaluate({"max_num_seqs": 4}, {"change": "seqs 2 -> 4"})
    assert lossless.kind == "better" and c.result.best == {"max_num_seqs": 4}
    assert [s.hypothesis["change"] for s in c.result.awaiting_approval] == ["kv fp8"]
    c.close()
    print_result(c.result)
    printed = capsys.readouterr().out
    assert "kv fp8: gain" in printed and "needs a person's approval" in printed and "kv_cache_dtype" in printed


def test_a_resumed_campaign_does_not_adopt_a_lossy_win_from_its_ledger(tmp_path):
    calls: list[str] = []
    c = campaign(tmp_path, calls)
    c.evaluate({**BASE, "kv_cache_dtype": "fp8"}, {"change": "kv fp8"})
    c.close()
    again = campaign(tmp_path, calls)
    verdict = again.evaluate({**BASE, "kv_cache_dtype": "fp8"}, {"change": "kv fp8"})
    assert verdict.kind == "better" and "from the ledger" in verdict.reason
    assert again.result.best == BASE and again.result.awaiting_approval[0].reused
    again.close()
