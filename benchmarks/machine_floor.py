"""The machine's own timing floor: how late a thread that does nothing else wakes, and how long
a thread that never sleeps is kept off its CPU. The runner's send lag cannot be smaller than
this; print it beside a lag table (docs/latency.md) so that a reader can tell the runner's
misses from the machine's.

Two probes, each alone in this process, nothing else asked of the machine:

* **timed wakes**: real-time (SCHED_FIFO, lowest priority, where allowed; else as is) like the
  runner's dispatcher: sleep until 20 us before each deadline of a 200 us period (5,000 a
  second), spin the rest, and count how late each deadline was met;
* **spin**: at normal priority, read the clock in a loop for the same time and count the gaps
  between two reads (the thread was off its CPU: another task, an interrupt, or the hypervisor
  running another guest on this virtual CPU).

Counts of misses over 0.1 and 0.5 ms and the largest, per probe and run. Not a pass/fail test.

usage: python benchmarks/machine_floor.py [--seconds 5] [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import time

PERIOD_NS = 200_000
SPIN_NS = 20_000


def timed_wakes(seconds: float) -> list[int]:
    """Lateness (ns) of each deadline of a 200 us period, slept to 20 us before, then spun."""
    policy = None
    try:
        policy = os.sched_getscheduler(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (AttributeError, PermissionError, OSError):
        policy = None
    late = []
    try:
        start = time.monotonic_ns() + 1_000_000
        for i in range(int(seconds * 1e9 / PERIOD_NS)):
            due = start + i * PERIOD_NS
            left = due - SPIN_NS - time.monotonic_ns()
            if left > 0:
                time.sleep(left / 1e9)
            now = time.monotonic_ns()
            while now < due:
                now = time.monotonic_ns()
            late.append(now - due)
    finally:
        if policy is not None:
            os.sched_setscheduler(0, policy, os.sched_param(0))
    return late


def spin(seconds: float) -> list[int]:
    """Gaps (ns) over 50 us between two clock reads of a thread that never sleeps."""
    gaps = []
    now = time.monotonic_ns()
    end = now + int(seconds * 1e9)
    while now < end:
        before, now = now, time.monotonic_ns()
        if now - before > 50_000:
            gaps.append(now - before)
    return gaps


def line(name: str, values: list[int], seconds: float) -> str:
    over = lambda ms: sum(v > ms * 1e6 for v in values)  # noqa: E731
    return f"| {name} | {seconds:g} s | {over(0.1)} | {over(0.5)} | {over(1.0)} | {max(values, default=0) / 1e6:.2f} |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    print("| probe | length | late > 0.1 ms | > 0.5 ms | > 1 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for _ in range(args.runs):
        print(line("timed wakes, 5,000 a second (fifo where allowed)", timed_wakes(args.seconds), args.seconds), flush=True)
        print(line("spin, normal priority (off-CPU gaps)", spin(args.seconds), args.seconds), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
