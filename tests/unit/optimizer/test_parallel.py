"""Parallel trials: a round of proposals measured at once (threads here, Ray tasks on a
single-node Ray cluster: Ray 2.60 removed its local mode), judged against the round's baseline,
the best confirmed win taken; the same optimum as one at a time; the budget's concurrent GPUs cap
the round."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from optimizer import Budget, CoordinateDescent, LocalPool, Measurement, Proposal, RayPool
from optimizer.space import config_key
from tests.unit.optimizer.test_campaign import BASE, campaign, noisy, space, surface


class Recorder:
    """A measure that records how many calls overlap and the surface's value. Until ``overlap``
    calls have been in flight at once, each call waits for that to happen (an event, not a sleep):
    a pool that runs them side by side gets there at once; one that runs them one at a time never
    does, and its calls each give up after ``patience_s``."""

    def __init__(self, rel_sd: float = 0.005, seed: int = 3, overlap: int = 3, patience_s: float = 10.0) -> None:
        self.inner = noisy(rel_sd, seed)
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.calls: list[str] = []
        self.overlap = overlap
        self.all_in = threading.Event()
        self.patience_s = patience_s

    def __call__(self, config) -> Measurement:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            if self.running >= self.overlap:
                self.all_in.set()
            self.calls.append(config_key(config))
            m = self.inner(config)
        self.all_in.wait(self.patience_s)
        with self.lock:
            self.running -= 1
        return m


def test_a_round_runs_its_measurements_at_once_and_finds_the_optimum(tmp_path):
    grid = list(space().grid())
    best = max(surface({**BASE, **c}) for c in grid)
    measure = Recorder()
    c = campaign(tmp_path, measure, pool=LocalPool(3), budget=Budget(trials=30))
    result = c.run()
    c.close()
    assert measure.most == 3  # the baseline's repeats and each round's proposals ran side by side
    assert surface(result.best) >= 0.97 * best, (result.best, result.stopped)
    judged = [s for s in result.steps if not s.reused]
    assert len(judged) <= 30 and len(set(measure.calls)) < 0.6 * len(grid)
    for step in result.accepted:
        assert step.verdict.kind == "better" and len(step.verdict.measurements) == 2


def test_of_two_wins_in_one_round_the_higher_becomes_the_baseline(tmp_path):
    values = {2: 100.0, 4: 130.0, 8: 150.0}  # seqs -> value, no noise beyond the 0.5% floor
    c = campaign(tmp_path, lambda config: Measurement(values[config["max_num_seqs"]]), pool=LocalPool(2))
    verdicts = c.evaluate_many([Proposal({**BASE, "max_num_seqs": 4}), Proposal({**BASE, "max_num_seqs": 8})])
    assert [v.kind for v in verdicts] == ["better", "better"]
    assert c.result.best["max_num_seqs"] == 8 and [s.config["max_num_seqs"] for s in c.result.accepted] == [8]
    assert c.result.best_noise.median == 150.0
    # the ledger keeps both; a rerun reuses them and lands on the same baseline
    c.close()
    again = campaign(tmp_path, lambda config: pytest.fail("measured again"), pool=LocalPool(2))
    again.evaluate_many([Proposal({**BASE, "max_num_seqs": 4}), Proposal({**BASE, "max_num_seqs": 8})])
    assert again.result.best["max_num_seqs"] == 8
    again.close()


def test_a_config_proposed_twice_in_a_round_is_measured_once(tmp_path):
    measure = Recorder(rel_sd=0.0, overlap=2)
    c = campaign(tmp_path, measure, pool=LocalPool(2), repeats=2)
    c.start()
    n = len(measure.calls)
    twin = {**BASE, "max_num_seqs": 4}
    verdicts = c.evaluate_many([Proposal(twin), Proposal(dict(twin))])
    assert verdicts[0] is verdicts[1]
    assert measure.calls[n:].count(config_key(twin)) == 2  # the first measurement and its confirmation
    c.close()


def test_the_gpu_budget_caps_a_round(tmp_path):
    measure = Recorder(overlap=2)
    c = campaign(tmp_path, measure, pool=LocalPool(4), gpus=2, budget=Budget(trials=6, gpus=4))
    assert c.slots == 2  # 4 GPUs at once, 2 a config
    c.run()
    c.close()
    assert measure.most == 2


def test_coordinate_descent_asked_ahead_goes_further_along_the_line():
    s = space()
    cd = CoordinateDescent(s, BASE, order=["max_num_seqs", "max_num_batched_tokens"])
    first, second = cd.ask(), cd.ask()
    assert (first.config["max_num_seqs"], second.config["max_num_seqs"]) == (4, 8)
    cd.known[config_key(BASE)] = 10.0
    cd.tell(first, "same", 10.1)  # the line (seqs, up) ends here...
    cd.tell(second, "same", 9.9)  # ...and a later result on it does not end the next one
    third = cd.ask()
    assert third.config["max_num_batched_tokens"] == 1024 and third.config["max_num_seqs"] == 2
    cd.tell(third, "better", 12.0)
    assert cd.incumbent == third.config and cd.ask().config["max_num_batched_tokens"] == 2048


def test_coordinate_descent_does_not_measure_a_knob_s_default_spelled_out_again():
    # the incumbent leaves gpu_memory_utilization at its default (0.9): {0.9 spelled out} is the
    # same engine config, so the line of that knob proposes 0.05 and nothing else
    from optimizer import Space
    from replay.sim import KNOBS

    s = Space.of("sim", KNOBS, {"max_num_seqs": [2, 16], "gpu_memory_utilization": [0.9, 0.05]})
    cd = CoordinateDescent(s, {"max_num_seqs": 16}, order=["gpu_memory_utilization", "max_num_seqs"])
    asked = []
    while (p := cd.ask()) is not None:
        asked.append(p.config)
        cd.tell(p, "invalid" if p.config.get("gpu_memory_utilization") == 0.05 else "same", None)
    assert asked == [{"max_num_seqs": 16, "gpu_memory_utilization": 0.05}, {"max_num_seqs": 2}]


def test_measurements_as_ray_tasks(tmp_path):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    # the workers import this test module (the measure's globals) from the repo root
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}},
    )
    pool = RayPool(2)
    try:
        done = pool.map(noisy(0.0, seed=0), [BASE, {**BASE, "max_num_seqs": 16}])
        assert [t.measurement.value for t in done] == [surface(BASE), surface({**BASE, "max_num_seqs": 16})]
        c = campaign(tmp_path, noisy(0.005, seed=4), pool=pool, budget=Budget(trials=8))
        result = c.run()
        assert result.accepted and surface(result.best) > surface(BASE)
        assert len(c.ledger.entries(BASE, "baseline")) == 4
        c.close()
        assert ray.is_initialized()  # the pool leaves a Ray it did not start running
    finally:
        ray.shutdown()


def test_each_measurement_is_in_the_ledger_before_the_next_one_starts(tmp_path):
    seen: list[int] = []
    inner = noisy(0.005, seed=5)

    def measure(config):
        seen.append(len(c.ledger.entries()))
        return inner(config)

    c = campaign(tmp_path, measure, budget=Budget(trials=3))
    c.run()
    c.close()
    assert seen == list(range(len(seen))), seen  # a crash loses at most the measurement in flight
