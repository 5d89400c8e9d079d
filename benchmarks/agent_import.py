"""Do the agent trace imports scale? Time, rows/s and peak RSS of `replay import copilot` on a
generated Copilot-like release (the real one is 9.3M calls; not in the repository).

The input, made in a temporary directory: ``--sessions`` sessions (default 32,000, about 1M LLM
calls) in ``date=2026-06-01/shard-NNNN.jsonl.gz`` files of 500 sessions, each session assigned to
a shard at random (so a shard's sessions are not in time order and the import's sorted runs are
spilled and merged). Sessions start as a Poisson process over a day; a session has 1-6 turns, a
turn a user call and a geometric number (mean 7) of agent calls, each after a tool batch of 1-3
function calls asked for by the call before; prompts start at 8-20k tokens and grow by 300-3,000 a
step, with the previous prompt cached (a miss, no cached tokens, one step in ten); 2% of the calls
have prompt 0. Seeded (``--seed``).

The import runs in a subprocess (``python -m replay.cli.main import copilot``); its wall time and
peak RSS (``ru_maxrss`` of the child) are printed with its rows, the file's size and the import
report's counts. Not a pass/fail test.

usage: PYTHONPATH=<checkout> python benchmarks/agent_import.py [--sessions 32000] [--seed 0]
           [--block-size 512] [--data DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path


def _iso(t: float) -> str:
    return (datetime(2026, 6, 1, tzinfo=UTC) + timedelta(seconds=t)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def make_release(folder: Path, sessions: int, seed: int) -> int:
    """Write the generated release; returns the LLM calls written."""
    rng = random.Random(seed)
    day = folder / "date=2026-06-01"
    day.mkdir(parents=True)
    shards = [gzip.open(day / f"shard-{i:04d}.jsonl.gz", "wt", compresslevel=1) for i in range(max(1, sessions // 500))]
    calls = 0
    start = 0.0
    for s in range(sessions):
        start += rng.expovariate(sessions / 86_400)
        t = start
        prompt = rng.randint(8_000, 20_000)
        turns = []
        for ti in range(rng.randint(1, 6)):
            llm, batches = [], []
            steps = 1 + int(rng.expovariate(1 / 7))
            for k in range(steps):
                dur = rng.uniform(0.5, 8.0)
                cached = 0 if rng.random() < 0.1 or not llm and ti == 0 else prompt
                prompt += rng.randint(300, 3_000)
                p = 0 if rng.random() < 0.02 else prompt
                mid = f"s{s}-t{ti}-c{k}"
                llm.append(
                    {
                        "message_id": mid,
                        "timestamp": _iso(t),
                        "duration_ms": dur * 1000,
                        "initiator_type": "user" if k == 0 else "agent",
                        "model": "Model A",
                        "result": "Success",
                        "status_code": "OK",
                        "tokens": {"total": p + 200, "prompt": p, "completion": 200, "cached": min(cached, p), "cached_pct": 0.0},
                        "message_metadata": [],
                    }
                )
                t += dur
                if k < steps - 1:
                    tool = rng.uniform(0.2, 20.0)
                    n = rng.randint(1, 3)
                    fcs = [{"name": "read_file", "status": 1, "duration_ms": tool * 1000} for _ in range(n)]
                    batches.append(
                        {"timestamp": _iso(t + 0.05), "duration_ms": tool * 1000, "auto_continue": True, "result": "Success"}
                        | {"request_id": mid, "function_calls": fcs}
                    )
                    t += tool + 0.1
            calls += len(llm)
            turns.append({"turn_id": f"s{s}-t{ti}", "llm_calls": llm, "tool_batches": batches})
            t += rng.expovariate(1 / 120)
        shards[rng.randrange(len(shards))].write(json.dumps({"session_id": f"s{s}", "date": "2026-06-01", "turns": turns}) + "\n")
    for f in shards:
        f.close()
    return calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=32_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--data", type=Path, help="where to make the input (default: a temporary directory)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.data) as tmp:
        folder = Path(tmp) / "ghcp"
        t0 = time.perf_counter()
        calls = make_release(folder, args.sessions, args.seed)
        size = sum(p.stat().st_size for p in folder.rglob("*.gz"))
        made = time.perf_counter() - t0
        print(f"input: {args.sessions} sessions, {calls} calls, {size / 1e6:.1f} MB gzip ({made:.0f} s)", file=sys.stderr)
        out = Path(tmp) / "trace.parquet"
        cmd = [sys.executable, "-m", "replay.cli.main", "import", "copilot", str(folder), "-o", str(out)]
        cmd += ["--block-size", str(args.block_size), "--quiet"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env=os.environ.copy())
        wall = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        from replay.trace import read_meta

        meta, rows = read_meta(out)
        report = json.loads(meta.import_report)
        print("| calls | rows | wall s | rows/s | peak RSS MB | trace MB |")
        print("|---|---|---|---|---|---|")
        print(f"| {calls} | {rows} | {wall:.1f} | {rows / wall:,.0f} | {rss:,.0f} | {out.stat().st_size / 1e6:.1f} |")
        keys = ("copilot_sessions", "calls_prompt_zero_skipped", "tool_batches_linked", "edges", "waits_clamped")
        print(json.dumps({k: report[k] for k in keys}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
