"""The README's main job, shortened: examples/quickstart.py --short runs every step (capture with
Presidio through the recording proxy, inspect, sweep with the fidelity gate, a causal replay of
the whole capture and its fidelity report, a tuning campaign) and fails on any step's failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_quickstart_runs_every_step_and_writes_every_artifact(tmp_path):
    out = tmp_path / "quickstart"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--short", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=880,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # this checkout, wherever it is installed
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    for title in (
        "1. capture",
        "2. inspect",
        "3. sweep",
        "4a. replay every captured request",
        "4b. the fidelity report",
        "5. a short tuning campaign",
    ):
        assert f"== {title}" in done.stdout
    sweep = json.loads((out / "sweep" / "summary.json").read_text())
    assert [s["requested_rate"] for s in sweep["stages"]] == [4.0, 8.0]
    # each stage replays 60 of the capture's own requests: faithful request by request, no flag
    assert sweep["fidelity"]["state"] == "faithful" and sweep["fidelity"]["inconclusive_allowed"] is False
    # the whole capture replayed, each turn resending the answers the engine gave to the earlier ones
    whole = json.loads((out / "replay" / "summary.json").read_text())["stages"][0]
    assert whole["sessions"] == "causal" and whole["runner"]["answers_resent"] > 0
    report = json.loads((out / "fidelity" / "fidelity.json").read_text())
    assert report["state"] in ("faithful", "cannot tell")  # a failed metric would have stopped it (exit 1)
    assert (out / "fidelity" / "fidelity.html").stat().st_size > 10_000
    campaign = json.loads((out / "optimize" / "optimize.json").read_text())
    assert campaign["baseline"] is not None  # its fidelity gate vouched for it, with no --allow-inconclusive
