"""Each cause that makes a measurement invalid (``optimizer.measure.EngineMeasure.__call__``),
provoked for real: the embedded engine started on loopback and a small generated trace replayed
against it, or the scripted SSE server where a precise share of failing requests is needed. An
invalid measurement is a reason, never a number and never a crash; the fidelity gate's override
is a number whose details, and the campaign's result, say the gate was overridden."""

from __future__ import annotations

import dataclasses
import json

import polars as pl
import pytest

from optimizer import Objective, measure_on_engine
from replay.config import RunConfig
from replay.errors import ReplayError
from replay.generate import GenerateConfig, generate
from replay.targets import SimEngine
from replay.trace import Trace
from tests.e2e.conftest import run_cli
from tests.integration.conftest import trace_of_bodies
from tests.scripted_server import ScriptedServer

RUN = RunConfig(url="http://127.0.0.1:0", rate=10, requests=20, lag_bound_ms=50)


@pytest.fixture(scope="module")
def trace() -> Trace:
    return generate(GenerateConfig(n_requests=30, seed=1, rate=10))


@pytest.fixture(scope="module")
def engine() -> SimEngine:
    return SimEngine(time_scale=0.05)


def cached_live(trace: Trace) -> Trace:
    """``trace`` as recorded on an engine whose prefix cache served 90% of every prompt."""
    return Trace(df=trace.df.with_columns(cached_tokens=pl.col("input_tokens") * 9 // 10), meta=trace.meta)


def measure(engine, trace, run=RUN, **kw):
    return measure_on_engine(engine, trace, run, Objective("throughput"), check_outputs=False, **kw)


def test_requests_the_engine_rejects_make_the_measurement_invalid(engine, trace):
    # a context of 64 tokens: every generated prompt (hundreds of tokens) is refused with a 4xx
    m = measure(engine, trace)({"max_model_len": 64})
    assert m.value is None
    assert "20 of 20 requests failed" in m.invalid and "http_4xx" in m.invalid, m.invalid
    assert m.details["summary"]["completed"] == 0  # what was measured is kept beside the reason


@pytest.fixture
def server():
    s = ScriptedServer().start()
    yield s
    s.stop()


class _Scripted:
    """An "engine" whose every start is the same scripted server."""

    name = "scripted"
    knobs = ()

    def __init__(self, server) -> None:
        self.server = server

    def launch(self, config):
        url = self.server.url

        class Running:
            def __init__(self):
                self.url = url

            def metrics(self):
                return {}

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return None

        return Running()


@pytest.mark.parametrize("failing, invalid", [(2, False), (3, True)])
def test_more_than_a_tenth_of_the_requests_failing_is_invalid(server, failing, invalid):
    # 20 requests, the first `failing` answered 500: 2 (10%) is within replay.sweep.MAX_FAILED_SHARE, 3 is over
    bodies = [
        {
            "model": "m",
            "max_tokens": 2,
            "messages": [{"role": "user", "content": f"q{i}"}],
            **({"x_fault": "http500"} if i < failing else {}),
        }
        for i in range(20)
    ]
    m = measure(_Scripted(server), trace_of_bodies(bodies), dataclasses.replace(RUN, rate=50))({})
    if invalid:
        assert m.value is None and m.invalid == "3 of 20 requests failed: {'http_5xx': 3}", m.invalid
    else:
        assert m.invalid is None and m.value > 0
        assert m.details["summary"]["errors"] == {"http_5xx": 2}


def test_a_runner_over_its_lag_bound_makes_the_measurement_invalid(engine, trace):
    m = measure(engine, trace, dataclasses.replace(RUN, lag_bound_ms=0.0001))({})
    assert m.value is None
    assert m.invalid.startswith("the runner fell behind: send lag p99") and "over the 0.0001 ms bound" in m.invalid
    assert m.details["summary"]["valid"] is False


class _Counted:
    """``engine``, counting its starts."""

    def __init__(self, engine) -> None:
        self.engine, self.starts = engine, 0
        self.name, self.knobs = engine.name, engine.knobs

    def launch(self, config):
        self.starts += 1
        return self.engine.launch(config)


def test_a_measurement_the_runner_made_invalid_is_taken_again_on_a_fresh_start(engine, trace):
    counted = _Counted(engine)
    m = measure(counted, trace, dataclasses.replace(RUN, lag_bound_ms=0.0001), retry_invalid=2)({})
    # no attempt can hold a 0.1 µs bound: three starts, the last kept, the two before it named
    assert counted.starts == 3
    assert m.value is None and m.invalid.startswith("the runner fell behind:")
    assert len(m.details["discarded_attempts"]) == 2
    assert all(r.startswith("the runner fell behind: send lag p99") for r in m.details["discarded_attempts"])
    # a measurement invalid for another cause (the engine refused every request) is not taken again
    refused = _Counted(engine)
    m = measure(refused, trace, retry_invalid=2)({"max_model_len": 64})
    assert refused.starts == 1 and "requests failed" in m.invalid and "discarded_attempts" not in m.details


def test_the_first_valid_attempt_is_kept(engine, trace, monkeypatch):
    from optimizer.measure import EngineMeasure
    from optimizer.verdict import Measurement

    attempts = iter([(Measurement(None, "the runner fell behind: late", {}), True), (Measurement(7.0, None, {}), False)])
    monkeypatch.setattr(EngineMeasure, "_once", lambda self, config: next(attempts))
    m = measure(engine, trace, retry_invalid=3)({})
    assert (m.value, m.invalid, m.details["discarded_attempts"]) == (7.0, None, ["the runner fell behind: late"])
    with pytest.raises(ReplayError, match="--retry-invalid: must be a whole number"):
        measure(engine, trace, retry_invalid=-1)


@pytest.mark.slow
def test_the_fidelity_gate_and_its_override(engine, trace):
    live = cached_live(trace)
    off = {"enable_prefix_caching": False}  # this engine caches nothing: the replay cannot match the live hits
    m = measure(engine, trace, live=live)(off)
    assert m.value is None and m.invalid.startswith("the fidelity gate failed: unfaithful:"), m.invalid
    assert "cached / prompt tokens" in m.invalid and "fidelity_overridden" not in m.details

    kept = measure(engine, trace, live=live, allow_unfaithful=True)(off)
    assert kept.invalid is None and kept.value > 0
    assert kept.details["fidelity_overridden"] is True and kept.details["fidelity"].startswith("unfaithful:")

    # the control: the trace as generated, no recorded hits; 20 live requests cannot tell, and the
    # gate takes that for not faithful unless allowed
    small = measure(engine, trace, live=trace)(off)
    assert small.value is None and small.invalid.startswith("the fidelity gate failed: cannot tell:"), small.invalid
    allowed = measure(engine, trace, live=trace, allow_inconclusive=True)(off)
    assert allowed.invalid is None and allowed.details["fidelity"].startswith("cannot tell")
    assert allowed.details["fidelity_inconclusive_allowed"] is True and "fidelity_overridden" not in allowed.details
    # allowing "cannot tell" does not let an unfaithful replay through
    still = measure(engine, trace, live=live, allow_inconclusive=True)(off)
    assert still.invalid.startswith("the fidelity gate failed: unfaithful:"), still.invalid


def test_a_config_the_engine_refuses_is_invalid_not_a_crash(engine, trace):
    m = measure(engine, trace)({"gpu_memory_utilization": 0.05})  # 4 GiB of 80: no room for KV after the weights
    assert m.value is None and m.invalid.startswith("the engine failed to start: sim: exited with code 2")
    assert "no room for the KV cache" in m.invalid and "\n" not in m.invalid


@pytest.mark.slow
def test_optimize_records_the_fidelity_override_in_its_results(trace, tmp_path):
    path = tmp_path / "cached.parquet"
    cached_live(trace).write(path)
    args = [
        "optimize",
        str(path),
        "--engine",
        "sim",
        "--sim-time-scale",
        "0.05",
        "--rate",
        "10",
        "--requests",
        "20",
        "--knobs",
        "max_num_seqs",
        "--baseline",
        '{"enable_prefix_caching": false}',
        "--objective",
        "throughput",
        "--repeats",
        "2",
        "--budget",
        "trials=1",
        "--lag-bound-ms",
        "50",
        "--json",
    ]
    refused = run_cli(*args, "--out", str(tmp_path / "refused"), timeout=300)
    assert refused.returncode == 1, refused.stderr
    line = refused.stderr.strip()
    assert "\n" not in line and line.startswith("error: optimize: the baseline") and "fidelity gate failed" in line

    out = tmp_path / "overridden"
    done = run_cli(*args, "--out", str(out), "--allow-unfaithful", timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # the 2 baseline runs and the candidate (and its confirmation, if it cleared the bar) all failed the gate
    measured = 2 + sum(len(s["verdict"]["measurements"]) for s in result["steps"])
    assert result["fidelity_overridden"] == measured >= 3
    assert result["stopped"].endswith(f"(--allow-unfaithful: {measured} measurements failed the fidelity gate and were kept)")
    written = json.loads((out / "optimize.json").read_text())
    assert written["fidelity_overridden"] == measured
    assert "--allow-unfaithful" in (out / "optimize.md").read_text()
