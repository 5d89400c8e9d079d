"""Send lag beside a busy engine: the runner and a local engine sharing a 2-core machine.

Issue [3] "Lag beside a busy engine": a user who runs a local engine meets this on the first try.
This starts the embedded engine as its own process (`replay serve-sim --time-scale 0.1`, ten
times faster than an A100 would be, so it is busy with real work: tokenizing, scheduling,
streaming), then replays a trace against it at --rate req/s for --seconds, several times:

* ours, with the dispatcher's scheduling as the runner picks it (SCHED_FIFO where allowed), and
  capped to `nice` and `normal` through REPLAY_DISPATCHER_PRIORITY, to show what each buys;
* the asyncio + aiohttp open-loop peer (benchmarks/asyncio_peer.py) on the same bodies and
  send times.

The trace is the public Azure 2023 conversation trace when ../shared/data/traces has it (imported
with `replay import azure`), else a generated one (`replay generate`, 5,000 requests). Each row
prints send lag p50 / p99 / max, the requests more than 1 ms late, and for ours the dispatcher's
and I/O threads' involuntary context switches; the last lines give the ratio of the peer's lag
p99 to ours. Runs alternate (ours, peer, ours, ...) so that drifts of the machine hit both.

Not a pass/fail test. usage: python benchmarks/runner_beside_engine.py [--rate 25] [--seconds 40]
                                 [--repeats 2] [--trace PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from asyncio_peer import send_open_loop

ROOT = Path(__file__).resolve().parents[1]
AZURE = ROOT.parent / "shared" / "data" / "traces" / "azure_llm_2023_conv.csv"
MODES = ("auto", "nice", "normal")


def make_trace(tmp: Path, given: str | None) -> Path:
    if given:
        return Path(given)
    out = tmp / "trace.parquet"
    if AZURE.exists():
        cmd = ["import", "azure", str(AZURE), "-o", str(out)]
    else:
        cmd = ["generate", "-o", str(out), "--requests", "5000", "--seed", "0"]
    subprocess.run([sys.executable, "-m", "replay.cli.main", *cmd], check=True, capture_output=True)
    return out


def start_engine() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "replay.cli.main", "serve-sim", "--port", "0", "--time-scale", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for line in proc.stdout:
        if "http://" in line:
            url = line[line.index("http://") :].split()[0].rstrip("/.,")
            return proc, url
    raise SystemExit("serve-sim did not print its URL")


def lag_stats(lag_ms: np.ndarray) -> dict:
    return {
        "n": len(lag_ms),
        "p50": float(np.percentile(lag_ms, 50)),
        "p99": float(np.percentile(lag_ms, 99)),
        "max": float(lag_ms.max()),
        "late": int((lag_ms > 1.0).sum()),
    }


def run_ours(trace_path: Path, url: str, rate: float, seconds: float, mode: str) -> dict:
    """One stage in a fresh process (REPLAY_DISPATCHER_PRIORITY is read when a run starts)."""
    code = f"""
import json
from replay.config import RunConfig
from replay.runner import run_stage
from replay.trace import read_trace
r = run_stage(read_trace({str(trace_path)!r}, bodies=False),
              RunConfig(url={url!r}, rate={rate}, duration_s={seconds}, model="sim", lag_bound_ms=1000))
df = r.requests.filter(r.requests["sent_ns"].is_not_null())
print(json.dumps({{"lag_ms": ((df["sent_ns"] - df["release_ns"]) / 1e6).to_list(), "runner": r.runner}}))
"""
    env = dict(os.environ)
    if mode != "auto":
        env["REPLAY_DISPATCHER_PRIORITY"] = mode
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    runner = out["runner"]
    return lag_stats(np.array(out["lag_ms"])) | {
        "priority": runner["dispatcher_priority"],
        "dispatcher_preempted": runner["dispatcher_switches"]["involuntary"],
        "io_preempted": runner["worker_switches"]["involuntary"],
    }


def run_peer(trace_path: Path, url: str, rate: float, seconds: float) -> dict:
    """The asyncio peer on the same stage: the same bodies at the same send times."""
    from replay.config import RunConfig
    from replay.plan import build_plan
    from replay.trace import read_trace

    plan = build_plan(read_trace(trace_path, bodies=False), RunConfig(url=url, rate=rate, duration_s=seconds), model="sim")
    bodies = [data[int(a) : int(b)] for data, offsets in plan.body_windows() for a, b in zip(offsets, offsets[1:])]
    intended, sent, _ = send_open_loop(url, plan.offsets_ns / 1e9, bodies.__getitem__, timeout_s=600.0)
    return lag_stats((sent - intended) * 1e3) | {"priority": "-", "dispatcher_preempted": None, "io_preempted": None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=25.0)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--trace", help="a trace file (default: the Azure conv trace, else a generated one)")
    args = parser.parse_args()
    rows: list[tuple[str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="beside-engine-") as tmp:
        trace = make_trace(Path(tmp), args.trace)
        engine, url = start_engine()
        try:
            time.sleep(1.0)
            for rep in range(args.repeats):
                for mode in MODES:
                    r = run_ours(trace, url, args.rate, args.seconds, mode)
                    rows.append((f"ours ({mode})", r))
                    print(f"[{rep}] ours {mode}: {r}", file=sys.stderr, flush=True)
                r = run_peer(trace, url, args.rate, args.seconds)
                rows.append(("asyncio+aiohttp", r))
                print(f"[{rep}] peer: {r}", file=sys.stderr, flush=True)
        finally:
            engine.terminate()
            engine.wait(10)
    print(
        f"\nsend lag beside `replay serve-sim --time-scale 0.1`, {args.rate:g} req/s for {args.seconds:g} s "
        f"({trace.name}), same 2-core machine\n"
    )
    print(
        "| sender | dispatcher | requests | lag p50 ms | lag p99 ms | lag max ms | > 1 ms late "
        "| dispatcher preempted | I/O threads preempted |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['priority']} | {r['n']} | {r['p50']:.3f} | {r['p99']:.3f} | {r['max']:.3f} | {r['late']} "
            f"| {'-' if r['dispatcher_preempted'] is None else r['dispatcher_preempted']} "
            f"| {'-' if r['io_preempted'] is None else r['io_preempted']} |"
        )
    peer = np.median([r["p99"] for name, r in rows if name == "asyncio+aiohttp"])
    for mode in MODES:
        ours = np.median([r["p99"] for name, r in rows if name == f"ours ({mode})"])
        print(f"lag p99, median of runs: ours ({mode}) {ours:.3f} ms, peer {peer:.3f} ms: peer / ours = {peer / ours:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
