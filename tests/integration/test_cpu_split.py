"""The embedded engine and the runner on CPUs of their own (replay.sim.split_cpus, ``cpus=``).

Checked on the real threads: /proc says which CPUs each thread of this process may run on.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from replay.config import RunConfig
from replay.errors import ConfigError
from replay.runner import run_stage
from replay.sim import SimConfig, split_cpus, start_sim
from tests.integration.conftest import trace_of_bodies

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread affinity is Linux-only")


def allowed(thread_name: str) -> set[int]:
    """The CPUs this process's thread ``thread_name`` may run on (all of them if several share it)."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != thread_name:
                continue
            status = (task / "status").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        spec = next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            found.update(range(int(lo), int(hi or lo) + 1))
    return found


def test_split_gives_the_engine_the_last_cpus_and_the_runner_the_rest(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert split_cpus() == ((3,), (0, 1, 2))
    assert split_cpus(2) == ((2, 3), (0, 1))
    assert split_cpus(9) == ((1, 2, 3), (0,))  # the runner always keeps one
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5}, raising=False)
    assert split_cpus() == ((), ())  # one CPU: nothing to split, nothing pinned


@linux_only
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity") else True, reason="needs 2 CPUs")
def test_engine_and_runner_threads_run_on_their_own_cpus():
    engine_cpus, runner_cpus = split_cpus()
    seen: dict[str, set[int]] = {}

    def progress(sent, completed, errors, total):
        # called on this thread while the run is in flight: its threads exist now
        seen.setdefault("worker", set()).update(allowed("replay-worker"))
        seen.setdefault("dispatcher", set()).update(allowed("replay-run"))

    with start_sim(SimConfig(profile="instant"), cpus=engine_cpus) as server:
        # a listing of /proc/self/task can miss a thread while another thread of the process
        # exits (rust/sim/tests/startup.rs checks that the engine's thread is there on return):
        # what this test checks is its CPUs, so it reads again if the thread was not listed
        engine = next((cpus for _ in range(50) if (cpus := allowed("replay-sim"))), set())
        assert engine == set(engine_cpus)
        bodies = [
            {
                "model": "sim",
                "max_tokens": 400,
                "ignore_eos": True,
                "stream": True,
                "messages": [{"role": "user", "content": f"story {i}"}],
            }
            for i in range(4)
        ]
        config = RunConfig(url=server.url, cpus=runner_cpus, lag_bound_ms=1000)
        result = run_stage(trace_of_bodies(bodies, arrival_us=[0, 300_000, 600_000, 900_000]), config, progress)
    assert result.summary.completed == 4
    # the I/O workers share no CPU with the engine; the dispatcher (real-time where allowed, so
    # it preempts the engine when a send is due) keeps every CPU, so it is never the only
    # runnable thread of the runner's CPU at nice priority
    assert seen["worker"] == set(runner_cpus)
    assert seen["dispatcher"] == set(os.sched_getaffinity(0))
    assert not set(engine_cpus) & set(runner_cpus)


@linux_only
def test_a_cpu_that_cannot_be_used_is_a_config_error():
    bad = max(os.sched_getaffinity(0)) + 4096
    with pytest.raises(ConfigError, match="cpus"):
        start_sim(SimConfig(profile="instant"), cpus=(bad,))
    with start_sim(SimConfig(profile="instant")) as server:
        config = RunConfig(url=server.url, cpus=(bad,))
        with pytest.raises(ConfigError, match="cpus"):
            run_stage(
                trace_of_bodies([{"model": "sim", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}]), config
            )
    with pytest.raises(ConfigError, match="cpus"):
        RunConfig(url="http://127.0.0.1:1", cpus=(-1,))
