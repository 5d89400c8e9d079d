"""Send lag beside the embedded engine, before and after it runs below the runner's priority (issue [13]).

Every command without ``--url`` replays against the embedded engine in the same process, on the
same machine: that is the default setup, and where a user first meets send lag. This runs
``replay run TRACE --rate R --duration D --sim-config '{"time_scale": S}'`` (default S 0.02: the
engine 50 times faster than the modelled A100, so at 100-200 req/s it works hard on real
tokenizing, scheduling and streaming without its queue growing through the stage; at 0.1 it
saturates near 100 req/s, and a queue that grows for the whole stage needs more connections than
the runner keeps warm) ``--runs`` times at each rate, the cases alternating run by run so that
the machine's drifts hit each:

* ``before``: the engine at the runner's own CPU priority (``REPLAY_ENGINE_PRIORITY=normal``);
* ``nice``: the engine at niceness 10 (``REPLAY_ENGINE_PRIORITY=nice``; not run by default);
* ``after``: the engine under SCHED_IDLE (``replay.sim.ENGINE_PRIORITY``, the default);

each with the dispatcher as the runner picks it (``/fifo``: SCHED_FIFO as root), capped to
``/slice`` (``REPLAY_DISPATCHER_PRIORITY=slice``: the short scheduler slice, what a user without
root or CAP_SYS_NICE gets; neither it nor the engine's lower priority needs privilege) or to
``/normal`` (``REPLAY_DISPATCHER_PRIORITY=normal``: nothing, what such a user got before).
By default it runs before/fifo, after/fifo, before/normal and after/slice: each kind of user
before and after. Per case and rate it prints the send lag
p99 of every run (ms, from the stage's summary), how many runs kept p99 within 1 ms (valid
stages), the median and worst p99, the requests more than 1 ms late, the median TTFT p50 / p99
(from the send: what the engine's lower priority costs its answers), and the ratio of the median
p99 before to after; the peak RSS of the ``replay run`` processes (``ru_maxrss`` from ``wait4``;
the engine runs inside them) beside the wall time.

The trace is the public Azure 2023 conversation trace when ../shared/data/traces has it (imported
with ``replay import azure``), else a generated one (``replay generate``, 5,000 requests). Not a
pass/fail test; about 30 minutes with the defaults on a 2-core machine. docs/latency.md quotes it.

    python benchmarks/colocated_lag.py [--rates 25,100,200] [--runs 10] [--seconds 10] [--time-scale 0.02]
                                       [--cases before/fifo,after/fifo,...] [--trace PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runner_beside_engine import make_trace  # the Azure conversation trace, else a generated one

REPLAY = [sys.executable, "-m", "replay.cli.main"]
# case -> the environment it runs with
CASES = {
    "before/fifo": {"REPLAY_ENGINE_PRIORITY": "normal"},
    "nice/fifo": {"REPLAY_ENGINE_PRIORITY": "nice"},
    "after/fifo": {"REPLAY_ENGINE_PRIORITY": "idle"},
    "before/normal": {"REPLAY_ENGINE_PRIORITY": "normal", "REPLAY_DISPATCHER_PRIORITY": "normal"},
    "nice/normal": {"REPLAY_ENGINE_PRIORITY": "nice", "REPLAY_DISPATCHER_PRIORITY": "normal"},
    "after/normal": {"REPLAY_ENGINE_PRIORITY": "idle", "REPLAY_DISPATCHER_PRIORITY": "normal"},
    "before/slice": {"REPLAY_ENGINE_PRIORITY": "normal", "REPLAY_DISPATCHER_PRIORITY": "slice"},
    "after/slice": {"REPLAY_ENGINE_PRIORITY": "idle", "REPLAY_DISPATCHER_PRIORITY": "slice"},
}
# (before, after) pairs whose median p99 ratio is printed, where both ran: "before/normal" against
# "after/slice" is a user without privilege before and after this change
RATIOS = [
    ("before/fifo", "nice/fifo"),
    ("before/fifo", "after/fifo"),
    ("before/normal", "nice/normal"),
    ("before/normal", "after/normal"),
    ("before/normal", "after/slice"),
    ("before/slice", "after/slice"),
]


def one_run(trace: Path, rate: float, seconds: float, time_scale: float, env: dict[str, str], out: Path) -> dict:
    """One `replay run` stage: its summary's send lag, and the process's wall time and peak RSS."""
    args = [
        *REPLAY,
        "run",
        str(trace),
        "--rate",
        f"{rate:g}",
        "--duration",
        f"{seconds:g}s",
        "--sim-config",
        json.dumps({"time_scale": time_scale}),
        "--out",
        str(out),
    ]
    t0 = time.monotonic()
    with open(out.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env})
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    if os.waitstatus_to_exitcode(status) not in (0, 1):  # 1: a stage came out invalid, which is measured here
        raise SystemExit(f"replay run failed (exit {os.waitstatus_to_exitcode(status)}); see {out.with_suffix('.log')}")
    (stage,) = json.loads((out / "summary.json").read_text())["stages"]
    lag = stage["send_lag_ms"]
    frame = out / json.loads((out / "summary.json").read_text())["files"][0]
    import polars as pl

    rows = pl.read_parquet(frame, columns=["sent_ns", "release_ns"]).drop_nulls()
    late = int(((rows["sent_ns"] - rows["release_ns"]) > 1_000_000).sum())
    ttft = stage["ttft_ms"]["from_sent"]
    return {
        "p99": lag["p99"],
        "max": lag["max"],
        "late": late,
        "sent": rows.height,
        "ttft_p50": ttft["p50"],
        "ttft_p99": ttft["p99"],
        "wall_s": wall,
        "rss_mb": usage.ru_maxrss / 1024,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="25,100,200", help="req/s of the stages (default 25,100,200)")
    ap.add_argument("--runs", type=int, default=10, help="runs of each case at each rate (default 10)")
    ap.add_argument("--seconds", type=float, default=10.0, help="each stage's duration (default 10)")
    ap.add_argument("--time-scale", type=float, default=0.02, help="the embedded engine's time scale (default 0.02: 50x an A100)")
    ap.add_argument("--trace", help="a Trace to replay (default: the Azure conversation trace, else a generated one)")
    ap.add_argument(
        "--cases",
        default="before/fifo,after/fifo,before/normal,after/slice",
        help=f"which cases, comma-separated (default: before and after, each dispatcher; known: {', '.join(CASES)})",
    )
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    cases = [c.strip() for c in args.cases.split(",")]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"--cases: unknown case {unknown[0]!r} (known: {', '.join(CASES)})")
    results: dict[str, dict[str, list[dict]]] = {c: {f"{r:g}": [] for r in rates} for c in cases}
    with tempfile.TemporaryDirectory(prefix="colocated-lag-") as tmp:
        work = Path(tmp)
        trace = make_trace(work, args.trace)
        for run in range(args.runs):
            for rate in rates:
                # rotate the cases' order run by run
                for k in range(len(cases)):
                    case = cases[(run + k) % len(cases)]
                    out = work / f"r{run}-{rate:g}-{k}"
                    got = one_run(trace, rate, args.seconds, args.time_scale, CASES[case], out)
                    results[case][f"{rate:g}"].append(got)
                    print(
                        f"run {run + 1}/{args.runs} {rate:g} req/s {case}: lag p99 {got['p99']:.3f} ms, max {got['max']:.2f} ms, "
                        f"{got['late']} of {got['sent']} > 1 ms",
                        file=sys.stderr,
                        flush=True,
                    )
    print(
        f"\nsend lag beside the embedded engine (time scale {args.time_scale:g}), {args.runs} runs of {args.seconds:g} s "
        "per case and rate"
    )
    print(
        f"{'rate':>6} | {'case':<13} | {'p99 per run (ms)':<60} | valid | median p99 | worst p99 | >1 ms late | "
        "TTFT p50 / p99 ms | wall s | peak RSS MB"
    )
    for rate in rates:
        key = f"{rate:g}"
        for case in cases:
            runs = results[case][key]
            p99 = [r["p99"] for r in runs]
            valid = sum(p <= 1.0 for p in p99)
            print(
                f"{key:>6} | {case:<13} | {' '.join(f'{p:.2f}' for p in p99):<60} | {valid:>2}/{len(p99):<2} | "
                f"{statistics.median(p99):>10.3f} | {max(p99):>9.3f} | {sum(r['late'] for r in runs):>10} | "
                f"{statistics.median(r['ttft_p50'] for r in runs):>7.1f} / "
                f"{statistics.median(r['ttft_p99'] for r in runs):<7.1f} | "
                f"{statistics.median(r['wall_s'] for r in runs):>6.1f} | {max(r['rss_mb'] for r in runs):>11.0f}"
            )
        for before, after in RATIOS:
            if before in results and after in results:
                b = statistics.median(r["p99"] for r in results[before][key])
                a = statistics.median(r["p99"] for r in results[after][key])
                print(f"{key:>6} | median p99 {before} / {after}: {b / a:.2f}x")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
