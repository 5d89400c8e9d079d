"""examples/tuning_loop.py, run as a reader would run it (smaller): the loop's own proposal gets a
verdict, the ledger holds the candidates, and the greedy output check ran (the baseline's runs
carry its answers, which only a measure given the baseline collects); then the loop measures its
own runs and tells them, and the second ledger holds exactly what it told."""

from __future__ import annotations

import importlib.util
import json
import re
import sqlite3
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tuning_loop.py"


@pytest.mark.slow
def test_the_tuning_loop_example_judges_its_own_proposal_and_keeps_a_ledger(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("tuning_loop_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(tmp_path / "out", requests=12, trials=2)
    printed = capsys.readouterr().out
    assert re.search(r"^max_num_seqs 2 -> 32: (better|same|worse|invalid) \(", printed, re.M), printed
    assert "best: " in printed
    db = sqlite3.connect(tmp_path / "out" / "ledger.sqlite")
    rows = db.execute("SELECT role, config, details, verdict FROM experiments").fetchall()
    db.close()
    candidates = [r for r in rows if r[0] == "candidate"]
    assert candidates and all(r[3] for r in candidates), "every candidate row has its verdict"
    assert json.loads(candidates[0][1]) == {"max_num_seqs": 32}, "the loop's own proposal went first"
    baseline = [json.loads(r[2]) for r in rows if r[0] == "baseline"]
    assert len(baseline) == 3 and all(d.get("answers") for d in baseline), "the greedy output check ran"
    # the second way: the loop measured the baseline and its proposals itself and told the campaign
    assert "(measured by the loop)" in printed
    told = re.findall(r"^(candidate|confirm) \{.*\}: (better|same|worse|invalid|pending) \(", printed, re.M)
    assert told and told[0][0] == "candidate", printed
    db = sqlite3.connect(tmp_path / "out" / "ledger-own.sqlite")
    own = db.execute("SELECT role, value, details FROM experiments").fetchall()
    db.close()
    assert [r[0] for r in own].count("baseline") == 3 and all(r[1] is not None for r in own if r[0] == "baseline")
    assert all(json.loads(r[2]) == {} for r in own), "only what the loop told: no stage details of the campaign's"
    assert len([r for r in own if r[0] in ("candidate", "confirm")]) == len(told)
