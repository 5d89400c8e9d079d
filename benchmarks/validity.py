"""Are the stages a user runs first valid, run after run, at the default 1 ms send-lag bound?

Three runs a new user makes, each repeated `--runs` times (default 5), through the CLI as a user
types them, on this machine as it is:

1. **readme-sweep**: the README-shaped sweep on the embedded engine: `replay generate --requests
   400` once, then `replay sweep --rates 1,2,4,8 --duration 20s`;
2. **bursty-25**: the held-out last 10 minutes of the public Azure conversation trace
   (`replay import azure`, `replay slice --from 3000`; bursty: interarrival CV about 1.1) replayed
   at 10x (about 25 req/s) with `replay run --speedup 10` against `replay serve-sim --time-scale
   0.1` running as its own process (skipped when ../shared is missing);
3. **optimize-baseline**: a short `replay optimize --engine sim --rate 8 --requests 64 --budget
   trials=1 --repeats 3 --objective throughput` on the generated trace: every stage it measured (from its ledger) must be
   valid, and the campaign must not stop with "the runner fell behind".

Printed per run: stages valid of stages run, the worst send lag p99 and max (ms); per scenario
how many runs had every stage valid. Not a pass/fail test; [9] asks for 5 of 5 in each.

usage: python benchmarks/validity.py [--runs 5] [--scenarios readme-sweep,bursty-25,optimize-baseline]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AZURE = ROOT.parent / "shared" / "data" / "traces" / "azure_llm_2023_conv.csv"
SCENARIOS = ("readme-sweep", "bursty-25", "optimize-baseline")


def replay(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "replay.cli.main", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"replay {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done


def stage_rows(summary: dict) -> list[dict]:
    return [
        {"valid": bool(s["valid"]), "p99": s["send_lag_ms"]["p99"] or 0.0, "max": s["send_lag_ms"]["max"] or 0.0}
        for s in summary["stages"]
    ]


def readme_sweep(tmp: Path, run: int) -> list[dict]:
    trace = tmp / "generated.parquet"
    if not trace.exists():
        replay("generate", "-o", str(trace), "--requests", "400", "--seed", "0")
    done = replay("sweep", str(trace), "--rates", "1,2,4,8", "--duration", "20s", "--out", str(tmp / f"sweep{run}"), "--json")
    return stage_rows(json.loads(done.stdout))


def bursty(tmp: Path, run: int, url: str) -> list[dict]:
    held_out = tmp / "held_out.parquet"
    done = replay("run", str(held_out), "--url", url, "--speedup", "10", "--out", str(tmp / f"bursty{run}"), "--json")
    return stage_rows(json.loads(done.stdout))


def start_serve_sim() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "replay.cli.main", "serve-sim", "--port", "0", "--time-scale", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for line in proc.stdout:
        if "http://" in line:
            return proc, line[line.index("http://") :].split()[0].rstrip("/.,")
    raise SystemExit("replay serve-sim printed no URL")


def optimize_baseline(tmp: Path, run: int) -> list[dict]:
    trace = tmp / "generated.parquet"
    if not trace.exists():
        replay("generate", "-o", str(trace), "--requests", "400", "--seed", "0")
    out = tmp / f"optimize{run}"
    done = replay(
        "optimize",
        str(trace),
        "--engine",
        "sim",
        "--rate",
        "8",
        "--requests",
        "64",
        "--budget",
        "trials=1",
        "--repeats",
        "3",
        "--objective",
        "throughput",
        "--allow-inconclusive",
        "--out",
        str(out),
        "--json",
        check=False,
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"replay optimize failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(done.stdout)
    stages = _measured_stages(out)
    if "fell behind" in (result.get("stopped") or "") or not stages:
        stages.append({"valid": False, "p99": float("nan"), "max": float("nan")})
    return stages


def _measured_stages(out: Path) -> list[dict]:
    """Every measured stage of the campaign (baseline runs, candidates, confirmations, rechecks;
    not the diagnosis sweep, whose stages the ledger keeps as peaks only), from its ledger."""
    import sqlite3

    with sqlite3.connect(out / "ledger.sqlite") as db:
        rows = db.execute("SELECT details FROM experiments WHERE details IS NOT NULL").fetchall()
    stages = []
    for (details,) in rows:
        s = json.loads(details).get("summary")
        if s:
            stages.append(
                {"valid": bool(s["valid"]), "p99": s["send_lag_ms"]["p99"] or 0.0, "max": s["send_lag_ms"]["max"] or 0.0}
            )
    return stages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    wanted = args.scenarios.split(",")
    with tempfile.TemporaryDirectory(prefix="validity-") as d:
        tmp = Path(d)
        server = None
        try:
            for scenario in wanted:
                if scenario == "bursty-25":
                    if not AZURE.exists():
                        print(f"bursty-25: skipped ({AZURE} is missing)")
                        continue
                    replay("import", "azure", str(AZURE), "-o", str(tmp / "azure.parquet"))
                    replay("slice", str(tmp / "azure.parquet"), "-o", str(tmp / "held_out.parquet"), "--from", "3000")
                    server, url = start_serve_sim()
                    runner = lambda run: bursty(tmp, run, url)  # noqa: E731
                elif scenario == "readme-sweep":
                    runner = lambda run: readme_sweep(tmp, run)  # noqa: E731
                elif scenario == "optimize-baseline":
                    runner = lambda run: optimize_baseline(tmp, run)  # noqa: E731
                else:
                    raise SystemExit(f"--scenarios: unknown '{scenario}' (known: {', '.join(SCENARIOS)})")
                clean = 0
                for run in range(args.runs):
                    rows = runner(run)
                    valid = sum(r["valid"] for r in rows)
                    clean += valid == len(rows)
                    print(
                        f"{scenario:18s} run {run + 1}: {valid}/{len(rows)} stages valid, worst lag p99 "
                        f"{max(r['p99'] for r in rows):.3f} ms, max {max(r['max'] for r in rows):.3f} ms",
                        flush=True,
                    )
                print(f"{scenario}: every stage valid in {clean} of {args.runs} runs\n", flush=True)
                if server is not None:
                    server.terminate()
                    server.wait(10)
                    server = None
        finally:
            if server is not None:
                server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
